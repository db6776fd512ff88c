//! The stable code of every failure of either backend: the one list the bindings expose as
//! `code` (semats' `SemaphoreErrorType` strings, then our additions). The TypeScript union
//! `SemaphoreErrorType` in `index.d.ts` is checked against [`ErrorCode::ALL`] by a test.

/// A failure's stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    AlreadyLocked,
    InvalidPath,
    IoError,
    NotLocked,
    Timeout,
    ParseError,
    PermissionDenied,
    PathTraversal,
    Aborted,
    LockLost,
    ConnectionError,
    TlsMismatch,
    AuthFailed,
    ProtocolError,
    ServerError,
    InvalidArgument,
    /// No engine (or no binary) for this platform.
    UnsupportedPlatform,
}

impl ErrorCode {
    /// Every code, semats' eight first, in the order of the TypeScript union.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::AlreadyLocked,
        ErrorCode::InvalidPath,
        ErrorCode::IoError,
        ErrorCode::NotLocked,
        ErrorCode::Timeout,
        ErrorCode::ParseError,
        ErrorCode::PermissionDenied,
        ErrorCode::PathTraversal,
        ErrorCode::Aborted,
        ErrorCode::LockLost,
        ErrorCode::ConnectionError,
        ErrorCode::TlsMismatch,
        ErrorCode::AuthFailed,
        ErrorCode::ProtocolError,
        ErrorCode::ServerError,
        ErrorCode::InvalidArgument,
        ErrorCode::UnsupportedPlatform,
    ];

    /// The code as JavaScript sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::AlreadyLocked => "ALREADY_LOCKED",
            ErrorCode::InvalidPath => "INVALID_PATH",
            ErrorCode::IoError => "IO_ERROR",
            ErrorCode::NotLocked => "NOT_LOCKED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::ParseError => "PARSE_ERROR",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::PathTraversal => "PATH_TRAVERSAL",
            ErrorCode::Aborted => "ABORTED",
            ErrorCode::LockLost => "LOCK_LOST",
            ErrorCode::ConnectionError => "CONNECTION_ERROR",
            ErrorCode::TlsMismatch => "TLS_MISMATCH",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::ServerError => "SERVER_ERROR",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::UnsupportedPlatform => "UNSUPPORTED_PLATFORM",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct() {
        let names: std::collections::HashSet<_> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
    }
}

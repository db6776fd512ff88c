//! The stable code of every failure of either backend: the one list the bindings expose as
//! `code` (semats' `SemaphoreErrorType` strings, then our additions). The TypeScript union
//! `SemaphoreErrorType` in `index.d.ts` is checked against [`ErrorCode::ALL`] by a test.

/// A failure's stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    AlreadyLocked,
    InvalidPath,
    IoError,
    /// `release()` with nothing held.
    NotLocked,
    /// A time limit elapsed: waiting for a lock file, or for dflockd a connect timeout, no reply
    /// within `socketTimeoutMs`, or a blocking command with no reply within its own timeout plus
    /// the safety margin.
    Timeout,
    ParseError,
    PermissionDenied,
    PathTraversal,
    /// The operation was cancelled (an AbortSignal, `cancel()`, `close()`).
    Aborted,
    /// A held lock or slot is no longer held (lock file replaced or removed; dflockd renew
    /// rejected, connection lost, stale grant).
    LockLost,
    /// dflockd: TCP/TLS connect failed, the connection broke, or the server closed it before a
    /// full reply.
    ConnectionError,
    /// dflockd: TLS on one side only: the client asked for TLS and the server answered in plain
    /// text (or not at all while a plain dflockd answers on the same port), or the client spoke
    /// plain TCP to a server that speaks TLS.
    TlsMismatch,
    /// dflockd: the server rejected the auth token (`error_auth`) or answered `auth` with
    /// anything but `ok`.
    AuthFailed,
    /// dflockd: the server sent something that is not a reply of the protocol (garbage, unknown
    /// word, missing token, invalid UTF-8, a line longer than the reply bound).
    ProtocolError,
    /// dflockd: the server answered bare `error` or any `error_*` status (the raw word travels
    /// with the error as its reply).
    ServerError,
    /// A key, token, number or option that would corrupt the framing or that the server would
    /// reject; detected before anything is written.
    InvalidArgument,
    /// No engine (or no binary) for this platform.
    UnsupportedPlatform,
    /// A binary is published for this platform but its package is missing or would not load
    /// (raised by the JavaScript loader, which runs before any binary does; listed here so that
    /// the one list holds every code the package produces).
    NativeLoadFailed,
    /// A counting semaphore asked for with a limit other than the one its live holders took it
    /// with (a lock file's slots taken with another `limit`; dflockd's `error_limit_mismatch`).
    LimitMismatch,
    /// A lock file in a directory whose file system cannot keep exclusion: a network or FUSE
    /// file system without hard links (`link()` refused), where exclusive creation is only as
    /// atomic as the server makes it. The message names the file system.
    UnsupportedFileSystem,
}

impl ErrorCode {
    /// Every code, semats' eight first, in the order of the TypeScript union.
    pub const ALL: [ErrorCode; 20] = [
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
        ErrorCode::NativeLoadFailed,
        ErrorCode::LimitMismatch,
        ErrorCode::UnsupportedFileSystem,
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
            ErrorCode::NativeLoadFailed => "NATIVE_LOAD_FAILED",
            ErrorCode::LimitMismatch => "LIMIT_MISMATCH",
            ErrorCode::UnsupportedFileSystem => "UNSUPPORTED_FILE_SYSTEM",
        }
    }
}

/// The code as a string, so a binding can use it directly as an error's status (napi-rs sets the
/// thrown JavaScript error's `code` from it).
impl AsRef<str> for ErrorCode {
    fn as_ref(&self) -> &str {
        self.as_str()
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

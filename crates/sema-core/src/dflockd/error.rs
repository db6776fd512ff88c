//! Errors of the dflockd client: one stable code per failure class.

use std::fmt;

/// Stable failure classes. [`ErrorCode::as_str`] gives the string the JS layer sees as `error.code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A client-side time limit elapsed: connect timeout, no reply within `socketTimeoutMs`, or a
    /// blocking command that got no reply within its own timeout plus the safety margin.
    Timeout,
    /// The server rejected the auth token (`error_auth`) or answered `auth` with anything but `ok`.
    AuthFailed,
    /// TCP/TLS connect failed, the connection broke, or the server closed it before a full reply.
    ConnectionError,
    /// TLS on one side only: the client asked for TLS and the server answered in plain text (or
    /// not at all while a plain dflockd answers on the same port), or the client spoke plain TCP
    /// to a server that speaks TLS.
    TlsMismatch,
    /// The server sent something that is not a reply of the protocol (garbage, unknown word,
    /// missing token, invalid UTF-8, a line longer than the reply bound).
    ProtocolError,
    /// The server answered bare `error` or any `error_*` status; the raw word is kept in
    /// [`DflockdError::reply`].
    ServerError,
    /// A key, token, number or option that would corrupt the framing or that the server would
    /// reject; detected before anything is written.
    InvalidArgument,
    /// A held lock or slot is no longer held (renew rejected, connection lost, stale grant).
    LockLost,
    /// `release()` with nothing held.
    NotLocked,
    /// The operation was cancelled (`cancel()`/`close()`).
    Aborted,
}

impl ErrorCode {
    /// The stable string form, e.g. `"CONNECTION_ERROR"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::ConnectionError => "CONNECTION_ERROR",
            ErrorCode::TlsMismatch => "TLS_MISMATCH",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::ServerError => "SERVER_ERROR",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::LockLost => "LOCK_LOST",
            ErrorCode::NotLocked => "NOT_LOCKED",
            ErrorCode::Aborted => "ABORTED",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the dflockd client: a stable [`ErrorCode`], a human message and, for server
/// replies, the raw reply line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DflockdError {
    code: ErrorCode,
    message: String,
    reply: Option<String>,
}

impl DflockdError {
    /// A new error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        DflockdError {
            code,
            message: message.into(),
            reply: None,
        }
    }

    /// Attach the raw reply line that caused the error.
    pub fn with_reply(mut self, reply: impl Into<String>) -> Self {
        self.reply = Some(reply.into());
        self
    }

    /// The failure class.
    pub fn kind(&self) -> ErrorCode {
        self.code
    }

    /// The stable code string (`"TIMEOUT"`, `"SERVER_ERROR"`, ...).
    pub fn code(&self) -> &'static str {
        self.code.as_str()
    }

    /// The human-readable message (without the code prefix).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The raw reply line from the server, when the error came from one (e.g. `error_max_locks`).
    pub fn reply(&self) -> Option<&str> {
        self.reply.as_deref()
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ProtocolError, message)
    }

    pub(crate) fn tls_mismatch(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TlsMismatch, message)
    }

    pub(crate) fn connection(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ConnectionError, message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Timeout, message)
    }

    pub(crate) fn aborted() -> Self {
        Self::new(ErrorCode::Aborted, "operation aborted")
    }
}

impl fmt::Display for DflockdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for DflockdError {}

/// Result alias of the dflockd client.
pub type Result<T> = std::result::Result<T, DflockdError>;

//! Errors of the dflockd client: a failure class from the crate's one [`ErrorCode`] list, a
//! message and, for server replies, the raw reply line.

use std::fmt;

pub use crate::ErrorCode;

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
    pub fn code(&self) -> ErrorCode {
        self.code
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

    /// `LOCK_LOST` with `message`, carrying the raw reply of `cause` (e.g. the `error` that
    /// refused a renew).
    pub(crate) fn lost_because(message: impl Into<String>, cause: &DflockdError) -> Self {
        let lost = Self::new(ErrorCode::LockLost, message);
        match cause.reply() {
            Some(r) => lost.with_reply(r),
            None => lost,
        }
    }

    /// `ABORTED`: the caller cancelled the operation.
    pub fn aborted() -> Self {
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

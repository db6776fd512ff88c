//! Errors of the lock-file engine. [`LockError::code`] gives the stable code the bindings expose
//! (one of [`ErrorCode`]); `Display` gives semats' message strings.

use crate::ErrorCode;

/// Everything a lock-file operation can fail with. [`LockError::code`] is the stable code
/// (also the Node package's `error.code`); `Display` is semats' message.
///
/// ```
/// use sema_core::lockfile::{validate_lock_path, LockError};
/// let e = validate_lock_path("/tmp/../etc/x.lock").unwrap_err();
/// assert!(matches!(e, LockError::PathTraversal(_)));
/// assert_eq!(e.code().as_str(), "PATH_TRAVERSAL");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock is held (by another process, by another waiter in this process, or its holder is
    /// unknown because the file cannot be parsed). `ALREADY_LOCKED`.
    #[error("Lock already held")]
    AlreadyLocked { holder: Box<Holder> },
    /// The wait ran out. `TIMEOUT`. `holder`: who held the lock when it did.
    #[error("Timeout waiting for lock after {timeout_ms}ms")]
    Timeout {
        timeout_ms: u64,
        holder: Box<Holder>,
    },
    /// The acquisition was cancelled. `ABORTED`.
    #[error("Lock acquisition was aborted")]
    Aborted,
    /// There is no lock to release. `NOT_LOCKED`.
    #[error("Lock not held")]
    NotLocked,
    /// Another process's lock and no `force`. `PERMISSION_DENIED` (`PID unknown` when the file
    /// cannot be parsed).
    #[error("Lock held by different process (PID {})", pid_or_unknown(*.holder_pid))]
    PermissionDenied { holder_pid: Option<i64> },
    /// `INVALID_PATH`; the message is the reason.
    #[error("{0}")]
    InvalidPath(String),
    /// `PATH_TRAVERSAL`; the message is the reason.
    #[error("{0}")]
    PathTraversal(String),
    /// The lock was lost (file removed or replaced). `LOCK_LOST`; the message is the reason.
    #[error("{0}")]
    LockLost(String),
    /// A request the engine cannot honour (e.g. a tag that would make the lock file larger than
    /// readers accept). `INVALID_ARGUMENT`; the message names the argument and its value.
    #[error("{0}")]
    InvalidArgument(String),
    /// A counting semaphore's slot is held with another limit (see [`super::Semaphore`]).
    /// `LIMIT_MISMATCH`; the message names the path, both limits and the slot file.
    #[error("{0}")]
    LimitMismatch(String),
    /// The lock's directory is on a file system where the engine cannot keep exclusion (see
    /// `sys/fs_kind.rs`). `UNSUPPORTED_FILE_SYSTEM`; the message names the path and the file
    /// system.
    #[error("{0}")]
    UnsupportedFileSystem(String),
    /// An I/O failure. `IO_ERROR` (`PERMISSION_DENIED` when the OS refused us), e.g.
    /// `"Failed to create lock: ..."`.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Who held a lock when an acquisition failed (`ALREADY_LOCKED`, `TIMEOUT`), as the engine read
/// the file at the moment it refused: the same read its judgement was made on where there was
/// one, not a second look later. Every field is `None` when the file was gone or unparseable by
/// then (holder unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// `pid=` (`holderPid`).
    pub pid: Option<i64>,
    /// `timestamp=`, refreshed by a holder's heartbeat (`lockedSince`).
    pub since: Option<i64>,
    /// `tag=` (`holderTag`).
    pub tag: Option<String>,
    /// The lock is this process's own ([`LockFile::is_mine`](super::LockFile::is_mine)): another
    /// handle, thread or waiter of this process holds it (`isOwnedByCurrentProcess`).
    pub is_current_process: Option<bool>,
}

impl Holder {
    /// The holder of a lock with `holder_pid` and `locked_since` (tests, simple callers).
    pub fn of(pid: Option<i64>, since: Option<i64>) -> Box<Holder> {
        Box::new(Holder {
            pid,
            since,
            ..Holder::default()
        })
    }
}

fn pid_or_unknown(pid: Option<i64>) -> String {
    pid.map_or_else(|| "unknown".to_string(), |p| p.to_string())
}

impl LockError {
    /// The stable error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            LockError::AlreadyLocked { .. } => ErrorCode::AlreadyLocked,
            LockError::Timeout { .. } => ErrorCode::Timeout,
            LockError::Aborted => ErrorCode::Aborted,
            LockError::NotLocked => ErrorCode::NotLocked,
            LockError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            LockError::InvalidPath(_) => ErrorCode::InvalidPath,
            LockError::PathTraversal(_) => ErrorCode::PathTraversal,
            LockError::LockLost(_) => ErrorCode::LockLost,
            LockError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            LockError::LimitMismatch(_) => ErrorCode::LimitMismatch,
            LockError::UnsupportedFileSystem(_) => ErrorCode::UnsupportedFileSystem,
            // The OS refused us (a read-only directory, a file of another user): the caller's
            // rights, not the disk, so the same code as a lock another process holds.
            LockError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                ErrorCode::PermissionDenied
            }
            LockError::Io { .. } => ErrorCode::IoError,
        }
    }

    /// The stable error code as a string (`SemaphoreErrorType`).
    pub fn kind(&self) -> &'static str {
        self.code().as_str()
    }

    /// The holder facts of `ALREADY_LOCKED` and `TIMEOUT`.
    pub fn holder(&self) -> Option<&Holder> {
        match self {
            LockError::AlreadyLocked { holder } | LockError::Timeout { holder, .. } => Some(holder),
            _ => None,
        }
    }

    /// The holder's pid, where the error carries one (`holderPid`).
    pub fn holder_pid(&self) -> Option<i64> {
        match self {
            LockError::PermissionDenied { holder_pid } => *holder_pid,
            _ => self.holder().and_then(|h| h.pid),
        }
    }

    /// The holder's timestamp, where the error carries one (`lockedSince`).
    pub fn locked_since(&self) -> Option<i64> {
        self.holder().and_then(|h| h.since)
    }

    /// The OS's own number for an I/O failure (`errno` on Unix, the system error code on
    /// Windows, as `std::io::Error::raw_os_error` gives it), so that a binding can carry it as a
    /// field instead of a caller reading it back out of the message.
    pub fn errno(&self) -> Option<i32> {
        match self {
            LockError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    pub(crate) fn io(context: &str, source: std::io::Error) -> LockError {
        LockError::Io {
            context: context.to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_of_os_failures_only() {
        let denied = LockError::io(
            "Failed to create lock",
            std::io::Error::from_raw_os_error(13),
        );
        assert_eq!(denied.errno(), Some(13));
        let made_up = LockError::io("Failed to create lock", std::io::Error::other("boom"));
        assert_eq!(made_up.errno(), None);
        assert_eq!(LockError::NotLocked.errno(), None);
    }

    #[test]
    fn kinds_and_messages() {
        let cases: Vec<(LockError, &str, &str)> = vec![
            (
                LockError::AlreadyLocked {
                    holder: Holder::of(Some(5), Some(9)),
                },
                "ALREADY_LOCKED",
                "Lock already held",
            ),
            (
                LockError::Timeout {
                    timeout_ms: 250,
                    holder: Box::default(),
                },
                "TIMEOUT",
                "Timeout waiting for lock after 250ms",
            ),
            (
                LockError::Aborted,
                "ABORTED",
                "Lock acquisition was aborted",
            ),
            (LockError::NotLocked, "NOT_LOCKED", "Lock not held"),
            (
                LockError::PermissionDenied { holder_pid: None },
                "PERMISSION_DENIED",
                "Lock held by different process (PID unknown)",
            ),
            (
                LockError::PermissionDenied {
                    holder_pid: Some(99999),
                },
                "PERMISSION_DENIED",
                "Lock held by different process (PID 99999)",
            ),
            (
                LockError::InvalidPath("Path cannot be empty".into()),
                "INVALID_PATH",
                "Path cannot be empty",
            ),
            (LockError::PathTraversal("x".into()), "PATH_TRAVERSAL", "x"),
            (
                LockError::InvalidArgument("tag: too long".into()),
                "INVALID_ARGUMENT",
                "tag: too long",
            ),
            (
                LockError::LockLost("lock file was removed".into()),
                "LOCK_LOST",
                "lock file was removed",
            ),
            (
                LockError::io("Failed to create lock", std::io::Error::other("boom")),
                "IO_ERROR",
                "Failed to create lock: boom",
            ),
            (
                LockError::io(
                    "Failed to create lock",
                    std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                ),
                "PERMISSION_DENIED",
                "Failed to create lock: permission denied",
            ),
        ];
        for (err, kind, msg) in cases {
            assert_eq!(err.kind(), kind);
            assert!(ErrorCode::ALL.contains(&err.code()));
            assert_eq!(err.to_string(), msg);
        }
        let e = LockError::AlreadyLocked {
            holder: Holder::of(Some(5), Some(9)),
        };
        assert_eq!((e.holder_pid(), e.locked_since()), (Some(5), Some(9)));
        let t = LockError::Timeout {
            timeout_ms: 1,
            holder: Holder::of(Some(6), Some(10)),
        };
        assert_eq!((t.holder_pid(), t.locked_since()), (Some(6), Some(10)));
    }
}

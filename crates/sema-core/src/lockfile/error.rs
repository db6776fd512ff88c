//! Errors of the lock-file engine. `kind()` gives the stable code the bindings expose (semats'
//! `SemaphoreErrorType` strings plus our additions); `Display` gives semats' message strings.

use std::fmt;

/// Everything a lock-file operation can fail with.
#[derive(Debug)]
pub enum LockError {
    /// The lock is held (by another process, by another waiter in this process, or its holder is
    /// unknown because the file cannot be parsed). `"ALREADY_LOCKED"`, "Lock already held".
    AlreadyLocked {
        holder_pid: Option<i64>,
        locked_since: Option<i64>,
    },
    /// The wait ran out. `"TIMEOUT"`, `"Timeout waiting for lock after <ms>ms"`.
    Timeout { timeout_ms: u64 },
    /// The acquisition was cancelled. `"ABORTED"`, "Lock acquisition was aborted".
    Aborted,
    /// There is no lock to release. `"NOT_LOCKED"`, "Lock not held".
    NotLocked,
    /// Another process's lock and no `force`. `"PERMISSION_DENIED"`,
    /// "Lock held by different process (PID n)" (`PID unknown` when the file cannot be parsed).
    PermissionDenied { holder_pid: Option<i64> },
    /// `"INVALID_PATH"`; the message is the reason.
    InvalidPath(String),
    /// `"PATH_TRAVERSAL"`; the message is the reason.
    PathTraversal(String),
    /// The lock was lost (file removed or replaced). `"LOCK_LOST"`; the message is the reason.
    LockLost(String),
    /// A request the engine cannot honour (e.g. a tag that would make the lock file larger than
    /// readers accept). `"INVALID_ARGUMENT"`; the message names the argument and its value.
    InvalidArgument(String),
    /// An I/O failure. `"IO_ERROR"`, `"<context>: <error>"`, e.g. `"Failed to create lock: ..."`.
    Io {
        context: String,
        source: std::io::Error,
    },
}

impl LockError {
    /// The stable error code (`SemaphoreErrorType`).
    pub fn kind(&self) -> &'static str {
        match self {
            LockError::AlreadyLocked { .. } => "ALREADY_LOCKED",
            LockError::Timeout { .. } => "TIMEOUT",
            LockError::Aborted => "ABORTED",
            LockError::NotLocked => "NOT_LOCKED",
            LockError::PermissionDenied { .. } => "PERMISSION_DENIED",
            LockError::InvalidPath(_) => "INVALID_PATH",
            LockError::PathTraversal(_) => "PATH_TRAVERSAL",
            LockError::LockLost(_) => "LOCK_LOST",
            LockError::InvalidArgument(_) => "INVALID_ARGUMENT",
            // The OS refused us (a read-only directory, a file of another user): the caller's rights, not the
            // disk, so the same code as a lock another process holds.
            LockError::Io { source, .. }
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                "PERMISSION_DENIED"
            }
            LockError::Io { .. } => "IO_ERROR",
        }
    }

    /// The holder's pid, where the error carries one (`holderPid`).
    pub fn holder_pid(&self) -> Option<i64> {
        match self {
            LockError::AlreadyLocked { holder_pid, .. } => *holder_pid,
            LockError::PermissionDenied { holder_pid } => *holder_pid,
            _ => None,
        }
    }

    /// The holder's timestamp, where the error carries one (`lockedSince`).
    pub fn locked_since(&self) -> Option<i64> {
        match self {
            LockError::AlreadyLocked { locked_since, .. } => *locked_since,
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

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::AlreadyLocked { .. } => f.write_str("Lock already held"),
            LockError::Timeout { timeout_ms } => {
                write!(f, "Timeout waiting for lock after {timeout_ms}ms")
            }
            LockError::Aborted => f.write_str("Lock acquisition was aborted"),
            LockError::NotLocked => f.write_str("Lock not held"),
            LockError::PermissionDenied {
                holder_pid: Some(pid),
            } => write!(f, "Lock held by different process (PID {pid})"),
            LockError::PermissionDenied { holder_pid: None } => {
                f.write_str("Lock held by different process (PID unknown)")
            }
            LockError::InvalidPath(msg)
            | LockError::PathTraversal(msg)
            | LockError::LockLost(msg)
            | LockError::InvalidArgument(msg) => f.write_str(msg),
            LockError::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let cases: Vec<(LockError, &str, &str)> = vec![
            (
                LockError::AlreadyLocked {
                    holder_pid: Some(5),
                    locked_since: Some(9),
                },
                "ALREADY_LOCKED",
                "Lock already held",
            ),
            (
                LockError::Timeout { timeout_ms: 250 },
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
            assert_eq!(err.to_string(), msg);
        }
        let e = LockError::AlreadyLocked {
            holder_pid: Some(5),
            locked_since: Some(9),
        };
        assert_eq!((e.holder_pid(), e.locked_since()), (Some(5), Some(9)));
    }
}

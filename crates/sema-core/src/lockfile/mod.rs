//! File-Based Semaphore lock files, shared with the `sema` (Rust) and `semats` (TypeScript)
//! tools, with the guarantees of design.md §3:
//!
//! - [`format`]: exactly the bytes both tools write (`pid=`, `timestamp=`, `tag=`), then our
//!   `host=`, `start=`, `token=`; semats' parse rules.
//! - Atomic creation of a complete file (O_TMPFILE + `linkat`, or a named temp file + `link`),
//!   never check-then-rename; the holder keeps a shared `flock` on it while it holds the lock.
//! - [`stale`]: one pure judgement; a dead holder on this host is reclaimed at once, a live one
//!   never; foreign files follow semats' rule; unparseable files expire by mtime.
//! - Race-safe stale breaking (exclusive flock, same inode, identical content, then unlink).
//! - A heartbeat that refreshes a held lock's timestamp and detects loss.
//! - Fair waiting: an in-process FIFO per lock path, woken by inotify/kqueue events with
//!   polling as the fallback.
//!
//! Async functions ([`LockFile::acquire`], [`LockFile::wait_until_free`]) must run inside a
//! tokio runtime with time enabled; [`HeldLock::start_heartbeat`] takes a runtime handle.
//! Everything else is synchronous and needs no runtime.

pub mod error;
pub mod format;
mod lock;
pub mod paths;
pub mod process;
pub mod stale;
mod sys;
mod watch;

pub use error::LockError;
pub use format::{
    is_js_whitespace, js_trim, parse_js_int, parse_lock_info, read_lock_bytes_lossy, sanitize_tag,
    LockInfo, ParseError, MAX_LOCK_FILE_BYTES,
};
pub use lock::{
    held_locks, release_all_held, AcquireRequest, HeldLock, LockFile, LockOptions, LockStatus,
};
pub use paths::{validate_lock_path, validate_semats_path};
pub use process::{
    current_pid, host_identity, is_process_running, now_unix_secs, process_start_ticks, Liveness,
};
pub use stale::{
    is_lock_stale_by_age, judge, HeldBecause, Observation, OsProbe, ProcessProbe, StaleBecause,
    StaleContext, StaleJudgement,
};
#[doc(hidden)]
pub use sys::CreationStrategy;
#[doc(hidden)]
pub use watch::watched_directory_count;

//! The `sema` crate's library (`file_based_semaphore` 0.1.0, tuulbelt/file-based-semaphore) with
//! its names and signatures, over this crate's lock-file engine: a service that uses `sema` switches
//! by changing its dependency and one `use` line, and keeps reading and writing the same lock
//! files as the `sema` and `semats` tools.
//!
//! ```toml
//! # Cargo.toml: instead of the sema crate
//! sema-core = { git = "…" }
//! ```
//! ```
//! // instead of `use file_based_semaphore::{Semaphore, SemaphoreConfig};`
//! use sema_core::compat::sema::{Semaphore, SemaphoreConfig};
//! # fn main() -> Result<(), sema_core::compat::sema::SemaphoreError> {
//! # let path = std::env::temp_dir().join(format!("compat-doc-{}.lock", std::process::id()));
//!
//! let semaphore = Semaphore::new(&path, SemaphoreConfig::default())?;
//! {
//!     let _guard = semaphore.try_acquire()?;
//!     // … the work only one process may do …
//! } // released when the guard is dropped
//! assert!(!semaphore.is_locked());
//! # Ok(())
//! # }
//! ```
//!
//! # What you gain, and where the behaviour differs from `sema`
//!
//! - **Reclaim at once**: a lock whose holder died on this host (its lock file names this host
//!   and a pid that no longer runs, or a reused pid) is taken at once by the next acquirer.
//!   `sema` waits until the file is older than `stale_timeout` (1 h by default). A lock of
//!   another tool (no identity) whose age passed `stale_timeout` is broken when its pid is not
//!   running (semats' rule); `sema` breaks it by age alone.
//! - **Identity**: our lock files add `host=`, `start=` and `token=` lines after `sema`'s
//!   `pid=`/`timestamp=`/`tag=` (`sema` and `semats` ignore unknown keys), so the guard releases
//!   only its own lock: `sema`'s guard removes whatever file is at the path when it drops, also
//!   another process's after a [`Semaphore::force_release`].
//! - **Heartbeat**: a held lock's `timestamp=` is refreshed every second, so no `sema --stale N`
//!   (N ≥ 1) and no semats takes a live holder's lock however long it holds.
//! - **Waiting** ([`Semaphore::acquire`], [`Semaphore::acquire_timeout`]): woken by file-system
//!   events (inotify, kqueue) with `retry_interval` polling as the fallback, in call order within
//!   a process and in line with other processes, instead of `sema`'s sleep-and-retry. Called
//!   from inside a tokio runtime (where the engine's wait cannot be driven), it falls back to
//!   sleep-and-retry, as `sema` does.
//! - **Safety**: a lock path that is a symbolic link is refused (`InvalidPath`); a stale lock is
//!   broken only if its content is still what was judged (no race removes a fresh lock); the
//!   file is written whole before it appears (never an empty lock file).
//! - **Written as asked, except the timestamp**: `try_acquire_with_info(info)` records
//!   `info.pid` (a lock taken on another process's behalf) and `info.tag`, and the current time:
//!   the engine stamps every lock it takes. Control characters in a tag (not only `\n`/`\r`) are
//!   written as spaces.
//! - [`Semaphore::is_process_running`] asks the system (`kill(pid, 0)`; another user's process
//!   counts as running) instead of looking for `/proc/<pid>`, and works where there is no `/proc`.
//! - `SemaphoreError::NotLocked` is never returned (as in `sema`: only its private release made
//!   it); errors of the engine that `sema` has no variant for come as `IoError`.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use crate::lockfile::{
    self, parse_sema_lock_info, AcquireRequest, HeldLock, LockError, LockOptions, Observation,
};

/// Error type for semaphore operations (`sema`'s variants, messages and `source()`).
#[derive(Debug)]
pub enum SemaphoreError {
    /// Lock file already exists and is held by another process (or by another acquisition of
    /// this one).
    AlreadyLocked {
        /// PID of the process holding the lock (if available).
        holder_pid: Option<u32>,
        /// When the lock was acquired (if available): its `timestamp=`, which the holder's
        /// heartbeat refreshes for our own lock files.
        locked_since: Option<u64>,
    },
    /// Lock file path is invalid (also: a symbolic link, a `..` segment).
    InvalidPath(String),
    /// IO error during lock operations (and engine errors `sema` has no variant for).
    IoError(io::Error),
    /// Lock was not held when trying to release (never returned, as in `sema`).
    NotLocked,
    /// Timeout waiting for lock.
    Timeout,
    /// Failed to parse lock file contents ([`LockInfo::parse`]).
    ParseError(String),
}

impl fmt::Display for SemaphoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SemaphoreError::AlreadyLocked {
                holder_pid,
                locked_since,
            } => {
                write!(f, "Lock already held")?;
                if let Some(pid) = holder_pid {
                    write!(f, " by PID {pid}")?;
                }
                if let Some(since) = locked_since {
                    write!(f, " since {since}")?;
                }
                Ok(())
            }
            SemaphoreError::InvalidPath(msg) => write!(f, "Invalid path: {msg}"),
            SemaphoreError::IoError(e) => write!(f, "IO error: {e}"),
            SemaphoreError::NotLocked => write!(f, "Lock not held"),
            SemaphoreError::Timeout => write!(f, "Timeout waiting for lock"),
            SemaphoreError::ParseError(msg) => write!(f, "Parse error: {msg}"),
        }
    }
}

impl Error for SemaphoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            SemaphoreError::IoError(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for SemaphoreError {
    fn from(err: io::Error) -> Self {
        SemaphoreError::IoError(err)
    }
}

impl From<LockError> for SemaphoreError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::AlreadyLocked { holder } => SemaphoreError::AlreadyLocked {
                holder_pid: holder.pid.and_then(|p| u32::try_from(p).ok()),
                locked_since: holder.since.and_then(|s| u64::try_from(s).ok()),
            },
            LockError::Timeout { .. } => SemaphoreError::Timeout,
            LockError::NotLocked => SemaphoreError::NotLocked,
            LockError::InvalidPath(msg) | LockError::PathTraversal(msg) => {
                SemaphoreError::InvalidPath(msg)
            }
            LockError::Io { source, .. } => SemaphoreError::IoError(source),
            other => SemaphoreError::IoError(io::Error::other(other.to_string())),
        }
    }
}

/// Result type alias for semaphore operations.
pub type SemaphoreResult<T> = Result<T, SemaphoreError>;

/// Configuration for semaphore behaviour (`sema`'s fields and defaults).
#[derive(Debug, Clone)]
pub struct SemaphoreConfig {
    /// A lock older than this may be broken; `None` means no lock is ever broken by age. Our
    /// own lock files of a dead holder on this host are reclaimed at once whatever this says
    /// (`None` included: then nothing is ever broken). Default 3600 s.
    pub stale_timeout: Option<Duration>,
    /// Polling interval while waiting (the fallback to file-system events). Default 100 ms.
    pub retry_interval: Duration,
    /// Maximum time [`Semaphore::acquire`] waits; `None` means wait forever. Default `None`.
    pub acquire_timeout: Option<Duration>,
}

impl Default for SemaphoreConfig {
    fn default() -> Self {
        Self {
            stale_timeout: Some(Duration::from_secs(3600)),
            retry_interval: Duration::from_millis(100),
            acquire_timeout: None,
        }
    }
}

/// Lock file contents, as `sema` reads and writes them (`pid=`, `timestamp=`, `tag=`).
#[derive(Debug, Clone)]
pub struct LockInfo {
    /// Process ID that holds the lock.
    pub pid: u32,
    /// Unix timestamp when the lock was acquired (or last refreshed by its holder's heartbeat).
    pub timestamp: u64,
    /// Optional description/tag.
    pub tag: Option<String>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl LockInfo {
    /// Lock info for the current process, now.
    pub fn new() -> Self {
        Self {
            pid: std::process::id(),
            timestamp: now_secs(),
            tag: None,
        }
    }

    /// [`LockInfo::new`] with a tag.
    pub fn with_tag(tag: impl Into<String>) -> Self {
        Self {
            tag: Some(tag.into()),
            ..Self::new()
        }
    }

    /// The lock file's bytes: `pid=`, `timestamp=`, then `tag=` if there is one. Written by the
    /// engine's one writer of the format: control characters in the tag become spaces (`sema`
    /// replaces only `\n` and `\r`), so no tag can add a line.
    ///
    /// ```
    /// use sema_core::compat::sema::LockInfo;
    /// let info = LockInfo { pid: 42, timestamp: 1_700_000_000, tag: Some("nightly\nbuild".into()) };
    /// assert_eq!(info.serialize(), "pid=42\ntimestamp=1700000000\ntag=nightly build\n");
    /// ```
    pub fn serialize(&self) -> String {
        lockfile::LockInfo {
            heartbeat_ms: None,
            pid: i64::from(self.pid),
            timestamp: i64::try_from(self.timestamp).unwrap_or(i64::MAX),
            tag: self.tag.clone(),
            host: None,
            start: None,
            token: None,
        }
        .serialize()
    }

    /// Parse lock-file contents with `sema`'s rules (lines trimmed, `key=value`, unknown keys
    /// ignored, the last duplicate wins); `ParseError("missing pid")` or
    /// `ParseError("missing timestamp")` as `sema` says.
    ///
    /// ```
    /// use sema_core::compat::sema::{LockInfo, SemaphoreError};
    /// let info = LockInfo::parse("pid=12345\ntimestamp=1234567890\ntag=my-tag\nhost=h:b:1\n")?;
    /// assert_eq!((info.pid, info.timestamp, info.tag.as_deref()), (12345, 1234567890, Some("my-tag")));
    /// assert!(matches!(LockInfo::parse("timestamp=1\n"), Err(SemaphoreError::ParseError(m)) if m == "missing pid"));
    /// # Ok::<(), SemaphoreError>(())
    /// ```
    pub fn parse(content: &str) -> Result<Self, SemaphoreError> {
        if let Some(info) = parse_sema_lock_info(content.as_bytes()) {
            return Ok(Self {
                pid: info.pid,
                timestamp: info.timestamp,
                tag: info.tag,
            });
        }
        // Which key is missing, in sema's order (pid first), asked of the same parser: when a
        // timestamp added at the end does not make it parse, the pid is what is missing.
        let with_timestamp = format!("{content}\ntimestamp=0");
        let missing = if parse_sema_lock_info(with_timestamp.as_bytes()).is_none() {
            "missing pid"
        } else {
            "missing timestamp"
        };
        Err(SemaphoreError::ParseError(missing.to_string()))
    }

    /// Whether the lock is older than `timeout` (whole seconds, as `sema` counts).
    pub fn is_stale(&self, timeout: Duration) -> bool {
        now_secs().saturating_sub(self.timestamp) > timeout.as_secs()
    }
}

impl Default for LockInfo {
    fn default() -> Self {
        Self::new()
    }
}

/// A held lock, released when dropped (only if the file is still this lock's: see the module
/// docs).
#[derive(Debug)]
pub struct SemaphoreGuard<'a> {
    semaphore: &'a Semaphore,
    held: HeldLock,
}

impl SemaphoreGuard<'_> {
    /// The semaphore this guard holds.
    pub fn semaphore(&self) -> &Semaphore {
        self.semaphore
    }
}

impl Drop for SemaphoreGuard<'_> {
    fn drop(&mut self) {
        // Best effort, as sema's: a lock found lost (its file removed or replaced) releases nothing.
        let _ = self.held.release();
    }
}

/// A lock file for process coordination (`sema`'s `Semaphore`). `Send + Sync`.
#[derive(Debug)]
pub struct Semaphore {
    path: PathBuf,
    config: SemaphoreConfig,
    file: lockfile::LockFile,
}

impl Semaphore {
    /// A semaphore at `path`: `InvalidPath("path cannot be empty")` or
    /// `InvalidPath("parent directory does not exist: <dir>")` as `sema` says; also
    /// `InvalidPath` for a path with a NUL byte or a `..` segment. Creates nothing.
    ///
    /// ```
    /// use sema_core::compat::sema::{Semaphore, SemaphoreConfig, SemaphoreError};
    /// assert!(matches!(Semaphore::with_defaults(""), Err(SemaphoreError::InvalidPath(_))));
    /// let s = Semaphore::new(std::env::temp_dir().join("compat-new.lock"), SemaphoreConfig::default())?;
    /// assert!(s.path().ends_with("compat-new.lock"));
    /// # Ok::<(), SemaphoreError>(())
    /// ```
    pub fn new(path: impl AsRef<Path>, config: SemaphoreConfig) -> Result<Self, SemaphoreError> {
        let path = path.as_ref().to_path_buf();
        if path.as_os_str().is_empty() {
            return Err(SemaphoreError::InvalidPath("path cannot be empty".into()));
        }
        if let Some(parent) = path.parent() {
            if !parent.as_os_str().is_empty() && !parent.exists() {
                return Err(SemaphoreError::InvalidPath(format!(
                    "parent directory does not exist: {}",
                    parent.display()
                )));
            }
        }
        let text = path
            .to_str()
            .ok_or_else(|| SemaphoreError::InvalidPath("path is not valid UTF-8".into()))?;
        let checked = lockfile::validate_lock_path(text)?;
        let options = LockOptions {
            stale_timeout: config.stale_timeout,
            retry_interval: config.retry_interval,
            heartbeat: LockOptions::default_heartbeat(config.stale_timeout),
            ..LockOptions::default()
        };
        let file = lockfile::LockFile::new_canonical(checked, options);
        Ok(Self { path, config, file })
    }

    /// [`Semaphore::new`] with [`SemaphoreConfig::default`].
    pub fn with_defaults(path: impl AsRef<Path>) -> Result<Self, SemaphoreError> {
        Self::new(path, SemaphoreConfig::default())
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a lock file is at the path (held or not: `sema`'s rule). A symbolic link there
    /// counts as locked (it is never followed).
    pub fn is_locked(&self) -> bool {
        !matches!(self.file.observe(), Observation::Missing)
    }

    /// The lock file's contents read with `sema`'s rules, if there is one that parses.
    pub fn lock_info(&self) -> Option<LockInfo> {
        match self.file.observe() {
            Observation::Parsed { info, .. } => Some(LockInfo {
                pid: u32::try_from(info.pid).ok()?,
                timestamp: u64::try_from(info.timestamp).ok()?,
                tag: info.tag,
            }),
            _ => None,
        }
    }

    /// One attempt: the lock, or `AlreadyLocked` with the holder. A dead holder's lock of this
    /// host is broken first, as a stale one is.
    ///
    /// ```
    /// use sema_core::compat::sema::{Semaphore, SemaphoreError};
    /// # let path = std::env::temp_dir().join(format!("compat-try-{}.lock", std::process::id()));
    /// let a = Semaphore::with_defaults(&path)?;
    /// let b = Semaphore::with_defaults(&path)?;
    /// let guard = a.try_acquire()?;
    /// match b.try_acquire() {
    ///     Err(SemaphoreError::AlreadyLocked { holder_pid, .. }) => {
    ///         assert_eq!(holder_pid, Some(std::process::id()))
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// drop(guard);
    /// assert!(b.try_acquire().is_ok());
    /// # Ok::<(), SemaphoreError>(())
    /// ```
    pub fn try_acquire(&self) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        self.try_acquire_with_info(LockInfo::new())
    }

    /// [`Semaphore::try_acquire`] recording `info.pid` and `info.tag` (the timestamp is now).
    pub fn try_acquire_with_info(
        &self,
        info: LockInfo,
    ) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        let held = self.file.try_acquire(&request(&info))?;
        Ok(self.guard(held))
    }

    /// Waits for the lock, at most `acquire_timeout` (`Timeout`), forever without one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sema_core::compat::sema::{Semaphore, SemaphoreConfig, SemaphoreError};
    /// # let path = std::env::temp_dir().join(format!("compat-acquire-{}.lock", std::process::id()));
    /// let config = SemaphoreConfig { acquire_timeout: Some(Duration::from_millis(200)), ..Default::default() };
    /// let semaphore = Semaphore::new(&path, config)?;
    /// let held = semaphore.acquire()?;
    /// assert!(matches!(semaphore.acquire(), Err(SemaphoreError::Timeout)));
    /// drop(held);
    /// # Ok::<(), SemaphoreError>(())
    /// ```
    pub fn acquire(&self) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        self.acquire_with_info(LockInfo::new())
    }

    /// [`Semaphore::acquire`] recording `info.pid` and `info.tag`.
    pub fn acquire_with_info(&self, info: LockInfo) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        self.wait(&request(&info), self.config.acquire_timeout)
    }

    /// [`Semaphore::acquire`] with this timeout instead of the configured one.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        self.wait(&request(&LockInfo::new()), Some(timeout))
    }

    /// Removes the lock file whoever holds it (a lock of this process is released properly; a
    /// symbolic link is refused). **Use with caution**, as with `sema`: the holder believes it
    /// still holds the lock (ours are told at their next heartbeat that they lost it).
    pub fn force_release(&self) -> Result<(), SemaphoreError> {
        match self.file.release_as(lockfile::current_pid(), true) {
            Ok(()) | Err(LockError::NotLocked) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a process with this pid runs (another user's counts).
    pub fn is_process_running(pid: u32) -> bool {
        lockfile::is_process_running(i64::from(pid))
    }

    fn guard(&self, held: HeldLock) -> SemaphoreGuard<'_> {
        held.start_heartbeat();
        SemaphoreGuard {
            semaphore: self,
            held,
        }
    }

    /// The engine's wait on a runtime of its own; inside a tokio runtime (which cannot block
    /// on another) sleep-and-retry, as `sema` does.
    fn wait(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
    ) -> Result<SemaphoreGuard<'_>, SemaphoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let held =
                runtime.block_on(self.file.acquire(req, timeout, CancellationToken::new()))?;
            return Ok(self.guard(held));
        }
        let start = Instant::now();
        loop {
            match self.file.try_acquire(req) {
                Ok(held) => return Ok(self.guard(held)),
                Err(LockError::AlreadyLocked { .. }) => {
                    if timeout.is_some_and(|t| start.elapsed() >= t) {
                        return Err(SemaphoreError::Timeout);
                    }
                    std::thread::sleep(self.config.retry_interval);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn request(info: &LockInfo) -> AcquireRequest {
    let own = u32::try_from(lockfile::current_pid()).ok();
    AcquireRequest {
        tag: info.tag.clone(),
        owner_pid: (Some(info.pid) != own).then_some(info.pid),
    }
}

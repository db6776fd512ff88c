//! What a caller chooses: the options of one lock path ([`LockOptions`]), what a new lock
//! records ([`AcquireRequest`]), and semats' `status()` shape ([`LockStatus`]).

use std::time::Duration;

use super::format::LockInfo;
use super::stale::Reclaim;
use super::sys::FileSystem;
use crate::options;

/// Options of one lock path. The defaults follow semats (1 h stale timeout, 100 ms polling);
/// change what you need:
///
/// ```
/// use std::time::Duration;
/// use sema_core::lockfile::LockOptions;
/// let stale_timeout = Some(Duration::from_secs(60));
/// let options = LockOptions {
///     stale_timeout,
///     // the heartbeat that matches a changed stale timeout
///     heartbeat: LockOptions::default_heartbeat(stale_timeout),
///     fsync: false, // e.g. on a scratch disk
///     ..LockOptions::default()
/// };
/// assert_eq!(options.heartbeat, Some(Duration::from_secs(1)));
/// assert_eq!(options.retry_interval, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    /// `None` = never break any lock (semats `null`). Default 3600 s
    /// ([`options::DEFAULT_STALE_TIMEOUT_MS`], as every default here: the option table's).
    pub stale_timeout: Option<Duration>,
    /// Polling fallback while waiting (also when stale judgements are re-made). Default 100 ms.
    pub retry_interval: Duration,
    /// fsync the file before linking it into place, and the directory after. Default true.
    pub fsync: bool,
    /// Period of the held lock's timestamp refresh; `None` = off. Default
    /// [`LockOptions::default_heartbeat`] of the stale timeout. A whole number of seconds is run
    /// just after each wall-clock second boundary (see `heartbeat::next_due`).
    pub heartbeat: Option<Duration>,
    /// Tag limit in UTF-16 code units (semats). Default `Some(10000)`.
    pub max_tag_length: Option<usize>,
    /// An unparseable or empty file younger than this is never broken (it may be being
    /// written). Default 2 s.
    pub pending_write_grace: Duration,
    /// Foreign files (no `host=`): a running pid whose process started more than 2 s after the
    /// lock's timestamp is not its holder (pid reused) and counts as not running. Default false:
    /// semats' liveness rule exactly (plus `EPERM` = running). Off by default because the
    /// comparison mixes the wall clock of the lock with boot-relative start times: a clock step
    /// (NTP at boot) can make a live holder look younger than its own lock and get it evicted.
    pub foreign_start_check: bool,
    /// `release_as(pid, false)` (semats' `release()`) deletes an unparseable file even while it is younger than
    /// `pending_write_grace`, as semats does (default true: an explicit release is the user's
    /// decision). `false` refuses it with `PermissionDenied { holder_pid: None }`, since a young
    /// unparseable file may be a lock being written.
    pub release_young_unparseable: bool,
}

impl LockOptions {
    /// `Some(min(1 s, stale_timeout / 4))`, at least 100 ms (1 s when there is no stale
    /// timeout). Use it when you change `stale_timeout` and want the matching default.
    ///
    /// Why 1 s, whatever our own stale timeout: the other tools of a mixed fleet read the
    /// timestamp with their own. `sema --stale N` takes a lock whose whole-second age exceeds N,
    /// holder alive or not (and `semats` one whose pid it cannot signal, e.g. another user's). A
    /// refresh just after every wall-clock second keeps the age read at most 1 s, so no
    /// `sema --stale` >= 1 s and no `semats` `staleTimeout` >= 1000 ms ever takes a live holder's
    /// lock, with up to ~0.95 s of scheduling delay tolerated. Measured cost: one in-place write
    /// of the lock file per second per held lock (see the README's mixed-fleet rule).
    pub fn default_heartbeat(stale_timeout: Option<Duration>) -> Option<Duration> {
        let one = Duration::from_secs(1);
        let period = match stale_timeout {
            Some(t) => one.min(t / 4),
            None => one,
        };
        Some(period.max(Duration::from_millis(100)))
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        let stale_timeout = Some(Duration::from_millis(options::DEFAULT_STALE_TIMEOUT_MS));
        LockOptions {
            stale_timeout,
            retry_interval: Duration::from_millis(options::DEFAULT_RETRY_INTERVAL_MS),
            fsync: true,
            heartbeat: LockOptions::default_heartbeat(stale_timeout),
            max_tag_length: Some(options::DEFAULT_MAX_TAG_LENGTH),
            pending_write_grace: Duration::from_secs(2),
            foreign_start_check: false,
            release_young_unparseable: true,
        }
    }
}

/// What to record in a new lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireRequest {
    /// The tag (sanitised and cut to `max_tag_length` before writing). `Some("")` writes `tag=`.
    pub tag: Option<String>,
    /// Record another owner pid (CLI `--pid`); default this process.
    pub owner_pid: Option<u32>,
}

/// semats' `status()` shape, with `locked` meaning "a file exists" (semats reports parse
/// success there) and `is_stale` being our full judgement (semats: age only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// A file exists at the path (parseable or not).
    pub locked: bool,
    /// The parsed content, if it parses.
    pub info: Option<LockInfo>,
    /// The engine would break this lock now.
    pub is_stale: bool,
    /// [`LockFile::is_mine`](super::LockFile::is_mine) for this process: the file carries the
    /// token of a lock this process holds, or this host identity with this process's pid, or (a
    /// file without identity, from sema or semats) this process's pid.
    pub is_owned_by_current_process: bool,
    /// When and by which rule the lock becomes reclaimable (`None`: no file).
    pub reclaim: Option<Reclaim>,
    /// The file system of the lock's directory and what the engine falls back to there.
    pub file_system: FileSystem,
}

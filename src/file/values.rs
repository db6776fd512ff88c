//! The values that cross into JS (lock info, options, observations, outcomes) and the
//! stateless engine functions (parsing, path checks, liveness).

use std::time::Duration;

use napi_derive::napi;
use sema_core::lockfile::{self, AcquireRequest, LockOptions};
use sema_core::ErrorCode;

use crate::result::{result, NativeError, NativeResult};

#[napi(object)]
pub struct NativeLockInfo {
    pub pid: i64,
    pub timestamp: i64,
    pub tag: Option<String>,
}

impl From<lockfile::LockInfo> for NativeLockInfo {
    fn from(i: lockfile::LockInfo) -> Self {
        NativeLockInfo {
            pid: i.pid,
            timestamp: i.timestamp,
            tag: i.tag,
        }
    }
}

/// semats' `parseLockInfo` rules (see the core's `format` module).
#[napi]
pub fn parse_lock_info(content: String) -> NativeResult<NativeLockInfo> {
    result(
        lockfile::parse_lock_info(&content)
            .map(Into::into)
            .map_err(|e| NativeError::of(ErrorCode::ParseError, e.to_string())),
    )
}

/// `pid=…\ntimestamp=…\n[tag=…\n]` with the tag sanitised and cut to `max_tag_length` UTF-16 units.
#[napi]
pub fn serialize_lock_info(
    pid: i64,
    timestamp: i64,
    tag: Option<String>,
    max_tag_length: Option<f64>,
) -> String {
    let info = lockfile::LockInfo {
        pid,
        timestamp,
        tag: tag.map(|t| lockfile::sanitize_tag(&t, max_tag_length.map(to_usize))),
        host: None,
        start: None,
        heartbeat_ms: None,
        token: None,
    };
    info.serialize()
}
#[napi]
pub fn is_process_running(pid: i64) -> bool {
    lockfile::is_process_running(pid)
}

/// Validates a lock path. `semats`: semats' constructor rules and messages (any `..` substring refused);
/// otherwise the target API's rules (`..` segments refused, directories refused). The value is the path to use.
#[napi]
pub fn check_lock_path(path: String, semats: bool) -> NativeResult<String> {
    let checked = if semats {
        lockfile::validate_semats_path(&path)
            .map_err(|m| NativeError::of(ErrorCode::InvalidPath, m))
    } else {
        lockfile::validate_lock_path(&path).map_err(|e| NativeError::from(&e))
    };
    result(checked.map(|p| p.to_string_lossy().into_owned()))
}

/// Whether `path` is a directory (the `locks` manager's explanation of an `INVALID_PATH`).
#[napi]
pub fn is_directory(path: String) -> bool {
    lockfile::is_directory(std::path::Path::new(&path))
}

/// Creates or checks the per-user lock directory `dir` (the core's `ensure_user_lock_dir`:
/// `0700`, this user's, never a symbolic link).
#[napi]
pub fn ensure_user_lock_dir(dir: String) -> NativeResult<()> {
    result(lockfile::ensure_user_lock_dir(std::path::Path::new(&dir)))
}

/// Engine options in milliseconds, defaults already applied by the JS layer.
#[napi(object)]
pub struct NativeFileOptions {
    /// `null` never breaks a lock.
    pub stale_timeout_ms: Option<f64>,
    pub retry_interval_ms: f64,
    pub fsync: bool,
    /// Heartbeat interval; absent = the engine's default (min(1 s, staleTimeout / 4)).
    pub heartbeat_ms: Option<f64>,
    /// No heartbeat at all.
    pub heartbeat_off: Option<bool>,
    /// `null` = no cut.
    pub max_tag_length: Option<f64>,
    /// JS keeps a handle per lock (the target API's `Lock`): report releases by path to it, and
    /// keep how each lock ended for `takeHeldEnd`.
    pub keep_for_handle: Option<bool>,
    /// Write only `pid=`, `timestamp=` and `tag=` (sema's and semats' layout, no host identity):
    /// every reader, ours included, then judges the lock by semats' rule (stale only once older
    /// than the stale timeout with its pid not running). For the `sema`/`semats` front ends, whose
    /// lock must outlive the short-lived process that recorded it.
    pub plain_format: Option<bool>,
}

pub fn to_usize(v: f64) -> usize {
    if v.is_finite() && v > 0.0 {
        v.min(usize::MAX as f64) as usize
    } else {
        0
    }
}

pub fn ms(v: f64) -> Duration {
    if v.is_finite() && v > 0.0 {
        Duration::from_secs_f64((v / 1000.0).min(1e12))
    } else {
        Duration::ZERO
    }
}
pub fn engine_options(o: &NativeFileOptions) -> LockOptions {
    let defaults = LockOptions::default();
    let stale_timeout = o.stale_timeout_ms.map(ms);
    let heartbeat = match (o.heartbeat_off, o.heartbeat_ms) {
        (Some(true), _) => None,
        (_, Some(v)) => Some(ms(v).max(Duration::from_millis(10))),
        (_, None) => LockOptions::default_heartbeat(stale_timeout),
    };
    LockOptions {
        stale_timeout,
        retry_interval: ms(o.retry_interval_ms).max(Duration::from_millis(1)),
        fsync: o.fsync,
        heartbeat,
        max_tag_length: o.max_tag_length.map(to_usize),
        ..defaults
    }
}

/// What is on disk: `state` is `missing`, `parsed` (with `info`), `unparseable` or `symlink` (never followed).
#[napi(object)]
pub struct NativeObservation {
    pub state: String,
    pub info: Option<NativeLockInfo>,
}

#[napi(object)]
pub struct NativeStatus {
    pub locked: bool,
    pub info: Option<NativeLockInfo>,
    pub is_stale: bool,
    pub is_owned_by_current_process: bool,
    /// Unix seconds from which the lock is reclaimable by `reclaim_rule` (see `lockfile::Reclaim`).
    pub reclaimable_at: Option<i64>,
    /// `holder-dead`, `age-and-pid-not-running`, `age`, `unparseable-age` or `never`; absent without a file.
    pub reclaim_rule: Option<String>,
    /// The lock directory's file system (`ext4`, `tmpfs`, `fuse`, `nfs`, ..., `0x…`); absent where
    /// the system names none (see `lockfile::FileSystem`).
    pub file_system: Option<String>,
    /// `no-tmpfile`, `poll`: what the engine falls back to on that file system.
    pub fallbacks: Vec<String>,
}

impl From<lockfile::LockStatus> for NativeStatus {
    fn from(s: lockfile::LockStatus) -> Self {
        NativeStatus {
            locked: s.locked,
            info: s.info.map(Into::into),
            is_stale: s.is_stale,
            is_owned_by_current_process: s.is_owned_by_current_process,
            reclaimable_at: s.reclaim.and_then(|r| r.at_unix_secs),
            reclaim_rule: s.reclaim.map(|r| r.rule.as_str().to_string()),
            fallbacks: s
                .file_system
                .fallbacks
                .iter()
                .map(|f| f.as_str().to_string())
                .collect(),
            file_system: s.file_system.name,
        }
    }
}

/// A held lock as plain values: `id` addresses it in the engine's registry (`releaseHeldNow`,
/// `addLockLostHandler`), so no native object (and no finalizer) exists per acquisition.
#[napi(object)]
pub struct NativeHeld {
    pub id: f64,
    pub pid: i64,
    pub timestamp: i64,
    pub tag: Option<String>,
    pub token: String,
}

pub fn request(tag: Option<String>, owner_pid: Option<u32>) -> AcquireRequest {
    AcquireRequest { tag, owner_pid }
}

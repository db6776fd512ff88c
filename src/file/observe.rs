//! Bindings of the engine's observation functions: `wait` (until a lock is free, without taking
//! it) and the listing of a directory's locks. They convert values and map errors only.

use std::path::{Path, PathBuf};

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{self, ListedLock, LockFile};

use super::pool::off_thread;
use super::values::{engine_options, ms, NativeFileOptions};
use crate::cancel::cancel_token;
use crate::result::{result, NativeResult};

/// Resolves when the lock at `path` (from `checkLockPath`) is free or stale, without taking it and
/// without creating any file: woken by the file events of its directory, polling at
/// `retryIntervalMs` as the fallback. `timeoutMs` absent = forever; `cancelId` from `newCancelId`.
/// Failures (`TIMEOUT`, `ABORTED`, a symlink at the path) come back as values.
#[napi]
pub fn wait_lock_free<'env>(
    env: &'env Env,
    path: String,
    options: NativeFileOptions,
    timeout_ms: Option<f64>,
    cancel_id: Option<u32>,
) -> napi::Result<PromiseRaw<'env, NativeResult<()>>> {
    let file = LockFile::new_canonical(PathBuf::from(path), engine_options(&options));
    let cancel = cancel_id.map(cancel_token).unwrap_or_default();
    let timeout = timeout_ms.map(ms);
    env.spawn_future(async move { Ok(result(file.wait_until_free(timeout, cancel).await)) })
}

/// One lock of a directory (the engine's `ListedLock`; no ownership token).
#[napi(object)]
pub struct NativeListedLock {
    pub name: String,
    pub path: String,
    /// `held` | `stale` | `free`.
    pub state: String,
    pub reason: String,
    /// `sema-native` | `sema/semats` | `unparseable` | `symlink` | `missing`.
    pub format: String,
    pub link_target: Option<String>,
    pub owner_uid: Option<u32>,
    pub pid: Option<i64>,
    pub timestamp: Option<i64>,
    pub tag: Option<String>,
    pub host: Option<String>,
    pub this_host: Option<bool>,
    pub holder_running: Option<bool>,
    pub command_line: Option<Vec<String>>,
    pub since: Option<i64>,
    pub waiters: Option<u32>,
    /// `mutex` | `semaphore` | `shared`.
    pub kind: String,
    pub holders: Option<u32>,
    pub limit: Option<u32>,
}

impl From<ListedLock> for NativeListedLock {
    fn from(l: ListedLock) -> Self {
        NativeListedLock {
            name: l.name,
            path: l.path.to_string_lossy().into_owned(),
            state: l.state.as_str().into(),
            reason: l.reason.into(),
            format: l.format.into(),
            link_target: l.link_target,
            owner_uid: l.owner_uid,
            pid: l.pid,
            timestamp: l.timestamp,
            tag: l.tag,
            host: l.host,
            this_host: l.this_host,
            holder_running: l.holder_running,
            command_line: l.command_line,
            since: l.since,
            waiters: l.waiters,
            kind: l.kind.into(),
            holders: l.holders,
            limit: l.limit,
        }
    }
}

/// Every lock of the directory `dir`, sorted by name, judged with `options` (see the core's
/// `listing` module), on the blocking pool. Reads only.
#[napi]
pub fn list_locks<'env>(
    env: &'env Env,
    dir: String,
    options: NativeFileOptions,
) -> napi::Result<PromiseRaw<'env, NativeResult<Vec<NativeListedLock>>>> {
    let options = engine_options(&options);
    off_thread(env, move || {
        result(
            lockfile::list_locks(Path::new(&dir), &options)
                .map(|locks| locks.into_iter().map(Into::into).collect()),
        )
    })
}

/// The facts about one lock path (for the waiting line), `null` when the path has no file name.
/// On the blocking pool. Reads only.
#[napi]
pub fn describe_lock<'env>(
    env: &'env Env,
    path: String,
    options: NativeFileOptions,
) -> napi::Result<PromiseRaw<'env, Option<NativeListedLock>>> {
    let options = engine_options(&options);
    off_thread(env, move || {
        lockfile::describe_lock(Path::new(&path), &options).map(Into::into)
    })
}

/// One lock file this process holds (any thread, any API: the engine's registry).
#[napi(object)]
pub struct NativeHeldFacts {
    pub path: String,
    pub pid: i64,
    /// When it was acquired (Unix seconds).
    pub timestamp: i64,
    pub tag: Option<String>,
}

/// The lock files this process holds now, oldest first.
#[napi]
pub fn held_lock_facts() -> Vec<NativeHeldFacts> {
    let mut held = lockfile::held_locks();
    held.sort_by_key(|h| h.id());
    held.into_iter()
        .map(|h| {
            let info = h.info_ref();
            NativeHeldFacts {
                path: h.path().to_string_lossy().into_owned(),
                pid: info.pid,
                timestamp: info.timestamp,
                tag: info.tag.clone(),
            }
        })
        .collect()
}

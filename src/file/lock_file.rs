//! `NativeLockFile`: one lock path with its options (the engine's `LockFile`), its acquire,
//! status and release-by-path methods, and the synchronous hot path of semats' API. The
//! object is the only owner of its `LockFile` in this layer: JS holds the object.

use std::path::PathBuf;

use napi::bindgen_prelude::{spawn, spawn_blocking, Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{self, AcquireNow, LockError, LockFile, Observation};

use super::held::{acquired, start};
use super::pool::off_thread;
use super::settle::NativeFileSettler;
use super::values::{
    engine_options, ms, request, NativeFileOptions, NativeHeld, NativeLockInfo, NativeObservation,
    NativeStatus,
};
use crate::cancel::cancel_token;
use crate::owner;
use crate::result::{result, NativeError, NativeResult};

/// One lock file with its options (the engine's `LockFile`).
#[napi]
pub struct NativeLockFile {
    pub(super) inner: std::sync::Arc<LockFile>,
    /// The JS thread that made it (a JS object never crosses threads): its locks are that thread's.
    pub(super) claim: owner::Claim,
    /// The path as a shared lock (`mode`), made on first use (./shared.rs).
    pub(super) shared: std::sync::OnceLock<sema_core::lockfile::SharedLock>,
}

#[napi]
impl NativeLockFile {
    /// `path` must come from `checkLockPath`.
    #[napi(constructor)]
    pub fn new(env: Env, path: String, options: NativeFileOptions) -> napi::Result<Self> {
        let claim = owner::Claim {
            owner: owner::of(&env)?,
            handles: options.keep_for_handle.unwrap_or(false),
        };
        let inner = std::sync::Arc::new(
            LockFile::new_canonical(PathBuf::from(path), engine_options(&options))
                .with_extra_keys(!options.plain_format.unwrap_or(false)),
        );
        Ok(NativeLockFile {
            inner,
            claim,
            shared: std::sync::OnceLock::new(),
        })
    }

    #[napi]
    pub fn observe(&self) -> NativeObservation {
        match self.inner.observe() {
            Observation::Missing => NativeObservation {
                state: "missing".into(),
                info: None,
            },
            Observation::Parsed { info, .. } => NativeObservation {
                state: "parsed".into(),
                info: Some(info.into()),
            },
            Observation::Unparseable { .. } => NativeObservation {
                state: "unparseable".into(),
                info: None,
            },
            Observation::Symlink => NativeObservation {
                state: "symlink".into(),
                info: None,
            },
        }
    }

    /// One attempt on the calling thread when that is short (see `LockFile::attempts_are_short`:
    /// a memory file system, or a local one with fsync off), else `null`: then call `tryAcquire`.
    /// The target API's `tryAcquire` without the two thread hops of the pool.
    #[napi]
    pub fn try_acquire_now(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> Option<NativeResult<NativeHeld>> {
        if !self.inner.attempts_are_short() {
            return None;
        }
        let req = request(tag, owner_pid);
        Some(acquired(start(self.inner.try_acquire(&req), self.claim)))
    }

    /// One attempt (the target API's `tryAcquire`) on the blocking pool.
    #[napi]
    pub fn try_acquire<'env>(
        &self,
        env: &'env Env,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<NativeHeld>>> {
        let req = request(tag, owner_pid);
        let (file, claim) = (self.inner.clone(), self.claim);
        off_thread(env, move || acquired(start(file.try_acquire(&req), claim)))
    }

    /// Acquires: file-system events, `retryInterval` polling, the timeout (`null` = forever, 0 = one attempt) and
    /// the cancel id (from `newCancelId`). Takes its place in the in-process FIFO queue during this call, so
    /// waiters of one process are served in call order.
    ///
    /// Answers the result when it is decided on the calling thread (the file calls are short there: memory file
    /// system, or local with fsync off; see `LockFile::acquire_now`), else `null`: the result then comes through
    /// `settler`'s channel as `{ id: settleId, result }`. Where the first attempt is
    /// not short (fsync on a disk) and this caller may make it at once, it is made on the blocking pool, which
    /// answers JS itself: two thread hops, as a Node `fs` call makes. A wait runs on the tokio runtime. Not a
    /// synchronous `acquireNow` beside it: an attempt that finds the lock busy has taken a place in the lines
    /// (the in-process turn, the cross-process queue) that only the wait started here can keep.
    #[napi]
    pub fn acquire(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
        settler: &NativeFileSettler,
        settle_id: u32,
    ) -> Option<NativeResult<NativeHeld>> {
        let req = request(tag, owner_pid);
        let claim = self.claim;
        // Made only where the result goes through the channel: a settler dropped unused reports
        // a failure there.
        let settle = || settler.settler(settle_id, claim);
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        let timeout = timeout_ms.map(ms);
        let tried = if cancel.is_cancelled() {
            None
        } else if self.inner.attempts_are_short() {
            match self.inner.acquire_now(&req) {
                AcquireNow::Done(r) => return Some(acquired(start(r, claim))),
                AcquireNow::Wait(tried) => Some(tried),
            }
        } else {
            match self.inner.claim_now() {
                // In line behind other processes with the turn: the waiter's file is built and
                // synced on the pool before the wait starts (no round trip from the wait to it).
                Err(mut tried) if tried.has_turn() => {
                    let file = self.inner.clone();
                    let settler = settle();
                    spawn_blocking(move || {
                        if !cancel.is_cancelled() {
                            tried.prepare(&file, &req);
                        }
                        let wait = file.acquire_in_order(req, timeout, cancel, Some(tried));
                        spawn(async move { settler.settle(wait.await) });
                    });
                    return None;
                }
                Err(tried) => Some(tried),
                Ok(claimed) => {
                    let file = self.inner.clone();
                    let settler = settle();
                    spawn_blocking(move || {
                        // Aborted before this thread got to it: no attempt, as a wait checks first.
                        if cancel.is_cancelled() {
                            drop(claimed);
                            return settler.settle(Err(LockError::Aborted));
                        }
                        match claimed.attempt(&file, &req) {
                            AcquireNow::Done(r) => settler.settle(r),
                            AcquireNow::Wait(tried) => {
                                let wait = file.acquire_in_order(req, timeout, cancel, Some(tried));
                                spawn(async move { settler.settle(wait.await) });
                            }
                        }
                    });
                    return None;
                }
            }
        };
        let wait = self.inner.acquire_in_order(req, timeout, cancel, tried);
        let settler = settle();
        spawn(async move { settler.settle(wait.await) });
        None
    }

    #[napi]
    pub fn status(&self) -> NativeStatus {
        self.inner.status().into()
    }

    /// `status` on the blocking pool.
    #[napi]
    pub fn status_async<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeStatus>> {
        let file = self.inner.clone();
        off_thread(env, move || file.status().into())
    }

    /// semats' `release(force)` (by process, not by handle) on the blocking pool; `owner_pid`
    /// releases on behalf of the owner recorded by `acquire`'s `pid` (e.g. the CLI's `--pid`)
    /// instead of this process.
    #[napi]
    pub fn release_as_async<'env>(
        &self,
        env: &'env Env,
        force: bool,
        owner_pid: Option<i64>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<()>>> {
        let file = self.inner.clone();
        let owner = owner_pid.unwrap_or_else(lockfile::current_pid);
        off_thread(env, move || result(file.release_as(owner, force)))
    }

    #[napi]
    pub fn clean_stale(&self) -> NativeResult<bool> {
        result(self.inner.clean_stale())
    }

    /// One attempt on the calling thread, short or not (semats' `tryAcquire` is synchronous). The
    /// lock stays in the engine's registry (released by path or at exit).
    ///
    /// With [`release_as_process`](Self::release_as_process), the one exception to the one result
    /// shape: semats' synchronous cycle is the package's hottest path, and each object made through
    /// Node-API costs ~0.3 µs there. So a lock written exactly as asked (this process's, the tag as
    /// given) answers its bare timestamp; any other answer (the tag sanitised or cut, another owner
    /// pid, a failure) is a `NativeResult` with the lock as written.
    ///
    /// A method, not a free function taking an index into a table of lock files: napi's borrow
    /// of `this` cost nothing measurable against the table's lock (acquire + release cycle p50
    /// 20.9 µs against 20.4 µs, 1.17× against 1.14× the syscall floor, tmpfs, fsync and
    /// heartbeat off; within the run-to-run spread).
    #[napi]
    pub fn try_acquire_sync(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> Either<i64, NativeResult<NativeLockInfo>> {
        let req = request(tag, owner_pid);
        match start(self.inner.try_acquire(&req), self.claim) {
            Ok(held) => {
                let info = held.info_ref();
                if info.tag == req.tag && req.owner_pid.is_none() {
                    Either::A(info.timestamp)
                } else {
                    Either::B(result::<_, LockError>(Ok(NativeLockInfo {
                        pid: info.pid,
                        timestamp: info.timestamp,
                        tag: info.tag.clone(),
                    })))
                }
            }
            Err(e) => Either::B(result(Err(e))),
        }
    }

    /// semats' `release(force)`: by process, not by handle, on the calling thread. `null` on
    /// success, else the error (the hot path's compact answer, see `try_acquire_sync`).
    #[napi]
    pub fn release_as_process(&self, force: bool) -> Option<NativeError> {
        self.inner
            .release_as(lockfile::current_pid(), force)
            .err()
            .map(NativeError::from)
    }
}

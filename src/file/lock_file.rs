//! `NativeLockFile`: one lock path with its options (the engine's `LockFile`), its acquire,
//! status and release-by-path methods, and the synchronous hot path of semats' API, which
//! reaches the lock file by index instead of through the class.

use std::path::PathBuf;
use std::sync::Mutex;

use napi::bindgen_prelude::{AsyncTask, Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{self, AcquireNow, LockFile, Observation};
use sema_core::ErrorCode;

use super::cancel::cancel_token;
use super::held::{acquired, start};
use super::pool::OnPool;
use super::values::{
    engine_options, ms, request, HeldOutcome, NativeFileOptions, NativeObservation, NativeStatus,
    SyncAcquire,
};
use crate::owner;
use crate::result::{bool_result, void_result, BoolResult, NativeError, VoidResult};

/// One lock file with its options (the engine's `LockFile`).
#[napi]
pub struct NativeLockFile {
    inner: std::sync::Arc<LockFile>,
    /// The JS thread that made it (a JS object never crosses threads): its locks are that thread's.
    claim: owner::Claim,
    /// Index in [`FILES`] for the free hot-path functions (`fileTryAcquireSync`, …).
    slot: u32,
}

/// The lock files JS holds, by index: the synchronous hot path (`fileTryAcquireSync`,
/// `fileReleaseAsProcess`) takes this index instead of `this`, which skips napi's per-call
/// borrow bookkeeping of class instances. An entry lives as long as its `NativeLockFile`.
#[derive(Default)]
struct FileSlab {
    /// Each file with its claim (see `NativeLockFile::claim`).
    files: Vec<Option<(std::sync::Arc<LockFile>, owner::Claim)>>,
    free: Vec<u32>,
}

static FILES: Mutex<FileSlab> = Mutex::new(FileSlab {
    files: Vec::new(),
    free: Vec::new(),
});

fn files() -> std::sync::MutexGuard<'static, FileSlab> {
    FILES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn file_by_slot(slot: u32) -> Option<(std::sync::Arc<LockFile>, owner::Claim)> {
    files().files.get(slot as usize).and_then(Clone::clone)
}

impl Drop for NativeLockFile {
    fn drop(&mut self) {
        let mut slab = files();
        if let Some(entry) = slab.files.get_mut(self.slot as usize) {
            *entry = None;
            slab.free.push(self.slot);
        }
    }
}

pub fn gone() -> NativeError {
    NativeError::of(
        ErrorCode::InvalidArgument,
        "lock file handle is no longer valid",
    )
}

#[napi]
impl NativeLockFile {
    /// `path` must come from `checkLockPath`.
    #[napi(constructor)]
    pub fn new(env: Env, path: String, options: NativeFileOptions) -> napi::Result<Self> {
        let claim = owner::Claim {
            owner: owner::of(&env)?,
            handles: options.report_release_by_path.unwrap_or(false),
        };
        let inner =
            std::sync::Arc::new(LockFile::new(PathBuf::from(path), engine_options(&options)));
        let mut slab = files();
        let entry = Some((inner.clone(), claim));
        let slot = match slab.free.pop() {
            Some(i) => {
                slab.files[i as usize] = entry;
                i
            }
            None => {
                slab.files.push(entry);
                u32::try_from(slab.files.len() - 1).unwrap_or(u32::MAX)
            }
        };
        Ok(NativeLockFile { inner, claim, slot })
    }

    /// The index for the free hot-path functions.
    #[napi(getter)]
    pub fn slot(&self) -> u32 {
        self.slot
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

    /// One attempt (the target API's `tryAcquire`): on the calling thread when it is short (see
    /// `LockFile::attempts_are_short`; the outcome comes back directly), else on the libuv pool (a promise).
    #[napi(ts_return_type = "HeldOutcome | Promise<HeldOutcome>")]
    pub fn try_acquire(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> Either<HeldOutcome, AsyncTask<OnPool<HeldOutcome>>> {
        let req = request(tag, owner_pid);
        if self.inner.attempts_are_short() {
            return Either::A(acquired(start(self.inner.try_acquire(&req), self.claim)));
        }
        let (file, claim) = (self.inner.clone(), self.claim);
        Either::B(AsyncTask::new(OnPool::new(move || {
            acquired(start(file.try_acquire(&req), claim))
        })))
    }

    /// Acquires, waiting on the tokio pool: file-system events, `retryInterval` polling, the timeout (`null` =
    /// forever, 0 = one attempt) and the cancel id (from `newCancelId`). Takes its place in the in-process FIFO
    /// queue during this call, so waiters of one process are served in call order.
    ///
    /// The uncontended case is decided on the calling thread when the file calls are short (memory file system,
    /// or local with fsync off; see `LockFile::acquire_now`): the outcome comes back directly, not as a promise,
    /// saving two thread hops. Otherwise a promise.
    #[napi(ts_return_type = "HeldOutcome | Promise<HeldOutcome>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        tag: Option<String>,
        owner_pid: Option<u32>,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> napi::Result<Either<HeldOutcome, PromiseRaw<'env, HeldOutcome>>> {
        let req = request(tag, owner_pid);
        let cancelled = cancel_id.map(cancel_token);
        let tried = if cancelled.as_ref().is_some_and(|c| c.is_cancelled()) {
            None
        } else {
            match self.inner.acquire_now(&req) {
                AcquireNow::Done(r) => return Ok(Either::A(acquired(start(r, self.claim)))),
                AcquireNow::Wait(tried) => Some(tried),
            }
        };
        let fut = self.inner.acquire_in_order(
            req,
            timeout_ms.map(ms),
            cancelled.unwrap_or_default(),
            tried,
        );
        let claim = self.claim;
        env.spawn_future(async move { Ok(acquired(start(fut.await, claim))) })
            .map(Either::B)
    }

    #[napi]
    pub fn status(&self) -> NativeStatus {
        self.inner.status().into()
    }

    /// `status` on the libuv pool.
    #[napi(ts_return_type = "Promise<NativeStatus>")]
    pub fn status_async(&self) -> AsyncTask<OnPool<NativeStatus>> {
        let file = self.inner.clone();
        AsyncTask::new(OnPool::new(move || file.status().into()))
    }

    /// semats' `release(force)` (by process, not by handle) on the libuv pool; `owner_pid`
    /// releases on behalf of the owner recorded by `acquire`'s `pid` (e.g. the CLI's `--pid`)
    /// instead of this process.
    #[napi(ts_return_type = "Promise<VoidResult>")]
    pub fn release_as_async(
        &self,
        force: bool,
        owner_pid: Option<i64>,
    ) -> AsyncTask<OnPool<VoidResult>> {
        let file = self.inner.clone();
        let owner = owner_pid.unwrap_or_else(lockfile::current_pid);
        AsyncTask::new(OnPool::new(move || {
            void_result(file.release_as(owner, force))
        }))
    }

    #[napi]
    pub fn clean_stale(&self) -> BoolResult {
        bool_result(self.inner.clean_stale())
    }
}

/// One attempt of the lock file `slot` (a `NativeLockFile`'s `slot`), on the calling thread
/// (semats' `tryAcquire` is synchronous). Success is just the timestamp written (a number) when
/// the written tag is the one given and the owner is this process; otherwise an object. The
/// lock stays in the engine's registry (released by path or at exit).
#[napi]
pub fn file_try_acquire_sync(
    slot: u32,
    tag: Option<String>,
    owner_pid: Option<u32>,
) -> Either<i64, SyncAcquire> {
    let Some((file, claim)) = file_by_slot(slot) else {
        return Either::B(SyncAcquire {
            ok: false,
            pid: None,
            timestamp: None,
            tag: None,
            error: Some(gone()),
        });
    };
    let req = request(tag, owner_pid);
    match start(file.try_acquire(&req), claim) {
        Ok(held) => {
            let info = held.info_ref();
            if info.tag == req.tag && req.owner_pid.is_none() {
                Either::A(info.timestamp)
            } else {
                Either::B(SyncAcquire {
                    ok: true,
                    pid: Some(info.pid),
                    timestamp: Some(info.timestamp),
                    tag: info.tag.clone(),
                    error: None,
                })
            }
        }
        Err(e) => Either::B(SyncAcquire {
            ok: false,
            pid: None,
            timestamp: None,
            tag: None,
            error: Some((&e).into()),
        }),
    }
}

/// semats' `release(force)` of the lock file `slot`: by process, not by handle. `null` on
/// success, else the error.
#[napi]
pub fn file_release_as_process(slot: u32, force: bool) -> Option<NativeError> {
    match file_by_slot(slot) {
        Some((file, _)) => file
            .release_as(lockfile::current_pid(), force)
            .err()
            .map(|e| (&e).into()),
        None => Some(gone()),
    }
}

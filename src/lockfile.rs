//! Bindings of the lock-file engine: argument mapping and result objects. No file-system logic here.
//!
//! Expected failures travel as values (`{ ok, error: { code, message, … } }`), never as thrown errors: an async
//! napi fn cannot give its rejection a custom `code`, and the JS layer wants semats' `SemaphoreResult` shapes
//! anyway. Only programming errors (a bad argument type) throw.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use napi::bindgen_prelude::{AsyncTask, Either, FnArgs, Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::{Env, Task};
use napi_derive::napi;
use sema_core::lockfile::{
    self, AcquireNow, AcquireRequest, HeldEnd, HeldLock, LockError, LockFile, LockOptions,
    Observation,
};
use tokio_util::sync::CancellationToken;

use crate::owner;
use crate::result::{bool_result, void_result, BoolResult, NativeError, VoidResult};

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

#[napi(object)]
pub struct ParseResult {
    pub ok: bool,
    pub value: Option<NativeLockInfo>,
    pub error: Option<NativeError>,
}

/// semats' `parseLockInfo` rules (see the core's `format` module).
#[napi]
pub fn parse_lock_info(content: String) -> ParseResult {
    match lockfile::parse_lock_info(&content) {
        Ok(info) => ParseResult {
            ok: true,
            value: Some(info.into()),
            error: None,
        },
        Err(e) => ParseResult {
            ok: false,
            value: None,
            error: Some(NativeError::new("PARSE_ERROR", e.to_string())),
        },
    }
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
        token: None,
    };
    info.serialize()
}

#[napi]
pub fn is_process_running(pid: i64) -> bool {
    lockfile::is_process_running(pid)
}

#[napi(object)]
pub struct PathCheck {
    pub ok: bool,
    pub path: Option<String>,
    pub error: Option<NativeError>,
}

/// Whether this build has a file-lock engine: the core's platform layer is Unix-only (the Windows engine is
/// its own piece of work). Every file-lock entry point of the JS layer (the target API, `Semaphore`, and the
/// CLI through them) starts with `check_lock_path`, so refusing there is the one place a platform is refused.
const FILE_LOCKS_SUPPORTED: bool = cfg!(unix);

/// Validates a lock path. `semats`: semats' constructor rules and messages (any `..` substring refused);
/// otherwise the target API's rules (`..` segments refused, directories refused).
#[napi]
pub fn check_lock_path(path: String, semats: bool) -> PathCheck {
    if !FILE_LOCKS_SUPPORTED {
        let message = format!(
            "file locks are not supported on {} yet (the dflockd client is): {path}",
            std::env::consts::OS
        );
        return PathCheck {
            ok: false,
            path: None,
            error: Some(NativeError::new("UNSUPPORTED_PLATFORM", message)),
        };
    }
    let checked = if semats {
        lockfile::validate_semats_path(&path).map_err(|m| NativeError::new("INVALID_PATH", m))
    } else {
        lockfile::validate_lock_path(&path).map_err(|e| NativeError::from(&e))
    };
    match checked {
        Ok(p) => PathCheck {
            ok: true,
            path: Some(p.to_string_lossy().into_owned()),
            error: None,
        },
        Err(e) => PathCheck {
            ok: false,
            path: None,
            error: Some(e),
        },
    }
}

/// Engine options in milliseconds, defaults already applied by the JS layer.
#[napi(object)]
pub struct NativeFileOptions {
    /// `null` never breaks a lock.
    pub stale_timeout_ms: Option<f64>,
    pub retry_interval_ms: f64,
    pub fsync: bool,
    /// Heartbeat interval; absent = the engine's default (min(10 s, staleTimeout / 4)).
    pub heartbeat_ms: Option<f64>,
    /// No heartbeat at all.
    pub heartbeat_off: Option<bool>,
    /// `null` = no cut.
    pub max_tag_length: Option<f64>,
    /// JS keeps a handle per lock (the target API's `Lock`): report releases by path to it.
    pub report_release_by_path: Option<bool>,
}

fn to_usize(v: f64) -> usize {
    if v.is_finite() && v > 0.0 {
        v.min(usize::MAX as f64) as usize
    } else {
        0
    }
}

fn ms(v: f64) -> Duration {
    if v.is_finite() && v > 0.0 {
        Duration::from_secs_f64((v / 1000.0).min(1e12))
    } else {
        Duration::ZERO
    }
}

fn engine_options(o: &NativeFileOptions) -> LockOptions {
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
}

impl From<lockfile::LockStatus> for NativeStatus {
    fn from(s: lockfile::LockStatus) -> Self {
        NativeStatus {
            locked: s.locked,
            info: s.info.map(Into::into),
            is_stale: s.is_stale,
            is_owned_by_current_process: s.is_owned_by_current_process,
        }
    }
}

/// A held lock as plain values: `id` addresses it in the engine's registry (`releaseHeld`,
/// `setLockLostHandler`), so no native object (and no finalizer) exists per acquisition.
#[napi(object)]
pub struct NativeHeld {
    pub id: f64,
    pub pid: i64,
    pub timestamp: i64,
    pub tag: Option<String>,
    pub token: String,
}

#[napi(object)]
pub struct HeldOutcome {
    pub ok: bool,
    pub lock: Option<NativeHeld>,
    pub error: Option<NativeError>,
}

/// Gives a fresh lock to the JS thread `owner` and starts its heartbeat (an entry in the
/// engine's heartbeat list, no task). Fails (the lock released) when that thread has exited.
fn start(r: Result<HeldLock, LockError>, claim: owner::Claim) -> Result<HeldLock, LockError> {
    let held = r?;
    if !owner::claim(&held, claim) {
        return Err(LockError::Aborted);
    }
    held.start_heartbeat_thread();
    Ok(held)
}

/// Describes a started lock (see [`start`]) for JS.
fn acquired(r: Result<HeldLock, LockError>) -> HeldOutcome {
    match r {
        Ok(held) => {
            let info = held.info_ref();
            HeldOutcome {
                ok: true,
                lock: Some(NativeHeld {
                    id: held.id() as f64,
                    pid: info.pid,
                    timestamp: info.timestamp,
                    tag: info.tag.clone(),
                    token: info.token.clone().unwrap_or_default(),
                }),
                error: None,
            }
        }
        Err(e) => HeldOutcome {
            ok: false,
            lock: None,
            error: Some((&e).into()),
        },
    }
}

/// `tryAcquireSync`'s answer when it is not just the timestamp: a failure, or a success whose
/// written tag differs from the one given (sanitised or cut).
#[napi(object)]
pub struct SyncAcquire {
    pub ok: bool,
    pub pid: Option<i64>,
    pub timestamp: Option<i64>,
    pub tag: Option<String>,
    pub error: Option<NativeError>,
}

/// One attempt on the libuv pool: one hop out, one back.
pub struct TryAcquireTask {
    file: std::sync::Arc<LockFile>,
    req: Option<AcquireRequest>,
    claim: owner::Claim,
}

impl Task for TryAcquireTask {
    type Output = Result<HeldLock, LockError>;
    type JsValue = HeldOutcome;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let req = self.req.take().unwrap_or_default();
        Ok(start(self.file.try_acquire(&req), self.claim))
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> napi::Result<HeldOutcome> {
        Ok(acquired(output))
    }
}

/// A held lock's release on the libuv pool.
pub struct ReleaseTask {
    id: u64,
}

impl Task for ReleaseTask {
    type Output = Result<bool, LockError>;
    type JsValue = BoolResult;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        Ok(release_by_id(self.id))
    }

    fn resolve(&mut self, _env: Env, output: Self::Output) -> napi::Result<BoolResult> {
        Ok(bool_result(output))
    }
}

fn release_by_id(id: u64) -> Result<bool, LockError> {
    release_found(lockfile::held_lock_by_id(id))
}

/// Releases a held lock found by id; not found = already released or lost.
fn release_found(held: Option<HeldLock>) -> Result<bool, LockError> {
    held.map_or(Ok(false), |held| held.release())
}

fn to_id(id: f64) -> u64 {
    if id.is_finite() && id >= 0.0 {
        id as u64
    } else {
        0
    }
}

fn request(tag: Option<String>, owner_pid: Option<u32>) -> AcquireRequest {
    AcquireRequest { tag, owner_pid }
}

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
    /// Each file with its owner (see `NativeLockFile::owner`).
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

fn gone() -> NativeError {
    NativeError::new("INVALID_ARGUMENT", "lock file handle is no longer valid")
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
    pub fn try_acquire_async(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> Either<HeldOutcome, AsyncTask<TryAcquireTask>> {
        let req = request(tag, owner_pid);
        if self.inner.attempts_are_short() {
            return Either::A(acquired(start(self.inner.try_acquire(&req), self.claim)));
        }
        Either::B(AsyncTask::new(TryAcquireTask {
            file: self.inner.clone(),
            req: Some(req),
            claim: self.claim,
        }))
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
        let fut = self.inner.acquire_in_order_tried(
            req,
            timeout_ms.map(ms),
            cancelled.unwrap_or_default(),
            tried,
        );
        let claim = self.claim;
        env.spawn_future(async move { Ok(acquired(start(fut.await, claim))) })
            .map(Either::B)
    }

    /// Resolves once no lock file exists (the CLI's `wait`).
    #[napi]
    pub async fn wait_until_free(
        &self,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> VoidResult {
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        void_result(self.inner.wait_until_free(timeout_ms.map(ms), cancel).await)
    }

    #[napi]
    pub fn status(&self) -> NativeStatus {
        self.inner.status().into()
    }

    #[napi]
    pub async fn status_async(&self) -> NativeStatus {
        let file = self.inner.clone();
        match tokio::task::spawn_blocking(move || file.status()).await {
            Ok(s) => s.into(),
            Err(_) => NativeStatus {
                locked: false,
                info: None,
                is_stale: false,
                is_owned_by_current_process: false,
            },
        }
    }

    /// semats' `release(force)`: by process, not by handle. `null` on success, else the error.
    #[napi]
    pub fn release_as_process(&self, force: bool) -> Option<NativeError> {
        self.inner
            .release_as_process(force)
            .err()
            .map(|e| (&e).into())
    }

    /// `release_as_process` off the JS thread; `owner_pid` releases on behalf of the owner recorded by
    /// `acquire`'s `pid` (e.g. the CLI's `--pid`) instead of this process.
    #[napi]
    pub async fn release_as_async(&self, force: bool, owner_pid: Option<i64>) -> VoidResult {
        let file = self.inner.clone();
        void_result(
            tokio::task::spawn_blocking(move || match owner_pid {
                Some(pid) => file.release_as(pid, force),
                None => file.release_as_process(force),
            })
            .await
            .unwrap_or_else(|e| Err(join_error(e))),
        )
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
        Some((file, _)) => file.release_as_process(force).err().map(|e| (&e).into()),
        None => Some(gone()),
    }
}

fn join_error(e: tokio::task::JoinError) -> LockError {
    LockError::Io {
        context: "Background task failed".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Releases the held lock `id` on the calling thread. true: released by this call; false: already released or
/// lost. Never deletes a file that is not ours.
#[napi]
pub fn release_held(id: f64) -> BoolResult {
    bool_result(release_by_id(to_id(id)))
}

/// Whether the lock `id` is still held (not released, not lost).
#[napi]
pub fn is_held(id: f64) -> bool {
    lockfile::held_lock_by_id(to_id(id)).is_some()
}

/// `releaseHeld` on the calling thread when that is short (the lock is not on a network file system), else
/// `null`: then call `releaseHeldAsync`.
#[napi]
pub fn release_held_now(id: f64) -> Option<BoolResult> {
    let held = lockfile::held_lock_by_id(to_id(id));
    if held.as_ref().is_some_and(|h| !h.release_is_short()) {
        return None;
    }
    Some(bool_result(release_found(held)))
}

/// `releaseHeld` on the libuv pool.
#[napi(ts_return_type = "Promise<BoolResult>")]
pub fn release_held_async(id: f64) -> AsyncTask<ReleaseTask> {
    AsyncTask::new(ReleaseTask { id: to_id(id) })
}

/// Sets this JS thread's loss callback: `callback(id, reason)` runs (on this thread) for every lock this thread
/// holds that is found lost, and `callback(id, null)` for one released by path (`releaseAsAsync`, semats'
/// `release`) rather than through its id. Each thread hears about its own locks only. The callback is weak: it
/// never keeps Node alive.
#[napi(ts_args_type = "callback: (id: number, reason: string | null) => void")]
pub fn set_lock_lost_handler(
    env: Env,
    callback: Function<FnArgs<(f64, Option<String>)>, ()>,
) -> napi::Result<()> {
    let owner = owner::of(&env)?;
    let tsfn = callback
        .build_threadsafe_function()
        .weak::<true>()
        .callee_handled::<false>()
        .build()?;
    lockfile::set_loss_hook(
        owner,
        Some(Box::new(move |id, how| {
            let reason = match how {
                HeldEnd::Lost(reason) => Some(reason.to_string()),
                HeldEnd::ReleasedByPath => None,
            };
            tsfn.call(
                FnArgs::from((id as f64, reason)),
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        })),
    );
    Ok(())
}

/// The descriptor of the held lock with this token (for `sema-native run`, which hands it to its command so that
/// the command keeps the lock if the wrapper dies); `null` when no such lock is held here.
#[napi]
pub fn held_lock_fd(token: String) -> Option<i32> {
    #[cfg(unix)]
    {
        lockfile::held_locks()
            .into_iter()
            .find(|h| !token.is_empty() && h.token() == token)
            .and_then(|h| h.raw_fd())
    }
    #[cfg(not(unix))]
    {
        let _ = token;
        None
    }
}

/// Releases every lock of the process, whichever thread took it (the JS layer calls it from the main thread's
/// `process.on('exit')` hook).
#[napi]
pub fn release_all_held() {
    lockfile::release_all_held();
}

/// Releases the locks this JS thread holds (a worker thread's `process.on('exit')` hook; the environment's
/// cleanup does it too, for a terminated worker).
#[napi]
pub fn release_thread_held(env: Env) -> napi::Result<()> {
    lockfile::release_all_held_by(owner::of(&env)?);
    Ok(())
}

// Cancellation of waits by id: JS owns the AbortSignal (see lib/abort.js) and cancels through these.
fn cancels() -> &'static Mutex<HashMap<u32, CancellationToken>> {
    static CANCELS: OnceLock<Mutex<HashMap<u32, CancellationToken>>> = OnceLock::new();
    CANCELS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cancel_token(id: u32) -> CancellationToken {
    match cancels().lock() {
        Ok(mut map) => map.entry(id).or_default().clone(),
        Err(_) => CancellationToken::new(),
    }
}

#[napi]
pub fn new_cancel_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut map) = cancels().lock() {
        map.insert(id, CancellationToken::new());
    }
    id
}

#[napi]
pub fn cancel_wait(id: u32) {
    if let Ok(map) = cancels().lock() {
        if let Some(t) = map.get(&id) {
            t.cancel();
        }
    }
}

#[napi]
pub fn forget_cancel(id: u32) {
    if let Ok(mut map) = cancels().lock() {
        map.remove(&id);
    }
}

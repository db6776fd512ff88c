//! Shared locks on lock files (`mode: 'shared' | 'exclusive'`): the core's `SharedLock`, called
//! through the `NativeLockFile` of its path. Values in, values out; every decision is the
//! core's.

use napi::bindgen_prelude::{spawn, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{LockError, Mode, SharedLock};
use sema_core::ErrorCode;

use super::held::{acquired, start};
use super::lock_file::NativeLockFile;
use super::pool::off_thread;
use super::settle::NativeFileSettler;
use super::values::{ms, request, NativeHeld, NativeLockInfo, NativeStatus};
use crate::cancel::cancel_token;
use crate::result::{result, NativeError, NativeResult};

/// `status` of a shared lock's path: the mutex's status of it, with `mode` (`shared` while it is
/// a shared base, `exclusive` while anything else holds it, absent when free) and `holders`
/// (the live shared holders).
#[napi(object)]
pub struct NativeSharedStatus {
    pub status: NativeStatus,
    pub mode: Option<String>,
    pub holders: u32,
    /// What each live shared holder's file records.
    pub readers: Vec<NativeLockInfo>,
    /// Requests of either mode waiting in line, of every process (one each).
    pub waiting: u32,
}

fn mode_of(mode: &str) -> Result<Mode, LockError> {
    Mode::parse(mode).ok_or_else(|| {
        LockError::InvalidArgument(format!(
            "mode must be 'shared' or 'exclusive', not '{mode}'"
        ))
    })
}

impl NativeLockFile {
    fn shared(&self) -> SharedLock {
        self.shared
            .get_or_init(|| SharedLock::new((*self.inner).clone()))
            .clone()
    }
}

#[napi]
impl NativeLockFile {
    /// One attempt in `mode` (`tryAcquire(path, { mode })`) on the blocking pool.
    #[napi]
    pub fn try_acquire_mode<'env>(
        &self,
        env: &'env Env,
        mode: String,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<NativeHeld>>> {
        let (lock, claim) = (self.shared(), self.claim);
        let req = request(tag, owner_pid);
        off_thread(env, move || {
            acquired(start(
                mode_of(&mode).and_then(|m| lock.try_acquire(m, &req)),
                claim,
            ))
        })
    }

    /// Acquires in `mode`, waiting (`timeoutMs` absent = forever, 0 = one attempt; `cancelId`
    /// from `newCancelId`): always `null`, the result comes through `settler` as `{ id:
    /// settleId, result }` (every attempt takes the path's guard: off the JS thread).
    // The JS call's arguments, one each (NativeLockFile#acquire's and the mode): no options
    // object to build per acquisition.
    #[allow(clippy::too_many_arguments)]
    #[napi]
    pub fn acquire_mode(
        &self,
        mode: String,
        tag: Option<String>,
        owner_pid: Option<u32>,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
        settler: &NativeFileSettler,
        settle_id: u32,
    ) -> Option<NativeResult<NativeHeld>> {
        let mode = match mode_of(&mode) {
            Ok(m) => m,
            Err(e) => return Some(acquired(Err(e))),
        };
        let req = request(tag, owner_pid);
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        let timeout = timeout_ms.map(ms);
        let settler = settler.settler(settle_id, self.claim);
        // Its place in the guard's line is taken here, in call order.
        let wait = self.shared().acquire_in_order(mode, req, timeout, cancel);
        spawn(async move { settler.settle(wait.await) });
        None
    }

    /// `status` of the path read as a shared lock, on the blocking pool.
    #[napi]
    pub fn status_shared<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeSharedStatus>> {
        let lock = self.shared();
        off_thread(env, move || {
            let s = lock.status();
            NativeSharedStatus {
                status: s.status.into(),
                mode: s.mode.map(|m| m.as_str().to_string()),
                holders: u32::try_from(s.holders).unwrap_or(u32::MAX),
                readers: s.readers.into_iter().map(Into::into).collect(),
                waiting: u32::try_from(s.waiting).unwrap_or(u32::MAX),
            }
        })
    }

    /// A forced release of the path's shared group (every reader file and the base), on the
    /// blocking pool: `true` when it was a shared lock, `false` when not (release it as the
    /// mutex).
    #[napi]
    pub fn release_group<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<bool>>> {
        let lock = self.shared();
        off_thread(env, move || result(lock.release_group()))
    }

    /// Resolves when an acquire in `mode` would be served now (`wait(path, { mode })`), creating
    /// nothing; `TIMEOUT` / `ABORTED` as values.
    #[napi]
    pub fn wait_mode<'env>(
        &self,
        env: &'env Env,
        mode: String,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<()>>> {
        let lock = self.shared();
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        let timeout = timeout_ms.map(ms);
        env.spawn_future(async move {
            Ok(match Mode::parse(&mode) {
                Some(m) => result(lock.wait_until_free(m, timeout, cancel).await),
                None => result(Err(NativeError::of(
                    ErrorCode::InvalidArgument,
                    format!("mode must be 'shared' or 'exclusive', not '{mode}'"),
                ))),
            })
        })
    }
}

//! `NativeSemaphore`: a counting semaphore on lock files (the engine's `Semaphore`): its acquire
//! (through the thread's completion channel, as `NativeLockFile`'s), its one-round attempt, its
//! status, `wait`, and the slot files a release by path may release. Values converted, nothing
//! decided here.

use std::path::PathBuf;

use napi::bindgen_prelude::{spawn, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{LockError, LockFile, Semaphore, SemaphoreNow};

use super::held::{acquired, start};
use super::pool::off_thread;
use super::settle::NativeFileSettler;
use super::values::{
    engine_options, ms, request, NativeFileOptions, NativeHeld, NativeLockInfo, NativeStatus,
};
use crate::cancel::cancel_token;
use crate::owner;
use crate::result::{result, NativeResult};

/// A semaphore's status: the base path's, with `holders` (slot files of this limit present)
/// and `info` (the base's holder, else the first present slot's).
#[napi(object)]
pub struct NativeSemaphoreStatus {
    pub base: NativeStatus,
    pub holders: f64,
    pub info: Option<NativeLockInfo>,
}

#[napi]
pub struct NativeSemaphore {
    inner: Semaphore,
    claim: owner::Claim,
}

#[napi]
impl NativeSemaphore {
    /// `path` must come from `checkLockPath`; `limit` a validated positive integer.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        path: String,
        options: NativeFileOptions,
        limit: f64,
    ) -> napi::Result<Self> {
        let claim = owner::Claim {
            owner: owner::of(&env)?,
            handles: options.keep_for_handle.unwrap_or(false),
        };
        let base = LockFile::new_canonical(PathBuf::from(path), engine_options(&options))
            .with_extra_keys(!options.plain_format.unwrap_or(false));
        let limit = if limit.is_finite() && limit >= 1.0 {
            limit.min(u64::MAX as f64) as u64
        } else {
            0
        };
        let inner =
            Semaphore::new(base, limit).map_err(|e| napi::Error::from_reason(e.to_string()))?;
        Ok(NativeSemaphore { inner, claim })
    }

    /// One round on the calling thread when its file calls are short, else `null`: then call
    /// `tryAcquire`.
    #[napi]
    pub fn try_acquire_now(
        &self,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> Option<NativeResult<NativeHeld>> {
        if !self.inner.base().attempts_are_short() {
            return None;
        }
        let req = request(tag, owner_pid);
        Some(acquired(start(self.inner.try_acquire(&req), self.claim)))
    }

    /// One round on the blocking pool.
    #[napi]
    pub fn try_acquire<'env>(
        &self,
        env: &'env Env,
        tag: Option<String>,
        owner_pid: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<NativeHeld>>> {
        let req = request(tag, owner_pid);
        let (sem, claim) = (self.inner.clone(), self.claim);
        off_thread(env, move || acquired(start(sem.try_acquire(&req), claim)))
    }

    /// Acquires a slot, as `NativeLockFile#acquire` does (its arguments, its answer now or
    /// `null` with the result through `settler`'s channel).
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
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        let tried = if cancel.is_cancelled() {
            None
        } else {
            match self.inner.acquire_now(&req) {
                SemaphoreNow::Done(r) => return Some(acquired(start(r, claim))),
                SemaphoreNow::Wait(tried) => Some(tried),
            }
        };
        let wait = self
            .inner
            .acquire_in_order(req, timeout_ms.map(ms), cancel, tried);
        let settler = settler.settler(settle_id, claim);
        spawn(async move { settler.settle(wait.await) });
        None
    }

    /// `status` on the blocking pool.
    #[napi]
    pub fn status_async<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeSemaphoreStatus>> {
        let sem = self.inner.clone();
        off_thread(env, move || {
            let s = sem.status();
            NativeSemaphoreStatus {
                base: s.base.into(),
                holders: s.holders as f64,
                info: s.info.map(Into::into),
            }
        })
    }

    /// Resolves when an acquire of this limit would get a slot, creating nothing (`wait`):
    /// `LIMIT_MISMATCH`, `TIMEOUT`, `ABORTED` as values.
    #[napi]
    pub fn wait_free<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<f64>,
        cancel_id: Option<u32>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<()>>> {
        let sem = self.inner.clone();
        let cancel = cancel_id.map(cancel_token).unwrap_or_default();
        let timeout = timeout_ms.map(ms);
        env.spawn_future(async move {
            Ok(result::<_, LockError>(
                sem.wait_until_free(timeout, cancel).await,
            ))
        })
    }

    /// The slot files of this limit present now, the base first (for a release by path).
    #[napi]
    pub fn present_slots(&self) -> Vec<String> {
        self.inner
            .present_slots()
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    }
}

/// The path of the held lock `id` (a semaphore's slot file), `null` when it is no longer held.
#[napi]
pub fn held_path(id: f64) -> Option<String> {
    let id = if id.is_finite() && id >= 0.0 {
        id as u64
    } else {
        return None;
    };
    sema_core::lockfile::held_lock_by_id(id).map(|h| h.path().to_string_lossy().into_owned())
}

#[napi]
impl NativeSemaphore {
    /// Processes of this machine standing in this semaphore's line (`null`: no line here). For
    /// tests and diagnostics.
    #[napi]
    pub fn waiting_processes(&self) -> Option<u32> {
        self.inner.waiting_processes()
    }
}

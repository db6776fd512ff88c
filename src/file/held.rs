//! Held locks, addressed by the engine registry's id: starting one for a JS thread, describing
//! it, releasing it (its loss is heard through `crate::losses`), and the process's and threads' exit hooks.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::{self, HeldLock, LockError};

use super::pool::off_thread;
use super::values::NativeHeld;
use crate::owner;
use crate::result::{result, NativeResult};

/// Gives a fresh lock to the JS thread `owner` and starts its heartbeat (an entry in the
/// engine's heartbeat list, no task). Fails (the lock released) when that thread has exited.
pub fn start(r: Result<HeldLock, LockError>, claim: owner::Claim) -> Result<HeldLock, LockError> {
    let held = r?;
    if !owner::claim(&held, claim) {
        return Err(LockError::Aborted);
    }
    held.start_heartbeat();
    Ok(held)
}

/// Describes a started lock (see [`start`]) for JS.
pub fn acquired(r: Result<HeldLock, LockError>) -> NativeResult<NativeHeld> {
    result(r.map(|held| {
        let info = held.info_ref();
        NativeHeld {
            id: held.id() as f64,
            pid: info.pid,
            timestamp: info.timestamp,
            tag: info.tag.clone(),
            token: info.token.clone().unwrap_or_default(),
        }
    }))
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

/// Releases the held lock `id` on the calling thread when that is short (the lock is not on a network file system), else
/// `null`: then call `releaseHeldAsync`. `true`: released by this call; `false`: already released
/// or lost. Never deletes a file that is not ours.
#[napi]
pub fn release_held_now(id: f64) -> Option<NativeResult<bool>> {
    let held = lockfile::held_lock_by_id(to_id(id));
    if held.as_ref().is_some_and(|h| !h.release_is_short()) {
        return None;
    }
    Some(result(release_found(held)))
}

/// `releaseHeldNow` on the blocking pool.
#[napi]
pub fn release_held_async(env: &Env, id: f64) -> napi::Result<PromiseRaw<'_, NativeResult<bool>>> {
    let id = to_id(id);
    off_thread(env, move || result(release_by_id(id)))
}

/// The descriptor of the held lock with this token (for `sema-native run`, which hands it to its command so that
/// the command keeps the lock if the wrapper dies); `null` when no such lock is held here.
#[napi]
pub fn held_lock_fd(token: String) -> Option<i64> {
    lockfile::held_with_token(&token).and_then(|h| h.raw_handle())
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

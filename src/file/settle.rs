//! One completion channel per JS thread for file acquisitions made off it (`setFileSettler`):
//! an acquisition that cannot be decided on the JS thread answers an id, and its result comes
//! later as `callback({ id, result })`, sent straight from the thread that decided it (a
//! blocking-pool thread for the first attempt, a tokio worker for a wait). One threadsafe
//! function per JS thread, not one per call, and no tokio worker between a blocking first
//! attempt and JS: with `fsync` on a disk an uncontended `acquire` hops JS → pool → JS, as a
//! Node `fs` call does, instead of JS → worker → `block_in_place` → JS.
//!
//! The channel keeps the process alive only while an acquisition of its thread is pending
//! (`fileSettlerRef(true)` from JS when the first starts, `false` when the last ends): an idle
//! channel never holds Node open.

use std::cell::RefCell;
use std::sync::Arc;

use napi::bindgen_prelude::Function;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Status};
use napi_derive::napi;
use sema_core::lockfile::{self, HeldLock, LockError};

use super::held::{acquired, start};
use super::values::NativeHeld;
use crate::owner;
use crate::result::NativeResult;

/// A settled acquisition: its id (from `acquire`) and its result.
#[napi(object, object_from_js = false)]
pub struct NativeFileSettle {
    pub id: u32,
    #[napi(ts_type = "NativeResult<NativeHeld>")]
    pub result: NativeResult<NativeHeld>,
}

type Channel = ThreadsafeFunction<NativeFileSettle, (), NativeFileSettle, Status, false, true>;

thread_local! {
    /// This JS thread's channel (set once by lib/file/settle.js when it loads).
    static CHANNEL: RefCell<Option<Arc<Channel>>> = const { RefCell::new(None) };
}

/// Sets this JS thread's channel: `callback({ id, result })` runs on this thread for each
/// acquisition that answered an id. Weak until `fileSettlerRef(true)`.
#[napi(ts_args_type = "callback: (settled: NativeFileSettle) => void")]
pub fn set_file_settler(callback: Function<NativeFileSettle, ()>) -> napi::Result<()> {
    let channel = callback
        .build_threadsafe_function()
        .weak::<true>()
        .callee_handled::<false>()
        .build()?;
    CHANNEL.with(|c| *c.borrow_mut() = Some(Arc::new(channel)));
    Ok(())
}

/// Whether this thread's channel keeps the process alive: `true` while an acquisition of this
/// thread is pending, `false` when none is (called by JS on the JS thread).
#[napi]
pub fn file_settler_ref(env: Env, keep_alive: bool) {
    CHANNEL.with(|c| {
        let c = c.borrow();
        let Some(channel) = c.as_ref().filter(|ch| !ch.aborted()) else {
            return;
        };
        // SAFETY: `channel` was made on this JS thread (a thread-local) for this thread's env,
        // which is alive (JS is calling), and it is not aborted, so its raw handle is live;
        // ref/unref only set the flag of its libuv handle, on the loop's own thread.
        unsafe {
            if keep_alive {
                napi::sys::napi_ref_threadsafe_function(env.raw(), channel.raw());
            } else {
                napi::sys::napi_unref_threadsafe_function(env.raw(), channel.raw());
            }
        }
    })
}

/// A pending acquisition's way back to its JS thread.
pub struct Settler {
    channel: Arc<Channel>,
    id: u32,
    claim: owner::Claim,
}

/// The channel of the calling JS thread for the acquisition `id`; `None` when JS has not set it.
pub fn settler(id: u32, claim: owner::Claim) -> Option<Settler> {
    CHANNEL
        .with(|c| c.borrow().clone())
        .map(|channel| Settler { channel, id, claim })
}

impl Settler {
    /// Gives the result to the JS thread (the lock started for it first). A lock its thread can
    /// no longer be told of (the thread exited meanwhile) is released at once.
    pub fn settle(self, r: Result<HeldLock, LockError>) {
        let result = acquired(start(r, self.claim));
        let id = match &result.0 {
            Ok(NativeHeld { id, .. }) => Some(*id as u64),
            Err(_) => None,
        };
        let status = self.channel.call(
            NativeFileSettle {
                id: self.id,
                result,
            },
            ThreadsafeFunctionCallMode::NonBlocking,
        );
        if status != Status::Ok {
            if let Some(held) = id.and_then(lockfile::held_lock_by_id) {
                let _ = held.release();
            }
        }
    }
}

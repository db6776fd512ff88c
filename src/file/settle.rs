//! A completion channel for file acquisitions made off the JS thread ([`NativeFileSettler`], one
//! per JS thread and module instance): an acquisition that cannot be decided on the JS thread
//! answers `null`, and its result comes later as `callback({ id, result })`, sent straight from
//! the thread that decided it (a
//! blocking-pool thread for the first attempt, a tokio worker for a wait). One threadsafe
//! function per JS thread, not one per call, and no tokio worker between a blocking first
//! attempt and JS: with `fsync` on a disk an uncontended `acquire` hops JS → pool → JS, as a
//! Node `fs` call does, instead of JS → worker → `block_in_place` → JS.
//!
//! The channel keeps the process alive only while an acquisition given it is pending
//! (`keepAlive(true)` from JS when the first starts, `false` when the last ends): an idle channel
//! never holds Node open. A channel per module instance, not per thread: two copies of the JS
//! layer in one thread (a cleared require cache, two installs loading one binary) each hear
//! their own acquisitions.

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

/// A completion channel (lib/file/settle.js makes one per JS thread and module instance):
/// `callback({ id, result })` runs on the thread that made it, for each acquisition given this
/// channel that answered `null`. Weak until `keepAlive(true)`.
#[napi]
pub struct NativeFileSettler {
    channel: Arc<Channel>,
}

#[napi]
impl NativeFileSettler {
    #[napi(
        constructor,
        ts_args_type = "callback: (settled: NativeFileSettle) => void"
    )]
    pub fn new(callback: Function<NativeFileSettle, ()>) -> napi::Result<Self> {
        let channel = callback
            .build_threadsafe_function()
            .weak::<true>()
            .callee_handled::<false>()
            .build()?;
        Ok(NativeFileSettler {
            channel: Arc::new(channel),
        })
    }

    /// Whether the channel keeps the process alive: `true` while an acquisition given it is
    /// pending, `false` when none is (called on its JS thread).
    #[napi]
    pub fn keep_alive(&self, env: Env, keep_alive: bool) {
        if self.channel.aborted() {
            return;
        }
        // SAFETY: a JS object is only used on the JS thread that made it, so `env` is the env
        // the channel was made for, alive (JS is calling); the channel is not aborted, so its raw
        // handle is live. Ref/unref only set the flag of its libuv handle, on the loop's thread.
        unsafe {
            if keep_alive {
                napi::sys::napi_ref_threadsafe_function(env.raw(), self.channel.raw());
            } else {
                napi::sys::napi_unref_threadsafe_function(env.raw(), self.channel.raw());
            }
        }
    }

    /// The way back of the acquisition `id` made for `claim`'s thread.
    pub fn settler(&self, id: u32, claim: owner::Claim) -> Settler {
        Settler {
            channel: self.channel.clone(),
            id,
            claim,
            sent: false,
        }
    }
}

/// A pending acquisition's way back to its JS thread.
pub struct Settler {
    channel: Arc<Channel>,
    id: u32,
    claim: owner::Claim,
    /// The result was sent: a settler dropped before that (a panic, the runtime shutting down)
    /// sends a failure instead, so that no promise waits forever with the channel keeping Node
    /// alive.
    sent: bool,
}

impl Settler {
    /// Gives the result to the JS thread (the lock started for it first). A lock its thread can
    /// no longer be told of (the thread exited meanwhile) is released at once.
    pub fn settle(mut self, r: Result<HeldLock, LockError>) {
        self.send(r);
    }

    fn send(&mut self, r: Result<HeldLock, LockError>) {
        self.sent = true;
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

impl Drop for Settler {
    fn drop(&mut self) {
        if !self.sent {
            let why = std::io::Error::other("the acquisition ended without a result");
            self.send(Err(LockError::Io {
                context: "Failed to create lock".into(),
                source: why,
            }));
        }
    }
}

//! One loss channel per JS thread, for both backends: `addLockLostHandler(callback)` adds a
//! callback of the thread (one per copy of the JS layer on it), `callback(id)` names a lock of
//! this thread that ended otherwise than through its handle, and `takeHeldEnd(id)` says how
//! (once: asked by the one dispatcher that knows the id). A file lock's id is the engine
//! registry's; a dflockd primitive takes an id from the same space ([`LossRoute`]) and reports
//! through the same per-thread hook (`lockfile::report_to_owner`), so JS tells the backends
//! apart by id alone. The callback is weak: it never keeps the process alive.
//!
//! A dflockd end is read from the registry here, never from the primitive: a report already
//! queued to the JS thread can arrive after its primitive was finalized (Deno's test runner
//! finalizes every wrapped object at teardown and keeps running the event loop,
//! denoland/deno#36556; reading the primitive then read freed memory, a SIGSEGV in
//! `Primitive::token`, core dump of 2026-11-25). A finalized primitive's route is gone
//! ([`LossRoute`]'s drop), so `takeHeldEnd` answers `null` and the JS handler touches nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use napi::bindgen_prelude::Function;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use sema_core::dflockd::LossCallback;
use sema_core::lockfile::{self, HeldEnd};

use crate::owner;

/// How a lock ended otherwise than through its handle: `lostReason` when it was lost, absent
/// when a file lock was released by path; `token` (dflockd) the token of the hold that was lost.
#[napi(object)]
pub struct NativeLockEnd {
    pub lost_reason: Option<String>,
    pub token: Option<String>,
}

/// A dflockd loss not asked for yet: the lost hold's token and why.
struct DflockdEnd {
    token: String,
    reason: String,
}

/// Ends of dflockd primitives whose JS object lives, by loss id (an entry exists from the
/// route's creation to its drop).
static DFLOCKD_ENDS: LazyLock<Mutex<HashMap<u64, VecDeque<DflockdEnd>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Ends kept per primitive that nobody asked for (its acquisition was over when they came):
/// the oldest dropped beyond this. A primitive holds one lock at a time, so one or two at most
/// wait in practice.
const DFLOCKD_ENDS_MAX: usize = 8;

fn ends() -> MutexGuard<'static, HashMap<u64, VecDeque<DflockdEnd>>> {
    DFLOCKD_ENDS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_id(id: f64) -> u64 {
    if id.is_finite() && id >= 0.0 {
        id as u64
    } else {
        0
    }
}

/// A JS thread's loss callbacks: one per copy of the JS layer loaded on it (a test runner's
/// fresh module registry, two installs over one binary), each told every report of the thread.
/// Each JS dispatcher answers only for the ids it knows (lib/losses.js), so one copy's locks are
/// told to it whatever the other copies do. Before, a second copy took the thread's one
/// callback over, and the first copy's locks were never told they were lost.
type LossHandler = Arc<dyn Fn(f64) + Send + Sync>;

static HANDLERS: LazyLock<Mutex<HashMap<u64, Vec<LossHandler>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn handlers() -> MutexGuard<'static, HashMap<u64, Vec<LossHandler>>> {
    HANDLERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Adds a loss callback of this JS thread: `callback(id)` runs (on this thread) for every lock
/// this thread holds that is found lost (a file lock or a dflockd lock/slot) or released by path
/// (`releaseAsAsync`, semats' `release`) rather than through its handle; `takeHeldEnd(id)` tells
/// which. Each thread hears about its own locks only; every callback of the thread hears all of
/// them. The callback is weak: it never keeps Node alive.
#[napi(ts_args_type = "callback: (id: number) => void")]
pub fn add_lock_lost_handler(env: Env, callback: Function<f64, ()>) -> napi::Result<()> {
    let owner = owner::of(&env)?;
    let tsfn = callback
        .build_threadsafe_function()
        .weak::<true>()
        .callee_handled::<false>()
        .build()?;
    let handler: LossHandler = Arc::new(move |id| {
        tsfn.call(id, ThreadsafeFunctionCallMode::NonBlocking);
    });
    let first = {
        let mut all = handlers();
        let list = all.entry(owner).or_default();
        list.push(handler);
        list.len() == 1
    };
    if first {
        lockfile::set_loss_hook(
            owner,
            Some(Box::new(move |id, _how| {
                let list = handlers().get(&owner).cloned().unwrap_or_default();
                for h in list {
                    h(id as f64);
                }
            })),
        );
    }
    Ok(())
}

/// The JS thread `owner` ended: its callbacks go (with the engine's hook, `owner::end`).
pub fn forget_handlers(owner: u64) {
    handlers().remove(&owner);
}

/// How the lock `id` ended, once, if it ended otherwise than through its handle: a file lock
/// lost or released by path (the engine keeps it for a handle that may be made after the loss
/// callback ran), a dflockd lock/slot lost (with the lost hold's token; oldest first when
/// several wait). `null` while held, after a release through the handle, once asked, and for a
/// dflockd primitive already finalized.
#[napi]
pub fn take_held_end(id: f64) -> Option<NativeLockEnd> {
    let id = to_id(id);
    if let Some(queue) = ends().get_mut(&id) {
        return queue.pop_front().map(|e| NativeLockEnd {
            lost_reason: Some(e.reason),
            token: Some(e.token),
        });
    }
    lockfile::take_held_end(id).map(|how| NativeLockEnd {
        lost_reason: match how {
            HeldEnd::Lost(reason) => Some(reason),
            HeldEnd::ReleasedByPath => None,
        },
        token: None,
    })
}

/// A dflockd primitive's place on its thread's loss channel: its id and its thread, for the
/// primitive's life (dropped with its JS object).
pub struct LossRoute {
    owner: u64,
    id: u64,
    held_back: Arc<Mutex<HeldBack>>,
}

/// A call whose result is on its way to the JS thread holds the primitive's loss reports back
/// until it is there: a loss read off the JS thread (tokio) right after the grant must reach JS
/// after the grant does, so that the JS side never hears of the loss of a lock it was not yet
/// told it holds.
#[derive(Default)]
struct HeldBack {
    /// The call in flight (0: none).
    call: u64,
    /// A report waits for it.
    pending: bool,
}

fn held_back(m: &Mutex<HeldBack>) -> MutexGuard<'_, HeldBack> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a call's result tells the route it reached the JS thread ([`LossRoute::settled`]).
pub struct RouteSettle {
    owner: u64,
    id: u64,
    held_back: Arc<Mutex<HeldBack>>,
}

impl RouteSettle {
    /// `call`'s result is on the JS thread now: a loss report it held back goes out (after it,
    /// as the report's callback runs on a later turn of the loop).
    pub fn settled(&self, call: u64) {
        let flush = {
            let mut h = held_back(&self.held_back);
            if h.call != call {
                return;
            }
            h.call = 0;
            std::mem::take(&mut h.pending)
        };
        if flush {
            lockfile::report_to_owner(self.owner, self.id, HeldEnd::Lost(String::new()));
        }
    }
}

impl LossRoute {
    /// A route for a primitive made on `env`'s thread.
    pub fn new(env: &Env) -> napi::Result<LossRoute> {
        let owner = owner::of(env)?;
        let id = lockfile::new_held_id();
        ends().insert(id, VecDeque::new());
        Ok(LossRoute {
            owner,
            id,
            held_back: Default::default(),
        })
    }

    /// Hold loss reports back while `call`'s result goes to the JS thread (see [`HeldBack`]);
    /// the returned handle's `settled(call)` releases them.
    pub fn hold_back_for(&self, call: u64) -> RouteSettle {
        held_back(&self.held_back).call = call;
        RouteSettle {
            owner: self.owner,
            id: self.id,
            held_back: self.held_back.clone(),
        }
    }

    /// A new call starts: ends of earlier holds still queued (their report came when no
    /// acquisition watched) are moot, and must not be read as the next hold's.
    pub fn forget_ends(&self) {
        if let Some(q) = ends().get_mut(&self.id) {
            q.clear();
        }
    }

    /// The id the thread's callback is called with.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The primitive's loss callback: keeps the end for `takeHeldEnd`, then names the id on
    /// the thread's channel; nothing once the route was dropped.
    pub fn callback(&self) -> LossCallback {
        let (owner, id) = (self.owner, self.id);
        let back = self.held_back.clone();
        Arc::new(move |_key: &str, token: &str, reason: &str| {
            {
                let mut ends = ends();
                let Some(queue) = ends.get_mut(&id) else {
                    return;
                };
                if queue.len() >= DFLOCKD_ENDS_MAX {
                    queue.pop_front();
                }
                queue.push_back(DflockdEnd {
                    token: token.to_string(),
                    reason: reason.to_string(),
                });
            }
            {
                let mut h = held_back(&back);
                if h.call != 0 {
                    h.pending = true;
                    return;
                }
            }
            lockfile::report_to_owner(owner, id, HeldEnd::Lost(reason.to_string()));
        })
    }
}

impl Drop for LossRoute {
    fn drop(&mut self) {
        ends().remove(&self.id);
    }
}

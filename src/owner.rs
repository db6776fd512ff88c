//! Which JS thread holds a lock. Every Node environment (the main thread, each worker thread)
//! that loads the addon gets its own owner id; the locks it takes are given to that id in the
//! engine's registry, its loss callback hears only about them, and when the environment ends
//! (a worker exits or is terminated) only they are released. The process's own exit releases
//! everyone's (the JS layer's `'exit'` hook on the main thread).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use napi::Env;
use sema_core::lockfile::{self, HeldLock, NO_OWNER};

/// The instance data of one environment: its owner id.
struct EnvOwner(u64);

/// Owners whose environment is still alive. A lock granted to an owner that has already ended
/// (an acquire still in flight when its worker exited) is released at once by [`claim`].
static LIVE: LazyLock<Mutex<HashSet<u64>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

fn live() -> MutexGuard<'static, HashSet<u64>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The owner id of `env`, created on first use with a cleanup hook that releases its locks.
pub fn of(env: &Env) -> napi::Result<u64> {
    if let Some(owner) = env.get_instance_data::<EnvOwner>()? {
        return Ok(owner.0);
    }
    static NEXT: AtomicU64 = AtomicU64::new(NO_OWNER + 1);
    let owner = NEXT.fetch_add(1, Ordering::Relaxed);
    env.set_instance_data(EnvOwner(owner), (), |_| {})?;
    live().insert(owner);
    env.add_env_cleanup_hook(owner, end)?;
    Ok(owner)
}

/// The environment of `owner` is ending: no more callbacks to it, and its locks are released.
fn end(owner: u64) {
    live().remove(&owner);
    lockfile::set_loss_hook(owner, None);
    crate::losses::forget_handlers(owner);
    lockfile::release_all_held_by(owner);
}

/// Who a lock file's fresh locks go to: the owner (JS thread), and whether that thread keeps a
/// handle per lock that must hear of a release by path (the target API's `Lock`; semats'
/// `Semaphore` keeps none).
#[derive(Clone, Copy)]
pub struct Claim {
    pub owner: u64,
    pub handles: bool,
}

/// Gives a fresh lock to `claim.owner`. `false` (and the lock released) when that owner's
/// environment has already ended: nobody could ever release it. The owner is set before the
/// check, so either this check sees the owner gone or `end`'s release (which runs after its
/// removal from `LIVE`) sees the lock.
pub fn claim(held: &HeldLock, claim: Claim) -> bool {
    let owner = claim.owner;
    held.set_owner(owner);
    if claim.handles {
        held.keep_for_handle();
    }
    if live().contains(&owner) {
        return true;
    }
    let _ = held.release();
    false
}

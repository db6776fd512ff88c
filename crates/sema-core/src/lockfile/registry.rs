//! The registry of held locks: every lock this process holds, by id, until it is released or
//! lost (dropping every handle does not release a lock: an exit hook still finds it here), the
//! per-owner loss callbacks (an owner is, for example, one JS thread), and how the locks whose
//! owner keeps a handle ended, until that handle asks.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use super::held::HeldLock;
use super::process::current_pid;
use super::unpoisoned;

/// Every held lock by id. Ids are counters, so std's hasher costs ~20 ns per acquisition
/// here, against microseconds for the file calls: no hasher of our own.
pub(super) static REGISTRY: LazyLock<Mutex<HashMap<u64, HeldLock>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

pub(super) static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id from the held locks' id space, for a lock of another backend (a dflockd
/// primitive) reported through the same per-owner loss hook ([`report_to_owner`]): one id
/// space, so one JS callback per thread tells both backends' locks apart by id alone.
pub fn new_held_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Tell `owner`'s [`set_loss_hook`] callback that the lock `id` (from [`new_held_id`]) ended as
/// `how`; nothing is kept for [`take_held_end`] (its backend keeps its own ends).
pub fn report_to_owner(owner: u64, id: u64, how: HeldEnd) {
    notify_owner(owner, id, how, false);
}

/// Every lock this process holds (e.g. for an exit hook).
pub fn held_locks() -> Vec<HeldLock> {
    unpoisoned(&REGISTRY).values().cloned().collect()
}

/// The held lock with this [`HeldLock::id`], while it is held (released or lost locks leave
/// the registry).
pub fn held_lock_by_id(id: u64) -> Option<HeldLock> {
    unpoisoned(&REGISTRY).get(&id).cloned()
}

/// The first lock this process holds on the canonical path `key`.
pub(super) fn held_on_key(key: &Path) -> Option<HeldLock> {
    find_held(|h| h.inner.file.key.as_os_str() == key.as_os_str())
}

/// Before this process refuses the canonical path `key` because one of its own locks holds
/// it: every lock held here on `key` whose file is gone or no longer ours is found lost now
/// (reported through the loss channel, its turn freed), instead of at the next heartbeat. Only
/// when the in-process turn is taken: one `stat` and one `pread` per lock held on `key`.
/// `true` = at least one was found lost.
pub(super) fn lose_held_whose_file_went(key: &Path) -> bool {
    let on_key: Vec<HeldLock> = unpoisoned(&REGISTRY)
        .values()
        .filter(|h| h.inner.file.key.as_os_str() == key.as_os_str())
        .cloned()
        .collect();
    // Every one is looked at (not `any`, which would stop at the first lost).
    let lost = on_key
        .iter()
        .filter(|held| held.lose_if_not_on_disk())
        .count();
    lost > 0
}

/// The held lock with this ownership token (none for an empty token). Searched under the
/// registry's lock: only the match is cloned.
pub fn held_with_token(token: &str) -> Option<HeldLock> {
    if token.is_empty() {
        return None;
    }
    find_held(|h| h.inner.token() == token)
}

/// Whether this process holds a lock on the canonical path `key` with this token.
pub(super) fn holds(key: &Path, token: &str) -> bool {
    find_held(|h| h.inner.file.key == key && h.inner.token() == token).is_some()
}

fn find_held(matches: impl Fn(&HeldLock) -> bool) -> Option<HeldLock> {
    unpoisoned(&REGISTRY).values().find(|h| matches(h)).cloned()
}

/// How a held lock stopped being held otherwise than through its own handle, as told to its
/// owner's [`set_loss_hook`] callback and kept for [`take_held_end`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldEnd {
    /// Found lost (file removed, replaced or overwritten), with the reason.
    Lost(String),
    /// Released by path ([`LockFile::release_as`](super::LockFile::release_as)), not through its own handle: the handle's
    /// owner learns that it no longer holds it.
    ReleasedByPath,
}

/// An owner's loss callback: `(lock id, how it ended)`.
pub type LossCallback = dyn Fn(u64, &HeldEnd) + Send + Sync;

pub(super) type LossHook = Arc<LossCallback>;

/// One callback per owner ([`HeldLock::set_owner`]): in a process with several JS threads, each
/// thread's locks are reported to that thread only.
pub(super) static LOSS_HOOKS: LazyLock<Mutex<HashMap<u64, LossHook>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Set the callback told `(id, how)` whenever a lock of `owner` is found lost (after its
/// `lost_reason` is set and its `finished`/`lost` tokens are cancelled) or released by path.
/// One hook for all of an owner's locks, instead of a task per lock; `None` removes it.
pub fn set_loss_hook(owner: u64, hook: Option<Box<LossCallback>>) {
    let mut hooks = unpoisoned(&LOSS_HOOKS);
    match hook {
        Some(h) => {
            hooks.insert(owner, Arc::from(h));
        }
        None => {
            hooks.remove(&owner);
        }
    }
}

/// Keep how the lock `id` ended for [`take_held_end`] (the oldest dropped beyond [`ENDS_MAX`]).
pub(super) fn keep_end(id: u64, how: &HeldEnd) {
    let mut ends = unpoisoned(&ENDS);
    ends.insert(id, how.clone());
    if ends.len() > ENDS_MAX {
        ends.pop_first();
    }
}

/// Tell `owner` how its lock `id` ended; with `keep`, first keep it for [`take_held_end`] (the
/// owner keeps a handle per lock, which may not exist yet when the callback runs: a loss found
/// between the grant and the handle's creation is answered when the handle asks).
pub(super) fn notify_owner(owner: u64, id: u64, how: HeldEnd, keep: bool) {
    if owner == NO_OWNER {
        return;
    }
    if keep {
        keep_end(id, &how);
    }
    let hook = unpoisoned(&LOSS_HOOKS).get(&owner).cloned();
    if let Some(hook) = hook {
        hook(id, &how);
    }
}

/// Ends kept for handles not yet told: a handle asks once, when it is made and when its owner's
/// callback names it; one a handle never asks for (its thread ended first) is dropped, oldest
/// lock first, beyond [`ENDS_MAX`].
static ENDS: LazyLock<Mutex<BTreeMap<u64, HeldEnd>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// Far more than the ends that can fall between a grant and its handle's creation (one turn of
/// the owner's event loop).
const ENDS_MAX: usize = 1024;

/// How the lock `id` ended, once, if it ended otherwise than through its own handle and its
/// owner keeps a handle ([`HeldLock::keep_for_handle`]); `None` while it is held, after
/// a release through its handle, or once asked.
pub fn take_held_end(id: u64) -> Option<HeldEnd> {
    unpoisoned(&ENDS).remove(&id)
}

/// The owner of a lock no caller claimed ([`HeldLock::set_owner`] never called).
pub const NO_OWNER: u64 = 0;

/// Release every lock this process holds (synchronous; for the exit of the process). Errors
/// are ignored: at exit there is nobody to report them to.
pub fn release_all_held() {
    release_held_where(|_| true);
}

/// Release every lock of `owner` ([`HeldLock::set_owner`]; e.g. a JS thread that exits while
/// the process goes on). Other owners' locks are left alone.
pub fn release_all_held_by(owner: u64) {
    release_held_where(|h| h.owner() == owner);
}

pub(super) fn release_held_where(select: impl Fn(&HeldLock) -> bool) {
    // Locks recorded for another owner (`AcquireRequest::owner_pid`, the CLI's `--pid`) belong to
    // that process and outlive this one: its owner releases them.
    let me = current_pid();
    let ours: Vec<HeldLock> = unpoisoned(&REGISTRY)
        .values()
        .filter(|h| h.inner.info.pid == me && select(h))
        .cloned()
        .collect();
    for held in ours {
        let _ = held.release();
    }
}

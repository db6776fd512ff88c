//! File-Based Semaphore lock files, shared with the `sema` (Rust) and `semats` (TypeScript)
//! tools, with these guarantees:
//!
//! - [`format`](mod@format): exactly the bytes both tools write (`pid=`, `timestamp=`, `tag=`), then our
//!   `host=`, `start=`, `token=`; semats' parse rules.
//! - Atomic creation of a complete file (O_TMPFILE + `linkat`, or a named temp file + `link`),
//!   never check-then-rename.
//!
//! # Where each part lives
//!
//! [`LockFile`] (`lock_file.rs`: a path with its [`LockOptions`] from `options.rs`) is acquired
//! in `acquire.rs` (entry points and waiting: the in-process FIFO of `fifo.rs`, the
//! cross-process line of `queue/`, file events of `watch/`), one attempt at a time in
//! `attempt.rs`, which breaks stale locks through `breaking.rs` (judged by `stale.rs`). A won
//! attempt is a [`HeldLock`] (`held.rs`), kept in `registry.rs`, refreshed by `heartbeat.rs`,
//! ended by `release.rs`. A counting semaphore ([`Semaphore`], `semaphore/`) is N such lock
//! files of one base path, taken by the same attempt and held as the same [`HeldLock`]s; its
//! decisions are the pure functions of `semaphore/plan.rs`. `listing.rs` only looks: the locks of a directory with their judgement
//! and holder facts (for `ls`, `top` and the waiting line). Every system call goes through `sys/` (and `process/` for process
//! facts): the only folders that know which system they run on.
//!
//! - [`stale`]: one pure judgement; a dead holder on this host is reclaimed at once, a live one
//!   never; foreign files follow semats' rule; unparseable files expire by mtime.
//! - The holder's presence: an OFD write lock on its lock file (a reader cannot imitate it) and,
//!   for older versions, a shared `flock`; a present holder is never broken.
//! - Race-safe stale breaking (a per-user break lock and the exclusive flock, same inode never
//!   followed, identical content, then unlink); a symlink at the lock path is never followed.
//! - A heartbeat that refreshes a held lock's timestamp and detects loss.
//! - Fair waiting: an in-process FIFO per lock path, woken by inotify/kqueue events with
//!   polling as the fallback.
//! - [`owner`]: the one "is this lock mine?" rule ([`LockFile::is_mine`]): the token and host
//!   identity (pid namespace included), the pid alone only for files without identity.
//!
//! # For callers (the napi bindings, the CLI)
//!
//! - [`LockFile::acquire`], [`LockFile::acquire_in_order`] and [`LockFile::wait_until_free`]
//!   must be polled inside a tokio runtime with time enabled (their futures are `Send`).
//!   [`HeldLock::start_heartbeat`] only adds the lock to the one process-wide heartbeat
//!   thread's list. Everything else is synchronous and
//!   needs no runtime; with `fsync` on, [`LockFile::try_acquire`] and [`HeldLock::release`] do
//!   disk syncs, so run them off the JS thread.
//! - `acquire` with a zero timeout makes exactly one attempt and reports `Timeout` (semats'
//!   `acquire({timeout: 0})`); `try_acquire` reports `AlreadyLocked` with the holder.
//! - A [`HeldLock`] is not released when its handles are dropped: the process-wide registry
//!   keeps it until [`HeldLock::release`], loss, or [`release_all_held`] (an exit hook), or
//!   [`release_all_held_by`] for the locks of one owner ([`HeldLock::set_owner`], e.g. a JS
//!   thread that exits while the process goes on). A CLI
//!   whose lock must outlive it (`--pid`) must not run that hook for it.
//! - [`LockFile::acquire_in_order`] takes the in-process FIFO place on the calling thread (for
//!   bindings that spawn the future elsewhere); [`LockFile::acquire_now`] before it makes the
//!   uncontended attempt on a thread that must not block, when that attempt is short. Loss of any held lock can be observed per lock
//!   ([`HeldLock::lost`]) or per owner by id ([`set_loss_hook`], [`held_lock_by_id`]).
//! - Call [`HeldLock::start_heartbeat`] after every successful acquisition, or long-held locks
//!   age on other hosts and loss goes unnoticed until `release()`.
//! - A lock in our format whose recorded owner process has died is reclaimable at once on this
//!   host. A semats-compatible CLI whose lock must survive its own exit can write semats'
//!   format instead ([`LockFile::with_extra_keys`]`(false)`).
//! - Stricter than semats, opt-in: [`LockOptions`] `foreign_start_check: true` (a live pid that
//!   started after a foreign lock's timestamp is treated as reused) and
//!   `release_young_unparseable: false` (a fresh unparseable file is not deleted by
//!   `release(false)`). The defaults follow semats. semats' `status().isStale` (age only) is
//!   [`is_lock_stale_by_age`].

mod acquire;
mod attempt;
mod breaking;
mod closer;
pub mod error;
mod events;
mod fifo;
pub mod format;
mod hand_over;
pub(crate) mod heartbeat;
mod held;
pub mod listing;
mod lock_file;
mod options;
pub mod owner;
pub mod paths;
pub mod process;
mod queue;
mod registry;
mod release;
mod rng;
mod semaphore;
pub mod shared;
pub mod stale;
mod sys;
mod watch;

#[doc(hidden)]
pub use acquire::blocking_attempt_count;
pub use acquire::{AcquireNow, Claimed, Tried};
pub use error::{Holder, LockError};
pub use format::{
    is_js_whitespace, js_trim, parse_js_int, parse_lock_info, parse_sema_lock_info,
    read_lock_bytes_lossy, sanitize_tag, LockInfo, ParseError, SemaLockInfo, MAX_LOCK_FILE_BYTES,
};
pub use held::HeldLock;
pub use listing::{describe_lock, list_locks, ListedLock, ListedState};
pub use lock_file::LockFile;
pub use options::{AcquireRequest, LockOptions, LockStatus};
pub use owner::{owns, Claimant};
pub use paths::{ensure_user_lock_dir, is_directory, validate_lock_path, validate_semats_path};
pub use process::{
    current_pid, host_identity, is_process_running, now_unix_secs, process_args,
    process_start_ticks, Liveness,
};
pub use registry::{
    held_lock_by_id, held_locks, held_with_token, new_held_id, release_all_held,
    release_all_held_by, report_to_owner, set_loss_hook, take_held_end, HeldEnd, LossCallback,
    NO_OWNER,
};
pub use semaphore::{
    after_grant, may_try, plan, AfterGrant, Line, Plan, Semaphore, SemaphoreNow, SemaphoreStatus,
    SemaphoreTried, Sibling, SlotName, SlotState, Standing,
};
pub use shared::{Mode, SharedLock, SharedStatus};
pub use stale::{
    is_lock_stale_by_age, judge, reclaim, HeldBecause, Observation, OsProbe, ProcessProbe, Reclaim,
    ReclaimRule, StaleBecause, StaleContext, StaleJudgement,
};
#[doc(hidden)]
pub use sys::{CreationStrategy, Fallback, FileSystem};
#[doc(hidden)]
pub use watch::{ignored_event_count, watched_directory_count};

/// A mutex's guard, also after a panic elsewhere poisoned it (every value guarded here stays
/// consistent between statements).
fn unpoisoned<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

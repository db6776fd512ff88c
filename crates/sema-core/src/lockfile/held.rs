//! `HeldLock`: a lock this process holds. Its state (descriptor, bytes on disk, loss) lives
//! here once; the registry (`registry.rs`) finds it by id, the heartbeat (`heartbeat.rs`)
//! refreshes it, `release.rs` ends it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::error::LockError;
use super::format::{parse_lock_info, read_lock_bytes_lossy, LockInfo};
use super::heartbeat;
use super::lock_file::FileInner;
use super::process::now_unix_secs;
use super::registry::{keep_end, notify_owner, HeldEnd, NO_OWNER, REGISTRY};
use super::sys::{self, FileId};
use super::unpoisoned;

/// A lock this process holds. Clones share one lock. It stays held until [`HeldLock::release`],
/// [`release_all_held`](super::release_all_held) or loss: dropping every handle does NOT release it (the registry keeps
/// it, so an exit hook can still release it).
///
/// A lock can be lost while held (its file removed or replaced by someone else): the heartbeat,
/// or this process's next acquire of the path, finds it, and [`HeldLock::lost`] is cancelled.
///
/// ```
/// use sema_core::lockfile::{AcquireRequest, LockFile, LockOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let path = dir.path().join("job.lock");
/// let file = LockFile::new(path.clone(), LockOptions::default());
/// let held = file.try_acquire(&AcquireRequest::default())?;
/// assert!(held.is_held() && held.is_on_disk());
/// assert_eq!(held.info().pid, i64::from(std::process::id()));
///
/// std::fs::remove_file(&path)?; // someone removes it
/// let next = file.try_acquire(&AcquireRequest::default())?; // the path is free again
/// assert!(held.lost().is_cancelled());
/// assert_eq!(held.lost_reason().as_deref(), Some("lock file was removed"));
/// assert!(!held.release()?, "a lost lock releases nothing");
/// next.release()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    pub(super) inner: Arc<HeldInner>,
}

pub(super) struct HeldInner {
    pub(super) id: u64,
    /// Who holds it inside this process ([`HeldLock::set_owner`]), e.g. one JS thread.
    pub(super) owner: AtomicU64,
    /// Its owner keeps a handle that must learn how it ended ([`HeldLock::keep_for_handle`]).
    pub(super) handle_kept: AtomicBool,
    /// The lock path's shared part (path, canonical key, options).
    pub(super) file: Arc<FileInner>,
    pub(super) info: LockInfo,
    pub(super) state: Mutex<HeldState>,
}

pub(super) struct HeldState {
    /// Our descriptor, with the shared flock. `None` once finished.
    pub(super) file: Option<File>,
    pub(super) file_id: FileId,
    /// The exact bytes on disk now (what we wrote, as refreshed by the heartbeat).
    pub(super) content: Vec<u8>,
    /// The content was synced before the link: [`HeldLock::sync_durable`] syncs only the
    /// directory.
    pub(super) content_synced: bool,
    /// The timestamp on disk now (refreshed by the heartbeat; the rest is `info`).
    pub(super) timestamp: i64,
    /// The process recorded as the holder now, when it is not us: (pid, start) of the command
    /// `sema-native run` handed the lock to ([`HeldLock::hand_over`]).
    pub(super) handed_to: Option<(i64, Option<u64>)>,
    /// Created on demand (most holders never ask); cancelled by `finish` / `lose`.
    pub(super) lost: Option<CancellationToken>,
    pub(super) stop: Option<CancellationToken>,
    /// No longer held (released or lost); the descriptor is closed.
    pub(super) finished: bool,
    /// `release()` (or `release_all_held`) was called.
    pub(super) released: bool,
    pub(super) lost_reason: Option<String>,
    pub(super) turn: Option<OwnedSemaphorePermit>,
    pub(super) heartbeat_started: bool,
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("path", &self.inner.file.path)
            .field("info", &self.inner.info)
            .finish_non_exhaustive()
    }
}

pub(super) enum Ownership {
    Ours,
    Lost(&'static str),
    Unknown(io::Error),
}

impl HeldInner {
    pub(super) fn path(&self) -> &Path {
        &self.file.path
    }

    pub(super) fn token(&self) -> &str {
        self.info.token.as_deref().unwrap_or("")
    }

    /// What is on disk now.
    pub(super) fn current(&self, state: &HeldState) -> LockInfo {
        let (pid, start) = state.handed_to.unwrap_or((self.info.pid, self.info.start));
        LockInfo {
            pid,
            start,
            timestamp: state.timestamp,
            ..self.info.clone()
        }
    }

    /// One `stat` of the path (our inode?) and one `pread` through our descriptor (our bytes?).
    pub(super) fn ownership(&self, state: &HeldState) -> Ownership {
        let Some(file) = state.file.as_ref() else {
            return Ownership::Lost("lock file was removed");
        };
        match sys::stat_id(self.path(), Some(&self.file.os_path)) {
            Ok(id) if id == state.file_id => {}
            Ok(_) => return Ownership::Lost("lock file was replaced"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ownership::Lost("lock file was removed")
            }
            Err(e) => return Ownership::Unknown(e),
        }
        let bytes = match sys::content_equals(file, &state.content) {
            Ok(None) => return Ownership::Ours,
            Ok(Some(bytes)) => bytes,
            Err(e) => return Ownership::Unknown(e),
        };
        // Not byte-identical: still ours if it carries our token (e.g. a heartbeat rewrite whose
        // truncate failed). Without a token (plain format) the whole content must be ours.
        let ours = self.info.token.is_some()
            && matches!(parse_lock_info(&read_lock_bytes_lossy(&bytes)),
                Ok(info) if info.token.as_deref() == Some(self.token()));
        if ours {
            Ownership::Ours
        } else {
            Ownership::Lost("lock file was overwritten")
        }
    }

    /// Stop holding: close the descriptor, free the turn, leave the registry and the
    /// heartbeat list.
    pub(super) fn finish(&self, state: &mut HeldState) {
        state.finished = true;
        // The inode's last reference: on a disk its freeing is left to the closer thread (see
        // `closer`). On a memory file system freeing it is no I/O and waking the closer thread
        // costs more than the close: one process on tmpfs, 20 000 `Semaphore` acquire + counter
        // + release cycles (bench/file-hops.js `--cycles`), voluntary switches 0.95 → 0.006 and
        // futex calls 1.9 → 0.05 per cycle; CPU per cycle, JS thread 50–57 → 42 µs, all threads
        // 62–85 → 43 µs (the futex wake alone was 12% of the process's samples).
        if let Some(file) = state.file.take() {
            if self.file.fs == sys::FsKind::Memory {
                drop(file);
            } else {
                super::closer::close_later(file);
            }
        }
        state.turn = None;
        if let Some(t) = &state.stop {
            t.cancel();
        }
        unpoisoned(&REGISTRY).remove(&self.id);
        if state.heartbeat_started {
            heartbeat::remove(self.id);
        }
    }

    pub(super) fn lose(&self, state: &mut HeldState, reason: &str) {
        state.lost_reason = Some(reason.to_string());
        self.finish(state);
        let owner = self.owner.load(Ordering::Acquire);
        let how = HeldEnd::Lost(reason.to_string());
        // Kept BEFORE the token is cancelled: a task woken by the cancel that asks
        // `take_held_end` at once must find it (kept after, it raced: lockfile_held's
        // `the_end_of_a_handled_lock_is_kept_until_asked_once` saw None under load).
        if owner != NO_OWNER && self.handle_kept.load(Ordering::Acquire) {
            keep_end(self.id, &how);
        }
        // The owner is told BEFORE the token is cancelled, for the same reason: a task woken by
        // the cancel must find the owner told (told after, lockfile_held's
        // `loss_hook_reports_id_and_reason_to_the_owner_only` saw no report 1 run in 5 under load).
        notify_owner(owner, self.id, how, false);
        if let Some(t) = &state.lost {
            t.cancel();
        }
    }

    /// Verify that the lock is still ours, then rewrite its file in place with the current
    /// record, `edit` applied and the timestamp refreshed (the heartbeat; a hand-over).
    /// `Ok(true)`: written. `Ok(false)`: no longer ours (finished, or found lost, which is
    /// reported). `Err`: ownership could not be told, or the write failed; nothing changed.
    pub(super) fn rewrite_if_ours(
        &self,
        state: &mut HeldState,
        edit: impl FnOnce(&mut LockInfo),
    ) -> io::Result<bool> {
        if state.finished {
            return Ok(false);
        }
        match self.ownership(state) {
            Ownership::Ours => {}
            Ownership::Lost(reason) => {
                self.lose(state, reason);
                return Ok(false);
            }
            Ownership::Unknown(e) => return Err(e),
        }
        let mut next = self.current(state);
        edit(&mut next);
        next.timestamp = now_unix_secs();
        let content = next.serialize().into_bytes();
        // `ownership` is `Lost` without a file: it is there.
        let Some(file) = state.file.as_ref() else {
            return Ok(false);
        };
        sys::rewrite_in_place(file, &content, state.content.len())?;
        state.content = content;
        state.timestamp = next.timestamp;
        Ok(true)
    }
}

impl HeldLock {
    /// Give the lock to `owner` (an id the caller chose, not [`NO_OWNER`](super::NO_OWNER)): its loss is told to
    /// that owner's [`set_loss_hook`](super::set_loss_hook) callback and [`release_all_held_by`](super::release_all_held_by) releases it. Call it
    /// before [`HeldLock::start_heartbeat`], so that no loss goes unreported.
    pub fn set_owner(&self, owner: u64) {
        self.inner.owner.store(owner, Ordering::Release);
    }

    /// The owner given by [`HeldLock::set_owner`], or [`NO_OWNER`](super::NO_OWNER).
    pub fn owner(&self) -> u64 {
        self.inner.owner.load(Ordering::Acquire)
    }

    /// Its owner keeps a handle per lock that must learn how the lock ended: a release by path is
    /// reported to the owner's [`set_loss_hook`](super::set_loss_hook) callback too
    /// ([`HeldEnd::ReleasedByPath`]), and every end but a release through the handle is kept for
    /// [`take_held_end`](super::take_held_end). Only for such owners: a report per release would
    /// otherwise cost every plain release by path a cross-thread call.
    pub fn keep_for_handle(&self) {
        self.inner.handle_kept.store(true, Ordering::Release);
    }

    /// Tell the owner that this lock was released by path, not through its handle (if it asked).
    pub(super) fn notify_released_by_path(&self) {
        if self.inner.handle_kept.load(Ordering::Acquire) {
            notify_owner(self.owner(), self.inner.id, HeldEnd::ReleasedByPath, true);
        }
    }

    /// This lock's id in the process-wide registry ([`held_lock_by_id`](super::held_lock_by_id)).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// What was written at acquisition (sanitised tag, our pid/timestamp/host/start/token).
    pub fn info(&self) -> LockInfo {
        self.inner.info.clone()
    }

    /// The pid and timestamp written at acquisition, and the sanitised tag, borrowed.
    pub fn info_ref(&self) -> &LockInfo {
        &self.inner.info
    }

    /// What is on disk now (the timestamp as last refreshed by the heartbeat).
    pub fn current_info(&self) -> LockInfo {
        let state = unpoisoned(&self.inner.state);
        self.inner.current(&state)
    }

    pub fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Our ownership token (empty for a lock in the plain format, which has none).
    pub fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// The descriptor of the lock file while the lock is held (close-on-exec). A child process
    /// given a copy of it (e.g. as an inherited stdio slot, as `flock(1)` does) carries the
    /// holder's presence mark and `flock` with it: while that child lives the lock stays held,
    /// even after this process died.
    /// `None` when the lock is no longer held or the system has no such handle. (A descriptor
    /// number on Unix.)
    pub fn raw_handle(&self) -> Option<i64> {
        unpoisoned(&self.inner.state)
            .file
            .as_ref()
            .and_then(sys::raw_handle)
    }

    /// Cancelled when the lock is found lost (file removed, replaced or overwritten).
    pub fn lost(&self) -> CancellationToken {
        let mut state = unpoisoned(&self.inner.state);
        let lost = state.lost_reason.is_some();
        state
            .lost
            .get_or_insert_with(|| {
                let t = CancellationToken::new();
                if lost {
                    t.cancel();
                }
                t
            })
            .clone()
    }

    /// Cancelled when the lock stops being held for any reason (released or lost); check
    /// [`HeldLock::lost_reason`] to tell which.
    pub fn finished(&self) -> CancellationToken {
        let mut state = unpoisoned(&self.inner.state);
        let finished = state.finished;
        state
            .stop
            .get_or_insert_with(|| {
                let t = CancellationToken::new();
                if finished {
                    t.cancel();
                }
                t
            })
            .clone()
    }

    /// Why the lock was lost, once it was.
    pub fn lost_reason(&self) -> Option<String> {
        unpoisoned(&self.inner.state).lost_reason.clone()
    }

    /// The path still names our file with our content (token), right now.
    pub fn is_on_disk(&self) -> bool {
        let state = unpoisoned(&self.inner.state);
        !state.finished && matches!(self.inner.ownership(&state), Ownership::Ours)
    }

    /// Looks at the file now: when it is gone or no longer ours (removed, replaced,
    /// overwritten), the lock is lost here and then, told to its owner as the heartbeat would
    /// tell it, and its in-process turn is free. `true` = it was found lost now. A lock whose
    /// ownership cannot be told (an I/O error) is left held.
    pub(super) fn lose_if_not_on_disk(&self) -> bool {
        let mut state = unpoisoned(&self.inner.state);
        if state.finished {
            return false;
        }
        match self.inner.ownership(&state) {
            Ownership::Lost(reason) => {
                self.inner.lose(&mut state, reason);
                true
            }
            Ownership::Ours | Ownership::Unknown(_) => false,
        }
    }

    /// `release()` has been called (successfully, or on a lost lock).
    pub fn is_released(&self) -> bool {
        unpoisoned(&self.inner.state).released
    }

    /// Neither released nor lost.
    pub fn is_held(&self) -> bool {
        !unpoisoned(&self.inner.state).finished
    }

    pub(super) fn keep_turn(&self, turn: OwnedSemaphorePermit) {
        let mut state = unpoisoned(&self.inner.state);
        if !state.finished {
            state.turn = Some(turn);
        }
    }

    /// fsync our file (unless its content was synced before the link) and its directory (after
    /// a link made without them). On failure the lock is released (only if still ours) and the
    /// error returned.
    pub(super) fn sync_durable(&self) -> Result<(), LockError> {
        let synced = {
            let state = unpoisoned(&self.inner.state);
            match state.file.as_ref() {
                Some(_) if state.content_synced => Ok(()),
                Some(file) => file.sync_all(),
                None => Ok(()),
            }
        };
        if let Err(e) = synced {
            let _ = self.release();
            return Err(LockError::io("Failed to create lock", e));
        }
        if let Some(dir) = self.inner.path().parent() {
            sys::fsync_dir(dir);
        }
        Ok(())
    }
}

//! Releasing: a held lock through its handle ([`HeldLock::release`]), a lock by path on behalf
//! of a pid ([`LockFile::release_as`], semats' `release(force)`), and `clean_stale`.

use std::io;
use std::time::Duration;

use super::breaking::Examined;
use super::error::LockError;
use super::format::LockInfo;
use super::held::{HeldLock, Ownership};
use super::lock_file::{age_of, LockFile};
use super::owner::{owns, Claimant};
use super::registry::{held_locks, held_on_key};
use super::stale::Observation;
use super::sys::{self, FsKind};
use super::unpoisoned;

/// Our leftover temp files older than this are removed by `clean_stale`.
const TEMP_FILE_MAX_AGE: Duration = Duration::from_secs(60);

/// How many create → examine → break rounds `clean_stale` makes.
const MAX_ROUNDS: usize = 16;

/// Outcome of [`HeldLock::release_if`].
pub(super) enum ReleaseIf {
    Released,
    /// The condition refused; the pid on disk.
    Refused(i64),
    /// Not (any more) ours on disk, or already finished: nothing was deleted.
    NotOurs,
    Failed(LockError),
}

impl LockFile {
    /// semats' `Semaphore.release(force)`: no file → `NotLocked`; a lock that is not
    /// `owner_pid`'s (this process's, or the CLI's `--pid`; decided by [`LockFile::is_mine`]: the
    /// token and host identity, the pid alone only for files without identity) and no `force` →
    /// `PermissionDenied`; a lock this process holds through a [`HeldLock`] is released properly;
    /// otherwise the file is unlinked.
    ///
    /// Deviation from semats (documented): an unparseable file is deleted without `force` only
    /// when older than `pending_write_grace` (it may be a lock being written); a younger one
    /// gives `PermissionDenied { holder_pid: None }`.
    pub fn release_as(&self, owner_pid: i64, force: bool) -> Result<(), LockError> {
        // A lock this process holds on this path, still ours on disk: one stat, one read, one
        // unlink (the content read through our descriptor tells the recorded pid).
        if let Some(held) = held_on_key(&self.key) {
            // Judged on what it was recorded for (this process, or the pid `acquire` was given):
            // a lock taken on behalf of another pid is that pid's to release by path.
            let claimant = Claimant::of(owner_pid);
            // A shared base names one reader's pid but belongs to the readers' group (their
            // `.reader-*` files): no pid owns it by path, and removing it under them would let a
            // writer in beside them (the files simulator's seed 295).
            let releasable = |recorded: &LockInfo| {
                force
                    || (owns(recorded, &claimant, |_| false) && !self.is_shared_base_info(recorded))
            };
            match held.release_if(releasable) {
                ReleaseIf::Released => {
                    held.notify_released_by_path();
                    return Ok(());
                }
                ReleaseIf::Refused(pid) => {
                    return Err(LockError::PermissionDenied {
                        holder_pid: Some(pid),
                    })
                }
                ReleaseIf::NotOurs => {}
                ReleaseIf::Failed(e) => return Err(e),
            }
        }
        for round in 0..4 {
            let (observation, id) = self.observe_with_id();
            match &observation {
                Observation::Missing => return Err(LockError::NotLocked),
                Observation::Symlink => return Err(self.symlink_error()),
                Observation::Parsed { info, .. } => {
                    if !force && (!self.is_mine(info, owner_pid) || self.is_shared_base_info(info))
                    {
                        return Err(LockError::PermissionDenied {
                            holder_pid: Some(info.pid),
                        });
                    }
                }
                Observation::Unparseable { age, .. } => {
                    if !force
                        && !self.options.release_young_unparseable
                        && *age < self.options.pending_write_grace
                    {
                        return Err(LockError::PermissionDenied { holder_pid: None });
                    }
                }
            }
            // A lock this process holds on this path: release it properly.
            for held in held_locks() {
                if held.inner.file.key == self.key && held.is_on_disk() {
                    match held.release() {
                        Ok(true) => {
                            held.notify_released_by_path();
                            return Ok(());
                        }
                        Ok(false) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            // Plain unlink, of the file we looked at (unless it keeps changing).
            let same = match (std::fs::symlink_metadata(&self.path), id) {
                (Ok(m), Some(id)) => sys::file_id(&m) == id,
                (Err(e), _) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(LockError::NotLocked)
                }
                _ => false,
            };
            if !same && round < 3 {
                continue;
            }
            return match std::fs::remove_file(&self.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LockError::NotLocked),
                Err(e) => Err(LockError::io("Failed to release lock", e)),
            };
        }
        Err(LockError::NotLocked)
    }

    /// semats' `cleanStale()` minus its flaws: removes the lock only if judged stale, through
    /// the race-safe break; removes only OUR OWN leftover temp files (`.<basename>.<16
    /// hex>.sema-tmp` older than 60 s), never other tools' files. Returns whether anything was
    /// removed.
    pub fn clean_stale(&self) -> Result<bool, LockError> {
        let mut removed = false;
        if let (Some(dir), Some(base)) = (self.path.parent(), self.path.file_name()) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if !sys::is_our_temp_name(&entry.file_name(), base) {
                        continue;
                    }
                    let Ok(meta) = entry.metadata() else { continue };
                    if meta.is_file()
                        && age_of(&meta) > TEMP_FILE_MAX_AGE
                        && std::fs::remove_file(entry.path()).is_ok()
                    {
                        removed = true;
                    }
                }
            }
        }
        for _ in 0..MAX_ROUNDS {
            match self.examine_and_break() {
                Examined::Broken => return Ok(true),
                Examined::Changed => continue,
                Examined::Symlink => return Err(self.symlink_error()),
                Examined::Gone | Examined::Held(..) => break,
            }
        }
        Ok(removed)
    }
}

impl HeldLock {
    /// Whether [`HeldLock::release`] is short enough for a thread that must not block (the JS
    /// thread): not on a network file system (release never syncs).
    pub fn release_is_short(&self) -> bool {
        self.inner.file.fs != FsKind::Remote
    }

    /// Release: idempotent. `Ok(true)` released now; `Ok(false)` already released or lost (then
    /// nothing is deleted). Deletes the file only if the path still names our inode and the
    /// content read through our descriptor carries our token. An error (e.g. the unlink failed)
    /// leaves the lock held, so the call can be retried.
    pub fn release(&self) -> Result<bool, LockError> {
        let r = match self.release_if(|_| true) {
            ReleaseIf::Released => Ok(true),
            ReleaseIf::NotOurs | ReleaseIf::Refused(_) => Ok(false),
            ReleaseIf::Failed(e) => return Err(e),
        };
        // A shared holder's file: the reader leaves its group (`shared`).
        super::shared::after_release(self.inner.id);
        r
    }

    /// The minimal release: one `stat`, one `pread`, the check, `unlink`, `close`. `allow` sees
    /// what is on disk (ours) and may refuse.
    pub(super) fn release_if(&self, allow: impl FnOnce(&LockInfo) -> bool) -> ReleaseIf {
        let inner = &self.inner;
        let mut state = unpoisoned(&inner.state);
        if state.released {
            return ReleaseIf::NotOurs;
        }
        if state.finished {
            state.released = true;
            return ReleaseIf::NotOurs;
        }
        match inner.ownership(&state) {
            Ownership::Ours => {
                if !allow(&inner.info) {
                    return ReleaseIf::Refused(inner.info.pid);
                }
                match std::fs::remove_file(inner.path()) {
                    Ok(()) => {
                        state.released = true;
                        inner.finish(&mut state);
                        ReleaseIf::Released
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        state.released = true;
                        inner.lose(&mut state, "lock file was removed");
                        ReleaseIf::NotOurs
                    }
                    Err(e) => ReleaseIf::Failed(LockError::io("Failed to release lock", e)),
                }
            }
            Ownership::Lost(reason) => {
                state.released = true;
                inner.lose(&mut state, reason);
                ReleaseIf::NotOurs
            }
            Ownership::Unknown(e) => ReleaseIf::Failed(LockError::io("Failed to release lock", e)),
        }
    }
}

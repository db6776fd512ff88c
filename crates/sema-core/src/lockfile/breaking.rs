//! Race-safe breaking of a stale lock: judge the file on disk, and unlink it only when it is
//! stale, no holder's mark is on it, this process is the one breaker, and the name still
//! names the same file with the same bytes.

use std::io;

use super::error::LockError;
use super::format::LockInfo;
use super::lock_file::{observation_from, LockFile};
use super::queue;
use super::shared::{bytes_are_shared_base, guard_for_break, judge_shared_base};
use super::stale::{judge, OsProbe, StaleJudgement};
use super::sys::{self, ExclusiveLock, FileSig};

/// What one examination of an existing lock file found.
pub(super) enum Examined {
    /// No file (any more): try creating again.
    Gone,
    /// Held; the parsed holder if the file parses, and the file's signature if known.
    Held(Option<LockInfo>, Option<FileSig>),
    /// It was stale and we removed it.
    Broken,
    /// It changed under us (replaced or rewritten): look again.
    Changed,
    /// The path's last component is a symbolic link: never followed, never removed.
    Symlink,
}

impl LockFile {
    /// The refusal of a symlink at the lock path (see [`Examined::Symlink`]).
    pub(super) fn symlink_error(&self) -> LockError {
        LockError::InvalidPath(format!(
            "Lock path is a symbolic link (refused, never followed): {}",
            self.path.display()
        ))
    }

    /// Open the existing file, judge it, and break it if stale, race-safely:
    /// 1. a holder's presence mark (an OFD write lock, which a mere reader cannot take) still
    ///    held means a live holder, whatever the content says;
    /// 2. breakers are serialised per user by a lock in our private runtime directory, and
    ///    across users by the exclusive `flock` on the file. A reader's shared `flock` makes that
    ///    fail too: it is passed over when no process holds an exclusive one (no other breaker)
    ///    and the presence probe works here (so a holder would have shown itself in 1);
    /// 3. then the path must still name the same inode (never followed) with byte-identical
    ///    content, and only then is it unlinked.
    pub(super) fn examine_and_break(&self) -> Examined {
        let file = match sys::open_existing(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(e) if sys::is_symlink_refusal(&e, &self.path) => return Examined::Symlink,
            Err(_) => return Examined::Held(None, None),
        };
        let Ok(meta) = file.metadata() else {
            return Examined::Held(None, None);
        };
        let sig = Some(sys::file_sig(&meta));
        if !meta.is_file() {
            return Examined::Held(None, sig);
        }
        let id = sys::file_id(&meta);
        let Ok(bytes) = sys::read_capped(&file) else {
            return Examined::Held(None, sig);
        };
        let observation = observation_from(bytes.as_deref(), &meta);
        let holder = observation.info().cloned();
        // A shared lock's base is judged by its readers, and broken only under its guard, so
        // that no reader joins the group between the judgement and the unlink.
        let shared_base = holder.as_ref().is_some_and(|i| i.host.is_none())
            && bytes.as_deref().is_some_and(bytes_are_shared_base);
        let judgement = if shared_base {
            judge_shared_base(self)
        } else {
            judge(&observation, &self.stale_context(), &OsProbe)
        };
        if !matches!(judgement, StaleJudgement::Stale(_)) {
            return Examined::Held(holder, sig);
        }
        let _group_guard = if shared_base {
            match guard_for_break(self) {
                Some(g) => Some(g),
                None => return Examined::Held(holder, None),
            }
        } else {
            None
        };
        // Judged stale: never cache this file as held (it is re-examined on the next look).
        let presence = sys::presence(&file);
        if presence == sys::Presence::Holder {
            return Examined::Held(holder, None);
        }
        let per_user = match queue::lock_break(id) {
            queue::BreakLock::Held(guard) => Some(guard),
            queue::BreakLock::Busy => return Examined::Held(holder, None),
            queue::BreakLock::Unavailable => None,
        };
        let _exclusive = match sys::try_break_lock(&file, &self.path, id) {
            Ok(ExclusiveLock::Held(extra)) => extra,
            Ok(ExclusiveLock::Unsupported) => None,
            // Only shared flocks, no holder's mark, and breakers of this user serialised:
            // readers, who must not keep a dead holder's lock from being reclaimed.
            Ok(ExclusiveLock::Busy)
                if per_user.is_some()
                    && presence == sys::Presence::Absent
                    && !sys::breaker_present(id) =>
            {
                None
            }
            Ok(ExclusiveLock::Busy) | Err(_) => return Examined::Held(holder, None),
        };
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if sys::file_id(&now) == id => {}
            Ok(_) => return Examined::Changed,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(_) => return Examined::Held(holder, None),
        }
        match sys::read_capped(&file) {
            Ok(again) if again == bytes => {}
            _ => return Examined::Changed,
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Examined::Broken,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Examined::Gone,
            Err(_) => Examined::Held(holder, None),
        }
        // `file` (and `_exclusive`) close here, dropping the exclusive flock.
    }
}

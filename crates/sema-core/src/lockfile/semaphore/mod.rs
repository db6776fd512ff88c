//! Counting semaphores on lock files: N slots of one base path, each slot a complete lock file
//! taken by the mutex's own attempt (`attempt.rs`), so each held slot is a [`HeldLock`] with
//! every guarantee of the mutex: created whole, never through a symlink, the heartbeat, the
//! registry and exit release, the loss channel, a dead holder on this host reclaimed at once.
//!
//! Layout (docs/lock-kinds.md, "Counting semaphores"): slot 0 is the base path itself (so
//! `sema`, `semats` or a shell script taking the base take one slot); slots 1..N-1 are
//! `<base>.slot-<i>-of-<N>`. The decisions are the pure functions of [`plan`](SlotName):
//! which slot to try, whether the limits agree (at every grant), which dead files go.
//!
//! Waiting (`wait.rs`): one in-process FIFO and one cross-process line per base path (the
//! mutex's `fifo.rs` and `queue/`, keyed by `<base>.slots`, so that a slot holder never keeps
//! other waiters of this process from the other slots); only the head of the line tries on
//! every file event, the others at every `retry_interval`, so a stopped or busy head delays
//! nobody by more than that.

mod plan;
mod wait;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore as TurnSemaphore;

pub use plan::{
    after_grant, dead, free_now, plan, taken, AfterGrant, Plan, Sibling, SlotName, SlotState,
    Standing,
};
pub use wait::{may_try, Line, SemaphoreNow, SemaphoreTried};

use super::attempt::AttemptError;
use super::breaking::Examined;
use super::error::{Holder, LockError};
use super::fifo::fifo_for;
use super::format::LockInfo;
use super::held::HeldLock;
use super::lock_file::{FileInner, LockFile};
use super::options::{AcquireRequest, LockStatus};
use super::stale::{Observation, StaleJudgement};
use super::unpoisoned;

/// How many look → try rounds one attempt makes when other acquirers keep taking the slot it
/// planned for, before it counts as busy (as `attempt.rs` bounds its create → break rounds).
const MAX_ROUNDS: usize = 8;

/// A counting semaphore of `limit` slots on a base lock path.
///
/// ```no_run
/// # async fn demo() -> Result<(), sema_core::lockfile::LockError> {
/// use std::path::PathBuf;
/// use sema_core::lockfile::{AcquireRequest, LockFile, LockOptions, Semaphore};
///
/// let base = LockFile::new(PathBuf::from("/tmp/builds.lock"), LockOptions::default());
/// let builds = Semaphore::new(base, 2)?;
/// // At most two holders at once, across processes (and `sema`/`semats` taking the path).
/// let slot = builds
///     .acquire(&AcquireRequest::default(), None, Default::default())
///     .await?;
/// slot.start_heartbeat();
/// // ... work ...
/// slot.release()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<SemaphoreInner>,
}

struct SemaphoreInner {
    base: LockFile,
    limit: u64,
    /// The base path's file name: siblings are named by it plus a suffix.
    name: OsString,
    dir: PathBuf,
    /// The key of this semaphore's line (in-process FIFO and cross-process queue).
    line_key: PathBuf,
    /// The in-process FIFO turn: only its holder waits in the cross-process line.
    fifo: Arc<TurnSemaphore>,
    /// The sibling lock files made so far (a `LockFile` costs a `statfs` to make).
    siblings: Mutex<HashMap<SlotName, LockFile>>,
}

/// A semaphore's `status`: the base path's, and the slots of its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreStatus {
    /// The base path's status (slot 0).
    pub base: LockStatus,
    /// Slots of this limit whose file exists (held, or whose holder is not reclaimed yet).
    pub holders: u64,
    /// The base's holder, else the first present sibling's (by slot number).
    pub info: Option<LockInfo>,
}

/// The outcome of one look → try round.
pub(super) enum Round {
    Won(HeldLock),
    /// Every slot busy; the base's holder as the base attempt read it.
    Busy(Option<LockInfo>),
    Failed(LockError),
}

impl Semaphore {
    /// `limit` slots (at least 1) on `base` (slot 0). The siblings take `base`'s options and
    /// format.
    pub fn new(base: LockFile, limit: u64) -> Result<Semaphore, LockError> {
        if limit == 0 {
            return Err(LockError::InvalidArgument(
                "limit: must be a positive integer, got 0".into(),
            ));
        }
        let (Some(dir), Some(name)) = (base.key.parent(), base.key.file_name()) else {
            return Err(LockError::InvalidPath(format!(
                "Lock path has no file name: '{}'",
                base.path.display()
            )));
        };
        let mut line = base.key.clone().into_os_string();
        line.push(".slots");
        let line_key = PathBuf::from(line);
        Ok(Semaphore {
            inner: Arc::new(SemaphoreInner {
                name: name.to_os_string(),
                dir: dir.to_path_buf(),
                fifo: fifo_for(&line_key),
                line_key,
                limit,
                base,
                siblings: Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// The base lock file (slot 0).
    pub fn base(&self) -> &LockFile {
        &self.inner.base
    }

    /// The path of slot `index` of this limit (0: the base path).
    pub fn slot_path(&self, index: u64) -> PathBuf {
        if index == 0 {
            return self.inner.base.path.clone();
        }
        self.sibling_path(SlotName {
            index,
            limit: self.inner.limit,
        })
    }

    fn sibling_path(&self, slot: SlotName) -> PathBuf {
        let mut name = self.inner.name.clone();
        name.push(slot.suffix());
        self.inner.dir.join(name)
    }

    /// The lock file of a sibling slot: the base's options, format and file-system kind.
    fn sibling(&self, slot: SlotName) -> LockFile {
        let mut map = unpoisoned(&self.inner.siblings);
        if let Some(f) = map.get(&slot) {
            return f.clone();
        }
        if map.len() >= 64 {
            map.clear();
        }
        let path = self.sibling_path(slot);
        let base = &self.inner.base;
        let file = LockFile {
            inner: Arc::new(FileInner {
                os_path: super::sys::OsPath::new(&path),
                key: path.clone(),
                fifo: fifo_for(&path),
                path,
                options: base.options.clone(),
                strategy: base.strategy,
                extra_keys: base.extra_keys,
                fs: base.fs,
            }),
        };
        map.insert(slot, file.clone());
        file
    }

    fn slot_file(&self, index: u64) -> LockFile {
        if index == 0 {
            return self.inner.base.clone();
        }
        self.sibling(SlotName {
            index,
            limit: self.inner.limit,
        })
    }

    /// The sibling slot files present now, any limit (`judge`: look at the ones it accepts,
    /// the others count as live without a look). An unreadable directory: none (only a grant's
    /// confirmation must know the difference: [`Self::try_look`]).
    fn look(&self, judge: impl Fn(&SlotName) -> bool) -> Vec<Sibling> {
        self.try_look(judge).unwrap_or_default()
    }

    /// [`Self::look`], with an unreadable directory (EMFILE, ENOMEM, ...) as an error.
    fn try_look(&self, judge: impl Fn(&SlotName) -> bool) -> std::io::Result<Vec<Sibling>> {
        let entries = std::fs::read_dir(&self.inner.dir)?;
        let prefix = self.inner.name.as_encoded_bytes();
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(suffix) = name.as_encoded_bytes().strip_prefix(prefix) else {
                continue;
            };
            let Some(slot) = std::str::from_utf8(suffix).ok().and_then(SlotName::parse) else {
                continue;
            };
            let state = if judge(&slot) {
                state_of(&self.sibling(slot))
            } else {
                SlotState::Live
            };
            found.push(Sibling { slot, state });
        }
        found.sort_by_key(|s| (s.slot.limit, s.slot.index));
        Ok(found)
    }

    /// Removes the dead siblings `siblings` names (any limit), each through the mutex's safe
    /// break (same inode, same content, never a symlink).
    fn remove_dead(&self, siblings: &[Sibling]) {
        for slot in dead(siblings) {
            let file = self.sibling(slot);
            for _ in 0..4 {
                if !matches!(file.examine_and_break(), Examined::Changed) {
                    break;
                }
            }
        }
    }

    /// The error of an acquirer turned away by a live slot of another limit.
    fn mismatch(&self, other: SlotName) -> LockError {
        LockError::LimitMismatch(format!(
            "lock '{}' is held with limit {}, not {} (a slot file '{}{}' is held)",
            self.inner.base.path.display(),
            other.limit,
            self.inner.limit,
            self.inner.name.to_string_lossy(),
            other.suffix()
        ))
    }

    /// One round: the base first (the uncontended path: one attempt), then a look at the
    /// siblings and the slot the plan names. Blocking (file calls, `fsync` when asked).
    pub(super) fn round(&self, req: &AcquireRequest, standing: &mut Standing) -> Round {
        let fsync = self.inner.base.syncs();
        let base_holder = match self.inner.base.attempt(req, false, fsync, &mut None) {
            Ok(held) => return self.confirm(held, standing),
            Err(AttemptError::Busy(b)) => b.holder,
            Err(AttemptError::Failed(e)) => return Round::Failed(e),
        };
        let limit = self.inner.limit;
        for _ in 0..MAX_ROUNDS {
            let siblings = self.look(|_| true);
            self.remove_dead(&siblings);
            let order = match plan(limit, *standing, SlotState::Live, &siblings) {
                Plan::Mismatch(other) => return Round::Failed(self.mismatch(other)),
                Plan::Wait => break,
                Plan::Try(order) => order,
            };
            for index in order {
                match self.slot_file(index).attempt(req, false, fsync, &mut None) {
                    Ok(held) => return self.confirm(held, standing),
                    Err(AttemptError::Busy(_)) => {}
                    Err(AttemptError::Failed(e)) => return Round::Failed(e),
                }
            }
        }
        // No mismatch seen: from now on this acquirer waits for its limit's slots.
        *standing = Standing::Waiter;
        Round::Busy(base_holder)
    }

    /// A grant stands only if no live slot of another limit is beside it (see
    /// [`after_grant`]); the dead ones of any other limit are removed on the way.
    fn confirm(&self, held: HeldLock, standing: &mut Standing) -> Round {
        let limit = self.inner.limit;
        // A look that could not list the directory saw nothing, not "no other limit": a grant
        // confirmed on it could stand beside slots of a smaller limit (the simulator's seed 9591
        // of the files world: an EMFILE there gave 4 holders of a path taken with limits 2 and 3).
        let others = match self.try_look(|s| s.limit != limit) {
            Ok(others) => others,
            Err(source) => {
                if let Err(e) = held.release() {
                    return Round::Failed(e);
                }
                return Round::Failed(LockError::io("listing the semaphore's slot files", source));
            }
        };
        self.remove_dead(&others);
        match after_grant(limit, *standing, &others) {
            AfterGrant::Keep => Round::Won(held),
            AfterGrant::Yield(why) => {
                if let Err(e) = held.release() {
                    return Round::Failed(e);
                }
                match why {
                    Some(other) => Round::Failed(self.mismatch(other)),
                    None => {
                        *standing = Standing::Waiter;
                        Round::Busy(None)
                    }
                }
            }
        }
    }

    /// The `AlreadyLocked` of a busy round: the base's holder.
    fn busy_error(&self, holder: Option<LockInfo>) -> LockError {
        LockError::AlreadyLocked {
            holder: self.holder(holder),
        }
    }

    fn holder(&self, holder: Option<LockInfo>) -> Box<Holder> {
        match holder {
            Some(info) => self.inner.base.holder_of(Some(&info)),
            None => self.inner.base.holder_on_disk(),
        }
    }

    /// One round without waiting and without queueing (it tries whoever waits):
    /// `AlreadyLocked` (the base's holder) when every slot is held, `LimitMismatch` when a live
    /// slot has another limit.
    pub fn try_acquire(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        match self.round(req, &mut Standing::Newcomer) {
            Round::Won(held) => Ok(held),
            Round::Busy(holder) => Err(self.busy_error(holder)),
            Round::Failed(e) => Err(e),
        }
    }

    /// The slot files of this limit present now, slot 0 (the base) first: the only ones a
    /// release by path can release (a visit of each of `limit` slots would never end for a
    /// large limit).
    pub fn present_slots(&self) -> Vec<PathBuf> {
        let limit = self.inner.limit;
        let mut out = Vec::new();
        if std::fs::symlink_metadata(&self.inner.base.path).is_ok() {
            out.push(self.inner.base.path.clone());
        }
        for s in self.look(|_| false) {
            if s.slot.limit == limit {
                out.push(self.sibling_path(s.slot));
            }
        }
        out
    }

    /// The base's status with the slots of this limit: `holders` counts the files present.
    pub fn status(&self) -> SemaphoreStatus {
        let limit = self.inner.limit;
        let base = self.inner.base.status();
        let siblings = self.look(|_| false);
        let base_state = if base.locked {
            SlotState::Live
        } else {
            SlotState::Absent
        };
        let holders = taken(limit, base_state, &siblings);
        let info = base.info.clone().or_else(|| {
            siblings
                .iter()
                .filter(|s| s.slot.limit == limit)
                .find_map(|s| self.sibling(s.slot).observe().info().cloned())
        });
        SemaphoreStatus {
            base,
            holders,
            info,
        }
    }

    /// Whether an acquirer of this limit would get a slot now, changing nothing: `Err`
    /// `LimitMismatch` as `acquire` would report it.
    pub fn is_free(&self) -> Result<bool, LockError> {
        let base = state_of(&self.inner.base);
        let siblings = self.look(|_| true);
        free_now(self.inner.limit, base, &siblings).map_err(|other| self.mismatch(other))
    }
}

/// What a look finds in one slot file. A symlink counts as dead: the plan tries it, and the
/// attempt refuses it (`INVALID_PATH`) without following it; the break never removes it.
fn state_of(file: &LockFile) -> SlotState {
    let observation = file.observe();
    if observation == Observation::Missing {
        return SlotState::Absent;
    }
    if observation == Observation::Symlink {
        return SlotState::Dead;
    }
    match file.judge_with_presence(&observation) {
        StaleJudgement::Free => SlotState::Absent,
        StaleJudgement::Held(_) => SlotState::Live,
        StaleJudgement::Stale(_) => SlotState::Dead,
    }
}

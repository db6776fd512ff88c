//! Shared (reader/writer) locks on lock files: [`SharedLock`], any number of
//! [`Mode::Shared`] holders at once or one [`Mode::Exclusive`] holder, built on the core's
//! mutex: every file it takes (the guard, each reader's file, each waiter's ticket, and P
//! itself for a writer) is a [`LockFile`] taken by the mutex machinery, with its heartbeat,
//! registry, exit release and loss notification. `group.rs` holds the file layout, `policy.rs`
//! the decisions (pure functions over one look at the directory, unit-tested).
//!
//! Interop: while readers hold, P is a *shared base* in the lock-file format (`mode=shared`,
//! naming a live reader, kept young by the readers' heartbeat), so `sema` and `semats` wait for
//! it; a writer holds P itself, as the mutex does. The core's stale judgement reads a shared
//! base it finds: its holders are the live reader files, so a base whose readers all died is
//! reclaimed at once by every kind of acquirer (the plain mutex included).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sema_core::lockfile::LockError> {
//! use sema_core::lockfile::{AcquireRequest, LockFile, LockOptions, Mode, SharedLock};
//! use tokio_util::sync::CancellationToken;
//!
//! let lock = SharedLock::new(LockFile::new("/tmp/catalog.lock".into(), LockOptions::default()));
//! let req = AcquireRequest::default();
//! let reader = lock.acquire(Mode::Shared, &req, None, CancellationToken::new()).await?;
//! // ... read; other readers may hold too, writers wait ...
//! reader.release()?;
//! let writer = lock.try_acquire(Mode::Exclusive, &req)?;
//! writer.release()?;
//! # Ok(())
//! # }
//! ```

mod group;
pub mod policy;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::error::LockError;
use super::events::Events;
use super::format::LockInfo;
use super::held::HeldLock;
use super::lock_file::LockFile;
use super::options::{AcquireRequest, LockStatus};
use super::stale::StaleJudgement;
use super::watch;
use group::{Member, Ticket};
pub use policy::Mode;
use policy::{decide, Base, Scene, Step};

pub(crate) use group::{after_beat, after_release, bytes_are_shared_base};

/// How long `try_acquire` waits for the guard (held by another process for the few file calls
/// of a decision) before calling the lock busy.
const TRY_GUARD_WAIT: Duration = Duration::from_millis(100);

/// A shared lock at one path (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedLock {
    base: LockFile,
    guard: LockFile,
}

/// What [`SharedLock::status`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStatus {
    /// The status of P as the mutex reads it (a shared base is judged by its readers).
    pub status: LockStatus,
    /// `Some(Mode::Shared)` while P is a shared base, `Some(Mode::Exclusive)` while anything
    /// else holds it, `None` when nothing is there.
    pub mode: Option<Mode>,
    /// The live shared holders (0 unless P is a shared base).
    pub holders: usize,
    /// What each live shared holder's file records (pid, timestamp, tag), in name order.
    pub readers: Vec<LockInfo>,
    /// Requests of either mode waiting in line (live tickets), of every process.
    pub waiting: usize,
}

impl SharedLock {
    /// The shared lock at `base`'s path, with its options (for the member files too).
    pub fn new(base: LockFile) -> SharedLock {
        let guard = base.beside(
            group::sibling(&base.key, group::GUARD_SUFFIX),
            group::member_options(base.options()),
        );
        SharedLock { base, guard }
    }

    /// The lock path.
    pub fn path(&self) -> &Path {
        self.base.path()
    }

    /// One look under the guard and its step. `ticket`: the caller's place in the line.
    fn look(&self, mode: Mode, ticket: Option<&Ticket>) -> (Scene, Step) {
        let seen = group::read_base(&self.base);
        let [readers, writer_tickets, reader_tickets]: [Vec<(PathBuf, String)>; 3] = group::scan(
            &self.base.key,
            &[
                group::READER_PREFIX,
                group::WRITER_TICKET_PREFIX,
                group::READER_TICKET_PREFIX,
            ],
        )
        .try_into()
        .unwrap_or_default();
        let live_readers = if seen.base == Base::Shared {
            readers
                .iter()
                .filter(|(p, _)| group::member_live(&self.base, p))
                .count()
        } else {
            0
        };
        let mine = ticket.map(|t| t.name.as_str());
        let (writers_ahead, waiters_ahead) =
            group::tickets_ahead(&self.base, &writer_tickets, &reader_tickets, mine);
        let scene = Scene {
            base: seen.base,
            live_readers,
            writers_ahead,
            waiters_ahead,
        };
        (scene, decide(mode, &scene))
    }

    /// Carries out `step` under the guard. `Ok(None)`: busy after all.
    fn apply(
        &self,
        mode: Mode,
        scene: &Scene,
        step: Step,
        req: &AcquireRequest,
    ) -> Result<Option<HeldLock>, LockError> {
        match step {
            Step::Wait(_) => Ok(None),
            Step::Refuse => Err(self.base.symlink_error()),
            Step::Take => {
                if scene.base == Base::Shared {
                    group::remove_base(&self.base); // its readers are all dead
                }
                match self.base.try_acquire(req) {
                    Ok(held) => Ok(Some(held)),
                    Err(LockError::AlreadyLocked { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Step::Join => {
                debug_assert_eq!(mode, Mode::Shared);
                self.join(scene, req)
            }
        }
    }

    fn join(&self, scene: &Scene, req: &AcquireRequest) -> Result<Option<HeldLock>, LockError> {
        if scene.base == Base::Stale {
            // A dead holder of the mutex or of the exclusive mode (issue 33, defect 1): broken
            // as the mutex breaks it, race-safely.
            match self.base.examine_and_break() {
                super::breaking::Examined::Symlink => return Err(self.base.symlink_error()),
                super::breaking::Examined::Held(..) | super::breaking::Examined::Changed => {
                    return Ok(None)
                }
                super::breaking::Examined::Broken | super::breaking::Examined::Gone => {}
            }
        }
        let reader = group::new_member(&self.base, group::READER_PREFIX, false, 0);
        let held = reader.try_acquire(req)?;
        let tag = req.tag.as_deref();
        let based = if scene.base == Base::Shared {
            match group::rewrite_if_named_gone(&self.base, scene.live_readers == 0, tag) {
                Ok(true) => Ok(()),
                // Removed or replaced since the look: look again.
                Ok(false) => Err(None),
                Err(e) => Err(Some(e)),
            }
        } else {
            match group::create_base(&self.base, tag) {
                Ok(()) => Ok(()),
                // A mutex holder (which takes P without the guard) came first.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(None),
                Err(e) => Err(Some(e)),
            }
        };
        match based {
            Ok(()) => {
                group::add_member(
                    held.id(),
                    Member {
                        base: self.base.clone(),
                        guard: self.guard.clone(),
                        tag: req.tag.clone(),
                    },
                );
                Ok(Some(held))
            }
            Err(e) => {
                let _ = held.release();
                match e {
                    None => Ok(None),
                    Some(e) => Err(LockError::io("Failed to create lock", e)),
                }
            }
        }
    }

    /// Acquire in `mode` without waiting: `AlreadyLocked` (with P's holder) when busy, also
    /// when the guard stayed busy for 100 ms. Blocks for the few file calls (and that bounded
    /// guard wait): run it off a thread that must not block.
    pub fn try_acquire(&self, mode: Mode, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        let Some(guard) = group::try_guard_within(&self.guard, TRY_GUARD_WAIT)? else {
            return Err(self.base.already_locked_from_disk());
        };
        let (scene, step) = self.look(mode, None);
        let r = self.apply(mode, &scene, step, req);
        let _ = guard.release();
        match r? {
            Some(held) => Ok(held),
            None => Err(self.base.already_locked_from_disk()),
        }
    }

    /// Acquire in `mode`, waiting: FIFO with waiters of both kinds (see `policy`), woken by file
    /// events on P and on the members it waits for, and every `retry_interval`. `timeout`:
    /// `None` waits forever (never `Timeout`), `Some(0)` is one attempt. `cancel` → `Aborted`.
    /// A failed or cancelled acquire leaves no file of its own behind. Needs a tokio runtime.
    pub async fn acquire(
        &self,
        mode: Mode,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<HeldLock, LockError> {
        self.acquire_in_order(mode, req.clone(), timeout, cancel)
            .await
    }

    /// [`SharedLock::acquire`] that takes its place in the in-process line of the path's guard
    /// NOW, on the calling thread (no file I/O here): acquisitions started in one order on one
    /// thread make their first decision in that order, whichever runtime thread polls them.
    pub fn acquire_in_order(
        &self,
        mode: Mode,
        req: AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<HeldLock, LockError>> + Send + 'static {
        let this = self.clone();
        let first = (!cancel.is_cancelled()).then(|| {
            Box::pin(self.guard.acquire_in_order(
                AcquireRequest::default(),
                timeout,
                cancel.clone(),
                None,
            ))
        });
        async move { this.acquire_from(mode, &req, timeout, cancel, first).await }
    }

    async fn acquire_from<F>(
        &self,
        mode: Mode,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        mut first: Option<std::pin::Pin<Box<F>>>,
    ) -> Result<HeldLock, LockError>
    where
        F: Future<Output = Result<HeldLock, LockError>>,
    {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let left = || deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        let timed_out = || self.base.timed_out(timeout);
        let base_watch = watch::watch(&self.base.key);
        let mut ticket: Option<Ticket> = None;
        loop {
            let notified = base_watch.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken = match first.take() {
                Some(f) => f.await,
                None => {
                    self.guard
                        .acquire(&AcquireRequest::default(), left(), cancel.clone())
                        .await
                }
            };
            let guard = match taken {
                Ok(g) => g,
                Err(LockError::Timeout { .. }) => return Err(timed_out()),
                Err(e) => return Err(e),
            };
            let (scene, step) = self.look(mode, ticket.as_ref());
            let r = self.apply(mode, &scene, step, req);
            // Queued under the guard: a look of anyone after this one sees the ticket.
            let queued = match (&r, &ticket) {
                (Ok(None), None) => group::take_ticket(&self.base, mode).map(Some),
                _ => Ok(None),
            };
            // The members this waiter waits for: a change of any wakes it.
            let watched = self.watched(&scene, ticket.as_ref());
            let _ = guard.release();
            if let Some(held) = r? {
                return Ok(held);
            }
            if let Some(t) = queued? {
                ticket = Some(t);
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(timed_out());
            }
            match self
                .between_looks(notified, &watched, &cancel, deadline)
                .await
            {
                Woke::Look => {}
                Woke::Aborted => return Err(LockError::Aborted),
                Woke::TimedOut => return Err(timed_out()),
            }
        }
    }

    /// The sleep of a waiter between two looks: until P changes (`on_base`, enabled before the
    /// look), one of the `members` it waits for changes, the `retry_interval` poll, the
    /// `deadline` or `cancel`.
    async fn between_looks(
        &self,
        on_base: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        members: &[PathBuf],
        cancel: &CancellationToken,
        deadline: Option<tokio::time::Instant>,
    ) -> Woke {
        let member_watches: Vec<_> = members.iter().map(|p| watch::watch(p)).collect();
        let mut changes = Events::of(member_watches.iter().map(watch::WatchGuard::notify));
        let retry = self
            .base
            .options
            .retry_interval
            .max(Duration::from_millis(1));
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Woke::Aborted,
            _ = on_base => Woke::Look,
            _ = changes.any() => Woke::Look,
            _ = tokio::time::sleep(retry) => Woke::Look,
            _ = super::acquire::sleep_until_opt(deadline) => Woke::TimedOut,
        }
    }

    /// The member files whose change may let this waiter through.
    fn watched(&self, scene: &Scene, ticket: Option<&Ticket>) -> Vec<PathBuf> {
        let mine = ticket.map(|t| t.name.as_str());
        let mut out: Vec<PathBuf> = Vec::new();
        if scene.live_readers > 0 {
            out.extend(
                group::siblings(&self.base.key, group::READER_PREFIX)
                    .into_iter()
                    .map(|(p, _)| p),
            );
        }
        for prefix in [group::WRITER_TICKET_PREFIX, group::READER_TICKET_PREFIX] {
            out.extend(
                group::siblings(&self.base.key, prefix)
                    .into_iter()
                    .filter(|(_, n)| policy::older(n, mine))
                    .map(|(p, _)| p),
            );
        }
        out
    }

    /// What P is now, as the mutex's `status` says it, with the mode and the live shared
    /// holders. A shared base is locked while a reader file is live; once they are all dead it
    /// is stale at once (`reclaim.rule` `HolderDead`, reclaimable now).
    pub fn status(&self) -> SharedStatus {
        let status = self.base.status();
        let seen = group::read_base(&self.base);
        let (mode, readers) = match seen.base {
            Base::Absent => (None, Vec::new()),
            Base::Shared => (
                Some(Mode::Shared),
                group::live_members(&self.base, group::READER_PREFIX)
                    .iter()
                    .filter_map(|(p, _)| group::info_of(p))
                    .collect(),
            ),
            _ => (Some(Mode::Exclusive), Vec::new()),
        };
        let [writer_tickets, reader_tickets]: [Vec<(PathBuf, String)>; 2] = group::scan(
            &self.base.key,
            &[group::WRITER_TICKET_PREFIX, group::READER_TICKET_PREFIX],
        )
        .try_into()
        .unwrap_or_default();
        let (_, waiting) = group::tickets_ahead(&self.base, &writer_tickets, &reader_tickets, None);
        SharedStatus {
            status,
            mode,
            holders: readers.len(),
            readers,
            waiting,
        }
    }

    /// A forced release of a shared lock's group (`release(path, { force: true })`): under the
    /// guard, every reader file and the base are removed; each holder hears of it as a loss
    /// (its heartbeat finds its file removed). `Ok(false)`: P is no shared base (the caller
    /// releases it as the mutex).
    pub fn release_group(&self) -> Result<bool, LockError> {
        let Some(guard) = group::try_guard_within(&self.guard, TRY_GUARD_WAIT)? else {
            return Err(self.base.already_locked_from_disk());
        };
        let shared = group::read_base(&self.base).base == Base::Shared;
        if shared {
            for (p, _) in group::siblings(&self.base.key, group::READER_PREFIX) {
                if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(&p);
                }
            }
            group::remove_base(&self.base);
        }
        let _ = guard.release();
        Ok(shared)
    }

    /// Whether an acquire in `mode` would be served now, judged without changing anything but
    /// dead members' files (for `wait`): the same look and decision as an acquire's.
    pub fn is_free_for(&self, mode: Mode) -> bool {
        let (_, step) = self.look(mode, None);
        matches!(step, Step::Join | Step::Take)
    }

    /// Wait until an acquire in `mode` would be served (see [`SharedLock::is_free_for`]),
    /// creating nothing. `None` waits forever; `Timeout` / `Aborted` as `acquire`.
    pub async fn wait_until_free(
        &self,
        mode: Mode,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<(), LockError> {
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let base_watch = watch::watch(&self.base.key);
        loop {
            let notified = base_watch.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cancel.is_cancelled() {
                return Err(LockError::Aborted);
            }
            let (scene, step) = self.look(mode, None);
            match step {
                Step::Join | Step::Take => return Ok(()),
                Step::Refuse => return Err(self.base.symlink_error()),
                Step::Wait(_) => {}
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(self.base.timed_out(timeout));
            }
            let watched = self.watched(&scene, None);
            match self
                .between_looks(notified, &watched, &cancel, deadline)
                .await
            {
                Woke::Look => {}
                Woke::Aborted => return Err(LockError::Aborted),
                Woke::TimedOut => return Err(self.base.timed_out(timeout)),
            }
        }
    }
}

/// How a waiter's sleep between two looks ended.
enum Woke {
    /// Something changed, or the poll is due: look again.
    Look,
    Aborted,
    TimedOut,
}

/// The core's judgement of a shared base at `base` (read from P with these `bytes`): held while
/// a reader file is live, stale (its holders dead, reclaimable at once) when none is.
pub(crate) fn judge_shared_base(base: &LockFile) -> StaleJudgement {
    use super::stale::{HeldBecause, StaleBecause};
    if policy::group_alive(group::live_members(base, group::READER_PREFIX).len()) {
        StaleJudgement::Held(HeldBecause::OwnHostHolderAlive)
    } else {
        StaleJudgement::Stale(StaleBecause::OwnHostHolderDead)
    }
}

/// For a breaker of a dead shared base (the plain mutex): P's guard held while it breaks, so
/// that no reader joins the group in between; `None` when the guard is busy (or the group is
/// alive again under it).
pub(crate) fn guard_for_break(base: &LockFile) -> Option<BreakGuard> {
    let guard = base.beside(
        group::sibling(&base.key, group::GUARD_SUFFIX),
        group::member_options(base.options()),
    );
    let g = BreakGuard(guard.try_acquire(&AcquireRequest::default()).ok()?);
    judge_shared_base(base).is_stale().then_some(g)
}

/// The guard held by a breaker of a dead shared base, released when the break is over.
pub(crate) struct BreakGuard(HeldLock);

impl Drop for BreakGuard {
    fn drop(&mut self) {
        let _ = self.0.release();
    }
}

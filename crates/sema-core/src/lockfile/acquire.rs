//! Acquiring: the entry points ([`LockFile::try_acquire`], [`LockFile::acquire`], and for a
//! caller that must not block, [`LockFile::acquire_now`] then [`LockFile::acquire_in_order`])
//! and the wait between attempts: the in-process FIFO turn first, then the cross-process
//! queue, then attempts woken by file-system events, polling as the fallback.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{AcquireError, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::attempt::{AttemptError, Prepared};
use super::error::{Holder, LockError};
use super::fifo::take_turn_now;
use super::held::HeldLock;
use super::lock_file::LockFile;
use super::options::AcquireRequest;
use super::queue::{self, Place, STARVING_AFTER};
use super::registry::lose_held_whose_file_went;
use super::stale::{Observation, StaleJudgement};
use super::sys::{self, CreationStrategy, FileSig, FsKind};
use super::watch;

mod async_attempt;
pub use async_attempt::blocking_attempt_count;

/// Smallest polling interval while waiting (zero would spin).
const MIN_RETRY: Duration = Duration::from_millis(1);

/// What [`LockFile::acquire_now`] decided.
pub enum AcquireNow {
    /// Won, or failed for good.
    Done(Result<HeldLock, LockError>),
    /// Not decided on this thread: pass this to [`LockFile::acquire_in_order`].
    Wait(Tried),
}

/// An attempt made by [`LockFile::acquire_now`], with the place it took in the cross-process
/// line (if any), handed to the wait so the place is not lost in between.
pub struct Tried {
    /// The attempt was made (and found the lock busy).
    pub(super) attempted: bool,
    /// Declared before `turn`: dropped first, so a place is never dropped without the turn
    /// (two tickets of one process would share the queue's one `want` flag).
    pub(super) place: Option<Place>,
    /// The in-process turn taken by the attempt, kept_turn so that no other waiter of this process
    /// (another thread, a worker_thread) can take it between the attempt and the wait.
    pub(super) turn: Option<OwnedSemaphorePermit>,
    /// The file the attempt built (with `fsync`, its content already on the disk) and could not
    /// link: the wait's next attempt links it instead of building and syncing another.
    /// Boxed: it would make `Tried` (an `Err` of `claim_now`) large.
    pub(super) prepared: Option<Box<Prepared>>,
}

impl Tried {
    /// Whether this waiter holds the in-process turn (it waits only behind other processes).
    pub fn has_turn(&self) -> bool {
        self.turn.is_some()
    }

    /// Builds, stamps and (with `fsync`) syncs the waiter's lock file now, on a thread that may
    /// block, for the wait to link when the lock comes free: what the wait would otherwise do
    /// on the blocking pool before it first sleeps (a round trip from the tokio worker: two
    /// thread hops per contended acquisition). Only for a waiter holding the turn (else its
    /// turn may come much later, and the wait prepares then). A failure is left to the wait.
    pub fn prepare(&mut self, file: &LockFile, req: &AcquireRequest) {
        if self.turn.is_none() || !file.syncs() || file.strategy != CreationStrategy::Auto {
            return;
        }
        let mut prepared = self.prepared.take().map(|p| *p);
        // On a failure `prepare` leaves nothing: the wait builds its own.
        let _ = file.prepare(req, &mut prepared, true);
        self.prepared = prepared.map(Box::new);
    }

    pub(super) fn nothing() -> Tried {
        Tried {
            attempted: false,
            place: None,
            turn: None,
            prepared: None,
        }
    }
}

pub(super) async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl LockFile {
    /// Acquire without waiting. Busy in-process FIFO or a held file → `AlreadyLocked` with the
    /// holder read from the file. Stale locks are broken safely first.
    pub fn try_acquire(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        let Some(turn) = take_turn_now(&self.fifo, &self.key) else {
            return Err(self.already_locked_from_disk());
        };
        let held = self
            .attempt(req, false, self.syncs(), &mut None)
            .map_err(|e| self.error_of(e))?;
        held.keep_turn(turn);
        Ok(held)
    }

    /// One attempt that bypasses the in-process FIFO, as a separate process would. Tests use
    /// it to race threads on the file itself.
    #[doc(hidden)]
    pub fn try_acquire_bypassing_queue(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        self.attempt(req, false, self.syncs(), &mut None)
            .map_err(|e| self.error_of(e))
    }

    /// Wait for the lock: in-process FIFO first, then attempts woken by file-system events on
    /// the lock's name, by `retry_interval` and ended by the deadline (`Timeout`; `Some(0)` =
    /// exactly one attempt) or `cancel` (`Aborted`). A failed or cancelled acquire leaves no file,
    /// no temp file and no turn behind. Must run inside a tokio runtime (time enabled).
    ///
    /// While waiting, every wake-up first `stat`s the path: a file with the same identity,
    /// mtime and size as the one already judged held (and no close event on the name since)
    /// sends the waiter straight back to sleep, without building a lock file or probing the
    /// holder again. The `retry_interval` poll always judges again, so stale expiry still
    /// happens. A lock file is built only when the path looks free or the holder was broken.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sema_core::lockfile::{AcquireRequest, LockError, LockFile, LockOptions};
    /// use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let file = LockFile::new(dir.path().join("deploy.lock"), LockOptions::default());
    /// let req = AcquireRequest::default();
    /// let first = file.acquire(&req, Some(Duration::from_secs(5)), CancellationToken::new()).await?;
    /// // Behind the holder: the wait ends by its deadline with the holder's facts…
    /// let waited = file.acquire(&req, Some(Duration::from_millis(50)), CancellationToken::new()).await;
    /// assert!(matches!(waited, Err(LockError::Timeout { .. })));
    /// // …or at once when it is cancelled.
    /// let cancel = CancellationToken::new();
    /// cancel.cancel();
    /// assert!(matches!(file.acquire(&req, None, cancel).await, Err(LockError::Aborted)));
    /// first.release()?;
    /// let second = file.acquire(&req, None, CancellationToken::new()).await?;
    /// second.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<HeldLock, LockError> {
        self.acquire_in_order(req.clone(), timeout, cancel, None)
            .await
    }

    /// Whether an acquisition syncs its file and directory: `fsync` asked, and not on a memory
    /// file system, whose `fsync` does nothing (tmpfs: `noop_fsync`): there it would only cost
    /// four system calls per acquisition (the file's sync, and the directory's open, sync and
    /// close; counted with `strace` on the one-process loop of bench/file-hops.js `--cycles`).
    pub(super) fn syncs(&self) -> bool {
        self.options.fsync && self.fs != FsKind::Memory
    }

    /// Whether one attempt is short enough for a thread that must not block (the JS thread): a
    /// memory file system, or a local one with `fsync` off (no `fsync` of a disk, no network
    /// file system, where every call may wait).
    pub fn attempts_are_short(&self) -> bool {
        match self.fs {
            FsKind::Memory => true,
            FsKind::Local => !self.options.fsync,
            FsKind::Remote => false,
        }
    }

    /// The uncontended fast path of `acquire`, on the calling thread, for callers that must not
    /// block (the JS thread): one attempt, made only when it is short and certain to be fair.
    /// `None` = not decided here (attempts are not short here, see
    /// [`LockFile::attempts_are_short`]; the lock is taken or queued for in this process; or
    /// the path is busy): call [`LockFile::acquire_in_order`] to wait. `Some` = won, or
    /// failed for good.
    pub fn acquire_now(&self, req: &AcquireRequest) -> AcquireNow {
        if !self.attempts_are_short() {
            return AcquireNow::Wait(Tried::nothing());
        }
        match self.claim_now() {
            Ok(claimed) => claimed.attempt(self, req),
            Err(tried) => AcquireNow::Wait(tried),
        }
    }

    /// The part of [`LockFile::acquire_now`] that keeps call order, for a caller that must not
    /// block where attempts are not short: on the calling thread, the in-process turn and the
    /// place in the cross-process line (no file I/O but the line's). `Ok` = this caller may
    /// attempt at once: [`Claimed::attempt`] on a thread that may block. `Err` = it must wait:
    /// pass the `Tried` to [`LockFile::acquire_in_order`] (the turn and the place are in it).
    pub fn claim_now(&self) -> Result<Claimed, Tried> {
        let Ok(turn) = self.fifo.clone().try_acquire_owned() else {
            return Err(Tried::nothing());
        };
        // Waiting processes go first: the place taken in their line is handed on to the wait.
        let place = queue::existing(&self.key).map(|q| q.join());
        if place.as_ref().is_some_and(|t| !t.is_head()) {
            return Err(Tried {
                attempted: false,
                place,
                turn: Some(turn),
                prepared: None,
            });
        }
        Ok(Claimed { turn, place })
    }
}

/// The in-process turn and the head's place (if the lock has a line) taken by
/// [`LockFile::claim_now`]: the first attempt is this caller's to make, on any thread.
pub struct Claimed {
    /// Declared before `turn`, as in [`Tried`].
    place: Option<Place>,
    turn: OwnedSemaphorePermit,
}

impl Claimed {
    /// The first attempt of `file` (made with its syncs: blocking): `Done` when won or failed
    /// for good, else `Wait` with the turn and the place for [`LockFile::acquire_in_order`].
    pub fn attempt(self, file: &LockFile, req: &AcquireRequest) -> AcquireNow {
        // `turn` bound first: locals drop in reverse order, so on a failure `place` leaves the
        // line before the turn is given up, as when a `Tried` or a `Claimed` is dropped whole.
        let Claimed { turn, place } = self;
        let mut prepared = None;
        match file.attempt(req, false, file.syncs(), &mut prepared) {
            Ok(held) => {
                held.keep_turn(turn);
                AcquireNow::Done(Ok(held))
            }
            Err(AttemptError::Busy(_)) => AcquireNow::Wait(Tried {
                attempted: true,
                place,
                turn: Some(turn),
                prepared: prepared.map(Box::new),
            }),
            Err(AttemptError::Failed(e)) => AcquireNow::Done(Err(e)),
        }
    }
}

impl LockFile {
    /// [`LockFile::acquire`] that takes its place in the in-process FIFO NOW, on the calling
    /// thread (no file I/O happens here), instead of when the returned future is first polled:
    /// callers that spawn the future on a multi-threaded runtime keep their call order. After
    /// [`LockFile::acquire_now`] said `Wait(tried)`, pass `Some(tried)`: the first attempt, made
    /// a moment ago, is not repeated unless the turn had to be waited for, and the place it
    /// took in the cross-process line is kept.
    pub fn acquire_in_order(
        &self,
        req: AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        tried: Option<Tried>,
    ) -> impl Future<Output = Result<HeldLock, LockError>> + Send + 'static {
        let this = self.clone();
        let mut queued = Box::pin(self.fifo.clone().acquire_owned());
        let mut tried = tried;
        let kept_turn = tried.as_mut().and_then(|t| t.turn.take());
        let first = if let Some(turn) = kept_turn {
            Poll::Ready(Ok(turn)) // the turn acquire_now took: nobody went first
        } else if cancel.is_cancelled() {
            Poll::Pending
        } else {
            // A free turn is taken, or this waiter is enqueued (the real waker replaces the
            // no-op one when the future is polled again).
            queued
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
        };
        async move {
            this.acquire_queued(&req, timeout, cancel, queued, first, tried)
                .await
        }
    }

    pub(super) async fn acquire_queued<Q>(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        mut queued: Q,
        first: Poll<Result<OwnedSemaphorePermit, AcquireError>>,
        tried: Option<Tried>,
    ) -> Result<HeldLock, LockError>
    where
        Q: Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Unpin,
    {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let start = tokio::time::Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let passed = |deadline: Option<tokio::time::Instant>| {
            deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
        };
        let queue_closed = || {
            LockError::io(
                "Failed to create lock",
                io::Error::other("in-process queue closed"),
            )
        };
        // `tried` counts only if the turn was free at once (no other waiter went first since).
        let (tried, tried_place, tried_prepared) = match tried {
            Some(t) if matches!(first, Poll::Ready(Ok(_))) => (t.attempted, t.place, t.prepared),
            _ => (false, None, None),
        };
        // Behind a lock of this process whose file was removed or taken over: it is lost now
        // and its turn comes to the line (see `take_turn_now`); a deadline already passed
        // still gets the turn so freed.
        let first = match first {
            Poll::Pending if lose_held_whose_file_went(&self.key) => {
                Pin::new(&mut queued).poll(&mut Context::from_waker(Waker::noop()))
            }
            first => first,
        };
        let turn = match first {
            Poll::Ready(Ok(p)) => p,
            Poll::Ready(Err(_)) => return Err(queue_closed()),
            Poll::Pending => {
                if passed(deadline) {
                    return Err(self.timed_out(timeout));
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(LockError::Aborted),
                    p = &mut queued => match p {
                        Ok(p) => p,
                        Err(_) => return Err(queue_closed()),
                    },
                    _ = sleep_until_opt(deadline) => return Err(self.timed_out(timeout)),
                }
            }
        };
        drop(queued);

        // The cross-process queue, if this lock ever had waiters: the first attempt is made only
        // at the head of it (behind waiting processes, not ahead of them).
        // Shared (`Arc`) so that a won attempt can leave the line from another thread (see
        // `attempt_async`).
        let mut place = match tried_place {
            Some(t) => Some(t),
            None => queue::existing(&self.key).map(|q| q.join()),
        }
        .map(Arc::new);

        // First attempt without registering for events: the uncontended fast path. A file
        // prepared for it and not linked is kept_turn for the next attempts.
        let mut prepared = tried_prepared.map(|p| *p);
        // Cleared when this file system has no unnamed files to prepare ahead.
        let mut ahead = true;
        // The holder the last refusal was judged on (a timeout reports it).
        let mut last_holder: Option<Box<Holder>> = None;
        // A deadline that has passed still gets its one attempt (`Some(0)` = exactly one), even
        // behind the line: the head may be stopped with the lock free.
        if !tried && (passed(deadline) || place.as_ref().is_none_or(|p| p.is_head())) {
            match self.attempt_async(req, false, &mut prepared, None).await {
                Ok(held) => {
                    held.keep_turn(turn);
                    return Ok(held);
                }
                Err(AttemptError::Busy(b)) => last_holder = Some(self.holder_of(b.holder.as_ref())),
                Err(AttemptError::Failed(e)) => return Err(e),
            }
        }
        if passed(deadline) {
            return Err(self.timeout_after(timeout, last_holder.take()));
        }
        if place.is_none() {
            place = queue::create(&self.key).map(|q| Arc::new(q.join()));
        }
        // After STARVING_AFTER this waiter goes strictly first (see `queue`).
        let starve_at = start + STARVING_AFTER;
        if let Some(place) = &place {
            let polled = self
                .wait_for_head(
                    req,
                    place,
                    (deadline, timeout),
                    starve_at,
                    &cancel,
                    (&mut prepared, &mut ahead),
                )
                .await?;
            if let Some(held) = polled {
                held.keep_turn(turn);
                return Ok(held);
            }
        }
        let starving = async {
            match &place {
                Some(t) => t.starving_from(starve_at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(starving);
        let guard = watch::watch(&self.key);
        // The file last judged held, with the close generation seen before judging it.
        let mut judged: Option<(FileSig, u64)> = None;
        loop {
            // Register for events BEFORE looking, so a release in between is not missed.
            let notified = guard.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let close_gen = guard.close_generation();
            let seen = sys::stat_sig(&self.path);
            let unchanged = match (&seen, judged) {
                (Ok(Some(sig)), Some((held_sig, gen))) => *sig == held_sig && gen == close_gen,
                _ => false,
            };
            if !unchanged {
                let look_first = !matches!(seen, Ok(None));
                match self
                    .attempt_async(req, look_first, &mut prepared, place.as_ref())
                    .await
                {
                    Ok(held) => {
                        held.keep_turn(turn);
                        return Ok(held);
                    }
                    Err(AttemptError::Busy(b)) => {
                        judged = b.sig.map(|s| (s, close_gen));
                        last_holder = Some(self.holder_of(b.holder.as_ref()));
                    }
                    Err(AttemptError::Failed(e)) => return Err(e),
                }
            }
            if passed(deadline) {
                return Err(self.timeout_after(timeout, last_holder.take()));
            }
            // Registered above: a release while this runs is not missed.
            self.prepare_ahead(req, &mut prepared, &mut ahead).await;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut notified => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {
                    judged = None; // the poll judges again (stale expiry, a dead holder)
                }
                _ = &mut starving => {} // never completes: it only sets the mark
                _ = sleep_until_opt(deadline) => return Err(self.timeout_after(timeout, last_holder.take())),
            }
        }
    }

    /// `Timeout` with the holder last judged (when the file is still that one's), else read now.
    fn timeout_after(&self, timeout: Option<Duration>, judged: Option<Box<Holder>>) -> LockError {
        match judged {
            Some(h) => self.timed_out_with(timeout, h),
            None => self.timed_out(timeout),
        }
    }

    /// Wait in the cross-process queue until this process is the head (`Ok(None)`), polling the
    /// lock file every `retry_interval` meanwhile: a lock found free (or stale) by a poll is
    /// taken at once (`Ok(Some)`), so a head that stopped running cannot block the line.
    pub(super) async fn wait_for_head(
        &self,
        req: &AcquireRequest,
        place: &Place,
        (deadline, timeout): (Option<tokio::time::Instant>, Option<Duration>),
        starve_at: tokio::time::Instant,
        cancel: &CancellationToken,
        (prepared, ahead): (&mut Option<Prepared>, &mut bool),
    ) -> Result<Option<HeldLock>, LockError> {
        let starving = place.starving_from(starve_at);
        tokio::pin!(starving);
        loop {
            let changed = place.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if place.is_head() {
                return Ok(None);
            }
            // Prepared while behind the line: ready when this process gets to the head.
            self.prepare_ahead(req, prepared, ahead).await;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut changed => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {
                    let look_first = !matches!(sys::stat_sig(&self.path), Ok(None));
                    match self.attempt_async(req, look_first, prepared, None).await {
                        Ok(held) => return Ok(Some(held)),
                        Err(AttemptError::Busy(_)) => {}
                        Err(AttemptError::Failed(e)) => return Err(e),
                    }
                }
                _ = &mut starving => {} // never completes: it only sets the mark
                // One last look before giving up: with a timeout below `retry_interval` a
                // waiter behind a stopped head would otherwise never look at all.
                _ = sleep_until_opt(deadline) => {
                    return match self.attempt_async(req, true, prepared, None).await {
                        Ok(held) => Ok(Some(held)),
                        Err(AttemptError::Busy(b)) => {
                            Err(self.timed_out_with(timeout, self.holder_of(b.holder.as_ref())))
                        }
                        Err(AttemptError::Failed(e)) => Err(e),
                    };
                }
            }
        }
    }

    /// Wait until the lock is free: no file, or a file the engine judges stale (it is not
    /// broken here). With `stale_timeout: None` that is sema's `wait` (file existence only).
    /// Woken like [`LockFile::acquire`]; `Timeout` / `Aborted` as there. Needs a tokio runtime.
    pub async fn wait_until_free(
        &self,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<(), LockError> {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let guard = watch::watch(&self.key);
        loop {
            let notified = guard.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let observation = self.observe();
            if observation == Observation::Symlink {
                return Err(self.symlink_error());
            }
            match self.judge_with_presence(&observation) {
                StaleJudgement::Free | StaleJudgement::Stale(_) => return Ok(()),
                StaleJudgement::Held(_) => {}
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(self.timed_out(timeout));
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut notified => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {}
                _ = sleep_until_opt(deadline) => return Err(self.timed_out(timeout)),
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod memory_fs_tests;

//! Waiting for a slot: the mutex's machinery on the semaphore's line key. The in-process FIFO
//! turn first (waiters of one process in call order), then the cross-process line
//! (`queue/`): the head tries on every file event naming a slot of this limit, a process
//! behind it when its polls find a slot free twice in a row (so a stopped or busy head keeps a
//! free slot from the others for at most two `retry_interval`s: [`may_try`]), everyone at the
//! deadline.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::{Round, Semaphore, Standing};
use crate::lockfile::acquire::sleep_until_opt;
use crate::lockfile::error::LockError;
use crate::lockfile::events::Events;
use crate::lockfile::held::HeldLock;
use crate::lockfile::options::AcquireRequest;
use crate::lockfile::queue::{self, Place, STARVING_AFTER};
use crate::lockfile::watch::{self, WatchGuard};

/// Smallest polling interval while waiting (zero would spin), as the mutex's.
const MIN_RETRY: Duration = Duration::from_millis(1);

/// How many slot paths a waiter watches for file events (the base and slots 1..): beyond
/// them a released slot is found by the `retry_interval` poll. A semaphore with more slots
/// than this is rarely full.
const WATCHED_SLOTS: u64 = 16;

/// Where a waiter stands in the cross-process line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// No line (nobody else waits, or no queue on this system).
    None,
    /// First in the line.
    Head,
    /// Behind another process.
    Behind,
}

/// Whether a waiter tries the slots on this wake-up: the head (or a waiter with no line) on
/// every one; a waiter behind another process only when `free_polls`, the polls in a row
/// (this wake-up's included, 0 when it is no poll) that found a slot of its limit free, reach
/// 2, or at its deadline. The head gets one `retry_interval` to take a freed slot (a hand-off
/// takes it in well under 1 ms: a waiter behind it polling at that moment would otherwise jump
/// the line); a head that stopped running (SIGSTOP) or whose thread is busy keeps a free slot
/// from the others for at most two `retry_interval`s.
pub fn may_try(line: Line, free_polls: u32) -> bool {
    match line {
        Line::None | Line::Head => true,
        Line::Behind => free_polls >= 2,
    }
}

/// What [`Semaphore::acquire_now`] decided.
pub enum SemaphoreNow {
    /// Won, or failed for good.
    Done(Result<HeldLock, LockError>),
    /// Wait: pass this to [`Semaphore::acquire_in_order`].
    Wait(SemaphoreTried),
}

/// The place an [`Semaphore::acquire_now`] took (in-process turn, cross-process place) and
/// what its round found, handed to the wait so that nothing is lost in between.
pub struct SemaphoreTried {
    attempted: bool,
    standing: Standing,
    /// Before `turn`: dropped first (see the mutex's `Tried`).
    place: Option<Place>,
    turn: Option<OwnedSemaphorePermit>,
}

impl SemaphoreTried {
    fn nothing() -> SemaphoreTried {
        SemaphoreTried {
            attempted: false,
            standing: Standing::Newcomer,
            place: None,
            turn: None,
        }
    }
}

impl Semaphore {
    /// Wait for a slot: in-process FIFO, then the cross-process line, then rounds woken by
    /// file events on the slots of this limit, by `retry_interval` and ended by the deadline
    /// (`Timeout`; `Some(0)` = exactly one round) or `cancel` (`Aborted`). A failed or
    /// cancelled acquire leaves no slot behind. Must run inside a tokio runtime (time enabled).
    pub async fn acquire(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<HeldLock, LockError> {
        self.acquire_in_order(req.clone(), timeout, cancel, None)
            .await
    }

    /// The uncontended path of `acquire` on the calling thread, for callers that must not block
    /// (the JS thread): one round when the file calls are short (see
    /// [`LockFile::attempts_are_short`](crate::lockfile::LockFile::attempts_are_short)) and
    /// this caller is first in both lines; else `Wait` with the places taken.
    pub fn acquire_now(&self, req: &AcquireRequest) -> SemaphoreNow {
        if !self.inner.base.attempts_are_short() {
            return SemaphoreNow::Wait(SemaphoreTried::nothing());
        }
        let Ok(turn) = self.inner.fifo.clone().try_acquire_owned() else {
            return SemaphoreNow::Wait(SemaphoreTried::nothing());
        };
        let place = queue::existing(&self.inner.line_key).map(|q| q.join());
        let mut tried = SemaphoreTried {
            attempted: false,
            standing: Standing::Newcomer,
            place,
            turn: Some(turn),
        };
        if tried.place.as_ref().is_some_and(|p| !p.is_head()) {
            return SemaphoreNow::Wait(tried);
        }
        match self.round(req, &mut tried.standing) {
            Round::Won(held) => SemaphoreNow::Done(Ok(held)),
            Round::Failed(e) => SemaphoreNow::Done(Err(e)),
            Round::Busy(_) => {
                tried.attempted = true;
                // In the cross-process line during this call: waiters of several processes
                // are served in the order of their calls.
                if tried.place.is_none() {
                    tried.place = queue::create(&self.inner.line_key).map(|q| q.join());
                }
                SemaphoreNow::Wait(tried)
            }
        }
    }

    /// How many processes of this machine stand in this semaphore's line (`None` where there
    /// is no line): for diagnostics and tests.
    pub fn waiting_processes(&self) -> Option<u32> {
        queue::waiting_processes(&self.inner.line_key)
    }

    /// [`Semaphore::acquire`] that takes its place in the in-process FIFO now, on the calling
    /// thread (see [`LockFile::acquire_in_order`](crate::lockfile::LockFile::acquire_in_order)).
    pub fn acquire_in_order(
        &self,
        req: AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        tried: Option<SemaphoreTried>,
    ) -> impl Future<Output = Result<HeldLock, LockError>> + Send + 'static {
        let this = self.clone();
        let mut queued = Box::pin(self.inner.fifo.clone().acquire_owned());
        let mut tried = tried.unwrap_or_else(SemaphoreTried::nothing);
        let first = match tried.turn.take() {
            Some(turn) => Poll::Ready(Ok(turn)),
            None if cancel.is_cancelled() => Poll::Pending,
            None => queued
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop())),
        };
        async move {
            if cancel.is_cancelled() {
                return Err(LockError::Aborted);
            }
            let start = tokio::time::Instant::now();
            let deadline = timeout.and_then(|t| start.checked_add(t));
            let turn = match first {
                Poll::Ready(Ok(turn)) => turn,
                Poll::Ready(Err(_)) => return Err(closed()),
                Poll::Pending => {
                    // Another waiter of this process went first: what `tried` saw is old.
                    tried = SemaphoreTried::nothing();
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Err(LockError::Aborted),
                        p = &mut queued => p.map_err(|_| closed())?,
                        _ = sleep_until_opt(deadline) => return Err(this.timed_out(timeout)),
                    }
                }
            };
            drop(queued);
            let r = this
                .wait_in_line(&req, (deadline, timeout), start, &cancel, tried)
                .await;
            drop(turn);
            r
        }
    }

    async fn wait_in_line(
        &self,
        req: &AcquireRequest,
        (deadline, timeout): (Option<tokio::time::Instant>, Option<Duration>),
        start: tokio::time::Instant,
        cancel: &CancellationToken,
        tried: SemaphoreTried,
    ) -> Result<HeldLock, LockError> {
        let SemaphoreTried {
            attempted,
            mut standing,
            place,
            turn: _,
        } = tried;
        let passed = || deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
        let mut place = place.or_else(|| queue::existing(&self.inner.line_key).map(|q| q.join()));
        let line = |place: Option<&Place>| match place {
            None => Line::None,
            Some(p) if p.is_head() => Line::Head,
            Some(_) => Line::Behind,
        };
        // The first round: at once unless `acquire_now` just made it, or behind another
        // process (a deadline that has passed still gets its one round).
        if !attempted && (passed() || may_try(line(place.as_ref()), 0)) {
            match self.round_async(req, &mut standing).await {
                Round::Won(held) => return Ok(held),
                Round::Failed(e) => return Err(e),
                Round::Busy(_) => {}
            }
        }
        if passed() {
            return Err(self.timed_out(timeout));
        }
        if place.is_none() {
            place = queue::create(&self.inner.line_key).map(|q| q.join());
        }
        let place = place.map(Arc::new);
        let starving = async {
            match &place {
                Some(p) => p.starving_from(start + STARVING_AFTER).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(starving);
        let watched: Vec<WatchGuard> = (0..self.inner.limit.min(WATCHED_SLOTS))
            .map(|i| watch::watch(&self.slot_path(i)))
            .collect();
        let retry = self.inner.base.options.retry_interval.max(MIN_RETRY);
        let mut poll_due = false;
        // The poll's cadence is kept across wake-ups: events (other slots changing hands) do not
        // put it off.
        let mut next_poll = tokio::time::Instant::now() + retry;
        // Polls in a row that found a slot free (see `may_try`).
        let mut free_polls = 0;
        loop {
            // Registered BEFORE looking, so a release in between is not missed.
            let mut events = Events::of(watched.iter().map(WatchGuard::notify));
            if let Some(p) = place.as_ref() {
                events.add(p.changed());
            }
            let position = line(place.as_deref());
            if position == Line::Behind && poll_due {
                // A mismatch is the head's to meet (and ours once we try): no free slot here.
                let free = self.is_free().unwrap_or(false);
                free_polls = if free { free_polls + 1 } else { 0 };
            }
            if may_try(position, if poll_due { free_polls } else { 0 }) {
                match self.round_async(req, &mut standing).await {
                    Round::Won(held) => return Ok(held),
                    Round::Failed(e) => return Err(e),
                    Round::Busy(_) => {}
                }
            }
            poll_due = false;
            if passed() {
                return Err(self.timed_out(timeout));
            }
            let any_event = events.any();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = any_event => {}
                _ = tokio::time::sleep_until(next_poll) => {
                    poll_due = true;
                    next_poll = tokio::time::Instant::now() + retry;
                }
                _ = &mut starving => {} // never completes: it only sets the mark
                _ = sleep_until_opt(deadline) => {
                    // One last round before giving up, whatever the line says.
                    return match self.round_async(req, &mut standing).await {
                        Round::Won(held) => Ok(held),
                        Round::Failed(e) => Err(e),
                        Round::Busy(holder) => Err(self.timed_out_with(timeout, holder)),
                    };
                }
            }
        }
    }

    /// A round from async code: inline when its file calls are short, else (with `fsync` on a
    /// disk, a network file system) in `block_in_place` on a multi-thread runtime.
    async fn round_async(&self, req: &AcquireRequest, standing: &mut Standing) -> Round {
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if self.inner.base.attempts_are_short() || !multi {
            self.round(req, standing)
        } else {
            tokio::task::block_in_place(|| self.round(req, standing))
        }
    }

    fn timed_out(&self, timeout: Option<Duration>) -> LockError {
        self.timed_out_with(timeout, None)
    }

    fn timed_out_with(
        &self,
        timeout: Option<Duration>,
        holder: Option<crate::lockfile::LockInfo>,
    ) -> LockError {
        LockError::Timeout {
            timeout_ms: timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            holder: self.holder(holder),
        }
    }

    /// Wait until an acquirer of this limit would get a slot (a slot file absent, or its
    /// holder reclaimable), creating nothing. `LimitMismatch`, `Timeout`, `Aborted` as
    /// `acquire`. Needs a tokio runtime.
    pub async fn wait_until_free(
        &self,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<(), LockError> {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let watched: Vec<WatchGuard> = (0..self.inner.limit.min(WATCHED_SLOTS))
            .map(|i| watch::watch(&self.slot_path(i)))
            .collect();
        let retry = self.inner.base.options.retry_interval.max(MIN_RETRY);
        loop {
            // Registered BEFORE looking, as the acquire's.
            let mut events = Events::of(watched.iter().map(WatchGuard::notify));
            if self.is_free()? {
                return Ok(());
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(self.timed_out(timeout));
            }
            let any_event = events.any();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = any_event => {}
                _ = tokio::time::sleep(retry) => {}
                _ = sleep_until_opt(deadline) => return Err(self.timed_out(timeout)),
            }
        }
    }
}

fn closed() -> LockError {
    LockError::io(
        "Failed to create lock",
        std::io::Error::other("in-process queue closed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, defect 3: a waiter behind a head that does not run tries once its polls find
    /// a slot free twice in a row, and not before (the head goes first).
    #[test]
    fn a_waiter_behind_the_head_tries_at_every_poll() {
        assert!(may_try(Line::Head, 0));
        assert!(may_try(Line::None, 0));
        assert!(!may_try(Line::Behind, 0));
        // One poll finding a slot free: the head may be taking it right now.
        assert!(!may_try(Line::Behind, 1));
        // Two in a row: the head did not take it for a whole retry_interval.
        assert!(may_try(Line::Behind, 2));
        assert!(may_try(Line::Behind, 3));
    }
}

//! The heartbeat: one process-wide thread that refreshes every held lock's timestamp at its
//! period and finds lost locks. A lock joins its list at [`HeldLock::start_heartbeat`]; the
//! thread keeps a small list of (id, due, period, lock). `add`/`remove` only edit the list
//! under a mutex; the thread is woken (a condvar notification) only when a new entry is due
//! before its planned wake-up. While the list is empty it wakes once a second for a while, so
//! a new lock with the usual multi-second period costs no wake-up at all; after a minute idle
//! it sleeps until notified.
//!
//! Each beat also writes the period (`heartbeat=` ms) and keeps the lock's [`HolderProgress`]:
//! a lock whose file no beat could change for `HOLDER_LOSS_BEATS` periods (3 s with the default
//! 1 s) is lost, before a waiter on another host may take it (`REMOTE_BEATS`, 6 s); until its
//! first beat has changed the file a lock beats every 1 s at most (its file has no `heartbeat=`
//! line yet): the rule and its numbers are in `stale::remote`.

use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::held::{HeldInner, HeldLock};
use super::stale::remote::{BeatOutcome, HolderProgress};
use super::unpoisoned;

/// Smallest heartbeat period we run (a zero period would spin).
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Largest heartbeat period we run (longer ones would overflow timer arithmetic).
const MAX_HEARTBEAT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long after a wall-clock second boundary a whole-second beat runs: late enough that the
/// new second has begun on every reader of this host's clock, early enough to leave ~0.95 s
/// for scheduling delays before a reader could see an age of 2 s.
const AFTER_SECOND: Duration = Duration::from_millis(50);

/// When a beat of `period` that runs at `now` runs next. A whole number of seconds is aligned
/// to the wall clock: the timestamp is whole seconds, and readers compare their whole-second
/// clock with it, so a refresh at `k s + 50 ms` keeps the age they see at most `period` until
/// `k + period + 0.95 s` (an unaligned 1 s period would let a reader at `k + 2.0 s` see 2 s when
/// the beat at `k + 1.99 s` is a few ms late). Other periods run every `period`.
pub(super) fn next_due(now: Instant, period: Duration) -> Instant {
    let into_second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| Duration::from_nanos(u64::from(d.subsec_nanos())))
        .unwrap_or(Duration::ZERO);
    now.checked_add(step_to_due(period, into_second))
        .unwrap_or(now + MAX_HEARTBEAT)
}

/// How long after a moment `into_second` into a wall-clock second the next beat of `period`
/// runs (see [`next_due`]); the simulator calls it with each process's own wall clock.
pub(crate) fn step_to_due(period: Duration, into_second: Duration) -> Duration {
    let whole_seconds = period >= Duration::from_secs(1) && period.subsec_nanos() == 0;
    if whole_seconds {
        // The boundary `period` from the last one, then 50 ms into that second; when we are
        // still before this second's 50 ms mark, the beat is due at this second's mark plus
        // `period`, never more than `period` away from the previous beat's second.
        (period + AFTER_SECOND).saturating_sub(into_second)
    } else {
        period
    }
}

impl HeldInner {
    /// One heartbeat: verify, then refresh the timestamp (and write the period) in place.
    /// `None` = stop (no longer ours); a lock whose ownership cannot be told now, or whose write
    /// failed, is tried again at the next beat (`Failed`).
    pub(super) fn heartbeat_tick(&self, period: Duration) -> Option<BeatOutcome> {
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        let mut state = unpoisoned(&self.state);
        let before = state.content.clone();
        let written = self.rewrite_if_ours(&mut state, |next| next.heartbeat_ms = Some(period_ms));
        let changed = state.content != before;
        drop(state);
        match written {
            Ok(true) => {
                super::shared::after_beat(self.id); // a reader's file: its base too
                Some(if changed {
                    BeatOutcome::Changed
                } else {
                    BeatOutcome::Same
                })
            }
            Ok(false) => None,
            Err(_) => Some(BeatOutcome::Failed),
        }
    }

    /// No beat changed the file for `silent`: another host may take the lock soon, so it is
    /// lost now (see `stale::remote`).
    fn lose_to_silence(&self, silent: Duration) {
        let mut state = unpoisoned(&self.state);
        if !state.finished {
            let reason = format!(
                "heartbeat could not refresh the lock file for {} ms (a waiter on another host \
                 may take it)",
                silent.as_millis()
            );
            self.lose(&mut state, &reason);
        }
    }
}

impl HeldLock {
    /// Start refreshing the timestamp every `options.heartbeat` (no-op if the heartbeat is off,
    /// already started, or the lock is no longer held). One process-wide heartbeat thread walks
    /// all held locks at their periods: starting only adds an entry to its list, releasing
    /// removes it (no timer armed or cancelled per lock); no runtime is needed.
    pub fn start_heartbeat(&self) {
        let Some(period) = self.inner.file.options.heartbeat else {
            return;
        };
        let mut state = unpoisoned(&self.inner.state);
        if state.heartbeat_started || state.finished {
            return;
        }
        state.heartbeat_started = true;
        add(
            self.inner.id,
            period.clamp(MIN_HEARTBEAT, MAX_HEARTBEAT),
            Arc::downgrade(&self.inner),
        );
    }
}

pub(super) struct Entry {
    pub(super) id: u64,
    pub(super) due: Instant,
    pub(super) period: Duration,
    pub(super) held: Weak<HeldInner>,
    pub(super) progress: HolderProgress,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) entries: Vec<Entry>,
    /// When the thread will look next (`None`: asleep until notified, or not started).
    pub(super) planned: Option<Instant>,
    pub(super) started: bool,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) wake: Condvar,
}

pub(super) static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
    state: Mutex::new(State::default()),
    wake: Condvar::new(),
});

pub(super) const IDLE_TICK: Duration = Duration::from_secs(1);
pub(super) const IDLE_STOP: Duration = Duration::from_secs(60);

pub(super) fn add(id: u64, period: Duration, held: Weak<HeldInner>) {
    let shared = &*SHARED;
    let now = Instant::now();
    // The file was linked into place just before (the lock was acquired).
    let progress = HolderProgress::new(now, period);
    let due = next_due(now, progress.beat_period());
    let mut st = unpoisoned(&shared.state);
    st.entries.push(Entry {
        id,
        due,
        period,
        held,
        progress,
    });
    if !st.started {
        st.started = true;
        let spawned = std::thread::Builder::new()
            .name("sema-heartbeat".into())
            .spawn(run);
        if spawned.is_err() {
            st.started = false; // try again with the next lock
        }
        return;
    }
    if st.planned.is_none_or(|p| due < p) {
        shared.wake.notify_one();
    }
}

/// Note a beat of `id` that started at `started`: `Some(silence)` when the lock is now lost to
/// a silence that long.
fn note_beat(id: u64, started: Instant, outcome: BeatOutcome) -> Option<Duration> {
    let mut st = unpoisoned(&SHARED.state);
    let entry = st.entries.iter_mut().find(|e| e.id == id)?;
    let before = entry.progress.beat_period();
    let lost = entry.progress.after_tick(started, outcome, Instant::now());
    if entry.progress.beat_period() != before {
        // The first beat that changed the file: from now on at the heartbeat's own period.
        entry.due = next_due(Instant::now(), entry.progress.beat_period());
    }
    lost.then(|| entry.progress.loss_after())
}

pub(super) fn remove(id: u64) {
    let mut st = unpoisoned(&SHARED.state);
    if let Some(i) = st.entries.iter().position(|e| e.id == id) {
        st.entries.swap_remove(i);
    }
}

pub(super) fn run() {
    let shared = &*SHARED;
    let mut due_now: Vec<(u64, Duration, Weak<HeldInner>)> = Vec::new();
    let mut idle_since: Option<Instant> = None;
    let mut st = unpoisoned(&shared.state);
    loop {
        let now = Instant::now();
        for e in st.entries.iter_mut() {
            if e.due <= now {
                due_now.push((e.id, e.period, e.held.clone()));
                e.due = next_due(now, e.progress.beat_period());
            }
        }
        if !due_now.is_empty() {
            st.planned = Some(now);
            drop(st);
            for (id, period, weak) in due_now.drain(..) {
                let Some(inner) = weak.upgrade() else {
                    remove(id);
                    continue;
                };
                let started = Instant::now();
                match inner.heartbeat_tick(period) {
                    None => remove(id),
                    Some(outcome) => {
                        if let Some(silent) = note_beat(id, started, outcome) {
                            inner.lose_to_silence(silent); // removes it from the list
                        }
                    }
                }
            }
            st = unpoisoned(&shared.state);
            continue;
        }
        let next = st.entries.iter().map(|e| e.due).min();
        let wait = match next {
            Some(d) => {
                idle_since = None;
                Some(d.saturating_duration_since(now))
            }
            None => {
                let since = *idle_since.get_or_insert(now);
                (now.duration_since(since) < IDLE_STOP).then_some(IDLE_TICK)
            }
        };
        st = match wait {
            Some(w) => {
                st.planned = now.checked_add(w);
                shared
                    .wake
                    .wait_timeout(st, w)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0)
            }
            None => {
                st.planned = None;
                shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn into_second(at: std::time::SystemTime) -> Duration {
        Duration::from_nanos(u64::from(
            at.duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos(),
        ))
    }

    #[test]
    fn whole_second_beats_land_just_after_a_wall_clock_second() {
        for _ in 0..5 {
            let now = Instant::now();
            let wall = std::time::SystemTime::now();
            let due = next_due(now, Duration::from_secs(1));
            let step = due - now;
            // Never more than one second and the 50 ms mark away, never sooner than the mark.
            assert!(step > Duration::ZERO && step <= Duration::from_secs(1) + AFTER_SECOND);
            let at = into_second(wall + step);
            // The wall clock at the due instant is 50 ms into a second (a few ms of slack for
            // the two clock reads above).
            assert!(
                at >= AFTER_SECOND - Duration::from_millis(5)
                    && at <= AFTER_SECOND + Duration::from_millis(5),
                "{at:?}"
            );
            std::thread::sleep(Duration::from_millis(137));
        }
    }

    #[test]
    fn other_periods_run_every_period() {
        let now = Instant::now();
        for ms in [10, 250, 1500] {
            let p = Duration::from_millis(ms);
            assert_eq!(next_due(now, p) - now, p);
        }
    }
}

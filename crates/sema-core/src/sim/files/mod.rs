//! The file-lock world: simulated processes (pids in pid namespaces, reuse after death, SIGKILL
//! at any step, SIGSTOP for a while, wall clocks that jump) taking the plain mutex, counting
//! semaphores of mixed limits, or the shared lock (shared/exclusive) on one path of a simulated
//! file system that fails calls with `EMFILE`/`ENOSPC` (once, or every call of a holder for a
//! while); the protocol steps (`proto`) call the core's own decisions. The other namespace is
//! another host: judged by its heartbeat's progress (`stale::remote`), each process with its own
//! `ProgressMemory` on its monotonic clock, each holder counting its loss by `HolderProgress`.
//!
//! A process's program is ordinary `async` code (`proto`); every file call awaits a scheduling
//! point, so one [`Action::Step`] runs exactly one call and a SIGKILL (dropping the program)
//! lands between any two calls. Time passes ([`Action::Advance`]) only when no process can run:
//! processes are fast, the clock is what they wait for.
//!
//! Invariants after every step: never more believing holders than the kind allows (a holder
//! counts until it is told of its loss, so a loss told after someone else's grant is caught);
//! one believer per lock file; no waiter sleeps past its deadline, nor waits while the lock is
//! free (no file of a live process, none of a dead one not yet reclaimable, see `free_for`)
//! for longer than [`FREE_BOUND_POLLS`] polls. At the end: every request settled, and no file left behind
//! except by a killed process or a failed release, or a shared base whose group is dead.
//!
//! Not modelled (said in the report): the shared lock's FIFO tickets (no fairness invariant is
//! checked), the mutex's cross-process line (every waiter polls), the in-process FIFO (one request
//! per process at a time), files without identity (`sema`/`semats`).

mod fs;
mod invariants;
mod program;
mod proto;
mod semaphore;
mod shared;
mod state;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{SimRng, Violation, World};
use crate::lockfile::shared::bytes_are_shared_base;
use crate::lockfile::shared::policy::Mode;
use crate::lockfile::stale::remote::{evidence_period, remote_bound};
use crate::lockfile::{parse_lock_info, read_lock_bytes_lossy};
use fs::{Errno, SimFs};
use program::{run, Request};
use proto::{BASE, READER_PREFIX};
use state::{Config, Cx, Grant, Life, Proc, State};

/// A waiter may see the lock free this many `retry_interval`s before it must have it (a waiter
/// behind the semaphore's head needs two free polls, `may_try`).
pub const FREE_BOUND_POLLS: u64 = 5;

/// Which kinds share the path in one world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// The plain mutex and semaphores (slot 0 is the base path, which the mutex takes).
    Semaphore,
    /// The plain mutex and the shared lock's two modes.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Slots(u64),
    Shared(Mode),
}

/// One scheduling choice.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Process `i` makes its next file call.
    Step(usize),
    /// Time passes to the next timer (no process can run).
    Advance,
    /// A new process starts (its pid the lowest free one of its namespace: dead pids are reused).
    Spawn,
    Kill(usize),
    Stop(usize),
    /// Holder `i`'s file calls fail with `ENOSPC` for the world's fail window (its host's view of
    /// the volume is full or unreachable while other hosts' is not).
    Fail(usize),
    /// Process `i`'s wall clock jumps by this many ms.
    Jump(usize, i64),
}

type Program = Pin<Box<dyn Future<Output = ()>>>;

thread_local! {
    /// Whether shared-lock worlds make stray `release(path)` calls. Off in the seed budget, on in
    /// its own test (they found that `release_as` removed a shared base, which carries no
    /// identity, for a caller whose pid it names, readers of others holding; fixed).
    static STRAY_RELEASE_IN_SHARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// A defect switched on in its own test only: a holder that goes on holding after its
    /// heartbeat counted the lock lost to silence (the rule's "told before taken" is then moot),
    /// so a waiter on another host is granted beside it.
    static HOLDER_IGNORES_SILENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How often the cross-host rule acted, over the runs of this thread ([`Tally`]).
    static TALLY: std::cell::Cell<Tally> = const { std::cell::Cell::new(Tally { silence_losses: 0, remote_breaks: 0 }) };
    /// The trace of a replay ([`replay_traced`]): each file change, grant and scheduling choice.
    static TRACE: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// How often the cross-host rule acted (so a seed budget shows it exercised the rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Holders that counted their lock lost to a silent heartbeat (`HolderProgress`).
    pub silence_losses: u64,
    /// Lock files of a holder on another host broken by a waiter (evidence unchanged for
    /// `remote_bound`).
    pub remote_breaks: u64,
}

/// The tally so far on this thread.
pub fn tally() -> Tally {
    TALLY.with(|t| t.get())
}

fn count(f: impl FnOnce(&mut Tally)) {
    TALLY.with(|t| {
        let mut x = t.get();
        f(&mut x);
        t.set(x);
    });
}

/// Adds a line to the trace when one is being taken.
fn trace(line: impl FnOnce() -> String) {
    TRACE.with(|t| {
        if let Some(t) = t.borrow_mut().as_mut() {
            t.push(line());
        }
    });
}

/// Replays `schedule` from `seed` and returns what happened, line by line, with the outcome.
pub fn replay_traced(seed: u64, schedule: &[Action]) -> (Result<(), Violation>, Vec<String>) {
    TRACE.with(|t| *t.borrow_mut() = Some(Vec::new()));
    let out = super::replay::<FilesWorld>(seed, schedule);
    let lines = TRACE.with(|t| t.borrow_mut().take()).unwrap_or_default();
    (out, lines)
}

pub struct FilesWorld {
    st: Rc<RefCell<State>>,
    programs: Vec<Option<Program>>,
    family: Family,
    kinds: Vec<Kind>,
    namespaces: u32,
    spawns_left: u32,
    kills_left: u32,
    stops_left: u32,
    jumps_left: u32,
    fails_left: u32,
    stop_ms: u64,
    fail_ms: u64,
    /// Rotates which process the fault actions are offered for (keeps steps the common choice).
    turn: usize,
    /// The world's own draws (faults, new processes' programs), seeded once in `new`: the runner
    /// draws its choices from the rng it passes to `apply`, and `replay` makes no such draws, so
    /// draws from that rng would differ between a run and its replay.
    rng: SimRng,
}

fn draw<T: Copy>(rng: &mut SimRng, xs: &[T]) -> T {
    xs[rng.below(xs.len())]
}

impl FilesWorld {
    fn spawn(&mut self) {
        let stray_allowed =
            self.family == Family::Semaphore || STRAY_RELEASE_IN_SHARED.with(|c| c.get());
        let rng = &mut self.rng;
        let ns = rng.below(self.namespaces as usize) as u32;
        let requests: Vec<Request> = (0..1 + rng.below(3))
            .map(|_| Request {
                kind: draw(rng, &self.kinds),
                timeout_ms: draw(rng, &[None, Some(0), Some(500), Some(3_000), Some(15_000)]),
                hold_ms: draw(rng, &[0, 300, 2_000, 12_000]),
                stray_release: rng.chance(1, 6) && stray_allowed,
            })
            .collect();
        let me = {
            let mut st = self.st.borrow_mut();
            // The lowest pid from 100 no live process of the namespace has: a dead one's is reused.
            let pid = (100..)
                .find(|&pid| {
                    !st.procs
                        .iter()
                        .any(|p| p.ns == ns && p.pid == pid && p.alive())
                })
                .unwrap_or(100);
            let me = st.procs.len();
            let start = 1_000 + me as u64 * 37;
            let start_secs = state::EPOCH_SECS + (st.now / 1000) as i64;
            let now = st.now;
            st.procs.push(Proc {
                pid,
                ns,
                start,
                start_secs,
                life: Life::Running,
                wall_offset_ms: 0,
                failing_until: 0,
                first_seen: Default::default(),
                wake_at: Some(now),
                watch: state::Watch::Nothing,
                event: false,
                grant: None,
                waiting: None,
                started: 0,
                settled: 0,
                losses: 0,
                grants: 0,
            });
            st.memories.push(Default::default());
            me
        };
        let cx = Cx {
            st: self.st.clone(),
            me,
        };
        self.programs.push(Some(Box::pin(run(cx, requests))));
    }

    fn runnable(&self, i: usize) -> bool {
        let st = self.st.borrow();
        let p = &st.procs[i];
        self.programs[i].is_some()
            && p.life == Life::Running
            && (p.wake_at.is_some_and(|w| w <= st.now) || p.event)
    }

    /// The next time something happens when nobody can run: a timer or the end of a stop.
    fn next_time(&self) -> Option<u64> {
        let st = self.st.borrow();
        st.procs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.life {
                Life::Running if self.programs[i].is_some() => p.wake_at,
                Life::Stopped(until) => Some(until),
                _ => None,
            })
            .filter(|&t| t > st.now)
            .min()
    }

    fn ended(&mut self, i: usize, life: Life) {
        self.programs[i] = None;
        let mut st = self.st.borrow_mut();
        st.procs[i].life = life;
        st.procs[i].grant = None;
        st.procs[i].waiting = None;
        st.fs.drop_marks_of(i);
        st.line.retain(|&p| p != i);
    }

    fn step(&mut self, i: usize, fault: Option<Errno>) {
        {
            let mut st = self.st.borrow_mut();
            let failing = st.procs[i].failing_until > st.now;
            st.fault = fault.or(failing.then_some(Errno::Nospc));
        }
        let done = match self.programs[i].as_mut() {
            Some(program) => {
                let mut cx = Context::from_waker(Waker::noop());
                program.as_mut().poll(&mut cx) == Poll::Ready(())
            }
            None => false,
        };
        self.st.borrow_mut().fault = None;
        if done {
            self.ended(i, Life::Exited);
        }
    }

    fn advance(&mut self) -> Result<(), Violation> {
        let Some(to) = self.next_time() else {
            return Ok(());
        };
        let mut st = self.st.borrow_mut();
        st.now = to;
        let now = st.now;
        for (i, p) in st.procs.iter_mut().enumerate() {
            if p.life == Life::Running {
                if let Some(d) = p.waiting.and_then(|w| w.deadline) {
                    if now > d {
                        return Err(Violation(format!(
                            "process {i} (pid {}) still waits at {now} ms, past its deadline {d} ms",
                            p.pid
                        )));
                    }
                }
            }
            if let Life::Stopped(until) = p.life {
                if until <= now {
                    p.life = Life::Running;
                }
            }
        }
        Ok(())
    }
}

/// The largest wall-clock offset a jump leaves (kept well inside the stale timeout: a clock off by
/// more than the timeout makes any age-based judgement wrong, by design).
const MAX_JUMP_MS: i64 = 9_000;

impl World for FilesWorld {
    type Action = Action;

    fn new(rng: &mut SimRng) -> Self {
        let family = if rng.chance(1, 2) {
            Family::Semaphore
        } else {
            Family::Shared
        };
        let mut kinds = match family {
            Family::Semaphore => match rng.below(3) {
                0 => vec![Kind::Slots(2)],
                1 => vec![Kind::Slots(3)],
                _ => vec![Kind::Slots(2), Kind::Slots(3)],
            },
            Family::Shared => vec![
                Kind::Shared(Mode::Shared),
                Kind::Shared(Mode::Shared),
                Kind::Shared(Mode::Exclusive),
            ],
        };
        if rng.chance(1, 2) {
            kinds.push(Kind::Plain);
        }
        let cfg = Config {
            // 6 s: the least `remote_bound` gives a file without `heartbeat=` (before its
            // holder's first beat), where the holder's loss clock is tightest.
            stale_timeout: Duration::from_millis(draw(rng, &[6_000, 60_000])),
            retry_ms: 1_000,
            heartbeat_ms: draw(rng, &[500, 1_000, 3_000]),
            fault_den: draw(rng, &[0, 0, 50, 200]),
            presence: rng.chance(1, 2),
        };
        let e_ms = evidence_period(Duration::from_millis(cfg.heartbeat_ms)).as_millis() as u64;
        // Stops shorter than two evidence periods: the rule's covered lateness (`stale::remote`:
        // a holder stopped longer than that may be taken before its next beat tells it).
        let stops: Vec<u64> = [1_500, 4_000, 15_000]
            .into_iter()
            .filter(|&ms| ms < 2 * e_ms)
            .collect();
        let st = State {
            fs: SimFs::default(),
            now: 0,
            procs: Vec::new(),
            cfg,
            fault: None,
            next_token: 0,
            line: Vec::new(),
            memories: Vec::new(),
            monotonic_base: std::time::Instant::now(),
        };
        let mut world = FilesWorld {
            st: Rc::new(RefCell::new(st)),
            programs: Vec::new(),
            family,
            kinds,
            namespaces: 1 + rng.below(2) as u32,
            spawns_left: rng.below(4) as u32,
            kills_left: rng.below(3) as u32,
            stops_left: rng.below(3) as u32,
            jumps_left: rng.below(3) as u32,
            fails_left: rng.below(3) as u32,
            stop_ms: draw(rng, &stops),
            // Long enough for the holder to count its lock lost (3 evidence periods) and for a
            // waiter on another host to take it (6), or not.
            fail_ms: e_ms * draw(rng, &[2, 4, 8]),
            turn: 0,
            rng: SimRng::new(rng.next_u64()),
        };
        for _ in 0..2 + rng.below(3) {
            world.spawn();
        }
        world
    }

    fn enabled(&self) -> Vec<Action> {
        let n = self.programs.len();
        let mut out: Vec<Action> = (0..n)
            .filter(|&i| self.runnable(i))
            .map(Action::Step)
            .collect();
        if out.is_empty() && self.next_time().is_some() {
            out.push(Action::Advance);
        }
        let live: Vec<usize> = (0..n).filter(|&i| self.programs[i].is_some()).collect();
        if live.is_empty() {
            return out;
        }
        if self.spawns_left > 0 {
            out.push(Action::Spawn);
        }
        let i = live[self.turn % live.len()];
        let st = self.st.borrow();
        if self.kills_left > 0 {
            out.push(Action::Kill(i));
        }
        if self.stops_left > 0 && st.procs[i].life == Life::Running {
            out.push(Action::Stop(i));
        }
        // A failing volume matters to a holder (its heartbeat): offered for one, in turn, that has
        // beaten (its `heartbeat=` line gives a waiter on another host the `REMOTE_BEATS` bound),
        // and every other turn for one that has not (the waiter's bound is then the stale
        // timeout, as little as 6 s). Offered before the first beat at every turn it would land
        // there almost always (a fault is offered at every step, and many run at time 0).
        let pre_beat = self.turn % 2 == 1;
        let holders: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&h| {
                let p = &st.procs[h];
                let beaten = p.grant.as_ref().is_some_and(|(_, name, id)| {
                    st.fs.get(name).is_some_and(|f| {
                        f.id == *id
                            && parse_lock_info(&read_lock_bytes_lossy(&f.bytes))
                                .is_ok_and(|i| i.heartbeat_ms.is_some())
                    })
                });
                p.grant.is_some() && p.failing_until <= st.now && (beaten || pre_beat)
            })
            .collect();
        if self.fails_left > 0 && !holders.is_empty() {
            out.push(Action::Fail(holders[self.turn % holders.len()]));
        }
        if self.jumps_left > 0 {
            let ms = if st.procs[i].wall_offset_ms > 0 {
                -MAX_JUMP_MS
            } else {
                MAX_JUMP_MS
            };
            out.push(Action::Jump(i, ms));
        }
        out
    }

    fn apply(&mut self, action: &Action, _: &mut SimRng) -> Result<(), Violation> {
        let rng = &mut self.rng;
        self.turn = self.turn.wrapping_add(1);
        trace(|| format!("@{} ms {action:?}", self.st.borrow().now));
        match *action {
            Action::Step(i) => {
                let den = self.st.borrow().cfg.fault_den;
                let fault = (den > 0 && rng.chance(1, den)).then(|| {
                    if rng.chance(1, 2) {
                        Errno::Emfile
                    } else {
                        Errno::Nospc
                    }
                });
                self.step(i, fault);
            }
            Action::Advance => self.advance()?,
            Action::Spawn => {
                self.spawns_left -= 1;
                self.spawn();
            }
            Action::Kill(i) => {
                self.kills_left -= 1;
                self.ended(i, Life::Killed);
            }
            Action::Stop(i) => {
                self.stops_left -= 1;
                let mut st = self.st.borrow_mut();
                let until = st.now + self.stop_ms;
                st.procs[i].life = Life::Stopped(until);
            }
            Action::Fail(i) => {
                self.fails_left -= 1;
                let mut st = self.st.borrow_mut();
                let until = st.now + self.fail_ms;
                st.procs[i].failing_until = until;
            }
            Action::Jump(i, ms) => {
                self.jumps_left -= 1;
                self.st.borrow_mut().procs[i].wall_offset_ms += ms;
            }
        }
        self.check()
    }

    fn finish(&mut self) -> Result<(), Violation> {
        // Run what is left to its end, fairly and without faults: every request must settle.
        for _ in 0..200_000 {
            let runnable = (0..self.programs.len()).find(|&i| self.runnable(i));
            match runnable {
                Some(i) => self.step(i, None),
                None if self.next_time().is_some() => self.advance()?,
                None => break,
            }
            self.check()?;
        }
        let st = self.st.borrow();
        for (i, p) in st.procs.iter().enumerate() {
            if p.alive() {
                return Err(Violation(format!(
                    "process {i} (pid {}) never finished: {} requests started, {} settled ({:?}, now {} ms)",
                    p.pid, p.started, p.settled, p, st.now
                )));
            }
        }
        for (name, inode) in st.fs.files() {
            let writer = &st.procs[inode.writer];
            let excused = writer.life == Life::Killed
                || inode.abandoned
                || (name == BASE && bytes_are_shared_base(&inode.bytes))
                || (name.starts_with(READER_PREFIX)
                    && st.procs.iter().any(|p| p.life == Life::Killed));
            if !excused {
                return Err(Violation(format!(
                    "{name} left behind by process {} (pid {}), which exited normally",
                    inode.writer, writer.pid
                )));
            }
        }
        Ok(())
    }
}

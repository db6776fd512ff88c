//! The simulated machine the processes run on: the file system, the process table (pids per pid
//! namespace, reuse after death, SIGKILL, SIGSTOP), the clocks, the injected fault, and the
//! scheduling points a process's program awaits (one file call per step).

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::fs::{Errno, SimFs};
use crate::lockfile::stale::remote::ProgressMemory;
use crate::lockfile::{Liveness, ProcessProbe, StaleContext};

/// Unix seconds at simulated time 0.
pub const EPOCH_SECS: i64 = 1_700_000_000;

/// How a process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Running,
    /// SIGSTOPped until this simulated time (then SIGCONT).
    Stopped(u64),
    Killed,
    Exited,
}

/// What a process believes it holds (the grant its acquire returned and no loss told since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The plain mutex (the base path).
    Plain,
    /// A semaphore slot (`index` 0 = the base path) taken with `limit`.
    Slot {
        index: u64,
        limit: u64,
    },
    Reader,
    Writer,
}

/// A request being waited for (for the liveness invariants).
#[derive(Debug, Clone, Copy)]
pub struct Waiting {
    pub deadline: Option<u64>,
    /// Since when the lock has been free for this waiter while it could run (ms).
    pub free_since: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i64,
    /// Pid namespace (container): its host identity differs, its pid numbers repeat.
    pub ns: u32,
    /// Start time in clock ticks (unique per process: a reused pid gets another).
    pub start: u64,
    pub start_secs: i64,
    pub life: Life,
    /// This process's wall clock minus the true time (ms): jumps move it.
    pub wall_offset_ms: i64,
    /// Every file call this process makes fails with `ENOSPC` until this time (ms): its host's
    /// view of the shared volume is full or unreachable while other hosts' is not.
    pub failing_until: u64,
    /// For the liveness invariant, by inode of another host's file this process looked at: the
    /// true time of the write it saw, and when it first saw that write (ms).
    pub first_seen: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Runnable from this simulated time (`None`: waits for an event only).
    pub wake_at: Option<u64>,
    /// The file names whose change wakes it while it sleeps (its watches).
    pub watch: Watch,
    pub event: bool,
    pub grant: Option<(Grant, String, u64)>,
    pub waiting: Option<Waiting>,
    /// Requests started and settled (ok, error or timeout).
    pub started: u32,
    pub settled: u32,
    /// Losses reported to this process, and grants it got.
    pub losses: u32,
    pub grants: u32,
}

impl Proc {
    pub fn alive(&self) -> bool {
        matches!(self.life, Life::Running | Life::Stopped(_))
    }
}

/// What a sleeping process watches (`watch::watch` on these paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    Nothing,
    /// One path (the mutex's waiter).
    Name(String),
    /// The base and the slots of this limit (the semaphore's waiter).
    Slots(u64),
    /// The base and the reader files (the shared lock's waiter).
    Shared,
}

impl Watch {
    fn sees(&self, name: &str) -> bool {
        match self {
            Watch::Nothing => false,
            Watch::Name(n) => n == name,
            Watch::Slots(limit) => {
                name == super::proto::BASE
                    || name
                        .strip_prefix(super::proto::BASE)
                        .and_then(crate::lockfile::SlotName::parse)
                        .is_some_and(|s| s.limit == *limit)
            }
            Watch::Shared => {
                name == super::proto::BASE || name.starts_with(super::proto::READER_PREFIX)
            }
        }
    }
}

/// The configuration drawn from the seed.
#[derive(Debug, Clone)]
pub struct Config {
    pub stale_timeout: Duration,
    pub retry_ms: u64,
    /// The heartbeat period (the real `heartbeat` option; whole seconds aligned as `next_due`).
    pub heartbeat_ms: u64,
    /// 1 in `fault_den` file calls fails with `EMFILE` or `ENOSPC` (0: none).
    pub fault_den: u32,
    /// Whether holders' presence marks exist (OFD locks; absent on some file systems).
    pub presence: bool,
}

pub struct State {
    pub fs: SimFs,
    pub now: u64,
    pub procs: Vec<Proc>,
    pub cfg: Config,
    /// The fault the next file call of the process being stepped returns.
    pub fault: Option<Errno>,
    pub next_token: u64,
    /// The semaphore's cross-process line (`queue/`, key `<base>.slots`): process indexes.
    pub line: Vec<usize>,
    /// Each process's memory of other hosts' heartbeat evidence (`remote::note_remote`'s), keyed
    /// by inode, on its monotonic clock [`State::monotonic`].
    pub memories: Vec<ProgressMemory<u64>>,
    /// The monotonic clock's reading at simulated time 0 (any instant: only differences count).
    pub monotonic_base: Instant,
}

impl State {
    pub fn host_of(ns: u32) -> String {
        format!("sim-host:boot-1:{}", 4_026_531_836u64 + u64::from(ns))
    }

    /// `now_unix_secs()` as process `me` reads it.
    pub fn wall_secs(&self, me: usize) -> i64 {
        self.wall_ms(me).div_euclid(1000)
    }

    /// Process `me`'s wall clock in Unix ms.
    pub fn wall_ms(&self, me: usize) -> i64 {
        EPOCH_SECS * 1000 + self.now as i64 + self.procs[me].wall_offset_ms
    }

    /// `Instant::now()` in any process: monotonic clocks run at the true rate (a jump moves only
    /// the wall clock; a stopped process's monotonic clock runs on).
    pub fn monotonic(&self) -> Instant {
        self.monotonic_base + Duration::from_millis(self.now)
    }

    /// The injected fault of this call, if any (each step makes one file call).
    pub fn take_fault(&mut self) -> Result<(), Errno> {
        match self.fault.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The file `name` changed: its watchers wake.
    pub fn file_event(&mut self, name: &str) {
        for p in &mut self.procs {
            if p.watch.sees(name) {
                p.event = true;
            }
        }
    }

    pub fn token(&mut self) -> String {
        self.next_token += 1;
        format!(
            "{:016x}",
            self.next_token.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        )
    }

    /// `LockFile::stale_context` of process `me`.
    pub fn stale_context<'a>(&self, me: usize, host: &'a str) -> StaleContext<'a> {
        StaleContext {
            stale_timeout: Some(self.cfg.stale_timeout),
            pending_write_grace: Duration::from_secs(5),
            our_host: host,
            now_unix_secs: self.wall_secs(me),
            foreign_start_check: true,
        }
    }

    /// Whether the presence mark on a file is held (by a live process).
    pub fn mark_held(&self, mark: Option<usize>) -> bool {
        self.cfg.presence && mark.is_some_and(|p| self.procs[p].alive())
    }
}

/// `kill(pid, 0)` and `/proc/<pid>/stat` as seen from inside pid namespace `ns`.
pub struct Probe<'a> {
    pub procs: &'a [Proc],
    pub ns: u32,
}

impl Probe<'_> {
    fn find(&self, pid: i64) -> Option<&Proc> {
        self.procs
            .iter()
            .find(|p| p.ns == self.ns && p.pid == pid && p.alive())
    }
}

impl ProcessProbe for Probe<'_> {
    fn liveness(&self, pid: i64) -> Liveness {
        if self.find(pid).is_some() {
            Liveness::Alive
        } else {
            Liveness::Dead
        }
    }
    fn start_ticks(&self, pid: i64) -> Option<u64> {
        self.find(pid).map(|p| p.start)
    }
    fn start_unix_secs(&self, pid: i64) -> Option<f64> {
        self.find(pid).map(|p| p.start_secs as f64)
    }
}

/// A process's handle on the machine inside its program.
#[derive(Clone)]
pub struct Cx {
    pub st: Rc<RefCell<State>>,
    pub me: usize,
}

/// One scheduling point: the program stops here until the scheduler steps this process again.
struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// Waits until simulated time `until` (or forever with `None`), or an event of `watch`.
struct Sleep {
    cx: Cx,
    until: Option<u64>,
    watch: Watch,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let mut st = self.cx.st.borrow_mut();
        let now = st.now;
        let p = &mut st.procs[self.cx.me];
        if self.until.is_some_and(|u| now >= u) || p.event {
            p.event = false;
            p.watch = Watch::Nothing;
            p.wake_at = Some(now);
            return Poll::Ready(());
        }
        p.wake_at = self.until;
        p.watch = self.watch.clone();
        Poll::Pending
    }
}

impl Cx {
    /// One step: an atomic call `f` on the machine, after a scheduling point.
    pub async fn call<T>(&self, f: impl FnOnce(&mut State, usize) -> T) -> T {
        self.with(|s, me| s.procs[me].wake_at = Some(s.now));
        Yield(false).await;
        let mut st = self.st.borrow_mut();
        f(&mut st, self.me)
    }

    /// Sleeps until `until` or the next change of a file `watch` sees, whichever first.
    pub async fn sleep(&self, until: Option<u64>, watch: Watch) {
        {
            let mut st = self.st.borrow_mut();
            st.procs[self.me].event = false;
        }
        Sleep {
            cx: self.clone(),
            until,
            watch,
        }
        .await
    }

    pub fn now(&self) -> u64 {
        self.st.borrow().now
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut State, usize) -> T) -> T {
        f(&mut self.st.borrow_mut(), self.me)
    }
}

//! `StaleJudgement`: is the lock on disk held, free, or stale (safe to break)?
//!
//! A pure function of an [`Observation`], a [`StaleContext`] (options, our host identity, the
//! current time) and a [`ProcessProbe`] (so tests can script process facts). The rules:
//!
//! - missing → free; a symbolic link → held (never followed, never broken);
//! - `stale_timeout` `None` → nothing is ever stale (semats' `null`);
//! - unparseable or empty → held while its mtime age ≤ max(`pending_write_grace`,
//!   `stale_timeout`), stale after (so a half-written or garbage file expires instead of never);
//! - parsed with our own `host` → the holder is provably dead when `kill(pid, 0)` says `ESRCH`,
//!   or when `start` is recorded and the pid's current start time differs (pid reused): stale at
//!   once, whatever the age. Otherwise the holder is alive and the lock is never stale;
//! - parsed with another `host` (another machine, or another pid namespace: the pid means
//!   nothing here) → stale when its heartbeat evidence stayed the same, as this process saw it on
//!   its own monotonic clock, for [`remote::remote_bound`]: 6 of its heartbeat periods (at least
//!   1 s each), or `stale_timeout` when it records no heartbeat. No clock of another machine is
//!   compared with ours ([`remote`] has the rule and its safety argument);
//! - parsed foreign file (no `host`) → semats' rule: stale when `now - timestamp >
//!   stale_timeout` (strict, whole seconds) **and** the pid is not running, where `EPERM` counts
//!   as running and a running pid whose process started more than 2 s after the lock's
//!   timestamp cannot be the holder (pid reused) and counts as not running. A pid ≤ 0 (a
//!   process group to `kill`, no process) never counts as running.

use std::time::Duration;

use super::format::{LockInfo, ParseError};
use super::process::{self, Liveness};

/// What is on disk at the lock path right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// No file.
    Missing,
    /// A file that parses; `age` is measured from its mtime. `unchanged`: for another host's
    /// file, how long this process has seen its heartbeat evidence unchanged (its monotonic
    /// clock, [`remote::ProgressMemory`]); zero otherwise and at a first look.
    Parsed {
        info: LockInfo,
        age: Duration,
        unchanged: Duration,
    },
    /// A file that exists but cannot be parsed (empty, partial, garbage, unreadable, > 1 MiB);
    /// `age` is measured from its mtime.
    Unparseable { age: Duration, error: ParseError },
    /// A symbolic link at the lock path. Never followed: whoever planted it could point it at
    /// any file of ours. Held (never broken); acquiring and releasing refuse it.
    Symlink,
}

impl Observation {
    /// The parsed info, if any.
    pub fn info(&self) -> Option<&LockInfo> {
        match self {
            Observation::Parsed { info, .. } => Some(info),
            _ => None,
        }
    }
}

/// Process facts the judgement needs. [`OsProbe`] asks the operating system.
pub trait ProcessProbe {
    /// `kill(pid, 0)`.
    fn liveness(&self, pid: i64) -> Liveness;
    /// Start time of `pid` in clock ticks since boot, if known. May come from a cache: enough to
    /// confirm that the holder is alive, never to call it dead.
    fn start_ticks(&self, pid: i64) -> Option<u64>;
    /// [`ProcessProbe::start_ticks`] read now (no cache): asked before a pid is judged reused.
    fn start_ticks_now(&self, pid: i64) -> Option<u64> {
        self.start_ticks(pid)
    }
    /// Start time of `pid` in Unix seconds, if known.
    fn start_unix_secs(&self, pid: i64) -> Option<f64>;
}

/// The real [`ProcessProbe`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OsProbe;

impl ProcessProbe for OsProbe {
    fn liveness(&self, pid: i64) -> Liveness {
        process::probe_liveness(pid)
    }
    fn start_ticks(&self, pid: i64) -> Option<u64> {
        cached_start_ticks(pid)
    }
    fn start_ticks_now(&self, pid: i64) -> Option<u64> {
        let ticks = process::process_start_ticks(pid)?;
        remember_start_ticks(pid, ticks);
        Some(ticks)
    }
    fn start_unix_secs(&self, pid: i64) -> Option<f64> {
        process::process_start_unix_secs(pid)
    }
}

/// How long a pid's start time read from `/proc` is reused. Waiters judge every new holder
/// file once; under contention the same few pids come back many times a second. A cached value
/// that matches the lock confirms its holder alive; one that differs is never trusted (the pid
/// may have been reused within the window, by the very process that now holds the lock): the
/// start time is read again before the holder is judged gone ([`ProcessProbe::start_ticks_now`]).
/// A dead pid is still caught at once by `kill(pid, 0)`.
const START_TICKS_TTL: std::time::Duration = std::time::Duration::from_secs(1);

type StartTicksCache = std::collections::HashMap<i64, (u64, std::time::Instant)>;

static START_TICKS: std::sync::Mutex<Option<StartTicksCache>> = std::sync::Mutex::new(None);

fn start_ticks_cache() -> std::sync::MutexGuard<'static, Option<StartTicksCache>> {
    START_TICKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cached_start_ticks(pid: i64) -> Option<u64> {
    let now = std::time::Instant::now();
    if let Some((ticks, at)) = start_ticks_cache()
        .get_or_insert_with(Default::default)
        .get(&pid)
    {
        if now.duration_since(*at) < START_TICKS_TTL {
            return Some(*ticks);
        }
    }
    let ticks = process::process_start_ticks(pid)?;
    remember_start_ticks(pid, ticks);
    Some(ticks)
}

fn remember_start_ticks(pid: i64, ticks: u64) {
    let now = std::time::Instant::now();
    let mut guard = start_ticks_cache();
    let map = guard.get_or_insert_with(Default::default);
    if map.len() >= 256 {
        map.retain(|_, (_, at)| now.duration_since(*at) < START_TICKS_TTL);
    }
    map.insert(pid, (ticks, now));
}

/// The inputs of a judgement besides the observation.
#[derive(Debug, Clone, Copy)]
pub struct StaleContext<'a> {
    pub stale_timeout: Option<Duration>,
    pub pending_write_grace: Duration,
    /// Our [`host_identity`](super::process::host_identity).
    pub our_host: &'a str,
    pub now_unix_secs: i64,
    /// Foreign files: a running pid whose process started more than 2 s after the lock's
    /// timestamp is not the holder (pid reused) and counts as not running. `false` = semats'
    /// rule exactly (plus `EPERM` = running).
    pub foreign_start_check: bool,
}

/// Why a lock counts as held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBecause {
    /// `stale_timeout` is `None`.
    NeverStale,
    /// Unparseable, but not older than max(grace, stale timeout): maybe being written.
    YoungUnparseable,
    /// Our host identity and the holder process is alive.
    OwnHostHolderAlive,
    /// A foreign file not older than the stale timeout.
    Fresh,
    /// Another host's lock whose heartbeat evidence changed within [`remote::remote_bound`],
    /// as this process saw it.
    OtherHostBeating,
    /// A foreign file older than the stale timeout, but its pid is running.
    ForeignHolderRunning,
    /// A symbolic link at the lock path (never followed, never broken).
    Symlink,
    /// The content says stale, but a descriptor with the holder's presence mark is still open
    /// (e.g. inherited by a child of the recorded holder).
    HolderPresent,
}

/// Why a lock counts as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleBecause {
    /// Unparseable and older than max(grace, stale timeout).
    OldUnparseable,
    /// Our host identity and `kill(pid, 0)` says no such process.
    OwnHostHolderDead,
    /// Our host identity and the pid now belongs to a process with another start time.
    OwnHostPidReused,
    /// Another host identity whose heartbeat evidence stayed the same for
    /// [`remote::remote_bound`], as this process saw it.
    OtherHostSilent,
    /// A foreign file older than the stale timeout whose pid is not running.
    ForeignExpiredAndNotRunning,
}

/// The verdict on an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleJudgement {
    Free,
    Held(HeldBecause),
    Stale(StaleBecause),
}

impl StaleJudgement {
    pub fn is_stale(&self) -> bool {
        matches!(self, StaleJudgement::Stale(_))
    }
}

/// `true` when a whole-second age is strictly greater than `timeout` (semats:
/// `ageSeconds > timeoutMs / 1000`). Negative ages (future timestamps) are never older.
pub fn age_exceeds(age_secs: i128, timeout: Duration) -> bool {
    age_secs > 0 && (age_secs as u128).saturating_mul(1_000_000_000) > timeout.as_nanos()
}

/// semats' `isLockStale(info, timeoutMs)`: age only, strict, whole seconds. `None` = never.
pub fn is_lock_stale_by_age(timestamp: i64, stale_timeout: Option<Duration>, now: i64) -> bool {
    match stale_timeout {
        None => false,
        Some(t) => age_exceeds(i128::from(now) - i128::from(timestamp), t),
    }
}

/// By which rule a lock on disk becomes reclaimable (`status().reclaimRule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimRule {
    /// This host's identity: reclaimed at once when its holder process has died (or its pid
    /// was reused), never while it runs, whatever the age.
    HolderDead,
    /// A file without identity (sema, semats, a shell): semats' rule, older than the stale
    /// timeout **and** its pid not running.
    AgeAndPidNotRunning,
    /// Another host's file: its heartbeat evidence unchanged for [`remote::remote_bound`],
    /// observed on this process's monotonic clock.
    HeartbeatUnchanged,
    /// A file that cannot be parsed: its mtime older than max(grace, stale timeout).
    UnparseableAge,
    /// Never by itself: `stale_timeout` is `None`, or a symbolic link sits at the path.
    Never,
}

impl ReclaimRule {
    /// The name the bindings show.
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimRule::HolderDead => "holder-dead",
            ReclaimRule::AgeAndPidNotRunning => "age-and-pid-not-running",
            ReclaimRule::HeartbeatUnchanged => "heartbeat-unchanged",
            ReclaimRule::UnparseableAge => "unparseable-age",
            ReclaimRule::Never => "never",
        }
    }
}

/// When and by which rule a lock becomes reclaimable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaim {
    pub rule: ReclaimRule,
    /// Unix seconds from which the condition of `rule` holds (`HeartbeatUnchanged`: when the
    /// bound runs out if nothing changes meanwhile, on this host's clock; `AgeAndPidNotRunning`:
    /// also needs its pid not running then; `UnparseableAge`), or now
    /// when the lock is stale already. `None`: no time decides it (`HolderDead` with the holder
    /// running: whenever it ends; `Never`).
    pub at_unix_secs: Option<i64>,
}

/// The reclaim rule and time of `observation` (`None`: no file). `judgement` is the verdict on
/// the same observation: a stale lock is reclaimable now.
pub fn reclaim(
    observation: &Observation,
    judgement: StaleJudgement,
    ctx: &StaleContext<'_>,
) -> Option<Reclaim> {
    let now = ctx.now_unix_secs;
    // The first whole-second age strictly above `t` (semats' `age > timeout` in whole seconds).
    let first_age_over = |t: Duration| {
        i64::try_from(t.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_add(1)
    };
    let (rule, at) = match observation {
        Observation::Missing => return None,
        Observation::Symlink => (ReclaimRule::Never, None),
        _ if matches!(judgement, StaleJudgement::Held(HeldBecause::NeverStale)) => {
            (ReclaimRule::Never, None)
        }
        Observation::Unparseable { age, .. } => {
            let limit = ctx
                .stale_timeout
                .unwrap_or(Duration::MAX)
                .max(ctx.pending_write_grace);
            let left = limit.saturating_sub(*age);
            let left_secs = i64::try_from(left.as_secs()).unwrap_or(i64::MAX);
            let round_up = i64::from(left.subsec_nanos() > 0);
            (
                ReclaimRule::UnparseableAge,
                Some(now.saturating_add(left_secs).saturating_add(round_up)),
            )
        }
        Observation::Parsed {
            info, unchanged, ..
        } => {
            let aged = ctx
                .stale_timeout
                .map(|t| info.timestamp.saturating_add(first_age_over(t)));
            let pid_is_single_process = info.pid > 0 && info.pid <= i64::from(i32::MAX);
            match info.host.as_deref() {
                Some(h) if h == ctx.our_host && pid_is_single_process => {
                    (ReclaimRule::HolderDead, None)
                }
                Some(h) if h != ctx.our_host => (
                    ReclaimRule::HeartbeatUnchanged,
                    ctx.stale_timeout.map(|t| {
                        let left =
                            remote::remote_bound(info.heartbeat_ms, t).saturating_sub(*unchanged);
                        let secs = i64::try_from(left.as_secs()).unwrap_or(i64::MAX);
                        now.saturating_add(secs)
                            .saturating_add(i64::from(left.subsec_nanos() > 0))
                    }),
                ),
                _ => (ReclaimRule::AgeAndPidNotRunning, aged),
            }
        }
    };
    let at = if judgement.is_stale() {
        Some(at.map_or(now, |a| a.min(now)))
    } else {
        at
    };
    Some(Reclaim {
        rule,
        at_unix_secs: at,
    })
}

/// Slack allowed between a lock's timestamp and its holder's start time (clock granularity).
const START_AFTER_TIMESTAMP_SLACK_SECS: f64 = 2.0;

/// The judgement (see the module docs).
pub fn judge(
    observation: &Observation,
    ctx: &StaleContext<'_>,
    probe: &dyn ProcessProbe,
) -> StaleJudgement {
    let (info, unchanged) = match observation {
        Observation::Missing => return StaleJudgement::Free,
        Observation::Symlink => return StaleJudgement::Held(HeldBecause::Symlink),
        Observation::Parsed {
            info, unchanged, ..
        } => (info, *unchanged),
        Observation::Unparseable { age, .. } => {
            let Some(timeout) = ctx.stale_timeout else {
                return StaleJudgement::Held(HeldBecause::NeverStale);
            };
            return if *age > timeout.max(ctx.pending_write_grace) {
                StaleJudgement::Stale(StaleBecause::OldUnparseable)
            } else {
                StaleJudgement::Held(HeldBecause::YoungUnparseable)
            };
        }
    };
    let Some(timeout) = ctx.stale_timeout else {
        return StaleJudgement::Held(HeldBecause::NeverStale);
    };
    let age_secs = i128::from(ctx.now_unix_secs) - i128::from(info.timestamp);
    let expired = age_exceeds(age_secs, timeout);
    let pid_is_single_process = info.pid > 0 && info.pid <= i64::from(i32::MAX);

    match info.host.as_deref() {
        Some(host) if host == ctx.our_host && pid_is_single_process => {
            match probe.liveness(info.pid) {
                Liveness::Dead => StaleJudgement::Stale(StaleBecause::OwnHostHolderDead),
                Liveness::Alive | Liveness::Unknown => {
                    if let (Some(recorded), Some(current)) =
                        (info.start, probe.start_ticks(info.pid))
                    {
                        // A cached start time only ever confirms the holder: read it again.
                        if recorded != current
                            && probe
                                .start_ticks_now(info.pid)
                                .is_some_and(|now| now != recorded)
                        {
                            return StaleJudgement::Stale(StaleBecause::OwnHostPidReused);
                        }
                    }
                    StaleJudgement::Held(HeldBecause::OwnHostHolderAlive)
                }
            }
        }
        Some(host) if host != ctx.our_host => {
            if unchanged >= remote::remote_bound(info.heartbeat_ms, timeout) {
                StaleJudgement::Stale(StaleBecause::OtherHostSilent)
            } else {
                StaleJudgement::Held(HeldBecause::OtherHostBeating)
            }
        }
        // A foreign file, or (tampered) our host with a pid that is not one process.
        _ => {
            if !expired {
                return StaleJudgement::Held(HeldBecause::Fresh);
            }
            if foreign_pid_running(info, probe, ctx.foreign_start_check) {
                StaleJudgement::Held(HeldBecause::ForeignHolderRunning)
            } else {
                StaleJudgement::Stale(StaleBecause::ForeignExpiredAndNotRunning)
            }
        }
    }
}

/// semats' `isProcessRunning` with our fixes: `EPERM` = running; a process that started more
/// than 2 s after the lock's timestamp is not its holder.
fn foreign_pid_running(info: &LockInfo, probe: &dyn ProcessProbe, start_check: bool) -> bool {
    // `kill(0, 0)` and `kill(-1, 0)` address process groups and succeed: no single process is
    // the holder of such a file, so it is never a live one (semats counts it as running forever).
    if info.pid <= 0 || probe.liveness(info.pid) != Liveness::Alive {
        return false;
    }
    if !start_check {
        return true;
    }
    match probe.start_unix_secs(info.pid) {
        Some(started) => started <= info.timestamp as f64 + START_AFTER_TIMESTAMP_SLACK_SECS,
        None => true,
    }
}

pub mod remote;

#[cfg(test)]
mod tests;

//! The engine's file protocol, step by step, as a simulated process runs it: the judgement's
//! inputs, the mutex's attempt, break, release and heartbeat, its wait, and release by path
//! (`semaphore.rs` and `shared.rs` hold the two other kinds). Each `cx.call` is one
//! file call (one step the scheduler interleaves); the decisions between them are the core's own
//! functions (`stale::judge`, `format`, `owner::owns`, the semaphore's `plan`/`after_grant`/
//! `may_try`, the shared lock's `policy::decide`), never copies. Each function names the real
//! code whose call order it mirrors. Where one step here stands for several real calls, the
//! comment says which and why that is sound (they run under a lock the others respect).

use std::future::Future;
use std::pin::Pin;

use super::fs::Errno;
use super::state::{Cx, State, Watch};
use crate::lockfile::format::is_shared_base;
use crate::lockfile::shared::policy::group_alive;
use crate::lockfile::stale::remote::BeatOutcome;
use crate::lockfile::{
    judge, owns, parse_lock_info, read_lock_bytes_lossy, Claimant, HeldBecause, LockInfo,
    Observation, StaleJudgement,
};

pub const BASE: &str = "L";
pub const GUARD: &str = "L.rw-guard";
pub const READER_PREFIX: &str = "L.reader-";

/// A lock file this process created and still has open.
#[derive(Debug, Clone)]
pub struct Held {
    pub name: String,
    pub id: u64,
    pub bytes: Vec<u8>,
}

/// How a request ended without a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Busy,
    Timeout,
    LimitMismatch,
    Failed(Errno),
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

// ─── the decisions' inputs, as the real code gathers them ───

/// `LockFile::build_info`: our format with the identity lines.
fn build_info(s: &mut State, me: usize) -> Vec<u8> {
    let p = &s.procs[me];
    let (pid, ns, start) = (p.pid, p.ns, p.start);
    let info = LockInfo {
        pid,
        timestamp: s.wall_secs(me),
        tag: None,
        host: Some(State::host_of(ns)),
        start: Some(start),
        token: Some(s.token()),
        heartbeat_ms: None,
    };
    info.serialize().into_bytes()
}

/// `LockFile::observe` (`observation_from`): parsed with the core's parser, aged by mtime; another
/// host's file noted in this process's [`ProgressMemory`](crate::lockfile::stale::remote::ProgressMemory)
/// (keyed by inode, on its monotonic clock), which says how long its evidence stayed unchanged.
fn observe(s: &mut State, me: usize, name: &str) -> Observation {
    let Some(inode) = s.fs.get(name) else {
        return Observation::Missing;
    };
    let age = std::time::Duration::from_secs((s.wall_secs(me) - inode.mtime).max(0) as u64);
    match parse_lock_info(&read_lock_bytes_lossy(&inode.bytes)) {
        Ok(info) => {
            let ours = State::host_of(s.procs[me].ns);
            let unchanged = if info.host.as_deref().is_some_and(|h| h != ours) {
                let (id, evidence, now) = (inode.id, inode.evidence(), s.monotonic());
                let (write, at) = (inode.written, s.now);
                let seen = s.procs[me].first_seen.entry(id).or_insert((write, at));
                if seen.0 != write {
                    *seen = (write, at);
                }
                s.memories[me].note(id, evidence, now)
            } else {
                std::time::Duration::ZERO
            };
            Observation::Parsed {
                info,
                age,
                unchanged,
            }
        }
        Err(error) => Observation::Unparseable { age, error },
    }
}

/// `stale::judge` with the simulated process table as its `ProcessProbe`, from `me`'s namespace.
fn judge_observed(s: &State, me: usize, observation: &Observation) -> StaleJudgement {
    let host = State::host_of(s.procs[me].ns);
    let probe = super::state::Probe {
        procs: &s.procs,
        ns: s.procs[me].ns,
    };
    judge(observation, &s.stale_context(me, &host), &probe)
}

/// `bytes_are_shared_base` on a parsed file without identity.
fn shared_base_file(s: &State, name: &str, observation: &Observation) -> bool {
    observation.info().is_some_and(|i| i.host.is_none())
        && s.fs
            .get(name)
            .is_some_and(|i| is_shared_base(&read_lock_bytes_lossy(&i.bytes)))
}

/// `group::member_live`: a member judged held, or stale with its holder's mark on it; a dead one
/// is removed.
fn member_live(s: &mut State, me: usize, name: &str) -> bool {
    let observation = observe(s, me, name);
    let live = match judge_observed(s, me, &observation) {
        StaleJudgement::Held(_) => true,
        StaleJudgement::Free => false,
        StaleJudgement::Stale(_) => s.mark_held(s.fs.get(name).and_then(|i| i.mark)),
    };
    if !live && s.fs.unlink(name).is_ok() {
        s.file_event(name);
    }
    live
}

/// `group::live_members(base, READER_PREFIX)`.
pub fn live_readers(s: &mut State, me: usize) -> Vec<String> {
    let names: Vec<String> =
        s.fs.list()
            .into_iter()
            .filter(|n| n.starts_with(READER_PREFIX))
            .collect();
    names
        .into_iter()
        .filter(|n| member_live(s, me, n))
        .collect()
}

/// `shared::judge_shared_base`: held while a reader file is live.
fn judge_shared_base(s: &mut State, me: usize) -> StaleJudgement {
    if group_alive(live_readers(s, me).len()) {
        StaleJudgement::Held(HeldBecause::OwnHostHolderAlive)
    } else {
        StaleJudgement::Stale(crate::lockfile::StaleBecause::OwnHostHolderDead)
    }
}

/// `LockFile::judge_with_presence`.
pub fn judge_file(s: &mut State, me: usize, name: &str) -> StaleJudgement {
    let observation = observe(s, me, name);
    if shared_base_file(s, name, &observation) {
        return judge_shared_base(s, me);
    }
    let j = judge_observed(s, me, &observation);
    if j.is_stale() && s.mark_held(s.fs.get(name).and_then(|i| i.mark)) {
        return StaleJudgement::Held(HeldBecause::HolderPresent);
    }
    j
}

// ─── the mutex's attempt and break ───

/// What `examine_and_break` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Examined {
    Gone,
    Held,
    Broken,
    Changed,
}

/// `LockFile::examine_and_break` (breaking.rs). Step 1 is the open, read and judgement (a shared
/// base judged by its readers); step 2 the break, one step for the presence probe, the per-user
/// break lock + exclusive `flock`, the same-inode and same-bytes checks and the unlink: the
/// locks serialise breakers, and anyone else changing the file changes its inode or bytes.
pub fn examine_and_break<'a>(cx: &'a Cx, name: &'a str) -> Boxed<'a, Examined> {
    Box::pin(async move {
        let seen = cx
            .call(|s, me| {
                if s.take_fault().is_err() {
                    return Err(Examined::Held);
                }
                let Some(inode) = s.fs.get(name) else {
                    return Err(Examined::Gone);
                };
                let (id, bytes) = (inode.id, inode.bytes.clone());
                let observation = observe(s, me, name);
                let shared = shared_base_file(s, name, &observation);
                let j = if shared {
                    judge_shared_base(s, me)
                } else {
                    judge_observed(s, me, &observation)
                };
                if j.is_stale() {
                    Ok((id, bytes, shared))
                } else {
                    Err(Examined::Held)
                }
            })
            .await;
        let (id, bytes, shared) = match seen {
            Ok(seen) => seen,
            Err(e) => return e,
        };
        // `guard_for_break`: the guard taken (one try) and the group judged dead under it.
        let guard = if shared {
            match attempt(cx, GUARD).await {
                Ok(g) => {
                    if !cx.call(|s, me| judge_shared_base(s, me).is_stale()).await {
                        release_file(cx, &g).await;
                        return Examined::Held;
                    }
                    Some(g)
                }
                Err(_) => return Examined::Held,
            }
        } else {
            None
        };
        let out = cx
            .call(|s, me| {
                let Some(inode) = s.fs.get(name) else {
                    return Examined::Gone;
                };
                if s.mark_held(inode.mark) {
                    return Examined::Held;
                }
                if inode.id != id || inode.bytes != bytes {
                    return Examined::Changed;
                }
                if s.procs[inode.writer].ns != s.procs[me].ns && !shared {
                    super::count(|t| t.remote_breaks += 1);
                }
                let _ = s.fs.unlink(name);
                s.file_event(name);
                Examined::Broken
            })
            .await;
        if let Some(g) = guard {
            release_file(cx, &g).await;
        }
        out
    })
}

/// `LockFile::attempt` (attempt.rs) with the `Auto` strategy: link the prepared file
/// (`link_prepared`), on `EEXIST` examine and break, at most 16 rounds.
pub fn attempt<'a>(cx: &'a Cx, name: &'a str) -> Boxed<'a, Result<Held, Refused>> {
    Box::pin(async move {
        for _ in 0..16 {
            let linked = cx
                .call(|s, me| {
                    s.take_fault()?;
                    let bytes = build_info(s, me);
                    let when = (s.wall_ms(me), s.now);
                    let id = s.fs.link_new(name, bytes.clone(), when, Some(me), me)?;
                    s.file_event(name);
                    Ok(Held {
                        name: name.to_string(),
                        id,
                        bytes,
                    })
                })
                .await;
            match linked {
                Ok(held) => return Ok(held),
                Err(Errno::Exist) => {}
                Err(e) => return Err(Refused::Failed(e)),
            }
            if examine_and_break(cx, name).await == Examined::Held {
                return Err(Refused::Busy);
            }
        }
        Err(Refused::Busy)
    })
}

/// `HeldLock::ownership`: our inode with our bytes.
fn ours(s: &State, held: &Held) -> bool {
    s.fs.get(&held.name)
        .is_some_and(|i| i.id == held.id && i.bytes == held.bytes)
}

/// `HeldLock::release` → `release_if`: one step for the `stat`, the `pread` and the unlink (only
/// a breaker could change the file in between, and it breaks only a dead or expired holder's).
/// No fault here: `unlink(2)` returns neither `EMFILE` nor `ENOSPC`. `false`: not ours any more
/// (a loss, reported to the holder).
pub async fn release_file(cx: &Cx, held: &Held) -> bool {
    cx.call(|s, _| {
        if !ours(s, held) {
            return false;
        }
        let _ = s.fs.unlink(&held.name);
        s.file_event(&held.name);
        true
    })
    .await
}

/// One heartbeat tick (`HeldInner::heartbeat_tick` → `rewrite_if_ours`) of period `period_ms`:
/// the `heartbeat=` line and the timestamp written in place; `None` when the file is not ours
/// any more (the loss is reported). A failed write changes nothing (`BeatOutcome::Failed`).
/// With the outcome, the monotonic instant the tick started at (`heartbeat::run`'s `started`).
pub async fn heartbeat(
    cx: &Cx,
    held: &mut Held,
    period_ms: u64,
) -> (Option<BeatOutcome>, std::time::Instant) {
    cx.call(|s, me| (beat(s, me, held, period_ms), s.monotonic()))
        .await
}

fn beat(s: &mut State, me: usize, held: &mut Held, period_ms: u64) -> Option<BeatOutcome> {
    {
        if !ours(s, held) {
            return None;
        }
        if s.take_fault().is_err() {
            return Some(BeatOutcome::Failed);
        }
        let Ok(mut info) = parse_lock_info(&read_lock_bytes_lossy(&held.bytes)) else {
            return Some(BeatOutcome::Failed);
        };
        info.heartbeat_ms = Some(period_ms);
        info.timestamp = s.wall_secs(me);
        let bytes = info.serialize().into_bytes();
        let (wall_ms, now) = (s.wall_ms(me), s.now);
        if let Some(inode) = s.fs.get_mut(&held.name) {
            inode.rewrite(bytes.clone(), wall_ms, now, me);
        }
        let changed = bytes != held.bytes;
        held.bytes = bytes;
        s.file_event(&held.name);
        Some(if changed {
            BeatOutcome::Changed
        } else {
            BeatOutcome::Same
        })
    }
}

/// `HeldInner::lose_to_silence`: the lock counts as lost and its descriptor is closed (the
/// presence mark goes with it); the file stays where it is.
pub fn abandon(cx: &Cx, held: &Held) {
    cx.with(|s, _| {
        if let Some(inode) = s.fs.get_mut(&held.name).filter(|i| i.id == held.id) {
            inode.mark = None;
            inode.abandoned = true;
        }
    })
}

// ─── the plain mutex ───

/// `LockFile::acquire` (acquire.rs): an attempt, then on busy a wait woken by a file event or
/// the `retry_interval` poll, ended by the deadline.
pub async fn acquire_mutex(cx: &Cx, name: &str, deadline: Option<u64>) -> Result<Held, Refused> {
    loop {
        match attempt(cx, name).await {
            Ok(held) => return Ok(held),
            Err(Refused::Busy) => {}
            Err(e) => return Err(e),
        }
        let now = cx.now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Refused::Timeout);
        }
        let retry = cx.with(|s, _| s.cfg.retry_ms);
        let until = deadline.map_or(now + retry, |d| d.min(now + retry));
        cx.sleep(Some(until), Watch::Name(name.to_string())).await;
    }
}

// ─── release by path ───

/// `LockFile::release_as(own pid, force = false)` by a process that holds nothing on the path
/// (semats' `release()`, the CLI's `release`): the file is removed only when `owns` says it is
/// this process's. `true`: it removed a file.
pub async fn release_by_path(cx: &Cx) -> bool {
    cx.call(|s, me| {
        if s.take_fault().is_err() {
            return false;
        }
        let observation = observe(s, me, BASE);
        let Observation::Parsed { info, .. } = &observation else {
            return false;
        };
        let p = &s.procs[me];
        let host = State::host_of(p.ns);
        let claimant = Claimant {
            pid: p.pid,
            is_current_process: true,
            host: &host,
            start_ticks: Some(p.start),
        };
        // `release_as`: a shared base belongs to its readers' group, not to the pid it names
        // (`LockFile::is_shared_base_info`): refused without force.
        if !owns(info, &claimant, |_| false) || shared_base_file(s, BASE, &observation) {
            return false;
        }
        let _ = s.fs.unlink(BASE);
        s.file_event(BASE);
        true
    })
    .await
}

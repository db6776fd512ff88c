//! The engine's file protocol, step by step, as a simulated process runs it. Each `cx.call` is one
//! file call (one step the scheduler interleaves); the decisions between them are the core's own
//! functions (`stale::judge`, `format`, `owner::owns`, the semaphore's `plan`/`after_grant`/
//! `may_try`, the shared lock's `policy::decide`), never copies. Each function names the real
//! code whose call order it mirrors. Where one step here stands for several real calls, the
//! comment says which and why that is sound (they run under a lock the others respect).

use std::future::Future;
use std::pin::Pin;

use super::fs::Errno;
use super::state::{Cx, State, Watch};
use crate::lockfile::format::{is_shared_base, serialize_shared_base};
use crate::lockfile::shared::policy::{decide, group_alive, Base, Mode, Scene, Step};
use crate::lockfile::{
    after_grant, judge, may_try, owns, parse_lock_info, plan, read_lock_bytes_lossy, AfterGrant,
    Claimant, HeldBecause, Line, LockInfo, Observation, Plan, Sibling, SlotName, SlotState,
    StaleJudgement, Standing,
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
    };
    info.serialize().into_bytes()
}

/// `LockFile::observe` (`observation_from`): parsed with the core's parser, aged by mtime.
fn observe(s: &State, me: usize, name: &str) -> Observation {
    let Some(inode) = s.fs.get(name) else {
        return Observation::Missing;
    };
    let age = std::time::Duration::from_secs((s.wall_secs(me) - inode.mtime).max(0) as u64);
    match parse_lock_info(&read_lock_bytes_lossy(&inode.bytes)) {
        Ok(info) => Observation::Parsed { info, age },
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
fn live_readers(s: &mut State, me: usize) -> Vec<String> {
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
fn judge_file(s: &mut State, me: usize, name: &str) -> StaleJudgement {
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
            .call(|s, _| {
                let Some(inode) = s.fs.get(name) else {
                    return Examined::Gone;
                };
                if s.mark_held(inode.mark) {
                    return Examined::Held;
                }
                if inode.id != id || inode.bytes != bytes {
                    return Examined::Changed;
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
                    let when = (s.wall_secs(me), s.now);
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

/// One heartbeat tick (`HeldLock::heartbeat_tick` → `rewrite_if_ours`): `false` when the file is
/// not ours any more (the loss is reported). A failed write changes nothing.
pub async fn heartbeat(cx: &Cx, held: &mut Held) -> bool {
    cx.call(|s, me| {
        if !ours(s, held) {
            return false;
        }
        if s.take_fault().is_err() {
            return true;
        }
        let mut info = match parse_lock_info(&read_lock_bytes_lossy(&held.bytes)) {
            Ok(info) => info,
            Err(_) => return true,
        };
        info.timestamp = s.wall_secs(me);
        let bytes = info.serialize().into_bytes();
        let (mtime, now) = (s.wall_secs(me), s.now);
        if let Some(inode) = s.fs.get_mut(&held.name) {
            inode.bytes = bytes.clone();
            inode.mtime = mtime;
            inode.written = now;
            inode.writer = me;
        }
        held.bytes = bytes;
        s.file_event(&held.name);
        true
    })
    .await
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

// ─── the counting semaphore ───

pub fn slot_name(index: u64, limit: u64) -> String {
    if index == 0 {
        BASE.to_string()
    } else {
        format!("{BASE}{}", SlotName { index, limit }.suffix())
    }
}

/// `Semaphore::look`: the sibling slot files (one listing), each judged when `judged` accepts it.
fn look(s: &mut State, me: usize, judged: impl Fn(&SlotName) -> bool) -> Vec<Sibling> {
    let mut found = Vec::new();
    for name in s.fs.list() {
        let Some(slot) = name.strip_prefix(BASE).and_then(SlotName::parse) else {
            continue;
        };
        let state = if judged(&slot) {
            match judge_file(s, me, &name) {
                StaleJudgement::Free => SlotState::Absent,
                StaleJudgement::Held(_) => SlotState::Live,
                StaleJudgement::Stale(_) => SlotState::Dead,
            }
        } else {
            SlotState::Live
        };
        found.push(Sibling { slot, state });
    }
    found.sort_by_key(|s| (s.slot.limit, s.slot.index));
    found
}

/// `Semaphore::remove_dead`: each dead sibling through the mutex's safe break.
async fn remove_dead(cx: &Cx, siblings: &[Sibling]) {
    // `semaphore::dead` (not exported from `lockfile`): the siblings a look found dead.
    for slot in siblings
        .iter()
        .filter(|s| s.state == SlotState::Dead)
        .map(|s| s.slot)
    {
        let name = slot_name(slot.index, slot.limit);
        for _ in 0..4 {
            if examine_and_break(cx, &name).await != Examined::Changed {
                break;
            }
        }
    }
}

/// The outcome of one `Semaphore::round`.
enum Round {
    Won(Held, u64),
    Busy,
    Failed(Refused),
}

/// `Semaphore::round`: the base first, then up to 8 look → plan → try rounds.
async fn round(cx: &Cx, limit: u64, standing: &mut Standing) -> Round {
    match attempt(cx, BASE).await {
        Ok(held) => return confirm(cx, held, 0, limit, standing).await,
        Err(Refused::Busy) => {}
        Err(e) => return Round::Failed(e),
    }
    for _ in 0..8 {
        let siblings = cx
            .call(|s, me| {
                s.take_fault()
                    .map_or(Vec::new(), |()| look(s, me, |_| true))
            })
            .await;
        remove_dead(cx, &siblings).await;
        let order = match plan(limit, *standing, SlotState::Live, &siblings) {
            Plan::Mismatch(_) => return Round::Failed(Refused::LimitMismatch),
            Plan::Wait => break,
            Plan::Try(order) => order,
        };
        for index in order {
            match attempt(cx, &slot_name(index, limit)).await {
                Ok(held) => return confirm(cx, held, index, limit, standing).await,
                Err(Refused::Busy) => {}
                Err(e) => return Round::Failed(e),
            }
        }
    }
    *standing = Standing::Waiter;
    Round::Busy
}

/// `Semaphore::confirm`: the grant stands only if no live slot of another limit is beside it.
async fn confirm(cx: &Cx, held: Held, index: u64, limit: u64, standing: &mut Standing) -> Round {
    let others = cx
        .call(|s, me| {
            s.take_fault()
                .map_or(Vec::new(), |()| look(s, me, |s| s.limit != limit))
        })
        .await;
    remove_dead(cx, &others).await;
    match after_grant(limit, *standing, &others) {
        AfterGrant::Keep => Round::Won(held, index),
        AfterGrant::Yield(why) => {
            release_file(cx, &held).await;
            match why {
                Some(_) => Round::Failed(Refused::LimitMismatch),
                None => {
                    *standing = Standing::Waiter;
                    Round::Busy
                }
            }
        }
    }
}

/// `Semaphore::is_free` for a waiter behind the head.
fn free_now(s: &mut State, me: usize, limit: u64) -> bool {
    let base = match judge_file(s, me, BASE) {
        _ if s.fs.get(BASE).is_none() => SlotState::Absent,
        StaleJudgement::Held(_) => SlotState::Live,
        StaleJudgement::Stale(_) => SlotState::Dead,
        StaleJudgement::Free => SlotState::Absent,
    };
    let siblings = look(s, me, |_| true);
    // `semaphore::free_now` (not exported from `lockfile`) is this plan of a newcomer.
    matches!(
        plan(limit, Standing::Newcomer, base, &siblings),
        Plan::Try(_)
    )
}

/// `Semaphore::acquire_in_order` (wait.rs): a round, then the cross-process line; the head (or
/// a waiter with no line) tries on every wake-up, a waiter behind it only when [`may_try`] says
/// (two polls in a row found a slot free), everyone once more at the deadline.
pub async fn acquire_semaphore(
    cx: &Cx,
    limit: u64,
    deadline: Option<u64>,
) -> Result<(Held, u64), Refused> {
    let mut standing = Standing::Newcomer;
    let passed = |cx: &Cx| deadline.is_some_and(|d| cx.now() >= d);
    match round(cx, limit, &mut standing).await {
        Round::Won(h, i) => return Ok((h, i)),
        Round::Failed(e) => return Err(e),
        Round::Busy => {}
    }
    if passed(cx) {
        return Err(Refused::Timeout);
    }
    cx.with(|s, me| s.line.push(me));
    let out = semaphore_wait(cx, limit, deadline, &mut standing).await;
    cx.with(|s, me| s.line.retain(|&p| p != me));
    out
}

async fn semaphore_wait(
    cx: &Cx,
    limit: u64,
    deadline: Option<u64>,
    standing: &mut Standing,
) -> Result<(Held, u64), Refused> {
    let retry = cx.with(|s, _| s.cfg.retry_ms);
    let mut next_poll = cx.now() + retry;
    let mut poll_due = false;
    let mut free_polls = 0;
    loop {
        let position = cx.with(|s, me| {
            let first = s.line.iter().find(|&&p| s.procs[p].alive());
            if first == Some(&me) {
                Line::Head
            } else {
                Line::Behind
            }
        });
        if position == Line::Behind && poll_due {
            let free = cx
                .call(|s, me| s.take_fault().is_ok() && free_now(s, me, limit))
                .await;
            free_polls = if free { free_polls + 1 } else { 0 };
        }
        if may_try(position, if poll_due { free_polls } else { 0 }) {
            match round(cx, limit, standing).await {
                Round::Won(h, i) => return Ok((h, i)),
                Round::Failed(e) => return Err(e),
                Round::Busy => {}
            }
        }
        poll_due = false;
        let now = cx.now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Refused::Timeout);
        }
        let until = deadline.map_or(next_poll, |d| d.min(next_poll));
        cx.sleep(Some(until), Watch::Slots(limit)).await;
        let now = cx.now();
        if deadline.is_some_and(|d| now >= d) {
            // The deadline's last round.
            return match round(cx, limit, standing).await {
                Round::Won(h, i) => Ok((h, i)),
                Round::Failed(e) => Err(e),
                Round::Busy => Err(Refused::Timeout),
            };
        }
        if now >= next_poll {
            poll_due = true;
            next_poll = now + retry;
        }
    }
}

// ─── the shared lock ───

/// `group::read_base`.
fn read_base(s: &mut State, me: usize) -> (Base, i64) {
    let Some(inode) = s.fs.get(BASE) else {
        return (Base::Absent, 0);
    };
    let text = read_lock_bytes_lossy(&inode.bytes);
    if is_shared_base(&text) {
        return (Base::Shared, parse_lock_info(&text).map_or(0, |i| i.pid));
    }
    let base = match judge_file(s, me, BASE) {
        StaleJudgement::Stale(_) => Base::Stale,
        StaleJudgement::Free => Base::Absent,
        StaleJudgement::Held(_) => Base::Held,
    };
    (base, 0)
}

/// `SharedLock::look` (without tickets: see the module docs of `files`).
fn shared_look(s: &mut State, me: usize, mode: Mode) -> (Scene, Step) {
    let (base, _) = read_base(s, me);
    let live = if base == Base::Shared {
        live_readers(s, me).len()
    } else {
        0
    };
    let scene = Scene {
        base,
        live_readers: live,
        writers_ahead: 0,
        waiters_ahead: 0,
    };
    (scene, decide(mode, &scene))
}

/// Whether pid `pid` runs as seen from `me`'s namespace (`is_process_running`).
fn running(s: &State, me: usize, pid: i64) -> bool {
    let ns = s.procs[me].ns;
    s.procs
        .iter()
        .any(|p| p.ns == ns && p.pid == pid && p.alive())
}

/// `group::rewrite_base`: in place, only while P is a shared base.
fn rewrite_base(s: &mut State, me: usize, pid: i64) -> Result<bool, Errno> {
    let (mtime, now) = (s.wall_secs(me), s.now);
    let Some(inode) = s.fs.get_mut(BASE) else {
        return Ok(false);
    };
    if !is_shared_base(&read_lock_bytes_lossy(&inode.bytes)) {
        return Ok(false);
    }
    inode.bytes = serialize_shared_base(pid, mtime, None).into_bytes();
    inode.mtime = mtime;
    inode.written = now;
    inode.writer = me;
    s.file_event(BASE);
    Ok(true)
}

/// `group::remove_base`: only a shared base.
fn remove_base(s: &mut State) {
    if s.fs
        .get(BASE)
        .is_some_and(|i| is_shared_base(&read_lock_bytes_lossy(&i.bytes)))
    {
        let _ = s.fs.unlink(BASE);
        s.file_event(BASE);
    }
}

/// `SharedLock::join`: break a dead holder of P, take a reader file, then make P a shared base
/// naming a live reader.
async fn join(cx: &Cx, scene: &Scene) -> Result<Option<Held>, Refused> {
    if scene.base == Base::Stale
        && matches!(
            examine_and_break(cx, BASE).await,
            Examined::Held | Examined::Changed
        )
    {
        return Ok(None);
    }
    let name = cx.with(|s, _| format!("{READER_PREFIX}{}", s.token()));
    let reader = attempt(cx, &name).await?;
    let was_shared = scene.base == Base::Shared;
    let force = scene.live_readers == 0;
    let based = cx
        .call(|s, me| {
            s.take_fault()?;
            if was_shared {
                // `rewrite_if_named_gone`.
                let (base, named) = read_base(s, me);
                if base != Base::Shared {
                    return Ok(false);
                }
                if !force && named > 0 && running(s, me, named) {
                    return Ok(true);
                }
                let pid = s.procs[me].pid;
                rewrite_base(s, me, pid)
            } else {
                // `create_base`: a link, no presence mark (its descriptor is closed at once).
                let bytes = serialize_shared_base(s.procs[me].pid, s.wall_secs(me), None);
                let when = (s.wall_secs(me), s.now);
                match s.fs.link_new(BASE, bytes.into_bytes(), when, None, me) {
                    Ok(_) => {
                        s.file_event(BASE);
                        Ok(true)
                    }
                    Err(Errno::Exist) => Ok(false),
                    Err(e) => Err(e),
                }
            }
        })
        .await;
    if based != Ok(true) {
        release_file(cx, &reader).await;
    }
    match based {
        Ok(true) => Ok(Some(reader)),
        Ok(false) => Ok(None),
        Err(e) => Err(Refused::Failed(e)),
    }
}

/// `SharedLock::acquire_from`: the guard (waited for as the mutex), one look and its step under
/// it, the guard released, then a wait woken by a file event or the poll.
pub async fn acquire_shared(cx: &Cx, mode: Mode, deadline: Option<u64>) -> Result<Held, Refused> {
    loop {
        let guard = acquire_mutex(cx, GUARD, deadline).await?;
        let (scene, step) = cx.call(|s, me| shared_look(s, me, mode)).await;
        let r = match step {
            Step::Wait(_) => Ok(None),
            Step::Refuse => Err(Refused::Busy),
            Step::Take => {
                if scene.base == Base::Shared {
                    cx.call(|s, _| remove_base(s)).await;
                }
                match attempt(cx, BASE).await {
                    Ok(h) => Ok(Some(h)),
                    Err(Refused::Busy) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Step::Join => join(cx, &scene).await,
        };
        release_file(cx, &guard).await;
        if let Some(held) = r? {
            return Ok(held);
        }
        let now = cx.now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Refused::Timeout);
        }
        let retry = cx.with(|s, _| s.cfg.retry_ms);
        let until = deadline.map_or(now + retry, |d| d.min(now + retry));
        cx.sleep(Some(until), Watch::Shared).await;
    }
}

/// `group::after_release`: the leaving reader, under the guard (tried for up to 500 ms), removes
/// the base when no reader is left, or renames it after a live reader.
pub async fn leave_group(cx: &Cx) {
    let mut guard = None;
    for _ in 0..3 {
        match attempt(cx, GUARD).await {
            Ok(g) => {
                guard = Some(g);
                break;
            }
            Err(Refused::Busy) => {
                let until = cx.now() + 200;
                cx.sleep(Some(until), Watch::Nothing).await;
            }
            Err(_) => return,
        }
    }
    let Some(guard) = guard else { return };
    cx.call(|s, me| {
        if s.take_fault().is_err() {
            return;
        }
        let (base, named) = read_base(s, me);
        if base != Base::Shared {
            return;
        }
        let readers = live_readers(s, me);
        let pid_of = |s: &State, name: &String| {
            s.fs.get(name)
                .and_then(|i| parse_lock_info(&read_lock_bytes_lossy(&i.bytes)).ok())
                .map_or(0, |i| i.pid)
        };
        // `named_reader_alive`: the named pid runs and is one of the live readers'.
        let named_alive =
            named > 0 && running(s, me, named) && readers.iter().any(|r| pid_of(s, r) == named);
        if readers.is_empty() {
            remove_base(s);
        } else if !named_alive {
            let pid = pid_of(s, &readers[0]);
            let _ = rewrite_base(s, me, pid);
        }
    })
    .await;
    release_file(cx, &guard).await;
}

/// `group::after_beat`: a reader's heartbeat refreshes the base under a short guard try.
pub async fn refresh_base(cx: &Cx) {
    let Ok(guard) = attempt(cx, GUARD).await else {
        return;
    };
    cx.call(|s, me| {
        if s.take_fault().is_err() {
            return;
        }
        let (base, named) = read_base(s, me);
        if base == Base::Shared {
            let pid = if named > 0 && running(s, me, named) {
                named
            } else {
                s.procs[me].pid
            };
            let _ = rewrite_base(s, me, pid);
        }
    })
    .await;
    release_file(cx, &guard).await;
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
        let Observation::Parsed { info, .. } = observe(s, me, BASE) else {
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
        if !owns(&info, &claimant, |_| false) {
            return false;
        }
        let _ = s.fs.unlink(BASE);
        s.file_event(BASE);
        true
    })
    .await
}

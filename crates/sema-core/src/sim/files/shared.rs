//! The shared lock's protocol (`lockfile/shared/`), step by step: the guard, one look and the
//! step `policy::decide` names under it, the join (reader file, then the base), the leaving
//! reader's and the heartbeat's care of the base. The FIFO tickets are not modelled (no fairness
//! invariant is checked): every look sees no waiter ahead.

use super::fs::Errno;
use super::proto::{
    acquire_mutex, attempt, examine_and_break, judge_file, live_readers, release_file, Examined,
    Held, Refused, BASE, GUARD, READER_PREFIX,
};
use super::state::{Cx, State, Watch};
use crate::lockfile::format::{is_shared_base, serialize_shared_base};
use crate::lockfile::shared::policy::{decide, Base, Mode, Scene, Step};
use crate::lockfile::{parse_lock_info, read_lock_bytes_lossy, StaleJudgement};

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
    let (wall_ms, now) = (s.wall_ms(me), s.now);
    let Some(inode) = s.fs.get_mut(BASE) else {
        return Ok(false);
    };
    if !is_shared_base(&read_lock_bytes_lossy(&inode.bytes)) {
        return Ok(false);
    }
    let bytes = serialize_shared_base(pid, wall_ms.div_euclid(1000), None).into_bytes();
    inode.rewrite(bytes, wall_ms, now, me);
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
                let when = (s.wall_ms(me), s.now);
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

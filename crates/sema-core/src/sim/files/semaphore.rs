//! The counting semaphore's protocol (`lockfile/semaphore/`), step by step: a round (the base,
//! then look → plan → try), the grant confirmed against other limits, and the wait in the
//! cross-process line. The decisions are the core's `plan`, `after_grant` and `may_try`.

use super::proto::{
    attempt, examine_and_break, judge_file, release_file, Examined, Held, Refused, BASE,
};
use super::state::{Cx, State, Watch};
use crate::lockfile::{
    after_grant, may_try, plan, AfterGrant, Line, Plan, Sibling, SlotName, SlotState,
    StaleJudgement, Standing,
};

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
    // `Semaphore::try_look`: a listing that fails releases the grant and fails the acquire.
    let others = match cx
        .call(|s, me| s.take_fault().map(|()| look(s, me, |s| s.limit != limit)))
        .await
    {
        Ok(others) => others,
        Err(errno) => {
            release_file(cx, &held).await;
            return Round::Failed(Refused::Failed(errno));
        }
    };
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

//! A simulated process's program: its requests in turn (a stray `release(path)` first, at
//! times), each acquired with its kind's protocol, held for a while with the heartbeat, then
//! released; every grant and every loss told is recorded for the invariants.

use super::proto::{self, Held, BASE};
use std::time::Duration;

use super::state::{Cx, Grant, State, Waiting, Watch};
use super::{semaphore, shared, trace, Kind};
use crate::lockfile::shared::policy::Mode;
use crate::lockfile::stale::remote::{BeatOutcome, HolderProgress};

/// One request of a program.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub(super) kind: Kind,
    pub(super) timeout_ms: Option<u64>,
    pub(super) hold_ms: u64,
    /// Calls `release(path)` first though it holds nothing there.
    pub(super) stray_release: bool,
}

/// A process's program: its requests in turn, each held for a while with the heartbeat, then
/// released; the exit release of whatever a failed release left.
pub(super) async fn run(cx: Cx, requests: Vec<Request>) {
    for r in requests {
        if r.stray_release {
            proto::release_by_path(&cx).await;
        }
        let deadline = r.timeout_ms.map(|t| cx.now() + t);
        cx.with(|s, me| {
            let p = &mut s.procs[me];
            p.started += 1;
            p.waiting = Some(Waiting {
                deadline,
                free_since: None,
            });
        });
        let got = match r.kind {
            Kind::Plain => proto::acquire_mutex(&cx, BASE, deadline)
                .await
                .map(|h| (h, Grant::Plain)),
            Kind::Slots(limit) => semaphore::acquire_semaphore(&cx, limit, deadline)
                .await
                .map(|(h, index)| (h, Grant::Slot { index, limit })),
            Kind::Shared(mode) => shared::acquire_shared(&cx, mode, deadline).await.map(|h| {
                let g = match mode {
                    Mode::Shared => Grant::Reader,
                    Mode::Exclusive => Grant::Writer,
                };
                (h, g)
            }),
        };
        let granted = cx.with(|s, me| {
            let p = &mut s.procs[me];
            p.waiting = None;
            p.settled += 1;
            if let Err(e) = &got {
                trace(|| format!("p{me} refused {e:?}"));
            }
            match &got {
                Ok((h, g)) => {
                    trace(|| format!("p{me} granted {g:?} {} #{} at {} ms", h.name, h.id, s.now));
                    let p = &mut s.procs[me];
                    p.grants += 1;
                    p.grant = Some((*g, h.name.clone(), h.id));
                    true
                }
                Err(_) => false,
            }
        });
        let Ok((mut held, grant)) = got else { continue };
        debug_assert!(granted);
        if hold(&cx, &mut held, grant, r.hold_ms).await {
            if !proto::release_file(&cx, &held).await {
                told_loss(&cx);
            }
            cx.with(|s, me| s.procs[me].grant = None);
            if grant == Grant::Reader {
                shared::leave_group(&cx).await;
            }
        }
    }
}

fn told_loss(cx: &Cx) {
    cx.with(|s, me| {
        s.procs[me].grant = None;
        s.procs[me].losses += 1;
    });
}

/// `heartbeat::next_due` on process `me`'s wall clock (the core's `step_to_due`).
fn next_due(s: &State, me: usize, period_ms: u64) -> u64 {
    let into_second = Duration::from_millis(s.wall_ms(me).rem_euclid(1_000) as u64);
    let step =
        crate::lockfile::heartbeat::step_to_due(Duration::from_millis(period_ms), into_second);
    s.now + step.as_millis() as u64
}

/// Holds for `hold_ms` with the heartbeat (`heartbeat::run`: a tick at each due time, a reader's
/// also refreshing its base, then `HolderProgress::after_tick`). `false`: the heartbeat found the
/// lock lost (not ours any more, or no beat changed the file for `HOLDER_LOSS_BEATS` evidence
/// periods), told to the holder.
async fn hold(cx: &Cx, held: &mut Held, grant: Grant, hold_ms: u64) -> bool {
    let until = cx.now() + hold_ms;
    let period_ms = cx.with(|s, _| s.cfg.heartbeat_ms);
    // `heartbeat::add`: the file was linked into place just before.
    let mut progress =
        cx.with(|s, _| HolderProgress::new(s.monotonic(), Duration::from_millis(period_ms)));
    let beat_ms = |p: &HolderProgress| p.beat_period().as_millis() as u64;
    let mut due = cx.with(|s, me| next_due(s, me, beat_ms(&progress)));
    loop {
        cx.sleep(Some(until.min(due)), Watch::Nothing).await;
        if cx.now() >= until {
            return true;
        }
        due = cx.with(|s, me| next_due(s, me, beat_ms(&progress)));
        let before = progress.beat_period();
        let (outcome, started) = proto::heartbeat(cx, held, period_ms).await;
        let Some(outcome) = outcome else {
            told_loss(cx);
            return false;
        };
        if grant == Grant::Reader && outcome != BeatOutcome::Failed {
            shared::refresh_base(cx).await;
        }
        let now = cx.with(|s, _| s.monotonic());
        let lost = progress.after_tick(started, outcome, now);
        if progress.beat_period() != before {
            // `heartbeat::note_beat`: after the first beat that changed the file, the own period.
            due = cx.with(|s, me| next_due(s, me, beat_ms(&progress)));
        }
        if lost && super::HOLDER_IGNORES_SILENCE.with(|c| c.get()) {
            continue;
        }
        if lost {
            trace(|| {
                format!(
                    "p{} lost {} to silence at {} ms",
                    cx.me,
                    held.name,
                    cx.now()
                )
            });
            super::count(|t| t.silence_losses += 1);
            proto::abandon(cx, held);
            told_loss(cx);
            return false;
        }
    }
}

//! One lock directory, several hosts: a holder on another host is judged by its heartbeat's
//! progress on the waiter's own monotonic clock (`stale::remote`). Deterministic: a fake clock
//! (instants offset from one base) drives the waiter's memory, the holder's loss clock and the
//! judgement; the wall clocks of both "hosts" are free parameters that must change nothing.

use std::time::{Duration, Instant};

use sema_core::lockfile::stale::remote::{
    holder_loss_after, remote_bound, BeatOutcome, Evidence, HolderProgress, ProgressMemory,
    HOLDER_LOSS_BEATS, REMOTE_BEATS,
};
use sema_core::lockfile::stale::{
    judge, reclaim, HeldBecause, Observation, ProcessProbe, ReclaimRule, StaleBecause,
    StaleContext, StaleJudgement,
};
use sema_core::lockfile::{Liveness, LockInfo};

const HOUR: Duration = Duration::from_secs(3600);
const LOOK: Duration = Duration::from_millis(100); // a waiter's default retryInterval

/// Every pid is alive: a pid of another host must not matter either way.
struct AllAlive;
impl ProcessProbe for AllAlive {
    fn liveness(&self, _pid: i64) -> Liveness {
        Liveness::Alive
    }
    fn start_ticks(&self, _pid: i64) -> Option<u64> {
        None
    }
    fn start_unix_secs(&self, _pid: i64) -> Option<f64> {
        None
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The file a holder on host A writes at its wall-clock second `ts`, beating every `beat_ms`.
fn remote_info(ts: i64, beat_ms: Option<u64>) -> LockInfo {
    LockInfo {
        pid: 1, // pid 1 of a container: also alive here, and meaningless
        timestamp: ts,
        tag: Some("build".into()),
        host: Some("host-a:boot-a:4026532201".into()),
        start: Some(42),
        heartbeat_ms: beat_ms,
        token: Some("00ff".into()),
    }
}

fn evidence_of(info: &LockInfo) -> Evidence {
    let bytes = info.serialize();
    Evidence {
        content_hash: bytes.len() as u64 * 1_000_003 + info.timestamp as u64,
        len: bytes.len() as u64,
        // host A's file server clock, compared only for equality
        modified_ns: i128::from(info.timestamp) * 1_000_000_000,
        changed_ns: i128::from(info.timestamp) * 1_000_000_000,
    }
}

/// Host B's verdict on `info` after `unchanged`, with B's wall clock at `b_now`.
fn verdict(info: &LockInfo, unchanged: Duration, b_now: i64) -> StaleJudgement {
    verdict_with(info, unchanged, b_now, HOUR)
}

fn verdict_with(
    info: &LockInfo,
    unchanged: Duration,
    b_now: i64,
    stale_timeout: Duration,
) -> StaleJudgement {
    let ctx = StaleContext {
        stale_timeout: Some(stale_timeout),
        pending_write_grace: Duration::from_secs(2),
        our_host: "host-b:boot-b:4026531836",
        now_unix_secs: b_now,
        foreign_start_check: false,
    };
    let obs = Observation::Parsed {
        info: info.clone(),
        age: Duration::ZERO,
        unchanged,
    };
    judge(&obs, &ctx, &AllAlive)
}

/// Host A beats every `beat` (its wall clock `a_offset` s away from the timeline's), host B looks
/// every 100 ms for `span` with its wall clock `b_offset` s away: B never judges A stale.
fn live_holder_run(beat: Duration, a_offset: i64, b_offset: i64, span: Duration) {
    let base = Instant::now();
    let wall0: i64 = 1_700_000_000;
    let mut memory = ProgressMemory::default();
    let beat_ms = beat.as_millis() as u64;
    let mut t = Duration::ZERO;
    while t <= span {
        // A's last beat at or before t: its timestamp is A's wall-clock second then.
        let beats = t.as_nanos() / beat.as_nanos();
        let last_beat = Duration::from_nanos((beats * beat.as_nanos()) as u64);
        let info = remote_info(wall0 + a_offset + last_beat.as_secs() as i64, Some(beat_ms));
        let unchanged = memory.note(1u8, evidence_of(&info), base + t);
        let b_now = wall0 + b_offset + t.as_secs() as i64;
        assert_eq!(
            verdict(&info, unchanged, b_now),
            StaleJudgement::Held(HeldBecause::OtherHostBeating),
            "beat {beat:?}, A {a_offset:+} s, B {b_offset:+} s, at {t:?}: unchanged {unchanged:?}"
        );
        t += LOOK;
    }
}

#[test]
fn a_live_remote_holder_is_never_taken_however_long() {
    // An hour of looks at a 1 s heartbeat; 10 minutes at a 250 ms and a 2.5 s one.
    live_holder_run(Duration::from_secs(1), 0, 0, HOUR);
    live_holder_run(ms(250), 0, 0, Duration::from_secs(600));
    live_holder_run(ms(2500), 0, 0, Duration::from_secs(600));
}

#[test]
fn a_wall_clock_hours_off_changes_nothing() {
    for (a, b) in [
        (0, 5 * 3600),
        (0, -5 * 3600),
        (7 * 3600, 0),
        (-86_400, 86_400),
    ] {
        live_holder_run(Duration::from_secs(1), a, b, Duration::from_secs(120));
    }
}

#[test]
fn a_frozen_remote_holder_is_taken_after_six_periods_and_not_before() {
    assert_eq!(REMOTE_BEATS, 6);
    for (beat_ms, bound) in [
        (1000, Duration::from_secs(6)),
        (250, Duration::from_secs(6)), // the content changes once a second at most
        (2500, Duration::from_secs(15)),
    ] {
        assert_eq!(remote_bound(Some(beat_ms), HOUR), bound);
        let base = Instant::now();
        let mut memory = ProgressMemory::default();
        let info = remote_info(1_700_000_000, Some(beat_ms));
        // The holder died just before B's first look: B sees the same file from then on.
        let mut t = Duration::ZERO;
        while t < bound {
            let unchanged = memory.note("a.lock", evidence_of(&info), base + t);
            assert_eq!(
                verdict(&info, unchanged, 1_700_000_000 + 9 * 3600),
                StaleJudgement::Held(HeldBecause::OtherHostBeating),
                "{beat_ms} ms at {t:?}"
            );
            t += LOOK;
        }
        let just_before = memory.note("a.lock", evidence_of(&info), base + bound - ms(1));
        assert!(!verdict(&info, just_before, 0).is_stale());
        let at = memory.note("a.lock", evidence_of(&info), base + bound);
        assert_eq!(
            verdict(&info, at, 0),
            StaleJudgement::Stale(StaleBecause::OtherHostSilent)
        );
        // status(): the rule and when, on B's own clock: `bound - unchanged` from now.
        let obs = Observation::Parsed {
            info: info.clone(),
            age: Duration::ZERO,
            unchanged: bound - Duration::from_secs(2),
        };
        let ctx = StaleContext {
            stale_timeout: Some(HOUR),
            pending_write_grace: Duration::from_secs(2),
            our_host: "host-b:boot-b:1",
            now_unix_secs: 5_000,
            foreign_start_check: false,
        };
        let r = reclaim(&obs, judge(&obs, &ctx, &AllAlive), &ctx).expect("a file");
        assert_eq!(r.rule, ReclaimRule::HeartbeatUnchanged);
        assert_eq!(r.rule.as_str(), "heartbeat-unchanged");
        assert_eq!(r.at_unix_secs, Some(5_002));
    }
}

#[test]
fn a_change_restarts_the_count_and_a_file_without_heartbeat_gets_the_stale_timeout() {
    let base = Instant::now();
    let mut memory = ProgressMemory::default();
    let one = remote_info(10, Some(1000));
    let two = remote_info(11, Some(1000));
    assert_eq!(memory.note(7, evidence_of(&one), base), Duration::ZERO);
    assert_eq!(memory.note(7, evidence_of(&one), base + ms(5900)), ms(5900));
    assert_eq!(
        memory.note(7, evidence_of(&two), base + ms(5950)),
        Duration::ZERO
    );
    assert_eq!(memory.note(7, evidence_of(&two), base + ms(6000)), ms(50));
    // Another file is counted on its own.
    assert_eq!(
        memory.note(8, evidence_of(&one), base + ms(6000)),
        Duration::ZERO
    );
    assert_eq!(memory.len(), 2);

    // No `heartbeat=` (its heartbeat off, or before its first beat): the stale timeout, at
    // least six seconds, still on B's clock.
    assert_eq!(remote_bound(None, HOUR), HOUR);
    assert_eq!(
        remote_bound(None, Duration::from_secs(1)),
        Duration::from_secs(6)
    );
    let quiet = remote_info(10, None);
    assert!(!verdict(&quiet, HOUR - ms(1), 0).is_stale());
    assert!(verdict(&quiet, HOUR, 0).is_stale());
}

/// The safety argument, run: host A's heartbeat (period `beat`, each beat `delay` late) fails
/// from `fail_at` on; host B looks every 100 ms. A must count the lock as lost before B may
/// take it, for every phase of the failure and every delay below two evidence periods.
#[test]
fn a_holder_whose_writes_fail_learns_of_the_loss_before_any_waiter_may_take_it() {
    assert_eq!(HOLDER_LOSS_BEATS, 3);
    let mut closest = Duration::MAX;
    for beat_ms in [100u64, 250, 1000, 2500] {
        let beat = ms(beat_ms);
        assert_eq!(
            holder_loss_after(beat),
            beat.max(Duration::from_secs(1)) * 3
        );
        for delay_ms in [0u64, 40, 500, 1000, 1900] {
            let delay = ms(delay_ms).min(beat.max(Duration::from_secs(1)) * 2 - ms(1));
            for phase_ms in (0..3000).step_by(137) {
                let fail_at = Duration::from_secs(20) + ms(phase_ms);
                let (lost, taken) = run_failing_holder(beat, delay, fail_at);
                assert!(
                    lost < taken,
                    "beat {beat:?}, delay {delay:?}, fail at {fail_at:?}: lost at {lost:?}, \
                     taken at {taken:?}"
                );
                closest = closest.min(taken - lost);
            }
        }
    }
    // The margin the numbers promise: at least what the delays left of two periods.
    assert!(closest >= ms(1), "{closest:?}");
}

/// (when A counts the lock as lost, when B may take it), from the timeline's start.
fn run_failing_holder(beat: Duration, delay: Duration, fail_at: Duration) -> (Duration, Duration) {
    let base = Instant::now();
    let wall0: i64 = 1_700_000_000;
    let beat_ms = beat.as_millis() as u64;
    let mut progress = HolderProgress::new(base, beat);
    let mut on_disk = remote_info(wall0, Some(beat_ms));
    // A's beats: every `beat` from the start, each `delay` late; the write takes 1 ms.
    let mut beats = Vec::new();
    let mut lost = None;
    let mut k = 1u32;
    while lost.is_none() {
        // Beats that write run on time; the failing ones run `delay` late (the worst case: the
        // waiter's count starts early, the holder's verdict comes late).
        let on_time = beat * k;
        let started = if on_time >= fail_at {
            on_time + delay
        } else {
            on_time
        };
        let outcome = if started >= fail_at {
            BeatOutcome::Failed
        } else {
            let next = remote_info(wall0 + started.as_secs() as i64, Some(beat_ms));
            let changed = next != on_disk;
            on_disk = next.clone();
            beats.push((started + ms(1), next));
            if changed {
                BeatOutcome::Changed
            } else {
                BeatOutcome::Same
            }
        };
        let ended = started + ms(1);
        if progress.after_tick(base + started, outcome, base + ended) {
            lost = Some(ended);
        }
        assert!(k < 10_000, "never lost");
        k += 1;
    }
    let lost = lost.unwrap_or_default();
    assert!(
        lost >= fail_at,
        "a false loss at {lost:?} before the writes failed"
    );
    // B's looks: what is on disk at each look (the last write ended by then).
    let mut memory = ProgressMemory::default();
    let mut t = Duration::ZERO;
    loop {
        let seen = beats
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map(|(_, info)| info.clone())
            .unwrap_or_else(|| remote_info(wall0, Some(beat_ms)));
        let unchanged = memory.note((), evidence_of(&seen), base + t);
        if verdict(&seen, unchanged, wall0 + 4 * 3600).is_stale() {
            return (lost, t);
        }
        t += LOOK;
    }
}

/// Before its first beat a holder's file has no `heartbeat=` line, and a waiter on another host
/// gives it `max(staleTimeout, 6 s)` from its first look; a holder whose writes fail from its
/// acquisition on is told first whatever its own period, because it beats and counts by 1 s
/// periods until a beat has changed the file. Failed before that rule with a 3 s heartbeat and a
/// 6 s stale timeout: told at 9 s, taken at 6 s (the simulator's seed 655).
#[test]
fn a_holder_failing_before_its_first_beat_is_told_before_a_short_stale_timeout_takes_it() {
    let wall0: i64 = 1_700_000_000;
    for beat_ms in [100u64, 1000, 3000, 10_000] {
        // Each beat late by `delay` (the heartbeat plans the next from when it ran).
        for delay in [ms(0), ms(900), ms(1900)] {
            let base = Instant::now();
            let mut progress = HolderProgress::new(base, ms(beat_ms));
            let mut t = Duration::ZERO;
            let lost = loop {
                t += progress.beat_period() + delay;
                if progress.after_tick(base + t, BeatOutcome::Failed, base + t + ms(1)) {
                    break t + ms(1);
                }
                assert!(t < HOUR, "never lost");
            };
            // The waiter looks from the acquisition on at the file as linked.
            let file = remote_info(wall0, None);
            let mut memory = ProgressMemory::default();
            let mut w = Duration::ZERO;
            let taken = loop {
                let unchanged = memory.note((), evidence_of(&file), base + w);
                if verdict_with(&file, unchanged, wall0 + 7, ms(6000)).is_stale() {
                    break w;
                }
                w += LOOK;
            };
            assert!(
                lost < taken,
                "heartbeat {beat_ms} ms, delay {delay:?}: lost at {lost:?}, taken at {taken:?}"
            );
        }
    }
}

#[test]
fn a_healthy_holder_late_by_less_than_two_periods_never_counts_its_lock_lost() {
    for beat_ms in [100u64, 1000, 2500] {
        let beat = ms(beat_ms);
        let evidence = beat.max(Duration::from_secs(1));
        let base = Instant::now();
        let mut progress = HolderProgress::new(base, beat);
        let mut last_second = 0;
        for k in 1..2000u32 {
            // Every other beat as late as the argument allows (just under two periods).
            let late = if k % 2 == 0 {
                evidence * 2 - ms(1)
            } else {
                Duration::ZERO
            };
            let started = beat * k + late;
            let second = started.as_secs();
            let outcome = if second != last_second {
                BeatOutcome::Changed
            } else {
                BeatOutcome::Same
            };
            last_second = second;
            assert!(
                !progress.after_tick(base + started, outcome, base + started + ms(1)),
                "{beat:?}: a false loss at beat {k}"
            );
        }
    }
}

//! The judgement's table of cases, and the liveness probes against this process.

use super::*;
use std::collections::HashMap;

/// Scripted process table: pid -> (liveness, start ticks, start unix secs).
#[derive(Default)]
struct FakeProbe(HashMap<i64, (Liveness, Option<u64>, Option<f64>)>);

impl FakeProbe {
    fn with(mut self, pid: i64, l: Liveness, ticks: Option<u64>, secs: Option<f64>) -> Self {
        self.0.insert(pid, (l, ticks, secs));
        self
    }
}

impl ProcessProbe for FakeProbe {
    fn liveness(&self, pid: i64) -> Liveness {
        self.0.get(&pid).map(|e| e.0).unwrap_or(Liveness::Dead)
    }
    fn start_ticks(&self, pid: i64) -> Option<u64> {
        self.0.get(&pid).and_then(|e| e.1)
    }
    fn start_unix_secs(&self, pid: i64) -> Option<f64> {
        self.0.get(&pid).and_then(|e| e.2)
    }
}

const NOW: i64 = 1_000_000;
const HOUR: Duration = Duration::from_secs(3600);

fn ctx(timeout: Option<Duration>) -> StaleContext<'static> {
    StaleContext {
        stale_timeout: timeout,
        pending_write_grace: Duration::from_secs(2),
        our_host: "me:boot:1",
        now_unix_secs: NOW,
        foreign_start_check: true,
    }
}

fn parsed(pid: i64, ts: i64, host: Option<&str>, start: Option<u64>) -> Observation {
    Observation::Parsed {
        info: LockInfo {
            heartbeat_ms: None,
            pid,
            timestamp: ts,
            tag: None,
            host: host.map(str::to_string),
            start,
            token: None,
        },
        age: Duration::ZERO,
        unchanged: Duration::ZERO,
    }
}

fn unparseable(age_secs: u64) -> Observation {
    Observation::Unparseable {
        age: Duration::from_secs(age_secs),
        error: ParseError::MissingPid,
    }
}

#[test]
fn judgement_table() {
    use HeldBecause as H;
    use StaleBecause as S;
    use StaleJudgement::{Free, Held, Stale};
    let probe = FakeProbe::default()
        .with(10, Liveness::Alive, Some(500), Some((NOW - 7200) as f64))
        .with(11, Liveness::Alive, None, None)
        .with(12, Liveness::Alive, Some(900), Some((NOW - 10) as f64)) // started recently
        // kill(0, 0) and kill(-1, 0) succeed: a process group, all processes
        .with(0, Liveness::Alive, None, None)
        .with(-1, Liveness::Alive, None, None)
        .with(13, Liveness::Unknown, None, None);
    let me = Some("me:boot:1");
    let other = Some("other:boot:1");
    let t = Some(HOUR);
    let rows: Vec<(&str, Observation, Option<Duration>, StaleJudgement)> = vec![
        ("missing", Observation::Missing, t, Free),
        ("missing, None", Observation::Missing, None, Free),
        // own host
        (
            "own dead fresh",
            parsed(99, NOW, me, Some(1)),
            t,
            Stale(S::OwnHostHolderDead),
        ),
        (
            "own alive ancient",
            parsed(10, 0, me, Some(500)),
            t,
            Held(H::OwnHostHolderAlive),
        ),
        (
            "own alive no start",
            parsed(11, 0, me, None),
            t,
            Held(H::OwnHostHolderAlive),
        ),
        (
            "own reused pid",
            parsed(10, NOW, me, Some(499)),
            t,
            Stale(S::OwnHostPidReused),
        ),
        (
            "own unknown liveness",
            parsed(13, 0, me, None),
            t,
            Held(H::OwnHostHolderAlive),
        ),
        (
            "own dead, None",
            parsed(99, 0, me, Some(1)),
            None,
            Held(H::NeverStale),
        ),
        // own host with a pid that is not one process -> foreign rule
        (
            "own pid 0 old",
            parsed(0, 0, me, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "own pid -5 old",
            parsed(-5, 0, me, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        // other host: its heartbeat's progress as we saw it (first look here), never its
        // timestamp's age (another machine's clock)
        (
            "other, timestamp now",
            parsed(10, NOW - 3600, other, None),
            t,
            Held(H::OtherHostBeating),
        ),
        (
            "other, timestamp an hour old by our clock",
            parsed(10, NOW - 3601, other, None),
            t,
            Held(H::OtherHostBeating),
        ),
        (
            "other, timestamp in the future by our clock",
            parsed(99, NOW + 7200, other, None),
            t,
            Held(H::OtherHostBeating),
        ),
        (
            "other, None",
            parsed(99, 0, other, None),
            None,
            Held(H::NeverStale),
        ),
        // foreign: age AND not running
        (
            "foreign boundary equal",
            parsed(99, NOW - 3600, None, None),
            t,
            Held(H::Fresh),
        ),
        (
            "foreign boundary +1",
            parsed(99, NOW - 3601, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign running old",
            parsed(10, NOW - 3601, None, None),
            t,
            Held(H::ForeignHolderRunning),
        ),
        (
            "foreign pid started after ts",
            parsed(12, NOW - 3601, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign unknown start",
            parsed(11, 0, None, None),
            t,
            Held(H::ForeignHolderRunning),
        ),
        (
            "foreign future ts",
            parsed(99, NOW + 100, None, None),
            t,
            Held(H::Fresh),
        ),
        // pid <= 0 names no process: never a live holder, so the age decides
        (
            "foreign pid 0 ts 0",
            parsed(0, 0, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign pid -1 ts 0",
            parsed(-1, 0, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign pid 0 fresh",
            parsed(0, NOW - 10, None, None),
            t,
            Held(H::Fresh),
        ),
        (
            "foreign pid -1, None",
            parsed(-1, 0, None, None),
            None,
            Held(H::NeverStale),
        ),
        (
            "foreign ts 0 dead",
            parsed(99, 0, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign EINVAL pid",
            parsed(13, 0, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign huge pid",
            parsed(99_999_999_999, 0, None, None),
            t,
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign, None",
            parsed(99, 0, None, None),
            None,
            Held(H::NeverStale),
        ),
        (
            "foreign 1s timeout age 1",
            parsed(99, NOW - 1, None, None),
            Some(Duration::from_secs(1)),
            Held(H::Fresh),
        ),
        (
            "foreign 1s timeout age 2",
            parsed(99, NOW - 2, None, None),
            Some(Duration::from_secs(1)),
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign 1.5s timeout age 2",
            parsed(99, NOW - 2, None, None),
            Some(Duration::from_millis(1500)),
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        (
            "foreign 0 timeout age 0",
            parsed(99, NOW, None, None),
            Some(Duration::ZERO),
            Held(H::Fresh),
        ),
        (
            "foreign 0 timeout age 1",
            parsed(99, NOW - 1, None, None),
            Some(Duration::ZERO),
            Stale(S::ForeignExpiredAndNotRunning),
        ),
        // unparseable: by mtime age against max(grace, timeout)
        (
            "unparseable young",
            unparseable(1),
            t,
            Held(H::YoungUnparseable),
        ),
        (
            "unparseable at timeout",
            unparseable(3600),
            t,
            Held(H::YoungUnparseable),
        ),
        (
            "unparseable old",
            unparseable(3601),
            t,
            Stale(S::OldUnparseable),
        ),
        (
            "unparseable, tiny timeout, within grace",
            unparseable(2),
            Some(Duration::ZERO),
            Held(H::YoungUnparseable),
        ),
        (
            "unparseable, tiny timeout, past grace",
            unparseable(3),
            Some(Duration::ZERO),
            Stale(S::OldUnparseable),
        ),
        (
            "unparseable, None",
            unparseable(1_000_000),
            None,
            Held(H::NeverStale),
        ),
    ];
    for (name, obs, timeout, expected) in rows {
        assert_eq!(judge(&obs, &ctx(timeout), &probe), expected, "{name}");
    }
}

/// The pid-reuse race: a holder's pid was reused within the cache window by the process
/// that now holds the lock. A cached start time (the previous process's) differs from the
/// one recorded; the judgement must read it again and find the holder alive. Reproduced
/// with the real cache and the real `/proc`: this process, recorded with its true start
/// time, while the cache remembers another one for its pid.
#[cfg(target_os = "linux")]
#[test]
fn a_cached_start_time_never_makes_a_live_holder_dead() {
    let me = process::current_pid();
    let Some(true_start) = process::process_start_ticks(me) else {
        return;
    };
    remember_start_ticks(me, true_start + 12_345); // the previous owner of the pid
    let obs = parsed(me, NOW, Some("me:boot:1"), Some(true_start));
    assert_eq!(
        judge(&obs, &ctx(Some(HOUR)), &OsProbe),
        StaleJudgement::Held(HeldBecause::OwnHostHolderAlive)
    );
    // And a pid whose start time really differs is still judged reused.
    let obs = parsed(me, NOW, Some("me:boot:1"), Some(true_start + 1));
    assert_eq!(
        judge(&obs, &ctx(Some(HOUR)), &OsProbe),
        StaleJudgement::Stale(StaleBecause::OwnHostPidReused)
    );
}

#[test]
fn foreign_start_check_can_be_switched_off() {
    let probe = FakeProbe::default().with(12, Liveness::Alive, Some(900), Some((NOW - 10) as f64));
    let obs = parsed(12, 0, None, None);
    let mut c = ctx(Some(HOUR));
    assert!(judge(&obs, &c, &probe).is_stale());
    c.foreign_start_check = false;
    assert_eq!(
        judge(&obs, &c, &probe),
        StaleJudgement::Held(HeldBecause::ForeignHolderRunning)
    );
}

#[test]
fn semats_is_lock_stale() {
    assert!(is_lock_stale_by_age(0, Some(Duration::from_secs(1)), NOW));
    assert!(!is_lock_stale_by_age(NOW, Some(HOUR), NOW));
    assert!(is_lock_stale_by_age(
        NOW - 10,
        Some(Duration::from_millis(9000)),
        NOW
    ));
    assert!(!is_lock_stale_by_age(
        NOW - 10,
        Some(Duration::from_millis(11000)),
        NOW
    ));
    assert!(!is_lock_stale_by_age(0, None, NOW));
    assert!(!is_lock_stale_by_age(
        i64::MIN,
        Some(Duration::MAX),
        i64::MAX
    ));
    assert!(is_lock_stale_by_age(i64::MIN, Some(HOUR), i64::MAX));
}

/// `reclaim`: the rule and the first second at which the judgement's age condition holds, which
/// must agree with `judge` itself at that second and the one before.
#[test]
fn reclaim_time_agrees_with_the_judgement() {
    let dead = FakeProbe::default();
    for timeout in [Duration::from_secs(1), Duration::from_millis(1500), HOUR] {
        let c = ctx(Some(timeout));
        let ts = NOW - 10;
        let obs = parsed(77, ts, None, None);
        let r = reclaim(&obs, judge(&obs, &c, &dead), &c).expect("a file");
        assert_eq!(r.rule, ReclaimRule::AgeAndPidNotRunning);
        let at = r.at_unix_secs.expect("an age rule has a time");
        for (now, stale) in [(at - 1, false), (at, true)] {
            let then = StaleContext {
                now_unix_secs: now,
                ..c
            };
            assert_eq!(
                judge(&obs, &then, &dead).is_stale(),
                stale,
                "{timeout:?} at {now}"
            );
        }
    }
    let c = ctx(Some(HOUR));
    let other = parsed(77, NOW, Some("them:boot:1"), None);
    let r = reclaim(&other, judge(&other, &c, &dead), &c);
    assert_eq!(
        r,
        Some(Reclaim {
            rule: ReclaimRule::HeartbeatUnchanged,
            // no `heartbeat=` recorded: the whole stale timeout, from this first look
            at_unix_secs: Some(NOW + 3600)
        })
    );
    // Ours, holder alive: no time decides it; dead: stale, reclaimable now.
    let ours = parsed(5, NOW - 100_000, Some("me:boot:1"), None);
    let alive = FakeProbe::default().with(5, Liveness::Alive, None, None);
    assert_eq!(
        reclaim(&ours, judge(&ours, &c, &alive), &c),
        Some(Reclaim {
            rule: ReclaimRule::HolderDead,
            at_unix_secs: None
        })
    );
    assert_eq!(
        reclaim(&ours, judge(&ours, &c, &dead), &c),
        Some(Reclaim {
            rule: ReclaimRule::HolderDead,
            at_unix_secs: Some(NOW)
        })
    );
    let u = unparseable(10);
    let r = reclaim(&u, judge(&u, &c, &dead), &c).expect("a file");
    assert_eq!(
        (r.rule, r.at_unix_secs),
        (ReclaimRule::UnparseableAge, Some(NOW + 3590))
    );
    let never = ctx(None);
    assert_eq!(
        reclaim(&ours, judge(&ours, &never, &dead), &never).map(|r| r.rule),
        Some(ReclaimRule::Never)
    );
    assert_eq!(
        reclaim(&Observation::Missing, StaleJudgement::Free, &c),
        None
    );
}

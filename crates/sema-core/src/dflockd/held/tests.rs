//! The held-lock machine's decisions, driven by hand: no socket, no real time (every instant is
//! a fixed base plus a chosen offset).

use super::rejoin::{FailedOn::Enqueue, FailedOn::Wait, Next, Rejoin};
use super::*;
use crate::dflockd::connection::ConnectOptions;

const S: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn opts() -> PrimitiveOptions {
    let mut o = PrimitiveOptions::new("k", ConnectOptions::new("127.0.0.1", 1));
    o.lease_ttl_s = Some(10);
    o
}

/// A 10 s lease granted at `t0`: renew at 5 s, valid until 9 s (guard 1 s), expiry at 10 s.
fn held(t0: Instant) -> HeldMachine {
    HeldMachine::new(&opts(), 10, t0, Vec::new())
}

fn drain(m: &mut HeldMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn server_error() -> DflockdError {
    DflockdError::new(ErrorCode::ServerError, "renew: refused").with_reply("error")
}

fn lost_count(actions: &[Action]) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Lost { .. }))
        .count()
}

/// Advance to the renew instant: the machine asks for the renew; returns its start.
fn start_renew(m: &mut HeldMachine) -> Instant {
    let at = m.poll_timeout().unwrap();
    m.handle_timeout(at);
    assert!(matches!(drain(m)[..], [Action::SendRenew { .. }]));
    at
}

#[test]
fn renews_on_the_callers_ratio_and_proves_the_lease_from_the_send() {
    let t0 = Instant::now();
    let mut o = opts();
    o.renew_ratio = 0.3;
    let mut m = HeldMachine::new(&o, 10, t0, Vec::new());
    // 0.3 of 10 s, not the default half.
    assert_eq!(m.poll_timeout(), Some(t0 + 3 * S));
    m.handle_timeout(t0 + 2 * S);
    assert!(drain(&mut m).is_empty(), "an early tick does nothing");
    let started = start_renew(&mut m);
    // The reply limit runs to the server's expiry of a lease renewed now.
    m.renew_reply(started + ms(5), started, Ok(Some(10)));
    assert_eq!(
        drain(&mut m),
        vec![Action::Proven {
            lease_s: 10,
            loss_at: started + 9 * S
        }]
    );
    assert_eq!(m.poll_timeout(), Some(started + 3 * S));
}

#[test]
fn lease_ends_before_the_reply_lost_at_loss_at_and_the_connection_lingers_to_expiry() {
    let t0 = Instant::now();
    let mut m = held(t0);
    start_renew(&mut m);
    // No reply: the timer is the validity's end, 9 s after the grant's send.
    assert_eq!(m.poll_timeout(), Some(t0 + 9 * S));
    m.handle_timeout(t0 + 9 * S);
    let a = drain(&mut m);
    assert_eq!(lost_count(&a), 1);
    assert!(
        matches!(&a[..], [Action::Lost { reason, notify: true }] if reason.contains("no renewal was confirmed within the 10 s lease"))
    );
    // Kept open (no Close) until the server could end the lease itself.
    assert_eq!(m.poll_timeout(), Some(t0 + 10 * S));
    // The reply, arriving now, is too late: it proves nothing.
    m.renew_reply(t0 + 9 * S + ms(10), t0 + 5 * S, Ok(Some(10)));
    assert_eq!(drain(&mut m), vec![Action::Close]);
    assert!(m.is_done());
}

#[test]
fn reply_lost_closes_at_the_server_expiry_and_reports_once() {
    let t0 = Instant::now();
    let mut m = held(t0);
    start_renew(&mut m);
    m.handle_timeout(t0 + 9 * S);
    let first = drain(&mut m);
    m.handle_timeout(t0 + 10 * S);
    let second = drain(&mut m);
    assert_eq!(lost_count(&first) + lost_count(&second), 1);
    assert_eq!(second, vec![Action::Close]);
    assert_eq!(m.poll_timeout(), None);
    // A release after the loss answers LOCK_LOST at once, with the reason.
    let e = m.release(t0 + 11 * S).unwrap_err();
    assert_eq!(e.code(), ErrorCode::LockLost);
    assert!(e.message().contains("no renewal was confirmed"), "{e}");
}

#[test]
fn a_tick_later_than_the_validity_loses_without_renewing() {
    let t0 = Instant::now();
    let mut m = held(t0);
    // The driver was not scheduled until after the validity (a stalled runtime).
    m.handle_timeout(t0 + 9 * S + ms(1));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Lost { notify: true, .. }]),
        "{a:?}"
    );
}

#[test]
fn renew_refused_is_lost_once_then_closed() {
    let t0 = Instant::now();
    let mut m = held(t0);
    let started = start_renew(&mut m);
    m.renew_reply(started + ms(2), started, Err(server_error()));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Lost { reason, notify: true }, Action::Close] if reason == "renew: refused"),
        "{a:?}"
    );
    m.disconnected(DflockdError::new(ErrorCode::ConnectionError, "gone"));
    assert!(drain(&mut m).is_empty(), "reported once");
}

#[test]
fn a_multi_part_hold_renews_together_and_any_part_refused_is_one_loss() {
    let t0 = Instant::now();
    let parts: Vec<String> = ["gate", "slots-a", "slots-b"].map(String::from).into();
    let mut m = HeldMachine::new(&opts(), 10, t0, parts.clone());
    let started = start_renew(&mut m);
    m.renew_reply(started, started, Ok(Some(10)));
    m.renew_reply(started, started, Ok(Some(8)));
    m.renew_reply(started, started, Ok(Some(10)));
    // One proof for the whole, the smallest lease.
    assert_eq!(
        drain(&mut m),
        vec![Action::Proven {
            lease_s: 8,
            loss_at: started + 8 * S - ms(800)
        }]
    );
    let started = start_renew(&mut m);
    m.renew_reply(started, started, Ok(Some(10)));
    m.renew_reply(started, started, Err(server_error()));
    let a = drain(&mut m);
    assert_eq!(lost_count(&a), 1);
    assert!(
        matches!(&a[..], [Action::Lost { reason, .. }, Action::Close] if reason.starts_with("renew of 'slots-a'")),
        "{a:?}"
    );
    // The third part's reply, read after, changes nothing.
    m.renew_reply(started, started, Err(server_error()));
    assert!(drain(&mut m).is_empty());
    // One named part (a reader's slot): its loss names it too.
    let mut m = HeldMachine::new(&opts(), 10, t0, vec!["k/readers".into()]);
    let started = start_renew(&mut m);
    m.renew_reply(started, started, Err(server_error()));
    assert!(
        matches!(&drain(&mut m)[..], [Action::Lost { reason, .. }, Action::Close] if reason.starts_with("renew of 'k/readers'"))
    );
}

#[test]
fn disconnect_during_renew_is_lost_and_closed() {
    let t0 = Instant::now();
    let mut m = held(t0);
    start_renew(&mut m);
    m.disconnected(DflockdError::new(
        ErrorCode::ConnectionError,
        "connection to h:1 closed by the server",
    ));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Lost { notify: true, .. }, Action::Close]),
        "{a:?}"
    );
}

#[test]
fn disconnect_while_idle_is_lost_and_closed() {
    let t0 = Instant::now();
    let mut m = held(t0);
    m.disconnected(DflockdError::new(ErrorCode::ConnectionError, "eof"));
    assert!(matches!(
        &drain(&mut m)[..],
        [Action::Lost { notify: true, .. }, Action::Close]
    ));
}

#[test]
fn release_during_renew_waits_for_the_reply_then_releases() {
    let t0 = Instant::now();
    let mut m = held(t0);
    let started = start_renew(&mut m);
    m.release(started + ms(1)).unwrap();
    assert!(drain(&mut m).is_empty(), "nothing sent beside the renew");
    m.renew_reply(started + ms(3), started, Ok(Some(10)));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Proven { .. }, Action::SendRelease { .. }]),
        "{a:?}"
    );
    m.release_reply(Ok(()));
    assert_eq!(
        drain(&mut m),
        vec![Action::Pool, Action::SettleRelease(Ok(()))]
    );
}

#[test]
fn release_during_renew_with_no_reply_gives_up_after_5_s_without_reporting_a_loss() {
    let t0 = Instant::now();
    let mut o = opts();
    o.lease_ttl_s = Some(60);
    // A server with a long idle limit: the lease's validity, not the idle bound, is far away.
    o.renew_max_interval = Duration::from_secs(60);
    let mut m = HeldMachine::new(&o, 60, t0, Vec::new());
    let started = start_renew(&mut m);
    m.release(started).unwrap();
    assert_eq!(m.poll_timeout(), Some(started + RELEASE_RENEW_WAIT));
    m.handle_timeout(started + RELEASE_RENEW_WAIT);
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Lost { notify: false, .. }, Action::SettleRelease(Err(e)), Action::Close]
            if e.code() == ErrorCode::LockLost && e.message().contains("no reply within 5 s")),
        "{a:?}"
    );
}

#[test]
fn release_during_renew_refused_answers_the_release_not_on_lost() {
    let t0 = Instant::now();
    let mut m = held(t0);
    let started = start_renew(&mut m);
    m.release(started).unwrap();
    m.renew_reply(started, started, Err(server_error()));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Lost { notify: false, .. }, Action::SettleRelease(Err(e)), Action::Close]
            if e.code() == ErrorCode::LockLost && e.reply() == Some("error")),
        "{a:?}"
    );
}

#[test]
fn release_refused_or_unanswered_is_lock_lost() {
    let t0 = Instant::now();
    let mut m = held(t0);
    m.release(t0 + S).unwrap();
    let a = drain(&mut m);
    // Awaited until the validity ends at most, within the socket timeout.
    assert_eq!(a, vec![Action::SendRelease { limit: 8 * S }]);
    m.release_reply(Err(server_error()));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Close, Action::SettleRelease(Err(e))] if e.code() == ErrorCode::LockLost)
    );

    let mut m = held(t0);
    m.release(t0 + S).unwrap();
    drain(&mut m);
    m.handle_timeout(t0 + 9 * S);
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Close, Action::SettleRelease(Err(e))]
        if e.code() == ErrorCode::LockLost && e.message().contains("release got no reply"))
    );
}

#[test]
fn abort_answers_a_pending_release_and_reports_no_loss() {
    let t0 = Instant::now();
    let mut m = held(t0);
    let started = start_renew(&mut m);
    m.release(started).unwrap();
    m.abort();
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Close, Action::SettleRelease(Err(e))] if e.message().contains("connection was closed")),
        "{a:?}"
    );
    m.abort();
    m.handle_timeout(t0 + 60 * S);
    assert!(drain(&mut m).is_empty());
    // Aborted while idle: closed, nothing else.
    let mut m = held(t0);
    m.abort();
    assert_eq!(drain(&mut m), vec![Action::Close]);
}

#[test]
fn the_watchdogs_renew_stands_for_the_late_drivers_and_proves_the_lease() {
    let t0 = Instant::now();
    let mut m = held(t0);
    assert_eq!(m.watchdog_grace(), ms(50));
    // Late: the watchdog renewed at 5.05 s; the driver sends no second renew.
    m.handle_timeout_beside(t0 + 5 * S + ms(60), true);
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.poll_timeout(), Some(t0 + 9 * S));
    m.other_renew_reply(t0 + 5 * S + ms(70), t0 + 5 * S + ms(50), Ok(Some(10)));
    let a = drain(&mut m);
    assert!(matches!(&a[..], [Action::Proven { .. }]));
    assert_eq!(m.poll_timeout(), Some(t0 + 10 * S + ms(50)));
    // Refused: lost as the driver's own renew would be.
    m.other_renew_reply(t0 + 11 * S, t0 + 11 * S, Err(server_error()));
    assert!(matches!(
        &drain(&mut m)[..],
        [Action::Lost { notify: true, .. }, Action::Close]
    ));
}

#[test]
fn abort_while_waiting_ends_the_rejoins() {
    let t0 = Instant::now();
    let mut w = Rejoin::new(Some(t0 + 10 * S));
    w.abort();
    let gone = DflockdError::new(ErrorCode::ConnectionError, "reset");
    assert!(
        matches!(w.failed(t0, gone, Wait, true), Next::Fail(e) if e.code() == ErrorCode::Aborted)
    );
}

#[test]
fn reconnect_while_waiting_backs_off_and_re_enqueues_with_what_is_left() {
    let t0 = Instant::now();
    let mut w = Rejoin::new(Some(t0 + 3 * S));
    let gone = || DflockdError::new(ErrorCode::ConnectionError, "connection reset");
    // A stopping server's bare `error` to a blocked wait counts as a restart too.
    let stopping = DflockdError::new(ErrorCode::ServerError, "wait: error").with_reply("error");
    assert_eq!(
        w.failed(t0, stopping, Wait, true),
        Next::Retry {
            at: t0 + ms(50),
            timeout_s: 3
        }
    );
    assert_eq!(
        w.failed(t0 + S, gone(), Wait, true),
        Next::Retry {
            at: t0 + S + ms(100),
            timeout_s: 2
        }
    );
    // Past the end with the next pause: the failure is reported.
    assert!(matches!(
        w.failed(t0 + 2 * S + ms(900), gone(), Wait, true),
        Next::Fail(_)
    ));
    // Never reached (a wrong address), a try, or a refusal: reported at once.
    assert!(matches!(
        Rejoin::new(Some(t0 + 3 * S)).failed(t0, gone(), Wait, false),
        Next::Fail(_)
    ));
    assert!(matches!(
        Rejoin::new(None).failed(t0, gone(), Wait, true),
        Next::Fail(_)
    ));
    let refused = DflockdError::new(ErrorCode::ServerError, "x").with_reply("error_max_waiters");
    assert!(matches!(
        Rejoin::new(Some(t0 + 3 * S)).failed(t0, refused, Wait, true),
        Next::Fail(_)
    ));
}

/// A bare `error` to `e`/`se` is a refusal, not a stop (the Go server's enqueue has no stop
/// path; the Python 0.5.0 server answers `error` to `se`, which it lacks): reported at once,
/// where it used to be retried until the timeout's end and, when the retries crossed the
/// acquire deadline under load, reported as a timeout (CI's Deno run, 10 s).
#[test]
fn a_bare_error_to_an_enqueue_is_reported_at_once() {
    let t0 = Instant::now();
    let bare = || DflockdError::new(ErrorCode::ServerError, "x").with_reply("error");
    assert!(matches!(
        Rejoin::new(Some(t0 + 10 * S)).failed(t0, bare(), Enqueue, true),
        Next::Fail(e) if e.reply() == Some("error")
    ));
    // The same reply to a blocked request is a stopping server's: rejoined.
    assert!(matches!(
        Rejoin::new(Some(t0 + 10 * S)).failed(t0, bare(), Wait, true),
        Next::Retry { .. }
    ));
    // A dropped connection after an enqueue is still a restart.
    let gone = DflockdError::new(ErrorCode::ConnectionError, "connection reset");
    assert!(matches!(
        Rejoin::new(Some(t0 + 10 * S)).failed(t0, gone, Enqueue, true),
        Next::Retry { .. }
    ));
}

#[test]
fn a_release_waiting_for_the_watchdogs_renew_goes_out_on_its_reply() {
    let t0 = Instant::now();
    let mut m = held(t0);
    m.handle_timeout_beside(t0 + 5 * S + ms(60), true);
    m.release(t0 + 5 * S + ms(61)).unwrap();
    assert!(!m.renewable(), "no watchdog renew beside a release");
    m.other_renew_reply(t0 + 5 * S + ms(70), t0 + 5 * S + ms(50), Ok(Some(10)));
    let a = drain(&mut m);
    assert!(
        matches!(&a[..], [Action::Proven { .. }, Action::SendRelease { .. }]),
        "{a:?}"
    );
}

//! The first request of an acquisition whose I/O the binding's event-loop driver carries
//! (`Primitive::external_first_*`): which request it is, how long its reply may take, and what
//! its answer means. Decided in the core, with no I/O: the driver only sends and reads.

use std::time::Duration;

use sema_core::dflockd::{
    ConnectOptions, DflockdError, ErrorCode, FirstAnswer, FirstFailed, Grant, Primitive,
    PrimitiveOptions,
};
use tokio::time::Instant;

fn prim(limit: u64, ttl: Option<u64>, deadline: Option<Duration>) -> Primitive {
    let mut o = PrimitiveOptions::new("k", ConnectOptions::new("127.0.0.1", 1));
    o.limit = limit;
    o.lease_ttl_s = ttl;
    o.acquire_deadline = deadline;
    o.connect.socket_timeout = Duration::from_secs(5);
    Primitive::new(o).expect("options")
}

fn wire(p: &Primitive, enqueue: bool) -> String {
    let bytes = p.external_first_request(enqueue).encode().expect("encodes");
    String::from_utf8(bytes).expect("utf-8")
}

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[test]
    fn a_waiting_acquisition_enqueues_and_a_try_locks_with_timeout_zero() {
        assert_eq!(wire(&prim(1, Some(7), None), true), "e\nk\n7\n");
        assert_eq!(wire(&prim(3, Some(7), None), true), "se\nk\n3 7\n");
        assert_eq!(wire(&prim(1, Some(7), None), false), "l\nk\n0 7\n");
        assert_eq!(wire(&prim(3, None, None), false), "sl\nk\n0 3\n");
    }

    #[test]
    fn the_reply_limit_is_what_is_left_of_a_ms_timeout_at_most_the_socket_timeout() {
        let t0 = Instant::now();
        let none = prim(1, None, None);
        assert_eq!(none.external_first_limit(t0, t0), None);
        let short = prim(1, None, Some(Duration::from_millis(300)));
        assert_eq!(
            short.external_first_limit(t0, t0 + Duration::from_millis(100)),
            Some(Duration::from_millis(200))
        );
        // Past the deadline: nothing is left (the reply's timer fires at once).
        assert_eq!(
            short.external_first_limit(t0, t0 + Duration::from_secs(1)),
            Some(Duration::ZERO)
        );
        let long = prim(1, None, Some(Duration::from_secs(60)));
        assert_eq!(
            long.external_first_limit(t0, t0),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn answers_of_an_enqueue_and_of_a_try() {
        let p = prim(1, None, None);
        let grant = Grant {
            token: "abc".into(),
            lease_s: 30,
        };
        assert_eq!(
            p.external_first_answer("acquired abc 30", true).ok(),
            Some(FirstAnswer::Granted(grant.clone()))
        );
        assert_eq!(
            p.external_first_answer("queued", true).ok(),
            Some(FirstAnswer::Queued)
        );
        assert_eq!(
            p.external_first_answer("ok abc 30", false).ok(),
            Some(FirstAnswer::Granted(grant))
        );
        assert_eq!(
            p.external_first_answer("timeout", false).ok(),
            Some(FirstAnswer::TimedOut)
        );
        // Each request's own vocabulary only: a `queued` to a try, an `ok` to an enqueue.
        for (line, enqueue) in [("queued", false), ("ok abc 30", true), ("timeout", true)] {
            let e = p.external_first_answer(line, enqueue).expect_err(line);
            assert_eq!(e.code(), ErrorCode::ProtocolError, "{line}: {e}");
        }
        let e = p
            .external_first_answer("error_max_locks", true)
            .expect_err("refused");
        assert_eq!(e.code(), ErrorCode::ServerError, "{e}");
    }

    #[test]
    fn a_failed_first_request_reconnects_only_on_a_dropped_pooled_connection() {
        let closed = DflockdError::new(ErrorCode::ConnectionError, "closed");
        let refused = DflockdError::new(ErrorCode::ServerError, "error");
        assert_eq!(
            FirstFailed::after(&closed, true, false),
            FirstFailed::Reconnect
        );
        assert_eq!(
            FirstFailed::after(&closed, false, false),
            FirstFailed::Probe
        );
        assert_eq!(FirstFailed::after(&refused, true, false), FirstFailed::Fail);
        assert_eq!(
            FirstFailed::after(&refused, false, false),
            FirstFailed::Fail
        );
        // A grant's confirming renew: nothing is held, nothing is retried.
        assert_eq!(FirstFailed::after(&closed, true, true), FirstFailed::Fail);
        assert_eq!(FirstFailed::after(&closed, false, true), FirstFailed::Fail);
    }

    #[test]
    fn a_failed_acquisition_is_false_on_its_ms_deadline_aborted_when_cancelled_else_its_error() {
        let timeout = || DflockdError::new(ErrorCode::Timeout, "timed out");
        let with_deadline = prim(1, None, Some(Duration::from_millis(300)));
        let op = with_deadline
            .begin_external(with_deadline.ticket())
            .expect("begins");
        assert!(!with_deadline
            .external_failed(op, timeout())
            .expect("not acquired"));
        // Without a ms deadline the server's own timeout answer is `timeout`, not an error:
        // a TIMEOUT error here (a silent server) stays one.
        let plain = prim(1, None, None);
        let op = plain.begin_external(plain.ticket()).expect("begins");
        let e = plain.external_failed(op, timeout()).expect_err("an error");
        assert_eq!(e.code(), ErrorCode::Timeout);
        let op = plain
            .begin_external(plain.ticket())
            .expect("begins again: the first ended");
        plain.cancel();
        let e = aborted_failure(&plain, op);
        assert_eq!(e.code(), ErrorCode::Aborted, "{e}");
    }
}

fn aborted_failure(p: &Primitive, op: sema_core::dflockd::ExternalOp) -> DflockdError {
    p.external_failed(op, DflockdError::new(ErrorCode::Timeout, "timed out"))
        .expect_err("aborted")
}

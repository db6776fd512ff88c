//! Cancellation and misuse of a primitive, on a fake server: cancel() of an acquire in flight
//! (or requested but not yet running) closes without a release; concurrent misuse is refused,
//! not blocked.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::dflockd::*;
use sema_core::dflockd::{EnqueueOutcome, ErrorCode, Primitive, PrimitiveOptions};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[tokio::test]
    async fn cancel_in_flight_acquire_closes_without_release() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await; // the acquire's `e`: never answered
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let mut o = PrimitiveOptions::new("k", fake.connect_options());
        o.acquire_timeout_s = 60;
        let p = Arc::new(Primitive::new(o).expect("opts"));
        let task = {
            let p = p.clone();
            tokio::spawn(async move { p.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        p.cancel();
        let r = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("resolves promptly")
            .expect("join");
        assert_eq!(code(r), ErrorCode::Aborted);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            fake.received_text(),
            "e\nk\n\n",
            "no `r` on a cancelled connection"
        );
        // close() during enqueue/wait too.
        let p2 = Arc::new(
            Primitive::new(PrimitiveOptions::new("k", fake.connect_options())).expect("opts"),
        );
        let task = {
            let p2 = p2.clone();
            tokio::spawn(async move { p2.enqueue().await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        p2.close();
        let r: Result<EnqueueOutcome, _> = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("resolves promptly")
            .expect("join");
        assert_eq!(code(r), ErrorCode::Aborted);
    }

    #[tokio::test]
    async fn cancel_after_the_call_but_before_it_runs_aborts_it() {
        // The binding takes the ticket on the JS thread; the future runs later on tokio.
        let s = scripted(30, |_| Some(("ok 30\n", Duration::ZERO))).await;
        let p = Primitive::new(PrimitiveOptions::new("k", s.fake.connect_options())).expect("opts");
        let early = p.ticket();
        p.cancel();
        assert_eq!(code(p.acquire_with(early).await), ErrorCode::Aborted);
        let early = p.ticket();
        p.close();
        assert_eq!(code(p.enqueue_with(early).await), ErrorCode::Aborted);
        assert_eq!(s.fake.accepted.load(Ordering::SeqCst), 0, "never connected");
        // A cancel() with nothing pending does not affect later calls.
        p.cancel();
        assert!(p.acquire().await.expect("acquire"));
        p.release().await.expect("release");
        // A queued enqueue whose wait is cancelled before it runs is abandoned.
        let q = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                c.write(b"queued\n").await;
            }
            c.wait_eof(Duration::from_secs(10)).await;
        })
        .await;
        let p = Primitive::new(PrimitiveOptions::new("k", q.connect_options())).expect("opts");
        assert_eq!(p.enqueue().await.expect("enqueue"), EnqueueOutcome::Queued);
        let t = p.ticket();
        p.cancel();
        assert_eq!(code(p.wait_with(t, 30).await), ErrorCode::Aborted);
        assert_eq!(
            code(p.wait(0).await),
            ErrorCode::InvalidArgument,
            "enqueue abandoned"
        );
    }

    #[tokio::test]
    async fn concurrent_misuse_is_rejected_not_blocked() {
        let s = scripted(30, |_| Some(("ok 30\n", Duration::ZERO))).await;
        let p = Primitive::new(PrimitiveOptions::new("k", s.fake.connect_options())).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        assert_eq!(code(p.acquire().await), ErrorCode::InvalidArgument);
        assert_eq!(code(p.enqueue().await), ErrorCode::InvalidArgument);
        assert!(p.wait(1).await.expect("wait while held"));
        p.release().await.expect("release");
    }
}

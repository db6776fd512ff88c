//! dflockd client against the REAL server recorded in `.tools/dflockd.json` (Go v1.10.0 when
//! available, otherwise Python dflockd 0.5.0), one server per test on a free loopback port:
//! acquire, release, timeouts, FIFO, lease hand-over and the two-phase enqueue/wait.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::dflockd::*;
use sema_core::dflockd::{AcquireReply, Connection, EnqueueOutcome, EnqueueReply, ErrorCode};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acquire_release_and_reacquire() {
        let server = TestServer::start(&[]);
        let k = key("basic");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(10);
        let a = prim(o.clone());
        assert!(a.acquire().await.expect("acquire"));
        let token = a.token().expect("token while held");
        assert_eq!(token.len(), 32, "token {token:?}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a.lease_s(), 10);
        assert!(
            !try_once(&server, &k).await,
            "held lock must not be granted"
        );
        a.release().await.expect("release");
        assert_eq!(a.token(), None);
        assert_eq!(a.lease_s(), 0);
        let e = a.release().await.expect_err("second release");
        assert_eq!(e.code(), ErrorCode::NotLocked);
        assert!(try_once(&server, &k).await, "released lock is free");
        // The same instance can acquire again.
        assert!(a.acquire().await.expect("re-acquire"));
        assert!(a.token().is_some());
        a.close();
        a.close(); // idempotent
        assert_eq!(a.token(), None);
        // close() drops the connection; the server auto-releases.
        let deadline = Instant::now() + Duration::from_secs(3);
        while !try_once(&server, &k).await {
            assert!(Instant::now() < deadline, "auto-release after close()");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acquire_timeout_returns_false() {
        let server = TestServer::start(&[]);
        let k = key("timeout");
        let a = prim(server.lock_options(&k));
        assert!(a.acquire().await.expect("acquire"));
        let mut ob = server.lock_options(&k);
        ob.acquire_timeout_s = 1;
        let b = prim(ob);
        let t0 = Instant::now();
        assert!(!b.acquire().await.expect("timeout is not an error"));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "{took:?}"
        );
        assert_eq!(b.token(), None);
        // timeout 0 = try once
        let mut oc = server.lock_options(&k);
        oc.acquire_timeout_s = 0;
        assert!(!prim(oc).acquire().await.expect("try once"));
        a.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifo_across_three_clients() {
        let server = TestServer::start(&[]);
        let k = key("fifo");
        let a = Arc::new(prim(server.lock_options(&k)));
        assert!(a.acquire().await.expect("a"));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut prims = Vec::new();
        for name in ["b", "c"] {
            let mut o = server.lock_options(&k);
            o.acquire_timeout_s = 20;
            let p = Arc::new(prim(o));
            prims.push(p.clone());
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let got = p.acquire().await.expect("queued acquire");
                assert!(got);
                order.lock().unwrap_or_else(|e| e.into_inner()).push(name);
                // Hold briefly, then hand over.
                tokio::time::sleep(Duration::from_millis(200)).await;
                p.release().await.expect("release");
            }));
            // Make the queue order deterministic.
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        a.release().await.expect("release a");
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(
            *order.lock().unwrap_or_else(|e| e.into_inner()),
            vec!["b", "c"]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_expiry_hands_over_to_next_waiter() {
        let server = TestServer::start(&[]);
        let k = key("expiry");
        // A raw holder that never renews: lease 1 s.
        let mut holder = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        let AcquireReply::Granted(g) = holder.lock(&k, 0, Some(1)).await.expect("l") else {
            panic!("free key must be granted");
        };
        assert_eq!(g.lease_s, 1);
        let mut o = server.lock_options(&k);
        o.acquire_timeout_s = 10;
        let b = prim(o);
        let t0 = Instant::now();
        assert!(b.acquire().await.expect("b acquire"));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(5),
            "{took:?}"
        );
        // The old token is dead now.
        let e = holder
            .renew(&k, &g.token, Some(1))
            .await
            .expect_err("renew of expired");
        assert_eq!(e.code(), ErrorCode::ServerError);
        b.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn enqueue_fast_path_then_wait() {
        let server = TestServer::start(&[]);
        let k = key("enq-fast");
        let a = prim(server.lock_options(&k));
        assert_eq!(
            a.enqueue().await.expect("enqueue"),
            EnqueueOutcome::Acquired
        );
        assert!(a.token().is_some());
        assert!(a.wait(1).await.expect("wait after acquired"));
        assert!(!try_once(&server, &k).await);
        a.release().await.expect("release");
        assert!(try_once(&server, &k).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn enqueue_queued_then_granted_and_timeout() {
        let server = TestServer::start(&[]);
        let k = key("enq-queued");
        let a = prim(server.lock_options(&k));
        assert!(a.acquire().await.expect("a"));
        let b = prim(server.lock_options(&k));
        assert_eq!(b.enqueue().await.expect("enqueue"), EnqueueOutcome::Queued);
        assert_eq!(b.token(), None);
        // wait timeout → false, connection closed, state reset.
        assert!(!b.wait(1).await.expect("wait timeout"));
        let e = b.wait(1).await.expect_err("wait without enqueue");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        // Enqueue again, then release a: b is granted.
        assert_eq!(
            b.enqueue().await.expect("enqueue 2"),
            EnqueueOutcome::Queued
        );
        let a2 = Arc::new(a);
        let releaser = {
            let a2 = a2.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                a2.release().await.expect("release a");
            })
        };
        assert!(b.wait(5).await.expect("wait granted"));
        releaser.await.expect("releaser");
        assert!(b.token().is_some());
        assert!(!try_once(&server, &k).await);
        b.release().await.expect("release b");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn not_enqueued_and_already_enqueued_per_server_kind() {
        let server = TestServer::start(&[]);
        let go = server.info.is_go();
        let k = key("enq-errors");
        let mut conn = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        let e = conn.wait(&k, 1).await.expect_err("w without e");
        assert_eq!(e.code(), ErrorCode::ServerError);
        assert_eq!(
            e.reply(),
            Some(if go { "error_not_enqueued" } else { "error" })
        );
        // Python keeps the connection after this error; Go too.
        let blocker = prim(server.lock_options(&k));
        assert!(blocker.acquire().await.expect("blocker"));
        assert_eq!(
            conn.enqueue(&k, None).await.expect("e"),
            EnqueueReply::Queued
        );
        let e = conn.enqueue(&k, None).await.expect_err("second e");
        assert_eq!(e.code(), ErrorCode::ServerError);
        assert_eq!(
            e.reply(),
            Some(if go {
                "error_already_enqueued"
            } else {
                "error"
            })
        );
        blocker.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stale_grant_after_wait_is_lock_lost() {
        // The grant happens while we are not yet in `w`, and its 1 s lease expires before `w`:
        // the server still answers `ok <token>`; the client's verifying renew must catch it.
        let server = TestServer::start(&[]);
        let k = key("stale");
        let mut holder = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        let AcquireReply::Granted(_) = holder.lock(&k, 0, Some(1)).await.expect("l") else {
            panic!("free key must be granted");
        };
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(1);
        let b = prim(o);
        let lost = loss_counter(&b, None);
        assert_eq!(b.enqueue().await.expect("enqueue"), EnqueueOutcome::Queued);
        // Holder expires at ~1–2 s, b is granted then, b's 1 s lease expires by ~4 s.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let e = b.wait(5).await.expect_err("stale grant");
        assert_eq!(e.code(), ErrorCode::LockLost, "{e}");
        assert_eq!(b.token(), None);
        assert_eq!(
            lost.load(Ordering::SeqCst),
            0,
            "a stale grant is reported, not 'lost'"
        );
        assert!(try_once(&server, &k).await, "nothing holds the key");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_for_is_cut_at_its_deadline_and_leaves_no_grant() {
        if skip_unless_go(
            "wait_for_is_cut_at_its_deadline_and_leaves_no_grant",
            "stats command (to see the withdrawn waiter)",
        ) {
            return;
        }
        let server = TestServer::start(&[]);
        let k = key("wait-cut");
        let holder = prim(server.lock_options(&k));
        assert!(holder.acquire().await.expect("holder"));
        let waiter = prim(server.lock_options(&k));
        assert_eq!(
            waiter.enqueue().await.expect("enqueue"),
            EnqueueOutcome::Queued
        );
        // 300 ms: the server gets 1 s, the client stops at 300 ms and drops the connection.
        let t = waiter.ticket();
        let r = waiter.wait_for(t, Duration::from_millis(300)).await;
        assert!(!r.expect("a timeout, not an error"), "timed out");
        assert!(!waiter.is_held());
        // The server sees the dropped connection and withdraws its wait (no event to await:
        // polled through stats, bounded).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let json = sema_core::dflockd::stats_json(&server.connect_options())
                .await
                .expect("stats");
            let stats = sema_core::dflockd::parse_stats(&json).expect("parse");
            let waiters = stats
                .locks
                .iter()
                .find(|l| l.key == k)
                .map_or(0, |l| l.waiters);
            if waiters == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "waiter never withdrawn: {json}");
            tokio::task::yield_now().await;
        }
        holder.release().await.expect("release");
        assert!(
            try_once(&server, &k).await,
            "free at once: no grant went to the cut waiter"
        );
        // The primitive works again after the cut.
        assert!(waiter.acquire().await.expect("re-acquire"));
        waiter.release().await.expect("release");
    }
}

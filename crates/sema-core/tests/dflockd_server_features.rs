//! dflockd client against the REAL server: cancellation of a blocked acquire, server limits
//! (max locks, max waiters), protocol errors, semaphores, stats and auth. Go-only features print
//! a `SKIPPED ...` line naming the reason when the server is Python.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::dflockd::*;
use sema_core::dflockd::{AcquireReply, Connection, EnqueueOutcome, ErrorCode};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_blocked_acquire_closes_the_connection() {
        let server = TestServer::start(&[]);
        let k = key("cancel");
        let a = prim(server.lock_options(&k));
        assert!(a.acquire().await.expect("a"));
        let mut ob = server.lock_options(&k);
        ob.acquire_timeout_s = 30;
        let b = Arc::new(prim(ob));
        let task = {
            let b = b.clone();
            tokio::spawn(async move { b.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        b.cancel();
        let r = task.await.expect("task");
        assert_eq!(r.expect_err("cancelled").code(), ErrorCode::Aborted);
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(b.token(), None);
        // a is unaffected and b can try again later.
        a.release().await.expect("release");
        assert!(b.acquire().await.expect("b acquires after cancel"));
        b.release().await.expect("release b");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_locks_is_a_server_error() {
        let server = TestServer::start(&["--max-locks", "2"]);
        let mut held = Vec::new();
        for i in 0..2 {
            let p = prim(server.lock_options(&key(&format!("ml{i}"))));
            assert!(p.acquire().await.expect("acquire"));
            held.push(p);
        }
        let p = prim(server.lock_options(&key("ml-over")));
        let e = p.acquire().await.expect_err("table full");
        assert_eq!(e.code(), ErrorCode::ServerError);
        assert_eq!(e.reply(), Some("error_max_locks"));
        for p in held {
            p.release().await.expect("release");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn python_closes_after_protocol_errors_go_keeps_the_connection() {
        let server = TestServer::start(&[]);
        let mut conn = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        // Well-formed framing, unknown command: bare `error`.
        let r = conn.request_raw("ping", "_", "").await.expect("reply");
        assert_eq!(r, "error");
        let k = key("after-error");
        let next = conn.lock(&k, 0, None).await;
        if server.info.is_go() {
            assert!(matches!(next, Ok(AcquireReply::Granted(_))), "{next:?}");
        } else {
            let e = next.expect_err("python closed the connection");
            assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
            assert!(conn.is_closed());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn semaphore_slots() {
        if skip_unless_go("semaphore_slots", "sl/sr/sn/se/sw") {
            return;
        }
        let server = TestServer::start(&[]);
        let k = key("sem");
        let mut o = server.lock_options(&k);
        o.limit = 2;
        o.acquire_timeout_s = 0;
        let a = prim(o.clone());
        let b = prim(o.clone());
        let c = prim(o.clone());
        assert!(a.acquire().await.expect("a"));
        assert!(b.acquire().await.expect("b"));
        assert!(!c.acquire().await.expect("c full"));
        assert_eq!(
            c.enqueue().await.expect("c enqueue"),
            EnqueueOutcome::Queued
        );
        a.release().await.expect("release a");
        assert!(c.wait(5).await.expect("c granted"));
        // Limit mismatch: a lock on the semaphore key.
        let l = prim(server.lock_options(&k));
        let e = l.acquire().await.expect_err("limit mismatch");
        assert_eq!(e.reply(), Some("error_limit_mismatch"));
        assert_eq!(e.code(), ErrorCode::LimitMismatch);
        b.release().await.expect("b");
        c.release().await.expect("c");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stats_reflect_a_held_lock() {
        if skip_unless_go("stats_reflect_a_held_lock", "stats command") {
            return;
        }
        let server = TestServer::start(&[]);
        let k = key("stats");
        let a = prim(server.lock_options(&k));
        assert!(a.acquire().await.expect("a"));
        let json = sema_core::dflockd::stats_json(&server.connect_options())
            .await
            .expect("stats");
        let stats = sema_core::dflockd::parse_stats(&json).expect("parse");
        assert!(stats.connections >= 1);
        assert!(stats.locks.iter().any(|l| l.key == k), "{json}");
        a.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auth_token() {
        if skip_unless_go("auth_token", "--auth-token") {
            return;
        }
        let server = TestServer::start(&["--auth-token", "s3cret"]);
        let k = key("auth");
        let mut o = server.lock_options(&k);
        o.connect.auth = Some("s3cret".into());
        let a = prim(o.clone());
        assert!(a.acquire().await.expect("authenticated acquire"));
        a.release().await.expect("release");
        o.connect.auth = Some("wrong".into());
        let e = prim(o.clone()).acquire().await.expect_err("wrong token");
        assert_eq!(e.code(), ErrorCode::AuthFailed);
        o.connect.auth = None;
        let e = prim(o).acquire().await.expect_err("no token");
        assert_eq!(e.code(), ErrorCode::AuthFailed, "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_waiters() {
        if skip_unless_go("max_waiters", "--max-waiters") {
            return;
        }
        let server = TestServer::start(&["--max-waiters", "1"]);
        let k = key("mw");
        let a = prim(server.lock_options(&k));
        assert!(a.acquire().await.expect("a"));
        let b = prim(server.lock_options(&k));
        assert_eq!(b.enqueue().await.expect("b"), EnqueueOutcome::Queued);
        let c = prim(server.lock_options(&k));
        let e = c.enqueue().await.expect_err("c over max waiters");
        assert_eq!(e.reply(), Some("error_max_waiters"));
        b.close();
        a.release().await.expect("release");
    }
}

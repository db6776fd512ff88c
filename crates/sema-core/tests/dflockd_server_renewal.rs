//! dflockd client against the REAL server: renewal below the lease and the server's read
//! timeout, and losses (idle drop, server killed) reported at once and exactly once, never for a
//! release or close.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::dflockd::*;
use sema_core::dflockd::{AcquireReply, Connection, ErrorCode};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renewal_keeps_a_two_second_lease_for_six_seconds() {
        let server = TestServer::start(&[]);
        let k = key("renew");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(2);
        let a = prim(o);
        let lost = loss_counter(&a, None);
        assert!(a.acquire().await.expect("acquire"));
        let token = a.token().expect("token");
        let t0 = Instant::now();
        let mut tries = 0;
        while t0.elapsed() < Duration::from_millis(6500) {
            assert!(
                !try_once(&server, &k).await,
                "lost after {:?}",
                t0.elapsed()
            );
            tries += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(tries >= 10);
        assert_eq!(a.token().as_deref(), Some(token.as_str()));
        assert!(a.lease_s() >= 1, "lease {}", a.lease_s());
        assert_eq!(lost.load(Ordering::SeqCst), 0);
        a.release().await.expect("release");
        assert!(try_once(&server, &k).await);
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renewal_stays_below_the_server_read_timeout() {
        // Server drops connections idle for 3 s. A 60 s lease would first be renewed after 30 s;
        // the renew cap (1.5 s here, 15 s by default for the 23 s default) keeps it alive.
        let server = TestServer::start(&["--read-timeout", "3"]);
        let k = key("idle");
        let (a, mut lost) = held_lock(&server, &k, Duration::from_millis(1500)).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Prove it is still held: another client's `l key 0` times out.
        let mut other = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        assert_eq!(
            other.lock(&k, 0, None).await.expect("l"),
            AcquireReply::TimedOut
        );
        assert!(a.token().is_some());
        assert_no_loss(&mut lost, Duration::ZERO).await;
        a.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_cap_the_idle_server_drops_the_lock() {
        // Control for the test above: a renew interval above the read timeout loses the lock.
        let server = TestServer::start(&["--read-timeout", "2"]);
        let k = key("idle-ctl");
        let (a, _lost) = held_lock(&server, &k, Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            try_once(&server, &k).await,
            "the server auto-released the idle connection's lock"
        );
        a.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_drop_by_the_server_read_timeout_is_reported_at_once() {
        // The server closes a connection idle for 2 s (after writing `error\n`) and hands the
        // lock to the next waiter. With a 60 s lease and a 60 s renew cap no renew happens for
        // 30 s: the loss must come from watching the idle connection, not from a renew.
        let server = TestServer::start(&["--read-timeout", "2"]);
        let k = key("idle-drop");
        let (a, mut lost) = held_lock(&server, &k, Duration::from_secs(60)).await;
        let token = a.token().expect("token");
        let t0 = Instant::now();
        // A waiter queued behind us gets the lock the moment the server drops our connection.
        let mut ob = server.lock_options(&k);
        ob.acquire_timeout_s = 20;
        let b = Arc::new(prim(ob));
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let got = b.acquire().await;
                (got, Instant::now())
            })
        };
        let (lk, lt, at) = next_loss(&mut lost, Duration::from_secs(8))
            .await
            .unwrap_or_else(|| {
                panic!(
                    "no loss reported {:?} after acquire (server drops at ~2 s)",
                    t0.elapsed()
                )
            });
        let latency = at.duration_since(t0);
        eprintln!("dflockd idle-drop loss reported {latency:?} after acquire (read timeout 2 s)");
        assert_eq!((lk.as_str(), lt.as_str()), (k.as_str(), token.as_str()));
        assert!(
            latency >= Duration::from_millis(1500) && latency < Duration::from_secs(5),
            "{latency:?}"
        );
        assert_eq!(a.token(), None);
        let (got, granted_at) = waiter.await.expect("waiter");
        assert!(got.expect("waiter acquire"), "the waiter gets the lock");
        // Never both: the loss is reported no later than (about) the hand-over.
        assert!(
            at <= granted_at + Duration::from_millis(500),
            "loss {:?} vs grant {:?}",
            at.duration_since(t0),
            granted_at.duration_since(t0)
        );
        let e = a.release().await.expect_err("release after loss");
        assert_eq!(e.code(), ErrorCode::LockLost, "{e}");
        assert!(e.message().contains("server"), "reason in {e}");
        assert_no_loss(&mut lost, Duration::from_millis(300)).await;
        b.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_killed_with_a_long_renew_interval_is_reported_at_once() {
        let mut server = TestServer::start(&[]);
        let k = key("killed-idle");
        let (a, mut lost) = held_lock(&server, &k, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        server.kill();
        let (_, _, at) = next_loss(&mut lost, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no loss {:?} after SIGKILL", t0.elapsed()));
        let latency = at.duration_since(t0);
        eprintln!("dflockd kill loss reported {latency:?} after SIGKILL");
        assert!(latency < Duration::from_secs(2), "{latency:?}");
        assert_eq!(a.token(), None);
        assert_no_loss(&mut lost, Duration::from_millis(300)).await;
        assert_eq!(
            a.release().await.expect_err("after loss").code(),
            ErrorCode::LockLost
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn release_and_close_never_fire_the_loss_callback() {
        // Renewals (every 500 ms) keep a connection alive against a 2 s read timeout while the
        // idle watcher runs between them; a release and a close are not losses.
        let server = TestServer::start(&["--read-timeout", "2"]);
        let k = key("no-loss");
        let (a, mut lost) = held_lock(&server, &k, Duration::from_millis(500)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(a.token().is_some(), "renewals and the watcher coexist");
        assert!(!try_once(&server, &k).await);
        a.release().await.expect("release");
        assert!(try_once(&server, &k).await);
        // Idle (long renew interval), then released: still no loss.
        let (c, mut lost_c) = held_lock(&server, &k, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.release().await.expect("release");
        // Held, then closed: the watcher stops without firing, even when the server later
        // notices the closed connection.
        assert!(a.acquire().await.expect("re-acquire"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.close();
        assert!(c.acquire().await.expect("acquire after close"));
        c.close();
        assert_no_loss(&mut lost, Duration::from_secs(3)).await;
        assert_no_loss(&mut lost_c, Duration::from_millis(100)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_killed_fires_loss_once_and_restart_works() {
        let mut server = TestServer::start(&[]);
        let k = key("killed");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(2);
        let a = prim(o);
        let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        {
            let seen = seen.clone();
            a.set_on_lost(Some(Arc::new(move |k: &str, t: &str, _reason: &str| {
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((k.to_string(), t.to_string()));
            })));
        }
        assert!(a.acquire().await.expect("acquire"));
        let token = a.token().expect("token");
        server.kill();
        let deadline = Instant::now() + Duration::from_secs(6);
        while seen.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            assert!(Instant::now() < deadline, "loss not reported");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            *seen.lock().unwrap_or_else(|e| e.into_inner()),
            vec![(k.clone(), token)],
            "loss fired exactly once with (key, token)"
        );
        assert_eq!(a.token(), None);
        assert_eq!(a.lease_s(), 0);
        let e = a.release().await.expect_err("release after loss");
        assert_eq!(e.code(), ErrorCode::LockLost);
        // While the server is down, acquire fails cleanly.
        let e = a.acquire().await.expect_err("server down");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        server.restart();
        assert!(a.acquire().await.expect("acquire after restart"));
        assert!(a.token().is_some());
        a.release().await.expect("release");
        assert_eq!(seen.lock().unwrap_or_else(|e| e.into_inner()).len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_rides_out_a_server_restart_and_the_holder_is_told_at_once() {
        let mut server = TestServer::start(&[]);
        let k = key("restart-waiter");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(10);
        let holder = prim(o.clone());
        let mut rx = loss_channel(&holder);
        assert!(holder.acquire().await.expect("holder"));
        o.acquire_timeout_s = 8;
        let waiter = Arc::new(prim(o));
        let w = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.acquire().await })
        };
        // Queued on the server before the kill.
        loop {
            let mut c = Connection::connect(&server.connect_options())
                .await
                .expect("stats connection");
            let st = c.stats().await.expect("stats");
            if st.locks.iter().any(|l| l.key == k && l.waiters == 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.kill();
        assert!(
            next_loss(&mut rx, Duration::from_secs(2)).await.is_some(),
            "the holder is told at once"
        );
        assert_eq!(holder.token(), None);
        server.restart();
        let got = w
            .await
            .expect("join")
            .expect("the waiter re-enqueued on the restarted server");
        assert!(got, "served by the restarted server, not timed out");
        assert!(waiter.token().is_some());
        waiter.release().await.expect("release");
    }
}

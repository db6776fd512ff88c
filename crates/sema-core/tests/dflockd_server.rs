//! dflockd client against the REAL server recorded in `.tools/dflockd.json` (Go v1.10.0 when
//! available, otherwise Python dflockd 0.5.0). One server per test on a free loopback port.
//! Go-only features print a `SKIPPED ...` line naming the reason when the server is Python.

mod dflockd_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dflockd_support::{key, loss_channel, next_loss, skip_unless_go, TestServer};
use sema_core::dflockd::{
    AcquireReply, Connection, EnqueueOutcome, EnqueueReply, ErrorCode, Primitive, PrimitiveOptions,
};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    fn prim(opts: PrimitiveOptions) -> Primitive {
        Primitive::new(opts).expect("valid options")
    }

    /// A one-shot `l key 0` from a fresh connection: true when granted (then released).
    async fn try_once(server: &TestServer, k: &str) -> bool {
        let mut conn = Connection::connect(&server.connect_options())
            .await
            .expect("connect");
        match conn.lock(k, 0, None).await.expect("l reply") {
            AcquireReply::Granted(g) => {
                conn.release(k, &g.token).await.expect("release");
                true
            }
            AcquireReply::TimedOut => false,
        }
    }

    fn loss_counter(p: &Primitive) -> Arc<AtomicUsize> {
        let n = Arc::new(AtomicUsize::new(0));
        let c = n.clone();
        p.set_on_lost(Some(Arc::new(move |_k: &str, _t: &str, _reason: &str| {
            c.fetch_add(1, Ordering::SeqCst);
        })));
        n
    }

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
        let lost = loss_counter(&b);
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
    async fn renewal_keeps_a_two_second_lease_for_six_seconds() {
        let server = TestServer::start(&[]);
        let k = key("renew");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(2);
        let a = prim(o);
        let lost = loss_counter(&a);
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
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_millis(1500);
        let a = prim(o);
        let lost = loss_counter(&a);
        assert!(a.acquire().await.expect("acquire"));
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
        assert_eq!(lost.load(Ordering::SeqCst), 0);
        a.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_cap_the_idle_server_drops_the_lock() {
        // Control for the test above: a renew interval above the read timeout loses the lock.
        let server = TestServer::start(&["--read-timeout", "2"]);
        let k = key("idle-ctl");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_secs(30);
        let a = prim(o);
        assert!(a.acquire().await.expect("acquire"));
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
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_secs(60);
        let a = prim(o);
        let mut lost = loss_channel(&a);
        assert!(a.acquire().await.expect("acquire"));
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
        assert!(next_loss(&mut lost, Duration::from_millis(300))
            .await
            .is_none());
        b.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_killed_with_a_long_renew_interval_is_reported_at_once() {
        let mut server = TestServer::start(&[]);
        let k = key("killed-idle");
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_secs(60);
        let a = prim(o);
        let mut lost = loss_channel(&a);
        assert!(a.acquire().await.expect("acquire"));
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
        assert!(next_loss(&mut lost, Duration::from_millis(300))
            .await
            .is_none());
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
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_millis(500);
        let a = prim(o);
        let mut lost = loss_channel(&a);
        assert!(a.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(a.token().is_some(), "renewals and the watcher coexist");
        assert!(!try_once(&server, &k).await);
        a.release().await.expect("release");
        assert!(try_once(&server, &k).await);
        // Idle (long renew interval), then released: still no loss.
        let mut o = server.lock_options(&k);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_secs(60);
        let c = prim(o);
        let mut lost_c = loss_channel(&c);
        assert!(c.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.release().await.expect("release");
        // Held, then closed: the watcher stops without firing, even when the server later
        // notices the closed connection.
        assert!(a.acquire().await.expect("re-acquire"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.close();
        assert!(c.acquire().await.expect("acquire after close"));
        c.close();
        assert!(next_loss(&mut lost, Duration::from_secs(3)).await.is_none());
        assert!(next_loss(&mut lost_c, Duration::from_millis(100))
            .await
            .is_none());
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

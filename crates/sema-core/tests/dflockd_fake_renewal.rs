//! Renewal and loss of a held lock, on a scripted fake server: the TTL resent, the cap between
//! renewals, a rejected or silent renew, release during a renew, close, and the idle watch
//! turning an unsolicited line or a hang-up into a loss at once.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::dflockd::*;
use sema_core::dflockd::{EnqueueOutcome, ErrorCode, Primitive, PrimitiveOptions};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[tokio::test]
    async fn renewal_resends_the_same_ttl_and_respects_the_cap() {
        // Python-like renew replies (TTL-1) must not change the TTL the client sends.
        let s = scripted(1, |_| Some(("ok 0\n", Duration::ZERO))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(1700)).await;
        p.release().await.expect("release");
        let reqs = s.requests();
        let renews: Vec<_> = reqs.iter().filter(|r| r[0] == "n").collect();
        assert!(renews.len() >= 2, "renews every ~500 ms: {reqs:?}");
        assert!(
            renews.iter().all(|r| r[2] == format!("{TOKEN} 1")),
            "{renews:?}"
        );
        assert_eq!(reqs.last().map(|r| r[0].as_str()), Some("r"));
        // Without a TTL, renews omit it (server default both times).
        let s = scripted(2, |_| Some(("ok 2\n", Duration::ZERO))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.renew_max_interval = Duration::from_millis(200);
        let p = Primitive::new(o).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        assert_eq!(s.requests()[0][2], "", "an acquire enqueues first: no TTL");
        tokio::time::sleep(Duration::from_millis(900)).await;
        p.release().await.expect("release");
        let renews: Vec<_> = s.requests().into_iter().filter(|r| r[0] == "n").collect();
        assert!(
            renews.len() >= 3,
            "cap 200 ms beats lease×ratio 1 s: {renews:?}"
        );
        assert!(renews.iter().all(|r| r[2] == TOKEN));
    }

    #[tokio::test]
    async fn rejected_renew_fires_loss_once_and_closes() {
        let s = scripted(1, |i| {
            Some((if i == 0 { "ok 1\n" } else { "error\n" }, Duration::ZERO))
        })
        .await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(1800)).await;
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert_eq!(p.token(), None);
        let n = s.count("n");
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(s.count("n"), n, "no renew after loss");
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert_eq!(code(p.release().await), ErrorCode::LockLost);
        assert_eq!(s.count("r"), 0, "nothing sent after loss");
    }

    #[tokio::test]
    async fn silent_renew_is_a_loss_before_the_lease_ends() {
        let s = scripted(1, |_| Some(("ok 1\n", Duration::from_secs(30)))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options()); // socket timeout 500 ms
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        let t0 = Instant::now();
        while lost.load(Ordering::SeqCst) == 0 {
            // The acquire was sent before t0: the server could end its 1 s lease at t0 + 1 s
            // at the earliest, and the client must have declared the loss by then.
            assert!(
                t0.elapsed() < Duration::from_secs(1),
                "loss declared before the server's earliest expiry"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(p.token(), None);
    }

    #[tokio::test]
    async fn release_waits_for_an_in_flight_renew() {
        let s = scripted(3, |_| Some(("ok 3\n", Duration::from_millis(800)))).await;
        let mut opts = s.fake.connect_options();
        opts.socket_timeout = Duration::from_secs(3);
        let mut o = PrimitiveOptions::new("k", opts);
        o.lease_ttl_s = Some(3);
        let p = Primitive::new(o).expect("opts");
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        // The first renew starts at ~1500 ms and is answered at ~2300 ms, inside the lease's
        // validity (3 s − 0.3 s guard).
        tokio::time::sleep(Duration::from_millis(1700)).await;
        let t0 = Instant::now();
        p.release().await.expect("release after the renew");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(400),
            "waited for the renew: {took:?}"
        );
        let cmds: Vec<String> = s.requests().into_iter().map(|r| r[0].clone()).collect();
        assert_eq!(cmds, vec!["e", "n", "r"], "serialized on the connection");
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn close_stops_renewal_and_sends_nothing() {
        let s = scripted(1, |_| Some(("ok 1\n", Duration::ZERO))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(600)).await;
        p.close();
        let n = s.count("n");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(s.count("n"), n, "no renew after close");
        assert_eq!(s.count("r"), 0, "close sends no release");
        assert_eq!(lost.load(Ordering::SeqCst), 0, "close is not a loss");
        assert_eq!(code(p.release().await), ErrorCode::NotLocked);
        // A re-acquire works and starts a fresh renewer.
        assert!(p.acquire().await.expect("re-acquire"));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(s.count("n") > n);
        p.release().await.expect("release");
    }

    /// A fake that grants `l`/`e` with a 60 s lease, then after 300 ms does `then` on the
    /// idle held connection.
    async fn grant_then(then: &'static [u8], hang_up: bool) -> Fake {
        Fake::start(move |mut c: FakeConn| async move {
            match c.read_request().await {
                Some([cmd, _, _]) if cmd == "e" => {
                    c.write(format!("acquired {TOKEN} 60\n").as_bytes()).await
                }
                Some(_) => c.write(format!("ok {TOKEN} 60\n").as_bytes()).await,
                None => return,
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.write(then).await;
            if !hang_up {
                c.wait_eof(Duration::from_secs(30)).await;
            }
        })
        .await
    }

    #[tokio::test]
    async fn unsolicited_line_or_hang_up_on_a_held_connection_is_loss() {
        // Nothing is legitimate on an idle dflockd connection: an unsolicited `error` (what a
        // server writes before closing an idle connection) or a hang-up means the server has
        // dropped us and released the lock. No renew is due for 30 s (60 s lease, 60 s cap).
        for (then, hang_up, reason, two_phase) in [
            (&b"error\n"[..], false, "unsolicited reply: error", false),
            (b"error\n", true, "unsolicited reply: error", false),
            (b"", true, "closed the connection", false),
            (b"ok 12\r\n", false, "unsolicited reply: ok 12", false),
            (b"error\n", false, "unsolicited reply: error", true),
        ] {
            let fake = grant_then(then, hang_up).await;
            let mut o = PrimitiveOptions::new("k", fake.connect_options());
            o.lease_ttl_s = Some(60);
            o.renew_max_interval = Duration::from_secs(60);
            let p = Primitive::new(o).expect("opts");
            let mut lost = loss_channel(&p);
            let t0 = Instant::now();
            if two_phase {
                assert_eq!(p.enqueue().await.expect("e"), EnqueueOutcome::Acquired);
            } else {
                assert!(p.acquire().await.expect("acquire"));
            }
            let (k, t, at) = next_loss(&mut lost, Duration::from_secs(3))
                .await
                .unwrap_or_else(|| {
                    panic!(
                        "{:?} hang_up={hang_up}: no loss",
                        String::from_utf8_lossy(then)
                    )
                });
            assert_eq!((k.as_str(), t.as_str()), ("k", TOKEN));
            let latency = at.duration_since(t0);
            assert!(
                latency < Duration::from_millis(1500),
                "{then:?}: {latency:?}"
            );
            assert_eq!(p.token(), None);
            assert!(!p.is_held());
            let e = p.release().await.expect_err("release after loss");
            assert_eq!(e.code(), ErrorCode::LockLost);
            assert!(e.message().contains(reason), "{then:?}: {e}");
            assert!(
                next_loss(&mut lost, Duration::from_millis(200))
                    .await
                    .is_none(),
                "fired once"
            );
            // A blocking acquire enqueues first, as enqueue() does.
            let want = "e\nk\n60\n";
            assert_eq!(fake.received_text(), want, "nothing sent after the grant");
        }
    }

    #[tokio::test]
    async fn idle_watch_keeps_renew_replies_and_release_intact() {
        // Renew replies split across writes and CRLF endings are still read by the renew itself,
        // never taken for unsolicited lines; a release while idle is not a loss.
        let fake = Fake::start(|mut c: FakeConn| async move {
            while let Some([cmd, _, _]) = c.read_request().await {
                match cmd.as_str() {
                    "e" => c.write(format!("acquired {TOKEN} 1\n").as_bytes()).await,
                    "n" => {
                        c.write(b"o").await;
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        c.write(b"k 1\r\n").await;
                    }
                    "r" => c.write(b"ok\n").await,
                    _ => c.write(b"error\n").await,
                }
            }
        })
        .await;
        let mut o = PrimitiveOptions::new("k", fake.connect_options());
        o.lease_ttl_s = Some(1);
        o.renew_max_interval = Duration::from_millis(150);
        let p = Primitive::new(o).expect("opts");
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(p.is_held());
        p.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(lost.load(Ordering::SeqCst), 0);
        let n = fake
            .received_text()
            .matches(&format!("n\nk\n{TOKEN} 1\n"))
            .count();
        assert!(n >= 4, "renewed every ~150 ms: {n}");
        assert!(fake.received_text().ends_with(&format!("r\nk\n{TOKEN}\n")));
    }

    #[tokio::test]
    async fn renews_are_never_further_apart_than_the_cap() {
        // Each renew answered after 150 ms, cap 400 ms, lease 60 s: renews start at most 400 ms
        // after the previous one started (the cap is not stretched by the round trip).
        let starts = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let st = starts.clone();
        let fake = Fake::start(move |mut c: FakeConn| {
            let st = st.clone();
            async move {
                while let Some([cmd, _, _]) = c.read_request().await {
                    match cmd.as_str() {
                        "e" => c.write(format!("acquired {TOKEN} 60\n").as_bytes()).await,
                        "n" => {
                            st.lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(Instant::now());
                            tokio::time::sleep(Duration::from_millis(150)).await;
                            c.write(b"ok 60\n").await;
                        }
                        "r" => c.write(b"ok\n").await,
                        _ => c.write(b"error\n").await,
                    }
                }
            }
        })
        .await;
        let mut opts = fake.connect_options();
        opts.socket_timeout = Duration::from_secs(2);
        let mut o = PrimitiveOptions::new("k", opts);
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_millis(400);
        let p = Primitive::new(o).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        tokio::time::sleep(Duration::from_millis(2100)).await;
        p.release().await.expect("release");
        let starts = starts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(starts.len() >= 4, "{} renews", starts.len());
        for w in starts.windows(2) {
            let gap = w[1].duration_since(w[0]);
            assert!(
                gap <= Duration::from_millis(480),
                "renews {gap:?} apart, cap 400 ms"
            );
        }
    }

    #[tokio::test]
    async fn the_lease_clock_starts_at_the_send_and_is_exposed() {
        let s = scripted(2, |_| Some(("ok 2\n", Duration::ZERO))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.lease_ttl_s = Some(2);
        let p = Primitive::new(o).expect("opts");
        assert_eq!(p.valid_for(), Duration::ZERO, "nothing held");
        assert_eq!(p.valid_until_unix_ms(), None);
        let before = Instant::now();
        assert!(p.acquire().await.expect("acquire"));
        // Proven until send + 2 s − 250 ms guard, the send being after `before`.
        let v = p.valid_for();
        let since = before.elapsed();
        assert!(
            v <= Duration::from_millis(1750) && v >= Duration::from_millis(1750) - since,
            "{v:?} ({since:?} since before the acquire)"
        );
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i128;
        let until = p.valid_until_unix_ms().expect("held") as i128;
        assert!(
            (until - now_ms - v.as_millis() as i128).abs() < 50,
            "{until} vs now {now_ms} + {v:?}"
        );
        p.release().await.expect("release");
        assert_eq!(p.valid_for(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_grant_after_a_long_wait_is_confirmed_by_a_renew_before_it_is_reported() {
        // The grant comes 1.5 s after the `e` was sent (queued, then `w`): by the client's clock (started at the
        // send) a 2 s lease is already due for renewal, so it renews before returning and counts
        // the lease from that renew.
        let fake = Fake::start(|mut c: FakeConn| async move {
            while let Some(req) = c.read_request().await {
                match req[0].as_str() {
                    "e" => c.write(b"queued\n").await,
                    "w" => {
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        c.write(format!("ok {TOKEN} 2\n").as_bytes()).await;
                    }
                    "n" => c.write(b"ok 2\n").await,
                    "r" => c.write(b"ok\n").await,
                    _ => c.write(b"error\n").await,
                }
            }
        })
        .await;
        let mut o = PrimitiveOptions::new("k", fake.connect_options());
        o.lease_ttl_s = Some(2);
        let p = Primitive::new(o).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        assert!(
            fake.received_text()
                .starts_with(&format!("e\nk\n2\nw\nk\n10\nn\nk\n{TOKEN} 2\n")),
            "{:?}",
            fake.received_text()
        );
        assert!(
            p.valid_for() > Duration::from_millis(1000),
            "counted from the renew: {:?}",
            p.valid_for()
        );
        p.release().await.expect("release");
    }
}

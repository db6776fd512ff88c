//! dflockd client against a small fake server: behaviour the real servers never produce
//! (garbage, overlong or endless lines, silence, close mid-reply, near-miss replies), plus
//! checks of exactly what the client writes. Every case must end with the right error code
//! within the configured bounds: nothing may hang.

mod dflockd_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dflockd_support::{Fake, FakeConn};
use sema_core::dflockd::{
    pool, AcquireReply, ConnectOptions, Connection, DflockdError, EnqueueOutcome, ErrorCode,
    Primitive, PrimitiveOptions, Request,
};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// A fake answering the first request with `reply` (raw bytes) and then idling.
    async fn replying(reply: &'static [u8]) -> Fake {
        Fake::start(move |mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                c.write(reply).await;
            }
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await
    }

    async fn lock_once(opts: &ConnectOptions) -> Result<AcquireReply, DflockdError> {
        let mut conn = Connection::connect(opts).await?;
        conn.lock("k", 5, None).await
    }

    fn code(r: Result<impl std::fmt::Debug, DflockdError>) -> ErrorCode {
        r.expect_err("must fail").code()
    }

    #[tokio::test]
    async fn garbage_reply_is_protocol_error() {
        let fake = replying(b"hello world\n").await;
        let t0 = Instant::now();
        let e = lock_once(&fake.connect_options())
            .await
            .expect_err("garbage");
        assert_eq!(e.code(), ErrorCode::ProtocolError, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn near_miss_replies_are_rejected() {
        // `okay` is not `ok`; `ok` needs a token and a lease; `acquired` needs a token.
        for reply in [
            &b"okay abc 30\n"[..],
            b"ok\n",
            b"ok \n",
            b"ok 0123456789abcdef0123456789abcdef\n",
            b"ok 0123456789abcdef0123456789abcdef soon\n",
            b"OK 0123456789abcdef0123456789abcdef 30\n",
            b"\n",
        ] {
            let fake = replying(reply).await;
            let e = lock_once(&fake.connect_options())
                .await
                .expect_err("near miss");
            assert_eq!(e.code(), ErrorCode::ProtocolError, "{reply:?}: {e}");
        }
        let fake = replying(b"acquired\n").await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        assert_eq!(
            code(conn.enqueue("k", None).await),
            ErrorCode::ProtocolError
        );
        // Release needs exactly `ok`.
        let fake = replying(b"okay\n").await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        assert_eq!(
            code(conn.release("k", TOKEN).await),
            ErrorCode::ProtocolError
        );
        assert!(conn.is_closed(), "a protocol error closes the connection");
        // Renew: `ok <n>` or bare `ok`; `okay` is not accepted.
        let fake = replying(b"okay 5\n").await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        assert_eq!(
            code(conn.renew("k", TOKEN, None).await),
            ErrorCode::ProtocolError
        );
    }

    #[tokio::test]
    async fn server_errors_keep_the_reply_word() {
        for word in [
            "error",
            "error_max_locks",
            "error_max_waiters",
            "error_limit_mismatch",
            "error_lease_expired",
            "error_something_new",
        ] {
            let line: &'static [u8] =
                Box::leak(format!("{word}\n").into_bytes().into_boxed_slice());
            let fake = replying(line).await;
            let e = lock_once(&fake.connect_options())
                .await
                .expect_err("server error");
            assert_eq!(e.code(), ErrorCode::ServerError, "{word}");
            assert_eq!(e.reply(), Some(word));
        }
    }

    #[tokio::test]
    async fn crlf_and_split_utf8_and_pipelined_lines() {
        // CRLF accepted; a reply split mid-UTF-8 character across writes arrives intact; two
        // replies in one write are both delivered (leftover bytes are kept).
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
            c.write(b"ok 0123456789abcdef0123456789abcdef 7\r\n").await;
            let _ = c.read_request().await;
            let bytes = "ключ✓ ok\n".as_bytes();
            c.write(&bytes[..3]).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.write(&bytes[3..]).await;
            let _ = c.read_request().await;
            c.write(b"first\nsecond\n").await;
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(5)).await;
        })
        .await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        match conn.lock("k", 1, None).await.expect("crlf") {
            AcquireReply::Granted(g) => assert_eq!(g.lease_s, 7),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            conn.request_raw("x", "_", "").await.expect("utf8"),
            "ключ✓ ok"
        );
        assert_eq!(
            conn.request_raw("x", "_", "").await.expect("first"),
            "first"
        );
        assert_eq!(
            conn.request_raw("x", "_", "").await.expect("second"),
            "second"
        );
    }

    #[tokio::test]
    async fn invalid_utf8_is_protocol_error() {
        let fake = replying(b"ok \xff\xfe 5\n").await;
        assert_eq!(
            code(lock_once(&fake.connect_options()).await),
            ErrorCode::ProtocolError
        );
    }

    #[tokio::test]
    async fn overlong_line_is_protocol_error() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                let big = vec![b'a'; 2 * 1024 * 1024];
                c.write(&big).await;
                c.write(b"\n").await;
            }
            c.wait_eof(Duration::from_secs(10)).await;
        })
        .await;
        let mut opts = fake.connect_options();
        opts.socket_timeout = Duration::from_secs(5);
        let mut conn = Connection::connect(&opts).await.expect("connect");
        let t0 = Instant::now();
        let e = conn.stats_json().await.expect_err("overlong");
        assert_eq!(e.code(), ErrorCode::ProtocolError, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert!(conn.is_closed());
    }

    #[tokio::test]
    async fn endless_line_without_newline_is_bounded() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                let chunk = vec![b'z'; 64 * 1024];
                // At most 64 MiB, stops as soon as the client hangs up.
                for _ in 0..1024 {
                    if tokio::time::timeout(Duration::from_secs(2), c.write(&chunk))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        })
        .await;
        let mut opts = fake.connect_options();
        opts.socket_timeout = Duration::from_secs(10);
        let mut conn = Connection::connect(&opts).await.expect("connect");
        let t0 = Instant::now();
        let e = conn.stats_json().await.expect_err("endless");
        assert_eq!(e.code(), ErrorCode::ProtocolError, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[tokio::test]
    async fn silence_is_bounded_by_the_socket_timeout() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let opts = fake.connect_options(); // socket timeout 500 ms
        for which in 0..3 {
            let mut conn = Connection::connect(&opts).await.expect("connect");
            let t0 = Instant::now();
            let e = match which {
                0 => conn.release("k", TOKEN).await.map(|_| ()),
                1 => conn.renew("k", TOKEN, Some(5)).await.map(|_| ()),
                _ => conn.enqueue("k", None).await.map(|_| ()),
            }
            .expect_err("silence");
            let took = t0.elapsed();
            assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
            assert!(
                took >= Duration::from_millis(450) && took < Duration::from_secs(2),
                "{took:?}"
            );
            assert!(conn.is_closed(), "a timed-out connection is out of sync");
        }
    }

    #[tokio::test]
    async fn blocking_commands_wait_their_own_timeout_plus_margin() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let opts = fake.connect_options(); // socket timeout 500 ms must NOT apply to `l`
        let mut conn = Connection::connect(&opts).await.expect("connect");
        let t0 = Instant::now();
        let e = conn.lock("k", 1, None).await.expect_err("silent server");
        let took = t0.elapsed();
        assert_eq!(e.code(), ErrorCode::Timeout);
        assert!(
            took >= Duration::from_millis(5900) && took < Duration::from_secs(8),
            "1 s timeout + 5 s margin, took {took:?}"
        );
    }

    #[tokio::test]
    async fn close_mid_reply_and_eof_are_connection_errors() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                c.write(b"ok 0123456789abcdef").await;
            }
        })
        .await;
        let e = lock_once(&fake.connect_options())
            .await
            .expect_err("mid-reply");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
        })
        .await;
        let e = lock_once(&fake.connect_options()).await.expect_err("eof");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        // Connection refused.
        let port = dflockd_support::free_port();
        let e = lock_once(&ConnectOptions::new("127.0.0.1", port))
            .await
            .expect_err("refused");
        assert_eq!(e.code(), ErrorCode::ConnectionError);
    }

    #[tokio::test]
    async fn auth_replies() {
        let fake = replying(b"ok\n").await;
        let mut opts = fake.connect_options();
        opts.auth = Some("s3 cret".into());
        Connection::connect(&opts).await.expect("auth ok");
        assert!(fake.received_text().starts_with("auth\n_\ns3 cret\n"));
        for reply in [&b"error_auth\n"[..], b"error\n", b"okay\n"] {
            let fake = replying(reply).await;
            let mut opts = fake.connect_options();
            opts.auth = Some("tok".into());
            let e = Connection::connect(&opts).await.expect_err("auth rejected");
            assert_eq!(e.code(), ErrorCode::AuthFailed, "{reply:?}");
            assert!(e.reply().is_some());
        }
    }

    #[tokio::test]
    async fn tls_handshake_is_bounded_by_the_connect_timeout() {
        // A TCP listener that never answers the ClientHello.
        let fake = Fake::start(|mut c: FakeConn| async move {
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let mut opts = fake.connect_options();
        opts.connect_timeout = Duration::from_millis(400);
        opts.tls = Some(Default::default());
        let t0 = Instant::now();
        let e = Connection::connect(&opts)
            .await
            .expect_err("handshake hangs");
        assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn invalid_arguments_write_nothing() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let opts = fake.connect_options();
        let mut conn = Connection::connect(&opts).await.expect("connect");
        let long_key = "k".repeat(257);
        let bad_keys = ["", "a b", "a\tb", "a\rb", "a\nb", "a\0b", long_key.as_str()];
        for k in bad_keys {
            assert_eq!(
                code(conn.lock(k, 1, None).await),
                ErrorCode::InvalidArgument,
                "{k:?}"
            );
            assert_eq!(
                code(conn.enqueue(k, None).await),
                ErrorCode::InvalidArgument
            );
            assert_eq!(
                code(conn.release(k, TOKEN).await),
                ErrorCode::InvalidArgument
            );
        }
        for t in ["", "a\nb", "a\rb", "a\0b", "a b"] {
            assert_eq!(
                code(conn.release("k", t).await),
                ErrorCode::InvalidArgument,
                "{t:?}"
            );
            assert_eq!(
                code(conn.renew("k", t, None).await),
                ErrorCode::InvalidArgument
            );
        }
        assert_eq!(
            code(conn.lock("k", 1_000_000_001, None).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.lock("k", u64::MAX, None).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.lock("k", 1, Some(0)).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.enqueue("k", Some(0)).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.renew("k", TOKEN, Some(0)).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.wait("k", 1_000_000_001).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.sem_lock("k", 1, 0, None).await),
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(conn.sem_enqueue("k", 0, None).await),
            ErrorCode::InvalidArgument
        );
        for (cmd, key, arg) in [
            ("", "k", "1"),
            ("L", "k", "1"),
            ("l x", "k", "1"),
            ("l", "a b", "1"),
            ("l", "k", "1\n2"),
            ("stats", "_\r", ""),
            ("r", "k", &"t".repeat(257)),
        ] {
            assert_eq!(
                code(conn.request_raw(cmd, key, arg).await),
                ErrorCode::InvalidArgument,
                "{cmd:?} {key:?} {arg:?}"
            );
        }
        // Auth token with CR/LF/NUL or empty is rejected before connecting.
        for auth in ["", "a\nb", "a\rb", "a\0b"] {
            let mut o = opts.clone();
            o.auth = Some(auth.into());
            assert_eq!(
                code(Connection::connect(&o).await),
                ErrorCode::InvalidArgument
            );
        }
        assert!(
            !conn.is_closed(),
            "validation errors leave the connection usable"
        );
        conn.close();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            fake.received().is_empty(),
            "wrote {:?}",
            fake.received_text()
        );
        // Primitive options are validated before any connection.
        let mut p = PrimitiveOptions::new("k", opts.clone());
        p.lease_ttl_s = Some(0);
        assert_eq!(code(Primitive::new(p)), ErrorCode::InvalidArgument);
        for ratio in [0.0, 1.0, -0.5, f64::NAN, f64::INFINITY] {
            let mut p = PrimitiveOptions::new("k", opts.clone());
            p.renew_ratio = ratio;
            assert_eq!(
                code(Primitive::new(p)),
                ErrorCode::InvalidArgument,
                "{ratio}"
            );
        }
        let mut p = PrimitiveOptions::new("k", opts.clone());
        p.limit = 0;
        assert_eq!(code(Primitive::new(p)), ErrorCode::InvalidArgument);
        assert_eq!(
            code(Primitive::new(PrimitiveOptions::new("a b", opts.clone()))),
            ErrorCode::InvalidArgument
        );
        let mut p = PrimitiveOptions::new("k", opts.clone());
        p.connect.tls = Some(sema_core::dflockd::TlsOptions {
            ca_pem: Some("not a pem".into()),
            ..Default::default()
        });
        assert_eq!(code(Primitive::new(p)), ErrorCode::InvalidArgument);
        assert_eq!(
            fake.accepted.load(Ordering::SeqCst),
            1,
            "only the one explicit connect"
        );
    }

    #[tokio::test]
    async fn exact_request_bytes() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            while let Some([cmd, _, _]) = c.read_request().await {
                let reply: &[u8] = match cmd.as_str() {
                    "l" | "w" | "sl" | "sw" => b"ok 0123456789abcdef0123456789abcdef 9\n",
                    "e" | "se" => b"queued\n",
                    "n" | "sn" => b"ok 8\n",
                    _ => b"ok\n",
                };
                c.write(reply).await;
            }
        })
        .await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        conn.lock("k", 10, Some(9)).await.expect("l");
        conn.renew("k", TOKEN, Some(9)).await.expect("n");
        conn.release("k", TOKEN).await.expect("r");
        conn.enqueue("k", None).await.expect("e");
        conn.wait("k", 3).await.expect("w");
        conn.sem_lock("k", 10, 3, None).await.expect("sl");
        conn.sem_enqueue("k", 3, Some(15)).await.expect("se");
        conn.sem_wait("k", 0).await.expect("sw");
        conn.sem_renew("k", TOKEN, None).await.expect("sn");
        conn.sem_release("k", TOKEN).await.expect("sr");
        let want = format!(
        "l\nk\n10 9\nn\nk\n{TOKEN} 9\nr\nk\n{TOKEN}\ne\nk\n\nw\nk\n3\nsl\nk\n10 3\nse\nk\n3 15\nsw\nk\n0\nsn\nk\n{TOKEN}\nsr\nk\n{TOKEN}\n"
    );
        assert_eq!(fake.received_text(), want);
        assert_eq!(
            Request::Stats.encode().expect("stats"),
            b"stats\n_\n\n".to_vec()
        );
    }

    /// A fake dflockd that grants `l`/`e`, answers renews via `renew_reply`, records requests.
    struct Scripted {
        fake: Fake,
        log: Arc<Mutex<Vec<[String; 3]>>>,
    }

    async fn scripted(
        lease: u64,
        renew_reply: impl Fn(usize) -> Option<(&'static str, Duration)> + Send + Sync + 'static,
    ) -> Scripted {
        let log = Arc::new(Mutex::new(Vec::new()));
        let renews = Arc::new(AtomicUsize::new(0));
        let renew_reply = Arc::new(renew_reply);
        let l2 = log.clone();
        let fake = Fake::start(move |mut c: FakeConn| {
            let log = l2.clone();
            let renews = renews.clone();
            let renew_reply = renew_reply.clone();
            async move {
                while let Some(req) = c.read_request().await {
                    let cmd = req[0].clone();
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(req);
                    match cmd.as_str() {
                        "l" | "w" => c.write(format!("ok {TOKEN} {lease}\n").as_bytes()).await,
                        "e" => {
                            c.write(format!("acquired {TOKEN} {lease}\n").as_bytes())
                                .await
                        }
                        "r" => c.write(b"ok\n").await,
                        "n" => {
                            let i = renews.fetch_add(1, Ordering::SeqCst);
                            match renew_reply(i) {
                                Some((reply, delay)) => {
                                    tokio::time::sleep(delay).await;
                                    c.write(reply.as_bytes()).await;
                                }
                                None => return, // hang up
                            }
                        }
                        _ => c.write(b"error\n").await,
                    }
                }
            }
        })
        .await;
        Scripted { fake, log }
    }

    impl Scripted {
        fn requests(&self) -> Vec<[String; 3]> {
            self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
        fn count(&self, cmd: &str) -> usize {
            self.requests().iter().filter(|r| r[0] == cmd).count()
        }
    }

    fn counter(p: &Primitive) -> Arc<AtomicUsize> {
        let n = Arc::new(AtomicUsize::new(0));
        let c = n.clone();
        p.set_on_lost(Some(Arc::new(move |k: &str, t: &str, _reason: &str| {
            assert_eq!((k, t), ("k", TOKEN));
            c.fetch_add(1, Ordering::SeqCst);
        })));
        n
    }

    /// The pool keeps at most `MAX_IDLE_PER_SERVER` idle connections per server and settings:
    /// more concurrent holders than that close the surplus at release, and the rest are closed
    /// by the reaper after `IDLE_TTL`.
    #[tokio::test]
    async fn the_idle_pool_is_bounded_and_drains() {
        let s = scripted(30, |_| Some(("ok 30\n", Duration::ZERO))).await;
        let n = pool::MAX_IDLE_PER_SERVER + 6;
        let prims: Vec<_> = (0..n)
            .map(|i| {
                Primitive::new(PrimitiveOptions::new(
                    format!("k{i}"),
                    s.fake.connect_options(),
                ))
                .expect("opts")
            })
            .collect();
        for p in &prims {
            assert!(p.acquire().await.expect("acquire"));
        }
        assert_eq!(s.fake.accepted.load(Ordering::SeqCst), n);
        for p in &prims {
            p.release().await.expect("release");
        }
        assert_eq!(
            pool::idle_count(&s.fake.connect_options()),
            pool::MAX_IDLE_PER_SERVER
        );
        // The reaper closes them after IDLE_TTL (no event to wait for: poll, bounded).
        let deadline = std::time::Instant::now() + pool::IDLE_TTL * 3;
        while pool::idle_count(&s.fake.connect_options()) > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(pool::idle_count(&s.fake.connect_options()), 0);
    }

    #[tokio::test]
    async fn clean_release_pools_the_connection_for_the_next_acquisition() {
        let s = scripted(30, |_| Some(("ok 30\n", Duration::ZERO))).await;
        let p = Primitive::new(PrimitiveOptions::new("k", s.fake.connect_options())).expect("opts");
        for _ in 0..3 {
            assert!(p.acquire().await.expect("acquire"));
            p.release().await.expect("release");
            assert_eq!(pool::idle_count(&s.fake.connect_options()), 1);
        }
        assert_eq!(
            p.enqueue().await.expect("enqueue"),
            EnqueueOutcome::Acquired
        );
        p.release().await.expect("release");
        assert_eq!(s.fake.accepted.load(Ordering::SeqCst), 1);
        // Taken by another primitive with the same connection settings…
        let q = Primitive::new(PrimitiveOptions::new("k", s.fake.connect_options())).expect("opts");
        assert!(q.acquire().await.expect("acquire"));
        assert_eq!(pool::idle_count(&s.fake.connect_options()), 0);
        q.release().await.expect("release");
        assert_eq!(s.fake.accepted.load(Ordering::SeqCst), 1);
        // …but not to one with other settings, and close() drops it.
        let mut other = s.fake.connect_options();
        other.socket_timeout = Duration::from_secs(3);
        let r = Primitive::new(PrimitiveOptions::new("k", other.clone())).expect("opts");
        assert!(r.acquire().await.expect("acquire"));
        r.release().await.expect("release");
        r.close();
        assert_eq!(s.fake.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(
            pool::idle_count(&other),
            1,
            "close() leaves the pooled connection to the pool"
        );
        let cmds: Vec<_> = s.requests().into_iter().map(|r| r[0].clone()).collect();
        assert_eq!(
            cmds,
            ["l", "r", "l", "r", "l", "r", "e", "r", "l", "r", "l", "r"]
        );
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_ends_is_replaced_without_a_loss() {
        // The first connection is ended by the server after its release, as an idle timeout
        // does (`error`, then close); the next acquisition must connect again, quietly.
        let conns = Arc::new(AtomicUsize::new(0));
        let c2 = conns.clone();
        let fake = Fake::start(move |mut c: FakeConn| {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            async move {
                while let Some([cmd, _, _]) = c.read_request().await {
                    match cmd.as_str() {
                        "l" => c.write(format!("ok {TOKEN} 30\n").as_bytes()).await,
                        "r" => {
                            c.write(b"ok\n").await;
                            if n == 0 {
                                c.write(b"error\n").await;
                                return;
                            }
                        }
                        _ => c.write(b"error\n").await,
                    }
                }
            }
        })
        .await;
        let p = Primitive::new(PrimitiveOptions::new("k", fake.connect_options())).expect("opts");
        let lost = counter(&p);
        assert!(p.acquire().await.expect("acquire"));
        p.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(p.acquire().await.expect("acquire on a new connection"));
        p.release().await.expect("release");
        assert_eq!(fake.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }

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
        assert_eq!(s.requests()[0][2], "10", "default acquire timeout, no TTL");
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
        let lost = counter(&p);
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
    async fn silent_renew_is_bounded_by_the_socket_timeout() {
        let s = scripted(1, |_| Some(("ok 1\n", Duration::from_secs(30)))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options()); // socket timeout 500 ms
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = counter(&p);
        assert!(p.acquire().await.expect("acquire"));
        let t0 = Instant::now();
        while lost.load(Ordering::SeqCst) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "loss within 0.5 s + 0.5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(p.token(), None);
    }

    #[tokio::test]
    async fn release_waits_for_an_in_flight_renew() {
        let s = scripted(1, |_| Some(("ok 1\n", Duration::from_millis(800)))).await;
        let mut opts = s.fake.connect_options();
        opts.socket_timeout = Duration::from_secs(3);
        let mut o = PrimitiveOptions::new("k", opts);
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = counter(&p);
        assert!(p.acquire().await.expect("acquire"));
        // The first renew starts at ~500 ms and is answered at ~1300 ms.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let t0 = Instant::now();
        p.release().await.expect("release after the renew");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(400),
            "waited for the renew: {took:?}"
        );
        let cmds: Vec<String> = s.requests().into_iter().map(|r| r[0].clone()).collect();
        assert_eq!(cmds, vec!["l", "n", "r"], "serialized on the connection");
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn close_stops_renewal_and_sends_nothing() {
        let s = scripted(1, |_| Some(("ok 1\n", Duration::ZERO))).await;
        let mut o = PrimitiveOptions::new("k", s.fake.connect_options());
        o.lease_ttl_s = Some(1);
        let p = Primitive::new(o).expect("opts");
        let lost = counter(&p);
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

    #[tokio::test]
    async fn cancel_in_flight_acquire_closes_without_release() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await; // `l` with a long timeout: never answered
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
            "l\nk\n60\n",
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
            let mut lost = dflockd_support::loss_channel(&p);
            let t0 = Instant::now();
            if two_phase {
                assert_eq!(p.enqueue().await.expect("e"), EnqueueOutcome::Acquired);
            } else {
                assert!(p.acquire().await.expect("acquire"));
            }
            let (k, t, at) = dflockd_support::next_loss(&mut lost, Duration::from_secs(3))
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
                dflockd_support::next_loss(&mut lost, Duration::from_millis(200))
                    .await
                    .is_none(),
                "fired once"
            );
            let want = if two_phase {
                "e\nk\n60\n"
            } else {
                "l\nk\n10 60\n"
            };
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
                    "l" => c.write(format!("ok {TOKEN} 1\n").as_bytes()).await,
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
        let lost = counter(&p);
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
                        "l" => c.write(format!("ok {TOKEN} 60\n").as_bytes()).await,
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
    async fn concurrent_misuse_is_rejected_not_blocked() {
        let s = scripted(30, |_| Some(("ok 30\n", Duration::ZERO))).await;
        let p = Primitive::new(PrimitiveOptions::new("k", s.fake.connect_options())).expect("opts");
        assert!(p.acquire().await.expect("acquire"));
        assert_eq!(code(p.acquire().await), ErrorCode::InvalidArgument);
        assert_eq!(code(p.enqueue().await), ErrorCode::InvalidArgument);
        assert!(p.wait(1).await.expect("wait while held"));
        p.release().await.expect("release");
    }

    /// A request written through `take_writer` (whole or in part) and reported with
    /// `mark_written` goes out exactly once, and its reply is read as usual; `read_idle` buffers
    /// a reply that arrives before the request is run, and reports EOF.
    #[tokio::test]
    async fn writer_handle_and_mark_written() {
        use std::io::Write as _;
        let fake = Fake::start(|mut c: FakeConn| async move {
            for _ in 0..2 {
                if c.read_request().await.is_none() {
                    return;
                }
                c.write(b"ok\n").await;
            }
        })
        .await;
        let mut conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        let mut w = conn.take_writer().expect("plain TCP has a writer handle");
        assert!(conn.take_writer().is_none(), "given out once");
        let mut bytes = Vec::new();
        Request::Release {
            key: "k",
            token: "t1",
        }
        .encode_into(&mut bytes)
        .expect("encode");
        // Whole request written outside: the reply arrives while idle, then the request is run.
        w.write_all(&bytes).expect("write");
        conn.read_idle().await.expect("reply bytes");
        assert!(conn.has_line());
        conn.mark_written(bytes.len());
        conn.release("k", "t1").await.expect("release");
        // Part of it written outside: the connection writes the rest.
        bytes.clear();
        Request::Release {
            key: "k",
            token: "t2",
        }
        .encode_into(&mut bytes)
        .expect("encode");
        w.write_all(&bytes[..3]).expect("write");
        conn.mark_written(3);
        conn.release("k", "t2").await.expect("release");
        assert_eq!(fake.received_text(), "r\nk\nt1\nr\nk\nt2\n");
        // The server ends the connection: read_idle reports it and closes.
        let e = conn.read_idle().await.expect_err("EOF");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        assert!(conn.is_closed());
        drop(w);
    }
}

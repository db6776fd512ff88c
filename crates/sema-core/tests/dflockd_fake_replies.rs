//! dflockd client against a small fake server, replies the real servers never produce
//! (garbage, near misses, overlong or endless lines, invalid UTF-8, silence, close mid-reply,
//! auth and TLS handshakes that stall): each must end with the right error code within the
//! configured bounds; nothing may hang.

mod common;

use std::time::{Duration, Instant};

use common::dflockd::*;
use sema_core::dflockd::{
    AcquireReply, ConnectOptions, Connection, EnqueueOutcome, ErrorCode, PrimitiveOptions,
};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

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
            let code = if word == "error_limit_mismatch" {
                ErrorCode::LimitMismatch
            } else {
                ErrorCode::ServerError
            };
            assert_eq!(e.code(), code, "{word}");
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

    /// A two-phase wait with a deadline finer than the whole seconds the server takes is cut
    /// there by the client: against a server silent after `queued` it is a timeout (`false`,
    /// the connection dropped), not the error the connection reports after the 1 s sent plus
    /// its margin.
    #[tokio::test]
    async fn wait_for_is_cut_at_its_deadline_by_the_client() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_some() {
                c.write(b"queued\n").await;
            }
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let p = prim(PrimitiveOptions::new("k", fake.connect_options()));
        assert_eq!(p.enqueue().await.expect("enqueue"), EnqueueOutcome::Queued);
        let r = p.wait_for(p.ticket(), Duration::from_millis(300)).await;
        assert!(!r.expect("a timeout, not an error"));
        assert!(!p.is_held());
        assert_eq!(
            fake.received_text(),
            "e\nk\n\nw\nk\n1\n",
            "the server got the ceiling: 1 s"
        );
    }

    #[tokio::test]
    async fn blocking_commands_wait_their_own_timeout_plus_margin() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        // The socket timeout (500 ms) does not cut the wait the command asked for (1 s); it
        // bounds the margin after it (at most 5 s) for a server that never answers.
        let silent_lock = |opts: ConnectOptions| async move {
            let mut conn = Connection::connect(&opts).await.expect("connect");
            let t0 = Instant::now();
            let e = conn.lock("k", 1, None).await.expect_err("silent server");
            assert_eq!(e.code(), ErrorCode::Timeout);
            t0.elapsed()
        };
        let mut opts = fake.connect_options();
        let took = silent_lock(opts.clone()).await;
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(3),
            "1 s timeout + 0.5 s socket timeout, took {took:?}"
        );
        // With a socket timeout above it, the margin is 5 s.
        opts.socket_timeout = Duration::from_secs(30);
        let took = silent_lock(opts).await;
        assert!(
            took >= Duration::from_millis(5900) && took < Duration::from_secs(8),
            "1 s timeout + 5 s margin, took {took:?}"
        );
    }

    #[tokio::test]
    async fn a_try_against_a_silent_server_ends_at_the_socket_timeout() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            let _ = c.read_request().await;
            c.wait_eof(Duration::from_secs(30)).await;
        })
        .await;
        let mut o = PrimitiveOptions::new("k", fake.connect_options()); // socket timeout 500 ms
        o.acquire_timeout_s = 0;
        let p = prim(o);
        let t0 = Instant::now();
        let e = p.acquire().await.expect_err("no answer is not \"held\"");
        assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
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
        let port = free_port();
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
}

//! What the dflockd client writes, checked on a fake server: invalid arguments write nothing,
//! each request's exact bytes, and a connection handed over with `into_nonblocking` keeps its
//! framing.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::dflockd::*;
use sema_core::dflockd::{Connection, ErrorCode, Primitive, PrimitiveOptions, Request};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

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

    /// A connection handed over with `into_nonblocking` keeps its framing: a request sent
    /// goes out exactly once, reply lines come back one by one (a line split across reads
    /// included), and the server's EOF is reported as CONNECTION_ERROR.
    // Multi-threaded: the test's blocking reads must not stop the fake server's task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn into_nonblocking_sends_and_reads_lines() {
        let fake = Fake::start(|mut c: FakeConn| async move {
            if c.read_request().await.is_none() {
                return;
            }
            c.write(b"ok 30\n").await;
            if c.read_request().await.is_none() {
                return;
            }
            c.write(b"o").await;
            tokio::task::yield_now().await;
            c.write(b"k\r\n").await;
        })
        .await;
        let conn = Connection::connect(&fake.connect_options())
            .await
            .expect("connect");
        let mut s = conn.into_nonblocking().expect("open connection");
        // Blocking reads for the test only: each read_ready then waits for bytes.
        s.socket().set_nonblocking(false).expect("blocking");
        let mut bytes = Vec::new();
        for (token, want) in [("t1", "ok 30"), ("t2", "ok")] {
            bytes.clear();
            Request::Renew {
                key: "k",
                token,
                ttl_s: None,
            }
            .encode_into(&mut bytes)
            .expect("encode");
            assert!(
                s.send(&bytes).expect("send"),
                "a short request goes out at once"
            );
            let line = loop {
                if let Some(l) = s.next_line() {
                    break l.expect("line");
                }
                s.read_ready().expect("read");
            };
            assert_eq!(line, want);
        }
        assert_eq!(fake.received_text(), "n\nk\nt1\nn\nk\nt2\n");
        let e = loop {
            if let Err(e) = s.read_ready() {
                break e;
            }
        };
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        assert!(s.next_line().is_none());
    }
}

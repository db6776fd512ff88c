//! The process-wide idle connection pool, on a scripted fake server: bounded per server, drained
//! after its idle time, reused by the next acquisition, and a pooled connection the server ended
//! replaced without a loss.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::dflockd::*;
use sema_core::dflockd::{pool, EnqueueOutcome, Primitive, PrimitiveOptions};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

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
            ["e", "r", "e", "r", "e", "r", "e", "r", "e", "r", "e", "r"]
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
                        "e" => c.write(format!("acquired {TOKEN} 30\n").as_bytes()).await,
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
        let lost = loss_counter(&p, Some(("k", TOKEN)));
        assert!(p.acquire().await.expect("acquire"));
        p.release().await.expect("release");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(p.acquire().await.expect("acquire on a new connection"));
        p.release().await.expect("release");
        assert_eq!(fake.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }
}

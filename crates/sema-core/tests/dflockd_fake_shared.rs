//! A shared lock's writer holds its gate and every reader slot on one connection: a refused
//! renew of ANY part (here a slot in the middle, whose token the lock does not show) is the loss
//! of the lock, reported once with the part named; and what the writer sends, in which order.
//! Scripted fake server: the real one gives no way to refuse one slot's renew on cue.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::dflockd::*;
use sema_core::dflockd::shared::MAX_READERS;
use sema_core::dflockd::{ErrorCode, Mode, Primitive, PrimitiveOptions};

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    /// A fake granting `l`/`sl` (slot tokens numbered), answering renews `ok 2` except the
    /// `refuse`-th `sn` (0-based), which gets `error`; logs every request.
    async fn fake(refuse: usize) -> (Fake, Arc<Mutex<Vec<[String; 3]>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l2 = log.clone();
        let renews = Arc::new(AtomicUsize::new(0));
        let f = Fake::start(move |mut c: FakeConn| {
            let log = l2.clone();
            let renews = renews.clone();
            async move {
                let mut slot = 0;
                while let Some(req) = c.read_request().await {
                    let cmd = req[0].clone();
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(req);
                    let reply = match cmd.as_str() {
                        "l" => format!("ok {TOKEN} 2\n"),
                        "e" => format!("acquired {TOKEN} 2\n"),
                        "w" => format!("ok {TOKEN} 2\n"),
                        "sl" => {
                            slot += 1;
                            format!("ok {slot:032x} 2\n")
                        }
                        "n" => "ok 2\n".to_string(),
                        "sn" if renews.fetch_add(1, Ordering::SeqCst) == refuse => {
                            "error\n".to_string()
                        }
                        "sn" => "ok 2\n".to_string(),
                        _ => "ok\n".to_string(),
                    };
                    c.write(reply.as_bytes()).await;
                }
            }
        })
        .await;
        (f, log)
    }

    #[tokio::test]
    async fn dflockd_writer_loses_the_lock_when_one_slot_renew_is_refused() {
        let (f, log) = fake(9).await;
        let mut o = PrimitiveOptions::new("k", f.connect_options());
        o.lease_ttl_s = Some(2);
        o.mode = Some(Mode::Exclusive);
        let p = Primitive::new(o).expect("opts");
        let reasons = Arc::new(Mutex::new(Vec::<String>::new()));
        let r2 = reasons.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        p.set_on_lost(Some(Arc::new(move |k: &str, t: &str, reason: &str| {
            assert_eq!((k, t), ("k", TOKEN), "the lock's key and its gate token");
            r2.lock().unwrap().push(reason.to_string());
            let _ = tx.send(());
        })));
        assert!(p.acquire().await.expect("acquire"));
        assert_eq!(p.token().as_deref(), Some(TOKEN));
        {
            let reqs = log.lock().unwrap().clone();
            let cmds: Vec<_> = reqs.iter().map(|r| r[0].as_str()).collect();
            assert_eq!(cmds.len(), 2 + MAX_READERS as usize);
            assert_eq!(
                cmds[..2],
                ["e", "w"],
                "a blocking acquire enqueues (call order)"
            );
            assert!(cmds[2..].iter().all(|c| *c == "sl"), "{cmds:?}");
            assert!(reqs[2..]
                .iter()
                .all(|r| r[1] == "k" && r[2] == format!("0 {MAX_READERS} 2")));
        }
        // The first renew round (after ~1 s) refuses the 10th slot.
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("loss reported")
            .expect("loss");
        let reasons = reasons.lock().unwrap().clone();
        assert_eq!(reasons.len(), 1, "reported once: {reasons:?}");
        assert!(
            reasons[0].contains("'k'") && reasons[0].contains("sem_renew"),
            "the refused slot renew: {reasons:?}"
        );
        assert_eq!(p.token(), None);
        assert_eq!(code(p.release().await), ErrorCode::LockLost);
        let reqs = log.lock().unwrap().clone();
        let n = reqs.iter().filter(|r| r[0] == "n").count();
        let sn = reqs.iter().filter(|r| r[0] == "sn").count();
        assert_eq!((n, sn), (1, MAX_READERS as usize), "one pipelined round");
    }

    #[tokio::test]
    async fn dflockd_reader_holds_only_its_slot_and_enqueue_is_refused() {
        let (f, log) = fake(usize::MAX).await;
        let mut o = PrimitiveOptions::new("k", f.connect_options());
        o.lease_ttl_s = Some(2);
        o.mode = Some(Mode::Shared);
        let p = Primitive::new(o).expect("opts");
        assert_eq!(code(p.enqueue().await), ErrorCode::InvalidArgument);
        assert!(p.acquire().await.expect("acquire"));
        assert_eq!(p.token().as_deref(), Some(format!("{:032x}", 1).as_str()));
        p.release().await.expect("release");
        let reqs = log.lock().unwrap().clone();
        let got: Vec<_> = reqs
            .iter()
            .map(|r| format!("{} {} {}", r[0], r[1], r[2]))
            .collect();
        let slot = format!("{:032x}", 1);
        assert_eq!(
            got,
            vec![
                "e k/gate 2".to_string(),
                "w k/gate 10".to_string(),
                format!("sl k 0 {MAX_READERS} 2"),
                format!("r k/gate {TOKEN}"),
                format!("sr k {slot}"),
            ]
        );
    }

    #[test]
    fn dflockd_mode_does_not_combine_with_limit_and_needs_room_for_the_slot_key() {
        let mut o = PrimitiveOptions::new("k", sema_core::dflockd::ConnectOptions::new("h", 1));
        o.mode = Some(Mode::Shared);
        o.limit = 2;
        assert_eq!(code(o.validate()), ErrorCode::InvalidArgument);
        o.limit = 1;
        o.validate().expect("valid");
        o.key = "k".repeat(252); // the gate `<key>/gate` would be 257 bytes
        assert_eq!(code(o.validate()), ErrorCode::InvalidArgument);
    }
}

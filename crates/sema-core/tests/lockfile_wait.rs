//! Waiting for a lock file: woken by a release (file-system event, in-process hand-off, poll),
//! timeouts and cancellation that leave nothing behind, the in-process FIFO order, and option
//! values at their extremes, on real files and real child processes.
#![cfg(unix)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wakes_when_a_foreign_holder_releases() {
    let d = dir();
    let path = d.path().join("w.lock");
    // A live foreign holder (our own pid, fresh timestamp): never stale.
    write_live_holder(&path);
    let lf = LockFile::new(path.clone(), opts());
    remove_after(&path, Duration::from_millis(200));
    let held = acquire_within(&lf, Duration::from_secs(10))
        .await
        .expect("acquired after the release");
    assert!(held.release().unwrap());
    assert!(entries(&d).is_empty());
}

/// With a 60 s polling interval only a file-system event can wake the waiter in time.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_is_woken_by_inotify_not_polling() {
    let d = dir();
    let path = d.path().join("ev.lock");
    write_live_holder(&path);
    let lf = LockFile::new(path.clone(), events_only());
    remove_after(&path, Duration::from_millis(300));
    let held = acquire_within(&lf, Duration::from_secs(20))
        .await
        .expect("woken by the file-system event");
    held.release().unwrap();
    // The watch is dropped with the waiter.
    assert!(watched_directory_count() < 100);
}

/// A directory's watch outlives its last waiter for a moment (a process contending in a loop
/// reuses it instead of adding and removing it per acquisition): consecutive waits in one
/// directory are all still woken by file-system events, not by the (here 60 s) poll.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_waits_reuse_the_watch_and_are_woken() {
    let d = dir();
    let (path, lf) = lock_at(&d, "again.lock", events_only());
    for round in 0..3 {
        write_live_holder(&path);
        remove_after(&path, Duration::from_millis(200));
        let held = acquire_within(&lf, Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        held.release().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_waiter_wakes_on_release() {
    let d = dir();
    let (_, lf) = lock_at(&d, "ip.lock", opts());
    let held = attempt(&lf).unwrap();
    let lf2 = lf.clone();
    let waiter = tokio::spawn(async move {
        lf2.acquire(
            &tagged("second"),
            Some(Duration::from_secs(10)),
            CancellationToken::new(),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(held.release().unwrap());
    let second = waiter.await.unwrap().expect("acquired");
    assert_eq!(second.info().tag.as_deref(), Some("second"));
    // The timestamp is taken at the successful attempt.
    assert!(second.info().timestamp >= held.info().timestamp);
    second.release().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancel_leave_nothing_behind() {
    for fsync in [true, false] {
        let d = dir();
        let path = d.path().join("t.lock");
        let foreign = write_live_holder(&path);
        let lf = LockFile::new(path.clone(), LockOptions { fsync, ..opts() });

        let err = acquire_within(&lf, Duration::from_millis(150))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "TIMEOUT");
        assert_eq!(err.to_string(), "Timeout waiting for lock after 150ms");

        let err = acquire_within(&lf, Duration::ZERO).await.unwrap_err();
        assert_eq!(err.kind(), "TIMEOUT");

        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            c2.cancel();
        });
        let err = lf
            .acquire(&AcquireRequest::default(), None, cancel)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "ABORTED");
        assert_eq!(err.to_string(), "Lock acquisition was aborted");

        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let err = lf
            .acquire(&AcquireRequest::default(), None, cancelled)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "ABORTED");

        // Dropping the future mid-wait is fine too.
        let _ = tokio::time::timeout(
            Duration::from_millis(50),
            lf.acquire(&AcquireRequest::default(), None, CancellationToken::new()),
        )
        .await;

        // Nothing but the foreign file, untouched; the in-process slot is free.
        assert_eq!(entries(&d), vec!["t.lock".to_string()]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), foreign);
        std::fs::remove_file(&path).unwrap();
        let held = acquire_within(&lf, Duration::ZERO)
            .await
            .expect("free now: one attempt suffices");
        held.release().unwrap();
        assert!(entries(&d).is_empty());
    }
}

/// Waits for the 5 waiters' tasks: they were served in call order (`order`, filled as each is
/// granted), and released, leaving nothing in `d`.
async fn served_in_call_order(
    tasks: Vec<tokio::task::JoinHandle<()>>,
    order: &Mutex<Vec<usize>>,
    d: &tempfile::TempDir,
) {
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert!(entries(d).is_empty());
}

/// A current-thread runtime makes the queueing order deterministic: each spawned waiter runs
/// until it is queued before the test task continues.
#[tokio::test(flavor = "current_thread")]
async fn in_process_waiters_are_served_fifo() {
    let d = dir();
    let (_, lf) = lock_at(
        &d,
        "fifo.lock",
        LockOptions {
            fsync: false,
            ..opts()
        },
    );
    let first = attempt(&lf).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let lf = lf.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let held = acquire_within(&lf, Duration::from_secs(20))
                .await
                .expect("acquired");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            held.release().unwrap();
        }));
        // Let waiter i queue up before waiter i+1 starts.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(first.release().unwrap());
    served_in_call_order(tasks, &order, &d).await;
}

/// Waiters of one process take their queue place when `acquire_in_order` is called, not when
/// the future is first polled: spawned in reverse, they are still granted in call order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_in_order_keeps_call_order() {
    let d = dir();
    let (_, lf) = lock_at(&d, "order.lock", opts());
    let first = attempt(&lf).unwrap();
    let futures: Vec<_> = (0..5)
        .map(|i| {
            lf.acquire_in_order(
                AcquireRequest {
                    tag: Some(format!("w{i}")),
                    owner_pid: None,
                },
                Some(Duration::from_secs(10)),
                CancellationToken::new(),
                None,
            )
        })
        .collect();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, fut) in futures.into_iter().enumerate().rev() {
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let held = fut.await.expect("acquired");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(held.release().unwrap());
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(first.release().unwrap());
    served_in_call_order(tasks, &order, &d).await;
}

/// A waiter judges a holder file once per (inode, mtime, size), but the `retry_interval` poll
/// always judges again: a holder that dies while we wait, without any file-system event on the
/// lock's name, is reclaimed at the next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judged_holder_is_rejudged_on_the_poll() {
    let d = dir();
    let path = d.path().join("rejudge.lock");
    let mut holder = sleeper();
    std::fs::write(
        &path,
        own_host_lock(
            i64::from(holder.id()),
            now_unix_secs(),
            process_start_ticks(i64::from(holder.id())),
        ),
    )
    .unwrap();
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            retry_interval: Duration::from_millis(300),
            fsync: false,
            ..LockOptions::default()
        },
    );
    let lf2 = lf.clone();
    let waiter = tokio::spawn(async move { acquire_within(&lf2, Duration::from_secs(20)).await });
    // Judged alive (and cached) for a few polls.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiter.is_finished(), "a live holder is never evicted");
    // The holder dies: no event on the lock's name (nobody had it open).
    holder.kill().unwrap();
    holder.wait().unwrap();
    let t0 = std::time::Instant::now();
    let held = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("reclaimed by the poll")
        .unwrap()
        .expect("acquired");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(held.release().unwrap());
    assert!(entries(&d).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_free_semantics() {
    let d = dir();
    let (path, lf) = lock_at(&d, "wait.lock", opts());
    lf.wait_until_free(Some(Duration::ZERO), CancellationToken::new())
        .await
        .unwrap();
    write_live_holder(&path);
    let err = lf
        .wait_until_free(Some(Duration::from_millis(100)), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "TIMEOUT");
    remove_after(&path, Duration::from_millis(150));
    lf.wait_until_free(Some(Duration::from_secs(10)), CancellationToken::new())
        .await
        .unwrap();
    // a stale lock counts as free (it is not broken)
    std::fs::write(&path, "pid=999999999\ntimestamp=0\n").unwrap();
    lf.wait_until_free(Some(Duration::ZERO), CancellationToken::new())
        .await
        .unwrap();
    assert!(path.exists());
    // ... unless nothing is ever stale (sema's `wait`: existence only)
    let never = LockFile::new(
        path.clone(),
        LockOptions {
            stale_timeout: None,
            ..opts()
        },
    );
    let err = never
        .wait_until_free(Some(Duration::from_millis(50)), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "TIMEOUT");
}

/// The bindings spawn these futures on a multi-threaded runtime: they must be `Send`.
#[test]
fn futures_and_handles_are_send_and_sync() {
    fn send<T: Send>(_: &T) {}
    fn send_sync<T: Send + Sync>() {}
    let lf = LockFile::new(
        std::path::PathBuf::from("/tmp/x.lock"),
        LockOptions::default(),
    );
    let req = AcquireRequest::default();
    let acquire = lf.acquire(&req, None, CancellationToken::new());
    send(&acquire);
    let wait = lf.wait_until_free(None, CancellationToken::new());
    send(&wait);
    send_sync::<LockFile>();
    send_sync::<HeldLock>();
    send_sync::<LockError>();
}

/// Extreme option values never panic or spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_options_do_not_panic() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "x.lock",
        LockOptions {
            stale_timeout: Some(Duration::MAX),
            retry_interval: Duration::ZERO,
            heartbeat: Some(Duration::MAX),
            max_tag_length: Some(0),
            pending_write_grace: Duration::MAX,
            ..LockOptions::default()
        },
    );
    let held = lf
        .acquire(
            &AcquireRequest {
                tag: Some("cut to nothing".into()),
                owner_pid: Some(u32::MAX),
            },
            Some(Duration::MAX),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(held.info().tag.as_deref(), Some(""));
    held.start_heartbeat();
    let err = acquire_within(&lf, Duration::from_millis(30))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "TIMEOUT");
    assert!(!lf.status().is_stale);
    assert!(held.release().unwrap());
    let hb_zero = LockFile::new(
        path.clone(),
        LockOptions {
            heartbeat: Some(Duration::ZERO),
            ..LockOptions::default()
        },
    );
    let held = attempt(&hb_zero).unwrap();
    held.start_heartbeat();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(held.release().unwrap());
}

//! Waiting, cancellation, FIFO order, heartbeat, liveness-based reclaim and the stale-break
//! race, on real files and real child processes.
#![cfg(unix)]

use std::process::{Child, Command};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

fn entries(d: &tempfile::TempDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn opts() -> LockOptions {
    LockOptions {
        retry_interval: Duration::from_millis(20),
        ..LockOptions::default()
    }
}

fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

/// A lock file as one of our own processes (pid `pid`, this host) would have written it.
fn own_host_lock(pid: i64, timestamp: i64, start: Option<u64>) -> String {
    LockInfo {
        pid,
        timestamp,
        tag: None,
        host: Some(host_identity().to_string()),
        start,
        token: Some("00000000000000000000000000000000".into()),
    }
    .serialize()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wakes_when_a_foreign_holder_releases() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("w.lock");
    // A live foreign holder (our own pid, fresh timestamp): never stale.
    std::fs::write(
        &path,
        format!(
            "pid={}\ntimestamp={}\n",
            std::process::id(),
            now_unix_secs()
        ),
    )
    .unwrap();
    let lf = LockFile::new(path.clone(), opts());
    let p2 = path.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::remove_file(p2).unwrap();
    });
    let held = lf
        .acquire(
            &AcquireRequest::default(),
            Some(Duration::from_secs(10)),
            CancellationToken::new(),
        )
        .await
        .expect("acquired after the release");
    assert!(held.release().unwrap());
    assert!(entries(&d).is_empty());
}

/// With a 60 s polling interval only a file-system event can wake the waiter in time.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_is_woken_by_inotify_not_polling() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("ev.lock");
    std::fs::write(
        &path,
        format!(
            "pid={}\ntimestamp={}\n",
            std::process::id(),
            now_unix_secs()
        ),
    )
    .unwrap();
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            retry_interval: Duration::from_secs(60),
            fsync: false,
            ..LockOptions::default()
        },
    );
    let p2 = path.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::remove_file(p2).unwrap();
    });
    let held = lf
        .acquire(
            &AcquireRequest::default(),
            Some(Duration::from_secs(20)),
            CancellationToken::new(),
        )
        .await
        .expect("woken by the file-system event");
    held.release().unwrap();
    // The watch is dropped with the waiter.
    assert!(watched_directory_count() < 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_waiter_wakes_on_release() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("ip.lock");
    let lf = LockFile::new(path.clone(), opts());
    let held = lf.try_acquire(&AcquireRequest::default()).unwrap();
    let lf2 = lf.clone();
    let waiter = tokio::spawn(async move {
        lf2.acquire(
            &AcquireRequest {
                tag: Some("second".into()),
                owner_pid: None,
            },
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
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("t.lock");
        let foreign = format!(
            "pid={}\ntimestamp={}\n",
            std::process::id(),
            now_unix_secs()
        );
        std::fs::write(&path, &foreign).unwrap();
        let lf = LockFile::new(path.clone(), LockOptions { fsync, ..opts() });

        let err = lf
            .acquire(
                &AcquireRequest::default(),
                Some(Duration::from_millis(150)),
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "TIMEOUT");
        assert_eq!(err.to_string(), "Timeout waiting for lock after 150ms");

        let err = lf
            .acquire(
                &AcquireRequest::default(),
                Some(Duration::ZERO),
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
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
        let held = lf
            .acquire(
                &AcquireRequest::default(),
                Some(Duration::ZERO),
                CancellationToken::new(),
            )
            .await
            .expect("free now: one attempt suffices");
        held.release().unwrap();
        assert!(entries(&d).is_empty());
    }
}

/// A current-thread runtime makes the queueing order deterministic: each spawned waiter runs
/// until it is queued before the test task continues.
#[tokio::test(flavor = "current_thread")]
async fn in_process_waiters_are_served_fifo() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("fifo.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            fsync: false,
            ..opts()
        },
    );
    let first = lf.try_acquire(&AcquireRequest::default()).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let lf = lf.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let held = lf
                .acquire(
                    &AcquireRequest::default(),
                    Some(Duration::from_secs(20)),
                    CancellationToken::new(),
                )
                .await
                .expect("acquired");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            held.release().unwrap();
        }));
        // Let waiter i queue up before waiter i+1 starts.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    first.release().unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert!(entries(&d).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_refreshes_and_detects_loss() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("hb.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            heartbeat: Some(Duration::from_millis(50)),
            ..opts()
        },
    );
    let held = lf
        .try_acquire(&AcquireRequest {
            tag: Some("hb".into()),
            owner_pid: None,
        })
        .unwrap();
    held.start_heartbeat();
    held.start_heartbeat(); // no-op

    // mtime refresh
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let age = std::fs::metadata(&path)
        .unwrap()
        .modified()
        .unwrap()
        .elapsed()
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5), "mtime refreshed, age {age:?}");

    // timestamp refresh (seconds resolution)
    let t0 = held.info().timestamp;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let on_disk = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(on_disk.timestamp > t0, "{} > {}", on_disk.timestamp, t0);
    assert_eq!(on_disk.token.as_deref(), Some(held.token().as_str()));
    assert_eq!(on_disk.tag.as_deref(), Some("hb"));
    assert_eq!(held.current_info().timestamp, on_disk.timestamp);
    assert!(!held.lost().is_cancelled());

    // removal
    std::fs::remove_file(&path).unwrap();
    tokio::time::timeout(Duration::from_secs(5), held.lost().cancelled())
        .await
        .expect("loss detected");
    assert_eq!(held.lost_reason().as_deref(), Some("lock file was removed"));
    assert!(!held.is_held());
    assert!(!held.release().unwrap());
    assert!(!path.exists(), "the heartbeat never recreates the file");

    // replacement
    let held = lf
        .try_acquire(&AcquireRequest::default())
        .expect("slot freed by the loss");
    held.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    let other = format!("pid=1\ntimestamp={}\n", now_unix_secs());
    std::fs::write(&path, &other).unwrap();
    tokio::time::timeout(Duration::from_secs(5), held.lost().cancelled())
        .await
        .expect("loss detected");
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("lock file was replaced")
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        other,
        "not touched after the loss"
    );
    assert!(!held.release().unwrap());
    assert!(path.exists());
}

#[test]
fn dead_own_host_holder_is_reclaimed_at_once() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("dead.lock");
    let lf = LockFile::new(path.clone(), LockOptions::default()); // 1 h stale timeout
    let mut child = sleeper();
    let pid = i64::from(child.id());
    let start = process_start_ticks(pid);
    std::fs::write(&path, own_host_lock(pid, now_unix_secs(), start)).unwrap();
    assert_eq!(
        lf.try_acquire(&AcquireRequest::default())
            .unwrap_err()
            .holder_pid(),
        Some(pid)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lf.status().is_stale);
    let held = lf
        .try_acquire(&AcquireRequest::default())
        .expect("dead holder reclaimed");
    held.release().unwrap();
}

#[test]
fn live_own_host_holder_is_never_evicted() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("live.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            stale_timeout: Some(Duration::from_secs(1)),
            ..LockOptions::default()
        },
    );
    let mut child = sleeper();
    let pid = i64::from(child.id());
    let start = process_start_ticks(pid);
    // Ancient timestamp: age alone would evict it (sema's flaw).
    std::fs::write(&path, own_host_lock(pid, 0, start)).unwrap();
    assert!(!lf.status().is_stale);
    assert_eq!(
        lf.try_acquire(&AcquireRequest::default())
            .unwrap_err()
            .kind(),
        "ALREADY_LOCKED"
    );
    assert!(!lf.clean_stale().unwrap());
    assert!(path.exists());
    // A recorded start time that does not match the live pid: pid reused, stale at once.
    #[cfg(target_os = "linux")]
    {
        std::fs::write(
            &path,
            own_host_lock(pid, now_unix_secs(), start.map(|s| s + 1)),
        )
        .unwrap();
        assert!(lf.status().is_stale);
        let held = lf
            .try_acquire(&AcquireRequest::default())
            .expect("reused pid reclaimed");
        held.release().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn other_host_locks_expire_by_age_only() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("oh.lock");
    let lf = LockFile::new(path.clone(), LockOptions::default());
    let other = |ts: i64| {
        LockInfo {
            pid: i64::from(std::process::id()), // alive here, meaningless there
            timestamp: ts,
            host: Some("elsewhere:boot:1".into()),
            ..LockInfo::default()
        }
        .serialize()
    };
    std::fs::write(&path, other(now_unix_secs() - 60)).unwrap();
    assert_eq!(
        lf.try_acquire(&AcquireRequest::default())
            .unwrap_err()
            .kind(),
        "ALREADY_LOCKED"
    );
    std::fs::write(&path, other(now_unix_secs() - 7200)).unwrap();
    let held = lf
        .try_acquire(&AcquireRequest::default())
        .expect("expired on its host's clock");
    held.release().unwrap();
}

/// Many threads (standing in for processes: they bypass the in-process queue) race to break
/// one stale lock (dead pid, timestamp 0): exactly one wins each round, and the file on disk is
/// the winner's.
#[test]
fn stale_break_race_has_exactly_one_winner() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 50;
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("race.lock");
    for round in 0..ROUNDS {
        std::fs::write(&path, "pid=999999999\ntimestamp=0\n").unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let barrier = barrier.clone();
                let lf = LockFile::new(
                    path.clone(),
                    LockOptions {
                        fsync: i % 2 == 0,
                        ..LockOptions::default()
                    },
                )
                .with_creation_strategy(if i % 3 == 0 {
                    CreationStrategy::NamedTemp
                } else {
                    CreationStrategy::Auto
                });
                std::thread::spawn(move || {
                    barrier.wait();
                    lf.try_acquire_bypassing_queue(&AcquireRequest::default())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<&HeldLock> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}");
        for r in &results {
            if let Err(e) = r {
                assert_eq!(e.kind(), "ALREADY_LOCKED", "round {round}: {e}");
            }
        }
        let on_disk = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            on_disk.token.as_deref(),
            Some(winners[0].token().as_str()),
            "round {round}"
        );
        assert!(winners[0].release().unwrap());
        assert!(entries(&d).is_empty(), "round {round}: {:?}", entries(&d));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_free_semantics() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("wait.lock");
    let lf = LockFile::new(path.clone(), opts());
    lf.wait_until_free(Some(Duration::ZERO), CancellationToken::new())
        .await
        .unwrap();
    std::fs::write(
        &path,
        format!(
            "pid={}\ntimestamp={}\n",
            std::process::id(),
            now_unix_secs()
        ),
    )
    .unwrap();
    let err = lf
        .wait_until_free(Some(Duration::from_millis(100)), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "TIMEOUT");
    let p2 = path.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        std::fs::remove_file(p2).unwrap();
    });
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
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("x.lock");
    let lf = LockFile::new(
        path.clone(),
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
    let err = lf
        .acquire(
            &AcquireRequest::default(),
            Some(Duration::from_millis(30)),
            CancellationToken::new(),
        )
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
    let held = hb_zero.try_acquire(&AcquireRequest::default()).unwrap();
    held.start_heartbeat();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(held.release().unwrap());
}

/// A waiter judges a holder file once per (inode, mtime, size), but the `retry_interval` poll
/// always judges again: a holder that dies while we wait, without any file-system event on the
/// lock's name, is reclaimed at the next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judged_holder_is_rejudged_on_the_poll() {
    let d = tempfile::tempdir().unwrap();
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
    let waiter = tokio::spawn(async move {
        lf2.acquire(
            &AcquireRequest::default(),
            Some(Duration::from_secs(20)),
            CancellationToken::new(),
        )
        .await
    });
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

/// Waiters of one process take their queue place when `acquire_in_order` is called, not when
/// the future is first polled: spawned in reverse, they are still granted in call order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_in_order_keeps_call_order() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("order.lock");
    let lf = LockFile::new(path.clone(), opts());
    let first = lf.try_acquire(&AcquireRequest::default()).unwrap();
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
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert!(entries(&d).is_empty());
}

/// An owner's loss hook hears `(id, Lost(reason))` once one of its held locks is found lost,
/// after its reason is set; a plain release does not call it, and another owner's hook hears
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_hook_reports_id_and_reason_to_the_owner_only() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("hook.lock");
    type Seen = Arc<Mutex<Vec<(u64, String)>>>;
    let hook = |seen: &Seen| -> Box<LossCallback> {
        let sink = seen.clone();
        Box::new(move |id, how: &HeldEnd| sink.lock().unwrap().push((id, format!("{how:?}"))))
    };
    let (owner, other) = (1001, 1002);
    let seen: Seen = Arc::default();
    let seen_other: Seen = Arc::default();
    set_loss_hook(owner, Some(hook(&seen)));
    set_loss_hook(other, Some(hook(&seen_other)));
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            heartbeat: Some(Duration::from_millis(30)),
            ..opts()
        },
    );
    let released = lf.try_acquire(&AcquireRequest::default()).unwrap();
    released.set_owner(owner);
    released.start_heartbeat();
    let released_id = released.id();
    assert!(held_lock_by_id(released_id).is_some());
    assert!(released.release().unwrap());
    assert!(held_lock_by_id(released_id).is_none());

    let held = lf.try_acquire(&AcquireRequest::default()).unwrap();
    held.set_owner(owner);
    held.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    tokio::time::timeout(Duration::from_secs(5), held.lost().cancelled())
        .await
        .expect("loss detected");
    let ours: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| *id == held.id() || *id == released_id)
        .cloned()
        .collect();
    assert_eq!(
        ours,
        vec![(held.id(), "Lost(\"lock file was removed\")".to_string())]
    );
    assert!(seen_other.lock().unwrap().is_empty());
    assert!(held_lock_by_id(held.id()).is_none());

    // Released by path (semats' `release()`): the owner hears ReleasedByPath if it asked.
    let quiet = lf.try_acquire(&AcquireRequest::default()).unwrap();
    quiet.set_owner(owner);
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(!seen.lock().unwrap().iter().any(|(id, _)| *id == quiet.id()));
    let by_path = lf.try_acquire(&AcquireRequest::default()).unwrap();
    by_path.set_owner(owner);
    by_path.report_release_by_path();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(seen
        .lock()
        .unwrap()
        .contains(&(by_path.id(), "ReleasedByPath".to_string())));
    set_loss_hook(owner, None);
    set_loss_hook(other, None);
}

/// The end of a lock whose owner keeps a handle (`report_release_by_path`) is kept by the engine
/// until asked once (`take_held_end`): a loss found before the handle existed is answered by the
/// engine. A lock without that request, or one released through its own handle, keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_handled_lock_is_kept_until_asked_once() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("ends.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            heartbeat: Some(Duration::from_millis(30)),
            ..opts()
        },
    );
    let owner = 1101;
    let lost = lf.try_acquire(&AcquireRequest::default()).unwrap();
    lost.set_owner(owner);
    lost.report_release_by_path();
    assert_eq!(take_held_end(lost.id()), None, "held: nothing to tell");
    lost.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    tokio::time::timeout(Duration::from_secs(5), lost.lost().cancelled())
        .await
        .expect("loss detected");
    assert_eq!(
        take_held_end(lost.id()),
        Some(HeldEnd::Lost("lock file was removed".into()))
    );
    assert_eq!(take_held_end(lost.id()), None, "told once");

    let by_path = lf.try_acquire(&AcquireRequest::default()).unwrap();
    by_path.set_owner(owner);
    by_path.report_release_by_path();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert_eq!(take_held_end(by_path.id()), Some(HeldEnd::ReleasedByPath));

    let by_handle = lf.try_acquire(&AcquireRequest::default()).unwrap();
    by_handle.set_owner(owner);
    by_handle.report_release_by_path();
    assert!(by_handle.release().unwrap());
    assert_eq!(take_held_end(by_handle.id()), None, "its handle knows");

    let unhandled = lf.try_acquire(&AcquireRequest::default()).unwrap();
    unhandled.set_owner(owner);
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert_eq!(
        take_held_end(unhandled.id()),
        None,
        "no handle asked for it"
    );
}

/// `release_all_held_by(owner)` releases that owner's locks and no other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_held_by_releases_one_owner() {
    let d = tempfile::tempdir().unwrap();
    let mine = LockFile::new(d.path().join("mine.lock"), opts());
    let theirs = LockFile::new(d.path().join("theirs.lock"), opts());
    let a = mine.try_acquire(&AcquireRequest::default()).unwrap();
    a.set_owner(2001);
    let b = theirs.try_acquire(&AcquireRequest::default()).unwrap();
    b.set_owner(2002);
    release_all_held_by(2002);
    assert!(a.is_held() && a.is_on_disk());
    assert!(!b.is_held());
    assert!(!d.path().join("theirs.lock").exists());
    assert!(a.release().unwrap());
}

/// A directory's watch outlives its last waiter for a moment (a process contending in a loop
/// reuses it instead of adding and removing it per acquisition): consecutive waits in one
/// directory are all still woken by file-system events, not by the (here 60 s) poll.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_waits_reuse_the_watch_and_are_woken() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("again.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            retry_interval: Duration::from_secs(60),
            fsync: false,
            ..LockOptions::default()
        },
    );
    for round in 0..3 {
        std::fs::write(
            &path,
            format!(
                "pid={}\ntimestamp={}\n",
                std::process::id(),
                now_unix_secs()
            ),
        )
        .unwrap();
        let p2 = path.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            std::fs::remove_file(p2).unwrap();
        });
        let held = lf
            .acquire(
                &AcquireRequest::default(),
                Some(Duration::from_secs(20)),
                CancellationToken::new(),
            )
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        held.release().unwrap();
    }
}

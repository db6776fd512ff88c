//! Shared locks (`SharedLock`): readers share, a writer excludes them, the base's interop
//! layout, and issue 33's defects 1, 4, 5 and 6 with holders written as other processes would
//! (a killed `sleep` stands for a dead holder).
#![cfg(unix)]

use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

fn shared_at(d: &tempfile::TempDir, name: &str) -> (std::path::PathBuf, SharedLock) {
    let (path, lf) = lock_at(d, name, opts());
    (path, SharedLock::new(lf))
}

fn dead_pid() -> i64 {
    let mut child = sleeper();
    let pid = i64::from(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    pid
}

#[test]
fn readers_share_a_writer_excludes_them_and_the_last_reader_removes_the_base() {
    let d = dir();
    let (path, lock) = shared_at(&d, "rw.lock");
    let req = AcquireRequest::default();
    let r1 = lock.try_acquire(Mode::Shared, &req).unwrap();
    let r2 = lock.try_acquire(Mode::Shared, &req).unwrap();
    let base = std::fs::read_to_string(&path).unwrap();
    assert!(base.contains("mode=shared\n"), "{base}");
    assert!(
        base.starts_with(&format!("pid={}\n", std::process::id())),
        "{base}"
    );
    assert!(
        !base.contains("host="),
        "sema and semats judge it by age and pid: {base}"
    );
    let s = lock.status();
    assert_eq!(
        (s.mode, s.holders, s.status.is_stale),
        (Some(Mode::Shared), 2, false)
    );
    // Neither a writer nor the plain mutex takes it.
    assert!(matches!(
        lock.try_acquire(Mode::Exclusive, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    assert!(attempt(&LockFile::new(path.clone(), opts())).is_err());
    r1.release().unwrap();
    assert!(path.exists(), "one reader still holds");
    r2.release().unwrap();
    assert!(!path.exists(), "the last reader removes the base");
    let w = lock.try_acquire(Mode::Exclusive, &req).unwrap();
    assert!(matches!(
        lock.try_acquire(Mode::Shared, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    w.release().unwrap();
    assert_eq!(entries(&d), Vec::<String>::new(), "nothing left behind");
}

/// Issue 33, defect 1: a dead holder of our format (the mutex, or a writer, which holds the
/// path as the mutex does) is reclaimed at once by a reader, and `is_free_for` agrees.
#[test]
fn a_reader_reclaims_a_dead_mutex_or_writer_at_once() {
    let d = dir();
    let (path, lock) = shared_at(&d, "dead-writer.lock");
    std::fs::write(&path, own_host_lock(dead_pid(), now_unix_secs(), None)).unwrap();
    assert!(lock.is_free_for(Mode::Shared));
    let r = lock
        .try_acquire(Mode::Shared, &AcquireRequest::default())
        .expect("the dead holder is reclaimed at once");
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("mode=shared"));
    r.release().unwrap();
}

/// Issue 33, defect 4: a base whose readers all died is taken at once by the plain mutex, and
/// its status says why (stale now, holder-dead).
#[test]
fn the_plain_mutex_takes_a_base_whose_readers_all_died() {
    let d = dir();
    let (path, lock) = shared_at(&d, "dead-readers.lock");
    let pid = dead_pid();
    std::fs::write(
        &path,
        format!("pid={pid}\ntimestamp={}\nmode=shared\n", now_unix_secs()),
    )
    .unwrap();
    let reader = d.path().join("dead-readers.lock.reader-0123456789abcdef");
    std::fs::write(&reader, own_host_lock(pid, now_unix_secs(), None)).unwrap();
    let mutex = LockFile::new(path.clone(), opts());
    let s = mutex.status();
    assert!(s.locked && s.is_stale, "{s:?}");
    let reclaim = s.reclaim.unwrap();
    assert_eq!(reclaim.rule, ReclaimRule::HolderDead);
    assert_eq!(
        reclaim.at_unix_secs.map(|t| t <= now_unix_secs()),
        Some(true)
    );
    assert_eq!(lock.status().holders, 0);
    let held = attempt(&mutex).expect("taken at once, not after the stale timeout");
    held.release().unwrap();
}

/// A live reader keeps the plain mutex out (the base names a pid that died: the group lives).
#[test]
fn the_plain_mutex_waits_for_a_live_reader() {
    let d = dir();
    let (path, lock) = shared_at(&d, "live-reader.lock");
    let r = lock
        .try_acquire(Mode::Shared, &AcquireRequest::default())
        .unwrap();
    // The base names a dead pid (as after its named reader was killed): still held.
    std::fs::write(
        &path,
        format!(
            "pid={}\ntimestamp={}\nmode=shared\n",
            dead_pid(),
            now_unix_secs()
        ),
    )
    .unwrap();
    let mutex = LockFile::new(path.clone(), opts());
    assert!(!mutex.status().is_stale);
    assert!(attempt(&mutex).is_err());
    r.release().unwrap();
    assert!(!path.exists());
}

/// Issue 33, defect 5: an acquire without a deadline never ends in `Timeout`, however long the
/// guard stays busy (a stopped holder of it: here a live process's guard file).
#[tokio::test]
async fn an_acquire_without_deadline_never_times_out() {
    let d = dir();
    let (path, lock) = shared_at(&d, "stopped.lock");
    let mut child = sleeper();
    let guard = d.path().join("stopped.lock.rw-guard");
    std::fs::write(
        &guard,
        own_host_lock(i64::from(child.id()), now_unix_secs(), None),
    )
    .unwrap();
    let req = AcquireRequest::default();
    let waiting = lock.acquire(Mode::Shared, &req, None, CancellationToken::new());
    let r = tokio::time::timeout(Duration::from_millis(600), waiting).await;
    assert!(r.is_err(), "still waiting: {r:?}");
    // With a deadline: Timeout naming the caller's timeout.
    let e = lock
        .acquire(
            Mode::Exclusive,
            &AcquireRequest::default(),
            Some(Duration::from_millis(50)),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Timeout waiting for lock after 50ms");
    child.kill().unwrap();
    child.wait().unwrap();
    // The guard's holder died: reclaimed at once.
    let r = lock
        .acquire(
            Mode::Shared,
            &AcquireRequest::default(),
            Some(Duration::from_secs(5)),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    r.release().unwrap();
    assert!(!path.exists());
}

/// Issue 33, defect 6: a writer that waits keeps newcomer readers out (they queue behind it),
/// and a reader that waits is served before a writer that comes back after it.
#[tokio::test]
async fn waiters_are_served_in_arrival_order_across_kinds() {
    let d = dir();
    let (_, lock) = shared_at(&d, "fair.lock");
    let req = AcquireRequest::default();
    let r1 = lock.try_acquire(Mode::Shared, &req).unwrap();
    // A writer queues behind the reader.
    let l = lock.clone();
    let writer = tokio::spawn(async move {
        l.acquire(
            Mode::Exclusive,
            &AcquireRequest::default(),
            None,
            CancellationToken::new(),
        )
        .await
    });
    // Its ticket is there once it waited once.
    for _ in 0..200 {
        if entries(&d).iter().any(|n| n.contains(".writer-")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        entries(&d).iter().any(|n| n.contains(".writer-")),
        "{:?}",
        entries(&d)
    );
    // A newcomer reader does not join past the waiting writer.
    assert!(matches!(
        lock.try_acquire(Mode::Shared, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    assert!(!lock.is_free_for(Mode::Shared));
    // A reader that queues now is behind the writer, and ahead of any later writer.
    let l = lock.clone();
    let reader = tokio::spawn(async move {
        l.acquire(
            Mode::Shared,
            &AcquireRequest::default(),
            None,
            CancellationToken::new(),
        )
        .await
    });
    for _ in 0..200 {
        if entries(&d).iter().any(|n| n.contains(".rwait-")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    r1.release().unwrap();
    let w = writer.await.unwrap().unwrap();
    // The writer holds; a newcomer writer finds the reader's ticket ahead of it.
    assert!(matches!(
        lock.try_acquire(Mode::Exclusive, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    w.release().unwrap();
    let r = reader.await.unwrap().unwrap();
    assert!(matches!(
        lock.try_acquire(Mode::Exclusive, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    r.release().unwrap();
    assert_eq!(
        entries(&d),
        Vec::<String>::new(),
        "tickets and members all gone"
    );
}

/// A reader's heartbeat keeps the base young (sema and semats judge it by age).
#[test]
fn the_readers_heartbeat_refreshes_the_base() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "beat.lock",
        LockOptions {
            heartbeat: Some(Duration::from_millis(100)),
            ..opts()
        },
    );
    let lock = SharedLock::new(lf);
    let r = lock
        .try_acquire(Mode::Shared, &AcquireRequest::default())
        .unwrap();
    r.start_heartbeat();
    // Age the base by hand; the next beats rewrite it.
    std::fs::write(
        &path,
        format!("pid={}\ntimestamp=1\nmode=shared\n", std::process::id()),
    )
    .unwrap();
    let mut fresh = false;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("timestamp=1\n") {
            fresh = true;
            break;
        }
    }
    assert!(fresh, "the base was refreshed");
    r.release().unwrap();
    assert!(!path.exists());
}

/// A shared base names one reader's pid but belongs to the readers' group: `release(path)`
/// without `force` by that pid (a reader, or another container's process with the same pid)
/// must not remove it under the readers, or a writer is granted beside them (found by the
/// files simulator at seed 295, and checked with real processes in two pid namespaces).
#[test]
fn release_by_path_never_removes_a_shared_base_under_its_readers() {
    let d = dir();
    let (path, lock) = shared_at(&d, "base.lock");
    let req = AcquireRequest::default();
    let reader = lock.try_acquire(Mode::Shared, &req).unwrap();
    let by_path = LockFile::new(path.clone(), opts());
    let r = by_path.release_as(current_pid(), false);
    assert!(
        matches!(r, Err(LockError::PermissionDenied { .. })),
        "{r:?}"
    );
    assert!(path.exists(), "the readers' base stays");
    assert!(matches!(
        lock.try_acquire(Mode::Exclusive, &req),
        Err(LockError::AlreadyLocked { .. })
    ));
    reader.release().unwrap();
    assert!(!path.exists());
}

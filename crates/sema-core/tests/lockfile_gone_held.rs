//! A lock of this process whose file went (removed by a user, a test's cleanup or a cleaner;
//! replaced by another process) does not keep its path refused inside this process: the next
//! acquire looks at the file, finds the lock lost, tells its owner, and takes the path. The
//! heartbeat is off throughout, so nothing but that look can find the loss.
#![cfg(unix)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

fn no_heartbeat() -> LockOptions {
    LockOptions {
        heartbeat: None,
        ..opts()
    }
}

/// semats' suite's sequence: `tryAcquire`, `unlink`, three times: true, true, true (it was
/// true, false, false: the first lock's in-process turn refused the path until a heartbeat).
#[test]
fn try_acquire_after_the_file_was_removed_takes_the_path() {
    let d = dir();
    let (path, lf) = lock_at(&d, "gone.lock", no_heartbeat());
    let mut earlier: Vec<HeldLock> = Vec::new();
    for round in 0..3 {
        let held = lf
            .try_acquire(&tagged("round"))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        std::fs::remove_file(&path).unwrap();
        for old in &earlier {
            assert!(
                !old.is_held(),
                "round {round}: an earlier lock is no longer held"
            );
        }
        earlier.push(held);
    }
    // The last one has not been looked at yet: still held until something looks.
    let last = earlier.pop().unwrap();
    assert!(last.is_held());
    for old in &earlier {
        assert_eq!(old.lost_reason().as_deref(), Some("lock file was removed"));
        assert!(!old.release().unwrap(), "a lost lock releases nothing");
    }
    let again = lf.try_acquire(&tagged("again")).unwrap();
    assert_eq!(last.lost_reason().as_deref(), Some("lock file was removed"));
    assert!(again.release().unwrap());
}

/// The loss is told to the owner's hook (the one loss channel), with the reason; a lock whose
/// file is still ours keeps refusing the path and loses nothing.
#[test]
fn the_owner_hears_the_loss_and_a_lock_still_on_disk_keeps_refusing() {
    let d = dir();
    let (path, lf) = lock_at(&d, "told.lock", no_heartbeat());
    let owner = 7301;
    let seen: Arc<Mutex<Vec<(u64, HeldEnd)>>> = Arc::default();
    let sink = seen.clone();
    set_loss_hook(
        owner,
        Some(Box::new(move |id, how: &HeldEnd| {
            sink.lock().unwrap().push((id, how.clone()))
        })),
    );
    let held = lf.try_acquire(&tagged("first")).unwrap();
    held.set_owner(owner);

    // Still on disk: refused, with this process as the holder, and nothing lost.
    match lf.try_acquire(&tagged("second")) {
        Err(LockError::AlreadyLocked { holder }) => {
            assert_eq!(holder.is_current_process, Some(true));
        }
        other => panic!("refused while on disk: {other:?}"),
    }
    assert!(held.is_held());
    assert!(seen.lock().unwrap().is_empty());

    // Replaced by another file (another process's, say): ours is lost, the new file is not
    // ours, so the path stays busy on disk.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "pid=1\ntimestamp=1\n").unwrap();
    let refused = lf.try_acquire(&tagged("third"));
    assert!(
        matches!(refused, Err(LockError::AlreadyLocked { .. })),
        "{refused:?}"
    );
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("lock file was replaced")
    );
    let told: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| *id == held.id())
        .cloned()
        .collect();
    assert_eq!(
        told,
        vec![(held.id(), HeldEnd::Lost("lock file was replaced".into()))]
    );
    set_loss_hook(owner, None);
}

/// `acquire` (a zero timeout: one attempt) behind a lock of this process whose file was
/// removed takes the path at once, instead of `Timeout` behind the in-process turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_after_the_file_was_removed_takes_the_path() {
    let d = dir();
    let (path, lf) = lock_at(&d, "wait.lock", no_heartbeat());
    let first = lf.try_acquire(&tagged("first")).unwrap();
    std::fs::remove_file(&path).unwrap();
    let second = lf
        .acquire(
            &tagged("second"),
            Some(Duration::ZERO),
            CancellationToken::new(),
        )
        .await
        .expect("the removed lock's turn is free");
    assert_eq!(
        first.lost_reason().as_deref(),
        Some("lock file was removed")
    );
    std::fs::remove_file(&path).unwrap();
    let third = lf
        .acquire(
            &tagged("third"),
            Some(Duration::from_secs(5)),
            CancellationToken::new(),
        )
        .await
        .expect("the removed lock's turn is free");
    assert!(!second.is_held());
    assert!(third.release().unwrap());
}

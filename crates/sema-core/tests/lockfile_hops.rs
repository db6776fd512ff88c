//! Thread hops of a waiter (issue 24): what a waiter's wake-ups send off its tokio worker. Its
//! own test binary, because the count it reads is process-wide.
#![cfg(unix)]

use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

/// The count is process-wide: the tests of this binary take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A waiter on a busy lock of a local disk, fsync on, polled every 5 ms: every poll looks at the
/// holder's file on the worker itself. Only the first attempt (which builds and syncs this
/// waiter's file) leaves the worker; before, every look did (one `block_in_place` hand-off each:
/// ~40 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_busy_look_stays_on_the_worker() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // The target directory: on the disk wherever the build is (a tmpfs /tmp would make every
    // attempt inline and prove nothing).
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = d.path().join("hops.lock");
    write_live_holder(&path);
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            retry_interval: Duration::from_millis(5),
            fsync: true,
            ..LockOptions::default()
        },
    );
    if lf.attempts_are_short() {
        eprintln!("skipped: the target directory is on a memory file system");
        return;
    }
    let before = blocking_attempt_count();
    let r = lf
        .acquire(
            &tagged("waiter"),
            Some(Duration::from_millis(200)),
            CancellationToken::new(),
        )
        .await;
    let hops = blocking_attempt_count() - before;
    assert!(matches!(r, Err(LockError::Timeout { .. })), "{r:?}");
    assert!(
        hops <= 1,
        "{hops} attempts left the worker while the holder held"
    );
    // The holder's file is untouched, and the waiter left nothing behind.
    assert_eq!(entries(&d), vec!["hops.lock".to_string()]);
}

/// The hand-off to a waiter whose file was prepared and synced while it slept (issue 24): the
/// link is made on the worker, only the directory's sync leaves it, and the line is left on the
/// way. One hop for the first attempt (it builds and syncs while the holder holds) and one for
/// the hand-off's sync; the waiter holds the lock with its own content, and releases cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_hand_off_links_on_the_worker_and_syncs_off_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = d.path().join("handoff.lock");
    write_live_holder(&path);
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            // Only the release's event can wake the waiter in time.
            retry_interval: Duration::from_secs(60),
            fsync: true,
            ..LockOptions::default()
        },
    );
    if lf.attempts_are_short() {
        eprintln!("skipped: the target directory is on a memory file system");
        return;
    }
    let before = blocking_attempt_count();
    remove_after(&path, Duration::from_millis(200));
    let held = lf
        .acquire(
            &tagged("waiter"),
            Some(Duration::from_secs(20)),
            CancellationToken::new(),
        )
        .await
        .expect("the waiter gets the lock when the holder lets go");
    let hops = blocking_attempt_count() - before;
    assert_eq!(hops, 2, "first attempt + the hand-off's sync");
    let content = std::fs::read_to_string(&path).unwrap();
    assert!(content.contains("tag=waiter"), "{content}");
    assert!(held.release().unwrap());
    assert_eq!(entries(&d), Vec::<String>::new());
}

//! Thread hops of a waiter (issue 24): what a waiter's wake-ups send off its tokio worker. Its
//! own test binary, because the count it reads is process-wide.
#![cfg(unix)]

use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

/// A waiter on a busy lock of a local disk, fsync on, polled every 5 ms: every poll looks at the
/// holder's file on the worker itself. Only the first attempt (which builds and syncs this
/// waiter's file) leaves the worker; before, every look did (one `block_in_place` hand-off each:
/// ~40 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_busy_look_stays_on_the_worker() {
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

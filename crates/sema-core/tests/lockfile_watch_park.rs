//! The inotify watch of a lock's directory between waits (issue 24): parked, not removed, so the
//! reader thread is not woken by an `IN_IGNORED` event after every wait. Its own test binary,
//! because the counts it reads are process-wide.
#![cfg(target_os = "linux")]

use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

/// Five waits in one directory, each woken by the holder's file going away (a 60 s poll: only
/// the event can wake it). By the time the fifth waiter is woken, the reader has read every
/// event queued before (one inotify queue, read in order): none was an `IN_IGNORED`. Before,
/// the end of each wait queued one (5 read here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_watch_is_parked_between_waits() {
    let d = dir();
    let (path, lf) = lock_at(&d, "park.lock", events_only());
    let before = ignored_event_count();
    for round in 0..5 {
        write_live_holder(&path);
        let waiter = {
            let lf = lf.clone();
            tokio::spawn(async move {
                lf.acquire(
                    &tagged("waiter"),
                    Some(Duration::from_secs(20)),
                    CancellationToken::new(),
                )
                .await
            })
        };
        // The waiter watches the directory once it found the file held.
        while watched_directory_count() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        std::fs::remove_file(&path).unwrap();
        let held = waiter
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(held.release().unwrap());
    }
    assert_eq!(ignored_event_count() - before, 0);
    assert!(entries(&d).is_empty());
}

//! `release_all_held` releases every lock of the process, so it lives in its own test binary
//! (tests in one binary run in parallel threads of one process).

use std::path::PathBuf;

use sema_core::lockfile::*;

mod common;
use common::*;

#[test]
fn release_all_held_releases_ours_and_keeps_other_owners() {
    let d = dir();
    let a = lockfile(&d, "all-a.lock");
    let b = lockfile(&d, "all-b.lock");
    let c = lockfile(&d, "all-c.lock");
    let ha = attempt(&a).unwrap();
    let hb = attempt(&b).unwrap();
    // Recorded for another owner (the CLI's --pid: the calling shell), here our parent process.
    let parent = std::os::unix::process::parent_id();
    let hc = c
        .try_acquire(&AcquireRequest {
            tag: None,
            owner_pid: Some(parent),
        })
        .unwrap();
    let mine: Vec<PathBuf> = held_locks().iter().map(|h| h.path()).collect();
    assert!(mine.contains(&ha.path()) && mine.contains(&hb.path()) && mine.contains(&hc.path()));
    release_all_held();
    assert!(ha.is_released() && hb.is_released());
    assert!(!a.path().exists() && !b.path().exists());
    // The other owner's lock outlives us, with its pid on disk.
    assert!(!hc.is_released() && c.path().exists());
    assert_eq!(c.status().info.map(|i| i.pid), Some(i64::from(parent)));
    assert!(hc.release().unwrap());
}

//! "Mine" by token and host identity (containers sharing a lock directory), the pid alone only
//! for files without identity; lock files naming pid ≤ 0 are never a live holder. Real files;
//! the other pid namespace is a `host=` that differs from ours in its pid-namespace part (the
//! real namespaces are exercised by `__test__/file-pidns.test.js`).

use std::time::Duration;

use sema_core::lockfile::process::own_start_ticks;
use sema_core::lockfile::*;

mod common;
use common::*;

/// Our host identity as another pid namespace of this machine sees it (its last component, the
/// pid-namespace inode, differs; on systems without one, another host altogether).
fn other_namespace() -> String {
    format!("{}0", host_identity())
}

/// A lock in our format written by the process `pid` of another pid namespace of this machine.
fn other_namespace_lock(pid: i64) -> String {
    LockInfo {
        heartbeat_ms: None,
        pid,
        timestamp: now_unix_secs(),
        tag: Some("container".into()),
        host: Some(other_namespace()),
        start: own_start_ticks(),
        token: Some("11111111111111111111111111111111".into()),
    }
    .serialize()
}

#[test]
fn our_pid_in_another_pid_namespace_is_not_ours() {
    let d = dir();
    let lf = lockfile(&d, "ns.lock");
    let content = other_namespace_lock(current_pid());
    std::fs::write(lf.path(), &content).unwrap();

    let status = lf.status();
    assert!(status.locked && !status.is_stale);
    assert!(!status.is_owned_by_current_process);
    let info = status.info.expect("parses");
    assert!(!lf.is_mine(&info, current_pid()));

    let err = lf.release_as(current_pid(), false).unwrap_err();
    assert_eq!(err.kind(), "PERMISSION_DENIED");
    assert_eq!(err.holder_pid(), Some(current_pid()));
    assert_eq!(std::fs::read_to_string(lf.path()).unwrap(), content);
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    assert_eq!(std::fs::read_to_string(lf.path()).unwrap(), content);

    // force is the only way, as before.
    lf.release_as(current_pid(), true).unwrap();
    assert!(!lf.path().exists());
}

#[test]
fn a_pid_claimed_for_another_process_must_be_of_this_namespace() {
    // The CLI's `release --pid N`: a lock recorded for N in another namespace is not N's here.
    let d = dir();
    let lf = lockfile(&d, "claim.lock");
    let content = other_namespace_lock(1);
    std::fs::write(lf.path(), &content).unwrap();
    assert_eq!(
        lf.release_as(1, false).unwrap_err().kind(),
        "PERMISSION_DENIED"
    );
    assert_eq!(std::fs::read_to_string(lf.path()).unwrap(), content);

    // The same lock recorded for pid 1 of this namespace (as `acquire --pid 1` writes it) is.
    let held = lf
        .try_acquire(&AcquireRequest {
            tag: None,
            owner_pid: Some(1),
        })
        .unwrap_err();
    assert_eq!(held.kind(), "ALREADY_LOCKED");
    std::fs::remove_file(lf.path()).unwrap();
    let ours = lf
        .try_acquire(&AcquireRequest {
            tag: None,
            owner_pid: Some(1),
        })
        .unwrap();
    let on_disk = lf.status().info.expect("parses");
    assert!(lf.is_mine(&on_disk, 1));
    assert!(!lf.is_mine(&on_disk, 2));
    lf.release_as(1, false).unwrap();
    assert!(ours.is_released());
}

#[test]
fn our_host_and_pid_with_another_start_time_is_a_previous_process() {
    // The pid was reused: the lock's recorded start differs from this process's.
    let Some(start) = own_start_ticks() else {
        return; // no start times on this system: nothing to contradict
    };
    let d = dir();
    let lf = lockfile(&d, "reused.lock");
    std::fs::write(
        lf.path(),
        own_host_lock(current_pid(), now_unix_secs(), Some(start + 1)),
    )
    .unwrap();
    assert!(!lf.status().is_owned_by_current_process);
    // Same identity, same start, token not held here: a lock recorded for this process.
    std::fs::write(
        lf.path(),
        own_host_lock(current_pid(), now_unix_secs(), Some(start)),
    )
    .unwrap();
    assert!(lf.status().is_owned_by_current_process);
    lf.release_as(current_pid(), false).unwrap();
    assert!(!lf.path().exists());
}

#[test]
fn files_without_identity_keep_the_pid_rule() {
    let d = dir();
    let lf = lockfile(&d, "semats.lock");
    let content = write_live_holder(lf.path());
    assert!(lf.status().is_owned_by_current_process);
    std::fs::write(lf.path(), "pid=1\ntimestamp=1\n").unwrap();
    assert!(!lf.status().is_owned_by_current_process);
    assert_eq!(
        lf.release_as(current_pid(), false).unwrap_err().kind(),
        "PERMISSION_DENIED"
    );
    std::fs::write(lf.path(), &content).unwrap();
    lf.release_as(current_pid(), false).unwrap();
    assert!(!lf.path().exists());
}

#[test]
fn a_held_lock_is_ours_through_its_token() {
    let d = dir();
    let lf = lockfile(&d, "held.lock");
    let held = attempt(&lf).unwrap();
    assert!(lf.status().is_owned_by_current_process);
    lf.release_as(current_pid(), false).unwrap();
    assert!(held.is_released());
}

#[test]
fn pid_zero_or_below_is_never_a_live_holder() {
    let d = dir();
    for pid in ["0", "-1"] {
        let (path, lf) = lock_at(
            &d,
            &format!("pid{pid}.lock"),
            LockOptions {
                stale_timeout: Some(Duration::from_secs(60)),
                ..LockOptions::default()
            },
        );
        // An old file naming that pid (semats writes `-1` as read; sema's reader refuses it).
        std::fs::write(&path, format!("pid={pid}\ntimestamp=1\n")).unwrap();
        let status = lf.status();
        assert!(status.is_stale, "pid={pid}, 1970: stale");
        assert!(!status.is_owned_by_current_process);
        let held = attempt(&lf).expect("a stale pid <= 0 lock is taken over");
        assert_eq!(held.info().pid, current_pid());
        held.release().unwrap();

        // A fresh one is held (by the age rule, as any foreign file), and nobody's.
        std::fs::write(&path, format!("pid={pid}\ntimestamp={}\n", now_unix_secs())).unwrap();
        let status = lf.status();
        assert!(!status.is_stale && !status.is_owned_by_current_process);
        assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
        assert_eq!(
            lf.release_as(current_pid(), false).unwrap_err().kind(),
            "PERMISSION_DENIED"
        );
        // The same in our own format with our host (tampered: no process is pid <= 0).
        std::fs::write(&path, own_host_lock(pid.parse().unwrap(), 1, None)).unwrap();
        assert!(lf.status().is_stale, "own host, pid={pid}, 1970: stale");
        attempt(&lf).unwrap().release().unwrap();
    }
}

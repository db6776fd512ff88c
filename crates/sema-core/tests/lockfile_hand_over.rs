//! `HeldLock::hand_over`: a held lock recorded as another live process's (what `sema-native run` does on Windows,
//! where no descriptor can carry the lock to its command), on real files with a real child process.
#![cfg(unix)]

use std::process::Command;

use sema_core::lockfile::*;

#[test]
fn the_child_becomes_the_recorded_holder_and_the_token_stays() {
    let d = tempfile::tempdir().unwrap();
    let path = validate_lock_path(d.path().join("h.lock").to_str().unwrap()).unwrap();
    let lf = LockFile::new(path.clone(), LockOptions::default());
    let held = lf.try_acquire(&AcquireRequest::default()).unwrap();
    let before = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(before.pid, current_pid());

    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = i64::from(child.id());
    assert!(held.hand_over(pid).unwrap());
    let after = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(after.pid, pid, "the file names the child");
    assert_eq!(after.start, process_start_ticks(pid), "with its start time");
    assert_eq!(
        after.token, before.token,
        "the token (release, ownership) is unchanged"
    );
    assert_eq!(after.host, before.host);
    // What the heartbeat rewrites is the child's record, and the lock is still ours on disk.
    assert_eq!(held.current_info().pid, pid);
    assert!(held.is_on_disk());
    // Judged held, by a reader that does not share our process's state.
    let status = LockFile::new(path.clone(), LockOptions::default()).status();
    assert!(status.locked && !status.is_stale, "{status:?}");

    // A process that is gone is never recorded: nothing is written.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!held.hand_over(pid).unwrap());
    assert!(!held.hand_over(0).unwrap());
    assert_eq!(
        parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap(),
        after
    );
    assert!(held.release().unwrap());
    assert!(!path.exists());
    // Released: no longer ours to hand over.
    assert!(!held.hand_over(current_pid()).unwrap());
}

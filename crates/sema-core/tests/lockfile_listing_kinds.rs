//! The listing of a directory with the lock kinds' internal files: each lock once, under its
//! base name, its members folded in; a file that only has a member's name is nobody's member.
#![cfg(unix)]

use sema_core::lockfile::*;

mod common;
use common::*;

fn names(locks: &[ListedLock]) -> Vec<&str> {
    locks.iter().map(|l| l.name.as_str()).collect()
}

#[test]
fn members_fold_into_their_base_and_lookalikes_are_ignored() {
    let d = dir();
    let me = i64::from(std::process::id());
    let now = now_unix_secs();
    // A semaphore whose slot 0 (the base) is free while slot 1 is held by a live process.
    std::fs::write(
        d.path().join("s.lock.slot-1-of-2"),
        own_host_lock(me, now, None),
    )
    .unwrap();
    // A shared lock: the base names a live reader; two readers, one of them dead; the guard.
    std::fs::write(
        d.path().join("rw.lock"),
        format!("pid={me}\ntimestamp={now}\nmode=shared\n"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("rw.lock.reader-aa"),
        own_host_lock(me, now, None),
    )
    .unwrap();
    std::fs::write(
        d.path().join("rw.lock.reader-bb"),
        own_host_lock(999_999_999, now, None),
    )
    .unwrap();
    std::fs::write(
        d.path().join("rw.lock.rw-guard"),
        own_host_lock(me, now, None),
    )
    .unwrap();
    // Names like members whose content is no lock: nobody's members, no lock listed for them.
    std::fs::write(d.path().join("notes.reader-ab"), "hello\n").unwrap();
    std::fs::write(d.path().join("x.lock.slot-1-of-2"), "").unwrap();

    let locks = list_locks(d.path(), &LockOptions::default()).unwrap();
    assert_eq!(names(&locks), ["rw.lock", "s.lock"]);
    let (rw, s) = (&locks[0], &locks[1]);
    assert_eq!(
        (rw.kind, rw.holders, rw.state),
        ("shared", Some(1), ListedState::Held)
    );
    assert_eq!(
        (s.kind, s.holders, s.limit),
        ("semaphore", Some(1), Some(2))
    );
    assert_eq!(
        (s.state, s.reason, s.pid),
        (ListedState::Held, "member-held", Some(me))
    );
    assert_eq!(s.path, d.path().canonicalize().unwrap().join("s.lock"));

    // The waiting line's look at one path folds the same way.
    let one = describe_lock(&d.path().join("rw.lock"), &LockOptions::default()).unwrap();
    assert_eq!((one.kind, one.holders), ("shared", Some(1)));
}

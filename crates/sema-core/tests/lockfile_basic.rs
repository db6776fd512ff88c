//! Acquire / release / format / foreign files / ownership, on real files in temp dirs.

use std::time::Duration;

use sema_core::lockfile::*;

mod common;
use common::*;

#[test]
fn acquire_release_idempotent() {
    let d = dir();
    let lf = lockfile(&d, "a.lock");
    let held = attempt(&lf).unwrap();
    assert!(lf.path().exists());
    assert_eq!(entries(&d), vec!["a.lock".to_string()]);
    assert!(held.is_held());
    assert!(held.release().unwrap());
    assert!(!lf.path().exists());
    assert!(!held.release().unwrap());
    assert!(held.is_released());
    assert!(held_locks().iter().all(|h| h.path() != held.path()));
    // and again
    let again = attempt(&lf).unwrap();
    assert!(again.release().unwrap());
    assert!(entries(&d).is_empty());
}

#[test]
fn already_locked_carries_holder() {
    let d = dir();
    let lf = lockfile(&d, "a.lock");
    let held = attempt(&lf).unwrap();
    // Same process, second LockFile for the same path: in-process slot busy.
    let other = lockfile(&d, "a.lock");
    let err = attempt(&other).unwrap_err();
    assert_eq!(err.kind(), "ALREADY_LOCKED");
    assert_eq!(err.to_string(), "Lock already held");
    assert_eq!(err.holder_pid(), Some(i64::from(std::process::id())));
    assert_eq!(err.locked_since(), Some(held.info().timestamp));
    held.release().unwrap();

    // A foreign live holder (this process's parent pid is alive; use our own pid).
    let now = now_unix_secs();
    std::fs::write(
        lf.path(),
        format!("pid={}\ntimestamp={now}\n", std::process::id()),
    )
    .unwrap();
    let err = attempt(&other).unwrap_err();
    assert_eq!(err.holder_pid(), Some(i64::from(std::process::id())));
    assert_eq!(err.locked_since(), Some(now));
}

#[test]
fn file_format_bytes_exact() {
    let d = dir();
    let lf = lockfile(&d, "fmt.lock");
    let held = lf.try_acquire(&tagged("build\n#1\t\u{7f}x")).unwrap();
    let bytes = std::fs::read_to_string(lf.path()).unwrap();
    let info = held.info();
    let mut expected = format!(
        "pid={}\ntimestamp={}\ntag=build #1  x\nhost={}\n",
        std::process::id(),
        info.timestamp,
        host_identity()
    );
    if let Some(start) = info.start {
        expected.push_str(&format!("start={start}\n"));
    }
    expected.push_str(&format!("token={}\n", held.token()));
    assert_eq!(bytes, expected);
    assert_eq!(held.token().len(), 32);
    assert!(held
        .token()
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    #[cfg(target_os = "linux")]
    assert!(info.start.is_some());
    assert!((info.timestamp - now_unix_secs()).abs() <= 2);
    // readable by semats' parser
    let parsed = parse_lock_info(&bytes).unwrap();
    assert_eq!(parsed, info);
    held.release().unwrap();

    // empty tag writes `tag=`; no tag writes none
    let held = lf
        .try_acquire(&AcquireRequest {
            tag: Some(String::new()),
            owner_pid: None,
        })
        .unwrap();
    assert!(std::fs::read_to_string(lf.path())
        .unwrap()
        .contains("\ntag=\n"));
    held.release().unwrap();
    let held = attempt(&lf).unwrap();
    assert!(!std::fs::read_to_string(lf.path()).unwrap().contains("tag="));
    held.release().unwrap();
}

#[test]
fn tag_is_cut_to_max_length() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "cut.lock",
        LockOptions {
            max_tag_length: Some(3),
            ..LockOptions::default()
        },
    );
    let held = lf.try_acquire(&tagged("ab😀cd")).unwrap();
    assert_eq!(held.info().tag.as_deref(), Some("ab\u{FFFD}"));
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("\ntag=ab\u{FFFD}\n"));
    held.release().unwrap();
}

#[test]
fn owner_pid_is_recorded() {
    let d = dir();
    let lf = lockfile(&d, "owner.lock");
    let held = lf
        .try_acquire(&AcquireRequest {
            tag: None,
            owner_pid: Some(1),
        })
        .unwrap();
    assert_eq!(held.info().pid, 1);
    let text = std::fs::read_to_string(lf.path()).unwrap();
    assert!(text.starts_with("pid=1\n"));
    // Not ours by pid: release_as_process without force is refused, release_as(1) works.
    let err = lf
        .release_as(sema_core::lockfile::current_pid(), false)
        .unwrap_err();
    assert_eq!(err.kind(), "PERMISSION_DENIED");
    assert_eq!(err.to_string(), "Lock held by different process (PID 1)");
    lf.release_as(1, false).unwrap();
    assert!(!lf.path().exists());
    assert!(!held.is_held());
}

#[test]
fn foreign_files_are_read() {
    let d = dir();
    let lf = lockfile(&d, "foreign.lock");
    let pid = std::process::id();
    // A timestamp after this process started: an older one with our pid would (rightly) be
    // judged a reused pid.
    let ts = now_unix_secs();
    for content in [
        format!("pid={pid}\ntimestamp={ts}\ntag=shell\n"),
        format!("pid={pid}\r\ntimestamp={ts}\r\ntag=shell\r\n"),
        format!("\u{FEFF}pid={pid}\ntimestamp={ts}\ntag=shell\n"),
        format!("timestamp={ts}\nextra=1\npid={pid}\ntag=shell"),
    ] {
        std::fs::write(lf.path(), &content).unwrap();
        let status = lf.status();
        assert!(status.locked);
        let info = status.info.clone().expect("parses");
        assert_eq!((info.pid, info.timestamp), (i64::from(pid), ts));
        assert_eq!(info.tag.as_deref(), Some("shell"));
        assert!(status.is_owned_by_current_process);
        assert!(!status.is_stale, "our pid is alive");
        let err = attempt(&lf).unwrap_err();
        assert_eq!(err.holder_pid(), Some(i64::from(pid)));
    }
    std::fs::remove_file(lf.path()).unwrap();
    let status = lf.status();
    assert!(!status.locked && status.info.is_none() && !status.is_stale);
    assert!(matches!(lf.observe(), Observation::Missing));
}

#[test]
fn release_never_deletes_a_replaced_file() {
    let d = dir();
    let lf = lockfile(&d, "r.lock");
    let held = attempt(&lf).unwrap();
    // Someone breaks it and puts their own lock there.
    std::fs::remove_file(lf.path()).unwrap();
    std::fs::write(lf.path(), "pid=1\ntimestamp=1\n").unwrap();
    assert!(!held.release().unwrap());
    assert_eq!(
        std::fs::read_to_string(lf.path()).unwrap(),
        "pid=1\ntimestamp=1\n"
    );
    assert!(held.lost().is_cancelled());
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("lock file was replaced")
    );

    // Overwritten in place (same inode, other content): not deleted either.
    std::fs::remove_file(lf.path()).unwrap();
    let held = attempt(&lf).unwrap();
    std::fs::write(lf.path(), "pid=1\ntimestamp=1\n").unwrap();
    assert!(!held.release().unwrap());
    assert!(lf.path().exists());
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("lock file was overwritten")
    );
    std::fs::remove_file(lf.path()).unwrap();

    // Removed: nothing to delete.
    let held = attempt(&lf).unwrap();
    std::fs::remove_file(lf.path()).unwrap();
    assert!(!held.release().unwrap());
    assert_eq!(held.lost_reason().as_deref(), Some("lock file was removed"));
    // The in-process slot is free again.
    let again = attempt(&lf).unwrap();
    again.release().unwrap();
}

#[test]
fn release_as_process_semantics() {
    let d = dir();
    let lf = lockfile(&d, "p.lock");
    assert_eq!(
        lf.release_as(sema_core::lockfile::current_pid(), false)
            .unwrap_err()
            .kind(),
        "NOT_LOCKED"
    );
    std::fs::write(lf.path(), "pid=99999\ntimestamp=1\n").unwrap();
    let err = lf
        .release_as(sema_core::lockfile::current_pid(), false)
        .unwrap_err();
    assert_eq!(err.kind(), "PERMISSION_DENIED");
    assert_eq!(err.holder_pid(), Some(99999));
    lf.release_as(sema_core::lockfile::current_pid(), true)
        .unwrap();
    assert!(!lf.path().exists());
    // Our pid: released without force.
    std::fs::write(
        lf.path(),
        format!("pid={}\ntimestamp=1\n", std::process::id()),
    )
    .unwrap();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    // A fresh garbage file: deleted without force, as semats does (release_young_unparseable).
    std::fs::write(lf.path(), "garbage").unwrap();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(!lf.path().exists());
    // Held through a HeldLock: released properly (slot freed, registry left).
    let held = attempt(&lf).unwrap();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(held.is_released());
    assert!(!lf.path().exists());
    let again = attempt(&lf).unwrap();
    again.release().unwrap();
}

#[test]
fn old_garbage_is_deleted_by_plain_release() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "g.lock",
        LockOptions {
            pending_write_grace: Duration::ZERO,
            ..LockOptions::default()
        },
    );
    std::fs::write(&path, "garbage").unwrap();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(!path.exists());
}

#[test]
fn fallback_creation_strategies_leave_no_temp_files() {
    for strategy in [CreationStrategy::NamedTemp, CreationStrategy::Direct] {
        let d = dir();
        let path = d.path().join("fb.lock");
        let lf =
            LockFile::new(path.clone(), LockOptions::default()).with_creation_strategy(strategy);
        let held = lf.try_acquire(&tagged("fb")).unwrap();
        assert_eq!(entries(&d), vec!["fb.lock".to_string()], "{strategy:?}");
        let parsed = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(parsed, held.info());
        // held: a second attempt fails and leaves nothing behind
        let lf2 =
            LockFile::new(path.clone(), LockOptions::default()).with_creation_strategy(strategy);
        std::thread::spawn(move || {
            // another thread, same process: slot busy
            assert_eq!(attempt(&lf2).unwrap_err().kind(), "ALREADY_LOCKED");
        })
        .join()
        .unwrap();
        assert_eq!(entries(&d), vec!["fb.lock".to_string()]);
        assert!(held.release().unwrap());
        assert!(entries(&d).is_empty());
        // a foreign lock present: EEXIST path, nothing left behind
        write_live_holder(&path);
        assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
        assert_eq!(entries(&d), vec!["fb.lock".to_string()]);
    }
}

#[test]
fn fsync_off_works_too() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "nofsync.lock",
        LockOptions {
            fsync: false,
            ..LockOptions::default()
        },
    );
    let held = attempt(&lf).unwrap();
    assert!(path.exists());
    assert!(held.release().unwrap());
}

#[test]
fn plain_format_writes_exactly_what_semats_writes() {
    let d = dir();
    let path = d.path().join("plain.lock");
    let lf = LockFile::new(path.clone(), LockOptions::default()).with_extra_keys(false);
    let held = lf.try_acquire(&tagged("x")).unwrap();
    let ts = held.info().timestamp;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("pid={}\ntimestamp={ts}\ntag=x\n", std::process::id())
    );
    assert!(held.is_on_disk());
    assert!(lf.status().is_owned_by_current_process);
    // release_as_process finds it through the registry and releases it properly
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(held.is_released());
    assert!(!path.exists());
    // overwritten in place with other content: never deleted by release
    let held = attempt(&lf).unwrap();
    std::fs::write(&path, "pid=1\ntimestamp=1\n").unwrap();
    assert!(!held.release().unwrap());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "pid=1\ntimestamp=1\n"
    );
}

#[test]
fn semats_exact_switches() {
    let d = dir();
    let path = d.path().join("sw.lock");
    // The defaults are semats' rules.
    let semats_like = LockFile::new(
        path.clone(),
        LockOptions {
            stale_timeout: Some(Duration::from_secs(1)),
            ..LockOptions::default()
        },
    );
    let strict = LockFile::new(
        path.clone(),
        LockOptions {
            stale_timeout: Some(Duration::from_secs(1)),
            foreign_start_check: true,
            release_young_unparseable: false,
            ..LockOptions::default()
        },
    );
    // semats' own test: `pid=<live pid>`, `timestamp=0` is a live holder's lock.
    std::fs::write(&path, format!("pid={}\ntimestamp=0\n", std::process::id())).unwrap();
    assert!(!semats_like.status().is_stale);
    assert!(!semats_like.clean_stale().unwrap());
    assert_eq!(attempt(&semats_like).unwrap_err().kind(), "ALREADY_LOCKED");
    // ... which the opt-in start-time check judges a reused pid.
    assert!(strict.status().is_stale);
    // semats deletes a fresh garbage lock without force; the strict switch refuses it.
    std::fs::write(&path, "garbage").unwrap();
    let err = strict
        .release_as(sema_core::lockfile::current_pid(), false)
        .unwrap_err();
    assert_eq!(err.kind(), "PERMISSION_DENIED");
    assert_eq!(err.holder_pid(), None);
    semats_like
        .release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(!path.exists());
}

#[test]
fn read_cap_boundaries() {
    let d = dir();
    let lf = lockfile(&d, "cap.lock");
    let head = format!(
        "pid={}\ntimestamp={}\n",
        std::process::id(),
        now_unix_secs()
    );
    for size in [
        head.len(),
        4095,
        4096,
        4097,
        8192,
        MAX_LOCK_FILE_BYTES,
        MAX_LOCK_FILE_BYTES + 1,
    ] {
        let mut content = head.clone().into_bytes();
        content.resize(size, b'x'); // a last line without '=' is ignored
        std::fs::write(lf.path(), &content).unwrap();
        let parsed = matches!(lf.observe(), Observation::Parsed { .. });
        assert_eq!(parsed, size <= MAX_LOCK_FILE_BYTES, "size {size}");
    }
}

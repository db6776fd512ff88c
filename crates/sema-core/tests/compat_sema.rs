//! `sema_core::compat::sema` against the `sema` crate's documented behaviour: the cases of sema
//! 0.1.0's own tests (src/lib.rs `mod tests` and tests/integration.rs, vendored in
//! shared/vendor/sema-0.1.0) that bear on the library, ported to the compat module, then the
//! documented differences (reclaim at once, the guard releasing only its own lock, symlinks and
//! `..` refused).
#![cfg(unix)]

use std::error::Error;
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use sema_core::compat::sema::{
    LockInfo, Semaphore, SemaphoreConfig, SemaphoreError, SemaphoreResult,
};

mod common;
use common::*;

fn lock_path(d: &tempfile::TempDir, name: &str) -> PathBuf {
    d.path().join(format!("{name}.lock"))
}

// ─── sema's src/lib.rs tests ───

#[test]
fn create_and_invalid_paths() {
    let d = dir();
    assert!(Semaphore::with_defaults(lock_path(&d, "create")).is_ok());
    assert!(matches!(
        Semaphore::with_defaults(""),
        Err(SemaphoreError::InvalidPath(_))
    ));
    match Semaphore::with_defaults(d.path().join("missing").join("x.lock")) {
        Err(SemaphoreError::InvalidPath(m)) => {
            assert_eq!(
                m,
                format!(
                    "parent directory does not exist: {}",
                    d.path().join("missing").display()
                )
            )
        }
        other => panic!("{other:?}"),
    }
    let path = lock_path(&d, "path");
    assert_eq!(
        Semaphore::with_defaults(&path).unwrap().path(),
        path.as_path()
    );
}

#[test]
fn try_acquire_and_release_by_guard() {
    let d = dir();
    let sem = Semaphore::with_defaults(lock_path(&d, "acquire-release")).unwrap();
    assert!(!sem.is_locked());
    let guard = sem.try_acquire().unwrap();
    assert!(sem.is_locked());
    drop(guard);
    assert!(!sem.is_locked());
    for i in 0..5 {
        let guard = sem
            .try_acquire()
            .unwrap_or_else(|e| panic!("iteration {i}: {e}"));
        assert!(sem.is_locked());
        drop(guard);
        assert!(!sem.is_locked());
    }
}

#[test]
fn double_acquire_fails_with_the_holder() {
    let d = dir();
    let path = lock_path(&d, "double");
    let sem1 = Semaphore::with_defaults(&path).unwrap();
    let sem2 = Semaphore::with_defaults(&path).unwrap();
    let _guard = sem1.try_acquire().unwrap();
    let refused = sem2.try_acquire();
    match refused {
        Err(SemaphoreError::AlreadyLocked {
            holder_pid,
            locked_since,
        }) => {
            assert_eq!(holder_pid, Some(std::process::id()));
            assert!(locked_since.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lock_info_of_a_held_lock() {
    let d = dir();
    let sem = Semaphore::with_defaults(lock_path(&d, "info")).unwrap();
    assert!(sem.lock_info().is_none());
    {
        let _guard = sem.try_acquire().unwrap();
        let info = sem.lock_info().unwrap();
        assert_eq!(info.pid, std::process::id());
        assert!(info.timestamp > 0);
        assert!(info.tag.is_none());
    }
    for tag in [
        "test-operation",
        "",
        "tag with spaces & special=chars!",
        "日本語 🚀",
        &"x".repeat(1000),
    ] {
        let _guard = sem.try_acquire_with_info(LockInfo::with_tag(tag)).unwrap();
        assert_eq!(sem.lock_info().unwrap().tag.as_deref(), Some(tag));
    }
}

#[test]
fn lock_info_parse_and_serialize() {
    let info = LockInfo::parse("pid=12345\ntimestamp=1234567890\ntag=my-tag\n").unwrap();
    assert_eq!(
        (info.pid, info.timestamp, info.tag.as_deref()),
        (12345, 1234567890, Some("my-tag"))
    );
    assert!(LockInfo::parse("timestamp=1234567890\n").is_err());
    let extra = LockInfo::parse("pid=12345\ntimestamp=1234567890\ntag=test\nfuture=x\n").unwrap();
    assert_eq!(extra.tag.as_deref(), Some("test"));
    let spaced = LockInfo::parse("\n\n  pid=12345  \n\n timestamp=1234567890 \n").unwrap();
    assert_eq!((spaced.pid, spaced.timestamp), (12345, 1234567890));
    match LockInfo::parse("pid=1\n") {
        Err(SemaphoreError::ParseError(m)) => assert_eq!(m, "missing timestamp"),
        other => panic!("{other:?}"),
    }
    match LockInfo::parse("") {
        Err(SemaphoreError::ParseError(m)) => assert_eq!(m, "missing pid"),
        other => panic!("{other:?}"),
    }
    let s = LockInfo {
        pid: 12345,
        timestamp: 1234567890,
        tag: Some("test".into()),
    }
    .serialize();
    assert_eq!(s, "pid=12345\ntimestamp=1234567890\ntag=test\n");
}

#[test]
fn a_tag_cannot_inject_lines() {
    for evil in ["mytag\npid=99999\ntimestamp=0", "mytag\rpid=99999"] {
        let info = LockInfo {
            tag: Some(evil.into()),
            ..LockInfo::new()
        };
        let s = info.serialize();
        assert_eq!(
            s.lines().filter(|l| l.starts_with("pid=")).count(),
            1,
            "{s:?}"
        );
        let parsed = LockInfo::parse(&s).unwrap();
        assert_eq!(parsed.pid, info.pid);
        assert!(parsed.tag.unwrap().contains("mytag"));
    }
}

#[test]
fn staleness_defaults_and_errors() {
    assert!(LockInfo {
        pid: 12345,
        timestamp: 0,
        tag: None
    }
    .is_stale(Duration::from_secs(1)));
    assert!(!LockInfo::new().is_stale(Duration::from_secs(3600)));
    let d = LockInfo::default();
    assert_eq!(d.pid, std::process::id());
    let config = SemaphoreConfig::default();
    assert_eq!(config.stale_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(config.retry_interval, Duration::from_millis(100));
    assert!(config.acquire_timeout.is_none());
    let held = SemaphoreError::AlreadyLocked {
        holder_pid: Some(12345),
        locked_since: Some(1234567890),
    };
    assert_eq!(
        held.to_string(),
        "Lock already held by PID 12345 since 1234567890"
    );
    assert_eq!(
        SemaphoreError::Timeout.to_string(),
        "Timeout waiting for lock"
    );
    assert_eq!(SemaphoreError::NotLocked.to_string(), "Lock not held");
    assert_eq!(
        SemaphoreError::InvalidPath("x".into()).to_string(),
        "Invalid path: x"
    );
    assert_eq!(
        SemaphoreError::ParseError("x".into()).to_string(),
        "Parse error: x"
    );
    let io: SemaphoreError = std::io::Error::other("boom").into();
    assert!(io.source().is_some());
    assert!(held.source().is_none());
    fn returns_result() -> SemaphoreResult<()> {
        Ok(())
    }
    assert!(returns_result().is_ok());
}

#[test]
fn force_release_removes_anyones_lock() {
    let d = dir();
    let path = lock_path(&d, "force");
    let sem1 = Semaphore::with_defaults(&path).unwrap();
    let _guard = sem1.try_acquire().unwrap();
    Semaphore::with_defaults(&path)
        .unwrap()
        .force_release()
        .unwrap();
    assert!(!sem1.is_locked());
    // Nothing there: still Ok.
    Semaphore::with_defaults(&path)
        .unwrap()
        .force_release()
        .unwrap();
    // Another tool's lock.
    fs::write(&path, "pid=1\ntimestamp=1\n").unwrap();
    Semaphore::with_defaults(&path)
        .unwrap()
        .force_release()
        .unwrap();
    assert!(!path.exists());
}

#[test]
fn acquire_timeout_and_acquire_after_a_release() {
    let d = dir();
    let path = lock_path(&d, "timeout");
    let sem = Semaphore::with_defaults(&path).unwrap();
    let guard = sem.try_acquire().unwrap();
    let sem2 = Semaphore::with_defaults(&path).unwrap();
    let start = Instant::now();
    assert!(matches!(
        sem2.acquire_timeout(Duration::from_millis(200)),
        Err(SemaphoreError::Timeout)
    ));
    assert!(start.elapsed() >= Duration::from_millis(150));
    let zero = SemaphoreConfig {
        acquire_timeout: Some(Duration::ZERO),
        ..Default::default()
    };
    assert!(matches!(
        Semaphore::new(&path, zero).unwrap().acquire(),
        Err(SemaphoreError::Timeout)
    ));
    drop(guard);
    assert!(sem2.acquire_timeout(Duration::from_millis(200)).is_ok());
}

// ─── sema's tests/integration.rs ───

#[test]
fn threads_of_one_process_race_one_winner() {
    let d = dir();
    let path = lock_path(&d, "concurrent-same");
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (barrier, path) = (barrier.clone(), path.clone());
            thread::spawn(move || {
                let sem = Semaphore::with_defaults(&path).unwrap();
                barrier.wait();
                let won = match sem.try_acquire() {
                    Ok(_guard) => {
                        thread::sleep(Duration::from_millis(50));
                        true
                    }
                    Err(SemaphoreError::AlreadyLocked { .. }) => false,
                    Err(e) => panic!("{e:?}"),
                };
                won
            })
        })
        .collect();
    let won = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&w| w)
        .count();
    assert_eq!(won, 1);
}

#[test]
fn acquire_waits_for_a_release() {
    let d = dir();
    let path = lock_path(&d, "wait");
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder_path = path.clone();
    let holder = thread::spawn(move || {
        let sem = Semaphore::with_defaults(&holder_path).unwrap();
        let _guard = sem.try_acquire().unwrap();
        held_tx.send(()).unwrap();
        thread::sleep(Duration::from_millis(100));
    });
    held_rx.recv().unwrap();
    let config = SemaphoreConfig {
        acquire_timeout: Some(Duration::from_secs(5)),
        retry_interval: Duration::from_millis(10),
        ..Default::default()
    };
    let sem2 = Semaphore::new(&path, config).unwrap();
    assert!(sem2.acquire().is_ok(), "acquired after the holder let go");
    holder.join().unwrap();
}

#[test]
fn stale_lock_recovery_and_no_stale_detection() {
    let d = dir();
    let path = lock_path(&d, "stale");
    let old = LockInfo {
        pid: 99999,
        timestamp: 0,
        tag: Some("stale-test".into()),
    };
    fs::write(&path, old.serialize()).unwrap();
    let never = SemaphoreConfig {
        stale_timeout: None,
        ..Default::default()
    };
    assert!(
        Semaphore::new(&path, never).unwrap().try_acquire().is_err(),
        "no stale detection: never broken"
    );
    let short = SemaphoreConfig {
        stale_timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    assert!(
        Semaphore::new(&path, short).unwrap().try_acquire().is_ok(),
        "a stale lock is broken"
    );
}

#[test]
fn lock_info_persists_and_files_are_separate() {
    let d = dir();
    let (p1, p2) = (lock_path(&d, "one"), lock_path(&d, "two"));
    let s1 = Semaphore::with_defaults(&p1).unwrap();
    let s2 = Semaphore::with_defaults(&p2).unwrap();
    let _g1 = s1
        .try_acquire_with_info(LockInfo::with_tag("persistent"))
        .unwrap();
    let _g2 = s2.try_acquire().unwrap();
    let info = LockInfo::parse(&fs::read_to_string(&p1).unwrap()).unwrap();
    assert_eq!(info.tag.as_deref(), Some("persistent"));
    assert_eq!(info.pid, std::process::id());
}

#[test]
fn tampered_and_long_contents_are_handled() {
    let d = dir();
    let path = lock_path(&d, "tamper");
    fs::write(&path, "pid=abc\ntimestamp=xyz\n").unwrap();
    let sem = Semaphore::with_defaults(&path).unwrap();
    assert!(sem.lock_info().is_none());
    assert!(sem.is_locked());
    fs::write(
        &path,
        format!("pid=1\ntimestamp=1\ntag={}\n", "x".repeat(100_000)),
    )
    .unwrap();
    let _ = sem.lock_info(); // no panic
    let huge = SemaphoreConfig {
        stale_timeout: Some(Duration::from_secs(u64::MAX)),
        ..Default::default()
    };
    let _ = Semaphore::new(lock_path(&d, "overflow"), huge)
        .unwrap()
        .try_acquire()
        .unwrap();
}

// ─── documented differences ───

/// `sema` waits `stale_timeout` (1 h) for the lock of a holder that died; ours, of this host, is
/// reclaimed at once.
#[test]
fn a_dead_holder_of_this_host_is_reclaimed_at_once() {
    let d = dir();
    let path = lock_path(&d, "dead");
    let mut child = sleeper();
    let pid = i64::from(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    fs::write(
        &path,
        own_host_lock(pid, sema_core::lockfile::now_unix_secs(), None),
    )
    .unwrap();
    let sem = Semaphore::with_defaults(&path).unwrap();
    let _guard = sem
        .try_acquire()
        .expect("the dead holder's lock is taken at once");
    assert_eq!(sem.lock_info().unwrap().pid, std::process::id());
}

/// `sema`'s guard removes whatever is at the path when it drops; ours only its own lock.
#[test]
fn the_guard_releases_only_its_own_lock() {
    let d = dir();
    let path = lock_path(&d, "own");
    let sem = Semaphore::with_defaults(&path).unwrap();
    let guard = sem.try_acquire().unwrap();
    sem.force_release().unwrap();
    let other = "pid=1\ntimestamp=99999999999\n";
    fs::write(&path, other).unwrap();
    drop(guard);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        other,
        "another's lock is left alone"
    );
}

/// `sema` writes through a symlink at the lock path, and accepts `..`; both are refused here.
#[test]
fn symlinks_and_parent_segments_are_refused() {
    let d = dir();
    let target = d.path().join("target");
    let link = lock_path(&d, "link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let sem = Semaphore::with_defaults(&link).unwrap();
    assert!(sem.is_locked(), "a symlink is something at the path");
    assert!(sem.try_acquire().is_err());
    assert!(!target.exists(), "never written through");
    let dotdot = d.path().join("sub").join("..").join("x.lock");
    fs::create_dir(d.path().join("sub")).unwrap();
    assert!(matches!(
        Semaphore::with_defaults(dotdot),
        Err(SemaphoreError::InvalidPath(_))
    ));
}

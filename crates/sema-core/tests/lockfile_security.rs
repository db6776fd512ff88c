//! Hostile lock directories: a symlink planted at the lock path, and a reader who holds a shared
//! `flock` on a dead holder's lock file. (The same as another user, with real processes and the
//! CLI, is in `__test__/file-security.test.js`.)
#![cfg(target_os = "linux")]

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

/// A temp directory and its canonical path.
fn canonical_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = dir();
    let canonical = std::fs::canonicalize(d.path()).unwrap();
    (d, canonical)
}

/// A victim file of some age (`age` seconds old) and what it looks like now.
fn victim(path: &std::path::Path, age: u64) -> (Vec<u8>, i64, u64) {
    std::fs::write(path, b"secret\n").unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(age))
        .unwrap();
    let m = std::fs::metadata(path).unwrap();
    (std::fs::read(path).unwrap(), m.mtime(), m.ino())
}

fn untouched(path: &std::path::Path, before: &(Vec<u8>, i64, u64)) {
    let m = std::fs::metadata(path).expect("victim still there");
    assert_eq!(
        (std::fs::read(path).unwrap(), m.mtime(), m.ino()),
        before.clone(),
        "{path:?} was touched"
    );
}

fn short() -> LockOptions {
    LockOptions {
        stale_timeout: Some(Duration::from_secs(1)),
        retry_interval: Duration::from_millis(10),
        ..LockOptions::default()
    }
}

/// Every operation refuses a symlink at the lock path with `INVALID_PATH` naming it, never acts
/// on its target (fresh, older than the stale timeout, or dangling), and leaves the link alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_at_the_lock_path_is_refused_by_every_operation() {
    let (_d, dir) = canonical_dir();
    let fresh = dir.join("fresh-victim");
    let old = dir.join("old-victim");
    let nowhere = dir.join("nowhere");
    let before_fresh = victim(&fresh, 0);
    let before_old = victim(&old, 7200);
    for (name, target) in [("a.lock", &fresh), ("b.lock", &old), ("c.lock", &nowhere)] {
        let link = dir.join(name);
        std::os::unix::fs::symlink(target, &link).unwrap();
        // Both constructors keep the link's own path (never its target).
        let s = link.to_str().unwrap();
        assert_eq!(validate_lock_path(s).unwrap(), link);
        assert_eq!(validate_semats_path(s).unwrap(), link);
        let lf = LockFile::new(link.clone(), short());
        let refused = |e: LockError| {
            assert_eq!(e.kind(), "INVALID_PATH", "{name}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{e}");
            assert!(e.to_string().contains(name), "{e}");
        };
        refused(attempt(&lf).unwrap_err());
        refused(
            acquire_within(&lf, Duration::from_millis(300))
                .await
                .unwrap_err(),
        );
        refused(
            lf.release_as(sema_core::lockfile::current_pid(), false)
                .unwrap_err(),
        );
        refused(
            lf.release_as(sema_core::lockfile::current_pid(), true)
                .unwrap_err(),
        );
        refused(lf.clean_stale().unwrap_err());
        refused(
            lf.wait_until_free(Some(Duration::from_millis(100)), CancellationToken::new())
                .await
                .unwrap_err(),
        );
        assert_eq!(lf.observe(), Observation::Symlink);
        let st = lf.status();
        assert!(st.locked && !st.is_stale && st.info.is_none(), "{st:?}");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
    untouched(&fresh, &before_fresh);
    untouched(&old, &before_old);
    assert!(!nowhere.exists(), "a dangling link's target was created");
}

/// A symlinked parent directory is resolved (only the last component is never followed).
#[test]
fn symlinked_parent_directory_is_resolved() {
    let (_d, dir) = canonical_dir();
    std::fs::create_dir(dir.join("real")).unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("alias")).unwrap();
    let p = validate_lock_path(dir.join("alias/x.lock").to_str().unwrap()).unwrap();
    assert_eq!(p, dir.join("real/x.lock"));
    let held = LockFile::new(p, short())
        .try_acquire(&AcquireRequest::default())
        .unwrap();
    assert!(dir.join("real/x.lock").exists());
    assert!(held.release().unwrap());
}

/// A dead holder's lock (our format, this host) on which a reader holds a shared `flock`: the
/// reader's lock must not keep it from being reclaimed, by `try_acquire`, `acquire` and
/// `clean_stale` alike, and `status` says stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_shared_flock_does_not_keep_a_dead_holders_lock() {
    let (_d, dir) = canonical_dir();
    let path = dir.join("dead.lock");
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        i64::from(pid)
    };
    let content = LockInfo {
        heartbeat_ms: None,
        pid: dead,
        timestamp: now_unix_secs(),
        tag: None,
        host: Some(host_identity().to_string()),
        start: Some(1),
        token: Some("0".repeat(32)),
    }
    .serialize();
    let lf = LockFile::new(path.clone(), LockOptions::default());
    for round in 0..3 {
        std::fs::write(&path, &content).unwrap();
        let reader = std::fs::File::open(&path).unwrap();
        // SAFETY: a valid descriptor owned by `reader`, which outlives the call.
        let rc = unsafe {
            libc::flock(
                std::os::unix::io::AsRawFd::as_raw_fd(&reader),
                libc::LOCK_SH,
            )
        };
        assert_eq!(rc, 0);
        assert!(lf.status().is_stale);
        match round {
            0 => assert!(attempt(&lf).unwrap().release().unwrap()),
            1 => assert!(acquire_within(&lf, Duration::from_secs(5))
                .await
                .unwrap()
                .release()
                .unwrap()),
            _ => assert!(lf.clean_stale().unwrap()),
        }
        assert!(!path.exists());
        drop(reader);
    }
}

/// A live holder is still protected by its presence mark when its recorded pid is dead (a child
/// that inherited its descriptor holds it): nobody breaks it, and `wait` keeps waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inherited_holder_descriptor_keeps_the_lock() {
    let (_d, dir) = canonical_dir();
    let path = dir.join("inherited.lock");
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        i64::from(pid)
    };
    let held = LockFile::new(path.clone(), LockOptions::default())
        .try_acquire(&AcquireRequest {
            tag: None,
            owner_pid: Some(u32::try_from(dead).unwrap()),
        })
        .unwrap();
    let other = LockFile::new(path.clone(), LockOptions::default());
    let e = other
        .try_acquire_bypassing_queue(&AcquireRequest::default())
        .unwrap_err();
    assert_eq!(e.kind(), "ALREADY_LOCKED");
    assert!(!other.clean_stale().unwrap());
    assert!(!other.status().is_stale);
    let waited = other
        .wait_until_free(Some(Duration::from_millis(200)), CancellationToken::new())
        .await;
    assert_eq!(waited.unwrap_err().kind(), "TIMEOUT");
    assert!(held.release().unwrap());
}

/// A tag that would make the lock file larger than readers accept (1 MiB) is refused with
/// `INVALID_ARGUMENT` before anything is created, by every entry point; nothing is left behind.
/// (Before, the lock was created and then `release()` could not read its own file back: it
/// returned false and the file stayed until it went stale.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_over_the_read_limit_is_refused_and_leaves_nothing() {
    let (d, dir) = canonical_dir();
    let path = dir.join("big.lock");
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            max_tag_length: Some(4 * MAX_LOCK_FILE_BYTES),
            ..LockOptions::default()
        },
    );
    let req = AcquireRequest {
        tag: Some("x".repeat(MAX_LOCK_FILE_BYTES + 1)),
        owner_pid: None,
    };
    let check = |e: LockError| {
        assert_eq!(e.kind(), "INVALID_ARGUMENT", "{e}");
        assert!(
            e.to_string().starts_with("tag: 1048577 UTF-16 units"),
            "{e}"
        );
    };
    check(lf.try_acquire(&req).unwrap_err());
    check(
        lf.acquire(&req, Some(Duration::from_secs(1)), CancellationToken::new())
            .await
            .unwrap_err(),
    );
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    // The largest tag that fits is accepted, and released.
    let fits = AcquireRequest {
        tag: Some("x".repeat(MAX_LOCK_FILE_BYTES - 1024)),
        owner_pid: None,
    };
    let held = lf.try_acquire(&fits).unwrap();
    assert!(held.release().unwrap());
    assert!(!path.exists());
}

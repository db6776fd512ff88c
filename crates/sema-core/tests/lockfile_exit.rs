//! `release_all_held` releases every lock of the process, so it lives in its own test binary
//! (tests in one binary run in parallel threads of one process).

use std::path::PathBuf;

use sema_core::lockfile::*;

fn lockfile(d: &tempfile::TempDir, name: &str) -> LockFile {
    let path = validate_lock_path(d.path().join(name).to_str().unwrap()).unwrap();
    LockFile::new(path, LockOptions::default())
}

#[test]
fn release_all_held_releases_everything() {
    let d = tempfile::tempdir().unwrap();
    let a = lockfile(&d, "all-a.lock");
    let b = lockfile(&d, "all-b.lock");
    let ha = a.try_acquire(&AcquireRequest::default()).unwrap();
    let hb = b.try_acquire(&AcquireRequest::default()).unwrap();
    let mine: Vec<PathBuf> = held_locks().iter().map(|h| h.path()).collect();
    assert!(mine.contains(&ha.path()) && mine.contains(&hb.path()));
    release_all_held();
    assert!(ha.is_released() && hb.is_released());
    assert!(!a.path().exists() && !b.path().exists());
}

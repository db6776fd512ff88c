//! What the lock-file test files share: temp directories and their listing, lock files with
//! test options, holder files written as another process would, and the waits every test makes;
//! what the dflockd test files share is in [`dflockd`].
//! Each test file is its own crate and uses a part of this module: the rest is dead code there.
#![allow(dead_code)]

pub mod dflockd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

pub fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The names in `d`, sorted (a lock file, and no temp file left behind).
pub fn entries(d: &tempfile::TempDir) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The lock `name` in `d`, through the path check every caller makes, with the default options.
pub fn lockfile(d: &tempfile::TempDir, name: &str) -> LockFile {
    let path = validate_lock_path(d.path().join(name).to_str().unwrap()).unwrap();
    LockFile::new(path, LockOptions::default())
}

/// The default options with a 20 ms poll, so that a waiter without a file-system event is quick.
pub fn opts() -> LockOptions {
    LockOptions {
        retry_interval: Duration::from_millis(20),
        ..LockOptions::default()
    }
}

/// Options under which only a file-system event can wake a waiter in time (a 60 s poll).
pub fn events_only() -> LockOptions {
    LockOptions {
        retry_interval: Duration::from_secs(60),
        fsync: false,
        ..LockOptions::default()
    }
}

/// A request with this tag, written by this process.
pub fn tagged(tag: &str) -> AcquireRequest {
    AcquireRequest {
        tag: Some(tag.into()),
        owner_pid: None,
    }
}

/// A live process to stand for a holder (killed by the test).
pub fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

/// A lock file as one of our own processes (pid `pid`, this host) would have written it.
pub fn own_host_lock(pid: i64, timestamp: i64, start: Option<u64>) -> String {
    LockInfo {
        heartbeat_ms: None,
        pid,
        timestamp,
        tag: None,
        host: Some(host_identity().to_string()),
        start,
        token: Some("00000000000000000000000000000000".into()),
    }
    .serialize()
}

/// Writes a live foreign holder at `path` (our own pid, a fresh timestamp: never stale) and
/// returns its content.
pub fn write_live_holder(path: &Path) -> String {
    let content = format!(
        "pid={}\ntimestamp={}\n",
        std::process::id(),
        now_unix_secs()
    );
    std::fs::write(path, &content).unwrap();
    content
}

/// Removes `path` after `after`, as a holder that lets go would.
pub fn remove_after(path: &Path, after: Duration) {
    let path: PathBuf = path.to_path_buf();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        std::fs::remove_file(path).unwrap();
    });
}

/// `lf.acquire` with the default request, waiting at most `timeout`, never cancelled.
pub async fn acquire_within(lf: &LockFile, timeout: Duration) -> Result<HeldLock, LockError> {
    lf.acquire(
        &AcquireRequest::default(),
        Some(timeout),
        CancellationToken::new(),
    )
    .await
}

/// One attempt with the default request.
pub fn attempt(lf: &LockFile) -> Result<HeldLock, LockError> {
    lf.try_acquire(&AcquireRequest::default())
}

/// Waits (at most 5 s) until `held` is found lost.
pub async fn until_lost(held: &HeldLock) {
    tokio::time::timeout(Duration::from_secs(5), held.lost().cancelled())
        .await
        .expect("loss detected");
}

/// The lock `name` in `d` with these options, and its path.
pub fn lock_at(d: &tempfile::TempDir, name: &str, options: LockOptions) -> (PathBuf, LockFile) {
    let path = d.path().join(name);
    (path.clone(), LockFile::new(path, options))
}

//! One process of a contention test, in Rust on the core crate's public API: it takes a lock
//! `iterations` times and, while holding it, does what `__test__/helpers/file-mutex-worker.js`
//! does in Node (the same barrier, critical section and result line), so Rust and Node processes
//! can hammer one lock together (`__test__/file-rust-core.test.js`).
//!
//! ```text
//! lock_worker <kind> <lockPath> <markerPath> <counterPath> <iterations>
//! ```
//!
//! `kind`: `mutex` ([`LockFile`], the engine's own API), `sema-compat`
//! ([`sema_core::compat::sema::Semaphore`], the `sema` crate's names), or `none` (no lock: the
//! harness's self-check, whose detector must see overlaps or lost increments). The lock kinds still in
//! JavaScript (a counting semaphore, a shared lock) get a [`Kind`] each once the core has them:
//! [`Kind::parse`] names the kinds, [`Kind::take`] takes one and returns what releases it.
//!
//! Barrier: prints `ready`, waits for a line on stdin. Critical section: `O_EXCL` create of the
//! marker (already there = another holder inside = an overlap), the lock file must be ours
//! (`pid=` ours), the counter file read, incremented and written, the marker removed. Prints one
//! line `result {"acquired","overlaps","failedReleases","wrongOwner","errors"}` and exits 0.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sema_core::compat::sema::{Semaphore, SemaphoreConfig};
use sema_core::lockfile::{validate_lock_path, AcquireRequest, LockFile, LockOptions};
use tokio_util::sync::CancellationToken;

/// How long one acquisition may wait before it counts as an error.
const WAIT: Duration = Duration::from_secs(60);

/// A lock kind this worker can take.
enum Kind {
    /// The core's mutex ([`LockFile::acquire`]).
    Mutex(LockFile),
    /// The `sema` crate's names over the core ([`Semaphore::acquire_timeout`]).
    SemaCompat(Semaphore),
    /// No lock at all (the self-check).
    Unlocked,
}

/// What ends one holding: `Ok(true)` released, `Ok(false)` it was no longer ours.
type Release<'a> = Box<dyn FnOnce() -> Result<bool, String> + 'a>;

impl Kind {
    fn parse(kind: &str, path: &Path) -> Result<Kind, String> {
        let text = path.to_str().ok_or("the lock path is not UTF-8")?;
        match kind {
            "mutex" => {
                let path = validate_lock_path(text).map_err(|e| e.to_string())?;
                Ok(Kind::Mutex(LockFile::new_canonical(
                    path,
                    LockOptions::default(),
                )))
            }
            "sema-compat" => Semaphore::new(path, SemaphoreConfig::default())
                .map(Kind::SemaCompat)
                .map_err(|e| e.to_string()),
            "none" => Ok(Kind::Unlocked),
            other => Err(format!("unknown kind {other:?} (mutex, sema-compat, none)")),
        }
    }

    /// Takes the lock (waiting at most [`WAIT`]) and returns what releases it.
    fn take<'a>(&'a self, runtime: &tokio::runtime::Runtime) -> Result<Release<'a>, String> {
        match self {
            Kind::Mutex(file) => {
                let req = AcquireRequest::default();
                let held = runtime
                    .block_on(file.acquire(&req, Some(WAIT), CancellationToken::new()))
                    .map_err(|e| e.to_string())?;
                held.start_heartbeat();
                Ok(Box::new(move || held.release().map_err(|e| e.to_string())))
            }
            Kind::SemaCompat(semaphore) => {
                let guard = semaphore.acquire_timeout(WAIT).map_err(|e| e.to_string())?;
                Ok(Box::new(move || {
                    drop(guard);
                    Ok(true)
                }))
            }
            Kind::Unlocked => Ok(Box::new(|| Ok(true))),
        }
    }
}

#[derive(Default)]
struct Stats {
    acquired: u64,
    overlaps: u64,
    failed_releases: u64,
    wrong_owner: u64,
    errors: Vec<String>,
}

fn critical(lock: &Path, marker: &Path, counter: &Path, stats: &mut Stats) -> io::Result<()> {
    let inside = match OpenOptions::new().write(true).create_new(true).open(marker) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            stats.overlaps += 1;
            None
        }
        Err(e) => return Err(e),
    };
    let text = fs::read_to_string(lock).unwrap_or_default();
    if !text.starts_with(&format!("pid={}\n", std::process::id())) {
        stats.wrong_owner += 1;
    }
    let count: u64 = fs::read_to_string(counter)?.trim().parse().unwrap_or(0);
    fs::write(counter, (count + 1).to_string())?;
    if let Some(file) = inside {
        drop(file);
        fs::remove_file(marker)?;
    }
    Ok(())
}

fn run() -> Result<Stats, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, lock, marker, counter, iterations] = args.as_slice() else {
        return Err(
            "usage: lock_worker <kind> <lockPath> <markerPath> <counterPath> <iterations>".into(),
        );
    };
    let (lock, marker, counter) = (
        PathBuf::from(lock),
        PathBuf::from(marker),
        PathBuf::from(counter),
    );
    let iterations: u64 = iterations.parse().map_err(|_| "iterations: a count")?;
    let kind = Kind::parse(kind, &lock)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    println!("ready");
    let mut go = String::new();
    io::stdin()
        .lock()
        .read_line(&mut go)
        .map_err(|e| e.to_string())?;
    let mut stats = Stats::default();
    for _ in 0..iterations {
        let release = match kind.take(&runtime) {
            Ok(r) => r,
            Err(e) => {
                stats.errors.push(e);
                if stats.errors.len() > 5 {
                    break;
                }
                continue;
            }
        };
        stats.acquired += 1;
        if let Err(e) = critical(&lock, &marker, &counter, &mut stats) {
            stats.errors.push(e.to_string());
        }
        if release() != Ok(true) {
            stats.failed_releases += 1;
        }
    }
    Ok(stats)
}

fn main() {
    match run() {
        Ok(s) => {
            let result = serde_json::json!({
                "acquired": s.acquired,
                "overlaps": s.overlaps,
                "failedReleases": s.failed_releases,
                "wrongOwner": s.wrong_owner,
                "errors": s.errors,
            });
            println!("result {result}");
        }
        Err(e) => {
            eprintln!("lock_worker: {e}");
            std::process::exit(2);
        }
    }
}

//! One process of a contention test, in Rust on the core crate's public API: it takes a lock
//! `iterations` times and, while holding it, does what `__test__/helpers/file-mutex-worker.js`
//! (the mutex kinds) or `__test__/helpers/file-kinds-worker.js` (the other kinds) does in Node
//! (the same barrier, critical section and result line), so Rust and Node processes can hammer
//! one lock together (`__test__/file-rust-core.test.js`).
//!
//! ```text
//! lock_worker <kind> <lockPath> <markerPath> <counterPath> <iterations>
//! ```
//!
//! `kind`: `mutex` ([`LockFile`], the engine's own API), `sema-compat`
//! ([`sema_core::compat::sema::Semaphore`], the `sema` crate's names), `none` (no lock: the
//! harness's self-check, whose detector must see overlaps or lost increments); and with a
//! directory of marks at `markerPath`: `limit:<N>` ([`Semaphore`], N slots), `shared` /
//! `exclusive` ([`SharedLock`] in that mode), `mixed` (each round shared or exclusive, seeded by
//! the pid: 3 in 10 exclusive), `unlocked-exclusive` (the marks' self-check: an exclusive
//! holder's critical section with no lock).
//!
//! Barrier: prints `ready`, waits for a line on stdin. Critical section of the mutex kinds:
//! `O_EXCL` create of the marker (already there = another holder inside = an overlap), the lock
//! file must be ours (`pid=` ours), the counter file read, incremented and written, the marker
//! removed. Of the other kinds: a mark `<s|e|n>-<pid>-<round>` made in the marks directory after
//! the grant and removed before the release (the marks are a subset of the holders at every
//! instant), then the directory listed: more than N marks (a slot holder), any other mark (an
//! exclusive holder) or an `e-` mark (a shared holder) is an overlap; an exclusive holder also
//! increments the counter (exact = the exclusive rounds of every process), and a holder that saw
//! another (allowed) mark counts `together` (the test's proof that holders did overlap where
//! they may). Prints one line `result {"acquired","overlaps","failedReleases","wrongOwner",
//! "exclusive","together","errors"}` and exits 0.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, ErrorKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sema_core::compat::sema::{Semaphore, SemaphoreConfig};
use sema_core::lockfile::{
    validate_lock_path, AcquireRequest, HeldLock, LockFile, LockOptions, Mode, Semaphore as Slots,
    SharedLock,
};
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
    /// The core's counting semaphore ([`Slots::acquire`]).
    Limit(Slots),
    /// The core's shared lock ([`SharedLock::acquire`]), in one mode or (`None`) a seeded mix.
    Shared(SharedLock, Option<Mode>),
    /// The marks' critical section of an exclusive holder, with no lock (the self-check).
    UnlockedExclusive,
}

/// What ends one holding: `Ok(true)` released, `Ok(false)` it was no longer ours.
type Release<'a> = Box<dyn FnOnce() -> Result<bool, String> + 'a>;

/// How a holder of one round may share the critical section.
#[derive(Clone, Copy)]
enum Share {
    /// With nobody (the mutex kinds' marker and `pid=` check).
    Mutex,
    /// With nobody, judged by the marks.
    Alone,
    /// With other shared holders.
    Readers,
    /// With at most N - 1 others.
    Slots(u64),
}

impl Kind {
    fn parse(kind: &str, path: &Path) -> Result<Kind, String> {
        let text = path.to_str().ok_or("the lock path is not UTF-8")?;
        let file = || -> Result<LockFile, String> {
            let path = validate_lock_path(text).map_err(|e| e.to_string())?;
            Ok(LockFile::new_canonical(path, LockOptions::default()))
        };
        match kind {
            "mutex" => Ok(Kind::Mutex(file()?)),
            "sema-compat" => Semaphore::new(path, SemaphoreConfig::default())
                .map(Kind::SemaCompat)
                .map_err(|e| e.to_string()),
            "none" => Ok(Kind::Unlocked),
            "shared" => Ok(Kind::Shared(SharedLock::new(file()?), Some(Mode::Shared))),
            "exclusive" => Ok(Kind::Shared(
                SharedLock::new(file()?),
                Some(Mode::Exclusive),
            )),
            "mixed" => Ok(Kind::Shared(SharedLock::new(file()?), None)),
            "unlocked-exclusive" => Ok(Kind::UnlockedExclusive),
            other => match other.strip_prefix("limit:").map(str::parse::<u64>) {
                Some(Ok(limit)) => Slots::new(file()?, limit)
                    .map(Kind::Limit)
                    .map_err(|e| e.to_string()),
                _ => Err(format!(
                    "unknown kind {other:?} (mutex, sema-compat, none, limit:<N>, shared, \
                     exclusive, mixed, unlocked-exclusive)"
                )),
            },
        }
    }

    /// Takes the lock for one round (waiting at most [`WAIT`]): how the round may share the
    /// critical section, and what releases it.
    fn take<'a>(
        &'a self,
        runtime: &tokio::runtime::Runtime,
        rng: &mut u64,
    ) -> Result<(Share, Release<'a>), String> {
        let req = AcquireRequest::default();
        let held = |r: Result<HeldLock, _>| -> Result<Release<'a>, String> {
            let held = r.map_err(|e: sema_core::lockfile::LockError| e.to_string())?;
            held.start_heartbeat();
            Ok(Box::new(move || held.release().map_err(|e| e.to_string())))
        };
        let cancel = CancellationToken::new;
        match self {
            Kind::Mutex(file) => Ok((
                Share::Mutex,
                held(runtime.block_on(file.acquire(&req, Some(WAIT), cancel())))?,
            )),
            Kind::SemaCompat(semaphore) => {
                let guard = semaphore.acquire_timeout(WAIT).map_err(|e| e.to_string())?;
                Ok((
                    Share::Mutex,
                    Box::new(move || {
                        drop(guard);
                        Ok(true)
                    }),
                ))
            }
            Kind::Unlocked => Ok((Share::Mutex, Box::new(|| Ok(true)))),
            Kind::UnlockedExclusive => Ok((Share::Alone, Box::new(|| Ok(true)))),
            Kind::Limit(slots) => Ok((
                Share::Slots(slots.limit()),
                held(runtime.block_on(slots.acquire(&req, Some(WAIT), cancel())))?,
            )),
            Kind::Shared(lock, mode) => {
                let mode = mode.unwrap_or_else(|| {
                    if next(rng) % 10 < 3 {
                        Mode::Exclusive
                    } else {
                        Mode::Shared
                    }
                });
                let share = match mode {
                    Mode::Shared => Share::Readers,
                    Mode::Exclusive => Share::Alone,
                };
                let r = runtime.block_on(lock.acquire(mode, &req, Some(WAIT), cancel()));
                Ok((share, held(r)?))
            }
        }
    }
}

/// A step of a 64-bit LCG (Knuth's MMIX constants): the mix and the hold times, seeded by the pid.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

#[derive(Default)]
struct Stats {
    acquired: u64,
    overlaps: u64,
    failed_releases: u64,
    wrong_owner: u64,
    exclusive: u64,
    together: u64,
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

/// The critical section of the kinds judged by marks (see the module docs). `round`: names the
/// mark; `rng`: the hold time (work while held, up to 300 µs, so that holders that may
/// overlap do).
fn critical_marks(
    share: Share,
    marks: &Path,
    counter: &Path,
    round: u64,
    rng: &mut u64,
    stats: &mut Stats,
) -> io::Result<()> {
    let letter = match share {
        Share::Alone => 'e',
        Share::Readers => 's',
        Share::Slots(_) | Share::Mutex => 'n',
    };
    let name = format!("{letter}-{}-{round}", std::process::id());
    let mark = marks.join(&name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&mark)?;
    let mut others = Vec::new();
    for e in fs::read_dir(marks)? {
        let n = e?.file_name().to_string_lossy().into_owned();
        if n != name {
            others.push(n);
        }
    }
    let overlap = match share {
        Share::Alone | Share::Mutex => !others.is_empty(),
        Share::Readers => others.iter().any(|n| n.starts_with("e-")),
        Share::Slots(limit) => others.len() as u64 + 1 > limit,
    };
    if overlap {
        stats.overlaps += 1;
    } else if !others.is_empty() {
        stats.together += 1;
    }
    if matches!(share, Share::Alone) {
        stats.exclusive += 1;
        let count: u64 = fs::read_to_string(counter)?.trim().parse().unwrap_or(0);
        fs::write(counter, (count + 1).to_string())?;
    }
    std::thread::sleep(Duration::from_micros(next(rng) % 300));
    fs::remove_file(&mark)
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
    let mut rng = u64::from(std::process::id());
    let marks = matches!(
        kind,
        Kind::Limit(_) | Kind::Shared(..) | Kind::UnlockedExclusive
    );
    for round in 0..iterations {
        let (share, release) = match kind.take(&runtime, &mut rng) {
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
        let inside = if marks {
            critical_marks(share, &marker, &counter, round, &mut rng, &mut stats)
        } else {
            critical(&lock, &marker, &counter, &mut stats)
        };
        if let Err(e) = inside {
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
                "exclusive": s.exclusive,
                "together": s.together,
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

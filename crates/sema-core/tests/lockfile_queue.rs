//! The cross-process wait queue under threads of one process (as worker_threads of one Node
//! process): no lock-order deadlock between the queue registry and a queue's state, while queue
//! files are removed and made again all the time.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sema_core::lockfile::*;

/// The queue file name, derived here independently of the crate: the name must stay the same
/// across versions (processes of different versions share one line), so the test pins it.
fn fnv(key: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("q-{h:016x}")
}

fn opts() -> LockOptions {
    LockOptions {
        fsync: false,
        heartbeat: None,
        ..LockOptions::default()
    }
}

/// Two threads (as two worker_threads of one Node process) run `acquire_now` on a busy lock and
/// drop the `Tried` (as `acquire_queued` does when the slot was taken meanwhile). One thread
/// drops a Ticket (queue state → QUEUES) while the other is in `queue::get` (QUEUES → state).
#[test]
fn queue_registry_and_state_never_deadlock() {
    let d = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = d.path().join("dl.lock");
    let key = std::fs::canonicalize(d.path()).unwrap().join("dl.lock");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let qdir = format!("/dev/shm/sema-native-{uid}");
    let _ = std::fs::create_dir(&qdir);
    let qpath = Path::new(&qdir).join(fnv(&key));

    // The lock file is held (outside the in-process slot): every attempt is Busy.
    let holder = LockFile::new(path.clone(), opts())
        .try_acquire_bypassing_queue(&AcquireRequest::default())
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);

    // Keep a queue file present (a process that waited created it).
    let recreated = Arc::new(AtomicU64::new(0));
    {
        let stop = stop.clone();
        let qpath = qpath.clone();
        let recreated = recreated.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !qpath.exists() {
                    recreated.fetch_add(1, Ordering::Relaxed);
                }
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&qpath);
                std::thread::sleep(Duration::from_micros(50));
            }
        });
    }
    for i in 0..2 {
        let stop = stop.clone();
        let progress = progress.clone();
        let lf = LockFile::new(path.clone(), opts());
        std::thread::spawn(move || {
            let req = AcquireRequest::default();
            while !stop.load(Ordering::Relaxed) {
                match lf.acquire_now(&req) {
                    AcquireNow::Wait(tried) => drop(tried),
                    AcquireNow::Done(r) => {
                        if let Ok(h) = r {
                            let _ = h.release();
                        }
                    }
                }
                progress[i].fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let t0 = Instant::now();
    let mut last = [0u64; 2];
    let mut stalled_since = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(200));
        let now = [
            progress[0].load(Ordering::Relaxed),
            progress[1].load(Ordering::Relaxed),
        ];
        if now != last {
            last = now;
            stalled_since = Instant::now();
        } else if stalled_since.elapsed() > Duration::from_millis(1500) {
            stop.store(true, Ordering::Relaxed);
            panic!(
                "DEADLOCK: both acquire_now threads stuck for 1.5 s after {:?} iterations ({:?})",
                now,
                t0.elapsed()
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(holder);
    assert!(
        last[0] > 0 && last[1] > 0,
        "both threads made progress: {last:?}"
    );
    eprintln!(
        "no deadlock in 3 s: {last:?} iterations, queue file removed and made again {} times",
        recreated.load(Ordering::Relaxed)
    );
    let _ = std::fs::remove_file(&qpath);
}

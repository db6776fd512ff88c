//! Closing a released lock's descriptor off the releasing thread.
//!
//! A release unlinks the name (that is the hand-off: waiters are woken by it) and then closes
//! our descriptor, the inode's last reference: the kernel frees the inode there, and on a disk
//! that is I/O-bound work which the releasing thread (the JS thread, for a short release)
//! waited out before it could go on. Measured on the benchmark VM's ext4 disk, fsync on, one
//! process (bench/file-hops.js shape, same binary, inline and deferred batches interleaved):
//! the JS thread's `lock.release()` 136 → 32 µs (p50 of batch means) and the acquire + release
//! cycle 688 → 543 µs; with the disk busy with other work, release 1 290 → 86 µs. Nothing
//! depends on the close happening at once: the name is gone, so nobody can open the file any
//! more, and the `flock` and byte locks it still carries are on an inode nobody reaches by name.
//!
//! Unix only: on Windows a name deleted while a handle is open may stay (delete pending) until
//! the last handle closes, so the close is part of the hand-off there and stays inline.
//!
//! One thread, started on the first release, closes what it is sent, in order. If it cannot be
//! started, or in a child forked after it started (the thread did not survive the fork), the
//! descriptor is closed at once, as before.

use std::fs::File;
use std::sync::mpsc::{channel, Sender};
use std::sync::LazyLock;

use super::process::current_pid;

enum Job {
    Close(File),
    /// Answered once everything sent before it is closed (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Flush(std::sync::mpsc::SyncSender<()>),
}

struct Closer {
    jobs: Sender<Job>,
    /// The process that started the thread.
    pid: i64,
}

static CLOSER: LazyLock<Option<Closer>> = LazyLock::new(|| {
    let (jobs, received) = channel::<Job>();
    std::thread::Builder::new()
        .name("sema-close".into())
        .spawn(move || {
            for job in received {
                match job {
                    Job::Close(file) => drop(file),
                    Job::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        })
        .ok()?;
    Some(Closer {
        jobs,
        pid: current_pid(),
    })
});

/// The closer of this process, if it has one. The pid compared is the cached one (reset in a
/// forked child by the fork hook): `std::process::id()` was a `getpid` system call on the
/// releasing (JS) thread at every release (strace of one contender, 8 processes on the disk).
fn closer() -> Option<&'static Closer> {
    if cfg!(not(unix)) {
        return None;
    }
    CLOSER.as_ref().filter(|c| c.pid == current_pid())
}

#[cfg(test)]
thread_local! {
    /// Files this thread passed to [`close_later`] (tests: which releases hand their close off).
    static SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Close `file` soon, on the closer thread (at once when there is none, and on Windows).
pub(super) fn close_later(file: File) {
    #[cfg(test)]
    SENT.with(|n| n.set(n.get() + 1));
    match closer() {
        // A send fails only if the thread is gone: the file comes back and is closed here.
        Some(c) => {
            if let Err(back) = c.jobs.send(Job::Close(file)) {
                drop(back.0);
            }
        }
        None => drop(file),
    }
}

/// Returns once every file passed to [`close_later`] before this call is closed.
#[cfg(test)]
pub(super) fn flush() {
    if let Some(c) = closer() {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if c.jobs.send(Job::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::super::{AcquireRequest, LockFile, LockOptions};
    use super::flush;

    /// The inode the descriptor `fd` of this process names now, if it is open.
    fn inode_of_fd(fd: i64) -> Option<(u64, u64)> {
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    }

    /// A released lock's descriptor is closed (by the closer thread, not leaked), whether the
    /// lock was taken by the synchronous attempt or by a wait with fsync; the name is gone as
    /// soon as `release` returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn released_descriptors_are_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        for fsync in [false, true] {
            let path = dir.path().join(format!("closer-{fsync}.lock"));
            let options = LockOptions {
                fsync,
                ..LockOptions::default()
            };
            let file = LockFile::new(path.clone(), options);
            let req = AcquireRequest::default();
            for round in 0..20 {
                let held = if round % 2 == 0 {
                    file.try_acquire(&req).expect("free")
                } else {
                    file.acquire(
                        &req,
                        Some(Duration::from_secs(10)),
                        CancellationToken::new(),
                    )
                    .await
                    .expect("free")
                };
                let fd = held.raw_handle().expect("a descriptor");
                let inode = inode_of_fd(fd).expect("open while held");
                assert!(held.release().expect("released"));
                assert!(!path.exists(), "the name goes with release");
                flush();
                // Another test's thread may have opened a file under the number since: then it
                // names another inode (the same answer would need the number and the freed
                // inode both reused by it in between).
                assert_ne!(inode_of_fd(fd), Some(inode), "descriptor {fd} left open");
            }
        }
    }

    /// On a memory file system a release closes its descriptor itself, before it returns: no
    /// wake-up of the closer thread per release (the futex wake was 12% of the JS thread's CPU
    /// in a one-process acquire + release loop on tmpfs). On a disk the close is handed off.
    #[test]
    fn memory_file_system_closes_inline() {
        let shm = std::path::Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let dir = tempfile::tempdir_in(shm).expect("tempdir in /dev/shm");
        let file = LockFile::new(dir.path().join("inline.lock"), LockOptions::default());
        let sent = super::SENT.with(|n| n.get());
        for _ in 0..3 {
            let held = file.try_acquire(&AcquireRequest::default()).expect("free");
            let fd = held.raw_handle().expect("a descriptor");
            let inode = inode_of_fd(fd).expect("open while held");
            assert!(held.release().expect("released"));
            // Same-thread check, no flush: closed by the release itself.
            assert_ne!(inode_of_fd(fd), Some(inode), "descriptor {fd} still open");
        }
        assert_eq!(
            super::SENT.with(|n| n.get()),
            sent,
            "no close handed to the closer"
        );

        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("tempdir on the disk");
        let file = LockFile::new(disk.path().join("later.lock"), LockOptions::default());
        if file.attempts_are_short() {
            return; // the work tree is on a memory file system itself: nothing to compare
        }
        let held = file.try_acquire(&AcquireRequest::default()).expect("free");
        assert!(held.release().expect("released"));
        assert_eq!(
            super::SENT.with(|n| n.get()),
            sent + 1,
            "a disk's close is handed off"
        );
        flush();
    }
}

//! Linux backend: one inotify instance (the `inotify` crate), read on the tokio runtime that
//! made the first watch (its I/O driver polls the descriptor: an event wakes the worker that
//! runs the waiters, with no reader thread in between), or by one blocking thread when there is
//! no runtime, or once that runtime has shut down (the task's drop hands the descriptor, with
//! its watches, to the thread).
//!
//! Only the events that can free a lock or replace its file are subscribed: `DELETE`,
//! `MOVED_FROM` and `MOVED_TO` in the directory, and the directory's own deletion or move.
//! Opens, reads, closes, creations and in-place rewrites (heartbeats) wake nobody, not even this
//! thread; `notify` would subscribe to all of them.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

use super::{lock, wake, wake_all, wake_dir, Waiters};

fn mask() -> WatchMask {
    WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// The mask of a parked watch (see [`Backend::unwatch`]): only the directory's own deletion,
/// which nobody waits for there (the reader finds no waiter to wake).
fn parked_mask() -> WatchMask {
    WatchMask::DELETE_SELF | WatchMask::ONLYDIR
}

/// How many parked watches are kept (the oldest is removed past it): a contending process uses
/// one directory or a few; the user's `max_user_watches` is shared with every other program.
const MAX_PARKED: usize = 16;

/// `IN_IGNORED` events read (a watch removed): each woke the reader thread for nothing.
static IGNORED_EVENTS: AtomicU64 = AtomicU64::new(0);

/// How many `IN_IGNORED` events the reader thread has read (tests: a parked watch makes none).
pub(crate) fn ignored_event_count() -> u64 {
    IGNORED_EVENTS.load(Ordering::Relaxed)
}

pub(super) struct Backend {
    watches: Watches,
    /// Watch descriptor → directory, shared with the reader thread.
    wds: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    /// Directory → watch descriptor (active or parked).
    by_dir: HashMap<PathBuf, WatchDescriptor>,
    /// Parked directories, oldest first.
    parked: VecDeque<PathBuf>,
}

type Wds = Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>;

pub(super) fn start(waiters: Waiters) -> Option<Backend> {
    let mut inotify = Inotify::init().ok()?;
    let mut watches = inotify.watches();
    let wds: Wds = Arc::default();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        match AsyncReader::spawn(&rt, inotify, wds.clone(), waiters.clone()) {
            Ok(()) => {
                return Some(Backend {
                    watches,
                    wds,
                    by_dir: HashMap::new(),
                    parked: VecDeque::new(),
                })
            }
            Err(Some(back)) => inotify = back,
            Err(None) => {
                inotify = Inotify::init().ok()?;
                watches = inotify.watches();
            }
        }
    }
    spawn_thread(inotify, wds.clone(), waiters)?;
    Some(Backend {
        watches,
        wds,
        by_dir: HashMap::new(),
        parked: VecDeque::new(),
    })
}

impl Backend {
    pub(super) fn watch(&mut self, dir: &Path) -> bool {
        self.parked.retain(|p| p != dir);
        // A parked watch of this directory gets its mask back (the kernel returns the same
        // descriptor for the same directory; another one if the path now names another
        // directory, whose old watch is removed).
        let Ok(wd) = self.watches.add(dir, mask()) else {
            self.remove(dir);
            return false;
        };
        if let Some(old) = self.by_dir.insert(dir.to_path_buf(), wd.clone()) {
            if old != wd {
                lock(&self.wds).remove(&old);
                let _ = self.watches.remove(old);
            }
        }
        lock(&self.wds).insert(wd, dir.to_path_buf());
        true
    }

    /// Nobody here waits in `dir` any more: its watch is parked (narrowed to the directory's
    /// own deletion), not removed. Removing it queued an `IN_IGNORED` event, which woke the
    /// reader thread for nothing once per acquisition of a contended lock (8 processes on a
    /// disk: the reader's wake-ups per hand-off, summed over all processes, see the commit),
    /// and a release in the directory no longer wakes it either, as with no watch.
    pub(super) fn unwatch(&mut self, dir: &Path) {
        let Some(wd) = self.by_dir.get(dir).cloned() else {
            return;
        };
        match self.watches.add(dir, parked_mask()) {
            Ok(now) if now == wd => {}
            other => {
                // The path names another directory now (or none): nothing to park, and a
                // watch just made on that other directory is not kept either.
                if let Ok(other) = other {
                    let _ = self.watches.remove(other);
                }
                self.remove(dir);
                return;
            }
        }
        self.parked.push_back(dir.to_path_buf());
        if self.parked.len() > MAX_PARKED {
            if let Some(oldest) = self.parked.pop_front() {
                self.remove(&oldest);
            }
        }
    }

    fn remove(&mut self, dir: &Path) {
        self.parked.retain(|p| p != dir);
        if let Some(wd) = self.by_dir.remove(dir) {
            lock(&self.wds).remove(&wd);
            // A watch the kernel already dropped (directory deleted) only fails with EINVAL.
            let _ = self.watches.remove(wd);
        }
    }
}

fn spawn_thread(inotify: Inotify, wds: Wds, waiters: Waiters) -> Option<()> {
    std::thread::Builder::new()
        .name("sema-inotify".into())
        .spawn(move || read_loop(inotify, &wds, &waiters))
        .ok()
        .map(drop)
}

/// Reads the descriptor on the runtime that made the first watch. A wake-up of a waiter was
/// two: the kernel woke the reader thread, which woke the tokio worker; now the worker's own
/// poll sees the event (counted in the commit that made it: voluntary switches per hand-off).
struct AsyncReader {
    fd: Option<tokio::io::unix::AsyncFd<Inotify>>,
    wds: Wds,
    waiters: Waiters,
}

impl AsyncReader {
    /// On the runtime `rt`. `Err(Some)`: the descriptor could not be registered there, the
    /// caller falls back to the thread; `Err(None)`: the runtime has no I/O driver (tokio panics
    /// then, caught here) and the descriptor is gone with the panic: the caller starts anew.
    fn spawn(
        rt: &tokio::runtime::Handle,
        inotify: Inotify,
        wds: Wds,
        waiters: Waiters,
    ) -> Result<(), Option<Inotify>> {
        let _entered = rt.enter();
        let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `Inotify` owns its descriptor (closed only when the last of it and its
            // `Watches` is dropped) and `as_raw_fd` always returns that one; the `AsyncFd`
            // owns the `Inotify` until it is dropped or `into_inner` gives it back, so the
            // descriptor stays open and the same for the registration's whole life.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    inotify,
                    tokio::io::Interest::READABLE,
                )
            }
        }));
        let fd = match registered {
            Ok(Ok(fd)) => fd,
            Ok(Err(e)) => return Err(Some(e.into_parts().0)),
            Err(_) => return Err(None),
        };
        let reader = AsyncReader {
            fd: Some(fd),
            wds,
            waiters,
        };
        drop(rt.spawn(reader.run()));
        Ok(())
    }

    async fn run(mut self) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let Some(fd) = self.fd.as_mut() else { return };
            let Ok(mut ready) = fd.readable_mut().await else {
                break;
            };
            let read = ready.try_io(|fd| {
                let events = fd.get_mut().read_events(&mut buf)?;
                dispatch(events, &self.wds, &self.waiters);
                Ok(())
            });
            match read {
                Ok(Ok(())) | Err(_) => {} // read, or nothing more to read (readiness cleared)
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(_)) => break,
            }
        }
        // The descriptor failed: everyone falls back to polling (as the thread does); nothing
        // is handed on.
        self.fd = None;
        wake_all(&self.waiters);
    }
}

impl Drop for AsyncReader {
    /// The task is dropped with its runtime (one per test; the addon's lives as long as the
    /// process): the descriptor and its watches go on, read by the thread.
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            let inotify = fd.into_inner();
            let _ = spawn_thread(inotify, self.wds.clone(), self.waiters.clone());
        }
    }
}

fn dispatch<'a>(
    events: impl Iterator<Item = inotify::Event<&'a std::ffi::OsStr>>,
    wds: &Mutex<HashMap<WatchDescriptor, PathBuf>>,
    waiters: &Waiters,
) {
    for event in events {
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            wake_all(waiters);
            continue;
        }
        if event.mask.contains(EventMask::IGNORED) {
            IGNORED_EVENTS.fetch_add(1, Ordering::Relaxed);
        }
        let Some(dir) = lock(wds).get(&event.wd).cloned() else {
            continue;
        };
        let name = match event.name {
            Some(name) if !name.is_empty() => name,
            _ => {
                // The directory itself went away (or an event without a name).
                wake_dir(waiters, &dir);
                continue;
            }
        };
        let path = dir.join(name);
        if let Some(entry) = lock(waiters).get(&path) {
            // A file moved into place is a new file: waiters judge it afresh.
            wake(entry, event.mask.contains(EventMask::MOVED_TO));
        }
    }
}

fn read_loop(
    mut inotify: Inotify,
    wds: &Mutex<HashMap<WatchDescriptor, PathBuf>>,
    waiters: &Waiters,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Only this thread reads the descriptor: make it blocking once, instead of the crate's
    // `read_events_blocking`, which clears and restores O_NONBLOCK around every read (4 fcntl
    // calls per wake-up). If that fails, the crate's way still works.
    let blocking = {
        use std::os::fd::AsFd;
        let fd = inotify.as_fd();
        rustix::fs::fcntl_getfl(fd)
            .and_then(|fl| rustix::fs::fcntl_setfl(fd, fl - rustix::fs::OFlags::NONBLOCK))
            .is_ok()
    };
    loop {
        let read = if blocking {
            inotify.read_events(&mut buf)
        } else {
            inotify.read_events_blocking(&mut buf)
        };
        let events = match read {
            Ok(events) => events,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return wake_all(waiters), // everyone falls back to polling
        };
        dispatch(events, wds, waiters);
    }
}

//! One process-wide file-system watcher that wakes waiters when something happens to their
//! lock file's name: on Linux our own inotify reader thread, elsewhere the `notify` crate
//! (kqueue on BSD/macOS).
//!
//! Each waited-on lock registers a [`WatchGuard`]: the parent directory is watched
//! non-recursively (refcounted per directory) and events on the lock file's path are dispatched
//! to a `tokio::sync::Notify` per path. If the watcher cannot be created or a directory cannot
//! be watched, waiters simply rely on their polling interval.
//!
//! On Linux only the events that can free a lock or replace its file are subscribed:
//! `IN_DELETE`, `IN_MOVED_FROM` and `IN_MOVED_TO`. Opens, reads, closes (every waiter's look
//! and every loser's prepared file), creations and in-place rewrites (heartbeats) wake nobody,
//! not even the reader thread. A file that appears or is being written is held anyway; a
//! holder that dies (its descriptor was opened O_TMPFILE or under a temp name, so its closing
//! is no event on the lock's name either) is found by the `retry_interval` poll. Elsewhere
//! every event also bumps the path's *close generation*, so a waiter that judged a file once
//! judges it again after any change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

struct Entry {
    notify: Arc<Notify>,
    count: usize,
    close_gen: Arc<AtomicU64>,
}

type Waiters = Arc<Mutex<HashMap<PathBuf, Entry>>>;

struct Hub {
    /// The watcher and the directory refcounts. `watch`/`unwatch` are only called under this
    /// lock, never under `waiters` (the event thread takes `waiters`).
    state: Mutex<HubState>,
    waiters: Waiters,
}

#[derive(Default)]
struct HubState {
    backend: Option<backend::Backend>,
    failed: bool,
    dirs: HashMap<PathBuf, usize>,
    /// Directories nobody waits on any more, still watched since the given time: a waiter
    /// that comes back soon (a process contending in a loop) reuses the watch instead of
    /// adding and removing it per acquisition. Removed after [`IDLE_UNWATCH`].
    idle: HashMap<PathBuf, Instant>,
}

/// Zero: a directory is unwatched as soon as nobody here waits on it. With the cross-process
/// queue only the head of the line watches, and a kept watch would wake this process's reader
/// thread on every release in the directory for nothing (8 contending processes: 3.2 k → 5.2 k
/// hand-offs/s when dropped at once). Kept as a knob; `inotify_add_watch` costs ~2 µs.
const IDLE_UNWATCH: Duration = Duration::from_secs(0);

impl HubState {
    fn sweep_idle(&mut self, now: Instant) {
        if self.idle.is_empty() {
            return;
        }
        let expired: Vec<PathBuf> = self
            .idle
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= IDLE_UNWATCH)
            .map(|(d, _)| d.clone())
            .collect();
        for dir in expired {
            self.idle.remove(&dir);
            if let Some(b) = self.backend.as_mut() {
                b.unwatch(&dir);
            }
        }
    }
}

/// The directory's watch is gone (deleted or moved): an idle entry must not be reused.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn forget_idle(dir: &Path) {
    let mut state = lock(&HUB.state);
    if state.idle.remove(dir).is_some() {
        if let Some(b) = state.backend.as_mut() {
            b.unwatch(dir);
        }
    }
}

/// Drop idle watches that expired (the reader thread calls it on events nobody waits for).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn sweep_idle() {
    lock(&HUB.state).sweep_idle(Instant::now());
}

static HUB: LazyLock<Hub> = LazyLock::new(|| Hub {
    state: Mutex::new(HubState::default()),
    waiters: Arc::new(Mutex::new(HashMap::new())),
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wake(entry: &Entry, close: bool) {
    if close {
        entry.close_gen.fetch_add(1, Ordering::Relaxed);
    }
    entry.notify.notify_waiters();
}

fn wake_all(waiters: &Waiters) {
    for e in lock(waiters).values() {
        wake(e, true);
    }
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn wake_dir(waiters: &Waiters, dir: &Path) {
    for (path, e) in lock(waiters).iter() {
        if path.parent() == Some(dir) {
            wake(e, true);
        }
    }
}

#[cfg(target_os = "linux")]
mod backend {
    //! inotify, read by one blocking thread.

    use std::collections::HashMap;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};

    use super::{lock, wake, wake_all, wake_dir, Waiters};

    const MASK: u32 = libc::IN_DELETE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR;

    pub(super) struct Backend {
        fd: i32,
        /// Watch descriptor → directory, shared with the reader thread.
        wds: Arc<Mutex<HashMap<i32, PathBuf>>>,
        /// Directory → watch descriptor.
        by_dir: HashMap<PathBuf, i32>,
    }

    pub(super) fn start(waiters: Waiters) -> Option<Backend> {
        // SAFETY: plain system call with flags only; the returned descriptor (if any) is owned
        // by the backend, which lives in a static for the rest of the process.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let wds: Arc<Mutex<HashMap<i32, PathBuf>>> = Arc::new(Mutex::new(HashMap::new()));
        let thread_wds = wds.clone();
        let spawned = std::thread::Builder::new()
            .name("sema-inotify".into())
            .spawn(move || read_loop(fd, &thread_wds, &waiters));
        if spawned.is_err() {
            // SAFETY: `fd` is ours and not used by anyone else (the thread did not start).
            unsafe { libc::close(fd) };
            return None;
        }
        Some(Backend {
            fd,
            wds,
            by_dir: HashMap::new(),
        })
    }

    impl Backend {
        pub(super) fn watch(&mut self, dir: &Path) -> bool {
            let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
                return false;
            };
            // SAFETY: `c` is a NUL-terminated path that outlives the call; `self.fd` is our
            // open inotify descriptor.
            let wd = unsafe { libc::inotify_add_watch(self.fd, c.as_ptr(), MASK) };
            if wd < 0 {
                return false;
            }
            lock(&self.wds).insert(wd, dir.to_path_buf());
            self.by_dir.insert(dir.to_path_buf(), wd);
            true
        }

        pub(super) fn unwatch(&mut self, dir: &Path) {
            if let Some(wd) = self.by_dir.remove(dir) {
                lock(&self.wds).remove(&wd);
                // SAFETY: plain system call on our descriptor; a stale `wd` only fails (EINVAL).
                unsafe { libc::inotify_rm_watch(self.fd, wd) };
            }
        }
    }

    /// Header of `struct inotify_event`: wd, mask, cookie, len.
    const HEADER: usize = 16;

    fn read_loop(fd: i32, wds: &Mutex<HashMap<i32, PathBuf>>, waiters: &Waiters) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // SAFETY: `buf` is a writable buffer of the length passed; `fd` stays open for the
            // life of the process.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                wake_all(waiters);
                return;
            }
            let n = n as usize;
            let mut off = 0usize;
            while off + HEADER <= n {
                let word = |i: usize| {
                    let b = &buf[off + 4 * i..off + 4 * i + 4];
                    u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
                };
                let wd = word(0) as i32;
                let mask = word(1);
                let len = word(3) as usize;
                let name_end = (off + HEADER + len).min(n);
                let raw = &buf[off + HEADER..name_end];
                let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
                off = name_end;
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    wake_all(waiters);
                    continue;
                }
                let Some(dir) = lock(wds).get(&wd).cloned() else {
                    continue;
                };
                if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
                    || name.is_empty()
                {
                    wake_dir(waiters, &dir);
                    if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
                        super::forget_idle(&dir);
                    }
                    continue;
                }
                let path = dir.join(OsStr::from_bytes(name));
                let matched = match lock(waiters).get(&path) {
                    Some(e) => {
                        wake(e, mask & libc::IN_MOVED_TO != 0); // a new file: judge it
                        true
                    }
                    None => false,
                };
                if !matched {
                    super::sweep_idle();
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod backend {
    //! The `notify` crate (kqueue on BSD/macOS, ReadDirectoryChangesW on Windows).

    use std::path::Path;

    use notify::{Event, EventKind, RecursiveMode, Watcher};

    use super::{lock, wake, wake_all, Waiters};

    pub(super) struct Backend(notify::RecommendedWatcher);

    pub(super) fn start(waiters: Waiters) -> Option<Backend> {
        notify::recommended_watcher(move |ev| dispatch(&waiters, ev))
            .ok()
            .map(Backend)
    }

    impl Backend {
        pub(super) fn watch(&mut self, dir: &Path) -> bool {
            self.0.watch(dir, RecursiveMode::NonRecursive).is_ok()
        }

        pub(super) fn unwatch(&mut self, dir: &Path) {
            let _ = self.0.unwatch(dir);
        }
    }

    fn dispatch(waiters: &Waiters, event: notify::Result<Event>) {
        let event = match event {
            Ok(e) => e,
            Err(_) => return wake_all(waiters), // overflow or watcher error: everyone re-checks
        };
        // Opening or closing the file (our own reads, a breaker's descriptor) is not a change.
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        if event.paths.is_empty() || event.need_rescan() {
            return wake_all(waiters);
        }
        let map = lock(waiters);
        for p in &event.paths {
            if let Some(e) = map.get(p) {
                wake(e, true);
                continue;
            }
            // kqueue reports changes of a directory's entries on the directory itself.
            for (path, e) in map.iter() {
                if path.parent() == Some(p.as_path()) {
                    wake(e, true);
                }
            }
        }
    }
}

/// Registration of one waiter's interest in one lock path. Dropping it unregisters.
pub(crate) struct WatchGuard {
    path: PathBuf,
    dir: Option<PathBuf>,
    notify: Arc<Notify>,
    close_gen: Arc<AtomicU64>,
}

impl WatchGuard {
    /// The notifier to wait on. Create and `enable()` a `Notified` from it *before* checking the
    /// lock, so a change between the check and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// Bumped by every event that may mean the holder closed its descriptor (or finished
    /// writing): a waiter that judged the holder once judges it again when this moved.
    pub(crate) fn close_generation(&self) -> u64 {
        self.close_gen.load(Ordering::Relaxed)
    }
}

/// Start watching `path` (a canonical lock path).
pub(crate) fn watch(path: &Path) -> WatchGuard {
    let hub = &*HUB;
    let (notify, close_gen) = {
        let mut map = lock(&hub.waiters);
        let entry = map.entry(path.to_path_buf()).or_insert_with(|| Entry {
            notify: Arc::new(Notify::new()),
            count: 0,
            close_gen: Arc::new(AtomicU64::new(0)),
        });
        entry.count += 1;
        (entry.notify.clone(), entry.close_gen.clone())
    };
    let dir = path.parent().map(Path::to_path_buf);
    let mut watched_dir = None;
    if let Some(dir) = dir {
        let mut state = lock(&hub.state);
        if state.backend.is_none() && !state.failed {
            match backend::start(hub.waiters.clone()) {
                Some(b) => state.backend = Some(b),
                None => state.failed = true,
            }
        }
        state.sweep_idle(Instant::now());
        let count = state.dirs.get(&dir).copied().unwrap_or(0);
        if count > 0 {
            state.dirs.insert(dir.clone(), count + 1);
            watched_dir = Some(dir);
        } else if state.idle.remove(&dir).is_some() {
            state.dirs.insert(dir.clone(), 1);
            watched_dir = Some(dir);
        } else if let Some(b) = state.backend.as_mut() {
            if b.watch(&dir) {
                state.dirs.insert(dir.clone(), 1);
                watched_dir = Some(dir);
            }
        }
    }
    WatchGuard {
        path: path.to_path_buf(),
        dir: watched_dir,
        notify,
        close_gen,
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let hub = &*HUB;
        {
            let mut map = lock(&hub.waiters);
            if let Some(entry) = map.get_mut(&self.path) {
                entry.count = entry.count.saturating_sub(1);
                if entry.count == 0 {
                    map.remove(&self.path);
                }
            }
        }
        if let Some(dir) = self.dir.take() {
            let mut state = lock(&hub.state);
            let count = state.dirs.get(&dir).copied().unwrap_or(0);
            if count <= 1 {
                state.dirs.remove(&dir);
                let now = Instant::now();
                state.idle.insert(dir, now);
                state.sweep_idle(now);
            } else {
                state.dirs.insert(dir, count - 1);
            }
        }
    }
}

/// Number of directories currently watched (for tests).
#[doc(hidden)]
pub fn watched_directory_count() -> usize {
    lock(&HUB.state).dirs.len()
}

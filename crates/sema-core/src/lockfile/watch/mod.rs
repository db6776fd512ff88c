//! One process-wide file-system watcher that wakes waiters when something happens to their
//! lock file's name: on Linux inotify ([`inotify`], read on the tokio runtime), elsewhere the `notify`
//! crate ([`portable`]: kqueue on BSD/macOS, ReadDirectoryChangesW on Windows).
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
    /// Watched directories and how many waiters of this process use each. A directory is
    /// unwatched as soon as nobody here waits on it: with the cross-process queue only the head
    /// of the line watches, and a kept watch woke this process's reader thread on every release
    /// in the directory for nothing (8 contending processes: 3.2 k → 5.2 k hand-offs/s when
    /// dropped at once; `inotify_add_watch` costs ~2 µs). On Linux "unwatched" is a parked
    /// watch (see `inotify::Backend::unwatch`), which no release wakes either.
    dirs: HashMap<PathBuf, usize>,
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
mod inotify;
#[cfg(target_os = "linux")]
use inotify as backend;

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
use portable as backend;

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
        let count = state.dirs.get(&dir).copied().unwrap_or(0);
        if count > 0 {
            state.dirs.insert(dir.clone(), count + 1);
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
                if let Some(b) = state.backend.as_mut() {
                    b.unwatch(&dir);
                }
            } else {
                state.dirs.insert(dir, count - 1);
            }
        }
    }
}

/// How many `IN_IGNORED` events (a watch removed) this process's inotify reader has read: each
/// woke it for nothing (for tests; 0 where the backend is not inotify).
#[doc(hidden)]
pub fn ignored_event_count() -> u64 {
    #[cfg(target_os = "linux")]
    return inotify::ignored_event_count();
    #[cfg(not(target_os = "linux"))]
    0
}

/// Number of directories currently watched (for tests).
#[doc(hidden)]
pub fn watched_directory_count() -> usize {
    lock(&HUB.state).dirs.len()
}

//! One process-wide file-system watcher (inotify on Linux, kqueue on BSD/macOS) that wakes
//! waiters when something happens to their lock file's name.
//!
//! Each waited-on lock registers a [`WatchGuard`]: the parent directory is watched
//! non-recursively (refcounted per directory) and events on the lock file's path are dispatched
//! to a `tokio::sync::Notify` per path. If the watcher cannot be created or a directory cannot
//! be watched, waiters simply rely on their polling interval.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::Notify;

type Waiters = Arc<Mutex<HashMap<PathBuf, (Arc<Notify>, usize)>>>;

struct Hub {
    /// The watcher and the directory refcounts. `watch`/`unwatch` are only called under this
    /// lock, never under `waiters` (the event thread takes `waiters`).
    state: Mutex<HubState>,
    waiters: Waiters,
}

#[derive(Default)]
struct HubState {
    watcher: Option<notify::RecommendedWatcher>,
    failed: bool,
    dirs: HashMap<PathBuf, usize>,
}

static HUB: LazyLock<Hub> = LazyLock::new(|| Hub {
    state: Mutex::new(HubState::default()),
    waiters: Arc::new(Mutex::new(HashMap::new())),
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn relevant(kind: &EventKind) -> bool {
    // Opening or closing the file (our own reads, a breaker's descriptor) is not a change.
    !matches!(kind, EventKind::Access(_))
}

fn dispatch(waiters: &Waiters, event: notify::Result<Event>) {
    let map = lock(waiters);
    let event = match event {
        Ok(e) => e,
        Err(_) => {
            // Overflow or watcher error: wake everyone, they re-check.
            for (n, _) in map.values() {
                n.notify_waiters();
            }
            return;
        }
    };
    if !relevant(&event.kind) {
        return;
    }
    if event.paths.is_empty() || event.need_rescan() {
        for (n, _) in map.values() {
            n.notify_waiters();
        }
        return;
    }
    for p in &event.paths {
        if let Some((n, _)) = map.get(p) {
            n.notify_waiters();
            continue;
        }
        // kqueue reports changes of a directory's entries on the directory itself.
        for (path, (n, _)) in map.iter() {
            if path.parent() == Some(p.as_path()) {
                n.notify_waiters();
            }
        }
    }
}

/// Registration of one waiter's interest in one lock path. Dropping it unregisters.
pub(crate) struct WatchGuard {
    path: PathBuf,
    dir: Option<PathBuf>,
    notify: Arc<Notify>,
}

impl WatchGuard {
    /// The notifier to wait on. Create and `enable()` a `Notified` from it *before* checking the
    /// lock, so a change between the check and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

/// Start watching `path` (a canonical lock path).
pub(crate) fn watch(path: &Path) -> WatchGuard {
    let hub = &*HUB;
    let notify = {
        let mut map = lock(&hub.waiters);
        let entry = map
            .entry(path.to_path_buf())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        entry.0.clone()
    };
    let dir = path.parent().map(Path::to_path_buf);
    let mut watched_dir = None;
    if let Some(dir) = dir {
        let mut state = lock(&hub.state);
        if state.watcher.is_none() && !state.failed {
            let waiters = hub.waiters.clone();
            match notify::recommended_watcher(move |ev| dispatch(&waiters, ev)) {
                Ok(w) => state.watcher = Some(w),
                Err(_) => state.failed = true,
            }
        }
        let count = state.dirs.get(&dir).copied().unwrap_or(0);
        if count > 0 {
            state.dirs.insert(dir.clone(), count + 1);
            watched_dir = Some(dir);
        } else if let Some(w) = state.watcher.as_mut() {
            if w.watch(&dir, RecursiveMode::NonRecursive).is_ok() {
                state.dirs.insert(dir.clone(), 1);
                watched_dir = Some(dir);
            }
        }
    }
    WatchGuard {
        path: path.to_path_buf(),
        dir: watched_dir,
        notify,
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let hub = &*HUB;
        {
            let mut map = lock(&hub.waiters);
            if let Some(entry) = map.get_mut(&self.path) {
                entry.1 = entry.1.saturating_sub(1);
                if entry.1 == 0 {
                    map.remove(&self.path);
                }
            }
        }
        if let Some(dir) = self.dir.take() {
            let mut state = lock(&hub.state);
            let count = state.dirs.get(&dir).copied().unwrap_or(0);
            if count <= 1 {
                state.dirs.remove(&dir);
                if let Some(w) = state.watcher.as_mut() {
                    let _ = w.unwatch(&dir);
                }
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

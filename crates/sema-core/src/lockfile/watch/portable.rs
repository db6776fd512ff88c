//! Backend off Linux: the `notify` crate (kqueue on BSD/macOS, ReadDirectoryChangesW on Windows).

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

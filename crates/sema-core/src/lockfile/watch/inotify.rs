//! Linux backend: one inotify instance (the `inotify` crate), read by one blocking thread.
//!
//! Only the events that can free a lock or replace its file are subscribed: `DELETE`,
//! `MOVED_FROM` and `MOVED_TO` in the directory, and the directory's own deletion or move.
//! Opens, reads, closes, creations and in-place rewrites (heartbeats) wake nobody, not even this
//! thread; `notify` would subscribe to all of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
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

pub(super) struct Backend {
    watches: Watches,
    /// Watch descriptor → directory, shared with the reader thread.
    wds: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>>,
    /// Directory → watch descriptor.
    by_dir: HashMap<PathBuf, WatchDescriptor>,
}

pub(super) fn start(waiters: Waiters) -> Option<Backend> {
    let inotify = Inotify::init().ok()?;
    let watches = inotify.watches();
    let wds: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>> = Arc::default();
    let thread_wds = wds.clone();
    std::thread::Builder::new()
        .name("sema-inotify".into())
        .spawn(move || read_loop(inotify, &thread_wds, &waiters))
        .ok()?;
    Some(Backend {
        watches,
        wds,
        by_dir: HashMap::new(),
    })
}

impl Backend {
    pub(super) fn watch(&mut self, dir: &Path) -> bool {
        let Ok(wd) = self.watches.add(dir, mask()) else {
            return false;
        };
        lock(&self.wds).insert(wd.clone(), dir.to_path_buf());
        self.by_dir.insert(dir.to_path_buf(), wd);
        true
    }

    pub(super) fn unwatch(&mut self, dir: &Path) {
        if let Some(wd) = self.by_dir.remove(dir) {
            lock(&self.wds).remove(&wd);
            // A watch the kernel already dropped (directory deleted) only fails with EINVAL.
            let _ = self.watches.remove(wd);
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
        for event in events {
            if event.mask.contains(EventMask::Q_OVERFLOW) {
                wake_all(waiters);
                continue;
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
}

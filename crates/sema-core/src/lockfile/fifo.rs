//! The in-process FIFO of a lock path: a one-turn semaphore per canonical path, shared by
//! every `LockFile` of that path in this process. Its turn is the *turn*: only the waiter
//! holding the turn makes attempts (and stands in the cross-process [`super::queue`]), so
//! waiters of one process are served in call order. The turn is kept_turn by the lock while held.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::registry::lose_held_whose_file_went;
use super::unpoisoned;

/// Every lock path's FIFO while a `LockFile` of it exists (dead entries are swept when the map
/// grows past 64).
static FIFOS: LazyLock<Mutex<HashMap<PathBuf, Weak<Semaphore>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The one-permit FIFO semaphore of a canonical lock path (shared by every `LockFile` of it).
pub(super) fn fifo_for(key: &Path) -> Arc<Semaphore> {
    let mut map = unpoisoned(&FIFOS);
    if let Some(sem) = map.get(key).and_then(Weak::upgrade) {
        return sem;
    }
    if map.len() >= 64 {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let sem = Arc::new(Semaphore::new(1));
    map.insert(key.to_path_buf(), Arc::downgrade(&sem));
    sem
}

/// The turn of `key` if it is free now. When a lock of this process holds it, its file is
/// looked at first: a lock whose file was removed (a user, a test's cleanup, a cleaner) or
/// taken over is lost now, and its turn is free (without this, the path stayed refused in this
/// process, with no holder on disk, until the heartbeat noticed).
pub(super) fn take_turn_now(fifo: &Arc<Semaphore>, key: &Path) -> Option<OwnedSemaphorePermit> {
    if let Ok(turn) = fifo.clone().try_acquire_owned() {
        return Some(turn);
    }
    if !lose_held_whose_file_went(key) {
        return None;
    }
    fifo.clone().try_acquire_owned().ok()
}

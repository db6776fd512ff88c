//! The in-process FIFO of a lock path: a one-turn semaphore per canonical path, shared by
//! every `LockFile` of that path in this process. Its turn is the *turn*: only the waiter
//! holding the turn makes attempts (and stands in the cross-process [`super::queue`]), so
//! waiters of one process are served in call order. The turn is kept_turn by the lock while held.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use tokio::sync::Semaphore;

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

//! No queue: systems without the Linux runtime directory and byte locks. Every waiter
//! watches the lock file itself; the breaker's lock on the lock file serialises breakers.

use std::path::Path;
use std::sync::Arc;

/// No queue off Linux (never constructed).
pub(crate) struct Queue(());
pub(crate) struct Place(());

/// No runtime directory off Linux: the `flock` on the lock file serialises breakers.
pub(crate) enum BreakLock {
    #[allow(dead_code)]
    Held(()),
    #[allow(dead_code)]
    Busy,
    Unavailable,
}

pub(crate) fn lock_break(_id: crate::lockfile::sys::FileId) -> BreakLock {
    BreakLock::Unavailable
}

pub(super) fn get(_key: &Path, _create: bool) -> Option<Arc<Queue>> {
    None
}

impl Queue {
    pub(crate) fn join(self: &Arc<Self>) -> Place {
        Place(())
    }
}

impl Place {
    pub(crate) fn is_head(&self) -> bool {
        true
    }

    /// Nothing to leave.
    pub(crate) fn leave(&self) {}

    pub(crate) async fn starving_from(&self, _at: tokio::time::Instant) {
        std::future::pending::<()>().await
    }

    /// Never notified (there is no line to move).
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'static> {
        static NEVER: tokio::sync::Notify = tokio::sync::Notify::const_new();
        NEVER.notified()
    }
}

/// No queue here, so nobody to count.
pub(crate) fn waiting_processes(_key: &Path) -> Option<u32> {
    None
}

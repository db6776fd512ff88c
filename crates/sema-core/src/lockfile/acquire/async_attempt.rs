//! One attempt from async code: on the calling tokio worker when it is short, else (with
//! `fsync`) in `block_in_place` or on the blocking pool, and the waiter's lock file prepared
//! ahead of its wake-up; a lock obtained for a caller that went away meanwhile is released.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::lockfile::attempt::{AttemptError, Busy, Prepared};
use crate::lockfile::breaking::Examined;
use crate::lockfile::error::LockError;
use crate::lockfile::held::HeldLock;
use crate::lockfile::lock_file::LockFile;
use crate::lockfile::options::AcquireRequest;
use crate::lockfile::queue::Place;
use crate::lockfile::sys::{CreationStrategy, FsKind};
use crate::lockfile::unpoisoned;

/// Attempts sent off the calling tokio worker (`block_in_place` or the blocking pool) by
/// [`LockFile::attempt_async`], process-wide: each is a thread hop (a test counts them).
static BLOCKING_ATTEMPTS: AtomicU64 = AtomicU64::new(0);

/// How many attempts of waiters this process sent off their tokio worker so far (see
/// [`BLOCKING_ATTEMPTS`]): for tests that count thread hops.
#[doc(hidden)]
pub fn blocking_attempt_count() -> u64 {
    BLOCKING_ATTEMPTS.load(Ordering::Relaxed)
}

impl LockFile {
    /// One attempt from async code. Without `fsync` (or on a memory file system, where it
    /// returns at once) all of it runs on the calling (tokio) thread: looking, building and
    /// linking are short non-blocking calls. With `fsync` the content is synced before the link
    /// (the name never points at content not on the disk) and the directory after it; on a
    /// multi-thread runtime all of it runs on this thread inside `block_in_place`, elsewhere on
    /// the blocking pool (a waiter whose file was prepared ahead, [`LockFile::prepare_ahead`],
    /// links it here and sends only the directory's sync there). If the calling future is
    /// dropped while the pool works, a lock obtained is released at once (nothing is left
    /// behind).
    ///
    /// `line`: the waiter's place in the cross-process line, left as soon as its prepared file
    /// is linked (see below).
    pub(super) async fn attempt_async(
        &self,
        req: &AcquireRequest,
        look_first: bool,
        prepared: &mut Option<Prepared>,
        line: Option<&Arc<Place>>,
    ) -> Result<HeldLock, AttemptError> {
        if !self.syncs() {
            // Nothing to sync: all inline.
            return self.attempt(req, look_first, false, prepared);
        }
        let mut look_first = look_first;
        if look_first && self.fs == FsKind::Local {
            // A waiter that saw a file there looks at it on this thread first: opening, reading
            // and judging it (and unlinking it when stale) are short calls on a local file
            // system, as the `stat` before them is; only a sync may wait. A busy look, what
            // nearly every wake-up of a waiter finds, then costs no hand-off of this worker
            // (with one tokio worker, `block_in_place` wakes a pool thread to take over the
            // worker's role: 8 processes on the disk, ~1 voluntary context switch per
            // hand-off less).
            match self.examine_and_break() {
                Examined::Held(holder, sig) => {
                    return Err(AttemptError::Busy(Box::new(Busy { holder, sig })))
                }
                Examined::Symlink => return Err(AttemptError::Failed(self.symlink_error())),
                // Free now (or changed): the attempt below links first, as the next round of
                // `attempt` would.
                Examined::Gone | Examined::Broken | Examined::Changed => look_first = false,
            }
        }
        let multi_thread = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread;
        if multi_thread && !look_first && self.fs == FsKind::Local {
            // A waiter's prepared file, its content on the disk already: the hand-off. The link
            // is a short call on a local file system and is made here, on the worker; only the
            // directory's sync goes into `block_in_place`, whose new worker thread (woken by it
            // anyway) leaves the line meanwhile: the next process becomes head without waiting
            // for the sync, and the queue's four calls are no longer between the link and the
            // caller being told. A link that finds the name taken again looks at it here, as a
            // busy look does (no hop).
            match self.link_ready(prepared) {
                Some(Ok(held)) => {
                    if let Some(line) = line {
                        let line = line.clone();
                        tokio::spawn(async move { line.leave() });
                    }
                    BLOCKING_ATTEMPTS.fetch_add(1, Ordering::Relaxed);
                    // Never fails: the content was synced before the link (the directory's
                    // sync is best effort); on a failure it would release the lock itself.
                    let synced = tokio::task::block_in_place(|| held.sync_durable());
                    // Left by now, or here: the line is never left after the caller is told.
                    if let Some(line) = line {
                        line.leave();
                    }
                    return synced.map(|()| held).map_err(AttemptError::Failed);
                }
                Some(Err(e)) if e.kind() == io::ErrorKind::AlreadyExists => {
                    match self.examine_and_break() {
                        Examined::Held(holder, sig) => {
                            return Err(AttemptError::Busy(Box::new(Busy { holder, sig })))
                        }
                        Examined::Symlink => {
                            return Err(AttemptError::Failed(self.symlink_error()))
                        }
                        // Free again: the whole attempt below.
                        Examined::Gone | Examined::Broken | Examined::Changed => {}
                    }
                }
                Some(Err(e)) => {
                    return Err(AttemptError::Failed(LockError::io(
                        "Failed to create lock",
                        e,
                    )))
                }
                None => {}
            }
        }
        BLOCKING_ATTEMPTS.fetch_add(1, Ordering::Relaxed);
        if multi_thread {
            // The whole attempt, syncs included, on this thread (the runtime moves its other
            // tasks to another one meanwhile): no round trip through the blocking pool, two
            // thread hops fewer per acquisition. Nothing can be abandoned half-way: this
            // call cannot be dropped while it runs.
            return tokio::task::block_in_place(|| self.attempt(req, look_first, true, prepared));
        }
        let shared = Arc::new(Mutex::new(Handoff::default()));
        let abandon = AbandonOnDrop(shared.clone());
        let worker_shared = shared.clone();
        let joined = if LockFile::prepared_ready(prepared) {
            let held = self.attempt(req, look_first, false, prepared)?;
            tokio::task::spawn_blocking(move || {
                let result = held
                    .sync_durable()
                    .map(|()| held.clone())
                    .map_err(AttemptError::Failed);
                unpoisoned(&worker_shared).settle(result, None);
            })
            .await
        } else {
            let this = self.clone();
            let req = req.clone();
            let mut mine = prepared.take();
            tokio::task::spawn_blocking(move || {
                let result = this.attempt(&req, look_first, true, &mut mine);
                unpoisoned(&worker_shared).settle(result, mine);
            })
            .await
        };
        let (result, back) = {
            let mut h = unpoisoned(&shared);
            (h.result.take(), h.prepared.take())
        };
        drop(abandon);
        if back.is_some() {
            *prepared = back;
        }
        match (joined, result) {
            (_, Some(r)) => r,
            (Err(e), None) => Err(AttemptError::Failed(LockError::io(
                "Failed to create lock",
                io::Error::other(e),
            ))),
            (Ok(()), None) => Err(AttemptError::Failed(LockError::io(
                "Failed to create lock",
                io::Error::other("attempt produced no result"),
            ))),
        }
    }

    /// Before a waiter sleeps: have its lock file built, stamped and (with `fsync`) synced, on
    /// the blocking pool, so that the attempt after the wake-up is a `linkat` and the
    /// directory's sync (the content's sync, ~0.3 ms on a disk, no longer waits between a
    /// release and the next holder). A failure here is ignored: the attempt reports it.
    pub(super) async fn prepare_ahead(
        &self,
        req: &AcquireRequest,
        prepared: &mut Option<Prepared>,
        ahead: &mut bool,
    ) {
        if !*ahead || self.strategy != CreationStrategy::Auto || LockFile::prepared_ready(prepared)
        {
            return;
        }
        if !self.syncs() {
            *ahead = self.prepare(req, prepared, false).is_some();
            return;
        }
        let this = self.clone();
        let req = req.clone();
        let mut mine = prepared.take();
        if let Ok((back, supported)) = tokio::task::spawn_blocking(move || {
            let supported = this.prepare(&req, &mut mine, true).is_some();
            (mine, supported)
        })
        .await
        {
            *prepared = back;
            // No unnamed files here: do not try again at every sleep.
            *ahead = supported;
        }
    }
}

#[derive(Default)]
pub(super) struct Handoff {
    pub(super) abandoned: bool,
    pub(super) result: Option<Result<HeldLock, AttemptError>>,
    /// The waiter's prepared file, given back after an attempt that did not use it.
    pub(super) prepared: Option<Prepared>,
}

impl Handoff {
    /// The blocking part's outcome: kept for the waiting future, or released at once when the
    /// future was dropped meanwhile.
    fn settle(&mut self, result: Result<HeldLock, AttemptError>, prepared: Option<Prepared>) {
        if self.abandoned {
            if let Ok(held) = result {
                let _ = held.release();
            }
        } else {
            self.result = Some(result);
            self.prepared = prepared;
        }
    }
}

/// Marks a blocking attempt abandoned when its future is dropped, releasing what it got.
pub(super) struct AbandonOnDrop(Arc<Mutex<Handoff>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        let mut h = unpoisoned(&self.0);
        h.abandoned = true;
        if let Some(Ok(held)) = h.result.take() {
            let _ = held.release();
        }
    }
}

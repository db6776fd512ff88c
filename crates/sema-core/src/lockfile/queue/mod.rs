//! The cross-process wait queue of one lock: waiters in different processes line up on an
//! exclusive `flock` of a queue file, and only the one holding it (the *head*) watches the lock
//! file. A release then wakes one waiting process instead of all of them, and a process that
//! has just released cannot take the lock again ahead of those already waiting.
//!
//! The queue only orders waiting; it never decides who holds the lock (the lock file does), so
//! it cannot break mutual exclusion: foreign tools that know nothing of it, a waiter that gave
//! up, a head that crashed (the kernel drops its `flock`) or a missing queue file only cost
//! fairness or speed. Waiters behind the head still poll the lock file at their
//! `retry_interval`, so a stopped head (SIGSTOP) delays them but cannot block them.
//!
//! Within one process only the holder of the in-process slot (the FIFO of `LockFile`) waits
//! here, so each process has at most one place in the line per lock. That place is taken by a
//! thread blocked in `flock(LOCK_EX)` (the *agent*; the kernel serves blocked `flock`s roughly
//! in order and wakes one of them per unlock). A waiter that gives up leaves the agent blocked:
//! when it reaches the head and nobody in its process wants the lock any more, it unlocks at
//! once. The next waiter of the same process reuses it, so there is never more than one agent
//! per process and lock.
//!
//! The queue files live in `/dev/shm/sema-native-<uid>/` (memory, gone at reboot), one empty
//! file per lock while it has waiters, named by a hash of the lock's canonical path; the last
//! process to leave an empty line removes it (and the directory when it is empty). A process
//! that was killed cannot: the first process of the user that verifies the directory sweeps
//! the queue files nobody stands in (no presence mark, no head). The directory is verified
//! (ours, mode 0700, not a symlink) through a descriptor that is then held open: every file in
//! it is opened relative to that descriptor, so a directory another user puts at the path
//! after it was removed is never used. Linux only; elsewhere there is no queue and every
//! waiter watches the lock file itself.
//!
//! The same directory holds `breakers`, whose byte-range locks serialise this user's breakers
//! of one stale lock file ([`lock_break`]): a lock nobody else can take or block.

use std::path::Path;
use std::sync::Arc;

/// The queue of a lock this process has waited for, if one exists (one `open` the first time
/// per lock, then a map lookup). `None` = nobody ever had to wait for this lock, or there is no
/// queue on this system.
pub(crate) fn existing(key: &Path) -> Option<Arc<Queue>> {
    imp::get(key, false)
}

/// The queue of a lock, created if needed (a waiter that found the lock taken).
pub(crate) fn create(key: &Path) -> Option<Arc<Queue>> {
    imp::get(key, true)
}

pub(crate) use imp::{lock_break, waiting_processes, BreakLock, Place, Queue};

/// How long a waiter lets others go first: until then, a process that finds the head's place
/// free may take it (and the lock) ahead of the line, which lets a busy lock change hands
/// without a cross-process wake-up each time; after it, the waiter is *starving* and the line
/// is strict (as Go's `sync.Mutex` switches to hand-off after 1 ms). A hand-off between
/// processes costs ~150 µs here against ~1 µs between goroutines, hence 5 ms rather than 1.
/// Measured with 8 processes in tmpfs: 1 ms gives 5.2 k hand-offs/s, 5 ms ~7 k, 10 and 20 ms
/// no more; the wait p99 stays 4–6 ms throughout.
pub(crate) const STARVING_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;

#[cfg(not(target_os = "linux"))]
mod absent;
#[cfg(not(target_os = "linux"))]
use absent as imp;

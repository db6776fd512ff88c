//! Handing a held lock to another process of this host: `sema-native run` on Windows records
//! its command as the holder, so that the command keeps the lock if the wrapper dies.
//!
//! Why not the descriptor, as on Unix: a Windows byte-range lock belongs to the process that
//! took it, and the system drops it when that process ends, whoever else holds a handle of the
//! file. So the holder's presence mark dies with the wrapper; what keeps the lock held after
//! that is the content: the recorded pid and start time are the command's, and the stale rule
//! judges a lock of this host held while its recorded process lives (the same start time) and
//! stale at once when it is gone. While the wrapper lives, its presence mark keeps the lock
//! held whatever the file says (the command may end first); the wrapper releases by token.

use std::io;

use super::held::HeldLock;
use super::process::{self, Liveness};
use super::unpoisoned;

impl HeldLock {
    /// Record process `pid` (a child of ours that is running) as the holder: the lock file is
    /// rewritten in place with its pid and start time (one write, same token, fresh timestamp),
    /// and the heartbeat keeps them. A reader between the write and the truncation of a longer
    /// old content sees an unparseable file, which counts as held.
    ///
    /// `Ok(false)` when the lock is no longer ours (released or lost) or `pid` is not a running
    /// process; nothing is written then.
    pub fn hand_over(&self, pid: i64) -> io::Result<bool> {
        if pid <= 0 || process::probe_liveness(pid) != Liveness::Alive {
            return Ok(false);
        }
        let start = process::process_start_ticks(pid);
        let mut state = unpoisoned(&self.inner.state);
        let written = self.inner.rewrite_if_ours(&mut state, |next| {
            next.pid = pid;
            next.start = start;
        })?;
        if written {
            state.handed_to = Some((pid, start));
        }
        Ok(written)
    }
}

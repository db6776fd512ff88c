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

use super::held::{HeldLock, Ownership};
use super::process::{self, now_unix_secs, Liveness};
use super::sys;
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
        let inner = &self.inner;
        let mut state = unpoisoned(&inner.state);
        if state.finished {
            return Ok(false);
        }
        match inner.ownership(&state) {
            Ownership::Ours => {}
            Ownership::Lost(reason) => {
                inner.lose(&mut state, reason);
                return Ok(false);
            }
            Ownership::Unknown(e) => return Err(e),
        }
        let mut next = inner.current(&state);
        next.pid = pid;
        next.start = start;
        next.timestamp = now_unix_secs();
        let content = next.serialize().into_bytes();
        let Some(file) = state.file.as_ref() else {
            return Ok(false);
        };
        sys::rewrite_in_place(file, &content, state.content.len())?;
        state.content = content;
        state.timestamp = next.timestamp;
        state.handed_to = Some((pid, start));
        Ok(true)
    }
}

//! The files world's invariants: checked after every step ([`FilesWorld::check`]), and the
//! "free for this waiter" judgement behind the reclaim bound.

use super::*;

impl FilesWorld {
    /// Every step invariant.
    pub(super) fn check(&self) -> Result<(), Violation> {
        let mut st = self.st.borrow_mut();
        let believers: Vec<(usize, Grant, String)> = st
            .procs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.alive())
            .filter_map(|(i, p)| p.grant.as_ref().map(|(g, n, _)| (i, *g, n.clone())))
            .collect();
        let who = || format!("{believers:?}");
        for (k, (_, _, name)) in believers.iter().enumerate() {
            if believers[k + 1..].iter().any(|(_, _, n)| n == name) {
                return Err(Violation(format!(
                    "two processes believe they hold {name}: {}",
                    who()
                )));
            }
        }
        let count = believers.len();
        match self.family {
            Family::Semaphore => {
                let smallest = believers
                    .iter()
                    // The invariant of `semaphore::plan`: over the holders whose limit is known.
                    // Slot 0 (the base path) records no limit (`sema`/`semats` write the same
                    // file): a limit-2 holder there beside two limit-3 slots is the documented
                    // interop, not a defect.
                    .filter_map(|(_, g, _)| match g {
                        Grant::Slot { limit, index } if *index > 0 => Some(*limit),
                        _ => None,
                    })
                    .min()
                    .unwrap_or(1) as usize;
                if count > smallest {
                    return Err(Violation(format!(
                        "{count} holders, over the smallest limit {smallest} among them: {}",
                        who()
                    )));
                }
            }
            Family::Shared => {
                let writers = believers
                    .iter()
                    .filter(|(_, g, _)| matches!(g, Grant::Plain | Grant::Writer))
                    .count();
                if writers > 1 || (writers == 1 && count > 1) {
                    return Err(Violation(format!(
                        "{writers} writers beside {} readers: {}",
                        count - writers,
                        who()
                    )));
                }
            }
        }
        // Liveness: a waiter that could run and finds the lock free gets it within the bound.
        let bound = FREE_BOUND_POLLS * st.cfg.retry_ms;
        let now = st.now;
        let frees: Vec<bool> = (0..st.procs.len()).map(|w| free_for(&st, w)).collect();
        for (i, p) in st.procs.iter_mut().enumerate() {
            let Some(w) = p.waiting.as_mut() else {
                continue;
            };
            if p.life != Life::Running || !frees[i] {
                w.free_since = None;
                continue;
            }
            let since = *w.free_since.get_or_insert(now);
            if now - since > bound {
                return Err(Violation(format!(
                    "process {i} (pid {}) waits while the lock has been free since {since} ms (now {now} ms)",
                    p.pid
                )));
            }
        }
        Ok(())
    }
}

/// Whether the lock is free for waiter `w`: no file of another live process, and none of a dead
/// one that is not reclaimable yet (a shared base: by its readers; another namespace's: when the
/// waiter first saw its last write `remote_bound` ago). With [`FREE_BOUND_POLLS`] this bounds the
/// reclaim of a SIGKILLed holder on another host: `REMOTE_BEATS` evidence periods (or the stale
/// timeout before its first beat) from the waiter's first look + 5 retry intervals.
pub(super) fn free_for(st: &State, w: usize) -> bool {
    st.fs.files().all(|(name, inode)| {
        if inode.writer == w {
            return true;
        }
        if name == BASE && bytes_are_shared_base(&inode.bytes) {
            return true;
        }
        let writer = &st.procs[inode.writer];
        if writer.alive() {
            return false;
        }
        if writer.ns == st.procs[w].ns {
            return true;
        }
        let recorded = parse_lock_info(&read_lock_bytes_lossy(&inode.bytes))
            .ok()
            .and_then(|i| i.heartbeat_ms);
        let bound = remote_bound(recorded, st.cfg.stale_timeout).as_millis() as u64;
        st.procs[w]
            .first_seen
            .get(&inode.id)
            .is_some_and(|&(write, at)| write == inode.written && st.now >= at + bound)
    })
}

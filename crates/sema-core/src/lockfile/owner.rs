//! "Is this lock mine?": the one rule behind `status().isOwnedByCurrentProcess`, `release(path)`,
//! semats' `Semaphore.release()` and the CLI's `release` (which claims a lock for `--pid`). Every
//! caller asks [`LockFile::is_mine`](super::LockFile::is_mine); nothing re-implements it.
//!
//! A pid alone proves nothing across containers: two containers sharing a lock directory each
//! have their own pid 1. So a file in our format (it carries `host=`) is mine only when
//!
//! - its `token=` is the token of a lock this process holds on that path (the claimant being this
//!   process), or
//! - its `host=` is this host identity (hostname, boot id, pid namespace: see
//!   [`host_identity`]) **and** its pid is the claimant's **and** its
//!   recorded `start=` is not contradicted by the claimant's start time (a later process that got
//!   the same pid is not the holder). This is how a lock recorded for another process of this
//!   host (the CLI's `--pid`, `run`'s hand-over to its command) is recognised by that process.
//!
//! A file without `host=` (written by `sema`, `semats` or a shell) carries no identity: the pid
//! alone decides, as those tools do. A pid ≤ 0 names no process and is nobody's.

use super::format::LockInfo;
use super::process::{current_pid, host_identity, own_start_ticks, process_start_ticks};

/// The facts about a claimant that the rule needs (gathered by [`Claimant::of`]; tests make their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimant<'a> {
    /// The pid claimed: this process's, or the one a lock was recorded for (`--pid`).
    pub pid: i64,
    /// Whether `pid` is this process: only then does a token this process holds count.
    pub is_current_process: bool,
    /// This host's identity (`host=` as we write it).
    pub host: &'a str,
    /// The start time of the process `pid` now (clock ticks since boot), where known.
    pub start_ticks: Option<u64>,
}

impl Claimant<'static> {
    /// The claimant `pid` on this host, as the system describes it now.
    pub fn of(pid: i64) -> Claimant<'static> {
        let is_current_process = pid == current_pid();
        Claimant {
            pid,
            is_current_process,
            host: host_identity(),
            start_ticks: if is_current_process {
                own_start_ticks()
            } else {
                process_start_ticks(pid)
            },
        }
    }
}

/// Whether the lock `info` is the claimant's (see the module docs). `holds_token(token)`: does this
/// process hold a lock on this path with that token.
pub fn owns(
    info: &LockInfo,
    claimant: &Claimant<'_>,
    holds_token: impl FnOnce(&str) -> bool,
) -> bool {
    if claimant.is_current_process && info.token.as_deref().is_some_and(holds_token) {
        return true;
    }
    if info.pid <= 0 || info.pid != claimant.pid {
        return false;
    }
    match info.host.as_deref() {
        // No identity (sema, semats, a shell): the pid alone, as those tools decide.
        None => true,
        Some(host) => {
            host == claimant.host
                && !matches!((info.start, claimant.start_ticks), (Some(recorded), Some(now)) if recorded != now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(pid: i64, host: Option<&str>, start: Option<u64>, token: Option<&str>) -> LockInfo {
        LockInfo {
            heartbeat_ms: None,
            pid,
            timestamp: 1_700_000_000,
            tag: None,
            host: host.map(str::to_string),
            start,
            token: token.map(str::to_string),
        }
    }

    const HOST: &str = "box:boot-1:4026531836";
    /// The same machine seen from another pid namespace (a container sharing the volume).
    const OTHER_NS: &str = "box:boot-1:4026532201";

    fn me(pid: i64) -> Claimant<'static> {
        Claimant {
            pid,
            is_current_process: true,
            host: HOST,
            start_ticks: Some(500),
        }
    }

    #[test]
    fn same_pid_in_another_pid_namespace_is_not_mine() {
        let theirs = info(1, Some(OTHER_NS), Some(500), Some("aa"));
        assert!(!owns(&theirs, &me(1), |_| false));
        // Also when acting for that pid (the CLI's --pid 1).
        let acting = Claimant {
            is_current_process: false,
            ..me(1)
        };
        assert!(!owns(&theirs, &acting, |_| false));
    }

    #[test]
    fn our_host_our_pid_is_mine_unless_the_start_time_says_another_process() {
        assert!(owns(
            &info(7, Some(HOST), Some(500), Some("aa")),
            &me(7),
            |_| false
        ));
        assert!(owns(&info(7, Some(HOST), None, Some("aa")), &me(7), |_| {
            false
        }));
        let unknown_start = Claimant {
            start_ticks: None,
            ..me(7)
        };
        assert!(owns(
            &info(7, Some(HOST), Some(500), None),
            &unknown_start,
            |_| false
        ));
        // The pid was reused: the recorded holder started at another time.
        assert!(!owns(
            &info(7, Some(HOST), Some(499), Some("aa")),
            &me(7),
            |_| false
        ));
        assert!(!owns(
            &info(8, Some(HOST), Some(500), Some("aa")),
            &me(7),
            |_| false
        ));
    }

    #[test]
    fn a_token_this_process_holds_is_mine_whatever_the_pid() {
        // `run` handed the lock to its command: the file names the child, the token is ours.
        let handed = info(4242, Some(HOST), Some(900), Some("aa"));
        assert!(owns(&handed, &me(7), |t| t == "aa"));
        assert!(!owns(&handed, &me(7), |_| false));
        // Only for this process itself, not when acting for another pid.
        let acting = Claimant {
            is_current_process: false,
            ..me(7)
        };
        assert!(!owns(&handed, &acting, |_| true));
    }

    #[test]
    fn files_without_identity_are_decided_by_the_pid_alone() {
        assert!(owns(&info(7, None, None, None), &me(7), |_| false));
        assert!(!owns(&info(8, None, None, None), &me(7), |_| false));
    }

    #[test]
    fn a_pid_of_zero_or_below_is_nobodys() {
        for pid in [0, -1] {
            for host in [None, Some(HOST)] {
                let claimant = Claimant { pid, ..me(pid) };
                assert!(!owns(&info(pid, host, None, None), &claimant, |_| false));
            }
        }
    }
}

//! Process facts: liveness, start time, host identity, wall clock. What each system can tell
//! is in its backend (`unix.rs`; `portable.rs`, std only, where there is none yet).

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as os;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as os;

mod windows_args;
pub use windows_args::split_windows_command_line;

#[cfg(not(any(unix, windows)))]
mod portable;
#[cfg(not(any(unix, windows)))]
use portable as os;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// `Math.floor(Date.now() / 1000)`: Unix seconds, floored (negative before 1970).
pub fn now_unix_secs() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -secs - i64::from(d.subsec_nanos() > 0)
        }
    }
}

/// What `kill(pid, 0)` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The call succeeded or failed with `EPERM`: a process (or group) exists.
    Alive,
    /// `ESRCH`: no such process. The only answer that proves death.
    Dead,
    /// The pid is not a valid `kill` argument (outside int32) or another error occurred.
    Unknown,
}

/// `kill(pid, 0)` as [`Liveness`] (where the system has no such probe, every pid is alive).
/// pid 0 and negative pids address process groups, exactly as Node's `process.kill` does.
pub fn probe_liveness(pid: i64) -> Liveness {
    os::probe_liveness(pid)
}

/// The command line of process `pid` as the system keeps it (one string), where only a system
/// call can tell it: Windows. `None` elsewhere (Unix callers read `/proc/<pid>/cmdline` or `ps`)
/// and when the process is gone or may not be queried.
pub fn process_command_line(pid: i64) -> Option<String> {
    os::process_command_line(pid)
}

/// The command line of process `pid` as words, where the system tells it: Linux reads
/// `/proc/<pid>/cmdline`, Windows splits its one string as the C runtime does
/// ([`split_windows_command_line`]); `None` elsewhere, when the
/// process is gone, or when it may not be queried.
pub fn process_args(pid: i64) -> Option<Vec<String>> {
    os::process_args(pid)
}

/// semats' `isProcessRunning` (`process.kill(pid, 0)`, any throw = dead) with one documented
/// fix: `EPERM` (a live process of another user) counts as running. pids outside int32 are not
/// running (Node throws a TypeError for them); pid 0 and negative pids address process groups
/// and are usually "running", as in semats. Non-unix platforms report every pid as running.
pub fn is_process_running(pid: i64) -> bool {
    probe_liveness(pid) == Liveness::Alive
}

/// This process's pid, cached (a child after `fork` looks it up again).
pub fn current_pid() -> i64 {
    match PID.load(Ordering::Relaxed) {
        0 => i64::from(init_pid()),
        p => i64::from(p),
    }
}

static PID: AtomicU32 = AtomicU32::new(0);

fn init_pid() -> u32 {
    static HOOK: Once = Once::new();
    HOOK.call_once(os::hook_fork);
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Run in the child right after a `fork` (async-signal-safe: atomics only): the cached pid
/// is the parent's, and the random generator must not repeat the parent's stream.
#[cfg_attr(not(unix), allow(dead_code))] // no fork, no hook
fn forgot_pid_after_fork() {
    PID.store(0, Ordering::Relaxed);
    super::rng::FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Start time of `pid` in clock ticks since boot (Linux; unknown elsewhere).
pub fn process_start_ticks(pid: i64) -> Option<u64> {
    os::process_start_ticks(pid)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after the last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // `/proc` only
pub(crate) fn parse_stat_start_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After ')' comes field 3 (state); field 22 is the 20th whitespace-separated item.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Start time of this process in clock ticks since boot, computed once (per pid, so a forked
/// child computes its own).
pub fn own_start_ticks() -> Option<u64> {
    static OWN: Mutex<Option<(i64, Option<u64>)>> = Mutex::new(None);
    let me = current_pid();
    let mut cached = OWN.lock().unwrap_or_else(PoisonError::into_inner);
    match *cached {
        Some((pid, ticks)) if pid == me => ticks,
        _ => {
            let ticks = process_start_ticks(me);
            *cached = Some((me, ticks));
            ticks
        }
    }
}

/// Start time of `pid` as Unix seconds (fractional; Linux, unknown elsewhere).
pub fn process_start_unix_secs(pid: i64) -> Option<f64> {
    os::process_start_unix_secs(pid)
}

/// This machine's identity as written to `host=`, computed once per process.
///
/// Linux: `<hostname>:<boot_id>:<pid namespace inode>`, so a reboot or a container that shares
/// a volume but not our pid namespace is "another host" (its pids mean nothing to us).
/// macOS: `<hostname>:<boot time in seconds>`. Elsewhere: the hostname.
pub fn host_identity() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(os::compute_host_identity)
}

pub(crate) fn clean_component(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| {
            if (c as u32) < 0x20 || c == '\u{7f}' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_field_22() {
        let line = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 19 20";
        assert_eq!(parse_stat_start_ticks(line), Some(424242));
        assert_eq!(parse_stat_start_ticks("garbage"), None);
        assert_eq!(parse_stat_start_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn own_process_facts() {
        assert!(is_process_running(current_pid()));
        assert!(!is_process_running(999_999_999));
        assert!(!is_process_running(i64::from(i32::MAX) + 1));
        assert!(now_unix_secs() > 1_600_000_000);
        let host = host_identity();
        assert!(!host.contains('\n'));
        #[cfg(target_os = "linux")]
        {
            assert!(host.matches(':').count() >= 2);
            assert!(own_start_ticks().is_some());
            let start = process_start_unix_secs(current_pid()).unwrap_or(0.0);
            assert!(start <= now_unix_secs() as f64 + 1.0 && start > 1_000_000_000.0);
        }
    }
}

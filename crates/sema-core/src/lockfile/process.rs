//! Process facts: liveness, start time, host identity, wall clock.

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

/// `kill(pid, 0)` as [`Liveness`]. pid 0 and negative pids address process groups, exactly as
/// Node's `process.kill` does.
#[cfg(unix)]
pub fn probe_liveness(pid: i64) -> Liveness {
    let Ok(pid) = i32::try_from(pid) else {
        return Liveness::Unknown;
    };
    // SAFETY: `kill` with signal 0 sends no signal; it only checks that the target exists and
    // that we may signal it. It reads and writes no memory of ours, so any pid value is sound.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc == 0 {
        return Liveness::Alive;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) => Liveness::Alive,
        Some(libc::ESRCH) => Liveness::Dead,
        _ => Liveness::Unknown,
    }
}

/// Without a portable `kill(pid, 0)` every pid counts as alive (never break on a guess).
#[cfg(not(unix))]
pub fn probe_liveness(_pid: i64) -> Liveness {
    Liveness::Alive
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
    HOOK.call_once(|| {
        #[cfg(unix)]
        // SAFETY: registers a plain `extern "C"` function without arguments that only stores to
        // atomics (async-signal-safe, as a fork child handler must be); no pointers are passed.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

#[cfg(unix)]
extern "C" fn after_fork_child() {
    PID.store(0, Ordering::Relaxed);
    super::rng::FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Start time of `pid` in clock ticks since boot (field 22 of its main thread's `stat`), Linux only.
///
/// Read from `/proc/<pid>/task/<pid>/stat`, the same line as `/proc/<pid>/stat` on Linux, because
/// qemu-user (Docker's multi-platform builds run arm64 containers under it) fakes `/proc/self/stat`
/// and `/proc/<own pid>/stat` with the *calling thread's* start: measured under qemu-aarch64 7.2,
/// 243687 from the main thread, 243900 from a worker thread, while the kernel's value, which every
/// other process reads, is 243685. A lock written with one and checked with another looked like a
/// reused pid, so a live holder's lock was judged stale. The task path is not faked.
#[cfg(target_os = "linux")]
pub fn process_start_ticks(pid: i64) -> Option<u64> {
    if pid <= 0 || pid > i64::from(i32::MAX) {
        return None;
    }
    let stat = std::fs::read(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
    parse_stat_start_ticks(&String::from_utf8_lossy(&stat))
}

/// Start time of `pid` in clock ticks since boot: unknown outside Linux.
#[cfg(not(target_os = "linux"))]
pub fn process_start_ticks(_pid: i64) -> Option<u64> {
    None
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after the last `)`.
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

/// Start time of `pid` as Unix seconds (fractional), Linux only: boot time (`btime` in
/// `/proc/stat`) plus start ticks divided by `_SC_CLK_TCK`.
#[cfg(target_os = "linux")]
pub fn process_start_unix_secs(pid: i64) -> Option<f64> {
    let ticks = process_start_ticks(pid)?;
    let (btime, hz) = boot_time_and_hz()?;
    Some(btime as f64 + ticks as f64 / hz as f64)
}

/// Start time of `pid` as Unix seconds: unknown outside Linux.
#[cfg(not(target_os = "linux"))]
pub fn process_start_unix_secs(_pid: i64) -> Option<f64> {
    None
}

#[cfg(target_os = "linux")]
fn boot_time_and_hz() -> Option<(i64, i64)> {
    static CACHE: OnceLock<Option<(i64, i64)>> = OnceLock::new();
    *CACHE.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let btime = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<i64>()
            .ok()?;
        // SAFETY: `sysconf` only reads a configuration value; no pointers are involved.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if hz <= 0 {
            return None;
        }
        Some((btime, i64::from(hz as i32)))
    })
}

/// This machine's identity as written to `host=`, computed once per process.
///
/// Linux: `<hostname>:<boot_id>:<pid namespace inode>`, so a reboot or a container that shares
/// a volume but not our pid namespace is "another host" (its pids mean nothing to us).
/// macOS: `<hostname>:<boot time in seconds>`. Elsewhere: the hostname.
pub fn host_identity() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(compute_host_identity)
}

fn clean_component(s: &str) -> String {
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

#[cfg(target_os = "linux")]
fn compute_host_identity() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(libc_hostname)
        .unwrap_or_default();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let pidns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            let start = s.find('[')? + 1;
            let end = s[start..].find(']')? + start;
            Some(s[start..end].to_string())
        })
        .unwrap_or_default();
    format!(
        "{}:{}:{}",
        clean_component(&hostname),
        clean_component(&boot_id),
        clean_component(&pidns)
    )
}

#[cfg(target_os = "macos")]
fn compute_host_identity() -> String {
    let hostname = libc_hostname().unwrap_or_default();
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len: libc::size_t = std::mem::size_of::<libc::timeval>();
    let name = c"kern.boottime";
    // SAFETY: `name` is a NUL-terminated C string; `tv` is a writable `timeval` and `len` holds
    // its exact size, so the kernel writes at most `len` bytes into it; no new value is set.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    let boot = if rc == 0 {
        tv.tv_sec.to_string()
    } else {
        String::new()
    };
    format!("{}:{}", clean_component(&hostname), boot)
}

#[cfg(all(unix, not(any(target_os = "linux", target_os = "macos"))))]
fn compute_host_identity() -> String {
    clean_component(&libc_hostname().unwrap_or_default())
}

#[cfg(not(unix))]
fn compute_host_identity() -> String {
    clean_component(
        &std::env::var("COMPUTERNAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_default(),
    )
}

#[cfg(unix)]
fn libc_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a writable buffer of the length we pass; gethostname writes at most that
    // many bytes into it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
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

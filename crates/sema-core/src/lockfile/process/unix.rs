//! Process facts on Unix: `kill(pid, 0)`, the fork hook, start times from `/proc` (Linux) and
//! the host's identity (boot id and pid namespace on Linux, boot time on macOS).

use rustix::io::Errno;
use rustix::process::Pid;

use super::{clean_component, Liveness};

/// `kill(pid, 0)` as [`Liveness`]. pid 0 and negative pids address process groups, exactly as
/// Node's `process.kill` does.
pub(crate) fn probe_liveness(pid: i64) -> Liveness {
    let Ok(pid) = i32::try_from(pid) else {
        return Liveness::Unknown;
    };
    let probed = match pid {
        0 => rustix::process::test_kill_current_process_group(),
        // kill(INT_MIN, 0) names no group (its negation overflows): the kernel says ESRCH.
        i32::MIN => Err(Errno::SRCH),
        p => match Pid::from_raw(p.abs()) {
            Some(target) if p > 0 => rustix::process::test_kill_process(target),
            Some(group) => rustix::process::test_kill_process_group(group),
            None => Err(Errno::SRCH),
        },
    };
    match probed {
        Ok(()) | Err(Errno::PERM) => Liveness::Alive,
        Err(Errno::SRCH) => Liveness::Dead,
        Err(_) => Liveness::Unknown,
    }
}

/// Have [`after_fork_child`] run in the child of every `fork` (once per process).
pub(crate) fn hook_fork() {
    // SAFETY: registers a plain `extern "C"` function without arguments that only stores to
    // atomics (async-signal-safe, as a fork child handler must be); no pointers are passed.
    // rustix has no `pthread_atfork`, hence libc.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_child));
    }
}

extern "C" fn after_fork_child() {
    super::forgot_pid_after_fork();
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
pub(crate) fn process_start_ticks(pid: i64) -> Option<u64> {
    if pid <= 0 || pid > i64::from(i32::MAX) {
        return None;
    }
    let stat = std::fs::read(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
    super::parse_stat_start_ticks(&String::from_utf8_lossy(&stat))
}

/// Start time of `pid` in clock ticks since boot: unknown outside Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn process_start_ticks(_pid: i64) -> Option<u64> {
    None
}

/// Start time of `pid` as Unix seconds (fractional), Linux only: boot time (`btime` in
/// `/proc/stat`) plus start ticks divided by the clock tick rate.
#[cfg(target_os = "linux")]
pub(crate) fn process_start_unix_secs(pid: i64) -> Option<f64> {
    let ticks = process_start_ticks(pid)?;
    let (btime, hz) = boot_time_and_hz()?;
    Some(btime as f64 + ticks as f64 / hz as f64)
}

/// Start time of `pid` as Unix seconds: unknown outside Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn process_start_unix_secs(_pid: i64) -> Option<f64> {
    None
}

#[cfg(target_os = "linux")]
fn boot_time_and_hz() -> Option<(i64, u64)> {
    use std::sync::OnceLock;
    static CACHE: OnceLock<Option<(i64, u64)>> = OnceLock::new();
    *CACHE.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let btime = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<i64>()
            .ok()?;
        let hz = rustix::param::clock_ticks_per_second();
        (hz > 0).then_some((btime, hz))
    })
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Linux: `<hostname>:<boot_id>:<pid namespace inode>`, so a reboot or a container that shares
/// a volume but not our pid namespace is "another host" (its pids mean nothing to us).
#[cfg(target_os = "linux")]
pub(crate) fn compute_host_identity() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .unwrap_or_else(hostname);
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

/// macOS: `<hostname>:<boot time in seconds>`.
#[cfg(target_os = "macos")]
pub(crate) fn compute_host_identity() -> String {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len: libc::size_t = std::mem::size_of::<libc::timeval>();
    let name = c"kern.boottime";
    // SAFETY: `name` is a NUL-terminated C string; `tv` is a writable `timeval` and `len` holds
    // its exact size, so the kernel writes at most `len` bytes into it; no new value is set.
    // rustix has no `sysctlbyname`, hence libc.
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
    format!("{}:{}", clean_component(&hostname()), boot)
}

/// Other Unix systems: the hostname.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub(crate) fn compute_host_identity() -> String {
    clean_component(&hostname())
}

/// Unix callers read `/proc/<pid>/cmdline` or `ps` themselves: see the caller's doc.
pub(crate) fn process_command_line(_pid: i64) -> Option<String> {
    None
}

/// Linux: the words of `/proc/<pid>/cmdline` (NUL-separated; lossy UTF-8), `None` when it cannot
/// be read (gone, or hidden by `hidepid`) or is empty (a kernel thread, a zombie).
#[cfg(target_os = "linux")]
pub(crate) fn process_args(pid: i64) -> Option<Vec<String>> {
    if pid <= 0 {
        return None;
    }
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!words.is_empty()).then_some(words)
}

/// Other Unix systems: no file to read it from (`ps` is a process to start, not a system call).
#[cfg(not(target_os = "linux"))]
pub(crate) fn process_args(_pid: i64) -> Option<Vec<String>> {
    None
}

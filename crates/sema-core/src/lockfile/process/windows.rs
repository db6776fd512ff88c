//! Process facts on Windows: liveness from `OpenProcess` + `WaitForSingleObject`, start times
//! from `GetProcessTimes` (100 ns units since 1601, what `start=` records here), the host's
//! name.

use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, ERROR_ACCESS_DENIED, ERROR_INVALID_PARAMETER, FILETIME, HANDLE,
    WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, GetProcessTimes, OpenProcess, WaitForSingleObject,
    PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
};

use super::{clean_component, Liveness};

/// `STILL_ACTIVE`: what `GetExitCodeProcess` says of a running process.
const STILL_ACTIVE: u32 = 259;

/// A process handle, closed when dropped.
struct Process(HANDLE);

impl Drop for Process {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful OpenProcess and is closed only here.
        unsafe { CloseHandle(self.0) };
    }
}

/// `OpenProcess(access, pid)`, or the error code.
fn open(pid: u32, access: u32) -> Result<Process, u32> {
    // SAFETY: no pointers; a null return is checked.
    let h = unsafe { OpenProcess(access, 0, pid) };
    if h.is_null() {
        // SAFETY: reads this thread's last error, set by the failed call just above.
        Err(unsafe { GetLastError() })
    } else {
        Ok(Process(h))
    }
}

/// What Node's `process.kill(pid, 0)` says on Windows (libuv's `uv_kill`): pid 0 is this
/// process; a pid no process has is `ESRCH` (dead); a process of another user that we may not
/// open is `EPERM` (alive); an exited process whose handle someone keeps is dead.
pub(crate) fn probe_liveness(pid: i64) -> Liveness {
    let Ok(pid) = i32::try_from(pid) else {
        return Liveness::Unknown;
    };
    if pid == 0 {
        return Liveness::Alive;
    }
    let Ok(pid) = u32::try_from(pid) else {
        return Liveness::Dead; // OpenProcess refuses it: ERROR_INVALID_PARAMETER
    };
    match open(pid, PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_SYNCHRONIZE) {
        // SAFETY: a valid process handle with SYNCHRONIZE access; a zero timeout never blocks.
        Ok(p) => match unsafe { WaitForSingleObject(p.0, 0) } {
            WAIT_TIMEOUT => Liveness::Alive,
            WAIT_OBJECT_0 => Liveness::Dead,
            _ => Liveness::Unknown,
        },
        Err(ERROR_INVALID_PARAMETER) => Liveness::Dead,
        Err(ERROR_ACCESS_DENIED) => match open(pid, PROCESS_QUERY_LIMITED_INFORMATION) {
            Ok(p) => {
                let mut code = 0u32;
                // SAFETY: a valid process handle with query access; `code` is writable.
                if unsafe { GetExitCodeProcess(p.0, &mut code) } != 0 && code != STILL_ACTIVE {
                    Liveness::Dead
                } else {
                    Liveness::Alive
                }
            }
            Err(_) => Liveness::Alive, // another user's (or a protected) process: EPERM
        },
        Err(_) => Liveness::Unknown,
    }
}

/// No fork on Windows: nothing to hook.
pub(crate) fn hook_fork() {}

/// The creation time of `pid` in 100 ns units since 1601 (`GetProcessTimes`).
pub(crate) fn process_start_ticks(pid: i64) -> Option<u64> {
    let pid = u32::try_from(pid).ok().filter(|&p| p != 0)?;
    let p = open(pid, PROCESS_QUERY_LIMITED_INFORMATION).ok()?;
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: a valid process handle with query access; the four FILETIMEs are writable.
    let ok = unsafe { GetProcessTimes(p.0, &mut created, &mut exited, &mut kernel, &mut user) };
    if ok == 0 {
        return None;
    }
    let ticks = (u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime);
    (ticks != 0).then_some(ticks)
}

/// 100 ns intervals between 1601-01-01 and 1970-01-01.
const UNIX_EPOCH_TICKS: u64 = 116_444_736_000_000_000;

pub(crate) fn process_start_unix_secs(pid: i64) -> Option<f64> {
    let ticks = process_start_ticks(pid)?.checked_sub(UNIX_EPOCH_TICKS)?;
    Some(ticks as f64 / 1e7)
}

/// The computer's name (a reboot is told apart by the start time of a reused pid).
pub(crate) fn compute_host_identity() -> String {
    clean_component(
        &std::env::var("COMPUTERNAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_default(),
    )
}

//! Process facts on Windows: liveness from `OpenProcess` + `WaitForSingleObject`, start times
//! from `GetProcessTimes` (100 ns units since 1601, what `start=` records here), the host's
//! name.

use windows_sys::Wdk::System::Threading::{
    NtQueryInformationProcess, ProcessBasicInformation, ProcessCommandLineInformation,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, ERROR_ACCESS_DENIED, ERROR_INVALID_PARAMETER, FILETIME, HANDLE,
    UNICODE_STRING, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::System::Diagnostics::Debug::ReadProcessMemory;
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, GetProcessTimes, OpenProcess, WaitForSingleObject,
    PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
    PROCESS_VM_READ,
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

/// The NTSTATUS codes of a buffer too small for the answer (the needed length is returned).
const STATUS_INFO_LENGTH_MISMATCH: i32 = 0xC000_0004_u32 as i32;
const STATUS_BUFFER_TOO_SMALL: i32 = 0xC000_0023_u32 as i32;
const STATUS_BUFFER_OVERFLOW: i32 = 0x8000_0005_u32 as i32;
/// A command line is at most 32767 UTF-16 units; with its header this bounds the buffer.
const COMMAND_LINE_MAX_BYTES: usize = 70_000;

/// The command line of `pid`: asked of the system (Windows 8.1 and later), else read from the
/// process's own parameters (Wine 8 lacks the query).
pub(crate) fn process_command_line(pid: i64) -> Option<String> {
    let pid = u32::try_from(pid).ok().filter(|&p| p != 0)?;
    command_line_query(pid).or_else(|| command_line_from_peb(pid))
}

/// The command line as words: Windows keeps it as one string, split as each program's C runtime
/// splits it.
pub(crate) fn process_args(pid: i64) -> Option<Vec<String>> {
    process_command_line(pid).map(|line| super::split_windows_command_line(&line))
}

/// `NtQueryInformationProcess(ProcessCommandLineInformation)`: needs only
/// `PROCESS_QUERY_LIMITED_INFORMATION`, no reading of another process's memory. The answer is a
/// `UNICODE_STRING` whose text follows it in the same buffer.
fn command_line_query(pid: u32) -> Option<String> {
    let p = open(pid, PROCESS_QUERY_LIMITED_INFORMATION).ok()?;
    // u64 elements: the buffer is aligned for the UNICODE_STRING at its start.
    let mut buf: Vec<u64> = vec![0; 512];
    loop {
        let bytes = buf.len() * 8;
        let mut needed = 0u32;
        // SAFETY: a valid process handle with query access; `buf` is writable for `bytes` bytes
        // (a u32 length: at most COMMAND_LINE_MAX_BYTES) and `needed` is writable.
        let status = unsafe {
            NtQueryInformationProcess(
                p.0,
                ProcessCommandLineInformation,
                buf.as_mut_ptr().cast(),
                bytes as u32,
                &mut needed,
            )
        };
        match status {
            0 => break,
            STATUS_INFO_LENGTH_MISMATCH | STATUS_BUFFER_TOO_SMALL | STATUS_BUFFER_OVERFLOW
                if (needed as usize) > bytes && (needed as usize) <= COMMAND_LINE_MAX_BYTES =>
            {
                buf = vec![0; (needed as usize).div_ceil(8)];
            }
            _ => return None,
        }
    }
    if buf.len() * 8 < std::mem::size_of::<UNICODE_STRING>() {
        return None;
    }
    // SAFETY: the call succeeded, so the buffer starts with an initialised UNICODE_STRING; `buf`
    // is 8-byte aligned and at least that large (checked just above).
    let text: &UNICODE_STRING = unsafe { &*buf.as_ptr().cast::<UNICODE_STRING>() };
    let units = usize::from(text.Length) / 2;
    if units == 0 || text.Buffer.is_null() {
        return None;
    }
    let (lo, hi) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len() * 8);
    let (from, to) = (text.Buffer as usize, text.Buffer as usize + units * 2);
    if from < lo || to > hi || from % 2 != 0 {
        return None; // not within our buffer: never read elsewhere
    }
    // SAFETY: `units` UTF-16 units at `text.Buffer` lie inside `buf` (checked above), which is
    // initialised (zeroed, then written by the call) and alive for this borrow; aligned for u16.
    let wide = unsafe { std::slice::from_raw_parts(text.Buffer, units) };
    Some(String::from_utf16_lossy(wide))
}

/// Where the x64 layouts keep the command line (winternl.h): the PEB's `ProcessParameters`
/// pointer, and the `CommandLine` `UNICODE_STRING` in `RTL_USER_PROCESS_PARAMETERS`.
const PEB_PROCESS_PARAMETERS: usize = 0x20;
const PARAMETERS_COMMAND_LINE: usize = 0x70;

/// The command line as the process keeps it in its `RTL_USER_PROCESS_PARAMETERS`, read with
/// `ReadProcessMemory` (the PEB's address from `ProcessBasicInformation`). 64-bit processes
/// only (a 32-bit one has other layouts: its text would not decode to a known shell, which is
/// the safe answer).
fn command_line_from_peb(pid: u32) -> Option<String> {
    if cfg!(not(target_pointer_width = "64")) {
        return None;
    }
    let p = open(pid, PROCESS_QUERY_INFORMATION | PROCESS_VM_READ).ok()?;
    // PROCESS_BASIC_INFORMATION: ExitStatus, then PebBaseAddress, then four more words.
    let mut basic = [0usize; 6];
    let mut len = 0u32;
    // SAFETY: a valid handle with query access; `basic` is writable for its whole size.
    let status = unsafe {
        NtQueryInformationProcess(
            p.0,
            ProcessBasicInformation,
            basic.as_mut_ptr().cast(),
            std::mem::size_of_val(&basic) as u32,
            &mut len,
        )
    };
    if status != 0 || basic[1] == 0 {
        return None;
    }
    let params = read_remote::<usize>(&p, basic[1] + PEB_PROCESS_PARAMETERS)?;
    // UNICODE_STRING: Length (bytes), MaximumLength, padding, then Buffer.
    let header = read_remote::<[usize; 2]>(&p, params.checked_add(PARAMETERS_COMMAND_LINE)?)?;
    let bytes = header[0] & 0xffff;
    if bytes == 0 || bytes % 2 != 0 || header[1] == 0 {
        return None;
    }
    let mut wide = vec![0u16; bytes / 2];
    let mut read = 0usize;
    // SAFETY: a valid handle with VM_READ access; `wide` is writable for `bytes` bytes. The
    // remote address is only read by the system, which fails cleanly on a bad one.
    let ok = unsafe {
        ReadProcessMemory(
            p.0,
            header[1] as *const _,
            wide.as_mut_ptr().cast(),
            bytes,
            &mut read,
        )
    };
    (ok != 0 && read == bytes).then(|| String::from_utf16_lossy(&wide))
}

/// One plain value of type `T` (integers only) read from `address` in process `p`.
fn read_remote<T: Copy + Default>(p: &Process, address: usize) -> Option<T> {
    let mut value = T::default();
    let mut read = 0usize;
    // SAFETY: a valid handle with VM_READ access; `value` is writable for size_of::<T>() bytes,
    // and every bit pattern is a valid T (callers use integers and arrays of them).
    let ok = unsafe {
        ReadProcessMemory(
            p.0,
            address as *const _,
            (&mut value as *mut T).cast(),
            std::mem::size_of::<T>(),
            &mut read,
        )
    };
    (ok != 0 && read == std::mem::size_of::<T>()).then_some(value)
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

//! What the CLI (`sema-native run`, the owner checks) needs of the engine beyond the public API.

use napi_derive::napi;
use sema_core::lockfile;

/// Records process `pid` (the command of `sema-native run`, just spawned) as the holder of the held lock with this
/// token, so that the command keeps the lock if the wrapper dies where an inherited descriptor cannot carry it
/// (Windows). `false` when no such lock is held here or the process is not running.
#[napi]
pub fn hand_lock_to(token: String, pid: i64) -> napi::Result<bool> {
    let Some(held) = lockfile::held_with_token(&token) else {
        return Ok(false);
    };
    held.hand_over(pid).map_err(|e| {
        napi::Error::from_reason(format!("recording the command as the holder failed: {e}"))
    })
}

/// The command line of process `pid` as one string, where only a system call can tell it (Windows); `null`
/// elsewhere or when it cannot be read. The CLI's owner check reads it of its parent process.
#[napi]
pub fn process_command_line(pid: i64) -> Option<String> {
    lockfile::process::process_command_line(pid)
}

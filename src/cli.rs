//! What the CLI (`sema-native run`, the owner checks) needs of the engine beyond the public API.

use napi_derive::napi;
use sema_core::lockfile::{self, LockError};

use crate::result::{result, NativeResult};

/// Records process `pid` (the command of `sema-native run`, just spawned) as the holder of the held lock with this
/// token, so that the command keeps the lock if the wrapper dies where an inherited descriptor cannot carry it
/// (Windows). `false` when no such lock is held here or the process is not running.
#[napi]
pub fn hand_lock_to(token: String, pid: i64) -> NativeResult<bool> {
    let Some(held) = lockfile::held_with_token(&token) else {
        return result(Ok::<_, LockError>(false));
    };
    result(held.hand_over(pid).map_err(|source| LockError::Io {
        context: "recording the command as the holder failed".into(),
        source,
    }))
}

/// The command line of process `pid` as words, where the system tells it (Linux `/proc`; Windows, split as the C
/// runtime splits it); `null` elsewhere or when it cannot be read. The CLI's owner check reads it of its parent.
#[napi]
pub fn process_args(pid: i64) -> Option<Vec<String>> {
    lockfile::process::process_args(pid)
}

/// What the real `sema` reads from a lock file (`LockInfo::parse`): the `sema` front end's view.
#[napi(object)]
pub struct SemaLockInfo {
    pub pid: u32,
    pub timestamp: napi::bindgen_prelude::BigInt,
    pub tag: Option<String>,
}

/// Parses lock-file bytes with the real `sema`'s rules; `null` where `sema` finds no lock info.
#[napi]
pub fn sema_lock_info(bytes: napi::bindgen_prelude::Buffer) -> Option<SemaLockInfo> {
    lockfile::format::parse_sema_lock_info(&bytes).map(|i| SemaLockInfo {
        pid: i.pid,
        timestamp: napi::bindgen_prelude::BigInt::from(i.timestamp),
        tag: i.tag,
    })
}

/// How Rust's `std::io::Error` shows OS error `errno` (`No such file or directory (os error 2)`):
/// the text `sema` prints, from the standard library that prints it rather than a copied table.
#[napi]
pub fn os_error_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// Rust's `Path::parent` of `path` (`null` for a root or an empty path; `""` for a bare name):
/// `sema` checks that this directory exists before it touches the lock.
#[napi]
pub fn path_parent(path: String) -> Option<String> {
    std::path::Path::new(&path)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
}

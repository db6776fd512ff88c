//! The POSIX backend of the platform layer: `O_NOFOLLOW` opens, `lstat`/`fstat` identity,
//! `flock` (the holder's shared lock, the breaker's exclusive one) and `link`. What only Linux
//! has (unnamed files, open-file-description byte locks, file system magics, `/proc/locks`) is
//! in `unix/linux.rs`; the other Unix kernels get the answers of `unix/bsd.rs`.
//!
//! Every call on the lock's name acts on the name itself, never through a symlink there:
//! `O_NOFOLLOW` opens, `lstat`s, and `link`/`O_EXCL` creation (which never follow).

use std::ffi::{CStr, CString};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::io::Errno;

pub(crate) use rustix::fs::FlockOperation;

use super::{ExclusiveLock, FileId};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as kernel;
#[cfg(target_os = "linux")]
pub(crate) use linux::{byte_lock, byte_locked_by_other, is_contention, ByteLock};

#[cfg(not(target_os = "linux"))]
mod bsd;
#[cfg(not(target_os = "linux"))]
use bsd as kernel;

pub(crate) use kernel::{
    breaker_present, dir_fs_kind, dir_fs_magic, hold_presence, link_unnamed, prepare_unnamed,
    presence,
};

/// The lock's path as the system calls take it, converted once per `LockFile` (`None` inside
/// when the path contains a NUL byte, which no call accepts).
#[derive(Debug, Clone)]
pub(crate) struct OsPath(Option<CString>);

impl OsPath {
    pub(crate) fn new(path: &Path) -> OsPath {
        OsPath(c_path(path))
    }

    pub(crate) fn c_str(&self) -> Option<&CStr> {
        self.0.as_deref()
    }
}

/// `path` as a C string (`None` when it contains a NUL byte).
pub(crate) fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

fn errno(e: &io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw_os_error)
}

/// The error means "this file system does not do that".
fn is_unsupported(e: Errno) -> bool {
    e == Errno::OPNOTSUPP || e == Errno::NOTSUP || e == Errno::NOSYS
}

pub(crate) fn file_id(meta: &Metadata) -> FileId {
    FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

// The field widths differ between systems (a 32-bit `dev_t` on macOS), hence the casts.
#[allow(clippy::unnecessary_cast)]
fn stat_to_id(st: &rustix::fs::Stat) -> FileId {
    FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    }
}

/// (device, inode) of an open descriptor: one plain `fstat` (std's `metadata()` is a `statx`
/// asking for every field).
pub(crate) fn fstat_id(file: &File) -> io::Result<FileId> {
    Ok(stat_to_id(&rustix::fs::fstat(file)?))
}

/// (device, inode) of the name `path` itself: one `lstat` through the converted path when
/// there is one (a symlink at the path is described, never followed).
pub(crate) fn stat_id(path: &Path, os_path: Option<&OsPath>) -> io::Result<FileId> {
    match os_path.and_then(OsPath::c_str) {
        Some(c) => Ok(stat_to_id(&rustix::fs::lstat(c)?)),
        None => std::fs::symlink_metadata(path).map(|m| file_id(&m)),
    }
}

pub(super) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
}

pub(super) fn write_all_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(data, offset)
}

/// Options that create a new file exclusively (`O_EXCL`, which never follows a symlink),
/// read-write, mode 0644 (other users may read a lock file, never write it).
pub(super) fn new_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true).mode(0o644);
    options
}

/// Whether a failed `link` means this file system has no hard links.
pub(super) fn link_unsupported(e: &io::Error) -> bool {
    matches!(errno(e), Some(code) if code == Errno::PERM || is_unsupported(code))
}

/// Open an existing lock file for reading (non-blocking, so a FIFO planted at the path cannot
/// hang us; close-on-exec; never through a symlink: see [`is_symlink_refusal`]).
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
}

/// Open an existing lock file read-write (for the breaker's exclusive `flock` on NFS, where an
/// exclusive lock needs a writable descriptor).
pub(crate) fn open_existing_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
}

/// Whether an open of `path` failed because its last component is a symbolic link (`O_NOFOLLOW`
/// gives `ELOOP` then; confirmed with an `lstat`, since a loop in a parent gives it too).
pub(crate) fn is_symlink_refusal(e: &io::Error, path: &Path) -> bool {
    errno(e) == Some(Errno::LOOP) && super::is_symlink(path)
}

/// `flock`, retried when a signal interrupts it.
pub(crate) fn flock(file: &File, op: FlockOperation) -> io::Result<()> {
    loop {
        match rustix::fs::flock(file, op) {
            Ok(()) => return Ok(()),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The holder's shared `flock` (what older versions of this engine look for; best effort: a
/// file system without flock just lacks this liveness signal).
fn flock_shared(file: &File) {
    let _ = flock(file, FlockOperation::LockShared);
}

/// Try the breaker's `flock(LOCK_EX|LOCK_NB)` on `file` (which must be `path`'s file,
/// identified by `id`).
pub(crate) fn try_break_lock(file: &File, path: &Path, id: FileId) -> io::Result<ExclusiveLock> {
    let Err(e) = flock(file, FlockOperation::NonBlockingLockExclusive) else {
        return Ok(ExclusiveLock::Held(None));
    };
    match errno(&e) {
        Some(code) if code == Errno::WOULDBLOCK || code == Errno::AGAIN => Ok(ExclusiveLock::Busy),
        Some(Errno::BADF) => {
            // NFS: exclusive locks need a writable descriptor.
            let Ok(rw) = open_existing_rw(path) else {
                return Ok(ExclusiveLock::Busy);
            };
            if fstat_id(&rw)? != id {
                return Ok(ExclusiveLock::Busy);
            }
            match flock(&rw, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => Ok(ExclusiveLock::Held(Some(rw))),
                Err(_) => Ok(ExclusiveLock::Busy),
            }
        }
        Some(code) if is_unsupported(code) || code == Errno::NOLCK => {
            Ok(ExclusiveLock::Unsupported)
        }
        _ => Err(e),
    }
}

/// The descriptor number of `file`, for a child process that inherits it.
pub(crate) fn raw_handle(file: &File) -> Option<i64> {
    use std::os::unix::io::AsRawFd;
    Some(i64::from(file.as_raw_fd()))
}

//! What only Linux gives the platform layer: unnamed files (`O_TMPFILE` + `linkat`), byte
//! locks owned by an open file description ("OFD" locks), file system magics (`statfs`) and
//! the kernel's table of `flock`s (`/proc/locks`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use rustix::fs::{AtFlags, CWD};
use rustix::io::Errno;

use super::super::fs_kind::classify;
use super::super::{FileId, FsKind, OsPath, Presence};
use super::{c_path, flock_shared, is_unsupported, write_all_at};

/// A byte-range lock of an open file description: owned by the open file, not the process,
/// so it travels with an inherited descriptor, is not shared with another `open` of the same
/// file (not even in this process), and is dropped by the kernel when the last descriptor of
/// the open file closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByteLock {
    Read,
    Write,
    Unlock,
}

impl ByteLock {
    fn l_type(self) -> libc::c_short {
        (match self {
            ByteLock::Read => libc::F_RDLCK,
            ByteLock::Write => libc::F_WRLCK,
            ByteLock::Unlock => libc::F_UNLCK,
        }) as libc::c_short
    }
}

/// `fcntl(F_OFD_*)` on one byte (rustix has whole-file OFD locks only, no byte ranges and no
/// `F_OFD_GETLK`, hence libc).
fn ofd_fcntl(file: &File, byte: i64, kind: ByteLock, cmd: libc::c_int) -> io::Result<libc::flock> {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value (l_pid must be 0 for OFD
    // commands), the fields used are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind.l_type();
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    // SAFETY: the descriptor is owned by `file`, which outlives this call; `fl` is a valid,
    // writable `struct flock` for the kernel to read and (GETLK) fill in.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl) };
    if rc == 0 {
        Ok(fl)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Take (or drop, with [`ByteLock::Unlock`]) a byte lock; never waits: a conflict is an error
/// for which [`is_contention`] is true.
pub(crate) fn byte_lock(file: &File, byte: i64, kind: ByteLock) -> io::Result<()> {
    ofd_fcntl(file, byte, kind, libc::F_OFD_SETLK).map(|_| ())
}

/// Whether another open file description holds any lock on `byte` (a write probe conflicts
/// with every lock; our own never conflict with it).
pub(crate) fn byte_locked_by_other(file: &File, byte: i64) -> io::Result<bool> {
    let fl = ofd_fcntl(file, byte, ByteLock::Write, libc::F_OFD_GETLK)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// The error of a lock call that failed only because someone else holds a conflicting lock.
pub(crate) fn is_contention(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == libc::EAGAIN || c == libc::EACCES)
}

/// The byte of a lock file whose OFD write lock says "the holder is here" (beyond any content:
/// sema and semats never lock, older versions of this engine only `flock`).
const PRESENCE_BYTE: i64 = 0;

/// Take a new lock file's holder marks: the shared `flock` (what older versions of this engine
/// look for), and an OFD *write* lock on [`PRESENCE_BYTE`]. A write lock needs a writable
/// descriptor, which a user who may only read the file (mode 0644) cannot open: unlike a
/// shared `flock`, a reader cannot imitate it. Both are best effort (a file system without
/// them lacks this signal; the content still names the holder).
pub(crate) fn hold_presence(file: &File) {
    flock_shared(file);
    let _ = byte_lock(file, PRESENCE_BYTE, ByteLock::Write);
}

/// Probe the presence byte through `file` (any descriptor of the lock file, read-only is fine:
/// `F_OFD_GETLK` needs no write access).
pub(crate) fn presence(file: &File) -> Presence {
    match ofd_fcntl(file, PRESENCE_BYTE, ByteLock::Write, libc::F_OFD_GETLK) {
        Ok(fl) if fl.l_type == libc::F_WRLCK as libc::c_short => Presence::Holder,
        Ok(_) => Presence::Absent,
        Err(_) => Presence::Unknown,
    }
}

/// Whether some process holds an exclusive `flock` on the file `id` (another breaker), from
/// `/proc/locks`. When the breaker's lock fails it tells a breaker (exclusive) from readers
/// (shared: anyone who can read the file can take one). Unreadable or unknown: `true`, the
/// cautious answer.
pub(crate) fn breaker_present(id: FileId) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/locks") else {
        return true;
    };
    // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF" (device as hex major:minor);
    // lines with "->" are requests still waiting, not locks held.
    let want = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(id.dev as rustix::fs::Dev),
        rustix::fs::minor(id.dev as rustix::fs::Dev),
        id.ino
    );
    text.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(1);
        fields.next() == Some("FLOCK")
            && fields.next().is_some()
            && fields.next() == Some("WRITE")
            && fields.nth(1) == Some(want.as_str())
    })
}

/// The `statfs` magic of `path`'s directory (`None`: it cannot be asked, e.g. it is missing).
pub(crate) fn dir_fs_magic(path: &Path) -> Option<u32> {
    let dir = path.parent().and_then(c_path)?;
    let st = rustix::fs::statfs(dir.as_c_str()).ok()?;
    // f_type is a signed or unsigned word depending on the architecture; magics fit in 32 bits.
    #[allow(clippy::unnecessary_cast)]
    Some(((st.f_type as i64) & 0xffff_ffff) as u32)
}

/// The file system kind of `path`'s directory (see [`FsKind`]), from its `statfs` magic
/// ([`classify`]); a directory that cannot be asked is remote (the cautious answer).
pub(crate) fn dir_fs_kind(path: &Path) -> FsKind {
    dir_fs_magic(path).map_or(FsKind::Remote, |m| classify(m).1)
}

/// An anonymous (O_TMPFILE) file in `path`'s directory with exactly `content`, holding the
/// holder's marks: complete before it ever gets a name, and reusable for several link attempts
/// (a waiter keeps one across wake-ups instead of building a file per attempt). `None`: the
/// file system does not support O_TMPFILE.
pub(crate) fn prepare_unnamed(path: &Path, content: &[u8]) -> Option<io::Result<File>> {
    let dir = match super::super::parent_dir(path) {
        Ok(d) => d,
        Err(e) => return Some(Err(e)),
    };
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o644)
        .open(dir);
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            let code = e.raw_os_error().map(Errno::from_raw_os_error);
            return match code {
                Some(c) if c == Errno::ISDIR || c == Errno::INVAL || is_unsupported(c) => None,
                _ => Some(Err(e)),
            };
        }
    };
    if let Err(e) = write_all_at(&file, content, 0) {
        return Some(Err(e)); // the anonymous inode vanishes with the descriptor
    }
    hold_presence(&file);
    Some(Ok(file))
}

/// Give a prepared file the lock's name: `linkat("/proc/self/fd/N", path)`. `AlreadyExists` =
/// held; `None`: linking this way is unsupported here.
pub(crate) fn link_unnamed(file: &File, path: &Path, os_path: &OsPath) -> Option<io::Result<()>> {
    let owned;
    let target = match os_path.c_str() {
        Some(c) => c,
        None => match c_path(path) {
            Some(c) => {
                owned = c;
                owned.as_c_str()
            }
            None => {
                return Some(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "path contains a NUL byte",
                )))
            }
        },
    };
    // "/proc/self/fd/<fd>\0" in a stack buffer: no allocation per attempt.
    let mut buf = [0u8; 32];
    let len = {
        let mut cursor = io::Cursor::new(&mut buf[..]);
        if write!(cursor, "/proc/self/fd/{}\0", file.as_raw_fd()).is_err() {
            return None;
        }
        cursor.position() as usize
    };
    let proc_path = std::ffi::CStr::from_bytes_with_nul(&buf[..len]).ok()?;
    match rustix::fs::linkat(CWD, proc_path, CWD, target, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Some(Ok(())),
        Err(Errno::NOENT) if !Path::new("/proc/self/fd").is_dir() => None,
        Err(code) if code == Errno::PERM || is_unsupported(code) => None,
        Err(e) => Some(Err(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind decides what runs on the JS thread: tmpfs is memory, a disk is local, and what
    /// cannot be classified (a missing directory) is treated as remote (never inline).
    #[test]
    fn fs_kinds() {
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(dir_fs_kind(Path::new("/dev/shm/x.lock")), FsKind::Memory);
        }
        assert_eq!(
            dir_fs_kind(Path::new("/no/such/dir/x.lock")),
            FsKind::Remote
        );
        let tmp = std::env::temp_dir().join("x.lock");
        assert_ne!(dir_fs_kind(&tmp), FsKind::Remote, "{tmp:?}");
    }

    /// `status()`'s report of a real directory: tmpfs is named and has O_TMPFILE (no
    /// fallback); a directory that cannot be asked has no name and is polled.
    #[test]
    fn file_system_of_real_directories() {
        use super::super::super::{file_system, Fallback};
        if Path::new("/dev/shm").is_dir() {
            let shm = file_system(Path::new("/dev/shm/x.lock"), FsKind::Memory);
            assert_eq!(shm.name.as_deref(), Some("tmpfs"));
            assert!(shm.fallbacks.is_empty(), "{shm:?}");
        }
        let missing = file_system(Path::new("/no/such/dir/x.lock"), FsKind::Remote);
        assert_eq!(missing.name, None);
        assert_eq!(missing.fallbacks, [Fallback::Poll]);
    }
}

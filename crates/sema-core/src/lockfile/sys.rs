//! File-system primitives of the engine: atomic creation of a complete lock file, reading
//! through a descriptor with a size cap, `flock`, identity of a file, in-place rewrite.
//!
//! Creation never exposes a partial file and never checks-then-renames:
//! 1. Linux: `open(dir, O_TMPFILE|O_RDWR|O_CLOEXEC, 0644)`, write, fsync, `flock(LOCK_SH)`, then
//!    `linkat("/proc/self/fd/N", path, AT_SYMLINK_FOLLOW)`; `EEXIST` = held.
//! 2. Fallback (O_TMPFILE unsupported, and on other systems): a named temp file
//!    `.<basename>.<16 hex>.sema-tmp` in the same directory (the leading dot keeps it out of
//!    semats' `cleanStale` pattern `<basename>.*.tmp`), written, fsynced, flocked, `link()`ed
//!    into place, then unlinked on every path.
//! 3. Last resort (a file system without hard links): `O_CREAT|O_EXCL` at the path, flock,
//!    write, fsync. Readers may briefly see an empty file, which every judgement treats as held.
//!
//! The returned descriptor keeps the holder's marks ([`hold_presence`]) for as long as the lock
//! is held: the kernel drops them when the last copy of the descriptor is closed (the process
//! died, and any child that inherited it ended).
//!
//! Every call on the lock's name acts on the name itself, never through a symlink there:
//! `O_NOFOLLOW` opens, `lstat`s, and `link`/`O_EXCL` creation (which never follow).

use std::ffi::OsString;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::format::MAX_LOCK_FILE_BYTES;

/// How a lock file is created. Only tests choose anything but `Auto`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreationStrategy {
    /// O_TMPFILE + linkat where supported, else a named temp file + link, else O_EXCL.
    #[default]
    Auto,
    /// Skip O_TMPFILE: named temp file + link (else O_EXCL).
    NamedTemp,
    /// O_CREAT|O_EXCL at the path.
    Direct,
}

/// (device, inode): what a path refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

#[cfg(unix)]
pub(crate) fn file_id(meta: &Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

/// Without inode numbers in stable std, a file's creation time stands in for its identity.
#[cfg(not(unix))]
pub(crate) fn file_id(meta: &Metadata) -> FileId {
    let created = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    FileId {
        dev: meta.len(),
        ino: created,
    }
}

/// What a stat of the lock path says about the file there: a file judged once is not judged
/// again while all of this stays the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileSig {
    id: FileId,
    mtime_ns: i128,
    len: u64,
}

pub(crate) fn file_sig(meta: &Metadata) -> FileSig {
    let mtime_ns = meta
        .modified()
        .ok()
        .map(|m| match m.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        })
        .unwrap_or(0);
    FileSig {
        id: file_id(meta),
        mtime_ns,
        len: meta.len(),
    }
}

/// One `lstat` of the path (a symlink there is described, never followed): `None` when nothing
/// is there.
pub(crate) fn stat_sig(path: &Path) -> io::Result<Option<FileSig>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(file_sig(&m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// (device, inode) of an open descriptor: one plain `fstat` (std's `metadata()` is a `statx`
/// asking for every field).
#[cfg(unix)]
pub(crate) fn fstat_id(file: &File) -> io::Result<FileId> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `st` is a writable, properly sized `stat` buffer; the descriptor is owned by
    // `file`, which outlives the call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstat(file.as_raw_fd(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    })
}

#[cfg(not(unix))]
pub(crate) fn fstat_id(file: &File) -> io::Result<FileId> {
    file.metadata().map(|m| file_id(&m))
}

/// (device, inode) of the name `path` itself: one `lstat` through the cached C path when there
/// is one (a symlink at the path is described, never followed).
pub(crate) fn stat_id(path: &Path, path_c: Option<&std::ffi::CStr>) -> io::Result<FileId> {
    #[cfg(unix)]
    if let Some(c) = path_c {
        // SAFETY: `c` is NUL-terminated and outlives the call; `st` is a writable, properly
        // sized `stat` buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::lstat(c.as_ptr(), &mut st) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(FileId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        });
    }
    let _ = path_c;
    std::fs::symlink_metadata(path).map(|m| file_id(&m))
}

/// What kind of file system a lock's directory is on: it decides which file calls may run
/// inline on a thread that must not block for long (the JS thread, an async worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsKind {
    /// tmpfs, ramfs: every call, `fsync` included, returns at once (nothing to write back).
    Memory,
    /// A local disk file system: metadata calls take microseconds; `fsync` can take
    /// milliseconds.
    Local,
    /// NFS, SMB, FUSE, 9p, cluster file systems, or unknown (not Linux, `statfs` failed): any
    /// call may wait on a network or another process.
    Remote,
}

/// The file system kind of `path`'s directory (see [`FsKind`]).
pub(crate) fn dir_fs_kind(path: &Path) -> FsKind {
    #[cfg(target_os = "linux")]
    {
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        const RAMFS_MAGIC: i64 = 0x8584_58f6;
        // Network, user-space and cluster file systems, from linux/magic.h and their sources.
        const REMOTE_MAGICS: [i64; 15] = [
            0x6969,      // NFS
            0x517b,      // SMB
            0xfe53_4d42, // SMB2
            0xff53_4d42, // CIFS
            0x6573_5546, // FUSE (sshfs, s3fs...)
            0x00c3_6400, // Ceph
            0x0102_1997, // 9p (VM and WSL shares)
            0x5346_414f, // AFS
            0x7375_7245, // Coda
            0x7461_636f, // OCFS2
            0x0116_1970, // GFS2
            0x0bd0_0bd0, // Lustre
            0x4750_4653, // GPFS
            0x1983_0326, // BeeGFS
            0x2003_0528, // OrangeFS / PVFS2
        ];
        let Some(dir) = path.parent().and_then(c_path) else {
            return FsKind::Remote;
        };
        // SAFETY: `dir` is NUL-terminated and outlives the call; `st` is a writable, properly
        // sized `statfs` buffer.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::statfs(dir.as_ptr(), &mut st) };
        if rc != 0 {
            return FsKind::Remote;
        }
        // f_type is a signed or unsigned word depending on the architecture; magics fit in 32 bits.
        let magic = (st.f_type as i64) & 0xffff_ffff;
        if magic == TMPFS_MAGIC || magic == RAMFS_MAGIC {
            FsKind::Memory
        } else if REMOTE_MAGICS.contains(&magic) {
            FsKind::Remote
        } else {
            FsKind::Local
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        FsKind::Remote
    }
}

/// `pread` into `buf` until it is full or a read comes back short (end of file for a regular
/// file); returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    while done < buf.len() {
        #[cfg(unix)]
        let n = {
            use std::os::unix::fs::FileExt;
            file.read_at(&mut buf[done..], offset + done as u64)
        };
        #[cfg(windows)]
        let n = {
            use std::os::windows::fs::FileExt;
            file.seek_read(&mut buf[done..], offset + done as u64)
        };
        match n {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                if done < buf.len() {
                    break; // short read: end of file
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// `pwrite` all of `data` at `offset`.
fn write_all_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.write_all_at(data, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0usize;
        while done < data.len() {
            match file.seek_write(&data[done..], offset + done as u64) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The whole content through the descriptor, or `None` when it exceeds
/// [`MAX_LOCK_FILE_BYTES`]. One `pread` into a stack buffer for the usual small file (a short
/// read is the end of a regular file); only a file that fills it is read further, on the heap.
pub(crate) fn read_capped(file: &File) -> io::Result<Option<Vec<u8>>> {
    let mut small = [0u8; SMALL_READ];
    let n = read_full_at(file, &mut small, 0)?;
    if n < small.len() {
        return Ok(Some(small[..n].to_vec()));
    }
    read_capped_from(file, &small)
}

/// Size of the stack buffer of the one-`pread` reads (our files are ~150 bytes).
pub(crate) const SMALL_READ: usize = 512;

/// The rest of a file whose first `head.len()` bytes were read already (and filled the buffer).
fn read_capped_from(file: &File, head: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; (head.len() * 4).clamp(4096, MAX_LOCK_FILE_BYTES + 1)];
    buf[..head.len()].copy_from_slice(head);
    let mut len = head.len();
    loop {
        len += read_full_at(file, &mut buf[len..], len as u64)?;
        if len > MAX_LOCK_FILE_BYTES {
            return Ok(None);
        }
        if len < buf.len() {
            break; // end of file
        }
        // Buffer full (len <= cap): grow, at most to cap + 1 so an oversize file is detected.
        let grow = (buf.len() * 2).min(MAX_LOCK_FILE_BYTES + 1);
        buf.resize(grow, 0);
    }
    buf.truncate(len);
    Ok(Some(buf))
}

/// Whether the file's whole content equals `expected`: one `pread` into a stack buffer when
/// `expected` is small (a read that comes back shorter than the buffer is the whole file), else
/// a heap read. `Ok(None)`: the content differs and is returned for a closer look (it may be
/// our own content written by another path, e.g. after a failed truncate).
pub(crate) fn content_equals(file: &File, expected: &[u8]) -> io::Result<Option<Vec<u8>>> {
    if expected.len() < SMALL_READ {
        let mut small = [0u8; SMALL_READ];
        let n = read_full_at(file, &mut small, 0)?;
        if n < small.len() {
            return Ok(if &small[..n] == expected {
                None
            } else {
                Some(small[..n].to_vec())
            });
        }
        return Ok(Some(read_capped_from(file, &small)?.unwrap_or_default()));
    }
    let bytes = read_capped(file)?.unwrap_or_default();
    Ok(if bytes == expected { None } else { Some(bytes) })
}

/// Open an existing lock file for reading (non-blocking, so a FIFO planted at the path cannot
/// hang us; close-on-exec; never through a symlink: see [`is_symlink_refusal`]).
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// Whether an open of `path` failed because its last component is a symbolic link (`O_NOFOLLOW`
/// gives `ELOOP` then; confirmed with an `lstat`, since a loop in a parent gives it too).
pub(crate) fn is_symlink_refusal(e: &io::Error, path: &Path) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::ELOOP) && is_symlink(path)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        is_symlink(path)
    }
}

/// Whether the last component of `path` is a symbolic link (an `lstat`).
pub(crate) fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Open an existing lock file read-write (for `flock(LOCK_EX)` on NFS, where an exclusive lock
/// needs a writable descriptor).
#[cfg(unix)]
fn open_existing_rw(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(unix)]
pub(crate) fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: the descriptor is owned by `file`, which outlives this call; flock touches no
        // memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Take the holder's shared `flock` (best effort: a file system without flock just lacks this
/// liveness signal).
pub(crate) fn flock_shared(file: &File) {
    #[cfg(unix)]
    {
        let _ = flock(file, libc::LOCK_SH);
    }
    #[cfg(not(unix))]
    {
        let _ = file;
    }
}

/// A byte-range lock of an open file description (an "OFD" lock, Linux): owned by the open
/// file, not the process, so it travels with an inherited descriptor, is not shared with
/// another `open` of the same file (not even in this process), and is dropped by the kernel
/// when the last descriptor of the open file closes. `cmd` is `F_OFD_SETLK` (never waits) or
/// `F_OFD_GETLK` (fills in the first conflicting lock, or `F_UNLCK`).
#[cfg(target_os = "linux")]
pub(crate) fn ofd_lock(
    file: &File,
    byte: i64,
    lock_type: libc::c_int,
    cmd: libc::c_int,
) -> io::Result<libc::flock> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value (l_pid must be 0 for OFD
    // commands), the fields used are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = lock_type as libc::c_short;
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

/// The byte of a lock file whose OFD write lock says "the holder is here" (beyond any content:
/// sema and semats never lock, older versions of this engine only `flock`).
#[cfg(target_os = "linux")]
const PRESENCE_BYTE: i64 = 0;

/// Take a new lock file's holder marks: the shared `flock` (what older versions of this engine
/// look for), and an OFD *write* lock on [`PRESENCE_BYTE`]. A write lock needs a writable
/// descriptor, which a user who may only read the file (mode 0644) cannot open: unlike a
/// shared `flock`, a reader cannot imitate it. Both are best effort (a file system without
/// them lacks this signal; the content still names the holder).
pub(crate) fn hold_presence(file: &File) {
    flock_shared(file);
    #[cfg(target_os = "linux")]
    {
        let _ = ofd_lock(file, PRESENCE_BYTE, libc::F_WRLCK, libc::F_OFD_SETLK);
    }
}

/// What the presence byte of a lock file says, probed without taking anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// A descriptor holding the holder's write lock is open: the holder, or a process that
    /// inherited its descriptor (the command of `sema-native run`), is alive.
    Holder,
    /// No holder's mark (a reader's read lock on the byte does not count).
    Absent,
    /// The probe is not supported here (no OFD locks): only the `flock` can tell.
    Unknown,
}

/// Probe the presence byte through `file` (any descriptor of the lock file, read-only is fine:
/// `F_OFD_GETLK` needs no write access).
pub(crate) fn presence(file: &File) -> Presence {
    #[cfg(target_os = "linux")]
    {
        match ofd_lock(file, PRESENCE_BYTE, libc::F_WRLCK, libc::F_OFD_GETLK) {
            Ok(fl) if fl.l_type == libc::F_WRLCK as libc::c_short => Presence::Holder,
            Ok(_) => Presence::Absent,
            Err(_) => Presence::Unknown,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Presence::Unknown
    }
}

/// Whether some process holds an exclusive `flock` on the file `id` (another breaker), from
/// `/proc/locks`. When `flock(LOCK_EX)` fails it tells a breaker (exclusive) from readers
/// (shared: anyone who can read the file can take one). Unreadable or unknown: `true`, the
/// cautious answer.
pub(crate) fn exclusive_flock_held(id: FileId) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Ok(text) = std::fs::read_to_string("/proc/locks") else {
            return true;
        };
        // "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF" (device as hex major:minor);
        // lines with "->" are requests still waiting, not locks held.
        let want = format!(
            "{:02x}:{:02x}:{}",
            libc::major(id.dev as libc::dev_t),
            libc::minor(id.dev as libc::dev_t),
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
    #[cfg(not(target_os = "linux"))]
    {
        let _ = id;
        true
    }
}

/// Outcome of trying the breaker's exclusive `flock`.
#[derive(Debug)]
pub(crate) enum ExclusiveLock {
    /// We hold `LOCK_EX` through the returned descriptor (the original one, or a read-write
    /// one of the same file on NFS).
    Held(Option<File>),
    /// A live holder (shared lock) or another breaker (exclusive lock) is there.
    Busy,
    /// The file system has no flock; proceed on content and inode verification alone.
    Unsupported,
}

/// `flock(LOCK_EX|LOCK_NB)` on `file` (which must be `path`'s file, identified by `id`).
pub(crate) fn try_flock_exclusive(
    file: &File,
    path: &Path,
    id: FileId,
) -> io::Result<ExclusiveLock> {
    #[cfg(unix)]
    {
        match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => Ok(ExclusiveLock::Held(None)),
            Err(e) => match e.raw_os_error() {
                Some(code) if code == libc::EWOULDBLOCK || code == libc::EAGAIN => {
                    Ok(ExclusiveLock::Busy)
                }
                Some(libc::EBADF) => {
                    // NFS: exclusive locks need a writable descriptor.
                    let rw = match open_existing_rw(path) {
                        Ok(f) => f,
                        Err(_) => return Ok(ExclusiveLock::Busy),
                    };
                    if fstat_id(&rw)? != id {
                        return Ok(ExclusiveLock::Busy);
                    }
                    match flock(&rw, libc::LOCK_EX | libc::LOCK_NB) {
                        Ok(()) => Ok(ExclusiveLock::Held(Some(rw))),
                        Err(_) => Ok(ExclusiveLock::Busy),
                    }
                }
                Some(code) if is_unsupported(code) || code == libc::ENOLCK => {
                    Ok(ExclusiveLock::Unsupported)
                }
                _ => Err(e),
            },
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path, id);
        Ok(ExclusiveLock::Unsupported)
    }
}

#[cfg(unix)]
fn is_unsupported(code: i32) -> bool {
    code == libc::EOPNOTSUPP || code == libc::ENOTSUP || code == libc::ENOSYS
}

/// Rewrite the whole content in place (`pwrite` at 0; `ftruncate` when it got shorter, after
/// the write, so the file is never empty).
pub(crate) fn rewrite_in_place(file: &File, content: &[u8], old_len: usize) -> io::Result<()> {
    write_all_at(file, content, 0)?;
    if content.len() < old_len {
        file.set_len(content.len() as u64)?;
    }
    Ok(())
}

/// fsync a directory (best effort: some file systems refuse it).
pub(crate) fn fsync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// `n` random bytes as lowercase hex, from the per-process CSPRNG ([`super::rng`]).
pub(crate) fn random_hex(n: usize) -> String {
    let mut stack = [0u8; 32];
    let mut heap = Vec::new();
    let bytes: &mut [u8] = if n <= stack.len() {
        &mut stack[..n]
    } else {
        heap.resize(n, 0);
        &mut heap
    };
    super::rng::fill(bytes);
    let mut s = String::with_capacity(n * 2);
    for &b in bytes.iter() {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

/// Our temp-file name for `path`: `.<basename>.<16 hex>.sema-tmp` in the same directory.
fn temp_path_for(path: &Path) -> Option<PathBuf> {
    let dir = path.parent()?;
    let base = path.file_name()?;
    let mut name = OsString::from(".");
    name.push(base);
    name.push(".");
    name.push(random_hex(8));
    name.push(".sema-tmp");
    Some(dir.join(name))
}

/// Whether a directory entry is one of our temp files for the lock named `basename`.
pub(crate) fn is_our_temp_name(entry: &std::ffi::OsStr, basename: &std::ffi::OsStr) -> bool {
    let (Some(entry), Some(base)) = (entry.to_str(), basename.to_str()) else {
        return is_our_temp_name_bytes(entry, basename);
    };
    let Some(rest) = entry
        .strip_prefix('.')
        .and_then(|r| r.strip_prefix(base))
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_suffix(".sema-tmp"))
    else {
        return false;
    };
    rest.len() == 16 && rest.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(unix)]
fn is_our_temp_name_bytes(entry: &std::ffi::OsStr, basename: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (e, b) = (entry.as_bytes(), basename.as_bytes());
    let Some(rest) = e
        .strip_prefix(b".")
        .and_then(|r| r.strip_prefix(b))
        .and_then(|r| r.strip_prefix(b"."))
        .and_then(|r| r.strip_suffix(b".sema-tmp"))
    else {
        return false;
    };
    rest.len() == 16 && rest.iter().all(|b| b.is_ascii_hexdigit())
}

#[cfg(not(unix))]
fn is_our_temp_name_bytes(_entry: &std::ffi::OsStr, _basename: &std::ffi::OsStr) -> bool {
    false
}

/// Removes a named temp file when dropped, whatever happened.
struct TempGuard(PathBuf);

impl Drop for TempGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

enum Outcome {
    Done(io::Result<File>),
    Unsupported,
}

/// Create the lock file at `path` with exactly `content`, atomically. `Err` of kind
/// `AlreadyExists` means the lock is held. On success the descriptor holds a shared flock.
///
/// The content is complete before the file gets its name, so `fsync` (of the file and of the
/// directory) happens only after the link succeeded: losers of a race never sync anything.
/// `path_c` is `path` as a C string, if the caller has it at hand (saves an allocation).
pub(crate) fn create_lock_file(
    path: &Path,
    path_c: Option<&std::ffi::CStr>,
    content: &[u8],
    fsync: bool,
    strategy: CreationStrategy,
) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    if strategy == CreationStrategy::Auto {
        if let Outcome::Done(r) = create_via_tmpfile(path, path_c, content, fsync) {
            return r;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path_c;
    if strategy != CreationStrategy::Direct {
        if let Outcome::Done(r) = create_via_named_temp(path, content, fsync) {
            return r;
        }
    }
    create_direct(path, content, fsync)
}

fn parent_dir(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "lock path has no parent directory",
        )),
    }
}

/// Remove the name `path` only while it names `file`'s inode (never a file or symlink that
/// replaced it meanwhile: the name is `lstat`ed, not followed).
pub(crate) fn remove_if_ours(file: &File, path: &Path) {
    if let (Ok(ours), Ok(now)) = (fstat_id(file), stat_id(path, None)) {
        if ours == now {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// After winning the link: make the file and its name durable. On failure the name is removed
/// again (only if it still names our inode) and the error returned.
fn sync_after_link(file: &File, path: &Path, dir: &Path, fsync: bool) -> io::Result<()> {
    if !fsync {
        return Ok(());
    }
    if let Err(e) = file.sync_all() {
        remove_if_ours(file, path);
        return Err(e);
    }
    fsync_dir(dir);
    Ok(())
}

/// `/proc/self/fd/<fd>` NUL-terminated, in a stack buffer.
#[cfg(target_os = "linux")]
fn proc_fd_path(fd: i32, buf: &mut [u8; 32]) -> &std::ffi::CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut n = u32::try_from(fd).unwrap_or(0);
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let d = &digits[i..];
    let end = PREFIX.len() + d.len();
    buf[PREFIX.len()..end].copy_from_slice(d);
    buf[end] = 0;
    // The buffer holds exactly one NUL, at `end`; the fallback is unreachable.
    std::ffi::CStr::from_bytes_with_nul(&buf[..=end]).unwrap_or(c"/proc/self/fd/")
}

/// `path` as a C string (`None` when it contains a NUL byte).
#[cfg(unix)]
pub(crate) fn c_path(path: &Path) -> Option<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).ok()
}

#[cfg(target_os = "linux")]
fn create_via_tmpfile(
    path: &Path,
    path_c: Option<&std::ffi::CStr>,
    content: &[u8],
    fsync: bool,
) -> Outcome {
    let file = match tmpfile_prepare(path, content) {
        Some(Ok(f)) => f,
        Some(Err(e)) => return Outcome::Done(Err(e)),
        None => return Outcome::Unsupported,
    };
    match tmpfile_link(&file, path, path_c) {
        Some(Ok(())) => Outcome::Done(tmpfile_linked(&file, path, fsync).map(|()| file)),
        Some(Err(e)) => Outcome::Done(Err(e)),
        None => Outcome::Unsupported,
    }
}

/// An anonymous (O_TMPFILE) file in `path`'s directory with exactly `content`, holding the
/// shared flock: complete before it ever gets a name, and reusable for several link attempts
/// (a waiter keeps one across wake-ups instead of building a file per attempt). `None`: the
/// file system does not support O_TMPFILE.
#[cfg(target_os = "linux")]
pub(crate) fn tmpfile_prepare(path: &Path, content: &[u8]) -> Option<io::Result<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match parent_dir(path) {
        Ok(d) => d,
        Err(e) => return Some(Err(e)),
    };
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o644)
        .open(dir)
    {
        Ok(f) => f,
        Err(e) => {
            return match e.raw_os_error() {
                Some(code)
                    if code == libc::EISDIR || code == libc::EINVAL || is_unsupported(code) =>
                {
                    None
                }
                _ => Some(Err(e)),
            }
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
#[cfg(target_os = "linux")]
pub(crate) fn tmpfile_link(
    file: &File,
    path: &Path,
    path_c: Option<&std::ffi::CStr>,
) -> Option<io::Result<()>> {
    use std::os::unix::io::AsRawFd;
    let owned;
    let target = match path_c {
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
    let mut proc_buf = [0u8; 32];
    let proc_path = proc_fd_path(file.as_raw_fd(), &mut proc_buf);
    // SAFETY: both pointers are NUL-terminated C strings (`proc_path` in a local buffer,
    // `target` borrowed from the caller or `owned`) that live until after the call; linkat only
    // reads them.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Some(Ok(()));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOENT) if !Path::new("/proc/self/fd").is_dir() => None,
        Some(code) if code == libc::EPERM || is_unsupported(code) => None,
        _ => Some(Err(err)),
    }
}

/// After a prepared file won the link: fsync it and the directory (when `fsync`).
#[cfg(target_os = "linux")]
pub(crate) fn tmpfile_linked(file: &File, path: &Path, fsync: bool) -> io::Result<()> {
    let dir = parent_dir(path)?;
    sync_after_link(file, path, dir, fsync)
}

fn create_via_named_temp(path: &Path, content: &[u8], fsync: bool) -> Outcome {
    let dir = match parent_dir(path) {
        Ok(d) => d,
        Err(e) => return Outcome::Done(Err(e)),
    };
    let mut opened = None;
    for _ in 0..8 {
        let Some(tmp) = temp_path_for(path) else {
            return Outcome::Done(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "lock path has no file name",
            )));
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o644);
        }
        match options.open(&tmp) {
            Ok(f) => {
                opened = Some((f, TempGuard(tmp)));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Outcome::Done(Err(e)),
        }
    }
    let Some((file, guard)) = opened else {
        return Outcome::Done(Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not find a free temp file name",
        )));
    };
    if let Err(e) = write_all_at(&file, content, 0) {
        return Outcome::Done(Err(e)); // guard removes the temp file
    }
    hold_presence(&file);
    let linked = std::fs::hard_link(&guard.0, path);
    drop(guard); // unlink the temp name on every path
    match linked {
        Ok(()) => Outcome::Done(sync_after_link(&file, path, dir, fsync).map(|()| file)),
        Err(e) if link_unsupported(&e) => Outcome::Unsupported,
        Err(e) => Outcome::Done(Err(e)),
    }
}

fn link_unsupported(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(code) if code == libc::EPERM || is_unsupported(code))
    }
    #[cfg(not(unix))]
    {
        e.kind() == io::ErrorKind::Unsupported
    }
}

fn create_direct(path: &Path, content: &[u8], fsync: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    let file = options.open(path)?;
    hold_presence(&file);
    let written =
        write_all_at(&file, content, 0).and_then(|()| if fsync { file.sync_all() } else { Ok(()) });
    if let Err(e) = written {
        remove_if_ours(&file, path);
        return Err(e);
    }
    if fsync {
        if let Some(dir) = path.parent() {
            fsync_dir(dir);
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names() {
        let base = std::ffi::OsStr::new("x.lock");
        let ok = |s: &str| is_our_temp_name(std::ffi::OsStr::new(s), base);
        assert!(ok(".x.lock.0123456789abcdef.sema-tmp"));
        assert!(!ok("x.lock.0123456789abcdef.sema-tmp"));
        assert!(!ok(".x.lock.0123456789abcdeg.sema-tmp"));
        assert!(!ok(".x.lock.0123.sema-tmp"));
        assert!(!ok("x.lock.123.0123456789abcdef.tmp"));
        let p = temp_path_for(Path::new("/d/x.lock")).map(|p| p.file_name().map(|n| n.to_owned()));
        let name = p.flatten().unwrap_or_default();
        assert!(is_our_temp_name(&name, base), "{name:?}");
        assert_eq!(random_hex(16).len(), 32);
    }

    /// The kind decides what runs on the JS thread: tmpfs is memory, a disk is local, and what
    /// cannot be classified (a missing directory) is treated as remote (never inline).
    #[cfg(target_os = "linux")]
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
}

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
//! The returned descriptor keeps the shared `flock` for as long as the lock is held: the kernel
//! drops it when the process dies.

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
    dev: u64,
    ino: u64,
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
/// [`MAX_LOCK_FILE_BYTES`].
pub(crate) fn read_capped(file: &File) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0usize;
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

/// Open an existing lock file for reading (non-blocking, so a FIFO planted at the path cannot
/// hang us; close-on-exec).
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Open an existing lock file read-write (for `flock(LOCK_EX)` on NFS, where an exclusive lock
/// needs a writable descriptor).
#[cfg(unix)]
fn open_existing_rw(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(unix)]
fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
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
                    if file_id(&rw.metadata()?) != id {
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

/// `n` random bytes as lowercase hex. Falls back to a randomly seeded hash of the time, the pid
/// and a counter if the OS generator fails (it does not in practice).
pub(crate) fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if getrandom::fill(&mut bytes).is_err() {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let state = std::collections::hash_map::RandomState::new();
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = state.build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_usize(i);
            h.write_u32(std::process::id());
            if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                h.write_u128(d.as_nanos());
            }
            let v = h.finish().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    let mut s = String::with_capacity(n * 2);
    for b in bytes {
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
pub(crate) fn create_lock_file(
    path: &Path,
    content: &[u8],
    fsync: bool,
    strategy: CreationStrategy,
) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    if strategy == CreationStrategy::Auto {
        if let Outcome::Done(r) = create_via_tmpfile(path, content, fsync) {
            return r;
        }
    }
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

fn write_content(file: &File, content: &[u8], fsync: bool) -> io::Result<()> {
    write_all_at(file, content, 0)?;
    if fsync {
        file.sync_all()?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn create_via_tmpfile(path: &Path, content: &[u8], fsync: bool) -> Outcome {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    let dir = match parent_dir(path) {
        Ok(d) => d,
        Err(e) => return Outcome::Done(Err(e)),
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
                    Outcome::Unsupported
                }
                _ => Outcome::Done(Err(e)),
            }
        }
    };
    if let Err(e) = write_content(&file, content, fsync) {
        return Outcome::Done(Err(e)); // the anonymous inode vanishes with the descriptor
    }
    flock_shared(&file);
    let proc_path = format!("/proc/self/fd/{}\0", file.as_raw_fd());
    let mut target = path.as_os_str().as_bytes().to_vec();
    if target.contains(&0) {
        return Outcome::Done(Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path contains a NUL byte",
        )));
    }
    target.push(0);
    // SAFETY: both pointers are NUL-terminated byte strings that live until after the call
    // (`proc_path` and `target` are owned locals); linkat only reads them.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr().cast(),
            libc::AT_FDCWD,
            target.as_ptr().cast(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOENT) if !Path::new("/proc/self/fd").is_dir() => Outcome::Unsupported,
            Some(code) if code == libc::EPERM || is_unsupported(code) => Outcome::Unsupported,
            _ => Outcome::Done(Err(err)),
        };
    }
    if fsync {
        fsync_dir(dir);
    }
    Outcome::Done(Ok(file))
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
    if let Err(e) = write_content(&file, content, fsync) {
        return Outcome::Done(Err(e)); // guard removes the temp file
    }
    flock_shared(&file);
    let linked = std::fs::hard_link(&guard.0, path);
    drop(guard); // unlink the temp name on every path
    match linked {
        Ok(()) => {
            if fsync {
                fsync_dir(dir);
            }
            Outcome::Done(Ok(file))
        }
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
    flock_shared(&file);
    if let Err(e) = write_content(&file, content, fsync) {
        // Remove only the file we created (never one that replaced it meanwhile).
        if let (Ok(ours), Ok(now)) = (file.metadata(), std::fs::metadata(path)) {
            if file_id(&ours) == file_id(&now) {
                let _ = std::fs::remove_file(path);
            }
        }
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
}

//! The platform layer of the lock-file engine: every file-system and locking call the lock
//! logic makes goes through the operations below, and only this folder knows which system it
//! runs on (`unix.rs` with `unix/linux.rs` and `unix/bsd.rs` where kernels differ;
//! `portable.rs`, std only, for a system without a backend of its own).
//!
//! | operation | what it guarantees |
//! | --- | --- |
//! | [`create_lock_file_on`] | the lock file appears with its whole content or not at all; `AlreadyExists` = held |
//! | [`prepare_unnamed`], [`link_unnamed`], [`unnamed_linked`] | the same in steps, for a waiter that retries the link |
//! | [`hold_presence`], [`presence`] | the holder's mark, dropped by the kernel when its last descriptor closes |
//! | [`try_break_lock`], [`breaker_present`] | the breaker's exclusive lock on the file (one breaker at a time) |
//! | [`file_id`], [`fstat_id`], [`stat_id`], [`stat_sig`] | what a name or a descriptor refers to, never through a symlink |
//! | [`open_existing`], [`is_symlink_refusal`] | opening a lock file for reading without following a symlink or blocking on a FIFO |
//! | [`read_capped`], [`content_equals`], [`rewrite_in_place`] | reading with a size cap, comparing, rewriting without ever emptying |
//! | [`remove_if_ours`], [`fsync_dir`] | unlinking a name only while it is still ours; durability of a directory |
//! | [`dir_fs_kind`] | whether calls in a directory may run on a thread that must not block |
//! | [`raw_handle`] | the descriptor a child process inherits to keep the lock |
//!
//! Creation never exposes a partial file and never checks-then-renames:
//! 1. An unnamed file where the system has one (Linux `O_TMPFILE`), written, marked, then
//!    linked to the lock's name (the link fails if the name exists).
//! 2. A named temp file `.<basename>.<16 hex>.sema-tmp` in the same directory (the leading dot
//!    keeps it out of semats' `cleanStale` pattern `<basename>.*.tmp`), written, marked, hard
//!    linked into place, then unlinked on every path.
//! 3. Last resort (a file system without hard links): exclusive creation at the path, mark,
//!    write, fsync. Readers may briefly see an empty file, which every judgement treats as held.
//!
//! The returned descriptor keeps the holder's marks ([`hold_presence`]) for as long as the
//! lock is held: the kernel drops them when the last copy of the descriptor is closed (the
//! process died, and any child that inherited it ended).

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};

use super::format::MAX_LOCK_FILE_BYTES;

mod fs_kind;
pub use fs_kind::{Fallback, FileSystem};

#[cfg(not(target_os = "linux"))]
#[cfg_attr(windows, allow(dead_code))]
// Windows has its own presence, breaker table and drive kinds
mod absent;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as os;
/// What the cross-process wait queue (Linux only) needs besides the operations above.
#[cfg(target_os = "linux")]
pub(crate) use unix::{
    byte_lock, byte_locked_by_other, flock, is_contention, ByteLock, FlockOperation,
};

#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as os;

#[cfg(not(any(unix, windows)))]
mod portable;
#[cfg(not(any(unix, windows)))]
use portable as os;

pub(crate) use os::{
    breaker_present, dir_fs_kind, dir_fs_magic, file_id, fstat_id, hold_presence,
    is_symlink_refusal, link_unnamed, open_existing, prepare_unnamed, presence, raw_handle,
    stat_id, try_break_lock, OsPath,
};

/// What `status()` says of the file system of `path`'s directory, whose kind is `kind`: its
/// name where the system has magics, and the fallbacks the engine uses there. The
/// `O_TMPFILE` probe (one open and close of an unnamed file, nothing named is created) runs
/// only where magics exist, i.e. where unnamed files exist at all.
pub(crate) fn file_system(path: &Path, kind: FsKind) -> FileSystem {
    let magic = dir_fs_magic(path);
    let tmpfile = magic.and_then(|_| match prepare_unnamed(path, b"") {
        None => Some(false),
        Some(Ok(_)) => Some(true),
        Some(Err(_)) => None,
    });
    fs_kind::file_system(magic, kind, tmpfile)
}

/// How a lock file is created. Only tests choose anything but `Auto`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreationStrategy {
    /// An unnamed file + link where supported, else a named temp file + link, else exclusive
    /// creation at the path.
    #[default]
    Auto,
    /// Skip the unnamed file: named temp file + link (else exclusive creation).
    NamedTemp,
    /// Exclusive creation at the path.
    Direct,
}

/// (device, inode): what a path refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
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

// A backend may never answer some variants below (the std-only one never sees a local disk,
// never holds a breaker's lock).

/// What kind of file system a lock's directory is on: it decides which file calls may run
/// inline on a thread that must not block for long (the JS thread, an async worker).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsKind {
    /// tmpfs, ramfs: every call, `fsync` included, returns at once (nothing to write back).
    Memory,
    /// A local disk file system: metadata calls take microseconds; `fsync` can take
    /// milliseconds.
    Local,
    /// NFS, SMB, FUSE, 9p, cluster file systems, or unknown: any call may wait on a network or
    /// another process.
    Remote,
}

/// What the presence mark of a lock file says, probed without taking anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// A descriptor holding the holder's mark is open: the holder, or a process that inherited
    /// its descriptor (the command of `sema-native run`), is alive.
    Holder,
    /// No holder's mark (a reader's own lock does not count).
    Absent,
    /// The probe is not supported here: only the breaker's lock can tell.
    Unknown,
}

/// Outcome of trying the breaker's exclusive lock ([`try_break_lock`]).
#[cfg_attr(not(unix), allow(dead_code))]
#[derive(Debug)]
pub(crate) enum ExclusiveLock {
    /// We hold it through the returned descriptor (the original one when `None`, or a
    /// read-write one of the same file where the system needs one).
    Held(Option<File>),
    /// A live holder or another breaker is there.
    Busy,
    /// The file system has no such lock; proceed on content and identity checks alone.
    Unsupported,
}

/// `pread` into `buf` until it is full or a read comes back short (end of file for a regular
/// file); returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    while done < buf.len() {
        match os::read_at(file, &mut buf[done..], offset + done as u64) {
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

/// Open an existing file read-write, never through a symbolic link at its last component (a
/// shared lock's base, rewritten in place under its guard).
pub(crate) fn open_existing_rw(path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    {
        unix::open_existing_rw(path)
    }
    #[cfg(not(unix))]
    {
        if is_symlink(path) {
            return Err(io::Error::other("symbolic link"));
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
    }
}

/// Whether the last component of `path` is a symbolic link (an `lstat`).
pub(crate) fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Rewrite the whole content in place (`pwrite` at 0; truncate when it got shorter, after the
/// write, so the file is never empty).
pub(crate) fn rewrite_in_place(file: &File, content: &[u8], old_len: usize) -> io::Result<()> {
    os::write_all_at(file, content, 0)?;
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
    use std::fmt::Write;
    let mut bytes = vec![0u8; n];
    super::rng::fill(&mut bytes);
    bytes.iter().fold(String::with_capacity(n * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
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

/// Whether a directory entry is one of our temp files for the lock named `basename` (compared
/// as bytes where names are bytes, so a non-UTF-8 name is recognised too).
pub(crate) fn is_our_temp_name(entry: &std::ffi::OsStr, basename: &std::ffi::OsStr) -> bool {
    let (e, b) = (entry.as_encoded_bytes(), basename.as_encoded_bytes());
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

/// Removes a named temp file when dropped, whatever happened.
struct TempGuard(PathBuf);

impl Drop for TempGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Why a creation was refused: no hard links on a file system where exclusive creation is not
/// atomic ([`fs_kind::exclusive_create_is_atomic`]); carried in the `io::Error` so the caller
/// can name the file system ([`is_refused_creation`]).
#[derive(Debug)]
struct NoAtomicCreation;

impl std::fmt::Display for NoAtomicCreation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no hard links here, and exclusive creation is not atomic on this file system")
    }
}

impl std::error::Error for NoAtomicCreation {}

/// Whether `e` is [`create_lock_file_on`]'s refusal to create without exclusion.
pub(crate) fn is_refused_creation(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<NoAtomicCreation>().is_some())
}

/// Create the lock file at `path` with exactly `content`, atomically. `Err` of kind
/// `AlreadyExists` means the lock is held. On success the descriptor holds the holder's marks.
///
/// The content is complete before the file gets its name, so `fsync` (of the file and of the
/// directory) happens only after the link succeeded: losers of a race never sync anything.
/// `os_path` is `path` prepared for the system calls (saves a conversion per attempt). `kind`:
/// the directory's file system; where exclusive creation is not atomic there and the ladder
/// reaches it (no hard links; or `Direct`, which tests use to stand for that), the creation is
/// refused ([`is_refused_creation`]).
pub(crate) fn create_lock_file_on(
    kind: FsKind,
    path: &Path,
    os_path: &OsPath,
    content: &[u8],
    fsync: bool,
    strategy: CreationStrategy,
) -> io::Result<File> {
    if strategy == CreationStrategy::Auto {
        if let Some(file) = prepare_unnamed(path, content) {
            let file = file?;
            if fsync {
                // Content on the disk before it has a name: a crash never leaves the name on
                // an empty file.
                file.sync_all()?;
            }
            if let Some(linked) = link_unnamed(&file, path, os_path) {
                linked?;
                unnamed_linked(&file, path, fsync, fsync)?;
                return Ok(file);
            }
        }
    }
    #[cfg(windows)]
    if strategy != CreationStrategy::Direct {
        return os::create_by_rename(path, content, fsync);
    }
    #[cfg(not(windows))]
    if strategy != CreationStrategy::Direct {
        if let Some(r) = create_via_named_temp(path, content, fsync) {
            return r;
        }
    }
    if !fs_kind::exclusive_create_is_atomic(kind) {
        return Err(io::Error::new(io::ErrorKind::Unsupported, NoAtomicCreation));
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

/// After a file won the link: make it and its name durable (when `fsync`; the content only
/// unless `content_synced`, done before the link). On failure the name is removed again (only
/// if it still names our inode) and the error returned.
pub(crate) fn unnamed_linked(
    file: &File,
    path: &Path,
    fsync: bool,
    content_synced: bool,
) -> io::Result<()> {
    if !fsync {
        return Ok(());
    }
    let dir = parent_dir(path)?;
    if !content_synced {
        if let Err(e) = file.sync_all() {
            remove_if_ours(file, path);
            return Err(e);
        }
    }
    fsync_dir(dir);
    Ok(())
}

/// Step 2 of the creation ladder. `None`: this file system has no hard links.
#[cfg_attr(windows, allow(dead_code))] // Windows renames instead (see `windows.rs`)
fn create_via_named_temp(path: &Path, content: &[u8], fsync: bool) -> Option<io::Result<File>> {
    if let Err(e) = parent_dir(path) {
        return Some(Err(e));
    }
    let mut opened = None;
    for _ in 0..8 {
        let Some(tmp) = temp_path_for(path) else {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "lock path has no file name",
            )));
        };
        match os::new_file_options().open(&tmp) {
            Ok(f) => {
                opened = Some((f, TempGuard(tmp)));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Some(Err(e)),
        }
    }
    let Some((file, guard)) = opened else {
        return Some(Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not find a free temp file name",
        )));
    };
    if let Err(e) = os::write_all_at(&file, content, 0) {
        return Some(Err(e)); // guard removes the temp file
    }
    hold_presence(&file);
    if fsync {
        // Content on the disk before the lock's name points at it.
        if let Err(e) = file.sync_all() {
            return Some(Err(e)); // guard removes the temp file
        }
    }
    let linked = std::fs::hard_link(&guard.0, path);
    drop(guard); // unlink the temp name on every path
    match linked {
        Ok(()) => Some(unnamed_linked(&file, path, fsync, fsync).map(|()| file)),
        Err(e) if os::link_unsupported(&e) => None,
        Err(e) => Some(Err(e)),
    }
}

/// Step 3 of the creation ladder: exclusive creation at the path.
fn create_direct(path: &Path, content: &[u8], fsync: bool) -> io::Result<File> {
    let file = os::new_file_options().open(path)?;
    hold_presence(&file);
    let written =
        os::write_all_at(&file, content, 0)
            .and_then(|()| if fsync { file.sync_all() } else { Ok(()) });
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
}

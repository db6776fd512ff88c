//! The Windows backend of the platform layer: handle identity (`GetFileInformationByHandle`),
//! byte-range locks (`LockFileEx`) for the holder's presence and the breaker's lock, hard links
//! for exclusive creation, and opens that never follow a reparse point (symlink, junction).
//!
//! Windows byte-range locks are mandatory for I/O in the locked range, so both ranges lie far
//! beyond any content (a reader of the file never touches them). A lock belongs to the open
//! file object: an inherited handle (`sema-native run`'s command) shares it, and the system
//! drops it when the last handle of that object closes, including when a process dies.
//!
//! Every open passes `FILE_SHARE_DELETE` (std's default share mode), so a holder's or reader's
//! open handle never keeps a breaker or `release` from removing the name.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::windows::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::windows::io::AsRawHandle;
use std::path::{Component, Path, Prefix};

use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_INVALID_FUNCTION, ERROR_LOCK_VIOLATION, ERROR_NOT_SUPPORTED, HANDLE,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetDriveTypeW, GetFileInformationByHandle, LockFileEx, MoveFileExW, UnlockFileEx,
    BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LOCK_FILE_FLAGS,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

use super::{ExclusiveLock, FileId, FsKind, Presence};

/// No unnamed files on Windows: creation renames a named temp file ([`create_by_rename`]).
pub(crate) use super::absent::{link_unnamed, prepare_unnamed};

/// Offset of the byte whose exclusive lock says "the holder is here" (2^62: beyond any lock
/// file, and within what every file system accepts as a lock offset).
const PRESENCE_OFFSET: u64 = 1 << 62;
/// Offset of the byte whose exclusive lock is the breaker's (one breaker at a time).
const BREAKER_OFFSET: u64 = PRESENCE_OFFSET + 1;

/// `GetDriveTypeW` answers (WindowsProgramming constants, not worth a feature of their own).
const DRIVE_REMOTE: u32 = 4;
const DRIVE_RAMDISK: u32 = 6;

/// No conversion is kept: std converts the path to UTF-16 per call.
#[derive(Debug, Clone)]
pub(crate) struct OsPath;

impl OsPath {
    pub(crate) fn new(_path: &Path) -> OsPath {
        OsPath
    }
}

fn handle(file: &File) -> HANDLE {
    file.as_raw_handle() as HANDLE
}

/// What a `Metadata` alone can tell (std keeps the file index unstable): the creation time in
/// 100 ns units and the length. Only ever compared with another `file_id` of a `Metadata`; a
/// name whose file was replaced by one created at another instant or of another length differs.
pub(crate) fn file_id(meta: &Metadata) -> FileId {
    FileId {
        dev: meta.file_size(),
        ino: meta.creation_time(),
    }
}

/// (volume serial number, file index) of an open handle: what NTFS and ReFS guarantee unique
/// per volume (the Windows inode).
pub(crate) fn fstat_id(file: &File) -> io::Result<FileId> {
    // SAFETY: all-zero is a valid BY_HANDLE_FILE_INFORMATION (plain integers and FILETIMEs).
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is owned by `file`, open for the duration of the call; `info` is a
    // valid, writable struct of the type the call fills in.
    if unsafe { GetFileInformationByHandle(handle(file), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileId {
        dev: u64::from(info.dwVolumeSerialNumber),
        ino: (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
    })
}

/// Opens the name itself (a reparse point is opened, never followed), with no data access.
fn open_name(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .access_mode(0x80) // FILE_READ_ATTRIBUTES
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)
}

/// (volume, file index) of the name `path` itself (a symlink there is described, not followed).
pub(crate) fn stat_id(path: &Path, _os_path: Option<&OsPath>) -> io::Result<FileId> {
    fstat_id(&open_name(path)?)
}

pub(super) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

pub(super) fn write_all_at(file: &File, mut data: &[u8], mut offset: u64) -> io::Result<()> {
    while !data.is_empty() {
        match file.seek_write(data, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                data = &data[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Exclusive creation (`CREATE_NEW` never follows a reparse point), read-write, every sharing
/// allowed (others read the lock; a breaker or `release` deletes it while we hold it open).
pub(super) fn new_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .create_new(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE);
    options
}

/// Whether a failed `CreateHardLinkW` means the file system has no hard links (FAT, exFAT,
/// some network shares).
pub(super) fn link_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == ERROR_INVALID_FUNCTION as i32 || c == ERROR_NOT_SUPPORTED as i32)
        || e.kind() == io::ErrorKind::Unsupported
}

/// The error [`open_existing`] returns for a reparse point at the path.
const REPARSE_REFUSED: i32 = 1920; // ERROR_CANT_ACCESS_FILE

/// Open an existing lock file for reading, never through a reparse point: the name is opened
/// itself (`FILE_FLAG_OPEN_REPARSE_POINT`) and refused when it is one.
pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)?;
    if file.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err(io::Error::from_raw_os_error(REPARSE_REFUSED));
    }
    Ok(file)
}

/// Whether an open failed because the name is a symbolic link (other reparse points, e.g. a
/// cloud placeholder, are refused too, but as an unreadable file).
pub(crate) fn is_symlink_refusal(e: &io::Error, path: &Path) -> bool {
    e.raw_os_error() == Some(REPARSE_REFUSED) && super::is_symlink(path)
}

/// `LockFileEx` on one byte at `offset`, never waiting: `Ok(false)` when another handle holds a
/// conflicting lock.
fn lock_byte(file: &File, offset: u64, exclusive: bool) -> io::Result<bool> {
    let mut flags: LOCK_FILE_FLAGS = LOCKFILE_FAIL_IMMEDIATELY;
    if exclusive {
        flags |= LOCKFILE_EXCLUSIVE_LOCK;
    }
    let mut overlapped = overlapped_at(offset);
    // SAFETY: the handle is owned by `file` and open for the call; the handle is synchronous
    // (std opens without FILE_FLAG_OVERLAPPED), so the call completes before returning and
    // `overlapped` (only its offset is read) outlives it.
    if unsafe { LockFileEx(handle(file), flags, 0, 1, 0, &mut overlapped) } != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Drop our lock of one byte. Wine reports error 33 although the range is released; real
/// Windows succeeds: either way nothing is left to do.
fn unlock_byte(file: &File, offset: u64) {
    let mut overlapped = overlapped_at(offset);
    // SAFETY: as in `lock_byte`: owned synchronous handle, `overlapped` outlives the call.
    let _ = unsafe { UnlockFileEx(handle(file), 0, 1, 0, &mut overlapped) };
}

fn overlapped_at(offset: u64) -> OVERLAPPED {
    // SAFETY: all-zero is a valid OVERLAPPED (integers, a union of integers and a pointer,
    // and a null event handle).
    let mut o: OVERLAPPED = unsafe { std::mem::zeroed() };
    o.Anonymous.Anonymous.Offset = offset as u32;
    o.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    o
}

/// Take a new lock file's presence mark: the exclusive lock of [`PRESENCE_OFFSET`], on the
/// handle the holder keeps. Best effort (a file system without byte locks lacks this signal).
pub(crate) fn hold_presence(file: &File) {
    let _ = lock_byte(file, PRESENCE_OFFSET, true);
}

/// Probe the presence byte through `file` (another handle of the lock file): a shared lock
/// of it fails exactly while a holder's handle is open anywhere.
pub(crate) fn presence(file: &File) -> Presence {
    match lock_byte(file, PRESENCE_OFFSET, false) {
        Ok(true) => {
            unlock_byte(file, PRESENCE_OFFSET);
            Presence::Absent
        }
        Ok(false) => Presence::Holder,
        Err(_) => Presence::Unknown,
    }
}

/// Readers never lock the breaker's byte, so a busy breaker's lock is always another breaker.
pub(crate) fn breaker_present(_id: FileId) -> bool {
    true
}

/// The breaker's exclusive lock of [`BREAKER_OFFSET`] through `file` (held until `file`
/// closes; a busy one is another breaker).
///
/// Once it is ours, the name must still be this very file by volume and file index: the
/// caller's own identity check compares what a `Metadata` tells on Windows (creation time and
/// length), which a new lock file written by the same program can share with the one judged
/// (Wine reports coarse creation times). A breaker that judged the old file after another one
/// removed it, and whose name now belongs to a new holder, must not remove that one: `Busy`.
pub(crate) fn try_break_lock(file: &File, path: &Path, _id: FileId) -> io::Result<ExclusiveLock> {
    match lock_byte(file, BREAKER_OFFSET, true) {
        Ok(true) => match (fstat_id(file), stat_id(path, None)) {
            (Ok(ours), Ok(now)) if ours == now => Ok(ExclusiveLock::Held(None)),
            (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => Ok(ExclusiveLock::Held(None)),
            _ => Ok(ExclusiveLock::Busy),
        },
        Ok(false) => Ok(ExclusiveLock::Busy),
        Err(e) if matches!(e.raw_os_error(), Some(c) if c == ERROR_INVALID_FUNCTION as i32 || c == ERROR_NOT_SUPPORTED as i32) => {
            Ok(ExclusiveLock::Unsupported)
        }
        Err(e) => Err(e),
    }
}

/// No file system magics on Windows (the drive type decides the kind).
pub(crate) fn dir_fs_magic(_path: &Path) -> Option<u32> {
    None
}

/// UNC shares and mapped network drives are remote; a RAM disk is memory; the rest local.
pub(crate) fn dir_fs_kind(path: &Path) -> FsKind {
    let Some(Component::Prefix(prefix)) = path.components().next() else {
        return FsKind::Remote;
    };
    let letter = match prefix.kind() {
        Prefix::UNC(..) | Prefix::VerbatimUNC(..) => return FsKind::Remote,
        Prefix::Disk(l) | Prefix::VerbatimDisk(l) => l,
        _ => return FsKind::Remote,
    };
    let root: Vec<u16> = [u16::from(letter), u16::from(b':'), u16::from(b'\\'), 0].to_vec();
    // SAFETY: `root` is a NUL-terminated UTF-16 string that outlives the call.
    match unsafe { GetDriveTypeW(root.as_ptr()) } {
        DRIVE_REMOTE => FsKind::Remote,
        DRIVE_RAMDISK => FsKind::Memory,
        0 | 1 => FsKind::Remote, // unknown, no root directory
        _ => FsKind::Local,
    }
}

/// Exclusive creation of a complete file, the Windows way: the content is written to a named
/// temp file (`.<basename>.<16 hex>.sema-tmp`), which is closed and then renamed to the lock's
/// name by `MoveFileExW` without `MOVEFILE_REPLACE_EXISTING` (atomic; fails when the name
/// exists: held). The lock's name is then opened and checked to be that very file (volume and
/// file index) before the presence mark is taken on the handle the holder keeps.
///
/// Why not the hard link of the Unix ladder: a name removed while a handle opened through it is
/// open stays listed ("delete pending") until that handle closes, on Windows before 10 1809
/// and under Wine, so the temp name of a link would stay beside the lock for as long as it is
/// held. A renamed file has no second name. Between the rename and the open, the file has our
/// content (a live pid) but no presence mark yet: a fresh lock of a live holder is never judged
/// stale, so nobody may break it in that instant.
pub(super) fn create_by_rename(path: &Path, content: &[u8], fsync: bool) -> io::Result<File> {
    super::parent_dir(path)?;
    let mut made = None;
    for _ in 0..8 {
        let tmp = super::temp_path_for(path).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "lock path has no file name")
        })?;
        match new_file_options().open(&tmp) {
            Ok(f) => {
                made = Some((f, super::TempGuard(tmp)));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let (temp, guard) = made.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            "could not find a free temp file name",
        )
    })?;
    write_all_at(&temp, content, 0)?; // the guard removes the temp file on every early return
    let id = fstat_id(&temp)?;
    drop(temp); // a file open through its name cannot be renamed under Wine
    move_into_place(&guard.0, path)?;
    std::mem::forget(guard); // the temp name is gone: it is the lock's name now
    let file = match open_own(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(replaced()),
        Err(e) => return Err(e),
    };
    if fstat_id(&file)? != id {
        return Err(replaced()); // removed and taken by another process in between: held
    }
    hold_presence(&file);
    super::unnamed_linked(&file, path, fsync, false)?;
    Ok(file)
}

fn replaced() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "the new lock file was replaced before it was opened",
    )
}

/// Open the lock file we just created, read-write, never through a reparse point.
fn open_own(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)
}

/// `path` as a NUL-terminated UTF-16 string for a Win32 call, as a `\\?\` path when it is too
/// long for the classic API (std does the same for its own calls).
fn wide(path: &Path) -> Vec<u16> {
    use std::os::windows::ffi::OsStrExt;
    let long = path.as_os_str().len() >= 248;
    let verbatim = match path.components().next() {
        Some(Component::Prefix(p)) if long => match p.kind() {
            Prefix::Disk(_) => Some(r"\\?\".to_owned()),
            Prefix::UNC(..) => Some(r"\\?\UNC".to_owned()),
            _ => None,
        },
        _ => None,
    };
    let mut out: Vec<u16> = Vec::with_capacity(path.as_os_str().len() + 8);
    match verbatim {
        Some(prefix) => {
            out.extend(prefix.encode_utf16());
            // a verbatim path is not normalised: separators must be backslashes, and a UNC
            // path drops one of its two leading ones.
            let skip = usize::from(prefix.ends_with("UNC"));
            out.extend(path.as_os_str().encode_wide().skip(skip).map(|c| {
                if c == u16::from(b'/') {
                    u16::from(b'\\')
                } else {
                    c
                }
            }));
        }
        None => out.extend(path.as_os_str().encode_wide()),
    }
    out.push(0);
    out
}

/// How often a rename onto a name that is being deleted is tried again, 1 ms apart.
const DELETE_PENDING_TRIES: u32 = 20;

/// [`move_no_replace`], waiting out a "delete pending" name. The directory is writable (the temp
/// file was made in it), so access denied means the name exists but was deleted while another
/// handle keeps the old file open (a reader judging it; Windows before 10 1809 and Wine remove
/// the name only when that handle closes, microseconds later). Without the retry, the breaker
/// that just removed a stale lock would lose it to its own readers and nobody would win.
/// Still refused after the tries: held.
fn move_into_place(from: &Path, to: &Path) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match move_no_replace(from, to) {
            Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32) => {
                tries += 1;
                if tries >= DELETE_PENDING_TRIES {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, e));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

/// `MoveFileExW(from, to, 0)`: atomic, never replaces (`AlreadyExists` when `to` exists).
fn move_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let (from, to) = (wide(from), wide(to));
    // SAFETY: both are NUL-terminated UTF-16 strings that outlive the call.
    if unsafe { MoveFileExW(from.as_ptr(), to.as_ptr(), 0) } != 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// No handle can carry the holder's presence mark to a child: a byte-range lock belongs to the
/// process that took it, and Windows drops it when that process ends, whoever else still has a
/// handle of the file. `sema-native run` records its command as the holder instead
/// (`HeldLock::hand_over`).
pub(crate) fn raw_handle(_file: &File) -> Option<i64> {
    None
}

//! The platform layer with std alone, for a system that has no backend of its own yet (it
//! builds, it never breaks a lock on a guess): identity from the file's length and creation
//! time, no holder's mark, no breaker's lock, creation by named temp file and hard link.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::path::Path;

pub(crate) use super::absent::{
    breaker_present, dir_fs_kind, dir_fs_magic, link_unnamed, prepare_unnamed, presence,
};
use super::{ExclusiveLock, FileId};

/// Nothing to convert without a C path.
#[derive(Debug, Clone)]
pub(crate) struct OsPath;

impl OsPath {
    pub(crate) fn new(_path: &Path) -> OsPath {
        OsPath
    }
}

/// Without inode numbers in stable std, a file's creation time stands in for its identity.
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

pub(crate) fn fstat_id(file: &File) -> io::Result<FileId> {
    file.metadata().map(|m| file_id(&m))
}

pub(crate) fn stat_id(path: &Path, _os_path: Option<&OsPath>) -> io::Result<FileId> {
    std::fs::symlink_metadata(path).map(|m| file_id(&m))
}

/// A read at `offset` (seeks: std has no positional read here).
pub(super) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read(buf)
}

pub(super) fn write_all_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(data)
}

pub(super) fn new_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true);
    options
}

pub(super) fn link_unsupported(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Unsupported
}

pub(crate) fn open_existing(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).open(path)
}

pub(crate) fn is_symlink_refusal(_e: &io::Error, path: &Path) -> bool {
    super::is_symlink(path)
}

pub(crate) fn hold_presence(_file: &File) {}

pub(crate) fn try_break_lock(_file: &File, _path: &Path, _id: FileId) -> io::Result<ExclusiveLock> {
    Ok(ExclusiveLock::Unsupported)
}

pub(crate) fn raw_handle(_file: &File) -> Option<i64> {
    None
}

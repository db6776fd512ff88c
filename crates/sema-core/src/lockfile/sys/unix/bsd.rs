//! The Unix kernels other than Linux (macOS, the BSDs): no unnamed files, no byte locks owned
//! by an open file description, no table of `flock`s to read. The holder's mark is the shared
//! `flock` alone, creation starts at the named temp file, and every file system counts as one
//! whose calls may block.

use std::fs::File;
use std::io;
use std::path::Path;

use super::super::{FileId, FsKind, OsPath, Presence};
use super::flock_shared;

/// The holder's shared `flock` (best effort).
pub(crate) fn hold_presence(file: &File) {
    flock_shared(file);
}

/// No probe that a reader cannot imitate: only the breaker's `flock` can tell.
pub(crate) fn presence(_file: &File) -> Presence {
    Presence::Unknown
}

/// Unknown without a lock table: `true`, the cautious answer.
pub(crate) fn breaker_present(_id: FileId) -> bool {
    true
}

/// Unclassified: never run file calls inline.
pub(crate) fn dir_fs_kind(_path: &Path) -> FsKind {
    FsKind::Remote
}

/// No unnamed files here: `None` sends creation to the named temp file.
pub(crate) fn prepare_unnamed(_path: &Path, _content: &[u8]) -> Option<io::Result<File>> {
    None
}

/// Never called (no unnamed file is ever prepared here).
pub(crate) fn link_unnamed(
    _file: &File,
    _path: &Path,
    _os_path: &OsPath,
) -> Option<io::Result<()>> {
    None
}

//! The answers of a system that lacks a facility of the platform layer: no holder's mark a
//! reader cannot imitate, no table of breakers, no file system classification, no unnamed
//! files. Each answer is the cautious one (never break on a guess, never block a thread that
//! must not block). Backends re-export what they lack.

use std::fs::File;
use std::io;
use std::path::Path;

use super::{FileId, FsKind, OsPath, Presence};

/// No probe that a reader cannot imitate: only the breaker's lock can tell.
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

/// No file system magics here.
pub(crate) fn dir_fs_magic(_path: &Path) -> Option<u32> {
    None
}

/// No unnamed files: `None` sends creation to the named temp file.
pub(crate) fn prepare_unnamed(_path: &Path, _content: &[u8]) -> Option<io::Result<File>> {
    None
}

/// Never called (no unnamed file is ever prepared).
pub(crate) fn link_unnamed(
    _file: &File,
    _path: &Path,
    _os_path: &OsPath,
) -> Option<io::Result<()>> {
    None
}

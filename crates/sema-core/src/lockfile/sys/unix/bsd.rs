//! The Unix kernels other than Linux (macOS, the BSDs): no unnamed files, no byte locks owned
//! by an open file description, no table of `flock`s to read. The holder's mark is the shared
//! `flock` alone, creation starts at the named temp file, and every file system counts as one
//! whose calls may block.

use std::fs::File;

use super::flock_shared;

pub(crate) use super::super::absent::{
    breaker_present, dir_fs_kind, dir_fs_magic, link_unnamed, prepare_unnamed, presence,
};

/// The holder's shared `flock` (best effort).
pub(crate) fn hold_presence(file: &File) {
    flock_shared(file);
}

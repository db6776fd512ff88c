//! What file system a lock's directory is on, named from its `statfs` magic, and what the
//! engine falls back to there. The table is the one place a magic gets a name and a
//! [`FsKind`]; only Linux reads magics (`unix/linux.rs`), elsewhere the name is unknown.
//!
//! What each kind means for the engine (measured on bindfs 1.14.7 over ext4, Linux 6.x):
//! - `O_TMPFILE` fails with `ENOTSUP` on FUSE (and on NFS, SMB, 9p before their kernels grew
//!   it): creation falls back to a named temp file + `link()`, which every kind here has.
//! - `flock` and OFD byte locks on FUSE are kept by the local kernel when the file system
//!   does not implement them (bindfs: both work, another process's `LOCK_EX` gets `EAGAIN`),
//!   so they are seen by processes of this machine only; on NFS they go to the server. The
//!   presence mark and the queue are therefore per machine there; a holder on another machine
//!   is judged by its heartbeat's progress (`stale/remote.rs`), never by a lock.
//! - inotify reports only what this machine's kernel did: a holder on another machine that
//!   releases or dies wakes nobody, so the waiter's `retryInterval` poll finds it (the poll
//!   runs on every file system; on these it is the only wake-up).

use std::borrow::Cow;

use super::FsKind;

/// Every magic we name (from linux/magic.h and the file systems' sources): name and kind.
/// Network, user-space and cluster file systems are [`FsKind::Remote`]: any call may wait on
/// a network or another process, and events of other machines never arrive.
const MAGICS: [(u32, &str, FsKind); 28] = [
    (0xef53, "ext4", FsKind::Local), // ext2/3/4 share the magic
    (0x5846_5342, "xfs", FsKind::Local),
    (0x9123_683e, "btrfs", FsKind::Local),
    (0x2fc1_2fc1, "zfs", FsKind::Local),
    (0xf2f5_2010, "f2fs", FsKind::Local),
    (0x4d44, "vfat", FsKind::Local),
    (0x2011_bab0, "exfat", FsKind::Local),
    (0x5346_544e, "ntfs", FsKind::Local),
    (0x7366_746e, "ntfs3", FsKind::Local),
    (0x794c_7630, "overlay", FsKind::Local),
    (0x5265_4973, "reiserfs", FsKind::Local),
    (0x0102_1994, "tmpfs", FsKind::Memory),
    (0x8584_58f6, "ramfs", FsKind::Memory),
    (0x6969, "nfs", FsKind::Remote),
    (0x517b, "smb", FsKind::Remote),
    (0xfe53_4d42, "smb2", FsKind::Remote),
    (0xff53_4d42, "cifs", FsKind::Remote),
    (0x6573_5546, "fuse", FsKind::Remote), // sshfs, s3fs, bindfs, rclone, virtiofs
    (0x00c3_6400, "ceph", FsKind::Remote),
    (0x0102_1997, "9p", FsKind::Remote), // VM and WSL shares
    (0x5346_414f, "afs", FsKind::Remote),
    (0x7375_7245, "coda", FsKind::Remote),
    (0x7461_636f, "ocfs2", FsKind::Remote),
    (0x0116_1970, "gfs2", FsKind::Remote),
    (0x0bd0_0bd0, "lustre", FsKind::Remote),
    (0x4750_4653, "gpfs", FsKind::Remote),
    (0x1983_0326, "beegfs", FsKind::Remote),
    (0x2003_0528, "orangefs", FsKind::Remote),
];

/// The name and kind of a `statfs` magic; an unknown magic is named `0x…` and treated as
/// remote (never a call on a thread that must not block, always the poll).
pub(crate) fn classify(magic: u32) -> (Cow<'static, str>, FsKind) {
    MAGICS
        .iter()
        .find(|(m, _, _)| *m == magic)
        .map(|(_, name, kind)| (Cow::Borrowed(*name), *kind))
        .unwrap_or_else(|| (Cow::Owned(format!("{magic:#x}")), FsKind::Remote))
}

/// Whether exclusive creation at the lock's path (`O_EXCL`: the last step of the creation
/// ladder, for a file system without hard links) keeps exclusion on a file system of `kind`.
/// In a local kernel it is atomic. On a network or FUSE file system it is only as atomic as the
/// server or the user-space daemon makes it: open(2) documents NFSv2 without it, and object
/// store file systems, which are the ones without hard links (s3fs: "hard links" are not
/// supported), create by looking, then writing. There the engine refuses
/// (`UNSUPPORTED_FILE_SYSTEM`) rather than lock without exclusion; every other step of the
/// ladder is a `link()`, which the file system itself makes atomic or refuses.
pub(crate) fn exclusive_create_is_atomic(kind: FsKind) -> bool {
    kind != FsKind::Remote
}

/// What the engine does instead of what a file system lacks (`status().fallbacks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// No `O_TMPFILE` here: a lock file is written under a temp name and hard-linked.
    NoTmpfile,
    /// Events of other machines never arrive here: a waiter finds a freed lock by its
    /// `retryInterval` poll.
    Poll,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::NoTmpfile => "no-tmpfile",
            Fallback::Poll => "poll",
        }
    }
}

/// The file system of a lock's directory as `status()` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSystem {
    /// `ext4`, `tmpfs`, `nfs`, `fuse`, ..., `0x…` for a magic not in the table; `None` where the
    /// system has no magics (not Linux) or the directory cannot be asked.
    pub name: Option<String>,
    /// What the engine falls back to there, in [`Fallback`]'s order.
    pub fallbacks: Vec<Fallback>,
}

/// The report of a directory of kind `kind` whose magic is `magic` (`None`: not known here)
/// and whose `O_TMPFILE` probe said `tmpfile` (`None`: the probe failed for another reason,
/// no claim).
pub(crate) fn file_system(magic: Option<u32>, kind: FsKind, tmpfile: Option<bool>) -> FileSystem {
    let mut fallbacks = Vec::new();
    if tmpfile == Some(false) {
        fallbacks.push(Fallback::NoTmpfile);
    }
    if kind == FsKind::Remote {
        fallbacks.push(Fallback::Poll);
    }
    FileSystem {
        name: magic.map(|m| classify(m).0.into_owned()),
        fallbacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classification table: a name and a kind per magic, unknown magics by number and
    /// remote (the cautious answer: never inline, always the poll).
    #[test]
    fn classification_table() {
        let cases: [(u32, &str, FsKind); 12] = [
            (0xef53, "ext4", FsKind::Local),
            (0x5846_5342, "xfs", FsKind::Local),
            (0x9123_683e, "btrfs", FsKind::Local),
            (0x794c_7630, "overlay", FsKind::Local),
            (0x0102_1994, "tmpfs", FsKind::Memory),
            (0x6969, "nfs", FsKind::Remote),
            (0xff53_4d42, "cifs", FsKind::Remote),
            (0xfe53_4d42, "smb2", FsKind::Remote),
            (0x6573_5546, "fuse", FsKind::Remote),
            (0x0102_1997, "9p", FsKind::Remote),
            (0x00c3_6400, "ceph", FsKind::Remote),
            (0x1234_5678, "0x12345678", FsKind::Remote),
        ];
        for (magic, name, kind) in cases {
            assert_eq!(classify(magic), (Cow::Borrowed(name), kind), "{magic:#x}");
        }
        let mut seen = std::collections::HashSet::new();
        for (m, _, _) in MAGICS {
            assert!(seen.insert(m), "magic {m:#x} listed twice");
        }
    }

    /// Creation without hard links is refused on network/FUSE kinds only.
    #[test]
    fn exclusive_creation_rule() {
        for (magic, atomic) in [
            (0xef53, true),
            (0x4d44, true),
            (0x0102_1994, true),
            (0x6573_5546, false),
            (0x6969, false),
            (0xff53_4d42, false),
            (0x1234_5678, false),
        ] {
            assert_eq!(
                exclusive_create_is_atomic(classify(magic).1),
                atomic,
                "{magic:#x}"
            );
        }
    }

    /// The fallbacks follow from the kind and the O_TMPFILE probe: FUSE (no O_TMPFILE on
    /// bindfs) names both, a local disk none, an unknown directory the poll only.
    #[test]
    fn fallbacks() {
        let fuse = file_system(Some(0x6573_5546), FsKind::Remote, Some(false));
        assert_eq!(fuse.name.as_deref(), Some("fuse"));
        assert_eq!(fuse.fallbacks, [Fallback::NoTmpfile, Fallback::Poll]);
        assert_eq!(
            file_system(Some(0xef53), FsKind::Local, Some(true)),
            FileSystem {
                name: Some("ext4".into()),
                fallbacks: vec![]
            }
        );
        let unknown = file_system(None, FsKind::Remote, None);
        assert_eq!(
            (unknown.name, unknown.fallbacks),
            (None, vec![Fallback::Poll])
        );
        assert!(file_system(Some(0x0102_1994), FsKind::Memory, None)
            .fallbacks
            .is_empty());
    }
}

//! Counting who stands in a line from outside it (`sema-native ls`, `status`, the LockManager's
//! `query()`): the presence marks of the queue files, read from `/proc/locks` without opening,
//! creating or locking anything.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::{name_of, PRESENT};

/// How many processes stand in the line of the lock `key` now (their presence marks), over the
/// runtime directory of every user that this process may read (its own; all of them as root):
/// each user has a line of their own. Only looks: directories are opened `O_NOFOLLOW` and the
/// queue files are `stat`ed without following, never opened, so nothing is created, changed or
/// locked. The marks are counted in `/proc/locks` (an open file description's lock has pid -1
/// there, so it is the one place that lists them all; `F_OFD_GETLK` names only one). `None`
/// when `/proc/locks` cannot be read.
pub(crate) fn waiting_processes(key: &Path) -> Option<u32> {
    let name = name_of(key);
    let mut files: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        for entry in entries.flatten() {
            if !entry.file_name().as_bytes().starts_with(b"sema-native-") {
                continue;
            }
            let Ok(dir) = rustix::fs::open(
                entry.path(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let Ok(st) = rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
            {
                files.push((
                    rustix::fs::major(st.st_dev),
                    rustix::fs::minor(st.st_dev),
                    st.st_ino,
                ));
            }
        }
    }
    if files.is_empty() {
        return Some(0);
    }
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    Some(count_marks(&table, &files, PRESENT as u64))
}

/// The `/proc/locks` lines that are OFD read locks covering `byte` of one of `files`
/// (major, minor, inode). A line: `1: OFDLCK ADVISORY READ -1 00:1a:1234 1 1`; the kernel
/// merges the marks of one open file description (a starving waiter's bytes 0 and 1 show as
/// `0 1`), so each line is one process. Blocked requests (`1: -> …`) are not marks.
fn count_marks(table: &str, files: &[(u32, u32, u64)], byte: u64) -> u32 {
    let mut n = 0;
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[1] != "OFDLCK" || f[3] != "READ" {
            continue;
        }
        let covers = f[6].parse::<u64>().is_ok_and(|start| start <= byte)
            && (f[7] == "EOF" || f[7].parse::<u64>().is_ok_and(|end| end >= byte));
        if !covers {
            continue;
        }
        let mut id = f[5].splitn(3, ':');
        let (Some(maj), Some(min), Some(ino)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        let parsed = (
            u32::from_str_radix(maj, 16),
            u32::from_str_radix(min, 16),
            ino.parse::<u64>(),
        );
        if let (Ok(maj), Ok(min), Ok(ino)) = parsed {
            if files.contains(&(maj, min, ino)) {
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_in_proc_locks() {
        let table = "1: OFDLCK ADVISORY  READ  -1 00:1a:77 1 1\n\
                     2: OFDLCK ADVISORY  READ  -1 00:1a:77 1 1\n\
                     2: -> OFDLCK ADVISORY  WRITE -1 00:1a:77 1 1\n\
                     3: OFDLCK ADVISORY  READ  -1 00:1a:77 0 0\n\
                     3: OFDLCK ADVISORY  READ  -1 00:1a:77 0 1\n\
                     4: FLOCK  ADVISORY  WRITE 42 00:1a:77 0 EOF\n\
                     5: OFDLCK ADVISORY  READ  -1 00:1b:77 1 1\n\
                     6: POSIX  ADVISORY  READ  42 00:1a:77 1 1\n";
        assert_eq!(count_marks(table, &[(0, 0x1a, 77)], 1), 3);
        assert_eq!(count_marks(table, &[(0, 0x1a, 77)], 0), 2);
        assert_eq!(count_marks(table, &[(0, 0x1a, 78)], 1), 0);
    }
}

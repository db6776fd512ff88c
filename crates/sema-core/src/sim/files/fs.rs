//! The simulated file system: one lock directory, each call atomic as on a local POSIX file
//! system, with the faults a real one gives (`EMFILE`, `ENOSPC`) injected on any call.
//!
//! Only what the engine's file protocol uses: `linkat` of a prepared (complete, flocked) file
//! onto a name, failing with `EEXIST` (`sys::link_unnamed`); open + read (`open_existing`,
//! `read_capped`); `stat` of a name's inode (`stat_id`); unlink; rewrite in place through an
//! open descriptor (`rewrite_in_place`); listing the directory (`read_dir`); and the holder's
//! presence mark (an OFD lock on the inode, `sys::presence`), gone when its process dies.

use std::collections::BTreeMap;

/// An error a call can return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errno {
    Exist,
    NoEnt,
    /// Injected: too many open files.
    Emfile,
    /// Injected: no space left on the device.
    Nospc,
}

/// One file.
#[derive(Debug, Clone)]
pub struct Inode {
    pub id: u64,
    pub bytes: Vec<u8>,
    /// Wall-clock seconds of the last write, as the writer's clock said (a coarse mtime).
    pub mtime: i64,
    /// The ctime of the last write in ns, as the writer's clock said (ms resolution).
    pub changed_ns: i128,
    /// The simulated (true) time of the last write, in ms.
    pub written: u64,
    /// The process (index in the world) whose descriptor carries the holder's presence mark.
    pub mark: Option<usize>,
    /// The process that last wrote it (for the end-of-run "nothing left behind" check).
    pub writer: usize,
    /// Its holder counted it lost to a silent heartbeat and closed it, leaving it in place (as
    /// `HeldInner::lose_to_silence` does).
    pub abandoned: bool,
}

impl Inode {
    /// What a look shows of its holder's heartbeat (`Evidence::of` on a real file).
    pub fn evidence(&self) -> crate::lockfile::stale::remote::Evidence {
        crate::lockfile::stale::remote::Evidence::from_parts(
            &self.bytes,
            i128::from(self.mtime) * 1_000_000_000,
            self.changed_ns,
        )
    }

    /// A write in place by process `writer` at wall-clock `wall_ms` (true time `now`).
    pub fn rewrite(&mut self, bytes: Vec<u8>, wall_ms: i64, now: u64, writer: usize) {
        self.bytes = bytes;
        self.mtime = wall_ms.div_euclid(1000);
        self.changed_ns = i128::from(wall_ms) * 1_000_000;
        self.written = now;
        self.writer = writer;
    }
}

#[derive(Debug, Default)]
pub struct SimFs {
    names: BTreeMap<String, Inode>,
    next_id: u64,
}

impl SimFs {
    /// `linkat` of a new, complete file onto `name` (fails if anything is there).
    pub fn link_new(
        &mut self,
        name: &str,
        bytes: Vec<u8>,
        (wall_ms, written): (i64, u64),
        mark: Option<usize>,
        writer: usize,
    ) -> Result<u64, Errno> {
        if self.names.contains_key(name) {
            return Err(Errno::Exist);
        }
        self.next_id += 1;
        let id = self.next_id;
        super::trace(|| {
            format!(
                "p{writer} link {name} #{id}: {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
        self.names.insert(
            name.to_string(),
            Inode {
                id,
                bytes,
                mtime: wall_ms.div_euclid(1000),
                changed_ns: i128::from(wall_ms) * 1_000_000,
                written,
                mark,
                writer,
                abandoned: false,
            },
        );
        Ok(id)
    }

    pub fn get(&self, name: &str) -> Option<&Inode> {
        self.names.get(name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Inode> {
        self.names.get_mut(name)
    }

    pub fn unlink(&mut self, name: &str) -> Result<Inode, Errno> {
        let gone = self.names.remove(name).ok_or(Errno::NoEnt);
        if let Ok(i) = gone.as_ref() {
            super::trace(|| format!("unlink {name} #{}", i.id));
        }
        gone
    }

    /// The names in the directory, in order.
    pub fn list(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    pub fn files(&self) -> impl Iterator<Item = (&String, &Inode)> {
        self.names.iter()
    }

    /// Every presence mark of a process that died goes with its descriptors.
    pub fn drop_marks_of(&mut self, proc: usize) {
        for inode in self.names.values_mut() {
            if inode.mark == Some(proc) {
                inode.mark = None;
            }
        }
    }
}

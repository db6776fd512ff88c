//! One attempt to create the lock file: build the content, create it atomically (through the
//! platform layer), and when a file is there, examine it and break it if stale
//! (`breaking.rs`), a bounded number of rounds. A won attempt becomes a [`HeldLock`] in the
//! registry.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::breaking::Examined;
use super::error::LockError;
use super::format::{sanitize_tag, LockInfo, MAX_LOCK_FILE_BYTES};
use super::held::{HeldInner, HeldLock, HeldState};
use super::lock_file::LockFile;
use super::options::AcquireRequest;
use super::process::{
    current_pid, host_identity, now_unix_secs, own_start_ticks, process_start_ticks,
};
use super::registry::{NEXT_ID, NO_OWNER, REGISTRY};
use super::sys::{self, CreationStrategy, FileSig};
use super::unpoisoned;

/// How many create → examine → break rounds one attempt makes before reporting `AlreadyLocked`.
const MAX_ROUNDS: usize = 16;

/// A waiter's lock file, written and flocked but not linked yet (see
/// [`LockFile::attempt`]).
pub(super) struct Prepared {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) file: File,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) info: LockInfo,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) content: Vec<u8>,
    /// `content` is on the disk (fsync'd): after the link only the directory needs a sync.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) synced: bool,
}

/// A busy attempt: the holder as read (if it parses) and the signature of the file judged
/// held, so a waiter need not judge the same file again on every wake-up.
pub(super) struct Busy {
    pub(super) holder: Option<LockInfo>,
    pub(super) sig: Option<FileSig>,
}

pub(super) enum AttemptError {
    Busy(Box<Busy>),
    Failed(LockError),
}

impl LockFile {
    /// The error of a failed attempt: `AlreadyLocked` with the holder the attempt judged.
    pub(super) fn error_of(&self, e: AttemptError) -> LockError {
        match e {
            AttemptError::Busy(b) => LockError::AlreadyLocked {
                holder: self.holder_of(b.holder.as_ref()),
            },
            AttemptError::Failed(e) => e,
        }
    }
}

impl LockFile {
    /// Create the file (breaking a stale one safely), without touching the in-process FIFO.
    /// `look_first`: examine the existing file before building one (a waiter that saw a file
    /// there). `fsync`: sync the file and directory after winning (else the caller does, with
    /// [`HeldLock::sync_durable`]). A prepared unnamed file (content written, marks taken) is
    /// kept in `prepared` when the link loses, so the next attempt of the same waiter is just
    /// the link (the timestamp is rewritten if a second passed).
    pub(super) fn attempt(
        &self,
        req: &AcquireRequest,
        look_first: bool,
        fsync: bool,
        prepared: &mut Option<Prepared>,
    ) -> Result<HeldLock, AttemptError> {
        let failed = |e| AttemptError::Failed(LockError::io("Failed to create lock", e));
        if let Some(e) = self.oversize(req) {
            return Err(AttemptError::Failed(e));
        }
        let mut examine_first = look_first;
        let mut built: Option<(LockInfo, Vec<u8>)> = None;
        for _ in 0..MAX_ROUNDS {
            if !examine_first && self.strategy == CreationStrategy::Auto {
                match self.link_prepared(req, fsync, prepared) {
                    Some(Ok(held)) => return Ok(held),
                    Some(Err(e)) if e.kind() == io::ErrorKind::AlreadyExists => {
                        examine_first = true; // examined below
                    }
                    Some(Err(e)) => return Err(failed(e)),
                    None => {} // no O_TMPFILE here: the general path below
                }
            }
            if !examine_first {
                let (info, content) = match built.take() {
                    Some((mut info, content)) => {
                        // A later round: fresh timestamp (the content is rebuilt only if it moved).
                        let now = now_unix_secs();
                        if info.timestamp == now {
                            (info, content)
                        } else {
                            info.timestamp = now;
                            let content = info.serialize().into_bytes();
                            (info, content)
                        }
                    }
                    None => self.build_info(req),
                };
                match sys::create_lock_file_on(
                    self.fs,
                    &self.path,
                    self.os_path(),
                    &content,
                    fsync,
                    self.strategy,
                ) {
                    Ok(file) => {
                        return self
                            .adopt_new_file(file, info, content, fsync)
                            .map_err(failed)
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) if sys::is_refused_creation(&e) => {
                        return Err(AttemptError::Failed(self.unsupported_file_system()))
                    }
                    Err(e) => return Err(failed(e)),
                }
                built = Some((info, content));
            }
            examine_first = false;
            match self.examine_and_break() {
                Examined::Held(holder, sig) => {
                    return Err(AttemptError::Busy(Box::new(Busy { holder, sig })))
                }
                Examined::Symlink => return Err(AttemptError::Failed(self.symlink_error())),
                Examined::Changed | Examined::Gone | Examined::Broken => {}
            }
        }
        Err(AttemptError::Busy(Box::new(Busy {
            holder: None,
            sig: None,
        })))
    }

    /// One link attempt of the prepared file (prepared now if there is none; its timestamp
    /// refreshed if a second passed). With `fsync` its content is synced BEFORE the link (a
    /// crash never leaves a name on an empty or partial file) and the directory after it.
    /// `None`: unnamed files are unsupported here.
    pub(super) fn link_prepared(
        &self,
        req: &AcquireRequest,
        fsync: bool,
        prepared: &mut Option<Prepared>,
    ) -> Option<io::Result<HeldLock>> {
        if let Err(e) = self.prepare(req, prepared, fsync)? {
            return Some(Err(e));
        }
        let p = prepared.as_ref()?;
        match sys::link_unnamed(&p.file, &self.path, self.os_path())? {
            Ok(()) => {}
            Err(e) => return Some(Err(e)),
        }
        let p = prepared.take()?;
        if let Err(e) = sys::unnamed_linked(&p.file, &self.path, fsync, p.synced) {
            return Some(Err(e));
        }
        Some(self.adopt_new_file(p.file, p.info, p.content, p.synced))
    }

    /// The link alone of a waiter's prepared file whose content is on the disk already and
    /// whose timestamp is this second's: no sync here (the caller syncs the directory,
    /// [`HeldLock::sync_durable`]; the name never points at content that is not on the
    /// disk). `None`: no such file is ready (or unnamed files are unsupported here).
    pub(super) fn link_ready(
        &self,
        prepared: &mut Option<Prepared>,
    ) -> Option<io::Result<HeldLock>> {
        if self.strategy != CreationStrategy::Auto || !LockFile::prepared_ready(prepared) {
            return None;
        }
        let p = prepared.as_ref()?;
        if let Err(e) = sys::link_unnamed(&p.file, &self.path, self.os_path())? {
            return Some(Err(e));
        }
        let p = prepared.take()?;
        Some(self.adopt_new_file(p.file, p.info, p.content, true))
    }

    /// Make sure `prepared` holds this waiter's unnamed lock file with the current second's
    /// timestamp (built, or rewritten in place: nobody can read it before the link), its
    /// content synced when `sync`. `None`: unnamed files are unsupported here. On an error
    /// the prepared file is dropped (its anonymous inode vanishes with it).
    pub(super) fn prepare(
        &self,
        req: &AcquireRequest,
        prepared: &mut Option<Prepared>,
        sync: bool,
    ) -> Option<io::Result<()>> {
        let now = now_unix_secs();
        match prepared.as_mut() {
            Some(p) if p.info.timestamp != now => {
                p.info.timestamp = now;
                let content = p.info.serialize().into_bytes();
                if let Err(e) = sys::rewrite_in_place(&p.file, &content, p.content.len()) {
                    *prepared = None;
                    return Some(Err(e));
                }
                p.content = content;
                p.synced = false;
            }
            Some(_) => {}
            None => {
                let (info, content) = self.build_info(req);
                match sys::prepare_unnamed(&self.path, &content)? {
                    Ok(file) => {
                        *prepared = Some(Prepared {
                            file,
                            info,
                            content,
                            synced: false,
                        })
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        let p = prepared.as_mut()?;
        if sync && !p.synced {
            if let Err(e) = p.file.sync_all() {
                *prepared = None;
                return Some(Err(e));
            }
            p.synced = true;
        }
        Some(Ok(()))
    }

    /// Whether `prepared` is ready to be linked as it is (content synced, timestamp current):
    /// an attempt with it is one `linkat` and then only the directory's sync.
    pub(super) fn prepared_ready(prepared: &Option<Prepared>) -> bool {
        prepared
            .as_ref()
            .is_some_and(|p| p.synced && p.info.timestamp == now_unix_secs())
    }

    /// Refuses a tag that would make the lock file larger than readers accept
    /// ([`MAX_LOCK_FILE_BYTES`]): nobody, not even this process's release, could read it back,
    /// so the lock would stay until it went stale. Checked only for a tag that could reach it
    /// (the other keys take under 200 bytes; sanitising and cutting never lengthen a tag).
    pub(super) fn oversize(&self, req: &AcquireRequest) -> Option<LockError> {
        let tag = req.tag.as_deref()?;
        if tag.len() + 1024 <= MAX_LOCK_FILE_BYTES {
            return None;
        }
        let (_, content) = self.build_info(req);
        (content.len() > MAX_LOCK_FILE_BYTES).then(|| {
            LockError::InvalidArgument(format!(
                "tag: {} UTF-16 units (maxTagLength {}) make a lock file of {} bytes, over the {} \
                 bytes readers accept",
                tag.encode_utf16().count(),
                self.options
                    .max_tag_length
                    .map_or_else(|| "null".to_string(), |n| n.to_string()),
                content.len(),
                MAX_LOCK_FILE_BYTES
            ))
        })
    }

    /// The refusal of a directory where exclusion cannot be kept, naming its file system.
    fn unsupported_file_system(&self) -> LockError {
        let fs = sys::file_system(&self.path, self.fs);
        LockError::UnsupportedFileSystem(format!(
            "{}: the file system ({}) has no hard links, and exclusive creation on a network or \
             FUSE file system is only as atomic as its server makes it: refusing to lock without \
             exclusion",
            self.path.display(),
            fs.name.as_deref().unwrap_or("unknown, network or FUSE")
        ))
    }

    /// What a new lock of `req` records, and its exact bytes.
    pub(super) fn build_info(&self, req: &AcquireRequest) -> (LockInfo, Vec<u8>) {
        let me = current_pid();
        let owner = req.owner_pid.map(i64::from).unwrap_or(me);
        let extra = self.extra_keys;
        let start = if !extra {
            None
        } else if owner == me {
            own_start_ticks()
        } else {
            process_start_ticks(owner)
        };
        let info = LockInfo {
            pid: owner,
            timestamp: now_unix_secs(),
            tag: req
                .tag
                .as_deref()
                .map(|t| sanitize_tag(t, self.options.max_tag_length)),
            host: extra.then(|| host_identity().to_string()),
            start,
            // Written by the heartbeat's first beat, once a beat is running (`heartbeat.rs`).
            heartbeat_ms: None,
            token: extra.then(|| sys::random_hex(16)),
        };
        let content = info.serialize().into_bytes();
        (info, content)
    }

    pub(super) fn adopt_new_file(
        &self,
        file: File,
        info: LockInfo,
        content: Vec<u8>,
        content_synced: bool,
    ) -> io::Result<HeldLock> {
        let file_id = match sys::fstat_id(&file).or_else(|_| sys::stat_id(&self.path, None)) {
            Ok(id) => id,
            Err(e) => {
                // Cannot identify our own file: do not keep a lock we could never verify.
                let _ = std::fs::remove_file(&self.path);
                return Err(e);
            }
        };
        let held = HeldLock {
            inner: Arc::new(HeldInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                owner: AtomicU64::new(NO_OWNER),
                handle_kept: AtomicBool::new(false),
                file: self.inner.clone(),
                state: Mutex::new(HeldState {
                    file: Some(file),
                    file_id,
                    content,
                    content_synced,
                    timestamp: info.timestamp,
                    handed_to: None,
                    lost: None,
                    stop: None,
                    finished: false,
                    released: false,
                    lost_reason: None,
                    turn: None,
                    heartbeat_started: false,
                }),
                info,
            }),
        };
        unpoisoned(&REGISTRY).insert(held.inner.id, held.clone());
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lockfile::sys::FsKind;
    use crate::lockfile::LockOptions;
    use crate::ErrorCode;

    /// Creation without hard links (`Direct` stands for a file system that refuses `link()`) is
    /// refused with `UNSUPPORTED_FILE_SYSTEM` on a network/FUSE kind, naming the file system
    /// and leaving nothing behind; on a local kind it creates the lock as before.
    #[test]
    fn creation_without_links_is_refused_where_exclusion_is_not_atomic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        let on = |kind| {
            let mut lf = LockFile::new(path.clone(), LockOptions::default())
                .with_creation_strategy(CreationStrategy::Direct);
            Arc::make_mut(&mut lf.inner).fs = kind;
            lf
        };
        let err = on(FsKind::Remote)
            .try_acquire(&AcquireRequest::default())
            .expect_err("refused");
        assert_eq!(err.code(), ErrorCode::UnsupportedFileSystem);
        let msg = err.to_string();
        assert!(
            msg.contains("x.lock") && msg.contains("no hard links"),
            "{msg}"
        );
        assert!(!path.exists(), "no lock left by the refused attempt");
        let held = on(FsKind::Local)
            .try_acquire(&AcquireRequest::default())
            .expect("a local file system keeps exclusion with O_EXCL");
        assert!(held.release().expect("release"));
    }
}

//! `LockFile`: one lock path with its options, and what it says about the file on disk
//! (`observe`, `status`). Acquiring is in `acquire.rs`, one attempt in `attempt.rs`, breaking a
//! stale lock in `breaking.rs`, releasing in `release.rs`.

use std::fs::Metadata;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;

use super::error::{Holder, LockError};
use super::fifo::fifo_for;
use super::format::{parse_lock_info, read_lock_bytes_lossy, LockInfo, ParseError};
use super::options::{LockOptions, LockStatus};
use super::owner::{owns, Claimant};
use super::paths::canonical_key;
use super::process::{current_pid, host_identity, now_unix_secs};
use super::registry::holds;
use super::stale::{
    judge, reclaim, remote, HeldBecause, Observation, OsProbe, Reclaim, ReclaimRule, StaleContext,
    StaleJudgement,
};
use super::sys::{self, CreationStrategy, FileId, FsKind};

/// One lock path with its options. Cheap to clone (one shared allocation).
///
/// Validate a path from a user first ([`validate_lock_path`](super::validate_lock_path): no
/// NUL, no `..` segment, the directory resolved), then take the lock without waiting
/// ([`LockFile::try_acquire`]) or waiting ([`LockFile::acquire`], inside a tokio runtime):
///
/// ```
/// use sema_core::lockfile::{validate_lock_path, AcquireRequest, LockError, LockFile, LockOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let text = dir.path().join("build.lock");
/// # let text = text.to_str().unwrap_or_default();
/// let path = validate_lock_path(text)?;
/// let file = LockFile::new_canonical(path, LockOptions::default());
///
/// let held = file.try_acquire(&AcquireRequest { tag: Some("nightly".into()), owner_pid: None })?;
/// held.start_heartbeat(); // keeps its timestamp young and notices a loss
/// // A second attempt, here or in another process, is refused with the holder.
/// match file.try_acquire(&AcquireRequest::default()) {
///     Err(LockError::AlreadyLocked { holder }) => {
///         assert_eq!(holder.pid, Some(i64::from(std::process::id())));
///         assert_eq!(holder.tag.as_deref(), Some("nightly"));
///     }
///     other => panic!("{other:?}"),
/// }
/// assert!(held.release()?); // true: this call released it
/// assert!(!held.release()?); // already released
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockFile {
    pub(super) inner: Arc<FileInner>,
}

#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct FileInner {
    pub(super) path: PathBuf,
    /// `path` converted once for the system calls.
    pub(super) os_path: sys::OsPath,
    pub(super) key: PathBuf,
    pub(super) options: LockOptions,
    pub(super) strategy: CreationStrategy,
    pub(super) extra_keys: bool,
    /// The in-process FIFO of the canonical path (shared by every `LockFile` of it).
    pub(super) fifo: Arc<Semaphore>,
    /// The directory's file system: on tmpfs `fsync` is instant, so async attempts sync inline
    /// instead of hopping to the blocking pool; on a local disk without `fsync` the calls are
    /// short enough to run on the JS thread (see [`LockFile::acquire_now`]).
    pub(super) fs: FsKind,
}

impl std::ops::Deref for LockFile {
    type Target = FileInner;
    fn deref(&self) -> &FileInner {
        &self.inner
    }
}

pub(super) fn age_of(meta: &Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO)
}

pub(super) fn observation_from(bytes: Option<&[u8]>, meta: &Metadata) -> Observation {
    let age = age_of(meta);
    let Some(bytes) = bytes else {
        return Observation::Unparseable {
            age,
            error: ParseError::MissingPid,
        };
    };
    match parse_lock_info(&read_lock_bytes_lossy(bytes)) {
        Ok(info) => {
            // Another host's holder is judged by its heartbeat's progress as this process sees
            // it: note this look (only theirs: our own host's holders are probed by pid).
            let unchanged = if info.host.as_deref().is_some_and(|h| h != host_identity()) {
                let id = sys::file_id(meta);
                remote::note_remote((id.dev, id.ino), remote::Evidence::of(bytes, meta))
            } else {
                Duration::ZERO
            };
            Observation::Parsed {
                info,
                age,
                unchanged,
            }
        }
        Err(error) => Observation::Unparseable { age, error },
    }
}

impl LockFile {
    /// A lock at `path` (already validated: see `validate_lock_path` / `validate_semats_path`).
    pub fn new(path: PathBuf, options: LockOptions) -> LockFile {
        let key = canonical_key(&path);
        LockFile::with_key(path, key, options)
    }

    /// A lock at a path that `validate_lock_path` / `validate_semats_path` returned: already
    /// its canonical key, so its directory is not resolved a second time (one `realpath` per
    /// lock file made, e.g. per `status()` by path).
    pub fn new_canonical(path: PathBuf, options: LockOptions) -> LockFile {
        let key = path.clone();
        LockFile::with_key(path, key, options)
    }

    /// A lock file in the same directory as this one (`path` canonical already): its file
    /// system is this one's, so it is not asked again (a shared lock's guard and members).
    pub(super) fn beside(&self, path: PathBuf, options: LockOptions) -> LockFile {
        LockFile::with_fs(path.clone(), path, options, self.fs)
    }

    fn with_key(path: PathBuf, key: PathBuf, options: LockOptions) -> LockFile {
        let fs = sys::dir_fs_kind(&path);
        LockFile::with_fs(path, key, options, fs)
    }

    fn with_fs(path: PathBuf, key: PathBuf, options: LockOptions, fs: FsKind) -> LockFile {
        let fifo = fifo_for(&key);
        LockFile {
            inner: Arc::new(FileInner {
                fs,
                os_path: sys::OsPath::new(&path),
                path,
                key,
                options,
                strategy: CreationStrategy::Auto,
                extra_keys: true,
                fifo,
            }),
        }
    }

    pub(super) fn os_path(&self) -> &sys::OsPath {
        &self.inner.os_path
    }

    /// `false`: write only `pid=`, `timestamp=` and `tag=`, a file indistinguishable from
    /// semats' (for a semats-compatible CLI whose lock must outlive the CLI process: such a
    /// file is judged by semats' rule, stale only after `stale_timeout` with a dead pid, while
    /// our own format makes a dead holder's lock reclaimable at once). Ownership checks then
    /// compare the whole content instead of the token. Default `true`.
    pub fn with_extra_keys(mut self, extra_keys: bool) -> LockFile {
        Arc::make_mut(&mut self.inner).extra_keys = extra_keys;
        self
    }

    /// Force a creation strategy (tests exercise the O_TMPFILE fallback with it).
    #[doc(hidden)]
    pub fn with_creation_strategy(mut self, strategy: CreationStrategy) -> LockFile {
        Arc::make_mut(&mut self.inner).strategy = strategy;
        self
    }

    /// The path as given (what semats' `getPath()` returns).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(super) fn stale_context(&self) -> StaleContext<'static> {
        StaleContext {
            stale_timeout: self.options.stale_timeout,
            pending_write_grace: self.options.pending_write_grace,
            our_host: host_identity(),
            now_unix_secs: now_unix_secs(),
            foreign_start_check: self.options.foreign_start_check,
        }
    }

    /// What is on disk now. Unreadable files are `Unparseable` (aged by their mtime).
    pub fn observe(&self) -> Observation {
        self.observe_with_id().0
    }

    pub(super) fn observe_with_id(&self) -> (Observation, Option<FileId>) {
        let file = match sys::open_existing(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (Observation::Missing, None),
            Err(_) => {
                return match std::fs::symlink_metadata(&self.path) {
                    Ok(meta) if meta.file_type().is_symlink() => (Observation::Symlink, None),
                    Ok(meta) => (
                        Observation::Unparseable {
                            age: age_of(&meta),
                            error: ParseError::MissingPid,
                        },
                        Some(sys::file_id(&meta)),
                    ),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => (Observation::Missing, None),
                    Err(_) => (
                        Observation::Unparseable {
                            age: Duration::ZERO,
                            error: ParseError::MissingPid,
                        },
                        None,
                    ),
                }
            }
        };
        let Ok(meta) = file.metadata() else {
            return (
                Observation::Unparseable {
                    age: Duration::ZERO,
                    error: ParseError::MissingPid,
                },
                None,
            );
        };
        let bytes = if meta.is_file() {
            sys::read_capped(&file).ok().flatten()
        } else {
            None
        };
        (
            observation_from(bytes.as_deref(), &meta),
            Some(sys::file_id(&meta)),
        )
    }

    /// semats' `status()` (see [`LockStatus`]). A shared lock's base (see
    /// [`SharedLock`](super::SharedLock)) is judged by its readers: held while one is live, and
    /// reclaimable at once (`HolderDead`) when all died.
    pub fn status(&self) -> LockStatus {
        let observation = self.observe();
        let judgement = self.judge_with_presence(&observation);
        let info = observation.info().cloned();
        let is_owned_by_current_process = info
            .as_ref()
            .is_some_and(|i| self.is_mine(i, current_pid()));
        let ctx = self.stale_context();
        let reclaim = if self.is_shared_base(&observation) {
            Some(Reclaim {
                rule: ReclaimRule::HolderDead,
                at_unix_secs: judgement.is_stale().then_some(ctx.now_unix_secs),
            })
        } else {
            reclaim(&observation, judgement, &ctx)
        };
        LockStatus {
            locked: !matches!(observation, Observation::Missing),
            info,
            is_stale: judgement.is_stale(),
            is_owned_by_current_process,
            reclaim,
            file_system: sys::file_system(&self.path, self.fs),
        }
    }

    /// Whether `observation` (read from this path) is a shared lock's base: a file without our
    /// identity keys whose content has the `mode=shared` line (read again: the observation
    /// keeps only what the mutex's format says).
    pub(super) fn is_shared_base(&self, observation: &Observation) -> bool {
        observation
            .info()
            .is_some_and(|info| self.is_shared_base_info(info))
    }

    /// [`Self::is_shared_base`] of a file whose parsed `info` was read from this path.
    pub(super) fn is_shared_base_info(&self, info: &LockInfo) -> bool {
        if info.host.is_some() || info.token.is_some() {
            return false;
        }
        sys::open_existing(&self.path)
            .ok()
            .and_then(|f| sys::read_capped(&f).ok().flatten())
            .is_some_and(|b| super::shared::bytes_are_shared_base(&b))
    }

    /// Whether the lock `info` (read from this path) belongs to the process `pid` (this process:
    /// [`current_pid`]; or one a lock was recorded for, the CLI's `--pid`): the token this process
    /// holds, or this host identity with that pid; the pid alone only for files without identity
    /// (see `owner.rs`). The one ownership rule of the package.
    pub fn is_mine(&self, info: &LockInfo, pid: i64) -> bool {
        owns(info, &Claimant::of(pid), |token| holds(&self.key, token))
    }

    /// The judgement of `observation`, where a stale verdict is overruled by a holder's presence
    /// mark still held on the file: a holder's descriptor still open (e.g. inherited by the
    /// command of `run` after its wrapper died) keeps the lock held, whatever the file says.
    pub(super) fn judge_with_presence(&self, observation: &Observation) -> StaleJudgement {
        if self.is_shared_base(observation) {
            return super::shared::judge_shared_base(self);
        }
        let judgement = judge(observation, &self.stale_context(), &OsProbe);
        if judgement.is_stale()
            && sys::open_existing(&self.path)
                .is_ok_and(|f| sys::presence(&f) == sys::Presence::Holder)
        {
            return StaleJudgement::Held(HeldBecause::HolderPresent);
        }
        judgement
    }

    pub(super) fn already_locked_from_disk(&self) -> LockError {
        LockError::AlreadyLocked {
            holder: self.holder_on_disk(),
        }
    }

    /// The holder facts of a refusal from the file content it was judged on (`None`: unknown).
    pub(super) fn holder_of(&self, info: Option<&LockInfo>) -> Box<Holder> {
        Box::new(match info {
            None => Holder::default(),
            Some(i) => Holder {
                pid: Some(i.pid),
                since: Some(i.timestamp),
                tag: i.tag.clone(),
                is_current_process: Some(self.is_mine(i, current_pid())),
            },
        })
    }

    /// The holder facts read now, where the refusal was not made on a read of the file (the
    /// in-process line, a wait for the head of the cross-process line).
    pub(super) fn holder_on_disk(&self) -> Box<Holder> {
        self.holder_of(self.observe().info())
    }

    /// `Timeout` with the holder facts read now.
    pub(super) fn timed_out(&self, timeout: Option<Duration>) -> LockError {
        self.timed_out_with(timeout, self.holder_on_disk())
    }

    /// `Timeout` with the holder the last refusal was judged on.
    pub(super) fn timed_out_with(
        &self,
        timeout: Option<Duration>,
        holder: Box<Holder>,
    ) -> LockError {
        LockError::Timeout {
            timeout_ms: timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            holder,
        }
    }
}

//! `LockFile` (one lock path plus options) and `HeldLock` (a lock this process holds).

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use std::future::Future;
use std::task::{Context, Poll, Waker};

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::LockError;
use super::format::{
    parse_lock_info, read_lock_bytes_lossy, sanitize_tag, LockInfo, ParseError, MAX_LOCK_FILE_BYTES,
};
use super::paths::canonical_key;
use super::process::{
    current_pid, host_identity, now_unix_secs, own_start_ticks, process_start_ticks,
};
use super::queue::{self, Ticket, STARVING_AFTER};
use super::stale::{judge, HeldBecause, Observation, OsProbe, StaleContext, StaleJudgement};
use super::sys::{self, CreationStrategy, ExclusiveLock, FileId, FileSig, FsKind};
use super::watch;

/// How many create → examine → break rounds one attempt makes before reporting `AlreadyLocked`.
const MAX_ROUNDS: usize = 16;

/// Our leftover temp files older than this are removed by `clean_stale`.
const TEMP_FILE_MAX_AGE: Duration = Duration::from_secs(60);

/// Smallest heartbeat period we run (a zero period would spin).
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Largest heartbeat period we run (longer ones would overflow timer arithmetic).
const MAX_HEARTBEAT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Smallest polling interval while waiting (zero would spin).
const MIN_RETRY: Duration = Duration::from_millis(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Options of one lock path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    /// `None` = never break any lock (semats `null`). Default 3600 s.
    pub stale_timeout: Option<Duration>,
    /// Polling fallback while waiting (also when stale judgements are re-made). Default 100 ms.
    pub retry_interval: Duration,
    /// fsync the file before linking it into place, and the directory after. Default true.
    pub fsync: bool,
    /// Period of the held lock's timestamp refresh; `None` = off. Default
    /// [`LockOptions::default_heartbeat`] of the stale timeout.
    pub heartbeat: Option<Duration>,
    /// Tag limit in UTF-16 code units (semats). Default `Some(10000)`.
    pub max_tag_length: Option<usize>,
    /// An unparseable or empty file younger than this is never broken (it may be being
    /// written). Default 2 s.
    pub pending_write_grace: Duration,
    /// Foreign files (no `host=`): a running pid whose process started more than 2 s after the
    /// lock's timestamp is not its holder (pid reused) and counts as not running. Default false:
    /// semats' liveness rule exactly (plus `EPERM` = running). Off by default because the
    /// comparison mixes the wall clock of the lock with boot-relative start times: a clock step
    /// (NTP at boot) can make a live holder look younger than its own lock and get it evicted.
    pub foreign_start_check: bool,
    /// `release_as_process(false)` deletes an unparseable file even while it is younger than
    /// `pending_write_grace`, as semats does (default true: an explicit release is the user's
    /// decision). `false` refuses it with `PermissionDenied { holder_pid: None }`, since a young
    /// unparseable file may be a lock being written.
    pub release_young_unparseable: bool,
}

impl LockOptions {
    /// `Some(min(10 s, stale_timeout / 4))`, at least 100 ms (10 s when there is no stale
    /// timeout). Use it when you change `stale_timeout` and want the matching default.
    pub fn default_heartbeat(stale_timeout: Option<Duration>) -> Option<Duration> {
        let ten = Duration::from_secs(10);
        let period = match stale_timeout {
            Some(t) => ten.min(t / 4),
            None => ten,
        };
        Some(period.max(Duration::from_millis(100)))
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        let stale_timeout = Some(Duration::from_secs(3600));
        LockOptions {
            stale_timeout,
            retry_interval: Duration::from_millis(100),
            fsync: true,
            heartbeat: LockOptions::default_heartbeat(stale_timeout),
            max_tag_length: Some(10_000),
            pending_write_grace: Duration::from_secs(2),
            foreign_start_check: false,
            release_young_unparseable: true,
        }
    }
}

/// What to record in a new lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireRequest {
    /// The tag (sanitised and cut to `max_tag_length` before writing). `Some("")` writes `tag=`.
    pub tag: Option<String>,
    /// Record another owner pid (CLI `--pid`); default this process.
    pub owner_pid: Option<u32>,
}

/// semats' `status()` shape, with `locked` meaning "a file exists" (semats reports parse
/// success there) and `is_stale` being our full judgement (semats: age only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// A file exists at the path (parseable or not).
    pub locked: bool,
    /// The parsed content, if it parses.
    pub info: Option<LockInfo>,
    /// The engine would break this lock now.
    pub is_stale: bool,
    /// The file names this process's pid, or carries the token of a lock this process holds.
    pub is_owned_by_current_process: bool,
}

// ---------------------------------------------------------------------------------------------
// In-process FIFO slots and the registry of held locks.

static SLOTS: LazyLock<Mutex<HashMap<PathBuf, Weak<Semaphore>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The one-permit FIFO semaphore of a canonical lock path (shared by every `LockFile` of it).
fn slot_for(key: &Path) -> Arc<Semaphore> {
    let mut map = lock(&SLOTS);
    if let Some(sem) = map.get(key).and_then(Weak::upgrade) {
        return sem;
    }
    if map.len() >= 64 {
        map.retain(|_, w| w.strong_count() > 0);
    }
    let sem = Arc::new(Semaphore::new(1));
    map.insert(key.to_path_buf(), Arc::downgrade(&sem));
    sem
}

/// Hasher of the registry's keys: ids are distinct counters, so a multiply spreads them well
/// enough (no SipHash per acquisition).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Registry = HashMap<u64, HeldLock, BuildHasherDefault<IdHasher>>;

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Every lock this process holds (e.g. for an exit hook).
pub fn held_locks() -> Vec<HeldLock> {
    lock(&REGISTRY).values().cloned().collect()
}

/// The held lock with this [`HeldLock::id`], while it is held (released or lost locks leave
/// the registry).
pub fn held_lock_by_id(id: u64) -> Option<HeldLock> {
    lock(&REGISTRY).get(&id).cloned()
}

/// The first lock this process holds on the canonical path `key`.
fn held_on_key(key: &Path) -> Option<HeldLock> {
    lock(&REGISTRY)
        .values()
        .find(|h| h.inner.file.key.as_os_str() == key.as_os_str())
        .cloned()
}

/// How a held lock stopped being held, as told to its owner's [`set_loss_hook`] callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldEnd<'a> {
    /// Found lost (file removed, replaced or overwritten), with the reason.
    Lost(&'a str),
    /// Released by path ([`LockFile::release_as`]), not through its own handle: the handle's
    /// owner learns that it no longer holds it.
    ReleasedByPath,
}

/// An owner's loss callback: `(lock id, how it ended)`.
pub type LossCallback = dyn Fn(u64, HeldEnd<'_>) + Send + Sync;

type LossHook = Arc<LossCallback>;

/// One callback per owner ([`HeldLock::set_owner`]): in a process with several JS threads, each
/// thread's locks are reported to that thread only.
static LOSS_HOOKS: LazyLock<Mutex<HashMap<u64, LossHook>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Set the callback told `(id, how)` whenever a lock of `owner` is found lost (after its
/// `lost_reason` is set and its `finished`/`lost` tokens are cancelled) or released by path.
/// One hook for all of an owner's locks, instead of a task per lock; `None` removes it.
pub fn set_loss_hook(owner: u64, hook: Option<Box<LossCallback>>) {
    let mut hooks = lock(&LOSS_HOOKS);
    match hook {
        Some(h) => {
            hooks.insert(owner, Arc::from(h));
        }
        None => {
            hooks.remove(&owner);
        }
    }
}

fn notify_owner(owner: u64, id: u64, how: HeldEnd<'_>) {
    if owner == NO_OWNER {
        return;
    }
    let hook = lock(&LOSS_HOOKS).get(&owner).cloned();
    if let Some(hook) = hook {
        hook(id, how);
    }
}

/// The owner of a lock no caller claimed ([`HeldLock::set_owner`] never called).
pub const NO_OWNER: u64 = 0;

/// Release every lock this process holds (synchronous; for the exit of the process). Errors
/// are ignored: at exit there is nobody to report them to.
pub fn release_all_held() {
    release_held_where(|_| true);
}

/// Release every lock of `owner` ([`HeldLock::set_owner`]; e.g. a JS thread that exits while
/// the process goes on). Other owners' locks are left alone.
pub fn release_all_held_by(owner: u64) {
    release_held_where(|h| h.owner() == owner);
}

fn release_held_where(select: impl Fn(&HeldLock) -> bool) {
    // Locks recorded for another owner (`AcquireRequest::owner_pid`, the CLI's `--pid`) belong to
    // that process and outlive this one: its owner releases them.
    let me = current_pid();
    let ours: Vec<HeldLock> = lock(&REGISTRY)
        .values()
        .filter(|h| h.inner.info.pid == me && select(h))
        .cloned()
        .collect();
    for held in ours {
        let _ = held.release();
    }
}

// ---------------------------------------------------------------------------------------------
// LockFile

/// One lock path with its options. Cheap to clone (one shared allocation).
#[derive(Debug, Clone)]
pub struct LockFile {
    inner: Arc<FileInner>,
}

#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct FileInner {
    path: PathBuf,
    /// `path` converted once for the system calls.
    os_path: sys::OsPath,
    key: PathBuf,
    options: LockOptions,
    strategy: CreationStrategy,
    extra_keys: bool,
    /// The in-process FIFO of the canonical path (shared by every `LockFile` of it).
    slot: Arc<Semaphore>,
    /// The directory's file system: on tmpfs `fsync` is instant, so async attempts sync inline
    /// instead of hopping to the blocking pool; on a local disk without `fsync` the calls are
    /// short enough to run on the JS thread (see [`LockFile::acquire_now`]).
    fs: FsKind,
}

impl std::ops::Deref for LockFile {
    type Target = FileInner;
    fn deref(&self) -> &FileInner {
        &self.inner
    }
}

/// What [`LockFile::acquire_now`] decided.
pub enum AcquireNow {
    /// Won, or failed for good.
    Done(Result<HeldLock, LockError>),
    /// Not decided on this thread: pass this to [`LockFile::acquire_in_order_tried`].
    Wait(Tried),
}

/// An attempt made by [`LockFile::acquire_now`], with the place it took in the cross-process
/// line (if any), handed to the wait so the place is not lost in between.
pub struct Tried {
    /// The attempt was made (and found the lock busy).
    attempted: bool,
    /// Declared before `permit`: dropped first, so a ticket is never dropped without the slot
    /// (two tickets of one process would share the queue's one `want` flag).
    ticket: Option<Ticket>,
    /// The in-process slot taken by the attempt, kept so that no other waiter of this process
    /// (another thread, a worker_thread) can take it between the attempt and the wait.
    permit: Option<OwnedSemaphorePermit>,
}

impl Tried {
    fn nothing() -> Tried {
        Tried {
            attempted: false,
            ticket: None,
            permit: None,
        }
    }
}

/// A waiter's lock file, written and flocked but not linked yet (see
/// [`LockFile::attempt_prepared`]).
struct Prepared {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    file: File,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    info: LockInfo,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    content: Vec<u8>,
}

/// A busy attempt: the holder as read (if it parses) and the signature of the file judged
/// held, so a waiter need not judge the same file again on every wake-up.
struct Busy {
    holder: Option<LockInfo>,
    sig: Option<FileSig>,
}

enum AttemptError {
    Busy(Box<Busy>),
    Failed(LockError),
}

impl AttemptError {
    fn into_error(self) -> LockError {
        match self {
            AttemptError::Busy(b) => LockError::AlreadyLocked {
                holder_pid: b.holder.as_ref().map(|i| i.pid),
                locked_since: b.holder.as_ref().map(|i| i.timestamp),
            },
            AttemptError::Failed(e) => e,
        }
    }
}

/// What one examination of an existing lock file found.
enum Examined {
    /// No file (any more): try creating again.
    Gone,
    /// Held; the parsed holder if the file parses, and the file's signature if known.
    Held(Option<LockInfo>, Option<FileSig>),
    /// It was stale and we removed it.
    Broken,
    /// It changed under us (replaced or rewritten): look again.
    Changed,
    /// The path's last component is a symbolic link: never followed, never removed.
    Symlink,
}

fn age_of(meta: &Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO)
}

fn observation_from(bytes: Option<&[u8]>, meta: &Metadata) -> Observation {
    let age = age_of(meta);
    let Some(bytes) = bytes else {
        return Observation::Unparseable {
            age,
            error: ParseError::MissingPid,
        };
    };
    match parse_lock_info(&read_lock_bytes_lossy(bytes)) {
        Ok(info) => Observation::Parsed { info, age },
        Err(error) => Observation::Unparseable { age, error },
    }
}

fn timeout_error(timeout: Option<Duration>) -> LockError {
    LockError::Timeout {
        timeout_ms: timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl LockFile {
    /// A lock at `path` (already validated: see `validate_lock_path` / `validate_semats_path`).
    pub fn new(path: PathBuf, options: LockOptions) -> LockFile {
        let key = canonical_key(&path);
        let slot = slot_for(&key);
        let fs = sys::dir_fs_kind(&path);
        LockFile {
            inner: Arc::new(FileInner {
                fs,
                os_path: sys::OsPath::new(&path),
                path,
                key,
                options,
                strategy: CreationStrategy::Auto,
                extra_keys: true,
                slot,
            }),
        }
    }

    fn os_path(&self) -> &sys::OsPath {
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

    fn stale_context(&self) -> StaleContext<'static> {
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

    fn observe_with_id(&self) -> (Observation, Option<FileId>) {
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

    /// semats' `status()` (see [`LockStatus`]).
    pub fn status(&self) -> LockStatus {
        let observation = self.observe();
        let judgement = self.judge_with_presence(&observation);
        let info = observation.info().cloned();
        let is_owned_by_current_process = match &info {
            None => false,
            Some(i) => {
                i.pid == current_pid()
                    || held_locks().iter().any(|h| {
                        h.inner.file.key == self.key && i.token.as_deref() == Some(h.inner.token())
                    })
            }
        };
        LockStatus {
            locked: !matches!(observation, Observation::Missing),
            info,
            is_stale: judgement.is_stale(),
            is_owned_by_current_process,
        }
    }

    /// The judgement of `observation`, where a stale verdict is overruled by a holder's presence
    /// mark still held on the file: a holder's descriptor still open (e.g. inherited by the
    /// command of `run` after its wrapper died) keeps the lock held, whatever the file says.
    fn judge_with_presence(&self, observation: &Observation) -> StaleJudgement {
        let judgement = judge(observation, &self.stale_context(), &OsProbe);
        if judgement.is_stale()
            && sys::open_existing(&self.path)
                .is_ok_and(|f| sys::presence(&f) == sys::Presence::Holder)
        {
            return StaleJudgement::Held(HeldBecause::HolderPresent);
        }
        judgement
    }

    fn already_locked_from_disk(&self) -> LockError {
        let info = self.observe().info().cloned();
        LockError::AlreadyLocked {
            holder_pid: info.as_ref().map(|i| i.pid),
            locked_since: info.as_ref().map(|i| i.timestamp),
        }
    }

    /// Acquire without waiting. Busy in-process queue or a held file → `AlreadyLocked` with the
    /// holder read from the file. Stale locks are broken safely first.
    pub fn try_acquire(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        let permit = match self.slot.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => return Err(self.already_locked_from_disk()),
        };
        self.attempt(req, permit).map_err(|(e, _)| e)
    }

    /// [`LockFile::try_acquire`] from async code: one attempt, never waiting, with the file work
    /// off the async threads when `fsync` is on. Busy → `AlreadyLocked` with the holder read
    /// from the file (unlike `acquire` with a zero timeout, which reports `Timeout` as semats'
    /// `acquire({timeout: 0})` does). Needs a tokio runtime.
    pub async fn try_acquire_async(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        let permit = match self.slot.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => return Err(self.already_locked_from_disk()),
        };
        let held = self
            .attempt_async(req, false, &mut None)
            .await
            .map_err(AttemptError::into_error)?;
        held.adopt_permit(permit);
        Ok(held)
    }

    /// One attempt that bypasses the in-process queue, as a separate process would. Tests use
    /// it to race threads on the file itself.
    #[doc(hidden)]
    pub fn try_acquire_bypassing_queue(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        self.attempt_unslotted(req, false, self.options.fsync)
            .map_err(AttemptError::into_error)
    }

    /// Wait for the lock: in-process FIFO first, then attempts woken by file-system events on
    /// the lock's name, by `retry_interval` and ended by the deadline (`Timeout`; `Some(0)` =
    /// exactly one attempt) or `cancel` (`Aborted`). A failed or cancelled acquire leaves no file,
    /// no temp file and no queue slot behind. Must run inside a tokio runtime (time enabled).
    ///
    /// While waiting, every wake-up first `stat`s the path: a file with the same identity,
    /// mtime and size as the one already judged held (and no close event on the name since)
    /// sends the waiter straight back to sleep, without building a lock file or probing the
    /// holder again. The `retry_interval` poll always judges again, so stale expiry still
    /// happens. A lock file is built only when the path looks free or the holder was broken.
    pub async fn acquire(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<HeldLock, LockError> {
        self.acquire_in_order(req.clone(), timeout, cancel).await
    }

    /// Whether one attempt is short enough for a thread that must not block (the JS thread): a
    /// memory file system, or a local one with `fsync` off (no `fsync` of a disk, no network
    /// file system, where every call may wait).
    pub fn attempts_are_short(&self) -> bool {
        match self.fs {
            FsKind::Memory => true,
            FsKind::Local => !self.options.fsync,
            FsKind::Remote => false,
        }
    }

    /// The uncontended fast path of `acquire`, on the calling thread, for callers that must not
    /// block (the JS thread): one attempt, made only when it is short and certain to be fair.
    /// `None` = not decided here (attempts are not short here, see
    /// [`LockFile::attempts_are_short`]; the lock is taken or queued for in this process; or
    /// the path is busy): call [`LockFile::acquire_in_order_tried`] to wait. `Some` = won, or
    /// failed for good.
    pub fn acquire_now(&self, req: &AcquireRequest) -> AcquireNow {
        if !self.attempts_are_short() {
            return AcquireNow::Wait(Tried::nothing());
        }
        let Ok(permit) = self.slot.clone().try_acquire_owned() else {
            return AcquireNow::Wait(Tried::nothing());
        };
        // Waiting processes go first: the place taken in their line is handed on to the wait.
        let ticket = queue::existing(&self.key).map(|q| q.join());
        if ticket.as_ref().is_some_and(|t| !t.is_head()) {
            return AcquireNow::Wait(Tried {
                attempted: false,
                ticket,
                permit: Some(permit),
            });
        }
        match self.attempt_prepared(req, false, self.options.fsync, &mut None) {
            Ok(held) => {
                held.adopt_permit(permit);
                AcquireNow::Done(Ok(held))
            }
            Err(AttemptError::Busy(_)) => AcquireNow::Wait(Tried {
                attempted: true,
                ticket,
                permit: Some(permit),
            }),
            Err(AttemptError::Failed(e)) => AcquireNow::Done(Err(e)),
        }
    }

    /// [`LockFile::acquire`] that takes its place in the in-process FIFO queue NOW, on the
    /// calling thread (no file I/O happens here), instead of when the returned future is first
    /// polled: callers that spawn the future on a multi-threaded runtime keep their call order.
    pub fn acquire_in_order(
        &self,
        req: AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<HeldLock, LockError>> + Send + 'static {
        self.acquire_in_order_tried(req, timeout, cancel, None)
    }

    /// [`LockFile::acquire_in_order`] after [`LockFile::acquire_now`] said `Wait(tried)`: the
    /// first attempt, made a moment ago, is not repeated unless a slot had to be waited for,
    /// and the place it took in the cross-process line is kept.
    pub fn acquire_in_order_tried(
        &self,
        req: AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        tried: Option<Tried>,
    ) -> impl Future<Output = Result<HeldLock, LockError>> + Send + 'static {
        let this = self.clone();
        let mut queued = Box::pin(self.slot.clone().acquire_owned());
        let mut tried = tried;
        let kept = tried.as_mut().and_then(|t| t.permit.take());
        let first = if let Some(permit) = kept {
            Poll::Ready(Ok(permit)) // the slot acquire_now took: nobody went first
        } else if cancel.is_cancelled() {
            Poll::Pending
        } else {
            // A free permit is taken, or this waiter is enqueued (the real waker replaces the
            // no-op one when the future is polled again).
            queued
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
        };
        async move {
            this.acquire_queued(&req, timeout, cancel, queued, first, tried)
                .await
        }
    }

    async fn acquire_queued<Q>(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        mut queued: Q,
        first: Poll<Result<OwnedSemaphorePermit, AcquireError>>,
        tried: Option<Tried>,
    ) -> Result<HeldLock, LockError>
    where
        Q: Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Unpin,
    {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let start = tokio::time::Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let passed = |deadline: Option<tokio::time::Instant>| {
            deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
        };
        let queue_closed = || {
            LockError::io(
                "Failed to create lock",
                io::Error::other("in-process queue closed"),
            )
        };
        // `tried` counts only if the slot was free at once (no other waiter went first since).
        let (tried, tried_ticket) = match tried {
            Some(t) if matches!(first, Poll::Ready(Ok(_))) => (t.attempted, t.ticket),
            _ => (false, None),
        };
        let permit = match first {
            Poll::Ready(Ok(p)) => p,
            Poll::Ready(Err(_)) => return Err(queue_closed()),
            Poll::Pending => {
                if passed(deadline) {
                    return Err(timeout_error(timeout));
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(LockError::Aborted),
                    p = &mut queued => match p {
                        Ok(p) => p,
                        Err(_) => return Err(queue_closed()),
                    },
                    _ = sleep_until_opt(deadline) => return Err(timeout_error(timeout)),
                }
            }
        };
        drop(queued);

        // The cross-process queue, if this lock ever had waiters: the first attempt is made only
        // at the head of it (behind waiting processes, not ahead of them).
        let mut ticket = match tried_ticket {
            Some(t) => Some(t),
            None => queue::existing(&self.key).map(|q| q.join()),
        };

        // First attempt without registering for events: the uncontended fast path. A file
        // prepared for it and not linked is kept for the next attempts.
        let mut prepared = None;
        // A deadline that has passed still gets its one attempt (`Some(0)` = exactly one), even
        // behind the line: the head may be stopped with the lock free.
        if !tried && (passed(deadline) || ticket.as_ref().is_none_or(Ticket::is_head)) {
            match self.attempt_async(req, false, &mut prepared).await {
                Ok(held) => {
                    held.adopt_permit(permit);
                    return Ok(held);
                }
                Err(AttemptError::Busy(_)) => {}
                Err(AttemptError::Failed(e)) => return Err(e),
            }
        }
        if passed(deadline) {
            return Err(timeout_error(timeout));
        }
        if ticket.is_none() {
            ticket = queue::create(&self.key).map(|q| q.join());
        }
        // After STARVING_AFTER this waiter goes strictly first (see `queue`).
        let starve_at = start + STARVING_AFTER;
        if let Some(ticket) = &ticket {
            let polled = self
                .wait_for_head(
                    req,
                    ticket,
                    (deadline, timeout),
                    starve_at,
                    &cancel,
                    &mut prepared,
                )
                .await?;
            if let Some(held) = polled {
                held.adopt_permit(permit);
                return Ok(held);
            }
        }
        let starving = async {
            match &ticket {
                Some(t) => t.starving_from(starve_at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(starving);
        let guard = watch::watch(&self.key);
        // The file last judged held, with the close generation seen before judging it.
        let mut judged: Option<(FileSig, u64)> = None;
        loop {
            // Register for events BEFORE looking, so a release in between is not missed.
            let notified = guard.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let close_gen = guard.close_generation();
            let seen = sys::stat_sig(&self.path);
            let unchanged = match (&seen, judged) {
                (Ok(Some(sig)), Some((held_sig, gen))) => *sig == held_sig && gen == close_gen,
                _ => false,
            };
            if !unchanged {
                let look_first = !matches!(seen, Ok(None));
                match self.attempt_async(req, look_first, &mut prepared).await {
                    Ok(held) => {
                        held.adopt_permit(permit);
                        return Ok(held);
                    }
                    Err(AttemptError::Busy(b)) => judged = b.sig.map(|s| (s, close_gen)),
                    Err(AttemptError::Failed(e)) => return Err(e),
                }
            }
            if passed(deadline) {
                return Err(timeout_error(timeout));
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut notified => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {
                    judged = None; // the poll judges again (stale expiry, a dead holder)
                }
                _ = &mut starving => {} // never completes: it only sets the mark
                _ = sleep_until_opt(deadline) => return Err(timeout_error(timeout)),
            }
        }
    }

    /// Wait in the cross-process queue until this process is the head (`Ok(None)`), polling the
    /// lock file every `retry_interval` meanwhile: a lock found free (or stale) by a poll is
    /// taken at once (`Ok(Some)`), so a head that stopped running cannot block the line.
    async fn wait_for_head(
        &self,
        req: &AcquireRequest,
        ticket: &Ticket,
        (deadline, timeout): (Option<tokio::time::Instant>, Option<Duration>),
        starve_at: tokio::time::Instant,
        cancel: &CancellationToken,
        prepared: &mut Option<Prepared>,
    ) -> Result<Option<HeldLock>, LockError> {
        let starving = ticket.starving_from(starve_at);
        tokio::pin!(starving);
        loop {
            let changed = ticket.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ticket.is_head() {
                return Ok(None);
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut changed => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {
                    let look_first = !matches!(sys::stat_sig(&self.path), Ok(None));
                    match self.attempt_async(req, look_first, prepared).await {
                        Ok(held) => return Ok(Some(held)),
                        Err(AttemptError::Busy(_)) => {}
                        Err(AttemptError::Failed(e)) => return Err(e),
                    }
                }
                _ = &mut starving => {} // never completes: it only sets the mark
                // One last look before giving up: with a timeout below `retry_interval` a
                // waiter behind a stopped head would otherwise never look at all.
                _ = sleep_until_opt(deadline) => {
                    return match self.attempt_async(req, true, prepared).await {
                        Ok(held) => Ok(Some(held)),
                        Err(AttemptError::Busy(_)) => Err(timeout_error(timeout)),
                        Err(AttemptError::Failed(e)) => Err(e),
                    };
                }
            }
        }
    }

    /// One attempt from async code, on the calling (tokio) thread: looking, building and
    /// linking are short non-blocking calls; only the winner's `fsync`s (when on, and not on a
    /// memory file system where they return at once) go to the blocking pool. If the calling future is dropped while they run, the lock obtained is
    /// released at once (nothing is left behind).
    async fn attempt_async(
        &self,
        req: &AcquireRequest,
        look_first: bool,
        prepared: &mut Option<Prepared>,
    ) -> Result<HeldLock, AttemptError> {
        if !self.options.fsync || self.fs == FsKind::Memory {
            // Nothing to sync, or syncs that return at once (tmpfs): all inline.
            return self.attempt_prepared(req, look_first, self.options.fsync, prepared);
        }
        let held = self.attempt_prepared(req, look_first, false, prepared)?;
        let shared = Arc::new(Mutex::new(Handoff::default()));
        let abandon = AbandonOnDrop(shared.clone());
        let worker_shared = shared.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let result = held.sync_durable().map(|()| held.clone());
            let mut h = lock(&worker_shared);
            if h.abandoned {
                if let Ok(held) = result {
                    let _ = held.release();
                }
            } else {
                h.result = Some(result);
            }
        })
        .await;
        let result = lock(&shared).result.take();
        drop(abandon);
        match (joined, result) {
            (_, Some(r)) => r.map_err(AttemptError::Failed),
            (Err(e), None) => Err(AttemptError::Failed(LockError::io(
                "Failed to create lock",
                io::Error::other(e),
            ))),
            (Ok(()), None) => Err(AttemptError::Failed(LockError::io(
                "Failed to create lock",
                io::Error::other("attempt produced no result"),
            ))),
        }
    }

    /// One attempt holding the in-process slot `permit`; on failure the permit is handed back.
    fn attempt(
        &self,
        req: &AcquireRequest,
        permit: OwnedSemaphorePermit,
    ) -> Result<HeldLock, (LockError, OwnedSemaphorePermit)> {
        match self.attempt_unslotted(req, false, self.options.fsync) {
            Ok(held) => {
                held.adopt_permit(permit);
                Ok(held)
            }
            Err(e) => Err((e.into_error(), permit)),
        }
    }

    /// Create the file (breaking a stale one safely), without touching the in-process slot.
    /// `look_first`: examine the existing file before building one (a waiter that saw a file
    /// there). `fsync`: sync the file and directory after winning (else the caller does, with
    /// [`HeldLock::sync_durable`]).
    fn attempt_unslotted(
        &self,
        req: &AcquireRequest,
        look_first: bool,
        fsync: bool,
    ) -> Result<HeldLock, AttemptError> {
        self.attempt_prepared(req, look_first, fsync, &mut None)
    }

    /// [`LockFile::attempt_unslotted`] that keeps its prepared O_TMPFILE file (content written,
    /// flock taken) in `prepared` when the link loses, so the next attempt of the same waiter
    /// is just `linkat` (the timestamp is rewritten if a second passed).
    fn attempt_prepared(
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
                match sys::create_lock_file(
                    &self.path,
                    self.os_path(),
                    &content,
                    fsync,
                    self.strategy,
                ) {
                    Ok(file) => return self.adopt_new_file(file, info, content).map_err(failed),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
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
    /// refreshed if a second passed). `None`: unnamed files are unsupported here.
    fn link_prepared(
        &self,
        req: &AcquireRequest,
        fsync: bool,
        prepared: &mut Option<Prepared>,
    ) -> Option<io::Result<HeldLock>> {
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
                        })
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        let p = prepared.as_ref()?;
        match sys::link_unnamed(&p.file, &self.path, self.os_path())? {
            Ok(()) => {}
            Err(e) => return Some(Err(e)),
        }
        let p = prepared.take()?;
        if let Err(e) = sys::unnamed_linked(&p.file, &self.path, fsync) {
            return Some(Err(e));
        }
        Some(self.adopt_new_file(p.file, p.info, p.content))
    }

    /// Refuses a tag that would make the lock file larger than readers accept
    /// ([`MAX_LOCK_FILE_BYTES`]): nobody, not even this process's release, could read it back,
    /// so the lock would stay until it went stale. Checked only for a tag that could reach it
    /// (the other keys take under 200 bytes; sanitising and cutting never lengthen a tag).
    fn oversize(&self, req: &AcquireRequest) -> Option<LockError> {
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

    /// What a new lock of `req` records, and its exact bytes.
    fn build_info(&self, req: &AcquireRequest) -> (LockInfo, Vec<u8>) {
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
            token: extra.then(|| sys::random_hex(16)),
        };
        let content = info.serialize().into_bytes();
        (info, content)
    }

    fn adopt_new_file(&self, file: File, info: LockInfo, content: Vec<u8>) -> io::Result<HeldLock> {
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
                reports_release_by_path: AtomicBool::new(false),
                file: self.inner.clone(),
                state: Mutex::new(HeldState {
                    file: Some(file),
                    file_id,
                    content,
                    timestamp: info.timestamp,
                    lost: None,
                    stop: None,
                    finished: false,
                    released: false,
                    lost_reason: None,
                    permit: None,
                    heartbeat_started: false,
                }),
                info,
            }),
        };
        lock(&REGISTRY).insert(held.inner.id, held.clone());
        Ok(held)
    }

    /// The refusal of a symlink at the lock path (see [`Examined::Symlink`]).
    fn symlink_error(&self) -> LockError {
        LockError::InvalidPath(format!(
            "Lock path is a symbolic link (refused, never followed): {}",
            self.path.display()
        ))
    }

    /// Open the existing file, judge it, and break it if stale, race-safely:
    /// 1. a holder's presence mark (an OFD write lock, which a mere reader cannot take) still
    ///    held means a live holder, whatever the content says;
    /// 2. breakers are serialised per user by a lock in our private runtime directory, and
    ///    across users by the exclusive `flock` on the file. A reader's shared `flock` makes that
    ///    fail too: it is passed over when no process holds an exclusive one (no other breaker)
    ///    and the presence probe works here (so a holder would have shown itself in 1);
    /// 3. then the path must still name the same inode (never followed) with byte-identical
    ///    content, and only then is it unlinked.
    fn examine_and_break(&self) -> Examined {
        let file = match sys::open_existing(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(e) if sys::is_symlink_refusal(&e, &self.path) => return Examined::Symlink,
            Err(_) => return Examined::Held(None, None),
        };
        let Ok(meta) = file.metadata() else {
            return Examined::Held(None, None);
        };
        let sig = Some(sys::file_sig(&meta));
        if !meta.is_file() {
            return Examined::Held(None, sig);
        }
        let id = sys::file_id(&meta);
        let Ok(bytes) = sys::read_capped(&file) else {
            return Examined::Held(None, sig);
        };
        let observation = observation_from(bytes.as_deref(), &meta);
        let holder = observation.info().cloned();
        let judgement = judge(&observation, &self.stale_context(), &OsProbe);
        if !matches!(judgement, StaleJudgement::Stale(_)) {
            return Examined::Held(holder, sig);
        }
        // Judged stale: never cache this file as held (it is re-examined on the next look).
        let presence = sys::presence(&file);
        if presence == sys::Presence::Holder {
            return Examined::Held(holder, None);
        }
        let per_user = match queue::lock_break(id) {
            queue::BreakLock::Held(guard) => Some(guard),
            queue::BreakLock::Busy => return Examined::Held(holder, None),
            queue::BreakLock::Unavailable => None,
        };
        let _exclusive = match sys::try_break_lock(&file, &self.path, id) {
            Ok(ExclusiveLock::Held(extra)) => extra,
            Ok(ExclusiveLock::Unsupported) => None,
            // Only shared flocks, no holder's mark, and breakers of this user serialised:
            // readers, who must not keep a dead holder's lock from being reclaimed.
            Ok(ExclusiveLock::Busy)
                if per_user.is_some()
                    && presence == sys::Presence::Absent
                    && !sys::breaker_present(id) =>
            {
                None
            }
            Ok(ExclusiveLock::Busy) | Err(_) => return Examined::Held(holder, None),
        };
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if sys::file_id(&now) == id => {}
            Ok(_) => return Examined::Changed,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(_) => return Examined::Held(holder, None),
        }
        match sys::read_capped(&file) {
            Ok(again) if again == bytes => {}
            _ => return Examined::Changed,
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Examined::Broken,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Examined::Gone,
            Err(_) => Examined::Held(holder, None),
        }
        // `file` (and `_exclusive`) close here, dropping the exclusive flock.
    }

    /// semats' `Semaphore.release(force)`: no file → `NotLocked`; a parsed pid other than this
    /// process's and no `force` → `PermissionDenied`; a lock this process holds through a
    /// [`HeldLock`] is released properly; otherwise the file is unlinked.
    ///
    /// Deviation from semats (documented): an unparseable file is deleted without `force` only
    /// when older than `pending_write_grace` (it may be a lock being written); a younger one
    /// gives `PermissionDenied { holder_pid: None }`.
    pub fn release_as_process(&self, force: bool) -> Result<(), LockError> {
        self.release_as(current_pid(), force)
    }

    /// [`LockFile::release_as_process`] on behalf of `owner_pid` (e.g. the CLI's `--pid`).
    pub fn release_as(&self, owner_pid: i64, force: bool) -> Result<(), LockError> {
        // A lock this process holds on this path, still ours on disk: one stat, one read, one
        // unlink (the content read through our descriptor tells the recorded pid).
        if let Some(held) = held_on_key(&self.key) {
            match held.release_if(|current| force || current.pid == owner_pid) {
                ReleaseIf::Released => {
                    held.notify_released_by_path();
                    return Ok(());
                }
                ReleaseIf::Refused(pid) => {
                    return Err(LockError::PermissionDenied {
                        holder_pid: Some(pid),
                    })
                }
                ReleaseIf::NotOurs => {}
                ReleaseIf::Failed(e) => return Err(e),
            }
        }
        for round in 0..4 {
            let (observation, id) = self.observe_with_id();
            match &observation {
                Observation::Missing => return Err(LockError::NotLocked),
                Observation::Symlink => return Err(self.symlink_error()),
                Observation::Parsed { info, .. } => {
                    if !force && info.pid != owner_pid {
                        return Err(LockError::PermissionDenied {
                            holder_pid: Some(info.pid),
                        });
                    }
                }
                Observation::Unparseable { age, .. } => {
                    if !force
                        && !self.options.release_young_unparseable
                        && *age < self.options.pending_write_grace
                    {
                        return Err(LockError::PermissionDenied { holder_pid: None });
                    }
                }
            }
            // A lock this process holds on this path: release it properly.
            for held in held_locks() {
                if held.inner.file.key == self.key && held.is_on_disk() {
                    match held.release() {
                        Ok(true) => {
                            held.notify_released_by_path();
                            return Ok(());
                        }
                        Ok(false) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            // Plain unlink, of the file we looked at (unless it keeps changing).
            let same = match (std::fs::symlink_metadata(&self.path), id) {
                (Ok(m), Some(id)) => sys::file_id(&m) == id,
                (Err(e), _) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(LockError::NotLocked)
                }
                _ => false,
            };
            if !same && round < 3 {
                continue;
            }
            return match std::fs::remove_file(&self.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LockError::NotLocked),
                Err(e) => Err(LockError::io("Failed to release lock", e)),
            };
        }
        Err(LockError::NotLocked)
    }

    /// semats' `cleanStale()` minus its flaws: removes the lock only if judged stale, through
    /// the race-safe break; removes only OUR OWN leftover temp files (`.<basename>.<16
    /// hex>.sema-tmp` older than 60 s), never other tools' files. Returns whether anything was
    /// removed.
    pub fn clean_stale(&self) -> Result<bool, LockError> {
        let mut removed = false;
        if let (Some(dir), Some(base)) = (self.path.parent(), self.path.file_name()) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if !sys::is_our_temp_name(&entry.file_name(), base) {
                        continue;
                    }
                    let Ok(meta) = entry.metadata() else { continue };
                    if meta.is_file()
                        && age_of(&meta) > TEMP_FILE_MAX_AGE
                        && std::fs::remove_file(entry.path()).is_ok()
                    {
                        removed = true;
                    }
                }
            }
        }
        for _ in 0..MAX_ROUNDS {
            match self.examine_and_break() {
                Examined::Broken => return Ok(true),
                Examined::Changed => continue,
                Examined::Symlink => return Err(self.symlink_error()),
                Examined::Gone | Examined::Held(..) => break,
            }
        }
        Ok(removed)
    }

    /// Wait until the lock is free: no file, or a file the engine judges stale (it is not
    /// broken here). With `stale_timeout: None` that is sema's `wait` (file existence only).
    /// Woken like [`LockFile::acquire`]; `Timeout` / `Aborted` as there. Needs a tokio runtime.
    pub async fn wait_until_free(
        &self,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<(), LockError> {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
        let guard = watch::watch(&self.key);
        loop {
            let notified = guard.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let observation = self.observe();
            if observation == Observation::Symlink {
                return Err(self.symlink_error());
            }
            match self.judge_with_presence(&observation) {
                StaleJudgement::Free | StaleJudgement::Stale(_) => return Ok(()),
                StaleJudgement::Held(_) => {}
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(timeout_error(timeout));
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(LockError::Aborted),
                _ = &mut notified => {}
                _ = tokio::time::sleep(self.options.retry_interval.max(MIN_RETRY)) => {}
                _ = sleep_until_opt(deadline) => return Err(timeout_error(timeout)),
            }
        }
    }
}

#[derive(Default)]
struct Handoff {
    abandoned: bool,
    result: Option<Result<HeldLock, LockError>>,
}

/// Marks a blocking attempt abandoned when its future is dropped, releasing what it got.
struct AbandonOnDrop(Arc<Mutex<Handoff>>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        let mut h = lock(&self.0);
        h.abandoned = true;
        if let Some(Ok(held)) = h.result.take() {
            let _ = held.release();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HeldLock

/// A lock this process holds. Clones share one lock. It stays held until [`HeldLock::release`],
/// [`release_all_held`] or loss: dropping every handle does NOT release it (the registry keeps
/// it, so an exit hook can still release it).
#[derive(Clone)]
pub struct HeldLock {
    inner: Arc<HeldInner>,
}

struct HeldInner {
    id: u64,
    /// Who holds it inside this process ([`HeldLock::set_owner`]), e.g. one JS thread.
    owner: AtomicU64,
    /// Its owner keeps a handle that must hear of a release by path ([`HeldLock::report_release_by_path`]).
    reports_release_by_path: AtomicBool,
    /// The lock path's shared part (path, canonical key, options).
    file: Arc<FileInner>,
    info: LockInfo,
    state: Mutex<HeldState>,
}

struct HeldState {
    /// Our descriptor, with the shared flock. `None` once finished.
    file: Option<File>,
    file_id: FileId,
    /// The exact bytes on disk now (what we wrote, as refreshed by the heartbeat).
    content: Vec<u8>,
    /// The timestamp on disk now (refreshed by the heartbeat; the rest is `info`).
    timestamp: i64,
    /// Created on demand (most holders never ask); cancelled by `finish` / `lose`.
    lost: Option<CancellationToken>,
    stop: Option<CancellationToken>,
    /// No longer held (released or lost); the descriptor is closed.
    finished: bool,
    /// `release()` (or `release_all_held`) was called.
    released: bool,
    lost_reason: Option<String>,
    permit: Option<OwnedSemaphorePermit>,
    heartbeat_started: bool,
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("path", &self.inner.file.path)
            .field("info", &self.inner.info)
            .finish_non_exhaustive()
    }
}

enum Ownership {
    Ours,
    Lost(&'static str),
    Unknown(io::Error),
}

/// Outcome of [`HeldLock::release_if`].
enum ReleaseIf {
    Released,
    /// The condition refused; the pid on disk.
    Refused(i64),
    /// Not (any more) ours on disk, or already finished: nothing was deleted.
    NotOurs,
    Failed(LockError),
}

impl HeldInner {
    fn path(&self) -> &Path {
        &self.file.path
    }

    fn token(&self) -> &str {
        self.info.token.as_deref().unwrap_or("")
    }

    /// What is on disk now.
    fn current(&self, state: &HeldState) -> LockInfo {
        LockInfo {
            timestamp: state.timestamp,
            ..self.info.clone()
        }
    }

    /// One `stat` of the path (our inode?) and one `pread` through our descriptor (our bytes?).
    fn ownership(&self, state: &HeldState) -> Ownership {
        let Some(file) = state.file.as_ref() else {
            return Ownership::Lost("lock file was removed");
        };
        match sys::stat_id(self.path(), Some(&self.file.os_path)) {
            Ok(id) if id == state.file_id => {}
            Ok(_) => return Ownership::Lost("lock file was replaced"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ownership::Lost("lock file was removed")
            }
            Err(e) => return Ownership::Unknown(e),
        }
        let bytes = match sys::content_equals(file, &state.content) {
            Ok(None) => return Ownership::Ours,
            Ok(Some(bytes)) => bytes,
            Err(e) => return Ownership::Unknown(e),
        };
        // Not byte-identical: still ours if it carries our token (e.g. a heartbeat rewrite whose
        // truncate failed). Without a token (plain format) the whole content must be ours.
        let ours = self.info.token.is_some()
            && matches!(parse_lock_info(&read_lock_bytes_lossy(&bytes)),
                Ok(info) if info.token.as_deref() == Some(self.token()));
        if ours {
            Ownership::Ours
        } else {
            Ownership::Lost("lock file was overwritten")
        }
    }

    /// Stop holding: close the descriptor, free the queue slot, leave the registry and the
    /// heartbeat list.
    fn finish(&self, state: &mut HeldState) {
        state.finished = true;
        state.file = None;
        state.permit = None;
        if let Some(t) = &state.stop {
            t.cancel();
        }
        lock(&REGISTRY).remove(&self.id);
        if state.heartbeat_started {
            heartbeat::remove(self.id);
        }
    }

    fn lose(&self, state: &mut HeldState, reason: &str) {
        state.lost_reason = Some(reason.to_string());
        self.finish(state);
        if let Some(t) = &state.lost {
            t.cancel();
        }
        notify_owner(
            self.owner.load(Ordering::Acquire),
            self.id,
            HeldEnd::Lost(reason),
        );
    }

    /// One heartbeat: verify, then refresh the timestamp in place. `false` = stop.
    fn heartbeat_tick(&self) -> bool {
        let mut state = lock(&self.state);
        if state.finished {
            return false;
        }
        match self.ownership(&state) {
            Ownership::Ours => {}
            Ownership::Lost(reason) => {
                self.lose(&mut state, reason);
                return false;
            }
            Ownership::Unknown(_) => return true,
        }
        let mut next = self.current(&state);
        next.timestamp = now_unix_secs();
        let content = next.serialize().into_bytes();
        let old_len = state.content.len();
        if let Some(file) = state.file.as_ref() {
            if sys::rewrite_in_place(file, &content, old_len).is_ok() {
                state.content = content;
                state.timestamp = next.timestamp;
            }
        }
        true
    }
}

impl HeldLock {
    /// Give the lock to `owner` (an id the caller chose, not [`NO_OWNER`]): its loss is told to
    /// that owner's [`set_loss_hook`] callback and [`release_all_held_by`] releases it. Call it
    /// before [`HeldLock::start_heartbeat_thread`], so that no loss goes unreported.
    pub fn set_owner(&self, owner: u64) {
        self.inner.owner.store(owner, Ordering::Release);
    }

    /// The owner given by [`HeldLock::set_owner`], or [`NO_OWNER`].
    pub fn owner(&self) -> u64 {
        self.inner.owner.load(Ordering::Acquire)
    }

    /// Ask for [`HeldEnd::ReleasedByPath`] reports to the owner's [`set_loss_hook`] callback: only for
    /// locks whose owner keeps a handle that must learn it (a report per release would otherwise cost
    /// every plain release by path a cross-thread call).
    pub fn report_release_by_path(&self) {
        self.inner
            .reports_release_by_path
            .store(true, Ordering::Release);
    }

    /// Tell the owner that this lock was released by path, not through its handle (if it asked).
    fn notify_released_by_path(&self) {
        if self.inner.reports_release_by_path.load(Ordering::Acquire) {
            notify_owner(self.owner(), self.inner.id, HeldEnd::ReleasedByPath);
        }
    }

    /// This lock's id in the process-wide registry ([`held_lock_by_id`]).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// What was written at acquisition (sanitised tag, our pid/timestamp/host/start/token).
    pub fn info(&self) -> LockInfo {
        self.inner.info.clone()
    }

    /// The pid and timestamp written at acquisition, and the sanitised tag, borrowed.
    pub fn info_ref(&self) -> &LockInfo {
        &self.inner.info
    }

    /// What is on disk now (the timestamp as last refreshed by the heartbeat).
    pub fn current_info(&self) -> LockInfo {
        let state = lock(&self.inner.state);
        self.inner.current(&state)
    }

    pub fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Our ownership token (empty for a lock in the plain format, which has none).
    pub fn token(&self) -> String {
        self.inner.token().to_string()
    }

    /// The descriptor of the lock file while the lock is held (close-on-exec). A child process
    /// given a copy of it (e.g. as an inherited stdio slot, as `flock(1)` does) carries the
    /// holder's presence mark and `flock` with it: while that child lives the lock stays held,
    /// even after this process died.
    /// `None` when the lock is no longer held or the system has no such handle. (A descriptor
    /// number on Unix.)
    pub fn raw_handle(&self) -> Option<i64> {
        lock(&self.inner.state)
            .file
            .as_ref()
            .and_then(sys::raw_handle)
    }

    /// Cancelled when the lock is found lost (file removed, replaced or overwritten).
    pub fn lost(&self) -> CancellationToken {
        let mut state = lock(&self.inner.state);
        let lost = state.lost_reason.is_some();
        state
            .lost
            .get_or_insert_with(|| {
                let t = CancellationToken::new();
                if lost {
                    t.cancel();
                }
                t
            })
            .clone()
    }

    /// Cancelled when the lock stops being held for any reason (released or lost); check
    /// [`HeldLock::lost_reason`] to tell which.
    pub fn finished(&self) -> CancellationToken {
        let mut state = lock(&self.inner.state);
        let finished = state.finished;
        state
            .stop
            .get_or_insert_with(|| {
                let t = CancellationToken::new();
                if finished {
                    t.cancel();
                }
                t
            })
            .clone()
    }

    /// Why the lock was lost, once it was.
    pub fn lost_reason(&self) -> Option<String> {
        lock(&self.inner.state).lost_reason.clone()
    }

    /// The path still names our file with our content (token), right now.
    pub fn is_on_disk(&self) -> bool {
        let state = lock(&self.inner.state);
        !state.finished && matches!(self.inner.ownership(&state), Ownership::Ours)
    }

    /// `release()` has been called (successfully, or on a lost lock).
    pub fn is_released(&self) -> bool {
        lock(&self.inner.state).released
    }

    /// Neither released nor lost.
    pub fn is_held(&self) -> bool {
        !lock(&self.inner.state).finished
    }

    fn adopt_permit(&self, permit: OwnedSemaphorePermit) {
        let mut state = lock(&self.inner.state);
        if !state.finished {
            state.permit = Some(permit);
        }
    }

    /// fsync our file and its directory (after a link made without them). On failure the lock
    /// is released (only if still ours) and the error returned.
    fn sync_durable(&self) -> Result<(), LockError> {
        let synced = {
            let state = lock(&self.inner.state);
            match state.file.as_ref() {
                Some(file) => file.sync_all(),
                None => Ok(()),
            }
        };
        if let Err(e) = synced {
            let _ = self.release();
            return Err(LockError::io("Failed to create lock", e));
        }
        if let Some(dir) = self.inner.path().parent() {
            sys::fsync_dir(dir);
        }
        Ok(())
    }

    /// Whether [`HeldLock::release`] is short enough for a thread that must not block (the JS
    /// thread): not on a network file system (release never syncs).
    pub fn release_is_short(&self) -> bool {
        self.inner.file.fs != FsKind::Remote
    }

    /// Release: idempotent. `Ok(true)` released now; `Ok(false)` already released or lost (then
    /// nothing is deleted). Deletes the file only if the path still names our inode and the
    /// content read through our descriptor carries our token. An error (e.g. the unlink failed)
    /// leaves the lock held, so the call can be retried.
    pub fn release(&self) -> Result<bool, LockError> {
        match self.release_if(|_| true) {
            ReleaseIf::Released => Ok(true),
            ReleaseIf::NotOurs | ReleaseIf::Refused(_) => Ok(false),
            ReleaseIf::Failed(e) => Err(e),
        }
    }

    /// The minimal release: one `stat`, one `pread`, the check, `unlink`, `close`. `allow` sees
    /// what is on disk (ours) and may refuse.
    fn release_if(&self, allow: impl FnOnce(&LockInfo) -> bool) -> ReleaseIf {
        let inner = &self.inner;
        let mut state = lock(&inner.state);
        if state.released {
            return ReleaseIf::NotOurs;
        }
        if state.finished {
            state.released = true;
            return ReleaseIf::NotOurs;
        }
        match inner.ownership(&state) {
            Ownership::Ours => {
                if !allow(&inner.info) {
                    return ReleaseIf::Refused(inner.info.pid);
                }
                match std::fs::remove_file(inner.path()) {
                    Ok(()) => {
                        state.released = true;
                        inner.finish(&mut state);
                        ReleaseIf::Released
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        state.released = true;
                        inner.lose(&mut state, "lock file was removed");
                        ReleaseIf::NotOurs
                    }
                    Err(e) => ReleaseIf::Failed(LockError::io("Failed to release lock", e)),
                }
            }
            Ownership::Lost(reason) => {
                state.released = true;
                inner.lose(&mut state, reason);
                ReleaseIf::NotOurs
            }
            Ownership::Unknown(e) => ReleaseIf::Failed(LockError::io("Failed to release lock", e)),
        }
    }

    /// Start refreshing the timestamp every `options.heartbeat` (no-op if the heartbeat is off,
    /// already started, or the lock is no longer held). One process-wide heartbeat thread walks
    /// all held locks at their periods: starting only adds an entry to its list, releasing
    /// removes it (no timer armed or cancelled per lock). The runtime handle is not needed any
    /// more; it is kept for the API.
    pub fn start_heartbeat(&self, _rt: &tokio::runtime::Handle) {
        self.start_heartbeat_thread();
    }

    /// [`HeldLock::start_heartbeat`] without a runtime.
    pub fn start_heartbeat_thread(&self) {
        let Some(period) = self.inner.file.options.heartbeat else {
            return;
        };
        let mut state = lock(&self.inner.state);
        if state.heartbeat_started || state.finished {
            return;
        }
        state.heartbeat_started = true;
        heartbeat::add(
            self.inner.id,
            period.clamp(MIN_HEARTBEAT, MAX_HEARTBEAT),
            Arc::downgrade(&self.inner),
        );
    }
}

mod heartbeat {
    //! The process-wide heartbeat: one thread, a small list of (id, due, period, lock).
    //! `add`/`remove` only edit the list under a mutex; the thread is woken (a condvar
    //! notification) only when a new entry is due before its planned wake-up. While the list is
    //! empty it wakes once a second for a while, so a new lock with the usual multi-second
    //! period costs no wake-up at all; after a minute idle it sleeps until notified.

    use super::{lock, HeldInner, PoisonError};
    use std::sync::{Condvar, LazyLock, Mutex, Weak};
    use std::time::{Duration, Instant};

    struct Entry {
        id: u64,
        due: Instant,
        period: Duration,
        held: Weak<HeldInner>,
    }

    #[derive(Default)]
    struct State {
        entries: Vec<Entry>,
        /// When the thread will look next (`None`: asleep until notified, or not started).
        planned: Option<Instant>,
        started: bool,
    }

    struct Shared {
        state: Mutex<State>,
        wake: Condvar,
    }

    static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
    });

    const IDLE_TICK: Duration = Duration::from_secs(1);
    const IDLE_STOP: Duration = Duration::from_secs(60);

    pub(super) fn add(id: u64, period: Duration, held: Weak<HeldInner>) {
        let shared = &*SHARED;
        let now = Instant::now();
        let due = now
            .checked_add(period)
            .unwrap_or(now + super::MAX_HEARTBEAT);
        let mut st = lock(&shared.state);
        st.entries.push(Entry {
            id,
            due,
            period,
            held,
        });
        if !st.started {
            st.started = true;
            let spawned = std::thread::Builder::new()
                .name("sema-heartbeat".into())
                .spawn(run);
            if spawned.is_err() {
                st.started = false; // try again with the next lock
            }
            return;
        }
        if st.planned.is_none_or(|p| due < p) {
            shared.wake.notify_one();
        }
    }

    pub(super) fn remove(id: u64) {
        let mut st = lock(&SHARED.state);
        if let Some(i) = st.entries.iter().position(|e| e.id == id) {
            st.entries.swap_remove(i);
        }
    }

    fn run() {
        let shared = &*SHARED;
        let mut due_now: Vec<(u64, Weak<HeldInner>)> = Vec::new();
        let mut idle_since: Option<Instant> = None;
        let mut st = lock(&shared.state);
        loop {
            let now = Instant::now();
            for e in st.entries.iter_mut() {
                if e.due <= now {
                    due_now.push((e.id, e.held.clone()));
                    e.due = now.checked_add(e.period).unwrap_or(e.due);
                }
            }
            if !due_now.is_empty() {
                st.planned = Some(now);
                drop(st);
                for (id, weak) in due_now.drain(..) {
                    let keep = weak.upgrade().is_some_and(|inner| inner.heartbeat_tick());
                    if !keep {
                        remove(id);
                    }
                }
                st = lock(&shared.state);
                continue;
            }
            let next = st.entries.iter().map(|e| e.due).min();
            let wait = match next {
                Some(d) => {
                    idle_since = None;
                    Some(d.saturating_duration_since(now))
                }
                None => {
                    let since = *idle_since.get_or_insert(now);
                    (now.duration_since(since) < IDLE_STOP).then_some(IDLE_TICK)
                }
            };
            st = match wait {
                Some(w) => {
                    st.planned = now.checked_add(w);
                    shared
                        .wake
                        .wait_timeout(st, w)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
                None => {
                    st.planned = None;
                    shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner)
                }
            };
        }
    }
}

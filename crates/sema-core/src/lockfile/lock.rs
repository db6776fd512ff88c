//! `LockFile` (one lock path plus options) and `HeldLock` (a lock this process holds).

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::LockError;
use super::format::{parse_lock_info, read_lock_bytes_lossy, sanitize_tag, LockInfo, ParseError};
use super::paths::canonical_key;
use super::process::{
    current_pid, host_identity, now_unix_secs, own_start_ticks, process_start_ticks,
};
use super::stale::{judge, Observation, OsProbe, StaleContext, StaleJudgement};
use super::sys::{self, CreationStrategy, ExclusiveLock, FileId};
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

static REGISTRY: LazyLock<Mutex<HashMap<u64, HeldLock>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Every lock this process holds (e.g. for an exit hook).
pub fn held_locks() -> Vec<HeldLock> {
    lock(&REGISTRY).values().cloned().collect()
}

/// Release every lock this process holds (synchronous; for a Node `'exit'` hook). Errors are
/// ignored: at exit there is nobody to report them to.
pub fn release_all_held() {
    // Locks recorded for another owner (`AcquireRequest::owner_pid`, the CLI's `--pid`) belong to
    // that process and outlive this one: its owner releases them.
    let me = current_pid();
    let ours: Vec<HeldLock> = lock(&REGISTRY)
        .values()
        .filter(|h| h.inner.info.pid == me)
        .cloned()
        .collect();
    for held in ours {
        let _ = held.release();
    }
}

// ---------------------------------------------------------------------------------------------
// LockFile

/// One lock path with its options. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LockFile {
    path: PathBuf,
    key: PathBuf,
    options: LockOptions,
    strategy: CreationStrategy,
    extra_keys: bool,
}

/// What one examination of an existing lock file found.
enum Examined {
    /// No file (any more): try creating again.
    Gone,
    /// Held; the parsed holder if the file parses.
    Held(Option<LockInfo>),
    /// It was stale and we removed it.
    Broken,
    /// It changed under us (replaced or rewritten): look again.
    Changed,
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
        LockFile {
            path,
            key,
            options,
            strategy: CreationStrategy::Auto,
            extra_keys: true,
        }
    }

    /// `false`: write only `pid=`, `timestamp=` and `tag=`, a file indistinguishable from
    /// semats' (for a semats-compatible CLI whose lock must outlive the CLI process: such a
    /// file is judged by semats' rule, stale only after `stale_timeout` with a dead pid, while
    /// our own format makes a dead holder's lock reclaimable at once). Ownership checks then
    /// compare the whole content instead of the token. Default `true`.
    pub fn with_extra_keys(mut self, extra_keys: bool) -> LockFile {
        self.extra_keys = extra_keys;
        self
    }

    /// Force a creation strategy (tests exercise the O_TMPFILE fallback with it).
    #[doc(hidden)]
    pub fn with_creation_strategy(mut self, strategy: CreationStrategy) -> LockFile {
        self.strategy = strategy;
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
                return match std::fs::metadata(&self.path) {
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
        let judgement = judge(&observation, &self.stale_context(), &OsProbe);
        let info = observation.info().cloned();
        let is_owned_by_current_process = match &info {
            None => false,
            Some(i) => {
                i.pid == current_pid()
                    || held_locks().iter().any(|h| {
                        h.inner.key == self.key
                            && i.token.as_deref() == Some(h.inner.token.as_str())
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
        let permit = match slot_for(&self.key).try_acquire_owned() {
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
        let permit = match slot_for(&self.key).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => return Err(self.already_locked_from_disk()),
        };
        let held = self.attempt_async(req).await?;
        held.adopt_permit(permit);
        Ok(held)
    }

    /// One attempt that bypasses the in-process queue, as a separate process would. Tests use
    /// it to race threads on the file itself.
    #[doc(hidden)]
    pub fn try_acquire_bypassing_queue(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        self.attempt_unslotted(req)
    }

    /// Wait for the lock: in-process FIFO first, then attempts woken by file-system events on
    /// the lock's name, by `retry_interval` and ended by the deadline (`Timeout`; `Some(0)` =
    /// exactly one attempt) or `cancel` (`Aborted`). A failed or cancelled acquire leaves no file,
    /// no temp file and no queue slot behind. Must run inside a tokio runtime (time enabled).
    pub async fn acquire(
        &self,
        req: &AcquireRequest,
        timeout: Option<Duration>,
        cancel: CancellationToken,
    ) -> Result<HeldLock, LockError> {
        if cancel.is_cancelled() {
            return Err(LockError::Aborted);
        }
        let start = tokio::time::Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let passed = |deadline: Option<tokio::time::Instant>| {
            deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
        };

        let slot = slot_for(&self.key);
        let permit = match slot.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if passed(deadline) {
                    return Err(timeout_error(timeout));
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(LockError::Aborted),
                    p = slot.acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return Err(LockError::io(
                            "Failed to create lock",
                            io::Error::other("in-process queue closed"),
                        )),
                    },
                    _ = sleep_until_opt(deadline) => return Err(timeout_error(timeout)),
                }
            }
        };

        // First attempt without registering for events: the uncontended fast path.
        match self.attempt_async(req).await {
            Ok(held) => {
                held.adopt_permit(permit);
                return Ok(held);
            }
            Err(LockError::AlreadyLocked { .. }) => {}
            Err(e) => return Err(e),
        }
        if passed(deadline) {
            return Err(timeout_error(timeout));
        }
        let guard = watch::watch(&self.key);
        loop {
            // Register for events BEFORE the attempt, so a release in between is not missed.
            let notified = guard.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.attempt_async(req).await {
                Ok(held) => {
                    held.adopt_permit(permit);
                    return Ok(held);
                }
                Err(LockError::AlreadyLocked { .. }) => {}
                Err(e) => return Err(e),
            }
            if passed(deadline) {
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

    /// One attempt from async code: inline when `fsync` is off (microseconds), on the blocking
    /// pool otherwise. If the calling future is dropped while the blocking attempt runs, a lock
    /// it obtained is released at once (nothing is left behind).
    async fn attempt_async(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        if !self.options.fsync {
            return self.attempt_unslotted(req);
        }
        let shared = Arc::new(Mutex::new(Handoff::default()));
        let abandon = AbandonOnDrop(shared.clone());
        let this = self.clone();
        let req = req.clone();
        let worker_shared = shared.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let result = this.attempt_unslotted(&req);
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
            (_, Some(r)) => r,
            (Err(e), None) => Err(LockError::io("Failed to create lock", io::Error::other(e))),
            (Ok(()), None) => Err(LockError::io(
                "Failed to create lock",
                io::Error::other("attempt produced no result"),
            )),
        }
    }

    /// One attempt holding the in-process slot `permit`; on failure the permit is handed back.
    fn attempt(
        &self,
        req: &AcquireRequest,
        permit: OwnedSemaphorePermit,
    ) -> Result<HeldLock, (LockError, OwnedSemaphorePermit)> {
        match self.attempt_unslotted(req) {
            Ok(held) => {
                held.adopt_permit(permit);
                Ok(held)
            }
            Err(e) => Err((e, permit)),
        }
    }

    /// Create the file (breaking a stale one safely), without touching the in-process slot.
    fn attempt_unslotted(&self, req: &AcquireRequest) -> Result<HeldLock, LockError> {
        let me = current_pid();
        let owner = req.owner_pid.map(i64::from).unwrap_or(me);
        let start = if owner == me {
            own_start_ticks()
        } else {
            process_start_ticks(owner)
        };
        let tag = req
            .tag
            .as_deref()
            .map(|t| sanitize_tag(t, self.options.max_tag_length));
        let token = sys::random_hex(16);
        let mut last_holder: Option<LockInfo> = None;
        for _ in 0..MAX_ROUNDS {
            let extra = self.extra_keys;
            let info = LockInfo {
                pid: owner,
                timestamp: now_unix_secs(),
                tag: tag.clone(),
                host: extra.then(|| host_identity().to_string()),
                start: if extra { start } else { None },
                token: extra.then(|| token.clone()),
            };
            let content = info.serialize();
            match sys::create_lock_file(
                &self.path,
                content.as_bytes(),
                self.options.fsync,
                self.strategy,
            ) {
                Ok(file) => return self.adopt_new_file(file, info, token, content.len()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(LockError::io("Failed to create lock", e)),
            }
            match self.examine_and_break() {
                Examined::Held(holder) => {
                    return Err(LockError::AlreadyLocked {
                        holder_pid: holder.as_ref().map(|i| i.pid),
                        locked_since: holder.as_ref().map(|i| i.timestamp),
                    })
                }
                Examined::Changed => {}
                Examined::Gone | Examined::Broken => last_holder = None,
            }
        }
        Err(LockError::AlreadyLocked {
            holder_pid: last_holder.as_ref().map(|i| i.pid),
            locked_since: last_holder.as_ref().map(|i| i.timestamp),
        })
    }

    fn adopt_new_file(
        &self,
        file: File,
        info: LockInfo,
        token: String,
        content_len: usize,
    ) -> Result<HeldLock, LockError> {
        let meta = match file.metadata().or_else(|_| std::fs::metadata(&self.path)) {
            Ok(m) => m,
            Err(e) => {
                // Cannot identify our own file: do not keep a lock we could never verify.
                let _ = std::fs::remove_file(&self.path);
                return Err(LockError::io("Failed to create lock", e));
            }
        };
        let held = HeldLock {
            inner: Arc::new(HeldInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                path: self.path.clone(),
                key: self.key.clone(),
                info: info.clone(),
                token,
                heartbeat: self.options.heartbeat,
                lost: CancellationToken::new(),
                stop: CancellationToken::new(),
                state: Mutex::new(HeldState {
                    file: Some(file),
                    file_id: sys::file_id(&meta),
                    content_len,
                    current: info,
                    finished: false,
                    released: false,
                    lost_reason: None,
                    permit: None,
                    heartbeat_started: false,
                }),
            }),
        };
        lock(&REGISTRY).insert(held.inner.id, held.clone());
        Ok(held)
    }

    /// Open the existing file, judge it, and break it if stale, race-safely: exclusive flock
    /// (a live holder's shared flock or another breaker makes it fail), then verify the path
    /// still names the same inode with byte-identical content, and only then unlink.
    fn examine_and_break(&self) -> Examined {
        let file = match sys::open_existing(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(_) => return Examined::Held(None),
        };
        let Ok(meta) = file.metadata() else {
            return Examined::Held(None);
        };
        if !meta.is_file() {
            return Examined::Held(None);
        }
        let id = sys::file_id(&meta);
        let Ok(bytes) = sys::read_capped(&file) else {
            return Examined::Held(None);
        };
        let observation = observation_from(bytes.as_deref(), &meta);
        let holder = observation.info().cloned();
        let judgement = judge(&observation, &self.stale_context(), &OsProbe);
        if !matches!(judgement, StaleJudgement::Stale(_)) {
            return Examined::Held(holder);
        }
        let _exclusive = match sys::try_flock_exclusive(&file, &self.path, id) {
            Ok(ExclusiveLock::Held(extra)) => extra,
            Ok(ExclusiveLock::Unsupported) => None,
            Ok(ExclusiveLock::Busy) | Err(_) => return Examined::Held(holder),
        };
        match std::fs::metadata(&self.path) {
            Ok(now) if sys::file_id(&now) == id => {}
            Ok(_) => return Examined::Changed,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Examined::Gone,
            Err(_) => return Examined::Held(holder),
        }
        match sys::read_capped(&file) {
            Ok(again) if again == bytes => {}
            _ => return Examined::Changed,
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Examined::Broken,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Examined::Gone,
            Err(_) => Examined::Held(holder),
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
        for round in 0..4 {
            let (observation, id) = self.observe_with_id();
            match &observation {
                Observation::Missing => return Err(LockError::NotLocked),
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
                if held.inner.key == self.key && held.is_on_disk() {
                    match held.release() {
                        Ok(true) => return Ok(()),
                        Ok(false) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            // Plain unlink, of the file we looked at (unless it keeps changing).
            let same = match (std::fs::metadata(&self.path), id) {
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
                Examined::Gone | Examined::Held(_) => break,
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
            match judge(&observation, &self.stale_context(), &OsProbe) {
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
    path: PathBuf,
    key: PathBuf,
    info: LockInfo,
    token: String,
    heartbeat: Option<Duration>,
    lost: CancellationToken,
    stop: CancellationToken,
    state: Mutex<HeldState>,
}

struct HeldState {
    /// Our descriptor, with the shared flock. `None` once finished.
    file: Option<File>,
    file_id: FileId,
    content_len: usize,
    /// What is on disk now (timestamp refreshed by the heartbeat).
    current: LockInfo,
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
            .field("path", &self.inner.path)
            .field("info", &self.inner.info)
            .finish_non_exhaustive()
    }
}

enum Ownership {
    Ours,
    Lost(&'static str),
    Unknown(io::Error),
}

impl HeldInner {
    fn ownership(&self, state: &HeldState) -> Ownership {
        let Some(file) = state.file.as_ref() else {
            return Ownership::Lost("lock file was removed");
        };
        match std::fs::metadata(&self.path) {
            Ok(m) if sys::file_id(&m) == state.file_id => {}
            Ok(_) => return Ownership::Lost("lock file was replaced"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ownership::Lost("lock file was removed")
            }
            Err(e) => return Ownership::Unknown(e),
        }
        match sys::read_capped(file) {
            Ok(Some(bytes)) => {
                let ours = if state.current.token.is_some() {
                    matches!(parse_lock_info(&read_lock_bytes_lossy(&bytes)),
                        Ok(info) if info.token.as_deref() == Some(self.token.as_str()))
                } else {
                    // No token written (plain format): the whole content must be ours.
                    bytes == state.current.serialize().as_bytes()
                };
                if ours {
                    Ownership::Ours
                } else {
                    Ownership::Lost("lock file was overwritten")
                }
            }
            Ok(None) => Ownership::Lost("lock file was overwritten"),
            Err(e) => Ownership::Unknown(e),
        }
    }

    /// Stop holding: close the descriptor, free the queue slot, leave the registry.
    fn finish(&self, state: &mut HeldState) {
        state.finished = true;
        state.file = None;
        state.permit = None;
        self.stop.cancel();
        lock(&REGISTRY).remove(&self.id);
    }

    fn lose(&self, state: &mut HeldState, reason: &str) {
        state.lost_reason = Some(reason.to_string());
        self.finish(state);
        self.lost.cancel();
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
        let mut next = state.current.clone();
        next.timestamp = now_unix_secs();
        let content = next.serialize();
        let old_len = state.content_len;
        if let Some(file) = state.file.as_ref() {
            if sys::rewrite_in_place(file, content.as_bytes(), old_len).is_ok() {
                state.content_len = content.len();
                state.current = next;
            }
        }
        true
    }
}

impl HeldLock {
    /// What was written at acquisition (sanitised tag, our pid/timestamp/host/start/token).
    pub fn info(&self) -> LockInfo {
        self.inner.info.clone()
    }

    /// What is on disk now (the timestamp as last refreshed by the heartbeat).
    pub fn current_info(&self) -> LockInfo {
        lock(&self.inner.state).current.clone()
    }

    pub fn path(&self) -> PathBuf {
        self.inner.path.clone()
    }

    pub fn token(&self) -> String {
        self.inner.token.clone()
    }

    /// Cancelled when the lock is found lost (file removed, replaced or overwritten).
    pub fn lost(&self) -> CancellationToken {
        self.inner.lost.clone()
    }

    /// Cancelled when the lock stops being held for any reason (released or lost); check
    /// [`HeldLock::lost_reason`] to tell which.
    pub fn finished(&self) -> CancellationToken {
        self.inner.stop.clone()
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

    /// Release: idempotent. `Ok(true)` released now; `Ok(false)` already released or lost (then
    /// nothing is deleted). Deletes the file only if the path still names our inode and the
    /// content read through our descriptor carries our token. An error (e.g. the unlink failed)
    /// leaves the lock held, so the call can be retried.
    pub fn release(&self) -> Result<bool, LockError> {
        let inner = &self.inner;
        let mut state = lock(&inner.state);
        if state.released {
            return Ok(false);
        }
        if state.finished {
            state.released = true;
            return Ok(false);
        }
        match inner.ownership(&state) {
            Ownership::Ours => match std::fs::remove_file(&inner.path) {
                Ok(()) => {
                    state.released = true;
                    inner.finish(&mut state);
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    state.released = true;
                    inner.lose(&mut state, "lock file was removed");
                    Ok(false)
                }
                Err(e) => Err(LockError::io("Failed to release lock", e)),
            },
            Ownership::Lost(reason) => {
                state.released = true;
                inner.lose(&mut state, reason);
                Ok(false)
            }
            Ownership::Unknown(e) => Err(LockError::io("Failed to release lock", e)),
        }
    }

    /// Start refreshing the timestamp every `options.heartbeat` on `rt` (no-op if the heartbeat
    /// is off, already started, or the lock is no longer held). The task holds only a weak
    /// reference, never panics, and stops on release, loss or runtime shutdown.
    pub fn start_heartbeat(&self, rt: &tokio::runtime::Handle) {
        let Some(period) = self.inner.heartbeat else {
            return;
        };
        {
            let mut state = lock(&self.inner.state);
            if state.heartbeat_started || state.finished {
                return;
            }
            state.heartbeat_started = true;
        }
        let period = period.clamp(MIN_HEARTBEAT, MAX_HEARTBEAT);
        let weak = Arc::downgrade(&self.inner);
        let stop = self.inner.stop.clone();
        rt.spawn(async move {
            let first = tokio::time::Instant::now() + period;
            let mut interval = tokio::time::interval_at(first, period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    _ = interval.tick() => {}
                }
                let Some(inner) = weak.upgrade() else { break };
                if !inner.heartbeat_tick() {
                    break;
                }
            }
        });
    }
}

//! The files of a shared lock beside its path P, and what one look at them sees (a
//! [`Scene`](super::policy::Scene)). Every change happens under P's guard, a mutex lock file
//! `P.rw-guard` held for the few file calls of a decision:
//!
//! - `P.reader-<16 hex>`: one per shared holder, a lock file taken by the core's mutex (so it
//!   has the heartbeat, the registry's exit release and loss notification, and a dead holder's
//!   file is judged dead at once);
//! - `P.writer-<16 hex µs>` / `P.rwait-<16 hex µs>`: the ticket of an exclusive / shared waiter
//!   (FIFO order, see `policy`), also mutex lock files, removed when their holder is done (or
//!   found dead);
//! - P itself while readers hold: the *shared base* (`format::serialize_shared_base`), naming a
//!   live reader, rewritten in place when that reader left or died and at each reader heartbeat.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::super::error::LockError;
use super::super::format::{
    is_shared_base, read_lock_bytes_lossy, serialize_shared_base, LockInfo,
};
use super::super::held::HeldLock;
use super::super::lock_file::{observation_from, LockFile};
use super::super::options::{AcquireRequest, LockOptions};
use super::super::process::{current_pid, is_process_running, now_unix_secs};
use super::super::stale::{judge, OsProbe, StaleJudgement};
use super::super::sys::{self, CreationStrategy};
use super::super::unpoisoned;
use super::policy::{older, Base, Mode};

pub(super) const GUARD_SUFFIX: &str = ".rw-guard";
pub(super) const READER_PREFIX: &str = ".reader-";
pub(super) const WRITER_TICKET_PREFIX: &str = ".writer-";
pub(super) const READER_TICKET_PREFIX: &str = ".rwait-";

/// `base` with `suffix` appended to its file name.
pub(super) fn sibling(base: &Path, suffix: &str) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The files beside `base` named `<name of base><prefix><16 lowercase hex>`, in name order:
/// (path, the 16 hex).
pub(super) fn siblings(base: &Path, prefix: &str) -> Vec<(PathBuf, String)> {
    scan(base, &[prefix]).pop().unwrap_or_default()
}

/// [`siblings`] of each of `prefixes`, from one listing of the directory.
pub(super) fn scan(base: &Path, prefixes: &[&str]) -> Vec<Vec<(PathBuf, String)>> {
    let mut out: Vec<Vec<(PathBuf, String)>> = prefixes.iter().map(|_| Vec::new()).collect();
    let (Some(dir), Some(name)) = (base.parent(), base.file_name().and_then(|n| n.to_str())) else {
        return out;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let Some(rest) = n.to_str().and_then(|n| n.strip_prefix(name)) else {
            continue;
        };
        for (i, prefix) in prefixes.iter().enumerate() {
            let Some(hex) = rest.strip_prefix(prefix) else {
                continue;
            };
            let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
            if hex.len() == 16 && hex.bytes().all(lower_hex) {
                out[i].push((e.path(), hex.to_string()));
            }
        }
    }
    for list in &mut out {
        list.sort_by(|a, b| a.1.cmp(&b.1));
    }
    out
}

/// Whether the member file (reader or ticket) at `path` has a live holder, as the core judges
/// a lock file (its holder's presence mark counts too). A dead one is removed: its name is never
/// taken again, so the file judged is the file removed (only a regular file, never a link).
pub(super) fn member_live(base: &LockFile, path: &Path) -> bool {
    let file = match sys::open_existing(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
        Err(_) => return true, // cannot tell: counted live, never removed
    };
    let Ok(meta) = file.metadata() else {
        return true;
    };
    if !meta.is_file() {
        return true;
    }
    let bytes = sys::read_capped(&file).ok().flatten();
    let observation = observation_from(bytes.as_deref(), &meta);
    let live = match judge(&observation, &base.stale_context(), &OsProbe) {
        StaleJudgement::Held(_) => true,
        StaleJudgement::Free => false,
        StaleJudgement::Stale(_) => sys::presence(&file) == sys::Presence::Holder,
    };
    if !live {
        let _ = std::fs::remove_file(path);
    }
    live
}

/// The live members of `base` with `prefix`, in name order (dead ones removed).
pub(super) fn live_members(base: &LockFile, prefix: &str) -> Vec<(PathBuf, String)> {
    siblings(base.path(), prefix)
        .into_iter()
        .filter(|(p, _)| member_live(base, p))
        .collect()
}

/// What is at P: the [`Base`] and, for a shared base, the pid it names and its file's bytes.
pub(super) struct BaseSeen {
    pub(super) base: Base,
    pub(super) named_pid: i64,
}

/// One look at P (never through a link).
pub(super) fn read_base(file: &LockFile) -> BaseSeen {
    let seen = |base| BaseSeen { base, named_pid: 0 };
    let f = match sys::open_existing(file.path()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return seen(Base::Absent),
        Err(e) if sys::is_symlink_refusal(&e, file.path()) => return seen(Base::Symlink),
        Err(_) => return seen(Base::Held),
    };
    let Ok(meta) = f.metadata() else {
        return seen(Base::Held);
    };
    let bytes = if meta.is_file() {
        sys::read_capped(&f).ok().flatten()
    } else {
        None
    };
    if let Some(b) = bytes.as_deref() {
        let text = read_lock_bytes_lossy(b);
        if is_shared_base(&text) {
            let pid = super::super::format::parse_lock_info(&text).map_or(0, |i| i.pid);
            return BaseSeen {
                base: Base::Shared,
                named_pid: pid,
            };
        }
    }
    let observation = observation_from(bytes.as_deref(), &meta);
    match file.judge_with_presence(&observation) {
        StaleJudgement::Stale(_) => seen(Base::Stale),
        StaleJudgement::Free => seen(Base::Absent),
        StaleJudgement::Held(_) => seen(Base::Held),
    }
}

/// Whether `bytes` (read from P) are a shared base.
pub(crate) fn bytes_are_shared_base(bytes: &[u8]) -> bool {
    // A shared base is small and plain: a cheap look for the line before decoding.
    bytes.windows(11).any(|w| w == b"mode=shared") && is_shared_base(&read_lock_bytes_lossy(bytes))
}

/// Creates P as a shared base naming this process (a link: fails if anything is there).
pub(super) fn create_base(file: &LockFile, tag: Option<&str>) -> io::Result<()> {
    let content = serialize_shared_base(current_pid(), now_unix_secs(), tag);
    let fsync = file.syncs();
    // On the lock directory's file system (a network or FUSE one without hard links refuses).
    sys::create_lock_file_on(
        file.fs,
        file.path(),
        file.os_path(),
        content.as_bytes(),
        fsync,
        CreationStrategy::Auto,
    )
    .map(drop)
}

/// Rewrites the shared base at P in place naming `pid` with the current second (never through
/// a link; only when P is still a shared base). `false`: P is no shared base (any more).
pub(super) fn rewrite_base(file: &LockFile, pid: i64, tag: Option<&str>) -> io::Result<bool> {
    let f = match sys::open_existing_rw(file.path()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let old = sys::read_capped(&f)?.unwrap_or_default();
    if !bytes_are_shared_base(&old) {
        return Ok(false);
    }
    let content = serialize_shared_base(pid, now_unix_secs(), tag);
    sys::rewrite_in_place(&f, content.as_bytes(), old.len())?;
    Ok(true)
}

/// Removes P if it is a shared base (only under the guard, once its group is dead or empty).
pub(super) fn remove_base(file: &LockFile) {
    let Ok(f) = sys::open_existing(file.path()) else {
        return;
    };
    let Ok(Some(bytes)) = sys::read_capped(&f) else {
        return;
    };
    let Ok(meta) = f.metadata() else {
        return;
    };
    let id = sys::file_id(&meta);
    let same = std::fs::symlink_metadata(file.path()).is_ok_and(|m| sys::file_id(&m) == id);
    if same && bytes_are_shared_base(&bytes) {
        let _ = std::fs::remove_file(file.path());
    }
}

/// What a member file records (`None` when unreadable).
pub(super) fn info_of(path: &Path) -> Option<LockInfo> {
    let f = sys::open_existing(path).ok()?;
    let bytes = sys::read_capped(&f).ok().flatten()?;
    super::super::format::parse_lock_info(&read_lock_bytes_lossy(&bytes)).ok()
}

/// The pid a reader file records (0 when unreadable).
pub(super) fn pid_of(path: &Path) -> i64 {
    info_of(path).map_or(0, |i| i.pid)
}

/// Options of the member files (guard, readers, tickets): the path's stale rules and
/// heartbeat, no `fsync` (a crash loses a member with its process anyway: it is judged dead).
pub(super) fn member_options(options: &LockOptions) -> LockOptions {
    LockOptions {
        fsync: false,
        ..options.clone()
    }
}

/// A member file of `base` with a fresh name: `prefix` and 16 hex digits, random for a reader,
/// the wall clock in microseconds for a ticket (name order = arrival order).
pub(super) fn new_member(base: &LockFile, prefix: &str, clock: bool, bump: u64) -> LockFile {
    let hex = if clock {
        let us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        format!("{:016x}", us.saturating_add(bump))
    } else {
        sys::random_hex(8) // 8 bytes: 16 hex digits
    };
    base.beside(
        sibling(&base.key, &format!("{prefix}{hex}")),
        member_options(base.options()),
    )
}

/// A waiter's ticket: held until it is served or gives up (released on drop).
pub(super) struct Ticket {
    pub(super) held: HeldLock,
    pub(super) name: String,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = self.held.release();
    }
}

/// Takes a ticket of `mode` (the name's clock bumped past a collision).
pub(super) fn take_ticket(
    base: &LockFile,
    mode: Mode,
) -> Result<Ticket, crate::lockfile::LockError> {
    let prefix = match mode {
        Mode::Exclusive => WRITER_TICKET_PREFIX,
        Mode::Shared => READER_TICKET_PREFIX,
    };
    let mut last = None;
    for bump in 0..16 {
        let file = new_member(base, prefix, true, bump);
        match file.try_acquire(&AcquireRequest::default()) {
            Ok(held) => {
                let name = file
                    .path()
                    .to_string_lossy()
                    .rsplit('-')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                return Ok(Ticket { held, name });
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(LockError::Aborted))
}

/// Counts of live tickets ahead of `mine` (all without one) among the listed `writers` and
/// `readers` tickets: (writers, all). Only tickets ahead are judged (and removed when dead).
pub(super) fn tickets_ahead(
    base: &LockFile,
    writers: &[(PathBuf, String)],
    readers: &[(PathBuf, String)],
    mine: Option<&str>,
) -> (usize, usize) {
    let live_ahead = |list: &[(PathBuf, String)]| {
        list.iter()
            .filter(|(p, n)| older(n, mine) && member_live(base, p))
            .count()
    };
    let w = live_ahead(writers);
    (w, w + live_ahead(readers))
}

// ─── the shared holders of this process: the heartbeat's and the release's hooks ───

/// A shared hold of this process: its base's lock file and the tag it names the base with.
#[derive(Clone)]
pub(super) struct Member {
    pub(super) base: LockFile,
    pub(super) guard: LockFile,
    pub(super) tag: Option<String>,
}

/// This process's shared holds, by the id of their reader file's held lock.
static MEMBERS: LazyLock<Mutex<HashMap<u64, Member>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// `MEMBERS.len()`: the hooks below cost the mutex's hot path one atomic load.
static MEMBER_COUNT: AtomicUsize = AtomicUsize::new(0);

/// When each base this process reads was last refreshed (one refresh per base per beat, however
/// many of its readers are here).
static REFRESHED: LazyLock<Mutex<HashMap<PathBuf, Instant>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

pub(super) fn add_member(id: u64, member: Member) {
    let mut m = unpoisoned(&MEMBERS);
    m.insert(id, member);
    MEMBER_COUNT.store(m.len(), Ordering::Release);
}

fn take_member(id: u64) -> Option<Member> {
    if MEMBER_COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut m = unpoisoned(&MEMBERS);
    let member = m.remove(&id);
    MEMBER_COUNT.store(m.len(), Ordering::Release);
    member
}

fn member(id: u64) -> Option<Member> {
    if MEMBER_COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    unpoisoned(&MEMBERS).get(&id).cloned()
}

/// The guard taken on a thread that may block briefly (a release, the exit hook, a heartbeat):
/// tried every 2 ms for up to `within`. `Ok(None)`: busy all along (a stopped process holds
/// it); `Err`: it cannot be taken at all (a symbolic link planted at its name).
pub(super) fn try_guard_within(
    guard: &LockFile,
    within: Duration,
) -> Result<Option<HeldLock>, LockError> {
    let until = Instant::now() + within;
    loop {
        match guard.try_acquire(&AcquireRequest::default()) {
            Ok(g) => return Ok(Some(g)),
            Err(LockError::AlreadyLocked { .. }) => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// [`try_guard_within`] where a failure only means "not now" (the hooks, which report nothing).
pub(super) fn guard_within(guard: &LockFile, within: Duration) -> Option<HeldLock> {
    try_guard_within(guard, within).ok().flatten()
}

/// How long a leaving reader waits for the guard before leaving the base as it is (the next
/// acquirer of any kind then judges the group by its reader files).
const LEAVE_GUARD_WAIT: Duration = Duration::from_millis(500);

/// After a held lock ended through a release (its handle, by path, the exit hook): if it was a
/// reader file, the reader leaves its group. The last one removes the base; otherwise a base
/// naming a process that is no reader any more is rewritten naming a live reader.
pub(crate) fn after_release(id: u64) {
    let Some(m) = take_member(id) else {
        return;
    };
    let Some(g) = guard_within(&m.guard, LEAVE_GUARD_WAIT) else {
        return;
    };
    let seen = read_base(&m.base);
    if seen.base == Base::Shared {
        let readers = live_members(&m.base, READER_PREFIX);
        if readers.is_empty() {
            remove_base(&m.base);
        } else if !named_reader_alive(&readers, seen.named_pid) {
            let _ = rewrite_base(&m.base, pid_of(&readers[0].0), m.tag.as_deref());
        }
    }
    let _ = g.release();
}

/// Whether `pid` is the pid of one of the live `readers`.
fn named_reader_alive(readers: &[(PathBuf, String)], pid: i64) -> bool {
    pid > 0 && is_process_running(pid) && readers.iter().any(|(p, _)| pid_of(p) == pid)
}

/// After a reader file's heartbeat: its base gets a fresh timestamp (at most once per beat
/// period per base), naming a live reader, so `sema` and `semats` never find it old.
pub(crate) fn after_beat(id: u64) {
    let Some(m) = member(id) else {
        return;
    };
    let period = m.base.options().heartbeat.unwrap_or(Duration::from_secs(1));
    {
        let mut r = unpoisoned(&REFRESHED);
        let now = Instant::now();
        if r.get(m.base.path())
            .is_some_and(|t| now.duration_since(*t) < period / 2)
        {
            return;
        }
        if r.len() > 64 {
            r.retain(|_, t| now.duration_since(*t) < period * 2);
        }
        r.insert(m.base.path().to_path_buf(), now);
    }
    // A short try: the heartbeat thread serves every held lock.
    let Some(g) = guard_within(&m.guard, Duration::from_millis(20)) else {
        return;
    };
    let seen = read_base(&m.base);
    if seen.base == Base::Shared {
        let me = current_pid();
        let pid = if seen.named_pid > 0 && is_process_running(seen.named_pid) {
            seen.named_pid
        } else {
            me
        };
        let _ = rewrite_base(&m.base, pid, m.tag.as_deref());
    }
    let _ = g.release();
}

/// A joining reader's care of an existing shared base: when the process it names is gone, or
/// the group was dead (`force`), the base is rewritten naming this process. `false`: P is no
/// shared base any more.
pub(super) fn rewrite_if_named_gone(
    file: &LockFile,
    force: bool,
    tag: Option<&str>,
) -> io::Result<bool> {
    let seen = read_base(file);
    if seen.base != Base::Shared {
        return Ok(false);
    }
    if !force && seen.named_pid > 0 && is_process_running(seen.named_pid) {
        return Ok(true);
    }
    rewrite_base(file, current_pid(), tag)
}

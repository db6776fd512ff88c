//! The queue on Linux: queue files in `/dev/shm`, `flock` for the line, byte locks for the
//! marks (see the parent module).

use std::collections::HashMap;
use std::fs::{DirBuilder, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustix::fs::{AtFlags, Mode, OFlags};
use tokio::sync::Notify;

use crate::lockfile::process::current_pid;
use crate::lockfile::sys::{
    byte_lock, byte_locked_by_other, flock, is_contention, ByteLock, FileId, FlockOperation,
};

mod marks;
pub(crate) use marks::waiting_processes;

pub(crate) struct Queue {
    file: File,
    /// The process that opened it: a forked child shares the descriptor (and so the
    /// parent's flock and marks) and must open its own.
    pid: i64,
    /// The verified directory and the file's name in it, to remove the file when the line
    /// is empty; the lock's key.
    dir: Arc<File>,
    name: String,
    key: PathBuf,
    state: Mutex<State>,
    /// Wakes the agent thread when a waiter of this process wants a place in line.
    demand: Condvar,
    /// Signalled when this process becomes the head (or the queue breaks).
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// This process holds the queue's flock.
    head: bool,
    /// The agent thread exists.
    agent: bool,
    /// The agent is blocked in `flock(LOCK_EX)` (this process has a place in line).
    in_line: bool,
    /// A waiter of this process holds a [`Place`].
    want: bool,
    /// `flock` failed for a reason other than contention: behave as if always head (every
    /// waiter watches the lock file, as without a queue).
    broken: bool,
    /// This process's presence mark is set (see [`mark`]).
    present: bool,
}

/// A waiter's place in the queue; dropping it leaves the queue (and lets the next process
/// become head if this one was).
pub(crate) struct Place {
    queue: Arc<Queue>,
    /// This place's starving mark is set (see [`Place::starving_from`]).
    starving: std::sync::atomic::AtomicBool,
    /// The line was left already ([`Place::leave`]): dropping the place does nothing more.
    /// A mutex, not a flag: a second `leave` returns only once the first has finished, so
    /// a later place of this process never has its `want` cleared by this one.
    left: Mutex<bool>,
}

static QUEUES: LazyLock<Mutex<HashMap<PathBuf, Arc<Queue>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Cap on remembered locks: past it, queues of further locks are opened per call (still
/// correct, just one `open` more).
const MAX_REMEMBERED: usize = 4096;

/// An agent with nothing to do for this long exits (a later waiter starts a new one).
const AGENT_IDLE: Duration = Duration::from_secs(2);

pub(super) fn get(key: &Path, create: bool) -> Option<Arc<Queue>> {
    if let Some(known) = lock(&QUEUES).get(key) {
        // Another process removed the file of an empty line: open the current one, unless
        // this process still stands in the old line.
        if known.usable() {
            return Some(known.clone());
        }
    }
    let (file, dir, name) = open(key, create).ok()?;
    let queue = Arc::new(Queue {
        file,
        pid: current_pid(),
        dir,
        name,
        key: key.to_path_buf(),
        state: Mutex::new(State::default()),
        demand: Condvar::new(),
        changed: Notify::new(),
    });
    let mut map = lock(&QUEUES);
    // Another thread may have opened it meanwhile: keep the first (one agent per process).
    if let Some(first) = map.get(key) {
        if first.usable() {
            return Some(first.clone());
        }
    }
    if map.len() < MAX_REMEMBERED || map.contains_key(key) {
        map.insert(key.to_path_buf(), queue.clone());
    }
    Some(queue)
}

/// This user's runtime directory, `/dev/shm/sema-native-<uid>`.
fn dir_path() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    PathBuf::from(format!("/dev/shm/sema-native-{uid}"))
}

/// The verified runtime directory, held open (see the module docs).
static DIR: Mutex<Option<Arc<File>>> = Mutex::new(None);

/// The runtime directory's descriptor: the one verified before, unless `again` (a file
/// could not be made in it: it was removed), else verified now; made first if missing and
/// `create`. `NotFound` when it is missing and not `create`.
fn runtime_dir(create: bool, again: bool) -> io::Result<Arc<File>> {
    let mut held = lock(&DIR);
    if let (Some(dir), false) = (held.as_ref(), again) {
        return Ok(dir.clone());
    }
    let dir = Arc::new(verify_dir(create)?);
    *held = Some(dir.clone());
    drop(held);
    // A directory made to be used now is not removed for being empty.
    sweep(&dir, !create);
    Ok(dir)
}

/// Open the runtime directory (made if missing and `create`) and check the open directory
/// itself: ours, and writable by nobody else (others could otherwise remove or replace
/// queue files, which would cost fairness, never exclusion). A symlink at the path is
/// refused (`O_NOFOLLOW`), so checking and using are one and the same directory.
fn verify_dir(create: bool) -> io::Result<File> {
    let path = dir_path();
    if create {
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let fd = rustix::fs::open(
        &path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let dir = File::from(fd);
    let meta = dir.metadata()?;
    let uid = rustix::process::getuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::other("queue directory is not ours alone"));
    }
    Ok(dir)
}

/// `name` in the directory `dir`, read-write (the marks are read locks, which need a
/// readable descriptor, and an open file description of our own), never through a symlink.
fn open_at(dir: &File, name: &str, create: bool) -> io::Result<File> {
    let mut flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    if create {
        flags |= OFlags::CREATE;
    }
    Ok(File::from(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(0o600),
    )?))
}

/// FNV-1a, 64 bits: stable across builds and processes (the name must be the same for
/// every process of every version); a collision only makes two locks share a queue.
fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn name_of(key: &Path) -> String {
    format!("q-{:016x}", fnv(key.as_os_str().as_bytes().iter().copied()))
}

fn open(key: &Path, create: bool) -> io::Result<(File, Arc<File>, String)> {
    let name = name_of(key);
    let dir = runtime_dir(create, false)?;
    match open_at(&dir, &name, create) {
        Ok(file) => Ok((file, dir, name)),
        // The directory was removed (emptied by the last process to leave, or a tmp
        // cleaner): verify the one at the path now and use it, once.
        Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
            let dir = runtime_dir(create, true)?;
            Ok((open_at(&dir, &name, create)?, dir, name))
        }
        // Looking only: a queue made since in a new directory is found when this process
        // next verifies (a removed directory has no links left).
        Err(e) if e.kind() == io::ErrorKind::NotFound && removed(&dir) => {
            let dir = runtime_dir(false, true)?;
            Ok((open_at(&dir, &name, false)?, dir, name))
        }
        Err(e) => Err(e),
    }
}

/// The open directory `dir` was removed.
fn removed(dir: &File) -> bool {
    dir.metadata().map(|m| m.nlink() == 0).unwrap_or(false)
}

/// Remove the queue files nobody stands in (left by killed processes), checked under each
/// file's own flock as [`Queue::remove_if_empty`] does, then the directory if it is empty and
/// `remove_empty`. Runs when a process first verifies the directory. Errors are ignored:
/// sweeping is tidying, never needed for correctness.
fn sweep(dir: &File, remove_empty: bool) {
    let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
        return;
    };
    while let Some(Ok(entry)) = entries.next() {
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if !(name.len() == 18 && name.starts_with("q-")) {
            continue;
        }
        let Ok(file) = open_at(dir, name, false) else {
            continue;
        };
        if others_marked(&file, PRESENT)
            || flock(&file, FlockOperation::NonBlockingLockExclusive).is_err()
        {
            continue;
        }
        if !others_marked(&file, PRESENT) {
            let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        }
        let _ = flock(&file, FlockOperation::Unlock);
    }
    if remove_empty {
        remove_dir_if_empty(dir);
    }
}

/// Remove the runtime directory if it is empty and still the one at the path.
fn remove_dir_if_empty(dir: &File) {
    let path = dir_path();
    let same = match (dir.metadata(), std::fs::symlink_metadata(&path)) {
        (Ok(ours), Ok(now)) => ours.dev() == now.dev() && ours.ino() == now.ino(),
        _ => false,
    };
    if same {
        // Fails with ENOTEMPTY while any file is in it.
        let _ = std::fs::remove_dir(&path);
    }
}

/// The per-user serialisation of breakers of one stale lock file (see [`lock_break`]).
pub(crate) enum BreakLock {
    /// Taken; released when dropped.
    Held(BreakGuard),
    /// Another breaker of this user works on the same file now.
    Busy,
    /// No runtime directory here: the `flock` on the lock file is all there is.
    Unavailable,
}

/// A taken break lock: its own open file description, closed (and the lock released) on
/// drop.
pub(crate) struct BreakGuard {
    _file: File,
}

/// Serialise this user's breakers of the lock file `id`: a write lock on one byte of the
/// runtime directory's `breakers` file, at an offset hashed from (device, inode). Nobody
/// else can open that file, so unlike a `flock` on the lock file itself no reader can
/// hold it. Opened per break (breaking is rare): an OFD lock belongs to its open file, so
/// two threads or a forked child each get their own. A hash collision only makes two
/// breaks of different files wait for each other's next look. The file is never removed
/// (a breaker that opened a removed one would lock nothing).
pub fn lock_break(id: FileId) -> BreakLock {
    let Ok(dir) = runtime_dir(true, false) else {
        return BreakLock::Unavailable;
    };
    let file = match open_at(&dir, "breakers", true) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match runtime_dir(true, true).and_then(|d| open_at(&d, "breakers", true)) {
                Ok(f) => f,
                Err(_) => return BreakLock::Unavailable,
            }
        }
        Err(_) => return BreakLock::Unavailable,
    };
    let offset = fnv(id.dev.to_le_bytes().into_iter().chain(id.ino.to_le_bytes())) >> 2;
    match byte_lock(&file, offset as i64, ByteLock::Write) {
        Ok(()) => BreakLock::Held(BreakGuard { _file: file }),
        Err(e) if is_contention(&e) => BreakLock::Busy,
        Err(_) => BreakLock::Unavailable,
    }
}

/// Byte [`STARVING`] of the queue file carries the *starving* marks: every process that
/// has waited longer than [`super::STARVING_AFTER`] holds a shared byte-range lock on it.
/// Byte [`PRESENT`] carries the *presence* marks of every process waiting at all. They are
/// open-file-description locks: independent of the whole-file `flock` of the head, and
/// dropped by the kernel if the process dies.
const STARVING: i64 = 0;
const PRESENT: i64 = 1;

/// Another process holds a mark on `byte` (ours never conflict with our own probe). An
/// error counts as marked: the cautious answer for both uses.
fn others_marked(file: &File, byte: i64) -> bool {
    byte_locked_by_other(file, byte).unwrap_or(true)
}

impl Queue {
    /// Take a place: head at once if the head's place is free, else in line behind the
    /// others. If anyone is starving, always in line, even if the head's place is free
    /// this instant (it is then being handed to a process already woken for it): this is
    /// what stops a process that just released from taking the lock straight back.
    pub(crate) fn join(self: &Arc<Self>) -> Place {
        let mut st = lock(&self.state);
        st.want = true;
        if !st.present {
            st.present = byte_lock(&self.file, PRESENT, ByteLock::Read).is_ok();
        }
        // The idle agent is woken once `state` is unlocked: woken under it, it would block on the
        // mutex at once and be woken a second time by the unlock (two futex wakes on the calling
        // thread, the JS thread, and two context switches of the agent per contended acquisition).
        let mut wake_agent = false;
        if !st.head && !st.broken {
            let first = !others_marked(&self.file, STARVING)
                && flock(&self.file, FlockOperation::NonBlockingLockExclusive).is_ok();
            if first {
                st.head = true;
            } else if !st.in_line {
                st.in_line = true;
                if st.agent {
                    // `in_line` is set under the lock: an agent between its check and its wait
                    // is woken by the notify below, one that checks later sees it set.
                    wake_agent = true;
                } else {
                    let queue = self.clone();
                    let spawned = std::thread::Builder::new()
                        .name("sema-native-queue".into())
                        .spawn(move || queue.agent());
                    match spawned {
                        Ok(_) => st.agent = true,
                        Err(_) => {
                            st.in_line = false;
                            st.broken = true;
                        }
                    }
                }
            }
        }
        drop(st);
        if wake_agent {
            self.demand.notify_one();
        }
        Place {
            queue: self.clone(),
            starving: std::sync::atomic::AtomicBool::new(false),
            left: Mutex::new(false),
        }
    }

    /// Still the queue to use: opened by this process (a forked child shares the parent's
    /// descriptor, and so its flock and marks) and not removed by another process since.
    fn usable(&self) -> bool {
        self.pid == current_pid() && !self.removed_elsewhere()
    }

    /// The file was removed by another process (its line was empty) and nobody here stands
    /// in this old line: the current file must be opened instead.
    fn removed_elsewhere(&self) -> bool {
        let st = lock(&self.state);
        if st.want || st.in_line {
            return false;
        }
        self.file
            .metadata()
            .map(|m| m.nlink() == 0)
            .unwrap_or(false)
    }

    /// Called when this process leaves the line with nobody of it in line any more: if
    /// nobody else waits either (no presence mark, the head's place free), remove the file,
    /// so a lock contended once does not leave a file behind. A process that opened the file
    /// a moment before may still line up on the removed inode: it is then head of a line
    /// of its own, watching the lock file beside the head of the new line (two woken
    /// instead of one); the lock file still decides who holds the lock.
    fn remove_if_empty(&self, st: &State) -> bool {
        // The cheap check first: under contention somebody is nearly always present.
        if st.in_line || st.broken || others_marked(&self.file, PRESENT) {
            return false;
        }
        if flock(&self.file, FlockOperation::NonBlockingLockExclusive).is_err() {
            return false; // someone is head
        }
        // Checked again under the head's flock: a process marks its presence before it
        // tries for the head's place.
        let removed = !others_marked(&self.file, PRESENT)
            && rustix::fs::unlinkat(&*self.dir, self.name.as_str(), AtFlags::empty()).is_ok();
        let _ = flock(&self.file, FlockOperation::Unlock);
        if removed {
            remove_dir_if_empty(&self.dir);
        }
        removed
    }

    /// Forget this queue in [`QUEUES`] after its file was removed. Called WITHOUT `state`
    /// held: `get` takes `QUEUES` and then a queue's `state`, so the reverse order here
    /// would deadlock against it.
    fn forget(&self) {
        let mut map = lock(&QUEUES);
        if map.get(&self.key).is_some_and(|q| std::ptr::eq(&**q, self)) {
            map.remove(&self.key);
        }
    }

    /// The agent: stand in line (blocked in `flock(LOCK_EX)`) whenever this process wants
    /// a place, then hand the head to its waiter, or leave at once if nobody here wants it
    /// any more. Exits after [`AGENT_IDLE`] without demand.
    fn agent(self: Arc<Self>) {
        loop {
            {
                let mut st = lock(&self.state);
                while !st.in_line {
                    let (next, waited) = self
                        .demand
                        .wait_timeout(st, AGENT_IDLE)
                        .unwrap_or_else(PoisonError::into_inner);
                    st = next;
                    if waited.timed_out() && !st.in_line {
                        st.agent = false;
                        let idle = !st.want;
                        drop(st);
                        // Unused for AGENT_IDLE: let the descriptor go (reopened on demand).
                        if idle {
                            self.forget();
                        }
                        return;
                    }
                }
            }
            let r = flock(&self.file, FlockOperation::LockExclusive);
            let mut removed = false;
            let mut st = lock(&self.state);
            st.in_line = false;
            match r {
                Ok(()) if st.want => st.head = true,
                // Nobody here wants it any more: pass it on at once.
                Ok(()) => {
                    if !st.head {
                        let _ = flock(&self.file, FlockOperation::Unlock);
                        // This process may be the last to leave (its waiters gave up while
                        // the agent still stood in line): nobody else would remove the file.
                        removed = self.remove_if_empty(&st);
                    }
                }
                Err(_) => st.broken = true,
            }
            drop(st);
            if removed {
                self.forget();
            }
            self.changed.notify_waiters();
        }
    }
}

impl Place {
    /// This process is the head (or the queue is broken): watch the lock file.
    pub(crate) fn is_head(&self) -> bool {
        let st = lock(&self.queue.state);
        st.head || st.broken
    }

    /// Mark this process as starving at `at` (its wait began [`super::STARVING_AFTER`]
    /// before): from then until this place is dropped, nobody may take the head's place
    /// ahead of the line. Never completes: race it beside the other things a wait waits for.
    pub(crate) async fn starving_from(&self, at: tokio::time::Instant) {
        use std::sync::atomic::Ordering;
        if !self.starving.load(Ordering::Relaxed) {
            tokio::time::sleep_until(at).await;
            let _ = byte_lock(&self.queue.file, STARVING, ByteLock::Read);
            self.starving.store(true, Ordering::Relaxed);
        }
        std::future::pending::<()>().await
    }

    /// Notified when the head may have changed. Create and `enable()` it before checking
    /// [`Place::is_head`], so a change in between is not missed.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.queue.changed.notified()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.leave();
    }
}

impl Place {
    /// Leave the line now, what dropping the place does, once: a waiter that won the lock
    /// leaves it from another thread while its own makes the directory durable (see
    /// `LockFile::attempt_async`), so the next process becomes head without waiting for
    /// that sync, and the four calls below are off the path to telling the caller.
    pub(crate) fn leave(&self) {
        let mut left = lock(&self.left);
        if *left {
            return;
        }
        *left = true;
        let mut st = lock(&self.queue.state);
        st.want = false;
        let _ = byte_lock(&self.queue.file, STARVING, ByteLock::Unlock);
        if st.present {
            st.present = false;
            let _ = byte_lock(&self.queue.file, PRESENT, ByteLock::Unlock);
        }
        if st.head {
            st.head = false;
            let _ = flock(&self.queue.file, FlockOperation::Unlock);
        }
        let removed = self.queue.remove_if_empty(&st);
        // Nobody here stands in line and no agent will come back to it: do not keep the
        // descriptor (the file may be removed by another process later; a kept entry would
        // hold it open for good). With an agent, its idle exit forgets it; until then a
        // process waiting in a loop keeps its descriptor and its agent.
        let idle = !st.in_line && !st.agent;
        drop(st);
        if removed || idle {
            self.queue.forget();
        }
    }
}

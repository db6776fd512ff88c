//! The cross-process wait queue of one lock: waiters in different processes line up on an
//! exclusive `flock` of a queue file, and only the one holding it (the *head*) watches the lock
//! file. A release then wakes one waiting process instead of all of them, and a process that
//! has just released cannot take the lock again ahead of those already waiting.
//!
//! The queue only orders waiting; it never decides who holds the lock (the lock file does), so
//! it cannot break mutual exclusion: foreign tools that know nothing of it, a waiter that gave
//! up, a head that crashed (the kernel drops its `flock`) or a missing queue file only cost
//! fairness or speed. Waiters behind the head still poll the lock file at their
//! `retry_interval`, so a stopped head (SIGSTOP) delays them but cannot block them.
//!
//! Within one process only the holder of the in-process slot (the FIFO of `LockFile`) waits
//! here, so each process has at most one place in the line per lock. That place is taken by a
//! thread blocked in `flock(LOCK_EX)` (the *agent*; the kernel serves blocked `flock`s roughly
//! in order and wakes one of them per unlock). A waiter that gives up leaves the agent blocked:
//! when it reaches the head and nobody in its process wants the lock any more, it unlocks at
//! once. The next waiter of the same process reuses it, so there is never more than one agent
//! per process and lock.
//!
//! The queue files live in `/dev/shm/sema-native-<uid>/` (memory, gone at reboot), one empty
//! file per lock while it has waiters, named by a hash of the lock's canonical path; the last
//! process to leave an empty line removes it. Linux only; elsewhere there is no queue and every
//! waiter watches the lock file itself.

use std::path::Path;
use std::sync::Arc;

/// The queue of a lock this process has waited for, if one exists (one `open` the first time
/// per lock, then a map lookup). `None` = nobody ever had to wait for this lock, or there is no
/// queue on this system.
pub(crate) fn existing(key: &Path) -> Option<Arc<Queue>> {
    imp::get(key, false)
}

/// The queue of a lock, created if needed (a waiter that found the lock taken).
pub(crate) fn create(key: &Path) -> Option<Arc<Queue>> {
    imp::get(key, true)
}

pub(crate) use imp::{Queue, Ticket};

/// How long a waiter lets others go first: until then, a process that finds the head's place
/// free may take it (and the lock) ahead of the line, which lets a busy lock change hands
/// without a cross-process wake-up each time; after it, the waiter is *starving* and the line
/// is strict (as Go's `sync.Mutex` switches to hand-off after 1 ms). A hand-off between
/// processes costs ~150 µs here against ~1 µs between goroutines, hence 5 ms rather than 1.
/// Measured with 8 processes in tmpfs: 1 ms gives 5.2 k hand-offs/s, 5 ms ~7 k, 10 and 20 ms
/// no more; the wait p99 stays 4–6 ms throughout.
pub(crate) const STARVING_AFTER: std::time::Duration = std::time::Duration::from_millis(5);

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;
    use std::fs::{DirBuilder, File, OpenOptions};
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
    use std::time::Duration;

    use tokio::sync::Notify;

    use crate::lockfile::process::current_pid;
    use crate::lockfile::sys::flock;

    pub(crate) struct Queue {
        file: File,
        /// The process that opened it: a forked child shares the descriptor (and so the
        /// parent's flock and marks) and must open its own.
        pid: i64,
        /// The queue file's path and the lock's key, to remove the file when the line is empty.
        path: PathBuf,
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
        /// A waiter of this process holds a [`Ticket`].
        want: bool,
        /// `flock` failed for a reason other than contention: behave as if always head (every
        /// waiter watches the lock file, as without a queue).
        broken: bool,
        /// This process's presence mark is set (see [`mark`]).
        present: bool,
    }

    /// A waiter's place in the queue; dropping it leaves the queue (and lets the next process
    /// become head if this one was).
    pub(crate) struct Ticket {
        queue: Arc<Queue>,
        /// This ticket's starving mark is set (see [`Ticket::starving_from`]).
        starving: std::sync::atomic::AtomicBool,
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
        let (file, path) = open(key, create).ok()?;
        let queue = Arc::new(Queue {
            file,
            pid: current_pid(),
            path,
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

    /// The directory of this user's queue files, made if missing; refused if it is not a
    /// directory owned by this user (another user could otherwise steer our queue files).
    /// Checked once per process (afterwards only `open` runs on the JS thread's fast path);
    /// made again if it was removed meanwhile (see [`open`]).
    fn queue_dir(again: bool) -> io::Result<PathBuf> {
        static CHECKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        if let (Some(dir), false) = (CHECKED.get(), again) {
            return Ok(dir.clone());
        }
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let dir = PathBuf::from(format!("/dev/shm/sema-native-{uid}"));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&dir)?;
        // Ours, and writable by nobody else: others could otherwise remove or replace queue
        // files (which would cost fairness, never exclusion).
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return Err(io::Error::other("queue directory is not ours alone"));
        }
        let _ = CHECKED.set(dir.clone());
        Ok(dir)
    }

    /// FNV-1a, 64 bits: stable across builds and processes (the name must be the same for
    /// every process of every version); a collision only makes two locks share a queue.
    fn name_of(key: &Path) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_os_str().as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("q-{h:016x}")
    }

    fn open(key: &Path, create: bool) -> io::Result<(File, PathBuf)> {
        let name = name_of(key);
        // Read-write: the marks are read locks, which need a readable descriptor, and an open
        // file description of our own (a byte-range "OFD" lock belongs to it).
        let open_in = |dir: PathBuf| {
            let path = dir.join(&name);
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&path)
                .map(|file| (file, path))
        };
        match open_in(queue_dir(false)?) {
            // The directory itself was removed (a tmp cleaner): make it again, once.
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => open_in(queue_dir(true)?),
            r => r,
        }
    }

    /// Byte [`STARVING`] of the queue file carries the *starving* marks: every process that
    /// has waited longer than [`super::STARVING_AFTER`] holds a shared byte-range lock on it.
    /// Byte [`PRESENT`] carries the *presence* marks of every process waiting at all. They are
    /// open-file-description locks: independent of the whole-file `flock` of the head, and
    /// dropped by the kernel if the process dies.
    const STARVING: i64 = 0;
    const PRESENT: i64 = 1;

    fn mark(
        file: &File,
        byte: i64,
        lock_type: libc::c_int,
        cmd: libc::c_int,
    ) -> io::Result<libc::flock> {
        // SAFETY: `flock` is a plain C struct; all-zero is a valid value (l_pid must be 0 for
        // OFD commands), the fields used are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = lock_type as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = byte as libc::off_t;
        fl.l_len = 1;
        // SAFETY: the descriptor is owned by `file`, which outlives this call; `fl` is a valid,
        // writable `struct flock` for the kernel to read and (GETLK) fill in.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl) };
        if rc == 0 {
            Ok(fl)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Another process holds a mark on `byte` (ours never conflict with our own probe). An
    /// error counts as marked: the cautious answer for both uses.
    fn others_marked(file: &File, byte: i64) -> bool {
        match mark(file, byte, libc::F_WRLCK, libc::F_OFD_GETLK) {
            Ok(fl) => fl.l_type != libc::F_UNLCK as libc::c_short,
            Err(_) => true,
        }
    }

    impl Queue {
        /// Take a place: head at once if the head's place is free, else in line behind the
        /// others. If anyone is starving, always in line, even if the head's place is free
        /// this instant (it is then being handed to a process already woken for it): this is
        /// what stops a process that just released from taking the lock straight back.
        pub(crate) fn join(self: &Arc<Self>) -> Ticket {
            let mut st = lock(&self.state);
            st.want = true;
            if !st.present {
                st.present = mark(&self.file, PRESENT, libc::F_RDLCK, libc::F_OFD_SETLK).is_ok();
            }
            if !st.head && !st.broken {
                let first = !others_marked(&self.file, STARVING)
                    && flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_ok();
                if first {
                    st.head = true;
                } else if !st.in_line {
                    st.in_line = true;
                    if st.agent {
                        self.demand.notify_one();
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
            Ticket {
                queue: self.clone(),
                starving: std::sync::atomic::AtomicBool::new(false),
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
            if flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
                return false; // someone is head
            }
            // Checked again under the head's flock: a process marks its presence before it
            // tries for the head's place.
            let removed =
                !others_marked(&self.file, PRESENT) && std::fs::remove_file(&self.path).is_ok();
            let _ = flock(&self.file, libc::LOCK_UN);
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
                let r = flock(&self.file, libc::LOCK_EX);
                let mut removed = false;
                let mut st = lock(&self.state);
                st.in_line = false;
                match r {
                    Ok(()) if st.want => st.head = true,
                    // Nobody here wants it any more: pass it on at once.
                    Ok(()) => {
                        if !st.head {
                            let _ = flock(&self.file, libc::LOCK_UN);
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

    impl Ticket {
        /// This process is the head (or the queue is broken): watch the lock file.
        pub(crate) fn is_head(&self) -> bool {
            let st = lock(&self.queue.state);
            st.head || st.broken
        }

        /// Mark this process as starving at `at` (its wait began [`super::STARVING_AFTER`]
        /// before): from then until this ticket is dropped, nobody may take the head's place
        /// ahead of the line. Never completes: race it beside the other things a wait waits for.
        pub(crate) async fn starving_from(&self, at: tokio::time::Instant) {
            use std::sync::atomic::Ordering;
            if !self.starving.load(Ordering::Relaxed) {
                tokio::time::sleep_until(at).await;
                let _ = mark(&self.queue.file, STARVING, libc::F_RDLCK, libc::F_OFD_SETLK);
                self.starving.store(true, Ordering::Relaxed);
            }
            std::future::pending::<()>().await
        }

        /// Notified when the head may have changed. Create and `enable()` it before checking
        /// [`Ticket::is_head`], so a change in between is not missed.
        pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
            self.queue.changed.notified()
        }
    }

    impl Drop for Ticket {
        fn drop(&mut self) {
            let mut st = lock(&self.queue.state);
            st.want = false;
            let _ = mark(&self.queue.file, STARVING, libc::F_UNLCK, libc::F_OFD_SETLK);
            if st.present {
                st.present = false;
                let _ = mark(&self.queue.file, PRESENT, libc::F_UNLCK, libc::F_OFD_SETLK);
            }
            if st.head {
                st.head = false;
                let _ = flock(&self.queue.file, libc::LOCK_UN);
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
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;
    use std::sync::Arc;

    /// No queue off Linux (never constructed).
    pub(crate) struct Queue(());
    pub(crate) struct Ticket(());

    pub(super) fn get(_key: &Path, _create: bool) -> Option<Arc<Queue>> {
        None
    }

    impl Queue {
        pub(crate) fn join(self: &Arc<Self>) -> Ticket {
            Ticket(())
        }
    }

    impl Ticket {
        pub(crate) fn is_head(&self) -> bool {
            true
        }

        pub(crate) async fn starving_from(&self, _at: tokio::time::Instant) {
            std::future::pending::<()>().await
        }

        pub(crate) fn changed(&self) -> std::future::Pending<()> {
            std::future::pending()
        }
    }
}

//! One contender of the contended floor (`bin/file-contended-floor.rs`, and the same protocol behind Node in
//! `node_addon.rs`): the lock's protocol and durability, and nothing else. See the binary's documentation.

use std::ffi::CString;
use std::io::Error;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub fn die(what: &str) -> ! {
    eprintln!(
        "file-contended-floor: {what} failed: {}",
        Error::last_os_error()
    );
    std::process::exit(1)
}

fn check(ret: libc::c_int, what: &str) -> libc::c_int {
    if ret < 0 {
        die(what)
    }
    ret
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub struct Contender {
    dirfd: libc::c_int,
    name: Vec<u8>,
    path: CString,
    counter: libc::c_int,
    inotify: libc::c_int,
    content: Vec<u8>,
    /// Sync the content after the link (the engine's order before issue 24) rather than before the wait.
    sync_after_link: bool,
    /// `fifo`: the queue file whose exclusive `flock` is the line of waiters.
    queue: Option<libc::c_int>,
    /// `cancellable`: the thread that stands in the line for this contender, and the eventfd a
    /// cancel would write (see [`Agent`]).
    agent: Option<(Arc<Agent>, libc::c_int)>,
}

/// The line's cost for a wait that can be cancelled (a timeout, an abort), as the addon's queue
/// pays it: a thread blocked in `flock` cannot hear a cancel, so an agent thread stands in the
/// line for the contender, and the waiting thread's own waits are ones a cancel can end (a
/// condition variable for the agent's word, `poll` of the inotify descriptor beside an eventfd).
/// Per contended acquisition that is two thread wake-ups more than `fifo`, where the waiting
/// thread blocks in `flock` itself: the agent woken to stand in line, and the waiter woken by it
/// at the head. Nothing here is ever cancelled: the row measures what the ability costs.
pub struct Agent {
    queue: libc::c_int,
    state: Mutex<Line>,
    /// Wakes the agent: a waiter wants a place.
    demand: Condvar,
    /// Wakes the waiter: the agent got the head's place.
    changed: Condvar,
}

#[derive(Default)]
struct Line {
    in_line: bool,
    head: bool,
}

impl Agent {
    fn start(queue: libc::c_int) -> Arc<Agent> {
        let agent = Arc::new(Agent {
            queue,
            state: Mutex::new(Line::default()),
            demand: Condvar::new(),
            changed: Condvar::new(),
        });
        let a = agent.clone();
        std::thread::spawn(move || a.run());
        agent
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut line = self.lock();
        loop {
            while !line.in_line {
                line = self
                    .demand
                    .wait(line)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            drop(line);
            // SAFETY: a plain system call on our descriptor.
            check(
                unsafe { libc::flock(self.queue, libc::LOCK_EX) },
                "flock(queue)",
            );
            line = self.lock();
            line.in_line = false;
            line.head = true;
            drop(line);
            self.changed.notify_one();
            line = self.lock();
        }
    }

    /// Returns at the head of the line: at once when the head's place is free, else once the
    /// agent stood in line for it. The wait is timed, as one that checks for a cancel must be
    /// (nothing is cancelled here).
    fn line_up(&self) {
        // SAFETY: as above.
        if unsafe { libc::flock(self.queue, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return;
        }
        let mut line = self.lock();
        line.in_line = true;
        drop(line);
        self.demand.notify_one();
        line = self.lock();
        while !line.head {
            line = self
                .changed
                .wait_timeout(line, Duration::from_millis(100))
                .map(|(l, _)| l)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        line.head = false;
    }
}

impl Contender {
    pub fn open(dir: &str, name: &str, sync_after_link: bool, fifo: bool) -> Contender {
        Contender::open_with(dir, name, sync_after_link, fifo, false)
    }

    /// `cancellable` (with `fifo`): the line stood in by an [`Agent`].
    pub fn open_with(
        dir: &str,
        name: &str,
        sync_after_link: bool,
        fifo: bool,
        cancellable: bool,
    ) -> Contender {
        let dir_c = CString::new(dir).expect("dir has no NUL");
        let path = CString::new(format!("{dir}/{name}")).expect("path has no NUL");
        let counter_path = CString::new(format!("{dir}/{name}.counter")).expect("path has no NUL");
        // SAFETY: plain system calls on NUL-terminated paths we own.
        unsafe {
            let dirfd = check(
                libc::open(dir_c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
                "open(dir)",
            );
            let counter = check(
                libc::open(counter_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC),
                "open(counter)",
            );
            let queue = fifo.then(|| {
                let q = CString::new(format!("{dir}/{name}.queue")).expect("path has no NUL");
                check(
                    libc::open(
                        q.as_ptr(),
                        libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                        0o644,
                    ),
                    "open(queue)",
                )
            });
            let inotify = check(libc::inotify_init1(libc::IN_CLOEXEC), "inotify_init1");
            check(
                libc::inotify_add_watch(
                    inotify,
                    dir_c.as_ptr(),
                    libc::IN_DELETE | libc::IN_MOVED_FROM,
                ),
                "inotify_add_watch",
            );
            let pid = libc::getpid();
            // The engine's content: pid, timestamp, tag, host, start, token (~146 bytes).
            let content = format!(
                "pid={pid}\ntimestamp=2026-01-01T00:00:00.000Z\ntag=bench {pid}\nhost=floor\nstart=123456\ntoken=0123456789abcdef0123456789abcdef\n"
            )
            .into_bytes();
            let agent = match (queue, cancellable) {
                (Some(q), true) => Some((
                    Agent::start(q),
                    check(libc::eventfd(0, libc::EFD_CLOEXEC), "eventfd"),
                )),
                _ => None,
            };
            Contender {
                dirfd,
                name: name.as_bytes().to_vec(),
                path,
                counter,
                inotify,
                content,
                sync_after_link,
                queue,
                agent,
            }
        }
    }

    /// Blocks until an inotify event names the lock (its deletion or rename away).
    fn wait_for_release(&self) {
        let mut buf = [0u8; 4096];
        loop {
            if let Some((_, cancel)) = self.agent {
                // A wait a cancel can end: the eventfd beside the inotify descriptor.
                let mut fds = [
                    libc::pollfd {
                        fd: self.inotify,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: cancel,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // SAFETY: polling descriptors we own, with an array of the length given.
                check(unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) }, "poll");
                if fds[0].revents & libc::POLLIN == 0 {
                    continue;
                }
            }
            // SAFETY: reading into a buffer we own.
            let n = unsafe { libc::read(self.inotify, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                die("read(inotify)")
            }
            let mut off = 0usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            while off + head <= n as usize {
                // SAFETY: the kernel wrote whole events; read_unaligned copes with the byte buffer's alignment.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                let name = &buf[off + head..off + head + ev.len as usize];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if name == self.name.as_slice() {
                    return;
                }
                off += head + ev.len as usize;
            }
        }
    }

    /// Acquire (waiting): returns the lock's descriptor.
    pub fn acquire(&self) -> libc::c_int {
        // SAFETY: plain system calls on descriptors and buffers we own.
        unsafe {
            let fd = check(
                libc::openat(
                    self.dirfd,
                    c".".as_ptr(),
                    libc::O_RDWR | libc::O_CLOEXEC | libc::O_TMPFILE,
                    0o644,
                ),
                "openat(O_TMPFILE)",
            );
            if libc::pwrite(fd, self.content.as_ptr().cast(), self.content.len(), 0) < 0 {
                die("pwrite(lock)")
            }
            if !self.sync_after_link {
                check(libc::fsync(fd), "fsync(lock)");
            }
            match (&self.agent, self.queue) {
                // Behind every process that came first; at the head, wait for the lock itself.
                (Some((agent, _)), _) => agent.line_up(),
                (None, Some(q)) => {
                    check(libc::flock(q, libc::LOCK_EX), "flock(queue)");
                }
                (None, None) => {}
            }
            let proc_path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
            loop {
                let r = libc::linkat(
                    libc::AT_FDCWD,
                    proc_path.as_ptr(),
                    libc::AT_FDCWD,
                    self.path.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                );
                if r == 0 {
                    if self.sync_after_link {
                        check(libc::fsync(fd), "fsync(lock)");
                    }
                    check(libc::fsync(self.dirfd), "fsync(dir)");
                    if let Some(q) = self.queue {
                        check(libc::flock(q, libc::LOCK_UN), "flock(queue, LOCK_UN)");
                    }
                    return fd;
                }
                if Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                    die("linkat")
                }
                self.wait_for_release();
            }
        }
    }

    pub fn work(&self) {
        let mut buf = [0u8; 32];
        // SAFETY: reading and writing buffers we own on our descriptor.
        unsafe {
            let n = libc::pread(self.counter, buf.as_mut_ptr().cast(), buf.len(), 0);
            if n < 0 {
                die("pread(counter)")
            }
            let v: u64 = std::str::from_utf8(&buf[..n as usize])
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            let out = format!("{}\n", v + 1);
            if libc::pwrite(self.counter, out.as_ptr().cast(), out.len(), 0) < 0 {
                die("pwrite(counter)")
            }
        }
    }

    pub fn release(&self, fd: libc::c_int) {
        let mut buf = [0u8; 256];
        // SAFETY: as above.
        unsafe {
            if libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) < 0 {
                die("pread(lock)")
            }
            check(libc::unlink(self.path.as_ptr()), "unlink");
            libc::close(fd);
        }
    }
}

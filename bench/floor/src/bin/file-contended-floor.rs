//! The floor of a contended file lock, for `bench/run.js`: N processes on one lock path, each doing `rounds` times
//! acquire → read a counter file → write it + 1 → release, with the engine's protocol and durability and nothing
//! else: no queue, no heartbeat, no thread, no JS.
//!
//! acquire: `openat(dir, O_RDWR|O_CLOEXEC|O_TMPFILE, 0644)`, `pwrite64` of the lock content, `fsync(fd)`,
//!          `linkat("/proc/self/fd/N" → path, AT_SYMLINK_FOLLOW)`, then `fsync(dirfd)` (the engine's order with
//!          fsync on); `EEXIST` → block in `read()` on an inotify descriptor watching the directory
//!          (`IN_DELETE | IN_MOVED_FROM`) until the lock's name goes, then try again (every waiter is woken by
//!          every release: no queue, no fairness, the cheapest wake-up there is)
//! work:    `pread64` of the counter file, `pwrite64` of the number + 1
//! release: `pread64(fd)` (still our content?), `unlink(path)`, `close(fd)`
//!
//! The parent spawns N copies of itself; each opens everything, prints `ready`, and starts on a `go` line on its
//! stdin (the clock starts once every process is loaded). Each prints its first acquire call and last release on
//! CLOCK_MONOTONIC (one clock for the host) and its CPU time over the rounds; the parent prints one JSON object:
//! ops, seconds (first call → last release), ops/s, CPU µs per hand-off (all processes) and the counter's final
//! value, which must be procs × rounds (a lost update = two holders).
//!
//! Usage: `file-contended-floor <dir> <procs> <rounds> [before|after|fifo]`: `after` syncs the lock content after
//! the link (with the directory), the engine's order before issue 24, instead of before the wait: what that order
//! costs. `fifo` adds the engine's kind of fairness and nothing else: a contender lines up on an exclusive `flock`
//! of a queue file (Linux grants blocked `flock` requests in the order they came) after its lock file is prepared
//! and synced, only the head of the line waits on inotify and links, and it leaves the line once it holds the lock
//! (after the directory's sync), so a process that releases queues behind every waiter: the lock goes to the next
//! process every time, as the addon's FIFO queue hands it. The cost of fairness, measured rather than assumed.
//! `hop` (and `fifo-hop`) make each acquisition on a second thread of the contender, as an addon whose caller must
//! not block (a JS thread) has to: the main thread asks a helper thread (a channel: one wake-up), the helper makes
//! the whole acquisition, syncs included, and answers (a second wake-up); the work and the release stay on the
//! main thread. The least two thread hops per acquisition cost on this machine, with nothing else added.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Error, Write};
use std::process::{Command, Stdio};

fn die(what: &str) -> ! {
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

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Contender {
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
}

impl Contender {
    fn open(dir: &str, name: &str, sync_after_link: bool, fifo: bool) -> Contender {
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
            Contender {
                dirfd,
                name: name.as_bytes().to_vec(),
                path,
                counter,
                inotify,
                content,
                sync_after_link,
                queue,
            }
        }
    }

    /// Blocks until an inotify event names the lock (its deletion or rename away).
    fn wait_for_release(&self) {
        let mut buf = [0u8; 4096];
        loop {
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
    fn acquire(&self) -> libc::c_int {
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
            if let Some(q) = self.queue {
                // Behind every process that came first; at the head, wait for the lock itself.
                check(libc::flock(q, libc::LOCK_EX), "flock(queue)");
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

    fn work(&self) {
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

    fn release(&self, fd: libc::c_int) {
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

/// This process's CPU time (user + system, µs) and its voluntary and involuntary context switches, all its threads
/// (one, or two with `hop`: the voluntary ones are its sleeps in `read(inotify)`, `flock` and the disk's syncs, and
/// with `hop` the two threads' waits for each other).
fn usage() -> [u64; 3] {
    // SAFETY: an all-zero rusage is a valid value; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    [
        us(ru.ru_utime) + us(ru.ru_stime),
        ru.ru_nvcsw as u64,
        ru.ru_nivcsw as u64,
    ]
}

fn child(dir: &str, name: &str, rounds: u64, order: &str) {
    let fifo = order == "fifo" || order == "fifo-hop";
    let c = std::sync::Arc::new(Contender::open(dir, name, order == "after", fifo));
    // `hop`: the acquisitions are made by a helper thread, asked and answered over channels.
    let helper = order.ends_with("hop").then(|| {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (answer, answered) = std::sync::mpsc::channel::<libc::c_int>();
        let h = c.clone();
        std::thread::spawn(move || {
            for () in asked {
                if answer.send(h.acquire()).is_err() {
                    break;
                }
            }
        });
        (ask, answered)
    });
    println!("ready");
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() || line.trim() != "go" {
        std::process::exit(1)
    }
    let start = now_ns();
    let u0 = usage();
    for _ in 0..rounds {
        let fd = match &helper {
            Some((ask, answered)) => {
                if ask.send(()).is_err() {
                    die("ask the helper")
                }
                answered.recv().unwrap_or_else(|_| die("hear the helper"))
            }
            None => c.acquire(),
        };
        c.work();
        c.release(fd);
    }
    let u1 = usage();
    println!(
        "done {start} {} {} {} {}",
        now_ns(),
        u1[0] - u0[0],
        u1[1] - u0[1],
        u1[2] - u0[2]
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 6 && args[1] == "--child" {
        let rounds = args[4].parse().unwrap_or_else(|_| std::process::exit(2));
        return child(&args[2], &args[3], rounds, &args[5]);
    }
    let order = args.get(4).map(String::as_str).unwrap_or("before");
    let orders = ["before", "after", "fifo", "hop", "fifo-hop"];
    if !(4..=5).contains(&args.len()) || !orders.contains(&order) {
        eprintln!(
            "usage: file-contended-floor <dir> <procs> <rounds> [before|after|fifo|hop|fifo-hop]"
        );
        std::process::exit(2)
    }
    let (dir, procs, rounds): (&str, usize, u64) = (
        &args[1],
        args[2].parse().unwrap_or_else(|_| std::process::exit(2)),
        args[3].parse().unwrap_or_else(|_| std::process::exit(2)),
    );
    let name = format!("floor-{}.lock", std::process::id());
    let counter = format!("{dir}/{name}.counter");
    if std::fs::write(&counter, "0\n").is_err() {
        die("write(counter)")
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| die("current_exe"));
    let mut children: Vec<_> = (0..procs)
        .map(|_| {
            Command::new(&exe)
                .args(["--child", dir, &name, &rounds.to_string(), order])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|_| die("spawn"))
        })
        .collect();
    let mut outs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("piped")))
        .collect();
    for out in &mut outs {
        let mut line = String::new();
        if out.read_line(&mut line).is_err() || line.trim() != "ready" {
            eprintln!("file-contended-floor: a child did not get ready");
            std::process::exit(1)
        }
    }
    for c in &mut children {
        let _ = c.stdin.as_mut().expect("piped").write_all(b"go\n");
    }
    let (mut first, mut last, mut cpu, mut vcsw, mut ivcsw) = (u64::MAX, 0u64, 0u64, 0u64, 0u64);
    for out in &mut outs {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let parts: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|s| s.parse().ok())
            .collect();
        if parts.len() != 5 {
            eprintln!("file-contended-floor: a child failed");
            std::process::exit(1)
        }
        first = first.min(parts[0]);
        last = last.max(parts[1]);
        cpu += parts[2];
        vcsw += parts[3];
        ivcsw += parts[4];
    }
    for c in &mut children {
        let _ = c.wait();
    }
    let final_count: u64 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::fs::remove_file(&counter);
    let _ = std::fs::remove_file(format!("{dir}/{name}.queue"));
    let ops = procs as u64 * rounds;
    let seconds = (last - first) as f64 / 1e9;
    println!(
        "{{\"procs\":{procs},\"rounds\":{rounds},\"ops\":{ops},\"seconds\":{seconds},\"opsPerSec\":{},\"counter\":{final_count},\"lostUpdates\":{},\"cpuUsPerOp\":{},\"vcswPerOp\":{},\"ivcswPerOp\":{}}}",
        ops as f64 / seconds,
        ops.saturating_sub(final_count),
        cpu as f64 / ops as f64,
        vcsw as f64 / ops as f64,
        ivcsw as f64 / ops as f64
    );
}

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

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use sema_bench_floor::contended::{die, now_ns, Contender};

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

//! The raw syscall floor of one file-lock acquire + release cycle, for `bench/run.js`.
//!
//! Each cycle makes, with nothing else around them, the system calls the sema-native engine needs for one
//! `tryAcquire()` + `release()` on Linux, in the engine's order and with its flags (read off
//! `strace -f -e trace=file,desc` of the addon, see bench/README.md):
//!
//! acquire: `openat(dir, O_RDWR|O_CLOEXEC|O_TMPFILE, 0644)`, `pwrite64(fd, content, 0)`, [`fsync(fd)`],
//!          `flock(fd, LOCK_SH)`, `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, path, AT_SYMLINK_FOLLOW)`,
//!          [`openat(dir, O_RDONLY|O_CLOEXEC)`, `fsync(dirfd)`, `close(dirfd)`], `fstat(fd)`
//! release: `stat(path)` (still our inode?), `pread64(fd)` (still our content?), `unlink(path)`, `close(fd)`
//!
//! The engine makes more calls than these (an extra open/read/close of the path and a repeated stat + read in
//! the sync release, an end-of-file `pread` after each read); bench/README.md lists them. The floor is the
//! minimum the design needs, so "time ÷ floor" shows what everything above the kernel costs.
//!
//! Mode `engine` adds exactly those extra calls (per cycle: `getpid` ×2, `getrandom(16)`, `open`+`fstat`+
//! `pread`×2+`close` of the path, a second `stat(path)` + `pread`×2, and an end-of-file `pread` after each
//! read): the kernel cost of the engine's actual sequence, without any of its user-space work.
//!
//! Usage: `sema-bench-floor <dir> <cycles> <fsync 0|1> [warmup cycles] [max seconds] [floor|engine]`
//! (stops after `cycles` or `max seconds`, whichever comes first).
//! Prints one JSON object: cycles, seconds, ops/s and per-cycle latency percentiles in microseconds.

use std::ffi::CString;
use std::io::Error;
use std::time::Instant;

fn check(ret: libc::c_int, what: &str) -> libc::c_int {
    if ret < 0 {
        eprintln!("{what} failed: {}", Error::last_os_error());
        std::process::exit(1);
    }
    ret
}

fn check_size(ret: libc::ssize_t, what: &str) -> usize {
    if ret < 0 {
        eprintln!("{what} failed: {}", Error::last_os_error());
        std::process::exit(1);
    }
    ret as usize
}

struct Floor {
    dir: CString,
    path: CString,
    content: Vec<u8>,
    fsync: bool,
    /// Also make the calls the engine makes beyond the minimum (mode `engine`).
    engine_extras: bool,
}

/// `pread` until end of file, as Rust's `read_to_end` does: the read, then one more that returns 0.
unsafe fn read_to_eof(fd: libc::c_int, buf: &mut [u8]) -> usize {
    let got = check_size(
        libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0),
        "pread",
    );
    check_size(
        libc::pread(
            fd,
            buf[got..].as_mut_ptr().cast(),
            buf.len() - got,
            got as libc::off_t,
        ),
        "pread(eof)",
    );
    got
}

impl Floor {
    /// One acquire + release cycle.
    fn cycle(&self) {
        // SAFETY: plain system calls on valid, NUL-terminated paths and live buffers we own.
        unsafe {
            if self.engine_extras {
                // the engine's per-acquire getpid() and getrandom() for the token
                libc::getpid();
                let mut token = [0u8; 16];
                libc::getrandom(token.as_mut_ptr().cast(), token.len(), 0);
            }
            let fd = check(
                libc::open(
                    self.dir.as_ptr(),
                    libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                    0o644 as libc::c_uint,
                ),
                "open(O_TMPFILE)",
            );
            let n = check_size(
                libc::pwrite(fd, self.content.as_ptr().cast(), self.content.len(), 0),
                "pwrite",
            );
            assert_eq!(n, self.content.len(), "short write");
            if self.fsync {
                check(libc::fsync(fd), "fsync");
            }
            check(libc::flock(fd, libc::LOCK_SH), "flock");
            let proc_path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL");
            check(
                libc::linkat(
                    libc::AT_FDCWD,
                    proc_path.as_ptr(),
                    libc::AT_FDCWD,
                    self.path.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                ),
                "linkat",
            );
            if self.fsync {
                let dfd = check(
                    libc::open(self.dir.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
                    "open(dir)",
                );
                check(libc::fsync(dfd), "fsync(dir)");
                libc::close(dfd);
            }
            let mut fst: libc::stat = std::mem::zeroed();
            check(libc::fstat(fd, &mut fst), "fstat");

            // release
            let mut buf = [0u8; 4096];
            if self.engine_extras {
                // sync release(): getpid(), then the path is opened and read to learn the owner pid ...
                libc::getpid();
                let pfd = check(
                    libc::open(
                        self.path.as_ptr(),
                        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
                    ),
                    "open(path)",
                );
                let mut pst: libc::stat = std::mem::zeroed();
                check(libc::fstat(pfd, &mut pst), "fstat(path fd)");
                read_to_eof(pfd, &mut buf);
                libc::close(pfd);
                // ... and the ownership check (stat + read of the held fd) runs twice
                let mut st: libc::stat = std::mem::zeroed();
                check(libc::stat(self.path.as_ptr(), &mut st), "stat");
                read_to_eof(fd, &mut buf);
            }
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::stat(self.path.as_ptr(), &mut st), "stat");
            assert_eq!(st.st_ino, fst.st_ino, "the path names another inode");
            let got = if self.engine_extras {
                read_to_eof(fd, &mut buf)
            } else {
                check_size(
                    libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0),
                    "pread",
                )
            };
            assert_eq!(&buf[..got], &self.content[..], "content changed");
            check(libc::unlink(self.path.as_ptr()), "unlink");
            libc::close(fd);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!(
            "usage: {} <dir> <cycles> <fsync 0|1> [warmup] [max seconds]",
            args[0]
        );
        std::process::exit(2);
    }
    let dir = args[1].clone();
    let cycles: usize = args[2].parse().expect("cycles must be an integer");
    let fsync = args[3] == "1";
    let warmup: usize = args
        .get(4)
        .map_or(200, |w| w.parse().expect("warmup must be an integer"));
    let max_secs: f64 = args.get(5).map_or(f64::INFINITY, |s| {
        s.parse().expect("max seconds must be a number")
    });
    let engine_extras = match args.get(6).map(String::as_str) {
        None | Some("floor") => false,
        Some("engine") => true,
        Some(other) => panic!("mode must be floor or engine, got {other}"),
    };

    let path = format!("{dir}/floor-{}.lock", std::process::id());
    // A lock file as the engine writes it: pid, timestamp, tag, host, start, token (~150 bytes).
    let content = format!(
        "pid={}\ntimestamp={}\ntag=bench\nhost=vm:0123456789abcdef0123456789abcdef:4026531836\nstart=1234567\ntoken={:032x}\n",
        std::process::id(),
        1_763_800_000u64,
        0x9f86_d081_884c_7d65_9a2f_eaa0_c55a_d015u128
    )
    .into_bytes();
    let floor = Floor {
        dir: CString::new(dir).expect("no NUL in dir"),
        path: CString::new(path).expect("no NUL in path"),
        content,
        fsync,
        engine_extras,
    };

    for _ in 0..warmup {
        floor.cycle();
    }
    let mut lat = Vec::with_capacity(cycles);
    let start = Instant::now();
    while lat.len() < cycles {
        let t = Instant::now();
        floor.cycle();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        if lat.len() % 16 == 0 && start.elapsed().as_secs_f64() >= max_secs {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cycles = lat.len();
    lat.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    println!(
        "{{\"cycles\":{cycles},\"seconds\":{secs:.6},\"opsPerSec\":{:.1},\"meanUs\":{mean:.2},\"p50Us\":{:.2},\"p99Us\":{:.2},\"contentBytes\":{}}}",
        cycles as f64 / secs,
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        floor.content.len()
    );
}

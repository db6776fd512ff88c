//! The least a dflockd client can cost on this machine: lock (`l`) + release (`r`) round trips
//! on one blocking std `TcpStream` per worker, one OS thread per worker, no runtime, no
//! allocation per round trip beyond the reply line. Same shape and output as bench/go-netloop:
//!
//!   dflockd-floor <host:port> <workers> <seconds>
//!
//! prints {ops, seconds, opsPerSec, meanMs, p50Ms, p99Ms, cpuUsPerOp, switchesPerOp} (one op = one
//! l + r pair; CPU and context switches of the whole process from getrusage).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn usage() -> ! {
    eprintln!("usage: dflockd-floor <host:port> <workers> <seconds>");
    std::process::exit(2)
}

struct Worker {
    w: TcpStream,
    r: BufReader<TcpStream>,
    key: String,
    line: String,
    req: Vec<u8>,
}

impl Worker {
    fn connect(addr: &str, i: usize) -> std::io::Result<Worker> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Ok(Worker {
            r: BufReader::new(s.try_clone()?),
            w: s,
            key: format!("bench_floor{i}_{}", 100000 + nanos % 9_900_000),
            line: String::with_capacity(128),
            req: Vec::with_capacity(128),
        })
    }

    fn request(&mut self, cmd: &str, arg: &str) -> std::io::Result<()> {
        self.req.clear();
        write!(self.req, "{cmd}\n{}\n{arg}\n", self.key)?;
        self.w.write_all(&self.req)?;
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            return Err(std::io::Error::other("server closed the connection"));
        }
        Ok(())
    }

    fn round(&mut self) -> std::io::Result<()> {
        self.request("l", "30 10")?;
        let token = match self.line.trim_end().split(' ').collect::<Vec<_>>()[..] {
            ["ok", token, _] => token.to_string(),
            _ => {
                return Err(std::io::Error::other(format!(
                    "l: unexpected reply {:?}",
                    self.line
                )))
            }
        };
        self.request("r", &token)?;
        if self.line.trim_end() != "ok" {
            return Err(std::io::Error::other(format!(
                "r: unexpected reply {:?}",
                self.line
            )));
        }
        Ok(())
    }
}

/// (user + system CPU µs, voluntary + involuntary context switches) of this process.
fn usage_now() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (
        us(ru.ru_utime) + us(ru.ru_stime),
        (ru.ru_nvcsw + ru.ru_nivcsw) as f64,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        usage()
    }
    let addr = args[1].clone();
    let workers: usize = args[2].parse().unwrap_or_else(|_| usage());
    let seconds: f64 = args[3].parse().unwrap_or_else(|_| usage());
    let mut ws = Vec::new();
    for i in 0..workers {
        match Worker::connect(&addr, i) {
            Ok(w) => ws.push(w),
            Err(e) => {
                eprintln!("connect {addr}: {e}");
                std::process::exit(1)
            }
        }
    }
    for w in &mut ws {
        if let Err(e) = w.round() {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
    let (cpu0, sw0) = usage_now();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = ws
        .into_iter()
        .map(|mut w| {
            std::thread::spawn(move || -> std::io::Result<Vec<f64>> {
                let mut lat = Vec::with_capacity(1 << 16);
                loop {
                    let t = Instant::now();
                    w.round()?;
                    let t1 = Instant::now();
                    lat.push((t1 - t).as_secs_f64() * 1e3);
                    if t1 >= end {
                        return Ok(lat);
                    }
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(l)) => lat.extend(l),
            Ok(Err(e)) => {
                eprintln!("{e}");
                std::process::exit(1)
            }
            Err(_) => std::process::exit(1),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, sw1) = usage_now();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        if lat.is_empty() {
            return 0.0;
        }
        let rank = p / 100.0 * (lat.len() - 1) as f64;
        let lo = rank as usize;
        let hi = (lo + 1).min(lat.len() - 1);
        lat[lo] + (lat[hi] - lat[lo]) * (rank - lo as f64)
    };
    let n = lat.len() as f64;
    println!(
        "{{\"ops\":{n},\"seconds\":{secs},\"opsPerSec\":{},\"meanMs\":{},\"p50Ms\":{},\"p99Ms\":{},\"cpuUsPerOp\":{},\"switchesPerOp\":{}}}",
        n / secs,
        lat.iter().sum::<f64>() / n,
        pct(50.0),
        pct(99.0),
        (cpu1 - cpu0) / n,
        (sw1 - sw0) / n
    );
}

//! The idle connections of the whole process, shared by every [`Primitive`](super::Primitive):
//! after a clean release a connection goes here, and the next acquisition with the same
//! connection settings takes it instead of connecting again.
//!
//! Bounded both ways, so that code creating a lock object per request (acquire, release, never
//! `close()`) holds a handful of sockets, not one per object until the server's idle timeout:
//! at most [`MAX_IDLE_PER_SERVER`] idle connections per server and settings (a release that finds
//! the set full closes its connection), each closed after [`IDLE_TTL`] unused. The reaper is a
//! short-lived thread that ends when the pool is empty, and never keeps a Node process alive.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::connection::{ConnectOptions, Connection};

/// Idle connections kept per server and settings: a burst of up to this many concurrent
/// acquire/release loops on one server never reconnects (measured, 100 `DistributedLock`s in
/// parallel on the Go server: 9.4 k pairs/s with 4, 18.2 k with 64, the rest spent reconnecting),
/// while what a burst leaves behind is still bounded, and gone after [`IDLE_TTL`].
pub const MAX_IDLE_PER_SERVER: usize = 64;
/// How long an idle connection is kept: far below the server's 23 s default read timeout (the
/// server would close it then), and long enough to carry a request-per-second pattern.
pub const IDLE_TTL: Duration = Duration::from_secs(2);

struct Idle {
    conn: Connection,
    since: Instant,
}

struct Pool {
    /// Per distinct connection settings (a few per process: a linear scan is the cheapest).
    servers: Vec<(ConnectOptions, Vec<Idle>)>,
    reaper_running: bool,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    servers: Vec::new(),
    reaper_running: false,
});

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The most recently returned idle connection for `opts`, if any (the caller still checks it
/// with [`Connection::is_reusable`]: the server may have closed it meanwhile).
pub fn take(opts: &ConnectOptions) -> Option<Connection> {
    let mut p = pool();
    let (_, idle) = p.servers.iter_mut().find(|(o, _)| o == opts)?;
    idle.pop().map(|i| i.conn)
}

/// Return a connection that holds nothing after a clean release. Closed at once when `opts`
/// already has [`MAX_IDLE_PER_SERVER`] idle ones, else closed by the reaper after [`IDLE_TTL`].
pub fn put(opts: &ConnectOptions, conn: Connection) {
    let start_reaper = {
        let mut p = pool();
        let idx = match p.servers.iter().position(|(o, _)| o == opts) {
            Some(i) => i,
            None => {
                p.servers
                    .push((opts.clone(), Vec::with_capacity(MAX_IDLE_PER_SERVER)));
                p.servers.len() - 1
            }
        };
        let idle = &mut p.servers[idx].1;
        if idle.len() >= MAX_IDLE_PER_SERVER {
            return; // `conn` is dropped: closed
        }
        idle.push(Idle {
            conn,
            since: Instant::now(),
        });
        !std::mem::replace(&mut p.reaper_running, true)
    };
    if start_reaper
        && std::thread::Builder::new()
            .name("dflockd-pool".into())
            .spawn(reap)
            .is_err()
    {
        // No thread: the connections stay until the next `put` tries again (still bounded).
        pool().reaper_running = false;
    }
}

/// Number of idle connections held now for `opts` (for tests and stats).
pub fn idle_count(opts: &ConnectOptions) -> usize {
    pool()
        .servers
        .iter()
        .find(|(o, _)| o == opts)
        .map_or(0, |(_, idle)| idle.len())
}

/// Closes connections idle for [`IDLE_TTL`]; ends when the pool is empty (the next `put`
/// starts a new one). A plain thread, not a task: it needs no runtime, so it works whichever
/// runtime (or none) the connections came from, and a thread never keeps a Node process alive.
fn reap() {
    loop {
        let next = {
            let mut p = pool();
            let now = Instant::now();
            for (_, idle) in p.servers.iter_mut() {
                idle.retain(|i| now.duration_since(i.since) < IDLE_TTL);
            }
            p.servers.retain(|(_, idle)| !idle.is_empty());
            let oldest = p
                .servers
                .iter()
                .flat_map(|(_, idle)| idle.iter().map(|i| i.since))
                .min();
            match oldest {
                Some(t) => t + IDLE_TTL,
                None => {
                    // Cleared under the lock that saw the pool empty: a `put` after this starts
                    // a new reaper.
                    p.reaper_running = false;
                    return;
                }
            }
        };
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

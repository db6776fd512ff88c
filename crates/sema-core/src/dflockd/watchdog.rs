//! The renew watchdog of locks whose I/O a caller drives on its own thread (the binding's
//! event-loop driver): when that thread is late for a renew (JavaScript blocked in an
//! `execSync`, a long synchronous loop), one process-wide thread writes the renew on the same
//! socket, so neither the lease nor the server's per-connection idle limit (23 s) runs out
//! while the holder cannot run.
//!
//! The watchdog only writes. Each connection has a [`Slot`]: a duplicate of its socket (plain
//! TCP), the renew line of the lock it holds, when that is due, and the order in which requests
//! went on the wire ([`Sender`]), so that the caller, reading the replies in that order, knows
//! which one answers a renew the watchdog sent (and when it was sent: the lease clock starts
//! then). Every write the caller makes goes through [`Slot::js_write`], under the slot's mutex:
//! the watchdog never writes inside a line, and a line of its own left half-written (the socket
//! buffer full) is completed by the caller's next write, ahead of the caller's bytes.
//!
//! The thread is named `sema-dflockd-watchdog`, started at the first [`ensure_running`], and
//! sleeps on a condition variable until the earliest deadline it knows of an armed slot. A caller
//! renewing on time moves its deadline later without notifying the thread, which still wakes at
//! the deadline it had planned, finds nothing due and sleeps on: no request (counted by
//! [`renews_sent`]) and no notification per renew, but one idle wake-up per renew (measured: 5
//! voluntary context switches of the thread in 6 s at a 2 s lease, 0 renews). It is not a libuv
//! handle and never keeps the process alive. Should it die (a panic), it is started again at the
//! next [`ensure_running`] or arming; until then a late holder has no watchdog, as when the OS
//! refuses the thread.

use std::collections::VecDeque;
use std::io::{self, Write as _};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How soon the watchdog tries again when it could not write (the socket buffer full, or the
/// caller's own request half-written).
const RETRY: Duration = Duration::from_millis(10);

/// Who sent a request that is on the wire, its reply not read yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// The caller.
    Js,
    /// The watchdog, a renew written at this instant.
    Watchdog(Instant),
}

/// What an armed slot renews, and how often.
struct Armed {
    /// The encoded renew request (`n`/`sn` with the key, token and TTL).
    line: Vec<u8>,
    /// The lease clock's renew interval.
    interval: Duration,
    /// How late the caller may be before the watchdog renews in its stead.
    grace: Duration,
}

struct SlotState {
    /// The duplicate socket; `None` once closed (the registry then drops the slot).
    sock: Option<TcpStream>,
    armed: Option<Armed>,
    /// When the last renew (or the grant) was sent, by anyone.
    last_sent: Instant,
    /// Requests on the wire, oldest first.
    inflight: VecDeque<Sender>,
    /// The caller's last request is not all written yet (it flushes when writable).
    js_partial: bool,
    /// The unwritten tail of a watchdog renew.
    pending: Vec<u8>,
}

impl SlotState {
    fn deadline(&self) -> Option<Instant> {
        let a = self.armed.as_ref()?;
        self.sock.as_ref()?;
        Some(self.last_sent + a.interval + a.grace)
    }
}

struct SlotInner {
    state: Mutex<SlotState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's watchdog slot (see the module comment). Dropping it closes the duplicate
/// socket at once (so closing the connection really closes it) and unregisters it.
pub struct Slot {
    inner: Arc<SlotInner>,
}

impl Slot {
    /// A slot for the connection on `socket` (its duplicate is taken now), registered with the
    /// watchdog (see [`ensure_running`]), disarmed.
    pub fn new(socket: &TcpStream) -> io::Result<Slot> {
        let sock = socket.try_clone()?;
        // The watchdog's writes must never block (it holds the registry's and the slot's locks
        // while it writes): the duplicate shares the original's mode on Unix, but on Windows a
        // duplicated socket may not carry it.
        sock.set_nonblocking(true)?;
        let inner = Arc::new(SlotInner {
            state: Mutex::new(SlotState {
                sock: Some(sock),
                armed: None,
                last_sent: Instant::now(),
                inflight: VecDeque::new(),
                js_partial: false,
                pending: Vec::new(),
            }),
        });
        lock(&registry().reg).slots.push(inner.clone());
        Ok(Slot { inner })
    }

    /// Renew with `line` every `interval` from `last_sent` (the grant's send instant; re-armed,
    /// the last renew's, if later than one the slot knows), once the caller is `grace` late.
    pub fn arm(&self, line: &[u8], interval: Duration, grace: Duration, last_sent: Instant) {
        let deadline = {
            let mut st = lock(&self.inner.state);
            if st.armed.is_none() {
                // A new hold: its clock starts at its grant.
                st.last_sent = last_sent;
            }
            let a = st.armed.get_or_insert_with(|| Armed {
                line: Vec::new(),
                interval,
                grace,
            });
            a.line.clear();
            a.line.extend_from_slice(line);
            a.interval = interval;
            a.grace = grace;
            if last_sent > st.last_sent {
                st.last_sent = last_sent;
            }
            st.deadline()
        };
        if let Some(d) = deadline {
            registry().wake_by(d);
        }
    }

    /// Renew nothing any more (a release is about to be written, the lock is lost, or the
    /// connection goes idle). Replies still due are still told apart.
    pub fn disarm(&self) {
        lock(&self.inner.state).armed = None;
    }

    /// Whether the slot is disarmed with no reply due: the connection may go to the idle pool.
    pub fn is_idle(&self) -> bool {
        let st = lock(&self.inner.state);
        st.armed.is_none() && st.inflight.is_empty() && st.pending.is_empty() && !st.js_partial
    }

    /// Start a write of the caller's: the watchdog writes nothing until it is dropped.
    pub fn js_write(&self) -> JsWrite<'_> {
        JsWrite {
            st: lock(&self.inner.state),
        }
    }

    /// The caller's half-written request is now all out.
    pub fn js_flushed(&self) {
        lock(&self.inner.state).js_partial = false;
    }

    /// Who sent the request the next reply answers (`None`: nothing is on the wire).
    pub fn reply_sender(&self) -> Option<Sender> {
        lock(&self.inner.state).inflight.pop_front()
    }

    /// Whether a renew the watchdog sent is still unanswered (its reply may be waiting unread).
    pub fn watchdog_reply_due(&self) -> bool {
        lock(&self.inner.state)
            .inflight
            .iter()
            .any(|s| matches!(s, Sender::Watchdog(_)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let sock = {
            let mut st = lock(&self.inner.state);
            st.armed = None;
            st.sock.take()
        };
        drop(sock);
        let mut reg = lock(&registry().reg);
        reg.slots.retain(|s| !Arc::ptr_eq(s, &self.inner));
    }
}

/// A write of the caller's in progress (see [`Slot::js_write`]).
pub struct JsWrite<'a> {
    st: MutexGuard<'a, SlotState>,
}

impl JsWrite<'_> {
    /// Put the watchdog's unwritten bytes, if any, before `buf` (which holds the caller's
    /// request): they must go on the wire first.
    pub fn prepend_pending(&mut self, buf: &mut Vec<u8>) {
        if !self.st.pending.is_empty() {
            let pending = std::mem::take(&mut self.st.pending);
            buf.splice(0..0, pending);
        }
    }

    /// The caller's request went on the wire (`complete`: all of it; else it calls
    /// [`Slot::js_flushed`] once it is). `renew_sent`: it was a renew, sent then.
    pub fn sent(mut self, complete: bool, renew_sent: Option<Instant>) {
        self.st.inflight.push_back(Sender::Js);
        self.st.js_partial = !complete;
        if let Some(t) = renew_sent {
            if t > self.st.last_sent {
                self.st.last_sent = t;
            }
        }
    }
}

static RENEWS: AtomicU64 = AtomicU64::new(0);

/// How many renews the watchdog has written in this process (for tests: 0 while every holder's
/// thread renews on time).
pub fn renews_sent() -> u64 {
    RENEWS.load(Ordering::Relaxed)
}

struct Reg {
    slots: Vec<Arc<SlotInner>>,
    /// When the thread wakes next (`None`: only when told).
    planned: Option<Instant>,
    started: bool,
}

struct Registry {
    reg: Mutex<Reg>,
    wake: Condvar,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        reg: Mutex::new(Reg {
            slots: Vec::new(),
            planned: None,
            started: false,
        }),
        wake: Condvar::new(),
    })
}

impl Registry {
    /// Make sure the thread wakes by `at`: a notification only when it planned to sleep longer
    /// (so a holder renewing on time, or acquiring again, notifies nobody; the thread still
    /// wakes at the earlier instant it planned, finds nothing due and sleeps on). Starts the
    /// thread again if it died.
    fn wake_by(&self, at: Instant) {
        let mut reg = lock(&self.reg);
        if !reg.started {
            // Best effort: without it, the holder renews on its own thread only.
            let _ = start(&mut reg);
        }
        if reg.planned.is_none_or(|p| at < p) {
            reg.planned = Some(at);
            self.wake.notify_one();
        }
    }
}

/// Start the watchdog thread if it is not running. Without it (the OS refused a thread) the
/// caller must not drive locks on its own thread.
pub fn ensure_running() -> io::Result<()> {
    let r = registry();
    let mut reg = lock(&r.reg);
    if reg.started {
        return Ok(());
    }
    start(&mut reg)
}

/// Spawn the thread (`reg`: the registry, locked, not started). Should `run` panic, `started`
/// goes back to false, so that the next [`ensure_running`] or arming starts it again instead of
/// every later holder counting on a thread that is gone.
fn start(reg: &mut Reg) -> io::Result<()> {
    std::thread::Builder::new()
        .name("sema-dflockd-watchdog".into())
        .spawn(|| {
            let r = registry();
            let died = std::panic::catch_unwind(|| run(r));
            if died.is_err() {
                lock(&r.reg).started = false;
            }
        })?;
    reg.started = true;
    Ok(())
}

fn run(r: &Registry) {
    let mut reg = lock(&r.reg);
    loop {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        reg.slots.retain(|s| {
            let mut st = lock(&s.state);
            if st.sock.is_none() {
                return false;
            }
            let at = visit(&mut st, now);
            if let Some(at) = at {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            true
        });
        reg.planned = next;
        reg = match next {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                r.wake
                    .wait_timeout(reg, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => r.wake.wait(reg).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

/// Look at a slot at `now`: write its renew if due, or the tail of one left half-written (whatever
/// the deadline: the renew's `last_sent` moved a full interval ahead when it was sent). Returns
/// when to look at it next.
fn visit(st: &mut SlotState, now: Instant) -> Option<Instant> {
    match st.deadline() {
        _ if !st.pending.is_empty() => renew(st, now),
        Some(d) if d <= now => renew(st, now),
        d => d,
    }
}

/// The slot's renew is due: write it (or what is left of it) unless the caller's own request
/// is half-written. Returns when to look at the slot next.
fn renew(st: &mut SlotState, now: Instant) -> Option<Instant> {
    if st.js_partial {
        return Some(now + RETRY);
    }
    let sock = st.sock.as_ref()?;
    if st.pending.is_empty() {
        let line = st.armed.as_ref()?.line.clone();
        match write_some(sock, &line) {
            Ok(0) => return Some(now + RETRY),
            Ok(n) => {
                RENEWS.fetch_add(1, Ordering::Relaxed);
                st.inflight.push_back(Sender::Watchdog(now));
                st.last_sent = now;
                st.pending.extend_from_slice(&line[n..]);
            }
            Err(_) => {
                // The connection is broken: the caller finds out reading it.
                st.armed = None;
                return None;
            }
        }
    } else {
        match write_some(sock, &st.pending) {
            Ok(n) => {
                st.pending.drain(..n);
            }
            Err(_) => {
                st.armed = None;
                return None;
            }
        }
    }
    if !st.pending.is_empty() {
        return Some(now + RETRY);
    }
    st.deadline()
}

/// One non-blocking write (the socket is non-blocking: the duplicate shares that flag): the
/// count written, 0 when it would block.
fn write_some(mut sock: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match sock.write(bytes) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead as _, BufReader};
    use std::net::TcpListener;

    fn pair() -> (TcpStream, BufReader<TcpStream>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        client.set_nonblocking(true).unwrap();
        let (server, _) = l.accept().unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (client, BufReader::new(server))
    }

    #[test]
    fn renews_once_the_caller_is_late_and_the_caller_reads_whose_reply_it_is() {
        ensure_running().unwrap();
        let (client, mut server) = pair();
        let slot = Slot::new(&client).unwrap();
        // Sent 10 s ago, renewed every 10 s: due now plus the 50 ms grace, then in 10 s.
        let t0 = Instant::now();
        let interval = Duration::from_secs(10);
        slot.arm(
            b"n\nk\ntok 2\n",
            interval,
            Duration::from_millis(50),
            t0 - interval,
        );
        let mut line = String::new();
        server.read_line(&mut line).unwrap();
        assert_eq!(line, "n\n");
        assert!(t0.elapsed() >= Duration::from_millis(50));
        line.clear();
        server.read_line(&mut line).unwrap();
        server.read_line(&mut line).unwrap();
        assert_eq!(line, "k\ntok 2\n");
        slot.disarm();
        // The caller's own request, after: its reply comes second.
        let w = slot.js_write();
        (&client).write_all(b"r\nk\ntok\n").unwrap();
        w.sent(true, None);
        assert!(matches!(slot.reply_sender(), Some(Sender::Watchdog(t)) if t >= t0));
        assert_eq!(slot.reply_sender(), Some(Sender::Js));
        assert_eq!(slot.reply_sender(), None);
        assert!(slot.is_idle());
    }

    #[test]
    fn a_half_written_renew_s_tail_goes_out_before_the_next_deadline() {
        let (client, mut server) = pair();
        let now = Instant::now();
        // The head of a renew went out just now (so its deadline is an interval ahead); its tail
        // must not wait for that deadline.
        let mut st = SlotState {
            sock: Some(client),
            armed: Some(Armed {
                line: b"n\nk\ntok 2\n".to_vec(),
                interval: Duration::from_secs(10),
                grace: Duration::from_millis(50),
            }),
            last_sent: now,
            inflight: VecDeque::from([Sender::Watchdog(now)]),
            js_partial: false,
            pending: b"tok 2\n".to_vec(),
        };
        let next = visit(&mut st, now);
        assert!(st.pending.is_empty());
        assert_eq!(next, Some(now + Duration::from_millis(10_050)));
        let mut line = String::new();
        server.read_line(&mut line).unwrap();
        assert_eq!(line, "tok 2\n");
    }

    #[test]
    fn a_slot_s_duplicate_socket_is_non_blocking() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        // A blocking original: the duplicate is made non-blocking all the same.
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _server = l.accept().unwrap();
        // Only a guard against hanging: a blocking read would wait these 5 s.
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let slot = Slot::new(&client).unwrap();
        let st = lock(&slot.inner.state);
        let mut buf = [0u8; 1];
        let t0 = Instant::now();
        let r = std::io::Read::read(&mut st.sock.as_ref().unwrap(), &mut buf);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(t0.elapsed() < Duration::from_secs(4), "the read blocked");
    }

    #[test]
    fn writes_nothing_while_the_caller_renews_on_time_or_is_half_written() {
        ensure_running().unwrap();
        let (client, mut server) = pair();
        let slot = Slot::new(&client).unwrap();
        // Renewing every 50 ms against a 200 ms interval and a 200 ms grace: never late.
        let interval = Duration::from_millis(200);
        slot.arm(b"n\nk\ntok 2\n", interval, interval, Instant::now());
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(50));
            let w = slot.js_write();
            (&client).write_all(b"n\nk\ntok 2\n").unwrap();
            w.sent(true, Some(Instant::now()));
            assert_eq!(slot.reply_sender(), Some(Sender::Js));
        }
        // Half-written: the watchdog waits for the flush even though it is due.
        let w = slot.js_write();
        w.sent(false, None);
        std::thread::sleep(interval * 3);
        // (past its deadline, it retries every 10 ms and finds the caller's write unfinished)
        assert!(!slot.watchdog_reply_due());
        slot.js_flushed();
        drop(slot);
        // Closed: the duplicate is gone; only the caller's five renews were written.
        drop(client);
        let mut all = String::new();
        while server.read_line(&mut all).unwrap() > 0 {}
        assert_eq!(all.matches("n\n").count(), 5, "{all:?}");
    }
}

//! A simulated client process running the core's real code, not a copy: requests encoded by
//! [`Request`], replies parsed by the protocol's parsers, a held lock driven by the sans-IO
//! [`HeldMachine`] (the renew schedule, the lease clock, the loss, the release), a waiter whose
//! connection drops rejoining through [`Rejoin`], and the reply limit of a blocking request
//! from [`reply_limit`]. The process does what the tokio driver (`renewer`) does with the
//! machine's actions; its clock is the simulated one plus its own offset (clock jumps).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::super::SimRng;
use super::net::Net;
use crate::dflockd::held::rejoin::{FailedOn, Next, Rejoin};
use crate::dflockd::held::{Action, HeldMachine};
use crate::dflockd::protocol::{
    parse_acquire_reply, parse_release_reply, parse_renew_reply, reply_limit, AcquireReply, Request,
};
use crate::dflockd::{ConnectOptions, DflockdError, ErrorCode, PrimitiveOptions};

/// One acquisition the client's program makes: take `key` (with `limit`), hold it `hold`, release.
#[derive(Clone, Debug)]
pub struct Op {
    pub key: String,
    pub limit: u64,
    pub timeout_s: u64,
    pub ttl_s: Option<u64>,
    /// How long the program keeps the lock before it releases (its own clock).
    pub hold: Duration,
    /// The pause before the acquisition starts.
    pub think: Duration,
}

impl Op {
    pub fn options(&self, renew_ratio: f64) -> PrimitiveOptions {
        let mut o = PrimitiveOptions::new(self.key.clone(), ConnectOptions::new("sim", 6388));
        o.limit = self.limit;
        o.acquire_timeout_s = self.timeout_s;
        o.lease_ttl_s = self.ttl_s;
        o.renew_ratio = renew_ratio;
        o
    }
}

/// Where the client's current acquisition is.
#[derive(Debug)]
pub enum Phase {
    /// Before the next op, until this instant (client clock).
    Think { until: Instant },
    /// The `l`/`sl` sent at `sent` on `conn`, its reply awaited until `reply_by`.
    Acquiring {
        conn: usize,
        sent: Instant,
        reply_by: Instant,
    },
    /// A rejoin's pause: connect again at `at` (and ask with what is left of the timeout then).
    Backoff { at: Instant },
    /// Held on `conn`, granted by the server of `epoch`; the program releases at `release_at`
    /// (`None` once it asked); `renew_sent`: the renew in flight, sent then.
    Holding {
        conn: usize,
        m: Box<HeldMachine>,
        token: String,
        epoch: u64,
        release_at: Option<Instant>,
        renew_sent: Option<Instant>,
    },
    /// Every op done.
    Finished,
}

/// One simulated process.
#[derive(Debug)]
pub struct Client {
    pub id: usize,
    pub alive: bool,
    /// Stopped (SIGSTOP) until this simulated instant.
    pub stopped_until: Option<Duration>,
    /// When it was stopped.
    pub stopped_at: Option<Duration>,
    /// Its clock's lead over the simulated clock (forward jumps only: a monotonic clock).
    pub offset: Duration,
    pub renew_ratio: f64,
    pub ops: VecDeque<Op>,
    pub op: Option<Op>,
    pub phase: Phase,
    rejoin: Option<Rejoin>,
    /// The instant the current acquisition must have settled by (its timeout, the reply
    /// margin, and one second of rounding by a rejoin).
    pub settle_by: Option<Instant>,
    /// Whether a connection of this acquisition was accepted (a first refused connect fails).
    reached: bool,
    /// What each op came to, for the schedule's reader.
    pub outcomes: Vec<String>,
    /// Its clock at the last event it handled (the think pause runs from there).
    last_now: Instant,
}

/// What the world tells the client about its surroundings for one event.
pub struct Ctx<'a> {
    pub net: &'a mut Net,
    pub rng: &'a mut SimRng,
    /// The simulated (server) clock.
    pub now: Duration,
    pub base: Instant,
    pub epoch: u64,
    pub server_up: bool,
}

impl Client {
    pub fn new(id: usize, ops: VecDeque<Op>, renew_ratio: f64, base: Instant) -> Self {
        let until = base + ops.front().map_or(Duration::ZERO, |o| o.think);
        Client {
            id,
            alive: true,
            stopped_until: None,
            stopped_at: None,
            offset: Duration::ZERO,
            renew_ratio,
            ops,
            op: None,
            phase: Phase::Think { until },
            rejoin: None,
            settle_by: None,
            reached: false,
            outcomes: Vec::new(),
            last_now: base,
        }
    }

    pub fn running(&self) -> bool {
        self.alive && self.stopped_until.is_none()
    }

    /// This process's clock at simulated instant `now`.
    pub fn clock(&self, base: Instant, now: Duration) -> Instant {
        base + now + self.offset
    }

    /// The simulated instant at which its clock reads `t`.
    fn global(&self, base: Instant, t: Instant) -> Duration {
        t.saturating_duration_since(base)
            .saturating_sub(self.offset)
    }

    /// Whether it holds and has not been told it lost nor asked to release: its key, limit,
    /// the server lifetime that granted it, and its connection.
    pub fn believes(&self) -> Option<(&str, u64, u64, usize)> {
        match (&self.phase, &self.op) {
            (
                Phase::Holding {
                    m,
                    epoch,
                    conn,
                    release_at: Some(_),
                    ..
                },
                Some(op),
            ) if m.loss_reason().is_none() && !m.is_done() => {
                Some((&op.key, op.limit, *epoch, *conn))
            }
            _ => None,
        }
    }

    /// The simulated instant of its next timer.
    pub fn next_timer(&self, base: Instant) -> Option<Duration> {
        let t = match &self.phase {
            Phase::Think { until } => Some(*until),
            Phase::Acquiring { reply_by, .. } => Some(*reply_by),
            Phase::Backoff { at, .. } => Some(*at),
            Phase::Holding { m, release_at, .. } => match (m.poll_timeout(), release_at) {
                (Some(a), Some(b)) => Some(a.min(*b)),
                (a, b) => a.or(*b),
            },
            Phase::Finished => None,
        };
        t.map(|t| self.global(base, t))
    }

    fn send(&self, cx: &mut Ctx<'_>, conn: usize, req: Request<'_>) {
        // The sim only builds valid requests; a refusal would be a bug of the sim itself.
        if let Ok(bytes) = req.encode() {
            cx.net.send(conn, bytes, cx.now, cx.rng);
        }
    }

    fn settle(&mut self, what: String) {
        self.outcomes.push(what);
        self.settle_by = None;
        self.rejoin = None;
        self.op = None;
        self.phase = match self.ops.front() {
            Some(next) => Phase::Think {
                until: self.clock_now_plus(next.think),
            },
            None => Phase::Finished,
        };
    }

    /// `d` after the event being handled.
    fn clock_now_plus(&self, d: Duration) -> Instant {
        self.last_now + d
    }

    /// Send the acquisition on a new connection with `timeout_s`.
    fn ask(&mut self, cx: &mut Ctx<'_>, timeout_s: u64) {
        let Some(op) = self.op.clone() else { return };
        let conn = cx.net.open(self.id, cx.epoch, cx.server_up, cx.now, cx.rng);
        let now = self.clock(cx.base, cx.now);
        let req = Request::lock(
            &op.key,
            timeout_s,
            op.ttl_s,
            (op.limit > 1).then_some(op.limit),
        );
        self.send(cx, conn, req);
        let limit = reply_limit(
            crate::dflockd::connection::DEFAULT_SOCKET_TIMEOUT,
            Some(timeout_s),
        );
        self.phase = Phase::Acquiring {
            conn,
            sent: now,
            reply_by: now + limit,
        };
        if cx.server_up {
            self.reached = true;
        }
    }

    /// A due timer fires (the caller checked it is due).
    pub fn fire(&mut self, cx: &mut Ctx<'_>) {
        let now = self.clock(cx.base, cx.now);
        self.last_now = now;
        match &mut self.phase {
            Phase::Think { .. } => {
                let Some(op) = self.ops.pop_front() else {
                    self.phase = Phase::Finished;
                    return;
                };
                let end = now + Duration::from_secs(op.timeout_s);
                self.settle_by = Some(end + super::SETTLE_MARGIN);
                self.rejoin = Some(Rejoin::new((op.timeout_s > 0).then_some(end)));
                self.reached = false;
                let t = op.timeout_s;
                self.op = Some(op);
                self.ask(cx, t);
            }
            Phase::Acquiring { conn, .. } => {
                // No reply in time: the driver drops the connection (the server cancels the
                // wait, or releases a grant that crossed the cut) and reports a timeout.
                let conn = *conn;
                cx.net.close_client(conn, cx.now, cx.rng);
                let e = DflockdError::new(ErrorCode::Timeout, "no reply in time");
                self.failed(cx, e);
            }
            Phase::Backoff { .. } => {
                // As the drivers do: what is left of the timeout when the pause ends.
                let t = self.rejoin.as_ref().map_or(0, |r| r.timeout_s(now));
                self.ask(cx, t);
            }
            Phase::Holding { m, release_at, .. } => {
                if release_at.is_some_and(|r| now >= r) {
                    *release_at = None;
                    if let Err(e) = m.release(now) {
                        self.outcomes.push(format!("release: {}", e.message()));
                    }
                }
                if let Phase::Holding { m, .. } = &mut self.phase {
                    if m.poll_timeout().is_some_and(|t| now >= t) {
                        m.handle_timeout(now);
                    }
                }
                self.drive(cx);
            }
            Phase::Finished => {}
        }
    }

    /// An acquisition attempt failed with `e`: rejoin or report.
    fn failed(&mut self, cx: &mut Ctx<'_>, e: DflockdError) {
        let now = self.clock(cx.base, cx.now);
        let reached = self.reached;
        let next = match &mut self.rejoin {
            // The model's client sends a blocking `l` (a try has no Rejoin end).
            Some(r) => r.failed(now, e, FailedOn::Wait, reached),
            None => Next::Fail(e),
        };
        match next {
            Next::Retry { at, .. } => self.phase = Phase::Backoff { at },
            Next::Fail(e) => self.settle(format!("acquire failed: {:?} {}", e.code(), e.message())),
        }
    }

    /// A line arrived on `conn`.
    pub fn on_line(&mut self, cx: &mut Ctx<'_>, conn: usize, line: &str) {
        let now = self.clock(cx.base, cx.now);
        self.last_now = now;
        match &mut self.phase {
            Phase::Acquiring { conn: c, sent, .. } if *c == conn => {
                let sent = *sent;
                match parse_acquire_reply(line, "acquire") {
                    Ok(AcquireReply::Granted(g)) => {
                        let Some(op) = self.op.clone() else { return };
                        let opts = op.options(self.renew_ratio);
                        let m = HeldMachine::new(&opts, g.lease_s, sent, Vec::new());
                        self.settle_by = None;
                        self.phase = Phase::Holding {
                            conn,
                            m: Box::new(m),
                            token: g.token,
                            epoch: cx.net.conns[conn].epoch,
                            release_at: Some(now + op.hold),
                            renew_sent: None,
                        };
                        self.outcomes.push("granted".into());
                    }
                    Ok(AcquireReply::TimedOut) => {
                        cx.net.close_client(conn, cx.now, cx.rng);
                        self.settle("timed out".into());
                    }
                    Err(e) => {
                        cx.net.close_client(conn, cx.now, cx.rng);
                        self.failed(cx, e);
                    }
                }
            }
            Phase::Holding {
                conn: c,
                m,
                renew_sent,
                ..
            } if *c == conn => {
                if m.renewing() {
                    let sent = renew_sent.take().unwrap_or(now);
                    m.renew_reply(now, sent, parse_renew_reply(line, "renew"));
                } else if m.releasing() {
                    m.release_reply(parse_release_reply(line, "release"));
                } else {
                    // Idle: anything the server sends means it dropped the connection.
                    m.disconnected(DflockdError::new(
                        ErrorCode::ConnectionError,
                        format!("the server sent {line:?} unprompted"),
                    ));
                }
                self.drive(cx);
            }
            _ => {}
        }
    }

    /// `conn` ended (EOF, reset, refused).
    pub fn on_eof(&mut self, cx: &mut Ctx<'_>, conn: usize) {
        self.last_now = self.clock(cx.base, cx.now);
        let e = DflockdError::new(
            ErrorCode::ConnectionError,
            "connection closed by the server",
        );
        match &mut self.phase {
            Phase::Acquiring { conn: c, .. } if *c == conn => {
                cx.net.close_client(conn, cx.now, cx.rng);
                self.failed(cx, e);
            }
            Phase::Holding { conn: c, m, .. } if *c == conn => {
                m.disconnected(e);
                self.drive(cx);
            }
            _ => {}
        }
    }

    /// Execute the machine's actions as the tokio driver does.
    fn drive(&mut self, cx: &mut Ctx<'_>) {
        let now = self.clock(cx.base, cx.now);
        let Some(op) = self.op.clone() else { return };
        let sem = op.limit > 1;
        let Phase::Holding {
            conn,
            m,
            token,
            renew_sent,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let conn = *conn;
        let mut sends = Vec::new();
        while let Some(a) = m.poll_action() {
            match a {
                Action::SendRenew { .. } => {
                    *renew_sent = Some(now);
                    sends.push(Request::renew(&op.key, token, op.ttl_s, sem).encode());
                }
                Action::SendRelease { .. } => {
                    sends.push(Request::release(&op.key, token, sem).encode());
                }
                Action::Lost { reason, .. } => self.outcomes.push(format!("lost: {reason}")),
                Action::SettleRelease(r) => self.outcomes.push(match r {
                    Ok(()) => "released".into(),
                    Err(e) => format!("release: {}", e.message()),
                }),
                Action::Close | Action::Pool => cx.net.close_client(conn, cx.now, cx.rng),
                Action::Proven { .. } => {}
            }
        }
        let done = m.is_done();
        for bytes in sends.into_iter().flatten() {
            cx.net.send(conn, bytes, cx.now, cx.rng);
        }
        if done {
            cx.net.close_client(conn, cx.now, cx.rng);
            self.settle("hold over".into());
        }
    }

    /// SIGKILL: the kernel closes its connections.
    pub fn kill(&mut self, cx: &mut Ctx<'_>) {
        self.alive = false;
        let mine: Vec<usize> = (0..cx.net.conns.len())
            .filter(|&i| cx.net.conns[i].client == self.id)
            .collect();
        for i in mine {
            cx.net.close_client(i, cx.now, cx.rng);
        }
    }
}

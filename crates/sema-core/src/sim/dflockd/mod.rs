//! The dflockd world: client processes running the core's held-lock machine and protocol codec
//! ([`client`]), a model of the Go server ([`server`]), a network of ordered, delayed
//! connections ([`net`]), all on one simulated clock, and the faults: a connection broken (each
//! side learns at its own instant), long stalls (a reply past its deadline), a process
//! SIGKILLed or stopped for a while, a client clock jumping forward, a server restart.
//!
//! Invariants after every step:
//! - per key, no more running holders that have not been told of a loss (nor asked to release)
//!   than the kind allows (1 for a lock, its limit for a semaphore): so every loss is reported
//!   to its holder before the server could grant the key to anyone else (the lease rule);
//! - no waiter is still waiting past its timeout plus the reply margin;
//!
//! and at the end (the world run on to quiescence without faults): every request of a living
//! process settled, nothing held or queued on the server.
//!
//! What the sim takes as given (see docs/simulation.md): a running process's due timers fire
//! before the clock moves on (a stopped one's when it resumes, after what already arrived);
//! a server restart forgets every lease at once (dflockd has no grace period), so holders
//! granted before it are not counted against holders granted after it — they must still be
//! told by the end. Likewise a connection reset that the server reads before the holder does
//! frees the key at once (`--auto-release-on-disconnect`): that holder is not counted once the
//! server has read the reset.

pub mod client;
pub mod net;
pub mod server;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{SimRng, Violation, World};
use client::{Client, Ctx, Op, Phase};
use net::{Delays, Net, ToClient, ToServer};
use server::{Answer, ServerConfig, ServerModel};

/// How long past its timeout an acquisition may take to settle: the reply margin of a blocking
/// request (`BLOCKING_REPLY_MARGIN`, 5 s) and one second of rounding when a rejoin asks again
/// with what is left in whole seconds.
pub const SETTLE_MARGIN: Duration = Duration::from_secs(6);

/// One step of the dflockd world.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The clock moves to the next instant something is due.
    Advance,
    /// The server reads the next message of connection `.0`.
    ServerReads(usize),
    /// The client reads the next message of connection `.0`.
    ClientReads(usize),
    /// The server's timers: the lease sweep, waiters' timeouts, idle connections dropped.
    ServerTimer,
    /// A stopped process continues.
    Resume(usize),
    /// Faults.
    Kill(usize),
    Stop(usize),
    Break(usize),
    Restart,
    ClockJump(usize),
}

impl Step {
    fn is_fault(&self) -> bool {
        matches!(
            self,
            Step::Kill(_) | Step::Stop(_) | Step::Break(_) | Step::Restart | Step::ClockJump(_)
        )
    }
}

/// The world (see the module comment). It counts every holder the server could have dropped
/// for silence too: a holder whose renews are stuck in the network longer than the server's
/// idle limit (`--read-timeout`, 23 s) was, before the lease clock bounded its validity by
/// that limit, dropped and its key granted while its clock still proved the lease
/// (seed 12872, now a regression seed).
pub struct DflockdWorld {
    base: Instant,
    now: Duration,
    server: ServerModel,
    epoch: u64,
    server_up_at: Duration,
    net: Net,
    pub clients: Vec<Client>,
    faults_left: u32,
    fault_every: u64,
    steps: u64,
    /// When `SIM_TRACE` is set: every step printed with the clock and what the clients did.
    trace: bool,
}

fn pick<T: Copy>(rng: &mut SimRng, xs: &[T]) -> T {
    xs[rng.below(xs.len())]
}

fn ms(rng: &mut SimRng, max: u64) -> Duration {
    Duration::from_millis(rng.below(max as usize + 1) as u64)
}

impl DflockdWorld {
    fn server_up(&self) -> bool {
        self.now >= self.server_up_at
    }

    fn ctx<'a>(&'a mut self, rng: &'a mut SimRng) -> (Ctx<'a>, &'a mut Vec<Client>) {
        let server_up = self.now >= self.server_up_at;
        (
            Ctx {
                net: &mut self.net,
                rng,
                now: self.now,
                base: self.base,
                epoch: self.epoch,
                server_up,
            },
            &mut self.clients,
        )
    }

    /// The server's connection `i` is dropped for silence at `now` (no request read by its
    /// idle deadline).
    fn idle_due(&self, i: usize) -> bool {
        let c = &self.net.conns[i];
        let deadline = c.last_reply + self.server.cfg.read_timeout;
        c.server_open
            && c.epoch == self.epoch
            && !c.blocked
            && self.now >= deadline
            && c.to_server.front().is_none_or(|(t, _)| *t > deadline)
    }

    fn flush_replies(&mut self, rng: &mut SimRng) {
        for (id, line) in self.server.take_replies() {
            if let Some(i) = self.net.by_id(id) {
                self.net.reply(i, line, self.now, rng);
            }
        }
    }

    fn next_event(&self) -> Option<Duration> {
        let now = self.now;
        let mut ts: Vec<Duration> = Vec::new();
        for c in &self.net.conns {
            ts.extend(c.to_server.front().map(|(t, _)| *t));
            ts.extend(c.to_client.front().map(|(t, _)| *t));
            if c.server_open && c.epoch == self.epoch && !c.blocked {
                ts.push(c.last_reply + self.server.cfg.read_timeout);
            }
        }
        for c in self.clients.iter().filter(|c| c.alive) {
            match c.stopped_until {
                Some(u) => ts.push(u),
                None => ts.extend(c.next_timer(self.base)),
            }
        }
        ts.extend(self.server.next_event());
        ts.push(self.server_up_at);
        ts.into_iter().filter(|t| *t > now).min()
    }

    /// Fire the due timers of every running process (they are never late; see the module
    /// comment). Bounded: a timer that stays due after firing is a bug of the sim.
    fn fire_timers(&mut self, rng: &mut SimRng) -> Result<(), Violation> {
        for _ in 0..10_000 {
            let base = self.base;
            let now = self.now;
            let Some(i) = self
                .clients
                .iter()
                .position(|c| c.running() && c.next_timer(base).is_some_and(|t| t <= now))
            else {
                return Ok(());
            };
            let (mut cx, clients) = self.ctx(rng);
            clients[i].fire(&mut cx);
        }
        Err(Violation("a client timer stays due after firing".into()))
    }

    fn deliver_to_client(&mut self, i: usize, rng: &mut SimRng) {
        let Some((_, msg)) = self.net.conns[i].to_client.pop_front() else {
            return;
        };
        let c = self.net.conns[i].client;
        if !self.clients[c].alive || !self.net.conns[i].client_open {
            return;
        }
        let (mut cx, clients) = self.ctx(rng);
        match msg {
            ToClient::Line(line) => clients[c].on_line(&mut cx, i, &line),
            ToClient::Eof => clients[c].on_eof(&mut cx, i),
        }
    }

    fn server_reads(&mut self, i: usize, rng: &mut SimRng) {
        let Some((_, msg)) = self.net.conns[i].to_server.pop_front() else {
            return;
        };
        let (open, epoch, id) = {
            let c = &self.net.conns[i];
            (c.server_open, c.epoch, c.id)
        };
        if !open || epoch != self.epoch {
            return;
        }
        match msg {
            ToServer::Request(bytes) => match self.server.request(id, &bytes, self.now) {
                Answer::Reply(line) => self.net.reply(i, line, self.now, rng),
                Answer::Blocked => self.net.conns[i].blocked = true,
            },
            ToServer::Eof => {
                self.net.conns[i].server_open = false;
                self.server.disconnect(id, self.now);
            }
        }
        self.flush_replies(rng);
    }

    fn server_timer(&mut self, rng: &mut SimRng) {
        self.server.tick(self.now);
        self.flush_replies(rng);
        for i in 0..self.net.conns.len() {
            if self.idle_due(i) {
                // The Go server writes `error`, closes, and releases what the connection held.
                self.net.reply(i, "error".into(), self.now, rng);
                self.net.close_server(i, self.now, rng);
                let id = self.net.conns[i].id;
                self.server.disconnect(id, self.now);
                self.flush_replies(rng);
            }
        }
    }

    fn restart(&mut self, rng: &mut SimRng) {
        self.epoch += 1;
        self.server = ServerModel::new(self.server.cfg.clone(), self.epoch);
        for i in 0..self.net.conns.len() {
            self.net.close_server(i, self.now, rng);
        }
        self.server_up_at = self.now + ms(rng, 3000);
    }

    /// The invariants of every step.
    fn check(&self) -> Result<(), Violation> {
        let mut held: BTreeMap<&str, Vec<(usize, u64)>> = BTreeMap::new();
        for c in self.clients.iter().filter(|c| c.running()) {
            if let Some((key, limit, epoch, conn)) = c.believes() {
                // A reset the server reads before the holder does frees the key at once (the
                // server releases on disconnect): a gap of the protocol no client can close.
                let c_ = &self.net.conns[conn];
                let reset_seen = c_.reset && !c_.server_open;
                if epoch == self.epoch && !reset_seen {
                    held.entry(key).or_default().push((c.id, limit));
                }
            }
            if let Some(by) = c.settle_by {
                if c.clock(self.base, self.now) > by {
                    return Err(Violation(format!(
                        "client {} still waits {:?} past its acquisition's deadline: {:?}, outcomes {:?}",
                        c.id,
                        c.clock(self.base, self.now) - by,
                        c.phase,
                        c.outcomes
                    )));
                }
            }
        }
        for (key, hs) in held {
            let limit = hs.iter().map(|h| h.1).min().unwrap_or(1);
            if hs.len() as u64 > limit {
                return Err(Violation(format!(
                    "at {:?}: {} holders of '{key}' (limit {limit}) not told of a loss: clients {:?}",
                    self.now,
                    hs.len(),
                    hs.iter().map(|h| h.0).collect::<Vec<_>>()
                )));
            }
        }
        Ok(())
    }

    fn enabled_steps(&self, faults: bool) -> Vec<Step> {
        let mut out = Vec::new();
        let now = self.now;
        for (i, c) in self.net.conns.iter().enumerate() {
            if c.to_server.front().is_some_and(|(t, _)| *t <= now) && !c.blocked {
                out.push(Step::ServerReads(i));
            }
            let client = &self.clients[c.client];
            let reads = client.running() || !client.alive || !c.client_open;
            if reads && c.to_client.front().is_some_and(|(t, _)| *t <= now) {
                out.push(Step::ClientReads(i));
            }
        }
        let idle = (0..self.net.conns.len()).any(|i| self.idle_due(i));
        if self.server_up() && (self.server.due(now) || idle) {
            out.push(Step::ServerTimer);
        }
        for c in &self.clients {
            if c.alive && c.stopped_until.is_some_and(|u| u <= now) {
                out.push(Step::Resume(c.id));
            }
        }
        if self.next_event().is_some() {
            out.push(Step::Advance);
        }
        if faults && self.faults_left > 0 && self.steps.is_multiple_of(self.fault_every) {
            for c in self.clients.iter().filter(|c| c.running()) {
                out.extend([Step::Kill(c.id), Step::Stop(c.id), Step::ClockJump(c.id)]);
            }
            for (i, c) in self.net.conns.iter().enumerate() {
                if c.client_open && c.server_open {
                    out.push(Step::Break(i));
                }
            }
            if self.server_up() {
                out.push(Step::Restart);
            }
        }
        out
    }
}

impl World for DflockdWorld {
    type Action = Step;

    fn new(rng: &mut SimRng) -> Self {
        let base = Instant::now();
        let n_keys = 1 + rng.below(2);
        let limits: Vec<u64> = (0..n_keys)
            .map(|_| match rng.below(10) {
                0..=6 => 1,
                n => n as u64 - 5,
            })
            .collect();
        let n_clients = 2 + rng.below(3);
        let ratio = pick(rng, &[0.5, 0.5, 0.3, 0.8]);
        let clients = (0..n_clients)
            .map(|id| {
                let n_ops = 1 + rng.below(3);
                let ops: VecDeque<Op> = (0..n_ops)
                    .map(|_| {
                        let k = rng.below(n_keys);
                        let mut limit = limits[k];
                        if rng.chance(1, 12) {
                            limit = limit % 3 + 1;
                        }
                        let ttl_s = pick(rng, &[None, Some(2), Some(3), Some(5), Some(10)]);
                        let lease_ms = ttl_s.unwrap_or(33) * 1000;
                        Op {
                            key: format!("k{k}"),
                            limit,
                            timeout_s: pick(rng, &[0, 1, 3, 10, 30]),
                            ttl_s,
                            hold: ms(rng, lease_ms * 3 / 2),
                            think: ms(rng, 3000),
                        }
                    })
                    .collect();
                Client::new(id, ops, ratio, base)
            })
            .collect();
        DflockdWorld {
            base,
            now: Duration::ZERO,
            server: ServerModel::new(ServerConfig::default(), 0),
            epoch: 0,
            server_up_at: Duration::ZERO,
            net: Net {
                conns: Vec::new(),
                delays: Delays {
                    long_per_mille: pick(rng, &[0, 0, 5, 20]),
                    long_max: Duration::from_secs(30),
                },
            },
            clients,
            faults_left: rng.below(6) as u32,
            fault_every: 3 + rng.below(8) as u64,
            steps: 0,
            trace: std::env::var_os("SIM_TRACE").is_some(),
        }
    }

    fn enabled(&self) -> Vec<Step> {
        self.enabled_steps(true)
    }

    fn apply(&mut self, step: &Step, rng: &mut SimRng) -> Result<(), Violation> {
        self.steps += 1;
        if step.is_fault() {
            self.faults_left = self.faults_left.saturating_sub(1);
        }
        match *step {
            Step::Advance => {
                if let Some(t) = self.next_event() {
                    self.now = t;
                }
            }
            Step::ServerReads(i) => self.server_reads(i, rng),
            Step::ClientReads(i) => self.deliver_to_client(i, rng),
            Step::ServerTimer => self.server_timer(rng),
            Step::Resume(c) => {
                let client = &mut self.clients[c];
                client.stopped_until = None;
                // A stopped process cannot settle: its deadline moves by the time it lost.
                if let (Some(by), Some(at)) = (client.settle_by, client.stopped_at.take()) {
                    client.settle_by = Some(by + (self.now - at));
                }
                // What arrived while it was stopped is read before its timers fire.
                for i in 0..self.net.conns.len() {
                    while self.net.conns[i].client == c
                        && self.net.conns[i]
                            .to_client
                            .front()
                            .is_some_and(|(t, _)| *t <= self.now)
                    {
                        self.deliver_to_client(i, rng);
                    }
                }
            }
            Step::Kill(c) => {
                let (mut cx, clients) = self.ctx(rng);
                clients[c].kill(&mut cx);
            }
            Step::Stop(c) => {
                let until = self.now + ms(rng, 30_000).max(Duration::from_millis(1));
                self.clients[c].stopped_until = Some(until);
                self.clients[c].stopped_at = Some(self.now);
            }
            Step::Break(i) => self.net.break_conn(i, self.now, rng),
            Step::Restart => self.restart(rng),
            Step::ClockJump(c) => {
                // Its deadlines come that much sooner in simulated time: the bound moves too.
                let jump = ms(rng, 10_000);
                let client = &mut self.clients[c];
                client.offset += jump;
                client.settle_by = client.settle_by.map(|by| by + jump);
            }
        }
        self.fire_timers(rng)?;
        if self.trace {
            println!("{:>10?} {step:?}", self.now);
            for c in &self.clients {
                println!(
                    "    client {} alive {} stopped {:?} offset {:?} settle_by {:?} timer {:?} outcomes {:?}",
                    c.id,
                    c.alive,
                    c.stopped_until,
                    c.offset,
                    c.settle_by.map(|t| t - self.base),
                    c.next_timer(self.base),
                    c.outcomes
                );
            }
        }
        self.check()
    }

    fn finish(&mut self) -> Result<(), Violation> {
        // Run on without faults until nothing is due: every process ends its program.
        let mut rng = SimRng::new(0);
        for _ in 0..200_000 {
            let steps = self.enabled_steps(false);
            let Some(step) = steps
                .iter()
                .find(|s| **s != Step::Advance)
                .or(steps.first())
                .cloned()
            else {
                break;
            };
            self.apply(&step, &mut rng)?;
        }
        for c in self.clients.iter().filter(|c| c.alive) {
            if !matches!(c.phase, Phase::Finished) {
                return Err(Violation(format!(
                    "client {} never finished: {:?} (outcomes {:?})",
                    c.id, c.phase, c.outcomes
                )));
            }
        }
        if !self.server.is_empty() {
            return Err(Violation(format!(
                "left on the server once everyone exited: {:?}",
                self.server.keys()
            )));
        }
        Ok(())
    }
}

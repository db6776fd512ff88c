//! The steal world: a Web Locks `steal` over dflockd between a holder H and a stealer S, run by
//! the core's machines (`dflockd::steal`: [`Answer`] for H, [`Stealer`] for S) against the
//! server model (`sim::dflockd::server`), with a waiter W queued on the key and a forger F, a
//! third client of the server that reads the key table (as `stats` shows it to anyone) and takes
//! confirmation-shaped keys of S's steal with tokens it made up. Any process but F may be
//! SIGKILLed at any step (the server releases what its connections held).
//!
//! Modelled as the driver (`lib/locks/dflockd-steal.js`) runs them: H answers when rung (any
//! time S's intent is held: the mailbox's ring is transport) with the machine's steps, each one
//! step of the schedule (surrender; the confirmation, named with the lock's token as its sealed
//! proof; the watch of the intent; each release); S looks at the key table, proves a
//! confirmation by renewing the lock with the token it carries, takes a free key with a try,
//! watches the accepted confirmation, and releases its intent when done; the clock moves only
//! while S waits for an answer (its 2 s), and leases are 33 s (renewals not modelled: no run
//! lasts that long) or too short for a hand-over (6 s: the machines refuse it). The seal is not
//! modelled: a forger cannot know the lock's token, which is what the seal and the proof rest on.
//!
//! Invariant after every step: at most one of H (from its grant until it surrenders, releases
//! or dies), S (from an accepted hand-over or a plain take until it releases, is told or dies)
//! and W (from its grant until it releases or dies) runs. S is told when its watch of the
//! confirmation is granted (the confirmation went: the holder let go, or died); a disconnect is
//! processed with every grant it makes delivered in the same step. At the end: every process
//! settled and nothing held on the server once the forger's connection closed.

use std::time::{Duration, Instant};

use super::dflockd::server::{Answer as Reply, ConnId, ServerConfig, ServerModel};
use super::{SimRng, Violation, World};
use crate::dflockd::protocol::{parse_acquire_reply, AcquireReply};
use crate::dflockd::steal::{
    AnswerStep, KeepEnd, Part, StealLook, StealStep, Stealer, ANSWER_WITHIN,
};

const KEY: &str = "k";
const INTENT: &str = "wl~steal~k~S";
/// Confirmations of S's steal: `<prefix><who>~<token>` (the token in the clear: see the module
/// docs).
const CONFIRM_PREFIX: &str = "wl~stolen~k~S~";
const WATCH_S: u64 = 3600;

/// A process of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Holder,
    Stealer,
    Waiter,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The holder takes its next step (its own release, or the answer's next step).
    Holder,
    /// The holder is rung while S's intent is held.
    Rung,
    /// The stealer takes its next step.
    Stealer,
    /// The waiter queues on the key, or releases it once granted.
    Waiter,
    /// The forger takes one more confirmation-shaped key.
    Forge,
    /// SIGKILL.
    Kill(Who),
    /// The clock moves by this many ms (only while the stealer waits for an answer).
    Advance(u64),
}

#[derive(Debug, Default)]
struct Holder {
    alive: bool,
    /// K's token, while its connection holds it.
    token: Option<String>,
    /// Its callback runs.
    running: bool,
    /// Its answer to S's steal and the step to take next.
    answer: Option<crate::dflockd::steal::Answer>,
    next: Option<AnswerStep>,
    /// Parts still to release, in order, then the intent's watch token.
    releasing: Vec<Part>,
    confirmation: Option<(String, String)>,
    /// The watch of S's intent: waiting, then granted with this token.
    watching: bool,
    intent_token: Option<String>,
    /// Rings it still answers (the stealer rings again every 500 ms while unanswered: 4 at most).
    rings_left: u32,
    done: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Steal {
    Start,
    Looking,
    Proving {
        confirmation: String,
        lock: String,
        token: String,
    },
    /// Runs under a proven hand-over, watching its confirmation.
    Accepted {
        confirmation: String,
    },
    /// Runs under a plain take of the free key.
    Taken {
        token: String,
    },
    Done,
}

#[derive(Debug)]
struct Thief {
    alive: bool,
    phase: Steal,
    machine: Option<Stealer>,
    intent_token: Option<String>,
    /// The confirmation it watches (accepted).
    watch: Option<String>,
    /// The watch of the accepted confirmation was granted: told it is over.
    told: bool,
}

#[derive(Debug, Default)]
struct Waiter {
    alive: bool,
    joined: bool,
    token: Option<String>,
    done: bool,
}

/// Connections per process (one each for what the driver opens one for).
const H_LOCK: ConnId = 1;
const H_CONFIRM: ConnId = 2;
const H_WATCH: ConnId = 3;
const S_INTENT: ConnId = 11;
const S_LOOK: ConnId = 12;
const S_WATCH: ConnId = 13;
const W_CONN: ConnId = 21;
const F_CONN: ConnId = 31;

pub struct StealWorld {
    server: ServerModel,
    base: Instant,
    now: Duration,
    lease_s: u64,
    h: Holder,
    s: Thief,
    w: Waiter,
    forges_left: u32,
    kills_left: u32,
    waiter: bool,
    trace: Vec<String>,
}

impl StealWorld {
    fn instant(&self) -> Instant {
        self.base + self.now
    }

    fn send(&mut self, conn: ConnId, cmd: &str, key: &str, arg: &str) -> Reply {
        let bytes = format!("{cmd}\n{key}\n{arg}\n");
        let r = self.server.request(conn, bytes.as_bytes(), self.now);
        self.trace.push(format!(
            "@{:?} c{conn} {cmd} {key} {arg} -> {r:?}",
            self.now
        ));
        r
    }

    /// `ok <token> ...` → the token.
    fn granted(reply: &Reply) -> Option<String> {
        match reply {
            Reply::Reply(line) => Self::token_of(line),
            Reply::Blocked => None,
        }
    }

    /// The token of a grant line (`ok <token> <ttl>`), as the clients parse it.
    fn token_of(line: &str) -> Option<String> {
        match parse_acquire_reply(line, "acquire") {
            Ok(AcquireReply::Granted(g)) => Some(g.token),
            _ => None,
        }
    }

    fn held_keys(&self) -> Vec<String> {
        self.server
            .keys()
            .into_iter()
            .filter(|(_, _, holders, _)| *holders > 0)
            .map(|(k, ..)| k)
            .collect()
    }

    fn intent_held(&self) -> bool {
        !self.server.holders_of(INTENT).is_empty()
    }

    /// Delivers the replies grants and timeouts made to blocked connections (and those the
    /// releases they cause make).
    fn deliver(&mut self) {
        loop {
            let replies = self.server.take_replies();
            if replies.is_empty() {
                return;
            }
            for (conn, line) in replies {
                self.deliver_one(conn, &line);
            }
        }
    }

    fn deliver_one(&mut self, conn: ConnId, line: &str) {
        self.trace.push(format!("  -> c{conn} {line}"));
        let token = Self::token_of(line);
        match conn {
            H_WATCH if self.h.alive => {
                self.h.watching = false;
                self.h.intent_token = token;
                if let Some(a) = self.h.answer.as_mut() {
                    self.h.next = Some(a.ended(KeepEnd::IntentEnded));
                }
            }
            S_WATCH if self.s.alive => {
                // The confirmation went: told; the key its watch was granted is released.
                self.s.told = true;
                if let (Some(t), Some(c)) = (token, self.s.watch.clone()) {
                    self.send(S_WATCH, "r", &c, &t);
                }
            }
            W_CONN if self.w.alive => self.w.token = token,
            _ => {}
        }
    }

    fn kill(&mut self, who: Who) {
        let conns: &[ConnId] = match who {
            Who::Holder => {
                self.h.alive = false;
                self.h.running = false;
                &[H_LOCK, H_CONFIRM, H_WATCH]
            }
            Who::Stealer => {
                self.s.alive = false;
                &[S_INTENT, S_LOOK, S_WATCH]
            }
            Who::Waiter => {
                self.w.alive = false;
                &[W_CONN]
            }
        };
        for &c in conns {
            self.server.disconnect(c, self.now);
            self.deliver();
        }
    }

    fn running(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.h.alive && self.h.running {
            out.push("the holder");
        }
        if self.s.alive && !self.s.told {
            match &self.s.phase {
                Steal::Accepted { .. } => out.push("the stealer (a proven hand-over)"),
                Steal::Taken { .. } => out.push("the stealer (a take)"),
                _ => {}
            }
        }
        if self.w.alive && self.w.token.is_some() && !self.w.done {
            out.push("the waiter");
        }
        out
    }

    fn violation(&self, what: String) -> Violation {
        let tail: Vec<&String> = self.trace.iter().rev().take(40).collect();
        let lines: Vec<&str> = tail.iter().rev().map(|s| s.as_str()).collect();
        Violation(format!("{what}\n    {}", lines.join("\n    ")))
    }
}

impl World for StealWorld {
    type Action = Action;

    fn new(rng: &mut SimRng) -> Self {
        let lease_s = if rng.chance(1, 5) { 6 } else { 33 };
        let mut w = StealWorld {
            server: ServerModel::new(ServerConfig::default(), rng.next_u64()),
            base: Instant::now(),
            now: Duration::ZERO,
            lease_s,
            h: Holder {
                alive: true,
                rings_left: 4,
                ..Holder::default()
            },
            s: Thief {
                alive: true,
                phase: Steal::Start,
                machine: None,
                intent_token: None,
                watch: None,
                told: false,
            },
            w: Waiter {
                alive: true,
                ..Waiter::default()
            },
            forges_left: rng.below(3) as u32,
            kills_left: rng.below(2) as u32,
            waiter: rng.chance(2, 3),
            trace: Vec::new(),
        };
        let r = w.send(H_LOCK, "l", KEY, &format!("0 {lease_s}"));
        w.h.token = StealWorld::granted(&r);
        w.h.running = w.h.token.is_some();
        w
    }

    fn enabled(&self) -> Vec<Action> {
        let mut out = Vec::new();
        let h = &self.h;
        if h.alive
            && !h.done
            && !h.watching
            && (h.answer.is_none() || h.next.is_some() || !h.releasing.is_empty())
        {
            out.push(Action::Holder);
        }
        if h.alive && h.running && h.answer.is_none() && h.rings_left > 0 && self.intent_held() {
            out.push(Action::Rung);
        }
        let s_waits = matches!(self.s.phase, Steal::Looking);
        if self.s.alive && self.s.phase != Steal::Done {
            out.push(Action::Stealer);
        }
        if self.waiter && self.w.alive && !self.w.done && (!self.w.joined || self.w.token.is_some())
        {
            out.push(Action::Waiter);
        }
        if self.forges_left > 0 && self.intent_held() {
            out.push(Action::Forge);
        }
        if self.kills_left > 0 {
            for (who, alive) in [
                (Who::Holder, h.alive && !h.done),
                (Who::Stealer, self.s.alive && self.s.phase != Steal::Done),
                (Who::Waiter, self.waiter && self.w.alive && !self.w.done),
            ] {
                if alive {
                    out.push(Action::Kill(who));
                }
            }
        }
        // Until the stealer's answer deadline has surely passed: leases are not renewed here.
        if self.s.alive && s_waits && self.now < ANSWER_WITHIN + Duration::from_secs(1) {
            out.push(Action::Advance(100));
            out.push(Action::Advance(700));
        }
        out
    }

    fn apply(&mut self, action: &Action, rng: &mut SimRng) -> Result<(), Violation> {
        self.trace.push(format!("{action:?}"));
        match action {
            Action::Holder => self.holder_step(),
            Action::Rung => {
                self.h.rings_left -= 1;
                // `#rung`: a lock this client holds exclusively that can be handed over.
                let mut a = crate::dflockd::steal::Answer::new(self.lease_s as f64, 0.5);
                if a.start() == AnswerStep::Surrender {
                    // A fresh answer's start is its surrender (kept as the next step).
                    self.h.next = Some(AnswerStep::Surrender);
                    self.h.answer = Some(a);
                }
            }
            Action::Stealer => self.stealer_step(),
            Action::Waiter => {
                if let Some(t) = self.w.token.take() {
                    self.send(W_CONN, "r", KEY, &t);
                    self.w.done = true;
                } else {
                    self.w.joined = true;
                    let r = self.send(W_CONN, "l", KEY, &format!("{WATCH_S} {}", self.lease_s));
                    self.w.token = Self::granted(&r);
                }
                self.deliver();
            }
            Action::Forge => {
                self.forges_left -= 1;
                // A token it made up (32 hex), or a garbled one that does not unseal.
                let token = if rng.chance(1, 3) {
                    String::new()
                } else {
                    format!("{:032x}", u128::from(rng.next_u64()))
                };
                let name = format!("{CONFIRM_PREFIX}F{}~{token}", self.forges_left);
                self.send(F_CONN, "l", &name, "0 33");
            }
            Action::Kill(who) => {
                self.kills_left -= 1;
                self.kill(*who);
            }
            Action::Advance(ms) => {
                self.now += Duration::from_millis(*ms);
                self.server.tick(self.now);
                self.deliver();
            }
        }
        let running = self.running();
        if running.len() > 1 {
            return Err(self.violation(format!("{} run at once", running.join(" and "))));
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), Violation> {
        // A schedule cut short (a replay of a shrunk one, or the step limit) has nothing to say
        // about settling.
        if !self.enabled().is_empty() {
            return Ok(());
        }
        if self.s.alive && self.s.phase != Steal::Done {
            return Err(self.violation("the steal never settled".into()));
        }
        if self.h.alive && (self.h.watching || !self.h.releasing.is_empty()) {
            return Err(self.violation("the holder never let go".into()));
        }
        // The forger never cleans up: its connection closes.
        self.server.disconnect(F_CONN, self.now);
        self.deliver();
        let left: Vec<String> = self.held_keys();
        if !left.is_empty() {
            return Err(self.violation(format!("left held on the server: {left:?}")));
        }
        Ok(())
    }
}

mod holder;
mod stealer;
#[cfg(test)]
mod tests;

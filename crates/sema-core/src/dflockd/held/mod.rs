//! The held-lock lifecycle as one sans-IO state machine ([`HeldMachine`]), run by both drivers:
//! the tokio renewal task (`renewer`) and the binding's event-loop driver (through
//! [`ExternalHold`](super::ExternalHold)). Modelled on quinn-proto: events go in (a renew's or
//! release's reply, a timer tick with the `now` the driver read, the connection gone, a
//! release or an abort), actions come out ([`HeldMachine::poll_action`]: a request to send, the
//! lease proven, the loss, the release's answer, the connection closed or pooled), and the one
//! timer the driver keeps is [`HeldMachine::poll_timeout`]. Every decision of the lifecycle is
//! here, tested without sockets or real time (`tests`):
//!
//! - renew `interval` after the request that proved the lease was SENT ([`Schedule`], read from
//!   the caller's real renew ratio and cap);
//! - the client's own lease clock: no renew confirmed by `loss_at` = lost then, before the
//!   server could grant the key to anyone else; the connection is then kept open until the
//!   server's earliest expiry (closing it would free the key before the holder was told);
//! - a renew refused (any part of a multi-part hold: a shared-mode writer's gate and slots,
//!   renewed together), a reply that makes no sense, or the connection gone = lost at once,
//!   reported once, before the connection is closed;
//! - a release asked while a renew is in flight waits for its reply at most
//!   [`RELEASE_RENEW_WAIT`] (less when the validity ends sooner), then sends the release or
//!   answers the loss; an abort (`close()`) answers a pending release and reports nothing.
//!
//! The words of every loss and failed release are in [`schedule`]. The waiter's side (a
//! queued acquisition whose server drops it reconnects and re-enqueues while its timeout
//! lasts) is [`rejoin`].

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::error::{DflockdError, ErrorCode, Result};
use super::primitive::{PrimitiveOptions, RELEASE_RENEW_WAIT};

pub mod rejoin;
pub mod schedule;
#[cfg(test)]
mod tests;

use schedule::{
    after, lost_error, lost_error_because, release_closed, release_error, unconfirmed,
    RELEASE_RENEW_UNANSWERED,
};
pub use schedule::{renewed_lease, Schedule};

/// The longest a caller may be late for a renew before the process-wide watchdog renews in its
/// stead ([`HeldMachine::watchdog_grace`]). Small, because the client does not know the
/// server's idle limit: 23 s by default, but `--read-timeout` may set it just above the renew
/// interval (the Web Locks steal test runs 5 s against renews every 4.5 s), and the watchdog's
/// renew must come about when the caller's own would. 50 ms is tens of times a libuv timer's
/// lateness on a loop that runs; a caller later than that finds the watchdog's renew in flight
/// and awaits its reply instead of sending a second one, so lateness changes who renews, not
/// how often.
pub const WATCHDOG_GRACE_MAX: Duration = Duration::from_millis(50);

/// What the driver must do, in order (see [`HeldMachine::poll_action`]).
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Send the renew of every part (pipelined, in part order), each reply awaited `limit` at
    /// most (the machine's own timer decides before that; see [`HeldMachine::poll_timeout`]),
    /// then report each reply with [`HeldMachine::renew_reply`].
    SendRenew { limit: Duration },
    /// Send the release of every part (slots first, the gate last), each reply awaited `limit`
    /// at most, then report each reply with [`HeldMachine::release_reply`].
    SendRelease { limit: Duration },
    /// A renew proved `lease_s` until `loss_at` (what `validFor` reads).
    Proven { lease_s: u64, loss_at: Instant },
    /// The lock is lost for `reason`; tell the holder (`onLost`, the signal) when `notify`
    /// (false when a release is answering instead). Emitted at most once per hold, before the
    /// connection is closed.
    Lost { reason: String, notify: bool },
    /// Answer the pending release.
    SettleRelease(Result<()>),
    /// Close the connection (the server releases whatever it still holds).
    Close,
    /// Released cleanly: the connection is idle and may go to the pool.
    Pool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Held, nothing in flight: the next renew at `renew_at`.
    Idle,
    /// A renew in flight, started at `started`; `own`: sent by this machine's driver (else
    /// another writer's, the watchdog's, is awaited); `got` of its part replies are in, the
    /// smallest lease `lease`; `release`: a release was asked meanwhile; `give_up_at`: when to
    /// stop waiting for the reply.
    Renewing {
        started: Instant,
        own: bool,
        got: usize,
        lease: u64,
        release: bool,
        give_up_at: Instant,
    },
    /// The release in flight, answered by `deadline`; `got` part replies in.
    Releasing { deadline: Instant, got: usize },
    /// Lost by the lease clock: the connection stays open until `until` (the server's
    /// earliest expiry), then closes.
    Lingering { until: Instant },
    /// Over: released, lost and closed, or aborted.
    Done,
}

/// A held lock's lifecycle (see the module comment).
#[derive(Debug)]
pub struct HeldMachine {
    renew_ratio: f64,
    renew_max_interval: Duration,
    socket_timeout: Duration,
    ttl_s: Option<u64>,
    grant_lease_s: u64,
    lease_s: u64,
    /// When the request that proved the lease was sent: the lease clock's start.
    sent: Instant,
    /// The parts renewed and released together (one name each, for the loss's words): one for
    /// a plain lock or slot, the gate and slots of a shared-mode hold.
    parts: Vec<String>,
    /// Whether the parts were named by the caller (a shared-mode hold, whose loss names the key
    /// of the part refused), not just the one key.
    named: bool,
    state: State,
    /// Why the lock was lost (the first reason), once it was.
    lost: Option<String>,
    /// The release error kept while the other parts' replies come in.
    release_failed: Option<DflockdError>,
    actions: VecDeque<Action>,
}

impl HeldMachine {
    /// The hold of a grant of `lease_s` whose request was sent at `sent`, renewed with `opts`
    /// (ratio, cap, TTL, socket timeout); `parts`: the names of the keys held together (empty:
    /// the one key of `opts`).
    pub fn new(opts: &PrimitiveOptions, lease_s: u64, sent: Instant, parts: Vec<String>) -> Self {
        let named = !parts.is_empty();
        let parts = if parts.is_empty() {
            vec![opts.key.clone()]
        } else {
            parts
        };
        HeldMachine {
            renew_ratio: opts.renew_ratio,
            renew_max_interval: opts.renew_max_interval,
            socket_timeout: opts.connect.socket_timeout,
            ttl_s: opts.lease_ttl_s,
            grant_lease_s: lease_s,
            lease_s,
            sent,
            parts,
            named,
            state: State::Idle,
            lost: None,
            release_failed: None,
            actions: VecDeque::new(),
        }
    }

    fn schedule(&self) -> Schedule {
        Schedule::with(self.renew_ratio, self.renew_max_interval, self.lease_s)
    }

    /// The lease proven last, in seconds.
    pub fn lease_s(&self) -> u64 {
        self.lease_s
    }

    /// When the request that proved the lease was sent.
    pub fn sent(&self) -> Instant {
        self.sent
    }

    /// When the next renew starts.
    pub fn renew_at(&self) -> Instant {
        self.schedule().renew_at(self.sent)
    }

    /// Until when the lease is proven.
    pub fn loss_at(&self) -> Instant {
        self.schedule().loss_at(self.sent)
    }

    /// The earliest instant the server could end the lease.
    pub fn expiry(&self) -> Instant {
        self.schedule().expiry(self.sent)
    }

    /// The time between two renews.
    pub fn renew_interval(&self) -> Duration {
        self.schedule().interval()
    }

    /// How late past [`Self::renew_at`] the caller may be before a watchdog renews in its
    /// stead: a quarter of the time between the renew instant and the loss instant (three
    /// quarters left for the watchdog's round trip), at most [`WATCHDOG_GRACE_MAX`].
    pub fn watchdog_grace(&self) -> Duration {
        let gap = self.loss_at().saturating_duration_since(self.renew_at());
        (gap / 4).min(WATCHDOG_GRACE_MAX)
    }

    /// Whether another writer (a watchdog) may renew now: held, not being released or lost.
    pub fn renewable(&self) -> bool {
        match self.state {
            State::Idle => true,
            State::Renewing { release, .. } => !release,
            _ => false,
        }
    }

    /// Whether the hold is idle: nothing in flight, so anything the server sends means it
    /// dropped the connection.
    pub fn idle(&self) -> bool {
        self.state == State::Idle
    }

    /// Whether the release is in flight.
    pub fn releasing(&self) -> bool {
        matches!(self.state, State::Releasing { .. })
    }

    /// Whether a renew of this machine's driver is awaiting its reply.
    pub fn renewing(&self) -> bool {
        matches!(self.state, State::Renewing { own: true, .. })
    }

    /// Whether the hold is over (released, lost and closed, or aborted).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Why the lock was lost, once it was.
    pub fn loss_reason(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Self::handle_timeout`] is due next (`None`: no timer).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Idle => Some(self.renew_at()),
            State::Renewing { give_up_at, .. } => Some(give_up_at),
            State::Releasing { deadline, .. } => Some(deadline),
            State::Lingering { until } => Some(until),
            State::Done => None,
        }
    }

    /// The timer fired at `now` (early ticks change nothing).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_beside(now, false);
    }

    /// The timer fired at `now`; `other_renewing`: another writer (the watchdog) has a renew
    /// of this hold in flight, whose reply then stands for this period's renew.
    pub fn handle_timeout_beside(&mut self, now: Instant, other_renewing: bool) {
        match self.state {
            State::Idle if now >= self.loss_at() => self.lost_unconfirmed(false),
            State::Idle if now >= self.renew_at() => {
                let loss_at = self.loss_at();
                self.state = State::Renewing {
                    started: now,
                    own: !other_renewing,
                    got: 0,
                    lease: u64::MAX,
                    release: false,
                    give_up_at: loss_at,
                };
                if !other_renewing {
                    // The reply is awaited past `loss_at` by the I/O (the timer decides then,
                    // and the connection stays open: see `Lingering`).
                    let limit = self.schedule().expiry(now) - now;
                    self.actions.push_back(Action::SendRenew { limit });
                }
            }
            State::Renewing {
                give_up_at,
                release,
                ..
            } if now >= give_up_at => {
                if release && now < self.loss_at() {
                    // The holder is releasing: closing the connection releases on the server
                    // (or the lease ends by itself).
                    self.lose(RELEASE_RENEW_UNANSWERED.to_string(), false);
                    self.settle(Err(lost_error(Some(RELEASE_RENEW_UNANSWERED))));
                    self.close();
                } else {
                    self.lost_unconfirmed(release);
                }
            }
            State::Releasing { deadline, .. } if now >= deadline => {
                self.close();
                self.settle(Err(release_error(DflockdError::new(
                    ErrorCode::Timeout,
                    "no reply to the release in time",
                ))));
            }
            State::Lingering { until } if now >= until => self.close(),
            _ => {}
        }
    }

    /// No renew confirmed within the validity: lost now; the connection stays open until the
    /// server's expiry. `release`: a release is pending and gets the loss instead of `onLost`.
    fn lost_unconfirmed(&mut self, release: bool) {
        let reason = unconfirmed(self.lease_s);
        self.lose(reason.clone(), !release);
        if release {
            self.settle(Err(lost_error(Some(&reason))));
        }
        self.state = State::Lingering {
            until: self.expiry(),
        };
    }

    fn lose(&mut self, reason: String, notify: bool) {
        if self.lost.is_none() {
            self.lost = Some(reason.clone());
            self.actions.push_back(Action::Lost { reason, notify });
        }
    }

    fn settle(&mut self, r: Result<()>) {
        self.actions.push_back(Action::SettleRelease(r));
    }

    fn close(&mut self) {
        self.state = State::Done;
        self.actions.push_back(Action::Close);
    }

    /// One part's reply (parsed as a renew reply), read at `now`, to the renew this machine
    /// asked for, sent at `sent`; the parts answer in order.
    pub fn renew_reply(&mut self, now: Instant, sent: Instant, reply: Result<Option<u64>>) {
        let State::Renewing {
            own: true,
            got,
            lease,
            release,
            ..
        } = self.state
        else {
            if let State::Lingering { .. } = self.state {
                // Too late: the loss was declared; nothing is asked on this connection any more.
                self.close();
            }
            return;
        };
        let lease_part = match reply {
            Ok(l) => renewed_lease(self.ttl_s, l, self.grant_lease_s),
            Err(e) => return self.renew_failed(e, release, got),
        };
        let (got, lease) = (got + 1, lease.min(lease_part));
        if got < self.parts.len() {
            if let State::Renewing {
                got: g, lease: l, ..
            } = &mut self.state
            {
                (*g, *l) = (got, lease);
            }
            return;
        }
        self.proven(lease, sent);
        if release {
            self.send_release(now);
        } else {
            self.state = State::Idle;
        }
    }

    /// The reply, read at `now`, to a renew another writer (the watchdog) sent at `sent` while
    /// this machine's driver was late: through the same lease clock, or the same loss
    /// (reported now). When it is the renew awaited (the driver sent none of its own), a
    /// release waiting for it goes out next; a hold being released or already lost ignores it.
    pub fn other_renew_reply(&mut self, now: Instant, sent: Instant, reply: Result<Option<u64>>) {
        let (own, release) = match self.state {
            State::Idle => (false, false),
            State::Renewing { own, release, .. } => (own, release),
            _ => return,
        };
        let lease = match reply {
            Ok(l) => renewed_lease(self.ttl_s, l, self.grant_lease_s),
            Err(e) => return self.renew_failed(e, release, usize::MAX),
        };
        self.proven(lease, sent);
        match (own, release) {
            // The driver's own renew is still awaited: until the new validity ends, or as long
            // as the release's wait for it lasts.
            (true, false) => {
                let loss_at = self.loss_at();
                if let State::Renewing { give_up_at, .. } = &mut self.state {
                    *give_up_at = loss_at;
                }
            }
            (true, true) => {}
            (false, true) => self.send_release(now),
            (false, false) => self.state = State::Idle,
        }
    }

    fn proven(&mut self, lease_s: u64, sent: Instant) {
        self.lease_s = lease_s;
        if sent > self.sent {
            self.sent = sent;
        }
        self.actions.push_back(Action::Proven {
            lease_s,
            loss_at: self.loss_at(),
        });
    }

    /// A renew was refused (part `part`), made no sense, or its connection failed: lost.
    fn renew_failed(&mut self, e: DflockdError, release: bool, part: usize) {
        let e = match (self.named, self.parts.get(part)) {
            (true, Some(key)) => {
                let out = DflockdError::new(e.code(), format!("renew of '{key}': {}", e.message()));
                match e.reply() {
                    Some(r) => out.with_reply(r),
                    None => out,
                }
            }
            _ => e,
        };
        // Told first, then closed: closing frees the key on a live server.
        self.lose(e.message().to_string(), !release);
        if release {
            self.settle(Err(lost_error_because(&e)));
        }
        self.close();
    }

    /// The connection failed or the server dropped it (EOF, a reset, an unprompted line): it
    /// released the lock.
    pub fn disconnected(&mut self, e: DflockdError) {
        match self.state {
            State::Idle => self.renew_failed(e, false, usize::MAX),
            State::Renewing { release, .. } => self.renew_failed(e, release, usize::MAX),
            State::Releasing { .. } => {
                self.close();
                self.settle(Err(release_error(e)));
            }
            State::Lingering { .. } => self.close(),
            State::Done => {}
        }
    }

    /// The holder releases at `now`. `Err` answers at once (lost, or a release already runs);
    /// else the answer comes as [`Action::SettleRelease`].
    pub fn release(&mut self, now: Instant) -> Result<()> {
        match &mut self.state {
            State::Idle => {
                self.send_release(now);
                Ok(())
            }
            State::Renewing {
                release: release @ false,
                give_up_at,
                ..
            } => {
                // Sent after the renew's reply, which is awaited RELEASE_RENEW_WAIT at most.
                *release = true;
                *give_up_at = (*give_up_at).min(after(now, RELEASE_RENEW_WAIT));
                Ok(())
            }
            State::Renewing { .. } | State::Releasing { .. } => Err(DflockdError::new(
                ErrorCode::NotLocked,
                "a release is already in progress",
            )),
            State::Lingering { .. } | State::Done => Err(match &self.lost {
                Some(r) => lost_error(Some(r)),
                None => release_closed(),
            }),
        }
    }

    /// Send the release: its reply awaited until `loss_at` at most (after which the lease is no
    /// longer proven, whatever the answer), within the socket timeout.
    fn send_release(&mut self, now: Instant) {
        let limit = self
            .socket_timeout
            .min(self.loss_at().saturating_duration_since(now))
            .max(Duration::from_millis(1));
        self.state = State::Releasing {
            deadline: after(now, limit),
            got: 0,
        };
        self.actions.push_back(Action::SendRelease { limit });
    }

    /// One part's reply (parsed as a release reply) to the release.
    pub fn release_reply(&mut self, reply: Result<()>) {
        let State::Releasing { got, .. } = &mut self.state else {
            return;
        };
        *got += 1;
        let all = *got >= self.parts.len();
        if let Err(e) = reply {
            self.release_failed.get_or_insert(e);
        }
        if !all {
            return;
        }
        match self.release_failed.take() {
            None => {
                self.state = State::Done;
                self.actions.push_back(Action::Pool);
                self.settle(Ok(()));
            }
            Some(e) => {
                self.close();
                self.settle(Err(release_error(e)));
            }
        }
    }

    /// `close()`, or the driver stops: drop the connection without a release, report nothing;
    /// a release in flight is answered `LOCK_LOST`.
    pub fn abort(&mut self) {
        let pending = matches!(
            self.state,
            State::Renewing { release: true, .. } | State::Releasing { .. }
        );
        if self.state == State::Done {
            return;
        }
        self.close();
        if pending {
            self.settle(Err(release_closed()));
        }
    }
}

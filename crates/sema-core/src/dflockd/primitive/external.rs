//! An acquisition and hold of a [`Primitive`] whose I/O a caller drives itself (the binding's
//! event-loop driver: the JS thread's own libuv loop, no tokio thread per round trip), while
//! the state stays here: the phase (`Busy` → `Held` → `Idle`, so `token`, `lease_s`,
//! `valid_for`, `cancel()` and `close()` work the same) and the held lock's lifecycle, the
//! same [`HeldMachine`] the tokio renewal task runs. The caller only sends the requests the
//! machine asks for, feeds it the replies, the timer and the connection's end, and arms the
//! one timer it names.

use super::*;
use crate::dflockd::held::rejoin::{FailedOn, Next, Rejoin};
use crate::dflockd::held::{Action, HeldMachine};
use crate::dflockd::protocol::{self, Request};

/// An acquisition started by [`Primitive::begin_external`].
#[derive(Debug)]
pub struct ExternalOp {
    op: u64,
    cancel: CancellationToken,
}

impl ExternalOp {
    /// Whether `cancel()`/`close()` aborted it.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A held lock or slot whose renewal and release the caller drives (see the module comment).
pub struct ExternalHold {
    shared: Arc<HeldShared>,
    opts: Arc<PrimitiveOptions>,
    on_lost: Arc<Mutex<Option<LossCallback>>>,
    cancel: CancellationToken,
    machine: HeldMachine,
}

/// What the caller of an [`ExternalHold`] must do (the machine's [`Action`]s less those the
/// hold applies itself: the lease proven and the loss reported).
#[derive(Debug, PartialEq)]
pub enum ExternalIo {
    /// Send the renew ([`ExternalHold::renew_request`]) and report its reply with
    /// [`ExternalHold::renew_reply`].
    SendRenew,
    /// Send the release ([`ExternalHold::release_request`]) and report its reply with
    /// [`ExternalHold::release_reply`].
    SendRelease,
    /// Answer the pending release.
    SettleRelease(Result<()>),
    /// Close the connection.
    Close,
    /// The connection is idle after a clean release: it may go to the pool.
    Pool,
}

impl Primitive {
    /// Start an acquisition whose I/O the caller drives: refused (`INVALID_ARGUMENT`) while
    /// another runs or a lock is held, `ABORTED` when `ticket` was cancelled. End it with
    /// [`Primitive::external_held`] or [`Primitive::external_end`].
    pub fn begin_external(&self, ticket: Ticket) -> Result<ExternalOp> {
        // Renewal tasks of earlier holds end by themselves (their connection goes to the
        // tokio pool or is closed); nothing here needs it first.
        let (op, cancel, _old) = self.begin_phase(ticket)?;
        Ok(ExternalOp { op, cancel })
    }

    /// The acquisition ended without a hold (timed out or failed). `ABORTED` when it was
    /// cancelled or superseded by `close()`.
    pub fn external_end(&self, op: ExternalOp) -> Result<()> {
        self.end_op(op.op, &op.cancel)
    }

    /// The acquisition got `grant`, its request sent at `sent`: held from now on. `ABORTED`
    /// (nothing held: the caller drops the connection, the server releases on disconnect) when
    /// it was cancelled or superseded meanwhile.
    pub fn external_held(
        &self,
        op: ExternalOp,
        grant: Grant,
        sent: Instant,
    ) -> Result<ExternalHold> {
        let mut st = lock(&self.state);
        let ours = matches!(&st.phase, Phase::Busy { op: o, .. } if *o == op.op);
        if !ours || op.cancel.is_cancelled() {
            if ours {
                st.phase = Phase::Idle;
            }
            return Err(DflockdError::aborted());
        }
        let loss_at = Schedule::new(&self.opts, grant.lease_s).loss_at(sent);
        let shared = Arc::new(HeldShared::new(grant.token, grant.lease_s, loss_at));
        let cancel = CancellationToken::new();
        st.phase = Phase::Held(Held {
            shared: shared.clone(),
            cancel: cancel.clone(),
            task: None,
        });
        Ok(ExternalHold {
            shared,
            opts: self.opts.clone(),
            on_lost: self.on_lost.clone(),
            cancel,
            machine: HeldMachine::new(&self.opts, grant.lease_s, sent, Vec::new()),
        })
    }
}

/// What the answer to an externally driven acquisition's first request means
/// ([`Primitive::external_first_answer`]).
#[derive(Debug, PartialEq)]
pub enum FirstAnswer {
    /// Granted (`acquired …` to an `e`/`se`, `ok …` to a try).
    Granted(Grant),
    /// An `e`/`se` answered `queued`: the wait goes on on tokio
    /// ([`Primitive::external_queued_then`]).
    Queued,
    /// A try (`l`/`sl` with timeout 0) answered `timeout`: nothing is held, the connection is
    /// idle (it may go to the pool) and the acquisition ends `false`.
    TimedOut,
}

/// What an externally driven acquisition does after its first request failed
/// ([`FirstFailed::after`]).
#[derive(Debug, PartialEq)]
pub enum FirstFailed {
    /// The request went on a pooled connection the server had dropped meanwhile (nothing was
    /// held on it): connect anew and send it again.
    Reconnect,
    /// A fresh connection closed before its first reply, as a TLS server does to plain TCP:
    /// probe the server (`connection::closed_unanswered`) and fail with the error that names it.
    Probe,
    /// Fail the acquisition with this error ([`Primitive::external_failed`]).
    Fail,
}

impl FirstFailed {
    /// After the first request failed with `e`, sent on a connection from the pool (`reused`)
    /// or a new one; `confirming`: it was the renew confirming a grant read late (nothing is
    /// held then, and the acquisition fails, as on tokio).
    pub fn after(e: &DflockdError, reused: bool, confirming: bool) -> FirstFailed {
        if confirming || e.code() != ErrorCode::ConnectionError {
            FirstFailed::Fail
        } else if reused {
            FirstFailed::Reconnect
        } else {
            FirstFailed::Probe
        }
    }
}

impl Primitive {
    /// The acquisition `op` ended without a hold because of `e`: `false` (not acquired) when
    /// `e` is the timeout of a deadline in milliseconds ([`PrimitiveOptions::acquire_deadline`]:
    /// the caller's own bound, as on tokio), `ABORTED` when it was cancelled or superseded,
    /// else `e`.
    pub fn external_failed(&self, op: ExternalOp, e: DflockdError) -> Result<bool> {
        self.external_end(op)?;
        if e.code() == ErrorCode::Timeout && self.opts.acquire_deadline.is_some() {
            Ok(false)
        } else {
            Err(e)
        }
    }

    /// The first request of an externally driven acquisition: an `e`/`se` when it waits
    /// (`enqueue`: it took its place among this process's waiters on the key), else a try
    /// (`l`/`sl` with timeout 0: an acquisition with no timeout never waits).
    pub fn external_first_request(&self, enqueue: bool) -> Request<'_> {
        let o = &self.opts;
        let (key, ttl_s, limit) = (o.key.as_str(), o.lease_ttl_s, o.limit);
        match (enqueue, limit) {
            (true, 1) => Request::Enqueue { key, ttl_s },
            (true, limit) => Request::SemEnqueue { key, limit, ttl_s },
            (false, 1) => Request::Lock {
                key,
                timeout_s: 0,
                ttl_s,
            },
            (false, limit) => Request::SemLock {
                key,
                timeout_s: 0,
                limit,
                ttl_s,
            },
        }
    }

    /// The reply limit of the first request of an acquisition started at `started`, sent at
    /// `now`: with a timeout in milliseconds ([`PrimitiveOptions::acquire_deadline`]), what is
    /// left of it, at most the socket timeout (as on tokio, a short timeout cuts the wait);
    /// `None`: the request's own reply limit.
    pub fn external_first_limit(&self, started: Instant, now: Instant) -> Option<Duration> {
        self.opts.acquire_deadline.map(|d| {
            (started + d)
                .saturating_duration_since(now)
                .min(self.opts.connect.socket_timeout)
        })
    }

    /// The first request's reply `line` (`enqueue`: it was an `e`/`se`, see
    /// [`Primitive::external_first_request`]); a refusal or a malformed line is the error the
    /// acquisition fails with.
    pub fn external_first_answer(&self, line: &str, enqueue: bool) -> Result<FirstAnswer> {
        if enqueue {
            protocol::parse_enqueue_reply(line, "acquire").map(|r| match r {
                protocol::EnqueueReply::Acquired(g) => FirstAnswer::Granted(g),
                protocol::EnqueueReply::Queued => FirstAnswer::Queued,
            })
        } else {
            protocol::parse_acquire_reply(line, "acquire").map(|r| match r {
                protocol::AcquireReply::Granted(g) => FirstAnswer::Granted(g),
                protocol::AcquireReply::TimedOut => FirstAnswer::TimedOut,
            })
        }
    }

    /// Whether a grant whose request was sent at `sent` must be confirmed by a renew before it
    /// is reported held (as `Primitive::confirm_grant` does on tokio): the reply was read so late
    /// (the caller's thread blocked between the request and its reply) that the first renew is
    /// due, or the lease clock already ran out though the server granted it then. The caller
    /// then sends the renew (reply limit [`Primitive::external_confirm_limit`]) and ends with
    /// [`Primitive::external_confirmed`]; the lease is counted from that renew.
    pub fn external_needs_confirm(&self, grant: &Grant, sent: Instant, now: Instant) -> bool {
        now >= Schedule::new(&self.opts, grant.lease_s).renew_at(sent)
    }

    /// The reply limit of a confirming renew started at `now` (as on tokio: the socket timeout,
    /// at most the validity a renew sent now would prove).
    pub fn external_confirm_limit(&self, grant: &Grant, now: Instant) -> Duration {
        let sched = Schedule::new(&self.opts, grant.lease_s);
        self.opts
            .connect
            .socket_timeout
            .min(sched.loss_at(now) - now)
            .max(Duration::from_millis(1))
    }

    /// The confirming renew of `grant`, sent at `sent`, was answered `reply` (parsed as a renew
    /// reply) at `now`: the grant with the renewed lease (reported held, even if its next renew
    /// is due already: a slow link is not confirmed again and again), or `LOCK_LOST` when the
    /// server refused it (the grant's lease had already ended, the key may be someone else's),
    /// as on tokio, or when that reply too came after the validity it proves.
    pub fn external_confirmed(
        &self,
        grant: Grant,
        reply: Result<Option<u64>>,
        sent: Instant,
        now: Instant,
    ) -> Result<Grant> {
        match reply {
            Ok(lease) => {
                let lease_s = renewed_lease(self.opts.lease_ttl_s, lease, grant.lease_s);
                if now >= Schedule::new(&self.opts, lease_s).loss_at(sent) {
                    return Err(DflockdError::new(
                        ErrorCode::LockLost,
                        "the grant's confirming renew was answered after the validity it proves",
                    ));
                }
                Ok(Grant { lease_s, ..grant })
            }
            Err(e) if e.code() == ErrorCode::ServerError => Err(DflockdError::lost_because(
                "the granted lease had already expired (renew right after the grant was rejected)",
                &e,
            )),
            Err(e) => Err(e),
        }
    }
}

impl Primitive {
    /// The first request of an externally driven blocking acquisition (its `e`/`se`, sent at
    /// `sent`, the acquisition started at `started`) was answered `queued`: the wait goes on
    /// here, on tokio, on `conn` (a waiter gains nothing from the event loop, and this path
    /// rides out a server restart), then renews as a task of its own. `done` gets `true` when
    /// held, `false` on timeout.
    pub async fn external_queued_then(
        self: Arc<Self>,
        op: ExternalOp,
        conn: Connection,
        started: Instant,
        sent: Instant,
        done: impl FnOnce(Result<bool>) + Send + 'static,
    ) {
        let end = self.acquisition_end(started);
        let work = async {
            let e = match self.wait_queued(conn, end, sent).await {
                Err(e) => e,
                r => return r,
            };
            // As `acquire_until` after a dropped waiter: connect again with backoff and
            // enqueue with what is left of the timeout.
            match Rejoin::new(end).failed(Instant::now(), e, FailedOn::Wait, true) {
                Next::Fail(e) => Err(e),
                Next::Retry { at, .. } => {
                    tokio::time::sleep_until(at).await;
                    self.acquire_until_from(None, end, None, true).await
                }
            }
        };
        match self.run_acquisition(op.op, op.cancel, started, work).await {
            Ok(Some(armed)) => {
                drop(self);
                done(Ok(true));
                armed.run().await;
            }
            Ok(None) => done(Ok(false)),
            Err(e) => done(Err(e)),
        }
    }
}

impl ExternalHold {
    /// The key.
    pub fn key(&self) -> &str {
        &self.opts.key
    }

    /// The grant's token.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The held-lock machine (its clock: `renew_interval`, `watchdog_grace`, `sent`; whether it
    /// is `renewing`, `renewable`, `idle`, `is_done`).
    pub fn machine(&self) -> &HeldMachine {
        &self.machine
    }

    /// The renew of this hold (`n`, or `sn` for a semaphore slot).
    pub fn renew_request(&self) -> Request<'_> {
        let o = &self.opts;
        Request::renew(&o.key, &self.shared.token, o.lease_ttl_s, o.limit > 1)
    }

    /// The release of this hold (`r`, or `sr`).
    pub fn release_request(&self) -> Request<'_> {
        let o = &self.opts;
        Request::release(&o.key, &self.shared.token, o.limit > 1)
    }

    /// The next thing for the caller to do; the lease proven and the loss (reported once, to
    /// the loss callback unless a release answers it or the hold was stopped) are applied here.
    pub fn poll_io(&mut self) -> Option<ExternalIo> {
        loop {
            return Some(match self.machine.poll_action()? {
                Action::Proven { lease_s, loss_at } => {
                    self.shared.set_lease(lease_s, loss_at);
                    continue;
                }
                Action::Lost { reason, notify } => {
                    let notify = notify && !self.cancel.is_cancelled();
                    self.shared
                        .mark_lost(&self.opts.key, &self.on_lost, notify, &reason);
                    continue;
                }
                Action::SendRenew { .. } => ExternalIo::SendRenew,
                Action::SendRelease { .. } => ExternalIo::SendRelease,
                Action::SettleRelease(r) => ExternalIo::SettleRelease(r),
                Action::Close => ExternalIo::Close,
                Action::Pool => ExternalIo::Pool,
            });
        }
    }

    /// When to call [`Self::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    /// The timer fired at `now`; `watchdog_renewing`: the watchdog's renew of this hold is in
    /// flight (its reply stands for this period's renew).
    pub fn handle_timeout(&mut self, now: Instant, watchdog_renewing: bool) {
        self.machine.handle_timeout_beside(now, watchdog_renewing);
    }

    /// The reply `line` to the caller's renew sent at `sent`, read at `now`.
    pub fn renew_reply(&mut self, now: Instant, sent: Instant, line: &str) {
        let reply = protocol::parse_renew_reply(line, "renew");
        self.machine.renew_reply(now, sent, reply);
    }

    /// The reply `line`, read at `now`, to a renew the watchdog sent at `sent` while the caller
    /// was late; the loss reason says who renewed (the holder learns its thread was blocked).
    pub fn watchdog_reply(&mut self, now: Instant, sent: Instant, line: &str) {
        let reply = protocol::parse_renew_reply(
            line,
            "renew sent by the watchdog while JavaScript was blocked",
        );
        self.machine.other_renew_reply(now, sent, reply);
    }

    /// The reply `line` to the release.
    pub fn release_reply(&mut self, line: &str) {
        let reply = protocol::parse_release_reply(line, "release");
        self.machine.release_reply(reply);
    }

    /// The connection failed, or the server dropped it.
    pub fn disconnected(&mut self, e: DflockdError) {
        self.machine.disconnected(e);
    }

    /// `close()`: drop the connection without a release, report nothing.
    pub fn abort(&mut self) {
        self.machine.abort();
    }

    /// Release at `now`: the primitive goes idle now (`NOT_LOCKED` when `close()` already ended
    /// this hold, `LOCK_LOST` when it was lost: answered at once, the connection to close);
    /// else the answer comes as [`ExternalIo::SettleRelease`].
    pub fn release(&mut self, prim: &Primitive, now: Instant) -> Result<()> {
        {
            let mut st = lock(&prim.state);
            let ours = matches!(&st.phase, Phase::Held(h) if Arc::ptr_eq(&h.shared, &self.shared));
            if !ours {
                self.machine.abort();
                return Err(DflockdError::new(ErrorCode::NotLocked, "nothing held"));
            }
            st.phase = Phase::Idle;
        }
        self.cancel.cancel();
        let r = self.machine.release(now);
        if r.is_err() {
            self.machine.abort();
        }
        r
    }
}

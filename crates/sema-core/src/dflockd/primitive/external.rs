//! An acquisition and hold of a [`Primitive`] whose I/O a caller drives itself (the binding's
//! event-loop driver: the JS thread's own libuv loop, no tokio thread per round trip), while
//! the state stays here: the phase (`Busy` → `Held` → `Idle`, so `token`, `lease_s`,
//! `valid_for`, `cancel()` and `close()` work the same), the lease clock ([`Schedule`]), the
//! renewed lease ([`renewed_lease`]) and the loss, reported once ([`HeldShared::mark_lost`]).
//! The caller only sends requests, reads replies and arms timers at the instants this says.

use super::*;
use crate::dflockd::renewer::{release_error, unconfirmed};

/// The longest a caller may be late for a renew before the watchdog renews in its stead
/// ([`ExternalHold::watchdog_grace`]). Small, because the client does not know the server's
/// idle limit: 23 s by default, but `--read-timeout` may set it just above the renew interval
/// (the Web Locks steal test runs 5 s against renews every 4.5 s), and the watchdog's renew must
/// come about when the caller's own would. 50 ms is tens of times a libuv timer's lateness on a
/// loop that runs; a caller later than that finds the watchdog's renew in flight and awaits its
/// reply instead of sending a second one, so lateness changes who renews, not how often.
pub const WATCHDOG_GRACE_MAX: Duration = Duration::from_millis(50);

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
    grant_lease_s: u64,
    lease_s: u64,
    /// When the request that proved the lease was sent: the lease clock's start.
    sent: Instant,
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
            grant_lease_s: grant.lease_s,
            lease_s: grant.lease_s,
            sent,
        })
    }
}

impl Primitive {
    /// Whether a grant whose request was sent at `sent` must be confirmed by a renew before it
    /// is reported held (as [`Primitive::confirm_grant`] on tokio): the reply was read so late
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
            match self.wait_queued(conn, end, sent).await {
                // As `acquire_until` after a dropped waiter: connect again with backoff
                // and enqueue with what is left of the timeout.
                Err(e) if rejoinable(&e) => match end {
                    Some(end) if Instant::now() + RECONNECT_BACKOFF_MIN < end => {
                        tokio::time::sleep(RECONNECT_BACKOFF_MIN).await;
                        self.acquire_until_from(None, Some(end), None, true).await
                    }
                    _ => Err(e),
                },
                r => r,
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

    /// The options of the primitive.
    pub fn options(&self) -> &PrimitiveOptions {
        &self.opts
    }

    /// The grant's token.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    fn schedule(&self) -> Schedule {
        Schedule::new(&self.opts, self.lease_s)
    }

    /// When to start the next renew.
    pub fn renew_at(&self) -> Instant {
        self.schedule().renew_at(self.sent)
    }

    /// Until when the lease is proven: with no renew confirmed by then, it is lost.
    pub fn loss_at(&self) -> Instant {
        self.schedule().loss_at(self.sent)
    }

    /// The earliest instant the server could end the lease (keep the connection open until
    /// then after a loss declared by the lease clock, so the key is not freed before the
    /// holder was told).
    pub fn expiry(&self) -> Instant {
        self.schedule().expiry(self.sent)
    }

    /// The reply limit of a renew started now: until the server's expiry.
    pub fn renew_limit(&self, now: Instant) -> Duration {
        self.schedule().expiry(now).saturating_duration_since(now)
    }

    /// Whether the clock says a grant just got (its request sent at [`Self::sent`]) must be
    /// renewed before it is reported (it waited so long its first renew is already due).
    pub fn needs_confirm(&self, now: Instant) -> bool {
        now >= self.renew_at()
    }

    /// The lease clock's interval between renews.
    pub fn renew_interval(&self) -> Duration {
        self.schedule().renew_at(self.sent) - self.sent
    }

    /// How late past [`Self::renew_at`] the caller may be before a [`watchdog`] renews in its
    /// stead: a quarter of the time between the renew instant and the loss instant (leaving
    /// three quarters for the watchdog's round trip before the lease clock gives up), at most
    /// [`WATCHDOG_GRACE_MAX`].
    ///
    /// [`watchdog`]: crate::dflockd::watchdog
    pub fn watchdog_grace(&self) -> Duration {
        let gap = self.loss_at().saturating_duration_since(self.renew_at());
        (gap / 4).min(WATCHDOG_GRACE_MAX)
    }

    /// When the request that proved the lease was sent.
    pub fn sent(&self) -> Instant {
        self.sent
    }

    /// A renew sent at `sent` was confirmed with `reply` (the lease the server reported).
    pub fn renewed(&mut self, reply: Option<u64>, sent: Instant) {
        self.lease_s = renewed_lease(self.opts.lease_ttl_s, reply, self.grant_lease_s);
        self.sent = sent;
        self.shared.set_lease(self.lease_s, self.loss_at());
    }

    /// `close()` (or a new acquisition after a loss) ended the hold: stop, report nothing.
    pub fn is_stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Whether the hold was marked lost.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Mark the lock lost for `reason`; the loss callback is called the first time, unless
    /// `notify` is false (a release is answering instead) or the hold was stopped.
    pub fn lost(&self, notify: bool, reason: &str) {
        let notify = notify && !self.is_stopped();
        self.shared
            .mark_lost(&self.opts.key, &self.on_lost, notify, reason);
    }

    /// The reason of a loss declared because no renew was confirmed within the validity.
    pub fn unconfirmed_reason(&self) -> String {
        unconfirmed(self.lease_s)
    }

    /// The `LOCK_LOST` error of a release after a loss.
    pub fn lost_error(&self) -> DflockdError {
        let reason = lock(&self.shared.loss_reason).clone();
        DflockdError::new(
            ErrorCode::LockLost,
            match reason {
                Some(r) => format!("the lock was lost before release: {r}"),
                None => "the lock was lost before release".to_string(),
            },
        )
    }

    /// Start a release: the primitive goes idle now (the caller sends `r`, then pools the
    /// connection on a clean `ok`). `NOT_LOCKED` when `close()` already ended this hold,
    /// `LOCK_LOST` when it was lost.
    pub fn begin_release(&self, prim: &Primitive) -> Result<()> {
        let mut st = lock(&prim.state);
        let ours = matches!(&st.phase, Phase::Held(h) if Arc::ptr_eq(&h.shared, &self.shared));
        if !ours {
            return Err(DflockdError::new(ErrorCode::NotLocked, "nothing held"));
        }
        st.phase = Phase::Idle;
        drop(st);
        self.cancel.cancel();
        if self.is_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// The error of a failed release (as the renewal task reports it).
    pub fn release_error(&self, e: DflockdError) -> DflockdError {
        release_error(e)
    }
}

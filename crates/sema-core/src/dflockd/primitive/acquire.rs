//! The blocking acquire of a [`Primitive`] (`l`/`sl` for a try; `e`+`w` in call order for a wait,
//! see [`order`](crate::dflockd::order)): connect or take a pooled connection, send, confirm a
//! late grant by a renew, and ride out a server restart while the timeout lasts.

use super::*;
use crate::dflockd::held::rejoin::{FailedOn, Next, Rejoin};
use crate::dflockd::shared;

/// A grant: its connection, the grant, when its lease clock started, and a shared lock's parts
/// (empty for a plain lock or slot).
pub(super) type Got = (Connection, Grant, Instant, Vec<shared::Part>);

impl Primitive {
    /// Connect and acquire with `acquire_timeout_s`. `Ok(true)` = held (renewal started),
    /// `Ok(false)` = timed out (connection closed). Cancellation (`cancel()`/`close()`) closes
    /// the connection and yields `ABORTED`.
    pub async fn acquire(&self) -> Result<bool> {
        self.acquire_with(self.ticket()).await
    }

    /// [`Primitive::acquire`] with a ticket taken earlier.
    pub async fn acquire_with(&self, ticket: Ticket) -> Result<bool> {
        Ok(match self.acquire_armed(ticket, self.place()).await? {
            Some(armed) => {
                armed.spawn();
                true
            }
            None => false,
        })
    }

    /// [`Primitive::acquire_with`] reporting its outcome through `done`, after which, when
    /// held, this same task goes on as the renewal task: one task per acquisition, not one to
    /// acquire and another spawned to renew. The primitive itself is let go before renewing:
    /// dropping it still stops the renewal.
    ///
    /// Measured on the Go server (lock + release pairs, this path with [`Primitive::release_then`]
    /// and the JS layer keeping one primitive per lock; best of 7 runs on a loaded 2-core
    /// machine): client CPU per pair 61 → 50 µs with 1 worker, 42.6 → 28.5 µs with 10. Context
    /// switches stay ~8 per pair with 1 worker: the napi runtime runs one tokio worker here, so
    /// no spawn crossed threads; what is left is 2 per request on that worker (woken by the
    /// request, parked until the reply) and 1 on the JS thread (the promise), the floor of a
    /// client whose I/O runs off the JS thread.
    ///
    /// Its place among this process's waiters on the same server and key (see
    /// [`order`](crate::dflockd::order)) is taken when this is called, not when the future first runs:
    /// acquisitions started in order are granted in order.
    pub fn acquire_then(
        self: Arc<Self>,
        ticket: Ticket,
        done: impl FnOnce(Result<bool>) + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let place = self.place();
        async move {
            match self.acquire_armed(ticket, place).await {
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

    /// The place of a blocking acquisition in its (server, key) chain; none for a try.
    pub fn place(&self) -> Option<Place> {
        (self.opts.acquire_timeout_s > 0).then(|| Place::take(&self.opts.connect, &self.opts.key))
    }

    /// The acquisition: `Some` = held (its renewal armed, not started), `None` = timed out.
    async fn acquire_armed(&self, ticket: Ticket, place: Option<Place>) -> Result<Option<Armed>> {
        let (op, cancel, old, kept) = self.begin(ticket)?;
        let started = Instant::now();
        join_stopped(old).await;
        let end = self.acquisition_end(started);
        let work = self.acquire_until(kept, end, place);
        self.run_acquisition(op, cancel, started, work).await
    }

    /// The deadline of an acquisition started at `started` (`None`: a try).
    pub(super) fn acquisition_end(&self, started: Instant) -> Option<Instant> {
        let o = &self.opts;
        match o.acquire_deadline {
            Some(d) => started.checked_add(d),
            None if o.acquire_timeout_s > 0 => {
                started.checked_add(Duration::from_secs(o.acquire_timeout_s))
            }
            None => None,
        }
    }

    /// Runs the acquisition `work` of operation `op` (cancellable, cut at the deadline of a
    /// timeout in ms) and records its outcome: `Some` = held (renewal armed), `None` = timed out.
    pub(super) async fn run_acquisition(
        &self,
        op: u64,
        cancel: CancellationToken,
        started: Instant,
        work: impl std::future::Future<Output = Result<Option<Got>>>,
    ) -> Result<Option<Armed>> {
        let work = async {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(DflockdError::aborted()),
                r = work => r,
            }
        };
        let res = match self.opts.acquire_deadline {
            None => work.await,
            // Past the deadline the connection is dropped with the future: the server cancels
            // the wait, or auto-releases a grant that crossed the cut.
            Some(d) => match tokio::time::timeout_at(started + d, work).await {
                Ok(r) => r,
                Err(_) => Ok(None),
            },
        };
        match res {
            Ok(Some((conn, g, sent, parts))) => self
                .commit_held(op, &cancel, conn, g, sent, parts)
                .map(Some),
            Ok(None) => self.end_op(op, &cancel).map(|_| None),
            Err(e) => {
                self.end_op(op, &cancel)?;
                Err(e)
            }
        }
    }

    /// Sends `l`/`sl` until granted, timed out or failed. A waiter whose connection the server
    /// drops (restarted or stopping: EOF, a reset, a refused reconnect, or the bare `error` a
    /// stopping server answers blocked waits with) connects again with backoff (50 ms doubling
    /// to 1 s) and enqueues again with what is left of its timeout, until `end`; it then
    /// reports the last failure. A first connect that fails is reported at once (a wrong
    /// address is likelier than a restart), and so is any failure of a try (timeout 0).
    pub(super) async fn acquire_until(
        &self,
        kept: Option<Connection>,
        end: Option<Instant>,
        place: Option<Place>,
    ) -> Result<Option<Got>> {
        self.acquire_until_from(kept, end, place, false).await
    }

    /// [`Primitive::acquire_until`]; `reached`: the server was reached before (a waiter
    /// rejoining after its connection was dropped), so a refused connect is retried too.
    pub(super) async fn acquire_until_from(
        &self,
        mut kept: Option<Connection>,
        end: Option<Instant>,
        mut place: Option<Place>,
        mut reached: bool,
    ) -> Result<Option<Got>> {
        let mut rejoin = Rejoin::new(end);
        let mut timeout_s = self.opts.acquire_timeout_s;
        loop {
            let mut on = FailedOn::Wait;
            let e = match self
                .acquire_once(
                    kept.take(),
                    timeout_s,
                    end,
                    place.take(),
                    &mut reached,
                    &mut on,
                )
                .await
            {
                Err(e) => e,
                r => return r,
            };
            match rejoin.failed(Instant::now(), e, on, reached) {
                Next::Fail(e) => return Err(e),
                Next::Retry { at, .. } => {
                    tokio::time::sleep_until(at).await;
                    timeout_s = rejoin.timeout_s(Instant::now());
                }
            }
        }
    }

    /// One connection's attempt of [`Primitive::acquire_until`]. `reached` turns true once a
    /// connection to the server was open; `on` tells which request a failure answered.
    async fn acquire_once(
        &self,
        kept: Option<Connection>,
        timeout_s: u64,
        end: Option<Instant>,
        place: Option<Place>,
        reached: &mut bool,
        on: &mut FailedOn,
    ) -> Result<Option<Got>> {
        let o = &self.opts;
        let (mut conn, reused) = self.open(kept).await?;
        *reached = true;
        if let Some(mode) = o.mode {
            let mut got = shared::acquire(o, &mut conn, mode, timeout_s, end, place).await;
            if reused && matches!(&got, Err(e) if e.code() == ErrorCode::ConnectionError) {
                // A pooled connection the server had dropped (so nothing is held on it); its
                // place was given up with the failed request.
                conn = Connection::connect(&o.connect).await?;
                got = shared::acquire(o, &mut conn, mode, timeout_s, end, None).await;
            }
            return Ok(got?.map(|g| (conn, g.grant(), g.sent, g.parts)));
        }
        // A blocking acquisition sends `e` (answered at once: `acquired` or `queued`), so the next
        // one of this process knows when its own request may follow; a blocking `l` gives no
        // such answer, and sending `l` when no other waiter was seen yet still lost the order
        // when others came a few µs later (1 run in 20 with 9 semaphore waiters). A try (no
        // place) sends `l`/`sl` with timeout 0.
        if let Some(p) = place {
            return self.acquire_in_order(conn, reused, end, p, on).await;
        }
        let mut reply = conn
            .acquire_any(&o.key, timeout_s, o.limit, o.lease_ttl_s)
            .await;
        // A kept connection that turns out dead (the server dropped it while idle; nothing was
        // held on it) is replaced by a fresh one and the request sent once more.
        if reused && matches!(&reply, Err(e) if e.code() == ErrorCode::ConnectionError) {
            conn = Connection::connect(&o.connect).await?;
            reply = conn
                .acquire_any(&o.key, timeout_s, o.limit, o.lease_ttl_s)
                .await;
        }
        let sent = conn.last_sent().unwrap_or_else(Instant::now);
        match reply? {
            AcquireReply::TimedOut => Ok(None),
            AcquireReply::Granted(g) => {
                let (g, sent) = self.confirm_grant(&mut conn, g, sent, false).await?;
                Ok(Some((conn, g, sent, Vec::new())))
            }
        }
    }

    /// [`Primitive::acquire_once`] for a waiter with others of this process on its key: its
    /// turn (the previous place's `e` answered), `e`/`se`, then — when queued — `w`/`sw` with
    /// what is left of the timeout. An `e` answered `acquired` is one round trip, like `l`. The
    /// lease clock starts when the `e` was sent (no grant can precede it), as for `l`.
    async fn acquire_in_order(
        &self,
        mut conn: Connection,
        reused: bool,
        end: Option<Instant>,
        mut place: Place,
        on: &mut FailedOn,
    ) -> Result<Option<Got>> {
        let o = &self.opts;
        place
            .turn(o.connect.connect_timeout + o.connect.socket_timeout)
            .await;
        let mut reply = self.send_enqueue(&mut conn).await;
        if reused && matches!(&reply, Err(e) if e.code() == ErrorCode::ConnectionError) {
            conn = Connection::connect(&o.connect).await?;
            reply = self.send_enqueue(&mut conn).await;
        }
        // Answered (or failed): the next waiter may send its own.
        drop(place);
        let sent = conn.last_sent().unwrap_or_else(Instant::now);
        if reply.is_err() {
            *on = FailedOn::Enqueue;
        }
        match reply? {
            EnqueueReply::Acquired(g) => {
                let (g, sent) = self.confirm_grant(&mut conn, g, sent, false).await?;
                Ok(Some((conn, g, sent, Vec::new())))
            }
            EnqueueReply::Queued => self.wait_queued(conn, end, sent).await,
        }
    }

    /// After an `e`/`se` answered `queued` (sent at `sent`): `w`/`sw` with what is left of the
    /// timeout, then the grant confirmed when it waited long.
    pub(super) async fn wait_queued(
        &self,
        mut conn: Connection,
        end: Option<Instant>,
        sent: Instant,
    ) -> Result<Option<Got>> {
        let o = &self.opts;
        let timeout_s = match end {
            Some(end) => {
                let left = end.saturating_duration_since(Instant::now());
                left.as_secs() + u64::from(left.subsec_nanos() > 0)
            }
            None => o.acquire_timeout_s,
        };
        let reply = if o.limit == 1 {
            conn.wait(&o.key, timeout_s).await?
        } else {
            conn.sem_wait(&o.key, timeout_s).await?
        };
        let grant = match reply {
            AcquireReply::TimedOut => return Ok(None),
            AcquireReply::Granted(g) => g,
        };
        let (g, sent) = self.confirm_grant(&mut conn, grant, sent, false).await?;
        Ok(Some((conn, g, sent, Vec::new())))
    }

    /// The client's lease clock of a grant starts when its request was sent; after a blocking
    /// acquire or wait that waited, that start may lie so far back that the first renew is
    /// already due (or the lease already past, though the server granted it just now). Then
    /// (or always, with `force`) the grant is renewed at once and its lease counted from that
    /// renew, so the caller never starts with a lease it cannot prove. `LOCK_LOST` when the
    /// server refuses (the grant's lease had already ended).
    pub(super) async fn confirm_grant(
        &self,
        conn: &mut Connection,
        grant: Grant,
        sent: Instant,
        force: bool,
    ) -> Result<(Grant, Instant)> {
        let sched = Schedule::new(&self.opts, grant.lease_s);
        let now = Instant::now();
        if !force && now < sched.renew_at(sent) {
            return Ok((grant, sent));
        }
        let o = &self.opts;
        let limit = o
            .connect
            .socket_timeout
            .min(sched.loss_at(now) - now)
            .max(Duration::from_millis(1));
        match conn
            .renew_within(&o.key, &grant.token, o.lease_ttl_s, o.limit > 1, limit)
            .await
        {
            Ok(lease) => {
                let sent = conn.last_sent().unwrap_or(now);
                let lease_s = renewed_lease(o.lease_ttl_s, lease, grant.lease_s);
                Ok((Grant { lease_s, ..grant }, sent))
            }
            Err(e) if e.code() == ErrorCode::ServerError => Err(DflockdError::lost_because(
                "the granted lease had already expired (renew right after the grant was rejected)",
                &e,
            )),
            Err(e) => Err(e),
        }
    }
}

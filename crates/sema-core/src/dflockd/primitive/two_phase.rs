//! The two-phase acquire of a [`Primitive`]: `enqueue()` (`e`/`se`: granted at once, or queued
//! on its connection) and `wait()` (`w`/`sw` on that same connection).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{busy, join_stopped, lock, EnqueueOutcome, Phase, Primitive, Ticket};
use crate::dflockd::connection::Connection;
use crate::dflockd::error::{DflockdError, ErrorCode, Result};
use crate::dflockd::held::rejoin::{FailedOn, Next, Rejoin};
use crate::dflockd::protocol::{self, AcquireReply, EnqueueReply, Grant, MAX_SECONDS};

impl Primitive {
    /// One `w`/`sw` on the queued connection: `None` = timed out; a grant is confirmed by a renew
    /// (see [`Primitive::confirm_grant`]).
    async fn wait_once(
        &self,
        conn: &mut Connection,
        timeout_s: u64,
    ) -> Result<Option<(Grant, Instant)>> {
        let o = &self.opts;
        let reply = if o.limit == 1 {
            conn.wait(&o.key, timeout_s).await?
        } else {
            conn.sem_wait(&o.key, timeout_s).await?
        };
        let grant = match reply {
            AcquireReply::TimedOut => return Ok(None),
            AcquireReply::Granted(g) => g,
        };
        let sent = conn.last_sent().unwrap_or_else(Instant::now);
        self.confirm_grant(conn, grant, sent, true).await.map(Some)
    }

    /// A queued waiter's new connection and `e`/`se`: `Some` = granted at once (with the
    /// send time of its lease), `None` = queued again on `conn`.
    async fn rejoin(&self, conn: &mut Connection) -> Result<Option<(Grant, Instant)>> {
        *conn = Connection::connect(&self.opts.connect).await?;
        match self.send_enqueue(conn).await? {
            EnqueueReply::Acquired(g) => {
                Ok(Some((g, conn.last_sent().unwrap_or_else(Instant::now))))
            }
            EnqueueReply::Queued => Ok(None),
        }
    }

    /// Phase one of a two-phase acquire: connect and send `e`/`se`. `Acquired` = held
    /// (renewal started); `Queued` = call [`Primitive::wait`] promptly (the gap counts against
    /// the server's idle limit, and a grant's lease runs from the grant).
    pub async fn enqueue(&self) -> Result<EnqueueOutcome> {
        self.enqueue_with(self.ticket()).await
    }

    /// [`Primitive::enqueue`] with a ticket taken earlier.
    pub async fn enqueue_with(&self, ticket: Ticket) -> Result<EnqueueOutcome> {
        if self.opts.mode.is_some() {
            return Err(DflockdError::invalid(
                "enqueue()/wait() are not available with a mode (the protocol's two-phase acquire is for one key); use acquire()",
            ));
        }
        let (op, cancel, old, kept) = self.begin(ticket)?;
        join_stopped(old).await;
        let res = self
            .open_and_send(kept, &cancel, |p, c| Box::pin(p.send_enqueue(c)))
            .await;
        match res {
            Ok((conn, EnqueueReply::Acquired(g))) => {
                let sent = conn.last_sent().unwrap_or_else(Instant::now);
                self.commit_held(op, &cancel, conn, g, sent, Vec::new())
                    .map(|armed| {
                        armed.spawn();
                        EnqueueOutcome::Acquired
                    })
            }
            Ok((conn, EnqueueReply::Queued)) => self
                .commit_queued(op, &cancel, conn)
                .map(|_| EnqueueOutcome::Queued),
            Err(e) => {
                self.end_op(op, &cancel)?;
                Err(e)
            }
        }
    }

    /// Phase two: wait up to `timeout_s` for the grant after `enqueue()` answered `Queued`.
    /// After the fast path (`Acquired`) it returns `Ok(true)` without a request. A grant is
    /// verified with one immediate renew (a grant whose lease expired before `w` was sent
    /// still answers `ok`); if that fails the result is `LOCK_LOST`. `Ok(false)` = timed out
    /// (the connection is closed: its queue state is ambiguous; enqueue again). A waiter whose
    /// server drops it (a restart) connects again with backoff and enqueues again while its
    /// timeout lasts, as [`Primitive::acquire`] does.
    pub async fn wait(&self, timeout_s: u64) -> Result<bool> {
        self.wait_with(self.ticket(), timeout_s).await
    }

    /// [`Primitive::wait`] with a ticket taken earlier. A wait cancelled before it started
    /// also abandons the pending enqueue (its connection is closed).
    pub async fn wait_with(&self, ticket: Ticket, timeout_s: u64) -> Result<bool> {
        self.wait_until(ticket, timeout_s, None).await
    }

    /// [`Primitive::wait_with`] for a timeout finer than the protocol's whole seconds: the
    /// server gets the ceiling, and at `timeout` from this call the client stops waiting and
    /// drops the connection (the server withdraws the wait, or auto-releases a grant that
    /// crossed the cut), as `acquire()` does at its deadline. `Ok(false)` then.
    pub async fn wait_for(&self, ticket: Ticket, timeout: Duration) -> Result<bool> {
        let ceil_s = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        let deadline = (!timeout.is_zero()).then(|| Instant::now() + timeout);
        self.wait_until(ticket, ceil_s, deadline).await
    }

    async fn wait_until(
        &self,
        ticket: Ticket,
        timeout_s: u64,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        // Started, even when refused here: the stage no longer counts it as on its way.
        self.started_upto.fetch_max(ticket.0, Ordering::SeqCst);
        protocol::validate_timeout(timeout_s)?;
        let (op, cancel, mut conn) = {
            let mut st = lock(&self.state);
            if self.ticket_cancelled(ticket) {
                if matches!(st.phase, Phase::Queued(_)) {
                    st.phase = Phase::Idle;
                }
                return Err(DflockdError::aborted());
            }
            match &st.phase {
                Phase::Held(h) => {
                    if h.shared.lost.load(Ordering::SeqCst) {
                        return Err(DflockdError::new(
                            ErrorCode::LockLost,
                            "the lock granted by enqueue() was lost",
                        ));
                    }
                    return Ok(true);
                }
                Phase::Queued(_) => {}
                Phase::Idle => {
                    return Err(DflockdError::invalid(
                        "wait() needs a pending enqueue(); call enqueue() first",
                    ))
                }
                Phase::Busy { .. } => return Err(busy()),
            }
            let (op, cancel, prev) = st.start_op();
            let Phase::Queued(conn) = prev else {
                st.phase = Phase::Idle;
                return Err(DflockdError::invalid("wait() needs a pending enqueue()"));
            };
            (op, cancel, conn)
        };
        let end = deadline.or_else(|| {
            (timeout_s > 0)
                .then(|| Instant::now() + Duration::from_secs(timeout_s.min(MAX_SECONDS)))
        });
        let work = async {
            let mut timeout_s = timeout_s;
            let mut rejoin = Rejoin::new(end);
            let mut failed = match self.wait_once(&mut conn, timeout_s).await {
                Err(e) => e,
                r => return r,
            };
            let mut on = FailedOn::Wait;
            // The server dropped the queued waiter (restarted or stopping): connect again and
            // enqueue again while the timeout lasts, as `acquire` does.
            loop {
                match rejoin.failed(Instant::now(), failed, on, true) {
                    Next::Fail(e) => return Err(e),
                    Next::Retry { at, .. } => {
                        tokio::time::sleep_until(at).await;
                        timeout_s = rejoin.timeout_s(Instant::now());
                    }
                }
                (failed, on) = match self.rejoin(&mut conn).await {
                    Ok(Some(held)) => return Ok(Some(held)),
                    Ok(None) => match self.wait_once(&mut conn, timeout_s).await {
                        Err(e) => (e, FailedOn::Wait),
                        r => return r,
                    },
                    Err(e) => (e, FailedOn::Enqueue),
                };
            }
        };
        // Past the deadline the connection is dropped below, the wait future with it.
        let cut = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let res = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(DflockdError::aborted()),
            r = work => r,
            _ = cut => Ok(None),
        };
        match res {
            Ok(Some((g, sent))) => self
                .commit_held(op, &cancel, conn, g, sent, Vec::new())
                .map(|armed| {
                    armed.spawn();
                    true
                }),
            Ok(None) => {
                drop(conn);
                self.end_op(op, &cancel).map(|_| false)
            }
            Err(e) => {
                drop(conn);
                self.end_op(op, &cancel)?;
                Err(e)
            }
        }
    }
}

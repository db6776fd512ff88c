//! The two-phase acquire of a [`Primitive`]: `enqueue()` (`e`/`se`: granted at once, or queued
//! on its connection) and `wait()` (`w`/`sw` on that same connection).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::{busy, join_stopped, lock, EnqueueOutcome, Phase, Primitive, Ticket};
use crate::dflockd::error::{DflockdError, ErrorCode, Result};
use crate::dflockd::protocol::{self, AcquireReply, EnqueueReply};

impl Primitive {
    /// Phase one of a two-phase acquire: connect and send `e`/`se`. `Acquired` = held
    /// (renewal started); `Queued` = call [`Primitive::wait`] promptly (the gap counts against
    /// the server's idle limit, and a grant's lease runs from the grant).
    pub async fn enqueue(&self) -> Result<EnqueueOutcome> {
        self.enqueue_with(self.ticket()).await
    }

    /// [`Primitive::enqueue`] with a ticket taken earlier.
    pub async fn enqueue_with(&self, ticket: Ticket) -> Result<EnqueueOutcome> {
        let (op, cancel, old, kept) = self.begin(ticket)?;
        join_stopped(old).await;
        let res = self
            .open_and_send(kept, &cancel, |p, c| Box::pin(p.send_enqueue(c)))
            .await;
        match res {
            Ok((conn, EnqueueReply::Acquired(g))) => {
                let sent = conn.last_sent().unwrap_or_else(Instant::now);
                self.commit_held(op, &cancel, conn, g, sent).map(|armed| {
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
    /// (the connection is closed: its queue state is ambiguous; enqueue again).
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
        let o = &self.opts;
        let work = async {
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
            self.confirm_grant(&mut conn, grant, sent, true)
                .await
                .map(Some)
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
            Ok(Some((g, sent))) => self.commit_held(op, &cancel, conn, g, sent).map(|armed| {
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

//! How an acquisition of a [`Primitive`] ends: `release()` (the `r`/`sr` sent by the renewal
//! task), `cancel()` of a call in flight, and `close()` (dropped without a release: the server
//! releases on disconnect).

use super::*;

impl Primitive {
    /// Release the held lock/slot (`r`/`sr`); after a clean `ok` the connection goes to the idle
    /// [`pool`] for the next acquire/enqueue, else it is closed. `NOT_LOCKED` when
    /// nothing is held; `LOCK_LOST` when it was lost before (or the server no longer knew the
    /// token).
    pub async fn release(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let Some(cancel) = self.release_then(move |r| {
            let _ = tx.send(r);
        }) else {
            return rx.await.unwrap_or_else(|_| Err(DflockdError::aborted()));
        };
        let bound = RELEASE_RENEW_WAIT + self.opts.connect.socket_timeout + Duration::from_secs(1);
        match tokio::time::timeout(bound, rx).await {
            Ok(r) => r.unwrap_or_else(|_| Err(DflockdError::aborted())),
            Err(_) => {
                cancel.cancel();
                Err(DflockdError::timeout(
                    "release got no reply; the connection was closed (the server releases on disconnect)",
                ))
            }
        }
    }

    /// [`Primitive::release`] answering through `done`, called once: at once when nothing is
    /// held or the lock was lost, else by the renewal task after it sent the release (no task
    /// of the caller's between: the binding resolves its promise from `done`). Returns the
    /// renewal task's cancel token when the release went to it, so a caller can give up on it.
    pub fn release_then(
        &self,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Option<CancellationToken> {
        let held = {
            let mut st = lock(&self.state);
            let held = match std::mem::replace(&mut st.phase, Phase::Idle) {
                Phase::Held(h) => h,
                Phase::Queued(conn) => {
                    drop(conn);
                    drop(st);
                    done(Err(DflockdError::new(
                        ErrorCode::NotLocked,
                        "nothing held (the pending enqueue was abandoned)",
                    )));
                    return None;
                }
                busy @ Phase::Busy { .. } => {
                    st.phase = busy;
                    drop(st);
                    done(Err(DflockdError::new(
                        ErrorCode::NotLocked,
                        "nothing held (an acquire is in progress; use cancel())",
                    )));
                    return None;
                }
                Phase::Idle => {
                    drop(st);
                    done(Err(DflockdError::new(ErrorCode::NotLocked, "nothing held")));
                    return None;
                }
            };
            let Held {
                shared,
                cancel,
                task,
            } = held;
            let Some(HeldTask { cmd_tx, join }) = task else {
                // Driven by the caller's own I/O, which releases it itself
                // (`ExternalHold::release`): nothing for a task to send.
                cancel.cancel();
                drop(st);
                done(Err(DflockdError::new(
                    ErrorCode::NotLocked,
                    "nothing held by the renewal task (the hold is driven by the event loop)",
                )));
                return None;
            };
            // The next acquisition waits for the renewal task to end (it ends after answering).
            st.stopped.push(join);
            (shared, cmd_tx, cancel)
        };
        let (shared, cmd_tx, cancel) = held;
        let lost_err = || {
            let reason = lock(&shared.loss_reason).clone();
            DflockdError::new(
                ErrorCode::LockLost,
                match reason {
                    Some(r) => format!("the lock was lost before release: {r}"),
                    None => "the lock was lost before release".to_string(),
                },
            )
        };
        if shared.lost.load(Ordering::SeqCst) {
            cancel.cancel();
            done(Err(lost_err()));
            return None;
        }
        let reply = ReleaseReply::new(done);
        if let Err(mpsc::error::SendError(HeldCmd::Release(reply))) =
            cmd_tx.send(HeldCmd::Release(reply))
        {
            reply.send(Err(lost_err()));
            return None;
        }
        Some(cancel)
    }

    /// Abort an in-flight `acquire`/`enqueue`/`wait` (including one whose [`Ticket`] was taken
    /// but which has not started yet): it closes its connection and resolves `ABORTED`. Does
    /// nothing to a held lock.
    pub fn cancel(&self) {
        let st = lock(&self.state);
        self.cancel_issued_tickets();
        if let Phase::Busy { cancel, .. } = &st.phase {
            cancel.cancel();
        }
    }

    /// Synchronous and idempotent: abort any operation, stop renewal and drop the connection
    /// without sending `r` (the server auto-releases on disconnect).
    pub fn close(&self) {
        let mut st = lock(&self.state);
        self.cancel_issued_tickets();
        match std::mem::replace(&mut st.phase, Phase::Idle) {
            Phase::Idle => {}
            Phase::Busy { cancel, .. } => cancel.cancel(),
            Phase::Queued(conn) => drop(conn),
            Phase::Held(h) => {
                h.cancel.cancel();
                st.stopped.extend(h.task.map(|t| t.join));
            }
        }
    }
}

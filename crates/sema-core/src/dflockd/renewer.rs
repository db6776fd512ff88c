//! The renewal task of a held lock or slot: it owns the connection while the lock is held,
//! renews on schedule, watches the idle connection for the server dropping it, serves the
//! release, and reports a loss once. See the [`primitive`](super::primitive) module comment for
//! the schedule and the loss rules.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::error::{DflockdError, ErrorCode, Result};
use super::pool;
use super::primitive::{
    lock, LossCallback, PrimitiveOptions, MIN_RENEW_INTERVAL, RELEASE_RENEW_WAIT,
};

pub(super) struct HeldShared {
    pub(super) token: String,
    pub(super) lease_s: AtomicU64,
    pub(super) lost: AtomicBool,
    /// Why it was lost (set before `lost`).
    pub(super) loss_reason: Mutex<Option<String>>,
}

/// Where the renewal task answers a release: called once, on the task, after a clean `ok` has
/// put the connection back in the idle [`pool`](super::pool) for the next acquisition. A
/// callback rather than a channel: the binding resolves its JS promise from here, so a release
/// is one hop from the JS thread to this task and one back, with no task of its own between.
/// Dropped unanswered (the task stopped by `close()`, or already gone), it answers `LOCK_LOST`:
/// a release always settles.
pub(super) struct ReleaseReply(Option<Box<dyn FnOnce(Result<()>) + Send>>);

impl ReleaseReply {
    pub(super) fn new(f: impl FnOnce(Result<()>) + Send + 'static) -> Self {
        ReleaseReply(Some(Box::new(f)))
    }

    pub(super) fn send(mut self, result: Result<()>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl Drop for ReleaseReply {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(DflockdError::new(
                ErrorCode::LockLost,
                "the lock was lost before release (its connection was closed)",
            )));
        }
    }
}

pub(super) enum HeldCmd {
    Release(ReleaseReply),
}

pub(super) struct Renewer {
    pub(super) opts: Arc<PrimitiveOptions>,
    pub(super) shared: Arc<HeldShared>,
    pub(super) on_lost: Arc<Mutex<Option<LossCallback>>>,
    pub(super) cancel: CancellationToken,
    pub(super) grant_lease_s: u64,
    /// Dropped when the task ends: a new acquisition waits for that (the old connection is
    /// then closed or pooled) without a `JoinHandle`, so the task can also run inline.
    pub(super) _finished: oneshot::Sender<()>,
}

impl Renewer {
    fn base_interval(&self) -> Duration {
        let secs = (self.grant_lease_s as f64 * self.opts.renew_ratio).max(0.1);
        Duration::try_from_secs_f64(secs)
            .unwrap_or(self.opts.renew_max_interval)
            .max(MIN_RENEW_INTERVAL)
    }

    async fn renew(&self, conn: &mut Connection) -> Result<Option<u64>> {
        let o = &self.opts;
        if o.limit == 1 {
            conn.renew(&o.key, &self.shared.token, o.lease_ttl_s).await
        } else {
            conn.sem_renew(&o.key, &self.shared.token, o.lease_ttl_s)
                .await
        }
    }

    async fn release(&self, conn: &mut Connection) -> Result<()> {
        let o = &self.opts;
        let r = if o.limit == 1 {
            conn.release(&o.key, &self.shared.token).await
        } else {
            conn.sem_release(&o.key, &self.shared.token).await
        };
        if r.is_err() {
            conn.close();
        }
        match r {
            Err(e) if e.code() == ErrorCode::ServerError => {
                let mut lost = DflockdError::new(
                    ErrorCode::LockLost,
                    "release: the server no longer held this token (lease expired)",
                );
                if let Some(reply) = e.reply() {
                    lost = lost.with_reply(reply);
                }
                Err(lost)
            }
            r => r,
        }
    }

    /// Release, and pool the connection when the server answered a clean `ok`.
    async fn release_keep(&self, mut conn: Connection) -> Result<()> {
        let result = self.release(&mut conn).await;
        if result.is_ok() && !conn.is_closed() {
            pool::put(&self.opts.connect, conn);
        }
        result
    }

    fn mark_lost(&self, notify: bool, reason: &str) {
        {
            let mut r = lock(&self.shared.loss_reason);
            if r.is_none() {
                *r = Some(reason.to_string());
            }
        }
        if self.shared.lost.swap(true, Ordering::SeqCst) {
            return;
        }
        if !notify || self.cancel.is_cancelled() {
            return;
        }
        let cb = lock(&self.on_lost).clone();
        if let Some(cb) = cb {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cb(&self.opts.key, &self.shared.token, reason)
            }));
        }
    }

    pub(super) async fn run(self, mut conn: Connection, mut rx: mpsc::UnboundedReceiver<HeldCmd>) {
        // Renews start `interval` apart (start to start), so the connection is never idle
        // longer than the cap, however long a renew takes.
        let interval = self.base_interval().min(self.opts.renew_max_interval);
        let after = |t: Instant| {
            t.checked_add(interval)
                .unwrap_or_else(|| t + Duration::from_secs(86_400 * 365))
        };
        let mut next_renew = after(Instant::now());
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return,
                cmd = rx.recv() => match cmd {
                    Some(HeldCmd::Release(reply)) => {
                        reply.send(self.release_keep(conn).await);
                        return;
                    }
                    None => return,
                },
                // Idle: nothing may arrive. EOF, an error or an unsolicited line = the server
                // dropped the connection and released the lock (see `wait_server_gone`).
                gone = conn.wait_server_gone() => {
                    conn.close();
                    self.mark_lost(true, gone.message());
                    return;
                }
                _ = tokio::time::sleep_until(next_renew) => {}
            }
            let start = Instant::now();
            let mut pending: Option<ReleaseReply> = None;
            let mut give_up_at: Option<Instant> = None;
            let result = {
                let fut = self.renew(&mut conn);
                tokio::pin!(fut);
                loop {
                    let far = Instant::now() + Duration::from_secs(86_400);
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => return,
                        r = &mut fut => break r,
                        cmd = rx.recv(), if pending.is_none() => match cmd {
                            Some(HeldCmd::Release(reply)) => {
                                pending = Some(reply);
                                give_up_at = Some(Instant::now() + RELEASE_RENEW_WAIT);
                            }
                            None => return,
                        },
                        _ = tokio::time::sleep_until(give_up_at.unwrap_or(far)), if give_up_at.is_some() => {
                            if let Some(reply) = pending.take() {
                                reply.send(Err(DflockdError::timeout(
                                    "release: a renew in flight got no reply within 5 s; the connection was closed (the server releases on disconnect)",
                                )));
                            }
                            return;
                        }
                    }
                }
            };
            match result {
                Ok(lease) => {
                    next_renew = after(start);
                    self.shared
                        .lease_s
                        .store(lease.unwrap_or(self.grant_lease_s), Ordering::SeqCst);
                    if let Some(reply) = pending.take() {
                        reply.send(self.release_keep(conn).await);
                        return;
                    }
                }
                Err(e) => {
                    conn.close();
                    match pending.take() {
                        Some(reply) => {
                            self.mark_lost(false, e.message());
                            let mut lost = DflockdError::new(
                                ErrorCode::LockLost,
                                format!("the lock was lost before release: {}", e.message()),
                            );
                            if let Some(r) = e.reply() {
                                lost = lost.with_reply(r);
                            }
                            reply.send(Err(lost));
                        }
                        None => self.mark_lost(true, e.message()),
                    }
                    return;
                }
            }
        }
    }
}

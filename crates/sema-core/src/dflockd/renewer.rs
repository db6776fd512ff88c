//! The tokio driver of a held lock or slot: the task that owns the connection while the lock
//! is held and executes the held-lock machine ([`HeldMachine`]: every decision — the renew
//! schedule, the lease clock, the loss reported once, the release — is the machine's): it
//! sends the renews and the release the machine asks for, feeds it their replies, the
//! machine's timer, the server dropping the idle connection, the release asked and `close()`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::error::{ErrorCode, Result};
use super::held::schedule::release_closed;
use super::held::{Action, HeldMachine};
use super::pool;
use super::primitive::{lock, LossCallback, PrimitiveOptions};
use super::protocol::{self, Request};
use super::shared::Part;

pub(super) use super::held::schedule::{renewed_lease, Schedule};

pub(super) struct HeldShared {
    pub(super) token: String,
    pub(super) lease_s: AtomicU64,
    pub(super) lost: AtomicBool,
    /// Why it was lost (set before `lost`).
    pub(super) loss_reason: Mutex<Option<String>>,
    /// Until when the lease is proven (see [`Schedule::loss_at`]), on the monotonic clock and
    /// as wall-clock time (computed once, so `validUntil` reads the same every time).
    pub(super) valid_until: Mutex<(Instant, SystemTime)>,
}

impl HeldShared {
    pub(super) fn new(token: String, lease_s: u64, valid_until: Instant) -> Self {
        let shared = HeldShared {
            token,
            lease_s: AtomicU64::new(lease_s),
            lost: AtomicBool::new(false),
            loss_reason: Mutex::new(None),
            valid_until: Mutex::new((valid_until, SystemTime::now())),
        };
        shared.set_valid_until(valid_until);
        shared
    }

    fn set_valid_until(&self, until: Instant) {
        let now = Instant::now();
        let wall = if until >= now {
            SystemTime::now().checked_add(until - now)
        } else {
            SystemTime::now().checked_sub(now - until)
        };
        *lock(&self.valid_until) = (until, wall.unwrap_or(UNIX_EPOCH));
    }

    /// How long the lease is still proven (zero once lost or past its validity).
    pub(super) fn valid_for(&self) -> Duration {
        if self.lost.load(Ordering::SeqCst) {
            return Duration::ZERO;
        }
        lock(&self.valid_until)
            .0
            .saturating_duration_since(Instant::now())
    }

    /// Mark the lock lost (the first reason is kept) and, the first time and when `notify`,
    /// call the loss callback. Shared by both drivers of a hold: the renewal task and a
    /// caller's own event loop ([`super::primitive::ExternalHold`]).
    pub(super) fn mark_lost(
        &self,
        key: &str,
        on_lost: &Mutex<Option<LossCallback>>,
        notify: bool,
        reason: &str,
    ) {
        {
            let mut r = lock(&self.loss_reason);
            if r.is_none() {
                *r = Some(reason.to_string());
            }
        }
        if self.lost.swap(true, Ordering::SeqCst) || !notify {
            return;
        }
        let cb = lock(on_lost).clone();
        if let Some(cb) = cb {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cb(key, &self.token, reason)
            }));
        }
    }

    pub(super) fn set_lease(&self, lease_s: u64, valid_until: Instant) {
        self.lease_s.store(lease_s, Ordering::SeqCst);
        self.set_valid_until(valid_until);
    }

    /// The end of the proven lease as wall-clock milliseconds since the Unix epoch.
    pub(super) fn valid_until_unix_ms(&self) -> u64 {
        let wall = lock(&self.valid_until).1;
        wall.duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
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
            f(Err(release_closed()));
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
    /// When the request that got the grant (or confirmed it) was sent: the lease clock's start.
    pub(super) sent: Instant,
    /// A shared lock's parts held on the connection (renewed and released together); empty for
    /// a plain lock or slot, which is `opts.key` with the grant's token.
    pub(super) parts: Vec<Part>,
    /// Dropped when the task ends: a new acquisition waits for that (the old connection is
    /// then closed or pooled) without a `JoinHandle`, so the task can also run inline.
    pub(super) _finished: oneshot::Sender<()>,
}

/// The I/O the machine asked for and the task has not done yet.
enum Io {
    Renew(Duration),
    Release(Duration),
}

impl Renewer {
    /// The requests of a renew (`renew`) or release of every part, in wire order: a shared
    /// lock's slots are released first and its gate last, so the next writer granted the gate
    /// finds every slot free.
    fn part_requests<'a>(&'a self, renew: bool) -> Vec<Request<'a>> {
        let ttl_s = self.opts.lease_ttl_s;
        let req = |p: &'a Part| -> Request<'a> {
            let (key, token) = (p.key.as_str(), p.token.as_str());
            match (renew, p.sem) {
                (true, sem) => Request::renew(key, token, ttl_s, sem),
                (false, sem) => Request::release(key, token, sem),
            }
        };
        if renew {
            self.parts.iter().map(req).collect()
        } else {
            self.parts.iter().rev().map(req).collect()
        }
    }

    /// Send the renew of every part, each reply awaited `limit` at most: the replies, or the
    /// failure of the whole (the connection broke), and when the renew was sent.
    async fn renew(
        &self,
        conn: &mut Connection,
        limit: Duration,
    ) -> (Result<Vec<Result<Option<u64>>>>, Instant) {
        let start = Instant::now();
        let r = self.renew_parts(conn, limit).await;
        (r, conn.last_sent().unwrap_or(start))
    }

    async fn renew_parts(
        &self,
        conn: &mut Connection,
        limit: Duration,
    ) -> Result<Vec<Result<Option<u64>>>> {
        let o = &self.opts;
        if self.parts.is_empty() {
            return conn
                .renew_within(
                    &o.key,
                    &self.shared.token,
                    o.lease_ttl_s,
                    o.limit > 1,
                    limit,
                )
                .await
                .map(|r| vec![Ok(r)])
                .or_else(|e| match e.code() {
                    // A refusal is that part's reply; the connection still stands.
                    ErrorCode::ServerError => Ok(vec![Err(e)]),
                    _ => Err(e),
                });
        }
        let reqs = self.part_requests(true);
        conn.call_pipelined(&reqs, limit, protocol::parse_renew_reply, || {})
            .await
    }

    /// Send the release of every part, each reply awaited `limit` at most.
    async fn release(&self, conn: &mut Connection, limit: Duration) -> Result<Vec<Result<()>>> {
        let o = &self.opts;
        if self.parts.is_empty() {
            return conn
                .release_within(&o.key, &self.shared.token, o.limit > 1, limit)
                .await
                .map(|()| vec![Ok(())])
                .or_else(|e| match e.code() {
                    ErrorCode::ServerError => Ok(vec![Err(e)]),
                    _ => Err(e),
                });
        }
        let reqs = self.part_requests(false);
        conn.call_pipelined(&reqs, limit, protocol::parse_release_reply, || {})
            .await
    }

    fn mark_lost(&self, notify: bool, reason: &str) {
        let notify = notify && !self.cancel.is_cancelled();
        self.shared
            .mark_lost(&self.opts.key, &self.on_lost, notify, reason);
    }

    /// A release asked at `now`: pending in the machine, or answered at once.
    fn asked_release(m: &mut HeldMachine, reply: ReleaseReply, pending: &mut Option<ReleaseReply>) {
        match m.release(Instant::now()) {
            Ok(()) => *pending = Some(reply),
            Err(e) => reply.send(Err(e)),
        }
    }

    pub(super) async fn run(self, mut conn: Connection, mut rx: mpsc::UnboundedReceiver<HeldCmd>) {
        let names = self.parts.iter().map(|p| p.key.clone()).collect();
        let mut m = HeldMachine::new(&self.opts, self.grant_lease_s, self.sent, names);
        let mut release: Option<ReleaseReply> = None;
        let mut pool = false;
        loop {
            let mut io = None;
            while let Some(a) = m.poll_action() {
                match a {
                    Action::Proven { lease_s, loss_at } => self.shared.set_lease(lease_s, loss_at),
                    Action::Lost { reason, notify } => self.mark_lost(notify, &reason),
                    Action::SettleRelease(r) => {
                        if let Some(reply) = release.take() {
                            reply.send(r);
                        }
                    }
                    Action::Close => conn.close(),
                    Action::Pool => pool = true,
                    Action::SendRenew { limit } => io = Some(Io::Renew(limit)),
                    Action::SendRelease { limit } => io = Some(Io::Release(limit)),
                }
            }
            if m.is_done() {
                if pool && !conn.is_closed() {
                    pool::put(&self.opts.connect, conn);
                }
                return;
            }
            let timer = m
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
            match io {
                Some(Io::Renew(limit)) => {
                    let fut = self.renew(&mut conn, limit);
                    tokio::pin!(fut);
                    // Until the machine stops awaiting this renew (answered, given up at the
                    // end of the validity, or aborted); a release asked meanwhile waits in it.
                    while m.renewing() {
                        let timer = m.poll_timeout().unwrap_or(timer);
                        tokio::select! {
                            biased;
                            _ = self.cancel.cancelled() => m.abort(),
                            (r, sent) = &mut fut => {
                                let now = Instant::now();
                                match r {
                                    Ok(replies) => {
                                        for r in replies {
                                            m.renew_reply(now, sent, r);
                                        }
                                    }
                                    Err(e) => m.disconnected(e),
                                }
                                break;
                            }
                            cmd = rx.recv(), if release.is_none() => match cmd {
                                Some(HeldCmd::Release(reply)) => Self::asked_release(&mut m, reply, &mut release),
                                None => m.abort(),
                            },
                            _ = tokio::time::sleep_until(timer) => m.handle_timeout(Instant::now()),
                        }
                    }
                }
                Some(Io::Release(limit)) => {
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => m.abort(),
                        r = self.release(&mut conn, limit) => match r {
                            Ok(replies) => {
                                for r in replies {
                                    m.release_reply(r);
                                }
                            }
                            Err(e) => m.disconnected(e),
                        },
                    }
                }
                None if m.idle() => {
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => m.abort(),
                        cmd = rx.recv(), if release.is_none() => match cmd {
                            Some(HeldCmd::Release(reply)) => Self::asked_release(&mut m, reply, &mut release),
                            None => m.abort(),
                        },
                        // Idle: nothing may arrive. EOF, an error or an unsolicited line = the
                        // server dropped the connection and released the lock.
                        gone = conn.wait_server_gone() => m.disconnected(gone),
                        _ = tokio::time::sleep_until(timer) => m.handle_timeout(Instant::now()),
                    }
                }
                None => {
                    // Lingering after a loss the lease clock declared: the connection may be
                    // mid-request (its renew given up), so it is not read; releases asked
                    // meanwhile answer the loss.
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => m.abort(),
                        cmd = rx.recv() => match cmd {
                            Some(HeldCmd::Release(reply)) => Self::asked_release(&mut m, reply, &mut release),
                            None => m.abort(),
                        },
                        _ = tokio::time::sleep_until(timer) => m.handle_timeout(Instant::now()),
                    }
                }
            }
        }
    }
}

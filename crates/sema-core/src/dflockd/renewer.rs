//! The renewal task of a held lock or slot: it owns the connection while the lock is held,
//! renews on schedule, watches the idle connection for the server dropping it, serves the
//! release, and reports a loss once. See the [`primitive`](super::primitive) module comment for
//! the schedule and the loss rules.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::error::{DflockdError, ErrorCode, Result};
use super::pool;
use super::primitive::{
    lock, LossCallback, PrimitiveOptions, LOSS_GUARD_MAX, LOSS_GUARD_MIN, MIN_RENEW_INTERVAL,
    RELEASE_RENEW_WAIT,
};
use super::protocol::MAX_SECONDS;
use super::shared::{self, Part};

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

/// The lease clock of one grant or renew, started when its request was SENT (`sent`): the
/// server starts the lease when it receives the request, later, so the server cannot end the
/// lease before `sent + lease`. The client:
/// - renews `interval` after `sent`: `lease × renew_ratio`, at most `renew_max_interval` (the
///   server's idle limit) and at most two thirds of the validity, so a renew whose reply is
///   lost still has a third of the lease in which the reply could arrive;
/// - holds the lease as valid until `loss_at = sent + lease − guard`, and if no renew is
///   confirmed by then declares the lock lost at that instant, `guard` (a tenth of the lease,
///   250 ms .. 1 s) before the server could hand the key to anyone else.
///
/// With the default ratio 0.5 that is one renew round trip per `lease / 2` (at most every
/// 15 s): 1 per second for a 2 s lease, 1 per 15 s for the server's default 33 s.
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    lease: Duration,
    valid: Duration,
    interval: Duration,
}

/// `t + d`, or a year later when that does not fit.
fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(86_400 * 365))
}

impl Schedule {
    pub(super) fn new(opts: &PrimitiveOptions, lease_s: u64) -> Self {
        let lease = Duration::from_secs(lease_s.min(MAX_SECONDS));
        let guard = (lease / 10).clamp(LOSS_GUARD_MIN, LOSS_GUARD_MAX);
        let valid = lease.saturating_sub(guard);
        let by_ratio = Duration::try_from_secs_f64(lease.as_secs_f64() * opts.renew_ratio)
            .unwrap_or(opts.renew_max_interval);
        let interval = by_ratio
            .min(valid * 2 / 3)
            .min(opts.renew_max_interval)
            .max(MIN_RENEW_INTERVAL);
        Schedule {
            lease,
            valid,
            interval,
        }
    }

    /// Until when a lease whose request was sent at `sent` is proven.
    pub(super) fn loss_at(&self, sent: Instant) -> Instant {
        after(sent, self.valid)
    }

    /// The earliest instant the server could end that lease.
    pub(super) fn expiry(&self, sent: Instant) -> Instant {
        after(sent, self.lease)
    }

    /// When to start the next renew.
    pub(super) fn renew_at(&self, sent: Instant) -> Instant {
        after(sent, self.interval)
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
    /// When the request that got the grant (or confirmed it) was sent: the lease clock's start.
    pub(super) sent: Instant,
    /// A shared lock's parts held on the connection (renewed and released together); empty for
    /// a plain lock or slot, which is `opts.key` with the grant's token.
    pub(super) parts: Vec<Part>,
    /// Dropped when the task ends: a new acquisition waits for that (the old connection is
    /// then closed or pooled) without a `JoinHandle`, so the task can also run inline.
    pub(super) _finished: oneshot::Sender<()>,
}

/// The error of a failed release (both drivers): a server `error` means the token was no longer
/// held; no answer means the connection was closed (the server releases on disconnect) and the
/// lease ends by itself at the latest: the lock is gone either way.
pub(super) fn release_error(e: DflockdError) -> DflockdError {
    match e.code() {
        ErrorCode::ServerError => DflockdError::lost_because(
            "release: the server no longer held this token (lease expired)",
            &e,
        ),
        ErrorCode::Timeout => DflockdError::new(
            ErrorCode::LockLost,
            format!(
                "release got no reply ({}); the connection was closed, so the server releases the lock, or its lease ends",
                e.message()
            ),
        ),
        _ => e,
    }
}

/// Why the lock is lost when no renew was confirmed within the lease's validity.
pub(super) fn unconfirmed(lease_s: u64) -> String {
    format!(
        "no renewal was confirmed within the {lease_s} s lease (the server or the network did not answer in time); \
         the lock counts as lost before the server could grant it to anyone else"
    )
}

/// The lease a renew proved, in seconds: the TTL sent when the reply says it or one second less
/// (the Go server answers the TTL it applied; Python dflockd answers the remaining time rounded
/// down, TTL − 1, having applied the TTL sent), else the smaller value the server reported;
/// without a TTL sent, the reply (or, for a bare `ok`, the grant's lease).
pub(super) fn renewed_lease(sent_ttl: Option<u64>, reply: Option<u64>, grant: u64) -> u64 {
    match (sent_ttl, reply) {
        (Some(t), Some(r)) if r.saturating_add(1) >= t => t,
        (_, Some(r)) => r,
        (Some(t), None) => t,
        (None, None) => grant,
    }
}

impl Renewer {
    async fn renew(&self, conn: &mut Connection, limit: Duration) -> Result<Option<u64>> {
        let o = &self.opts;
        if !self.parts.is_empty() {
            return shared::renew_parts(
                conn,
                &self.parts,
                o.lease_ttl_s,
                self.grant_lease_s,
                limit,
            )
            .await
            .map(Some);
        }
        conn.renew_within(
            &o.key,
            &self.shared.token,
            o.lease_ttl_s,
            o.limit > 1,
            limit,
        )
        .await
    }

    /// Sends the release, its reply awaited until `loss_at` at most (after which the lease is
    /// no longer proven, whatever the answer), within the socket timeout.
    async fn release(&self, conn: &mut Connection, loss_at: Instant) -> Result<()> {
        let o = &self.opts;
        let limit = o
            .connect
            .socket_timeout
            .min(loss_at.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(1));
        let r = if self.parts.is_empty() {
            conn.release_within(&o.key, &self.shared.token, o.limit > 1, limit)
                .await
        } else {
            shared::release_parts(conn, &self.parts, limit).await
        };
        if r.is_err() {
            conn.close();
        }
        r.map_err(release_error)
    }

    /// Release, and pool the connection when the server answered a clean `ok`.
    async fn release_keep(&self, mut conn: Connection, loss_at: Instant) -> Result<()> {
        let result = self.release(&mut conn, loss_at).await;
        if result.is_ok() && !conn.is_closed() {
            pool::put(&self.opts.connect, conn);
        }
        result
    }

    fn mark_lost(&self, notify: bool, reason: &str) {
        let notify = notify && !self.cancel.is_cancelled();
        self.shared
            .mark_lost(&self.opts.key, &self.on_lost, notify, reason);
    }

    fn lost_error(&self, reason: &str) -> DflockdError {
        DflockdError::new(
            ErrorCode::LockLost,
            format!("the lock was lost before release: {reason}"),
        )
    }

    /// After a loss declared by the client's own lease clock: keep the connection open (it may
    /// be stalled, not dead) until the server could end the lease by itself, `expiry`, so
    /// closing it does not free the key on the server before the holder has been told; a
    /// `close()` (the JS layer reacting to the loss) ends this at once. Releases asked for
    /// meanwhile answer `LOCK_LOST`.
    async fn linger(
        &self,
        conn: Connection,
        expiry: Instant,
        rx: &mut mpsc::UnboundedReceiver<HeldCmd>,
        reason: &str,
    ) {
        let sleep = tokio::time::sleep_until(expiry);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                _ = &mut sleep => break,
                cmd = rx.recv() => match cmd {
                    Some(HeldCmd::Release(reply)) => reply.send(Err(self.lost_error(reason))),
                    None => break,
                },
            }
        }
        drop(conn);
    }

    pub(super) async fn run(self, mut conn: Connection, mut rx: mpsc::UnboundedReceiver<HeldCmd>) {
        let mut lease_s = self.grant_lease_s;
        let mut sent = self.sent;
        loop {
            let sched = Schedule::new(&self.opts, lease_s);
            let loss_at = sched.loss_at(sent);
            self.shared.set_valid_until(loss_at);
            // Renews start `interval` after the request that proved the lease was sent (start
            // to start), so the connection is never idle longer than the cap.
            let next_renew = sched.renew_at(sent);
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return,
                cmd = rx.recv() => match cmd {
                    Some(HeldCmd::Release(reply)) => {
                        reply.send(self.release_keep(conn, loss_at).await);
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
            if start >= loss_at {
                // The task was not scheduled before the validity ended (a stalled runtime).
                let reason = unconfirmed(lease_s);
                self.mark_lost(true, &reason);
                self.linger(conn, sched.expiry(sent), &mut rx, &reason)
                    .await;
                return;
            }
            let mut pending: Option<ReleaseReply> = None;
            let mut give_up_at = loss_at;
            let result = {
                // The reply is awaited past `loss_at`: the select below decides at `loss_at`,
                // leaving the connection open (see `linger`).
                let fut = self.renew(&mut conn, sched.expiry(start) - start);
                tokio::pin!(fut);
                loop {
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => return,
                        r = &mut fut => break Some(r),
                        cmd = rx.recv(), if pending.is_none() => match cmd {
                            Some(HeldCmd::Release(reply)) => {
                                pending = Some(reply);
                                give_up_at = give_up_at.min(Instant::now() + RELEASE_RENEW_WAIT);
                            }
                            None => return,
                        },
                        _ = tokio::time::sleep_until(give_up_at) => break None,
                    }
                }
            };
            match result {
                None => {
                    let reason = match pending.take() {
                        Some(reply) if Instant::now() < loss_at => {
                            // The holder is releasing: closing the connection releases on the
                            // server (or the lease ends by itself).
                            let reason = "release: a renew in flight got no reply within 5 s; the connection was closed (the server releases on disconnect)";
                            self.mark_lost(false, reason);
                            reply.send(Err(self.lost_error(reason)));
                            return;
                        }
                        Some(reply) => {
                            let reason = unconfirmed(lease_s);
                            self.mark_lost(false, &reason);
                            reply.send(Err(self.lost_error(&reason)));
                            reason
                        }
                        None => {
                            let reason = unconfirmed(lease_s);
                            self.mark_lost(true, &reason);
                            reason
                        }
                    };
                    self.linger(conn, sched.expiry(sent), &mut rx, &reason)
                        .await;
                    return;
                }
                Some(Ok(lease)) => {
                    lease_s = renewed_lease(self.opts.lease_ttl_s, lease, self.grant_lease_s);
                    sent = conn.last_sent().unwrap_or(start);
                    self.shared.lease_s.store(lease_s, Ordering::SeqCst);
                    if let Some(reply) = pending.take() {
                        let loss_at = Schedule::new(&self.opts, lease_s).loss_at(sent);
                        self.shared.set_valid_until(loss_at);
                        reply.send(self.release_keep(conn, loss_at).await);
                        return;
                    }
                }
                Some(Err(e)) => {
                    match pending.take() {
                        Some(reply) => {
                            self.mark_lost(false, e.message());
                            reply.send(Err(DflockdError::lost_because(
                                format!("the lock was lost before release: {}", e.message()),
                                &e,
                            )));
                        }
                        None => self.mark_lost(true, e.message()),
                    }
                    // Told first, then closed: closing frees the key on a live server.
                    conn.close();
                    return;
                }
            }
        }
    }
}

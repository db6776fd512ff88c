//! A distributed lock or semaphore slot: acquire, two-phase enqueue/wait, renewal, release, loss.
//!
//! A lock is a semaphore with limit 1 (it speaks `l r n e w`; limit > 1 speaks `sl sr sn se sw`).
//! Each held lock/slot owns one connection; after a clean release it goes to the process-wide
//! idle [`pool`] (bounded, closed after a short idle time; the server may end it
//! meanwhile, which is harmless as nothing is held), from which the next acquire/enqueue with the
//! same settings takes it when it still looks usable. While held, a renewal task owns that connection and
//! keeps the client's own lease clock ([`Schedule`], decided by the
//! held-lock machine, [`held`](super::held)): every grant or renew proves the
//! lease until `sent + lease − guard`, where `sent` is when its request was SENT (the server
//! counts from receipt, later) and `guard` a tenth of the lease (250 ms .. 1 s). It starts a
//! renew `lease × renew_ratio` after the last proof (at least 100 ms, at most
//! `renew_max_interval` — the server drops connections idle for its read timeout, 23 s by
//! default, and auto-releases their locks — and at most two thirds of the validity, so a lost
//! reply still has a third of it to arrive), always resending the TTL used at acquire. When no
//! renew is confirmed by the end of the validity the lock is lost at that instant, before the
//! server could grant the key to anyone else; the connection is then kept open until the
//! server's earliest expiry (closing it would free the key at once) unless `close()` comes
//! first. A grant that came after a long wait (its clock, started at the send, is already due
//! for a renew) is renewed before it is reported, and `wait()` always does so.
//! Between requests it also watches the idle connection: the server never
//! sends anything unprompted, so EOF, a read error or an unsolicited line (the `error` a server
//! writes before closing an idle connection) means the server has dropped the connection and
//! released the lock, and the loss is reported at once instead of at the next renew.
//! Renewal and release are serialized on that task; a release waits for a renew in flight at
//! most 5 s (less when the validity ends sooner). A failed or unconfirmed renew or a dropped
//! connection marks the lock lost and fires the loss callback exactly once (before the
//! connection is closed); `release()` and `close()` never fire it.
//!
//! A waiting `acquire` whose connection the server drops (a restart) reconnects with backoff
//! and enqueues again while its timeout lasts (see `Primitive::acquire_until`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;
use super::error::{DflockdError, ErrorCode, Result};
use super::order::Place;
use super::pool;
use super::protocol::{AcquireReply, EnqueueReply, Grant};
use super::renewer::{renewed_lease, HeldCmd, HeldShared, ReleaseReply, Renewer, Schedule};
use super::shared::Part;

mod acquire;
mod end;
mod external;
mod options;
mod two_phase;

pub use external::{ExternalHold, ExternalIo, ExternalOp, FirstAnswer, FirstFailed};

pub use options::{
    PrimitiveOptions, DEFAULT_RENEW_MAX_INTERVAL, LOSS_GUARD_MAX, LOSS_GUARD_MIN,
    MIN_RENEW_INTERVAL, RELEASE_RENEW_WAIT,
};

/// Outcome of [`Primitive::enqueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// Granted at once; renewal already runs.
    Acquired,
    /// Queued; call [`Primitive::wait`] promptly.
    Queued,
}

/// Where a primitive's acquisition stands, for a caller that keeps no copy of it (the JS
/// `DistributedLock` reads it instead of mirroring it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing started, or the last acquisition ended (released, closed, timed out, failed).
    Idle,
    /// An acquire/enqueue/wait is running.
    Acquiring,
    /// An `enqueue` answered `queued`: `wait` next.
    Queued,
    /// Held, renewing.
    Held,
    /// Held and then lost (reported once); a new acquisition may start.
    Lost,
}

impl Stage {
    /// The stage's name: `idle`, `acquiring`, `queued`, `held`, `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Idle => "idle",
            Stage::Acquiring => "acquiring",
            Stage::Queued => "queued",
            Stage::Held => "held",
            Stage::Lost => "lost",
        }
    }
}

/// Loss notification: `(key, token, reason)`; the reason says why (the server closed the
/// connection, sent an unsolicited reply, refused the renew, ...).
pub type LossCallback = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// Resolves (with an error: its sender is dropped) when a renewal task has ended.
type Finished = oneshot::Receiver<()>;

struct Held {
    shared: Arc<HeldShared>,
    cancel: CancellationToken,
    /// The renewal task; `None` for a hold driven by the caller's own I/O ([`ExternalHold`]).
    task: Option<HeldTask>,
}

struct HeldTask {
    cmd_tx: mpsc::UnboundedSender<HeldCmd>,
    join: Finished,
}

/// A grant recorded as held whose renewal task has not started: spawned as a task of its own,
/// or run in place by the task that acquired (see [`Primitive::acquire_then`]).
pub(super) struct Armed {
    renewer: Renewer,
    conn: Connection,
    rx: mpsc::UnboundedReceiver<HeldCmd>,
}

impl Armed {
    pub(super) fn spawn(self) {
        tokio::spawn(self.run());
    }

    async fn run(self) {
        self.renewer.run(self.conn, self.rx).await;
    }
}

enum Phase {
    Idle,
    Busy { op: u64, cancel: CancellationToken },
    Queued(Connection),
    Held(Held),
}

struct State {
    phase: Phase,
    next_op: u64,
    stopped: Vec<Finished>,
}

/// Refusal of a second acquire/enqueue/wait while one runs.
fn busy() -> DflockdError {
    DflockdError::invalid("another acquire/enqueue/wait is in progress")
}

impl State {
    /// Marks the primitive busy with a new operation: its id, its cancel token, and the phase
    /// it replaced.
    fn start_op(&mut self) -> (u64, CancellationToken, Phase) {
        self.next_op += 1;
        let op = self.next_op;
        let cancel = CancellationToken::new();
        let cancel_op = cancel.clone();
        let prev = std::mem::replace(
            &mut self.phase,
            Phase::Busy {
                op,
                cancel: cancel_op,
            },
        );
        (op, cancel, prev)
    }
}

/// A first request in flight, borrowed from the primitive and its connection.
type SendFuture<'a, R> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<R>> + Send + 'a>>;

/// A started acquire/enqueue: its op id, its cancel token, renewal tasks of earlier holds to join
/// first, and an idle connection from the pool.
type Begun = (u64, CancellationToken, Vec<Finished>, Option<Connection>);

/// Taken synchronously when an `acquire`/`enqueue`/`wait` is requested (see
/// [`Primitive::ticket`]): a `cancel()`/`close()` issued after it aborts that call even if the
/// call has not started running yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

/// A distributed lock (limit 1) or semaphore slot (limit > 1) on one dflockd server.
///
/// All methods take `&self`; concurrent misuse (e.g. two acquires at once) is rejected with
/// `INVALID_ARGUMENT` rather than blocking.
pub struct Primitive {
    opts: Arc<PrimitiveOptions>,
    state: Mutex<State>,
    on_lost: Arc<Mutex<Option<LossCallback>>>,
    tickets: AtomicU64,
    cancelled_upto: AtomicU64,
    /// The newest ticket whose call has started (taken the state lock): a newer one not
    /// cancelled is a call on its way, and the stage says `Acquiring` already.
    started_upto: AtomicU64,
}

impl std::fmt::Debug for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primitive")
            .field("key", &self.opts.key)
            .field("limit", &self.opts.limit)
            .field("token", &self.token())
            .finish()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits (at most 2 s each: they were cancelled and end at their next poll) for stopped
/// renewal tasks, so their connections are closed or pooled before a new acquisition starts.
async fn join_stopped(handles: Vec<Finished>) {
    for h in handles {
        let _ = tokio::time::timeout(Duration::from_secs(2), h).await;
    }
}

impl Primitive {
    /// Validate the options and build an idle primitive (no I/O).
    pub fn new(opts: PrimitiveOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Primitive {
            opts: Arc::new(opts),
            state: Mutex::new(State {
                phase: Phase::Idle,
                next_op: 0,
                stopped: Vec::new(),
            }),
            on_lost: Arc::new(Mutex::new(None)),
            tickets: AtomicU64::new(0),
            cancelled_upto: AtomicU64::new(0),
            started_upto: AtomicU64::new(0),
        })
    }

    /// Take a ticket for a call that will run later (e.g. on another thread): a `cancel()` or
    /// `close()` issued after this aborts the call with `ABORTED`, even before it starts.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.tickets.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Whether the call of ticket `t` was cancelled before it started; marks it started.
    fn ticket_cancelled(&self, t: Ticket) -> bool {
        self.started_upto.fetch_max(t.0, Ordering::SeqCst);
        self.cancelled_upto.load(Ordering::SeqCst) >= t.0
    }

    fn cancel_issued_tickets(&self) {
        self.cancelled_upto
            .fetch_max(self.tickets.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// The options.
    pub fn options(&self) -> &PrimitiveOptions {
        &self.opts
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.opts.key
    }

    /// Set (or clear) the loss callback; it fires at most once per held lock, from a tokio task.
    pub fn set_on_lost(&self, cb: Option<LossCallback>) {
        *lock(&self.on_lost) = cb;
    }

    fn held_shared(&self) -> Option<Arc<HeldShared>> {
        match &lock(&self.state).phase {
            Phase::Held(h) if !h.shared.lost.load(Ordering::SeqCst) => Some(h.shared.clone()),
            _ => None,
        }
    }

    /// Whether a call's ticket was taken (on the JS thread) but the call has not started yet.
    fn call_pending(&self) -> bool {
        let issued = self.tickets.load(Ordering::SeqCst);
        let done = self
            .cancelled_upto
            .load(Ordering::SeqCst)
            .max(self.started_upto.load(Ordering::SeqCst));
        issued > done
    }

    /// Where the acquisition stands. A call on its way (its ticket taken, not started yet) is
    /// `Acquiring` in every phase but an active hold, which it cannot replace: so a second call
    /// in the same tick (a second `wait()` on a queued lock, a second `acquire()` after a loss)
    /// is refused by the caller's checks instead of racing the first one in the core.
    pub fn stage(&self) -> Stage {
        let st = lock(&self.state);
        match &st.phase {
            Phase::Busy { .. } => Stage::Acquiring,
            Phase::Held(h) if !h.shared.lost.load(Ordering::SeqCst) => Stage::Held,
            _ if self.call_pending() => Stage::Acquiring,
            Phase::Idle => Stage::Idle,
            Phase::Queued(_) => Stage::Queued,
            Phase::Held(_) => Stage::Lost,
        }
    }

    /// The token of the current hold, lost or not (`None` when nothing was granted since the
    /// last acquisition ended, or when a new call is on its way after a loss): tells a loss
    /// report of this hold from a late one of an earlier, so a late report of the lost hold
    /// never reaches the acquisition that replaces it.
    pub fn hold_token(&self) -> Option<String> {
        match &lock(&self.state).phase {
            Phase::Held(h) if h.shared.lost.load(Ordering::SeqCst) && self.call_pending() => None,
            Phase::Held(h) => Some(h.shared.token.clone()),
            _ => None,
        }
    }

    /// The token of the held lock/slot (`None` when not held or lost).
    pub fn token(&self) -> Option<String> {
        self.held_shared().map(|s| s.token.clone())
    }

    /// Lease in seconds from the last grant/renew; 0 when not held.
    pub fn lease_s(&self) -> u64 {
        self.held_shared()
            .map(|s| s.lease_s.load(Ordering::SeqCst))
            .unwrap_or(0)
    }

    /// Whether a lock/slot is currently held (and not known to be lost).
    pub fn is_held(&self) -> bool {
        self.held_shared().is_some()
    }

    /// How much longer the held lease is proven valid by the client's own lease clock (see
    /// the module comment): zero when nothing is held, once lost, or once a renew failed to
    /// be confirmed in time. Work that must be exclusive should finish within it.
    pub fn valid_for(&self) -> Duration {
        self.held_shared()
            .map(|s| s.valid_for())
            .unwrap_or(Duration::ZERO)
    }

    /// The end of that validity as wall-clock milliseconds since the Unix epoch (`None` when
    /// nothing is held or it was lost). Computed once per grant or renew from the monotonic
    /// clock; [`Primitive::valid_for`] is immune to wall-clock steps, this is not.
    pub fn valid_until_unix_ms(&self) -> Option<u64> {
        self.held_shared().map(|s| s.valid_until_unix_ms())
    }

    fn begin(&self, ticket: Ticket) -> Result<Begun> {
        let (op, cancel, old) = self.begin_phase(ticket)?;
        Ok((op, cancel, old, pool::take(&self.opts.connect)))
    }

    /// Marks the primitive busy with a new acquisition (refused while one runs or a lock is
    /// held): its op id, its cancel token and the renewal tasks of earlier holds.
    fn begin_phase(&self, ticket: Ticket) -> Result<(u64, CancellationToken, Vec<Finished>)> {
        let mut st = lock(&self.state);
        if self.ticket_cancelled(ticket) {
            return Err(DflockdError::aborted());
        }
        match &st.phase {
            Phase::Idle => {}
            Phase::Held(h) if h.shared.lost.load(Ordering::SeqCst) => {
                if let Phase::Held(old) = std::mem::replace(&mut st.phase, Phase::Idle) {
                    old.cancel.cancel();
                    st.stopped.extend(old.task.map(|t| t.join));
                }
            }
            Phase::Held(_) => {
                return Err(DflockdError::invalid(
                    "already held; release() or close() first",
                ))
            }
            Phase::Queued(_) => {
                return Err(DflockdError::invalid(
                    "an enqueue() is pending; call wait(), release() or close() first",
                ))
            }
            Phase::Busy { .. } => return Err(busy()),
        }
        let (op, cancel, _idle) = st.start_op();
        let old = std::mem::take(&mut st.stopped);
        Ok((op, cancel, old))
    }

    /// A connection for a new acquisition: the pooled one when it still looks usable (see
    /// [`Connection::is_reusable`]), else a new one. The flag says whether it was reused.
    async fn open(&self, kept: Option<Connection>) -> Result<(Connection, bool)> {
        if let Some(mut conn) = kept {
            if conn.is_reusable() {
                return Ok((conn, true));
            }
        }
        Ok((Connection::connect(&self.opts.connect).await?, false))
    }

    async fn send_enqueue(&self, conn: &mut Connection) -> Result<EnqueueReply> {
        let o = &self.opts;
        if o.limit == 1 {
            conn.enqueue(&o.key, o.lease_ttl_s).await
        } else {
            conn.sem_enqueue(&o.key, o.limit, o.lease_ttl_s).await
        }
    }

    /// The first request of an acquisition (`send_acquire` or `send_enqueue`) on the kept
    /// connection if there is one, else a new one. A kept connection that turns out dead
    /// (`CONNECTION_ERROR`: the server dropped it while idle; nothing was held on it) is replaced
    /// by a fresh one and the request sent once more. Cancellation (`cancel()`/`close()`) drops
    /// the connection and yields `ABORTED`.
    async fn open_and_send<R>(
        &self,
        kept: Option<Connection>,
        cancel: &CancellationToken,
        send: for<'a> fn(&'a Self, &'a mut Connection) -> SendFuture<'a, R>,
    ) -> Result<(Connection, R)> {
        let work = async {
            let (mut conn, reused) = self.open(kept).await?;
            let mut reply = send(self, &mut conn).await;
            if reused && matches!(&reply, Err(e) if e.code() == ErrorCode::ConnectionError) {
                conn = Connection::connect(&self.opts.connect).await?;
                reply = send(self, &mut conn).await;
            }
            Ok((conn, reply?))
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(DflockdError::aborted()),
            r = work => r,
        }
    }

    /// End operation `op` without holding anything. `Err(ABORTED)` when it was cancelled or
    /// superseded by `close()`.
    fn end_op(&self, op: u64, cancel: &CancellationToken) -> Result<()> {
        let mut st = lock(&self.state);
        let ours = matches!(&st.phase, Phase::Busy { op: o, .. } if *o == op);
        if ours {
            st.phase = Phase::Idle;
        }
        if !ours || cancel.is_cancelled() {
            return Err(DflockdError::aborted());
        }
        Ok(())
    }

    fn commit_queued(&self, op: u64, cancel: &CancellationToken, conn: Connection) -> Result<()> {
        let mut st = lock(&self.state);
        let ours = matches!(&st.phase, Phase::Busy { op: o, .. } if *o == op);
        if !ours || cancel.is_cancelled() {
            if ours {
                st.phase = Phase::Idle;
            }
            drop(conn);
            return Err(DflockdError::aborted());
        }
        st.phase = Phase::Queued(conn);
        Ok(())
    }

    fn commit_held(
        &self,
        op: u64,
        cancel: &CancellationToken,
        conn: Connection,
        grant: Grant,
        sent: Instant,
        parts: Vec<Part>,
    ) -> Result<Armed> {
        let mut st = lock(&self.state);
        let ours = matches!(&st.phase, Phase::Busy { op: o, .. } if *o == op);
        if !ours || cancel.is_cancelled() {
            if ours {
                st.phase = Phase::Idle;
            }
            drop(conn); // the server auto-releases on disconnect
            return Err(DflockdError::aborted());
        }
        let loss_at = Schedule::new(&self.opts, grant.lease_s).loss_at(sent);
        let shared = Arc::new(HeldShared::new(grant.token, grant.lease_s, loss_at));
        let (cmd_tx, rx) = mpsc::unbounded_channel();
        let (finished, join) = oneshot::channel();
        let task_cancel = CancellationToken::new();
        let renewer = Renewer {
            opts: self.opts.clone(),
            shared: shared.clone(),
            on_lost: self.on_lost.clone(),
            cancel: task_cancel.clone(),
            grant_lease_s: grant.lease_s,
            sent,
            parts,
            _finished: finished,
        };
        st.phase = Phase::Held(Held {
            shared,
            cancel: task_cancel,
            task: Some(HeldTask { cmd_tx, join }),
        });
        Ok(Armed { renewer, conn, rx })
    }
}

impl Drop for Primitive {
    fn drop(&mut self) {
        self.close();
    }
}

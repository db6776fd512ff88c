//! Shared (reader/writer) locks built from the server's primitives: the protocol has no
//! reader/writer command.
//!
//! Construction (one connection per holder, all parts of one lock on the server the key maps to):
//! - **reader slots**: the semaphore `<key>` itself, with limit [`MAX_READERS`];
//! - a **gate**: the mutex `<key>/gate` ([`GATE_SUFFIX`]).
//!
//! Why the slots are the key itself: the server refuses one key used with two limits
//! (`error_limit_mismatch`, until the key is GC'd after ~60 s idle). So a plain mutex `l <key>`
//! (no `mode`; a `DistributedLock`; another dflockd client) is refused while readers or a writer
//! hold, instead of being granted beside them; the JS layer then takes it as a writer
//! (lib/dflockd/kinds.js), so it waits for the readers as on files. The other way round, readers
//! and writers meeting a key that is a mutex (limit 1: a plain holder holds it, or held it less
//! than the GC's idle time ago) take that mutex ([`Era::Mutex`]): readers are then one at a time,
//! never beside a plain holder. A plain mutex keeps its one request.
//!
//! A reader takes the gate, one reader slot, and releases the gate: it then holds only its slot.
//! A writer takes the gate and then every one of the [`MAX_READERS`] slots, and keeps them all.
//! The slot requests are pipelined behind the gate's on the holder's one connection (the server
//! reads a request once the previous one is answered, so they run once the gate is granted);
//! slots got behind a gate that timed out are released at once. So readers share; a writer excludes readers
//! and writers. A waiting writer holds the gate while readers drain: readers that come after it
//! queue at the gate behind it (the server's FIFO), so a stream of readers cannot starve it.
//!
//! The bound: at most [`MAX_READERS`] readers at once (a further reader waits at its slot,
//! holding the gate, until one leaves). A writer's cost grows with it: every acquire, renew and
//! release of a writer carries `1 + MAX_READERS` requests (one write and one round trip of wall
//! time each, pipelined); 16 keeps that at 17 short lines per renewal while allowing more
//! concurrent readers than the 2-core machines this is tested on run holders.
//!
//! Cost on the wire, uncontended (asserted by `__test__/dflockd-shared.test.js` with a counting
//! proxy in front of the real server): a reader's acquire is 4 requests in 2 round trips (`e`
//! and `w` for the gate and `sl` for a slot in one write, then `r` gate), its renew 1, its
//! release 1; a writer's acquire is `2 + MAX_READERS` requests, its renew and release
//! `1 + MAX_READERS`, one round trip each. A try sends `l … 0` for the gate instead of `e` and
//! `w` (one request less).
//!
//! Call order: a blocking acquire takes its place among this process's waiters on the key (see
//! [`order`](super::order), shared with the plain mutex on the same key) and sends `e` for the
//! gate, answered at once, so the next waiter may send its own; `w` (answered `ok` at once when
//! `e` got the gate, else when granted) and the slot requests follow in the same write. A
//! writer releases its slots before its gate, so the next writer finds every slot free.
//!
//! Names: the gate key is the user key plus [`GATE_SUFFIX`]. A key can hold almost any byte, so
//! no suffix is unreachable; a clash with a key used with another limit is refused by the server
//! (`error_limit_mismatch`), never silent. A `DistributedSemaphore` of limit [`MAX_READERS`] on
//! the key counts as readers (its holders and readers share the slots; a writer excludes both);
//! of another limit it is refused.
//!
//! Leases: every part is renewed together (pipelined) with the same TTL on the holder's
//! connection, and a refusal of any of them is the loss of the lock. A writer waiting for
//! slots renews the gate and the slots it has before their lease could end. A holder that
//! crashes frees every part at once by disconnect, or by lease expiry.
//!
//! Not supported in shared mode: the two-phase `enqueue()`/`wait()`, which the protocol has
//! for one key only.

use std::time::Duration;

use tokio::time::Instant;

use super::connection::{reply_limit, Connection};
use super::error::{DflockdError, ErrorCode, Result};
use super::order::Place;
use super::primitive::PrimitiveOptions;
use super::protocol::{self, AcquireReply, EnqueueReply, Grant, Request, MAX_KEY_BYTES};
use super::renewer::{renewed_lease, Schedule};

mod mutex_era;
use mutex_era::mutex_era;
pub use mutex_era::Era;

/// The most readers at once (the limit of the reader-slot semaphore). See the module comment.
pub const MAX_READERS: u64 = 16;

/// Appended to the key to name its gate mutex.
pub const GATE_SUFFIX: &str = "/gate";

/// How a shared lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One of up to [`MAX_READERS`] readers.
    Shared,
    /// The only holder: no reader, no other writer.
    Exclusive,
}

impl Mode {
    /// `"shared"` or `"exclusive"`; anything else is `INVALID_ARGUMENT`.
    pub fn parse(s: &str) -> Result<Mode> {
        match s {
            "shared" => Ok(Mode::Shared),
            "exclusive" => Ok(Mode::Exclusive),
            other => Err(DflockdError::invalid(format!(
                "mode must be 'shared' or 'exclusive', got {other:?}"
            ))),
        }
    }

    /// The name as the options spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Exclusive => "exclusive",
        }
    }
}

/// The key of `key`'s gate.
pub fn gate_key(key: &str) -> String {
    format!("{key}{GATE_SUFFIX}")
}

/// Checks that `key` leaves room for its gate key (`INVALID_ARGUMENT`).
pub fn validate_key(key: &str) -> Result<()> {
    let room = MAX_KEY_BYTES - GATE_SUFFIX.len();
    if key.len() > room {
        return Err(DflockdError::invalid(format!(
            "key is {} bytes; with a mode at most {room} are allowed (the gate is '<key>{GATE_SUFFIX}', at most {MAX_KEY_BYTES} bytes)",
            key.len()
        )));
    }
    Ok(())
}

/// One key held on the holder's connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Part {
    pub(super) key: String,
    pub(super) token: String,
    /// A reader slot (`sn`/`sr`), else the gate (`n`/`r`).
    pub(super) sem: bool,
}

/// What a shared acquire got: its parts (the first is the one whose token the lock shows: a
/// reader's slot, a writer's gate), the lease in seconds, and when the request that proves that
/// lease was sent (the lease clock's start, see `renewer::Schedule`).
pub(super) struct Got {
    pub(super) parts: Vec<Part>,
    pub(super) lease_s: u64,
    pub(super) sent: Instant,
}

impl Got {
    /// The grant the lock shows.
    pub(super) fn grant(&self) -> Grant {
        Grant {
            token: self.parts[0].token.clone(),
            lease_s: self.lease_s,
        }
    }
}

/// Renews every part in one pipelined write; each reply awaited `limit` at most. The lease
/// proven is the smallest of the replies'. Any refusal fails the whole (the lock is lost).
pub(super) async fn renew_parts(
    conn: &mut Connection,
    parts: &[Part],
    ttl_s: Option<u64>,
    grant_lease_s: u64,
    limit: Duration,
) -> Result<u64> {
    let reqs: Vec<Request<'_>> = parts
        .iter()
        .map(|p| {
            let (key, token) = (p.key.as_str(), p.token.as_str());
            if p.sem {
                Request::SemRenew { key, token, ttl_s }
            } else {
                Request::Renew { key, token, ttl_s }
            }
        })
        .collect();
    let replies = conn
        .call_pipelined(&reqs, limit, protocol::parse_renew_reply, || {})
        .await?;
    let mut lease = u64::MAX;
    for (r, p) in replies.into_iter().zip(parts) {
        match r {
            Ok(l) => lease = lease.min(renewed_lease(ttl_s, l, grant_lease_s)),
            Err(e) => {
                let mut out =
                    DflockdError::new(e.code(), format!("renew of '{}': {}", p.key, e.message()));
                if let Some(reply) = e.reply() {
                    out = out.with_reply(reply);
                }
                return Err(out);
            }
        }
    }
    Ok(if lease == u64::MAX {
        grant_lease_s
    } else {
        lease
    })
}

/// Releases every part in one pipelined write. The first refusal is the result (after all
/// replies were read, so the connection stays in sync).
pub(super) async fn release_parts(
    conn: &mut Connection,
    parts: &[Part],
    limit: Duration,
) -> Result<()> {
    // Slots first, the gate last: the next writer, granted the gate, finds every slot free.
    let reqs: Vec<Request<'_>> = parts
        .iter()
        .rev()
        .map(|p| {
            let (key, token) = (p.key.as_str(), p.token.as_str());
            if p.sem {
                Request::SemRelease { key, token }
            } else {
                Request::Release { key, token }
            }
        })
        .collect();
    let replies = conn
        .call_pipelined(&reqs, limit, protocol::parse_release_reply, || {})
        .await?;
    replies.into_iter().find(|r| r.is_err()).unwrap_or(Ok(()))
}

/// Whole seconds from `now` to `until`, rounded up (the protocol's unit).
fn ceil_secs(now: Instant, until: Instant) -> u64 {
    let left = until.saturating_duration_since(now);
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}

/// Kept free at the end of a blocking slot request: before the parts held must be renewed
/// (for the reply and the renew to travel), and before the caller's deadline.
const RENEW_MARGIN: Duration = Duration::from_millis(250);

/// Between two polls of a slot when the lease, or what is left of the caller's timeout, is too
/// short to block a whole second.
const SHORT_LEASE_POLL: Duration = Duration::from_millis(50);

/// A gate request (or two: `e` then `w`) and `need` slot requests behind it, sent in one write.
struct Batch {
    /// The gate's grant (the last one: a `w` after an `e` answered `acquired` renews it).
    gate: Option<Grant>,
    /// The slots granted, each with its lease in seconds.
    slots: Vec<(Part, u64)>,
    /// The first refusal among the replies (the connection is still in sync).
    failed: Option<DflockdError>,
    /// Whether that refusal is a slot request's (the gate's own reply was a grant or a timeout).
    failed_at_slot: bool,
    /// When the write was sent: no grant in it precedes this.
    sent: Instant,
}

/// Sends `gate` (`l`; or `e` and `w`) and `need` copies of `slot` (`sl … 0`) in one write and
/// reads every reply; `first_answered` runs once the first reply is in. A reply that is not the
/// protocol's closes the connection and fails the call.
async fn batch(
    conn: &mut Connection,
    gate: &[Request<'_>],
    slot: Request<'_>,
    need: usize,
    limit: Duration,
    first_answered: impl FnOnce() + Send,
) -> Result<Batch> {
    let Request::SemLock { key, .. } = slot else {
        return Err(DflockdError::invalid("slot request must be sl"));
    };
    let mut reqs = gate.to_vec();
    reqs.extend(std::iter::repeat_n(slot, need));
    let lines = conn
        .call_pipelined(&reqs, limit, |l, _| Ok(l.to_owned()), first_answered)
        .await?;
    let sent = conn.last_sent().unwrap_or_else(Instant::now);
    let mut b = Batch {
        gate: None,
        slots: Vec::with_capacity(need),
        failed: None,
        failed_at_slot: false,
        sent,
    };
    for (i, (line, req)) in lines.into_iter().zip(&reqs).enumerate() {
        let line = line.unwrap_or_default();
        let reply = match req {
            Request::Enqueue { .. } => {
                protocol::parse_enqueue_reply(&line, req.label()).map(|r| match r {
                    EnqueueReply::Acquired(g) => AcquireReply::Granted(g),
                    EnqueueReply::Queued => AcquireReply::TimedOut,
                })
            }
            _ => protocol::parse_acquire_reply(&line, req.label()),
        };
        match reply {
            Ok(AcquireReply::Granted(g)) if i < gate.len() => b.gate = Some(g),
            Ok(AcquireReply::Granted(g)) => b.slots.push((
                Part {
                    key: key.to_string(),
                    token: g.token,
                    sem: true,
                },
                g.lease_s,
            )),
            Ok(AcquireReply::TimedOut) => {}
            Err(e) if e.code() == ErrorCode::ProtocolError => {
                conn.close();
                return Err(e);
            }
            Err(e) if b.failed.is_none() => {
                b.failed_at_slot = i >= gate.len();
                b.failed = Some(e);
            }
            Err(_) => {}
        }
    }
    Ok(b)
}

/// The acquisition of `mode` on `conn` (a fresh or pooled connection to the key's server):
/// `None` = timed out (or, for a try, refused), with whatever it got released. `timeout_s` is the
/// server-side wait (0 = try once), `end` the client's deadline.
pub(super) async fn acquire(
    opts: &PrimitiveOptions,
    conn: &mut Connection,
    mode: Mode,
    timeout_s: u64,
    end: Option<Instant>,
    place: Option<Place>,
) -> Result<Option<Got>> {
    let ttl = opts.lease_ttl_s;
    let slots_key = opts.key.clone();
    let gate_key = gate_key(&opts.key);
    let need = match mode {
        Mode::Shared => 1,
        Mode::Exclusive => MAX_READERS as usize,
    };
    let slot = Request::SemLock {
        key: &slots_key,
        timeout_s: 0,
        limit: MAX_READERS,
        ttl_s: ttl,
    };
    let socket_timeout = opts.connect.socket_timeout;
    let order_bound = opts.connect.connect_timeout + socket_timeout;
    // This waiter's place among this process's shared waiters' GRANTS (see `grant_chain`): taken
    // once its turn to send came, so grant places follow call order as send places do.
    let mut grant = None;
    let mut b = match place {
        // A try, or a waiter alone: `l`, answered when granted or timed out.
        None => {
            let gate = [Request::Lock {
                key: &gate_key,
                timeout_s,
                ttl_s: ttl,
            }];
            let limit = reply_limit(socket_timeout, Some(timeout_s));
            batch(conn, &gate, slot, need, limit, || {}).await?
        }
        // A waiter in this process's call order (see `order`): `e`, answered at once (then the
        // next waiter may send its own), and behind it `w` (at once `ok` when `e` got the gate,
        // else the wait) and the slots: one write.
        Some(mut place) => {
            place.turn(order_bound).await;
            grant = Some(Place::take(&opts.connect, &grant_chain(&opts.key)));
            let wait_s = match end {
                Some(e) => ceil_secs(Instant::now(), e),
                None => timeout_s,
            };
            let gate = [
                Request::Enqueue {
                    key: &gate_key,
                    ttl_s: ttl,
                },
                Request::Wait {
                    key: &gate_key,
                    timeout_s: wait_s,
                },
            ];
            let limit = reply_limit(socket_timeout, Some(wait_s));
            batch(conn, &gate, slot, need, limit, move || drop(place)).await?
        }
    };
    let mut sent = b.sent;
    let mut parts = Vec::with_capacity(1 + need);
    let mut lease_s = 0;
    if let Some(g) = b.gate.take() {
        lease_s = g.lease_s;
        parts.push(Part {
            key: gate_key.clone(),
            token: g.token,
            sem: false,
        });
    }
    let gate_held = !parts.is_empty();
    let slots_granted = b.slots.len();
    for g in b.slots.drain(..) {
        if lease_s == 0 {
            lease_s = g.1;
        }
        parts.push(g.0);
    }
    let failed = b.failed.take();
    if !gate_held && (failed.is_none() || b.failed_at_slot) {
        // No gate: the slots that came after it are not ours to keep, nor are their refusals
        // (a key of another limit is looked at again once the gate is granted).
        give_up(conn, &parts, opts).await;
        return Ok(None);
    }
    // A renew's reply is awaited for the validity a renew sent now would prove (as
    // `confirm_grant` does), not what is left of the old one: after a wait longer than the lease
    // that is nothing, while the server granted just now.
    let renew_limit = |lease_s: u64| {
        let now = Instant::now();
        let loss_at = Schedule::new(opts, lease_s).loss_at(now);
        socket_timeout
            .min(loss_at.saturating_duration_since(now))
            .max(Duration::from_millis(1))
    };
    if let Some(e) = failed {
        if gate_held && Era::of_slot_failure(&e, slots_granted) == Era::Mutex {
            let got = mutex_era(opts, conn, parts, timeout_s, end).await?;
            if got.is_some() {
                granted_in_order(grant, order_bound).await;
            }
            return Ok(got);
        }
        give_up(conn, &parts, opts).await;
        return Err(e);
    }
    // Then wait for the rest (readers leaving), renewing what is held before it could expire.
    while parts.len() - 1 < need {
        let now = Instant::now();
        if timeout_s == 0 || end.is_some_and(|e| now >= e) {
            give_up(conn, &parts, opts).await;
            return Ok(None);
        }
        let loss_at = Schedule::new(opts, lease_s).loss_at(sent);
        let mut wait_s = loss_at
            .saturating_duration_since(now)
            .saturating_sub(RENEW_MARGIN)
            .as_secs();
        if wait_s == 0 {
            lease_s = renew_parts(conn, &parts, ttl, lease_s, renew_limit(lease_s))
                .await
                .map_err(lost_on_refusal)?;
            sent = conn.last_sent().unwrap_or_else(Instant::now);
            let loss_at = Schedule::new(opts, lease_s).loss_at(sent);
            wait_s = loss_at
                .saturating_duration_since(Instant::now())
                .saturating_sub(RENEW_MARGIN)
                .as_secs();
        }
        if let Some(e) = end {
            // Rounded down, less a margin for the reply to travel: the server's wait ends before
            // the caller's deadline, so a writer
            // that gives up releases the gate itself instead of leaving it on a dropped
            // connection the server is not reading until that wait ends (seen: the gate still
            // held after the writer's TIMEOUT). The last fraction of a second is polled.
            let left = e.saturating_duration_since(Instant::now());
            wait_s = wait_s.min(left.saturating_sub(RENEW_MARGIN).as_secs());
        }
        let reply = conn.sem_lock(&slots_key, wait_s, MAX_READERS, ttl).await;
        match reply {
            Ok(AcquireReply::Granted(g)) => parts.push(Part {
                key: slots_key.clone(),
                token: g.token,
                sem: true,
            }),
            Ok(AcquireReply::TimedOut) => {
                if wait_s == 0 {
                    tokio::time::sleep(SHORT_LEASE_POLL).await;
                }
            }
            Err(e) => {
                give_up(conn, &parts, opts).await;
                return Err(e);
            }
        }
    }
    if mode == Mode::Shared {
        // A reader lets the gate go: the next reader (or writer) may pass.
        let gate = parts.remove(0);
        match conn
            .release_within(&gate.key, &gate.token, false, opts.connect.socket_timeout)
            .await
        {
            // The gate's lease ended meanwhile: it is not held, as wanted.
            Err(e) if e.code() == ErrorCode::ServerError => {}
            Err(e) => return Err(e),
            Ok(()) => {}
        }
    }
    // Slots granted after a wait: prove the lease of every part from now if it is due.
    let sched = Schedule::new(opts, lease_s);
    if Instant::now() >= sched.renew_at(sent) {
        lease_s = renew_parts(conn, &parts, ttl, lease_s, renew_limit(lease_s))
            .await
            .map_err(lost_on_refusal)?;
        sent = conn.last_sent().unwrap_or_else(Instant::now);
    }
    granted_in_order(grant, order_bound).await;
    Ok(Some(Got {
        parts,
        lease_s,
        sent,
    }))
}

/// The chain of this process's shared waiters' grants on `key` (a key holds no LF, so no real
/// key's chain has this name).
fn grant_chain(key: &str) -> String {
    format!("{key}\ngrants")
}

/// A granted waiter returns only once every earlier shared waiter of this process on the key
/// has returned (granted, timed out or failed; at most `bound`), then frees the next one.
///
/// Why: a reader's acquisition ends with `r <key>/gate`, and the server grants the gate to the
/// next waiter while it answers that `r`. The next waiter's `w` and `sl` replies (another
/// connection) then race the first one's `ok`: the later waiter could return, and its caller
/// run, first (a LockManager's shared grants out of call order). The later waiter cannot be
/// granted before an earlier one has passed the gate, so this wait is short and never waits
/// for a lock: an earlier reader has its slot and is letting the gate go; an earlier writer
/// holds all it needs; in [`Era::Mutex`] the earlier one keeps the gate until it holds the
/// mutex. The caller's result is delivered in the same poll as this return, so the order
/// holds up to the caller.
async fn granted_in_order(grant: Option<Place>, bound: Duration) {
    if let Some(mut g) = grant {
        g.turn(bound).await;
    }
}

/// A renew refused while acquiring: the part's lease had ended.
fn lost_on_refusal(e: DflockdError) -> DflockdError {
    if e.code() == ErrorCode::ServerError {
        DflockdError::lost_because(
            "a part of the shared lock expired while acquiring (its renew was rejected)",
            &e,
        )
    } else {
        e
    }
}

/// Releases what a failed acquisition got and closes the connection (the server also releases
/// on disconnect: this only makes the release immediate and independent of that setting).
async fn give_up(conn: &mut Connection, parts: &[Part], opts: &PrimitiveOptions) {
    if !parts.is_empty() && !conn.is_closed() {
        let _ = release_parts(conn, parts, opts.connect.socket_timeout).await;
    }
    conn.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        assert_eq!(Mode::parse("shared").unwrap(), Mode::Shared);
        assert_eq!(Mode::parse("exclusive").unwrap(), Mode::Exclusive);
        assert_eq!(Mode::Shared.as_str(), "shared");
        let e = Mode::parse("Shared").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.message().contains("'shared' or 'exclusive'"));
    }

    #[test]
    fn a_slot_request_refused_for_its_limit_with_no_slot_shows_a_mutex() {
        let mismatch = DflockdError::new(ErrorCode::LimitMismatch, "sl: error_limit_mismatch");
        assert_eq!(Era::of_slot_failure(&mismatch, 0), Era::Mutex);
        // A slot granted: the key is the readers' semaphore; a later refusal is another matter.
        assert_eq!(Era::of_slot_failure(&mismatch, 1), Era::Slots);
        let other = DflockdError::new(ErrorCode::ServerError, "sl: error_max_locks");
        assert_eq!(Era::of_slot_failure(&other, 0), Era::Slots);
    }

    #[test]
    fn the_gate_key_fits_the_protocol() {
        assert_eq!(gate_key("k"), "k/gate");
        let room = MAX_KEY_BYTES - GATE_SUFFIX.len();
        assert!(validate_key(&"a".repeat(room)).is_ok());
        protocol::validate_key(&gate_key(&"a".repeat(room))).unwrap();
        let e = validate_key(&"a".repeat(room + 1)).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
    }

    #[test]
    fn ceil_secs_rounds_up() {
        let now = Instant::now();
        assert_eq!(ceil_secs(now, now), 0);
        assert_eq!(ceil_secs(now, now + Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(now, now + Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(now + Duration::from_secs(1), now), 0);
    }
}

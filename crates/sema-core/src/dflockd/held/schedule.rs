//! The lease clock's arithmetic and the words of every loss and failed release: one home for
//! both drivers (the tokio renewal task and the binding's event-loop driver) and the acquisition
//! paths that confirm a grant.

use std::time::Duration;

use tokio::time::Instant;

use super::super::error::{DflockdError, ErrorCode};
use super::super::primitive::{
    PrimitiveOptions, LOSS_GUARD_MAX, LOSS_GUARD_MIN, MIN_RENEW_INTERVAL,
};
use super::super::protocol::MAX_SECONDS;

/// The lease clock of one grant or renew, started when its request was SENT (`sent`): the
/// server starts the lease when it receives the request, later, so the server cannot end the
/// lease before `sent + lease`. The client:
/// - renews `interval` after `sent`: `lease × renew_ratio` (the caller's ratio, read here, not
///   assumed), at most `renew_max_interval` (the server's idle limit) and at most two thirds of
///   the validity, so a renew whose reply is lost still has a third of the lease in which the
///   reply could arrive;
/// - holds the lease as valid until `loss_at = sent + min(lease, idle) − guard`, `idle` the
///   server's idle limit (23 s, or `renew_max_interval` if larger: the server also drops a
///   connection silent for its read timeout), and if no renew is confirmed by then declares the lock lost at that instant,
///   `guard` (a tenth of that, 250 ms .. 1 s) before the server could hand the key to anyone else.
///
/// With the default ratio 0.5 that is one renew round trip per `lease / 2`, at most two thirds
/// of the validity: 1 per second for a 2 s lease, 1 per 14.7 s for the server's default 33 s
/// (validity 22 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    lease: Duration,
    valid: Duration,
    interval: Duration,
}

/// The Go server's default `--read-timeout` (`internal/config/config.go`): a connection that sent
/// no request this long is dropped and its keys freed.
pub const SERVER_IDLE_LIMIT: Duration = Duration::from_secs(23);

/// `t + d`, or a year later when that does not fit.
pub(crate) fn after(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(86_400 * 365))
}

impl Schedule {
    /// The clock of a `lease_s` lease renewed with `opts`' ratio and cap.
    pub fn new(opts: &PrimitiveOptions, lease_s: u64) -> Self {
        Self::with(opts.renew_ratio, opts.renew_max_interval, lease_s)
    }

    /// The clock of a `lease_s` lease renewed at `renew_ratio` of it, at most every
    /// `renew_max_interval`.
    pub fn with(renew_ratio: f64, renew_max_interval: Duration, lease_s: u64) -> Self {
        let lease = Duration::from_secs(lease_s.min(MAX_SECONDS));
        // The server also ends the lease when it drops the connection for idleness: `--read-timeout`
        // (23 s by default) after the last request it received. A renew stuck in the network is a
        // request the server never received, so the lease is proven only up to the idle limit after
        // the last confirmed send: the default server's 23 s, or `renew_max_interval` when that is
        // set higher (it is kept below the server's limit). Before, a 33 s lease was trusted for
        // 32 s while the server could drop the holder after 23 s (the dflockd simulator, seed
        // 12872: two holders, the first untold). A server started with a --read-timeout below 23 s
        // is not covered: the client cannot learn it.
        let proven = lease.min(renew_max_interval.max(SERVER_IDLE_LIMIT));
        let guard = (proven / 10).clamp(LOSS_GUARD_MIN, LOSS_GUARD_MAX);
        let valid = proven.saturating_sub(guard);
        let by_ratio = Duration::try_from_secs_f64(lease.as_secs_f64() * renew_ratio)
            .unwrap_or(renew_max_interval);
        let interval = by_ratio
            .min(valid * 2 / 3)
            .min(renew_max_interval)
            .max(MIN_RENEW_INTERVAL);
        Schedule {
            lease,
            valid,
            interval,
        }
    }

    /// Until when a lease whose request was sent at `sent` is proven.
    pub fn loss_at(&self, sent: Instant) -> Instant {
        after(sent, self.valid)
    }

    /// The earliest instant the server could end that lease.
    pub fn expiry(&self, sent: Instant) -> Instant {
        after(sent, self.lease)
    }

    /// When to start the next renew.
    pub fn renew_at(&self, sent: Instant) -> Instant {
        after(sent, self.interval)
    }

    /// The time between two renews' starts.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

/// The lease a renew proved, in seconds: the TTL sent when the reply says it or one second less
/// (the Go server answers the TTL it applied; Python dflockd answers the remaining time rounded
/// down, TTL − 1, having applied the TTL sent), else the smaller value the server reported;
/// without a TTL sent, the reply (or, for a bare `ok`, the grant's lease).
pub fn renewed_lease(sent_ttl: Option<u64>, reply: Option<u64>, grant: u64) -> u64 {
    match (sent_ttl, reply) {
        (Some(t), Some(r)) if r.saturating_add(1) >= t => t,
        (_, Some(r)) => r,
        (Some(t), None) => t,
        (None, None) => grant,
    }
}

/// Why the lock is lost when no renewal was confirmed within the lease's validity.
pub fn unconfirmed(lease_s: u64) -> String {
    format!(
        "no renewal was confirmed within the {lease_s} s lease (the server or the network did not answer in time); \
         the lock counts as lost before the server could grant it to anyone else"
    )
}

/// Why the lock is lost when the holder released while a renew was in flight and that renew
/// got no reply within [`RELEASE_RENEW_WAIT`](super::super::primitive::RELEASE_RENEW_WAIT).
pub const RELEASE_RENEW_UNANSWERED: &str = "release: a renew in flight got no reply within 5 s; the connection was closed (the server releases on disconnect)";

/// The message of a release that could not be answered because the connection was closed
/// (`close()` while it was in flight, or the driver stopped).
pub const RELEASE_CLOSED: &str = "the lock was lost before release (its connection was closed)";

/// The `LOCK_LOST` error of a release after a loss for `reason` (none: the reason is unknown).
pub fn lost_error(reason: Option<&str>) -> DflockdError {
    DflockdError::new(
        ErrorCode::LockLost,
        match reason {
            Some(r) => format!("the lock was lost before release: {r}"),
            None => "the lock was lost before release".to_string(),
        },
    )
}

/// The `LOCK_LOST` error of a release answered by a renew's failure `e` (its reply kept).
pub fn lost_error_because(e: &DflockdError) -> DflockdError {
    DflockdError::lost_because(
        format!("the lock was lost before release: {}", e.message()),
        e,
    )
}

/// The error of a release closed by `close()` while it was in flight.
pub fn release_closed() -> DflockdError {
    DflockdError::new(ErrorCode::LockLost, RELEASE_CLOSED)
}

/// The error of a failed release: a server `error` means the token was no longer held; no
/// answer means the connection was closed (the server releases on disconnect) and the lease
/// ends by itself at the latest: the lock is gone either way.
pub fn release_error(e: DflockdError) -> DflockdError {
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

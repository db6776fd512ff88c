//! Options of a [`Primitive`](super::Primitive) and their checks, with the renewal constants.

use std::time::Duration;

use super::super::connection::ConnectOptions;
use super::super::error::{DflockdError, Result};
use super::super::protocol;
use super::super::shared::{self, Mode};
use crate::options;

/// Default cap between two renewals: well below the server's default 23 s idle limit (the option
/// table's [`options::DEFAULT_RENEW_MAX_INTERVAL_MS`]).
pub const DEFAULT_RENEW_MAX_INTERVAL: Duration =
    Duration::from_millis(options::DEFAULT_RENEW_MAX_INTERVAL_MS);
/// Smallest renewal interval.
pub const MIN_RENEW_INTERVAL: Duration = Duration::from_millis(100);
/// How long `release()` waits for a renew that is in flight before giving up on the connection
/// (less when the lease's validity ends sooner).
pub const RELEASE_RENEW_WAIT: Duration = Duration::from_secs(5);
/// The client declares a lease lost this long before the server could end it (a tenth of the
/// lease, between these bounds): time for the loss to reach the caller (`signal`, `onLost`)
/// before anyone else can be granted the key, and room for scheduling delays and clock-rate
/// differences between the two machines.
pub const LOSS_GUARD_MIN: Duration = Duration::from_millis(250);
/// Upper bound of the loss guard (see [`LOSS_GUARD_MIN`]).
pub const LOSS_GUARD_MAX: Duration = Duration::from_secs(1);

/// Options of a [`Primitive`](crate::dflockd::primitive::Primitive).
#[derive(Clone, Debug, PartialEq)]
pub struct PrimitiveOptions {
    /// The key.
    pub key: String,
    /// 1 = lock; > 1 = semaphore with that many slots.
    pub limit: u64,
    /// Timeout of `acquire()` in whole seconds (0 = try once), as the server takes it.
    pub acquire_timeout_s: u64,
    /// The caller's own bound on `acquire()` from its start (connect included), for timeouts
    /// finer than the protocol's whole seconds: the server gets the ceiling in
    /// `acquire_timeout_s`, and at this deadline the client stops waiting, drops the connection
    /// (the server then cancels the wait, or releases a grant that crossed the cut) and reports
    /// a timeout. `None` = the server's answer decides (plus a safety margin for a silent one).
    pub acquire_deadline: Option<Duration>,
    /// Lease TTL in whole seconds, sent on acquire, enqueue and every renew (`None` = server
    /// default, and renews then omit it too).
    pub lease_ttl_s: Option<u64>,
    /// The server (already chosen by sharding) and connection settings.
    pub connect: ConnectOptions,
    /// Fraction of the lease after which to renew (0 < r < 1).
    pub renew_ratio: f64,
    /// Upper bound between the starts of two renewals (keep it below 0.6 × the server's read
    /// timeout).
    pub renew_max_interval: Duration,
    /// `None` = a plain lock or semaphore on `key`; `Some` = a shared (reader/writer) lock held
    /// in that mode (see [`shared`](super::super::shared); `limit` must then be 1).
    pub mode: Option<Mode>,
}

impl PrimitiveOptions {
    /// A lock (limit 1) on `key` with the official clients' defaults (the option table's):
    /// acquire timeout 10 s, server-default lease, renew ratio 0.5, renew cap 15 s.
    pub fn new(key: impl Into<String>, connect: ConnectOptions) -> Self {
        PrimitiveOptions {
            key: key.into(),
            limit: 1,
            acquire_timeout_s: options::DEFAULT_ACQUIRE_TIMEOUT_S,
            acquire_deadline: None,
            lease_ttl_s: None,
            connect,
            renew_ratio: options::DEFAULT_RENEW_RATIO,
            renew_max_interval: DEFAULT_RENEW_MAX_INTERVAL,
            mode: None,
        }
    }

    /// Check every option (`INVALID_ARGUMENT`).
    pub fn validate(&self) -> Result<()> {
        protocol::validate_key(&self.key)?;
        protocol::validate_limit(self.limit)?;
        protocol::validate_timeout(self.acquire_timeout_s)?;
        if self.mode.is_some() {
            if self.limit != 1 {
                return Err(DflockdError::invalid(format!(
                    "limit and mode do not combine: a shared lock has one writer or up to {} readers, a semaphore {} holders of one kind",
                    shared::MAX_READERS,
                    self.limit
                )));
            }
            shared::validate_key(&self.key)?;
        }
        if let Some(t) = self.lease_ttl_s {
            protocol::validate_ttl(t)?;
        }
        // The table's bounds and words (0 < r < 1, both ends excluded).
        let ratio = options::kinds::RATIO;
        let (lo, hi) = (ratio.min.unwrap_or(0.0), ratio.max.unwrap_or(1.0));
        if !(self.renew_ratio.is_finite() && self.renew_ratio > lo && self.renew_ratio < hi) {
            return Err(DflockdError::invalid(format!(
                "renewRatio must be {}, got {}",
                ratio.expected, self.renew_ratio
            )));
        }
        if self.renew_max_interval < Duration::from_millis(10) {
            return Err(DflockdError::invalid(
                "renewMaxIntervalMs must be at least 10 ms",
            ));
        }
        self.connect.validate()
    }
}

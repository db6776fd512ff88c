//! Typed form of the `stats` JSON (Go server only).

use serde::{Deserialize, Serialize};

use super::error::{DflockdError, Result};

/// The whole `stats` reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Open connections, including the asking one.
    pub connections: i64,
    /// Keys with limit 1 that are held or have waiters.
    #[serde(default)]
    pub locks: Vec<StatsLock>,
    /// Keys with limit > 1 that are held or have waiters.
    #[serde(default)]
    pub semaphores: Vec<StatsSemaphore>,
    /// Idle lock keys awaiting GC.
    #[serde(default)]
    pub idle_locks: Vec<StatsIdleLock>,
    /// Idle semaphore keys awaiting GC.
    #[serde(default)]
    pub idle_semaphores: Vec<StatsIdleSemaphore>,
}

/// One held (or waited-for) lock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsLock {
    /// The key.
    pub key: String,
    /// Server-internal id of the holder's connection (0 when not held).
    pub owner_conn_id: u64,
    /// Seconds until the lease expires (0 when not held).
    pub lease_expires_in_s: f64,
    /// Number of queued waiters.
    pub waiters: i64,
}

/// One semaphore with holders or waiters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsSemaphore {
    /// The key.
    pub key: String,
    /// The key's limit.
    pub limit: i64,
    /// Current holders.
    pub holders: i64,
    /// Queued waiters.
    pub waiters: i64,
}

/// An idle lock key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsIdleLock {
    /// The key.
    pub key: String,
    /// Seconds since last activity.
    pub idle_s: f64,
}

/// An idle semaphore key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsIdleSemaphore {
    /// The key.
    pub key: String,
    /// Seconds since last activity.
    pub idle_s: f64,
}

/// Parse the JSON text after `ok ` into [`Stats`]; malformed JSON is a `PROTOCOL_ERROR`.
pub fn parse_stats(json: &str) -> Result<Stats> {
    serde_json::from_str(json)
        .map_err(|e| DflockdError::protocol(format!("stats: malformed JSON reply: {e}")))
}

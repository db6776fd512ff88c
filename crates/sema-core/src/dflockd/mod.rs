//! dflockd lock-server client.
//!
//! - [`protocol`]: request encoding with validation (before any byte is written) and exact
//!   reply parsing for every command (`auth`, `l r n e w`, `sl sr sn se sw`, `stats`).
//! - [`connection`]: TCP/TLS connect, auth handshake, timeouts; the reply framing and deadlines
//!   are [`protocol::session`]'s, shared with the event-loop driver.
//! - [`tls`]: TLS trust (system roots or the caller's PEM, a self-signed server that is its own
//!   configured anchor), client certificates.
//! - [`primitive`]: a lock (limit 1) or semaphore slot with acquire, two-phase enqueue/wait,
//!   automatic renewal, release and loss notification.
//! - [`order`]: this process's waiters on one server and key send their requests in call order.
//! - [`pool`]: the process-wide idle connections (≤ 64 per server, closed after 2 s idle).
//! - [`held`]: the held lock's lifecycle as one sans-IO machine (renew schedule, lease clock,
//!   loss reported once, release, abort) and a waiter's rejoin after a server restart, run by
//!   both drivers: `renewer` (tokio) and the binding's event-loop driver ([`ExternalHold`]).
//! - `renewer`: the tokio driver of a held lock: the task that owns its connection.
//! - [`shared`]: shared (reader/writer) locks from a gate mutex and reader slots.
//! - [`shard`]: `stable_hash_shard` (CRC-32/IEEE), identical to the official clients.
//! - [`stats`]: serde types of the `stats` JSON.
//! - [`target`]: the `dflockd://` target string: "is this dflockd?", its parse, its redaction.
//! - [`watchdog`]: renews a lock in its holder's stead when the holder's own thread is late.
//! - [`error`]: [`DflockdError`] with stable codes.
//!
//! Works with the Go server v1.10.0 and tolerates Python dflockd 0.5.0 (renew answers TTL−1,
//! bare `error` where Go has specific statuses, connection closed after protocol errors).

pub mod connection;
pub mod error;
pub mod held;
mod mismatch;
pub mod order;
mod plain_words;
pub mod pool;
pub mod primitive;
pub mod protocol;
mod renewer;
pub mod shard;
pub mod shared;
pub mod stats;
pub mod steal;
pub mod target;
pub mod tls;
pub mod watchdog;

pub use connection::{stats_json, ConnectOptions, Connection};
pub use error::{DflockdError, ErrorCode, Result};
pub use primitive::{
    EnqueueOutcome, ExternalHold, ExternalIo, ExternalOp, FirstAnswer, FirstFailed, LossCallback,
    Primitive, PrimitiveOptions, Stage, Ticket,
};
pub use protocol::{AcquireReply, EnqueueReply, Grant, Reply, Request};
pub use shard::stable_hash_shard;
pub use shared::Mode;
pub use stats::{parse_stats, Stats};
pub use tls::TlsOptions;

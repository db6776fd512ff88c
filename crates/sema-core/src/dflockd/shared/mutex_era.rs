//! The key met as a mutex: which era a slot request's refusal shows ([`Era`]), and the
//! acquisition of a shared lock's reader or writer that takes the mutex then ([`mutex_era`]).

use tokio::time::Instant;

use super::super::connection::Connection;
use super::super::error::{DflockdError, ErrorCode, Result};
use super::super::primitive::PrimitiveOptions;
use super::super::protocol::AcquireReply;
use super::{ceil_secs, give_up, release_parts, Got, Part};

/// What the server's key is, as a slot request's reply tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// The readers' semaphore (limit [`MAX_READERS`](super::MAX_READERS)), or not there yet: slots are taken.
    Slots,
    /// A mutex (limit 1): a plain holder holds it, or held it within the GC's idle time. A
    /// reader or writer takes the mutex instead, so it never runs beside a plain holder.
    Mutex,
}

impl Era {
    /// The era a failed slot request shows: `error_limit_mismatch` with no slot granted means
    /// the key has another limit; a mutex is the only other limit this package gives it.
    pub fn of_slot_failure(e: &DflockdError, slots_granted: usize) -> Era {
        if e.code() == ErrorCode::LimitMismatch && slots_granted == 0 {
            Era::Mutex
        } else {
            Era::Slots
        }
    }
}

/// The key is a mutex ([`Era::Mutex`]): the gate (`parts`, held) is let go and the mutex taken
/// on the same connection, waiting what is left of the caller's time. The lock is then that
/// mutex alone (renewed and released as a plain lock). A key of yet another limit (a
/// `DistributedSemaphore`'s) is refused with `LIMIT_MISMATCH`.
pub(super) async fn mutex_era(
    opts: &PrimitiveOptions,
    conn: &mut Connection,
    parts: Vec<Part>,
    timeout_s: u64,
    end: Option<Instant>,
) -> Result<Option<Got>> {
    // The gate is kept while the mutex is asked for, and let go after: a later waiter of this
    // process cannot pass the gate and queue for the mutex first (the call order holds; see
    // `granted_in_order`). A wait longer than the gate's lease lets it expire meanwhile: its
    // release is then refused, which is as wanted.
    let wait_s = match end {
        Some(e) if timeout_s > 0 => ceil_secs(Instant::now(), e),
        _ => timeout_s,
    };
    let reply = conn
        .acquire_any(&opts.key, wait_s, 1, opts.lease_ttl_s)
        .await;
    let sent = conn.last_sent().unwrap_or_else(Instant::now);
    match reply {
        Ok(AcquireReply::Granted(g)) => {
            let mutex = Part {
                key: opts.key.clone(),
                token: g.token,
                sem: false,
            };
            match release_parts(conn, &parts, opts.connect.socket_timeout).await {
                Ok(()) => {}
                Err(e) if e.code() == ErrorCode::ServerError => {}
                Err(e) => {
                    give_up(conn, &[mutex], opts).await;
                    return Err(e);
                }
            }
            Ok(Some(Got {
                parts: vec![mutex],
                lease_s: g.lease_s,
                sent,
            }))
        }
        Ok(AcquireReply::TimedOut) => {
            give_up(conn, &parts, opts).await;
            Ok(None)
        }
        Err(e) => {
            give_up(conn, &parts, opts).await;
            if e.code() == ErrorCode::LimitMismatch {
                return Err(DflockdError::new(
                    ErrorCode::LimitMismatch,
                    format!(
                        "key '{}' is a semaphore of another limit on the server (a DistributedSemaphore or \
                         limit= of another client): a shared lock needs it free of that use (it is \
                         forgotten ~60 s after its last holder)",
                        opts.key
                    ),
                )
                .with_reply(e.reply().unwrap_or("error_limit_mismatch")));
            }
            Err(e)
        }
    }
}

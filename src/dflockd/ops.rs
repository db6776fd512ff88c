//! The low-level connection's results: `NativeCallResult`, the value a call settles with, made
//! from the reply to a request. The request is the core's (`Request`, encoded and validated
//! into an `Encoded` when the call is made); this file only maps its reply to the JS shape.

use sema_core::dflockd::protocol::Encoded;
use sema_core::dflockd::Reply;

use super::*;

/// What a `NativeDflockdConnection` call answers, in the one result shape: `{ok: true, value:
/// NativeReply}` or `{ok: false, error}`. A server `timeout` to `lock`/`wait` is `ok: false` with
/// code `TIMEOUT` and `reply: 'timeout'` (client-side time limits have no `reply`).
pub type NativeCallResult = NativeResult<NativeReply>;

/// The value of a successful `NativeDflockdConnection` call: the fields its command has.
#[napi(object)]
#[derive(Default)]
pub struct NativeReply {
    /// `lock`/`wait`/`enqueue` (acquired): the lease token.
    pub token: Option<String>,
    /// `lock`/`wait`/`enqueue` (acquired): the lease granted, `renew`: the lease now applied
    /// (seconds; a bare `ok` to a renew gives the TTL sent, else 30).
    pub lease: Option<f64>,
    /// `enqueue`: `'acquired'` or `'queued'`.
    #[napi(ts_type = "'acquired' | 'queued'")]
    pub status: Option<String>,
    /// `stats`: the JSON text; `request`: the raw reply line.
    pub text: Option<String>,
}

impl NativeReply {
    fn grant(g: core::Grant) -> Self {
        NativeReply {
            token: Some(g.token),
            lease: Some(g.lease_s as f64),
            ..Self::default()
        }
    }
}

/// A failed call's answer.
pub(super) fn call_error(e: DflockdError) -> NativeCallResult {
    NativeResult(Err(e.into()))
}

/// Lease the official clients assume when a renew reply does not say.
pub(super) const FALLBACK_LEASE_S: u64 = 30;

/// The result of request `req` for its reply `line` (parsed by the core's session).
pub(super) fn reply_result(req: &Encoded, line: &str) -> NativeCallResult {
    let reply = match req.parse_reply(line) {
        Ok(Reply::Acquire(AcquireReply::Granted(g))) => NativeReply::grant(g),
        Ok(Reply::Acquire(AcquireReply::TimedOut)) => return call_error(timed_out(req.key())),
        Ok(Reply::Enqueue(EnqueueReply::Acquired(g))) => NativeReply {
            status: Some("acquired".to_string()),
            ..NativeReply::grant(g)
        },
        Ok(Reply::Enqueue(EnqueueReply::Queued)) => NativeReply {
            status: Some("queued".to_string()),
            ..NativeReply::default()
        },
        Ok(Reply::Renew(lease)) => NativeReply {
            lease: Some(lease.or(req.sent_ttl()).unwrap_or(FALLBACK_LEASE_S) as f64),
            ..NativeReply::default()
        },
        Ok(Reply::Release | Reply::Auth) => NativeReply::default(),
        Ok(Reply::Stats(text) | Reply::Line(text)) => NativeReply {
            text: Some(text),
            ..NativeReply::default()
        },
        Err(e) => return call_error(e),
    };
    NativeResult(Ok(reply))
}

pub(super) fn timed_out(key: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Timeout,
        format!("timeout acquiring '{key}'"),
    )
    .with_reply("timeout")
}

//! The low-level connection's results: `NativeCallResult`, the value a call settles with, made
//! from the reply to a request. The request is the core's (`Request`, encoded and validated
//! into an `Encoded` when the call is made); this file only maps its reply to the JS shape.

use sema_core::dflockd::protocol::Encoded;
use sema_core::dflockd::Reply;

use super::*;

/// Result of a `NativeDflockdConnection` call: `{ok: true, ...fields}` or
/// `{ok: false, error}`. A server `timeout` to `lock`/`wait` is `ok: false` with code
/// `TIMEOUT` and `reply: 'timeout'` (client-side time limits have no `reply`).
#[napi(object)]
pub struct NativeCallResult {
    /// Whether the call succeeded.
    pub ok: bool,
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
    /// The failure when not `ok`.
    pub error: Option<NativeError>,
}

impl NativeCallResult {
    pub(super) fn ok() -> Self {
        NativeCallResult {
            ok: true,
            token: None,
            lease: None,
            status: None,
            text: None,
            error: None,
        }
    }

    pub(super) fn grant(g: core::Grant) -> Self {
        NativeCallResult {
            token: Some(g.token),
            lease: Some(g.lease_s as f64),
            ..Self::ok()
        }
    }

    pub(super) fn text(t: String) -> Self {
        NativeCallResult {
            text: Some(t),
            ..Self::ok()
        }
    }

    pub(super) fn err(e: DflockdError) -> Self {
        NativeCallResult {
            ok: false,
            error: Some(e.into()),
            ..Self::ok()
        }
    }
}

/// Lease the official clients assume when a renew reply does not say.
pub(super) const FALLBACK_LEASE_S: u64 = 30;

/// The result of request `req` for its reply `line` (parsed by the core's session).
pub(super) fn reply_result(req: &Encoded, line: &str) -> NativeCallResult {
    match req.parse_reply(line) {
        Ok(Reply::Acquire(AcquireReply::Granted(g))) => NativeCallResult::grant(g),
        Ok(Reply::Acquire(AcquireReply::TimedOut)) => NativeCallResult::err(timed_out(req.key())),
        Ok(Reply::Enqueue(EnqueueReply::Acquired(g))) => NativeCallResult {
            status: Some("acquired".to_string()),
            ..NativeCallResult::grant(g)
        },
        Ok(Reply::Enqueue(EnqueueReply::Queued)) => NativeCallResult {
            status: Some("queued".to_string()),
            ..NativeCallResult::ok()
        },
        Ok(Reply::Renew(lease)) => NativeCallResult {
            lease: Some(lease.or(req.sent_ttl()).unwrap_or(FALLBACK_LEASE_S) as f64),
            ..NativeCallResult::ok()
        },
        Ok(Reply::Release | Reply::Auth) => NativeCallResult::ok(),
        Ok(Reply::Stats(text) | Reply::Line(text)) => NativeCallResult::text(text),
        Err(e) => NativeCallResult::err(e),
    }
}

pub(super) fn timed_out(key: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Timeout,
        format!("timeout acquiring '{key}'"),
    )
    .with_reply("timeout")
}

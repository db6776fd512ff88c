//! The low-level connection's requests: `Op` (one request, encoded and validated), running
//! it on a core `Connection`, and `NativeCallResult`, the value a call settles with.

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

/// One request of the low-level connection (owned copies of the JS arguments).
pub(super) enum Op {
    Lock {
        key: String,
        timeout_s: u64,
        ttl_s: Option<u64>,
        limit: Option<u64>,
    },
    Release {
        key: String,
        token: String,
        sem: bool,
    },
    Renew {
        key: String,
        token: String,
        ttl_s: Option<u64>,
        sem: bool,
    },
    Enqueue {
        key: String,
        ttl_s: Option<u64>,
        limit: Option<u64>,
    },
    Wait {
        key: String,
        timeout_s: u64,
        sem: bool,
    },
    Stats,
    Raw {
        cmd: String,
        key: String,
        arg: String,
    },
}

impl Op {
    /// The core request this is (borrowing its strings); `None` for a raw request.
    pub(super) fn request(&self) -> Option<sema_core::dflockd::Request<'_>> {
        use sema_core::dflockd::Request as R;
        Some(match self {
            Op::Lock {
                key,
                timeout_s,
                ttl_s,
                limit,
            } => match *limit {
                None => R::Lock {
                    key,
                    timeout_s: *timeout_s,
                    ttl_s: *ttl_s,
                },
                Some(limit) => R::SemLock {
                    key,
                    timeout_s: *timeout_s,
                    limit,
                    ttl_s: *ttl_s,
                },
            },
            Op::Release { key, token, sem } => match sem {
                false => R::Release { key, token },
                true => R::SemRelease { key, token },
            },
            Op::Renew {
                key,
                token,
                ttl_s,
                sem,
            } => match sem {
                false => R::Renew {
                    key,
                    token,
                    ttl_s: *ttl_s,
                },
                true => R::SemRenew {
                    key,
                    token,
                    ttl_s: *ttl_s,
                },
            },
            Op::Enqueue { key, ttl_s, limit } => match *limit {
                None => R::Enqueue { key, ttl_s: *ttl_s },
                Some(limit) => R::SemEnqueue {
                    key,
                    limit,
                    ttl_s: *ttl_s,
                },
            },
            Op::Wait {
                key,
                timeout_s,
                sem,
            } => match sem {
                false => R::Wait {
                    key,
                    timeout_s: *timeout_s,
                },
                true => R::SemWait {
                    key,
                    timeout_s: *timeout_s,
                },
            },
            Op::Stats => R::Stats,
            Op::Raw { .. } => return None,
        })
    }

    /// Encode (validating) the request; returns the timeout a blocking command gives the
    /// server, in seconds.
    pub(super) fn encode(&self, out: &mut Vec<u8>) -> core::Result<Option<u64>> {
        match (self.request(), self) {
            (Some(req), _) => {
                req.encode_into(out)?;
                Ok(req.blocking_timeout_s())
            }
            (None, Op::Raw { cmd, key, arg }) => {
                let (bytes, blocking) = core::protocol::encode_raw(cmd, key, arg)?;
                out.extend_from_slice(&bytes);
                Ok(blocking)
            }
            (None, _) => Ok(None),
        }
    }

    /// The result of this request for its reply line (parsed by the core protocol).
    pub(super) fn parse_reply(&self, line: &str) -> NativeCallResult {
        use sema_core::dflockd::Reply;
        let Some(req) = self.request() else {
            return NativeCallResult::text(line.to_string());
        };
        match req.parse_reply(line) {
            Ok(Reply::Acquire(AcquireReply::Granted(g))) => NativeCallResult::grant(g),
            Ok(Reply::Acquire(AcquireReply::TimedOut)) => {
                let key = match self {
                    Op::Lock { key, .. } | Op::Wait { key, .. } => key.as_str(),
                    _ => "",
                };
                NativeCallResult::err(timed_out(key))
            }
            Ok(Reply::Enqueue(EnqueueReply::Acquired(g))) => NativeCallResult {
                status: Some("acquired".to_string()),
                ..NativeCallResult::grant(g)
            },
            Ok(Reply::Enqueue(EnqueueReply::Queued)) => NativeCallResult {
                status: Some("queued".to_string()),
                ..NativeCallResult::ok()
            },
            Ok(Reply::Renew(lease)) => {
                let sent = match self {
                    Op::Renew { ttl_s, .. } => *ttl_s,
                    _ => None,
                };
                NativeCallResult {
                    lease: Some(lease.or(sent).unwrap_or(FALLBACK_LEASE_S) as f64),
                    ..NativeCallResult::ok()
                }
            }
            Ok(Reply::Release | Reply::Auth) => NativeCallResult::ok(),
            Ok(Reply::Stats(json)) => NativeCallResult::text(json),
            Err(e) => NativeCallResult::err(e),
        }
    }
}

pub(super) fn timed_out(key: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Timeout,
        format!("timeout acquiring '{key}'"),
    )
    .with_reply("timeout")
}

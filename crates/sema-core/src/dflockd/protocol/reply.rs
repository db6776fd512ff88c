//! Replies: the parser of each command's reply line (the typed methods of `Connection` call
//! them directly), and a reply parsed for the request it answers, for callers that hold
//! requests of any command (the dispatch is [`super::session`]'s).

use super::session::Expect;
use super::{validate_token, Request};
use crate::dflockd::error::{DflockdError, ErrorCode, Result};

/// The meaning of a reply line, by the command it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `l`, `sl`, `w`, `sw`.
    Acquire(AcquireReply),
    /// `e`, `se`.
    Enqueue(EnqueueReply),
    /// `n`, `sn`: the lease the server reports (`None` for a bare `ok`).
    Renew(Option<u64>),
    /// `r`, `sr`: exactly `ok`.
    Release,
    /// `auth`: `ok`.
    Auth,
    /// `stats`: the JSON text after `ok `.
    Stats(String),
    /// A low-level request ([`super::Encoded::raw`]): the line itself.
    Line(String),
}

impl Request<'_> {
    /// The operation's name in error messages (`acquire`, `sem_wait`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Request::Auth { .. } => "auth",
            Request::Lock { .. } => "acquire",
            Request::Release { .. } => "release",
            Request::Renew { .. } => "renew",
            Request::Enqueue { .. } => "enqueue",
            Request::Wait { .. } => "wait",
            Request::SemLock { .. } => "sem_acquire",
            Request::SemRelease { .. } => "sem_release",
            Request::SemRenew { .. } => "sem_renew",
            Request::SemEnqueue { .. } => "sem_enqueue",
            Request::SemWait { .. } => "sem_wait",
            Request::Stats => "stats",
        }
    }

    /// Parse `line` as the reply to this request (server errors and unexpected lines are
    /// errors, as from the typed methods).
    pub fn parse_reply(&self, line: &str) -> Result<Reply> {
        Expect::of(self).parse(line, self.label())
    }
}

/// A grant: the token and the lease TTL (seconds) the server applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Opaque lease token (32 hex characters on both known servers).
    pub token: String,
    /// The TTL in seconds applied to this grant (not time remaining).
    pub lease_s: u64,
}

/// Reply to `l`/`sl`/`w`/`sw`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// `ok <token> <ttl>`.
    Granted(Grant),
    /// `timeout`.
    TimedOut,
}

/// Reply to `e`/`se`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnqueueReply {
    /// `acquired <token> <ttl>`: granted at once (fast path).
    Acquired(Grant),
    /// `queued`: call `w` to wait for the grant.
    Queued,
}

/// `error` or `error_*` → `SERVER_ERROR` keeping the reply (`error_auth`, sent when a server
/// requires auth and got none, → `AUTH_FAILED`; `error_limit_mismatch` → `LIMIT_MISMATCH`, the
/// code a lock file's slots taken with another limit give); `None` for other lines.
pub fn server_error(line: &str, what: &str) -> Option<DflockdError> {
    let word = line.split(' ').next().unwrap_or("");
    if word == "error" || word.starts_with("error_") {
        let msg = match word {
            "error" => format!("{what}: server answered 'error' (rejected request)"),
            "error_max_locks" => format!("{what}: server lock table is full (error_max_locks)"),
            "error_max_waiters" => {
                format!("{what}: too many waiters queued for this key (error_max_waiters)")
            }
            "error_limit_mismatch" => {
                format!("{what}: key exists with a different limit (error_limit_mismatch)")
            }
            "error_not_enqueued" => {
                format!("{what}: not enqueued for this key (error_not_enqueued)")
            }
            "error_already_enqueued" => {
                format!("{what}: already enqueued for this key (error_already_enqueued)")
            }
            "error_lease_expired" => {
                format!("{what}: lease expired before the wait (error_lease_expired)")
            }
            // Sent when the server requires a token and this connection sent none (a sent token
            // is answered by the reply to `auth`: parse_auth_reply). Callers match the words
            // `authentication failed` (dflockd-client's message).
            "error_auth" => format!(
                "authentication failed: the server requires a token and none was sent \
                 (pass auth, or dflockd://TOKEN@host/key) ({what}: error_auth)"
            ),
            other => format!("{what}: server error '{other}'"),
        };
        let code = match word {
            "error_auth" => ErrorCode::AuthFailed,
            "error_limit_mismatch" => ErrorCode::LimitMismatch,
            _ => ErrorCode::ServerError,
        };
        return Some(DflockdError::new(code, msg).with_reply(line));
    }
    None
}

fn unexpected(line: &str, what: &str) -> DflockdError {
    let shown: String = line.chars().take(200).collect();
    DflockdError::protocol(format!("{what}: unexpected reply {shown:?}")).with_reply(shown)
}

fn parse_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_grant_fields(line: &str, prefix: &str, what: &str) -> Result<Grant> {
    let mut parts = line.split(' ');
    let _ = parts.next();
    let token = parts.next().unwrap_or("");
    let lease = parts.next();
    if token.is_empty() || validate_token(token).is_err() {
        return Err(DflockdError::protocol(format!(
            "{what}: server returned no valid token in {line:?}"
        ))
        .with_reply(line));
    }
    match (lease.and_then(parse_seconds), parts.next()) {
        (Some(lease_s), None) => Ok(Grant {
            token: token.to_string(),
            lease_s,
        }),
        _ => Err(DflockdError::protocol(format!(
            "{what}: malformed '{prefix}' reply {line:?} (expected '{prefix} <token> <lease>')"
        ))
        .with_reply(line)),
    }
}

/// Parse the reply to `l`/`sl`/`w`/`sw`: exactly `ok <token> <ttl>` or `timeout`.
pub fn parse_acquire_reply(line: &str, what: &str) -> Result<AcquireReply> {
    if line == "timeout" {
        return Ok(AcquireReply::TimedOut);
    }
    if line.starts_with("ok ") {
        return parse_grant_fields(line, "ok", what).map(AcquireReply::Granted);
    }
    Err(server_error(line, what).unwrap_or_else(|| unexpected(line, what)))
}

/// Parse the reply to `e`/`se`: exactly `acquired <token> <ttl>` or `queued`.
pub fn parse_enqueue_reply(line: &str, what: &str) -> Result<EnqueueReply> {
    if line == "queued" {
        return Ok(EnqueueReply::Queued);
    }
    if line.starts_with("acquired ") {
        return parse_grant_fields(line, "acquired", what).map(EnqueueReply::Acquired);
    }
    Err(server_error(line, what).unwrap_or_else(|| unexpected(line, what)))
}

/// Parse the reply to `n`/`sn`: `ok <seconds>` (the lease now applied; Python 0.5.0 answers the
/// remaining whole seconds, usually TTL−1) or bare `ok` (lease unknown → `None`).
pub fn parse_renew_reply(line: &str, what: &str) -> Result<Option<u64>> {
    if line == "ok" {
        return Ok(None);
    }
    if let Some(rest) = line.strip_prefix("ok ") {
        return parse_seconds(rest).map(Some).ok_or_else(|| {
            DflockdError::protocol(format!("{what}: malformed renew reply {line:?}"))
                .with_reply(line)
        });
    }
    Err(server_error(line, what).unwrap_or_else(|| unexpected(line, what)))
}

/// Parse the reply to `r`/`sr`: exactly `ok`.
pub fn parse_release_reply(line: &str, what: &str) -> Result<()> {
    if line == "ok" {
        return Ok(());
    }
    Err(server_error(line, what).unwrap_or_else(|| unexpected(line, what)))
}

/// Parse the reply to `auth`: `ok`; `error_auth` and everything else → `AUTH_FAILED`.
pub fn parse_auth_reply(line: &str) -> Result<()> {
    match line {
        "ok" => Ok(()),
        "error_auth" => Err(DflockdError::new(
            ErrorCode::AuthFailed,
            "authentication failed: the server refused the token sent (error_auth)",
        )
        .with_reply(line)),
        // The server answers bare `error` to `auth` when it has no token configured.
        "error" => Err(DflockdError::new(
            ErrorCode::AuthFailed,
            "the server has no auth token set (it answered 'error' to auth): connect without a \
             token, or start the server with --auth-token",
        )
        .with_reply(line)),
        other => {
            let shown: String = other.chars().take(200).collect();
            Err(DflockdError::new(
                ErrorCode::AuthFailed,
                format!("authentication failed: the server answered {shown:?} to the token sent"),
            )
            .with_reply(shown))
        }
    }
}

/// Parse the reply to `stats`: `ok <json>` → the JSON text.
pub fn parse_stats_reply(line: &str) -> Result<&str> {
    if let Some(json) = line.strip_prefix("ok ") {
        if json.starts_with('{') {
            return Ok(json);
        }
    }
    Err(server_error(line, "stats").unwrap_or_else(|| unexpected(line, "stats")))
}

//! The dflockd line protocol: request encoding with validation, and exact reply parsing.
//!
//! A request is exactly three `\n`-terminated lines `cmd\nkey\narg\n`; a reply is one line.
//! Everything a request carries is validated BEFORE any byte is written, so a bad key or token
//! can never corrupt the framing of the connection (errors are [`ErrorCode::InvalidArgument`](crate::ErrorCode::InvalidArgument)).

use super::error::{DflockdError, Result};

/// Longest key the client sends (bytes). The Go server keeps 256 bytes per line; Python 0.5.0
/// keeps 255 (a 256-byte key there is answered `error` and the connection closed).
pub const MAX_KEY_BYTES: usize = 256;
/// Longest request line (bytes, excluding the `\n`) the client writes; the server would answer
/// `error` and close the connection for a longer one.
pub const MAX_REQUEST_LINE_BYTES: usize = 256;
/// Longest reply line the client accepts (bytes, excluding the `\n`). `stats` replies grow with
/// the number of keys, so the bound is generous; a longer line is a `PROTOCOL_ERROR`.
pub const MAX_REPLY_LINE_BYTES: usize = 1024 * 1024;
/// Upper bound for every timeout and semaphore limit in seconds (10^9 s, about 31.7 years; a
/// lease TTL has a bound of its own, [`crate::options::MAX_LEASE_TTL_S`]). The Go
/// server computes `seconds * 1e9` nanoseconds in an `i64`, which overflows at about 9.22e9 s
/// and turns a huge timeout into an immediate `timeout`; the bound keeps well below that.
pub const MAX_SECONDS: u64 = 1_000_000_000;

/// One request of the protocol, borrowing its strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `auth\n_\n<token>\n` → `ok` | `error_auth`.
    Auth { token: &'a str },
    /// `l\n<key>\n<timeout> [<ttl>]\n` → `ok <token> <ttl>` | `timeout` | `error*`.
    Lock {
        key: &'a str,
        timeout_s: u64,
        ttl_s: Option<u64>,
    },
    /// `r\n<key>\n<token>\n` → `ok` | `error`.
    Release { key: &'a str, token: &'a str },
    /// `n\n<key>\n<token> [<ttl>]\n` → `ok <ttl>` | `error`.
    Renew {
        key: &'a str,
        token: &'a str,
        ttl_s: Option<u64>,
    },
    /// `e\n<key>\n[<ttl>]\n` → `acquired <token> <ttl>` | `queued` | `error*`.
    Enqueue { key: &'a str, ttl_s: Option<u64> },
    /// `w\n<key>\n<timeout>\n` → `ok <token> <ttl>` | `timeout` | `error*`.
    Wait { key: &'a str, timeout_s: u64 },
    /// `sl\n<key>\n<timeout> <limit> [<ttl>]\n` (Go server only).
    SemLock {
        key: &'a str,
        timeout_s: u64,
        limit: u64,
        ttl_s: Option<u64>,
    },
    /// `sr\n<key>\n<token>\n` (Go server only).
    SemRelease { key: &'a str, token: &'a str },
    /// `sn\n<key>\n<token> [<ttl>]\n` (Go server only).
    SemRenew {
        key: &'a str,
        token: &'a str,
        ttl_s: Option<u64>,
    },
    /// `se\n<key>\n<limit> [<ttl>]\n` (Go server only).
    SemEnqueue {
        key: &'a str,
        limit: u64,
        ttl_s: Option<u64>,
    },
    /// `sw\n<key>\n<timeout>\n` (Go server only).
    SemWait { key: &'a str, timeout_s: u64 },
    /// `stats\n_\n\n` → `ok <json>` (Go server only).
    Stats,
}

impl<'a> Request<'a> {
    /// `l`, or `sl` with a `limit` (the lock and semaphore variants picked in one place).
    pub fn lock(key: &'a str, timeout_s: u64, ttl_s: Option<u64>, limit: Option<u64>) -> Self {
        match limit {
            None => Request::Lock {
                key,
                timeout_s,
                ttl_s,
            },
            Some(limit) => Request::SemLock {
                key,
                timeout_s,
                limit,
                ttl_s,
            },
        }
    }

    /// `e`, or `se` with a `limit`.
    pub fn enqueue(key: &'a str, ttl_s: Option<u64>, limit: Option<u64>) -> Self {
        match limit {
            None => Request::Enqueue { key, ttl_s },
            Some(limit) => Request::SemEnqueue { key, limit, ttl_s },
        }
    }

    /// `r`, or `sr` when `sem`.
    pub fn release(key: &'a str, token: &'a str, sem: bool) -> Self {
        match sem {
            false => Request::Release { key, token },
            true => Request::SemRelease { key, token },
        }
    }

    /// `n`, or `sn` when `sem`.
    pub fn renew(key: &'a str, token: &'a str, ttl_s: Option<u64>, sem: bool) -> Self {
        match sem {
            false => Request::Renew { key, token, ttl_s },
            true => Request::SemRenew { key, token, ttl_s },
        }
    }

    /// `w`, or `sw` when `sem`.
    pub fn wait(key: &'a str, timeout_s: u64, sem: bool) -> Self {
        match sem {
            false => Request::Wait { key, timeout_s },
            true => Request::SemWait { key, timeout_s },
        }
    }
}

impl Request<'_> {
    /// The command word.
    pub fn cmd(&self) -> &'static str {
        match self {
            Request::Auth { .. } => "auth",
            Request::Lock { .. } => "l",
            Request::Release { .. } => "r",
            Request::Renew { .. } => "n",
            Request::Enqueue { .. } => "e",
            Request::Wait { .. } => "w",
            Request::SemLock { .. } => "sl",
            Request::SemRelease { .. } => "sr",
            Request::SemRenew { .. } => "sn",
            Request::SemEnqueue { .. } => "se",
            Request::SemWait { .. } => "sw",
            Request::Stats => "stats",
        }
    }

    /// For the blocking commands (`l`, `sl`, `w`, `sw`): the server-side timeout in seconds.
    /// The reply to them is bounded by this plus a margin instead of the socket timeout.
    pub fn blocking_timeout_s(&self) -> Option<u64> {
        match *self {
            Request::Lock { timeout_s, .. }
            | Request::Wait { timeout_s, .. }
            | Request::SemLock { timeout_s, .. }
            | Request::SemWait { timeout_s, .. } => Some(timeout_s),
            _ => None,
        }
    }

    /// Validate every field and encode the three request lines.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Validate every field and append the three request lines to `out` (nothing is appended
    /// when validation fails). Numbers are formatted in place: no allocation besides `out`'s
    /// own growth.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<()> {
        use std::io::Write as _;
        // Validate first, so a bad field never leaves half a request in `out`.
        let key = match *self {
            Request::Auth { token } => {
                validate_auth(token)?;
                "_"
            }
            Request::Lock {
                key,
                timeout_s,
                ttl_s,
            } => {
                validate_key(key)?;
                validate_timeout(timeout_s)?;
                validate_opt_ttl(ttl_s)?;
                key
            }
            Request::SemLock {
                key,
                timeout_s,
                limit,
                ttl_s,
            } => {
                validate_key(key)?;
                validate_timeout(timeout_s)?;
                validate_limit(limit)?;
                validate_opt_ttl(ttl_s)?;
                key
            }
            Request::Release { key, token } | Request::SemRelease { key, token } => {
                validate_key(key)?;
                validate_token(token)?;
                key
            }
            Request::Renew { key, token, ttl_s } | Request::SemRenew { key, token, ttl_s } => {
                validate_key(key)?;
                validate_token(token)?;
                validate_opt_ttl(ttl_s)?;
                key
            }
            Request::Enqueue { key, ttl_s } => {
                validate_key(key)?;
                validate_opt_ttl(ttl_s)?;
                key
            }
            Request::SemEnqueue { key, limit, ttl_s } => {
                validate_key(key)?;
                validate_limit(limit)?;
                validate_opt_ttl(ttl_s)?;
                key
            }
            Request::Wait { key, timeout_s } | Request::SemWait { key, timeout_s } => {
                validate_key(key)?;
                validate_timeout(timeout_s)?;
                key
            }
            Request::Stats => "_",
        };
        let start = out.len();
        out.extend_from_slice(self.cmd().as_bytes());
        out.push(b'\n');
        out.extend_from_slice(key.as_bytes());
        out.push(b'\n');
        let arg_start = out.len();
        // Writing into a Vec cannot fail.
        let _ = match *self {
            Request::Auth { token } => out.write_all(token.as_bytes()),
            Request::Lock { timeout_s, .. } => write!(out, "{timeout_s}"),
            Request::SemLock {
                timeout_s, limit, ..
            } => write!(out, "{timeout_s} {limit}"),
            Request::Release { token, .. } | Request::SemRelease { token, .. } => {
                out.write_all(token.as_bytes())
            }
            Request::Renew { token, .. } | Request::SemRenew { token, .. } => {
                out.write_all(token.as_bytes())
            }
            Request::Enqueue { .. } => Ok(()),
            Request::SemEnqueue { limit, .. } => write!(out, "{limit}"),
            Request::Wait { timeout_s, .. } | Request::SemWait { timeout_s, .. } => {
                write!(out, "{timeout_s}")
            }
            Request::Stats => Ok(()),
        };
        match *self {
            Request::Lock { ttl_s: Some(t), .. }
            | Request::SemLock { ttl_s: Some(t), .. }
            | Request::Renew { ttl_s: Some(t), .. }
            | Request::SemRenew { ttl_s: Some(t), .. }
            | Request::SemEnqueue { ttl_s: Some(t), .. } => {
                let _ = write!(out, " {t}");
            }
            Request::Enqueue { ttl_s: Some(t), .. } => {
                let _ = write!(out, "{t}");
            }
            _ => {}
        }
        let arg_len = out.len() - arg_start;
        if arg_len > MAX_REQUEST_LINE_BYTES {
            out.truncate(start);
            return Err(DflockdError::invalid(format!(
                "argument line is {arg_len} bytes; the protocol allows at most {MAX_REQUEST_LINE_BYTES}"
            )));
        }
        out.push(b'\n');
        Ok(())
    }
}

fn validate_opt_ttl(ttl_s: Option<u64>) -> Result<()> {
    match ttl_s {
        Some(t) => validate_ttl(t),
        None => Ok(()),
    }
}

fn frame(cmd: &str, key: &str, arg: &str) -> Result<Vec<u8>> {
    for (what, line) in [("command", cmd), ("key", key), ("argument", arg)] {
        if line.len() > MAX_REQUEST_LINE_BYTES {
            return Err(DflockdError::invalid(format!(
                "{what} line is {} bytes; the protocol allows at most {MAX_REQUEST_LINE_BYTES}",
                line.len()
            )));
        }
        if let Some(c) = line.chars().find(|c| matches!(c, '\r' | '\n' | '\0')) {
            return Err(DflockdError::invalid(format!(
                "{what} contains a forbidden character {c:?} (CR, LF and NUL would break the framing)"
            )));
        }
    }
    let mut out = Vec::with_capacity(cmd.len() + key.len() + arg.len() + 3);
    out.extend_from_slice(cmd.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(key.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(arg.as_bytes());
    out.push(b'\n');
    Ok(out)
}

/// Commands whose key line is a real key (validated with [`validate_key`]).
const KEYED_COMMANDS: [&str; 10] = ["l", "r", "n", "e", "w", "sl", "sr", "sn", "se", "sw"];

/// Encode a low-level request `cmd\nkey\narg\n` for [`crate::dflockd::Connection::request_raw`].
///
/// The command must be a lowercase word (`[a-z_]`, at most 32 bytes); for the keyed commands
/// (`l r n e w sl sr sn se sw`) the key follows [`validate_key`]; every line must be free of
/// CR/LF/NUL and at most 256 bytes. For `l`/`sl`/`w`/`sw` the returned timeout (first field of
/// the argument, when it is a valid number) bounds the wait for the reply.
pub fn encode_raw(cmd: &str, key: &str, arg: &str) -> Result<(Vec<u8>, Option<u64>)> {
    if cmd.is_empty() || cmd.len() > 32 || !cmd.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    {
        return Err(DflockdError::invalid(format!(
            "invalid command {cmd:?}: expected a lowercase protocol word such as l, r, n, e, w, sl, stats"
        )));
    }
    if KEYED_COMMANDS.contains(&cmd) {
        validate_key(key)?;
    }
    let blocking = match cmd {
        "l" | "sl" | "w" | "sw" => arg
            .split_ascii_whitespace()
            .next()
            .and_then(|t| t.parse::<u64>().ok())
            .map(|t| t.min(MAX_SECONDS)),
        _ => None,
    };
    Ok((frame(cmd, key, arg)?, blocking))
}

/// A key: non-empty, at most [`MAX_KEY_BYTES`] bytes, no space, tab, CR, LF or NUL.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(DflockdError::invalid("key must not be empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(DflockdError::invalid(format!(
            "key is {} bytes; at most {MAX_KEY_BYTES} are allowed",
            key.len()
        )));
    }
    if let Some(c) = key
        .chars()
        .find(|c| matches!(c, ' ' | '\t' | '\r' | '\n' | '\0'))
    {
        return Err(DflockdError::invalid(format!(
            "key contains a forbidden character {c:?} (space, tab, CR, LF and NUL are not allowed)"
        )));
    }
    Ok(())
}

/// A lease token as sent in `r`/`n`: non-empty, no whitespace or control characters (server
/// tokens are 32 hex characters; whitespace would split the `n` argument), at most 256 bytes.
pub fn validate_token(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(DflockdError::invalid("token must not be empty"));
    }
    if token.len() > MAX_REQUEST_LINE_BYTES - 12 {
        return Err(DflockdError::invalid("token is too long"));
    }
    if let Some(c) = token.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(DflockdError::invalid(format!(
            "token contains a forbidden character {c:?}"
        )));
    }
    Ok(())
}

/// An auth token: non-empty, no CR/LF/NUL, at most 256 bytes.
pub fn validate_auth(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(DflockdError::invalid("auth token must not be empty"));
    }
    if token.len() > MAX_REQUEST_LINE_BYTES {
        return Err(DflockdError::invalid(format!(
            "auth token is {} bytes; at most {MAX_REQUEST_LINE_BYTES} are allowed",
            token.len()
        )));
    }
    if let Some(c) = token.chars().find(|c| matches!(c, '\r' | '\n' | '\0')) {
        return Err(DflockdError::invalid(format!(
            "auth token contains a forbidden character {c:?}"
        )));
    }
    Ok(())
}

/// A timeout in whole seconds: `0 ..= MAX_SECONDS` (0 = try once).
pub fn validate_timeout(timeout_s: u64) -> Result<()> {
    if timeout_s > MAX_SECONDS {
        return Err(DflockdError::invalid(format!(
            "timeout {timeout_s} s is above the client bound of {MAX_SECONDS} s"
        )));
    }
    Ok(())
}

/// A lease TTL in whole seconds: `1 ..= MAX_LEASE_TTL_S` (1 hour: the option table's one bound,
/// see [`crate::options::MAX_LEASE_TTL_S`] for why; above it the message names the unit).
pub fn validate_ttl(ttl_s: u64) -> Result<()> {
    if ttl_s == 0 {
        return Err(DflockdError::invalid("lease TTL must be at least 1 second"));
    }
    if ttl_s > crate::options::MAX_LEASE_TTL_S {
        return Err(DflockdError::invalid(crate::options::lease_ttl_too_long(
            "leaseTtl", ttl_s,
        )));
    }
    Ok(())
}

/// A semaphore limit: `1 ..= 10^9`.
pub fn validate_limit(limit: u64) -> Result<()> {
    if limit == 0 || limit > MAX_SECONDS {
        return Err(DflockdError::invalid(format!(
            "limit must be an integer between 1 and {MAX_SECONDS}, got {limit}"
        )));
    }
    Ok(())
}

mod reply;
pub mod session;
pub use reply::{
    parse_acquire_reply, parse_auth_reply, parse_enqueue_reply, parse_release_reply,
    parse_renew_reply, parse_stats_reply, server_error, AcquireReply, EnqueueReply, Grant, Reply,
};
pub use session::{reply_limit, Encoded};

#[cfg(test)]
mod tests;

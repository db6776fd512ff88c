//! The dflockd session without I/O, the one both drivers run: the tokio
//! [`crate::dflockd::Connection`] and the event loop's
//! [`crate::dflockd::connection::NonBlockingStream`]. A driver only moves bytes and arms timers;
//! what the bytes mean is decided here:
//!
//! - [`Encoded`]: a request validated and encoded for the wire, owned (it can wait in a queue),
//!   with what matching its reply needs (its parser, its key, the TTL it sent);
//! - `ReplyLines`: the reply framing (cut `\n`-terminated lines, strip one `\r`, the
//!   [`MAX_REPLY_LINE_BYTES`] bound, the UTF-8 check, consumed bytes dropped without a copy per
//!   line);
//! - [`reply_limit`]: how long the reply to a request may take.
//!
//! tokio-util's `LinesCodec` (with `max_length`) is not used for the tokio side: it would be a
//! second framing with rules of its own (it strips `\r` before its length check, discards an
//! overlong line and goes on, and cannot hand its buffer to the event loop), where one serves.

use std::time::Duration;

use super::{encode_raw, Reply, Request, MAX_REPLY_LINE_BYTES, MAX_SECONDS};
use crate::dflockd::error::{DflockdError, Result};

/// Extra time granted to the reply of a blocking command (`l sl w sw`) beyond its own timeout,
/// so a silent server still cannot hang the client forever.
pub const BLOCKING_REPLY_MARGIN: Duration = Duration::from_secs(5);

/// How long the reply to a request may take: `socket_timeout` for a non-blocking command;
/// for a blocking one (`blocking_s` = the seconds it sent) that timeout plus a margin for the
/// reply to travel, the margin at most `socket_timeout`: `l key 0` (a try) to a server that
/// never answers ends at `socket_timeout` with `TIMEOUT`.
pub fn reply_limit(socket_timeout: Duration, blocking_s: Option<u64>) -> Duration {
    match blocking_s {
        Some(s) => {
            Duration::from_secs(s.min(MAX_SECONDS)) + BLOCKING_REPLY_MARGIN.min(socket_timeout)
        }
        None => socket_timeout,
    }
}

/// Which parser a reply goes to (the [`Request`] it answers, without its strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    Acquire,
    Enqueue,
    Renew,
    Release,
    Auth,
    Stats,
    /// A low-level request ([`encode_raw`]): the line itself.
    Raw,
}

impl Expect {
    pub(super) fn of(req: &Request<'_>) -> Expect {
        match req {
            Request::Lock { .. }
            | Request::SemLock { .. }
            | Request::Wait { .. }
            | Request::SemWait { .. } => Expect::Acquire,
            Request::Enqueue { .. } | Request::SemEnqueue { .. } => Expect::Enqueue,
            Request::Renew { .. } | Request::SemRenew { .. } => Expect::Renew,
            Request::Release { .. } | Request::SemRelease { .. } => Expect::Release,
            Request::Auth { .. } => Expect::Auth,
            Request::Stats => Expect::Stats,
        }
    }

    /// `line` parsed as the reply (server errors and unexpected lines are errors, `what` names
    /// the operation in their messages).
    pub(super) fn parse(self, line: &str, what: &str) -> Result<Reply> {
        Ok(match self {
            Expect::Acquire => Reply::Acquire(super::parse_acquire_reply(line, what)?),
            Expect::Enqueue => Reply::Enqueue(super::parse_enqueue_reply(line, what)?),
            Expect::Renew => Reply::Renew(super::parse_renew_reply(line, what)?),
            Expect::Release => {
                super::parse_release_reply(line, what)?;
                Reply::Release
            }
            Expect::Auth => {
                super::parse_auth_reply(line)?;
                Reply::Auth
            }
            Expect::Stats => Reply::Stats(super::parse_stats_reply(line)?.to_string()),
            Expect::Raw => Reply::Line(line.to_string()),
        })
    }
}

/// A request validated and encoded (`cmd\nkey\narg\n`), owned, with what its reply needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    bytes: Vec<u8>,
    expect: Expect,
    label: &'static str,
    blocking_s: Option<u64>,
    sent_ttl: Option<u64>,
}

impl Encoded {
    /// Validate and encode `req` (see [`Request::encode_into`]).
    pub fn new(req: &Request<'_>) -> Result<Encoded> {
        let mut bytes = Vec::with_capacity(64);
        req.encode_into(&mut bytes)?;
        let sent_ttl = match *req {
            Request::Renew { ttl_s, .. } | Request::SemRenew { ttl_s, .. } => ttl_s,
            _ => None,
        };
        Ok(Encoded {
            bytes,
            expect: Expect::of(req),
            label: req.label(),
            blocking_s: req.blocking_timeout_s(),
            sent_ttl,
        })
    }

    /// A low-level request (see [`encode_raw`]): its reply is the line itself.
    pub fn raw(cmd: &str, key: &str, arg: &str) -> Result<Encoded> {
        let (bytes, blocking_s) = encode_raw(cmd, key, arg)?;
        Ok(Encoded {
            bytes,
            expect: Expect::Raw,
            label: "request",
            blocking_s,
            sent_ttl: None,
        })
    }

    /// The bytes to write.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// For a blocking command: the server-side timeout it sent, in seconds (see
    /// [`reply_limit`]).
    pub fn blocking_s(&self) -> Option<u64> {
        self.blocking_s
    }

    /// The key line of the request (`_` for `auth` and `stats`).
    pub fn key(&self) -> &str {
        let mut lines = self.bytes.split(|&b| b == b'\n');
        let _cmd = lines.next();
        // Encoding checked every line, so the key is UTF-8; "" cannot happen.
        lines
            .next()
            .and_then(|k| std::str::from_utf8(k).ok())
            .unwrap_or("")
    }

    /// The lease TTL a renew sent (`None` for other requests or without one).
    pub fn sent_ttl(&self) -> Option<u64> {
        self.sent_ttl
    }

    /// `line` parsed as the reply to this request ([`Reply::Line`] for a low-level one).
    pub fn parse_reply(&self, line: &str) -> Result<Reply> {
        self.expect.parse(line, self.label)
    }
}

/// The error of a reply line over [`MAX_REPLY_LINE_BYTES`] (complete or not).
pub(crate) fn overlong() -> DflockdError {
    DflockdError::protocol(format!(
        "reply line exceeds {MAX_REPLY_LINE_BYTES} bytes without a newline"
    ))
}

/// Consumed bytes are dropped (one copy of the rest) once this many pile up before a line that
/// is still incomplete; when the buffer empties they go at no cost.
const COMPACT_AT: usize = 4096;

/// Reply bytes read and not consumed yet, cut into `\n`-terminated lines. The driver appends
/// what it reads ([`ReplyLines::input`]); lines come out in order.
#[derive(Debug, Default)]
pub(crate) struct ReplyLines {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes.
    pos: usize,
    /// No `\n` in `buf[pos..scanned]` (a read is scanned once, however many reads a line takes).
    scanned: usize,
}

/// Where a complete reply line ends (the index of its `\n`); valid until the next consume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LineEnd(usize);

impl ReplyLines {
    /// With `buffered` (bytes already read, e.g. by the other driver) as the first input.
    pub(crate) fn new(buffered: Vec<u8>) -> Self {
        ReplyLines {
            buf: buffered,
            pos: 0,
            scanned: 0,
        }
    }

    /// The buffer to append read bytes to (append only).
    pub(crate) fn input(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Whether no byte is left unconsumed.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Forget everything and free the buffer.
    pub(crate) fn clear(&mut self) {
        *self = ReplyLines::default();
    }

    /// The `\n` of the first unconsumed line, if it is complete (no length check).
    fn newline(&mut self) -> Option<usize> {
        let from = self.scanned.max(self.pos);
        match self.buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.scanned = from + i;
                Some(self.scanned)
            }
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }

    /// Whether a complete line is buffered.
    pub(crate) fn has_line(&mut self) -> bool {
        self.newline().is_some()
    }

    /// The first unconsumed line as sent (without its `\n`, no length check), if complete: what
    /// an unprompted line said.
    pub(crate) fn raw_line(&mut self) -> Option<&[u8]> {
        let end = self.newline()?;
        Some(&self.buf[self.pos..end])
    }

    /// The end of the next complete line; `Ok(None)` when more bytes are needed. A line longer
    /// than [`MAX_REPLY_LINE_BYTES`] (its `\r` aside), or that many bytes and one more without a
    /// `\n` (room for a `\r`), is [`overlong`].
    pub(crate) fn find(&mut self) -> Result<Option<LineEnd>> {
        match self.newline() {
            Some(end) => {
                let raw = &self.buf[self.pos..end];
                if raw.strip_suffix(b"\r").unwrap_or(raw).len() > MAX_REPLY_LINE_BYTES {
                    return Err(overlong());
                }
                Ok(Some(LineEnd(end)))
            }
            None => {
                self.check_partial()?;
                Ok(None)
            }
        }
    }

    /// With no complete line buffered: [`overlong`] when the incomplete one is already too long.
    pub(crate) fn check_partial(&mut self) -> Result<()> {
        if self.newline().is_none() && self.buf.len() - self.pos > MAX_REPLY_LINE_BYTES + 1 {
            return Err(overlong());
        }
        Ok(())
    }

    /// The text of the line ending at `end` (one trailing `\r` stripped, UTF-8 checked; `peer`
    /// names the server in the error).
    pub(crate) fn line(&self, end: LineEnd, peer: &str) -> Result<&str> {
        let raw = &self.buf[self.pos..end.0];
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        std::str::from_utf8(raw)
            .map_err(|_| DflockdError::protocol(format!("reply from {peer} is not valid UTF-8")))
    }

    /// Drop the line ending at `end` and its `\n`.
    pub(crate) fn consume(&mut self, end: LineEnd) {
        self.pos = end.0 + 1;
        if self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            self.scanned = 0;
        } else if self.pos >= COMPACT_AT {
            self.buf.drain(..self.pos);
            self.scanned -= self.pos.min(self.scanned);
            self.pos = 0;
        }
        self.scanned = self.scanned.max(self.pos);
    }

    /// The error of the server's end of the stream while a reply is awaited (with or without
    /// part of it read).
    pub(crate) fn closed(&self, peer: &str) -> DflockdError {
        DflockdError::connection(if self.is_empty() {
            format!("server {peer} closed the connection")
        } else {
            format!("server {peer} closed the connection mid-reply")
        })
    }

    /// The next complete line, consumed (also when it is refused: overlong or not UTF-8).
    pub(crate) fn next_line(&mut self, peer: &str) -> Option<Result<String>> {
        let end = LineEnd(self.newline()?);
        let raw = &self.buf[self.pos..end.0];
        let line = if raw.strip_suffix(b"\r").unwrap_or(raw).len() > MAX_REPLY_LINE_BYTES {
            Err(overlong())
        } else {
            self.line(end, peer).map(str::to_owned)
        };
        self.consume(end);
        Some(line)
    }
}

#[cfg(test)]
mod tests;

//! One client connection: TCP (optionally TLS), auth handshake, timeouts; the bytes it moves
//! are framed, matched and bounded by the session without I/O ([`super::protocol::session`]),
//! the same one the event-loop driver ([`NonBlockingStream`]) runs.
//!
//! Requests are strictly one-at-a-time (`&mut self`). Any I/O error, timeout, protocol error or
//! cancellation in the middle of a request leaves the stream in an unknown state, so the
//! connection is closed and every later request fails with `CONNECTION_ERROR`.

use std::future::Future as _;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::error::{DflockdError, ErrorCode, Result};
use super::mismatch;

mod commands;
use super::protocol::session::{LineEnd, ReplyLines};
use super::protocol::{self, Encoded};
use super::tls::{self, TlsOptions};
pub use commands::stats_json;

/// Default bound for TCP connect plus TLS handshake when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound for the reply to a non-blocking command (`r n e stats auth`) when none is
/// configured.
pub const DEFAULT_SOCKET_TIMEOUT: Duration = Duration::from_secs(30);
pub use super::protocol::session::BLOCKING_REPLY_MARGIN;

/// Where and how to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Host name or IP address.
    pub host: String,
    /// TCP port (1..=65535).
    pub port: u16,
    /// TLS settings (`None` = plain TCP).
    pub tls: Option<TlsOptions>,
    /// Auth token sent as the first request (`None` = no auth).
    pub auth: Option<String>,
    /// Bound for TCP connect + TLS handshake.
    pub connect_timeout: Duration,
    /// Bound for the reply to a non-blocking command.
    pub socket_timeout: Duration,
}

impl ConnectOptions {
    /// Plain TCP to `host:port` with the default timeouts.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        ConnectOptions {
            host: host.into(),
            port,
            tls: None,
            auth: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            socket_timeout: DEFAULT_SOCKET_TIMEOUT,
        }
    }

    /// Check everything that can be checked without the network (host, port, auth token, CA PEM).
    pub fn validate(&self) -> Result<()> {
        self.validate_plain()?;
        if let Some(tls) = &self.tls {
            tls::client_config(tls)?;
            tls::server_name(&self.host, tls)?;
        }
        Ok(())
    }

    /// [`ConnectOptions::validate`] without the TLS part (which `connect` checks while it builds
    /// the TLS configuration).
    fn validate_plain(&self) -> Result<()> {
        if self.host.is_empty() || self.host.chars().any(|c| c.is_whitespace() || c == '\0') {
            return Err(DflockdError::invalid(format!(
                "invalid host {:?}",
                self.host
            )));
        }
        if self.port == 0 {
            return Err(DflockdError::invalid("port must be between 1 and 65535"));
        }
        if let Some(auth) = &self.auth {
            protocol::validate_auth(auth)?;
        }
        if self.connect_timeout.is_zero() {
            return Err(DflockdError::invalid("connect timeout must be positive"));
        }
        if self.socket_timeout.is_zero() {
            return Err(DflockdError::invalid("socket timeout must be positive"));
        }
        Ok(())
    }

    fn peer(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

mod errors;
mod nonblocking;
pub mod queue;
mod stream;
pub(crate) use super::protocol::reply_limit;
pub use errors::{closed_unanswered, unsolicited};
pub use nonblocking::NonBlockingStream;
use stream::Stream;

fn io_error(peer: &str, what: &str, e: std::io::Error) -> DflockdError {
    DflockdError::connection(format!(
        "{what} {peer} failed: {}",
        super::plain_words::io_text(&e)
    ))
}

/// A connection to one dflockd server.
pub struct Connection {
    io: Option<Stream>,
    /// Bytes read and not consumed yet (the reply line being read, or its successor).
    lines: ReplyLines,
    /// Request being written (reused: no allocation per request once warm).
    wbuf: Vec<u8>,
    busy: bool,
    socket_timeout: Duration,
    peer: String,
    host: String,
    port: u16,
    /// Plain TCP (no TLS): a fresh connection closed unanswered may mean a TLS server.
    plain: bool,
    /// Whether any reply line arrived on this connection.
    answered: bool,
    /// When the last request started to be written: a lease the server grants or renews in
    /// reply runs from the server's receipt of it, so no earlier than this.
    last_sent: Option<Instant>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("open", &self.io.is_some())
            .finish()
    }
}

impl Connection {
    /// Connect (TCP, then TLS when configured) within `connect_timeout`, then authenticate when
    /// an auth token is configured (its reply bounded by `socket_timeout`).
    pub async fn connect(opts: &ConnectOptions) -> Result<Connection> {
        opts.validate_plain()?;
        let peer = opts.peer();
        let tls = match &opts.tls {
            Some(t) => Some((tls::client_config(t)?, tls::server_name(&opts.host, t)?)),
            None => None,
        };
        let setup = async {
            let tcp = TcpStream::connect((opts.host.as_str(), opts.port))
                .await
                .map_err(|e| io_error(&peer, "connect to", e))?;
            let _ = tcp.set_nodelay(true);
            let io = match tls {
                None => Stream::Plain(tcp),
                Some((cfg, name)) => {
                    let handshake = TlsConnector::from(cfg).connect(name, tcp);
                    tokio::pin!(handshake);
                    let first = tokio::select! {
                        r = &mut handshake => Some(r),
                        _ = tokio::time::sleep(mismatch::PLAIN_PROBE_AFTER) => None,
                    };
                    let done = match first {
                        Some(r) => r,
                        None => tokio::select! {
                            r = &mut handshake => r,
                            true = mismatch::plain_dflockd_answers(&opts.host, opts.port) => {
                                return Err(mismatch::plain_server(&peer));
                            }
                        },
                    };
                    let stream = done.map_err(|e| {
                        if mismatch::answered_in_plain_text(&e) {
                            mismatch::plain_server(&peer)
                        } else {
                            io_error(&peer, "TLS handshake with", e)
                        }
                    })?;
                    Stream::Tls(Box::new(stream))
                }
            };
            Ok::<_, DflockdError>(io)
        };
        let io = match tokio::time::timeout(opts.connect_timeout, setup).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(DflockdError::timeout(format!(
                    "connect timed out after {}ms to {peer}",
                    opts.connect_timeout.as_millis()
                )))
            }
        };
        let mut conn = Connection {
            io: Some(io),
            lines: ReplyLines::new(Vec::with_capacity(256)),
            wbuf: Vec::with_capacity(128),
            busy: false,
            socket_timeout: opts.socket_timeout,
            peer,
            host: opts.host.clone(),
            port: opts.port,
            plain: opts.tls.is_none(),
            answered: false,
            last_sent: None,
        };
        if let Some(token) = &opts.auth {
            conn.auth(token).await?;
        }
        Ok(conn)
    }

    /// The `host:port` this connection goes to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// When the last request started to be written (`None` before the first). The lease of a
    /// grant or renew in its reply started no earlier: this is where a client's own lease clock
    /// starts.
    pub fn last_sent(&self) -> Option<Instant> {
        self.last_sent
    }

    /// Whether the connection was closed (explicitly or after an error).
    pub fn is_closed(&self) -> bool {
        self.io.is_none()
    }

    /// Close the connection (drop the socket). The server auto-releases what it held.
    pub fn close(&mut self) {
        self.io = None;
        self.lines.clear();
        self.wbuf = Vec::new();
    }

    /// For a connection kept idle between uses: whether it still looks usable, checked without
    /// waiting. `false` (and the connection is closed) when the server has ended it or sent
    /// something unprompted (the `error` of its idle timeout), when bytes are pending, or after
    /// an interrupted request. A server that hangs up right after this check is seen by the
    /// next request as `CONNECTION_ERROR`.
    pub fn is_reusable(&mut self) -> bool {
        if self.io.is_none() || self.busy || !self.lines.is_empty() {
            self.close();
            return false;
        }
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let gone = {
            let fut = self.wait_server_gone();
            let mut fut = std::pin::pin!(fut);
            fut.as_mut().poll(&mut cx).is_ready()
        };
        if gone || !self.lines.is_empty() {
            self.close();
            return false;
        }
        true
    }

    /// Hand the connected (and authenticated) socket over to a caller that drives it without
    /// tokio, e.g. from an event loop of its own: the socket (non-blocking), its TLS session if
    /// any, and the reply bytes already read. `None` when the connection is closed or was
    /// interrupted mid-request.
    pub fn into_nonblocking(mut self) -> Option<NonBlockingStream> {
        if self.busy {
            return None;
        }
        let io = self.io.take()?;
        let lines = std::mem::take(&mut self.lines);
        let (tcp, tls) = io.into_parts();
        let socket = tcp.into_std().ok()?;
        Some(NonBlockingStream::new(
            socket,
            tls,
            lines,
            self.peer.clone(),
            self.socket_timeout,
        ))
    }

    /// Drive on tokio again a plain-TCP socket an event loop drove (see
    /// [`Connection::into_nonblocking`]), e.g. an acquisition whose `e` was answered `queued`
    /// goes on waiting here. Must run inside the tokio runtime. `None` with TLS, a partial
    /// write, or when the runtime refuses the socket.
    pub fn from_nonblocking(
        stream: NonBlockingStream,
        opts: &ConnectOptions,
    ) -> Option<Connection> {
        let (socket, lines, peer, socket_timeout) = stream.into_plain_parts()?;
        let tcp = TcpStream::from_std(socket).ok()?;
        Some(Connection {
            io: Some(Stream::Plain(tcp)),
            lines,
            wbuf: Vec::with_capacity(128),
            busy: false,
            socket_timeout,
            peer,
            host: opts.host.clone(),
            port: opts.port,
            plain: true,
            answered: true,
            last_sent: None,
        })
    }

    fn fail(&mut self, e: DflockdError) -> DflockdError {
        self.close();
        e
    }

    /// Send one request, validated and encoded beforehand (e.g. while it waited in a queue:
    /// [`Encoded::new`] from a [`protocol::Request`]), and return the reply line (parse it with
    /// [`Encoded::parse_reply`]).
    pub async fn request_encoded(&mut self, req: &Encoded) -> Result<String> {
        self.wbuf.clear();
        self.wbuf.extend_from_slice(req.bytes());
        self.reply_line(req.blocking_s()).await
    }

    /// Low level: send `cmd\nkey\narg\n` (validated framing, see [`protocol::encode_raw`]) and
    /// return the raw reply line.
    pub async fn request_raw(&mut self, cmd: &str, key: &str, arg: &str) -> Result<String> {
        self.request_encoded(&Encoded::raw(cmd, key, arg)?).await
    }

    /// Write the request in `wbuf` and return its reply line, consumed.
    async fn reply_line(&mut self, blocking_s: Option<u64>) -> Result<String> {
        let end = self.exchange(blocking_s).await?;
        let line = self.lines.line(end, &self.peer).map(str::to_owned);
        self.lines.consume(end);
        line
    }

    /// Write the request in `wbuf`, then read one reply line; returns where it ends in the read
    /// buffer (consume it with [`ReplyLines::consume`]).
    async fn exchange(&mut self, blocking_s: Option<u64>) -> Result<LineEnd> {
        self.exchange_within(self.reply_limit(blocking_s)).await
    }

    fn reply_limit(&self, blocking_s: Option<u64>) -> Duration {
        reply_limit(self.socket_timeout, blocking_s)
    }

    /// [`Connection::exchange`] with the reply awaited for `limit`.
    async fn exchange_within(&mut self, limit: Duration) -> Result<LineEnd> {
        if self.io.is_none() {
            return Err(DflockdError::connection(format!(
                "connection to {} is closed",
                self.peer
            )));
        }
        if self.busy {
            // A previous request was cancelled half-way: the stream is out of sync.
            return Err(self.fail(DflockdError::connection(format!(
                "connection to {} was interrupted mid-request and is closed",
                self.peer
            ))));
        }
        self.busy = true;
        let now = Instant::now();
        self.last_sent = Some(now);
        // The renewer may give a renew's reply longer than socket_timeout (the lease decides).
        let write_limit = self.socket_timeout.max(limit);
        let write_deadline = now + write_limit;
        let written = {
            let Connection { io, wbuf, peer, .. } = self;
            let write = async {
                let io = io
                    .as_mut()
                    .ok_or_else(|| DflockdError::connection("connection is closed"))?;
                io.write_all(wbuf)
                    .await
                    .map_err(|e| io_error(peer, "write to", e))?;
                io.flush().await.map_err(|e| io_error(peer, "write to", e))
            };
            tokio::time::timeout_at(write_deadline, write).await
        };
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.fail(e)),
            Err(_) => {
                return Err(self.fail(DflockdError::timeout(format!(
                    "write to {} timed out after {}ms",
                    self.peer,
                    write_limit.as_millis()
                ))))
            }
        }
        match self.read_line(limit).await {
            Ok(end) => {
                self.busy = false;
                self.answered = true;
                Ok(end)
            }
            Err(e) => {
                let e = self.fail(e);
                // Closed before any reply on a fresh plain connection: a TLS server does that.
                if self.plain && !self.answered && e.code() == ErrorCode::ConnectionError {
                    return Err(
                        closed_unanswered(&self.host, self.port, self.socket_timeout, e).await,
                    );
                }
                Err(e)
            }
        }
    }

    /// Read until the buffer holds one `\n`-terminated line within `limit`; returns where it
    /// ends.
    async fn read_line(&mut self, limit: Duration) -> Result<LineEnd> {
        let deadline = Instant::now().checked_add(limit);
        let Connection {
            io, lines, peer, ..
        } = self;
        loop {
            if let Some(end) = lines.find()? {
                return Ok(end);
            }
            let io = io
                .as_mut()
                .ok_or_else(|| DflockdError::connection("connection is closed"))?;
            // Read straight into the buffer's spare capacity (no bounce buffer).
            let buf = lines.input();
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(8192);
            }
            let read = io.read_buf(buf);
            let n = match deadline {
                Some(d) => match tokio::time::timeout_at(d, read).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(DflockdError::timeout(format!(
                            "no reply from {peer} within {}ms",
                            limit.as_millis()
                        )))
                    }
                },
                None => read.await,
            }
            .map_err(|e| io_error(peer, "read from", e))?;
            if n == 0 {
                return Err(lines.closed(peer));
            }
        }
    }

    /// While no request is in flight: wait until the server sends something or ends the
    /// connection, then close it and return why it is no longer usable. Never returns while the
    /// connection stays open and silent.
    ///
    /// dflockd never sends anything unprompted, so on an idle connection EOF, a read error or
    /// any complete line (such as the `error` a server writes before closing a connection idle
    /// for its read timeout) means the server has dropped this connection, and with it every
    /// lock the connection held.
    ///
    /// Cancel-safe: bytes are read into the connection's own buffer (the one the reply reader
    /// consumes) in the same poll that reads them, so dropping this future loses nothing, and
    /// an incomplete line stays buffered for the next reply.
    pub async fn wait_server_gone(&mut self) -> DflockdError {
        let mut chunk = [0u8; 8192];
        loop {
            if self.io.is_none() {
                return DflockdError::connection(format!("connection to {} is closed", self.peer));
            }
            if self.busy {
                return self.fail(DflockdError::connection(format!(
                    "connection to {} was interrupted mid-request and is closed",
                    self.peer
                )));
            }
            if let Some(raw) = self.lines.raw_line() {
                let e = unsolicited(&self.peer, raw);
                return self.fail(e);
            }
            if let Err(e) = self.lines.check_partial() {
                return self.fail(e);
            }
            let Some(io) = self.io.as_mut() else {
                continue;
            };
            match io.read(&mut chunk).await {
                Ok(0) => {
                    return self.fail(DflockdError::connection(format!(
                        "server {} closed the connection",
                        self.peer
                    )))
                }
                Ok(n) => self.lines.input().extend_from_slice(&chunk[..n]),
                Err(e) => {
                    let peer = self.peer.clone();
                    return self.fail(io_error(&peer, "read from", e));
                }
            }
        }
    }
}

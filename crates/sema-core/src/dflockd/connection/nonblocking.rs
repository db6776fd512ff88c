//! A connected dflockd socket driven without tokio: the caller's own event loop says when the
//! socket is readable or writable, and this type does the non-blocking I/O, the TLS records
//! (rustls' `ClientConnection`, no thread of its own); the reply lines are cut by the session's
//! framing ([`ReplyLines`]), the same as on tokio.
//!
//! Obtained from [`super::Connection::into_nonblocking`] after connect, TLS handshake and
//! auth ran on tokio.

use std::io::{self, Read as _, Write as _};
use std::time::Duration;

use tokio_rustls::rustls::ClientConnection;

use super::io_error;
use crate::dflockd::error::{DflockdError, Result};
use crate::dflockd::protocol::session::ReplyLines;

/// Bytes asked of the socket per read: a reply line is at most ~256 bytes, the `stats` JSON
/// more; anything larger is read by the next readiness callback.
const READ_CHUNK: usize = 4096;

/// See the module documentation.
pub struct NonBlockingStream {
    socket: std::net::TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// Plain TCP: request bytes not written yet (TLS buffers them in the session).
    out: Vec<u8>,
    out_pos: usize,
    lines: ReplyLines,
    peer: String,
    socket_timeout: Duration,
}

impl NonBlockingStream {
    pub(super) fn new(
        socket: std::net::TcpStream,
        tls: Option<Box<ClientConnection>>,
        lines: ReplyLines,
        peer: String,
        socket_timeout: Duration,
    ) -> Self {
        NonBlockingStream {
            socket,
            tls,
            out: Vec::with_capacity(128),
            out_pos: 0,
            lines,
            peer,
            socket_timeout,
        }
    }

    /// The socket, for registering it with an event loop (it is non-blocking).
    pub fn socket(&self) -> &std::net::TcpStream {
        &self.socket
    }

    /// `host:port` of the server.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// How long the reply to a request may take (see [`super::reply_limit`]).
    pub fn reply_limit(&self, blocking_s: Option<u64>) -> Duration {
        super::reply_limit(self.socket_timeout, blocking_s)
    }

    /// Send `bytes` (one encoded request): written at once as far as the socket takes them.
    /// Returns whether everything is out; if not, call [`NonBlockingStream::flush`] when the
    /// socket is writable.
    pub fn send(&mut self, bytes: &[u8]) -> Result<bool> {
        match &mut self.tls {
            Some(tls) => {
                // Into the session's plaintext buffer: never blocks.
                tls.writer()
                    .write_all(bytes)
                    .map_err(|e| io_error(&self.peer, "write to", e))?;
            }
            None => {
                if self.out_pos == self.out.len() {
                    self.out.clear();
                    self.out_pos = 0;
                    // The common case: straight from the caller's bytes, no copy.
                    let n = write_some(&mut &self.socket, bytes)
                        .map_err(|e| io_error(&self.peer, "write to", e))?;
                    if n == bytes.len() {
                        return Ok(true);
                    }
                    self.out.extend_from_slice(&bytes[n..]);
                    return Ok(false);
                }
                self.out.extend_from_slice(bytes);
            }
        }
        self.flush()
    }

    /// Write what is pending; returns whether nothing is left.
    pub fn flush(&mut self) -> Result<bool> {
        let peer = &self.peer;
        match &mut self.tls {
            Some(tls) => {
                while tls.wants_write() {
                    match tls.write_tls(&mut &self.socket) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_error(peer, "write to", e)),
                    }
                }
                Ok(true)
            }
            None => {
                while self.out_pos < self.out.len() {
                    let n = write_some(&mut &self.socket, &self.out[self.out_pos..])
                        .map_err(|e| io_error(peer, "write to", e))?;
                    if n == 0 {
                        return Ok(false);
                    }
                    self.out_pos += n;
                }
                Ok(true)
            }
        }
    }

    /// The socket is readable: read what it has into the reply buffer. `Ok(())` also when it
    /// had nothing after all. EOF, a read or TLS error, or a reply line over the limit is an
    /// error (the caller then closes the connection).
    pub fn read_ready(&mut self) -> Result<()> {
        let peer = &self.peer;
        let buf = self.lines.input();
        let eof = match &mut self.tls {
            None => {
                // Into a stack chunk, then the few bytes read are copied: growing the buffer
                // and zeroing a chunk of it per read cost more (a reply is ~40 bytes).
                let mut chunk = [0u8; READ_CHUNK];
                match (&self.socket).read(&mut chunk) {
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        n == 0
                    }
                    Err(e) => match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => false,
                        _ => return Err(io_error(peer, "read from", e)),
                    },
                }
            }
            Some(tls) => {
                let eof = match tls.read_tls(&mut &self.socket) {
                    Ok(n) => n == 0,
                    Err(e) => match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => false,
                        _ => return Err(io_error(peer, "read from", e)),
                    },
                };
                let state = tls.process_new_packets().map_err(|e| {
                    DflockdError::connection(format!(
                        "TLS error from {peer}: {}",
                        crate::dflockd::plain_words::tls_text(&e)
                    ))
                })?;
                let mut clean_close = false;
                if state.plaintext_bytes_to_read() > 0 {
                    let start = buf.len();
                    buf.resize(start + state.plaintext_bytes_to_read(), 0);
                    match tls.reader().read(&mut buf[start..]) {
                        Ok(n) => buf.truncate(start + n),
                        Err(_) => buf.truncate(start),
                    }
                }
                if state.peer_has_closed() {
                    clean_close = true;
                }
                // Alerts or key updates the session wants to send.
                if tls.wants_write() {
                    let _ = tls.write_tls(&mut &self.socket);
                }
                eof || clean_close
            }
        };
        self.lines.check_partial()?;
        if eof && !self.lines.has_line() {
            return Err(self.lines.closed(&self.peer));
        }
        Ok(())
    }

    /// As [`Self::read_ready`], and whether more may be waiting: the read filled its whole
    /// chunk (plain TCP). A caller draining the socket handles the complete lines, then reads
    /// again (after a long block, hundreds of replies may wait: one chunk is not all of them).
    pub fn read_ready_more(&mut self) -> Result<bool> {
        let before = self.lines.input().len();
        self.read_ready()?;
        Ok(self.tls.is_none() && self.lines.input().len().saturating_sub(before) >= READ_CHUNK)
    }

    /// A plain-TCP stream with nothing left to write, taken apart (the socket, the reply bytes
    /// read and not consumed, the peer, the socket timeout) to be driven on tokio again
    /// ([`super::Connection::from_nonblocking`]); `None` with TLS or a partial write.
    pub(super) fn into_plain_parts(
        self,
    ) -> Option<(std::net::TcpStream, ReplyLines, String, Duration)> {
        if self.tls.is_some() || self.out_pos < self.out.len() {
            return None;
        }
        Some((self.socket, self.lines, self.peer, self.socket_timeout))
    }

    /// The next complete reply line, if one is buffered.
    pub fn next_line(&mut self) -> Option<Result<String>> {
        self.lines.next_line(&self.peer)
    }
}

/// One non-blocking write: the count written, 0 when the socket would block.
fn write_some(socket: &mut &std::net::TcpStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match socket.write(bytes) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

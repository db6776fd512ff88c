//! Telling "TLS on one side only" apart from other failures, by asking the server once more in
//! the other language. Runs only on a failure path, never on a working connection.
//!
//! - TLS client, plain server: the Go server reads the ClientHello as request lines. When it
//!   holds a newline it answers `error` (a non-TLS record: rustls reports an invalid message);
//!   when it does not, the server waits for the rest of the line until its read timeout (23 s by
//!   default) and the handshake stays unanswered. A TLS server answers a ClientHello at once, so
//!   after [`PLAIN_PROBE_AFTER`] without an answer a second, plain connection asks whether a
//!   dflockd listens in plain text.
//! - Plain client, TLS server: the Go server closes the connection without a byte when the first
//!   record is not a TLS handshake. A fresh connection closed before any reply is checked with a
//!   TLS handshake on a second connection.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsConnector;

use super::error::DflockdError;
use super::tls;

/// How long a TLS handshake may stay unanswered before the plain-text probe starts. A TLS server
/// on loopback answers in ~1 ms; 250 ms leaves room for a distant or busy server while the error
/// still comes long before a connect timeout (10 s default).
pub(crate) const PLAIN_PROBE_AFTER: Duration = Duration::from_millis(250);

/// How long the TLS probe of a plain connection closed unanswered may take. A TLS server answers
/// a ClientHello within a round trip (~1 ms on loopback); a plain dflockd (e.g. one restarted
/// since the connection was closed, which a reconnecting waiter meets) reads it as request lines
/// and stays silent until its read timeout, so the probe must not wait for that: with the
/// socket timeout as its limit (30 s by default) a waiter's reconnection after a restart waited
/// behind it (measured: served 1053 ms after the kill with a 1 s limit, the server back at 55 ms;
/// the caller also asks in plain text, which such a server answers at once).
pub(crate) const TLS_PROBE_LIMIT: Duration = Duration::from_millis(500);

/// Whether a plain-text dflockd answers at `host:port`: three empty lines (an invalid request)
/// get `error` from the Go and Python servers (`error_auth` when auth is on) at once, while a
/// TLS server waits for the rest of a 5-byte record header. Never returns `true` otherwise.
pub(crate) async fn plain_dflockd_answers(host: &str, port: u16) -> bool {
    let Ok(mut tcp) = TcpStream::connect((host, port)).await else {
        return false;
    };
    if tcp.write_all(b"\n\n\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < buf.len() {
        match tcp.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
        if buf[..n].contains(&b'\n') {
            break;
        }
    }
    buf[..n].starts_with(b"error")
}

/// Whether `host:port` completes a TLS handshake (any certificate: only the language matters).
pub(crate) async fn speaks_tls(host: &str, port: u16) -> bool {
    let Ok(cfg) = tls::client_config(&tls::TlsOptions {
        accept_invalid_certs: true,
        ..Default::default()
    }) else {
        return false;
    };
    let Ok(name) = tls::server_name(host, &tls::TlsOptions::default()) else {
        return false;
    };
    let Ok(tcp) = TcpStream::connect((host, port)).await else {
        return false;
    };
    TlsConnector::from(cfg).connect(name, tcp).await.is_ok()
}

/// The handshake failed because the server's first bytes are not TLS (e.g. `error\n`).
pub(crate) fn answered_in_plain_text(e: &std::io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidMessage(_))
    )
}

pub(crate) fn plain_server(peer: &str) -> DflockdError {
    DflockdError::tls_mismatch(format!(
        "TLS was requested but {peer} is a plain-TCP dflockd server (it answered in plain text): \
         connect without tls (drop the tls option or ?tls=1), or start the server with --tls-cert/--tls-key"
    ))
}

pub(crate) fn tls_server(peer: &str) -> DflockdError {
    DflockdError::tls_mismatch(format!(
        "{peer} speaks TLS and closed this plain-TCP connection: connect with tls \
         (the tls option, or ?tls=1 in a dflockd:// URL)"
    ))
}

//! What a connection's failures say, the same from both drivers (this module's tokio
//! connection and the binding's event-loop one): a closed plain connection that may be a TLS
//! server, an unprompted line (an overlong reply is the framing's, `protocol::session`).

use std::time::Duration;

use crate::dflockd::error::DflockdError;
use crate::dflockd::mismatch;

/// The error of a fresh plain-TCP connection closed before any reply (`e`): a TLS server does
/// that, so it is probed (within the socket timeout, at most 500 ms) and named; a plain dflockd
/// answering settles it the other way at once (the server was restarted, as a reconnecting
/// waiter finds it). Both drivers use it: this connection and the event loop's.
pub async fn closed_unanswered(
    host: &str,
    port: u16,
    socket_timeout: Duration,
    e: DflockdError,
) -> DflockdError {
    // Asked again until the limit: a restarting server refuses the first asks.
    let plain = async {
        while !mismatch::plain_dflockd_answers(host, port).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let probe = async {
        tokio::select! {
            tls = mismatch::speaks_tls(host, port) => tls,
            _ = plain => false,
        }
    };
    let limit = socket_timeout.min(mismatch::TLS_PROBE_LIMIT);
    if let Ok(true) = tokio::time::timeout(limit, probe).await {
        return mismatch::tls_server(&format!("{host}:{port}"));
    }
    e
}

/// The error of a line the server sent unprompted (`raw`, without its `\n`): it dropped the
/// connection (and released what it held). Both drivers use it.
pub fn unsolicited(peer: &str, raw: &[u8]) -> DflockdError {
    let line = describe_line(raw);
    // The Go server writes `error` and closes a connection that sent nothing for its
    // --read-timeout: the usual cause is a renew interval longer than that timeout.
    let hint = if raw.strip_suffix(b"\r").unwrap_or(raw) == b"error" {
        " (a dflockd server writes `error` and closes a connection that sent nothing \
         for its --read-timeout, 23 s by default: if that timeout was shortened, keep \
         the renew interval below it, e.g. renewMaxIntervalMs or a shorter lease)"
    } else {
        ""
    };
    DflockdError::protocol(format!(
        "server {peer} sent an unsolicited reply: {line}{hint}"
    ))
}

/// A short printable rendering of an unexpected line (one trailing `\r` dropped, control
/// characters escaped, at most 80 characters).
fn describe_line(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = String::from_utf8_lossy(line);
    let mut out: String = text.chars().take(80).flat_map(char::escape_debug).collect();
    if text.chars().nth(80).is_some() {
        out.push_str("...");
    }
    out
}

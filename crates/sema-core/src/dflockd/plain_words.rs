//! Socket and TLS failures in plain words, with what to do about them. An `io::Error` from
//! rustls prints its `Debug` form (`invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`)
//! or a link into rustls' manual (`peer closed connection without sending TLS close_notify:
//! https://docs.rs/…`): neither tells a user what happened or what to change. Every message of
//! a connection failure goes through [`io_text`] (and [`tls_text`] for a rustls error met
//! outside an `io::Error`).

use std::io;

use tokio_rustls::rustls;
use tokio_rustls::rustls::{CertificateError, Error as TlsError};

/// What `e` means for a connection, in words, with the fix where there is one.
pub(crate) fn io_text(e: &io::Error) -> String {
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<TlsError>())
    {
        return tls_text(tls);
    }
    match e.kind() {
        // rustls' words for a TCP close without a TLS close_notify, which is how a killed or
        // restarted server looks.
        io::ErrorKind::UnexpectedEof => {
            "the server closed the connection (was it stopped, killed or restarted?)".into()
        }
        io::ErrorKind::ConnectionRefused => {
            "connection refused (is the dflockd server running on that host and port?)".into()
        }
        io::ErrorKind::ConnectionReset => {
            "the server reset the connection (was it stopped, killed or restarted?)".into()
        }
        io::ErrorKind::BrokenPipe => {
            "the server closed the connection (was it stopped, killed or restarted?)".into()
        }
        _ => strip_links(&e.to_string()),
    }
}

/// A rustls error in words.
pub(crate) fn tls_text(e: &TlsError) -> String {
    const TRUST: &str = "pass the server's CA certificate as tls: { ca } (PEM)";
    match e {
        TlsError::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                format!("the server's TLS certificate is signed by an authority this client does not trust: {TRUST}")
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's TLS certificate has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's TLS certificate is not valid yet (check the clocks)".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the server's TLS certificate does not name this host (connect by a name it lists, \
                 or set tls: { servername })"
                    .into()
            }
            CertificateError::Revoked => "the server's TLS certificate has been revoked".into(),
            CertificateError::BadSignature | CertificateError::BadEncoding => {
                "the server's TLS certificate is malformed or its signature is invalid".into()
            }
            CertificateError::Other(other)
                if matches!(
                    other.0.downcast_ref::<webpki::Error>(),
                    Some(webpki::Error::CaUsedAsEndEntity)
                ) =>
            {
                format!("the server presents a self-signed (CA) certificate that this client does not trust: {TRUST}")
            }
            _ => format!("the server's TLS certificate was refused: {TRUST}"),
        },
        TlsError::InvalidMessage(_) | TlsError::InappropriateMessage { .. } => {
            "the server did not answer in TLS (is it a plain dflockd server? drop tls)".into()
        }
        TlsError::AlertReceived(alert) => {
            format!(
                "the server refused the TLS handshake (alert {})",
                alert_name(alert)
            )
        }
        TlsError::NoCertificatesPresented => {
            "the server asks for a client certificate: pass tls: { cert, key }".into()
        }
        other => strip_links(&other.to_string()),
    }
}

/// A TLS alert's name without `Debug` wrapping (`HandshakeFailure`, `Unknown(80)` → `80`).
fn alert_name(alert: &rustls::AlertDescription) -> String {
    let shown = format!("{alert:?}");
    match shown
        .strip_prefix("Unknown(")
        .and_then(|s| s.strip_suffix(')'))
    {
        Some(n) => n.to_string(),
        None => shown,
    }
}

/// `text` without any link a library appends (`…: https://docs.rs/…`).
fn strip_links(text: &str) -> String {
    match text.find(": https://").or_else(|| text.find(" https://")) {
        Some(i) => text[..i].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn no_debug_formatting_or_links() {
        let cases = [
            io(TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
            io(TlsError::InvalidCertificate(CertificateError::Expired)),
            io(TlsError::InvalidCertificate(
                CertificateError::NotValidForName,
            )),
            io(TlsError::InvalidCertificate(CertificateError::Other(
                rustls::OtherError(std::sync::Arc::new(webpki::Error::CaUsedAsEndEntity)),
            ))),
            io(TlsError::AlertReceived(
                rustls::AlertDescription::HandshakeFailure,
            )),
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed connection without sending TLS close_notify: \
                 https://docs.rs/rustls/latest/rustls/manual/_03_howto/index.html#unexpected-eof",
            ),
            io::Error::other("boom: https://example.invalid/x"),
        ];
        for e in &cases {
            let t = io_text(e);
            assert!(
                !t.contains("Other(") && !t.contains("Some(") && !t.contains("https://"),
                "{t}"
            );
        }
        assert!(io_text(&cases[0]).contains("tls: { ca }"));
        assert!(io_text(&cases[3]).contains("self-signed"));
        assert!(io_text(&cases[5]).contains("restarted"));
    }
}

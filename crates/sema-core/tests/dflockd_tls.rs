//! TLS: a throwaway CA and server certificate (rcgen), a TLS-terminating proxy (tokio-rustls)
//! in front of the real server recorded in `.tools/dflockd.json`, and the client's behaviour
//! with a trusted CA, an unknown CA, a wrong server name and no TLS at all. When the recorded
//! server is Go, it is also tested with its own `--tls-cert/--tls-key`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::dflockd::{key, loss_channel, next_loss, skip_unless_go, TestServer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use sema_core::dflockd::{
    AcquireReply, ConnectOptions, Connection, ErrorCode, Primitive, PrimitiveOptions, TlsOptions,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    struct Pki {
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
        cert_der: CertificateDer<'static>,
        key_der: Vec<u8>,
    }

    fn make_ca(name: &str) -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().expect("ca key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-signed ca");
        (cert, key)
    }

    fn make_pki() -> Pki {
        let (ca, ca_key) = make_ca("sema-native test CA");
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca, &ca_key).expect("sign");
        Pki {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    /// A TLS-terminating proxy on 127.0.0.1 forwarding to `upstream_port`; returns its port.
    async fn tls_proxy(pki: &Pki, upstream_port: u16) -> u16 {
        let cfg =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(
                    vec![pki.cert_der.clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key_der.clone())),
                )
                .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(cfg));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        port
    }

    fn tls_opts(port: u16, ca: Option<&str>, servername: Option<&str>) -> ConnectOptions {
        let mut o = ConnectOptions::new("127.0.0.1", port);
        o.connect_timeout = Duration::from_secs(3);
        o.socket_timeout = Duration::from_secs(2);
        o.tls = Some(TlsOptions {
            ca_pem: ca.map(str::to_string),
            servername: servername.map(str::to_string),
            ..Default::default()
        });
        o
    }

    /// A certificate that is its own CA (what `openssl req -x509` makes), for `names`, valid from
    /// yesterday until `days_left` days from now (negative: already expired); PEM cert and key.
    fn self_signed_ca(names: &[&str], days_left: i64) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(2);
        params.not_after = now + time::Duration::days(days_left);
        let cert = params.self_signed(&key).expect("self-signed");
        (cert.pem(), key.serialize_pem())
    }

    fn write_pair(dir: &std::path::Path, name: &str, pair: &(String, String)) -> (String, String) {
        let c = dir.join(format!("{name}.pem"));
        let k = dir.join(format!("{name}.key"));
        std::fs::write(&c, &pair.0).expect("write cert");
        std::fs::write(&k, &pair.1).expect("write key");
        (
            c.to_string_lossy().into_owned(),
            k.to_string_lossy().into_owned(),
        )
    }

    /// The Go server with a certificate that is its own CA: trusted when that very certificate is
    /// the configured CA; refused when the CA is another self-signed certificate for the same
    /// name, when the name does not match, and when it has expired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn go_server_self_signed_certificate_as_its_own_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = self_signed_ca(&["localhost", "127.0.0.1"], 2);
        let (c, k) = write_pair(dir.path(), "good", &good);
        let server = TestServer::start(&["--tls-cert", &c, "--tls-key", &k]);
        let mut conn = Connection::connect(&tls_opts(server.port, Some(&good.0), None))
            .await
            .expect("the configured anchor itself is accepted");
        let kk = key("selfsigned");
        assert!(matches!(
            conn.lock(&kk, 0, None).await.expect("l"),
            AcquireReply::Granted(_)
        ));
        Connection::connect(&tls_opts(server.port, Some(&good.0), Some("localhost")))
            .await
            .expect("DNS name in the SAN");

        let other = self_signed_ca(&["localhost", "127.0.0.1"], 2);
        let e = Connection::connect(&tls_opts(server.port, Some(&other.0), None))
            .await
            .expect_err("a different self-signed certificate is no anchor for this one");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        let e = Connection::connect(&tls_opts(server.port, Some(&good.0), Some("other.example")))
            .await
            .expect_err("wrong name");
        assert!(e.to_string().to_lowercase().contains("name"), "{e}");

        let expired = self_signed_ca(&["localhost", "127.0.0.1"], -1);
        let (c, k) = write_pair(dir.path(), "expired", &expired);
        let old = TestServer::start(&["--tls-cert", &c, "--tls-key", &k]);
        let e = Connection::connect(&tls_opts(old.port, Some(&expired.0), None))
            .await
            .expect_err("expired");
        assert!(e.to_string().to_lowercase().contains("expired"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_proxy_in_front_of_the_real_server() {
        let server = TestServer::start(&[]);
        let pki = make_pki();
        let port = tls_proxy(&pki, server.port).await;

        // Trusted CA, IP address as the server name: a lock end to end, with renewal.
        let k = key("tls");
        let mut o = PrimitiveOptions::new(&k, tls_opts(port, Some(&pki.ca_pem), None));
        o.lease_ttl_s = Some(1);
        let a = Primitive::new(o).expect("options");
        assert!(a.acquire().await.expect("acquire over TLS"));
        tokio::time::sleep(Duration::from_millis(1500)).await; // renewals over TLS
        assert!(a.token().is_some());
        // Explicit servername matching the DNS SAN.
        let mut other = Connection::connect(&tls_opts(port, Some(&pki.ca_pem), Some("localhost")))
            .await
            .expect("connect with servername");
        assert_eq!(
            other.lock(&k, 0, None).await.expect("l"),
            AcquireReply::TimedOut,
            "held through TLS"
        );
        a.release().await.expect("release");
        assert!(matches!(
            other.lock(&k, 0, None).await.expect("l"),
            AcquireReply::Granted(_)
        ));

        // Unknown CA → clean CONNECTION_ERROR (certificate verification), promptly.
        let (stranger, _) = make_ca("someone else");
        let t0 = Instant::now();
        let e = Connection::connect(&tls_opts(port, Some(&stranger.pem()), None))
            .await
            .expect_err("unknown CA");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");
        assert!(e.message().to_lowercase().contains("certificate"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));

        // System roots do not know the throwaway CA either.
        let e = Connection::connect(&tls_opts(port, None, None))
            .await
            .expect_err("system roots");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");

        // Wrong server name.
        let e = Connection::connect(&tls_opts(port, Some(&pki.ca_pem), Some("other.example")))
            .await
            .expect_err("name mismatch");
        assert_eq!(e.code(), ErrorCode::ConnectionError, "{e}");

        // A plain client against the TLS port fails cleanly within its timeout.
        let mut plain = ConnectOptions::new("127.0.0.1", port);
        plain.socket_timeout = Duration::from_secs(2);
        let t0 = Instant::now();
        let r = async {
            let mut c = Connection::connect(&plain).await?;
            c.lock(&k, 0, None).await
        }
        .await;
        let e = r.expect_err("plain against TLS");
        assert_eq!(e.code(), ErrorCode::TlsMismatch, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }

    /// TLS against the plain Go server: named TLS_MISMATCH (whether the server answered the
    /// ClientHello with `error` or stayed silent waiting for a line end), not a timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_against_the_plain_go_server_is_a_mismatch() {
        let server = TestServer::start(&[]);
        let pki = make_pki();
        for _ in 0..3 {
            let e = Connection::connect(&tls_opts(server.port, Some(&pki.ca_pem), None))
                .await
                .expect_err("plain server");
            assert_eq!(e.code(), ErrorCode::TlsMismatch, "{e}");
        }
        let mut c = Connection::connect(&ConnectOptions::new("127.0.0.1", server.port))
            .await
            .expect("plain still works");
        assert!(matches!(
            c.lock(&key("mm"), 0, None).await.expect("l"),
            AcquireReply::Granted(_)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_drop_over_tls_is_reported_at_once() {
        // Server read timeout 2 s behind the TLS proxy: the server writes `error`, closes, the
        // proxy forwards it and sends close_notify. No renew is due (60 s lease, 60 s cap).
        let server = TestServer::start(&["--read-timeout", "2"]);
        let pki = make_pki();
        let port = tls_proxy(&pki, server.port).await;
        let k = key("tls-idle");
        let mut o = PrimitiveOptions::new(&k, tls_opts(port, Some(&pki.ca_pem), None));
        o.lease_ttl_s = Some(60);
        o.renew_max_interval = Duration::from_secs(60);
        let a = Primitive::new(o).expect("options");
        let mut lost = loss_channel(&a);
        assert!(a.acquire().await.expect("acquire over TLS"));
        let t0 = Instant::now();
        let (lk, _, at) = next_loss(&mut lost, Duration::from_secs(8))
            .await
            .unwrap_or_else(|| panic!("no loss over TLS {:?} after acquire", t0.elapsed()));
        let latency = at.duration_since(t0);
        eprintln!("dflockd TLS idle-drop loss reported {latency:?} after acquire");
        assert_eq!(lk, k);
        assert!(latency < Duration::from_secs(5), "{latency:?}");
        assert_eq!(a.token(), None);
        let mut other = Connection::connect(&tls_opts(port, Some(&pki.ca_pem), None))
            .await
            .expect("connect");
        assert!(matches!(
            other.lock(&k, 0, None).await.expect("l"),
            AcquireReply::Granted(_)
        ));
        assert_eq!(
            a.release().await.expect_err("after loss").code(),
            ErrorCode::LockLost
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn go_server_native_tls() {
        if skip_unless_go("go_server_native_tls", "--tls-cert/--tls-key") {
            return;
        }
        let pki = make_pki();
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("cert.pem");
        let keyf = dir.path().join("key.pem");
        std::fs::write(&cert, &pki.cert_pem).expect("write cert");
        std::fs::write(&keyf, &pki.key_pem).expect("write key");
        let (c, kf) = (
            cert.to_string_lossy().into_owned(),
            keyf.to_string_lossy().into_owned(),
        );
        let server = TestServer::start(&["--tls-cert", &c, "--tls-key", &kf]);
        let k = key("gotls");
        let a = Primitive::new(PrimitiveOptions::new(
            &k,
            tls_opts(server.port, Some(&pki.ca_pem), None),
        ))
        .expect("options");
        assert!(a.acquire().await.expect("acquire"));
        a.release().await.expect("release");
        let mut plain = ConnectOptions::new("127.0.0.1", server.port);
        plain.socket_timeout = Duration::from_secs(2);
        let t0 = Instant::now();
        let r = async {
            let mut c = Connection::connect(&plain).await?;
            c.request_raw("stats", "_", "").await
        }
        .await;
        assert!(r.is_err() || r.as_deref().map(|l| !l.starts_with("ok")).unwrap_or(true));
        assert!(t0.elapsed() < Duration::from_secs(4));
    }
}

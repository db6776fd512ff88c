//! TLS client configuration: trust roots (the system's, or the caller's PEM), the server-name
//! check, and the one relaxation other clients make for self-signed servers.
//!
//! A certificate made with `openssl req -x509 …` is its own CA (`basicConstraints CA:TRUE`), and
//! the usual way to trust such a server is to configure that very certificate as the CA. WebPKI
//! refuses it as an end entity (`CaUsedAsEndEntity`) while Go, Node and Python accept it.
//! `Verifier` accepts exactly that case and nothing weaker: the presented certificate
//! must be byte-for-byte one of the configured anchors, WebPKI must have found nothing else wrong
//! before that check (it checks the validity period first), the name must match, and the handshake
//! signature (proof that the peer holds the key) is verified by WebPKI as for any server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::error::{DflockdError, Result};

/// TLS settings: TLS is on when this is present.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsOptions {
    /// PEM text with one or more CA certificates to trust instead of the system roots.
    pub ca_pem: Option<String>,
    /// PEM text of CA certificates trusted IN ADDITION to the system roots when `ca_pem` is
    /// absent (Node's `NODE_EXTRA_CA_CERTS`: added to the default roots, never replacing them;
    /// ignored with `ca_pem`, as Node ignores it with `ca`). Unparsable certificates in it are
    /// skipped, as Node skips them.
    pub extra_ca_pem: Option<String>,
    /// Name to verify the server certificate against (default: the host).
    pub servername: Option<String>,
    /// Skip the server certificate check (Node's `rejectUnauthorized: false`). The handshake
    /// signatures are still verified, so the peer holds the key of the certificate it shows, but
    /// nothing says whose certificate that is.
    pub accept_invalid_certs: bool,
    /// PEM client certificate chain and private key, for servers that ask for one.
    pub client_cert: Option<(String, String)>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The [`ClientConfig`] for `tls`, cached per distinct settings (a lock re-acquired in a loop
/// reconnects each time; parsing PEM and building the verifier costs ~0.3 ms).
pub(crate) fn client_config(tls: &TlsOptions) -> Result<Arc<ClientConfig>> {
    static CACHE: OnceLock<Mutex<HashMap<TlsOptions, Arc<ClientConfig>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(cfg) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(tls) {
        return Ok(cfg.clone());
    }
    let cfg = build(tls)?;
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    // Few distinct settings exist in a process; the bound only stops a pathological caller.
    if map.len() >= 16 {
        map.clear();
    }
    map.insert(tls.clone(), cfg.clone());
    Ok(cfg)
}

/// The name the server certificate must carry.
pub(crate) fn server_name(host: &str, tls: &TlsOptions) -> Result<ServerName<'static>> {
    let name = tls.servername.as_deref().unwrap_or(host);
    ServerName::try_from(name.to_string())
        .map_err(|e| DflockdError::invalid(format!("invalid TLS server name {name:?}: {e}")))
}

fn build(tls: &TlsOptions) -> Result<Arc<ClientConfig>> {
    let (roots, anchors) = match &tls.ca_pem {
        Some(pem) => custom_roots(pem)?,
        None => {
            let mut roots = system_roots();
            let mut anchors = Vec::new();
            if let Some(pem) = &tls.extra_ca_pem {
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
                    if roots.add(cert.clone()).is_ok() {
                        anchors.push(cert);
                    }
                }
            }
            (roots, anchors)
        }
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| DflockdError::invalid(format!("tls.ca: unusable trust anchors: {e}")))?;
    let verifier = Arc::new(Verifier {
        inner: webpki,
        trust: if tls.accept_invalid_certs {
            Trust::AnyCertificate
        } else {
            Trust::Anchors(anchors)
        },
    });
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| DflockdError::connection(format!("TLS setup failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let cfg = match &tls.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| DflockdError::invalid(format!("tls.cert: unreadable PEM: {e}")))?;
            if chain.is_empty() {
                return Err(DflockdError::invalid(
                    "tls.cert: no PEM certificate (-----BEGIN CERTIFICATE-----) found",
                ));
            }
            // The key's PEM text is never echoed: it is a secret.
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
                .map_err(|_| DflockdError::invalid("tls.key: no readable PEM private key found"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| DflockdError::invalid(format!("tls.cert/tls.key: unusable: {e}")))?
        }
    };
    Ok(Arc::new(cfg))
}

fn system_roots() -> RootCertStore {
    static SYSTEM: OnceLock<RootCertStore> = OnceLock::new();
    SYSTEM
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            roots
        })
        .clone()
}

/// The trust store for the caller's PEM, and the DER of each certificate in it.
fn custom_roots(pem: &str) -> Result<(RootCertStore, Vec<CertificateDer<'static>>)> {
    let mut roots = RootCertStore::empty();
    let mut anchors = Vec::new();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert =
            cert.map_err(|e| DflockdError::invalid(format!("tls.ca: unreadable PEM: {e}")))?;
        roots
            .add(cert.clone())
            .map_err(|e| DflockdError::invalid(format!("tls.ca: unusable certificate: {e}")))?;
        anchors.push(cert);
    }
    if anchors.is_empty() {
        return Err(DflockdError::invalid(
            "tls.ca: no PEM certificate (-----BEGIN CERTIFICATE-----) found",
        ));
    }
    Ok((roots, anchors))
}

/// How the server certificate is judged; the handshake signatures are always checked by WebPKI.
#[derive(Debug)]
enum Trust {
    /// WebPKI, plus acceptance of a server certificate that is exactly one of these configured
    /// trust anchors (see the module comment).
    Anchors(Vec<CertificateDer<'static>>),
    /// `rejectUnauthorized: false`: any certificate.
    AnyCertificate,
}

#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    trust: Trust,
}

fn is_ca_used_as_end_entity(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let anchors = match &self.trust {
            Trust::AnyCertificate => return Ok(ServerCertVerified::assertion()),
            Trust::Anchors(a) => a,
        };
        let err = match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        // WebPKI checks the validity period before the basic constraints, so reaching
        // CaUsedAsEndEntity means the dates were fine; the anchor's own self-signature is no
        // more checked here than WebPKI checks it for any anchor: trusting it is the caller's
        // configuration, byte for byte.
        if !is_ca_used_as_end_entity(&err)
            || !anchors.iter().any(|a| a.as_ref() == end_entity.as_ref())
        {
            return Err(err);
        }
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        cert.verify_is_valid_for_subject_name(server_name)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::NotValidForName))?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

//! The fake API server's certificates: a CA made for this server and a serving certificate for
//! `127.0.0.1` signed by it, so clients verify the server as they would a cluster's.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::FakeError;

/// The CA certificate (PEM, what a kubeconfig's `certificate-authority-data` holds) and the
/// server's TLS configuration.
pub(crate) struct Tls {
    pub(crate) ca_pem: String,
    pub(crate) config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

pub(crate) fn generate() -> Result<Tls, FakeError> {
    let cert_err = |e: rcgen::Error| FakeError::Certificate(e.to_string());
    let ca_key = KeyPair::generate().map_err(cert_err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "lace-kube-fake-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(cert_err)?;

    let key = KeyPair::generate().map_err(cert_err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    params.subject_alt_names = vec![
        SanType::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
        SanType::DnsName("localhost".try_into().map_err(cert_err)?),
    ];
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let cert = params.signed_by(&key, &ca).map_err(cert_err)?;

    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FakeError::Certificate(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| FakeError::Certificate(e.to_string()))?;
    // HTTP/1.1 only (what kube-rs speaks); a client offering h2 falls back.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        ca_pem: ca.pem(),
        config: Arc::new(config),
    })
}

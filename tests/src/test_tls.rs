//! A test certificate authority and the server identities it signs, for
//! HTTPS release hosts on 127.0.0.1 (see [`crate::release_support::TestServer::start_tls`]).
//! Everything is generated per test (rcgen, ECDSA P-256); nothing is
//! installed in the system's trust store: tests hand the CA to the runners
//! through `SSL_CERT_FILE`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed certificate authority.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    certificate: CertificateDer<'static>,
    pem: String,
}

impl TestCa {
    /// A fresh CA whose subject is `CN=<name>`.
    pub fn generate(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        TestCa {
            pem: certificate.pem(),
            certificate: certificate.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate in PEM, as a bundle file holds it.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Write the CA's PEM to `directory/name` (for `SSL_CERT_FILE`).
    pub fn write_pem(&self, directory: &Path, name: &str) -> PathBuf {
        let path = directory.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses, as
    /// subject alternative names) signed by this CA, sent without the CA.
    pub fn server(&self, names: &[&str]) -> ServerIdentity {
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("server {}", names.join(" ")));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        ServerIdentity {
            chain: vec![certificate.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            pem: (certificate.pem(), key.serialize_pem()),
        }
    }

    /// The CA's own certificate, to send in a chain.
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.certificate.clone()
    }
}

/// A server's certificate chain and key.
pub struct ServerIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
    /// The certificate and the key in PEM, for servers configured by file.
    pem: (String, String),
}

impl ServerIdentity {
    /// The same identity sending `extra` after its own certificate (a
    /// server that includes its root).
    pub fn with_chain(mut self, extra: CertificateDer<'static>) -> ServerIdentity {
        self.chain.push(extra);
        self
    }

    /// Write the certificate and the key as PEM files in `directory`;
    /// returns their paths.
    pub fn write_pem(&self, directory: &Path) -> (PathBuf, PathBuf) {
        let certificate = directory.join("server.pem");
        let key = directory.join("server.key");
        std::fs::write(&certificate, &self.pem.0).unwrap();
        std::fs::write(&key, &self.pem.1).unwrap();
        (certificate, key)
    }

    /// The rustls server configuration that presents this identity
    /// (TLS 1.2 and 1.3, ALPN `http/1.1`).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        // The same provider as the runner's (see update-runner's urllib/tls.rs).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                self.chain.clone(),
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

//! A test certificate authority and the server identities it signs, for
//! HTTPS release hosts on 127.0.0.1 (see [`crate::release_support::TestServer::start_tls`]).
//! Everything is generated per test by the `openssl` command (ECDSA P-256),
//! so no certificate-building crate (and its date library) enters the lock
//! file; nothing is installed in the system's trust store: tests hand the CA
//! to the runners through `SSL_CERT_FILE`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::tempdir::TempDir;

/// A self-signed certificate authority; its key lives in a private temp
/// directory for as long as the CA does.
pub struct TestCa {
    files: TempDir,
    certificate: CertificateDer<'static>,
    pem: String,
}

/// Runs `openssl` with `args` in `directory`; panics with its stderr on failure.
fn openssl(directory: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(directory)
        .output()
        .unwrap_or_else(|err| panic!("cannot run openssl (scripts/setup.sh installs it): {err}"));
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The arguments of `openssl req` that make a fresh P-256 key in PKCS#8.
const NEW_P256_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-noenc",
];

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

fn certificate_der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("openssl wrote a PEM certificate")
}

/// `subjectAltName` entries for `names`: IP addresses as `IP:`, the rest as `DNS:`.
fn subject_alt_names(names: &[&str]) -> String {
    let entries: Vec<String> = names
        .iter()
        .map(|name| match name.parse::<std::net::IpAddr>() {
            Ok(_) => format!("IP:{name}"),
            Err(_) => format!("DNS:{name}"),
        })
        .collect();
    entries.join(",")
}

impl TestCa {
    /// A fresh CA whose subject is `CN=<name>`.
    pub fn generate(name: &str) -> TestCa {
        let files = TempDir::new("agents-test-ca");
        let subject = format!("/CN={name}");
        let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subject];
        args.extend(NEW_P256_KEY);
        args.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(files.path(), &args);
        let pem = read(&files.path().join("ca.pem"));
        TestCa {
            certificate: certificate_der(&pem),
            pem,
            files,
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
        let work = TempDir::new("agents-test-server");
        let extensions = format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth\n",
            subject_alt_names(names)
        );
        std::fs::write(work.path().join("server.ext"), extensions).unwrap();
        let subject = format!("/CN=server {}", names.join(" "));
        let mut request = vec!["req", "-new", "-subj", &subject];
        request.extend(NEW_P256_KEY);
        request.extend(["-keyout", "server.key", "-out", "server.csr"]);
        openssl(work.path(), &request);
        let ca_pem = self.files.path().join("ca.pem");
        let ca_key = self.files.path().join("ca.key");
        let (ca_pem, ca_key) = (ca_pem.to_str().unwrap(), ca_key.to_str().unwrap());
        openssl(
            work.path(),
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-days",
                "2",
                "-CA",
                ca_pem,
                "-CAkey",
                ca_key,
                "-CAcreateserial",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
        );
        let certificate = read(&work.path().join("server.pem"));
        let key = read(&work.path().join("server.key"));
        ServerIdentity {
            chain: vec![certificate_der(&certificate)],
            key: PrivatePkcs8KeyDer::from_pem_slice(key.as_bytes())
                .expect("openssl wrote a PKCS#8 key"),
            pem: (certificate, key),
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

//! TLS as `ssl.create_default_context()` sets it up for urllib: the trust
//! store of OpenSSL's default verify paths ([`crate::trust_store`]), the
//! host name checked, ALPN `http/1.1`; the handshake completes while
//! connecting, and its failures are worded as CPython 3.11's `_ssl` module
//! words OpenSSL's (they reach the status row inside `<urlopen error ...>`).

use std::io;
use std::net::TcpStream;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use super::remaining;

/// Where CPython 3.11's `_ssl.c` raises handshake errors, which its
/// messages end with.
const SSL_ERROR_LOCATION: &str = "(_ssl.c:1006)";
/// CPython 3.11's text for a handshake the socket timeout ended.
const HANDSHAKE_TIMED_OUT: &str = "_ssl.c:989: The handshake operation timed out";

/// A TLS connection over TCP.
pub(super) type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Why TLS could not be set up or the handshake failed, in Python's words.
#[derive(Debug)]
pub(super) struct TlsFailure(pub(super) io::Error);

/// The shared client configuration, or why no trust store could be read
/// (loaded once per process, as urllib's default context is).
fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = crate::trust_store::load()?;
            // ring builds for every target of the release (cargo-zigbuild,
            // no Apple SDK); rustls 0.23.48 deprecates it only for lacking
            // post-quantum key exchange, which the original's OpenSSL 3 lacks too.
            #[allow(deprecated)]
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let inner =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|error| error.to_string())?;
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|error| error.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(OpenSslWording { inner }))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// `context.wrap_socket(socket, server_hostname=host)`: the handshake,
/// verified for `host`, completed before anything is sent and before
/// `deadline` (each socket operation gets only what remains of it).
pub(super) fn wrap(
    mut socket: TcpStream,
    host: &str,
    deadline: Instant,
) -> Result<TlsStream, TlsFailure> {
    let config = client_config().map_err(|message| TlsFailure(io::Error::other(message)))?;
    let name = ServerName::try_from(host.to_string()).map_err(|_| {
        TlsFailure(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid TLS server name: {host}"),
        ))
    })?;
    let mut connection = rustls::ClientConnection::new(config, name)
        .map_err(|error| TlsFailure(io::Error::other(error)))?;
    while connection.is_handshaking() {
        let timeout = remaining(deadline).map_err(|_| TlsFailure(handshake_timed_out()))?;
        socket
            .set_read_timeout(Some(timeout))
            .and_then(|()| socket.set_write_timeout(Some(timeout)))
            .map_err(TlsFailure)?;
        connection
            .complete_io(&mut socket)
            .map_err(|error| TlsFailure(python_words(error)))?;
    }
    Ok(rustls::StreamOwned::new(connection, socket))
}

/// `_ssl.c`'s `TimeoutError` for a handshake the socket timeout ended.
fn handshake_timed_out() -> io::Error {
    io::Error::other(HANDSHAKE_TIMED_OUT)
}

/// A handshake error as `ssl.SSLError` words it; other socket errors
/// (refused, reset) stay as they are.
fn python_words(error: io::Error) -> io::Error {
    let ssl = |reason: &str| io::Error::other(format!("{reason} {SSL_ERROR_LOCATION}"));
    if matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        return handshake_timed_out();
    }
    if error.kind() == io::ErrorKind::UnexpectedEof {
        return ssl("[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol");
    }
    let Some(tls) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return error;
    };
    match tls {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => {
            match other.0.downcast_ref::<VerifyFailure>() {
                Some(failure) => ssl(&format!(
                    "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {}",
                    failure.0
                )),
                None => io::Error::other(tls.to_string()),
            }
        }
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            ssl("[SSL: WRONG_VERSION_NUMBER] wrong version number")
        }
        _ => io::Error::other(tls.to_string()),
    }
}

/// OpenSSL's reason for a failed certificate verification.
#[derive(Debug)]
struct VerifyFailure(String);

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for VerifyFailure {}

/// The WebPKI verifier, with its refusals carrying OpenSSL's words.
#[derive(Debug)]
struct OpenSslWording {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for OpenSslWording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map_err(|error| match error {
                rustls::Error::InvalidCertificate(certificate) => {
                    let reason =
                        openssl_reason(&certificate, end_entity, intermediates, server_name);
                    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                        Arc::new(VerifyFailure(reason)),
                    )))
                }
                other => other,
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls12_signature(message, certificate, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls13_signature(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `X509_verify_cert_error_string` of the error OpenSSL reports for the
/// same chain, and `_ssl.c`'s host-name mismatch sentences.
fn openssl_reason(
    error: &CertificateError,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    server_name: &ServerName<'_>,
) -> String {
    match error {
        CertificateError::UnknownIssuer => {
            if self_issued(end_entity) {
                "self-signed certificate".to_string()
            } else if intermediates.iter().any(self_issued) {
                "self-signed certificate in certificate chain".to_string()
            } else {
                "unable to get local issuer certificate".to_string()
            }
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            match server_name {
                ServerName::IpAddress(_) => format!(
                    "IP address mismatch, certificate is not valid for '{}'.",
                    server_name.to_str()
                ),
                _ => format!(
                    "Hostname mismatch, certificate is not valid for '{}'.",
                    server_name.to_str()
                ),
            }
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "certificate has expired".to_string()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "certificate is not yet valid".to_string()
        }
        CertificateError::BadSignature => "certificate signature failure".to_string(),
        CertificateError::Revoked => "certificate revoked".to_string(),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "unsuitable certificate purpose".to_string()
        }
        other => other.to_string(),
    }
}

/// Whether a certificate's issuer is its subject (compared as encoded).
fn self_issued(certificate: &CertificateDer<'_>) -> bool {
    names(certificate).is_some_and(|(issuer, subject)| issuer == subject)
}

/// The encoded issuer and subject names of an X.509 certificate.
fn names<'a>(certificate: &'a CertificateDer<'_>) -> Option<(&'a [u8], &'a [u8])> {
    let (_, certificate, _) = der_element(certificate.as_ref())?;
    let (_, tbs, _) = der_element(certificate)?;
    let mut rest = tbs;
    // [0] version (optional), serialNumber, signature, issuer, validity, subject.
    if rest.first() == Some(&0xa0) {
        rest = der_element(rest)?.2;
    }
    let (_, _, after_serial) = der_element(rest)?;
    let (_, _, after_signature) = der_element(after_serial)?;
    let (issuer, _, after_issuer) = der_element(after_signature)?;
    let (_, _, after_validity) = der_element(after_issuer)?;
    let (subject, _, _) = der_element(after_validity)?;
    Some((issuer, subject))
}

/// One DER element at the start of `input`: (the whole element, its
/// contents, what follows it).
fn der_element(input: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let first_length = *input.get(1)?;
    let (length, header) = if first_length < 0x80 {
        (usize::from(first_length), 2)
    } else {
        let count = usize::from(first_length & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let bytes = input.get(2..2 + count)?;
        let length = bytes
            .iter()
            .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, 2 + count)
    };
    let end = header.checked_add(length)?;
    let element = input.get(..end)?;
    Some((element, &element[header..], &input[end..]))
}

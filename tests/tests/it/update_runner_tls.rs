//! Managed updates from an HTTPS release host on 127.0.0.1, side by side
//! with the original: a certificate from a test CA that the runners find
//! through `SSL_CERT_FILE` (OpenSSL's default verify paths), the same host
//! with the CA absent, a chain that carries its own root, a certificate for
//! another name, and a trust store that cannot be read at all (where the
//! port fails closed with its own words, docs/design/deviations.md).

use crate::update_runner_support;

use agents_tests::test_tls::TestCa;
use update_runner_support::network::{
    assert_failed, assert_installed, prepare, verify_failed, ARCHIVE_PATH,
};
use update_runner_support::Fixture;

/// An HTTPS release fixture presenting a certificate for `names` from `ca`
/// (with the CA itself in the chain when `with_root`), listening on
/// 127.0.0.1 and named `host_name` in its URLs.
fn https_fixture(name: &str, ca: &TestCa, names: &[&str], host_name: &str) -> Fixture {
    let identity = ca.server(names);
    let mut fixture = Fixture::new_tls(name, identity.server_config());
    fixture.set_host_name(host_name);
    fixture
}

#[test]
fn an_update_over_https_trusts_the_ca_in_ssl_cert_file() {
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    for host_name in ["127.0.0.1", "localhost"] {
        let mut fixture = https_fixture("tls-trusted", &ca, &[host_name], host_name);
        let ca_file = ca.write_pem(fixture.root.path(), "ca.pem");
        prepare(
            &mut fixture,
            &[("SSL_CERT_FILE", ca_file.to_str().unwrap())],
        );
        let (original, port) = fixture.compare(&originals, None);
        assert_installed(&original);
        assert_installed(&port);
        let archives = fixture
            .host_requests()
            .iter()
            .filter(|path| *path == ARCHIVE_PATH)
            .count();
        assert_eq!(archives, 2, "both runners downloaded over HTTPS");
    }
}

#[test]
fn without_the_ca_the_update_fails_with_the_originals_words() {
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    let stranger = TestCa::generate("Another Root");
    let cases: [(&str, bool, Option<&str>, &str); 3] = [
        // Another CA's bundle in SSL_CERT_FILE: the default directory still
        // applies, and holds neither.
        (
            "other-ca",
            false,
            Some("other"),
            "unable to get local issuer certificate",
        ),
        // Nothing set: the distribution's store.
        (
            "system-store",
            false,
            None,
            "unable to get local issuer certificate",
        ),
        // The server sends its root too; it is still not trusted.
        (
            "root-in-chain",
            true,
            Some("other"),
            "self-signed certificate in certificate chain",
        ),
    ];
    for (name, with_root, bundle, reason) in cases {
        let identity = ca.server(&["127.0.0.1"]);
        let identity = if with_root {
            identity.with_chain(ca.certificate())
        } else {
            identity
        };
        let mut fixture = Fixture::new_tls(name, identity.server_config());
        let bundle_file = bundle.map(|file| stranger.write_pem(fixture.root.path(), file));
        let pairs: Vec<(&str, &str)> = bundle_file
            .iter()
            .map(|path| ("SSL_CERT_FILE", path.to_str().unwrap()))
            .collect();
        prepare(&mut fixture, &pairs);
        let (original, port) = fixture.compare(&originals, None);
        assert_failed(&original, &verify_failed(reason));
        assert_failed(&port, &verify_failed(reason));
        assert!(
            fixture.host_requests().is_empty(),
            "{name}: nothing was sent"
        );
    }
}

#[test]
fn a_certificate_for_another_name_fails_like_the_original() {
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    let cases = [
        (
            "127.0.0.1",
            "IP address mismatch, certificate is not valid for '127.0.0.1'.",
        ),
        (
            "localhost",
            "Hostname mismatch, certificate is not valid for 'localhost'.",
        ),
    ];
    for (host_name, reason) in cases {
        let mut fixture = https_fixture("tls-name", &ca, &["other.example"], host_name);
        let ca_file = ca.write_pem(fixture.root.path(), "ca.pem");
        prepare(
            &mut fixture,
            &[("SSL_CERT_FILE", ca_file.to_str().unwrap())],
        );
        let (original, port) = fixture.compare(&originals, None);
        assert_failed(&original, &verify_failed(reason));
        assert_failed(&port, &verify_failed(reason));
        assert!(fixture.host_requests().is_empty(), "nothing was sent");
    }
}

#[test]
fn an_unreadable_trust_store_fails_closed_with_a_clear_message() {
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    let mut fixture = https_fixture("tls-no-store", &ca, &["127.0.0.1"], "127.0.0.1");
    let empty = fixture.root.path().join("empty-certs");
    std::fs::create_dir(&empty).unwrap();
    let missing = fixture.root.path().join("missing.pem");
    let (file, directory) = (missing.to_str().unwrap(), empty.to_str().unwrap());
    prepare(
        &mut fixture,
        &[("SSL_CERT_FILE", file), ("SSL_CERT_DIR", directory)],
    );
    let ours = format!(
        "<urlopen error no trusted CA certificates: none could be read from \
         SSL_CERT_FILE={file}, SSL_CERT_DIR={directory}>"
    );
    // The original's OpenSSL loads nothing either and refuses every server.
    let (original, port) = fixture.compare(&originals, Some(&ours));
    assert_failed(
        &original,
        &verify_failed("unable to get local issuer certificate"),
    );
    assert_failed(&port, &ours);
    assert!(fixture.host_requests().is_empty(), "nothing was sent");
}

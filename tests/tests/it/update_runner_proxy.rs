//! Managed updates through a real forward proxy on loopback (tinyproxy,
//! started and stopped by each test), side by side with the original on the
//! same proxy and CA settings: HTTPS through `https_proxy` (`CONNECT`),
//! HTTP through `http_proxy`, the `no_proxy` forms, Basic credentials from
//! the proxy URL, an unreachable proxy and proxy URLs urllib refuses. Each
//! run's own proxy log lines are compared too: the same requests went
//! through the proxy for both, except the original's health checks, which the
//! port never sends to a proxy (docs/design/deviations.md).

use crate::update_runner_support;

use agents_tests::forward_proxy::ForwardProxy;
use agents_tests::test_tls::TestCa;
use agents_tests::Originals;
use update_runner_support::network::{
    assert_failed, assert_installed, prepare, verify_failed, ARCHIVE_PATH,
};
use update_runner_support::{assert_same, Fixture, Outcome, Served, Side};

/// Both runs and the proxy request lines each caused.
struct Compared {
    original: Outcome,
    original_requests: Vec<String>,
    port: Outcome,
    port_requests: Vec<String>,
}

/// Run the original, then the port, and require the same outcome.
fn compare_through(
    fixture: &Fixture,
    originals: &Originals,
    proxy: &ForwardProxy,
    port_message: Option<&str>,
) -> Compared {
    let before = proxy.requests().len();
    let original = fixture.run(Side::Original(originals));
    let middle = proxy.requests().len();
    let port = fixture.run(Side::Port);
    let requests = proxy.requests();
    assert_same(&original, &port, port_message);
    Compared {
        original,
        original_requests: requests[before..middle].to_vec(),
        port,
        port_requests: requests[middle..].to_vec(),
    }
}

/// The request lines that fetched release files (not the health endpoint).
fn release_requests(requests: &[String]) -> Vec<String> {
    requests
        .iter()
        .filter(|line| !line.contains("/api/health"))
        .cloned()
        .collect()
}

/// An HTTPS release fixture trusted through `SSL_CERT_FILE`, with `pairs`
/// set besides.
fn https_fixture(name: &str, ca: &TestCa, pairs: &[(&str, &str)]) -> Fixture {
    let mut fixture = Fixture::new_tls(name, ca.server(&["127.0.0.1"]).server_config());
    let ca_file = ca.write_pem(fixture.root.path(), "ca.pem");
    let ca_file = ca_file.to_str().unwrap().to_string();
    let mut all = vec![("SSL_CERT_FILE", ca_file.as_str())];
    all.extend_from_slice(pairs);
    prepare(&mut fixture, &all);
    fixture
}

/// An HTTPS fixture when `pairs` starts with `https_proxy`, else a plain
/// HTTP one, with `pairs` set.
fn fixture_for(name: &str, ca: &TestCa, pairs: &[(&str, &str)]) -> Fixture {
    if pairs
        .first()
        .is_some_and(|(variable, _)| *variable == "https_proxy")
    {
        return https_fixture(name, ca, pairs);
    }
    let mut fixture = Fixture::new(name);
    prepare(&mut fixture, pairs);
    fixture
}

#[test]
fn an_https_update_tunnels_through_the_proxy_like_the_original() {
    let originals = agents_tests::require_originals!();
    let Some(proxy) = ForwardProxy::start_or_skip(agents_tests::test_name!(), None) else {
        return;
    };
    let ca = TestCa::generate("Agents Test Root");
    let url = proxy.url();
    let fixture = https_fixture(
        "proxy-connect",
        &ca,
        &[("https_proxy", &url), ("no_proxy", "")],
    );
    let compared = compare_through(&fixture, &originals, &proxy, None);
    assert_installed(&compared.original);
    assert_installed(&compared.port);
    let port = fixture.release_base();
    let authority = port
        .trim_start_matches("https://")
        .trim_end_matches("/releases");
    let tunnel = format!("CONNECT {authority} HTTP/1.0");
    assert!(
        compared.port_requests.len() >= 3,
        "{:?}",
        compared.port_requests
    );
    assert!(
        compared.port_requests.iter().all(|line| *line == tunnel),
        "{:?}",
        compared.port_requests
    );
    assert_eq!(compared.port_requests, compared.original_requests);
    // Both runners downloaded the archive, each through its tunnels.
    let archives = fixture.host_requests();
    assert_eq!(
        archives.iter().filter(|path| *path == ARCHIVE_PATH).count(),
        2
    );
}

#[test]
fn an_http_update_goes_through_http_proxy_but_its_health_checks_do_not() {
    let originals = agents_tests::require_originals!();
    let Some(proxy) = ForwardProxy::start_or_skip(agents_tests::test_name!(), None) else {
        return;
    };
    let mut fixture = Fixture::new("proxy-forward");
    let url = proxy.url();
    prepare(&mut fixture, &[("http_proxy", &url), ("no_proxy", "")]);
    let compared = compare_through(&fixture, &originals, &proxy, None);
    assert_installed(&compared.original);
    assert_installed(&compared.port);
    let archive = format!("GET {} HTTP/1.1", fixture.release_base())
        .replace("/releases ", &format!("{ARCHIVE_PATH} "));
    assert!(
        compared.port_requests.contains(&archive),
        "{:?}",
        compared.port_requests
    );
    assert_eq!(
        compared.port_requests,
        release_requests(&compared.original_requests)
    );
    // The original handed its one-time health credential to the proxy; the port
    // asked the server directly.
    let health = format!(
        "GET http://127.0.0.1:{}/api/health HTTP/1.1",
        fixture.health_port()
    );
    assert!(
        compared.original_requests.contains(&health),
        "{:?}",
        compared.original_requests
    );
    assert!(!compared
        .port_requests
        .iter()
        .any(|line| line.contains("/api/health")));
    let port_health: Vec<String> = fixture
        .health_requests()
        .into_iter()
        .filter(|headers| headers.contains("Bearer port-token"))
        .collect();
    assert!(!port_health.is_empty());
    assert!(
        port_health.iter().all(|headers| !headers.contains("Via:")),
        "{port_health:?}"
    );
}

#[test]
fn an_http_proxy_reached_over_tls_is_verified_like_the_original() {
    // http_proxy=https://...: urllib speaks TLS to the proxy itself (squid's
    // https_port), verified against the same trust store.
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    let identity = ca.server(&["127.0.0.1"]);
    let Some(proxy) = ForwardProxy::start_tls_or_skip(agents_tests::test_name!(), &identity) else {
        return;
    };
    let stranger = TestCa::generate("Another Root");
    let refused = verify_failed("unable to get local issuer certificate");
    for (trusted, outcome) in [(&ca, None), (&stranger, Some(refused.as_str()))] {
        let mut fixture = Fixture::new("proxy-tls");
        let ca_file = trusted.write_pem(fixture.root.path(), "ca.pem");
        let url = proxy.url();
        let pairs = [
            ("http_proxy", url.as_str()),
            ("no_proxy", ""),
            ("SSL_CERT_FILE", ca_file.to_str().unwrap()),
        ];
        prepare(&mut fixture, &pairs);
        let compared = compare_through(&fixture, &originals, &proxy, None);
        assert_eq!(
            compared.port_requests,
            release_requests(&compared.original_requests)
        );
        let Some(message) = outcome else {
            assert_installed(&compared.port);
            let archive =
                format!("GET {}", fixture.release_base()).replace("/releases", ARCHIVE_PATH);
            assert!(
                compared.port_requests.contains(&archive),
                "{:?}",
                compared.port_requests
            );
            continue;
        };
        assert_failed(&compared.port, message);
        assert!(
            compared.port_requests.is_empty(),
            "{:?}",
            compared.port_requests
        );
        assert!(fixture.host_requests().is_empty());
    }
}

#[test]
fn no_proxy_forms_bypass_the_proxy_like_the_original() {
    let originals = agents_tests::require_originals!();
    let Some(proxy) = ForwardProxy::start_or_skip(agents_tests::test_name!(), None) else {
        return;
    };
    let mut fixture = Fixture::new("proxy-bypass");
    let host_port = fixture
        .release_base()
        .trim_start_matches("http://")
        .trim_end_matches("/releases")
        .to_string();
    let url = proxy.url();
    let cases: Vec<(&str, String, bool)> = vec![
        ("no_proxy", "127.0.0.1".into(), true),
        ("no_proxy", "0.0.1".into(), true),
        ("no_proxy", ".0.0.1".into(), true),
        ("no_proxy", "*".into(), true),
        ("no_proxy", host_port.clone(), true),
        ("no_proxy", "localhost, 127.0.0.1".into(), true),
        ("NO_PROXY", "127.0.0.1".into(), true),
        ("no_proxy", "127.0.0.1:1".into(), false),
        ("no_proxy", "example.com,*".into(), false),
        ("no_proxy", String::new(), false),
    ];
    for (variable, value, bypassed) in cases {
        prepare(&mut fixture, &[("http_proxy", &url), (variable, &value)]);
        let compared = compare_through(&fixture, &originals, &proxy, None);
        assert_installed(&compared.port);
        let original_release = release_requests(&compared.original_requests);
        assert_eq!(
            compared.port_requests, original_release,
            "{variable}={value}"
        );
        assert_eq!(
            compared.port_requests.is_empty(),
            bypassed,
            "{variable}={value}: {:?}",
            compared.port_requests
        );
    }
}

#[test]
fn proxy_credentials_are_sent_like_the_original() {
    let originals = agents_tests::require_originals!();
    let test = agents_tests::test_name!();
    let Some(proxy) = ForwardProxy::start_or_skip(test, Some(("alice", "s3cr-t"))) else {
        return;
    };
    let ca = TestCa::generate("Agents Test Root");
    // Percent-escaped in the URL, as urllib unquotes them.
    let good = proxy.url_with_credentials("al%69ce", "s3cr%2Dt");
    let bad = proxy.url_with_credentials("alice", "wrong");
    let cases = [
        ("https_proxy", good.clone(), None),
        // tinyproxy answers a CONNECT with wrong credentials 401, one
        // without any 407.
        (
            "https_proxy",
            bad.clone(),
            Some("<urlopen error Tunnel connection failed: 401 Unauthorized>"),
        ),
        (
            "https_proxy",
            proxy.url(),
            Some("<urlopen error Tunnel connection failed: 407 Proxy Authentication Required>"),
        ),
        ("http_proxy", good, None),
        ("http_proxy", bad, Some("HTTP Error 401: Unauthorized")),
        (
            "http_proxy",
            proxy.url(),
            Some("HTTP Error 407: Proxy Authentication Required"),
        ),
    ];
    for (variable, url, refused) in cases {
        let pairs = [(variable, url.as_str()), ("no_proxy", "")];
        let fixture = fixture_for("proxy-auth", &ca, &pairs);
        let compared = compare_through(&fixture, &originals, &proxy, None);
        match refused {
            None => assert_installed(&compared.port),
            Some(message) => assert_failed(&compared.port, message),
        }
        assert!(!compared.port_requests.is_empty(), "{variable}={url}");
    }
}

#[test]
fn a_redirect_to_an_exempt_host_carries_no_proxy_credentials() {
    // Stricter than the original (docs/design/deviations.md): urllib copies the
    // Proxy-Authorization it added to the redirected request, and sends it
    // to the host no_proxy exempts.
    let originals = agents_tests::require_originals!();
    let test = agents_tests::test_name!();
    let Some(proxy) = ForwardProxy::start_or_skip(test, Some(("alice", "s3cr-t"))) else {
        return;
    };
    let mut fixture = Fixture::new("proxy-redirect");
    let url = proxy.url_with_credentials("alice", "s3cr-t");
    prepare(
        &mut fixture,
        &[("http_proxy", &url), ("no_proxy", "localhost")],
    );
    let archive = fixture.served(ARCHIVE_PATH).unwrap();
    fixture.serve("/moved/archive.tar.gz", archive);
    let moved = fixture
        .release_base()
        .replace("127.0.0.1", "localhost")
        .replace("/releases", "/moved/archive.tar.gz");
    fixture.serve(ARCHIVE_PATH, Served::redirect(&moved));
    let compared = compare_through(&fixture, &originals, &proxy, None);
    assert_installed(&compared.original);
    assert_installed(&compared.port);
    assert!(!compared
        .port_requests
        .iter()
        .any(|line| line.contains("/moved/")));
    let credentials: Vec<Option<String>> = fixture
        .host_seen()
        .iter()
        .filter(|request| request.path == "/moved/archive.tar.gz")
        .map(|request| request.header("Proxy-Authorization").map(str::to_string))
        .collect();
    // base64("alice:s3cr-t"); the original ran first.
    let sent = Some("Basic YWxpY2U6czNjci10".to_string());
    assert_eq!(credentials, [sent, None]);
}

#[test]
fn an_unreachable_or_unusable_proxy_fails_like_the_original() {
    let originals = agents_tests::require_originals!();
    let ca = TestCa::generate("Agents Test Root");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port())
    };
    let refused = "<urlopen error [Errno 111] Connection refused>";
    let cases = [
        ("https_proxy", closed.as_str(), refused),
        ("http_proxy", closed.as_str(), refused),
        (
            "https_proxy",
            "http:/proxy",
            "proxy URL with no authority: 'http:/proxy'",
        ),
        (
            "http_proxy",
            "socks5://127.0.0.1:1",
            "<urlopen error unknown url type: socks5>",
        ),
        ("https_proxy", "127.0.0.1:port", "nonnumeric port: 'port'"),
    ];
    for (variable, value, message) in cases {
        let pairs = [(variable, value), ("no_proxy", "")];
        let fixture = fixture_for("proxy-unusable", &ca, &pairs);
        let (original, port) = fixture.compare(&originals, None);
        assert_failed(&original, message);
        assert_failed(&port, message);
        assert!(fixture.host_requests().is_empty(), "{variable}={value}");
    }
}

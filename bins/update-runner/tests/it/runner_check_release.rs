//! `check_release` and `release_rate_limit_delay` against the original: the same
//! signed releases, served by one real HTTP server on 127.0.0.1, are looked
//! up by `update_runner.check_release` (python3 + cryptography, with its
//! release URLs pointed at the server) and by the port, and both must return
//! the same manifest or fail the same way.

use agents_tests::release_support;
use agents_tests::Originals;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::rate_limit_support::port_rate_limit_delay;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use release_support::{
    manifest_bytes, original_rate_limit_delays, python_oracle, RejectedResponse, Reply, TempDir,
    TestKey, TestServer,
};
use update_runner::release::{
    check_release, ReleaseCheckError, ReleaseEndpoints, ReleaseTrust, INVALID_SIGNATURE_MESSAGE,
    RELEASE_RATE_LIMITED_MESSAGE,
};

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// What one path answers.
#[derive(Clone)]
struct Served {
    status: u16,
    reason: &'static str,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Served {
    fn ok(body: Vec<u8>) -> Self {
        Served {
            status: 200,
            reason: "OK",
            headers: Vec::new(),
            body,
        }
    }

    fn status(status: u16, reason: &'static str, headers: &[(&str, &str)]) -> Self {
        Served {
            status,
            reason,
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }
}

/// A release host: GitHub's release API and tagged assets under one server.
struct ReleaseHost {
    server: TestServer,
    files: Arc<Mutex<HashMap<String, Served>>>,
    key: TestKey,
    _directory: TempDir,
}

impl ReleaseHost {
    fn start() -> Self {
        let directory = TempDir::new("runner-check");
        let key = TestKey::generate(directory.path(), "release-public-key.pem");
        let files: Arc<Mutex<HashMap<String, Served>>> = Arc::default();
        let served = files.clone();
        let server = TestServer::start(move |request| {
            let files = served.lock().unwrap();
            let Some(found) = files.get(&request.path) else {
                return Reply::status(404, "Not Found");
            };
            let mut reply = Reply::ok(&found.body);
            reply.status = found.status;
            reply.reason = found.reason;
            reply.headers = found.headers.clone();
            reply
        });
        ReleaseHost {
            server,
            files,
            key,
            _directory: directory,
        }
    }

    fn release_base(&self) -> String {
        self.server.url("/releases")
    }

    fn api_url(&self) -> String {
        self.server.url("/api/releases?per_page=100")
    }

    fn endpoints(&self) -> ReleaseEndpoints {
        ReleaseEndpoints {
            release_base: self.release_base(),
            releases_api_url: self.api_url(),
            npm_registry_base: None,
        }
    }

    fn clear(&self) {
        self.files.lock().unwrap().clear();
    }

    fn serve(&self, path: &str, served: Served) {
        self.files.lock().unwrap().insert(path.to_string(), served);
    }

    fn manifest(&self, version: &str) -> JsonObject {
        agents_tests::schema1_manifest(&self.release_base(), version, SHA, 1234)
    }

    /// Publish tag `v<version>` with `manifest`, signed by our key.
    fn publish_document(&self, version: &str, manifest: &JsonObject) {
        let bytes = manifest_bytes(&Json::Object(manifest.clone()));
        let signature = self.key.sign(&bytes);
        self.serve(
            &format!("/releases/download/v{version}/agents-server-manifest.json"),
            Served::ok(bytes),
        );
        self.serve(
            &format!("/releases/download/v{version}/agents-server-manifest.sig"),
            Served::ok(signature),
        );
    }

    fn publish(&self, version: &str) {
        self.publish_document(version, &self.manifest(version));
    }

    /// The GitHub API listing: `(tag, draft, prerelease)`.
    fn list(&self, releases: &[(&str, bool, Option<bool>)]) {
        let listing: Vec<Json> = releases
            .iter()
            .map(|(tag, draft, prerelease)| {
                let mut release = json_object! {"tag_name" => *tag, "draft" => *draft};
                if let Some(prerelease) = prerelease {
                    release.insert("prerelease", *prerelease);
                }
                Json::Object(release)
            })
            .collect();
        self.serve(
            "/api/releases?per_page=100",
            Served::ok(python_compat::json::encode_compact(&Json::Array(listing)).unwrap()),
        );
    }
}

/// One lookup: `check_release(key, track, expected_version, require_latest)`.
struct Lookup {
    label: &'static str,
    track: &'static str,
    expected: Option<&'static str>,
    require_latest: bool,
}

const ORACLE: &str = r#"
from pathlib import Path
from urllib.error import HTTPError
data = json.load(sys.stdin)
update_runner.RELEASE_BASE = data["release_base"]
update_runner.RELEASES_API_URL = data["api_url"]
try:
    manifest = update_runner.check_release(
        Path(data["key"]), data["track"], expected_version=data["expected"],
        require_latest=data["require_latest"])
    print(json.dumps({"ok": manifest}))
except HTTPError as exc:
    print(json.dumps({"error": "HTTPError", "code": exc.code, "message": str(exc)}))
except update_runner.ReleaseRateLimitedError as exc:
    print(json.dumps({"error": "ReleaseRateLimitedError", "message": str(exc),
                      "retry_after": exc.retry_after_seconds}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"#;

impl Lookup {
    fn original(&self, originals: &Originals, host: &ReleaseHost) -> Json {
        let input = json_object! {
            "release_base" => host.release_base(),
            "api_url" => host.api_url(),
            "key" => host.key.pem_path.to_string_lossy().into_owned(),
            "track" => self.track,
            "expected" => self.expected,
            "require_latest" => self.require_latest,
        };
        python_oracle(
            originals,
            ORACLE,
            &python_compat::json::encode_compact(&Json::Object(input)).unwrap(),
        )
    }

    fn port(
        &self,
        host: &ReleaseHost,
    ) -> Result<update_runner::release::ReleaseManifest, ReleaseCheckError> {
        let trust = ReleaseTrust::new(host.key.pem_path.clone(), host.endpoints());
        check_release(&trust, self.track, self.expected, self.require_latest)
    }

    /// Both implementations agree; returns the original's outcome for extra checks.
    fn agree(&self, originals: &Originals, host: &ReleaseHost) -> Json {
        let before = host.server.seen().len();
        let original = self.original(originals, host);
        let middle = host.server.seen().len();
        let ours = self.port(host);
        let (original_requests, our_requests) =
            (middle - before, host.server.seen().len() - middle);
        let label = self.label;
        assert_eq!(
            original_requests, our_requests,
            "{label}: request counts differ"
        );
        let error = original.get("error").and_then(Json::as_str);
        let message = original
            .get("message")
            .and_then(Json::as_str)
            .unwrap_or_default();
        match (&ours, error) {
            (Ok(manifest), None) => assert_eq!(
                Some(&Json::Object(manifest.document().clone())),
                original.get("ok"),
                "{label}"
            ),
            (Err(ReleaseCheckError::Unavailable(ours)), Some("ReleaseUnavailableError")) => {
                assert_eq!(ours, message, "{label}")
            }
            (
                Err(ReleaseCheckError::RateLimited {
                    retry_after_seconds,
                }),
                Some("ReleaseRateLimitedError"),
            ) => {
                assert_eq!(message, RELEASE_RATE_LIMITED_MESSAGE, "{label}");
                let original_delay = original.get("retry_after").and_then(Json::as_int).unwrap();
                assert_eq!(i128::from(*retry_after_seconds), original_delay, "{label}");
            }
            (Err(ReleaseCheckError::Status(status)), Some("HTTPError")) => {
                assert_eq!(
                    Some(i128::from(status.code)),
                    original.get("code").and_then(Json::as_int)
                );
                assert_eq!(status.to_string(), message, "{label}");
            }
            (Err(ReleaseCheckError::Failed(ours)), Some("InvalidSignature")) => {
                assert_eq!(message, "", "{label}");
                assert_eq!(ours.message(), INVALID_SIGNATURE_MESSAGE, "{label}");
            }
            (Err(ReleaseCheckError::Failed(ours)), Some(class)) => {
                assert_eq!(ours.message(), message, "{label}");
                // `type(exc).__name__`, without the module a traceback adds.
                let name = ours.class().python_name().rsplit('.').next().unwrap();
                assert_eq!(name, class, "{label}");
            }
            _ => panic!("{label}: ours {ours:?}, original {original:?}"),
        }
        original
    }
}

fn lookup(
    label: &'static str,
    track: &'static str,
    expected: Option<&'static str>,
    require_latest: bool,
) -> Lookup {
    Lookup {
        label,
        track,
        expected,
        require_latest,
    }
}

#[test]
fn pinned_releases_match_the_original() {
    let originals = agents_tests::require_originals!();
    let host = ReleaseHost::start();
    host.publish("1.2.3");
    host.publish("1.3.0-beta.2");
    let original = lookup("pinned stable", "stable", Some("1.2.3"), false).agree(&originals, &host);
    assert_eq!(
        original.get("ok").and_then(|m| m.get("version")),
        Some(&Json::from("1.2.3"))
    );
    lookup("pinned beta", "beta", Some("1.3.0-beta.2"), false).agree(&originals, &host);
    lookup("pinned with spaces", "stable", Some(" 1.2.3 "), false).agree(&originals, &host);
    let original =
        lookup("pinned missing", "stable", Some("1.2.4"), false).agree(&originals, &host);
    assert_eq!(
        original.get("message"),
        Some(&Json::from(
            "Signed stable AgentsServer release 1.2.4 is unavailable."
        ))
    );
    lookup("pinned invalid", "stable", Some("1.2"), false).agree(&originals, &host);
    lookup("pinned off track", "stable", Some("1.3.0-beta.2"), false).agree(&originals, &host);
    lookup("track refused", "nightly", Some("1.2.3"), false).agree(&originals, &host);
    // The signature missing alone is "unavailable" too.
    host.publish("1.2.5");
    host.files
        .lock()
        .unwrap()
        .remove("/releases/download/v1.2.5/agents-server-manifest.sig");
    lookup("signature missing", "stable", Some("1.2.5"), false).agree(&originals, &host);
    // A manifest that names another version under this tag is refused.
    host.publish_document("1.2.6", &host.manifest("1.2.7"));
    lookup("foreign manifest", "stable", Some("1.2.6"), false).agree(&originals, &host);
    // A tampered manifest fails its signature.
    host.publish("1.2.8");
    host.serve(
        "/releases/download/v1.2.8/agents-server-manifest.json",
        Served::ok(
            manifest_bytes(&Json::Object(host.manifest("1.2.8")))
                .into_iter()
                .chain(*b" ")
                .collect(),
        ),
    );
    lookup("bad signature", "stable", Some("1.2.8"), false).agree(&originals, &host);
    host.serve(
        "/releases/download/v1.2.3/agents-server-manifest.json",
        Served::status(500, "Internal Server Error", &[]),
    );
    lookup("manifest server error", "stable", Some("1.2.3"), false).agree(&originals, &host);
}

#[test]
fn discovery_matches_the_original() {
    let originals = agents_tests::require_originals!();
    let host = ReleaseHost::start();
    host.publish("1.0.0");
    host.publish("1.2.3");
    host.publish("1.2.4");
    host.publish("1.4.0-beta.1");
    host.list(&[
        ("v1.0.0", false, Some(false)),
        ("v1.2.3", false, None),
        ("v1.2.4", true, Some(false)),
        ("v1.3.0", false, Some(false)),
        ("v1.4.0-beta.1", false, Some(true)),
        ("1.9.0", false, None),
        ("v2.0.0", false, Some(true)),
    ]);
    // 1.2.4 is a draft and 2.0.0 lies about being a prerelease; 1.3.0 is
    // listed but its manifest answers 404, so the next candidate wins.
    let original = lookup("latest stable", "stable", None, false).agree(&originals, &host);
    assert_eq!(
        original.get("ok").and_then(|m| m.get("version")),
        Some(&Json::from("1.2.3"))
    );
    let original = lookup("latest beta", "beta", None, false).agree(&originals, &host);
    assert_eq!(
        original.get("ok").and_then(|m| m.get("version")),
        Some(&Json::from("1.4.0-beta.1"))
    );
    lookup("still latest", "stable", Some("1.2.3"), true).agree(&originals, &host);
    let original =
        lookup("no longer latest", "stable", Some("1.0.0"), true).agree(&originals, &host);
    assert_eq!(
        original.get("message"),
        Some(&Json::from(
            "requested stable release 1.0.0 is no longer the latest signed stable release 1.2.3"
        ))
    );
    // A newest manifest that fails verification is an error, not skipped.
    host.publish_document("1.2.3", &host.manifest("1.2.2"));
    lookup("newest manifest refused", "stable", None, false).agree(&originals, &host);

    host.list(&[
        ("v1.4.0-beta.1", false, Some(true)),
        ("v1.3.0", false, None),
    ]);
    lookup("nothing signed on the track", "stable", None, false).agree(&originals, &host);
    host.list(&[]);
    lookup("empty listing", "stable", None, false).agree(&originals, &host);
    host.serve(
        "/api/releases?per_page=100",
        Served::ok(b"{\"tag_name\": \"v1.0.0\"}".to_vec()),
    );
    lookup("listing not an array", "stable", None, false).agree(&originals, &host);
    host.serve("/api/releases?per_page=100", Served::ok(b"[{".to_vec()));
    lookup("listing invalid JSON", "stable", None, false).agree(&originals, &host);
    host.serve("/api/releases?per_page=100", Served::ok(b"[\xff]".to_vec()));
    lookup("listing not text", "stable", None, false).agree(&originals, &host);
    host.files
        .lock()
        .unwrap()
        .remove("/api/releases?per_page=100");
    let original = lookup("nothing published", "stable", None, false).agree(&originals, &host);
    assert_eq!(
        original.get("message"),
        Some(&Json::from(
            "No signed AgentsServer release has been published yet."
        ))
    );
    lookup(
        "latest required, nothing published",
        "stable",
        Some("1.2.3"),
        true,
    )
    .agree(&originals, &host);
}

#[test]
fn rejected_requests_become_rate_limits_like_the_original() {
    let originals = agents_tests::require_originals!();
    let host = ReleaseHost::start();
    let api = "/api/releases?per_page=100";
    for (label, served) in [
        ("429", Served::status(429, "Too Many Requests", &[])),
        (
            "429 retry-after",
            Served::status(429, "Too Many Requests", &[("Retry-After", "120")]),
        ),
        (
            "403 exhausted",
            Served::status(403, "Forbidden", &[("X-RateLimit-Remaining", "0")]),
        ),
        (
            "403 retry-after",
            Served::status(403, "Forbidden", &[("Retry-After", "7.2")]),
        ),
        (
            "403 remaining",
            Served::status(403, "Forbidden", &[("X-RateLimit-Remaining", "12")]),
        ),
        ("403 plain", Served::status(403, "Forbidden", &[])),
        ("500", Served::status(500, "Internal Server Error", &[])),
        (
            "429 zero",
            Served::status(429, "Too Many Requests", &[("Retry-After", "0")]),
        ),
    ] {
        host.clear();
        host.serve(api, served);
        Lookup {
            label,
            track: "stable",
            expected: None,
            require_latest: false,
        }
        .agree(&originals, &host);
    }
    // Rate limiting of a pinned asset is recognised as well.
    host.clear();
    host.serve(
        "/releases/download/v1.2.3/agents-server-manifest.json",
        Served::status(429, "Too Many Requests", &[("Retry-After", "30")]),
    );
    lookup("pinned asset limited", "stable", Some("1.2.3"), false).agree(&originals, &host);
}

#[test]
fn rate_limit_delays_match_the_original() {
    let originals = agents_tests::require_originals!();
    const NOW: f64 = 1_700_000_000.25;
    let cases: Vec<RejectedResponse> = vec![
        (429, vec![]),
        (429, vec![("Retry-After", "30")]),
        (429, vec![("Retry-After", " 2.5 ")]),
        (429, vec![("Retry-After", "-5")]),
        (429, vec![("Retry-After", "nan")]),
        (429, vec![("Retry-After", "inf")]),
        (429, vec![("Retry-After", "1_000")]),
        (429, vec![("Retry-After", "Tue, 14 Nov 2023 22:15:00 GMT")]),
        (429, vec![("Retry-After", "Tue, 14 Nov 2023 22:10:00 GMT")]),
        (429, vec![("Retry-After", "14 Nov 2023 23:15:00 +0100")]),
        (
            429,
            vec![("Retry-After", "Tuesday, 14-Nov-23 22:15:00 GMT")],
        ),
        (429, vec![("Retry-After", "soon")]),
        (429, vec![("X-RateLimit-Reset", "1700000090")]),
        (
            429,
            vec![("X-RateLimit-Reset", "1700000090"), ("Retry-After", "200")],
        ),
        (
            403,
            vec![
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "1700000005.5"),
            ],
        ),
        (
            403,
            vec![
                ("X-RateLimit-Remaining", "1"),
                ("X-RateLimit-Reset", "1700000005"),
            ],
        ),
        (403, vec![("Retry-After", "")]),
        (403, vec![]),
        (404, vec![("Retry-After", "30")]),
        (500, vec![]),
    ];
    let original = original_rate_limit_delays(&originals, &cases, NOW);
    for (case, expected) in cases.iter().zip(&original) {
        assert_eq!(&port_rate_limit_delay(case, NOW), expected, "{case:?}");
    }
}

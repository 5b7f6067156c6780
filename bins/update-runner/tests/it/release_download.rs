//! Bounded downloads and streamed archive verification against a real HTTP
//! server on 127.0.0.1, compared with the original's `download_bytes`,
//! `download_npm_archive` and run_update's checksum check on the same URLs.

use agents_tests::release_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine as _;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use release_support::{b64, python_oracle, Reply, SeenRequest, TempDir, TestKey, TestServer};
use sha2::{Digest, Sha256, Sha512};
use update_runner::release::{
    download_bytes, download_release_archive, FetchError, ReleaseEndpoints, ReleaseManifest,
    ReleaseTrust,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A path the metadata server serves and its answer.
type Route = (&'static str, fn() -> Reply);

/// The metadata server's routes. Any other path is a 500.
#[rustfmt::skip]
const METADATA_ROUTES: &[Route] = &[
    ("/ok", || Reply::ok(b"hello")),
    ("/exact", || Reply::ok(&[b'x'; 100])),
    ("/over", || Reply::ok(&[b'x'; 101])),
    ("/over-undeclared", || Reply { content_length: None, ..Reply::ok(&[b'x'; 101]) }),
    ("/declared-over", || Reply { content_length: Some(5000), ..Reply::ok(b"short") }),
    ("/short-body", || Reply { content_length: Some(50), ..Reply::ok(b"only this") }),
    ("/missing", || Reply::status(404, "Not Found")),
    ("/limited", rate_limited),
    ("/redirect", || Reply::redirect(302, "/ok")),
    ("/redirect-308", || Reply::redirect(308, "/ok")),
    ("/redirect-relative", || Reply::redirect(301, "ok")),
    // An absolute redirect to a port nobody listens on.
    ("/redirect-absolute", || Reply::redirect(307, "http://127.0.0.1:1/unused")),
    ("/loop", || Reply::redirect(302, "/loop")),
    ("/no-location", || Reply::status(302, "Found")),
    ("/created", || Reply { status: 201, reason: "Created", ..Reply::ok(b"made") }),
];

/// A 403 with `Retry-After`, as GitHub rate-limits.
fn rate_limited() -> Reply {
    let mut reply = Reply::status(403, "Forbidden");
    reply
        .headers
        .push(("Retry-After".to_string(), "30".to_string()));
    reply
}

fn serve_metadata(request: &SeenRequest) -> Reply {
    METADATA_ROUTES
        .iter()
        .find(|(path, _)| *path == request.path)
        .map_or_else(
            || Reply::status(500, "Internal Server Error"),
            |(_, reply)| reply(),
        )
}

/// The paths both sides download with a 100-byte limit, in order; the last
/// is no route's.
#[rustfmt::skip]
const METADATA_DOWNLOADS: &[&str] = &[
    "/ok", "/exact", "/over", "/over-undeclared", "/declared-over", "/short-body", "/missing",
    "/limited", "/redirect", "/redirect-308", "/redirect-relative", "/redirect-absolute",
    "/loop", "/no-location", "/created", "/anything-else",
];

/// `download_bytes(url, 100)` in the original for each URL: the bytes
/// (base64), the HTTP error's status and message, or another error.
const DOWNLOAD_ORACLE: &str = r#"
from urllib.error import HTTPError
out = []
for url in json.load(sys.stdin):
    try:
        out.append({"ok": base64.b64encode(update_runner.download_bytes(url, 100)).decode()})
    except HTTPError as exc:
        out.append({"status": exc.code, "message": str(exc)})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#;

/// Our download of `path` must end as the original's: the same bytes, the
/// same HTTP status and message, or the same failure message.
fn assert_same_download(path: &str, ours: &Result<Vec<u8>, FetchError>, expected: &Json) {
    let expected_message = expected.get("message").and_then(Json::as_str);
    match (ours, expected.get("ok"), expected.get("status")) {
        (Ok(bytes), Some(original_bytes), None) => {
            assert_eq!(&Json::from(b64(bytes)), original_bytes, "{path}")
        }
        (Err(FetchError::Status(status)), None, Some(code)) => {
            assert_eq!(Some(i128::from(status.code)), code.as_int(), "{path}");
            assert_eq!(
                Some(status.to_string().as_str()),
                expected_message,
                "{path}"
            );
        }
        (Err(FetchError::Failed(error)), None, None) => {
            assert_eq!(Some(error.message()), expected_message, "{path}")
        }
        _ => panic!("{path}: ours {ours:?}, original {expected:?}"),
    }
}

#[test]
fn metadata_downloads_match_the_original() {
    let originals = agents_tests::require_originals!();
    let server = TestServer::start(serve_metadata);
    let urls: Vec<Json> = METADATA_DOWNLOADS
        .iter()
        .map(|path| Json::from(server.url(path)))
        .collect();
    let original = python_oracle(
        &originals,
        DOWNLOAD_ORACLE,
        &python_compat::json::encode_compact(&Json::Array(urls)).unwrap(),
    );
    let python_requests = server.seen().len();
    for (path, expected) in METADATA_DOWNLOADS.iter().zip(original.as_array().unwrap()) {
        let ours = download_bytes(&server.url(path), 100);
        assert_same_download(path, &ours, expected);
    }
    // Every request of ours names the updater.
    let seen = server.seen();
    assert!(
        seen.len() > python_requests,
        "our requests reached the server"
    );
    for request in &seen[python_requests..] {
        assert_eq!(
            request.header("User-Agent"),
            Some("AgentsServer-Updater/1"),
            "{}",
            request.path
        );
    }
    // A rate limit keeps its headers, for the caller's back-off.
    let limited = download_bytes(&server.url("/limited"), 100).unwrap_err();
    let FetchError::Status(status) = limited else {
        panic!("403 must stay an HTTP status")
    };
    assert_eq!(status.header("retry-after"), Some("30"));
}

struct Release {
    manifest: JsonObject,
}

fn legacy_manifest(server: &TestServer, archive: &[u8], sha: &str) -> Release {
    let version = "1.0.7";
    Release {
        manifest: json_object! {
            "schema" => 1,
            "version" => version,
            "archive" => json_object! {
                "name" => format!("agents-server-{version}.tar.gz"),
                "url" => server.url(&format!("/releases/download/v{version}/agents-server-{version}.tar.gz")),
                "sha256" => sha,
                "size" => archive.len(),
            },
        },
    }
}

/// The npm subresource integrity of `archive`: its SHA-512 in base64.
fn npm_integrity(archive: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(archive))
    )
}

fn npm_manifest(server: &TestServer, archive: &[u8]) -> Release {
    let version = "1.0.8";
    Release {
        manifest: json_object! {
            "schema" => 2,
            "version" => version,
            "track" => "stable",
            "distribution" => "npm",
            "api_contract_version" => 29,
            "npm" => json_object! {
                "name" => "@agentsdock/server",
                "version" => version,
                "integrity" => npm_integrity(archive),
            },
            "archive" => json_object! {
                "name" => format!("server-{version}.tgz"),
                "url" => server.url(&format!("/npm/server-{version}.tgz")),
                "sha256" => hex(&Sha256::digest(archive)),
                "size" => archive.len(),
            },
        },
    }
}

impl Release {
    /// The same release with `key` of its `scope` object (`npm`, `archive`)
    /// set to `value`.
    fn with(mut self, scope: &str, key: &str, value: impl Into<Json>) -> Release {
        let mut object = self
            .manifest
            .get(scope)
            .unwrap()
            .as_object()
            .unwrap()
            .clone();
        object.insert(key, value);
        self.manifest.insert(scope, object);
        self
    }
}

fn verify(key: &TestKey, server: &TestServer, release: &Release) -> ReleaseManifest {
    let bytes = python_compat::json::encode_indented(&Json::Object(release.manifest.clone()));
    let trust = ReleaseTrust::new(
        &key.pem_path,
        ReleaseEndpoints {
            release_base: server.url("/releases"),
            releases_api_url: server.url("/api"),
            npm_registry_base: Some(server.url("/npm/")),
        },
    );
    trust
        .verify_manifest(&bytes, &key.sign(&bytes), None, "stable", true)
        .unwrap()
}

/// A release server streaming one legacy and one npm archive, large enough
/// to arrive in many reads.
struct ServedArchives {
    server: TestServer,
    /// `agents-server-1.0.7.tar.gz`.
    legacy: Vec<u8>,
    /// `server-1.0.8.tgz`: other bytes than the legacy archive.
    npm: Vec<u8>,
}

impl ServedArchives {
    fn start() -> ServedArchives {
        let legacy: Vec<u8> = (0..300_000u32).map(|index| (index % 251) as u8).collect();
        let npm: Vec<u8> = legacy.iter().rev().copied().collect();
        let (served_legacy, served_npm) = (legacy.clone(), npm.clone());
        let server = TestServer::start(move |request| match request.path.as_str() {
            "/releases/download/v1.0.7/agents-server-1.0.7.tar.gz" => Reply::ok(&served_legacy),
            "/npm/server-1.0.8.tgz" => Reply::ok(&served_npm),
            _ => Reply::status(404, "Not Found"),
        });
        ServedArchives {
            server,
            legacy,
            npm,
        }
    }

    /// The legacy archive's SHA-256, as its manifest gives it.
    fn legacy_sha256(&self) -> String {
        hex(&Sha256::digest(&self.legacy))
    }

    /// The legacy release of the served archive, with `sha256` as checksum.
    fn legacy_release(&self, sha256: &str) -> Release {
        legacy_manifest(&self.server, &self.legacy, sha256)
    }

    /// The npm release of the served archive.
    fn npm_release(&self) -> Release {
        npm_manifest(&self.server, &self.npm)
    }
}

/// (description, the release of the served archives it makes).
type ReleaseRow = (&'static str, fn(&ServedArchives) -> Release);

/// The releases both sides download.
#[rustfmt::skip]
const STREAMED_RELEASES: &[ReleaseRow] = &[
    ("legacy", |s| s.legacy_release(&s.legacy_sha256())),
    ("legacy checksum differs", |s| s.legacy_release(&"0".repeat(64))),
    ("legacy uppercase checksum", |s| s.legacy_release(&s.legacy_sha256().to_uppercase())),
    ("npm", ServedArchives::npm_release),
    ("npm integrity differs", |s| s.npm_release().with("npm", "integrity", npm_integrity(&flipped(&s.npm)))),
    ("npm size differs", |s| s.npm_release().with("archive", "size", s.npm.len() + 1)),
];

/// `bytes` with the lowest bit of each flipped: same length, other content.
fn flipped(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().map(|byte| byte ^ 1).collect()
}

/// The original's archive download for each manifest (npm or legacy) with
/// run_update's checksum check: the SHA-256 of what it kept, or the error.
const ARCHIVE_DOWNLOAD_ORACLE: &str = r#"
import hashlib
out = []
for manifest in json.load(sys.stdin):
    try:
        if manifest.get("schema") == 2:
            data = update_runner.download_npm_archive(manifest)
        else:
            data = update_runner.download_bytes(manifest["archive"]["url"], update_runner.MAX_ARCHIVE_BYTES, timeout=120.0)
        if hashlib.sha256(data).hexdigest() != manifest["archive"]["sha256"]:
            raise RuntimeError("release archive checksum does not match the signed manifest")
        out.append({"ok": hashlib.sha256(data).hexdigest()})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#;

/// Our streamed download of `manifest` into the empty `target` must end as
/// the original's: the same archive, kept private, or the same refusal with
/// nothing left on disk. Says whether the archive was accepted.
fn assert_same_archive_download(
    label: &str,
    manifest: &ReleaseManifest,
    target: &Path,
    expected: &Json,
) -> bool {
    match (
        download_release_archive(manifest, target),
        expected.get("ok"),
    ) {
        (Ok(path), Some(digest)) => {
            assert_eq!(path, target.join(manifest.archive_name()), "{label}");
            let content = std::fs::read(&path).unwrap();
            assert_eq!(
                &Json::from(hex(&Sha256::digest(&content))),
                digest,
                "{label}"
            );
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{label}: the archive must be private");
            true
        }
        (Err(error), None) => {
            assert_eq!(
                Some(error.message()),
                expected.get("message").and_then(Json::as_str),
                "{label}"
            );
            assert_eq!(
                std::fs::read_dir(target).unwrap().count(),
                0,
                "{label}: a refused archive must not stay on disk"
            );
            false
        }
        (ours, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
    }
}

#[test]
fn archives_are_verified_while_streaming_like_the_original() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("release-download");
    let key = TestKey::generate(dir.path(), "key.pem");
    let served = ServedArchives::start();
    let releases: Vec<(&str, Release)> = STREAMED_RELEASES
        .iter()
        .map(|(label, release)| (*label, release(&served)))
        .collect();
    let manifests: Vec<ReleaseManifest> = releases
        .iter()
        .map(|(_, release)| verify(&key, &served.server, release))
        .collect();
    let documents = releases
        .iter()
        .map(|(_, release)| Json::Object(release.manifest.clone()))
        .collect();
    let original = python_oracle(
        &originals,
        ARCHIVE_DOWNLOAD_ORACLE,
        &python_compat::json::encode_compact(&Json::Array(documents)).unwrap(),
    );
    let mut accepted = 0;
    for (((label, _), manifest), expected) in releases
        .iter()
        .zip(&manifests)
        .zip(original.as_array().unwrap())
    {
        let target = dir.path().join(label.replace(' ', "-"));
        std::fs::create_dir(&target).unwrap();
        if assert_same_archive_download(label, manifest, &target, expected) {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 2);
}

#[test]
fn npm_archives_refuse_redirects_and_changed_sizes() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("release-npm-download");
    let key = TestKey::generate(dir.path(), "key.pem");
    let archive = vec![42u8; 4096];
    let body = archive.clone();
    let server = TestServer::start(move |request| match request.path.as_str() {
        "/npm/server-1.0.8.tgz" => Reply::redirect(302, "/cdn/server-1.0.8.tgz"),
        "/cdn/server-1.0.8.tgz" => Reply::ok(&body),
        _ => Reply::status(404, "Not Found"),
    });
    let release = npm_manifest(&server, &archive);
    let manifest = verify(&key, &server, &release);
    let original = python_oracle(
        &originals,
        r#"
manifest = json.load(sys.stdin)
try:
    update_runner.download_npm_archive(manifest)
    print(json.dumps({"ok": True}))
except Exception as exc:
    print(json.dumps({"message": str(exc)}))
"#,
        &python_compat::json::encode_compact(&Json::Object(release.manifest.clone())).unwrap(),
    );
    let error = download_release_archive(&manifest, dir.path()).unwrap_err();
    assert_eq!(
        error.message(),
        "npm release archive redirects are not allowed"
    );
    assert_eq!(
        Some(error.message()),
        original.get("message").and_then(Json::as_str)
    );
    assert!(
        !server
            .seen()
            .iter()
            .any(|request| request.path.starts_with("/cdn/")),
        "the redirect target must never be fetched"
    );

    let lying = TestServer::start(|_| Reply {
        content_length: Some(4000),
        ..Reply::ok(&[42u8; 4000])
    });
    let release = npm_manifest(&lying, &archive);
    let manifest = verify(&key, &lying, &release);
    let error = download_release_archive(&manifest, dir.path()).unwrap_err();
    assert_eq!(error.message(), "npm release archive size changed");
}

/// A loopback peer for one connection: it reads what the client sends
/// first, then writes `reply` (nothing: it just closes) and closes.
fn one_shot_peer(reply: &'static [u8]) -> (u16, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.read(&mut [0u8; 4096]);
            let _ = stream.write_all(reply);
        }
    });
    (port, peer)
}

#[test]
fn failed_handshakes_are_worded_as_cpython_words_them() {
    // Production endpoints are https: a peer that closes during the
    // handshake, or answers in plain HTTP, fails the request with the
    // exception text CPython 3.11's urlopen gives for the same peer.
    for reply in [&b""[..], b"HTTP/1.1 400 Bad Request\r\n\r\n"] {
        let (port, peer) = one_shot_peer(reply);
        let output = std::process::Command::new("python3")
            .args([
                "-B",
                "-c",
                PYTHON_URLOPEN,
                &format!("https://127.0.0.1:{port}/"),
            ])
            .output()
            .expect("python3 (scripts/setup.sh installs it)");
        peer.join().unwrap();
        let python = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(python.starts_with("<urlopen error [SSL: "), "{python}");
        let (port, peer) = one_shot_peer(reply);
        let FetchError::Failed(error) =
            download_bytes(&format!("https://127.0.0.1:{port}/"), 100).unwrap_err()
        else {
            panic!("a TLS failure is not an HTTP status")
        };
        peer.join().unwrap();
        assert_eq!(error.message(), python);
    }
}

/// Prints `str()` of what `urlopen(sys.argv[1])` raises.
const PYTHON_URLOPEN: &str = r#"
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=10)
except Exception as exc:
    print(exc)
"#;

//! Bounded downloads and streamed archive verification against a real HTTP
//! server on 127.0.0.1, compared with the original's `download_bytes`,
//! `download_npm_archive` and run_update's checksum check on the same URLs.

use agents_tests::release_support;

use std::os::unix::fs::PermissionsExt;

use base64::Engine as _;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use release_support::{b64, python_oracle, Reply, TempDir, TestKey, TestServer};
use sha2::{Digest, Sha256, Sha512};
use update_runner::release::{
    download_bytes, download_release_archive, FetchError, ReleaseEndpoints, ReleaseManifest,
    ReleaseTrust,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn metadata_downloads_match_the_original() {
    let originals = agents_tests::require_originals!();
    let server = TestServer::start(|request| match request.path.as_str() {
        "/ok" => Reply::ok(b"hello"),
        "/exact" => Reply::ok(&[b'x'; 100]),
        "/over" => Reply::ok(&[b'x'; 101]),
        "/over-undeclared" => Reply {
            content_length: None,
            ..Reply::ok(&[b'x'; 101])
        },
        "/declared-over" => Reply {
            content_length: Some(5000),
            ..Reply::ok(b"short")
        },
        "/short-body" => Reply {
            content_length: Some(50),
            ..Reply::ok(b"only this")
        },
        "/missing" => Reply::status(404, "Not Found"),
        "/limited" => {
            let mut reply = Reply::status(403, "Forbidden");
            reply
                .headers
                .push(("Retry-After".to_string(), "30".to_string()));
            reply
        }
        "/redirect" => Reply::redirect(302, "/ok"),
        "/redirect-308" => Reply::redirect(308, "/ok"),
        "/redirect-relative" => Reply::redirect(301, "ok"),
        "/redirect-absolute" => Reply::redirect(307, "http://127.0.0.1:1/unused"),
        "/loop" => Reply::redirect(302, "/loop"),
        "/no-location" => Reply::status(302, "Found"),
        "/created" => Reply {
            status: 201,
            reason: "Created",
            ..Reply::ok(b"made")
        },
        _ => Reply::status(500, "Internal Server Error"),
    });
    let paths = [
        "/ok",
        "/exact",
        "/over",
        "/over-undeclared",
        "/declared-over",
        "/short-body",
        "/missing",
        "/limited",
        "/redirect",
        "/redirect-308",
        "/redirect-relative",
        "/loop",
        "/no-location",
        "/created",
        "/anything-else",
    ];
    let urls: Vec<Json> = paths
        .iter()
        .map(|path| Json::from(server.url(path)))
        .collect();
    let original = python_oracle(
        &originals,
        r#"
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
"#,
        &python_compat::json::encode_compact(&Json::Array(urls)).unwrap(),
    );
    let python_requests = server.seen().len();
    for (path, expected) in paths.iter().zip(original.as_array().unwrap()) {
        let ours = download_bytes(&server.url(path), 100);
        match (&ours, expected.get("ok"), expected.get("status")) {
            (Ok(bytes), Some(original_bytes), None) => {
                assert_eq!(&Json::from(b64(bytes)), original_bytes, "{path}")
            }
            (Err(FetchError::Status(status)), None, Some(code)) => {
                assert_eq!(Some(i128::from(status.code)), code.as_int(), "{path}");
                assert_eq!(
                    Some(status.to_string().as_str()),
                    expected.get("message").and_then(Json::as_str),
                    "{path}"
                );
            }
            (Err(FetchError::Failed(error)), None, None) => assert_eq!(
                Some(error.message()),
                expected.get("message").and_then(Json::as_str),
                "{path}"
            ),
            _ => panic!("{path}: ours {ours:?}, original {expected:?}"),
        }
    }
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

fn npm_manifest(server: &TestServer, archive: &[u8]) -> Release {
    let version = "1.0.8";
    let integrity = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(archive))
    );
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
                "integrity" => integrity,
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

#[test]
fn archives_are_verified_while_streaming_like_the_original() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("release-download");
    let key = TestKey::generate(dir.path(), "key.pem");
    let archive: Vec<u8> = (0..300_000u32).map(|index| (index % 251) as u8).collect();
    let npm_archive: Vec<u8> = archive.iter().rev().copied().collect();
    let served = archive.clone();
    let served_npm = npm_archive.clone();
    let server = TestServer::start(move |request| {
        let path = request.path.as_str();
        match path {
            "/releases/download/v1.0.7/agents-server-1.0.7.tar.gz" => Reply::ok(&served),
            "/npm/server-1.0.8.tgz" => Reply::ok(&served_npm),
            _ => Reply::status(404, "Not Found"),
        }
    });
    let sha = hex(&Sha256::digest(&archive));
    let mut cases: Vec<(&str, Release)> = vec![
        ("legacy", legacy_manifest(&server, &archive, &sha)),
        (
            "legacy checksum differs",
            legacy_manifest(&server, &archive, &"0".repeat(64)),
        ),
        (
            "legacy uppercase checksum",
            legacy_manifest(&server, &archive, &sha.to_uppercase()),
        ),
        ("npm", npm_manifest(&server, &npm_archive)),
    ];
    let mut wrong_content = npm_manifest(&server, &npm_archive);
    let other: Vec<u8> = npm_archive.iter().map(|byte| byte ^ 1).collect();
    let other_manifest = npm_manifest(&server, &other);
    wrong_content
        .manifest
        .insert("npm", other_manifest.manifest.get("npm").unwrap().clone());
    cases.push(("npm integrity differs", wrong_content));
    let mut wrong_size = npm_manifest(&server, &npm_archive);
    let mut archive_meta = wrong_size
        .manifest
        .get("archive")
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    archive_meta.insert("size", npm_archive.len() + 1);
    wrong_size.manifest.insert("archive", archive_meta);
    cases.push(("npm size differs", wrong_size));
    let manifests: Vec<ReleaseManifest> = cases
        .iter()
        .map(|(_, release)| verify(&key, &server, release))
        .collect();
    let original = python_oracle(
        &originals,
        r#"
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
"#,
        &python_compat::json::encode_compact(&Json::Array(
            cases
                .iter()
                .map(|(_, release)| Json::Object(release.manifest.clone()))
                .collect(),
        ))
        .unwrap(),
    );
    let mut accepted = 0;
    for (((label, _), manifest), expected) in cases
        .iter()
        .zip(&manifests)
        .zip(original.as_array().unwrap())
    {
        let target = dir.path().join(label.replace(' ', "-"));
        std::fs::create_dir(&target).unwrap();
        match (
            download_release_archive(manifest, &target),
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
                accepted += 1;
            }
            (Err(error), None) => {
                assert_eq!(
                    Some(error.message()),
                    expected.get("message").and_then(Json::as_str),
                    "{label}"
                );
                assert_eq!(
                    std::fs::read_dir(&target).unwrap().count(),
                    0,
                    "{label}: a refused archive must not stay on disk"
                );
            }
            (ours, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
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

//! `verify_manifest` and `verify_npm_release_envelope` against the original: the
//! same signed bytes, keys and pins go to our port and to `update_runner.py`
//! (python3 + cryptography), and both must accept with the same document or
//! refuse with the same message.

use agents_tests::release_support;
use agents_tests::Originals;

use python_compat::{
    json::{Json, JsonObject},
    json_object, ErrorClass,
};
use release_support::{
    b64, manifest_bytes, python_oracle, TempDir, TestKey, TEST_NPM_BASE, TEST_RELEASE_BASE,
};
use update_runner::release::{
    ReleaseEndpoints, ReleaseManifest, ReleaseTrust, INVALID_SIGNATURE_MESSAGE,
};

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn endpoints() -> ReleaseEndpoints {
    ReleaseEndpoints {
        release_base: TEST_RELEASE_BASE.to_string(),
        releases_api_url: "http://127.0.0.1:9/api".to_string(),
        npm_registry_base: Some(TEST_NPM_BASE.to_string()),
    }
}

fn legacy_manifest(version: &str) -> JsonObject {
    agents_tests::schema1_manifest(TEST_RELEASE_BASE, version, SHA, 1234)
}

fn integrity_of(byte: u8) -> String {
    format!("sha512-{}", b64(&[byte; 64]))
}

fn npm_manifest(version: &str) -> JsonObject {
    agents_tests::schema2_manifest(TEST_NPM_BASE, version, &integrity_of(7), SHA, 4096)
}

/// One verification to run on both sides.
enum Case {
    Manifest {
        label: String,
        manifest: Vec<u8>,
        signature: Vec<u8>,
        key: std::path::PathBuf,
        expected_version: Option<String>,
        track: String,
        allow_npm: bool,
    },
    Envelope {
        label: String,
        envelope: Option<Json>,
        key: std::path::PathBuf,
        expected_version: Option<String>,
    },
}

impl Case {
    fn label(&self) -> &str {
        match self {
            Case::Manifest { label, .. } | Case::Envelope { label, .. } => label,
        }
    }

    fn to_oracle(&self) -> Json {
        let optional = |value: &Option<String>| value.clone().map_or(Json::Null, Json::from);
        match self {
            Case::Manifest {
                manifest,
                signature,
                key,
                expected_version,
                track,
                allow_npm,
                ..
            } => Json::Object(json_object! {
                "kind" => "manifest",
                "manifest" => b64(manifest),
                "signature" => b64(signature),
                "key" => key.to_str().unwrap(),
                "expected_version" => optional(expected_version),
                "track" => track.as_str(),
                "allow_npm" => *allow_npm,
            }),
            Case::Envelope {
                envelope,
                key,
                expected_version,
                ..
            } => Json::Object(json_object! {
                "kind" => "envelope",
                "envelope" => envelope.clone().unwrap_or(Json::Null),
                "key" => key.to_str().unwrap(),
                "expected_version" => optional(expected_version),
            }),
        }
    }

    fn run(&self) -> agents_common::Result<ReleaseManifest> {
        match self {
            Case::Manifest {
                manifest,
                signature,
                key,
                expected_version,
                track,
                allow_npm,
                ..
            } => ReleaseTrust::new(key, endpoints()).verify_manifest(
                manifest,
                signature,
                expected_version.as_deref(),
                track,
                *allow_npm,
            ),
            Case::Envelope {
                envelope,
                key,
                expected_version,
                ..
            } => ReleaseTrust::new(key, endpoints())
                .verify_npm_release_envelope(envelope.as_ref(), expected_version.as_deref()),
        }
    }
}

const ORACLE: &str = r#"
from pathlib import Path
data = json.load(sys.stdin)
update_runner.RELEASE_BASE = data["release_base"]
update_runner.NPM_REGISTRY_BASE = data["npm_base"]
out = []
for case in data["cases"]:
    try:
        if case["kind"] == "manifest":
            value = update_runner.verify_manifest(
                base64.b64decode(case["manifest"]), base64.b64decode(case["signature"]),
                Path(case["key"]), expected_version=case["expected_version"],
                track=case["track"], allow_npm=case["allow_npm"])
        else:
            value = update_runner.verify_npm_release_envelope(
                case["envelope"], Path(case["key"]), expected_version=case["expected_version"])
        out.append({"ok": value})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#;

/// Run every case through the original and the port and compare outcomes.
fn compare_with_original(originals: &Originals, cases: &[Case]) -> (usize, usize) {
    let input = Json::Object(json_object! {
        "release_base" => TEST_RELEASE_BASE,
        "npm_base" => TEST_NPM_BASE,
        "cases" => cases.iter().map(Case::to_oracle).collect::<Vec<_>>(),
    });
    let oracle = python_oracle(
        originals,
        ORACLE,
        &python_compat::json::encode_indented(&input),
    );
    let outcomes = oracle.as_array().expect("oracle prints a list");
    assert_eq!(outcomes.len(), cases.len());
    let (mut accepted, mut refused) = (0, 0);
    for (case, expected) in cases.iter().zip(outcomes) {
        let label = case.label();
        match (case.run(), expected.get("ok"), expected.get("error")) {
            (Ok(manifest), Some(document), None) => {
                assert_eq!(
                    &Json::Object(manifest.document().clone()),
                    document,
                    "{label}: accepted documents differ"
                );
                accepted += 1;
            }
            (Err(error), None, Some(class)) => {
                let class = class.as_str().unwrap();
                let python_message = expected.get("message").and_then(Json::as_str).unwrap();
                let message = if class == "InvalidSignature" {
                    assert_eq!(python_message, "", "{label}");
                    INVALID_SIGNATURE_MESSAGE
                } else {
                    python_message
                };
                assert_eq!(error.message(), message, "{label}: refusal messages differ");
                let expected_class = match class {
                    "ValueError" => ErrorClass::Value,
                    "JSONDecodeError" => ErrorClass::JsonDecode,
                    "UnicodeDecodeError" => ErrorClass::UnicodeDecode,
                    "FileNotFoundError" => ErrorClass::NotFound,
                    // InvalidSignature and TypeError have no class of their own.
                    "RuntimeError" | "InvalidSignature" | "TypeError" => ErrorClass::Runtime,
                    other => panic!("{label}: unexpected Python class {other}"),
                };
                assert_eq!(error.class(), expected_class, "{label}: classes differ");
                refused += 1;
            }
            (ours, _, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
        }
    }
    (accepted, refused)
}

struct Fixture {
    _dir: TempDir,
    key: TestKey,
    other: TestKey,
    dir: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = TempDir::new("release-manifest");
    let key = TestKey::generate(dir.path(), "release-public-key.pem");
    let other = TestKey::generate(dir.path(), "other-public-key.pem");
    let path = dir.path().to_path_buf();
    Fixture {
        _dir: dir,
        key,
        other,
        dir: path,
    }
}

impl Fixture {
    /// A case signing `document` (serialised like the publisher) with our key.
    fn signed(&self, label: &str, document: &JsonObject, track: &str, allow_npm: bool) -> Case {
        let bytes = manifest_bytes(&Json::Object(document.clone()));
        self.raw(label, bytes, track, allow_npm, None)
    }

    fn raw(
        &self,
        label: &str,
        bytes: Vec<u8>,
        track: &str,
        allow_npm: bool,
        expected_version: Option<&str>,
    ) -> Case {
        Case::Manifest {
            label: label.to_string(),
            signature: self.key.sign(&bytes),
            manifest: bytes,
            key: self.key.pem_path.clone(),
            expected_version: expected_version.map(str::to_string),
            track: track.to_string(),
            allow_npm,
        }
    }
}

fn with(mut document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    document.insert(key, value);
    document
}

fn without(mut document: JsonObject, key: &str) -> JsonObject {
    document.remove(key);
    document
}

fn with_archive(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    let mut archive = document
        .get("archive")
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    archive.insert(key, value);
    with(document, "archive", archive)
}

fn with_npm(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    let mut npm = document.get("npm").unwrap().as_object().unwrap().clone();
    npm.insert(key, value);
    with(document, "npm", npm)
}

#[test]
fn legacy_manifests_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let stable = legacy_manifest("1.0.7");
    let beta = legacy_manifest("1.0.8-beta.2");
    let cases = vec![
        f.signed("stable", &stable, "stable", false),
        f.signed("beta", &beta, "beta", false),
        f.signed("beta on stable", &beta, "stable", false),
        f.signed("stable on beta", &stable, "beta", false),
        f.signed("track is normalised", &stable, " Stable ", false),
        f.signed("unknown track", &stable, "nightly", false),
        f.signed(
            "schema absent",
            &without(stable.clone(), "schema"),
            "stable",
            false,
        ),
        f.signed(
            "schema 2 without npm",
            &with(stable.clone(), "schema", 2),
            "stable",
            false,
        ),
        f.signed(
            "schema string",
            &with(stable.clone(), "schema", "1"),
            "stable",
            false,
        ),
        f.signed(
            "schema bool",
            &with(stable.clone(), "schema", true),
            "stable",
            false,
        ),
        f.signed(
            "schema float",
            &with(stable.clone(), "schema", 1.0),
            "stable",
            false,
        ),
        f.signed(
            "schema null",
            &with(stable.clone(), "schema", Json::Null),
            "stable",
            false,
        ),
        f.signed(
            "schema 3",
            &with(stable.clone(), "schema", 3),
            "stable",
            true,
        ),
        f.signed(
            "version missing",
            &without(stable.clone(), "version"),
            "stable",
            false,
        ),
        f.signed(
            "version number",
            &with(stable.clone(), "version", 1),
            "stable",
            false,
        ),
        f.signed(
            "version v-prefixed",
            &with(stable.clone(), "version", "v1.0.7"),
            "stable",
            false,
        ),
        f.signed(
            "prerelease 0",
            &with(stable.clone(), "prerelease", 0),
            "stable",
            false,
        ),
        f.signed(
            "prerelease 1.0 on beta",
            &with(beta.clone(), "prerelease", 1.0),
            "beta",
            false,
        ),
        f.signed(
            "prerelease lies",
            &with(stable.clone(), "prerelease", true),
            "stable",
            false,
        ),
        f.signed(
            "prerelease text",
            &with(stable.clone(), "prerelease", "no"),
            "stable",
            false,
        ),
        f.signed(
            "prerelease list",
            &with(stable.clone(), "prerelease", Json::Array(vec![])),
            "stable",
            false,
        ),
        f.signed(
            "prerelease object",
            &with(stable.clone(), "prerelease", JsonObject::new()),
            "stable",
            false,
        ),
        f.signed(
            "prerelease null",
            &with(stable.clone(), "prerelease", Json::Null),
            "stable",
            false,
        ),
        f.signed(
            "track lies",
            &with(stable.clone(), "track", "beta"),
            "stable",
            false,
        ),
        f.signed(
            "track absent",
            &without(stable.clone(), "track"),
            "stable",
            false,
        ),
        f.signed(
            "track list",
            &with(
                stable.clone(),
                "track",
                Json::Array(vec![Json::from("stable")]),
            ),
            "stable",
            false,
        ),
        f.signed(
            "archive missing",
            &without(stable.clone(), "archive"),
            "stable",
            false,
        ),
        f.signed(
            "archive list",
            &with(stable.clone(), "archive", Json::Array(vec![])),
            "stable",
            false,
        ),
        f.signed(
            "name wrong",
            &with_archive(stable.clone(), "name", "x.tar.gz"),
            "stable",
            false,
        ),
        f.signed(
            "url on another host",
            &with_archive(
                stable.clone(),
                "url",
                "https://example.invalid/download/v1.0.7/agents-server-1.0.7.tar.gz",
            ),
            "stable",
            false,
        ),
        f.signed(
            "url of another tag",
            &with_archive(
                stable.clone(),
                "url",
                format!("{TEST_RELEASE_BASE}/download/v1.0.6/agents-server-1.0.7.tar.gz"),
            ),
            "stable",
            false,
        ),
        f.signed(
            "sha uppercase",
            &with_archive(stable.clone(), "sha256", SHA.to_uppercase()),
            "stable",
            false,
        ),
        f.signed(
            "sha short",
            &with_archive(stable.clone(), "sha256", &SHA[1..]),
            "stable",
            false,
        ),
        f.signed(
            "sha not hex",
            &with_archive(stable.clone(), "sha256", SHA.replace('a', "g")),
            "stable",
            false,
        ),
        f.signed(
            "sha missing",
            &without(stable.clone(), "archive"),
            "stable",
            false,
        ),
        f.signed(
            "size is not checked for schema 1",
            &with_archive(stable.clone(), "size", "big"),
            "stable",
            false,
        ),
        f.raw("not an object", b"[1, 2]\n".to_vec(), "stable", false, None),
        f.raw(
            "not JSON",
            b"{\"version\": \n".to_vec(),
            "stable",
            false,
            None,
        ),
        f.raw("empty", Vec::new(), "stable", false, None),
        f.raw(
            "pin matches",
            manifest_bytes(&Json::Object(stable.clone())),
            "stable",
            false,
            Some("1.0.7"),
        ),
        f.raw(
            "pin differs",
            manifest_bytes(&Json::Object(stable.clone())),
            "stable",
            false,
            Some("1.0.6"),
        ),
        f.raw(
            "pin differs by build metadata only",
            manifest_bytes(&Json::Object(with(
                with_archive(
                    with_archive(stable.clone(), "name", "agents-server-1.0.7+b.tar.gz"),
                    "url",
                    format!("{TEST_RELEASE_BASE}/download/v1.0.7+b/agents-server-1.0.7+b.tar.gz"),
                ),
                "version",
                "1.0.7+b",
            ))),
            "stable",
            false,
            Some("1.0.7"),
        ),
    ];
    // (A 64-digit integer checksum passes Python's str().lower() format
    // check, but JSON integers beyond i128 are refused by our parser.)
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert!(
        accepted >= 8 && refused >= 25,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn signatures_and_keys_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let stable = legacy_manifest("1.0.7");
    let bytes = manifest_bytes(&Json::Object(stable.clone()));
    let good = f.key.sign(&bytes);
    let mut flipped = good.clone();
    flipped[10] ^= 1;
    let mut altered = bytes.clone();
    altered.push(b' ');
    let case =
        |label: &str, manifest: &[u8], signature: &[u8], key: &std::path::Path| Case::Manifest {
            label: label.to_string(),
            manifest: manifest.to_vec(),
            signature: signature.to_vec(),
            key: key.to_path_buf(),
            expected_version: None,
            track: "stable".to_string(),
            allow_npm: false,
        };
    let pem = std::fs::read_to_string(&f.key.pem_path).unwrap();
    let write = |name: &str, text: &str| {
        let path = f.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    // Public keys of other algorithms (public material, safe to embed).
    let ec_pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE+1KmdxWKJLD3HIesS6T9fFA6nmh0\nPG7Sgefx8pf6P609APjytoJXg9Vy4VVaNyJiZbCZH4/rmSW7HHNGaMEUzw==\n-----END PUBLIC KEY-----\n";
    let rsa_pkcs1 = "-----BEGIN RSA PUBLIC KEY-----\nMIGJAoGBAK67cnuHtEWJUp6JS4Ge17TYiAKrjnC/1ZJ8LeujYv7i4xVD2QKuVqvq\nsgKx7Ibo50UhLz2sMUtUnxeHlPcqCnMvK6Hhqg/B+wQ2OgX5FUX5g7mpIw52BMIV\ndxt+fHYBotzIDsi2GpnCf+izcIjq3CxCmCJD3zGAmB7kR7AnnZApAgMBAAE=\n-----END RSA PUBLIC KEY-----\n";
    let cases = vec![
        case("good", &bytes, &good, &f.key.pem_path),
        case("flipped signature", &bytes, &flipped, &f.key.pem_path),
        case("altered manifest", &altered, &good, &f.key.pem_path),
        case("short signature", &bytes, &good[..63], &f.key.pem_path),
        case("empty signature", &bytes, &[], &f.key.pem_path),
        case(
            "long signature",
            &bytes,
            &[good.clone(), vec![0]].concat(),
            &f.key.pem_path,
        ),
        case("other key", &bytes, &good, &f.other.pem_path),
        case(
            "key with text around it",
            &bytes,
            &good,
            &write("text.pem", &format!("comment\n{pem}trailer\n")),
        ),
        case(
            "key with CRLF",
            &bytes,
            &good,
            &write("crlf.pem", &pem.replace('\n', "\r\n")),
        ),
        case("EC key", &bytes, &good, &write("ec.pem", ec_pem)),
        case(
            "RSA PKCS#1 key",
            &bytes,
            &good,
            &write("rsa.pem", rsa_pkcs1),
        ),
        case(
            "garbage key",
            &bytes,
            &good,
            &write("garbage.pem", "not a key\n"),
        ),
        case("empty key", &bytes, &good, &write("empty.pem", "")),
        case("missing key", &bytes, &good, &f.dir.join("missing.pem")),
    ];
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert_eq!((accepted, refused), (3, 11));
}

#[test]
fn npm_manifests_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let npm = npm_manifest("1.0.8");
    let beta = npm_manifest("1.0.8-beta.3");
    let integrity_cases: Vec<(&str, Json)> = vec![
        (
            "integrity sha256 prefix",
            Json::from(format!("sha256-{}", b64(&[7; 64]))),
        ),
        (
            "integrity 63 bytes",
            Json::from(format!("sha512-{}", b64(&[7; 63]))),
        ),
        (
            "integrity 65 bytes",
            Json::from(format!("sha512-{}", b64(&[7; 65]))),
        ),
        (
            "integrity unpadded",
            Json::from(integrity_of(7).trim_end_matches('=').to_string()),
        ),
        (
            "integrity non-canonical bits",
            Json::from(format!(
                "{}x==",
                &integrity_of(7)[..integrity_of(7).len() - 3]
            )),
        ),
        (
            "integrity with newline",
            Json::from(format!("{}\n", integrity_of(7))),
        ),
        ("integrity number", Json::Int(5)),
        ("integrity missing prefix", Json::from(b64(&[7; 64]))),
    ];
    let mut cases = vec![
        f.signed("npm stable", &npm, "stable", true),
        f.signed("npm beta", &beta, "beta", true),
        f.signed("npm refused without allow_npm", &npm, "stable", false),
        f.signed(
            "distribution missing",
            &without(npm.clone(), "distribution"),
            "stable",
            true,
        ),
        f.signed(
            "distribution github",
            &with(npm.clone(), "distribution", "github"),
            "stable",
            true,
        ),
        f.signed(
            "track missing",
            &without(npm.clone(), "track"),
            "stable",
            true,
        ),
        f.signed("npm missing", &without(npm.clone(), "npm"), "stable", true),
        f.signed(
            "npm name",
            &with_npm(npm.clone(), "name", "@agentsdock/other"),
            "stable",
            true,
        ),
        f.signed(
            "npm version",
            &with_npm(npm.clone(), "version", "1.0.9"),
            "stable",
            true,
        ),
        f.signed(
            "size zero",
            &with_archive(npm.clone(), "size", 0),
            "stable",
            true,
        ),
        f.signed(
            "size max",
            &with_archive(npm.clone(), "size", 200 * 1024 * 1024),
            "stable",
            true,
        ),
        f.signed(
            "size over",
            &with_archive(npm.clone(), "size", 200 * 1024 * 1024 + 1),
            "stable",
            true,
        ),
        f.signed(
            "size bool",
            &with_archive(npm.clone(), "size", true),
            "stable",
            true,
        ),
        f.signed(
            "size float",
            &with_archive(npm.clone(), "size", 10.0),
            "stable",
            true,
        ),
        f.signed(
            "contract zero",
            &with(npm.clone(), "api_contract_version", 0),
            "stable",
            true,
        ),
        f.signed(
            "contract bool",
            &with(npm.clone(), "api_contract_version", true),
            "stable",
            true,
        ),
        f.signed(
            "contract missing",
            &without(npm.clone(), "api_contract_version"),
            "stable",
            true,
        ),
        f.signed(
            "npm archive on GitHub",
            &with_archive(
                npm.clone(),
                "url",
                format!("{TEST_RELEASE_BASE}/download/v1.0.8/server-1.0.8.tgz"),
            ),
            "stable",
            true,
        ),
        f.signed(
            "npm legacy name",
            &with_archive(npm.clone(), "name", "agents-server-1.0.8.tar.gz"),
            "stable",
            true,
        ),
    ];
    let plus = npm_manifest("1.0.8+build");
    cases.push(f.signed("build metadata refused", &plus, "stable", true));
    for (label, value) in integrity_cases {
        cases.push(f.signed(
            label,
            &with_npm(npm.clone(), "integrity", value),
            "stable",
            true,
        ));
    }
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert_eq!(accepted, 3);
    assert!(refused >= 20);
}

#[test]
fn npm_release_without_a_configured_registry_is_refused_clearly() {
    let f = fixture();
    let npm = npm_manifest("1.0.8");
    let bytes = manifest_bytes(&Json::Object(npm));
    let signature = f.key.sign(&bytes);
    let mut endpoints = endpoints();
    endpoints.npm_registry_base = None;
    let error = ReleaseTrust::new(&f.key.pem_path, endpoints)
        .verify_manifest(&bytes, &signature, None, "stable", true)
        .unwrap_err();
    assert_eq!(
        error.message(),
        "npm release registry location is not configured; set AGENTS_SERVER_NPM_REGISTRY_BASE"
    );
}

#[test]
fn npm_envelopes_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let npm = npm_manifest("1.0.8");
    let bytes = manifest_bytes(&Json::Object(npm.clone()));
    let signature = f.key.sign(&bytes);
    let envelope = |manifest: Json, signature: Json| {
        Some(Json::Object(json_object! {
            "manifest_base64" => manifest,
            "signature_base64" => signature,
        }))
    };
    let good = envelope(Json::from(b64(&bytes)), Json::from(b64(&signature)));
    let case = |label: &str, envelope: Option<Json>, expected: Option<&str>| Case::Envelope {
        label: label.to_string(),
        envelope,
        key: f.key.pem_path.clone(),
        expected_version: expected.map(str::to_string),
    };
    // Bytes whose length is a multiple of 3 encode without padding, so a
    // trailing "=" exercises Python's lenient acceptance.
    let mut padded_bytes = bytes.clone();
    while padded_bytes.len() % 3 != 0 {
        padded_bytes.insert(padded_bytes.len() - 1, b' ');
    }
    let padded_signature = f.key.sign(&padded_bytes);
    let legacy = manifest_bytes(&Json::Object(legacy_manifest("1.0.8")));
    let big = {
        let mut document = npm.clone();
        document.insert("padding", "x".repeat(8200));
        manifest_bytes(&Json::Object(document))
    };
    let no_track = manifest_bytes(&Json::Object(without(npm.clone(), "track")));
    let beta = manifest_bytes(&Json::Object(npm_manifest("1.0.9-beta.1")));
    let cases = vec![
        case("good", good.clone(), None),
        case("good with pin", good.clone(), Some("1.0.8")),
        case("pin differs", good.clone(), Some("1.0.9")),
        case("absent", None, None),
        case("null", Some(Json::Null), None),
        case("list", Some(Json::Array(vec![])), None),
        case(
            "extra key",
            {
                let mut value = good.clone().unwrap();
                if let Json::Object(object) = &mut value {
                    object.insert("extra", 1);
                }
                Some(value)
            },
            None,
        ),
        case(
            "manifest not a string",
            envelope(Json::Int(1), Json::from(b64(&signature))),
            None,
        ),
        case(
            "signature not a string",
            envelope(Json::from(b64(&bytes)), Json::Null),
            None,
        ),
        case(
            "manifest empty",
            envelope(Json::from(""), Json::from(b64(&signature))),
            None,
        ),
        case(
            "manifest too long",
            envelope(Json::from("A".repeat(10_925)), Json::from(b64(&signature))),
            None,
        ),
        case(
            "signature 87 chars",
            envelope(Json::from(b64(&bytes)), Json::from(&b64(&signature)[1..])),
            None,
        ),
        case(
            "manifest not base64",
            envelope(Json::from("!!!!"), Json::from(b64(&signature))),
            None,
        ),
        case(
            "signature not base64",
            envelope(Json::from(b64(&bytes)), Json::from("!".repeat(88))),
            None,
        ),
        case(
            "lenient trailing padding",
            envelope(
                Json::from(format!("{}=", b64(&padded_bytes))),
                Json::from(b64(&padded_signature)),
            ),
            None,
        ),
        case(
            "signature of 65 bytes in 88 chars",
            envelope(
                Json::from(b64(&bytes)),
                Json::from(b64(&[1u8; 65]).trim_end_matches('=').to_string() + "="),
            ),
            None,
        ),
        case(
            "payload not JSON",
            envelope(Json::from(b64(b"not json")), Json::from(b64(&signature))),
            None,
        ),
        case(
            "payload a list",
            envelope(Json::from(b64(b"[]")), Json::from(b64(&signature))),
            None,
        ),
        case(
            "payload over 8192 bytes",
            envelope(Json::from(b64(&big)), Json::from(b64(&f.key.sign(&big)))),
            None,
        ),
        case(
            "schema 1 descriptor",
            envelope(
                Json::from(b64(&legacy)),
                Json::from(b64(&f.key.sign(&legacy))),
            ),
            None,
        ),
        case(
            "track missing means stable",
            envelope(
                Json::from(b64(&no_track)),
                Json::from(b64(&f.key.sign(&no_track))),
            ),
            None,
        ),
        case(
            "beta descriptor",
            envelope(Json::from(b64(&beta)), Json::from(b64(&f.key.sign(&beta)))),
            None,
        ),
        case(
            "bad signature",
            envelope(Json::from(b64(&bytes)), Json::from(b64(&[0u8; 64]))),
            None,
        ),
    ];
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert_eq!(accepted, 4, "good, pinned, lenient padding, beta");
    assert_eq!(refused, cases.len() - 4);
}

/// One change to a manifest: a key of the document (or of its `archive` or
/// `npm` object) removed or given a generated value.
#[derive(Clone, Debug)]
struct Edit {
    scope: Option<&'static str>,
    key: &'static str,
    value: Option<Json>,
}

fn arb_manifest_value() -> impl proptest::strategy::Strategy<Value = Json> {
    use proptest::prelude::*;
    let text = prop::sample::select(vec![
        "1.0.7",
        "1.0.8-beta.2",
        "01.0.7",
        "1.0",
        " 1.0.7",
        "v1.0.7",
        "1.0.7+build",
        "1.0.7-",
        "stable",
        "beta",
        "npm",
        "@agentsdock/server",
        "agents-server-1.0.7.tar.gz",
        "http://127.0.0.1:9/releases/download/v1.0.7/agents-server-1.0.7.tar.gz",
        "http://127.0.0.1:9/releases/download/v1.0.7/../../evil.tar.gz",
        "http://evil.example/agents-server-1.0.7.tar.gz",
        "http://127.0.0.1:9/npm/@agentsdock/server/-/server-1.0.8.tgz",
        SHA,
        "0123",
        "sha512-AAAA",
        "",
    ])
    .prop_map(Json::from);
    prop_oneof![
        3 => text,
        1 => Just(Json::Null),
        1 => any::<bool>().prop_map(Json::Bool),
        2 => prop::sample::select(vec![-1i128, 0, 1, 2, 28, 29, 30, 1 << 40, i128::MAX])
            .prop_map(Json::Int),
        1 => prop::sample::select(vec![1.0f64, 1.5, f64::NAN]).prop_map(Json::Float),
        1 => Just(Json::Array(vec![Json::from("1.0.7")])),
        1 => Just(Json::Object(json_object! {"nested" => 1})),
    ]
}

fn arb_edit() -> impl proptest::strategy::Strategy<Value = Edit> {
    use proptest::prelude::*;
    let top = prop::sample::select(vec![
        "schema",
        "version",
        "track",
        "prerelease",
        "api_contract_version",
        "commit",
        "minimum_server_api_contract",
        "distribution",
        "archive",
        "npm",
        "extra",
    ]);
    let archive = prop::sample::select(vec!["name", "url", "sha256", "size", "extra"]);
    let npm = prop::sample::select(vec!["name", "version", "integrity", "extra"]);
    let target = prop_oneof![
        3 => top.prop_map(|key| (None, key)),
        2 => archive.prop_map(|key| (Some("archive"), key)),
        1 => npm.prop_map(|key| (Some("npm"), key)),
    ];
    (
        target,
        proptest::option::weighted(0.8, arb_manifest_value()),
    )
        .prop_map(|((scope, key), value)| Edit { scope, key, value })
}

fn apply_edit(mut document: JsonObject, edit: &Edit) -> JsonObject {
    let target = match edit.scope {
        None => &mut document,
        Some(scope) => match document.get_mut(scope) {
            Some(Json::Object(inner)) => inner,
            // The scope was replaced by an earlier edit: nothing to change.
            _ => return document,
        },
    };
    match &edit.value {
        Some(value) => {
            target.insert(edit.key, value.clone());
        }
        None => {
            target.remove(edit.key);
        }
    }
    document
}

#[test]
fn generated_manifests_match_the_original() {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let strategy = (
        any::<bool>(),
        prop::collection::vec(arb_edit(), 0..4),
        prop::sample::select(vec!["stable", "beta", " Stable ", "nightly"]),
        any::<bool>(),
        proptest::option::of(prop::sample::select(vec!["1.0.7", "1.0.8", "1.0.8-beta.2"])),
    );
    let count = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse::<usize>().ok())
        .unwrap_or(160);
    // One batch through the original; reproducible from the fixed runner original.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let cases: Vec<Case> = (0..count)
        .map(|index| {
            let (npm, edits, track, allow_npm, expected) =
                strategy.new_tree(&mut runner).unwrap().current();
            let base = if npm {
                npm_manifest("1.0.8")
            } else {
                legacy_manifest("1.0.7")
            };
            let document = edits.iter().fold(base, apply_edit);
            let bytes = manifest_bytes(&Json::Object(document));
            f.raw(
                &format!("generated #{index} (npm {npm}, {edits:?})"),
                bytes,
                track,
                allow_npm,
                expected,
            )
        })
        .collect();
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

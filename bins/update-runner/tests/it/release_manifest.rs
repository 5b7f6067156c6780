//! `verify_manifest` and `verify_npm_release_envelope` against the original: the
//! same signed bytes, keys and pins go to our port and to `update_runner.py`
//! (python3 + cryptography), and both must accept with the same document or
//! refuse with the same message.
//!
//! Hand-written cases are tables of (description, input, expected outcome);
//! the description names the case in every assertion message.

use std::path::{Path, PathBuf};

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

/// Public keys of other algorithms (public material, safe to embed).
const EC_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE+1KmdxWKJLD3HIesS6T9fFA6nmh0\nPG7Sgefx8pf6P609APjytoJXg9Vy4VVaNyJiZbCZH4/rmSW7HHNGaMEUzw==\n-----END PUBLIC KEY-----\n";
const RSA_PKCS1_PUBLIC_KEY: &str = "-----BEGIN RSA PUBLIC KEY-----\nMIGJAoGBAK67cnuHtEWJUp6JS4Ge17TYiAKrjnC/1ZJ8LeujYv7i4xVD2QKuVqvq\nsgKx7Ibo50UhLz2sMUtUnxeHlPcqCnMvK6Hhqg/B+wQ2OgX5FUX5g7mpIw52BMIV\ndxt+fHYBotzIDsi2GpnCf+izcIjq3CxCmCJD3zGAmB7kR7AnnZApAgMBAAE=\n-----END RSA PUBLIC KEY-----\n";

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

/// The bytes the publisher signs for `document` (its serialisation).
fn serialised(document: &JsonObject) -> Vec<u8> {
    manifest_bytes(&Json::Object(document.clone()))
}

/// What a hand-written case must come to, on both sides alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Accepted,
    Refused,
}
use Outcome::{Accepted, Refused};

/// One verification to run on both sides.
struct Case {
    label: String,
    /// The outcome the case is written for; `None` for generated cases,
    /// where only agreement with the original is checked.
    expect: Option<Outcome>,
    call: Call,
}

/// The verification function a case calls, with its arguments.
enum Call {
    Manifest {
        manifest: Vec<u8>,
        signature: Vec<u8>,
        key: PathBuf,
        expected_version: Option<String>,
        track: String,
        allow_npm: bool,
    },
    Envelope {
        envelope: Option<Json>,
        key: PathBuf,
        expected_version: Option<String>,
    },
}

impl Case {
    fn new(label: &str, call: Call) -> Case {
        Case {
            label: label.to_string(),
            expect: None,
            call,
        }
    }

    /// The same case, which both sides must also accept or refuse as said.
    fn expecting(self, outcome: Outcome) -> Case {
        Case {
            expect: Some(outcome),
            ..self
        }
    }

    fn to_oracle(&self) -> Json {
        let optional = |value: &Option<String>| value.clone().map_or(Json::Null, Json::from);
        match &self.call {
            Call::Manifest {
                manifest,
                signature,
                key,
                expected_version,
                track,
                allow_npm,
            } => Json::Object(json_object! {
                "kind" => "manifest",
                "manifest" => b64(manifest),
                "signature" => b64(signature),
                "key" => key.to_str().unwrap(),
                "expected_version" => optional(expected_version),
                "track" => track.as_str(),
                "allow_npm" => *allow_npm,
            }),
            Call::Envelope {
                envelope,
                key,
                expected_version,
            } => Json::Object(json_object! {
                "kind" => "envelope",
                "envelope" => envelope.clone().unwrap_or(Json::Null),
                "key" => key.to_str().unwrap(),
                "expected_version" => optional(expected_version),
            }),
        }
    }

    fn run(&self) -> agents_common::Result<ReleaseManifest> {
        match &self.call {
            Call::Manifest {
                manifest,
                signature,
                key,
                expected_version,
                track,
                allow_npm,
            } => ReleaseTrust::new(key, endpoints()).verify_manifest(
                manifest,
                signature,
                expected_version.as_deref(),
                track,
                *allow_npm,
            ),
            Call::Envelope {
                envelope,
                key,
                expected_version,
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

/// Run every case through the original and the port, compare outcomes (and
/// each case's expected outcome, if it has one), and count (accepted, refused).
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
        let label = case.label.as_str();
        let outcome = match (case.run(), expected.get("ok"), expected.get("error")) {
            (Ok(manifest), Some(document), None) => {
                assert_eq!(
                    &Json::Object(manifest.document().clone()),
                    document,
                    "{label}: accepted documents differ"
                );
                Accepted
            }
            (Err(error), None, Some(class)) => {
                assert_same_refusal(label, &error, class.as_str().unwrap(), expected);
                Refused
            }
            (ours, _, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
        };
        if let Some(expect) = case.expect {
            assert_eq!(
                outcome, expect,
                "{label}: both sides agree, on the wrong outcome"
            );
        }
        match outcome {
            Accepted => accepted += 1,
            Refused => refused += 1,
        }
    }
    (accepted, refused)
}

/// Our refusal must carry the original's message (ours names the bare
/// `InvalidSignature`, whose message is empty) and the matching class.
fn assert_same_refusal(label: &str, error: &agents_common::Error, class: &str, expected: &Json) {
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
}

struct Fixture {
    _dir: TempDir,
    key: TestKey,
    other: TestKey,
    dir: PathBuf,
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

/// A whole signed document and how it is checked:
/// (description, document, track, allow_npm, expected outcome).
type DocumentRow = (&'static str, JsonObject, &'static str, bool, Outcome);

/// A change made to a valid manifest before it is signed.
type Change = fn(JsonObject) -> JsonObject;

/// (description, change, expected outcome).
type ChangeRow = (&'static str, Change, Outcome);

impl Fixture {
    /// A case signing `document` (serialised like the publisher) with our key.
    fn signed(&self, label: &str, document: &JsonObject, track: &str, allow_npm: bool) -> Case {
        self.raw(label, serialised(document), track, allow_npm, None)
    }

    /// A case signing exactly `bytes` with our key.
    fn raw(
        &self,
        label: &str,
        bytes: Vec<u8>,
        track: &str,
        allow_npm: bool,
        expected_version: Option<&str>,
    ) -> Case {
        Case::new(
            label,
            Call::Manifest {
                signature: self.key.sign(&bytes),
                manifest: bytes,
                key: self.key.pem_path.clone(),
                expected_version: expected_version.map(str::to_string),
                track: track.to_string(),
                allow_npm,
            },
        )
    }

    /// One case per row, each document signed with our key.
    fn signed_documents(&self, rows: Vec<DocumentRow>) -> Vec<Case> {
        rows.into_iter()
            .map(|(label, document, track, allow_npm, outcome)| {
                self.signed(label, &document, track, allow_npm)
                    .expecting(outcome)
            })
            .collect()
    }

    /// One case per row: `base` with the row's change, signed with our key
    /// and checked on the stable track.
    fn signed_changes(&self, base: &JsonObject, rows: &[ChangeRow], allow_npm: bool) -> Vec<Case> {
        rows.iter()
            .map(|&(label, change, outcome)| {
                self.signed(label, &change(base.clone()), "stable", allow_npm)
                    .expecting(outcome)
            })
            .collect()
    }

    /// An envelope case checked with our key.
    fn envelope_case(&self, label: &str, envelope: Option<Json>, pin: Option<&str>) -> Case {
        Case::new(
            label,
            Call::Envelope {
                envelope,
                key: self.key.pem_path.clone(),
                expected_version: pin.map(str::to_string),
            },
        )
    }

    /// The envelope of `bytes` with our key's signature of them.
    fn signed_envelope(&self, bytes: &[u8]) -> Option<Json> {
        envelope(b64(bytes), b64(&self.key.sign(bytes)))
    }

    /// A file `name` holding `text` beside the keys, for the key-parsing cases.
    fn key_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
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

/// `document` with its `archive` object changed by `change`.
fn edit_archive(document: JsonObject, change: impl FnOnce(&mut JsonObject)) -> JsonObject {
    let mut archive = document
        .get("archive")
        .unwrap()
        .as_object()
        .unwrap()
        .clone();
    change(&mut archive);
    with(document, "archive", archive)
}

fn with_archive(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    edit_archive(document, |archive| {
        archive.insert(key, value);
    })
}

fn without_archive_key(document: JsonObject, key: &str) -> JsonObject {
    edit_archive(document, |archive| {
        archive.remove(key);
    })
}

fn with_npm(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    let mut npm = document.get("npm").unwrap().as_object().unwrap().clone();
    npm.insert(key, value);
    with(document, "npm", npm)
}

/// The fields of an npm release envelope; any JSON, so cases can send the
/// wrong types.
fn envelope_fields(manifest: impl Into<Json>, signature: impl Into<Json>) -> JsonObject {
    json_object! {
        "manifest_base64" => manifest.into(),
        "signature_base64" => signature.into(),
    }
}

/// An envelope as `verify_npm_release_envelope` receives it.
fn envelope(manifest: impl Into<Json>, signature: impl Into<Json>) -> Option<Json> {
    Some(Json::Object(envelope_fields(manifest, signature)))
}

/// `bytes` with spaces before the last byte until the length is a multiple
/// of 3: they encode without padding, so a trailing "=" exercises Python's
/// lenient acceptance.
fn padded_to_multiple_of_3(bytes: &[u8]) -> Vec<u8> {
    let mut padded = bytes.to_vec();
    while padded.len() % 3 != 0 {
        padded.insert(padded.len() - 1, b' ');
    }
    padded
}

/// Changes to the stable schema-1 manifest, checked without npm.
#[rustfmt::skip]
const LEGACY_CHANGES: &[ChangeRow] = &[
    ("schema absent", |d| without(d, "schema"), Accepted),
    ("schema 2 without npm", |d| with(d, "schema", 2), Refused),
    ("schema string", |d| with(d, "schema", "1"), Refused),
    ("schema bool", |d| with(d, "schema", true), Refused),
    ("schema float", |d| with(d, "schema", 1.0), Refused),
    ("schema null", |d| with(d, "schema", Json::Null), Refused),
    ("version missing", |d| without(d, "version"), Refused),
    ("version number", |d| with(d, "version", 1), Refused),
    ("version v-prefixed", |d| with(d, "version", "v1.0.7"), Refused),
    ("prerelease 0", |d| with(d, "prerelease", 0), Accepted),
    ("prerelease lies", |d| with(d, "prerelease", true), Refused),
    ("prerelease text", |d| with(d, "prerelease", "no"), Refused),
    ("prerelease list", |d| with(d, "prerelease", Json::Array(vec![])), Refused),
    ("prerelease object", |d| with(d, "prerelease", JsonObject::new()), Refused),
    ("prerelease null", |d| with(d, "prerelease", Json::Null), Accepted),
    ("track lies", |d| with(d, "track", "beta"), Refused),
    ("track absent", |d| without(d, "track"), Accepted),
    ("track list", |d| with(d, "track", Json::Array(vec![Json::from("stable")])), Refused),
    ("archive missing", |d| without(d, "archive"), Refused),
    ("archive list", |d| with(d, "archive", Json::Array(vec![])), Refused),
    ("name wrong", |d| with_archive(d, "name", "x.tar.gz"), Refused),
    ("url on another host", |d| with_archive(d, "url", OTHER_HOST_URL), Refused),
    ("url of another tag", |d| with_archive(d, "url", other_tag_url()), Refused),
    ("sha uppercase", |d| with_archive(d, "sha256", SHA.to_uppercase()), Accepted),
    ("sha short", |d| with_archive(d, "sha256", &SHA[1..]), Refused),
    ("sha not hex", |d| with_archive(d, "sha256", SHA.replace('a', "g")), Refused),
    ("sha missing", |d| without_archive_key(d, "sha256"), Refused),
    ("size is not checked for schema 1", |d| with_archive(d, "size", "big"), Accepted),
];

/// The 1.0.7 archive's address on a host other than the release base.
const OTHER_HOST_URL: &str = "https://example.invalid/download/v1.0.7/agents-server-1.0.7.tar.gz";

/// The 1.0.7 archive's address under the v1.0.6 tag.
fn other_tag_url() -> String {
    format!("{TEST_RELEASE_BASE}/download/v1.0.6/agents-server-1.0.7.tar.gz")
}

/// The stable manifest renamed to the build-metadata version `1.0.7+b`.
fn with_build_metadata(stable: JsonObject) -> JsonObject {
    let archive = with_archive(stable, "name", "agents-server-1.0.7+b.tar.gz");
    let url = format!("{TEST_RELEASE_BASE}/download/v1.0.7+b/agents-server-1.0.7+b.tar.gz");
    with(with_archive(archive, "url", url), "version", "1.0.7+b")
}

#[test]
fn legacy_manifests_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let stable = legacy_manifest("1.0.7");
    let beta = legacy_manifest("1.0.8-beta.2");
    #[rustfmt::skip]
    let documents: Vec<DocumentRow> = vec![
        ("stable", stable.clone(), "stable", false, Accepted),
        ("beta", beta.clone(), "beta", false, Accepted),
        ("beta on stable", beta.clone(), "stable", false, Refused),
        ("stable on beta", stable.clone(), "beta", false, Refused),
        ("track is normalised", stable.clone(), " Stable ", false, Accepted),
        ("unknown track", stable.clone(), "nightly", false, Refused),
        ("schema 3", with(stable.clone(), "schema", 3), "stable", true, Refused),
        ("prerelease 1.0 on beta", with(beta, "prerelease", 1.0), "beta", false, Accepted),
    ];
    let build_metadata = serialised(&with_build_metadata(stable.clone()));
    // (description, signed bytes, pinned version, expected outcome)
    #[rustfmt::skip]
    let signed_bytes: Vec<(&str, Vec<u8>, Option<&str>, Outcome)> = vec![
        ("not an object", b"[1, 2]\n".to_vec(), None, Refused),
        ("not JSON", b"{\"version\": \n".to_vec(), None, Refused),
        ("empty", Vec::new(), None, Refused),
        ("pin matches", serialised(&stable), Some("1.0.7"), Accepted),
        ("pin differs", serialised(&stable), Some("1.0.6"), Refused),
        ("pin differs by build metadata only", build_metadata, Some("1.0.7"), Refused),
    ];
    let mut cases = f.signed_documents(documents);
    cases.extend(f.signed_changes(&stable, LEGACY_CHANGES, false));
    cases.extend(
        signed_bytes
            .into_iter()
            .map(|(label, bytes, pin, outcome)| {
                f.raw(label, bytes, "stable", false, pin).expecting(outcome)
            }),
    );
    // (A 64-digit integer checksum passes Python's str().lower() format
    // check, but JSON integers beyond i128 are refused by our parser.)
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert!(
        accepted >= 8 && refused >= 25,
        "{accepted} accepted, {refused} refused"
    );
}

/// Bytes, signature and key checked on the stable track without npm or pin:
/// (description, manifest, signature, key file, expected outcome).
type SignatureRow<'a> = (&'a str, &'a [u8], &'a [u8], &'a Path, Outcome);

#[test]
fn signatures_and_keys_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let bytes = serialised(&legacy_manifest("1.0.7"));
    let good = f.key.sign(&bytes);
    let mut flipped = good.clone();
    flipped[10] ^= 1;
    let mut altered = bytes.clone();
    altered.push(b' ');
    let long = [good.clone(), vec![0]].concat();
    let pem = std::fs::read_to_string(&f.key.pem_path).unwrap();
    let (ours, other) = (&f.key.pem_path, &f.other.pem_path);
    let text_around = f.key_file("text.pem", &format!("comment\n{pem}trailer\n"));
    let crlf = f.key_file("crlf.pem", &pem.replace('\n', "\r\n"));
    let ec = f.key_file("ec.pem", EC_PUBLIC_KEY);
    let rsa = f.key_file("rsa.pem", RSA_PKCS1_PUBLIC_KEY);
    let garbage = f.key_file("garbage.pem", "not a key\n");
    let empty = f.key_file("empty.pem", "");
    let missing = f.dir.join("missing.pem");
    #[rustfmt::skip]
    let rows: [SignatureRow; 14] = [
        ("good", &bytes, &good, ours, Accepted),
        ("flipped signature", &bytes, &flipped, ours, Refused),
        ("altered manifest", &altered, &good, ours, Refused),
        ("short signature", &bytes, &good[..63], ours, Refused),
        ("empty signature", &bytes, &[], ours, Refused),
        ("long signature", &bytes, &long, ours, Refused),
        ("other key", &bytes, &good, other, Refused),
        ("key with text around it", &bytes, &good, &text_around, Accepted),
        ("key with CRLF", &bytes, &good, &crlf, Accepted),
        ("EC key", &bytes, &good, &ec, Refused),
        ("RSA PKCS#1 key", &bytes, &good, &rsa, Refused),
        ("garbage key", &bytes, &good, &garbage, Refused),
        ("empty key", &bytes, &good, &empty, Refused),
        ("missing key", &bytes, &good, &missing, Refused),
    ];
    let cases = rows.map(|(label, manifest, signature, key, outcome)| {
        let call = Call::Manifest {
            manifest: manifest.to_vec(),
            signature: signature.to_vec(),
            key: key.to_path_buf(),
            expected_version: None,
            track: "stable".to_string(),
            allow_npm: false,
        };
        Case::new(label, call).expecting(outcome)
    });
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert_eq!((accepted, refused), (3, 11));
}

/// Changes to the npm 1.0.8 manifest, checked with npm allowed.
#[rustfmt::skip]
const NPM_CHANGES: &[ChangeRow] = &[
    ("distribution missing", |d| without(d, "distribution"), Refused),
    ("distribution github", |d| with(d, "distribution", "github"), Refused),
    ("track missing", |d| without(d, "track"), Refused),
    ("npm missing", |d| without(d, "npm"), Refused),
    ("npm name", |d| with_npm(d, "name", "@agentsdock/other"), Refused),
    ("npm version", |d| with_npm(d, "version", "1.0.9"), Refused),
    ("size zero", |d| with_archive(d, "size", 0), Refused),
    ("size max", |d| with_archive(d, "size", 200 * 1024 * 1024), Accepted),
    ("size over", |d| with_archive(d, "size", 200 * 1024 * 1024 + 1), Refused),
    ("size bool", |d| with_archive(d, "size", true), Refused),
    ("size float", |d| with_archive(d, "size", 10.0), Refused),
    ("contract zero", |d| with(d, "api_contract_version", 0), Refused),
    ("contract bool", |d| with(d, "api_contract_version", true), Refused),
    ("contract missing", |d| without(d, "api_contract_version"), Refused),
    ("npm archive on GitHub", |d| with_archive(d, "url", github_tarball_url()), Refused),
    ("npm legacy name", |d| with_archive(d, "name", "agents-server-1.0.8.tar.gz"), Refused),
    // The npm integrity must be the canonical sha512 SRI of 64 bytes.
    ("integrity sha256 prefix", |d| with_integrity(d, sri("sha256", &[7; 64])), Refused),
    ("integrity 63 bytes", |d| with_integrity(d, sri("sha512", &[7; 63])), Refused),
    ("integrity 65 bytes", |d| with_integrity(d, sri("sha512", &[7; 65])), Refused),
    ("integrity unpadded", |d| with_integrity(d, integrity_of(7).trim_end_matches('=')), Refused),
    ("integrity non-canonical bits", |d| with_integrity(d, non_canonical_integrity()), Refused),
    ("integrity with newline", |d| with_integrity(d, format!("{}\n", integrity_of(7))), Refused),
    ("integrity number", |d| with_integrity(d, Json::Int(5)), Refused),
    ("integrity missing prefix", |d| with_integrity(d, b64(&[7; 64])), Refused),
];

/// The npm 1.0.8 tarball's name at a GitHub-release address.
fn github_tarball_url() -> String {
    format!("{TEST_RELEASE_BASE}/download/v1.0.8/server-1.0.8.tgz")
}

/// A subresource-integrity string: `<algorithm>-<base64 digest>`.
fn sri(algorithm: &str, digest: &[u8]) -> String {
    format!("{algorithm}-{}", b64(digest))
}

fn with_integrity(document: JsonObject, value: impl Into<Json>) -> JsonObject {
    with_npm(document, "integrity", value)
}

/// The good integrity with the last base64 digit changed to one whose
/// unused bits are set.
fn non_canonical_integrity() -> String {
    format!("{}x==", &integrity_of(7)[..integrity_of(7).len() - 3])
}

#[test]
fn npm_manifests_match_the_original() {
    let originals = agents_tests::require_originals!();
    let f = fixture();
    let npm = npm_manifest("1.0.8");
    #[rustfmt::skip]
    let documents: Vec<DocumentRow> = vec![
        ("npm stable", npm.clone(), "stable", true, Accepted),
        ("npm beta", npm_manifest("1.0.8-beta.3"), "beta", true, Accepted),
        ("npm refused without allow_npm", npm.clone(), "stable", false, Refused),
        ("build metadata refused", npm_manifest("1.0.8+build"), "stable", true, Refused),
    ];
    let mut cases = f.signed_documents(documents);
    cases.extend(f.signed_changes(&npm, NPM_CHANGES, true));
    let (accepted, refused) = compare_with_original(&originals, &cases);
    assert_eq!(accepted, 3);
    assert!(refused >= 20);
}

#[test]
fn npm_release_without_a_configured_registry_is_refused_clearly() {
    let f = fixture();
    let bytes = serialised(&npm_manifest("1.0.8"));
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
    let bytes = serialised(&npm);
    let (manifest, signature) = (b64(&bytes), b64(&f.key.sign(&bytes)));
    let (manifest, signature) = (manifest.as_str(), signature.as_str());
    let good = envelope(manifest, signature);
    let extra_key = Some(Json::Object(with(
        envelope_fields(manifest, signature),
        "extra",
        1,
    )));
    let padded = padded_to_multiple_of_3(&bytes);
    let lenient = envelope(format!("{}=", b64(&padded)), b64(&f.key.sign(&padded)));
    let sig_65_bytes = b64(&[1u8; 65]).trim_end_matches('=').to_string() + "=";
    let big = serialised(&with(npm.clone(), "padding", "x".repeat(8200)));
    let legacy = serialised(&legacy_manifest("1.0.8"));
    let no_track = serialised(&without(npm.clone(), "track"));
    let beta = serialised(&npm_manifest("1.0.9-beta.1"));
    // (description, envelope, pinned version, expected outcome)
    #[rustfmt::skip]
    let rows: Vec<(&str, Option<Json>, Option<&str>, Outcome)> = vec![
        ("good", good.clone(), None, Accepted),
        ("good with pin", good.clone(), Some("1.0.8"), Accepted),
        ("pin differs", good, Some("1.0.9"), Refused),
        ("absent", None, None, Refused),
        ("null", Some(Json::Null), None, Refused),
        ("list", Some(Json::Array(vec![])), None, Refused),
        ("extra key", extra_key, None, Refused),
        ("manifest not a string", envelope(Json::Int(1), signature), None, Refused),
        ("signature not a string", envelope(manifest, Json::Null), None, Refused),
        ("manifest empty", envelope("", signature), None, Refused),
        ("manifest too long", envelope("A".repeat(10_925), signature), None, Refused),
        ("signature 87 chars", envelope(manifest, &signature[1..]), None, Refused),
        ("manifest not base64", envelope("!!!!", signature), None, Refused),
        ("signature not base64", envelope(manifest, "!".repeat(88)), None, Refused),
        ("lenient trailing padding", lenient, None, Accepted),
        ("signature of 65 bytes in 88 chars", envelope(manifest, sig_65_bytes), None, Refused),
        ("payload not JSON", envelope(b64(b"not json"), signature), None, Refused),
        ("payload a list", envelope(b64(b"[]"), signature), None, Refused),
        ("payload over 8192 bytes", f.signed_envelope(&big), None, Refused),
        ("schema 1 descriptor", f.signed_envelope(&legacy), None, Refused),
        ("schema 2 descriptor without a track", f.signed_envelope(&no_track), None, Refused),
        ("beta descriptor", f.signed_envelope(&beta), None, Accepted),
        ("bad signature", envelope(manifest, b64(&[0u8; 64])), None, Refused),
    ];
    let cases: Vec<Case> = rows
        .into_iter()
        .map(|(label, envelope, pin, outcome)| {
            f.envelope_case(label, envelope, pin).expecting(outcome)
        })
        .collect();
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
            let bytes = serialised(&document);
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

//! Shared support of the release tests: real Ed25519 keys, signed manifests,
//! temporary directories and the seed itself (`update_runner.py`) run by
//! python3 as the oracle.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use agents_common::{parse_json, Json};
use ed25519_dalek::pkcs8::EncodePublicKey;
use ed25519_dalek::{Signer, SigningKey};

/// Where the Python seeds live (the specification and the oracle).
pub const SEEDS_DIR: &str = "/work/shared/seeds/extracted";
/// Release base the tests trust instead of GitHub.
pub const TEST_RELEASE_BASE: &str = "http://127.0.0.1:9/releases";
/// npm registry prefix the tests trust.
pub const TEST_NPM_BASE: &str = "http://127.0.0.1:9/npm/@agentsdock/server/-/";

/// A private directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let parent = std::env::temp_dir().canonicalize().unwrap();
        let path = parent.join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A freshly generated Ed25519 key pair with its public key written as the
/// SPKI PEM file the runner reads.
pub struct TestKey {
    pub signing: SigningKey,
    pub pem_path: PathBuf,
}

impl TestKey {
    pub fn generate(directory: &Path, name: &str) -> TestKey {
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut secret)
            .unwrap();
        let signing = SigningKey::from_bytes(&secret);
        let pem = signing
            .verifying_key()
            .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .unwrap();
        let pem_path = directory.join(name);
        std::fs::write(&pem_path, pem).unwrap();
        TestKey { signing, pem_path }
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.signing.sign(message).to_bytes().to_vec()
    }
}

/// Python's `json.dumps(value, indent=2, sort_keys=True) + "\n"`, the
/// publisher's manifest serialisation.
pub fn manifest_bytes(value: &Json) -> Vec<u8> {
    agents_common::encode_indented(value)
}

/// Run `script` with python3 (seeds on `sys.path`), feeding `input` on stdin,
/// and parse its stdout as JSON. Panics with stderr when Python fails: the
/// oracle is part of the test, never optional.
pub fn python_oracle(script: &str, input: &[u8]) -> Json {
    let preamble = format!(
        "import sys, json, base64\nsys.path.insert(0, {SEEDS_DIR:?})\nimport update_runner\n"
    );
    let mut child = Command::new("python3")
        .arg("-B")
        .arg("-c")
        .arg(format!("{preamble}{script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required for the oracle tests (scripts/setup.sh installs it)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_json(&output.stdout).unwrap()
}

/// Base64 (standard, padded) for passing bytes to the oracle.
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

//! A dist folder's build record as `scripts/build-release.sh` leaves it:
//! `SHA256SUMS` (one `<sha256>  <target>/<helper>` line per binary, sorted by
//! name) and `provenance.json` (format 1: the source commit, the build
//! command, the targets, the toolchain and the sha256 of `SHA256SUMS`).
//!
//! The migration kit refuses a dist without both, so every test that stages
//! binaries through the kit records its dist with [`record_build`]. This is
//! the test's own writer of the format, independent of the scripts' Python.

use std::fs;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The Rust targets in the order the build names them.
const TARGET_ORDER: [&str; 4] = [
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
];

/// The commit a test dist names: not a real one, as its binaries are the
/// test profile's and not a release build of any commit.
pub const TEST_COMMIT: &str = "0000000000000000000000000000000000000000";

/// The hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Writes `dist/SHA256SUMS` and `dist/provenance.json` for the
/// `<target>/<helper>` binaries the folder holds now.
pub fn record_build(dist: &Path) {
    let targets: Vec<&str> = TARGET_ORDER
        .into_iter()
        .filter(|target| dist.join(target).is_dir())
        .collect();
    let mut lines: Vec<(String, String)> = Vec::new();
    for target in &targets {
        for helper in crate::HELPERS {
            let name = format!("{target}/{helper}");
            let bytes = fs::read(dist.join(&name))
                .unwrap_or_else(|err| panic!("read {}: {err}", dist.join(&name).display()));
            lines.push((name, sha256_hex(&bytes)));
        }
    }
    lines.sort();
    let sums: String = lines
        .iter()
        .map(|(name, digest)| format!("{digest}  {name}\n"))
        .collect();
    fs::write(dist.join("SHA256SUMS"), &sums).unwrap();
    let provenance = serde_json::json!({
        "format": 1,
        "source_commit": TEST_COMMIT,
        "build_command": "cargo build --workspace (the test profile)",
        "targets": targets,
        "toolchain": {"rustc": "the test build's"},
        "sha256sums_sha256": sha256_hex(sums.as_bytes()),
    });
    let mut text = serde_json::to_string_pretty(&provenance).unwrap();
    text.push('\n');
    fs::write(dist.join("provenance.json"), text).unwrap();
}

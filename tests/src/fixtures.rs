//! The project's own test data, found relative to this crate so a fresh
//! clone needs nothing beside it.

use std::path::PathBuf;

/// The workspace's top folder (the checkout).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `tests/fixtures/<relative>`.
pub fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures")).join(relative)
}

/// `tests/fixtures/golden/<name>`: exact bytes upstream produces (see the
/// folder's README for where each file comes from).
pub fn golden_path(name: &str) -> PathBuf {
    fixture_path("golden").join(name)
}

/// The bytes of one golden file; panics when it is missing, because a
/// comparison without its facts would prove nothing.
pub fn golden_bytes(name: &str) -> Vec<u8> {
    let path = golden_path(name);
    std::fs::read(&path).unwrap_or_else(|err| panic!("golden file {}: {err}", path.display()))
}

//! Shared helpers of the `fs_*` integration tests: a private temporary
//! directory, files with explicit modes and owners, and error assertions.
//!
//! Tests run as root, which bypasses permission bits, so ownership refusals
//! are produced by chowning to another uid and mode refusals by setting modes
//! explicitly (never relying on the umask).

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use agents_common::{Error, ErrorClass};

#[path = "../shared_support/mod.rs"]
mod shared_support;
#[allow(unused_imports)] // each test file uses a different part
pub use shared_support::{make_dir, set_mode, write_file};

/// A uid that owns nothing of ours (`nobody`).
pub const OTHER_UID: u32 = 65534;

/// A fresh 0700 directory under the canonical system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let parent = std::env::temp_dir().canonicalize().unwrap();
        let name = format!(
            "agents-fs-test-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            agents_common::token_hex(4).unwrap()
        );
        let path = parent.join(name);
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The permission bits (`S_IMODE`) without following a symlink.
pub fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Hands `path` to another uid, keeping its group.
pub fn chown_other(path: &Path) {
    std::os::unix::fs::lchown(path, Some(OTHER_UID), None).unwrap();
}

/// Asserts the Python exception class and the exact `str(exc)` of an error.
#[track_caller]
pub fn assert_error(error: &Error, class: ErrorClass, message: &str) {
    assert_eq!(
        (error.class(), error.message()),
        (class, message),
        "unexpected error: {}",
        error.python_line()
    );
}

/// Asserts a raw OSError worded as Python words it: `strerror` is Python's
/// `[Errno n] text` (written out literally by each test) and the path follows.
#[track_caller]
pub fn assert_os_error(error: &Error, class: ErrorClass, strerror: &str, path: &Path) {
    assert_error(error, class, &format!("{strerror}: '{}'", path.display()));
}

/// Names in a directory, sorted, for "nothing else was left behind" checks.
pub fn entries(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

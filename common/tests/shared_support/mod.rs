//! What every support module of these tests needs: unique base directories,
//! files and directories with an exact mode whatever the umask, and the check of a failure's Python
//! exception class and message. Included by path from each support module.

#![allow(dead_code)] // each test file uses a different part of this support

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use agents_common::{Error, ErrorClass};

static NEXT_BASE: AtomicUsize = AtomicUsize::new(0);

/// `/tmp/agents-<kind>-<tag>-<pid>-<n>`: a base path no other test of any
/// process uses (the caller creates it).
pub fn unique_base(kind: &str, tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/tmp/agents-{kind}-{tag}-{}-{}",
        std::process::id(),
        NEXT_BASE.fetch_add(1, Ordering::SeqCst)
    ))
}

/// `mkdir` with an exact mode whatever the umask.
pub fn make_dir(path: &Path, mode: u32) {
    fs::create_dir(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
    set_mode(path, mode);
}

/// Writes `data` to a new or existing file and sets exactly `mode`.
pub fn write_file(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    set_mode(path, mode);
}

/// Sets exactly `mode` (following a symlink, as `chmod` does).
pub fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Asserts that `result` failed with the Python class and exact message.
#[track_caller]
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, Error>,
    class: ErrorClass,
    message: &str,
) {
    match result {
        Ok(value) => panic!("expected {class:?} {message:?}, got Ok({value:?})"),
        Err(error) => assert_eq!(
            (error.class(), error.message()),
            (class, message),
            "unexpected error"
        ),
    }
}

//! Files and directories with exact modes and owners, and the checks tests
//! make of them.
//!
//! Tests run as root, which bypasses permission bits, so ownership refusals
//! are produced by chowning to [`OTHER_UID`] and mode refusals by setting
//! modes explicitly, never by relying on the umask.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A uid that owns nothing of ours (`nobody`).
pub const OTHER_UID: u32 = 65534;

/// Creates exactly `path` (its parent must exist) with exactly `mode`.
pub fn make_dir(path: &Path, mode: u32) {
    fs::create_dir(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
    set_mode(path, mode);
}

/// Creates `path` and any missing parents; `path` itself gets exactly `mode`.
pub fn make_dirs(path: &Path, mode: u32) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir -p {}: {e}", path.display()));
    set_mode(path, mode);
}

/// Writes `data` to a new or existing file (its parent must exist) and sets
/// exactly `mode`.
pub fn write_file(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    set_mode(path, mode);
}

/// Creates a FIFO at `path` (mode 0600): a file a plain open for reading
/// would wait on for ever, for the tests of bounded reads.
pub fn make_fifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: a NUL-terminated path; mkfifo (POSIX, unlike mknod for FIFOs
    // on macOS) reads it only.
    if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
        panic!(
            "mkfifo {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// Like [`write_file`], creating missing parent directories first.
pub fn write_file_making_parents(path: &Path, data: &[u8], mode: u32) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir -p {}: {e}", parent.display()));
    }
    write_file(path, data, mode);
}

/// Sets exactly `mode` (following a symlink, as `chmod` does).
pub fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// The permission bits (`S_IMODE`) without following a symlink.
pub fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Hands `path` (not a symlink's target) to [`OTHER_UID`], keeping its group.
pub fn chown_other(path: &Path) {
    std::os::unix::fs::lchown(path, Some(OTHER_UID), None).unwrap();
}

/// Names in a directory, sorted, for "nothing else was left behind" checks.
pub fn entries(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(directory)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", directory.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `/tmp/agents-<kind>-<tag>-<pid>-<n>`: a path no other test of any process
/// uses, not created yet. Fixed (not canonicalised) because golden layouts
/// name their base literally.
pub fn unique_base(kind: &str, tag: &str) -> PathBuf {
    static NEXT_BASE: AtomicUsize = AtomicUsize::new(0);
    PathBuf::from(format!(
        "/tmp/agents-{kind}-{tag}-{}-{}",
        std::process::id(),
        NEXT_BASE.fetch_add(1, Ordering::SeqCst)
    ))
}

//! The few coreutils the legacy script runs on files (`rm -rf`, `rm -f`,
//! `rmdir`), with their failure lines, so each failure is reported and
//! treated where the script's `set -e` would treat it.
//!
//! Deviation: `rm -rf` of a tree stops at its first failure (one line naming
//! the tree) where coreutils goes on and reports each entry; either way the
//! script then exits 1 with the rest of the tree kept.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::output::warn;

/// strerror text, as coreutils prints it after the path.
pub(super) fn os_message(err: &io::Error) -> String {
    let text = err.to_string();
    match err.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

/// `rm -rf -- path`: removes a file, symlink (never followed) or directory
/// tree; a missing path is fine. A failure is printed and returned.
pub(super) fn rm_rf(path: &Path) -> Result<(), ()> {
    let removed = match fs::symlink_metadata(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => Err(err),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    removed.map_err(|err| {
        warn(&[
            b"rm: cannot remove '",
            path.as_os_str().as_bytes(),
            b"': ",
            os_message(&err).as_bytes(),
        ]);
    })
}

/// `rm -rf` whose failure the script ignores (inside a function it calls
/// in an `||` list, where bash disables `set -e`).
pub(super) fn remove_tree(path: &Path) {
    let _ = rm_rf(path);
}

/// `rm -f -- path`: removes a non-directory; a missing path is fine.
pub(super) fn rm_f(path: &Path) -> Result<(), ()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => {
            warn(&[
                b"rm: cannot remove '",
                path.as_os_str().as_bytes(),
                b"': ",
                os_message(&err).as_bytes(),
            ]);
            Err(())
        }
    }
}

/// `rmdir -- path`, printing rmdir's failure line.
pub(super) fn rmdir(path: &Path) -> Result<(), ()> {
    fs::remove_dir(path).map_err(|err| {
        warn(&[
            b"rmdir: failed to remove '",
            path.as_os_str().as_bytes(),
            b"': ",
            os_message(&err).as_bytes(),
        ]);
    })
}

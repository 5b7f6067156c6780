//! The two path spellings the activation journal compares.
//!
//! `activation_transaction._absolute` is lexical (`abspath(expanduser(p))`),
//! and the consumer compares journal text with `str(Path(...))`. Both are
//! plain string transformations; neither touches the filesystem, so a journal
//! naming a path through a symlink compares as Python compares it.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::fs::{normpath, pure_path};

/// `_absolute(p)`: `os.path.abspath(os.path.expanduser(p))`: `~` and `~/...`
/// expand from `HOME`, a relative path joins the working directory, and `..`
/// collapses lexically (never through the filesystem).
///
/// `~user` is left as typed (Python would consult the password database);
/// journals never contain it.
pub fn absolute_path(path: impl AsRef<Path>) -> PathBuf {
    let raw = path.as_ref().as_os_str().as_bytes();
    let mut text = expand_home(raw);
    if !text.starts_with(b"/") {
        let mut joined = std::env::current_dir()
            .map(|cwd| cwd.into_os_string().into_vec())
            .unwrap_or_else(|_| b"/".to_vec());
        if !joined.ends_with(b"/") {
            joined.push(b'/');
        }
        joined.extend_from_slice(&text);
        text = joined;
    }
    PathBuf::from(OsStr::from_bytes(&normpath(&text)))
}

/// `str(Path(p))`: repeated slashes and `.` segments drop, a trailing slash
/// drops, `..` stays, exactly two leading slashes stay.
pub fn pure_path_text(path: impl AsRef<Path>) -> String {
    pure_path(path.as_ref()).to_string_lossy().into_owned()
}

/// `ancestor in path.parents` (or `ancestor == path.parent`) for lexically
/// normalised paths.
pub(crate) fn is_strict_ancestor(ancestor: &Path, path: &Path) -> bool {
    path != ancestor
        && path.starts_with(ancestor)
        && path.as_os_str().len() > ancestor.as_os_str().len()
}

fn expand_home(raw: &[u8]) -> Vec<u8> {
    if !raw.starts_with(b"~") {
        return raw.to_vec();
    }
    let end = raw.iter().position(|&b| b == b'/').unwrap_or(raw.len());
    if end != 1 {
        return raw.to_vec();
    }
    let Some(home) = std::env::var_os("HOME") else {
        return raw.to_vec();
    };
    let mut home = home.as_bytes().to_vec();
    while home.ends_with(b"/") {
        home.pop();
    }
    home.extend_from_slice(&raw[end..]);
    if home.is_empty() {
        home.push(b'/');
    }
    home
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_is_lexical_like_abspath() {
        // Expected values are Python 3.11's os.path.abspath results.
        assert_eq!(absolute_path("/a//b/./c/"), Path::new("/a/b/c"));
        assert_eq!(absolute_path("/a/../../b"), Path::new("/b"));
        assert_eq!(absolute_path("//a/../b").as_os_str(), "//b");
        assert_eq!(absolute_path("///a").as_os_str(), "/a");
        assert_eq!(absolute_path("/").as_os_str(), "/");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute_path("x/../y"), cwd.join("y"));
    }

    #[test]
    fn pure_text_keeps_parent_segments() {
        assert_eq!(pure_path_text("/a//b/./c/"), "/a/b/c");
        assert_eq!(pure_path_text("/a/../b"), "/a/../b");
        assert_eq!(pure_path_text("//a"), "//a");
        assert_eq!(pure_path_text("rel/./x"), "rel/x");
        assert_eq!(pure_path_text(""), ".");
    }

    #[test]
    fn ancestors_are_strict_and_component_wise() {
        assert!(is_strict_ancestor(
            Path::new("/r"),
            Path::new("/r/s/execution")
        ));
        assert!(!is_strict_ancestor(Path::new("/r"), Path::new("/r")));
        assert!(!is_strict_ancestor(
            Path::new("/r"),
            Path::new("/rs/execution")
        ));
    }
}

//! Python `pathlib`/`posixpath` semantics that the originals' path checks depend on.
//!
//! The journal and the layout manifest store `str(Path(...))`, and `_path`
//! refuses a path whose `resolve(strict=False)` differs from it, so both the
//! lexical normalisation and `realpath` must match Python 3.11 byte for byte.
//! Everything here works on raw bytes because POSIX paths are bytes.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::exception::{Exception, Result};
use crate::text::repr_surrogateescape;

/// `str(PurePosixPath(path))`: repeated `/` and `.` segments drop, a trailing
/// `/` drops, `..` stays, and exactly two leading slashes stay (POSIX leaves
/// their meaning to the implementation, so Python keeps them).
pub fn pure_path(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let (root, rest) = split_root(bytes);
    let mut out = root.to_vec();
    for (index, part) in parts_of(rest).enumerate() {
        if index > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(part);
    }
    if out.is_empty() {
        out.push(b'.');
    }
    from_bytes(out)
}

/// `Path.parent` of an already pure path: the root is its own parent.
pub fn parent(path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let (root, rest) = split_root(bytes);
    let parts: Vec<&[u8]> = parts_of(rest).collect();
    if parts.is_empty() {
        return path.to_path_buf();
    }
    let mut out = root.to_vec();
    out.extend_from_slice(&parts[..parts.len() - 1].join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    from_bytes(out)
}

/// `Path.parents` of a pure path, nearest first (empty for a bare root).
pub fn ancestors(path: &Path) -> Vec<PathBuf> {
    let mut result = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        let next = parent(&current);
        if next.as_os_str() == current.as_os_str() {
            return result;
        }
        result.push(next.clone());
        current = next;
    }
}

/// `Path.name`: the last component, empty for a bare root.
pub fn name(path: &Path) -> &[u8] {
    let (_, rest) = split_root(path.as_os_str().as_bytes());
    parts_of(rest).last().unwrap_or(b"")
}

/// `path / name` for a pure directory path and a single component.
pub fn child(directory: &Path, name: &[u8]) -> PathBuf {
    let mut out = directory.as_os_str().as_bytes().to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    from_bytes(out)
}

/// True when a pure path is absolute, as `PurePosixPath.is_absolute`.
pub fn is_absolute(path: &Path) -> bool {
    path.as_os_str().as_bytes().starts_with(b"/")
}

/// True when any component of a pure path is exactly `..`.
pub fn has_traversal(path: &Path) -> bool {
    let (_, rest) = split_root(path.as_os_str().as_bytes());
    parts_of(rest).any(|part| part == b"..")
}

/// `Path.resolve(strict=False)` of Python 3.11: `os.path.realpath` without
/// strictness, then a `stat` of the result whose only consequence is turning
/// `ELOOP` into `RuntimeError("Symlink loop from '<result>'")`.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    let joined = realpath(path, Strictness::Lenient)?;
    let resolved = pure_path(&from_bytes(normpath(&joined)));
    if let Err(rustix::io::Errno::LOOP) = rustix::fs::stat(&resolved) {
        return Err(Exception::runtime(format!(
            "Symlink loop from {}",
            repr_surrogateescape(resolved.as_os_str().as_bytes())
        )));
    }
    Ok(resolved)
}

/// `Path.resolve(strict=True)` of Python 3.11: `os.path.realpath(path,
/// strict=True)`, which `lstat`s each component in turn and follows each
/// symlink where it stands, so a failure names the component that failed (a
/// dangling link's missing target, not the link itself); a symlink loop is
/// `RuntimeError("Symlink loop from '<component>'")`. The result is absolute.
pub fn resolve_strict(path: &Path) -> Result<PathBuf> {
    Ok(absolute_path(from_bytes(realpath(
        path,
        Strictness::Strict,
    )?)))
}

/// `posixpath.realpath`'s walk of `path` (before `abspath`).
fn realpath(path: &Path, strictness: Strictness) -> Result<Vec<u8>> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.contains(&0) {
        // Python's first lstat of the component that holds the byte refuses it.
        return Err(Exception::value("embedded null byte"));
    }
    let mut seen = HashMap::new();
    Ok(join_realpath(b"", bytes, &mut seen, strictness)?.0)
}

/// `realpath`'s `strict`: whether a component that cannot be examined raises.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    Lenient,
    Strict,
}

/// The error `pathlib.resolve(strict=True)` raises for `newpath`: its
/// `OSError`, or the `RuntimeError` it makes of `ELOOP`.
fn strict_failure(errno: Errno, newpath: &Path) -> Exception {
    if errno == Errno::LOOP {
        return Exception::runtime(format!(
            "Symlink loop from {}",
            repr_surrogateescape(newpath.as_os_str().as_bytes())
        ));
    }
    Exception::from_errno(errno, newpath)
}

fn split_root(bytes: &[u8]) -> (&[u8], &[u8]) {
    let slashes = bytes.iter().take_while(|&&b| b == b'/').count();
    match slashes {
        0 => (b"", bytes),
        2 => (&bytes[..2], &bytes[2..]),
        _ => (&bytes[..1], &bytes[slashes..]),
    }
}

fn parts_of(rest: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    rest.split(|&b| b == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
}

fn from_bytes(bytes: Vec<u8>) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(&bytes))
}

/// `posixpath.join(a, b)` for two strings.
fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if b.starts_with(b"/") {
        return b.to_vec();
    }
    let mut out = a.to_vec();
    if !out.is_empty() && !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(b);
    out
}

/// `posixpath.split(p)`: head without trailing slashes (unless all slashes), tail.
fn split(p: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let cut = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let (mut head, tail) = (p[..cut].to_vec(), p[cut..].to_vec());
    if !head.is_empty() && head.iter().any(|&b| b != b'/') {
        while head.ends_with(b"/") {
            head.pop();
        }
    }
    (head, tail)
}

/// `posixpath.normpath`: the lexical step of `abspath` and `realpath`.
pub(crate) fn normpath(path: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        return b".".to_vec();
    }
    let initial = if path.starts_with(b"//") && !path.starts_with(b"///") {
        2
    } else if path.starts_with(b"/") {
        1
    } else {
        0
    };
    let mut comps: Vec<&[u8]> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        if comp.is_empty() || comp == b"." {
            continue;
        }
        if comp != b".." || (initial == 0 && comps.is_empty()) || comps.last() == Some(&&b".."[..])
        {
            comps.push(comp);
        } else if !comps.is_empty() {
            comps.pop();
        }
    }
    let mut out = vec![b'/'; initial];
    out.extend_from_slice(&comps.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

type Seen = HashMap<Vec<u8>, Option<Vec<u8>>>;

/// `posixpath._joinrealpath(path, rest, strict, seen)`: resolves each
/// existing symlink once; lenient, it treats lstat failures as "not a link"
/// and on a loop returns the unresolved remainder with `ok = false`; strict,
/// it raises both ([`strict_failure`]).
fn join_realpath(
    path: &[u8],
    rest: &[u8],
    seen: &mut Seen,
    strictness: Strictness,
) -> Result<(Vec<u8>, bool)> {
    let mut path = path.to_vec();
    let mut rest = rest;
    if rest.starts_with(b"/") {
        rest = &rest[1..];
        path = b"/".to_vec();
    }
    while !rest.is_empty() {
        let (name, remainder) = match rest.iter().position(|&b| b == b'/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &b""[..]),
        };
        rest = remainder;
        if name.is_empty() || name == b"." {
            continue;
        }
        if name == b".." {
            if path.is_empty() {
                path = b"..".to_vec();
            } else {
                let (head, tail) = split(&path);
                path = if tail == b".." {
                    join(&join(&head, b".."), b"..")
                } else {
                    head
                };
            }
            continue;
        }
        let newpath = join(&path, name);
        let newpath_os = from_bytes(newpath.clone());
        let is_link = match rustix::fs::lstat(&newpath_os) {
            Ok(info) => rustix::fs::FileType::from_raw_mode(info.st_mode).is_symlink(),
            Err(errno) if strictness == Strictness::Strict => {
                return Err(strict_failure(errno, &newpath_os))
            }
            Err(_) => false,
        };
        if !is_link {
            path = newpath;
            continue;
        }
        if let Some(cached) = seen.get(&newpath) {
            match cached {
                Some(resolved) => {
                    path = resolved.clone();
                    continue;
                }
                None if strictness == Strictness::Strict => {
                    // `os.stat(newpath)` names the loop.
                    let errno = rustix::fs::stat(&newpath_os).err().unwrap_or(Errno::LOOP);
                    return Err(strict_failure(errno, &newpath_os));
                }
                None => return Ok((join(&newpath, rest), false)),
            }
        }
        seen.insert(newpath.clone(), None);
        let target = rustix::fs::readlink(&newpath_os, Vec::new())
            .map_err(|errno| Exception::from_errno(errno, &newpath_os))?;
        let (resolved, ok) = join_realpath(&path, target.as_bytes(), seen, strictness)?;
        if !ok {
            return Ok((join(&resolved, rest), false));
        }
        path = resolved.clone();
        seen.insert(newpath, Some(resolved));
    }
    Ok((path, true))
}

/// The errors Python 3.11's `pathlib` reads as "not there" in its boolean
/// tests (`exists()`, `is_symlink()`) instead of raising them.
pub fn pathlib_ignores(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::NOENT | Errno::NOTDIR | Errno::BADF | Errno::LOOP
    )
}

/// The answer of one of `pathlib`'s boolean tests (`exists()`,
/// `is_symlink()`): the [`pathlib_ignores`] errors mean `false`, others raise.
pub fn pathlib_test(result: rustix::io::Result<bool>, path: &Path) -> Result<bool> {
    match result {
        Ok(answer) => Ok(answer),
        Err(errno) if pathlib_ignores(errno) => Ok(false),
        Err(errno) => Err(Exception::from_errno(errno, path)),
    }
}

/// `stat` as Python's `Path.exists()`/`is_file()` see it: follows symlinks,
/// and the "missing"-like errors they swallow mean `None`; others propagate.
pub fn stat_if_present(path: &Path) -> Result<Option<rustix::fs::Stat>> {
    match rustix::fs::stat(path) {
        Ok(info) => Ok(Some(info)),
        Err(errno) if pathlib_ignores(errno) => Ok(None),
        Err(errno) => Err(Exception::from_errno(errno, path)),
    }
}

/// `os.path.dirname` of a byte path.
pub fn dirname(path: &[u8]) -> &[u8] {
    let Some(index) = path.iter().rposition(|byte| *byte == b'/') else {
        return b"";
    };
    let head = &path[..=index];
    let trimmed = head.len() - head.iter().rev().take_while(|byte| **byte == b'/').count();
    if trimmed == 0 {
        head
    } else {
        &head[..trimmed]
    }
}

/// `os.path.split` of a byte path.
pub(crate) fn split_bytes(path: &[u8]) -> (&[u8], &[u8]) {
    let index = path
        .iter()
        .rposition(|byte| *byte == b'/')
        .map_or(0, |index| index + 1);
    let (head, tail) = path.split_at(index);
    let trimmed = head.len() - head.iter().rev().take_while(|byte| **byte == b'/').count();
    if trimmed == 0 {
        (head, tail)
    } else {
        (&head[..trimmed], tail)
    }
}

/// `os.makedirs(path)` (mode 0o777 before the umask, `exist_ok=False`):
/// parents are created as needed and an existing final component raises
/// `FileExistsError`, even when it is spelt `a/..`.
pub fn makedirs(path: &Path) -> Result<()> {
    let bytes = path.as_os_str().as_bytes();
    let (mut head, mut tail) = split_bytes(bytes);
    if tail.is_empty() {
        (head, tail) = split_bytes(head);
    }
    if !head.is_empty() && !tail.is_empty() {
        let head_path = Path::new(OsStr::from_bytes(head));
        if !head_path.exists() {
            match makedirs(head_path) {
                Err(err) if err.class() == crate::exception::ErrorClass::FileExists => {}
                other => other?,
            }
        }
        if tail == b"." {
            return Ok(());
        }
    }
    std::fs::create_dir(path).map_err(|err| Exception::from_io_path(&err, path))
}

/// `_absolute(p)`: `os.path.abspath(os.path.expanduser(p))`: `~`, `~/...`
/// and `~user/...` expand as [`expanduser`] does, a relative path joins the
/// working directory, and `..` collapses lexically (never through the
/// filesystem).
pub fn absolute_path(path: impl AsRef<Path>) -> PathBuf {
    let raw = path.as_ref().as_os_str().as_bytes();
    let mut text = expanduser(raw);
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

/// `str(path)` as Python's stderr writes it inside a message (`f"...{path}"`):
/// UTF-8 as it is, each undecodable byte as `\udcXX`.
pub fn shown(path: &Path) -> String {
    crate::text::display_surrogateescape(path.as_os_str().as_bytes())
}

/// `str(Path(p))`: repeated slashes and `.` segments drop, a trailing slash
/// drops, `..` stays, exactly two leading slashes stay.
pub fn pure_path_text(path: impl AsRef<Path>) -> String {
    pure_path(path.as_ref()).to_string_lossy().into_owned()
}

/// Compare two paths as `pathlib` does (`Path(a) == Path(b)`).
pub fn same_path(a: &Path, b: &Path) -> bool {
    pure_path_text(a) == pure_path_text(b)
}

/// `ancestor in path.parents` (or `ancestor == path.parent`) for lexically
/// normalised paths.
pub fn is_strict_ancestor(ancestor: &Path, path: &Path) -> bool {
    path != ancestor
        && path.starts_with(ancestor)
        && path.as_os_str().len() > ancestor.as_os_str().len()
}

/// `os.path.expanduser` of a path's bytes: `~` and `~/...` expand from
/// `HOME` (or, without `HOME`, this user's home in the password database),
/// `~user` and `~user/...` from that user's home in the password database;
/// trailing slashes of the home drop. An unknown user leaves the path as
/// typed, as Python does.
pub fn expanduser(raw: &[u8]) -> Vec<u8> {
    if !raw.starts_with(b"~") {
        return raw.to_vec();
    }
    let end = raw.iter().position(|&b| b == b'/').unwrap_or(raw.len());
    let home = if end == 1 {
        match std::env::var_os("HOME") {
            Some(home) => Some(home.into_vec()),
            None => password_home(None),
        }
    } else {
        password_home(Some(&raw[1..end]))
    };
    let Some(mut home) = home else {
        return raw.to_vec();
    };
    while home.ends_with(b"/") {
        home.pop();
    }
    home.extend_from_slice(&raw[end..]);
    if home.is_empty() {
        home.push(b'/');
    }
    home
}

/// `pwd.getpwnam(name).pw_dir`, or `pwd.getpwuid(os.getuid()).pw_dir`
/// without a name; `None` where the database has no such entry (or the name
/// holds a NUL byte, which no entry can).
fn password_home(name: Option<&[u8]>) -> Option<Vec<u8>> {
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    loop {
        // SAFETY: `entry` and `buffer` outlive the call; `found` is set to
        // `&entry` or null by getpw*_r, and read only after it returns.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let status = match name {
            Some(name) => {
                let name = std::ffi::CString::new(name).ok()?;
                // SAFETY: as above; `name` is NUL-terminated and lives to the end of the call.
                unsafe {
                    libc::getpwnam_r(
                        name.as_ptr(),
                        &mut entry,
                        buffer.as_mut_ptr(),
                        buffer.len(),
                        &mut found,
                    )
                }
            }
            // SAFETY: as above.
            None => unsafe {
                libc::getpwuid_r(
                    libc::getuid(),
                    &mut entry,
                    buffer.as_mut_ptr(),
                    buffer.len(),
                    &mut found,
                )
            },
        };
        if status == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if status != 0 || found.is_null() || entry.pw_dir.is_null() {
            return None;
        }
        // SAFETY: pw_dir points into `buffer`, NUL-terminated by getpw*_r.
        let home = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
        return Some(home.to_bytes().to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pure(text: &str) -> String {
        pure_path(Path::new(text)).to_str().unwrap().to_string()
    }

    #[test]
    fn pure_path_matches_purepath() {
        // Expected values are what Python 3.11 prints for str(PurePosixPath(x)).
        assert_eq!(pure("/a//b/./c/"), "/a/b/c");
        assert_eq!(pure("//a/b"), "//a/b");
        assert_eq!(pure("///a"), "/a");
        assert_eq!(pure("////"), "/");
        assert_eq!(pure("//"), "//");
        assert_eq!(pure(""), ".");
        assert_eq!(pure("a/../b/"), "a/../b");
        assert_eq!(pure("./"), ".");
    }

    #[test]
    fn parents_and_names_match_python() {
        let p = Path::new("/a/b/c");
        assert_eq!(parent(p), Path::new("/a/b"));
        assert_eq!(
            ancestors(p),
            vec![
                PathBuf::from("/a/b"),
                PathBuf::from("/a"),
                PathBuf::from("/")
            ]
        );
        assert_eq!(parent(Path::new("//x")).to_str(), Some("//"));
        assert_eq!(parent(Path::new("/")), Path::new("/"));
        assert!(ancestors(Path::new("/")).is_empty());
        assert_eq!(name(Path::new("/a/b.json")), b"b.json");
        assert_eq!(name(Path::new("/")), b"");
        assert_eq!(child(Path::new("/"), b"x"), Path::new("/x"));
        assert_eq!(child(Path::new("/a"), b"x"), Path::new("/a/x"));
    }

    #[test]
    fn posixpath_helpers_match_python() {
        assert_eq!(split(b"/a/b"), (b"/a".to_vec(), b"b".to_vec()));
        assert_eq!(split(b"//"), (b"//".to_vec(), b"".to_vec()));
        assert_eq!(split(b"/a//"), (b"/a".to_vec(), b"".to_vec()));
        assert_eq!(normpath(b"/a/../../b/"), b"/b");
        assert_eq!(normpath(b"//a/./b"), b"//a/b");
        assert_eq!(normpath(b"///a"), b"/a");
        assert_eq!(join(b"/a", b"/b"), b"/b");
        assert_eq!(join(b"/a/", b"b"), b"/a/b");
    }

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

//! `execution_durability`: flush every retained executable generation before
//! the installer stops a native service, so a power loss after the stop can
//! never leave the journal pointing at releases whose bytes were not durable.
//!
//! Nothing is written, moved or chmodded here; every member is fsynced
//! through descriptors opened relative to its directory without following
//! links, and its identity is compared before and after.

// `stat` field types differ between platforms (u64 on Linux x86_64, i32
// st_dev on macOS); the casts that are no-ops here are not elsewhere.
#![allow(clippy::unnecessary_cast)]

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use agents_common::{
    fsync_directory_nofollow, locate_release, open_leaf, release_matches, ActivationManifest,
    Error, Result,
};
use python_compat::{
    json::JsonObject,
    os::{ctime_ns, current_uid, is_type, lstat, mtime_ns, open, permission_bits},
    path::same_path,
};

/// Most members one tree may have.
const MAX_ENTRIES: u64 = 250_000;
/// Most regular-file bytes one tree may hold (16 GiB).
const MAX_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// `_identity(info)`: what must not change while a member is flushed.
type Identity = (u64, u64, u32, u32, i64, i128, i128, u64);

fn identity(info: &Stat) -> Identity {
    (
        info.st_dev as u64,
        info.st_ino as u64,
        info.st_mode as u32,
        info.st_uid,
        info.st_size as i64,
        mtime_ns(info),
        ctime_ns(info),
        info.st_nlink as u64,
    )
}

/// How a full barrier drains the device's write cache after `fsync`.
///
/// The original adds `fcntl(F_FULLFSYNC)` when `sys.platform == "darwin"`;
/// [`SystemSync`] does so on macOS, and tests observe which files get it.
pub trait FullSync {
    /// `sys.platform == "darwin"`.
    fn host_is_darwin(&self) -> bool;
    /// `fcntl(file, F_FULLFSYNC)`.
    fn full_fsync(&self, file: BorrowedFd<'_>) -> rustix::io::Result<()>;
}

/// The host's own barrier: `F_FULLFSYNC` on macOS, nothing more elsewhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemSync;

impl FullSync for SystemSync {
    fn host_is_darwin(&self) -> bool {
        cfg!(target_os = "macos")
    }

    fn full_fsync(&self, _file: BorrowedFd<'_>) -> rustix::io::Result<()> {
        #[cfg(any(target_os = "macos", target_os = "ios"))]
        rustix::fs::fcntl_fullfsync(_file)?;
        Ok(())
    }
}

/// `flush_activation(root, value)`: the durability barrier install.sh runs
/// (through `execution-activation durability`) before quiescing: flush the
/// candidate, the rollback release and the pinned old worker, then the root.
pub fn flush_activation(root: &Path, value: &ActivationManifest) -> Result<()> {
    flush_activation_on(root, value, &SystemSync)
}

/// [`flush_activation`] with the full barriers made through `sync`.
pub fn flush_activation_on(
    root: &Path,
    value: &ActivationManifest,
    sync: &dyn FullSync,
) -> Result<()> {
    let info = lstat(root)?;
    if !is_type(&info, FileType::Directory)
        || info.st_uid != current_uid()
        || permission_bits(&info) != 0o700
    {
        return Err(Error::permission(
            "activation durability requires a private install root",
        ));
    }
    if !["prepared", "guarded"].contains(&value.phase()) {
        return Err(Error::runtime(
            "runtime durability must precede native quiescing",
        ));
    }
    let releases: [JsonObject; 3] = [
        value.release("candidate_release"),
        value.release("old_release"),
        value
            .execution_field("old_worker_release")
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ];
    let mut seen: Vec<PathBuf> = Vec::new();
    for release in releases.iter().filter(|release| !release.is_empty()) {
        let Some(path) = locate_release(release, &[])? else {
            return Err(Error::runtime(
                "durability runtime is not retained by the journal",
            ));
        };
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        flush_tree(&path, false, sync)?;
        fsync_directory_nofollow(&agents_common::parent_of(&path))?;
        full_barrier(&path.join("VERSION"), sync)?;
        if !release_matches(&path, release)? {
            return Err(Error::runtime("durability runtime identity changed"));
        }
    }
    fsync_directory_nofollow(root)
}

/// `flush_tree(root, dependency_prefix=...)`: fsync every regular file and
/// directory of an owned tree on one device; a link may leave the tree only
/// as `.venv/bin/python*`, whose interpreter then gets its own barrier.
pub(crate) fn flush_tree(root: &Path, dependency_prefix: bool, sync: &dyn FullSync) -> Result<()> {
    let resolved = python_compat::path::resolve_strict(root)?;
    if !root.has_root() || !same_path(&resolved, root) {
        return Err(Error::value(
            "durability tree must have no linked ancestors",
        ));
    }
    let root_info = lstat(root)?;
    if !is_type(&root_info, FileType::Directory)
        || root_info.st_uid != current_uid()
        || root_info.st_mode & 0o022 != 0
    {
        return Err(Error::permission("durability tree root is unsafe"));
    }
    let mut walk = Walk {
        root,
        device: root_info.st_dev as u64,
        dependency_prefix,
        entries: 0,
        bytes: 0,
        external: Vec::new(),
        observed: Vec::new(),
    };
    walk.visit(root, None)?;
    let mut external = std::mem::take(&mut walk.external);
    external.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    external.dedup();
    for interpreter in external {
        flush_interpreter(&interpreter, sync)?;
    }
    for (path, expected) in &walk.observed {
        if identity(&lstat(path)?) != *expected {
            return Err(Error::runtime("durability tree changed after flush"));
        }
    }
    if identity(&lstat(root)?) != identity(&root_info) {
        return Err(Error::runtime("durability root changed after flush"));
    }
    Ok(())
}

/// The state of one `flush_tree` walk.
struct Walk<'a> {
    root: &'a Path,
    device: u64,
    dependency_prefix: bool,
    entries: u64,
    bytes: u64,
    external: Vec<PathBuf>,
    observed: Vec<(PathBuf, Identity)>,
}

impl Walk<'_> {
    fn visit(&mut self, directory: &Path, parent: Option<&OwnedFd>) -> Result<()> {
        let before = lstat(directory)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let descriptor = match parent {
            None => open(directory, flags, Mode::empty())?,
            Some(parent) => {
                let name = directory.file_name().unwrap_or_default();
                rustix::fs::openat(parent, name, flags, Mode::empty())
                    .map_err(|errno| Error::from_errno(errno, directory))?
            }
        };
        if identity(&before) != identity(&rustix::fs::fstat(&descriptor)?)
            || before.st_uid != current_uid()
            || before.st_dev as u64 != self.device
        {
            return Err(Error::permission(
                "durability directory ownership or device changed",
            ));
        }
        let names = list(&descriptor, directory)?;
        for name in &names {
            if name.as_bytes().iter().any(|&b| b < 32) {
                return Err(Error::value(
                    "durability member contains control characters",
                ));
            }
            let child = directory.join(name);
            let info = member_stat(&descriptor, name, &child)?;
            self.check_member(&info)?;
            if is_type(&info, FileType::Directory) {
                self.visit(&child, Some(&descriptor))?;
            } else if is_type(&info, FileType::RegularFile) {
                self.flush_file(&descriptor, name, &child, &info)?;
            } else if is_type(&info, FileType::Symlink) {
                self.check_link(&descriptor, name, &child)?;
            } else {
                return Err(Error::value("durability tree contains a special file"));
            }
            if identity(&info) != identity(&member_stat(&descriptor, name, &child)?) {
                return Err(Error::runtime("durability member changed while flushing"));
            }
            self.observed.push((child, identity(&info)));
        }
        if names != list(&descriptor, directory)?
            || identity(&before) != identity(&lstat(directory)?)
        {
            return Err(Error::runtime(
                "durability directory changed while flushing",
            ));
        }
        rustix::fs::fsync(&descriptor)?;
        Ok(())
    }

    fn check_member(&mut self, info: &Stat) -> Result<()> {
        if info.st_uid != current_uid() || info.st_dev as u64 != self.device {
            return Err(Error::permission(
                "durability member ownership or device changed",
            ));
        }
        if self.dependency_prefix && !is_type(info, FileType::Symlink) && info.st_mode & 0o022 != 0
        {
            return Err(Error::permission(
                "standalone Python durability member is writable by others",
            ));
        }
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(Error::value("durability tree exceeds entry limit"));
        }
        Ok(())
    }

    fn flush_file(
        &mut self,
        directory: &OwnedFd,
        name: &OsStr,
        child: &Path,
        info: &Stat,
    ) -> Result<()> {
        self.bytes += info.st_size as u64;
        if self.bytes > MAX_BYTES {
            return Err(Error::value("durability tree exceeds byte limit"));
        }
        let file = rustix::fs::openat(
            directory,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| Error::from_errno(errno, child))?;
        if identity(info) != identity(&rustix::fs::fstat(&file)?) {
            return Err(Error::runtime("durability file changed before flush"));
        }
        rustix::fs::fsync(&file)?;
        if identity(info) != identity(&rustix::fs::fstat(&file)?) {
            return Err(Error::runtime("durability file changed while flushing"));
        }
        Ok(())
    }

    fn check_link(&mut self, directory: &OwnedFd, name: &OsStr, child: &Path) -> Result<()> {
        let target = rustix::fs::readlinkat(directory, name, Vec::new())
            .map_err(|errno| Error::from_errno(errno, child))?;
        let resolved = python_compat::path::resolve_strict(child)?;
        let inside = resolved.starts_with(self.root) && resolved.as_path() != self.root;
        if !inside {
            let relative: Vec<&OsStr> = child
                .strip_prefix(self.root)
                .map(|rest| rest.iter().collect())
                .unwrap_or_default();
            let resolved_name = resolved.file_name().unwrap_or_default();
            if self.dependency_prefix
                || relative.len() != 3
                || relative[0] != ".venv"
                || relative[1] != "bin"
                || !is_python_name(relative[2].as_bytes())
                || !is_python_name(resolved_name.as_bytes())
            {
                return Err(Error::value(
                    "external durability link is not a Python interpreter",
                ));
            }
            self.external.push(resolved);
        }
        let again = rustix::fs::readlinkat(directory, name, Vec::new())
            .map_err(|errno| Error::from_errno(errno, child))?;
        if target != again {
            return Err(Error::runtime("durability link changed while flushing"));
        }
        Ok(())
    }
}

/// One external interpreter a `.venv/bin/python*` link resolves to.
fn flush_interpreter(interpreter: &Path, sync: &dyn FullSync) -> Result<()> {
    let info = lstat(interpreter)?;
    if !is_type(&info, FileType::RegularFile)
        || (info.st_uid != 0 && info.st_uid != current_uid())
        || info.st_mode & 0o022 != 0
        || info.st_mode & 0o111 == 0
    {
        return Err(Error::permission(
            "external durability interpreter is unsafe",
        ));
    }
    if info.st_uid == 0 {
        // System interpreters are provisioned outside the updater; never
        // traverse an OS-managed installation.
        return Ok(());
    }
    let bin = agents_common::parent_of(interpreter);
    let prefix = agents_common::parent_of(&bin);
    let version = interpreter
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_prefix("python"))
        .filter(|version| is_dotted_pair(version));
    let prefix_name = prefix
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    if is_standalone_cpython(prefix_name) {
        let complete = bin.file_name() == Some(OsStr::new("bin"))
            && version.is_some_and(|version| {
                prefix.join("lib").join(format!("python{version}")).is_dir()
            })
            && prefix.join("BUILD").is_file()
            && !prefix.join("BUILD").is_symlink();
        if !complete {
            return Err(Error::value(
                "owned uv Python has no bounded standalone runtime",
            ));
        }
        flush_tree(&prefix, true, sync)?;
        fsync_directory_nofollow(&agents_common::parent_of(&prefix))?;
    }
    full_barrier(interpreter, sync)?;
    if identity(&info) != identity(&lstat(interpreter)?) {
        return Err(Error::runtime("external durability interpreter changed"));
    }
    Ok(())
}

/// `_full_barrier(path)`: fsync a regular file, plus `F_FULLFSYNC` on macOS
/// where fsync alone need not drain the device cache.
fn full_barrier(path: &Path, sync: &dyn FullSync) -> Result<()> {
    let (descriptor, info) = open_leaf(path, OFlags::RDONLY)?;
    if !is_type(&info, FileType::RegularFile) {
        return Err(Error::runtime("durability anchor is not a regular file"));
    }
    rustix::fs::fsync(&descriptor)?;
    if sync.host_is_darwin() {
        sync.full_fsync(descriptor.as_fd())?;
    }
    Ok(())
}

/// A tree member's `lstat` relative to its open directory, so a renamed
/// ancestor cannot redirect the walk: `os.stat(name, dir_fd=...,
/// follow_symlinks=False)`.
fn member_stat(directory: &OwnedFd, name: &OsStr, child: &Path) -> Result<Stat> {
    rustix::fs::statat(directory, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|errno| Error::from_errno(errno, child))
}

/// `sorted(os.listdir(fd))`: names in code-point (byte) order.
fn list(descriptor: &OwnedFd, directory: &Path) -> Result<Vec<OsString>> {
    let duplicate = rustix::fs::openat(
        descriptor,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, directory))?;
    let dir = rustix::fs::Dir::read_from(&duplicate)
        .map_err(|errno| Error::from_errno(errno, directory))?;
    let mut names = Vec::new();
    for entry in dir {
        let entry = entry.map_err(|errno| Error::from_errno(errno, directory))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// `python(?:[0-9]+(?:\.[0-9]+)*)?`.
fn is_python_name(name: &[u8]) -> bool {
    let Some(version) = name.strip_prefix(b"python") else {
        return false;
    };
    version.is_empty()
        || version
            .split(|&b| b == b'.')
            .all(|part| !part.is_empty() && part.iter().all(u8::is_ascii_digit))
}

/// `[0-9]+\.[0-9]+`.
fn is_dotted_pair(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 2
        && parts
            .iter()
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// `cpython-X.Y.Z[a-z0-9.]*-(macos|linux)-<arch>-<libc>` (uv's standalone
/// CPython directory name).
fn is_standalone_cpython(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("cpython-") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('-').collect();
    if parts.len() != 4 || !(parts[1] == "macos" || parts[1] == "linux") {
        return false;
    }
    let word = |text: &str| {
        !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if !word(parts[2]) || !word(parts[3]) {
        return false;
    }
    // X.Y.Z followed by an optional [a-z0-9.]* suffix.
    let version = parts[0];
    let mut numbers = 0;
    let mut rest = version;
    while numbers < 3 {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        numbers += 1;
        if numbers < 3 {
            match rest.strip_prefix('.') {
                Some(tail) => rest = tail,
                None => return false,
            }
        }
    }
    rest.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_names_follow_the_original_patterns() {
        assert!(is_python_name(b"python"));
        assert!(is_python_name(b"python3"));
        assert!(is_python_name(b"python3.12"));
        assert!(!is_python_name(b"python3."));
        assert!(!is_python_name(b"pythonw"));
        assert!(is_standalone_cpython("cpython-3.12.7-linux-x86_64-gnu"));
        assert!(is_standalone_cpython(
            "cpython-3.13.0rc1-macos-aarch64-none"
        ));
        assert!(!is_standalone_cpython("cpython-3.12-linux-x86_64-gnu"));
        assert!(!is_standalone_cpython("cpython-3.12.7-windows-x86_64-gnu"));
        assert!(is_dotted_pair("3.12"));
        assert!(!is_dotted_pair("3"));
    }
}

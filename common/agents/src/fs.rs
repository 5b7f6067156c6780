//! Safe filesystem primitives of `execution_install` and the execution secret
//! of `execution_transport`.
//!
//! Every helper reads and writes configuration that install.sh, the server and
//! the worker (all Python) also read and write, so each check, refusal message,
//! exception class and fsync/rename ordering follows the Python functions named
//! in the doc comments. Paths are taken as Python `Path` objects would see them:
//! lexically normalised (`/a//b/` is `/a/b`) before use and in messages.
//!
//! Deliberate deviations from Python, all on hostile input only:
//! - `normalize_path` refuses non-UTF-8 paths (Python carries them as surrogate
//!   escapes) with the `_text` message, because the journal and manifest store
//!   paths as JSON strings.
//! - `read_file` and `read_secret` open with `O_NONBLOCK` so a FIFO planted at a
//!   configuration path is refused by the regular-file check instead of hanging
//!   the helper in `open`; the flag does not change reads of regular files.

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result};
use python_compat::{
    hex,
    os::{
        current_uid, is_type, lstat, open, permission_bits, permission_mode, read_up_to, write_all,
    },
    path as python_path,
};

mod entries;
mod secret;
mod snapshot;

pub(crate) use entries::each_entry_name;

// Named apart from the `path` arguments every function here takes.

pub use secret::{ensure_execution_secret, read_secret};
pub use snapshot::{desired, snapshot};

/// Upper bound of every configuration file `read_file` accepts (1 MiB); also
/// the response-body limit of the worker control requests.
pub const MAX_CONFIG_BYTES: u64 = 1_048_576;

/// `_text`: refuses empty text and text with a code point below 32, so values
/// written into units, journals and messages cannot smuggle line breaks.
pub fn check_text(value: &str) -> Result<()> {
    if value.is_empty() || value.chars().any(|c| (c as u32) < 32) {
        return Err(Error::value(
            "configuration text must be nonempty and contain no control characters",
        ));
    }
    Ok(())
}

/// `_path`: the normalised absolute path that journals and manifests store,
/// refusing relative paths, `..`, any symlink in the existing prefix (dangling
/// ones included), symlink loops (RuntimeError) and control characters.
pub fn normalize_path(path: &Path) -> Result<PathBuf> {
    let result = python_path::pure_path(path);
    if !python_path::is_absolute(&result) || python_path::has_traversal(&result) {
        return Err(Error::value(
            "execution paths must be absolute without traversal",
        ));
    }
    // Compare bytes: `Path` equality would treat a leading `//` as `/`.
    if python_path::resolve(&result)?.as_os_str() != result.as_os_str() {
        return Err(Error::value(format!(
            "execution path contains a symlink: {}",
            python_compat::path::shown(&result)
        )));
    }
    let Some(text) = result.to_str() else {
        return Err(Error::value(
            "configuration text must be nonempty and contain no control characters",
        ));
    };
    check_text(text)?;
    Ok(result)
}

/// `_owned_directory`: refuses anything but a real directory owned by the real
/// uid without group/other write; `private` demands exactly 0700. A missing
/// path is the raw `FileNotFoundError`.
pub fn owned_directory(path: &Path, private: bool) -> Result<()> {
    let path = python_path::pure_path(path);
    let info = lstat(&path)?;
    if !is_type(&info, FileType::Directory) || info.st_uid != current_uid() {
        return Err(Error::permission(format!(
            "execution directory is not an owned directory: {}",
            python_compat::path::shown(&path)
        )));
    }
    let mode = permission_bits(&info);
    if mode & 0o022 != 0 || (private && mode != 0o700) {
        return Err(Error::permission(format!(
            "execution directory permissions are unsafe: {}",
            python_compat::path::shown(&path)
        )));
    }
    Ok(())
}

/// `_ensure_directory`: creates a missing directory (and missing non-private
/// parents) with mode 0700, fsyncs each parent, then checks ownership and mode
/// of the target. Returns the normalised path.
pub fn ensure_directory(path: &Path, private: bool) -> Result<PathBuf> {
    let path = normalize_path(path)?;
    if !exists(&path)? {
        let parent = python_path::parent(&path);
        ensure_directory(&parent, false)?;
        rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700))
            .map_err(|errno| Error::from_errno(errno, &path))?;
        fsync_directory(&parent)?;
    }
    owned_directory(&path, private)?;
    Ok(path)
}

/// `_fsync_directory`: makes a rename or creation inside `path` durable.
pub fn fsync_directory(path: &Path) -> Result<()> {
    let path = python_path::pure_path(path);
    let fd = open(&path, OFlags::RDONLY, Mode::empty())?;
    rustix::fs::fsync(&fd)?;
    Ok(())
}

/// The `_fsync_directory` of activation_transaction and the Team Hub fence:
/// opens with `O_DIRECTORY` and `O_NOFOLLOW`, so a symlink or non-directory is
/// refused rather than synced.
pub fn fsync_directory_nofollow(path: &Path) -> Result<()> {
    let descriptor = open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&descriptor)?;
    Ok(())
}

/// `_read_file`: reads a configuration file without following a symlink at the
/// leaf, refusing (PermissionError) anything but a regular file owned by the
/// real uid with one link, no group/other write, at most 1 MiB, and exactly
/// 0600 when `private`. Returns the bytes and the permission bits.
pub fn read_file(path: &Path, private: bool) -> Result<(Vec<u8>, u32)> {
    let path = python_path::pure_path(path);
    let (fd, info) = open_leaf(&path, OFlags::RDONLY)?;
    let mode = permission_bits(&info);
    if !is_type(&info, FileType::RegularFile)
        || info.st_uid != current_uid()
        || info.st_nlink != 1
        || mode & 0o022 != 0
        || (private && mode != 0o600)
        || info.st_size as u64 > MAX_CONFIG_BYTES
    {
        return Err(Error::permission(format!(
            "execution configuration is unsafe: {}",
            python_compat::path::shown(&path)
        )));
    }
    let data = read_up_to(&fd, MAX_CONFIG_BYTES as usize + 1)?;
    let current = lstat(&path)?;
    if (current.st_dev, current.st_ino) != (info.st_dev, info.st_ino) {
        return Err(Error::runtime(
            "execution configuration changed while reading",
        ));
    }
    if data.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Error::value("execution configuration exceeds size limit"));
    }
    Ok((data, mode))
}

/// `_atomic_write`: replaces `path` (never following a symlink there) with a
/// fully fsynced file of exactly `mode`, whatever the umask, via a uniquely
/// named temporary in the same directory that is removed on any failure.
pub fn atomic_write(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let path = python_path::pure_path(path);
    let parent = python_path::parent(&path);
    ensure_directory(&parent, false)?;
    let mut name = b".".to_vec();
    name.extend_from_slice(python_path::name(&path));
    name.extend_from_slice(format!(".{}.tmp", python_compat::token_hex(12)?).as_bytes());
    let temporary = python_path::child(&parent, &name);
    let fd = open(
        &temporary,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
        permission_mode(mode),
    )?;
    let published = publish_temporary(fd, data, mode, &temporary, &path);
    if published.is_err() {
        // Only our own temporary is removed; after a successful rename it is gone.
        let _ = rustix::fs::unlink(&temporary);
    }
    published
}

/// The steps of `_atomic_write` after the temporary exists; any failure leaves
/// the temporary for the caller to remove.
fn publish_temporary(
    fd: OwnedFd,
    data: &[u8],
    mode: u32,
    temporary: &Path,
    path: &Path,
) -> Result<()> {
    rustix::fs::fchmod(&fd, permission_mode(mode))?;
    write_all(&fd, data)?;
    rustix::fs::fsync(&fd)?;
    drop(fd);
    rustix::fs::rename(temporary, path)
        .map_err(|errno| Error::from_errno_paths(errno, temporary, path))?;
    fsync_directory(&python_path::parent(path))
}

/// True when `name` is exactly a name [`atomic_write`] gives the temporary
/// of a file named `target`: `.<target>.<24 lowercase hex>.tmp`.
pub(crate) fn is_atomic_temporary(name: &[u8], target: &[u8]) -> bool {
    let Some(rest) = name
        .strip_prefix(b".")
        .and_then(|rest| rest.strip_prefix(target))
        .and_then(|rest| rest.strip_prefix(b"."))
        .and_then(|rest| rest.strip_suffix(b".tmp"))
    else {
        return false;
    };
    python_compat::is_lower_hex(rest, 24)
}

/// True when the entry `lstat` describes is a file this uid could have left
/// as an unfinished temporary: a regular file it owns, with one link and no
/// group or other write bit (`private`: no group or other bit at all).
pub(crate) fn is_own_leftover_file(info: &Stat, private: bool) -> bool {
    let forbidden = if private { 0o077 } else { 0o022 };
    is_type(info, FileType::RegularFile)
        && info.st_uid == current_uid()
        && info.st_nlink == 1
        && permission_bits(info) & forbidden == 0
}

/// Removes the unfinished temporaries a killed [`atomic_write`] of `path`
/// left beside it (it dies between creating its temporary and renaming it):
/// only entries named exactly as `atomic_write` names them for `path`, and
/// only regular files this uid owns with one link and no foreign write bit
/// (`private`: no foreign bit at all). Anything else is left alone. The
/// caller must hold whatever serialises writers of `path` (the installation
/// lock), so no live writer's temporary can be taken. Returns whether
/// anything was removed; the directory is made durable then.
pub fn remove_atomic_temporaries(path: &Path, private: bool) -> Result<bool> {
    remove_leftover_temporaries(path, private, is_atomic_temporary)
}

/// [`remove_atomic_temporaries`] for any writer's temporaries:
/// `is_temporary(name, target)` says which names beside `path` (named
/// `target`) its writer gives them.
pub(crate) fn remove_leftover_temporaries(
    path: &Path,
    private: bool,
    is_temporary: impl Fn(&[u8], &[u8]) -> bool,
) -> Result<bool> {
    let path = python_path::pure_path(path);
    let parent = python_path::parent(&path);
    let target = python_path::name(&path).to_vec();
    let entries = match std::fs::read_dir(&parent) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(Error::from_io_path(&err, &parent)),
    };
    let mut removed = false;
    for entry in entries {
        let entry = entry.map_err(|err| Error::from_io_path(&err, &parent))?;
        let name = entry.file_name();
        if !is_temporary(name.as_bytes(), &target) {
            continue;
        }
        let temporary = python_path::child(&parent, name.as_bytes());
        match rustix::fs::lstat(&temporary) {
            Ok(info) if is_own_leftover_file(&info, private) => {}
            Ok(_) | Err(Errno::NOENT) => continue,
            Err(errno) => return Err(Error::from_errno(errno, &temporary)),
        }
        match rustix::fs::unlink(&temporary) {
            Ok(()) => removed = true,
            Err(Errno::NOENT) => {}
            Err(errno) => return Err(Error::from_errno(errno, &temporary)),
        }
    }
    if removed {
        fsync_directory(&parent)?;
    }
    Ok(removed)
}

/// Removes the draft directories in `root` that a writer killed before
/// publishing them left: each entry `is_draft` accepts by name that is a
/// private directory of this uid holding nothing but `file_name` and that
/// file's unfinished [`atomic_write`] temporaries, all private regular
/// files of this uid with one link. Anything else under such a name is left
/// alone. The caller decides by name (and what it knows of the name's
/// owner) that no live writer can still publish the draft. The directory
/// is made durable when anything was removed.
pub fn remove_abandoned_drafts(
    root: &Path,
    file_name: &[u8],
    is_draft: impl Fn(&[u8]) -> bool,
) -> Result<()> {
    let mut removed = false;
    for entry in std::fs::read_dir(root).map_err(|err| Error::from_io_path(&err, root))? {
        let entry = entry.map_err(|err| Error::from_io_path(&err, root))?;
        if !is_draft(entry.file_name().as_bytes()) {
            continue;
        }
        let draft = entry.path();
        let Ok(info) = rustix::fs::lstat(&draft) else {
            continue;
        };
        if !is_type(&info, FileType::Directory)
            || info.st_uid != current_uid()
            || permission_bits(&info) & 0o077 != 0
        {
            continue;
        }
        let mut files = Vec::new();
        let mut only_ours = true;
        for child in std::fs::read_dir(&draft).map_err(|err| Error::from_io_path(&err, &draft))? {
            let child = child.map_err(|err| Error::from_io_path(&err, &draft))?;
            let child_name = child.file_name();
            let known = child_name.as_bytes() == file_name
                || is_atomic_temporary(child_name.as_bytes(), file_name);
            let path = child.path();
            let own = rustix::fs::lstat(&path).is_ok_and(|info| is_own_leftover_file(&info, true));
            only_ours &= known && own;
            files.push(path);
        }
        if !only_ours {
            continue;
        }
        for file in files {
            std::fs::remove_file(&file).map_err(|err| Error::from_io_path(&err, &file))?;
        }
        std::fs::remove_dir(&draft).map_err(|err| Error::from_io_path(&err, &draft))?;
        removed = true;
    }
    if removed {
        fsync_directory(root)?;
    }
    Ok(())
}

/// `Path.exists()`: follows symlinks; "missing" covers the errors Python ignores.
pub(crate) fn exists(path: &Path) -> Result<bool> {
    Ok(python_path::pathlib_test(
        rustix::fs::stat(path).map(|_| true),
        path,
    )?)
}

/// `Path.is_symlink()`, with the same error rule.
pub(crate) fn is_symlink(path: &Path) -> Result<bool> {
    Ok(python_path::pathlib_test(
        rustix::fs::lstat(path).map(|info| is_type(&info, FileType::Symlink)),
        path,
    )?)
}

/// Opens `path` with `access` without following a leaf symlink or blocking on
/// a FIFO, and `fstat`s what was opened: the guarded readers judge the opened
/// inode, never the path, so a file swapped in after the check is not read.
pub fn open_leaf(path: &Path, access: OFlags) -> Result<(OwnedFd, Stat)> {
    let fd = open(
        path,
        access | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
    )?;
    let info = rustix::fs::fstat(&fd)?;
    Ok((fd, info))
}

/// Whether [`read_regular_file`] accepts a symlink as the path's last
/// component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// Read what the symlink points at (a caller-chosen file).
    Follow,
    /// Refuse it: the caller removes the file afterwards, and must never
    /// remove what a planted link points at.
    Refuse,
}

/// What [`read_regular_file`] found at the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundedRead {
    /// The whole file, at most the maximum asked for.
    Contents(Vec<u8>),
    /// A FIFO, socket, device or (with [`Leaf::Refuse`]) a symlink: nothing
    /// was read. A directory is the `Err` Python's `IsADirectoryError` is.
    NotRegular,
    /// A regular file holding more than the maximum; nothing is returned.
    TooLarge,
}

/// Reads a small file a helper is handed (a credential, a key, a status
/// row) without the hangs and unbounded reads of Python's `read_bytes()`:
/// opened with `O_NONBLOCK` so a FIFO cannot block, judged by `fstat` of
/// what was opened, and read only up to `maximum + 1` bytes. A missing or
/// unreadable file is the `Err` Python's `OSError` would be.
pub fn read_regular_file(path: &Path, maximum: u64, leaf: Leaf) -> Result<BoundedRead> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    if leaf == Leaf::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = match open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP also means a loop further up the path; only a symlink at
        // the leaf is "not a regular file".
        Err(err) if leaf == Leaf::Refuse && err.errno() == Some(Errno::LOOP.raw_os_error()) => {
            return match lstat(path) {
                Ok(info) if is_type(&info, FileType::Symlink) => Ok(BoundedRead::NotRegular),
                _ => Err(err.into()),
            };
        }
        Err(err) => return Err(err.into()),
    };
    let info = rustix::fs::fstat(&fd)?;
    if is_type(&info, FileType::Directory) {
        // What Python's read raises, so messages match where it is safe.
        return Err(Error::from_errno(Errno::ISDIR, path));
    }
    if !is_type(&info, FileType::RegularFile) {
        return Ok(BoundedRead::NotRegular);
    }
    let limit = usize::try_from(maximum.saturating_add(1)).unwrap_or(usize::MAX);
    if info.st_size as u64 > maximum {
        return Ok(BoundedRead::TooLarge);
    }
    let data = read_up_to(&fd, limit)?;
    if data.len() as u64 > maximum {
        return Ok(BoundedRead::TooLarge);
    }
    Ok(BoundedRead::Contents(data))
}

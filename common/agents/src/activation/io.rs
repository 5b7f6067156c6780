//! The guarded readers and writers of `activation_transaction`.
//!
//! Each reader opens without following a leaf symlink, refuses anything but a
//! regular file owned by the real uid with the policy's link count, mode and
//! size, reads, and then proves that neither the descriptor nor the path moved
//! while reading. The policies differ only in their limits and messages, so
//! one reader takes a [`ReadPolicy`].

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::fs::{fsync_directory_nofollow, open_leaf};
use python_compat::{
    os::{
        current_uid, is_type, lstat, mtime_ns, open, permission_bits, read_up_to, rename, write_all,
    },
    token_hex,
};

/// `MAX_CONTROL_BYTES`: the default limit of the private reader (256 KiB).
pub const ACTIVATION_CONTROL_LIMIT: u64 = 256 * 1024;
/// `activation_transaction.MAX_CONFIG_BYTES` (16 MiB); not the 1 MiB limit of
/// `execution_install`.
pub const ACTIVATION_CONFIG_LIMIT: u64 = 16 * 1024 * 1024;

/// How one guarded read judges the opened file.
#[derive(Clone, Copy)]
pub struct ReadPolicy {
    /// Open read-write (the staging source is later `fchmod`ed through it).
    pub write: bool,
    /// `Some(m)`: the mode must be exactly `m`; `None`: no group/other write.
    pub exact_mode: Option<u32>,
    /// Accepted link counts.
    pub links: &'static [u64],
    /// Smallest accepted size (1 for VERSION files).
    pub minimum: u64,
    /// The bytes read must equal `st_size` (VERSION files).
    pub exact_length: bool,
    /// PermissionError message of the open-time checks.
    pub unsafe_message: &'static str,
    /// RuntimeError message of the after-read checks.
    pub changed_message: &'static str,
}

impl ReadPolicy {
    /// `_read_private`: exactly 0600, one link.
    pub const PRIVATE: ReadPolicy = ReadPolicy {
        write: false,
        exact_mode: Some(0o600),
        links: &[1],
        minimum: 0,
        exact_length: false,
        unsafe_message: "activation transaction file is unsafe",
        changed_message: "activation transaction file changed while reading",
    };

    /// `_read_owned_regular`: no group/other write, one link.
    pub(crate) const OWNED_REGULAR: ReadPolicy = ReadPolicy {
        write: false,
        exact_mode: None,
        links: &[1],
        minimum: 0,
        exact_length: false,
        unsafe_message: "activation configuration file is unsafe",
        changed_message: "activation configuration changed while reading",
    };

    /// `_owned_regular_sha256`: a release's VERSION, 1..=4096 bytes.
    pub(crate) const RELEASE_VERSION_FILE: ReadPolicy = ReadPolicy {
        write: false,
        exact_mode: None,
        links: &[1],
        minimum: 1,
        exact_length: true,
        unsafe_message: "activation release identity is unsafe",
        changed_message: "activation release identity changed while reading",
    };
}

/// One guarded read: the open descriptor, its `fstat` before reading, and the
/// bytes (at most `maximum`).
pub struct GuardedRead {
    /// The opened file (the staging source is later `fchmod`ed through it).
    pub descriptor: OwnedFd,
    /// Its `fstat` before reading.
    pub before: Stat,
    /// At most `maximum` bytes.
    pub data: Vec<u8>,
}

/// Opens `path` without following a leaf symlink (and without blocking on a
/// FIFO), applies `policy` and reads at most `maximum` bytes.
pub fn read_guarded(path: &Path, maximum: u64, policy: ReadPolicy) -> Result<GuardedRead> {
    let access = if policy.write {
        OFlags::RDWR
    } else {
        OFlags::RDONLY
    };
    let (descriptor, before) = open_leaf(path, access)?;
    let mode = permission_bits(&before);
    let mode_ok = match policy.exact_mode {
        Some(exact) => mode == exact,
        None => mode & 0o022 == 0,
    };
    let size = before.st_size as i128;
    if !is_type(&before, FileType::RegularFile)
        || before.st_uid != current_uid()
        || !policy.links.contains(&(before.st_nlink as u64))
        || !mode_ok
        || size < i128::from(policy.minimum)
        || size > i128::from(maximum)
    {
        return Err(Error::permission(policy.unsafe_message));
    }
    let data = read_up_to(&descriptor, maximum as usize + 1)?;
    let after = rustix::fs::fstat(&descriptor)?;
    let linked = lstat(path)?;
    let length = data.len() as u64;
    if length > maximum
        || length < policy.minimum
        || (policy.exact_length && length as i128 != size)
        || change_identity(&before) != change_identity(&after)
        || (before.st_dev, before.st_ino) != (linked.st_dev, linked.st_ino)
    {
        return Err(Error::runtime(policy.changed_message));
    }
    Ok(GuardedRead {
        descriptor,
        before,
        data,
    })
}

/// `_read_private(path, maximum=...)`: a private (0600, one link) control or
/// evidence file, such as the journal manifest, a backup or a health body.
pub fn read_private_file(path: &Path, maximum: u64) -> Result<Vec<u8>> {
    Ok(read_guarded(path, maximum, ReadPolicy::PRIVATE)?.data)
}

/// `_read_owned_regular(path, maximum=...)`: an installer-owned file that may be
/// 0644 (a unit, `agent_server.py`, a VERSION, the install lock's pid).
pub fn read_owned_config(path: &Path, maximum: u64) -> Result<Vec<u8>> {
    Ok(read_guarded(path, maximum, ReadPolicy::OWNED_REGULAR)?.data)
}

/// `_write_new_private`: creates `path` exclusively (never through a symlink)
/// as a fully fsynced 0600 file; the directory is not fsynced.
pub fn write_new_private(path: &Path, data: &[u8]) -> Result<()> {
    let descriptor = open(
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )?;
    rustix::fs::fchmod(&descriptor, Mode::from_raw_mode(0o600))?;
    write_all(&descriptor, data)?;
    rustix::fs::fsync(&descriptor)?;
    Ok(())
}

/// `_replace_private`: atomically replaces `path` with a private file through
/// a uniquely named temporary, then fsyncs the directory; the temporary never
/// survives.
pub fn replace_private(path: &Path, data: &[u8]) -> Result<()> {
    let parent = parent_of(path);
    let mut name = b".".to_vec();
    name.extend_from_slice(file_name(path));
    name.extend_from_slice(format!(".{}.tmp", token_hex(12)?).as_bytes());
    let temporary = parent.join(std::ffi::OsStr::from_bytes(&name));
    let result = write_new_private(&temporary, data)
        .and_then(|()| Ok(rename(&temporary, path)?))
        .and_then(|()| fsync_directory_nofollow(&parent));
    match rustix::fs::unlink(&temporary) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(errno) if result.is_ok() => return Err(Error::from_errno(errno, &temporary)),
        Err(_) => {}
    }
    result
}

/// The (dev, ino, size, mtime_ns) a guarded read requires to be stable.
fn change_identity(info: &Stat) -> (u64, u64, i64, i128) {
    (
        info.st_dev as u64,
        info.st_ino as u64,
        info.st_size as i64,
        mtime_ns(info),
    )
}

/// An owned directory without group/other write (`_validate_root`,
/// `_release_matches`, `_volume_anchor`).
pub(crate) fn is_owned_safe_directory(info: &Stat) -> bool {
    is_type(info, FileType::Directory)
        && info.st_uid == current_uid()
        && permission_bits(info) & 0o022 == 0
}

/// `Path.parent` of a lexically normalised path (the root is its own parent).
pub fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .map_or_else(|| path.to_path_buf(), Path::to_path_buf)
}

/// `Path.name`.
pub(crate) fn file_name(path: &Path) -> &[u8] {
    path.file_name().map_or(b"", |name| name.as_bytes())
}

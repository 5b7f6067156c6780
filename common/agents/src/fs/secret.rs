//! The execution control secret (`execution_transport._read_secret` and
//! `ensure_execution_secret`).
//!
//! The worker, the gateway and the installer may all create the token at once,
//! so creation is serialised by a flock on a sibling `.control.token.lock` that
//! is never removed (removing it would let a later caller lock another inode).
//! An existing token is never rotated, and a malformed one fails closed; a new
//! one is written under a staging name and renamed into place (see
//! `write_new_token`).
//! `ExecutionTransportError` subclasses `RuntimeError`, so every refusal here
//! is a RuntimeError; raw OS failures keep their OSError class.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::open_leaf;
use crate::error::{Error, Result};
use python_compat::{
    os::{
        current_uid, is_type, lstat, lstat_if_present, open, permission_bits, rename, unlink,
        write_all,
    },
    path as python_path, token_hex,
};

/// `_read_secret`: the 64 lowercase hex characters of a token that is an owned,
/// exactly 0600, singly linked regular file in an owned 0700 directory reached
/// without any symlink.
pub fn read_secret(path: &Path) -> Result<String> {
    let path = private_parent(path)?;
    let (fd, info) = open_leaf(&path, OFlags::RDONLY)?;
    if !is_private_file(&info) {
        return Err(Error::runtime(
            "Execution secret must be an owned 0600 regular file",
        ));
    }
    // One read of at most 65 bytes, as `os.read(fd, 65)`: a 65th byte (a
    // trailing newline, say) makes the token invalid.
    let mut buffer = [0u8; 65];
    let count = loop {
        match rustix::io::read(&fd, &mut buffer) {
            Ok(count) => break count,
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    };
    let value = &buffer[..count];
    if !python_compat::is_lower_hex(value, 64) {
        return Err(Error::runtime("Invalid execution secret file"));
    }
    Ok(value.iter().map(|&b| char::from(b)).collect())
}

/// `ensure_execution_secret`: returns the control token, creating it once (64
/// lowercase hex characters from the kernel CSPRNG, no newline, file and
/// directory fsynced) under the `.control.token.lock` flock. The caller creates
/// the 0700 directory.
pub fn ensure_execution_secret(path: &Path) -> Result<String> {
    let path = private_parent(path)?;
    let directory = python_path::parent(&path);
    let name = python_path::name(&path);
    if name.is_empty() {
        return Err(Error::value(format!(
            "PosixPath({}) has an empty name",
            python_compat::repr_surrogateescape(path.as_os_str().as_bytes())
        )));
    }
    let mut lock_name = b".".to_vec();
    lock_name.extend_from_slice(name);
    lock_name.extend_from_slice(b".lock");
    let lock_path = python_path::child(&directory, &lock_name);

    let lock = open(
        &lock_path,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )?;
    let info = rustix::fs::fstat(&lock)?;
    if !is_private_file(&info) {
        return Err(Error::runtime(
            "Execution initializer lock must be an owned 0600 regular file",
        ));
    }
    loop {
        match rustix::fs::flock(&lock, FlockOperation::LockExclusive) {
            Ok(()) => break,
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    let current = lstat(&lock_path)?;
    if (current.st_dev, current.st_ino) != (info.st_dev, info.st_ino) {
        return Err(Error::runtime(
            "Execution initializer lock changed during acquisition",
        ));
    }

    if lstat_if_present(&path)?.is_some() {
        return read_secret(&path);
    }
    write_new_token(&path, &directory, name)?;
    let parent = open(
        &directory,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&parent)?;
    drop(parent);
    let secret = read_secret(&path);
    // Closing the lock descriptor releases the flock only after the final read.
    drop(lock);
    secret
}

/// Writes a fresh token under a staging name, fsyncs it, then renames it to
/// `path`, so the token's name never exists without its bytes. The original
/// creates `path` itself with `O_EXCL` and fsyncs after writing: a power cut
/// in between can leave the name with no bytes on disk, a token that fails
/// closed forever ("Invalid execution secret file"). A staging file a crash
/// left is this lock holder's to replace. Called under the flock, with `path`
/// absent.
fn write_new_token(path: &Path, directory: &Path, name: &[u8]) -> Result<()> {
    let mut staging_name = b".".to_vec();
    staging_name.extend_from_slice(name);
    staging_name.extend_from_slice(b".new");
    let staging = python_path::child(directory, &staging_name);
    if lstat_if_present(&staging)?.is_some() {
        unlink(&staging)?;
    }
    let token = open(
        &staging,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )?;
    write_all(&token, token_hex(32)?.as_bytes())?;
    rustix::fs::fsync(&token)?;
    drop(token);
    rename(&staging, path)?;
    Ok(())
}

/// `_private_parent`: the path must be absolute without `..`, every ancestor
/// from `/` down must lstat as a directory (so no symlink anywhere), and the
/// parent must be owned by the real uid with mode exactly 0700.
fn private_parent(path: &Path) -> Result<PathBuf> {
    let path = python_path::pure_path(path);
    if !python_path::is_absolute(&path) || python_path::has_traversal(&path) {
        return Err(Error::runtime(
            "Execution paths must be absolute and canonical",
        ));
    }
    for ancestor in python_path::ancestors(&path).iter().rev() {
        if !is_type(&lstat(ancestor)?, FileType::Directory) {
            return Err(Error::runtime(
                "Execution path traverses a non-directory or link",
            ));
        }
    }
    let parent = lstat(&python_path::parent(&path))?;
    if parent.st_uid != current_uid() || permission_bits(&parent) != 0o700 {
        return Err(Error::runtime(
            "Execution directory must be owned with mode 0700",
        ));
    }
    Ok(path)
}

/// Regular, owned by the real uid, exactly 0600 and one link.
fn is_private_file(info: &Stat) -> bool {
    is_type(info, FileType::RegularFile)
        && info.st_uid == current_uid()
        && permission_bits(info) == 0o600
        && info.st_nlink == 1
}

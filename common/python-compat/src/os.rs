//! Python's `os` and `stat` functions as the originals call them on POSIX
//! paths and descriptors: the same system calls, the same exception classes
//! and the same words (`[Errno 2] No such file or directory: '/x'`, the
//! two-path `'src' -> 'dst'` of `os.replace`, `embedded null byte`), so a
//! refusal reads as the original's.

// `stat` field types differ between platforms (u64 on Linux x86_64, i32
// st_dev on macOS); the casts that are no-ops here are not elsewhere.
#![allow(clippy::unnecessary_cast)]

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::exception::{Exception, Result};

/// The real uid, which every ownership check compares with (Python `os.getuid()`).
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `os.lstat` with Python's errors: NUL refused as ValueError, else raw OSError.
pub fn lstat(path: &Path) -> Result<Stat> {
    reject_nul(path)?;
    rustix::fs::lstat(path).map_err(|errno| Exception::from_errno(errno, path))
}

/// `os.open` with Python's errors; descriptors are close-on-exec as in Python.
pub fn open(path: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
    reject_nul(path)?;
    rustix::fs::open(path, flags | OFlags::CLOEXEC, mode)
        .map_err(|errno| Exception::from_errno(errno, path))
}

/// Python's `ValueError: embedded null byte` for a path holding a NUL,
/// raised before any system call sees the path.
pub(crate) fn reject_nul(path: &Path) -> Result<()> {
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(Exception::value("embedded null byte"));
    }
    Ok(())
}

/// `stat.S_ISREG`/`S_ISDIR`/`S_ISLNK`...: the file type of an `lstat` or `fstat`.
pub fn is_type(info: &Stat, kind: FileType) -> bool {
    FileType::from_raw_mode(info.st_mode) == kind
}

/// `stat.S_IMODE`: permission, set-id and sticky bits.
pub fn permission_bits(info: &Stat) -> u32 {
    mode_word(info) & 0o7777
}

/// `st_mode` widened to Python's int: `mode_t` is 32 bits on Linux, 16 on macOS.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn mode_word(info: &Stat) -> u32 {
    info.st_mode as u32
}

/// `(st_dev, st_ino)`: the identity Python compares. `dev_t` is unsigned 64
/// bits on Linux and signed 32 on macOS, where real device numbers are
/// positive; both widen to the same `u64` a Linux `stat` gives.
#[allow(clippy::unnecessary_cast)]
pub fn file_identity(info: &Stat) -> (u64, u64) {
    (info.st_dev as u64, info.st_ino as u64)
}

/// A Python mode int as the platform's `mode_t` (32 bits on Linux, 16 on macOS).
#[allow(clippy::unnecessary_cast)]
pub fn permission_mode(mode: u32) -> Mode {
    Mode::from_raw_mode(mode as rustix::fs::RawMode)
}

/// Reads until `limit` bytes or end of file, as Python's buffered `read(n)`;
/// memory grows with what the file holds, never with `limit`.
pub fn read_up_to(fd: impl AsFd, limit: usize) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut chunk = vec![0u8; limit.clamp(1, 1024 * 1024)];
    while data.len() < limit {
        let want = chunk.len().min(limit - data.len());
        match rustix::io::read(&fd, &mut chunk[..want]) {
            Ok(0) => break,
            Ok(count) => data.extend_from_slice(&chunk[..count]),
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(data)
}

/// Writes every byte, retrying interrupted and short writes (`os.write` in a
/// loop, as the originals write secrets and journals).
pub fn write_all(fd: impl AsFd, mut data: &[u8]) -> Result<()> {
    while !data.is_empty() {
        match rustix::io::write(&fd, data) {
            Ok(count) => data = &data[count..],
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}
/// `os.replace(source, destination)` with Python's two-path error text.
pub fn rename(source: &Path, destination: &Path) -> Result<()> {
    rustix::fs::rename(source, destination)
        .map_err(|errno| two_path_error(errno, source, destination))
}

/// `os.link(source, destination, follow_symlinks=False)`.
pub fn hard_link(source: &Path, destination: &Path) -> Result<()> {
    rustix::fs::linkat(
        rustix::fs::CWD,
        source,
        rustix::fs::CWD,
        destination,
        rustix::fs::AtFlags::empty(),
    )
    .map_err(|errno| two_path_error(errno, source, destination))
}

/// Python words a two-path OSError as `[Errno n] text: 'src' -> 'dst'`.
fn two_path_error(errno: Errno, source: &Path, destination: &Path) -> Exception {
    Exception::from_errno_paths(errno, source, destination)
}

/// `os.unlink(path)`.
pub fn unlink(path: &Path) -> Result<()> {
    reject_nul(path)?;
    rustix::fs::unlink(path).map_err(|errno| Exception::from_errno(errno, path))
}

/// `Path.lstat()` where only FileNotFoundError means "absent".
pub fn lstat_if_present(path: &Path) -> Result<Option<Stat>> {
    match lstat(path) {
        Ok(info) => Ok(Some(info)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

/// `os.readlink(path)` as text (paths in journals are JSON strings).
pub fn read_link(path: &Path) -> Result<String> {
    reject_nul(path)?;
    let target = rustix::fs::readlink(path, Vec::new())
        .map_err(|errno| Exception::from_errno(errno, path))?;
    // Python decodes with surrogateescape; a non-UTF-8 target cannot be stored
    // in the journal and never compares equal to a stored one.
    Ok(String::from_utf8_lossy(target.as_bytes()).into_owned())
}

/// `st_mtime_ns`.
pub fn mtime_ns(info: &Stat) -> i128 {
    info.st_mtime as i128 * 1_000_000_000 + info.st_mtime_nsec as i128
}

/// `st_ctime_ns`.
pub fn ctime_ns(info: &Stat) -> i128 {
    info.st_ctime as i128 * 1_000_000_000 + info.st_ctime_nsec as i128
}

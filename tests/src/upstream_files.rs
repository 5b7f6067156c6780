//! The stand-ins' own guarded file I/O, written from upstream's
//! `execution_install` (`_path`, `_owned_directory`, `_read_file`,
//! `prepare_runtime`) and `execution_transport` (`_read_secret`,
//! `ensure_execution_secret`), with serde_json rather than the port's
//! Python-compatible JSON: the test worker and the fixtures stand beside
//! the helpers and must not share a mistake with them. Errors carry the
//! Python exception class and message upstream raises.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

/// `MAX_CONFIG_BYTES`: every guarded read is bounded by 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1_048_576;

/// A Python exception: its class and message.
#[derive(Debug)]
pub struct Failure {
    class: &'static str,
    message: String,
}

/// What the worker's readers return.
pub type Outcome<T> = Result<T, Failure>;

impl Failure {
    /// A `ValueError`.
    pub fn value(message: impl Into<String>) -> Self {
        Failure {
            class: "ValueError",
            message: message.into(),
        }
    }

    /// A `RuntimeError`.
    pub fn runtime(message: impl Into<String>) -> Self {
        Failure {
            class: "RuntimeError",
            message: message.into(),
        }
    }

    /// A `PermissionError`.
    pub fn permission(message: impl Into<String>) -> Self {
        Failure {
            class: "PermissionError",
            message: message.into(),
        }
    }

    /// An `OSError` subclass as Python raises it for `path`.
    pub fn os(err: &io::Error, path: &Path) -> Self {
        let class = match err.kind() {
            io::ErrorKind::NotFound => "FileNotFoundError",
            io::ErrorKind::PermissionDenied => "PermissionError",
            _ => "OSError",
        };
        let text = err.to_string();
        let reason = text.split(" (os error").next().unwrap_or_default();
        let errno = err.raw_os_error().unwrap_or_default();
        Failure {
            class,
            message: format!("[Errno {errno}] {reason}: '{}'", path.display()),
        }
    }

    /// True for a missing file (Python's `FileNotFoundError`).
    pub fn is_missing(&self) -> bool {
        self.class == "FileNotFoundError"
    }

    /// The `Class: message` line the worker exits with.
    pub fn python_line(&self) -> String {
        format!("{}: {}", self.class, self.message)
    }
}

/// `os.getuid()`.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// `_path`: absolute, no `..`, lexically normalised, and no existing
/// component a symlink.
pub fn normal_path(path: &Path) -> Outcome<PathBuf> {
    let text = path.to_string_lossy();
    if !path.is_absolute() || path.components().any(|part| part == Component::ParentDir) {
        return Err(Failure::value(
            "execution paths must be absolute without traversal",
        ));
    }
    if text.starts_with("//") && !text.starts_with("///") {
        return Err(Failure::value(format!(
            "execution path contains a symlink: {text}"
        )));
    }
    let mut normal = PathBuf::from("/");
    for part in path.components() {
        if let Component::Normal(name) = part {
            normal.push(name);
            if fs::symlink_metadata(&normal).is_ok_and(|info| info.file_type().is_symlink()) {
                return Err(Failure::value(format!(
                    "execution path contains a symlink: {text}"
                )));
            }
        }
    }
    if text.chars().any(|c| c.is_control() && c != '\u{7f}') {
        return Err(Failure::value("execution text contains control characters"));
    }
    Ok(normal)
}

/// `_owned_directory`: an owned directory (not a link) without group or
/// other write; exactly 0700 when `private`.
pub fn owned_directory(path: &Path, private: bool) -> Outcome<()> {
    let info = fs::symlink_metadata(path).map_err(|err| Failure::os(&err, path))?;
    if !info.is_dir() || info.uid() != uid() {
        return Err(Failure::permission(format!(
            "execution directory is not an owned directory: {}",
            path.display()
        )));
    }
    let mode = info.mode() & 0o7777;
    if mode & 0o022 != 0 || (private && mode != 0o700) {
        return Err(Failure::permission(format!(
            "execution directory permissions are unsafe: {}",
            path.display()
        )));
    }
    Ok(())
}

/// `_read_file`: an owned single-link regular file without group or other
/// write (exactly 0600 when `private`), at most 1 MiB, not replaced while
/// it was read. Returns the bytes and the permission bits.
pub fn read_guarded(path: &Path, private: bool) -> Outcome<(Vec<u8>, u32)> {
    let os = |err: io::Error| Failure::os(&err, path);
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(os)?;
    let info = file.metadata().map_err(os)?;
    let mode = info.mode() & 0o7777;
    let safe = info.is_file()
        && info.uid() == uid()
        && info.nlink() == 1
        && mode & 0o022 == 0
        && (!private || mode == 0o600)
        && info.len() <= MAX_CONFIG_BYTES;
    if !safe {
        return Err(Failure::permission(format!(
            "execution configuration is unsafe: {}",
            path.display()
        )));
    }
    let mut data = Vec::new();
    (&mut file)
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(os)?;
    let again = fs::symlink_metadata(path).map_err(os)?;
    if (again.dev(), again.ino()) != (info.dev(), info.ino()) {
        return Err(Failure::runtime(
            "execution configuration changed while reading",
        ));
    }
    if data.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Failure::value("execution configuration exceeds size limit"));
    }
    Ok((data, mode))
}

/// `json.loads` of a guarded file's bytes (a decode error is a ValueError).
pub fn parse(data: &[u8]) -> Outcome<serde_json::Value> {
    serde_json::from_slice(data).map_err(|err| Failure::value(err.to_string()))
}

/// True when `path` exists or is a (dangling) symlink.
pub fn entry_present(path: &Path) -> Outcome<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(Failure::os(&err, path)),
    }
}

/// `_read_secret`: an owned 0600 single-link regular file holding exactly
/// 64 lowercase hex digits (no newline).
pub fn read_secret(path: &Path) -> Result<String, String> {
    let invalid = || "Invalid execution secret file".to_string();
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|_| invalid())?;
    let info = file.metadata().map_err(|_| invalid())?;
    if !info.is_file() || info.uid() != uid() || info.nlink() != 1 || info.mode() & 0o7777 != 0o600
    {
        return Err(invalid());
    }
    let mut text = String::new();
    file.take(65)
        .read_to_string(&mut text)
        .map_err(|_| invalid())?;
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if text.len() != 64 || !text.chars().all(hex) {
        return Err(invalid());
    }
    Ok(text)
}

/// `ensure_execution_secret`: under the blocking `.control.token.lock`
/// flock in the owner-only directory, create the token (64 lowercase hex,
/// no newline, 0600, fsynced with its directory) unless it exists; never
/// rotate one. Returns the token.
pub fn ensure_execution_secret(path: &Path) -> Result<String, String> {
    let directory = path.parent().ok_or("Execution paths must be absolute")?;
    let info = fs::symlink_metadata(directory).map_err(|err| err.to_string())?;
    if !info.is_dir() || info.uid() != uid() || info.mode() & 0o7777 != 0o700 {
        return Err("Execution directory must be owned with mode 0700".to_string());
    }
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(directory.join(".control.token.lock"))
        .map_err(|err| err.to_string())?;
    let info = lock.metadata().map_err(|err| err.to_string())?;
    if !info.is_file() || info.uid() != uid() || info.nlink() != 1 || info.mode() & 0o7777 != 0o600
    {
        return Err("Execution initializer lock must be an owned 0600 regular file".to_string());
    }
    flock(&lock, FlockOperation::LockExclusive).map_err(|err| err.to_string())?;
    let created = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match created {
        Ok(mut file) => {
            let mut bytes = [0u8; 32];
            rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
                .map_err(|err| err.to_string())?;
            let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
            file.write_all(token.as_bytes())
                .and_then(|()| file.sync_all())
                .and_then(|()| fs::File::open(directory)?.sync_all())
                .map_err(|err| err.to_string())?;
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err.to_string()),
    }
    read_secret(path)
}

/// `prepare_runtime(layout)` for the state root `state_root`: the private
/// runtime directory and its `logs` (exactly 0700), the control token
/// (created once, never rotated) and the directory fsynced.
pub fn prepare_runtime(state_root: &Path) -> Result<(), String> {
    let runtime = state_root.join("execution");
    for directory in [runtime.clone(), runtime.join("logs")] {
        if !directory.exists() {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&directory)
                .map_err(|err| format!("{}: {err}", directory.display()))?;
        }
        owned_directory(&directory, true).map_err(|err| err.python_line())?;
    }
    ensure_execution_secret(&runtime.join("control.token"))?;
    fs::File::open(&runtime)
        .and_then(|file| file.sync_all())
        .map_err(|err| err.to_string())
}

/// `_atomic_write(path, data, mode)`: missing parents made (0700 before the
/// umask), a `.{name}.{24 hex}.tmp` beside the file created exclusively,
/// made exactly `mode`, written and fsynced, renamed over `path`, and the
/// directory fsynced; the temporary never outlives the call.
pub fn atomic_write(path: &Path, data: &[u8], mode: u32) -> Result<(), String> {
    let directory = path.parent().ok_or("a file lives in a directory")?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
        .map_err(|err| format!("{}: {err}", directory.display()))?;
    let mut random = [0u8; 12];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        .map_err(|err| err.to_string())?;
    let suffix: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = directory.join(format!(".{name}.{suffix}.tmp"));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        fs::File::open(directory)?.sync_all()
    })();
    let _ = fs::remove_file(&temporary);
    written.map_err(|err| format!("{}: {err}", path.display()))
}

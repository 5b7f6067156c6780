//! The filesystem pins of the legacy-runner proof: canonical owned
//! directories (`_directory`), installed files with their full identity and
//! digest (`_read`, `_json`), and the interpreter with its exact macOS
//! framework companion (`_python_proof`). Each pin is compared whole when the
//! proof is repeated.

use std::path::{Path, PathBuf};

use rustix::fs::{Access, FileType, OFlags, Stat};
use sha2::{Digest, Sha256};

use agents_common::{open_leaf, Error, Result};
use python_compat::{
    hex,
    json::{parse_json_unique, Json},
    os::{ctime_ns, current_uid, is_type, lstat, mtime_ns, permission_bits, read_up_to},
    path::{parent, pure_path, resolve},
};

/// The largest installed file `_read` accepts (16 MiB).
const MAX_PROOF_FILE: u64 = 16 * 1024 * 1024;
/// The largest authenticated JSON body `_json` accepts (1 MiB).
const MAX_PROOF_JSON: usize = 1024 * 1024;

/// `(st_dev, st_ino, st_uid, S_IMODE)` of a proof directory.
pub(super) type DirectoryPin = (u64, u64, u32, u32);

/// The eight stat fields the proof compares for files, links and
/// interpreters (`st_mode` whole, so a type change is a change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StatPin {
    dev: u64,
    ino: u64,
    uid: u32,
    mode: u32,
    nlink: u64,
    size: i64,
    mtime_ns: i128,
    ctime_ns: i128,
}

// `stat` field widths differ between platforms; these casts are no-ops here.
#[allow(clippy::unnecessary_cast)]
impl StatPin {
    /// The pin of one `stat` result.
    pub(super) fn of(info: &Stat) -> StatPin {
        StatPin {
            dev: info.st_dev as u64,
            ino: info.st_ino as u64,
            uid: info.st_uid,
            mode: info.st_mode as u32,
            nlink: info.st_nlink as u64,
            size: info.st_size as i64,
            mtime_ns: mtime_ns(info),
            ctime_ns: ctime_ns(info),
        }
    }
}

/// A file read by `_read`: its bytes, identity and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FilePin {
    /// The bytes read.
    pub data: Vec<u8>,
    /// Identity at open time (equal to the after-read views).
    pub identity: StatPin,
    /// Hex SHA-256 of `data`.
    pub sha256: String,
}

/// `path.resolve() == path` (non-strict, as `pathlib` compares parts).
pub(super) fn is_canonical(path: &Path) -> Result<bool> {
    Ok(resolve(path)?.as_os_str() == path.as_os_str())
}

/// `Path.resolve(strict=True)`: every component must exist.
pub(super) fn resolve_strict(path: &Path) -> Result<PathBuf> {
    Ok(python_compat::path::resolve_strict(path)?)
}

/// `_directory(path, private=...)`: a canonical directory of this uid
/// without group/other write (exactly 0700 when `private`).
pub(super) fn directory_pin(path: &Path, private: bool) -> Result<DirectoryPin> {
    let path = pure_path(path);
    let traversal = path
        .components()
        .any(|part| part == std::path::Component::ParentDir);
    if !path.is_absolute() || traversal || !is_canonical(&path)? {
        return Err(Error::runtime("legacy proof directory must be canonical"));
    }
    let info = lstat(&path)?;
    let mode = permission_bits(&info);
    if !is_type(&info, FileType::Directory)
        || info.st_uid != current_uid()
        || mode & 0o022 != 0
        || (private && mode != 0o700)
    {
        return Err(Error::runtime(
            "legacy proof directory is not owned and safe",
        ));
    }
    #[allow(clippy::unnecessary_cast)]
    Ok((info.st_dev as u64, info.st_ino as u64, info.st_uid, mode))
}

/// `_read(path, private=...)`: an owned single-link file without
/// group/other write (0600 when `private`), at most 16 MiB, whose identity
/// is the same before, after and at the path once read.
pub(super) fn read_pinned(path: &Path, private: bool) -> Result<FilePin> {
    let (descriptor, before) = open_leaf(path, OFlags::RDONLY)?;
    let mode = permission_bits(&before);
    #[allow(clippy::unnecessary_cast)]
    let oversized = before.st_size as i128 > i128::from(MAX_PROOF_FILE);
    if !is_type(&before, FileType::RegularFile)
        || before.st_uid != current_uid()
        || before.st_nlink != 1
        || mode & 0o022 != 0
        || (private && mode != 0o600)
        || oversized
    {
        return Err(Error::runtime("legacy proof file is not owned and safe"));
    }
    let data = read_up_to(&descriptor, MAX_PROOF_FILE as usize + 1)?;
    let identity = StatPin::of(&before);
    #[allow(clippy::unnecessary_cast)]
    let changed = data.len() as i128 != before.st_size as i128
        || StatPin::of(&rustix::fs::fstat(&descriptor)?) != identity
        || StatPin::of(&lstat(path)?) != identity;
    if changed {
        return Err(Error::runtime("legacy proof file changed while reading"));
    }
    let sha256 = hex(&Sha256::digest(&data));
    Ok(FilePin {
        data,
        identity,
        sha256,
    })
}

/// `_json(path, with_binding=True)`: a private authenticated JSON object
/// (no duplicate keys) with the pin of the file it came from.
pub(super) fn read_json(path: &Path) -> Result<(Json, FilePin)> {
    let pin = read_pinned(path, true)?;
    if pin.data.len() > MAX_PROOF_JSON {
        return Err(Error::runtime("legacy proof JSON exceeds limit"));
    }
    let value = parse_json_unique(&pin.data, "duplicate legacy proof field")?;
    if value.as_object().is_none() {
        return Err(Error::runtime("legacy proof JSON is invalid"));
    }
    Ok((value, pin))
}

/// What `_python_proof` binds: the interpreter (and its framework
/// companion), then every pinned path with its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PythonProof {
    /// The executables a legacy Python process may run as.
    pub executables: Vec<PathBuf>,
    /// `(path, identity)` of each executable and framework directory.
    pub bindings: Vec<(PathBuf, StatPin)>,
}

/// `_python_proof(interpreter)`: the resolved interpreter and, for a macOS
/// framework build (`.../Python.framework/Versions/X.Y/bin/pythonX.Y`), the
/// `Python.app` executable its launcher re-execs, with every framework
/// directory between them pinned; all owned by root or this uid and not
/// writable by group or others.
pub(super) fn python_proof(interpreter: &Path) -> Result<PythonProof> {
    let resolved = resolve_strict(interpreter)?;
    let mut executables = vec![resolved.clone()];
    let mut directories: Vec<PathBuf> = Vec::new();
    if let Some(framework) = framework_of(&resolved) {
        let companion =
            parent(&parent(&resolved)).join("Resources/Python.app/Contents/MacOS/Python");
        if resolve_strict(&companion)? != companion {
            return Err(Error::runtime(
                "legacy Python framework companion is not canonical",
            ));
        }
        executables.push(companion);
        let stop = parent(&framework);
        for executable in &executables {
            let mut directory = parent(executable);
            while directory != stop {
                if !directories.contains(&directory) {
                    directories.push(directory.clone());
                }
                directory = parent(&directory);
            }
        }
    }
    let mut bindings = Vec::new();
    for path in executables.iter().chain(&directories) {
        let info = lstat(path)?;
        let is_file = executables.contains(path);
        let kind_ok = if is_file {
            is_type(&info, FileType::RegularFile)
                && rustix::fs::access(path.as_path(), Access::EXEC_OK).is_ok()
        } else {
            is_type(&info, FileType::Directory)
        };
        if ![0, current_uid()].contains(&info.st_uid)
            || permission_bits(&info) & 0o022 != 0
            || !kind_ok
        {
            return Err(Error::runtime(
                "legacy Python executable or framework directory is unsafe",
            ));
        }
        bindings.push((path.clone(), StatPin::of(&info)));
    }
    Ok(PythonProof {
        executables,
        bindings,
    })
}

/// The `Python.framework` directory of `.../Python.framework/Versions/X.Y/
/// bin/pythonX.Y`, or `None` for any other interpreter path.
fn framework_of(resolved: &Path) -> Option<PathBuf> {
    let name = resolved.file_name()?.to_str()?;
    let version = name.strip_prefix("python")?;
    let (major, minor) = version.split_once('.')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || !digits(minor) {
        return None;
    }
    let bin = parent(resolved);
    let versioned = parent(&bin);
    let versions = parent(&versioned);
    let framework = parent(&versions);
    let named =
        |path: &Path, expected: &str| path.file_name().and_then(|n| n.to_str()) == Some(expected);
    (named(&bin, "bin")
        && named(&versioned, version)
        && named(&versions, "Versions")
        && named(&framework, "Python.framework"))
    .then_some(framework)
}

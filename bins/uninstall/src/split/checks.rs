//! The file-level proofs of `execution_uninstall`: exact unit files, no
//! pending update, free preparation runner locks, removable private trees,
//! exclusive ownership leases, no provider children, retired recovery owners,
//! and the removal of one managed entry without following links.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agents_common::{
    check_binding, entry_present, evidence_digest, normalize_path, owned_directory, read_file,
    recovery_directory, recovery_evidence, recovery_service_path, render_recovery_service, Error,
    ExecutionLayout, PlatformName, RecoveryService, Result, SystemCommandRunner,
    RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS, RECOVERY_PAYLOAD,
};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object,
    os::current_uid,
    path::pure_path_text,
};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

/// The roles in the order the original handles them.
pub(super) use agents_common::{installed_service_files as service_files, ServiceFiles};

/// The update phases that leave nothing pending.
const SETTLED_PHASES: [&str; 7] = [
    "idle",
    "available",
    "current",
    "complete",
    "failed",
    "cancelled",
    "canceled",
];

/// `_no_pending_update`: the server's update status, when present, must be
/// private and settled.
pub(super) fn no_pending_update(layout: &ExecutionLayout) -> Result<()> {
    let path = layout.state_root.join("admin/server-update.json");
    let data = match read_file(&path, true) {
        Ok((data, _mode)) => data,
        Err(err) if err.is_not_found() => return Ok(()),
        Err(err) => return Err(err),
    };
    let value = parse_json(&data)?;
    let settled = value.as_object().is_some_and(|status| {
        status
            .get("phase")
            .and_then(Json::as_str)
            .is_some_and(|phase| SETTLED_PHASES.contains(&phase))
    });
    if !settled {
        return Err(Error::runtime(
            "an update or prepared candidate is pending; cancel or finish it before uninstalling",
        ));
    }
    Ok(())
}

/// `_no_provider_children`: the registry of provider child processes, when
/// present, must be private and list none.
pub(super) fn no_provider_children(state_root: &Path) -> Result<()> {
    let path = state_root.join("admin/provider-children.json");
    let data = match read_file(&path, true) {
        Ok((data, _mode)) => data,
        Err(err) if err.is_not_found() => return Ok(()),
        Err(err) => return Err(err),
    };
    let value = parse_json(&data)?;
    let empty = value
        .as_object()
        .is_some_and(|registry| registry.get("children") == Some(&Json::Array(Vec::new())));
    if !empty {
        return Err(Error::runtime(
            "provider child ownership remains unresolved; runtime files were retained",
        ));
    }
    Ok(())
}

/// An exclusive `flock` on an owned lease file, held until dropped.
#[derive(Debug)]
pub(super) struct OwnedLease {
    _descriptor: OwnedFd,
}

/// `_owned_lease`: opens an existing private lease file without following
/// links and takes its exclusive lock without waiting, proving no other
/// process (a preparation runner, a surviving server) still owns it.
pub(super) fn owned_lease(path: &Path) -> Result<OwnedLease> {
    let descriptor = rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, path))?;
    let info = rustix::fs::fstat(&descriptor)?;
    if FileType::from_raw_mode(info.st_mode) != FileType::RegularFile
        || info.st_uid != current_uid()
        || info.st_nlink != 1
        || info.st_mode & 0o7777 != 0o600
    {
        return Err(Error::permission("uninstall ownership lease is unsafe"));
    }
    match rustix::fs::flock(&descriptor, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => {
            return Err(Error::runtime(
                "another process still owns execution or candidate preparation",
            ))
        }
        Err(errno) => return Err(errno.into()),
    }
    if identity(path)? != python_compat::os::file_identity(&info) {
        return Err(Error::runtime("uninstall ownership lease changed"));
    }
    Ok(OwnedLease {
        _descriptor: descriptor,
    })
}

/// `_hold_preparation_leases`: every candidate preparation directory must be
/// a private, well-named directory whose runner lock (if any) is free; the
/// locks are held until the uninstall ends.
pub(super) fn hold_preparation_leases(root: &Path) -> Result<Vec<OwnedLease>> {
    let parent = root.join(".update-preparations");
    if !entry_present(&parent)? {
        return Ok(Vec::new());
    }
    owned_directory(&parent, true)?;
    let mut names: Vec<Vec<u8>> = fs::read_dir(&parent)
        .map_err(|err| Error::from_io_path(&err, &parent))?
        .map(|entry| {
            entry
                .map(|entry| entry.file_name().as_bytes().to_vec())
                .map_err(|err| Error::from_io_path(&err, &parent))
        })
        .collect::<Result<_>>()?;
    names.sort();
    let mut leases = Vec::new();
    for name in names {
        let well_named = python_compat::is_lower_hex(&name, 32);
        if !well_named {
            return Err(Error::runtime(
                "unknown candidate preparation directory; no files were removed",
            ));
        }
        let directory = parent.join(std::ffi::OsStr::from_bytes(&name));
        owned_directory(&directory, true)?;
        let lock = directory.join("runner.lock");
        if entry_present(&lock)? {
            leases.push(owned_lease(&lock)?);
        }
    }
    Ok(leases)
}

/// `_removable_tree`: a private root whose every descendant directory (links
/// never followed) is owned, fully accessible to its owner and on the root's
/// filesystem, so removal can neither fail half-way on permissions nor
/// cross into another mount.
pub(super) fn removable_tree(path: &Path) -> Result<()> {
    let info = fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    owned_directory(path, true)?;
    removable_children(path, info.dev())
}

fn removable_children(path: &Path, device: u64) -> Result<()> {
    for entry in fs::read_dir(path).map_err(|err| Error::from_io_path(&err, path))? {
        let child = entry.map_err(|err| Error::from_io_path(&err, path))?.path();
        let info = fs::symlink_metadata(&child).map_err(|err| Error::from_io_path(&err, &child))?;
        if !info.is_dir() {
            continue;
        }
        if info.uid() != current_uid() || info.mode() & 0o700 != 0o700 {
            return Err(Error::permission(
                "managed removal tree contains an inaccessible or foreign directory",
            ));
        }
        if info.dev() != device {
            return Err(Error::runtime(
                "managed removal tree contains another mounted filesystem",
            ));
        }
        removable_children(&child, device)?;
    }
    Ok(())
}

/// `_identity`: `(st_dev, st_ino)` of the entry itself.
pub(super) fn identity(path: &Path) -> Result<(u64, u64)> {
    let info = fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    Ok((info.dev(), info.ino()))
}

/// `_remove_child`: a directory tree is removed without following any link
/// in it; anything else is unlinked.
pub(super) fn remove_child(path: &Path) -> Result<()> {
    let info = fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    let removed = if info.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.map_err(|err| Error::from_io_path(&err, path))
}

/// `require_retired_owners` of `execution_recovery`: every durable
/// activation recovery owner must be retired (finalized and retired
/// evidence matching its terminal proof), its native registration gone and
/// its job not running; otherwise no runtime or bootstrap may be removed.
pub(super) fn require_retired_owners(root: &Path) -> Result<()> {
    let parent = root.join(RECOVERY_DIRECTORY);
    if !entry_present(&parent)? {
        return Ok(());
    }
    normalize_path(&parent)?;
    owned_directory(&parent, true)?;
    let names = fs::read_dir(&parent)
        .map_err(|err| Error::from_io_path(&err, &parent))?
        .map(|entry| {
            entry
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .map_err(|err| Error::from_io_path(&err, &parent))
        })
        .collect::<Result<Vec<_>>>()?;
    let commands = SystemCommandRunner::default();
    for name in names {
        if !owner_retired(root, &name)? {
            return Err(Error::runtime(
                "a durable activation recovery owner has not retired",
            ));
        }
        let (_directory, owner) = recovery_owner(root, &name)?;
        let platform = PlatformName::parse(owner_text(&owner, "platform"));
        let path = recovery_service_path(&name, &platform, Path::new(owner_text(&owner, "home")));
        if entry_present(&path)?
            || RecoveryService::new(&name, &platform, &commands).running(&path)?
        {
            return Err(Error::runtime(
                "a durable activation recovery job is still registered or running",
            ));
        }
    }
    Ok(())
}

/// `inspect_owner(root, transaction)["retired"] is True`: the owner's
/// finalized and retired proofs both name its current terminal proof.
/// Uninstall refused any activation journal under the same lock, so the
/// journal branch of `inspect_owner` cannot apply here.
fn owner_retired(root: &Path, name: &str) -> Result<bool> {
    let root = normalize_path(root)?;
    if !entry_present(&root.join(RECOVERY_DIRECTORY).join(name))? {
        return Ok(false);
    }
    let (directory, owner) = recovery_owner(&root, name)?;
    let finalized = directory.join("finalized.json");
    let retired_path = directory.join("retired.json");
    let terminal = path_exists(&finalized);
    let retired = path_exists(&retired_path);
    if terminal {
        let stored = Json::Object(recovery_evidence(&finalized)?);
        let expected = Json::Object(json_object! {
            "format" => 1,
            "transaction_id" => name,
            "terminal_sha256" => evidence_digest(&directory.join("terminal.json"))?,
        });
        if stored != expected
            || (retired && Json::Object(recovery_evidence(&retired_path)?) != expected)
        {
            return Err(Error::runtime(
                "native recovery retirement evidence changed",
            ));
        }
    } else if retired {
        return Err(Error::runtime(
            "native recovery retirement lacks finalization proof",
        ));
    }
    if !retired {
        // A live owner's registration must be exactly the one `arm` wrote:
        // anything else is a job this owner cannot vouch for.
        let service = recovery_service_path(
            name,
            PlatformName::parse(owner_text(&owner, "platform")),
            Path::new(owner_text(&owner, "home")),
        );
        let (registered, _mode) = read_file(&service, false)?;
        if registered != render_recovery_service(&directory, &owner)? {
            return Err(Error::runtime("recovery native registration changed"));
        }
        return Ok(false);
    }
    let failure = directory.join("failure.json");
    if path_exists(&failure) {
        recovery_evidence(&failure)?;
    }
    Ok(true)
}

/// `_owner(root, transaction)`: the owner directory and its `owner.json`,
/// which must name this root and transaction with valid pins, an unchanged
/// root directory, a bootstrap matching its digests and an unchanged
/// interpreter.
fn recovery_owner(root: &Path, name: &str) -> Result<(PathBuf, JsonObject)> {
    let directory = recovery_directory(root, name)?;
    let owner = recovery_evidence(&directory.join("owner.json"))?;
    let null = Json::Null;
    let field = |key: &str| owner.get(key).unwrap_or(&null);
    let int_at_least = |key: &str, low: i128, high: i128| matches!(field(key), Json::Int(number) if (low..=high).contains(number));
    let payload = field("payload").as_object().filter(|payload| {
        payload.len() == RECOVERY_PAYLOAD.len()
            && RECOVERY_PAYLOAD
                .iter()
                .all(|name| payload.contains_key(name))
    });
    let matches = owner.len() == RECOVERY_OWNER_KEYS.len()
        && RECOVERY_OWNER_KEYS
            .iter()
            .all(|key| owner.contains_key(key))
        && field("format") == &Json::Int(1)
        && field("root") == &Json::from(pure_path_text(root))
        && field("transaction_id") == &Json::from(name)
        && field("platform")
            .as_str()
            .is_some_and(|text| PlatformName::parse(text).supported().is_some())
        && int_at_least("port", 1, 65535)
        && int_at_least("api_contract", 1, i128::MAX)
        && matches!(field("fresh"), Json::Bool(_))
        && payload.is_some();
    let Some(payload) = payload.filter(|_| matches) else {
        return Err(Error::value(
            "recovery owner does not match its transaction",
        ));
    };
    check_binding(root, field("root_binding"))?;
    for key in ["home", "config_root", "state_root"] {
        let Some(path) = field(key).as_str() else {
            return Err(Error::value(
                "recovery owner does not match its transaction",
            ));
        };
        normalize_path(Path::new(path))?;
    }
    for (file, digest) in payload.iter() {
        if &Json::from(evidence_digest(&directory.join(file))?) != digest {
            return Err(Error::runtime("recovery bootstrap source changed"));
        }
    }
    let interpreter = field("interpreter")
        .as_str()
        .ok_or_else(unresolved_interpreter)?;
    if &Json::from(interpreter_digest(Path::new(interpreter))?) != field("interpreter_sha256") {
        return Err(Error::runtime("recovery interpreter changed"));
    }
    Ok((directory, owner))
}

fn unresolved_interpreter() -> Error {
    Error::value("recovery interpreter must be a resolved executable")
}

/// `_interpreter_digest(path)`: SHA-256 of a resolved executable owned by
/// root or this uid, not writable by group or others, unchanged while read.
fn interpreter_digest(path: &Path) -> Result<String> {
    let resolved = python_compat::path::resolve_strict(path)?;
    if !path.is_absolute() || resolved != path {
        return Err(unresolved_interpreter());
    }
    let descriptor = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, path))?;
    let before = rustix::fs::fstat(&descriptor)?;
    if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile
        || ![0, current_uid()].contains(&before.st_uid)
        || before.st_mode & 0o022 != 0
        || before.st_mode & 0o111 == 0
    {
        return Err(Error::permission(
            "recovery interpreter is not a trusted executable",
        ));
    }
    let mut digest = Sha256::new();
    let mut file = fs::File::from(descriptor);
    std::io::copy(&mut file, &mut digest).map_err(|err| Error::from_io_path(&err, path))?;
    let after = rustix::fs::fstat(&file)?;
    let pin = |info: &rustix::fs::Stat| {
        (
            info.st_dev,
            info.st_ino,
            info.st_size,
            info.st_mtime,
            info.st_mtime_nsec,
        )
    };
    if pin(&after) != pin(&before) {
        return Err(Error::runtime(
            "recovery interpreter changed while inspected",
        ));
    }
    Ok(python_compat::hex(&digest.finalize()))
}

/// A validated owner's text field (`platform`, `home`).
fn owner_text<'a>(owner: &'a JsonObject, key: &str) -> &'a str {
    owner.get(key).and_then(Json::as_str).unwrap_or_default()
}

/// `Path.exists()`: the entry resolves (a dangling link does not count).
fn path_exists(path: &Path) -> bool {
    fs::metadata(path).is_ok()
}

/// `Path.resolve(strict=False)` of a symlink: its target with the existing
/// part resolved physically and the missing tail kept.
pub(super) fn resolve_lenient(link: &Path) -> Option<PathBuf> {
    let target = fs::read_link(link).ok()?;
    let absolute = match link.parent() {
        Some(parent) if target.is_relative() => parent.join(target),
        _ => target,
    };
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        if let Ok(resolved) = fs::canonicalize(existing) {
            let mut path = resolved;
            for name in missing.iter().rev() {
                path.push(name);
            }
            return Some(path);
        }
        missing.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?;
    }
}

//! The file-level proofs of `execution_uninstall`: exact unit files, no
//! pending update, free preparation runner locks, removable private trees,
//! exclusive ownership leases, no provider children, and the removal of one
//! managed entry without following links.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agents_common::{
    current_uid, entry_present, normalize_path, owned_directory, parse_json, read_file,
    render_service, Error, ExecutionLayout, Json, Result,
};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

/// The unit files (bytes and mode) of both roles, in role order.
pub type ServiceFiles = Vec<(Vec<u8>, u32)>;

/// The roles in the order the seed handles them.
pub const ROLES: [&str; 2] = ["worker", "gateway"];

/// `_service_files`: both unit files exactly as this layout renders them
/// (mode 0600 or 0644, in owned directories), and `current` still linking
/// the installed gateway release.
pub fn service_files(layout: &ExecutionLayout) -> Result<ServiceFiles> {
    let mut files = Vec::new();
    for role in ROLES {
        let path = normalize_path(&layout.service_path(role)?)?;
        owned_directory(path.parent().unwrap_or(Path::new("/")), false)?;
        let (data, mode) = read_file(&path, false)?;
        if data != render_service(layout, role)? || !(mode == 0o600 || mode == 0o644) {
            return Err(Error::runtime(
                "native service configuration is not this installed execution layout",
            ));
        }
        files.push((data, mode));
    }
    let current = layout.current();
    let is_link = fs::symlink_metadata(&current).is_ok_and(|meta| meta.file_type().is_symlink());
    let target_matches = is_link
        && fs::canonicalize(&current).map_err(|err| Error::from_io_path(&err, &current))?
            == layout.gateway_release;
    if !target_matches {
        return Err(Error::runtime(
            "gateway current link no longer matches its installed generation",
        ));
    }
    Ok(files)
}

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
pub fn no_pending_update(layout: &ExecutionLayout) -> Result<()> {
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
pub fn no_provider_children(state_root: &Path) -> Result<()> {
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
pub struct OwnedLease {
    _descriptor: OwnedFd,
}

/// `_owned_lease`: opens an existing private lease file without following
/// links and takes its exclusive lock without waiting, proving no other
/// process (a preparation runner, a surviving server) still owns it.
pub fn owned_lease(path: &Path) -> Result<OwnedLease> {
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
    if identity(path)? != (info.st_dev, info.st_ino) {
        return Err(Error::runtime("uninstall ownership lease changed"));
    }
    Ok(OwnedLease {
        _descriptor: descriptor,
    })
}

/// `_hold_preparation_leases`: every candidate preparation directory must be
/// a private, well-named directory whose runner lock (if any) is free; the
/// locks are held until the uninstall ends.
pub fn hold_preparation_leases(root: &Path) -> Result<Vec<OwnedLease>> {
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
        let well_named = name.len() == 32
            && name
                .iter()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
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
pub fn removable_tree(path: &Path) -> Result<()> {
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
pub fn identity(path: &Path) -> Result<(u64, u64)> {
    let info = fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    Ok((info.dev(), info.ino()))
}

/// `_remove_child`: a directory tree is removed without following any link
/// in it; anything else is unlinked.
pub fn remove_child(path: &Path) -> Result<()> {
    let info = fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    let removed = if info.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.map_err(|err| Error::from_io_path(&err, path))
}

/// `require_retired_owners` of `execution_recovery`, as far as the port can
/// prove it: without durable activation recovery owners there is nothing to
/// retire. A recovery directory that holds any owner is refused, because the
/// owner evidence reader is not ported yet (refusing keeps every file).
pub fn require_retired_owners(root: &Path) -> Result<()> {
    let parent = root.join(".activation-recovery");
    if !entry_present(&parent)? {
        return Ok(());
    }
    let parent = normalize_path(&parent)?;
    owned_directory(&parent, true)?;
    let mut owners = fs::read_dir(&parent).map_err(|err| Error::from_io_path(&err, &parent))?;
    if owners.next().is_some() {
        return Err(Error::runtime(
            "a durable activation recovery owner has not retired",
        ));
    }
    Ok(())
}

/// `Path.resolve(strict=False)` of a symlink: its target with the existing
/// part resolved physically and the missing tail kept.
pub fn resolve_lenient(link: &Path) -> Option<PathBuf> {
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

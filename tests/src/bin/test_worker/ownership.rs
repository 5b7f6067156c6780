//! State ownership (`execution_ownership.acquire_state_ownership`): the worker
//! and a legacy monolith hold an exclusive flock on
//! `state_root/admin/state-owner.lock` for their whole life; `update_handoff`
//! and uninstall probe it and require it to be held.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use python_compat::os::current_uid;
use rustix::fs::{flock, FlockOperation};

use crate::private_files::open_lock;

fn owned_directory(path: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    let info = fs::symlink_metadata(path).map_err(|err| format!("{}: {err}", path.display()))?;
    if !info.is_dir() || info.uid() != current_uid() || info.permissions().mode() & 0o022 != 0 {
        return Err(
            "State ownership directory must be owned and not writable by other users".to_string(),
        );
    }
    Ok(())
}

fn identity(info: &fs::Metadata) -> Result<(u64, u64), String> {
    if !info.is_file()
        || info.uid() != current_uid()
        || info.permissions().mode() & 0o7777 != 0o600
        || info.nlink() != 1
    {
        return Err("State ownership lock must be an owned 0600 regular file".to_string());
    }
    Ok((info.dev(), info.ino()))
}

/// Takes the state-owner lock; the returned file must stay open for the
/// process's life.
pub(crate) fn acquire_state_ownership(state_root: &Path) -> Result<fs::File, String> {
    let root = state_root
        .canonicalize()
        .map_err(|err| format!("{}: {err}", state_root.display()))?;
    let admin = root.join("admin");
    owned_directory(&root)?;
    owned_directory(&admin)?;
    let path = admin.join("state-owner.lock");
    let file = open_lock(&path).map_err(|err| format!("{}: {err}", path.display()))?;
    let held = identity(&file.metadata().map_err(|err| err.to_string())?)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            return Err(
                "Another AgentsServer process already owns this state directory".to_string(),
            )
        }
        Err(err) => return Err(format!("{}: {err}", path.display())),
    }
    if identity(&fs::symlink_metadata(&path).map_err(|err| err.to_string())?)? != held {
        return Err("State ownership lock changed during acquisition".to_string());
    }
    Ok(file)
}

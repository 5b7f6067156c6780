//! The configuration files an activation journal owns (env, units, layout
//! manifest): their kinds, allowed modes, deterministic staging names and the
//! "is this exactly the journaled publication" proof.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::io::{file_name, parent_of, read_guarded, ReadPolicy, ACTIVATION_CONFIG_LIMIT};
use crate::error::{Error, Result};
use python_compat::{
    hex,
    json::{Json, JsonObject},
    os::{lstat, lstat_if_present, permission_bits},
};

/// The kinds of formats 1 and 2.
const LEGACY_KINDS: [&str; 2] = ["env", "service"];
/// The kinds of format 3 (split execution).
const EXECUTION_KINDS: [&str; 4] = ["env", "service", "gateway", "execution_layout"];

/// `_config_kinds(value)`: the configuration kinds a journal of this format owns.
pub(crate) fn config_kinds(execution_format: bool) -> &'static [&'static str] {
    if execution_format {
        &EXECUTION_KINDS
    } else {
        &LEGACY_KINDS
    }
}

/// `_config_modes(kind, publication=...)`: env and the layout manifest stay
/// private; units may be published 0644 and were snapshotted up to 0644.
pub fn config_modes(kind: &str, publication: bool) -> &'static [u32] {
    if kind == "env" || kind == "execution_layout" {
        &[0o600]
    } else if publication {
        &[0o600, 0o644]
    } else {
        &[0o600, 0o640, 0o644]
    }
}

/// `_config_staging_paths(destination, transaction_id, kind)`: the
/// deterministic `.source` and `.publication` names beside the destination
/// (`.agents-server.service.activation-activation-<hex>-service.source`).
pub fn config_staging_paths(
    destination: &Path,
    transaction_id: &str,
    kind: &str,
) -> (PathBuf, PathBuf) {
    let parent = parent_of(destination);
    let mut prefix = b".".to_vec();
    prefix.extend_from_slice(file_name(destination));
    prefix.extend_from_slice(format!(".activation-{transaction_id}-{kind}").as_bytes());
    let named = |suffix: &str| {
        let mut name = prefix.clone();
        name.extend_from_slice(suffix.as_bytes());
        parent.join(OsStr::from_bytes(&name))
    };
    (named(".source"), named(".publication"))
}

/// `{sha256, mode}` of a configuration file as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigMetadata {
    /// The content's sha256, lowercase hex.
    pub sha256: String,
    /// The permission bits.
    pub mode: u32,
}

impl ConfigMetadata {
    /// `_desired_content_metadata(desired)` of a validated desired record.
    pub fn of_desired(desired: &JsonObject) -> Option<Self> {
        Some(ConfigMetadata {
            sha256: desired.get("sha256")?.as_str()?.to_string(),
            mode: u32::try_from(desired.get("mode")?.as_int()?).ok()?,
        })
    }

    /// The original snapshot (`{"sha256", "mode"}` if it existed).
    pub fn of_snapshot(snapshot: &JsonObject) -> Option<Self> {
        if snapshot.get("existed") != Some(&Json::Bool(true)) {
            return None;
        }
        Self::of_desired(snapshot)
    }
}

/// `_current_config_metadata(path)`: the digest and mode of the file now at
/// `path`, or `None` when nothing is there. An unsafe file raises.
pub(crate) fn current_config_metadata(path: &Path) -> Result<Option<ConfigMetadata>> {
    let Some(info) = lstat_if_present(path)? else {
        return Ok(None);
    };
    let payload = read_guarded(path, ACTIVATION_CONFIG_LIMIT, ReadPolicy::OWNED_REGULAR)?.data;
    let linked = lstat(path)?;
    if (info.st_dev, info.st_ino) != (linked.st_dev, linked.st_ino) {
        return Err(Error::runtime(
            "activation configuration changed while verifying it",
        ));
    }
    Ok(Some(ConfigMetadata {
        sha256: hex(&Sha256::digest(&payload)),
        mode: permission_bits(&info),
    }))
}

/// `_config_identity_matches(info, desired)`: same device and inode.
pub fn identity_matches(device: u64, inode: u64, desired: &JsonObject) -> bool {
    desired.get("device") == Some(&Json::from(device))
        && desired.get("inode") == Some(&Json::from(inode))
}

/// `_config_path_matches_desired(path, desired)`: `path` is the journaled
/// publication itself (same inode, digest and mode), stable while checked.
pub fn config_path_matches_desired(path: &Path, desired: &JsonObject) -> Result<bool> {
    let Some(before) = lstat_if_present(path)? else {
        return Ok(false);
    };
    if !identity_matches(before.st_dev as u64, before.st_ino as u64, desired) {
        return Ok(false);
    }
    if current_config_metadata(path)? != ConfigMetadata::of_desired(desired) {
        return Ok(false);
    }
    let after = lstat(path)?;
    Ok((before.st_dev, before.st_ino) == (after.st_dev, after.st_ino))
}

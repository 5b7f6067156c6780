//! Release identities and link states of the activation journal.
//!
//! A release identity pins a release directory by device, inode and the
//! SHA-256 of its VERSION file, so a journal finds the same generation after a
//! rename (staging to `releases/<v>`, or into `candidate.retired`).

use std::path::{Path, PathBuf};

use rustix::fs::FileType;
use sha2::{Digest, Sha256};

use super::io::{is_owned_safe_directory, parent_of, read_guarded, ReadPolicy};
use super::text::safe_text;
use crate::error::{Error, Result};
use python_compat::{
    hex,
    json::{Json, JsonObject},
    json_object,
    os::{current_uid, is_type, lstat, lstat_if_present, read_link},
    path::absolute_path,
};

/// The digest that identifies a release by its `VERSION` file (private,
/// regular, ours): `_owned_regular_sha256(release / "VERSION")`.
fn version_sha256(release: &Path) -> Result<String> {
    let read = read_guarded(
        &release.join("VERSION"),
        4096,
        ReadPolicy::RELEASE_VERSION_FILE,
    )?;
    Ok(hex(&Sha256::digest(&read.data)))
}

/// `_release_matches(path, release)`: whether `path` is still the pinned
/// release. A missing path is `false`; an unsafe or missing VERSION inside a
/// matching directory raises, as in Python.
pub fn release_matches(path: &Path, release: &JsonObject) -> Result<bool> {
    let Some(info) = lstat_if_present(path)? else {
        return Ok(false);
    };
    let field = |key: &str| release.get(key).cloned().unwrap_or(Json::Null);
    if !is_owned_safe_directory(&info)
        || field("device") != Json::from(info.st_dev as u64)
        || field("inode") != Json::from(info.st_ino as u64)
    {
        return Ok(false);
    }
    Ok(field("version_sha256") == Json::from(version_sha256(path)?))
}

/// `_locate_release(release, extras=...)`: the first of the identity's
/// `source`, its `target` and `extras` that still holds the pinned release.
pub fn locate_release(release: &JsonObject, extras: &[PathBuf]) -> Result<Option<PathBuf>> {
    let text = |key: &str| release.get(key).and_then(Json::as_str).unwrap_or_default();
    let mut candidates = vec![absolute_path(text("source")), absolute_path(text("target"))];
    candidates.extend(extras.iter().cloned());
    let mut seen: Vec<PathBuf> = Vec::new();
    for candidate in candidates {
        if seen.contains(&candidate) {
            continue;
        }
        seen.push(candidate.clone());
        if release_matches(&candidate, release)? {
            return Ok(Some(candidate));
        }
    }
    Ok(None)
}

/// `_link_state(path, allow_directory=...)`: `{kind, target}` with kind
/// `missing`, `symlink` (the raw link text) or `directory` (an owned one).
pub(super) fn link_state(path: &Path, allow_directory: bool) -> Result<Json> {
    let Some(before) = lstat_if_present(path)? else {
        return Ok(link_record("missing", ""));
    };
    if is_type(&before, FileType::Symlink) {
        let target = read_link(path)?;
        safe_text(&Json::from(target.as_str()), "link target", 4096)?;
        let after = lstat(path)?;
        if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino) {
            return Err(Error::runtime("activation link changed while reading"));
        }
        return Ok(link_record("symlink", &target));
    }
    if allow_directory && is_type(&before, FileType::Directory) && before.st_uid == current_uid() {
        return Ok(link_record("directory", ""));
    }
    Err(Error::runtime(format!(
        "activation path is not supported: {}",
        python_compat::path::shown(path)
    )))
}

fn link_record(kind: &str, target: &str) -> Json {
    Json::Object(json_object! { "kind" => kind, "target" => target })
}

/// A link's target as `_absolute` sees it: relative targets resolve against
/// the link's directory.
pub(crate) fn link_target_path(link: &Path, target: &str) -> PathBuf {
    let target = Path::new(target);
    if target.as_os_str().as_encoded_bytes().starts_with(b"/") {
        absolute_path(target)
    } else {
        absolute_path(parent_of(link).join(target))
    }
}

/// `link_points_to(path, release)` of `_validate_invocation`: `path` is a
/// symlink whose target is the pinned release.
pub(crate) fn link_points_to(path: &Path, release: &JsonObject) -> Result<bool> {
    let Some(info) = lstat_if_present(path)? else {
        return Ok(false);
    };
    if !is_type(&info, FileType::Symlink) {
        return Ok(false);
    }
    let target = read_link(path)?;
    release_matches(&link_target_path(path, &target), release)
}

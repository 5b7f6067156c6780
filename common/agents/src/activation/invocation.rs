//! `_validate_invocation` and `execution_context`: whether a caller's layout
//! and the live links and configuration files are what the journal's phase
//! allows.

use std::path::{Path, PathBuf};

use super::config::{
    config_modes, config_path_matches_desired, current_config_metadata, ConfigMetadata,
};
use super::manifest::{ActivationManifest, ACTIVATION_JOURNAL_NAME};
use super::release::{link_points_to, link_state, locate_release, release_matches};
use super::volume::{SystemVolumes, VolumeProbe};
use crate::error::{Error, Result};
use python_compat::{
    json::{Json, JsonObject},
    json_object, member_truthy,
    os::lstat_if_present,
    path::{absolute_path, same_path},
};

/// The caller's side of a journal operation (activation_transaction's
/// argparse namespace): the layout it believes in and, optionally, the
/// ownership pins it expects. Empty pins are not checked.
#[derive(Debug, Clone, Default)]
pub struct ActivationInvocation {
    /// `--root`: the install root.
    pub root: PathBuf,
    /// `--current`: must be `<root>/current`.
    pub current: PathBuf,
    /// `--previous`: must be `<root>/previous`.
    pub previous: PathBuf,
    /// `--env`: the runtime env file the journal snapshotted.
    pub env: PathBuf,
    /// `--service`: the worker unit or plist the journal snapshotted.
    pub service: PathBuf,
    /// `--release-dir`: the candidate release path, if pinned.
    pub release_dir: String,
    /// `--release-version`: the candidate version, if pinned.
    pub release_version: String,
    /// `--transaction-id`: the journal's ownership key, if pinned.
    pub transaction_id: String,
}

impl ActivationInvocation {
    /// `owned_args(value, root)` of the consumer: the exact invocation of the
    /// journal itself, pinned to its id, version and release directory.
    pub fn owned(manifest: &ActivationManifest, root: &Path) -> Self {
        ActivationInvocation {
            root: root.to_path_buf(),
            current: root.join("current"),
            previous: root.join("previous"),
            env: PathBuf::from(manifest.text("env_path")),
            service: PathBuf::from(manifest.text("service_path")),
            release_dir: manifest.text("release_dir").to_string(),
            release_version: manifest.text("release_version").to_string(),
            transaction_id: manifest.transaction_id().to_string(),
        }
    }

    /// The unpinned layout-only invocation `execution_context` builds.
    fn layout_only(manifest: &ActivationManifest, root: &Path) -> Self {
        ActivationInvocation {
            release_dir: String::new(),
            release_version: String::new(),
            transaction_id: String::new(),
            ..Self::owned(manifest, root)
        }
    }
}

/// `execution_context(root)`: the validated split-service journal under
/// `root` (read without cleanup), or `None` for a format 1/2 journal. A
/// missing journal is FileNotFoundError, as in Python.
pub fn execution_context(root: &Path) -> Result<Option<ActivationManifest>> {
    execution_context_on(root, &SystemVolumes)
}

/// [`execution_context`] with the host's volumes seen through `volumes`
/// (a macOS journal rebases its device numbers on every read).
pub fn execution_context_on(
    root: &Path,
    volumes: &dyn VolumeProbe,
) -> Result<Option<ActivationManifest>> {
    let root = absolute_path(root);
    let (_directory, manifest) = ActivationManifest::read_on(&root, false, volumes)?;
    if !manifest.is_execution() {
        return Ok(None);
    }
    validate_invocation(
        &ActivationInvocation::layout_only(&manifest, &root),
        &manifest,
        true,
        None,
    )?;
    Ok(Some(manifest))
}

/// Checks that install.sh's arguments describe exactly the installation the
/// journal was begun for (roots, release, candidate, platform, port), so a
/// helper never acts on another activation. Ports `_validate_invocation`.
pub fn validate_invocation(
    args: &ActivationInvocation,
    value: &ActivationManifest,
    allow_missing_candidate: bool,
    transaction_directory: Option<&Path>,
) -> Result<()> {
    let root = absolute_path(&args.root);
    if !same_path(
        &absolute_path(value.text("env_path")),
        &absolute_path(&args.env),
    ) || !same_path(
        &absolute_path(value.text("service_path")),
        &absolute_path(&args.service),
    ) || !same_path(&absolute_path(&args.current), &root.join("current"))
        || !same_path(&absolute_path(&args.previous), &root.join("previous"))
    {
        return Err(Error::runtime(
            "pending activation belongs to a different layout",
        ));
    }
    if !args.transaction_id.is_empty() && args.transaction_id != value.transaction_id() {
        return Err(Error::runtime("activation transaction ownership changed"));
    }
    if !args.release_version.is_empty()
        && value.get("release_version") != &Json::from(args.release_version.as_str())
    {
        return Err(Error::runtime(
            "activation transaction release version changed",
        ));
    }
    if !args.release_dir.is_empty()
        && !same_path(
            &absolute_path(value.text("release_dir")),
            &absolute_path(&args.release_dir),
        )
    {
        return Err(Error::runtime(
            "activation transaction release path changed",
        ));
    }
    let candidate_retired = root.join("releases").join(format!(
        ".activation-candidate-retired-{}",
        value.transaction_id()
    ));
    let candidate_parked = transaction_directory
        .map_or_else(|| root.join(ACTIVATION_JOURNAL_NAME), Path::to_path_buf)
        .join("candidate.retired");
    let old_release = value.release("old_release");
    if !old_release.is_empty() && locate_release(&old_release, &[])?.is_none() {
        let suffix = if value.get("format") == &Json::from(1) {
            "; this legacy journal has no persistent volume proof, so a filesystem remount requires support-assisted recovery"
        } else {
            ""
        };
        return Err(Error::runtime(format!(
            "activation rollback release identity changed{suffix}"
        )));
    }
    let old_worker = value
        .execution_field("old_worker_release")
        .as_object()
        .cloned()
        .unwrap_or_default();
    if member_truthy(Some(value.execution_field("old_worker_release")))
        && locate_release(&old_worker, &[])?.is_none()
    {
        return Err(Error::runtime(
            "activation pinned worker release identity changed",
        ));
    }
    let candidate = value.release("candidate_release");
    let candidate_location = locate_release(&candidate, &[candidate_retired, candidate_parked])?;
    if candidate_location.is_none() && !allow_missing_candidate {
        return Err(Error::runtime(
            "activation candidate release identity changed",
        ));
    }
    let phase = value.phase();
    check_current(
        args,
        value,
        &old_release,
        &candidate,
        allow_missing_candidate,
        phase,
    )?;
    check_previous(args, value, &old_release, phase)?;
    check_configurations(value, phase)
}

const BEFORE_TAKEOVER: [&str; 4] = ["prepared", "guarded", "quiescing", "quiesced"];
const MIXED: [&str; 2] = ["linking", "rolling-back"];
const RESTORED: [&str; 2] = ["rolled-back", "rollback-healthy"];

fn check_current(
    args: &ActivationInvocation,
    value: &ActivationManifest,
    old_release: &JsonObject,
    candidate: &JsonObject,
    allow_missing_candidate: bool,
    phase: &str,
) -> Result<()> {
    let current_path = absolute_path(&args.current);
    let current_state = link_state(&current_path, true)?;
    let original_current = value.get("current");
    let candidate_current = Json::Object(json_object! {
        "kind" => "symlink",
        "target" => value.text("release_dir"),
    });
    let mut candidate_link_target_missing = false;
    if current_state == candidate_current {
        // Joined but not normalised: the kernel walks the link text itself.
        let raw = Path::new(value.text("release_dir"));
        let target = if raw.has_root() {
            raw.to_path_buf()
        } else {
            super::io::parent_of(&current_path).join(raw)
        };
        candidate_link_target_missing = lstat_if_present(&target)?.is_none();
    }
    let points_to_candidate =
        current_state == candidate_current && link_points_to(&current_path, candidate)?;
    let original_kind = original_current
        .get("kind")
        .and_then(Json::as_str)
        .unwrap_or_default();
    let points_to_old = !old_release.is_empty()
        && &current_state == original_current
        && ((original_kind == "symlink" && link_points_to(&current_path, old_release)?)
            || (original_kind == "directory" && release_matches(&current_path, old_release)?));
    let original_valid =
        &current_state == original_current && (original_kind == "missing" || points_to_old);
    let candidate_valid = points_to_candidate
        || (allow_missing_candidate
            && current_state == candidate_current
            && candidate_link_target_missing);
    let current_missing = current_state == missing_link();
    if BEFORE_TAKEOVER.contains(&phase) {
        if !original_valid {
            return Err(Error::runtime(
                "current release changed before link takeover",
            ));
        }
    } else if MIXED.contains(&phase) {
        if !(original_valid
            || candidate_valid
            || current_missing
            || (current_state == candidate_current && candidate_link_target_missing))
        {
            return Err(Error::runtime(
                "current release target changed during activation",
            ));
        }
    } else if RESTORED.contains(&phase) {
        if !original_valid {
            return Err(Error::runtime("current release was not restored"));
        }
    } else if !candidate_valid {
        return Err(Error::runtime(
            "current release does not resolve to the candidate",
        ));
    }
    Ok(())
}

fn missing_link() -> Json {
    Json::Object(json_object! { "kind" => "missing", "target" => "" })
}

fn check_previous(
    args: &ActivationInvocation,
    value: &ActivationManifest,
    old_release: &JsonObject,
    phase: &str,
) -> Result<()> {
    let previous_path = absolute_path(&args.previous);
    let previous_state = link_state(&previous_path, false)?;
    let old_target = value.text("old_target");
    let candidate_previous = (!old_target.is_empty())
        .then(|| Json::Object(json_object! { "kind" => "symlink", "target" => old_target }));
    let previous_release = value.release("previous_release");
    let original_valid = &previous_state == value.get("previous")
        && (previous_release.is_empty() || link_points_to(&previous_path, &previous_release)?);
    let candidate_valid = match &candidate_previous {
        None => original_valid,
        Some(expected) => {
            &previous_state == expected
                && !old_release.is_empty()
                && link_points_to(&previous_path, old_release)?
        }
    };
    let dangling_candidate = phase == "rolling-back"
        && candidate_previous.as_ref() == Some(&previous_state)
        && !old_release.is_empty()
        && release_matches(
            &absolute_path(
                old_release
                    .get("source")
                    .and_then(Json::as_str)
                    .unwrap_or_default(),
            ),
            old_release,
        )?;
    let previous_missing = previous_state == missing_link();
    if BEFORE_TAKEOVER.contains(&phase) {
        if !original_valid {
            return Err(Error::runtime(
                "previous release changed before link takeover",
            ));
        }
    } else if MIXED.contains(&phase) {
        if !(original_valid || candidate_valid || dangling_candidate || previous_missing) {
            return Err(Error::runtime("previous release changed during activation"));
        }
    } else if RESTORED.contains(&phase) {
        if !original_valid {
            return Err(Error::runtime("previous release link was not restored"));
        }
    } else if !candidate_valid {
        return Err(Error::runtime(
            "previous release does not resolve to the rollback release",
        ));
    }
    Ok(())
}

fn check_configurations(value: &ActivationManifest, phase: &str) -> Result<()> {
    const ORIGINAL: [&str; 10] = [
        "prepared",
        "guarded",
        "quiescing",
        "quiesced",
        "linking",
        "stopping",
        "stopped",
        "fencing",
        "rolled-back",
        "rollback-healthy",
    ];
    const OBSERVED: [&str; 5] = [
        "linked",
        "fenced",
        "authorizing",
        "authority",
        "rolling-back",
    ];
    for kind in value.config_kinds() {
        let destination = absolute_path(value.text(&format!("{kind}_path")));
        let metadata = current_config_metadata(&destination)?;
        let original = value
            .get(kind)
            .as_object()
            .and_then(ConfigMetadata::of_snapshot);
        let valid = if ORIGINAL.contains(&phase) {
            metadata == original
        } else if OBSERVED.contains(&phase) {
            let history = value.get(&format!("observed_{kind}_sha256"));
            let history = history.as_array().map(Vec::as_slice).unwrap_or_default();
            match &metadata {
                None => history.contains(&Json::Null),
                Some(found) => {
                    history.contains(&Json::from(found.sha256.as_str()))
                        && config_modes(kind, false).contains(&found.mode)
                }
            }
        } else {
            match value.get(&format!("desired_{kind}")).as_object() {
                Some(desired) => config_path_matches_desired(&destination, desired)?,
                None => false,
            }
        };
        if !valid {
            return Err(Error::runtime(
                "activation configuration does not match its phase",
            ));
        }
    }
    Ok(())
}

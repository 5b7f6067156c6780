//! `replace_config`: the write-ahead publication of one installer-generated
//! configuration file under the activation journal.
//!
//! The journal records the staged inode (`desired_<kind>`) before anything is
//! published, the staged file is hard-linked to a second deterministic name,
//! and only then renamed over the destination. After a crash at any step the
//! same call resumes from the names left on disk; nothing is ever published
//! that the journal does not name.

// `stat` field types differ between platforms (u64 on Linux x86_64, i32
// st_dev on macOS); the casts that are no-ops here are not elsewhere.
#![allow(clippy::unnecessary_cast)]

use std::path::Path;

use sha2::{Digest, Sha256};

use agents_common::{
    capture_volume, config_modes, config_path_matches_desired, config_staging_paths,
    fsync_directory_nofollow, identity_matches, parent_of, read_guarded, replace_private,
    validate_invocation, ActivationInvocation, ActivationManifest, ConfigMetadata, Error,
    ReadPolicy, Result, SystemVolumes, VolumeProbe, ACTIVATION_CONFIG_LIMIT,
};
use python_compat::{
    hex,
    json::{Json, JsonObject},
    json_object,
    os::{hard_link, lstat, lstat_if_present, permission_bits, rename, unlink},
    path::{absolute_path, pure_path_text, same_path},
};

/// `_open_config_staging_source`: the `.source` file, opened read-write.
const STAGING_SOURCE: ReadPolicy = ReadPolicy {
    write: true,
    exact_mode: None,
    links: &[1],
    minimum: 0,
    exact_length: false,
    unsafe_message: "activation configuration staging file is unsafe",
    changed_message: "activation configuration staging file changed",
};

/// `_staged_config_metadata`: a `.publication` (or source) that may still
/// share its inode with the other staging name.
const STAGED_PUBLICATION: ReadPolicy = ReadPolicy {
    write: false,
    exact_mode: None,
    links: &[1, 2],
    minimum: 0,
    exact_length: false,
    unsafe_message: "activation configuration publication is unsafe",
    changed_message: "activation configuration publication changed",
};

/// The durable steps of a fresh publication, in order; a crash after any of
/// them leaves a state the next call resumes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceConfigStep {
    /// The journal names the staged inode (`desired_<kind>`).
    JournalWritten,
    /// The staged file has its published mode and is fsynced.
    ModeSet,
    /// The `.publication` hard link exists (the inode has two links).
    Linked,
    /// The `.source` name is gone; only `.publication` holds the inode.
    SourceUnlinked,
    /// The staged inode was renamed over the destination.
    Published,
}

/// `replace_config(args)`: publish `<source>` (the deterministic `.source`
/// staging file of `kind`) as the journal's `<kind>_path` with `mode`, or
/// resume an interrupted publication of it.
pub fn replace_config(
    args: &ActivationInvocation,
    kind: &str,
    source: &Path,
    mode: u32,
) -> Result<()> {
    replace_config_with_checkpoints(args, kind, source, mode, &mut |_| Ok(()))
}

/// [`replace_config`] that calls `checkpoint` after each durable step; an
/// error from it stops the publication there, exactly as a crash would
/// (crash-resume tests use this).
pub fn replace_config_with_checkpoints(
    args: &ActivationInvocation,
    kind: &str,
    source: &Path,
    mode: u32,
    checkpoint: &mut dyn FnMut(ReplaceConfigStep) -> Result<()>,
) -> Result<()> {
    replace_config_on(&SystemVolumes, args, kind, source, mode, checkpoint)
}

/// The journal phases in which no configuration may change any more.
const CLOSED_PHASES: [&str; 5] = [
    "committing",
    "committed",
    "rolling-back",
    "rolled-back",
    "rollback-healthy",
];

/// [`replace_config_with_checkpoints`] with the host's volumes seen through
/// `volumes`: on macOS a fresh publication binds the staging directory's
/// volume in the journal before naming its inode.
pub fn replace_config_on(
    volumes: &dyn VolumeProbe,
    args: &ActivationInvocation,
    kind: &str,
    source: &Path,
    mode: u32,
    checkpoint: &mut dyn FnMut(ReplaceConfigStep) -> Result<()>,
) -> Result<()> {
    let root = absolute_path(&args.root);
    let (directory, mut value) = ActivationManifest::read_on(&root, true, volumes)?;
    validate_invocation(args, &value, false, None)?;
    if CLOSED_PHASES.contains(&value.phase()) {
        return Err(Error::runtime(
            "activation configuration cannot change in this phase",
        ));
    }
    let source = absolute_path(source);
    if !value.config_kinds().contains(&kind) {
        return Err(Error::runtime(
            "activation configuration kind is not owned by this transaction",
        ));
    }
    let destination = absolute_path(value.text(&format!("{kind}_path")));
    let (expected_source, secured) =
        config_staging_paths(&destination, value.transaction_id(), kind);
    if !same_path(&source, &expected_source) {
        return Err(Error::runtime(
            "activation configuration staging path is invalid",
        ));
    }
    if !config_modes(kind, true).contains(&mode) {
        return Err(Error::runtime("activation configuration mode is invalid"));
    }
    let desired_field = format!("desired_{kind}");
    let journaled = value.get(&desired_field).as_object().cloned();
    let journaled_with_mode = journaled
        .clone()
        .filter(|desired| desired.get("mode") == Some(&Json::from(mode)));
    let staged = Staged {
        staged: &secured,
        source: &source,
        destination: &destination,
    };
    if lstat_if_present(&source)?.is_none() {
        let Some(desired) = journaled_with_mode else {
            return Err(Error::runtime(
                "activation configuration staging file is missing",
            ));
        };
        if lstat_if_present(&secured)?.is_none() {
            if !config_path_matches_desired(&destination, &desired)? {
                return Err(Error::runtime(
                    "activation configuration publication is incomplete",
                ));
            }
            return fsync_directory_nofollow(&parent_of(&destination));
        }
        return staged.publish(&desired, checkpoint);
    }
    if lstat_if_present(&secured)?.is_some() {
        let Some(desired) = journaled_with_mode else {
            return Err(Error::runtime(
                "activation configuration publication path exists",
            ));
        };
        return staged.publish(&desired, checkpoint);
    }
    // Fresh publication.
    capture_volume(volumes, value.object_mut(), &parent_of(&source))?;
    let opened = read_guarded(&source, ACTIVATION_CONFIG_LIMIT, STAGING_SOURCE)?;
    let digest = hex(&Sha256::digest(&opened.data));
    let desired = json_object! {
        "sha256" => digest.as_str(),
        "mode" => mode,
        "source" => pure_path_text(&source),
        "device" => opened.before.st_dev as u64,
        "inode" => opened.before.st_ino as u64,
    };
    let object = value.object_mut();
    object.insert(desired_field.as_str(), desired.clone());
    let history_field = format!("observed_{kind}_sha256");
    if let Some(history) = object.get_mut(&history_field).and_then(Json::as_array_mut) {
        if !history.contains(&Json::from(digest.as_str())) {
            history.push(Json::from(digest.as_str()));
        }
    }
    // The journal must not name a staged inode whose own name could still be
    // lost: the caller created `.source` without syncing its directory, and
    // after a power cut a rerun would find the journal counting on a name
    // that is gone ("publication is incomplete", forever). The original
    // shares this gap; see docs/design/crash-safety.md.
    fsync_directory_nofollow(&parent_of(&source))?;
    replace_private(&directory.join("manifest.json"), &value.canonical_bytes())?;
    checkpoint(ReplaceConfigStep::JournalWritten)?;
    rustix::fs::fchmod(&opened.descriptor, python_compat::os::permission_mode(mode))?;
    rustix::fs::fsync(&opened.descriptor)?;
    checkpoint(ReplaceConfigStep::ModeSet)?;
    hard_link(&source, &secured)?;
    fsync_directory_nofollow(&parent_of(&source))?;
    let secured_info = lstat(&secured)?;
    let after = rustix::fs::fstat(&opened.descriptor)?;
    let identity = (opened.before.st_dev, opened.before.st_ino);
    if identity != (after.st_dev, after.st_ino)
        || identity != (secured_info.st_dev, secured_info.st_ino)
        || hex(&Sha256::digest(&opened.data)) != digest
    {
        return Err(Error::runtime(
            "activation configuration staging identity changed",
        ));
    }
    drop(opened);
    checkpoint(ReplaceConfigStep::Linked)?;
    staged.publish(&desired, checkpoint)
}

/// Whether the `.source` at `source` is already the inode the journal's
/// `desired` record names, holding exactly `payload`: the state a crash
/// between the write-ahead record and the publication leaves. The original's
/// `publish` re-reads such a source as a private file and fails once the
/// inode is 0644 or linked twice; the port lets [`replace_config`] resume it
/// instead (see the `execution-activation` publish notes).
pub fn journaled_staging_matches(
    source: &Path,
    desired: &JsonObject,
    payload: &[u8],
) -> Result<bool> {
    let Some(info) = lstat_if_present(source)? else {
        return Ok(false);
    };
    let digest = hex(&Sha256::digest(payload));
    if !identity_matches(info.st_dev as u64, info.st_ino as u64, desired)
        || desired.get("sha256") != Some(&Json::from(digest.as_str()))
    {
        return Ok(false);
    }
    let read = read_guarded(source, ACTIVATION_CONFIG_LIMIT, STAGED_PUBLICATION)?;
    Ok(
        (read.before.st_dev, read.before.st_ino) == (info.st_dev, info.st_ino)
            && read.data == payload,
    )
}

/// The names `_publish_staged_config` works on.
struct Staged<'a> {
    staged: &'a Path,
    source: &'a Path,
    destination: &'a Path,
}

impl Staged<'_> {
    /// `_publish_staged_config`: proves the staged inode is the journaled
    /// one, drops the `.source` name, renames over the destination and
    /// re-proves the published file.
    fn publish(
        &self,
        desired: &JsonObject,
        checkpoint: &mut dyn FnMut(ReplaceConfigStep) -> Result<()>,
    ) -> Result<()> {
        let read = read_guarded(self.staged, ACTIVATION_CONFIG_LIMIT, STAGED_PUBLICATION)?;
        let metadata = ConfigMetadata {
            sha256: hex(&Sha256::digest(&read.data)),
            mode: permission_bits(&read.before),
        };
        let identity = (read.before.st_dev, read.before.st_ino);
        drop(read);
        if Some(metadata) != ConfigMetadata::of_desired(desired)
            || !identity_matches(identity.0 as u64, identity.1 as u64, desired)
        {
            return Err(Error::runtime(
                "activation staged configuration does not match its journal",
            ));
        }
        if let Some(linked) = lstat_if_present(self.source)? {
            if (linked.st_dev, linked.st_ino) == identity {
                unlink(self.source)?;
            }
        }
        let source_parent = parent_of(self.source);
        fsync_directory_nofollow(&source_parent)?;
        let staged_parent = parent_of(self.staged);
        if !same_path(&staged_parent, &source_parent) {
            fsync_directory_nofollow(&staged_parent)?;
        }
        checkpoint(ReplaceConfigStep::SourceUnlinked)?;
        if let Err(error) = rename(self.staged, self.destination) {
            // Give the staged inode its source name back when that name is
            // free, so an in-process retry sees the original interface.
            if lstat_if_present(self.staged)?.is_some() && lstat_if_present(self.source)?.is_none()
            {
                rename(self.staged, self.source)?;
                fsync_directory_nofollow(&source_parent)?;
            }
            return Err(error.into());
        }
        checkpoint(ReplaceConfigStep::Published)?;
        fsync_directory_nofollow(&parent_of(self.destination))?;
        if !config_path_matches_desired(self.destination, desired)? {
            return Err(Error::runtime(
                "activation configuration changed after publication",
            ));
        }
        Ok(())
    }
}

//! The outer activation journal of install.sh (`activation_transaction`) and
//! the parts of its companions that `execution_activation` needs.
//!
//! install.sh's own Python writer (`activation_transaction.py begin/record/
//! activate-files/restore-files/finish`) creates and advances
//! `<root>/.activation-transaction/`; the split-service helper reads it on
//! every call and writes it only through `replace_config` (execution-activation). So every
//! validation step, message, byte of the canonical encoding and fsync/rename
//! order follows the Python module: a journal either side writes is read the
//! same way by the other.

// `stat` field types differ between platforms (u64 on Linux x86_64, i32
// st_dev on macOS); the casts that are no-ops here are not elsewhere.
#![allow(clippy::unnecessary_cast)]

mod config;
mod handoff;
mod invocation;
mod io;
mod manifest;
mod recovery;
mod release;
mod text;
mod volume;

pub use config::{
    config_modes, config_path_matches_desired, config_staging_paths, identity_matches,
    ConfigMetadata,
};
pub use handoff::read_update_handoff;
pub use invocation::{
    execution_context, execution_context_on, validate_invocation, ActivationInvocation,
};
pub use io::{
    parent_of, read_guarded, read_owned_config, read_private_file, replace_private,
    write_new_private, ReadPolicy, ACTIVATION_CONFIG_LIMIT, ACTIVATION_CONTROL_LIMIT,
};
pub use manifest::{canonical_manifest_bytes, ActivationManifest, ACTIVATION_JOURNAL_NAME};
pub use recovery::{
    activation_intent, evidence_digest, preparation_path, recovery_directory, recovery_evidence,
    recovery_service_path, render_recovery_service, RecoveryService, INTENT_KEYS,
    RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS, RECOVERY_PAYLOAD,
};
pub use release::{locate_release, release_matches};
pub use volume::{
    capture_volume, check_binding, check_binding_on, directory_binding, directory_binding_on,
    volume_uuid, SystemVolumes, VolumeProbe, VOLUME_UUID_REPLY_SIZE,
};

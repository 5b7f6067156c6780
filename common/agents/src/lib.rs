//! What two or more of the AgentsServer lifecycle helpers share.
//!
//! Each of the five helpers (`uninstall`, `update-runner`, `update-handoff`,
//! `execution-activation`, `execution-manage`) is a crate of its own under
//! `bins/`, holding everything only it uses. This crate holds the rest: the
//! files, locks, journals and protocols several helpers read and write, and
//! the Python rules they must all follow byte for byte, because Python code
//! that stays (install.sh's journal writer, the server, the worker) reads
//! and writes the same files.
//!
//! # Map by concern, with the helpers that use each module
//!
//! (UN `uninstall`, UR `update-runner`, UH `update-handoff`, EA
//! `execution-activation`, EM `execution-manage`.)
//!
//! Foundations:
//! - `error` (all): the error every helper returns, keeping the Python
//!   exception the seed raises ([`python_compat::Exception`]): [`Error`].
//! - [`fs`] (all): guarded configuration I/O (no symlinks, exact owners and
//!   modes, bounded reads) and atomic writes: [`normalize_path`],
//!   [`read_file`], [`atomic_write`], [`owned_directory`].
//!
//! Python's own rules (exceptions, text, ints, JSON, argparse, paths) are the
//! `python_compat` crate's; the helpers import them from there.
//!
//! The installation on disk:
//! - [`layout`] (UN, EA, EM; UR and UH through `handoff`): the two-service
//!   execution layout, its units/plists and installed manifest:
//!   [`ExecutionLayout`], [`render_service`], [`layout_manifest`].
//! - `install_lock` (UN, EM; UR and UH through `handoff`): install.sh's
//!   `.install-lock`, released on Ctrl-C as Python's `with` releases it:
//!   [`InstallationLock`]; [`inspect_lock`] judges it as the next acquirer
//!   would, read-only (EM's doctor).
//! - [`activation`] (EA, UR, UN): install.sh's `.activation-transaction`
//!   journal as the helpers read and validate it, its guarded I/O, release
//!   identities, volume bindings and recovery owners: [`ActivationManifest`],
//!   [`execution_context`], [`activation_intent`], [`render_recovery_service`].
//! - `uninstall_marker` (UN, EA, UR; UH through `handoff`): the split
//!   uninstall's `.execution-uninstall.json` intent and installed-layout
//!   provenance: [`read_uninstall_intent`], [`installed_layout`],
//!   [`installed_service_files`] (UN, EM), [`check_binding`].
//! - `update_status` (UR, EA): the server's `server-update.json` row (flock,
//!   CAS on the owning update): [`update_status`], [`StatusLock`].
//!
//! The running services:
//! - `services` (UN, EA, EM; UR and UH through `handoff`): the worker and
//!   gateway jobs on systemd or launchd behind an injectable command runner:
//!   [`NativeServices`], [`ServiceState`], [`CommandRunner`].
//! - `http` (through `worker_control`): PID-pinned loopback HTTP, no
//!   credential byte before the peer's owner is proven.
//! - `worker_control` (UN, EA, EM; UR and UH through `handoff`): the
//!   authenticated client of the running worker: [`WorkerControl`],
//!   [`ServiceSnapshot`].
//! - `handoff` (UH, UR; EM's doctor checks without releasing): releasing a
//!   failed update's sealed worker handoff: [`release_existing_handoff`],
//!   [`retry_failed_handoff`], [`check_handoff_release`].
//!
//! Modules import each other by path; the root re-exports only what the
//! helpers use. Tests reach a few internals through `test_support`.

#![deny(missing_docs)]

// Facts, each checked against the headers; every platform uses only some.
#[allow(dead_code)]
mod darwin_abi;
mod error;
pub use error::{Error, Result};

// fs (safe filesystem primitives and secrets)
pub mod fs;
pub use fs::{
    atomic_write, check_text, desired, ensure_directory, fsync_directory, fsync_directory_nofollow,
    normalize_path, owned_directory, read_file, remove_abandoned_drafts, remove_atomic_temporaries,
    snapshot, MAX_CONFIG_BYTES,
};
// layout (ExecutionLayout, unit/plist rendering, layout manifest)
pub mod layout;
pub use layout::{
    active_worker_release, layout_manifest, maintenance_operation_id, prepare_runtime,
    render_service, ExecutionLayout, FORMAT, LAYOUT_NAME, PROTOCOL_VERSION, TRANSACTION_NAME,
};
// install_lock (InstallationLock)
mod install_lock;
pub use install_lock::{inspect_lock, InstallationLock, LockInspection};
// services (NativeServices)
mod services;
pub use services::{
    CommandCapture, CommandRunner, NativeServices, ServiceRunState, ServiceState, ServiceStates,
    SystemCommandRunner,
};
mod http;

mod worker_control;
pub use worker_control::{SealedHold, ServiceSnapshot, WorkerControl};
// update_status (server-update.json flock + CAS protocol)
mod update_status;
pub use update_status::{
    is_ownership_lost, read_status_unlocked, runner_owns, update_status, update_status_unlocked,
    utc_now, StatusLock, MAX_STATUS_BYTES, RUNNER_OWNED_ACTIVE_PHASES,
};
// activation (install.sh's .activation-transaction journal and replace_config)
pub mod activation;
pub use activation::{
    activation_intent, check_binding, config_path_matches_desired, config_staging_paths,
    directory_binding, evidence_digest, execution_context, locate_release, read_owned_config,
    read_private_file, read_update_handoff, recovery_directory, recovery_evidence,
    recovery_service_path, release_matches, render_recovery_service, validate_invocation,
    volume_uuid, write_new_private, ActivationInvocation, ActivationManifest, RecoveryService,
    SystemVolumes, VolumeProbe, ACTIVATION_CONFIG_LIMIT, ACTIVATION_CONTROL_LIMIT,
    ACTIVATION_JOURNAL_NAME, INTENT_KEYS, RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS,
    RECOVERY_PAYLOAD,
};
// uninstall_marker (the split uninstall's intent and installed-layout provenance)
mod uninstall_marker;
pub use uninstall_marker::{
    entry_present, installed_layout, installed_service_files, no_activation,
    read_interrupted_removal, read_uninstall_intent, store_uninstall_intent,
    write_uninstall_intent, ServiceFiles, UNINSTALL_INTENT_NAME,
};
// handoff (update_handoff: release a failed update's sealed worker handoff)
mod handoff;
pub use handoff::{
    check_handoff_release, release_existing_handoff, retry_failed_handoff, HandoffCheck,
};

/// What the tests of this crate and of the helpers reach beyond the
/// helpers' surface (the pinned HTTP client, encoders, journal internals).
/// Not part of the helpers' API.
#[doc(hidden)]
pub mod test_support {
    pub use crate::activation::{
        canonical_manifest_bytes, check_binding_on, directory_binding_on, link_state,
        release_identity, VOLUME_UUID_REPLY_SIZE,
    };
    pub use crate::fs::{ensure_execution_secret, read_secret};
    pub use crate::handoff::HandoffRelease;
    pub use crate::http::{request_json, LsofRunner, PinnedRequest};
    pub use crate::layout::{service_arguments, GATEWAY_UNIT, WORKER_UNIT};
    pub use crate::uninstall_marker::pending_uninstall_operation;
    pub use crate::update_status::{atomic_json, OWNERSHIP_LOST_MESSAGE};
}

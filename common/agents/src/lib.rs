//! The AgentsServer domain the lifecycle helpers share.
//!
//! Each of the five helpers (`uninstall`, `update-runner`, `update-handoff`,
//! `execution-activation`, `execution-manage`) is a crate of its own under
//! `bins/`, holding everything only it uses. This crate holds the rest: the
//! files, locks, journals and protocols several helpers read and write,
//! which Python code that stays (install.sh's journal writer, the server,
//! the worker) reads and writes too. Python's own rules (exceptions, text,
//! ints, JSON, argparse, `os`, paths) are the `python_compat` crate's; the
//! types this API takes and returns from there ([`Json`], [`JsonObject`],
//! [`ErrorClass`]) are imported from `python_compat`, never through this
//! crate.
//!
//! [`Json`]: python_compat::json::Json
//! [`JsonObject`]: python_compat::json::JsonObject
//! [`ErrorClass`]: python_compat::ErrorClass
//!
//! # Map by concern, with the helpers that use each part
//!
//! (UN `uninstall`, UR `update-runner`, UH `update-handoff`, EA
//! `execution-activation`, EM `execution-manage`.) Every module is private;
//! this root is the one surface, grouped below as the modules are.
//!
//! Foundations:
//! - the error (all): [`Error`] keeps the Python exception the original raises
//!   ([`python_compat::Exception`]), so callers branch on its class and a
//!   helper's one stderr line is the original's traceback line.
//! - guarded files (all): configuration I/O with no symlinks, exact owners
//!   and modes and bounded reads, and atomic writes: [`normalize_path`],
//!   [`read_file`], [`read_regular_file`], [`atomic_write`],
//!   [`owned_directory`], [`snapshot`].
//!
//! The installation on disk:
//! - the layout (UN, EA, EM; UR and UH through the handoff): the two-service
//!   execution layout, its units/plists and installed manifest:
//!   [`ExecutionLayout`], [`render_service`], [`layout_manifest`],
//!   [`WORKER_UNIT`], [`GATEWAY_UNIT`]; its [`Platform`] (`Linux` or
//!   `Darwin`), parsed once where it enters into a [`PlatformName`] that
//!   keeps an unsupported text for the step that refuses it.
//! - the install lock (UN, EM; UR and UH through the handoff): install.sh's
//!   `.install-lock`, released on Ctrl-C as Python's `with` releases it:
//!   [`InstallationLock`]; [`inspect_lock`] judges it as the next acquirer
//!   would, read-only (EM's doctor).
//! - the activation journal (EA, UR, UN): install.sh's
//!   `.activation-transaction` as the helpers read and validate it, its
//!   guarded I/O ([`read_guarded`] with a [`ReadPolicy`]), release
//!   identities, volume bindings and recovery owners:
//!   [`ActivationManifest`], [`execution_context`], [`activation_intent`],
//!   [`render_recovery_service`], [`check_binding`], [`capture_volume`].
//! - the uninstall marker (UN, EA, UR; UH through the handoff): the split
//!   uninstall's `.execution-uninstall.json` intent and installed-layout
//!   provenance: [`read_uninstall_intent`], [`installed_layout`],
//!   [`installed_service_files`] (UN, EM).
//! - the status row (UR, EA): the server's `server-update.json` (flock, CAS
//!   on the owning update): [`update_status`], [`StatusLock`].
//!
//! The running services:
//! - native services (UN, EA, EM; UR and UH through the handoff): the worker
//!   and gateway jobs on systemd or launchd behind an injectable command
//!   runner: [`NativeServices`], [`ServiceState`], [`CommandRunner`].
//! - worker control (UN, EA, EM; UR and UH through the handoff): the
//!   authenticated client of the running worker over PID-pinned loopback
//!   HTTP, no credential byte before the peer's owner is proven:
//!   [`WorkerControl`], [`ServiceSnapshot`].
//! - the handoff (UH, UR; EM's doctor checks without releasing): releasing
//!   a failed update's sealed worker handoff: [`release_existing_handoff`],
//!   [`retry_failed_handoff`], [`check_handoff_release`].
//!
//! Tests reach a few internals that are not API through `test_support`
//! (documented there).

#![deny(missing_docs)]

mod activation;
// Facts, each checked against the headers; every platform uses only some.
#[allow(dead_code)]
mod darwin_abi;
mod error;
mod fs;
mod handoff;
mod http;
mod install_lock;
mod layout;
mod named;
mod platform;
mod role;
mod services;
mod uninstall_marker;
mod update_status;
mod worker_control;

// The error.
pub use error::{Error, ErrorKind, Result};

// Guarded files.
pub use fs::{
    atomic_write, check_text, desired, ensure_directory, fsync_directory, fsync_directory_nofollow,
    normalize_path, open_leaf, owned_directory, read_file, read_regular_file,
    remove_abandoned_drafts, remove_atomic_temporaries, snapshot, BoundedRead, Leaf,
    MAX_CONFIG_BYTES,
};

// The layout.
pub use layout::{
    active_worker_release, is_variable_name, layout_manifest, maintenance_operation_id,
    prepare_runtime, render_service, ExecutionLayout, FORMAT, GATEWAY_UNIT, LAYOUT_NAME,
    PROTOCOL_VERSION, TRANSACTION_NAME, WORKER_UNIT,
};

// The install lock.
pub use install_lock::{inspect_lock, InstallationLock, LockInspection};

// The activation journal.
pub use activation::{
    activation_intent, capture_volume, check_binding, check_binding_on, config_modes,
    config_path_matches_desired, config_staging_paths, directory_binding, directory_binding_on,
    evidence_digest, execution_context, execution_context_on, identity_matches, locate_release,
    parent_of, preparation_path, read_guarded, read_owned_config, read_private_file,
    read_update_handoff, recovery_directory, recovery_evidence, recovery_service_path,
    release_matches, render_recovery_service, replace_private, validate_invocation, volume_uuid,
    write_new_private, ActivationInvocation, ActivationManifest, ConfigMetadata, ReadPolicy,
    RecoveryService, SystemVolumes, VolumeProbe, ACTIVATION_CONFIG_LIMIT, ACTIVATION_CONTROL_LIMIT,
    ACTIVATION_JOURNAL_NAME, INTENT_KEYS, RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS,
    RECOVERY_PAYLOAD, VOLUME_UUID_REPLY_SIZE,
};

// The uninstall marker.
pub use uninstall_marker::{
    entry_present, installed_layout, installed_service_files, no_activation,
    read_interrupted_removal, read_uninstall_intent, store_uninstall_intent,
    write_uninstall_intent, ServiceFiles, UNINSTALL_INTENT_NAME,
};

// The status row.
pub use update_status::{
    format_utc, is_ownership_lost, read_status_unlocked, runner_owns, update_status,
    update_status_unlocked, utc_now, StatusLock, StatusPhase, RUNNER_OWNED_ACTIVE_PHASES,
};

// Native services.
pub use named::{Named, OrName};
pub use platform::{Platform, PlatformName};
pub use role::Role;
pub use services::{
    CommandCapture, CommandRunner, NativeServices, ServiceRunState, ServiceState, ServiceStates,
    SystemCommandRunner,
};

// Worker control.
pub use worker_control::{SealedHold, ServiceSnapshot, WorkerControl};

// The handoff.
pub use handoff::{check_handoff_release, release_existing_handoff, retry_failed_handoff};

/// What tests reach that is not the helpers' API, each for a reason. The
/// test stand-ins (test worker, journal writer, fixtures, demo) use none of
/// these: they implement upstream's readers and writers themselves
/// (`agents_tests::upstream_*`), so a mistake here cannot pass on both sides.
///
/// - internals tested directly, below any helper: the activation journal's
///   byte form ([`canonical_manifest_bytes`]), the secret file
///   ([`ensure_execution_secret`], [`read_secret`]), the pinned HTTP client
///   ([`PinnedRequest`], [`request_json`], [`LsofRunner`]), the handoff's
///   parsed release file ([`HandoffRelease`]), the `ExecStart` words a unit
///   carries ([`service_arguments`]) and the worker-side uninstall hold
///   ([`pending_uninstall_operation`]), each against upstream's rules;
/// - the status row's writer and its lost-ownership message, which the
///   runner's and the status races' tests drive directly: [`atomic_json`],
///   [`OWNERSHIP_LOST_MESSAGE`].
///
/// [`canonical_manifest_bytes`]: test_support::canonical_manifest_bytes
/// [`ensure_execution_secret`]: test_support::ensure_execution_secret
/// [`read_secret`]: test_support::read_secret
/// [`pending_uninstall_operation`]: test_support::pending_uninstall_operation
/// [`service_arguments`]: test_support::service_arguments
/// [`atomic_json`]: test_support::atomic_json
/// [`OWNERSHIP_LOST_MESSAGE`]: test_support::OWNERSHIP_LOST_MESSAGE
/// [`PinnedRequest`]: test_support::PinnedRequest
/// [`request_json`]: test_support::request_json
/// [`LsofRunner`]: test_support::LsofRunner
/// [`HandoffRelease`]: test_support::HandoffRelease
#[doc(hidden)]
pub mod test_support {
    pub use crate::activation::canonical_manifest_bytes;
    pub use crate::fs::{ensure_execution_secret, read_secret};
    pub use crate::handoff::HandoffRelease;
    pub use crate::http::{request_json, LsofRunner, PinnedRequest};
    use crate::{ExecutionLayout, Role};

    /// The command line both service formats start for the role named
    /// `role` (`worker` or `gateway`; anything else panics: tests only).
    pub fn service_arguments(layout: &ExecutionLayout, role: &str) -> Vec<String> {
        let role = Role::parse(role).expect("a service role name");
        crate::layout::service_arguments(layout, role)
    }
    pub use crate::uninstall_marker::pending_uninstall_operation;
    pub use crate::update_status::{atomic_json, OWNERSHIP_LOST_MESSAGE};
}

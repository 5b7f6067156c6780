//! Shared library of the AgentsServer lifecycle helpers.
//!
//! Each module ports one concept of the upstream Python modules that the five
//! helpers (`uninstall`, `update-runner`, `update-handoff`,
//! `execution-activation`, `execution-manage`) import. Every check, refusal
//! message and ordering of fsync, rename, lock and re-check follows the seeds,
//! because Python code that stays (install.sh's journal writer, the server, the
//! worker) reads and writes the same files.
//!
//! # Map by concern
//!
//! Foundations every helper uses:
//! - errors that keep the Python exception class (callers branch on it):
//!   [`Error`], [`ErrorClass`];
//! - Python-compatible JSON (`json.loads`, the `json.dumps` styles the shared
//!   files use, byte for byte): [`Json`], [`JsonObject`], [`parse_json`],
//!   [`encode_indented`], [`json_object!`];
//! - guarded configuration I/O and the control secret (`execution_install`,
//!   `execution_transport`): [`normalize_path`], [`read_file`], [`atomic_write`],
//!   [`ensure_execution_secret`];
//! - argparse-compatible command lines and exit statuses of the five helpers:
//!   [`CommandSpec`], [`parse_command_line`], [`ParsedArgs`], [`exit_status`].
//!
//! The installation on disk and the journals that make changes restartable:
//! - the two-service execution layout (`execution_install.ExecutionLayout`),
//!   its systemd units / launchd plists and installed manifest:
//!   [`ExecutionLayout`], [`render_service`], [`layout_manifest`],
//!   [`prepare_runtime`], [`active_worker_release`], [`maintenance_operation_id`];
//! - the installer's `.install-lock` PID directory shared with install.sh,
//!   released on Ctrl-C as Python's `with` block releases it:
//!   [`InstallationLock`];
//! - the `.execution-transaction` journal of a split activation:
//!   [`ExecutionTransaction`];
//! - install.sh's `.activation-transaction` journal (`activation_transaction`)
//!   and its write-ahead configuration publication: [`ActivationManifest`],
//!   [`execution_context`], [`validate_invocation`], [`replace_config`]; the
//!   macOS proof of an old runner-less updater: [`verify_legacy_runner`];
//!   macOS volume bindings that survive remounts: [`VolumeProbe`]; the
//!   native registration of a recovery owner: [`render_recovery_service`];
//! - the split uninstall's `.execution-uninstall.json` intent (read by the
//!   worker at startup) and the installed-layout provenance it relies on:
//!   [`read_uninstall_intent`], [`pending_uninstall_operation`],
//!   [`installed_layout`], [`no_activation`], [`directory_binding`].
//!
//! The running services and the worker's private control protocol:
//! - the worker and gateway jobs on systemd or launchd, with the seed's parsing
//!   and refusals behind an injectable command runner: [`NativeServices`],
//!   [`ServiceState`];
//! - PID-pinned loopback HTTP (`execution_http.request_json`: no byte of a
//!   credential leaves before the peer's owner is proven): [`request_json`],
//!   [`PinnedRequest`], [`LsofRunner`];
//! - the helpers' authenticated client of the running worker and of public
//!   health (`execution_manage.WorkerControl`): [`WorkerControl`],
//!   [`ServiceSnapshot`], [`shlex_split`];
//! - releasing a failed update's sealed split-worker handoff before the
//!   installer runs (`update_handoff`): [`release_existing_handoff`],
//!   [`retry_failed_handoff`], [`HandoffRelease`].
//!
//! Updates:
//! - release trust of the update runner (versions, tracks, signed manifests,
//!   the npm envelope, bounded downloads, verified extraction): [`ReleaseTrust`],
//!   [`ReleaseManifest`], [`version_key`], [`safe_extract`];
//! - the `server-update.json` row shared with the server (flock, CAS on the
//!   owning update, atomic JSON): [`update_status`], [`StatusLock`];
//! - supervising install.sh for the update runner (`run_installer`: new
//!   session, scrubbed environment, status heartbeat, SIGTERM-only budget,
//!   redacted log tail): [`run_installer`], [`InstallerRun`], [`InstallerOutcome`];
//! - the update runner's release lookup, its checks of the running server's
//!   health and its Team Hub maintenance fence: [`check_release`],
//!   [`ServerHealth`], [`consume_auth_token_file`], [`TeamHubFence`].

#![deny(missing_docs)]

mod error;
pub mod python;
pub use error::{Error, ErrorClass, Result};
pub use python::{
    int as python_int, shlex_split, str_or_empty as python_str_or_empty, strip as python_strip,
    truthy as python_truthy, uuid4,
};

// json (Python-compatible JSON)
mod json;
pub use json::{encode_indented, encode_line, parse_json, parse_json_unique, Json, JsonObject};
// fs (safe filesystem primitives and secrets)
pub mod fs;
pub use fs::{
    atomic_write, check_text, current_uid, desired, ensure_directory, fsync_directory,
    fsync_directory_nofollow, normalize_path, owned_directory, read_file, snapshot, token_hex,
    MAX_CONFIG_BYTES,
};
// layout (ExecutionLayout, unit/plist rendering, layout manifest)
pub mod layout;
pub use layout::{
    active_worker_release, layout_manifest, maintenance_operation_id, prepare_runtime,
    render_service, ExecutionLayout, FORMAT, LAYOUT_NAME, PROTOCOL_VERSION, TRANSACTION_NAME,
};
// install_lock (InstallationLock)
mod install_lock;
pub use install_lock::InstallationLock;
// services (NativeServices)
mod services;
pub use services::{
    CommandRunner, NativeServices, ServiceRunState, ServiceState, ServiceStates,
    SystemCommandRunner,
};
mod http;

mod worker_control;
pub use worker_control::{SealedHold, ServiceSnapshot, WorkerControl};
// cli (argparse-compatible command lines, exit statuses)
mod cli;
pub use cli::{
    exit_status, parse_command_line, try_parse_command_line, CommandLineExit, CommandSpec,
    OptionSpec, ParsedArgs, PositionalSpec, ValueKind,
};
// update_status (server-update.json flock + CAS protocol)
mod update_status;
pub use update_status::{
    is_ownership_lost, read_status_unlocked, runner_owns, update_status, update_status_unlocked,
    utc_now, StatusLock, RUNNER_OWNED_ACTIVE_PHASES,
};
// activation (install.sh's .activation-transaction journal and replace_config)
pub mod activation;
pub use activation::{
    absolute_path, activation_intent, config_path_matches_desired, config_staging_paths,
    evidence_digest, execution_context, locate_release, pure_path_text, read_owned_config,
    read_private_file, read_update_handoff, recovery_directory, recovery_evidence,
    recovery_service_path, release_matches, render_recovery_service, validate_invocation,
    volume_uuid, write_new_private, ActivationInvocation, ActivationManifest, CommandCapture,
    RecoveryService, SystemVolumes, VolumeProbe, ACTIVATION_CONFIG_LIMIT, ACTIVATION_CONTROL_LIMIT,
    ACTIVATION_JOURNAL_NAME, INTENT_KEYS, RECOVERY_DIRECTORY, RECOVERY_OWNER_KEYS,
    RECOVERY_PAYLOAD,
};
// uninstall_marker (the split uninstall's intent and installed-layout provenance)
mod uninstall_marker;
pub use uninstall_marker::{
    check_binding, directory_binding, entry_present, installed_layout, no_activation,
    read_uninstall_intent, store_uninstall_intent, write_uninstall_intent, UNINSTALL_INTENT_NAME,
};
// handoff (update_handoff: release a failed update's sealed worker handoff)
mod handoff;
pub use handoff::{release_existing_handoff, retry_failed_handoff};

/// What the tests of this crate and of the helpers reach beyond the
/// helpers' surface (the pinned HTTP client, encoders, journal internals).
/// Not part of the helpers' API.
#[doc(hidden)]
pub mod test_support {
    pub use crate::activation::{
        canonical_manifest_bytes, check_binding_on, directory_binding_on, link_state,
        release_identity, VOLUME_UUID_REPLY_SIZE,
    };
    pub use crate::cli::not_implemented;
    pub use crate::fs::{ensure_execution_secret, read_secret};
    pub use crate::handoff::HandoffRelease;
    pub use crate::http::{request_json, LsofRunner, PinnedRequest};
    pub use crate::json::{encode_compact, encode_compact_sorted};
    pub use crate::layout::{service_arguments, GATEWAY_UNIT, WORKER_UNIT};
    pub use crate::python::uuid5_url;
    pub use crate::uninstall_marker::pending_uninstall_operation;
    pub use crate::update_status::{atomic_json, OWNERSHIP_LOST_MESSAGE};
}

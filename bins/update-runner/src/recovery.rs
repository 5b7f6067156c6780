//! `--recover-only` (`update_recovery.run_recovery`): resume the one
//! activation journal an admitted update left behind, with the running
//! release's own install.sh, never staging or creating another installation.
//!
//! The durable intent in `_activation_recovery` (written before install.sh
//! first ran) binds the journal to this update, its install root and its
//! exact candidate directory; install.sh stays the only rollback authority.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::installer::{run_installer, runner_secrets, InstallerOutcome, InstallerRun};
use crate::server_health::{
    consume_auth_token_file, resolve_user_path, PostUpdateIdentity, RepairedHubIdentity,
    ServerHealth,
};
use agents_common::{
    check_binding_on, entry_present, execution_context_on, preparation_path, read_status_unlocked,
    update_status, utc_now, ActivationManifest, Error, Result, StatusLock, SystemVolumes,
    VolumeProbe, INTENT_KEYS, RUNNER_OWNED_ACTIVE_PHASES,
};
use python_compat::{
    is_lower_hex,
    json::{Json, JsonObject},
    json_object,
};

use crate::cli::Args;
use crate::prepared::missing_install_dir;

/// `journal_present(root)`: an activation or execution journal entry exists
/// (a dangling link counts), so only install.sh may resolve the update.
pub fn journal_present(root: &Path) -> Result<bool> {
    for name in [".activation-transaction", ".execution-transaction"] {
        if entry_present(&root.join(name))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `--recover-only`: finishes or rolls back an interrupted activation the
/// server admitted, by running the running release's install.sh in recovery
/// mode under the status row. Ports `update_recovery.run_recovery(args)`.
pub fn run_recovery(args: &Args) -> Result<()> {
    let status_path = resolve_user_path(&args.status_file)?;
    let root = std::env::var_os("AGENTS_SERVER_INSTALL_DIR").ok_or_else(missing_install_dir)?;
    let root = preparation_path(Path::new(&root))?;
    let status = {
        let _lock = StatusLock::acquire(&status_path)?;
        read_status_unlocked(&status_path)?
    };
    let owned = status.get("update_id") == Some(&Json::from(args.update_id.given()))
        && status
            .get("phase")
            .and_then(Json::as_str)
            .is_some_and(|phase| RUNNER_OWNED_ACTIVE_PHASES.contains(&phase));
    if !owned {
        return Err(Error::runtime(
            "activation recovery lost its admitted update",
        ));
    }
    let context = recovery_context(&root, &status, &args.expected_server_identity)?;
    let transaction = args
        .recovery_transaction
        .as_deref()
        .map(|path| path.to_string_lossy().into_owned());
    let context = context.filter(|context| {
        Some(context.transaction_id()) == transaction.as_deref()
            && Some(context.text("release_version")) == args.expected_version.as_deref()
    });
    let Some(context) = context else {
        return Err(Error::runtime(
            "activation recovery transaction changed before launch",
        ));
    };
    let version = context.text("release_version").to_string();
    let api = context.execution_field("api_contract").clone();
    let token = consume_auth_token_file(args.auth_token_file.as_deref())?;
    update_status(
        &status_path,
        Some(args.update_id.given()),
        json_object! {
            "phase" => "installing",
            "runner_pid" => std::process::id(),
            "heartbeat_at" => utc_now(),
            "message" => "Recovering the interrupted server activation.",
        },
    )?;
    // The running release's recovery, not the candidate's: a partly
    // completed rollback may already have retired the candidate.
    let source = running_release()?;
    let arguments: Vec<OsString> = vec![
        "--recover-only".into(),
        "--non-interactive".into(),
        "--release-version".into(),
        version.clone().into(),
        "--expected-api-contract".into(),
        python_compat::str_or_empty(&api).into(),
        "--expected-activation-id".into(),
        context.transaction_id().into(),
        "--expected-server-identity".into(),
        args.expected_server_identity_argument.clone(),
        "--managed-update-id".into(),
        args.update_id.given().into(),
        "--port".into(),
        args.port.to_string().into(),
        "--bind".into(),
        args.bind.clone(),
    ];
    let mut run = InstallerRun::new(
        source.join("install.sh"),
        arguments,
        &source,
        &status_path,
        &version,
    );
    run.expected_update_id = Some(args.update_id.given().to_string());
    run.managed_update_id = Some(args.update_id.given().to_string());
    run.expected_service_cgroup = args.expected_service_cgroup.clone();
    run.rollback_accepted = true;
    run.secrets = runner_secrets(&token);
    if run_installer(&run)? == InstallerOutcome::RolledBack {
        if journal_present(&root)? {
            return Err(Error::runtime(
                "rollback recovery retained an unfinished journal",
            ));
        }
        update_status(
            &status_path,
            Some(args.update_id.given()),
            json_object! {
                "phase" => "failed",
                "runner_pid" => Json::Null,
                "heartbeat_at" => Json::Null,
                "retryable" => true,
                "error_code" => "server_update_rolled_back",
                "error_action" => "Retry the bundled update when ready.",
                "message" => "The interrupted update was rolled back to the verified previous installation.",
                "finished_at" => utc_now(),
            },
        )?;
        return Ok(());
    }
    if journal_present(&root)? {
        return Err(Error::runtime(
            "activation recovery exited without finalizing its journal",
        ));
    }
    let row = |name: &str| status.get(name).cloned().filter(|value| !value.is_null());
    let health = ServerHealth::new(args.port.clone(), &token);
    let mut identity = PostUpdateIdentity {
        server_identity: args.expected_server_identity.clone(),
        server_version: Some(version.clone()),
        api_contract_version: api.as_int(),
        ..PostUpdateIdentity::default()
    };
    if row("team_hub_id").is_some_and(|id| python_compat::truthy(&id)) {
        identity.team_hub_id = row("team_hub_id");
        identity.team_hub_transport = row("team_hub_transport");
        identity.team_hub_url = row("team_hub_url");
        identity.team_hub_direct_ip_url = row("team_hub_direct_ip_url");
    }
    health.assert_post_update_identity(&identity)?;
    if status.get("team_hub_repair_mode") == Some(&Json::from("failed_start")) {
        let or_empty = |name: &str| {
            row(name)
                .filter(python_compat::truthy)
                .unwrap_or_else(|| Json::from(""))
        };
        health.assert_repaired_team_hub_identity(&RepairedHubIdentity {
            server_identity: args.expected_server_identity.clone(),
            transport: or_empty("team_hub_transport"),
            url: row("team_hub_url").unwrap_or(Json::Null),
            direct_ip_url: or_empty("team_hub_direct_ip_url"),
        })?;
    }
    update_status(
        &status_path,
        Some(args.update_id.given()),
        json_object! {
            "phase" => "complete",
            "installed_version" => version.as_str(),
            "update_available" => false,
            "runner_pid" => Json::Null,
            "heartbeat_at" => Json::Null,
            "elapsed_seconds" => Json::Null,
            "error_code" => Json::Null,
            "error_action" => Json::Null,
            "retryable" => Json::Null,
            "message" => format!("AgentsServer {version} recovered and is healthy."),
            "finished_at" => utc_now(),
        },
    )?;
    Ok(())
}

/// The release this runner belongs to: the directory of the executable
/// (the kit installs it beside `update_runner.py` and `install.sh`).
fn running_release() -> Result<PathBuf> {
    let executable = std::env::current_exe()?;
    Ok(executable
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/")))
}

/// `recovery_context(root, status, server_identity)`: the validated
/// execution journal bound to this admitted update, or `None` when there is
/// no activation journal.
pub fn recovery_context(
    root: &Path,
    status: &JsonObject,
    server_identity: &str,
) -> Result<Option<ActivationManifest>> {
    recovery_context_on(root, status, server_identity, &SystemVolumes)
}

/// [`recovery_context`] with the host's volumes seen through `volumes`: on
/// macOS the journal's device numbers are rebased and directories are bound
/// by their volume's UUID, elsewhere by device number.
pub fn recovery_context_on(
    root: &Path,
    status: &JsonObject,
    server_identity: &str,
    volumes: &dyn VolumeProbe,
) -> Result<Option<ActivationManifest>> {
    let root = preparation_path(root)?;
    if !entry_present(&root.join(".activation-transaction"))? {
        return Ok(None);
    }
    let intent = status.get("_activation_recovery").and_then(Json::as_object);
    let Some(intent) =
        intent.filter(|intent| bound_to_update(intent, &root, status, server_identity))
    else {
        return Err(Error::runtime(
            "activation journal is not bound to this admitted update",
        ));
    };
    let field = |name: &str| intent.get(name).unwrap_or(&Json::Null);
    check_binding_on(volumes, &root, field("root_binding"))?;
    let value = execution_context_on(&root, volumes)?;
    let value = value.filter(|value| {
        value.get("release_version") == field("version")
            && value.execution_field("api_contract") == field("api_contract")
    });
    let Some(value) = value else {
        return Err(Error::runtime("activation journal release pins changed"));
    };
    let saved = field("candidate_binding");
    let candidate = value.get("candidate_release");
    let positive = |key: &str| {
        saved
            .get(key)
            .and_then(Json::as_int)
            .is_some_and(|number| number >= 1)
    };
    let saved_valid = saved.as_object().is_some_and(|saved| {
        saved.len() == 3
            && ["device", "inode", "volume_uuid"]
                .iter()
                .all(|key| saved.contains_key(key))
    }) && positive("device")
        && positive("inode")
        && saved.get("inode") == Some(candidate.get("inode").unwrap_or(&Json::Null));
    if !saved_valid {
        return Err(Error::runtime(
            "activation journal candidate identity changed",
        ));
    }
    // The journal's device numbers were rebased by execution_context; on
    // macOS the candidate and the root share one volume, named by its UUID.
    if volumes.host_is_darwin() {
        let uuid = saved.get("volume_uuid").unwrap_or(&Json::Null);
        let root_uuid = field("root_binding")
            .get("volume_uuid")
            .unwrap_or(&Json::Null);
        if !python_compat::truthy(uuid) || uuid != root_uuid {
            return Err(Error::runtime("activation candidate volume changed"));
        }
    } else if saved.get("volume_uuid") != Some(&Json::Null)
        || saved.get("device") != Some(candidate.get("device").unwrap_or(&Json::Null))
    {
        return Err(Error::runtime("activation candidate filesystem changed"));
    }
    let handoff = value.execution_field("handoff");
    if !handoff.is_null() && Some(handoff) != status.get("_execution_handoff") {
        return Err(Error::runtime("activation journal worker handoff changed"));
    }
    Ok(Some(value))
}

/// The intent names exactly this root, server, update, target version and a
/// positive API contract.
fn bound_to_update(
    intent: &JsonObject,
    root: &Path,
    status: &JsonObject,
    server_identity: &str,
) -> bool {
    let field = |name: &str| intent.get(name).unwrap_or(&Json::Null);
    let update_id = field("update_id");
    intent.len() == INTENT_KEYS.len()
        && INTENT_KEYS.iter().all(|key| intent.contains_key(key))
        && field("format").as_int() == Some(1)
        && field("root") == &Json::from(root.to_string_lossy().into_owned())
        && field("server_identity") == &Json::from(server_identity)
        && Some(update_id) == Some(status.get("update_id").unwrap_or(&Json::Null))
        && is_lower_hex(python_compat::str_or_empty(update_id), 32)
        && Some(field("version")) == Some(status.get("target_version").unwrap_or(&Json::Null))
        && field("api_contract")
            .as_int()
            .is_some_and(|contract| contract >= 1)
}

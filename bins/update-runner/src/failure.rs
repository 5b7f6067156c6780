//! What `main` does when an update or a recovery fails: publish the failure
//! in the status row only while this runner still owns it, keep the row
//! active where install.sh alone may finish (a retained activation journal,
//! a Hub fence after install.sh started), clear this update's own Hub fence
//! when it failed before the installer, and release the sealed worker
//! handoff outside the status lock, because the worker's authenticated
//! callback reads that same row while proving it is idle.

use std::path::Path;

use crate::server_health::resolve_user_path;
use agents_common::{
    is_ownership_lost, read_status_unlocked, release_existing_handoff, runner_owns, update_status,
    update_status_unlocked, utc_now, Error, Result, StatusLock,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object, str_or_empty, truthy,
};

use crate::cli::Args;
use crate::install_root;
use crate::recovery::journal_present;
use crate::team_hub::{clear_team_hub_maintenance, team_hub_maintenance_fence_present};

/// The error code of a failed update whose worker hold still needs release.
const HANDOFF_RELEASE_FAILED: &str = "server_update_handoff_release_failed";
/// What the user is asked to do about it.
const HANDOFF_RELEASE_ACTION: &str = "Retry the update to finish releasing its execution hold.";

/// Phases before install.sh started: the runner may still clear its fence.
const PRE_INSTALL_PHASES: [&str; 4] = ["starting", "checking", "downloading", "verifying"];
/// Phases once install.sh may have started.
const INSTALL_PHASES: [&str; 2] = ["installing", "restarting"];

/// `main`'s handling of a failed `run_update`. Failures of the handling
/// itself change nothing more; the runner exits 1 either way.
pub(crate) fn settle_failed_update(args: &Args, error: &Error) {
    let Ok(status_path) = resolve_user_path(&args.status_file) else {
        return;
    };
    let update_id = args.update_id.stripped().to_string();
    let _ = publish_failure(args, &status_path, &update_id, error);
}

fn handoff_file(args: &Args) -> Option<&Path> {
    args.execution_handoff_file
        .as_deref()
        .filter(|path| !path.as_os_str().is_empty())
}

fn publish_failure(args: &Args, status_path: &Path, update_id: &str, error: &Error) -> Result<()> {
    let release_handoff = {
        let _lock = StatusLock::acquire(status_path)?;
        let current = read_status_unlocked(status_path)?;
        if !runner_owns(&current, update_id) {
            return Ok(());
        }
        let phase = current.get("phase").map(str_or_empty).unwrap_or_default();
        let truthy = |key: &str| current.get(key).is_some_and(truthy);
        let installing = INSTALL_PHASES.contains(&phase.as_str());
        if installing && truthy("_activation_recovery") && journal_present(&install_root()?)? {
            // The retained activation stays active for `--recover-only`.
            update_status_unlocked(
                status_path,
                &current,
                json_object! {
                    "runner_pid" => Json::Null,
                    "heartbeat_at" => Json::Null,
                    "retryable" => true,
                    "error_code" => "server_update_recovery_pending",
                    "message" => "The installer was interrupted. Its retained activation will be recovered.",
                },
            )?;
            return Ok(());
        }
        let mut release_handoff = false;
        if PRE_INSTALL_PHASES.contains(&phase.as_str()) {
            // Fail closed: a fence that cannot be cleared keeps the row active.
            clear_team_hub_maintenance(args)?;
            release_handoff = handoff_file(args).is_some();
        } else if installing && team_hub_maintenance_fence_present(args)? {
            // install.sh's verified rollback or handoff owns the fence now.
            return Ok(());
        }
        // install.sh may fail in preflight after the phase became
        // `installing` but before it took the hold over; the exact old hold
        // then still needs its release.
        release_handoff |= truthy("_execution_handoff") && handoff_file(args).is_some();
        let mut changes = json_object! {
            "phase" => "failed",
            "message" => error.message(),
            "heartbeat_at" => Json::Null,
            "runner_pid" => Json::Null,
        };
        if release_handoff {
            changes.insert("error_code", HANDOFF_RELEASE_FAILED);
            changes.insert("retryable", true);
            changes.insert("error_action", HANDOFF_RELEASE_ACTION);
        }
        changes.insert("finished_at", utc_now());
        update_status_unlocked(status_path, &current, changes)?;
        release_handoff
    };
    if release_handoff {
        release_handoff_after_failure(args, status_path, update_id)?;
    }
    Ok(())
}

/// Release the sealed handoff, then record the outcome on the failed row if
/// it is still this update's.
fn release_handoff_after_failure(args: &Args, status_path: &Path, update_id: &str) -> Result<()> {
    let handoff = handoff_file(args).unwrap_or(Path::new(""));
    let released =
        install_root().and_then(|root| release_existing_handoff(&root, handoff, None, None));
    let changes = match &released {
        Ok(_) => json_object! {
            "_execution_handoff" => Json::Null,
            "error_code" => Json::Null,
            "error_action" => Json::Null,
            "retryable" => true,
        },
        Err(_) => json_object! {
            "retryable" => true,
            "error_code" => HANDOFF_RELEASE_FAILED,
            "error_action" => HANDOFF_RELEASE_ACTION,
            "message" => "The update failed and its execution hold could not be released safely.",
        },
    };
    let _lock = StatusLock::acquire(status_path)?;
    let current = read_status_unlocked(status_path)?;
    if still_failed(&current, update_id) {
        update_status_unlocked(status_path, &current, changes)?;
    }
    released.map(drop)
}

fn still_failed(row: &JsonObject, update_id: &str) -> bool {
    row.get("update_id") == Some(&Json::from(update_id))
        && row.get("phase") == Some(&Json::from("failed"))
}

/// `main`'s handling of a failed `--recover-only` run: keep the journal and
/// the Hub fence for install.sh, and publish a retryable recovery error while
/// this update still owns the row.
pub(crate) fn settle_failed_recovery(args: &Args) {
    let Ok(status_path) = resolve_user_path(&args.status_file) else {
        return;
    };
    let update_id = args.update_id.stripped().to_string();
    let written = update_status(
        &status_path,
        Some(&update_id),
        json_object! {
            "phase" => "installing",
            "runner_pid" => Json::Null,
            "heartbeat_at" => Json::Null,
            "retryable" => true,
            "error_code" => "server_update_recovery_failed",
            "error_action" => "Retry recovery from the application update settings.",
            "message" => "The interrupted server update could not finish recovery. See server-update.log.",
            "finished_at" => utc_now(),
        },
    );
    if let Err(error) = written {
        if !is_ownership_lost(&error) {
            eprintln!("{}", error.python_line());
        }
    }
}

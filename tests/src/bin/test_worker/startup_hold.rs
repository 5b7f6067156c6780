//! The worker's startup hold (`execution_install.pending_worker_operation`):
//! a worker started while an activation or an uninstall is pending admits
//! nothing until that operation's helper releases the sealed lease it holds
//! from its first moment.

use std::fs;
use std::path::Path;

use agents_common::{
    execution_context, maintenance_operation_id, pending_uninstall_operation, release_matches,
    ExecutionTransaction, Json, TRANSACTION_NAME,
};

fn present(path: &Path) -> bool {
    // exists() or is_symlink(): a dangling link still claims ownership.
    fs::symlink_metadata(path).is_ok()
}

/// The operation this worker generation is held for, if any.
pub fn pending_worker_operation(
    root: &Path,
    release_root: &Path,
) -> Result<Option<String>, String> {
    let journal = root.join(TRANSACTION_NAME);
    let outer = root.join(".activation-transaction");
    let uninstall = root.join(".execution-uninstall.json");
    if present(&uninstall) {
        if present(&outer) || present(&journal) {
            return Err("activation and uninstall both claim execution ownership".to_string());
        }
        return pending_uninstall_operation(root, release_root)
            .map(Some)
            .map_err(|err| err.python_line());
    }
    if present(&outer) {
        if present(&journal) {
            return Err("two activation journals claim execution ownership".to_string());
        }
        return pending_outer_operation(root, release_root);
    }
    if !present(&journal) {
        return Ok(None);
    }
    let (value, layout) = ExecutionTransaction::load(root).map_err(|err| err.python_line())?;
    if value.get("scope").and_then(Json::as_str) == Some("gateway") {
        return Ok(None);
    }
    let mut retained = vec![layout.worker_release.clone()];
    if let Some(old) =
        ExecutionTransaction::previous_layout(&value).map_err(|err| err.python_line())?
    {
        if old.install_root != root {
            return Err("previous execution layout belongs to another installation".to_string());
        }
        retained.push(old.worker_release);
    } else if let Some(before) = value.get("current_before").and_then(Json::as_str) {
        let target = root.join(before);
        retained.push(
            target
                .canonicalize()
                .map_err(|err| format!("{}: {err}", target.display()))?,
        );
    }
    if !retained.iter().any(|release| release == release_root) {
        return Err("worker runtime is outside the pending activation generations".to_string());
    }
    maintenance_operation_id(&value)
        .map(Some)
        .map_err(|err| err.python_line())
}

/// `pending_execution_worker_operation`: only a format-3 outer journal holds
/// split workers, and only its candidate or the prior worker generation.
fn pending_outer_operation(root: &Path, release_root: &Path) -> Result<Option<String>, String> {
    let Some(value) = execution_context(root).map_err(|err| err.python_line())? else {
        return Ok(None);
    };
    let old_worker = value
        .execution_field("old_worker_release")
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut retained = false;
    for release in [value.release("candidate_release"), old_worker] {
        if !release.is_empty()
            && release_matches(release_root, &release).map_err(|err| err.python_line())?
        {
            retained = true;
            break;
        }
    }
    if !retained {
        return Err("worker runtime is not retained by the pending activation".to_string());
    }
    Ok(value
        .execution_field("operation_id")
        .as_str()
        .map(str::to_string))
}

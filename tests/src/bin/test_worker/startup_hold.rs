//! The worker's startup hold (`execution_install.pending_worker_operation`):
//! a worker started while an activation or an uninstall is pending admits
//! nothing until that operation's helper releases the sealed lease it holds
//! from its first moment.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use agents_common::{
    maintenance_operation_id, parse_json, pending_uninstall_operation, ExecutionTransaction, Json,
    TRANSACTION_NAME,
};

use crate::control::is_canonical_uuid;

fn present(path: &Path) -> bool {
    // exists() or is_symlink(): a dangling link still claims ownership.
    fs::symlink_metadata(path).is_ok()
}

fn read_json(path: &Path) -> Result<Json, String> {
    let data = fs::read(path).map_err(|err| format!("{}: {err}", path.display()))?;
    parse_json(&data).map_err(|err| format!("{}: {err}", path.display()))
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
        return pending_outer_operation(&outer, release_root);
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
/// A release matches by `target` path or by the (device, inode) it recorded;
/// upstream additionally re-hashes VERSION, which the stand-in skips.
fn pending_outer_operation(outer: &Path, release_root: &Path) -> Result<Option<String>, String> {
    let value = read_json(&outer.join("manifest.json"))?;
    if value.get("format") != Some(&Json::Int(3)) {
        return Ok(None);
    }
    let execution = value
        .get("execution")
        .ok_or("activation execution metadata is invalid")?;
    let identity =
        fs::metadata(release_root).map_err(|err| format!("{}: {err}", release_root.display()))?;
    let matches = |release: Option<&Json>| {
        release.is_some_and(|release| {
            let by_path = release.get("target").and_then(Json::as_str) == release_root.to_str();
            let by_inode = release.get("device").and_then(Json::as_int)
                == Some(i128::from(identity.dev()))
                && release.get("inode").and_then(Json::as_int) == Some(i128::from(identity.ino()));
            by_path || by_inode
        })
    };
    if !matches(value.get("candidate_release")) && !matches(execution.get("old_worker_release")) {
        return Err("worker runtime is not retained by the pending activation".to_string());
    }
    match execution.get("operation_id").and_then(Json::as_str) {
        Some(operation) if is_canonical_uuid(operation) => Ok(Some(operation.to_string())),
        _ => Err("activation execution operation is invalid".to_string()),
    }
}

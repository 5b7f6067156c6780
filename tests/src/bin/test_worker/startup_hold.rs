//! The worker's startup hold (`execution_install.pending_worker_operation`):
//! a worker started while an activation or an uninstall is pending admits
//! nothing until that operation's helper releases the sealed lease it holds
//! from its first moment. The journals and the intent are read with the
//! shared crate's validating readers, so a worker refuses to start on the
//! same files upstream's would.

use std::path::Path;

use agents_common::test_support::pending_uninstall_operation;
use agents_common::{
    entry_present, execution_context, maintenance_operation_id, normalize_path, owned_directory,
    read_file, release_matches, Error, Result, TRANSACTION_NAME, UNINSTALL_INTENT_NAME,
};
use execution_manage::ExecutionTransaction;
use python_compat::json::Json;

/// The operation this worker generation is held for, if any; an error is
/// the Python exception line that stops the worker.
pub(crate) fn pending_worker_operation(
    root: &Path,
    release_root: &Path,
) -> std::result::Result<Option<String>, String> {
    pending_operation(root, release_root).map_err(|err| err.python_line())
}

fn pending_operation(root: &Path, release_root: &Path) -> Result<Option<String>> {
    let (root, release_root) = (normalize_path(root)?, normalize_path(release_root)?);
    owned_directory(&root, false)?;
    let journal = entry_present(&root.join(TRANSACTION_NAME))?;
    let outer = entry_present(&root.join(".activation-transaction"))?;
    if entry_present(&root.join(UNINSTALL_INTENT_NAME))? {
        if outer || journal {
            return Err(Error::runtime(
                "activation and uninstall both claim execution ownership",
            ));
        }
        return pending_uninstall_operation(&root, &release_root).map(Some);
    }
    if outer {
        if journal {
            return Err(Error::runtime(
                "two activation journals claim execution ownership",
            ));
        }
        return pending_outer_operation(&root, &release_root);
    }
    if !journal {
        return Ok(None);
    }
    let (value, layout) = ExecutionTransaction::load(&root)?;
    if value.get("scope").and_then(Json::as_str) == Some("gateway") {
        return Ok(None);
    }
    let mut retained = vec![layout.worker_release.clone()];
    if let Some(old) = ExecutionTransaction::previous_layout(&value)? {
        if old.install_root != root {
            return Err(Error::value(
                "previous execution layout belongs to another installation",
            ));
        }
        retained.push(old.worker_release);
    } else if let Some(before) = value.get("current_before").and_then(Json::as_str) {
        let target = root.join(before);
        retained.push(
            target
                .canonicalize()
                .map_err(|err| Error::from_io_path(&err, &target))?,
        );
    }
    if !retained.contains(&release_root) {
        return Err(Error::runtime(
            "worker runtime is outside the pending activation generations",
        ));
    }
    owned_directory(&release_root, false)?;
    read_file(&release_root.join("VERSION"), false)?;
    maintenance_operation_id(&value).map(Some)
}

/// `pending_execution_worker_operation`: only a format-3 outer journal holds
/// split workers, and only its candidate or the prior worker generation.
fn pending_outer_operation(root: &Path, release_root: &Path) -> Result<Option<String>> {
    let Some(value) = execution_context(root)? else {
        return Ok(None);
    };
    let old_worker = value
        .execution_field("old_worker_release")
        .as_object()
        .cloned()
        .unwrap_or_default();
    for release in [value.release("candidate_release"), old_worker] {
        if !release.is_empty() && release_matches(release_root, &release)? {
            return Ok(value
                .execution_field("operation_id")
                .as_str()
                .map(str::to_string));
        }
    }
    Err(Error::runtime(
        "worker runtime is not retained by the pending activation",
    ))
}

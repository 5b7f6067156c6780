//! The worker's startup hold (`execution_install.pending_worker_operation`):
//! a worker started while an activation or an uninstall is pending admits
//! nothing until that operation's helper releases the sealed lease it holds
//! from its first moment. Every file is read with the worker's own readers
//! (`install_files`, `layout`, `execution_journal` and the two below),
//! written from upstream and never the helpers' code, so a worker refuses to
//! start on the same files upstream's would without sharing a port's mistake.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;

use crate::execution_journal::{operation_id, PendingJournal, TRANSACTION_NAME};
use agents_tests::upstream_activation::release_matches;
use agents_tests::upstream_files::{
    entry_present, normal_path, owned_directory, parse, read_guarded, uid, Failure, Outcome,
};
use agents_tests::upstream_layout::{hex_digest, installed_layout, Layout, LAYOUT_NAME};

/// `execution_uninstall.INTENT_NAME`.
const UNINSTALL_INTENT_NAME: &str = ".execution-uninstall.json";
/// `activation_transaction`'s journal directory.
const ACTIVATION_NAME: &str = ".activation-transaction";

/// The operation this worker generation is held for, if any; an error is
/// the Python exception line that stops the worker.
pub(crate) fn pending_worker_operation(
    root: &Path,
    release_root: &Path,
) -> Result<Option<String>, String> {
    pending_operation(root, release_root).map_err(|err| err.python_line())
}

fn pending_operation(root: &Path, release_root: &Path) -> Outcome<Option<String>> {
    let (root, release_root) = (normal_path(root)?, normal_path(release_root)?);
    owned_directory(&root, false)?;
    let journal = entry_present(&root.join(TRANSACTION_NAME))?;
    let outer = entry_present(&root.join(ACTIVATION_NAME))?;
    if entry_present(&root.join(UNINSTALL_INTENT_NAME))? {
        if outer || journal {
            return Err(Failure::runtime(
                "activation and uninstall both claim execution ownership",
            ));
        }
        return pending_uninstall_operation(&root, &release_root).map(Some);
    }
    if outer {
        if journal {
            return Err(Failure::runtime(
                "two activation journals claim execution ownership",
            ));
        }
        return pending_outer_operation(&root, &release_root);
    }
    if !journal {
        return Ok(None);
    }
    pending_journal_operation(&root, &release_root)
}

/// The inner `.execution-transaction` journal: a gateway activation holds
/// nothing; otherwise only the journal's two worker generations start.
fn pending_journal_operation(root: &Path, release_root: &Path) -> Outcome<Option<String>> {
    let pending = PendingJournal::load(root)?;
    if pending.value["scope"] == "gateway" {
        return Ok(None);
    }
    let mut retained = vec![pending.layout.worker_release.clone()];
    if let Some(old) = pending.previous_layout()? {
        if old.install_root != root {
            return Err(Failure::value(
                "previous execution layout belongs to another installation",
            ));
        }
        retained.push(old.worker_release);
    } else if let Some(before) = pending.value["current_before"].as_str() {
        let target = root.join(before);
        retained.push(
            target
                .canonicalize()
                .map_err(|err| Failure::os(&err, &target))?,
        );
    }
    if !retained.iter().any(|release| release == release_root) {
        return Err(Failure::runtime(
            "worker runtime is outside the pending activation generations",
        ));
    }
    owned_directory(release_root, false)?;
    read_guarded(&release_root.join("VERSION"), false)?;
    operation_id(&pending.value).map(Some)
}

/// `execution_uninstall.pending_uninstall_operation`: with no activation
/// journal, the installed layout's own worker is held for the intent's
/// operation; any other generation is refused. Never writes.
fn pending_uninstall_operation(root: &Path, release_root: &Path) -> Outcome<String> {
    for name in [ACTIVATION_NAME, TRANSACTION_NAME] {
        if entry_present(&root.join(name))? {
            return Err(Failure::runtime("activation already owns handoff recovery"));
        }
    }
    let layout = installed_layout(root)?;
    let intent = read_intent(root, &layout)?;
    match intent {
        Some(operation) if normal_path(release_root)? == layout.worker_release => Ok(operation),
        _ => Err(Failure::runtime(
            "worker is not retained by the pending uninstall",
        )),
    }
}

/// `execution_uninstall._read_intent`: the marker's exact keys and values
/// for this layout, its directory identities and the layout's digest.
/// Returns the operation id, or None when there is no marker.
fn read_intent(root: &Path, layout: &Layout) -> Outcome<Option<String>> {
    let data = match read_guarded(&root.join(UNINSTALL_INTENT_NAME), true) {
        Ok((data, _mode)) => data,
        Err(err) if err.is_missing() => return Ok(None),
        Err(err) => return Err(err),
    };
    let value = parse(&data)?;
    let text = |path: &Path| Value::from(path.to_string_lossy().into_owned());
    let keys = [
        "format",
        "root",
        "worker_release",
        "gateway_release",
        "operation_id",
        "purge_state",
        "identities",
        "layout_sha256",
        "phase",
        "server_identity",
    ];
    let exact = value.as_object().is_some_and(|object| {
        object.len() == keys.len() && keys.iter().all(|key| object.contains_key(*key))
    });
    let identity = value["server_identity"].as_str().unwrap_or_default();
    let identity_ok = (1..=128).contains(&identity.len())
        && identity
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    let operation = value["operation_id"].as_str().unwrap_or_default();
    let valid = exact
        && value["format"].as_i64() == Some(1)
        && value["purge_state"].is_boolean()
        && value["root"] == text(root)
        && value["worker_release"] == text(&layout.worker_release)
        && value["gateway_release"] == text(&layout.gateway_release)
        && ["prepared", "sealed", "stopped"].contains(&value["phase"].as_str().unwrap_or_default())
        && identity_ok
        && canonical_uuid(operation);
    if !valid {
        return Err(Failure::value(
            "uninstall intent does not match this installed runtime",
        ));
    }
    let identities = value["identities"].as_object().filter(|identities| {
        identities.len() == 3
            && ["root", "worker", "gateway"]
                .iter()
                .all(|key| identities.contains_key(*key))
    });
    let Some(identities) = identities else {
        return Err(Failure::value("uninstall intent identities are invalid"));
    };
    for (name, path) in [
        ("root", root),
        ("worker", layout.worker_release.as_path()),
        ("gateway", layout.gateway_release.as_path()),
    ] {
        check_binding(path, &identities[name])?;
    }
    let (manifest, _mode) = read_guarded(&root.join(LAYOUT_NAME), true)?;
    if value["layout_sha256"] != hex_digest(&manifest) {
        return Err(Failure::runtime(
            "installed execution layout changed after uninstall admission",
        ));
    }
    Ok(Some(operation.to_string()))
}

/// `execution_preparation._check_binding` on Linux: `{device, inode,
/// volume_uuid: null}` of the directory as it is now.
fn check_binding(path: &Path, saved: &Value) -> Outcome<()> {
    let positive = |key: &str| saved[key].as_u64().is_some_and(|number| number >= 1);
    let exact = saved.as_object().is_some_and(|binding| {
        binding.len() == 3
            && ["device", "inode", "volume_uuid"]
                .iter()
                .all(|key| binding.contains_key(*key))
    });
    if !exact || !positive("device") || !positive("inode") {
        return Err(Failure::value("invalid preparation directory identity"));
    }
    let info = fs::symlink_metadata(path).map_err(|err| Failure::os(&err, path))?;
    if !info.is_dir() || info.uid() != uid() {
        return Err(Failure::permission(format!(
            "execution directory is not an owned directory: {}",
            path.display()
        )));
    }
    if saved["inode"].as_u64() != Some(info.ino()) {
        return Err(Failure::runtime("prepared directory identity changed"));
    }
    if !saved["volume_uuid"].is_null() || saved["device"].as_u64() != Some(info.dev()) {
        return Err(Failure::runtime("prepared filesystem identity changed"));
    }
    Ok(())
}

/// `str(uuid.UUID(text)) == text`: the canonical lowercase 8-4-4-4-12 form.
fn canonical_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(index, c)| match index {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// `activation_transaction.pending_execution_worker_operation`: only a
/// format-3 outer journal holds split workers, and only its candidate or
/// the prior worker generation, for the journal's execution operation.
fn pending_outer_operation(root: &Path, release_root: &Path) -> Outcome<Option<String>> {
    let Some(value) = execution_context(root)? else {
        return Ok(None);
    };
    let execution = &value["execution"];
    for release in [
        &value["candidate_release"],
        &execution["old_worker_release"],
    ] {
        let pinned = release.as_object().is_some_and(|object| !object.is_empty());
        if pinned && release_matches(release_root, release)? {
            return Ok(execution["operation_id"].as_str().map(str::to_string));
        }
    }
    Err(Failure::runtime(
        "worker runtime is not retained by the pending activation",
    ))
}

/// The part of `activation_transaction.execution_context(root)` the hold
/// depends on: the guarded journal (root, releases and journal directory,
/// the private manifest), None unless it is format 3, and a format-3
/// journal's canonical operation id, release identities and locatable
/// pinned worker. The journal's full validation is execution-activation's
/// (tested there against the originals); the worker only decides whom to hold.
fn execution_context(root: &Path) -> Outcome<Option<Value>> {
    let unsafe_directory = |path: &Path, private: bool, message: &str| -> Outcome<()> {
        let info = fs::symlink_metadata(path).map_err(|err| Failure::os(&err, path))?;
        let mode = info.mode() & 0o7777;
        if !info.is_dir() || info.uid() != uid() || mode & 0o022 != 0 || (private && mode != 0o700)
        {
            return Err(Failure::permission(message));
        }
        Ok(())
    };
    unsafe_directory(root, false, "activation transaction root is unsafe")?;
    unsafe_directory(
        &root.join("releases"),
        false,
        "activation releases root is unsafe",
    )?;
    let directory = root.join(ACTIVATION_NAME);
    unsafe_directory(
        &directory,
        true,
        "activation transaction directory is unsafe",
    )?;
    let (data, _mode) = read_guarded(&directory.join("manifest.json"), true)?;
    let invalid = || Failure::runtime("activation transaction manifest is invalid");
    let value: Value = serde_json::from_slice(&data).map_err(|_| invalid())?;
    let format = value["format"].as_i64().ok_or_else(invalid)?;
    if !(1..=3).contains(&format) {
        return Err(invalid());
    }
    if format != 3 {
        return Ok(None);
    }
    let execution = &value["execution"];
    let identities_valid = [
        &value["candidate_release"],
        &execution["old_worker_release"],
    ]
    .iter()
    .all(|release| {
        release.as_object().is_some_and(|object| object.is_empty()) || valid_identity(release)
    });
    if !execution.is_object()
        || !canonical_uuid(execution["operation_id"].as_str().unwrap_or_default())
        || !identities_valid
    {
        return Err(invalid());
    }
    let old_worker = &execution["old_worker_release"];
    if old_worker
        .as_object()
        .is_some_and(|object| !object.is_empty())
    {
        let mut located = false;
        for key in ["source", "target"] {
            let path = Path::new(old_worker[key].as_str().unwrap_or_default());
            located = located || release_matches(path, old_worker)?;
        }
        if !located {
            return Err(Failure::runtime(
                "activation pinned worker release identity changed",
            ));
        }
    }
    Ok(Some(value))
}

/// A release identity `{source, target, device, inode, version_sha256}`.
fn valid_identity(release: &Value) -> bool {
    let absolute = |key: &str| {
        release[key]
            .as_str()
            .is_some_and(|text| text.starts_with('/'))
    };
    let digest = release["version_sha256"]
        .as_str()
        .is_some_and(|text| text.len() == 64 && text.bytes().all(|byte| byte.is_ascii_hexdigit()));
    release.as_object().is_some_and(|object| object.len() == 5)
        && absolute("source")
        && absolute("target")
        && release["device"].as_u64().is_some()
        && release["inode"].as_u64().is_some_and(|inode| inode > 0)
        && digest
}

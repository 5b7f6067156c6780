//! The `.execution-uninstall.json` intent of a split uninstall
//! (`execution_uninstall`), and the installed-layout provenance checks it
//! relies on (`update_handoff._installed_layout` / `_no_activation`,
//! `execution_preparation._binding` / `_check_binding`).
//!
//! The marker names the exact installation an interrupted uninstall owns:
//! root, both releases, their directory identities, the manifest's hash, the
//! operation id of the worker's admission hold and the data-removal choice.
//! The Python worker reads it at startup (to keep its hold across a restart),
//! so its keys, value rules and bytes (sorted, indent-2 JSON plus a newline,
//! mode 0600) are exactly Python's.

use std::path::Path;

use rustix::io::Errno;
use sha2::{Digest, Sha256};

use python_compat::{
    hex,
    json::{encode_indented, parse_json, Json, JsonObject},
    path::pathlib_ignores,
    uuid::python_uuid,
};

use crate::activation::{check_binding, directory_binding};

use crate::error::{Error, ErrorKind, Result};
use crate::fs::{atomic_write, normalize_path, owned_directory, read_file};
use crate::layout::{
    layout_manifest, render_service, ExecutionLayout, LAYOUT_NAME, TRANSACTION_NAME,
};
use crate::role::Role;

/// File name of the uninstall intent inside the install root.
pub const UNINSTALL_INTENT_NAME: &str = ".execution-uninstall.json";

/// install.sh's outer activation journal, which also claims the installation.
const ACTIVATION_NAME: &str = ".activation-transaction";

/// The keys of an intent, exactly.
const INTENT_KEYS: [&str; 10] = [
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

/// The phases an intent moves through: written before the worker's hold is
/// requested, after it was sealed, and after both services stopped.
pub(crate) const UNINSTALL_PHASES: [&str; 3] = ["prepared", "sealed", "stopped"];

/// `Path.exists() or Path.is_symlink()`: true when anything, even a dangling
/// symlink, is at `path`; the "not there" errors Python swallows are false,
/// and so is a name too long for the kernel.
pub fn entry_present(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(err)
            if err
                .raw_os_error()
                .map(Errno::from_raw_os_error)
                .is_some_and(|errno| pathlib_ignores(errno) || errno == Errno::NAMETOOLONG) =>
        {
            Ok(false)
        }
        Err(err) => Err(Error::from_io_path(&err, path)),
    }
}

/// `update_handoff._no_activation`: refuses (RuntimeError) while an
/// activation journal of install.sh or of execution-manage exists, even as a
/// dangling symlink, because that operation owns the installation.
pub fn no_activation(root: &Path) -> Result<()> {
    for name in [ACTIVATION_NAME, TRANSACTION_NAME] {
        if entry_present(&root.join(name))? {
            return Err(Error::runtime("activation already owns handoff recovery")
                .with_kind(ErrorKind::ActivationOwnsRecovery));
        }
    }
    Ok(())
}

/// `update_handoff._installed_layout`: the layout of the private installed
/// manifest under `root`, which must still equal a fresh rendering of that
/// layout (ValueError `installed execution layout changed` otherwise).
pub fn installed_layout(root: &Path) -> Result<ExecutionLayout> {
    let (data, _mode) = read_file(&root.join(LAYOUT_NAME), true)?;
    let value = parse_json(&data)?;
    if value.as_object().is_none() {
        return Err(Error::value("installed execution layout is invalid"));
    }
    let layout = ExecutionLayout::from_dict(value.get("layout").unwrap_or(&Json::Null))?;
    if layout.install_root != root || value != layout_manifest(&layout)? {
        return Err(Error::value("installed execution layout changed"));
    }
    Ok(layout)
}

/// The unit files (bytes and mode) of both roles, worker first.
pub type ServiceFiles = Vec<(Vec<u8>, u32)>;

/// `execution_uninstall._service_files`: both unit files exactly as the
/// installed layout renders them (mode 0600 or 0644, in owned directories),
/// and `current` still linking the installed gateway release. The uninstall
/// admits and re-checks with it; execution-manage's doctor reports its
/// refusal.
pub fn installed_service_files(layout: &ExecutionLayout) -> Result<ServiceFiles> {
    let mut files = Vec::new();
    for role in Role::ALL {
        let path = normalize_path(&layout.service_path(role)?)?;
        owned_directory(path.parent().unwrap_or(Path::new("/")), false)?;
        let (data, mode) = read_file(&path, false)?;
        if data != render_service(layout, role)? || !(mode == 0o600 || mode == 0o644) {
            return Err(Error::runtime(
                "native service configuration is not this installed execution layout",
            ));
        }
        files.push((data, mode));
    }
    let current = layout.current();
    let is_link =
        std::fs::symlink_metadata(&current).is_ok_and(|meta| meta.file_type().is_symlink());
    let target_matches =
        is_link && python_compat::path::resolve_strict(&current)? == layout.gateway_release;
    if !target_matches {
        return Err(Error::runtime(
            "gateway current link no longer matches its installed generation",
        ));
    }
    Ok(files)
}

/// The SHA-256 hex digest of the installed manifest's bytes.
fn manifest_digest(root: &Path) -> Result<String> {
    let (manifest, _mode) = read_file(&root.join(LAYOUT_NAME), true)?;
    Ok(hex(&Sha256::digest(&manifest)))
}

/// `str(path)` of a normalised layout path.
fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `_read_intent`: the retained intent of `root`, or `None` when there is
/// none. Refuses a marker that is not a private regular file, is not exactly
/// this installation's (ValueError `uninstall intent does not match this
/// installed runtime`), whose directories were replaced, or whose manifest
/// changed since admission (RuntimeError).
pub fn read_uninstall_intent(root: &Path, layout: &ExecutionLayout) -> Result<Option<JsonObject>> {
    let Some(intent) = read_intent_fields(root, |intent| {
        let is_text =
            |key: &str, expected: &str| intent.get(key).and_then(Json::as_str) == Some(expected);
        is_text("worker_release", &text(&layout.worker_release))
            && is_text("gateway_release", &text(&layout.gateway_release))
    })?
    else {
        return Ok(None);
    };
    let identities = intent.get("identities").unwrap_or(&Json::Null);
    for (name, path) in [
        ("root", root),
        ("worker", layout.worker_release.as_path()),
        ("gateway", layout.gateway_release.as_path()),
    ] {
        check_binding(path, identities.get(name).unwrap_or(&Json::Null))?;
    }
    if intent.get("layout_sha256").and_then(Json::as_str) != Some(manifest_digest(root)?.as_str()) {
        return Err(Error::runtime(
            "installed execution layout changed after uninstall admission",
        ));
    }
    Ok(Some(intent))
}

/// The retained intent of `root` when it records that the uninstall had
/// passed its whole admission and stopped both services (phase `stopped`),
/// so a killed run may have begun removing files; `None` without an intent
/// or in an earlier phase. Read without the installed layout, which that
/// removal may already have (partly) deleted: the intent must be a private
/// regular file with exactly the intent's keys and value rules, naming
/// exactly this root, whose directory identity must still be the one it
/// recorded. The releases and the manifest are checked by the caller
/// against what is left of them. (The original has no such reader: a rerun of
/// an interrupted removal fails on the missing files.)
pub fn read_interrupted_removal(root: &Path) -> Result<Option<JsonObject>> {
    let Some(intent) = read_intent_fields(root, |intent| {
        ["worker_release", "gateway_release"]
            .iter()
            .all(|key| intent.get(key).and_then(Json::as_str).is_some())
    })?
    else {
        return Ok(None);
    };
    if intent.get("phase").and_then(Json::as_str) != Some("stopped") {
        return Ok(None);
    }
    let identities = intent.get("identities").unwrap_or(&Json::Null);
    check_binding(root, identities.get("root").unwrap_or(&Json::Null))?;
    Ok(Some(intent))
}

/// The intent file of `root` with its key set and every value rule checked
/// (`releases_match` judges the two release paths), or `None` when there is
/// no intent. Identity bindings are shape-checked only.
fn read_intent_fields(
    root: &Path,
    releases_match: impl FnOnce(&JsonObject) -> bool,
) -> Result<Option<JsonObject>> {
    let data = match read_file(&root.join(UNINSTALL_INTENT_NAME), true) {
        Ok((data, _mode)) => data,
        Err(err) if err.is_not_found() => return Ok(None),
        Err(err) => return Err(err),
    };
    let value = parse_json(&data)?;
    let mismatch = || Error::value("uninstall intent does not match this installed runtime");
    let Json::Object(intent) = value else {
        return Err(mismatch());
    };
    if intent.len() != INTENT_KEYS.len() || INTENT_KEYS.iter().any(|key| !intent.contains_key(key))
    {
        return Err(mismatch());
    }
    let field = |key: &str| intent.get(key).unwrap_or(&Json::Null);
    let matches = matches!(field("format"), Json::Int(1))
        && matches!(field("purge_state"), Json::Bool(_))
        && field("root").as_str() == Some(text(root).as_str())
        && releases_match(&intent)
        && python_compat::in_str_set(Some(field("phase")), &UNINSTALL_PHASES)?
        && field("server_identity")
            .as_str()
            .is_some_and(is_server_identity);
    if !matches {
        return Err(mismatch());
    }
    let Some(operation) = field("operation_id").as_str() else {
        return Err(mismatch());
    };
    if python_uuid(operation)? != operation {
        return Err(mismatch());
    }
    let identities = field("identities");
    let valid_identities = identities.as_object().is_some_and(|object| {
        object.len() == 3
            && ["root", "worker", "gateway"]
                .iter()
                .all(|key| object.contains_key(key))
    });
    if !valid_identities {
        return Err(Error::value("uninstall intent identities are invalid"));
    }
    Ok(Some(intent))
}

/// `_write_intent`: persists a new intent in phase `prepared` for
/// `operation`, refusing (RuntimeError) when any intent, even a dangling
/// symlink, is already there. Returns what was written.
pub fn write_uninstall_intent(
    root: &Path,
    layout: &ExecutionLayout,
    operation: &str,
    purge_state: bool,
    server_identity: &str,
) -> Result<JsonObject> {
    if entry_present(&root.join(UNINSTALL_INTENT_NAME))? {
        return Err(Error::runtime("another uninstall intent already exists"));
    }
    let digest = manifest_digest(root)?;
    let mut identities = JsonObject::new();
    identities.insert("root", directory_binding(root)?);
    identities.insert("worker", directory_binding(&layout.worker_release)?);
    identities.insert("gateway", directory_binding(&layout.gateway_release)?);
    let mut intent = JsonObject::new();
    intent.insert("format", 1_i64);
    intent.insert("root", text(root));
    intent.insert("worker_release", text(&layout.worker_release));
    intent.insert("gateway_release", text(&layout.gateway_release));
    intent.insert("operation_id", operation);
    intent.insert("server_identity", server_identity);
    intent.insert("purge_state", purge_state);
    intent.insert("phase", "prepared");
    intent.insert("layout_sha256", digest);
    intent.insert("identities", identities);
    store_uninstall_intent(root, &intent)?;
    Ok(intent)
}

/// Replaces the intent file with `intent` (used to advance its phase).
pub fn store_uninstall_intent(root: &Path, intent: &JsonObject) -> Result<()> {
    atomic_write(
        &root.join(UNINSTALL_INTENT_NAME),
        &encode_indented(&Json::Object(intent.clone())),
        0o600,
    )
}

/// `pending_uninstall_operation`: the operation id a worker starting from
/// `runtime_root` must hold, when a retained intent keeps exactly that
/// worker (RuntimeError `worker is not retained by the pending uninstall`
/// otherwise). Never writes.
pub fn pending_uninstall_operation(root: &Path, runtime_root: &Path) -> Result<String> {
    no_activation(root)?;
    let layout = installed_layout(root)?;
    let intent = read_uninstall_intent(root, &layout)?;
    let not_retained = || Error::runtime("worker is not retained by the pending uninstall");
    let Some(intent) = intent else {
        return Err(not_retained());
    };
    if normalize_path(runtime_root)? != layout.worker_release {
        return Err(not_retained());
    }
    Ok(intent
        .get("operation_id")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string())
}

/// `re.fullmatch(r"[A-Za-z0-9_-]{1,128}", text)`.
fn is_server_identity(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_identity_pattern() {
        assert!(is_server_identity("server_fixture-1"));
        assert!(!is_server_identity(""));
        assert!(!is_server_identity("a b"));
        assert!(!is_server_identity(&"a".repeat(129)));
        assert!(!is_server_identity("é"));
    }
}

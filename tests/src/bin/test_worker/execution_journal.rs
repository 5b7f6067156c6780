//! `execution_install._load` as the Python worker runs it at startup: the
//! pending `.execution-transaction` journal, read and re-validated against the
//! layout it names. The worker stands beside `execution-manage`, which writes
//! this journal, so it reads it with its own code written from the original
//! and never with that helper's reader: a mistake in one must not be shared
//! by the other.

use std::path::{Path, PathBuf};

use agents_common::{
    check_text, desired, layout_manifest, maintenance_operation_id, normalize_path,
    owned_directory, read_file, render_service, Error, ExecutionLayout, Result, ServiceState,
    FORMAT, MAX_CONFIG_BYTES, TRANSACTION_NAME,
};
use python_compat::base64::b64decode_validate;
use python_compat::json::{encode_indented, parse_json, Json, JsonObject};
use python_compat::{hex, json_object, truthy};
use sha2::{Digest, Sha256};

/// The journal's keys, exactly (`required` in `_load`).
const REQUIRED: [&str; 13] = [
    "format",
    "id",
    "scope",
    "phase",
    "layout",
    "prior_services",
    "paths",
    "before",
    "after",
    "current_before",
    "current_after",
    "receipt",
    "expected_server_identity",
];
const SCOPES: [&str; 3] = ["migration", "gateway", "worker"];
const PHASES: [&str; 6] = [
    "prepared",
    "publishing",
    "published",
    "committed",
    "rolling-back",
    "rolled-back",
];

/// A pending journal that `_load` accepted, with the layout it names.
pub(crate) struct PendingJournal {
    pub(crate) value: Json,
    pub(crate) layout: ExecutionLayout,
}

impl PendingJournal {
    /// `_load(root)`.
    pub(crate) fn load(root: &Path) -> Result<Self> {
        let root = normalize_path(root)?;
        owned_directory(&root, false)?;
        let directory = root.join(TRANSACTION_NAME);
        owned_directory(&directory, true)?;
        let (data, _mode) = read_file(&directory.join("manifest.json"), true)?;
        let value = parse_json(&data)?;
        let keys_exact = value.as_object().is_some_and(|journal| {
            journal.len() == REQUIRED.len() && REQUIRED.iter().all(|key| journal.contains_key(key))
        });
        if !keys_exact || member(&value, "format") != &Json::from(FORMAT) {
            return Err(Error::value("invalid execution transaction"));
        }
        maintenance_operation_id(&value)?;
        match member(&value, "expected_server_identity") {
            Json::Null => {}
            identity => check_text(identity.as_str().unwrap_or_default())?,
        }
        let layout = ExecutionLayout::from_dict(member(&value, "layout"))?;
        if layout.install_root != root {
            return Err(Error::value(
                "execution transaction belongs to another install root",
            ));
        }
        let known = |key: &str, names: &[&str]| {
            member(&value, key)
                .as_str()
                .is_some_and(|name| names.contains(&name))
        };
        if !known("scope", &SCOPES) || !known("phase", &PHASES) {
            return Err(Error::value("invalid execution transaction state"));
        }
        check_prior_services(member(&value, "prior_services"))?;
        check_plan(&value, &layout)?;
        check_current_before(&value, &root)?;
        Ok(Self { value, layout })
    }

    /// The worker release of the layout the `before` manifest snapshot holds
    /// (the installation the activation replaces), if there was one.
    pub(crate) fn previous_layout(&self) -> Result<Option<ExecutionLayout>> {
        let previous = member(member(&self.value, "before"), "layout");
        if !truthy(member(previous, "exists")) {
            return Ok(None);
        }
        let data = decode(member(previous, "data"))?;
        let manifest = parse_json(&data)?;
        ExecutionLayout::from_dict(member(&manifest, "layout")).map(Some)
    }

    /// The journal's `current_before` (the link text `current` had), if any.
    pub(crate) fn current_before(&self) -> Option<&str> {
        member(&self.value, "current_before").as_str()
    }
}

/// `_service_states`: both roles, each a state `restore` can act on.
fn check_prior_services(value: &Json) -> Result<()> {
    let Some(states) = value.as_object() else {
        return Err(Error::value(
            "both prior native service states are required",
        ));
    };
    if states.len() != 2 || !states.contains_key("worker") || !states.contains_key("gateway") {
        return Err(Error::value(
            "both prior native service states are required",
        ));
    }
    for (_role, state) in states.iter() {
        ServiceState::from_json(state)?;
    }
    Ok(())
}

/// The `paths`, `current_after` and `after` members must be what the layout
/// renders today, and `before` must hold one valid snapshot per path.
fn check_plan(value: &Json, layout: &ExecutionLayout) -> Result<()> {
    let text = |path: PathBuf| Json::from(path.to_string_lossy().into_owned());
    let expected_paths = json_object! {
        "worker" => text(layout.service_path("worker")?),
        "gateway" => text(layout.service_path("gateway")?),
        "layout" => text(layout.manifest_path()),
    };
    if member(value, "paths") != &Json::Object(expected_paths.clone())
        || member(value, "current_after") != &text(layout.gateway_release.clone())
    {
        return Err(Error::value("execution transaction paths changed"));
    }
    let expected_after = json_object! {
        "worker" => desired(&render_service(layout, "worker")?),
        "gateway" => desired(&render_service(layout, "gateway")?),
        "layout" => desired(&encode_indented(&layout_manifest(layout)?)),
    };
    let before = member(value, "before").as_object();
    let same_keys = before.is_some_and(|before| same_key_set(before, &expected_paths));
    if member(value, "after") != &Json::Object(expected_after) || !same_keys {
        return Err(Error::value("execution transaction content changed"));
    }
    for (_key, snapshot) in before.into_iter().flat_map(JsonObject::iter) {
        check_snapshot(snapshot)?;
    }
    Ok(())
}

fn same_key_set(object: &JsonObject, expected: &JsonObject) -> bool {
    object.len() == expected.len() && expected.iter().all(|(key, _)| object.contains_key(key))
}

/// One `before` snapshot: `{"exists": false}`, or a file that may be written
/// back (mode without group or other write, at most 1 MiB, matching digest).
fn check_snapshot(item: &Json) -> Result<()> {
    if item == &Json::Object(json_object! {"exists" => false}) {
        return Ok(());
    }
    let complete = item.as_object().is_some_and(|snapshot| {
        snapshot.len() == 4
            && ["exists", "mode", "sha256", "data"]
                .iter()
                .all(|key| snapshot.contains_key(key))
    });
    if !complete {
        return Err(Error::value("invalid execution snapshot"));
    }
    let content = decode(member(item, "data"))?;
    let mode = match member(item, "mode") {
        Json::Int(mode) => Some(*mode),
        _ => None,
    };
    let valid = matches!(member(item, "exists"), Json::Bool(true))
        && mode.is_some_and(|mode| (0..=0o777).contains(&mode) && mode & 0o022 == 0)
        && content.len() as u64 <= MAX_CONFIG_BYTES
        && member(item, "sha256").as_str() == Some(hex(&Sha256::digest(&content)).as_str());
    if !valid {
        return Err(Error::value("invalid execution snapshot content"));
    }
    Ok(())
}

/// `current_before`, when set, must resolve to a release under `releases/`.
fn check_current_before(value: &Json, root: &Path) -> Result<()> {
    let target = match member(value, "current_before") {
        Json::Null => return Ok(()),
        Json::Str(before) => root.join(before),
        _ => {
            return Err(Error::value(
                "previous execution current escaped release root",
            ))
        }
    };
    let resolved = target
        .canonicalize()
        .map_err(|err| Error::from_io_path(&err, &target))?;
    if resolved.parent() != Some(root.join("releases").as_path()) {
        return Err(Error::value(
            "previous execution current escaped release root",
        ));
    }
    Ok(())
}

/// `base64.b64decode(data, validate=True)` of a snapshot's data (a
/// binascii.Error is a ValueError).
fn decode(data: &Json) -> Result<Vec<u8>> {
    let text = data.as_str().unwrap_or_default();
    b64decode_validate(text).ok_or_else(|| {
        let alphabet = |byte: u8| byte.is_ascii_alphanumeric() || b"+/=".contains(&byte);
        if text.bytes().all(alphabet) {
            Error::value("Incorrect padding")
        } else {
            Error::value("Only base64 data is allowed")
        }
    })
}

/// `value[key]`, or null where the journal has no such member.
fn member<'a>(value: &'a Json, key: &str) -> &'a Json {
    value.get(key).unwrap_or(&Json::Null)
}

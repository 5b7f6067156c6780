//! `execution_install._load` as the Python worker runs it at startup: the
//! pending `.execution-transaction` journal, read and re-validated against the
//! layout it names. The worker stands beside `execution-manage`, which writes
//! this journal, so it reads it with its own code written from the original
//! (serde_json, the worker's `layout`) and never with the port's readers: a
//! mistake in one must not be shared by the other.

use std::path::Path;

use base64::Engine;
use serde_json::{json, Map, Value};

use agents_tests::upstream_activation::uuid5_url;
use agents_tests::upstream_files::{
    normal_path, owned_directory, parse, read_guarded, Failure, Outcome, MAX_CONFIG_BYTES,
};
use agents_tests::upstream_json::json_bytes;
use agents_tests::upstream_layout::{desired, hex_digest, Layout};

/// `TRANSACTION_NAME`: the journal directory in the install root.
pub(crate) const TRANSACTION_NAME: &str = ".execution-transaction";
/// The journal format `stage` writes.
const FORMAT: i64 = 1;
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
    pub(crate) value: Value,
    pub(crate) layout: Layout,
}

impl PendingJournal {
    /// `_load(root)`.
    pub(crate) fn load(root: &Path) -> Outcome<Self> {
        let root = normal_path(root)?;
        owned_directory(&root, false)?;
        let directory = root.join(TRANSACTION_NAME);
        owned_directory(&directory, true)?;
        let (data, _mode) = read_guarded(&directory.join("manifest.json"), true)?;
        let value = parse(&data)?;
        let keys_exact = value.as_object().is_some_and(|journal| {
            journal.len() == REQUIRED.len() && REQUIRED.iter().all(|key| journal.contains_key(*key))
        });
        if !keys_exact || value["format"].as_i64() != Some(FORMAT) {
            return Err(Failure::value("invalid execution transaction"));
        }
        operation_id(&value)?;
        match &value["expected_server_identity"] {
            Value::Null => {}
            Value::String(identity) if !identity.chars().any(char::is_control) => {}
            _ => return Err(Failure::value("execution text contains control characters")),
        }
        let layout = Layout::from_value(&value["layout"])?;
        if layout.install_root != root {
            return Err(Failure::value(
                "execution transaction belongs to another install root",
            ));
        }
        let known = |key: &str, names: &[&str]| {
            value[key]
                .as_str()
                .is_some_and(|name| names.contains(&name))
        };
        if !known("scope", &SCOPES) || !known("phase", &PHASES) {
            return Err(Failure::value("invalid execution transaction state"));
        }
        check_prior_services(&value["prior_services"])?;
        check_plan(&value, &layout)?;
        check_current_before(&value, &root)?;
        Ok(Self { value, layout })
    }

    /// The layout the `before` manifest snapshot holds (the installation
    /// the activation replaces), if there was one.
    pub(crate) fn previous_layout(&self) -> Outcome<Option<Layout>> {
        let previous = &self.value["before"]["layout"];
        if !truthy(&previous["exists"]) {
            return Ok(None);
        }
        let manifest = parse(&decode(&previous["data"])?)?;
        Layout::from_value(&manifest["layout"]).map(Some)
    }
}

/// Python's `bool()` of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(members) => !members.is_empty(),
    }
}

/// `maintenance_operation_id(journal)`: `uuid5(NAMESPACE_URL,
/// "agentsdock-execution:" + id)` of an `execution-<24 hex>` id.
pub(crate) fn operation_id(journal: &Value) -> Outcome<String> {
    let id = journal["id"].as_str().unwrap_or_default();
    let hex = id.strip_prefix("execution-").unwrap_or_default();
    if hex.len() != 24
        || !hex
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    {
        return Err(Failure::value("invalid execution transaction identity"));
    }
    Ok(uuid5_url(&format!("agentsdock-execution:{id}")))
}

/// `_service_states`: both roles, each a state `restore` can act on
/// (`{state, enabled[, pid][, instance_id]}`).
fn check_prior_services(value: &Value) -> Outcome<()> {
    let both = value.as_object().filter(|states| {
        states.len() == 2 && states.contains_key("worker") && states.contains_key("gateway")
    });
    let Some(states) = both else {
        return Err(Failure::value(
            "both prior native service states are required",
        ));
    };
    for state in states.values() {
        check_service_state(state)?;
    }
    Ok(())
}

/// One role's recorded state: `state` and `enabled` required, nothing but
/// `pid` and `instance_id` besides; absent never enabled; a positive pid; a
/// control-free instance id.
fn check_service_state(state: &Value) -> Outcome<()> {
    let known = ["state", "enabled", "pid", "instance_id"];
    let run_state = state["state"].as_str().unwrap_or_default();
    let valid = state.as_object().is_some_and(|fields| {
        fields.keys().all(|key| known.contains(&key.as_str()))
            && ["running", "stopped", "absent"].contains(&run_state)
            && state["enabled"].is_boolean()
            && !(run_state == "absent" && state["enabled"] == true)
    });
    if !valid {
        return Err(Failure::value("invalid prior native service state"));
    }
    if state
        .get("pid")
        .is_some_and(|pid| pid.as_u64().is_none_or(|pid| pid == 0))
    {
        return Err(Failure::value("invalid native service process identity"));
    }
    match state.get("instance_id") {
        None => Ok(()),
        Some(Value::String(text)) if !text.is_empty() && !text.chars().any(char::is_control) => {
            Ok(())
        }
        Some(_) => Err(Failure::value(
            "configuration text must be nonempty and contain no control characters",
        )),
    }
}

/// The `paths`, `current_after` and `after` members must be what the layout
/// renders today, and `before` must hold one valid snapshot per path.
fn check_plan(value: &Value, layout: &Layout) -> Outcome<()> {
    let text = |path: &Path| Value::from(path.to_string_lossy().into_owned());
    let expected_paths = json!({
        "worker": text(&layout.service_path("worker")),
        "gateway": text(&layout.service_path("gateway")),
        "layout": text(&layout.manifest_path()),
    });
    if value["paths"] != expected_paths || value["current_after"] != text(&layout.gateway_release) {
        return Err(Failure::value("execution transaction paths changed"));
    }
    let expected_after = json!({
        "worker": desired(layout.render_service("worker")?.as_bytes()),
        "gateway": desired(layout.render_service("gateway")?.as_bytes()),
        "layout": desired(&json_bytes(&layout.manifest()?)),
    });
    let before = value["before"].as_object();
    let same_keys = before.is_some_and(|before| {
        before.len() == 3
            && ["worker", "gateway", "layout"]
                .iter()
                .all(|key| before.contains_key(*key))
    });
    if value["after"] != expected_after || !same_keys {
        return Err(Failure::value("execution transaction content changed"));
    }
    for snapshot in before.into_iter().flat_map(Map::values) {
        check_snapshot(snapshot)?;
    }
    Ok(())
}

/// One `before` snapshot: `{"exists": false}`, or a file that may be written
/// back (mode without group or other write, at most 1 MiB, matching digest).
fn check_snapshot(item: &Value) -> Outcome<()> {
    if item == &json!({"exists": false}) {
        return Ok(());
    }
    let complete = item.as_object().is_some_and(|snapshot| {
        snapshot.len() == 4
            && ["exists", "mode", "sha256", "data"]
                .iter()
                .all(|key| snapshot.contains_key(*key))
    });
    if !complete {
        return Err(Failure::value("invalid execution snapshot"));
    }
    let content = decode(&item["data"])?;
    let valid = item["exists"] == Value::Bool(true)
        && item["mode"]
            .as_i64()
            .is_some_and(|mode| (0..=0o777).contains(&mode) && mode & 0o022 == 0)
        && content.len() as u64 <= MAX_CONFIG_BYTES
        && item["sha256"].as_str() == Some(hex_digest(&content).as_str());
    if !valid {
        return Err(Failure::value("invalid execution snapshot content"));
    }
    Ok(())
}

/// `current_before`, when set, must resolve to a release under `releases/`.
fn check_current_before(value: &Value, root: &Path) -> Outcome<()> {
    let escaped = || Failure::value("previous execution current escaped release root");
    let target = match &value["current_before"] {
        Value::Null => return Ok(()),
        Value::String(before) => root.join(before),
        _ => return Err(escaped()),
    };
    let resolved = target
        .canonicalize()
        .map_err(|err| Failure::os(&err, &target))?;
    if resolved.parent() != Some(root.join("releases").as_path()) {
        return Err(escaped());
    }
    Ok(())
}

/// `base64.b64decode(data, validate=True)` of a snapshot's data (a
/// binascii.Error is a ValueError).
fn decode(data: &Value) -> Outcome<Vec<u8>> {
    let text = data.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| {
            let alphabet = |byte: u8| byte.is_ascii_alphanumeric() || b"+/=".contains(&byte);
            if text.bytes().all(alphabet) {
                Failure::value("Incorrect padding")
            } else {
                Failure::value("Only base64 data is allowed")
            }
        })
}

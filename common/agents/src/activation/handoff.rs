//! `update_handoff._read_handoff`: the sealed worker handoff the server
//! admitted for a managed update, which `execution_activation preflight`
//! checks before the outer journal exists.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::{normalize_path, owned_directory, read_file};
use python_compat::{
    is_lower_hex,
    json::{parse_json_unique, Json, JsonObject},
    uuid::is_canonical_uuid,
};

/// The handoff's exact key set.
const HANDOFF_FIELDS: [&str; 5] = [
    "schema",
    "operation_id",
    "worker_instance_id",
    "lease_id",
    "expected_server_identity",
];

/// `_read_handoff(root, path)`: a private `handoff-<32 hex>.json` inside this
/// root's `.update-preparations/<32 hex>/`, schema-checked (duplicate keys
/// refused).
pub fn read_update_handoff(root: &Path, path: &Path) -> Result<JsonObject> {
    let path = normalize_path(path)?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let preparations = parent.parent().unwrap_or(Path::new("/"));
    let name = |path: &Path| {
        path.file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default()
            .to_string()
    };
    let file_name = name(&path);
    let owned = preparations == root.join(".update-preparations")
        && is_lower_hex(name(parent), 32)
        && file_name
            .strip_prefix("handoff-")
            .and_then(|rest| rest.strip_suffix(".json"))
            .is_some_and(|hex| is_lower_hex(hex, 32));
    if !owned {
        return Err(Error::value(
            "handoff is outside its owned preparation directory",
        ));
    }
    owned_directory(preparations, true)?;
    owned_directory(parent, true)?;
    let (data, _mode) = read_file(&path, true)?;
    let value = parse_json_unique(&data, "duplicate handoff field")?;
    let schema_ok = value.as_object().is_some_and(|object| {
        object.len() == HANDOFF_FIELDS.len()
            && HANDOFF_FIELDS.iter().all(|key| object.contains_key(key))
    }) && value.get("schema").and_then(Json::as_int) == Some(1);
    let Json::Object(value) = value else {
        return Err(Error::value("invalid handoff schema"));
    };
    if !schema_ok {
        return Err(Error::value("invalid handoff schema"));
    }
    for key in ["operation_id", "lease_id"] {
        let Some(text) = value.get(key).and_then(Json::as_str) else {
            return Err(Error::value("invalid handoff operation or lease"));
        };
        if !parses_as_uuid(text) {
            return Err(Error::value("badly formed hexadecimal UUID string"));
        }
        if !is_canonical_uuid(text) {
            return Err(Error::value("invalid handoff operation or lease"));
        }
    }
    for key in ["worker_instance_id", "expected_server_identity"] {
        let valid = value.get(key).and_then(Json::as_str).is_some_and(|text| {
            (1..=128).contains(&text.len())
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
        if !valid {
            return Err(Error::value("invalid handoff worker or server identity"));
        }
    }
    Ok(value)
}

/// `uuid.UUID(text)` accepts it.
fn parses_as_uuid(text: &str) -> bool {
    python_compat::uuid::python_uuid(text).is_ok()
}

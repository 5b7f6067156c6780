//! The server's `GET /api/admin/update` as far as the helpers depend on it:
//! reading the update status finalizes an update whose detached runner is
//! gone (`finalize_abandoned_server_update`), so `execution-manage doctor`'s
//! suggested command for a stuck row can be run against the test worker.
//!
//! Under the status flock, a row in a runner phase whose `runner_pid` is not
//! an alive update runner of this update (the server's liveness check: the
//! command line names `update_runner.py`, or the `update-runner` binary, and
//! `--update-id <id>`), last updated more than the grace ago (45 s, or the
//! `update_grace_seconds` switch), is written `failed` with the server's
//! message; a row still owning a handoff also gets the retryable
//! handoff-release error. The row is the reply.

use std::path::Path;

use agents_tests::server_status::{
    now_seconds, read_row, stamp_seconds, status_lock, utc_now, write_json, ACTIVE_PHASES,
};
use serde_json::{Map, Value};

/// `SERVER_UPDATE_START_GRACE_SECONDS`.
const GRACE_SECONDS: f64 = 45.0;
/// The message of a finalized abandoned update.
const ABANDONED: &str =
    "The detached updater exited before reporting completion. See server-update.log.";

/// The row after the read (finalized when abandoned), as the reply's JSON.
pub(crate) fn read(state_root: &Path, grace: Option<f64>) -> Result<String, String> {
    let path = state_root.join("admin/server-update.json");
    let _lock = status_lock(&path)?;
    // The server reads an unreadable or non-object row as `{}`.
    let row = read_row(&path).unwrap_or_default();
    if !abandoned(&row, grace.unwrap_or(GRACE_SECONDS)) {
        return Ok(Value::Object(row).to_string());
    }
    let mut updated = row.clone();
    let now = utc_now();
    for (key, value) in [
        ("phase", Value::from("failed")),
        ("message", Value::from(ABANDONED)),
        ("runner_pid", Value::Null),
        ("heartbeat_at", Value::Null),
        ("finished_at", Value::from(now.as_str())),
        ("updated_at", Value::from(now.as_str())),
    ] {
        updated.insert(key.to_string(), value);
    }
    if row
        .get("_execution_handoff")
        .is_some_and(|handoff| !handoff.is_null())
    {
        for (key, value) in [
            (
                "error_code",
                Value::from("server_update_handoff_release_failed"),
            ),
            ("retryable", Value::Bool(true)),
            (
                "error_action",
                Value::from("Retry the update to finish releasing its execution hold."),
            ),
        ] {
            updated.insert(key.to_string(), value);
        }
    }
    let row = Value::Object(updated);
    write_json(&path, &row)?;
    Ok(row.to_string())
}

/// Python's `str(value or "")` of a member, for the row's text fields.
fn text(row: &Map<String, Value>, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn abandoned(row: &Map<String, Value>, grace: f64) -> bool {
    let phase = text(row, "phase");
    if !ACTIVE_PHASES.contains(&phase.as_str()) {
        return false;
    }
    let update_id = text(row, "update_id");
    let pid = row.get("runner_pid").and_then(Value::as_i64).unwrap_or(0);
    if pid > 1 && runner_alive(pid, &update_id) {
        return false;
    }
    let age = stamp_seconds(&text(row, "updated_at"))
        .map(|then| now_seconds() - then)
        .unwrap_or(i64::MAX);
    age as f64 >= grace
}

fn runner_alive(pid: i64, update_id: &str) -> bool {
    let Ok(line) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let words: Vec<String> = line
        .split(|byte| *byte == 0)
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    let program = words.iter().any(|word| {
        word.ends_with("update_runner.py") || word.rsplit('/').next() == Some("update-runner")
    });
    program
        && words
            .windows(2)
            .any(|pair| pair[0] == "--update-id" && pair[1] == update_id)
}

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

use agents_common::{
    read_status_unlocked, update_status_unlocked, StatusLock, RUNNER_OWNED_ACTIVE_PHASES,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

/// `SERVER_UPDATE_START_GRACE_SECONDS`.
const GRACE_SECONDS: f64 = 45.0;
/// The message of a finalized abandoned update.
const ABANDONED: &str =
    "The detached updater exited before reporting completion. See server-update.log.";

/// The row after the read (finalized when abandoned).
pub(crate) fn read(state_root: &Path, grace: Option<f64>) -> Result<JsonObject, String> {
    let path = state_root.join("admin/server-update.json");
    let _lock = StatusLock::acquire(&path).map_err(|err| err.to_string())?;
    let row = read_status_unlocked(&path).map_err(|err| err.to_string())?;
    if !abandoned(&row, grace.unwrap_or(GRACE_SECONDS)) {
        return Ok(row);
    }
    let mut changes = json_object! {
        "phase" => "failed",
        "message" => ABANDONED,
        "runner_pid" => Json::Null,
        "heartbeat_at" => Json::Null,
        "finished_at" => agents_common::utc_now(),
    };
    if row
        .get("_execution_handoff")
        .is_some_and(|handoff| !handoff.is_null())
    {
        changes.insert("error_code", "server_update_handoff_release_failed");
        changes.insert("retryable", true);
        changes.insert(
            "error_action",
            "Retry the update to finish releasing its execution hold.",
        );
    }
    update_status_unlocked(&path, &row, changes).map_err(|err| err.to_string())
}

fn text(row: &JsonObject, key: &str) -> String {
    row.get(key)
        .map(python_compat::str_or_empty)
        .unwrap_or_default()
}

fn abandoned(row: &JsonObject, grace: f64) -> bool {
    let phase = text(row, "phase");
    if !RUNNER_OWNED_ACTIVE_PHASES.contains(&phase.as_str()) {
        return false;
    }
    let update_id = text(row, "update_id");
    let pid = row.get("runner_pid").and_then(Json::as_int).unwrap_or(0);
    if pid > 1 && runner_alive(pid, &update_id) {
        return false;
    }
    let age = stamp_seconds(&text(row, "updated_at"))
        .map(|then| now_seconds() - then)
        .unwrap_or(i64::MAX);
    age as f64 >= grace
}

fn runner_alive(pid: i128, update_id: &str) -> bool {
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

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64)
}

/// `%Y-%m-%dT%H:%M:%SZ` as Unix seconds.
fn stamp_seconds(stamp: &str) -> Option<i64> {
    if stamp.len() != 20 || !stamp.ends_with('Z') {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> { stamp.get(range)?.parse().ok() };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

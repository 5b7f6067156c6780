//! The prepared-release path of `update-runner` (`--prepared-receipt`): a
//! staged candidate under the install root, its receipt written here entry
//! by entry in `execution_preparation`'s format (every digest computed by
//! the test itself), and the signed envelope the server admitted. The
//! runner must activate exactly that candidate through install.sh's
//! `--activate-prepared`, record the recovery intent first, and refuse any
//! change to the receipt, the staged tree or the admission.
//!
//! The original's `update_preparation` is not among the originals, so rows are
//! checked against the texts of `update_runner.run_update`,
//! `update_preparation.verify_prepared_status` and
//! `execution_preparation.validate_prepared`; `upstream_compare_runner`
//! runs the same cases side by side with the original and the upstream modules.

use crate::update_runner_support;

use std::os::unix::fs::MetadataExt;

use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use update_runner_support::prepared::*;
use update_runner_support::{IDENTITY, UPDATE_ID};

fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

fn expect_refused(prepared: &Prepared, message: &str) {
    let outcome = prepared.run();
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(
        field(&outcome.row, "phase"),
        Json::from("failed"),
        "{:?}",
        outcome.row
    );
    assert_eq!(field(&outcome.row, "message"), Json::from(message));
    assert_eq!(outcome.installer, None);
    assert!(outcome.leftovers.is_empty());
}

#[test]
fn a_prepared_candidate_is_activated_in_place() {
    let prepared = Prepared::new("prepared");
    let outcome = prepared.run();
    assert_eq!(
        outcome.exit,
        Some(0),
        "{:?} {}",
        outcome.row,
        outcome.stderr
    );
    let row = &outcome.row;
    assert_eq!(field(row, "phase"), Json::from("complete"));
    assert_eq!(
        field(row, "message"),
        Json::from("AgentsServer 1.2.3 is installed and healthy.")
    );
    let intent = json_object! {
        "format" => 1,
        "root" => prepared.root.to_string_lossy().into_owned(),
        "root_binding" => binding(&prepared.root),
        "candidate_binding" => binding(&prepared.candidate),
        "version" => VERSION,
        "api_contract" => 28,
        "update_id" => UPDATE_ID,
        "server_identity" => IDENTITY,
    };
    assert_eq!(field(row, "_activation_recovery"), Json::Object(intent));
    let installer = outcome.installer.expect("install.sh ran");
    assert_eq!(
        installer[0],
        format!("cwd={}", prepared.candidate.display())
    );
    let arguments: Vec<&str> = installer[1..]
        .iter()
        .map(|line| line.strip_prefix("arg=").unwrap_or(line))
        .collect();
    let receipt = prepared.receipt.to_string_lossy().into_owned();
    let at = arguments
        .iter()
        .position(|word| *word == "--activate-prepared")
        .expect("activate flag");
    assert_eq!(arguments[at + 1], receipt);
    assert_eq!(arguments[at + 2], "--prepared-archive-sha256");
    let signed_sha = prepared
        .manifest
        .get("archive")
        .and_then(|a| a.get("sha256"))
        .cloned();
    assert_eq!(Some(Json::from(arguments[at + 3])), signed_sha);
    assert_eq!(
        arguments[at + 4..at + 8],
        ["--execution-mode", "split", "--expected-api-contract", "28"]
    );
    // Nothing was downloaded: the candidate was staged already.
    assert!(!prepared
        .fixture
        .host_requests()
        .iter()
        .any(|path| path.ends_with(".tar.gz")));
    // The staged tree is activated as it is (install.sh keeps its mode).
    let mode = std::fs::metadata(prepared.candidate.join("install.sh"))
        .unwrap()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
}

/// Each change to the admission, the receipt, the preparation directory or
/// the staged tree is refused before install.sh runs.
#[test]
fn every_change_to_a_prepared_update_is_refused() {
    for refusal in refusals() {
        let mut prepared = Prepared::new(refusal.name);
        (refusal.change)(&mut prepared);
        expect_refused(&prepared, &(refusal.message)(&prepared));
    }
}

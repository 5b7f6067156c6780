//! `update-runner --recover-only` over a real format-3 activation journal
//! (written by the test stand-in for install.sh's journal writer), with the
//! durable `_activation_recovery` intent the runner recorded before the
//! interrupted install, a stand-in `install.sh` beside a copy of the binary
//! (the running release), and the AgentsServer health endpoint on 127.0.0.1.
//!
//! The original cannot run here (its `update_recovery` imports modules outside
//! the originals), so each row is checked against the texts of
//! `update_recovery.run_recovery` and `update_runner.main`;
//! `upstream_compare_runner` runs these scenarios side by side with the original
//! and the upstream modules.

use crate::update_runner_support;

use std::process::Command;

use agents_common::read_status_unlocked;
use agents_tests::journal_writer::API_CONTRACT;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use update_runner_support::recovery::{Recovery, ROLLBACK_BEHAVIOUR, UPDATE_ID, VERSION};
use update_runner_support::IDENTITY;

fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

fn is_time(value: &Json) -> bool {
    value
        .as_str()
        .is_some_and(|text| text.len() == 20 && text.ends_with('Z'))
}

/// `main`'s row for a failed recovery: still active and retryable.
fn expect_recovery_failed(row: &JsonObject) {
    assert_eq!(field(row, "phase"), Json::from("installing"), "{row:?}");
    assert_eq!(
        field(row, "error_code"),
        Json::from("server_update_recovery_failed")
    );
    assert_eq!(
        field(row, "error_action"),
        Json::from("Retry recovery from the application update settings.")
    );
    assert_eq!(
        field(row, "message"),
        Json::from(
            "The interrupted server update could not finish recovery. See server-update.log."
        )
    );
    assert_eq!(field(row, "retryable"), Json::Bool(true));
    assert_eq!(field(row, "runner_pid"), Json::Null);
    assert_eq!(field(row, "heartbeat_at"), Json::Null);
    assert!(is_time(&field(row, "finished_at")));
    assert!(row
        .get("_activation_recovery")
        .is_some_and(|intent| intent.as_object().is_some()));
}

#[test]
fn an_interrupted_activation_is_recovered_by_the_running_release() {
    let recovery = Recovery::interrupted("complete");
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(0), "{row:?}");
    assert_eq!(field(&row, "phase"), Json::from("complete"));
    assert_eq!(field(&row, "installed_version"), Json::from(VERSION));
    assert_eq!(field(&row, "update_available"), Json::Bool(false));
    assert_eq!(
        field(&row, "message"),
        Json::from("AgentsServer 1.1.0 recovered and is healthy.")
    );
    for cleared in [
        "runner_pid",
        "heartbeat_at",
        "elapsed_seconds",
        "error_code",
        "error_action",
        "retryable",
    ] {
        assert_eq!(field(&row, cleared), Json::Null, "{cleared}");
    }
    assert!(is_time(&field(&row, "finished_at")));
    assert_eq!(field(&row, "track"), Json::from("stable"));
    let installer = recovery.installer().expect("install.sh ran");
    let port = recovery.health.port.to_string();
    let expected: Vec<String> = [
        format!("cwd={}", recovery.runtime.dir.display()),
        "arg=--recover-only".into(),
        "arg=--non-interactive".into(),
        "arg=--release-version".into(),
        format!("arg={VERSION}"),
        "arg=--expected-api-contract".into(),
        format!("arg={API_CONTRACT}"),
        "arg=--expected-activation-id".into(),
        format!("arg={}", recovery.transaction),
        "arg=--expected-server-identity".into(),
        format!("arg={IDENTITY}"),
        "arg=--managed-update-id".into(),
        format!("arg={UPDATE_ID}"),
        "arg=--port".into(),
        format!("arg={port}"),
        "arg=--bind".into(),
        "arg=127.0.0.1".into(),
        format!("env AGENTSDOCK_MANAGED_UPDATE_ID={UPDATE_ID}"),
    ]
    .into();
    assert_eq!(installer, expected);
    assert!(!recovery.token_file.exists(), "the credential is consumed");
    let log =
        update_runner_support::read_text(&recovery.status.with_file_name("server-update.log"));
    assert!(log.contains(&format!(
        "--- AgentsServer update {UPDATE_ID} to {VERSION} at "
    )));
}

#[test]
fn a_verified_rollback_ends_the_update_retryably() {
    let recovery = Recovery::interrupted("rolled-back");
    recovery.behaviour(ROLLBACK_BEHAVIOUR);
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(0), "{row:?}");
    assert_eq!(field(&row, "phase"), Json::from("failed"));
    assert_eq!(
        field(&row, "error_code"),
        Json::from("server_update_rolled_back")
    );
    assert_eq!(
        field(&row, "error_action"),
        Json::from("Retry the bundled update when ready.")
    );
    assert_eq!(
        field(&row, "message"),
        Json::from("The interrupted update was rolled back to the verified previous installation.")
    );
    assert_eq!(field(&row, "retryable"), Json::Bool(true));
    assert_eq!(field(&row, "runner_pid"), Json::Null);
    assert!(is_time(&field(&row, "finished_at")));
}

#[test]
fn a_journal_left_behind_keeps_the_recovery_retryable() {
    // A rollback that did not finalise its journal.
    let recovery = Recovery::interrupted("rollback-retained");
    recovery.behaviour("exit 75\n");
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    expect_recovery_failed(&row);
    assert!(
        recovery.journal_present(),
        "only install.sh may remove the journal"
    );

    // A "successful" recovery that did not finalise its journal.
    let recovery = Recovery::interrupted("unfinalised");
    recovery.behaviour("exit 0\n");
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    expect_recovery_failed(&row);
    assert!(recovery.journal_present());

    // A failing recovery installer.
    let recovery = Recovery::interrupted("installer-failed");
    recovery.behaviour("echo 'rollback failed' >&2\nexit 4\n");
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    expect_recovery_failed(&row);
}

#[test]
fn a_changed_or_unbound_journal_is_never_run() {
    let recovery = Recovery::interrupted("transaction-changed");
    let (exit, row) = recovery.run("activation-000000000000000000000000");
    assert_eq!(exit, Some(1));
    expect_recovery_failed(&row);
    assert_eq!(recovery.installer(), None);
    // The journal is refused before the credential is read, as in Python.
    assert!(recovery.token_file.exists());

    let recovery = Recovery::interrupted("intent-version");
    recovery.edit_row(|row| {
        row.insert("target_version", "1.1.1");
    });
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    expect_recovery_failed(&row);
    assert_eq!(recovery.installer(), None);

    let recovery = Recovery::interrupted("intent-missing");
    recovery.edit_row(|row| {
        row.remove("_activation_recovery");
    });
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    assert_eq!(
        field(&row, "error_code"),
        Json::from("server_update_recovery_failed")
    );
    assert_eq!(recovery.installer(), None);

    let recovery = Recovery::interrupted("handoff-changed");
    recovery.edit_row(|row| {
        row.insert("_execution_handoff", json_object! {"schema" => 1});
    });
    // The journal names no handoff, so a row handoff is not compared.
    let (exit, _) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(0));
}

#[test]
fn a_recovery_without_its_update_changes_nothing() {
    let recovery = Recovery::interrupted("not-owned");
    recovery.edit_row(|row| {
        row.insert("phase", "failed");
        row.insert("message", "Finalised by the server.");
    });
    let before = read_status_unlocked(&recovery.status).unwrap();
    let (exit, row) = recovery.run(&recovery.transaction);
    assert_eq!(exit, Some(1));
    assert_eq!(row, before);
    assert_eq!(recovery.installer(), None);
    assert!(recovery.journal_present());
}

#[test]
fn the_install_root_must_be_named() {
    let recovery = Recovery::interrupted("no-root");
    let output = Command::new(recovery.runtime.dir.join("update-runner"))
        .args([
            "--recover-only",
            "--recovery-transaction",
            &recovery.transaction,
        ])
        .arg("--status-file")
        .arg(&recovery.status)
        .args([
            "--public-key",
            "/absent.pem",
            "--port",
            "1",
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--expected-version",
            VERSION,
            "--expected-server-identity",
            IDENTITY,
        ])
        .args(["--update-id", UPDATE_ID])
        .env_remove("AGENTS_SERVER_INSTALL_DIR")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    expect_recovery_failed(&read_status_unlocked(&recovery.status).unwrap());
}

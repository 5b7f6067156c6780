//! `update-runner --recover-only` over a real format-3 activation journal
//! (written by the test stand-in for install.sh's journal writer), with the
//! durable `_activation_recovery` intent the runner recorded before the
//! interrupted install, a stand-in `install.sh` beside a copy of the binary
//! (the running release), and the AgentsServer health endpoint on 127.0.0.1.
//!
//! The seed cannot run here (its `update_recovery` imports modules outside
//! the seeds), so each row is checked against the texts of
//! `update_recovery.run_recovery` and `update_runner.main`.

mod update_runner_support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use agents_common::test_support::atomic_json;
use agents_common::{activation_intent, json_object, read_status_unlocked, Json, JsonObject};
use agents_tests::journal_writer::{Begin, Install, API_CONTRACT};
use update_runner_support::{updated_health, Reply, TestServer, IDENTITY};

const UPDATE_ID: &str = "fedcba9876543210fedcba9876543210";
const VERSION: &str = "1.1.0";

/// The stand-in of the running release's install.sh in recovery mode: it
/// records its invocation, runs the test's behaviour and, by default,
/// finalises the journal as a completed recovery would.
const RECOVERY_INSTALL_SH: &str = r#"#!/bin/bash
record="$H15_FIXTURE"
{
  printf 'cwd=%s\n' "$PWD"
  for argument in "$@"; do printf 'arg=%s\n' "$argument"; done
  if [ -n "${AGENTSDOCK_MANAGED_UPDATE_ID+x}" ]; then printf 'env AGENTSDOCK_MANAGED_UPDATE_ID=%s\n' "$AGENTSDOCK_MANAGED_UPDATE_ID"; fi
} > "$record/installer.record"
if [ -f "$record/behaviour.sh" ]; then . "$record/behaviour.sh"; fi
rm -rf "$AGENTS_SERVER_INSTALL_DIR/.activation-transaction"
touch "$record/installed"
exit 0
"#;

struct Recovery {
    install: Install,
    transaction: String,
    runtime: PathBuf,
    record: PathBuf,
    status: PathBuf,
    token_file: PathBuf,
    health: TestServer,
    _after: Arc<Mutex<JsonObject>>,
}

impl Recovery {
    /// An update of an installed split 1.0.0 to 1.1.0 interrupted after
    /// install.sh began its journal.
    fn interrupted(tag: &str) -> Recovery {
        let install = Install::new(&format!("runner-recovery-{tag}"));
        install.release("1.0.0");
        install.write_env("AGENTS_SERVER_PORT=7850\n");
        install.install_split("1.0.0");
        let candidate = install.staging(VERSION);
        let old = install.release_dir("1.0.0");
        let transaction = install.begin(&Begin {
            old: Some((old.clone(), old)),
            service_state: "running".into(),
            service_enabled: true,
            gateway_state: "running".into(),
            gateway_enabled: true,
            ..Begin::split(&candidate, VERSION)
        });
        let intent = activation_intent(
            &install.root(),
            &candidate,
            VERSION,
            i128::from(API_CONTRACT),
            UPDATE_ID,
            IDENTITY,
        )
        .unwrap();
        let runtime = install.base.join("runtime");
        let record = install.base.join("record");
        for directory in [&runtime, &record] {
            std::fs::create_dir_all(directory).unwrap();
        }
        let binary = runtime.join("update-runner");
        std::fs::copy(agents_tests::binary_path("update-runner"), &binary).unwrap();
        std::fs::write(runtime.join("install.sh"), RECOVERY_INSTALL_SH).unwrap();
        update_runner_support::make_executable(&runtime.join("install.sh"));
        update_runner_support::make_executable(&binary);
        let admin = install.state_root().join("admin");
        let status = admin.join("server-update.json");
        atomic_json(
            &status,
            &json_object! {
                "phase" => "restarting",
                "update_id" => UPDATE_ID,
                "track" => "stable",
                "target_version" => VERSION,
                "message" => "Resuming the interrupted server activation.",
                "runner_pid" => Json::Null,
                "heartbeat_at" => "2024-01-01T00:00:00Z",
                "_activation_recovery" => intent,
            },
        )
        .unwrap();
        let token_file = admin.join(format!(".server-recovery-{UPDATE_ID}-0123.auth.json"));
        atomic_json(&token_file, &json_object! {"token" => "recovery-token"}).unwrap();
        let after = Arc::new(Mutex::new(updated_health(
            VERSION,
            i128::from(API_CONTRACT),
        )));
        let served = after.clone();
        let installed = record.join("installed");
        let health = TestServer::start(move |request| {
            if request.header("Authorization") != Some("Bearer recovery-token") {
                return Reply::status(401, "Unauthorized");
            }
            let document = if installed.exists() {
                served.lock().unwrap().clone()
            } else {
                // The interrupted server is not answering as the new release.
                updated_health("1.0.0", i128::from(API_CONTRACT))
            };
            Reply::ok(
                &agents_common::test_support::encode_compact(&Json::Object(document)).unwrap(),
            )
        });
        Recovery {
            install,
            transaction,
            runtime,
            record,
            status,
            token_file,
            health,
            _after: after,
        }
    }

    fn behaviour(&self, script: &str) {
        std::fs::write(self.record.join("behaviour.sh"), script).unwrap();
    }

    fn edit_row(&self, edit: impl FnOnce(&mut JsonObject)) {
        let mut row = read_status_unlocked(&self.status).unwrap();
        edit(&mut row);
        atomic_json(&self.status, &row).unwrap();
    }

    fn run(&self, transaction: &str) -> (Option<i32>, JsonObject) {
        let output = Command::new(self.runtime.join("update-runner"))
            .args(["--recover-only", "--recovery-transaction", transaction])
            .arg("--status-file")
            .arg(&self.status)
            .arg("--public-key")
            .arg(self.runtime.join("absent.pem"))
            .args([
                "--port",
                &self.health.port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args(["--expected-version", VERSION, "--track", "stable"])
            .args([
                "--expected-server-identity",
                IDENTITY,
                "--update-id",
                UPDATE_ID,
            ])
            .arg("--auth-token-file")
            .arg(&self.token_file)
            .env("AGENTS_SERVER_INSTALL_DIR", self.install.root())
            .env("H15_FIXTURE", &self.record)
            .output()
            .unwrap();
        (
            output.status.code(),
            read_status_unlocked(&self.status).unwrap(),
        )
    }

    fn installer(&self) -> Option<Vec<String>> {
        std::fs::read_to_string(self.record.join("installer.record"))
            .ok()
            .map(|text| text.lines().map(str::to_string).collect())
    }

    fn journal_present(&self) -> bool {
        std::fs::symlink_metadata(self.install.root().join(".activation-transaction")).is_ok()
    }
}

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
        format!("cwd={}", recovery.runtime.display()),
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
    recovery.behaviour("rm -rf \"$AGENTS_SERVER_INSTALL_DIR/.activation-transaction\"\nexit 75\n");
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
    let output = Command::new(recovery.runtime.join("update-runner"))
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

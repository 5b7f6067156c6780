//! What `update-runner` leaves behind when an update fails: the failed row
//! only while it still owns the update, its own Team Hub fence cleared only
//! before install.sh ran (and the row kept active when that cannot be done
//! safely), a retained activation left for `--recover-only`, and the sealed
//! worker handoff's release reported retryably.
//!
//! Where the original can run the same path (its Hub and handoff modules are not
//! among the originals), the binary is compared with it side by side; the other
//! rows are checked against the texts of `update_runner.main`.

use crate::update_runner_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use python_compat::{
    json::{encode_compact_sorted, Json, JsonObject},
    json_object,
};
use update_runner_support::{idle_health, updated_health, Fixture, Side, IDENTITY, UPDATE_ID};

const SNAPSHOT: &str = "snapshot_00000001700000000000000000_0123456789abcdef";
const HUB_ID: &str = "hub_0123456789";

fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

fn pinned(name: &str) -> Fixture {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    fixture
}

fn busy(fixture: &Fixture) {
    let mut busy = idle_health();
    busy.insert("active_count", 2);
    fixture.set_health(busy, updated_health("1.2.3", 28));
}

const BUSY: &str =
    "server became busy before restart: 2 active agent runs; retry the update after work finishes";

/// A Hub data directory holding the server's fence for `operation_id`.
fn hub_with_fence(fixture: &Fixture, operation_id: &str) -> PathBuf {
    let data = fixture.root.path().join("team-hub");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let marker = json_object! {
        "format" => 1,
        "reason" => "server-update",
        "operation_id" => operation_id,
        "hub_id" => HUB_ID,
        "host_server_identity" => IDENTITY,
        "snapshot" => SNAPSHOT,
        "created_at" => "2024-01-01T00:00:00Z",
    };
    let path = data.join("maintenance-fence.json");
    std::fs::write(&path, encode_compact_sorted(&Json::Object(marker))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    data
}

fn hub_options(data: &Path) -> Vec<String> {
    vec![
        "--expected-team-hub-id".into(),
        HUB_ID.into(),
        "--team-hub-snapshot".into(),
        data.join("maintenance-backups")
            .join(SNAPSHOT)
            .to_string_lossy()
            .into_owned(),
        "--team-hub-data-dir".into(),
        data.to_string_lossy().into_owned(),
        "--expected-team-hub-transport".into(),
        "loopback".into(),
        "--expected-team-hub-url".into(),
        "".into(),
        "--expected-team-hub-direct-ip-url".into(),
        "".into(),
    ]
}

#[test]
fn a_failure_before_the_installer_clears_the_exact_hub_fence() {
    let mut fixture = pinned("hub-clear");
    busy(&fixture);
    let data = hub_with_fence(&fixture, UPDATE_ID);
    fixture.options.extend(hub_options(&data));
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(field(&outcome.row, "phase"), Json::from("failed"));
    assert_eq!(field(&outcome.row, "message"), Json::from(BUSY));
    assert!(
        !data.join("maintenance-fence.json").exists(),
        "the fence is cleared"
    );
    assert!(outcome.leftovers.is_empty());
}

#[test]
fn an_unclearable_hub_fence_keeps_the_update_active() {
    // Another update's fence is never touched, and the row stays active.
    let mut fixture = pinned("hub-foreign");
    busy(&fixture);
    let data = hub_with_fence(&fixture, "another-operation");
    fixture.options.extend(hub_options(&data));
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(field(&outcome.row, "phase"), Json::from("verifying"));
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("Waiting for AgentsServer startup before checking installation safety.")
    );
    assert!(data.join("maintenance-fence.json").exists());

    // A pending snapshot restore is left to the Hub (fail closed).
    let mut fixture = pinned("hub-restore");
    busy(&fixture);
    let data = hub_with_fence(&fixture, UPDATE_ID);
    std::fs::write(data.join(".restore-transaction.json"), b"{}").unwrap();
    fixture.options.extend(hub_options(&data));
    let outcome = fixture.run(Side::Port);
    assert_eq!(field(&outcome.row, "phase"), Json::from("verifying"));
    assert!(data.join("maintenance-fence.json").exists());
}

#[test]
fn once_the_installer_ran_only_it_may_clear_the_hub_fence() {
    let mut fixture = pinned("hub-installing");
    let data = hub_with_fence(&fixture, UPDATE_ID);
    fixture.options.extend(hub_options(&data));
    fixture.behaviour = Some("exit 3\n".into());
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    // The fence is still there, so install.sh's rollback owns the update.
    assert_eq!(field(&outcome.row, "phase"), Json::from("installing"));
    assert!(data.join("maintenance-fence.json").exists());
    let installer = outcome.installer.expect("install.sh ran");
    let snapshot = data.join("maintenance-backups").join(SNAPSHOT);
    for expected in [
        "arg=--expected-team-hub-id".to_string(),
        format!("arg={HUB_ID}"),
        format!("arg={}", snapshot.display()),
        "arg=--team-hub-operation-id".to_string(),
        "arg=--expected-team-hub-transport".to_string(),
        "arg=loopback".to_string(),
        "arg=--expected-team-hub-direct-ip-url".to_string(),
    ] {
        assert!(installer.contains(&expected), "{expected} in {installer:?}");
    }

    // Without a fence left (install.sh restored and cleared it), the
    // failure is published.
    let mut fixture = pinned("hub-installed");
    let data = hub_with_fence(&fixture, UPDATE_ID);
    fixture.options.extend(hub_options(&data));
    fixture.behaviour = Some(format!(
        "rm -f '{}'\nexit 3\n",
        data.join("maintenance-fence.json").display()
    ));
    let outcome = fixture.run(Side::Port);
    assert_eq!(field(&outcome.row, "phase"), Json::from("failed"));
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("installer failed (3): no output; inspect server-update.log")
    );
}

#[test]
fn incomplete_hub_arguments_keep_the_row_like_the_original() {
    let originals = agents_tests::require_originals!();
    let mut fixture = pinned("hub-incomplete");
    fixture
        .options
        .extend(["--expected-team-hub-id".into(), HUB_ID.into()]);
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(port.exit, Some(1));
    // run_update refused, then the fence clear refused: nothing is published.
    assert_eq!(field(&port.row, "phase"), Json::from("starting"));
    assert_eq!(port.row, fixture.admitted);
}

#[test]
fn invalid_identities_are_refused_like_the_original() {
    let originals = agents_tests::require_originals!();
    // A blank server identity: this update's row is failed.
    let mut fixture = pinned("identity-blank");
    fixture
        .options
        .extend(["--expected-server-identity".into(), " ".into()]);
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(
        field(&port.row, "message"),
        Json::from("managed update is missing the stable server identity")
    );
    assert_eq!(field(&port.row, "phase"), Json::from("failed"));

    // An invalid update id cannot own any row: nothing is written.
    let mut fixture = pinned("update-id");
    fixture
        .options
        .extend(["--update-id".into(), "-bad".into()]);
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(field(&port.row, "phase"), Json::from("starting"));

    let mut fixture = pinned("cgroup");
    fixture
        .options
        .extend(["--expected-service-cgroup".into(), "relative/cgroup".into()]);
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(
        field(&port.row, "message"),
        Json::from("managed update has an invalid service cgroup")
    );

    let mut fixture = pinned("superseded");
    fixture
        .admitted
        .insert("update_id", "ffffffffffffffffffffffffffffffff");
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(field(&port.row, "phase"), Json::from("starting"));
    assert_eq!(port.installer, None);
}

#[test]
fn team_hub_transport_refusals_match_the_original() {
    let originals = agents_tests::require_originals!();
    for (options, message) in [
        (
            vec!["--expected-team-hub-transport", "loopback"],
            "managed Team Hub transport arguments require a Hub identity",
        ),
        (
            vec![
                "--repair-failed-team-hub-host",
                "--expected-team-hub-transport",
                "loopback",
            ],
            "failed Team Hub repair requires exact transport continuity arguments",
        ),
    ] {
        let mut fixture = pinned("hub-transport");
        fixture
            .options
            .extend(options.iter().map(|word| word.to_string()));
        let (_, port) = fixture.compare(&originals, None);
        assert_eq!(field(&port.row, "message"), Json::from(message));
        assert_eq!(field(&port.row, "phase"), Json::from("failed"));
    }
}

#[test]
fn a_retained_activation_is_left_for_recovery() {
    let mut fixture = pinned("recovery-pending");
    let install = fixture.root.path().join("install");
    std::fs::create_dir_all(install.join(".activation-transaction")).unwrap();
    fixture
        .admitted
        .insert("_activation_recovery", json_object! {"format" => 1});
    fixture.environment = vec![(
        "AGENTS_SERVER_INSTALL_DIR".into(),
        install.to_string_lossy().into_owned(),
    )];
    fixture.behaviour = Some("exit 3\n".into());
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    let row = &outcome.row;
    assert_eq!(field(row, "phase"), Json::from("installing"));
    assert_eq!(
        field(row, "error_code"),
        Json::from("server_update_recovery_pending")
    );
    assert_eq!(
        field(row, "message"),
        Json::from("The installer was interrupted. Its retained activation will be recovered.")
    );
    assert_eq!(field(row, "retryable"), Json::Bool(true));
    assert_eq!(field(row, "runner_pid"), Json::Null);
    assert_eq!(field(row, "heartbeat_at"), Json::Null);
    assert_eq!(field(row, "finished_at"), Json::Null);

    // Without a journal the failure is published as usual.
    std::fs::remove_dir(install.join(".activation-transaction")).unwrap();
    let outcome = fixture.run(Side::Port);
    assert_eq!(field(&outcome.row, "phase"), Json::from("failed"));
}

#[test]
fn an_unreleasable_handoff_is_reported_retryably() {
    let mut fixture = pinned("handoff");
    busy(&fixture);
    let handoff = fixture.root.path().join("handoff.json");
    fixture.options.extend([
        "--execution-handoff-file".into(),
        handoff.to_string_lossy().into_owned(),
    ]);
    // No installation to prove the worker against: the release must fail.
    fixture.environment = vec![(
        "AGENTS_SERVER_INSTALL_DIR".into(),
        fixture
            .root
            .path()
            .join("missing-install")
            .to_string_lossy()
            .into_owned(),
    )];
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    let row = &outcome.row;
    assert_eq!(field(row, "phase"), Json::from("failed"));
    assert_eq!(
        field(row, "message"),
        Json::from("The update failed and its execution hold could not be released safely.")
    );
    assert_eq!(
        field(row, "error_code"),
        Json::from("server_update_handoff_release_failed")
    );
    assert_eq!(
        field(row, "error_action"),
        Json::from("Retry the update to finish releasing its execution hold.")
    );
    assert_eq!(field(row, "retryable"), Json::Bool(true));
    assert_eq!(field(row, "runner_pid"), Json::Null);
    assert_eq!(field(row, "finished_at"), Json::from("<time>"));
    // update_handoff reads the row as a private file.
    let status = fixture
        .run_dir(Side::Port)
        .join("state/admin/server-update.json");
    let mode = std::fs::metadata(&status).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Regression (issue 16): a runner killed at the `fsync` of a temporary of
/// the status row (`.server-update.json.<random>.tmp`, written but not yet
/// renamed) left that temporary beside the row forever, as the original
/// does. The next writer of the row, holding the status lock, removes it.
#[test]
fn the_next_runner_removes_a_row_temporary_of_a_runner_killed_at_its_fsync() {
    let mut fixture = pinned("killed-at-row-fsync");
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    let injection = agents_tests::crash_points::Injection {
        inherit_environment: true,
        ..agents_tests::crash_points::helper_injection()
    };
    let complete =
        agents_tests::crash_points::run_traced(&fixture.command(Side::Port), &injection, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let kill_at = complete
        .calls
        .iter()
        .find(|call| call.is("fsync", "/.server-update.json."))
        .expect("a row temporary's fsync")
        .number;

    let killed = agents_tests::crash_points::run_traced(
        &fixture.command(Side::Port),
        &injection,
        Some(kill_at),
    );

    let call = killed.killed.expect("the runner was killed");
    assert!(call.is("fsync", "/.server-update.json."), "{call}");
    let admin = fixture.run_dir(Side::Port).join("state/admin");
    let temporaries = || -> Vec<String> {
        std::fs::read_dir(&admin)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".server-update.json.") && name.ends_with(".tmp"))
            .collect()
    };
    assert_eq!(
        temporaries().len(),
        1,
        "the killed write's temporary is left"
    );
    // The server admits the update again; the next runner completes it.
    let mut retry = fixture.admitted.clone();
    retry.insert("update_id", "fedcba9876543210fedcba9876543210");
    let _ = std::fs::remove_file(fixture.run_dir(Side::Port).join("installer/installed"));
    fixture.admit(Side::Port, &retry, "fedcba9876543210fedcba9876543210");
    let output = fixture
        .runner(Side::Port, "fedcba9876543210fedcba9876543210")
        .output()
        .unwrap();
    let outcome = fixture.outcome(Side::Port, &output);
    assert_eq!(outcome.exit, Some(0), "{outcome:?}");
    assert_eq!(field(&outcome.row, "phase"), Json::from("complete"));
    assert_eq!(temporaries(), Vec::<String>::new(), "no temporary is left");
}

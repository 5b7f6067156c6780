//! `execution-manage doctor` on managed updates gone wrong, produced with
//! the real `update-runner` against a real split installation under a real
//! `systemd --user` manager and a signed release host on loopback: a failed
//! update whose sealed handoff could not be released, and a row stuck at
//! `installing` whose runner died. Each test checks the status words and
//! the plan, then follows the plan mechanically (step 1 exactly as printed,
//! doctor again) until doctor exits 0; every doctor run,
//! including one while the runner installs, must leave the installation
//! exactly as it was.

use crate::doctor_support;
use crate::execution_manage_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use agents_common::{read_status_unlocked, NativeServices, SystemCommandRunner, WorkerControl};
use agents_tests::server_status::write_row;
use agents_tests::{
    binary_path, descendants, poll_until, ProcessIdentity, ReleaseFile, ReleaseHost, RequestMatch,
    Role, Stall, Switches, AGENT_TOKEN,
};
use doctor_support::{at_once, doctor_finding_state as doctor, follow_plan, helper, text};
use execution_manage_support::{finish, Site, HELPER_TIMEOUT, OLD};
use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object,
};

/// The server's update id (`uuid4().hex`) and its handoff operation.
const UPDATE_ID: &str = "d0c70d0c70d04d0c8d0c70d0c70d0c70";
const OPERATION: &str = "d0c70d0c-70d0-4d0c-8d0c-70d0c70d0c70";
/// The release the update asks for.
const TARGET: &str = "1.1.0";
/// `update_runner.main`'s report of a hold it could not release.
const NOT_RELEASED: &str = "The update failed and its execution hold could not be released safely.";

fn status_path(site: &Site) -> PathBuf {
    site.installation
        .state_root
        .join("admin/server-update.json")
}

fn row(site: &Site) -> JsonObject {
    read_status_unlocked(&status_path(site)).unwrap()
}

fn private_dir(path: &Path) {
    fs::create_dir_all(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).unwrap();
}

/// The server's part before it launches a runner for a split worker: seal
/// the running worker's admission for the update's operation and write the
/// handoff (`.update-preparations/<id>/handoff-<id>.json`). Returns it.
fn seal_handoff(site: &Site) -> (PathBuf, JsonObject) {
    let layout = site.layout(OLD, OLD);
    let serving = site.assert_serving(&layout);
    let runner = SystemCommandRunner::default().with_environment(site.sandbox.env());
    let native = NativeServices::with_runner(&layout, Box::new(runner));
    let hold = WorkerControl::new()
        .services(&native)
        .seal_for_stop(&layout, OPERATION, i64::from(serving.worker_pid))
        .expect("the worker seals for the update");
    let field = |object: &JsonObject, key: &str| object.get(key).cloned().unwrap_or(Json::Null);
    let handoff = json_object! {
        "schema" => 1,
        "operation_id" => OPERATION,
        "worker_instance_id" => field(&hold.record, "instance_id"),
        "lease_id" => field(&hold.lease, "lease_id"),
        "expected_server_identity" => site.server_identity(),
    };
    let preparations = site.installation.install_root.join(".update-preparations");
    private_dir(&preparations);
    private_dir(&preparations.join(UPDATE_ID));
    let path = preparations
        .join(UPDATE_ID)
        .join(format!("handoff-{UPDATE_ID}.json"));
    fs::write(&path, encode_indented(&Json::Object(handoff.clone()))).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    (path, handoff)
}

/// The server's fresh `starting` row and the runner's one-time credential.
fn admit(site: &Site, handoff: Option<&JsonObject>) -> PathBuf {
    let mut admitted = json_object! {
        "phase" => "starting",
        "update_id" => UPDATE_ID,
        "track" => "stable",
        "current_track" => "stable",
        "target_version" => TARGET,
        "latest_version" => TARGET,
        "update_available" => true,
        "message" => "Starting the AgentsServer update.",
        "runner_pid" => Json::Null,
        "started_at" => agents_common::utc_now(),
        "finished_at" => Json::Null,
    };
    if let Some(handoff) = handoff {
        admitted.insert("_execution_handoff", handoff.clone());
    }
    private_dir(&site.installation.state_root.join("admin"));
    write_row(&status_path(site), &admitted).unwrap();
    let token = site
        .installation
        .state_root
        .join(format!("admin/.server-update-{UPDATE_ID}.auth.json"));
    write_row(&token, &json_object! {"token" => AGENT_TOKEN}).unwrap();
    token
}

/// A managed update of the running [`OLD`] pair to [`TARGET`], as the
/// server starts it: a signed release host and the runner's own
/// temporary directory.
struct Update {
    site: Site,
    releases: ReleaseHost,
    /// The runner's `TMPDIR`.
    tmp: PathBuf,
}

impl Update {
    /// `None` where no sandbox can run (the test skips).
    fn start(test: &str) -> Option<Update> {
        let site = Site::running(test)?;
        let releases = ReleaseHost::start(site.sandbox.base());
        let tmp = site.sandbox.base().join("runner-tmp");
        fs::create_dir(&tmp).unwrap();
        Some(Update {
            site,
            releases,
            tmp,
        })
    }

    /// `update-runner` with the server's argv for this update.
    fn runner(&self, token: &Path, handoff: Option<&Path>) -> Command {
        let (site, releases) = (&self.site, &self.releases);
        let mut command = site.sandbox.command(binary_path("update-runner"));
        command
            .arg("--status-file")
            .arg(status_path(site))
            .arg("--public-key")
            .arg(releases.public_key_path())
            .args(["--port", &site.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--expected-version", TARGET, "--current-version", OLD])
            .args(["--track", "stable", "--update-id", UPDATE_ID])
            .args(["--expected-server-identity", &site.server_identity()])
            .arg("--auth-token-file")
            .arg(token);
        if let Some(handoff) = handoff {
            command.arg("--execution-handoff-file").arg(handoff);
        }
        command
            .env("AGENTS_SERVER_INSTALL_DIR", &site.installation.install_root)
            .env("AGENTS_SERVER_CONFIG_DIR", &site.installation.config_root)
            .env("AGENTS_SERVER_STATE_DIR", &site.installation.state_root)
            .env("AGENTS_SERVER_RELEASE_BASE", releases.release_base())
            .env(
                "AGENTS_SERVER_RELEASES_API_URL",
                releases.releases_api_url(),
            )
            .env("TMPDIR", &self.tmp)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// Switches under which the worker refuses the runner's release of its
/// hold, after holding back that reply for `seconds`.
fn refusing_a_late_release(seconds: f64) -> Switches {
    Switches {
        refuse: vec!["release".to_string()],
        stall: Some(Stall {
            on: RequestMatch::maintenance("release"),
            seconds,
        }),
        ..Switches::default()
    }
}

/// Doctor while the runner holds the install lock, waiting for the worker's
/// release reply: everything in progress, and step 1 waits for the runner.
fn assert_doctor_waits_for_the_runner(site: &Site, runner_pid: u32) {
    let during = doctor(site);
    during.assert_attention(&[
        ("install_lock", "in progress"),
        ("update_preparations", "in progress"),
        ("update_status", "in progress"),
    ]);
    assert_eq!(
        during.found("install_lock", "owner_pid"),
        Json::from(runner_pid)
    );
    let waits_for = during.step(1).get("waits_for").cloned().unwrap();
    assert_eq!(waits_for.get("pid"), Some(&Json::from(runner_pid)));
    assert_eq!(waits_for.get("program"), Some(&Json::from("update-runner")));
    during.assert_plan(&[(
        "wait",
        &["update_preparations", "update_status", "install_lock"],
    )]);
}

/// Doctor once the runner failed and left the worker holding the sealed
/// handoff: the preparation and the status are stuck, resolved by one
/// `update-handoff release` command (returned); the services are healthy
/// and still held for the update's operation.
fn assert_doctor_prescribes_the_handoff_release(site: &Site, handoff_file: &Path) -> String {
    let report = doctor(site);
    report.assert_attention(&[("update_preparations", "stuck"), ("update_status", "stuck")]);
    let command = format!(
        "{} release --root {} --handoff-file {}",
        helper("update-handoff"),
        site.installation.install_root.display(),
        handoff_file.display()
    );
    assert_eq!(report.command("update_preparations"), command);
    report.assert_plan(&[("command", &["update_preparations", "update_status"])]);
    assert_eq!(report.action_kind("update_status"), "resolved-by");
    assert_eq!(
        report.found("update_status", "error_code"),
        Json::from("server_update_handoff_release_failed")
    );
    assert_eq!(report.status("services"), "healthy");
    assert_eq!(
        report.found("services", "lease").get("operation_id"),
        Some(&Json::from(OPERATION))
    );
    let preparation = report.found("update_preparations", "preparations");
    assert_eq!(
        preparation
            .as_array()
            .and_then(|items| items.first())
            .and_then(|item| item.get("id")),
        Some(&Json::from(UPDATE_ID))
    );
    command
}

#[test]
fn a_failed_update_with_a_sealed_handoff_is_released_by_the_suggested_command() {
    let Some(update) = Update::start("doctor_failed_handoff") else {
        return;
    };
    let site = &update.site;
    let (handoff_file, handoff) = seal_handoff(site);
    let token = admit(site, Some(&handoff));
    // The release is not published: the update fails before the installer,
    // and the worker refuses the runner's release of its hold, after
    // holding back that reply for a moment (well inside the runner's 5 s
    // request timeout), while the runner holds the install lock.
    let mark = site.request_mark(Role::Worker);
    site.switch(Role::Worker, refusing_a_late_release(4.0));
    let child = update.runner(&token, Some(&handoff_file)).spawn().unwrap();
    let runner_pid = child.id();
    let release = RequestMatch::maintenance("release");
    site.wait_for_request(Role::Worker, mark, "the runner's release", |record| {
        release.matches(&record.path, record.action.as_deref()) && record.outcome == "stalled"
    });
    assert_doctor_waits_for_the_runner(site, runner_pid);
    let outcome = finish(child);
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    site.switch(Role::Worker, Switches::default());
    let failed = row(site);
    assert_eq!(failed.get("phase"), Some(&Json::from("failed")));
    assert_eq!(failed.get("message"), Some(&Json::from(NOT_RELEASED)));
    assert_eq!(
        site.worker_lease().get("operation_id"),
        Some(&Json::from(OPERATION))
    );

    let command = assert_doctor_prescribes_the_handoff_release(site, &handoff_file);
    let followed = follow_plan(site, doctor, &at_once, 1);
    assert_eq!(followed.commands[0].0, command);
    assert!(followed.commands[0].1.stdout.contains(&format!(
        "\"operation_id\": \"{OPERATION}\", \"released\": true"
    )));
    assert!(site.worker_lease().is_null());

    let after = followed.last;
    after.assert_attention(&[]);
    assert_eq!(after.status("update_status"), "healthy");
    assert!(text(after.concern("update_status").get("summary")).contains("released"));
    // The row stays the server's: the release changes nothing in it.
    assert_eq!(row(site), failed);
}

/// Publishes [`TARGET`] with an installer that never finishes on its own.
fn publish_an_endless_installer(releases: &ReleaseHost) {
    let version = format!("{TARGET}\n");
    let file = |name, data, mode| ReleaseFile { name, data, mode };
    releases.publish(
        TARGET,
        &[
            file("install.sh", b"#!/bin/sh\nexec sleep 120\n", 0o755),
            file("VERSION", version.as_bytes(), 0o644),
            file("agent_server.py", b"API_CONTRACT_VERSION = 1\n", 0o644),
            file("execution_service.py", b"# stand-in\n", 0o644),
        ],
    );
}

/// An idle server, as the runner proves before it installs, whose update
/// status read finalizes an abandoned row at once.
fn idle_server_finalizing_at_once() -> Switches {
    Switches {
        health_extra: json_object! {
            "active_count" => 0,
            "update_blocking_queued_count" => 0,
            "update_service_cgroup" => json_object! {
                "safe" => true,
                "unknown_descendant_count" => 0,
                "inspection" => "verified",
            },
        },
        update_grace_seconds: Some(0.0),
        ..Switches::default()
    }
}

/// Waits until the runner reports `installing` and has started the
/// installer; returns the installer. Panics if the runner exits first.
fn wait_for_the_installer(site: &Site, runner: &mut Child) -> ProcessIdentity {
    let runner_pid = runner.id();
    poll_until(HELPER_TIMEOUT, "the installer to run", || {
        if let Ok(Some(status)) = runner.try_wait() {
            panic!("the runner exited early ({status}): {:?}", row(site));
        }
        let installing = row(site).get("phase") == Some(&Json::from("installing"));
        let installer = descendants(runner_pid).into_iter().next()?;
        installing.then_some(installer)
    })
}

/// Kills the runner, then the installer's process group, and waits until
/// the installer is gone.
fn kill_the_runner_and_its_installer(mut runner: Child, installer: &ProcessIdentity) {
    runner.kill().unwrap();
    runner.wait().unwrap();
    if let Some(group) = rustix::process::Pid::from_raw(installer.pid as i32) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    poll_until(HELPER_TIMEOUT, "the installer to die", || {
        (!installer.is_alive()).then_some(())
    });
}

#[test]
fn a_row_stuck_at_installing_whose_runner_died_is_finalized_by_the_server() {
    let Some(update) = Update::start("doctor_stuck_installing") else {
        return;
    };
    let site = &update.site;
    publish_an_endless_installer(&update.releases);
    site.switch(Role::Worker, idle_server_finalizing_at_once());
    site.switch(Role::Gateway, idle_server_finalizing_at_once());
    let token = admit(site, None);
    let mut child = update.runner(&token, None).spawn().unwrap();
    let runner_pid = child.id();
    let installer = wait_for_the_installer(site, &mut child);

    // While the runner installs, it is in progress.
    let during = doctor(site);
    during.assert_attention(&[("update_status", "in progress")]);
    assert_eq!(
        during.found("update_status", "runner_pid"),
        Json::from(runner_pid)
    );
    assert_eq!(
        during.found("update_status", "runner"),
        Json::from("alive, the expected runner")
    );
    during.assert_plan(&[("wait", &["update_status"])]);

    // The runner and its installer die: the row stays `installing`.
    kill_the_runner_and_its_installer(child, &installer);
    assert_eq!(row(site).get("phase"), Some(&Json::from("installing")));

    let report = doctor(site);
    report.assert_attention(&[("update_status", "stuck")]);
    assert_eq!(
        report.found("update_status", "runner"),
        Json::from("exited")
    );
    assert_eq!(
        report.command("update_status"),
        format!(
            "curl -fsS -H \"X-AgentsDock-Token: $AGENTSDOCK_AGENT_TOKEN\" \
             http://127.0.0.1:{}/api/admin/update",
            site.port
        )
    );

    report.assert_plan(&[("command", &["update_status"])]);
    follow_plan(site, doctor, &at_once, 1);
    let finalized = row(site);
    assert_eq!(finalized.get("phase"), Some(&Json::from("failed")));
    assert_eq!(finalized.get("runner_pid"), Some(&Json::Null));
    site.switch(Role::Worker, Switches::default());
    site.switch(Role::Gateway, Switches::default());
}

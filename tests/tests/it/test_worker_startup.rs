//! The test worker's startup: the hold it derives from pending lifecycle
//! files, the refusals that stop it, and its clean shutdown. The worker runs
//! directly with the unit's command line and environment (no systemd needed).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use agents_common::{maintenance_operation_id, write_uninstall_intent, ExecutionLayout};
use execution_manage::ExecutionTransaction;
use python_compat::{json::Json, json_object};

use agents_tests::journal_writer::{Begin, Roots};
use agents_tests::{free_port, DirectService, HttpRequest, Installation, Role};

fn both_running() -> Json {
    Json::Object(json_object! {
        "worker" => Json::Object(json_object! {"state" => "running", "enabled" => true}),
        "gateway" => Json::Object(json_object! {"state" => "running", "enabled" => true}),
    })
}

/// An installed split layout on release 1.0.0 (nothing running).
fn installed() -> (Installation, ExecutionLayout) {
    let installation = Installation::in_temp();
    let release = installation.add_release("1.0.0");
    let layout = installation.layout(&release, &release, free_port());
    installation.install_split(&layout);
    (installation, layout)
}

/// Starts the worker and returns it with the lease its status reports.
fn start_worker(installation: &Installation, layout: &ExecutionLayout) -> (DirectService, Json) {
    let worker = DirectService::spawn(installation.service_command(layout, Role::Worker));
    let pid = Json::from(worker.pid());
    let receipt = installation.wait_for_receipt(Role::Worker, "of the spawned worker", |receipt| {
        receipt.get("pid") == Some(&pid)
    });
    let callback =
        agents_tests::origin_address(receipt.get("callback_origin").unwrap().as_str().unwrap())
            .unwrap();
    let status = HttpRequest::get("/api/admin/execution/status")
        .bearer(&installation.control_token())
        .send(callback)
        .unwrap()
        .json();
    (worker, status.get("lease").unwrap().clone())
}

/// Runs the worker to its exit and returns (status code, stderr).
fn failed_start(installation: &Installation, layout: &ExecutionLayout) -> (Option<i32>, String) {
    let output = installation
        .service_command(layout, Role::Worker)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn write_intent(layout: &ExecutionLayout, operation: &str) {
    write_uninstall_intent(
        &layout.install_root,
        layout,
        operation,
        false,
        "test-identity",
    )
    .unwrap();
}

/// install.sh's `activation_transaction begin` (the shared stand-in) for
/// release `version` staged in `releases/.staging-<version>-4242`, then its
/// link step (the staging directory renamed to `releases/<version>`).
/// Returns the candidate release and the journal's execution operation.
fn begin_activation(
    installation: &Installation,
    layout: &ExecutionLayout,
    version: &str,
    execution: bool,
) -> (PathBuf, Option<String>) {
    let roots = Roots {
        platform: layout.platform.supported().unwrap(),
        port: layout.public_port().unwrap(),
        root: installation.install_root.clone(),
        config_root: installation.config_root.clone(),
        state_root: installation.state_root.clone(),
        home: installation.home.clone(),
    };
    let staging = installation.add_release(&format!(".staging-{version}-4242"));
    fs::write(staging.join("VERSION"), format!("{version}\n")).unwrap();
    // `current` points at the installed release: that is the rollback release.
    let current = fs::read_link(installation.install_root.join("current")).unwrap();
    roots.begin(&Begin {
        execution,
        old: Some((current.clone(), current)),
        ..Begin::split(&staging, version)
    });
    let candidate = installation.release_dir(version);
    fs::rename(&staging, &candidate).unwrap();
    let manifest = roots.manifest();
    let operation = manifest
        .get("execution")
        .and_then(|execution| execution.get("operation_id"))
        .and_then(Json::as_str)
        .map(str::to_string);
    (candidate, operation)
}

#[test]
fn an_idle_install_starts_unheld_and_sigterm_removes_the_receipt() {
    let (installation, layout) = installed();
    let (mut worker, lease) = start_worker(&installation, &layout);
    assert_eq!(lease, Json::Null);
    let status = worker.terminate();
    assert_eq!(status.code(), Some(0));
    assert!(installation.receipt(Role::Worker).is_none());
}

#[test]
fn sigterm_keeps_a_receipt_that_names_another_instance() {
    let (installation, layout) = installed();
    let (mut worker, _) = start_worker(&installation, &layout);
    let path = installation.runtime_dir().join("worker.json");
    let foreign = fs::read_to_string(&path)
        .unwrap()
        .replace("\"instance_id\": \"", "\"instance_id\": \"f");
    fs::write(&path, &foreign).unwrap();
    assert_eq!(worker.terminate().code(), Some(0));
    assert_eq!(fs::read_to_string(&path).unwrap(), foreign);
}

#[test]
fn an_uninstall_intent_holds_the_pinned_worker() {
    let (installation, layout) = installed();
    let operation = "0f0e0d0c-0b0a-4908-8706-050403020100";
    write_intent(&layout, operation);
    let (_worker, lease) = start_worker(&installation, &layout);
    assert_eq!(lease.get("operation_id"), Some(&Json::from(operation)));
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)));

    // A worker generation the installed layout does not pin is refused.
    drop(_worker);
    let mut other = layout.clone();
    other.worker_release = installation.add_release("2.0.0");
    let (code, stderr) = failed_start(&installation, &other);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("worker is not retained by the pending uninstall"),
        "{stderr}"
    );
}

#[test]
fn an_outer_execution_activation_holds_its_candidate_and_the_prior_worker() {
    let (installation, layout) = installed();
    let (release, operation) = begin_activation(&installation, &layout, "2.0.0", true);
    let operation = operation.unwrap();
    let mut candidate = layout.clone();
    candidate.worker_release = release;
    for generation in [&layout, &candidate] {
        let (worker, lease) = start_worker(&installation, generation);
        assert_eq!(
            lease.get("operation_id"),
            Some(&Json::from(operation.as_str())),
            "{generation:?}"
        );
        drop(worker);
    }
    let mut stranger = layout.clone();
    stranger.worker_release = installation.add_release("3.0.0");
    let (code, stderr) = failed_start(&installation, &stranger);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("worker runtime is not retained by the pending activation"),
        "{stderr}"
    );
}

#[test]
fn a_legacy_outer_activation_holds_nothing() {
    let (installation, layout) = installed();
    assert_eq!(
        begin_activation(&installation, &layout, "2.0.0", false).1,
        None
    );
    let (_worker, lease) = start_worker(&installation, &layout);
    assert_eq!(lease, Json::Null);
}

#[test]
fn a_pending_worker_journal_holds_both_generations_only() {
    let (installation, layout) = installed();
    let mut next = layout.clone();
    next.worker_release = installation.add_release("2.0.0");
    let journal = ExecutionTransaction::stage(&next, "worker", &both_running(), None).unwrap();
    let operation = maintenance_operation_id(&journal).unwrap();
    for generation in [&layout, &next] {
        let (worker, lease) = start_worker(&installation, generation);
        assert_eq!(
            lease.get("operation_id"),
            Some(&Json::from(operation.as_str())),
            "{generation:?}"
        );
        drop(worker);
    }
    let mut stranger = layout.clone();
    stranger.worker_release = installation.add_release("3.0.0");
    let (code, stderr) = failed_start(&installation, &stranger);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("worker runtime is outside the pending activation generations"),
        "{stderr}"
    );
}

#[test]
fn a_pending_gateway_journal_holds_nothing() {
    let (installation, layout) = installed();
    let mut next = layout.clone();
    next.gateway_release = installation.add_release("2.0.0");
    // A gateway activation while the worker is stopped (no identity needed).
    let prior = Json::Object(json_object! {
        "worker" => Json::Object(json_object! {"state" => "stopped", "enabled" => true}),
        "gateway" => Json::Object(json_object! {"state" => "running", "enabled" => true}),
    });
    ExecutionTransaction::stage(&next, "gateway", &prior, None).unwrap();
    let (_worker, lease) = start_worker(&installation, &layout);
    assert_eq!(lease, Json::Null);
}

#[test]
fn conflicting_claims_stop_the_worker() {
    let (installation, layout) = installed();
    let root = &installation.install_root;
    write_intent(&layout, "0f0e0d0c-0b0a-4908-8706-050403020100");
    fs::DirBuilder::new()
        .mode(0o700)
        .create(root.join(".execution-transaction"))
        .unwrap();
    let (code, stderr) = failed_start(&installation, &layout);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("activation and uninstall both claim execution ownership"),
        "{stderr}"
    );

    fs::remove_file(root.join(".execution-uninstall.json")).unwrap();
    fs::remove_dir(root.join(".execution-transaction")).unwrap();
    begin_activation(&installation, &layout, "2.0.0", true)
        .1
        .unwrap();
    fs::DirBuilder::new()
        .mode(0o700)
        .create(root.join(".execution-transaction"))
        .unwrap();
    let (code, stderr) = failed_start(&installation, &layout);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("two activation journals claim execution ownership"),
        "{stderr}"
    );
    assert!(
        installation.receipt(Role::Worker).is_none(),
        "a refused worker publishes nothing"
    );
    let errors = installation.startup_errors(Role::Worker);
    assert_eq!(errors.lines().count(), 2, "{errors}");
    assert!(errors
        .lines()
        .last()
        .unwrap()
        .ends_with("exit 1: RuntimeError: two activation journals claim execution ownership"));
}

#[test]
fn a_journal_whose_planned_unit_is_not_the_layouts_stops_the_worker() {
    let (installation, layout) = installed();
    let mut next = layout.clone();
    next.worker_release = installation.add_release("2.0.0");
    ExecutionTransaction::stage(&next, "worker", &both_running(), None).unwrap();
    let manifest = installation
        .install_root
        .join(".execution-transaction/manifest.json");
    // The planned worker unit's digest is not the layout's rendering.
    let text = fs::read_to_string(&manifest).unwrap();
    let mut journal = python_compat::json::parse_json(text.as_bytes()).unwrap();
    let planned = journal
        .get("after")
        .and_then(|after| after.get("worker"))
        .cloned()
        .unwrap();
    let mut tampered = planned.as_object().unwrap().clone();
    tampered.insert("sha256", "0".repeat(64));
    let mut after = journal.get("after").unwrap().as_object().unwrap().clone();
    after.insert("worker", Json::Object(tampered));
    journal
        .as_object_mut()
        .unwrap()
        .insert("after", Json::Object(after));
    fs::write(&manifest, python_compat::json::encode_indented(&journal)).unwrap();
    let (code, stderr) = failed_start(&installation, &layout);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("ValueError: execution transaction content changed"),
        "{stderr}"
    );
    assert!(installation.receipt(Role::Worker).is_none());
}

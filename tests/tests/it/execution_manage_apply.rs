//! `execution-manage apply` end to end: the built helper against a real
//! systemd user manager running test workers from the rendered units. Each
//! test checks stdout and the exit status, the unit files, `current` and the
//! layout manifest, the retired journal, who systemd runs, and the exact
//! control requests each worker process saw.

use crate::execution_manage_support;

use agents_common::{atomic_write, prepare_runtime, render_service};
use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{Role, Switches};
use execution_manage_support::{control_requests, instances, receipt_line, Site, NEW, OLD};
use python_compat::json::{parse_json, Json};

/// The control requests a running worker sees when it is replaced: the
/// preflight status, then `seal_for_stop` before any stop (status, acquire,
/// seal), then `_stop_worker` seals again for exactly this epoch.
const SEALED_FOR_STOP: [&str; 6] = [
    "GET status",
    "GET status",
    "POST acquire",
    "POST seal",
    "GET status",
    "POST seal",
];
/// What a candidate worker sees: `require_startup_hold`, then `release`.
const RELEASED_CANDIDATE: [&str; 3] = ["GET status", "GET status", "POST release"];

fn apply_line(receipt: &str, scope: &str) -> String {
    format!("{{\"ok\": true, \"receipt\": {receipt}, \"scope\": \"{scope}\"}}\n")
}

fn assert_committed(site: &Site, scope: &str, receipt: &str) {
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("committed")));
    assert_eq!(journal.get("scope"), Some(&Json::from(scope)));
    let receipt = parse_json(receipt.as_bytes()).expect("receipt JSON");
    assert_eq!(
        journal.get("receipt"),
        Some(&receipt),
        "receipt stored verbatim"
    );
}

#[test]
fn worker_apply_replaces_only_the_worker_under_a_sealed_hold() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let identity = site.server_identity();
    let gateway_unit = site.disk().gateway_unit;
    let mark = site.request_mark(Role::Worker);

    let outcome = site.apply(&new, "worker");

    let after = site.assert_serving(&new);
    let receipt = receipt_line(&after, &new, &identity, true);
    outcome.assert_success(&apply_line(&receipt, "worker"));
    assert_eq!(
        after.gateway_pid, before.gateway_pid,
        "the gateway kept running"
    );
    assert_ne!(after.worker_pid, before.worker_pid, "a new worker process");
    site.assert_files_of(&new);
    assert_eq!(
        site.disk().gateway_unit,
        gateway_unit,
        "gateway unit untouched"
    );
    assert_committed(&site, "worker", &receipt);
    let records = site.requests_since(Role::Worker, mark);
    assert_eq!(
        instances(&records),
        [
            before.worker_instance_id.clone(),
            after.worker_instance_id.clone()
        ]
    );
    assert_eq!(
        control_requests(&records, &before.worker_instance_id),
        SEALED_FOR_STOP
    );
    assert_eq!(
        control_requests(&records, &after.worker_instance_id),
        RELEASED_CANDIDATE
    );
    assert_eq!(
        site.worker_lease(),
        Json::Null,
        "the startup hold is released"
    );
    site.assert_unlocked();
}

#[test]
fn gateway_apply_keeps_the_exact_worker_process() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(OLD, NEW));
    let before = site.assert_serving(&old);
    let identity = site.server_identity();
    let worker_unit = site.disk().worker_unit;
    let mark = site.request_mark(Role::Worker);

    let outcome = site.apply(&new, "gateway");

    let after = site.assert_serving(&new);
    let receipt = receipt_line(&after, &new, &identity, false);
    outcome.assert_success(&apply_line(&receipt, "gateway"));
    assert_eq!(
        after.worker_pid, before.worker_pid,
        "the worker kept running"
    );
    assert_eq!(after.worker_instance_id, before.worker_instance_id);
    assert_ne!(
        after.gateway_pid, before.gateway_pid,
        "a new gateway process"
    );
    site.assert_files_of(&new);
    assert_eq!(
        site.disk().worker_unit,
        worker_unit,
        "worker unit untouched"
    );
    assert_committed(&site, "gateway", &receipt);
    let records = site.requests_since(Role::Worker, mark);
    assert_eq!(instances(&records), [before.worker_instance_id.as_str()]);
    // Only the preflight status: no admission hold for a gateway change.
    assert_eq!(
        control_requests(&records, &before.worker_instance_id),
        ["GET status"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn migration_installs_both_services_from_nothing() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, NEW);
    let empty = site.disk();
    assert_eq!((empty.worker_unit, empty.current), (None, None));

    let outcome = site.apply(&new, "migration");

    let after = site.assert_serving(&new);
    let receipt = receipt_line(&after, &new, &site.server_identity(), true);
    outcome.assert_success(&apply_line(&receipt, "migration"));
    site.assert_files_of(&new);
    assert_committed(&site, "migration", &receipt);
    let records = site.requests_since(Role::Worker, 0);
    assert_eq!(instances(&records), [after.worker_instance_id.as_str()]);
    assert_eq!(
        control_requests(&records, &after.worker_instance_id),
        RELEASED_CANDIDATE
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn migration_replaces_a_running_worker_that_has_no_gateway_yet() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    // A split worker installed alone: its unit, runtime and `current`, but
    // no gateway and no layout manifest.
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, NEW));
    prepare_runtime(&old).expect("runtime directory");
    site.installation
        .set_current(&site.installation.release_dir(OLD));
    let worker_unit = old.service_path("worker").expect("unit path");
    atomic_write(
        &worker_unit,
        &render_service(&old, "worker").unwrap(),
        0o600,
    )
    .unwrap();
    site.sandbox.systemctl_ok(&["daemon-reload"]);
    site.sandbox.systemctl_ok(&["enable", "--now", WORKER_UNIT]);
    let (receipt, old_pid) =
        site.installation
            .wait_for_service(&site.sandbox, WORKER_UNIT, Role::Worker);
    let old_instance = receipt
        .get("instance_id")
        .and_then(Json::as_str)
        .expect("instance id")
        .to_string();
    assert!(!site.sandbox.unit_state(GATEWAY_UNIT).is_running());

    let outcome = site.apply(&new, "migration");

    let after = site.assert_serving(&new);
    assert_ne!(after.worker_pid, old_pid);
    let receipt = receipt_line(&after, &new, &site.server_identity(), true);
    outcome.assert_success(&apply_line(&receipt, "migration"));
    site.assert_files_of(&new);
    assert_committed(&site, "migration", &receipt);
    let records = site.requests_since(Role::Worker, 0);
    assert_eq!(
        instances(&records),
        [old_instance.clone(), after.worker_instance_id.clone()]
    );
    assert_eq!(control_requests(&records, &old_instance), SEALED_FOR_STOP);
    assert_eq!(
        control_requests(&records, &after.worker_instance_id),
        RELEASED_CANDIDATE
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn a_failure_after_commit_leaves_the_committed_journal_for_recover() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, OLD);
    let identity = site.server_identity();
    // The candidate refuses to release its startup hold: the only release
    // of a successful apply happens after the commit.
    site.switch(
        Role::Worker,
        Switches {
            refuse: vec!["release".to_string()],
            ..Switches::default()
        },
    );

    site.apply(&new, "worker")
        .assert_refused("RuntimeError: pinned HTTP response is invalid");

    let serving = site.assert_serving(&new);
    let journal = site.pending_journal().expect("the journal stays pending");
    assert_eq!(journal.get("phase"), Some(&Json::from("committed")));
    assert!(site.completed_journals().is_empty());
    site.assert_files_of(&new);
    let lease = site.worker_lease();
    assert_eq!(
        lease.get("sealed"),
        Some(&Json::Bool(true)),
        "hold kept: {lease:?}"
    );
    site.assert_unlocked();

    site.switch(Role::Worker, Switches::default());
    let mark = site.request_mark(Role::Worker);
    let outcome = site.recover();

    let after = site.assert_serving(&new);
    assert_eq!(after, serving, "recover restarts nothing");
    let receipt = receipt_line(&after, &new, &identity, true);
    outcome.assert_success(&format!(
        "{{\"ok\": true, \"phase\": \"committed\", \"receipt\": {receipt}}}\n"
    ));
    let retired = site.only_retired_journal();
    assert_eq!(retired.get("phase"), Some(&Json::from("committed")));
    // The receipt stored at commit time is kept; recover only finishes.
    assert_eq!(retired.get("receipt"), journal.get("receipt"));
    assert_eq!(
        control_requests(
            &site.requests_since(Role::Worker, mark),
            &after.worker_instance_id
        ),
        ["GET status", "POST release"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_files_of(&new);
    site.assert_unlocked();
}

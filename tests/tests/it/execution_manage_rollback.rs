//! `execution-manage apply` failing after services changed: the helper itself
//! restores the prior services, unit files, `current` and layout manifest,
//! retires the journal as rolled back, releases its admission hold, and
//! exits 1 with the original failure.
//!
//! Misbehaviour is switched on in the test workers (the same switch reaches
//! every process of a role, old or candidate). Where the candidate must fail
//! but the restored old generation must then succeed, the test clears the
//! switch at a point the helper provably waits for: a journal phase that
//! persists until the restored health is proven, or a reply the worker holds
//! back (a stall) while the test rewrites the switches.

use crate::execution_manage_support;

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{RequestMatch, Role, Stall, Switches};
use execution_manage_support::{control_requests, finish, instances, Disk, Site, NEW, OLD, STATUS};
use python_compat::json::Json;

fn stall(action: &str, seconds: f64) -> Option<Stall> {
    Some(Stall {
        on: RequestMatch::maintenance(action),
        seconds,
    })
}

/// Everything is as it was before the failed apply, the journal is retired
/// as rolled back, nobody holds worker admission and the lock is free.
fn assert_rolled_back(site: &Site, disk: &Disk, scope: &str) {
    assert_eq!(&site.disk(), disk, "files, current and enablement restored");
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("rolled-back")));
    assert_eq!(journal.get("scope"), Some(&Json::from(scope)));
    assert_eq!(journal.get("receipt"), Some(&Json::Null));
    site.assert_unlocked();
}

#[test]
fn a_worker_that_never_reaches_health_is_replaced_by_the_old_one_again() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    // Every worker now reports a version that is no release: the candidate
    // never matches the requested release.
    site.switch(
        Role::Worker,
        Switches {
            version: Some("9.9.9".to_string()),
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "worker");
    // `rolled-back` persists until the restored worker proves its health,
    // so the old generation is healthy again from here on.
    site.wait_for_phase(&["rolling-back", "rolled-back"]);
    site.switch(Role::Worker, Switches::default());
    let outcome = finish(child);

    outcome.assert_refused("RuntimeError: execution components did not reach authenticated health");
    let after = site.assert_serving(&old);
    assert_eq!(
        after.gateway_pid, before.gateway_pid,
        "the gateway kept running"
    );
    assert_rolled_back(&site, &disk, "worker");
    let records = site.requests_since(Role::Worker, mark);
    let [old_worker, candidate, restored] = <[String; 3]>::try_from(instances(&records))
        .expect("old worker, candidate, restored old worker");
    assert_eq!(
        (&old_worker, &restored),
        (&before.worker_instance_id, &after.worker_instance_id)
    );
    assert_eq!(
        control_requests(&records, &old_worker),
        [
            "GET status",
            "GET status",
            "POST acquire",
            "POST seal",
            "GET status",
            "POST seal"
        ]
    );
    // The candidate holds its startup hold; recovery seals it again before
    // stopping it, and releases the hold the restored worker started with.
    assert_eq!(
        control_requests(&records, &candidate),
        ["GET status", "POST seal"]
    );
    assert_eq!(
        control_requests(&records, &restored),
        ["GET status", "POST release"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_gateway_that_never_reaches_health_rolls_back_only_the_gateway() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(OLD, NEW));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    // The preflight needs the old gateway's health: the gateway is told to
    // fail health only while the preflight's worker status is held back.
    site.switch(
        Role::Worker,
        Switches {
            stall: Some(Stall {
                on: RequestMatch::path(STATUS),
                seconds: 1.0,
            }),
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "gateway");
    site.wait_for_request(Role::Worker, mark, "the preflight status", |record| {
        record.path == STATUS && record.outcome == "stalled"
    });
    site.switch(
        Role::Gateway,
        Switches {
            health_status: Some(503),
            ..Switches::default()
        },
    );
    site.switch(Role::Worker, Switches::default());
    site.wait_for_phase(&["rolling-back", "rolled-back"]);
    site.switch(Role::Gateway, Switches::default());
    let outcome = finish(child);

    outcome.assert_refused("RuntimeError: execution components did not reach authenticated health");
    let after = site.assert_serving(&old);
    assert_eq!(
        (after.worker_pid, &after.worker_instance_id),
        (before.worker_pid, &before.worker_instance_id),
        "the exact worker process was kept"
    );
    assert_ne!(
        after.gateway_pid, before.gateway_pid,
        "the old gateway was restarted"
    );
    assert_rolled_back(&site, &disk, "gateway");
    let records = site.requests_since(Role::Worker, mark);
    assert_eq!(
        control_requests(&records, &before.worker_instance_id),
        ["GET status"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_worker_refusing_the_seal_before_its_stop_is_restored_under_a_new_hold() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    // The first seal (before any stop) succeeds but its reply is held back;
    // meanwhile the worker is told to refuse the next seal, the one
    // `_stop_worker` needs right before stopping, and to hold that refusal
    // back too until the test has made the worker cooperative again.
    site.switch(
        Role::Worker,
        Switches {
            stall: stall("seal", 1.5),
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "worker");
    site.wait_for_request(Role::Worker, mark, "the first seal", |record| {
        record.action.as_deref() == Some("seal") && record.outcome == "stalled"
    });
    site.switch(
        Role::Worker,
        Switches {
            refuse: vec!["seal".to_string()],
            stall: stall("seal", 1.5),
            ..Switches::default()
        },
    );
    site.wait_for_request(Role::Worker, mark, "the refused seal", |record| {
        record.action.as_deref() == Some("seal") && record.status == 409
    });
    site.switch(Role::Worker, Switches::default());
    let outcome = finish(child);

    outcome.assert_refused("RuntimeError: pinned HTTP response is invalid");
    let after = site.assert_serving(&old);
    assert_eq!(after.gateway_pid, before.gateway_pid);
    assert_rolled_back(&site, &disk, "worker");
    let records = site.requests_since(Role::Worker, mark);
    let [old_worker, restored] =
        <[String; 2]>::try_from(instances(&records)).expect("old worker, restored old worker");
    assert_eq!(
        (&old_worker, &restored),
        (&before.worker_instance_id, &after.worker_instance_id)
    );
    // Recovery seals the same epoch again and stops it; the old release
    // comes back under the journal's startup hold, which recovery releases.
    assert_eq!(
        control_requests(&records, &old_worker),
        [
            "GET status",
            "GET status",
            "POST acquire",
            "POST seal",
            "GET status",
            "POST seal",
            "GET status",
            "POST seal"
        ]
    );
    let refused: Vec<u16> = records
        .iter()
        .filter(|record| record.action.as_deref() == Some("seal"))
        .map(|record| record.status)
        .collect();
    assert_eq!(refused, [200, 409, 200]);
    assert_eq!(
        control_requests(&records, &restored),
        ["GET status", "POST release"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_candidate_with_another_server_identity_is_never_committed() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    // Preflight records the current identity; the first seal is held back
    // while the worker is told to report another identity from now on, so
    // the candidate (started later) reports it. Recovery's seal of the
    // candidate is held back while the identity is set right again, so the
    // restored old worker reports the original one.
    site.switch(
        Role::Worker,
        Switches {
            stall: stall("seal", 1.0),
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "worker");
    site.wait_for_request(Role::Worker, mark, "the first seal", |record| {
        record.action.as_deref() == Some("seal") && record.outcome == "stalled"
    });
    site.switch(
        Role::Worker,
        Switches {
            server_identity: Some("another-server".to_string()),
            stall: stall("seal", 1.0),
            ..Switches::default()
        },
    );
    site.wait_for_request(
        Role::Worker,
        mark,
        "recovery's seal of the candidate",
        |record| {
            record.action.as_deref() == Some("seal")
                && record.outcome == "stalled"
                && record.instance_id != before.worker_instance_id
        },
    );
    site.switch(Role::Worker, Switches::default());
    let outcome = finish(child);

    outcome.assert_refused("ValueError: activation changed the authenticated server identity");
    let after = site.assert_serving(&old);
    assert_eq!(after.gateway_pid, before.gateway_pid);
    assert_rolled_back(&site, &disk, "worker");
    let records = site.requests_since(Role::Worker, mark);
    assert_eq!(instances(&records).len(), 3, "old, candidate, restored old");
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_failed_start_of_a_first_install_removes_everything_it_published() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, NEW);
    // systemd cannot create the enablement link: `systemctl --user enable`
    // fails with ENOTDIR, so starting the first service fails.
    let wants = site.sandbox.unit_dir().join("default.target.wants");
    std::fs::write(&wants, b"").expect("plant a file where the wants directory goes");
    let disk = site.disk();

    let outcome = site.apply(&new, "migration");

    outcome.assert_refused("RuntimeError: native service command failed (systemctl --user)");
    assert_rolled_back(&site, &disk, "migration");
    assert_eq!(disk.worker_unit, None);
    assert_eq!(disk.manifest, None);
    assert_eq!(disk.current, None);
    for unit in [WORKER_UNIT, GATEWAY_UNIT] {
        let state = site.sandbox.unit_state(unit);
        assert_eq!(
            (state.load_state.as_str(), state.main_pid),
            ("not-found", 0),
            "{unit}"
        );
    }
    assert!(
        site.requests_since(Role::Worker, 0).is_empty(),
        "no worker ever ran"
    );
}

/// A failure before any service changed: only the journal is rolled back and
/// retired; the very same processes keep running.
fn assert_untouched_services(site: &Site, before: &execution_manage_support::Serving) {
    assert_eq!(&site.assert_serving(&site.layout(OLD, OLD)), before);
}

#[test]
fn a_busy_worker_refuses_admission_and_only_the_journal_is_retired() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let before = site.assert_serving(&site.layout(OLD, OLD));
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    site.switch(
        Role::Worker,
        Switches {
            blockers: vec![("active_runs".to_string(), 1)],
            ..Switches::default()
        },
    );

    site.apply(&site.layout(NEW, OLD), "worker")
        .assert_refused("RuntimeError: pinned HTTP response is invalid");

    let records = site.requests_since(Role::Worker, mark);
    // Preflight, the refused acquire, and the failure handling's look at
    // the lease (nothing of ours to release).
    assert_eq!(
        control_requests(&records, &before.worker_instance_id),
        ["GET status", "GET status", "POST acquire", "GET status"]
    );
    let acquire = records
        .iter()
        .find(|record| record.action.as_deref() == Some("acquire"))
        .unwrap();
    assert_eq!(acquire.status, 409);
    site.switch(Role::Worker, Switches::default());
    assert_untouched_services(&site, &before);
    assert_rolled_back(&site, &disk, "worker");
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_sealing_refusal_before_any_stop_releases_the_acquired_hold() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let before = site.assert_serving(&site.layout(OLD, OLD));
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    site.switch(
        Role::Worker,
        Switches {
            refuse: vec!["seal".to_string()],
            ..Switches::default()
        },
    );

    site.apply(&site.layout(NEW, OLD), "worker")
        .assert_refused("RuntimeError: pinned HTTP response is invalid");

    assert_eq!(
        control_requests(
            &site.requests_since(Role::Worker, mark),
            &before.worker_instance_id
        ),
        [
            "GET status",
            "GET status",
            "POST acquire",
            "POST seal",
            "GET status",
            "GET status",
            "POST release"
        ],
        "our own unsealed hold is released (release looks at status first)"
    );
    site.switch(Role::Worker, Switches::default());
    assert_untouched_services(&site, &before);
    assert_rolled_back(&site, &disk, "worker");
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn another_operation_winning_admission_before_the_seal_keeps_its_hold() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let before = site.assert_serving(&site.layout(OLD, OLD));
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);
    // The preflight's status reply (no lease yet) is held back while another
    // maintenance client takes admission.
    site.switch(
        Role::Worker,
        Switches {
            stall: Some(Stall {
                on: RequestMatch::path(STATUS),
                seconds: 1.0,
            }),
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&site.layout(NEW, OLD), "worker");
    site.wait_for_request(Role::Worker, mark, "the preflight status", |record| {
        record.path == STATUS && record.outcome == "stalled"
    });
    site.switch(Role::Worker, Switches::default());
    let foreign = site.acquire_foreign_lease("00000000-0000-4000-8000-000000000002");
    let outcome = finish(child);

    outcome.assert_refused("RuntimeError: another operation owns worker maintenance admission");
    assert_untouched_services(&site, &before);
    assert_rolled_back(&site, &disk, "worker");
    assert_eq!(site.worker_lease(), foreign, "the winner's hold is intact");
}

#[test]
fn a_failed_migration_of_a_lone_worker_needs_the_managed_updater() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    // A split worker installed alone (no gateway, no layout manifest).
    let old = site.layout(OLD, OLD);
    agents_common::prepare_runtime(&old).unwrap();
    site.installation
        .set_current(&site.installation.release_dir(OLD));
    let unit = old.service_path("worker").unwrap();
    let rendered = agents_common::render_service(&old, "worker").unwrap();
    agents_common::atomic_write(&unit, &rendered, 0o600).unwrap();
    site.sandbox.systemctl_ok(&["daemon-reload"]);
    site.sandbox.systemctl_ok(&["enable", "--now", WORKER_UNIT]);
    site.installation
        .wait_for_service(&site.sandbox, WORKER_UNIT, Role::Worker);
    let disk = site.disk();
    site.switch(
        Role::Worker,
        Switches {
            version: Some("9.9.9".to_string()),
            ..Switches::default()
        },
    );

    site.apply(&site.layout(NEW, NEW), "migration")
        .assert_refused(
            "RuntimeError: legacy migration rollback requires managed updater health verification",
        );

    // Files and services are back, but without a previous layout this
    // controller cannot prove the restored worker healthy: the rolled-back
    // journal stays pending (and the restored worker held) for the updater.
    assert_eq!(site.disk().worker_unit, disk.worker_unit);
    assert_eq!(site.disk().manifest, None);
    assert_eq!(site.disk().current, disk.current);
    assert_eq!(site.pending_phase().as_deref(), Some("rolled-back"));
    let (receipt, _pid) =
        site.installation
            .wait_for_service(&site.sandbox, WORKER_UNIT, Role::Worker);
    assert_eq!(
        receipt.get("release_root").and_then(Json::as_str),
        site.installation.release_dir(OLD).to_str()
    );
    let lease = site.worker_lease();
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)), "{lease:?}");
    site.assert_unlocked();
}

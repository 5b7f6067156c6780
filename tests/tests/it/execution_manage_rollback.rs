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

use agents_common::{ExecutionLayout, GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{Outcome, RequestMatch, RequestRecord, Role, Stall, Switches};
use execution_manage_support::{
    control_requests, finish, instances, Disk, Serving, Site, NEW, OLD, STATUS,
};
use python_compat::json::Json;

const NO_HEALTH: &str = "RuntimeError: execution components did not reach authenticated health";
const INVALID_RESPONSE: &str = "RuntimeError: pinned HTTP response is invalid";

/// Switches that hold back the worker's reply to maintenance `action`.
fn stalling(action: &str, seconds: f64) -> Switches {
    Switches {
        stall: Some(Stall {
            on: RequestMatch::maintenance(action),
            seconds,
        }),
        ..Switches::default()
    }
}

/// Switches that hold back the worker's status replies (the preflight's).
fn stalling_status() -> Switches {
    Switches {
        stall: Some(Stall {
            on: RequestMatch::path(STATUS),
            seconds: 1.0,
        }),
        ..Switches::default()
    }
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

/// A running [`OLD`] pair about to be asked to apply a candidate: what each
/// test here starts from and compares its end with.
struct Attempt {
    site: Site,
    /// The candidate layout.
    new: ExecutionLayout,
    /// Who served before the apply.
    before: Serving,
    /// Files, `current` and enablement before the apply.
    disk: Disk,
    /// The worker's request log before the apply.
    mark: usize,
}

impl Attempt {
    /// [`Site::running`] with the candidate running releases `worker` and
    /// `gateway`; `None` where no sandbox can run (the test skips).
    fn start(test: &str, worker: &str, gateway: &str) -> Option<Attempt> {
        let site = Site::running(test)?;
        let new = site.layout(worker, gateway);
        let before = site.assert_serving(&site.layout(OLD, OLD));
        let disk = site.disk();
        let mark = site.request_mark(Role::Worker);
        Some(Attempt {
            site,
            new,
            before,
            disk,
            mark,
        })
    }

    fn switch_worker(&self, switches: Switches) {
        self.site.switch(Role::Worker, switches);
    }

    /// `apply` of the candidate for `scope`, in the background.
    fn spawn_apply(&self, scope: &str) -> std::process::Child {
        self.site.spawn_apply(&self.new, scope)
    }

    /// `apply` of the candidate for `scope`, to its end.
    fn apply(&self, scope: &str) -> Outcome {
        self.site.apply(&self.new, scope)
    }

    /// Waits until the worker logged, since the apply began, a request that
    /// `accept` takes (`what` names it in a timeout).
    fn wait_for(&self, what: &str, accept: impl Fn(&RequestRecord) -> bool) {
        self.site
            .wait_for_request(Role::Worker, self.mark, what, accept);
    }

    /// Waits until the worker holds back its reply to a `seal`.
    fn wait_for_stalled_seal(&self, what: &str) {
        self.wait_for(what, |record| {
            record.action.as_deref() == Some("seal") && record.outcome == "stalled"
        });
    }

    /// The worker's requests since the apply began.
    fn records(&self) -> Vec<RequestRecord> {
        self.site.requests_since(Role::Worker, self.mark)
    }

    /// A rollback's end: `outcome` refused with `line`, the old pair serving
    /// again (who, returned) and everything restored under a rolled-back
    /// journal of `scope`.
    fn assert_rolled_back(&self, outcome: Outcome, line: &str, scope: &str) -> Serving {
        outcome.assert_refused(line);
        let after = self.site.assert_serving(&self.site.layout(OLD, OLD));
        assert_rolled_back(&self.site, &self.disk, scope);
        after
    }

    /// A failure before any service changed: the very same processes keep
    /// running, only the journal is rolled back and retired, nobody holds
    /// worker admission.
    fn assert_only_the_journal_retired(&self) {
        assert_eq!(
            &self.site.assert_serving(&self.site.layout(OLD, OLD)),
            &self.before
        );
        assert_rolled_back(&self.site, &self.disk, "worker");
    }
}

#[test]
fn a_worker_that_never_reaches_health_is_replaced_by_the_old_one_again() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    // Every worker now reports a version that is no release: the candidate
    // never matches the requested release.
    attempt.switch_worker(Switches {
        version: Some("9.9.9".to_string()),
        ..Switches::default()
    });
    let child = attempt.spawn_apply("worker");
    // `rolled-back` persists until the restored worker proves its health,
    // so the old generation is healthy again from here on.
    attempt
        .site
        .wait_for_phase(&["rolling-back", "rolled-back"]);
    attempt.switch_worker(Switches::default());
    let outcome = finish(child);

    let (before, after) = (
        &attempt.before,
        attempt.assert_rolled_back(outcome, NO_HEALTH, "worker"),
    );
    assert_eq!(
        after.gateway_pid, before.gateway_pid,
        "the gateway kept running"
    );
    let records = attempt.records();
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
    assert_eq!(attempt.site.worker_lease(), Json::Null);
}

#[test]
fn a_gateway_that_never_reaches_health_rolls_back_only_the_gateway() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), OLD, NEW) else {
        return;
    };
    // The preflight needs the old gateway's health: the gateway is told to
    // fail health only while the preflight's worker status is held back.
    attempt.switch_worker(stalling_status());
    let child = attempt.spawn_apply("gateway");
    attempt.wait_for("the preflight status", |record| {
        record.path == STATUS && record.outcome == "stalled"
    });
    attempt.site.switch(
        Role::Gateway,
        Switches {
            health_status: Some(503),
            ..Switches::default()
        },
    );
    attempt.switch_worker(Switches::default());
    attempt
        .site
        .wait_for_phase(&["rolling-back", "rolled-back"]);
    attempt.site.switch(Role::Gateway, Switches::default());
    let outcome = finish(child);

    let (before, after) = (
        &attempt.before,
        attempt.assert_rolled_back(outcome, NO_HEALTH, "gateway"),
    );
    assert_eq!(
        (after.worker_pid, &after.worker_instance_id),
        (before.worker_pid, &before.worker_instance_id),
        "the exact worker process was kept"
    );
    assert_ne!(
        after.gateway_pid, before.gateway_pid,
        "the old gateway was restarted"
    );
    assert_eq!(
        control_requests(&attempt.records(), &before.worker_instance_id),
        ["GET status"]
    );
    assert_eq!(attempt.site.worker_lease(), Json::Null);
}

#[test]
fn a_worker_refusing_the_seal_before_its_stop_is_restored_under_a_new_hold() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    // The first seal (before any stop) succeeds but its reply is held back;
    // meanwhile the worker is told to refuse the next seal, the one
    // `_stop_worker` needs right before stopping, and to hold that refusal
    // back too until the test has made the worker cooperative again.
    attempt.switch_worker(stalling("seal", 1.5));
    let child = attempt.spawn_apply("worker");
    attempt.wait_for_stalled_seal("the first seal");
    attempt.switch_worker(Switches {
        refuse: vec!["seal".to_string()],
        ..stalling("seal", 1.5)
    });
    attempt.wait_for("the refused seal", |record| {
        record.action.as_deref() == Some("seal") && record.status == 409
    });
    attempt.switch_worker(Switches::default());
    let outcome = finish(child);

    let (before, after) = (
        &attempt.before,
        attempt.assert_rolled_back(outcome, INVALID_RESPONSE, "worker"),
    );
    assert_eq!(after.gateway_pid, before.gateway_pid);
    let records = attempt.records();
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
    assert_eq!(attempt.site.worker_lease(), Json::Null);
}

#[test]
fn a_candidate_with_another_server_identity_is_never_committed() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    // Preflight records the current identity; the first seal is held back
    // while the worker is told to report another identity from now on, so
    // the candidate (started later) reports it. Recovery's seal of the
    // candidate is held back while the identity is set right again, so the
    // restored old worker reports the original one.
    attempt.switch_worker(stalling("seal", 1.0));
    let child = attempt.spawn_apply("worker");
    attempt.wait_for_stalled_seal("the first seal");
    attempt.switch_worker(Switches {
        server_identity: Some("another-server".to_string()),
        ..stalling("seal", 1.0)
    });
    let old_worker = attempt.before.worker_instance_id.clone();
    attempt.wait_for("recovery's seal of the candidate", |record| {
        record.action.as_deref() == Some("seal")
            && record.outcome == "stalled"
            && record.instance_id != old_worker
    });
    attempt.switch_worker(Switches::default());
    let outcome = finish(child);

    let line = "ValueError: activation changed the authenticated server identity";
    let after = attempt.assert_rolled_back(outcome, line, "worker");
    assert_eq!(after.gateway_pid, attempt.before.gateway_pid);
    assert_eq!(
        instances(&attempt.records()).len(),
        3,
        "old, candidate, restored old"
    );
    assert_eq!(attempt.site.worker_lease(), Json::Null);
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

#[test]
fn a_busy_worker_refuses_admission_and_only_the_journal_is_retired() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    attempt.switch_worker(Switches {
        blockers: vec![("active_runs".to_string(), 1)],
        ..Switches::default()
    });

    attempt.apply("worker").assert_refused(INVALID_RESPONSE);

    let records = attempt.records();
    // Preflight, the refused acquire, and the failure handling's look at
    // the lease (nothing of ours to release).
    assert_eq!(
        control_requests(&records, &attempt.before.worker_instance_id),
        ["GET status", "GET status", "POST acquire", "GET status"]
    );
    let acquire = records
        .iter()
        .find(|record| record.action.as_deref() == Some("acquire"))
        .unwrap();
    assert_eq!(acquire.status, 409);
    attempt.switch_worker(Switches::default());
    attempt.assert_only_the_journal_retired();
    assert_eq!(attempt.site.worker_lease(), Json::Null);
}

#[test]
fn a_sealing_refusal_before_any_stop_releases_the_acquired_hold() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    attempt.switch_worker(Switches {
        refuse: vec!["seal".to_string()],
        ..Switches::default()
    });

    attempt.apply("worker").assert_refused(INVALID_RESPONSE);

    assert_eq!(
        control_requests(&attempt.records(), &attempt.before.worker_instance_id),
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
    attempt.switch_worker(Switches::default());
    attempt.assert_only_the_journal_retired();
    assert_eq!(attempt.site.worker_lease(), Json::Null);
}

#[test]
fn another_operation_winning_admission_before_the_seal_keeps_its_hold() {
    let Some(attempt) = Attempt::start(agents_tests::test_name!(), NEW, OLD) else {
        return;
    };
    // The preflight's status reply (no lease yet) is held back while another
    // maintenance client takes admission.
    attempt.switch_worker(stalling_status());
    let child = attempt.spawn_apply("worker");
    attempt.wait_for("the preflight status", |record| {
        record.path == STATUS && record.outcome == "stalled"
    });
    attempt.switch_worker(Switches::default());
    let foreign = attempt
        .site
        .acquire_foreign_lease("00000000-0000-4000-8000-000000000002");
    let outcome = finish(child);

    outcome.assert_refused("RuntimeError: another operation owns worker maintenance admission");
    attempt.assert_only_the_journal_retired();
    assert_eq!(
        attempt.site.worker_lease(),
        foreign,
        "the winner's hold is intact"
    );
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

//! `execution-manage recover` (and `inspect`) after `apply` was killed with
//! SIGKILL at each step of an activation: recovery converges to the old or
//! the new release fully running, never a mix, and nothing is lost.
//!
//! How each kill point is reached (the helper is a child of the test, killed
//! by its PID):
//! - prepared, admission acquired: the worker holds back its reply to
//!   `acquire` (which already took effect);
//! - prepared, admission sealed: the worker holds back its reply to the first
//!   `seal`;
//! - published, candidate starting: candidates wait 3 s before writing their
//!   receipt, so the helper is still waiting for authenticated health when
//!   the test sees systemd run a new main process;
//! - committed: the candidate holds back its reply to `release` (the hold is
//!   gone, the journal is committed, `finish` has not run).

use crate::execution_manage_support;

use std::process::Child;

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{descendants, poll_until, RequestMatch, Role, Switches, SERVICE_TIMEOUT};
use execution_manage_support::{
    control_requests, instances, receipt_line, rolled_back_line, Outcome, Site, NEW, OLD,
};
use python_compat::json::Json;

/// SIGKILL the helper as a crash would, then wait for the commands it had
/// already started (a `systemctl` mid-`enable`, say): they outlive it and run
/// to completion, so the state the test inspects next must include their
/// effect. The helper is frozen first so it cannot start another one between
/// the listing and the kill.
fn kill(mut child: Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child PID");
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP the helper");
    let orphans = descendants(child.id());
    child.kill().expect("SIGKILL the helper");
    let status = child.wait().expect("reap the helper");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the helper died by SIGKILL, not on its own"
    );
    poll_until(
        SERVICE_TIMEOUT,
        "the killed helper's commands to finish",
        || {
            orphans
                .iter()
                .all(|orphan| !orphan.is_alive())
                .then_some(())
        },
    );
}

fn stalling(action: &str) -> Switches {
    Switches::stalling(RequestMatch::maintenance(action), 30.0)
}

/// `inspect` prints the pending journal's identity and changes nothing: not
/// the files, not the journal bytes, not the dead helper's lock.
fn inspect_pending(site: &Site, phase: &str, scope: &str) -> Json {
    let journal_path = site
        .installation
        .install_root
        .join(".execution-transaction/manifest.json");
    let journal_bytes = std::fs::read(&journal_path).expect("a pending journal");
    let disk = site.disk();
    let outcome: Outcome = site.inspect();
    let printed = outcome.assert_ok_json();
    let journal = site.pending_journal().expect("still pending");
    let id = journal.get("id").and_then(Json::as_str).expect("an id");
    let operation = printed
        .get("operation_id")
        .and_then(Json::as_str)
        .expect("an operation id")
        .to_string();
    assert_eq!(
        outcome.stdout,
        format!(
            "{{\"id\": \"{id}\", \"operation_id\": \"{operation}\", \"phase\": \"{phase}\", \
             \"scope\": \"{scope}\"}}\n"
        )
    );
    assert_eq!(std::fs::read(&journal_path).unwrap(), journal_bytes);
    assert_eq!(site.disk(), disk, "inspect changes nothing");
    printed
}

/// Kill points before any service changed: the old worker holds this
/// operation's admission (acquired or sealed), and recovery must stop that
/// exact epoch under a sealed hold and bring the old release back.
fn killed_while_holding_admission(test: &str, action: &str) {
    let Some(site) = Site::running(test) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let identity = site.server_identity();
    let mark = site.request_mark(Role::Worker);
    site.switch(Role::Worker, stalling(action));
    let child = site.spawn_apply(&new, "worker");
    site.wait_for_request(Role::Worker, mark, action, |record| {
        record.action.as_deref() == Some(action) && record.outcome == "stalled"
    });
    kill(child);
    site.switch(Role::Worker, Switches::default());
    let killed = site.requests_since(Role::Worker, mark);
    let mut expected = vec!["GET status", "GET status", "POST acquire"];
    if action == "seal" {
        expected.push("POST seal");
    }
    assert_eq!(
        control_requests(&killed, &before.worker_instance_id),
        expected
    );

    let printed = inspect_pending(&site, "prepared", "worker");
    let lease = site.worker_lease();
    assert_eq!(lease.get("operation_id"), printed.get("operation_id"));
    assert_eq!(
        lease.get("sealed"),
        Some(&Json::Bool(action == "seal")),
        "{lease:?}"
    );
    assert!(
        site.installation
            .install_root
            .join(".install-lock/pid")
            .exists(),
        "the killed helper's lock is left behind"
    );
    let mark = site.request_mark(Role::Worker);

    let outcome = site.recover();

    let after = site.assert_serving(&old);
    outcome.assert_success(&rolled_back_line(&receipt_line(
        &after, &old, &identity, true,
    )));
    assert_eq!(
        after.gateway_pid, before.gateway_pid,
        "the gateway kept running"
    );
    assert_eq!(site.disk(), disk, "files restored");
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("rolled-back")));
    let records = site.requests_since(Role::Worker, mark);
    let [old_worker, restored] =
        <[String; 2]>::try_from(instances(&records)).expect("old worker, restored old worker");
    assert_eq!(old_worker, before.worker_instance_id);
    // `_stop_worker` finds this operation's lease and seals that epoch.
    assert_eq!(
        control_requests(&records, &old_worker),
        ["GET status", "POST seal"]
    );
    assert_eq!(
        control_requests(&records, &restored),
        ["GET status", "POST release"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn recover_after_a_kill_with_admission_acquired_restores_the_old_worker() {
    killed_while_holding_admission(agents_tests::test_name!(), "acquire");
}

#[test]
fn recover_after_a_kill_with_admission_sealed_restores_the_old_worker() {
    killed_while_holding_admission(agents_tests::test_name!(), "seal");
}

/// Waits until systemd runs a main process of `unit` other than `old_pid`.
fn wait_for_new_main_process(site: &Site, unit: &str, old_pid: u32) -> u32 {
    site.sandbox
        .wait_for_unit(unit, SERVICE_TIMEOUT, "running a new process", |state| {
            state.is_running() && state.main_pid != old_pid
        })
        .main_pid
}

#[test]
fn recover_after_a_kill_while_the_candidate_worker_starts_restores_the_old_worker() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let identity = site.server_identity();
    let mark = site.request_mark(Role::Worker);
    site.switch(
        Role::Worker,
        Switches {
            receipt_delay_seconds: 3.0,
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "worker");
    let candidate_pid = wait_for_new_main_process(&site, WORKER_UNIT, before.worker_pid);
    kill(child);
    site.switch(Role::Worker, Switches::default());
    inspect_pending(&site, "published", "worker");
    // Stopping a worker needs a sealed hold of its exact epoch, which needs
    // its receipt: recovery waits until the candidate has published it.
    site.installation
        .wait_for_receipt(Role::Worker, "of the candidate", |receipt| {
            receipt.get("pid") == Some(&Json::from(candidate_pid))
        });

    let outcome = site.recover();

    let after = site.assert_serving(&old);
    outcome.assert_success(&rolled_back_line(&receipt_line(
        &after, &old, &identity, true,
    )));
    assert_eq!(after.gateway_pid, before.gateway_pid);
    assert_eq!(site.disk(), disk, "files restored");
    assert_eq!(
        site.only_retired_journal().get("phase"),
        Some(&Json::from("rolled-back"))
    );
    let records = site.requests_since(Role::Worker, mark);
    let [_old_worker, candidate, restored] =
        <[String; 3]>::try_from(instances(&records)).expect("old, candidate, restored");
    assert_eq!(
        control_requests(&records, &candidate),
        ["GET status", "POST seal"]
    );
    assert_eq!(
        control_requests(&records, &restored),
        ["GET status", "POST release"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn recover_after_a_kill_while_the_candidate_gateway_starts_restores_the_old_gateway() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let (old, new) = (site.layout(OLD, OLD), site.layout(OLD, NEW));
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let identity = site.server_identity();
    let mark = site.request_mark(Role::Worker);
    site.switch(
        Role::Gateway,
        Switches {
            receipt_delay_seconds: 3.0,
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "gateway");
    wait_for_new_main_process(&site, GATEWAY_UNIT, before.gateway_pid);
    kill(child);
    site.switch(Role::Gateway, Switches::default());
    inspect_pending(&site, "published", "gateway");

    let outcome = site.recover();

    let after = site.assert_serving(&old);
    outcome.assert_success(&rolled_back_line(&receipt_line(
        &after, &old, &identity, false,
    )));
    assert_eq!(
        (after.worker_pid, &after.worker_instance_id),
        (before.worker_pid, &before.worker_instance_id),
        "the exact worker process was kept"
    );
    assert_eq!(site.disk(), disk, "files and current restored");
    assert_eq!(
        site.only_retired_journal().get("phase"),
        Some(&Json::from("rolled-back"))
    );
    // Only the killed apply's preflight status: a gateway change never
    // touches worker admission.
    assert_eq!(
        control_requests(
            &site.requests_since(Role::Worker, mark),
            &before.worker_instance_id
        ),
        ["GET status"]
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn recover_after_a_kill_while_a_first_install_starts_removes_it_again() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, NEW);
    let disk = site.disk();
    site.switch(
        Role::Worker,
        Switches {
            receipt_delay_seconds: 3.0,
            ..Switches::default()
        },
    );
    let child = site.spawn_apply(&new, "migration");
    let candidate_pid = wait_for_new_main_process(&site, WORKER_UNIT, 0);
    kill(child);
    site.switch(Role::Worker, Switches::default());
    inspect_pending(&site, "published", "migration");
    site.installation
        .wait_for_receipt(Role::Worker, "of the candidate", |receipt| {
            receipt.get("pid") == Some(&Json::from(candidate_pid))
        });

    let outcome = site.recover();

    outcome.assert_success(&rolled_back_line("null"));
    // The original's `restore` does nothing for a job that was absent, so the
    // enablement links the killed apply's `start` created stay behind,
    // dangling (the worker's always; the gateway's if the kill came after
    // its start); systemd reports both units not-found, and a later
    // migration observes them as absent again.
    let mut restored = site.disk();
    assert!(restored.wants.contains(&WORKER_UNIT.to_string()));
    assert!(restored
        .wants
        .iter()
        .all(|link| link == WORKER_UNIT || link == GATEWAY_UNIT));
    for link in &restored.wants {
        let path = site
            .sandbox
            .unit_dir()
            .join("default.target.wants")
            .join(link);
        assert!(
            std::fs::symlink_metadata(&path).is_ok() && !path.exists(),
            "{link} is a dangling enablement link"
        );
    }
    restored.wants.clear();
    assert_eq!(restored, disk, "units, manifest and current removed again");
    for unit in [WORKER_UNIT, GATEWAY_UNIT] {
        let state = site.sandbox.unit_state(unit);
        assert_eq!(
            (state.load_state.as_str(), state.main_pid),
            ("not-found", 0)
        );
    }
    assert_eq!(
        site.only_retired_journal().get("phase"),
        Some(&Json::from("rolled-back"))
    );
    let records = site.requests_since(Role::Worker, 0);
    assert_eq!(instances(&records).len(), 1, "only the candidate ever ran");
    assert_eq!(
        control_requests(&records, &instances(&records)[0]),
        ["GET status", "POST seal"]
    );
    site.assert_unlocked();
}

#[test]
fn recover_after_a_kill_past_the_commit_finishes_the_new_release() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, OLD);
    let identity = site.server_identity();
    let mark = site.request_mark(Role::Worker);
    site.switch(Role::Worker, stalling("release"));
    let child = site.spawn_apply(&new, "worker");
    site.wait_for_request(Role::Worker, mark, "release", |record| {
        record.action.as_deref() == Some("release") && record.outcome == "stalled"
    });
    kill(child);
    site.switch(Role::Worker, Switches::default());
    let serving = site.assert_serving(&new);
    inspect_pending(&site, "committed", "worker");
    let committed = site.pending_journal().unwrap().get("receipt").cloned();

    let outcome = site.recover();

    let after = site.assert_serving(&new);
    assert_eq!(after, serving, "recover restarts nothing");
    // The hold was already released before the kill.
    outcome.assert_success(&format!(
        "{{\"ok\": true, \"phase\": \"committed\", \"receipt\": {}}}\n",
        receipt_line(&after, &new, &identity, false)
    ));
    site.assert_files_of(&new);
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("committed")));
    assert_eq!(journal.get("receipt").cloned(), committed);
    assert_eq!(
        control_requests(
            &site.requests_since(Role::Worker, mark),
            &after.worker_instance_id
        ),
        ["GET status", "GET status", "POST release", "GET status"],
        "startup hold check, the killed apply's release, recover's status"
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

/// Kills `apply` (worker scope) while the old worker holds this operation's
/// acquired admission, leaving a `prepared` journal and the dead helper's lock.
fn killed_after_staging(site: &Site) {
    let mark = site.request_mark(Role::Worker);
    site.switch(Role::Worker, stalling("acquire"));
    let child = site.spawn_apply(&site.layout(NEW, OLD), "worker");
    site.wait_for_request(Role::Worker, mark, "acquire", |record| {
        record.action.as_deref() == Some("acquire") && record.outcome == "stalled"
    });
    kill(child);
    site.switch(Role::Worker, Switches::default());
    assert_eq!(site.pending_phase().as_deref(), Some("prepared"));
}

#[test]
fn recover_refuses_a_journal_whose_files_changed_outside_it() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let old = site.layout(OLD, OLD);
    let before = site.assert_serving(&old);
    let disk = site.disk();
    killed_after_staging(&site);
    let unit = site.sandbox.unit_dir().join(GATEWAY_UNIT);
    let original = std::fs::read(&unit).unwrap();
    let mut edited = original.clone();
    edited.extend_from_slice(b"# edited by hand\n");
    agents_common::atomic_write(&unit, &edited, 0o600).unwrap();
    let journal = site.pending_journal();
    let mark = site.request_mark(Role::Worker);

    site.recover()
        .assert_refused("RuntimeError: gateway configuration changed outside execution activation");

    assert_eq!(site.pending_journal(), journal, "the journal is untouched");
    assert_eq!(std::fs::read(&unit).unwrap(), edited, "the edit is kept");
    assert!(control_requests(
        &site.requests_since(Role::Worker, mark),
        &before.worker_instance_id
    )
    .is_empty());
    assert_eq!(site.assert_serving(&old), before, "no service was touched");
    site.assert_unlocked();

    // With the unit back as the journal recorded it, recovery proceeds.
    agents_common::atomic_write(&unit, &original, 0o600).unwrap();
    site.recover().assert_ok_json();
    site.assert_serving(&old);
    assert_eq!(site.disk(), disk);
    assert_eq!(
        site.only_retired_journal().get("phase"),
        Some(&Json::from("rolled-back"))
    );
}

#[test]
fn recover_refuses_a_restored_server_of_another_identity_and_can_be_retried() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let old = site.layout(OLD, OLD);
    let before = site.assert_serving(&old);
    let identity = site.server_identity();
    let disk = site.disk();
    killed_after_staging(&site);
    site.switch(
        Role::Worker,
        Switches {
            server_identity: Some("another-server".to_string()),
            ..Switches::default()
        },
    );

    site.recover().assert_refused(
        "RuntimeError: authenticated server identity changed during activation recovery",
    );

    // Everything was rolled back and the old worker restarted, but recovery
    // does not finish for another server; the restored worker stays held.
    assert_eq!(site.pending_phase().as_deref(), Some("rolled-back"));
    assert_eq!(site.disk().without_entry(".execution-transaction"), disk);
    let restored = site.assert_serving(&old);
    assert_ne!(restored.worker_pid, before.worker_pid);
    let lease = site.worker_lease();
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)), "{lease:?}");
    site.assert_unlocked();

    site.switch(Role::Worker, Switches::default());
    let mark = site.request_mark(Role::Worker);
    let outcome = site.recover();

    // The retry keeps the already restored worker and finishes.
    let after = site.assert_serving(&old);
    assert_eq!(after, restored, "the restored services were kept");
    outcome.assert_success(&rolled_back_line(&receipt_line(
        &after, &old, &identity, true,
    )));
    assert_eq!(
        control_requests(
            &site.requests_since(Role::Worker, mark),
            &after.worker_instance_id
        ),
        ["GET status", "POST release"]
    );
    assert_eq!(
        site.only_retired_journal().get("phase"),
        Some(&Json::from("rolled-back"))
    );
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

/// The number of the first durable call of `traced` that `matches`.
fn first_call(
    traced: &agents_tests::crash_points::Traced,
    what: &str,
    matches: impl Fn(&agents_tests::crash_points::DurableCall) -> bool,
) -> usize {
    traced
        .calls
        .iter()
        .find(|call| matches(call))
        .unwrap_or_else(|| panic!("no {what} among {:?}", traced.calls))
        .number
}

/// `fsync` of a temporary of the journal (`.manifest.json.<hex>.tmp` in
/// `.execution-transaction/`), the rewrite's last call before its rename.
fn is_journal_temporary_fsync(call: &agents_tests::crash_points::DurableCall) -> bool {
    call.is("fsync", ".execution-transaction/.manifest.json.")
}

/// The temporaries a killed journal rewrite left in the journal directory.
fn journal_temporaries(site: &Site) -> Vec<String> {
    site.journal_entries()
        .into_iter()
        .filter(|name| name != "manifest.json")
        .collect()
}

/// Regression (issue 16): `apply` killed at the `fsync` of its first journal
/// rewrite's temporary (`.execution-transaction/.manifest.json.<hex>.tmp`,
/// created but not yet renamed) left a journal `recover` refused forever
/// with `RuntimeError: execution transaction contains unexpected files`, as
/// the original's does. Recovery now removes its own unfinished temporary.
fn recover_after_apply_killed_at_the_fsync_of_a_journal_temporary(test: &str, scope: &str) {
    let Some(site) = (if scope == "migration" {
        Site::empty(test)
    } else {
        Site::running(test)
    }) else {
        return;
    };
    let new = if scope == "migration" {
        site.layout(NEW, NEW)
    } else {
        site.layout(NEW, OLD)
    };
    let complete = site.apply_traced(&new, scope, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let kill_at = first_call(
        &complete,
        "journal temporary fsync",
        is_journal_temporary_fsync,
    );
    drop(site);
    let site = if scope == "migration" {
        Site::empty(test)
    } else {
        Site::running(test)
    }
    .expect("the sandbox ran once");
    let new = if scope == "migration" {
        site.layout(NEW, NEW)
    } else {
        site.layout(NEW, OLD)
    };
    let before = site.disk();

    let killed = site.apply_traced(&new, scope, Some(kill_at));

    let call = killed.killed.clone().unwrap_or_else(|| {
        panic!(
            "apply was not killed at #{kill_at}: {:?} {:?}",
            killed.outcome, killed.calls
        )
    });
    assert!(is_journal_temporary_fsync(&call), "{call}");
    let left = journal_temporaries(&site);
    assert_eq!(left.len(), 1, "the journal's temporary is left: {left:?}");
    assert_eq!(site.pending_phase().as_deref(), Some("prepared"));

    let outcome = site.recover();

    assert_eq!(outcome.code, Some(0), "{outcome:?}");
    assert!(
        outcome
            .stdout
            .starts_with("{\"ok\": true, \"phase\": \"rolled-back\""),
        "{outcome:?}"
    );
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("rolled-back")));
    assert_eq!(site.disk(), before, "files as before the activation");
    site.assert_unlocked();
    if scope == "migration" {
        assert!(site.disk().worker_unit.is_none());
    } else {
        site.assert_serving(&site.layout(OLD, OLD));
        assert_eq!(site.worker_lease(), Json::Null);
    }
    site.apply(&new, scope).assert_ok_json();
    site.assert_serving(&new);
}

#[test]
fn recover_after_a_worker_apply_killed_at_the_fsync_of_a_journal_temporary() {
    recover_after_apply_killed_at_the_fsync_of_a_journal_temporary(
        agents_tests::test_name!(),
        "worker",
    );
}

#[test]
fn recover_after_a_migration_apply_killed_at_the_fsync_of_a_journal_temporary() {
    recover_after_apply_killed_at_the_fsync_of_a_journal_temporary(
        agents_tests::test_name!(),
        "migration",
    );
}

/// Regression (issue 16): `recover` itself killed at the `fsync` of its
/// first journal rewrite's temporary (phase `rolling-back`, not yet renamed)
/// left the same unrecoverable journal; `recover` again now finishes.
#[test]
fn recover_after_recover_killed_at_the_fsync_of_a_journal_temporary() {
    let test = agents_tests::test_name!();
    let Some(site) = Site::running(test) else {
        return;
    };
    let complete = site.apply_traced(&site.layout(NEW, OLD), "worker", None);
    // Leave the activation published: kill right after the journal rename
    // that recorded `published` (the second rename onto manifest.json).
    let published = complete
        .calls
        .iter()
        .filter(|call| {
            call.call.starts_with("rename")
                && call.paths.ends_with(".execution-transaction/manifest.json")
        })
        .nth(1)
        .expect("the published rename")
        .number
        + 1;
    drop(site);
    let scene = || {
        let site = Site::running(test).expect("the sandbox ran once");
        let new = site.layout(NEW, OLD);
        assert!(site
            .apply_traced(&new, "worker", Some(published))
            .killed
            .is_some());
        assert_eq!(site.pending_phase().as_deref(), Some("published"));
        site
    };
    let site = scene();
    let complete = site.recover_traced(None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let kill_at = first_call(
        &complete,
        "journal temporary fsync",
        is_journal_temporary_fsync,
    );
    drop(site);
    let site = scene();

    let killed = site.recover_traced(Some(kill_at));

    let call = killed.killed.expect("recover was killed");
    assert!(is_journal_temporary_fsync(&call), "{call}");
    assert_eq!(journal_temporaries(&site).len(), 1, "the temporary is left");

    let outcome = site.recover();

    assert_eq!(outcome.code, Some(0), "{outcome:?}");
    let journal = site.only_retired_journal();
    assert_eq!(journal.get("phase"), Some(&Json::from("rolled-back")));
    let old = site.layout(OLD, OLD);
    site.assert_serving(&old);
    site.assert_files_of(&old);
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

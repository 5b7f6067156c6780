//! `update-handoff retry-failed` against a real systemd user manager and the
//! test worker: only the exact saved failed status of this handoff is
//! retried, a lost release reply or an unheld replacement worker is
//! acknowledged without a request, and everything the release checks is
//! checked again (test_update_handoff.py's retry scenarios).

use crate::update_handoff_support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;

use agents_common::UNINSTALL_INTENT_NAME;
use agents_common::WORKER_UNIT;
use agents_tests::{RequestMatch, Role, Stall, Switches};
use python_compat::json::{encode_indented, Json, JsonObject};
use rustix::fs::{flock, FlockOperation};
use update_handoff_support::{
    replace_file, tree, Case, Entry, Outcome, FOREIGN_OPERATION, OPERATION, UPDATE_ID,
};

/// A case whose first release failed: the worker refused it (409), and the
/// update runner saved the failed status that owns the handoff.
fn failed_case(test: &str) -> Option<Case> {
    let case = Case::start(test)?;
    case.switch(Switches {
        refuse: vec!["release".to_string()],
        ..Switches::default()
    });
    case.release()
        .assert_refused("RuntimeError: pinned HTTP response is invalid");
    case.switch(Switches::default());
    case.assert_lease_held();
    case.write_status(&case.failed_status());
    Some(case)
}

/// The status file's bytes and the install tree, for "nothing changed".
fn evidence(case: &Case) -> (Vec<u8>, BTreeMap<PathBuf, Entry>) {
    (fs::read(case.status_path()).unwrap(), case.install_tree())
}

/// Restarts the worker through systemd: a new PID and instance without the
/// lease (the replacement epoch of a lost release reply).
fn restart_worker(case: &Case) -> String {
    let before = case.worker_instance_id();
    case.sandbox.systemctl_ok(&["restart", WORKER_UNIT]);
    case.installation
        .wait_for_service(&case.sandbox, WORKER_UNIT, Role::Worker);
    let after = case.worker_instance_id();
    assert_ne!(after, before);
    after
}

/// Retry with the health reply stalled, `change` applied meanwhile.
fn retry_changed_during_health(
    case: &Case,
    expected: &JsonObject,
    change: impl FnOnce(),
) -> Outcome {
    case.stall_health();
    let mark = case.mark();
    let helper = case.spawn_retry(expected);
    case.during_health(helper, mark, change)
}

#[test]
fn a_refused_release_is_retried_once_then_acknowledged() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    let before = evidence(&case);
    let mark = case.mark();
    case.retry(&case.failed_status())
        .assert_released(false, &case.services.worker_instance_id());
    assert_eq!(case.maintenance_since(mark), ["release"]);
    assert!(case.worker_lease().is_null());
    assert_eq!(evidence(&case), before, "status and installation unchanged");
    case.assert_unlocked();

    // Retried again (the expected status from a file this time): the worker
    // no longer holds it, so it is acknowledged without a request.
    let expected_file = case.installation.state_root.join("expected-status.json");
    fs::write(
        &expected_file,
        encode_indented(&case.failed_status().into()),
    )
    .unwrap();
    let mark = case.mark();
    let output = case
        .command()
        .arg("retry-failed")
        .arg("--root")
        .arg(&case.installation.install_root)
        .arg("--status-file")
        .arg(case.status_path())
        .arg("--expected-status")
        .arg(&expected_file)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "{{\"already_released\": true, \"operation_id\": \"{OPERATION}\", \
             \"released\": true, \"worker_instance_id\": \"{}\"}}\n",
            case.services.worker_instance_id()
        )
    );
    assert_eq!((output.status.code(), output.stderr.len()), (Some(0), 0));
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());

    // A plain release of the spent handoff is still refused.
    case.release()
        .assert_refused("RuntimeError: worker no longer holds the exact sealed handoff");
}

#[test]
fn a_lost_release_reply_is_acknowledged_while_the_worker_is_busy() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    case.switch(Switches {
        stall: Some(Stall {
            on: RequestMatch::maintenance("release"),
            seconds: 8.0,
        }),
        ..Switches::default()
    });
    case.release().assert_refused("TimeoutError: timed out");
    case.write_status(&case.failed_status());
    // The worker has since admitted new work.
    case.switch(Switches {
        blockers: vec![("active_runs".to_string(), 2)],
        ..Switches::default()
    });
    let before = evidence(&case);
    let mark = case.mark();
    case.retry(&case.failed_status())
        .assert_released(true, &case.services.worker_instance_id());
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    assert_eq!(evidence(&case), before);
}

const NOT_FAILED: &str = "ValueError: status does not own a failed preinstaller handoff";
const NOT_OWNER: &str = "RuntimeError: saved failed status does not own this handoff";
/// Another update, whose handoff file the test puts in the same preparation.
const OTHER_UPDATE: &str = "fedcba9876543210fedcba9876543210";
/// An update without a handoff file.
const UPDATE_WITHOUT_HANDOFF: &str = "00000000000000000000000000000000";

/// Saved statuses that are not exactly the failed status owning this
/// handoff, with the retry's refusal: (what, status, refusal). First those
/// that are no retryable failed handoff release at all, then those of
/// another update, lease or none.
fn statuses_not_retried(case: &Case) -> Vec<(&'static str, JsonObject, String)> {
    let with = |key: &str, value: Json| {
        let mut status = case.failed_status();
        status.insert(key, value);
        status
    };
    let mut other_lease = case.failed_status();
    other_lease.insert(
        "_execution_handoff",
        case.handoff_with("lease_id", FOREIGN_OPERATION),
    );
    let mut no_handoff = case.failed_status();
    no_handoff.remove("_execution_handoff");
    let missing_handoff = case
        .handoff_path()
        .with_file_name(format!("handoff-{UPDATE_WITHOUT_HANDOFF}.json"));
    let not_failed = || NOT_FAILED.to_string();
    let not_owner = || NOT_OWNER.to_string();
    vec![
        ("phase", with("phase", "running".into()), not_failed()),
        (
            "error_code",
            with("error_code", "server_update_failed".into()),
            not_failed(),
        ),
        (
            "no error_code",
            with("error_code", Json::Null),
            not_failed(),
        ),
        (
            "retryable false",
            with("retryable", false.into()),
            not_failed(),
        ),
        ("retryable 1", with("retryable", 1.into()), not_failed()),
        ("runner_pid", with("runner_pid", 999.into()), not_failed()),
        (
            "uppercase update_id",
            with("update_id", UPDATE_ID.to_uppercase().as_str().into()),
            not_failed(),
        ),
        (
            "numeric preparation_id",
            with("preparation_id", 7.into()),
            not_failed(),
        ),
        (
            "another update_id",
            with("update_id", OTHER_UPDATE.into()),
            not_owner(),
        ),
        ("another lease", other_lease, not_owner()),
        ("no handoff", no_handoff, not_owner()),
        (
            "another update without a handoff",
            with("update_id", UPDATE_WITHOUT_HANDOFF.into()),
            format!(
                "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
                missing_handoff.display()
            ),
        ),
    ]
}

#[test]
fn only_the_exact_saved_failed_status_is_retried() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    // A second handoff file of another update in the same preparation.
    let other_file = case
        .handoff_path()
        .with_file_name(format!("handoff-{OTHER_UPDATE}.json"));
    replace_file(&other_file, &fs::read(case.handoff_path()).unwrap(), 0o600);
    for (what, status, refusal) in statuses_not_retried(&case) {
        // The caller's snapshot and the file agree; the status itself is wrong.
        case.write_status(&status);
        let mark = case.mark();
        let outcome = case.retry(&status);
        assert_eq!(outcome.refusal_line(), refusal, "{what}: {outcome:?}");
        assert!(case.requests_since(mark).is_empty(), "{what}: no request");
    }
    fs::remove_file(&other_file).unwrap();
    case.write_status(&case.failed_status());

    // The file differs from the caller's snapshot.
    let mut stale = case.failed_status();
    stale.insert("error", "an older message");
    let mark = case.mark();
    case.retry(&stale)
        .assert_refused("RuntimeError: failed update status changed before handoff recovery");
    assert!(case.requests_since(mark).is_empty());

    // The caller's snapshot is not an object, or not JSON.
    case.retry_with_stdin(b"[]")
        .assert_refused("ValueError: failed handoff status is invalid");
    case.retry_with_stdin(b"not json")
        .assert_refused("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)");

    // Nothing was touched: the same retry goes through.
    case.retry(&case.failed_status())
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn the_status_file_must_be_the_installed_private_one() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    let status_path = case.status_path();
    let expected = case.failed_status();
    let outside = "ValueError: handoff status is outside the installed state directory";
    let copies = [
        case.installation
            .state_root
            .join("admin/server-update.json.bak"),
        case.installation.state_root.join("server-update.json"),
        case.installation.install_root.join("server-update.json"),
    ];
    for copy in &copies {
        replace_file(copy, &fs::read(&status_path).unwrap(), 0o600);
        let mark = case.mark();
        case.retry_at(copy, &expected).assert_refused(outside);
        assert!(case.requests_since(mark).is_empty());
        fs::remove_file(copy).unwrap();
    }

    let original = fs::read(&status_path).unwrap();
    fs::set_permissions(&status_path, fs::Permissions::from_mode(0o644)).unwrap();
    case.retry(&expected).assert_refused(&format!(
        "PermissionError: execution configuration is unsafe: {}",
        status_path.display()
    ));
    fs::set_permissions(&status_path, fs::Permissions::from_mode(0o600)).unwrap();

    // A symlink at the status path, even to an identical private copy.
    let copy = status_path.with_file_name("server-update.copy.json");
    replace_file(&copy, &original, 0o600);
    fs::remove_file(&status_path).unwrap();
    symlink(&copy, &status_path).unwrap();
    case.retry(&expected).assert_refused(&format!(
        "ValueError: execution path contains a symlink: {}",
        status_path.display()
    ));
    fs::remove_file(&status_path).unwrap();
    fs::rename(&copy, &status_path).unwrap();

    // An uninstall intent owns recovery for a retry too.
    let intent = case.installation.install_root.join(UNINSTALL_INTENT_NAME);
    for dangling in [false, true] {
        match dangling {
            true => symlink(intent.with_file_name("missing"), &intent).unwrap(),
            false => fs::write(&intent, b"{}\n").unwrap(),
        }
        let mark = case.mark();
        case.retry(&expected)
            .assert_refused("RuntimeError: uninstall already owns execution recovery");
        assert!(case.requests_since(mark).is_empty());
        fs::remove_file(&intent).unwrap();
    }

    case.assert_lease_held();
    case.retry(&expected)
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn changes_between_the_two_reads_of_a_retry_are_caught() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    let expected = case.failed_status();

    // The status file changes while health is awaited.
    let mut changed = expected.clone();
    changed.insert("error", "rewritten by the server");
    retry_changed_during_health(&case, &expected, || case.write_status(&changed))
        .assert_refused("RuntimeError: failed update status changed before handoff recovery");
    case.write_status(&expected);

    // Another operation takes the lease before the retry.
    case.release_lease(OPERATION, &case.lease_id);
    let foreign = case.seal(FOREIGN_OPERATION);
    let mark = case.mark();
    case.retry(&expected)
        .assert_refused("RuntimeError: worker no longer holds the exact sealed handoff");
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    case.release_lease(FOREIGN_OPERATION, &foreign);

    // Unheld now; a lease of the handoff's operation appears after health.
    let mark = case.mark();
    retry_changed_during_health(&case, &expected, || {
        case.seal(OPERATION);
    })
    .assert_refused("RuntimeError: worker no longer holds the exact sealed handoff");
    assert_eq!(case.maintenance_since(mark), ["acquire", "seal"]);

    // An unheld worker whose status names another instance.
    let lease = case.worker_lease();
    case.release_lease(OPERATION, lease.get("lease_id").unwrap().as_str().unwrap());
    case.switch(Switches {
        reply_instance_id: Some("another-worker-instance".to_string()),
        ..Switches::default()
    });
    case.retry(&expected)
        .assert_refused("RuntimeError: private worker status does not match its process receipt");
    case.switch(Switches::default());
    case.retry(&expected)
        .assert_released(true, &case.services.worker_instance_id());
}

#[test]
fn an_unheld_replacement_worker_is_acknowledged_under_exclusive_state_ownership() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    let expected = case.failed_status();
    let replacement = restart_worker(&case);
    case.switch(Switches {
        blockers: vec![("queued_turns".to_string(), 1)],
        ..Switches::default()
    });
    let before = evidence(&case);
    let state_before = tree(&case.installation.state_root.join("admin"));
    let mark = case.mark();
    case.retry(&expected).assert_released(true, &replacement);
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    assert_eq!(evidence(&case), before);
    assert_eq!(
        tree(&case.installation.state_root.join("admin")),
        state_before
    );

    // The replacement takes a lease: it is no longer an unheld epoch.
    case.switch(Switches::default());
    let lease_id = case.acquire(OPERATION);
    case.retry(&expected)
        .assert_refused("RuntimeError: native worker no longer owns the handoff");
    // ... nor when such a lease appears after health.
    case.release_lease(OPERATION, &lease_id);
    retry_changed_during_health(&case, &expected, || {
        case.acquire(FOREIGN_OPERATION);
    })
    .assert_refused("RuntimeError: native worker no longer owns the handoff");
}

#[test]
fn a_replacement_needs_the_same_exclusive_state_owner_lock_throughout() {
    let Some(case) = failed_case(agents_tests::test_name!()) else {
        return;
    };
    let expected = case.failed_status();
    let replacement = restart_worker(&case);
    let lock = case.installation.state_root.join("admin/state-owner.lock");
    let not_held = "RuntimeError: replacement worker does not hold exclusive state ownership";

    // The file at the lock's name is not the one the worker holds.
    let held_by_worker = lock.with_file_name("state-owner.lock.held");
    fs::rename(&lock, &held_by_worker).unwrap();
    replace_file(&lock, b"", 0o600);
    let mark = case.mark();
    case.retry(&expected).assert_refused(not_held);
    assert!(case
        .requests_since(mark)
        .iter()
        .all(|r| r.path != "/api/health"));
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
    case.retry(&expected)
        .assert_refused("PermissionError: worker state ownership lock is unsafe");
    fs::remove_file(&lock).unwrap();
    fs::rename(&held_by_worker, &lock).unwrap();

    // Released during the requests.
    retry_changed_during_health(&case, &expected, || {
        fs::rename(&lock, &held_by_worker).unwrap();
        replace_file(&lock, b"", 0o600);
    })
    .assert_refused(not_held);
    fs::remove_file(&lock).unwrap();
    fs::rename(&held_by_worker, &lock).unwrap();

    // Exclusively held throughout, but by another lock file.
    let mut impostor = None;
    retry_changed_during_health(&case, &expected, || {
        fs::rename(&lock, &held_by_worker).unwrap();
        replace_file(&lock, b"", 0o600);
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lock)
            .unwrap();
        flock(&file, FlockOperation::NonBlockingLockExclusive).unwrap();
        impostor = Some(file);
    })
    .assert_refused("RuntimeError: worker state ownership changed before acknowledgment");
    drop(impostor);
    fs::remove_file(&lock).unwrap();
    fs::rename(&held_by_worker, &lock).unwrap();

    // The worker's own lock, unchanged: acknowledged.
    let mark = case.mark();
    case.retry(&expected).assert_released(true, &replacement);
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
}

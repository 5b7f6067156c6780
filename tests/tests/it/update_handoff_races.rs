//! What changes while `update-handoff release` waits for the worker's
//! authenticated health (the reply is held back by the test worker) is
//! caught by the second read before the release is sent; a worker restarted
//! in that gap, and a release reply that never arrives, fail without a
//! success line.

use crate::update_handoff_support;

use std::fs;
use std::os::unix::fs::symlink;

use agents_common::UNINSTALL_INTENT_NAME;
use agents_common::WORKER_UNIT;
use agents_tests::{Death, DeathPoint, RequestMatch, Stall, Switches, SERVICE_TIMEOUT};
use python_compat::json::{encode_indented, Json};
use update_handoff_support::{replace_file, Case, Outcome, HEALTH, OPERATION};

/// Starts a release with the health reply stalled, applies `change` while
/// the helper waits for it, and returns the outcome; asserts that no
/// maintenance request was sent besides `own` ones the change sent itself.
fn release_changed_during_health(case: &Case, own: usize, change: impl FnOnce()) -> Outcome {
    case.stall_health();
    let mark = case.mark();
    let helper = case.spawn_release();
    let outcome = case.during_health(helper, mark, change);
    assert_eq!(
        case.maintenance_since(mark).len(),
        own,
        "the helper sent no maintenance request"
    );
    outcome
}

#[test]
fn lease_changes_after_health_are_caught() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let exact = "RuntimeError: worker no longer holds the exact sealed handoff";

    // The lease disappears (another client released it).
    release_changed_during_health(&case, 1, || {
        case.release_lease(OPERATION, &case.lease_id);
    })
    .assert_refused(exact);

    // A new lease of the same operation appears in its place.
    let lease_id = case.seal(OPERATION);
    case.write_handoff(&case.handoff_with("lease_id", lease_id.as_str()));
    release_changed_during_health(&case, 3, || {
        case.release_lease(OPERATION, &lease_id);
        case.seal(OPERATION);
    })
    .assert_refused(exact);
    case.assert_unlocked();
}

#[test]
fn local_provenance_changes_after_health_are_caught() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let root = case.installation.install_root.clone();
    let path = case.handoff_path();
    let original = fs::read(&path).unwrap();

    // The handoff is rewritten with other content.
    release_changed_during_health(&case, 0, || {
        case.write_handoff(&case.handoff_with("expected_server_identity", "another-server"));
    })
    .assert_refused("RuntimeError: handoff provenance changed before release");
    replace_file(&path, &original, 0o600);

    // The handoff is replaced by a symlink to an identical copy.
    let copy = path.with_file_name("copy.json");
    release_changed_during_health(&case, 0, || {
        replace_file(&copy, &original, 0o600);
        fs::remove_file(&path).unwrap();
        symlink(&copy, &path).unwrap();
    })
    .assert_refused(&format!(
        "ValueError: execution path contains a symlink: {}",
        path.display()
    ));
    fs::remove_file(&path).unwrap();
    fs::rename(&copy, &path).unwrap();

    // An activation or an uninstall takes over recovery.
    for (name, refusal) in [
        (
            ".activation-transaction",
            "RuntimeError: activation already owns handoff recovery",
        ),
        (
            UNINSTALL_INTENT_NAME,
            "RuntimeError: uninstall already owns execution recovery",
        ),
    ] {
        let entry = root.join(name);
        release_changed_during_health(&case, 0, || fs::write(&entry, b"{}\n").unwrap())
            .assert_refused(refusal);
        fs::remove_file(&entry).unwrap();
    }

    // The installed layout manifest changes.
    let manifest = case.layout.manifest_path();
    let layout_bytes = fs::read(&manifest).unwrap();
    release_changed_during_health(&case, 0, || {
        let mut changed = python_compat::json::parse_json(&layout_bytes).unwrap();
        if let Json::Object(object) = &mut changed {
            object.insert("format", 99);
        }
        replace_file(&manifest, &encode_indented(&changed), 0o600);
    })
    .assert_refused("ValueError: installed execution layout changed");
    replace_file(&manifest, &layout_bytes, 0o600);

    // Unchanged, the same release goes through.
    case.assert_lease_held();
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn worker_receipt_changes_after_health_are_caught() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let receipt = case.worker_receipt();

    // Another instance answers from the same process and receipt.
    let mut other_instance = receipt.clone();
    other_instance.insert("instance_id", "another-worker-instance");
    release_changed_during_health(&case, 0, || {
        case.write_worker_receipt(&other_instance);
        case.switch(Switches {
            reply_instance_id: Some("another-worker-instance".to_string()),
            ..Switches::default()
        });
    })
    .assert_refused("RuntimeError: native worker no longer owns the handoff");
    case.write_worker_receipt(&receipt);

    // The receipt names another process.
    let mut other_pid = receipt.clone();
    other_pid.insert("pid", 999_999);
    release_changed_during_health(&case, 0, || case.write_worker_receipt(&other_pid))
        .assert_refused(
            "RuntimeError: native worker or callback receipt changed before credentials were sent",
        );
    case.write_worker_receipt(&receipt);

    // Any other receipt change between the two reads.
    let mut republished = receipt.clone();
    republished.insert("version", "1.0.0+republished");
    release_changed_during_health(&case, 0, || case.write_worker_receipt(&republished))
        .assert_refused("RuntimeError: worker process receipt changed before release");
    case.write_worker_receipt(&receipt);

    case.assert_lease_held();
    case.assert_unlocked();
}

#[test]
fn a_worker_restarted_after_health_is_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    // The worker exits right after its health reply; systemd restarts it
    // with a new PID and instance that holds no lease.
    case.switch(Switches {
        die: Some(Death {
            on: RequestMatch::path(HEALTH),
            when: DeathPoint::AfterReply,
            exit_code: Some(1),
        }),
        ..Switches::default()
    });
    let mark = case.mark();
    let outcome = case.release();
    let line = outcome.refusal_line().to_string();
    case.switch(Switches::default());
    // Which check notices first depends on how far the restart has come.
    let expected = [
        "RuntimeError: native service is transitioning; retry after it settles",
        "RuntimeError: credential endpoint has no running native owner",
        "RuntimeError: native worker or callback receipt changed before credentials were sent",
        "RuntimeError: pinned HTTP response is invalid",
        "RuntimeError: pinned HTTP connection ownership could not be proven",
    ];
    // A request racing the exit fails at the socket (refused or reset), or
    // the receipt is being replaced by the new process.
    let socket_error = [
        "OSError: ",
        "ConnectionRefusedError: ",
        "ConnectionResetError: ",
        "FileNotFoundError: ",
    ]
    .iter()
    .any(|class| line.starts_with(class));
    assert!(
        expected.contains(&line.as_str()) || socket_error,
        "unexpected refusal: {line}"
    );
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    let restarted =
        case.sandbox
            .wait_for_unit(WORKER_UNIT, SERVICE_TIMEOUT, "restarted", |state| {
                state.is_running() && state.main_pid != case.services.worker_pid
            });
    assert_ne!(restarted.main_pid, case.services.worker_pid);
    case.assert_unlocked();
}

#[test]
fn a_release_reply_that_never_arrives_is_an_error() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    // The worker takes the release, then its reply is held past the
    // helper's 5 s request timeout.
    case.switch(Switches {
        stall: Some(Stall {
            on: RequestMatch::maintenance("release"),
            seconds: 8.0,
        }),
        ..Switches::default()
    });
    let mark = case.mark();
    case.release().assert_refused("TimeoutError: timed out");
    assert_eq!(case.maintenance_since(mark), ["release"]);
    case.switch(Switches::default());
    assert!(
        case.worker_lease().is_null(),
        "the release took effect; only its reply was lost"
    );
    case.assert_unlocked();
}

#[test]
fn a_worker_dying_on_the_release_is_an_error() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    case.switch(Switches {
        die: Some(Death {
            on: RequestMatch::maintenance("release"),
            when: DeathPoint::BeforeHandling,
            exit_code: None,
        }),
        ..Switches::default()
    });
    let mark = case.mark();
    case.release()
        .assert_refused("RuntimeError: pinned HTTP response is invalid");
    assert_eq!(case.maintenance_since(mark), ["release"]);
    case.switch(Switches::default());
    case.assert_unlocked();
}

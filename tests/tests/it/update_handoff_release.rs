//! `update-handoff release` against a real systemd user manager and the test
//! worker: the exact sealed handoff is released once, after every check, and
//! every refusal leaves the installation, the worker's lease and the handoff
//! file exactly as they were (test_update_handoff.py's release scenarios).

use crate::update_handoff_support;

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::process::Command;
use std::time::Duration;

use agents_common::WORKER_UNIT;
use agents_tests::{poll_until, Switches};
use update_handoff_support::{Case, FOREIGN_OPERATION, HEALTH, MAINTENANCE, OPERATION, STATUS};

#[test]
fn releases_the_exact_sealed_handoff_once() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let handoff_before = fs::metadata(case.handoff_path()).unwrap();
    let tree_before = case.install_tree();
    let mark = case.mark();

    case.release()
        .assert_released(false, &case.services.worker_instance_id());

    // Status, authenticated health, status again, then the one release.
    let requests: Vec<_> = case
        .requests_since(mark)
        .into_iter()
        .map(|record| (record.path, record.credential, record.action, record.status))
        .collect();
    let control = |path: &str, action: Option<&str>| {
        (
            path.to_string(),
            "control".to_string(),
            action.map(str::to_string),
            200,
        )
    };
    assert_eq!(
        requests,
        [
            control(STATUS, None),
            (HEALTH.to_string(), "agent".to_string(), None, 200),
            control(STATUS, None),
            control(MAINTENANCE, Some("release")),
        ]
    );
    assert!(
        case.worker_lease().is_null(),
        "the worker released its hold"
    );
    let handoff_after = fs::metadata(case.handoff_path()).unwrap();
    assert_eq!(
        (
            handoff_after.ino(),
            handoff_after.mode(),
            handoff_after.mtime_nsec()
        ),
        (
            handoff_before.ino(),
            handoff_before.mode(),
            handoff_before.mtime_nsec()
        )
    );
    assert_eq!(
        case.install_tree(),
        tree_before,
        "the installation is unchanged"
    );
    case.assert_unlocked();

    // The handoff is spent: a second release finds no exact sealed lease.
    let mark = case.mark();
    case.release()
        .assert_refused("RuntimeError: worker no longer holds the exact sealed handoff");
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    case.assert_unlocked();
}

#[test]
fn activation_journals_and_uninstall_intents_own_recovery() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let root = case.installation.install_root.clone();
    let tree_before = case.install_tree();
    let activation = "RuntimeError: activation already owns handoff recovery";
    let uninstall = "RuntimeError: uninstall already owns execution recovery";
    let cases: [(&str, &str, &str); 8] = [
        (".activation-transaction", "file", activation),
        (".activation-transaction", "directory", activation),
        (".activation-transaction", "dangling symlink", activation),
        (".execution-transaction", "file", activation),
        (".execution-transaction", "directory", activation),
        (".execution-transaction", "dangling symlink", activation),
        (".execution-uninstall.json", "file", uninstall),
        (".execution-uninstall.json", "dangling symlink", uninstall),
    ];
    for (name, kind, refusal) in cases {
        let path = root.join(name);
        match kind {
            "file" => fs::write(&path, b"{}\n").unwrap(),
            "directory" => fs::create_dir(&path).unwrap(),
            _ => symlink(root.join("missing-target"), &path).unwrap(),
        }
        let mark = case.mark();
        let outcome = case.release();
        assert_eq!(
            outcome.refusal_line(),
            refusal,
            "{name} as a {kind}: {outcome:?}"
        );
        assert!(case.requests_since(mark).is_empty(), "{name}: no request");
        match kind {
            "directory" => fs::remove_dir(&path).unwrap(),
            _ => fs::remove_file(&path).unwrap(),
        }
        assert_eq!(case.install_tree(), tree_before, "{name} as a {kind}");
    }
    case.assert_lease_held();
    // The same installation releases once nothing else owns recovery.
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn an_idle_worker_is_required() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let mark = case.mark();
    case.switch(Switches {
        blockers: vec![("managed_update".to_string(), 1)],
        ..Switches::default()
    });
    case.release()
        .assert_refused("RuntimeError: worker cleanup or admission has not settled");
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new());
    case.switch(Switches::default());
    case.assert_lease_held();
}

const NOT_OWNER: &str = "RuntimeError: native worker no longer owns the handoff";
const NOT_EXACT: &str = "RuntimeError: worker no longer holds the exact sealed handoff";
const OTHER_IDENTITY: &str = "RuntimeError: authenticated worker identity does not match handoff";

/// Handoff fields naming another worker, operation, lease or server:
/// (key, value, refusal).
const HANDOFF_MISMATCHES: [(&str, &str, &str); 4] = [
    ("worker_instance_id", "another-worker-instance", NOT_OWNER),
    ("operation_id", FOREIGN_OPERATION, NOT_EXACT),
    ("lease_id", FOREIGN_OPERATION, NOT_EXACT),
    ("expected_server_identity", "another-server", OTHER_IDENTITY),
];

/// Worker switches under which its answers no longer match the handoff:
/// (what, switches, refusal).
fn mismatching_answers() -> [(&'static str, Switches, &'static str); 3] {
    [
        (
            "status of another instance",
            Switches {
                reply_instance_id: Some("another-worker-instance".to_string()),
                ..Switches::default()
            },
            "RuntimeError: private worker status does not match its process receipt",
        ),
        (
            "health of another server",
            Switches {
                server_identity: Some("another-server".to_string()),
                ..Switches::default()
            },
            OTHER_IDENTITY,
        ),
        (
            "unavailable health",
            Switches {
                health_status: Some(503),
                ..Switches::default()
            },
            "RuntimeError: pinned HTTP response is invalid",
        ),
    ]
}

/// Releases the case's handoff and asserts `refusal` with no maintenance
/// request sent and no installation lock left.
#[track_caller]
fn assert_refused_without_maintenance(case: &Case, what: &str, refusal: &str) {
    let mark = case.mark();
    let outcome = case.release();
    assert_eq!(outcome.refusal_line(), refusal, "{what}: {outcome:?}");
    assert_eq!(case.maintenance_since(mark), Vec::<String>::new(), "{what}");
    case.assert_unlocked();
}

/// `worker.json` rewritten as another release's, then another process's,
/// is refused each time; the receipt and releases are restored after.
fn assert_changed_receipts_refused(case: &Case) {
    let receipt = case.worker_receipt();
    case.installation.add_release("1.0.1");
    let mut other_release = receipt.clone();
    other_release.insert(
        "release_root",
        case.installation.release_dir("1.0.1").to_str().unwrap(),
    );
    let mut other_pid = receipt.clone();
    other_pid.insert("pid", 999_999);
    for (what, changed, refusal) in [
        ("a receipt of another release", &other_release, NOT_OWNER),
        (
            "a receipt of another process",
            &other_pid,
            "RuntimeError: native worker or callback receipt changed before credentials were sent",
        ),
    ] {
        case.write_worker_receipt(changed);
        assert_refused_without_maintenance(case, what, refusal);
    }
    case.write_worker_receipt(&receipt);
    fs::remove_dir_all(case.installation.release_dir("1.0.1")).unwrap();
}

#[test]
fn a_worker_that_no_longer_matches_the_handoff_is_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    for (key, value, refusal) in HANDOFF_MISMATCHES {
        case.write_handoff(&case.handoff_with(key, value));
        assert_refused_without_maintenance(&case, key, refusal);
    }
    case.write_handoff(&case.handoff());

    // The worker's answers or receipt no longer match.
    for (what, switches, refusal) in mismatching_answers() {
        case.switch(switches);
        assert_refused_without_maintenance(&case, what, refusal);
    }
    case.switch(Switches::default());
    assert_changed_receipts_refused(&case);

    // An unsealed (expiring) lease of the same operation is not the handoff.
    case.release_lease(OPERATION, &case.lease_id);
    let unsealed = case.acquire(OPERATION);
    case.write_handoff(&case.handoff_with("lease_id", unsealed.as_str()));
    assert_refused_without_maintenance(&case, "an unsealed lease", NOT_EXACT);

    // Sealed, it is exactly the handoff again: the checks were all that
    // stood in the way.
    case.maintenance("seal", OPERATION, Some(&unsealed));
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn a_stopped_worker_cannot_release() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let receipt = case.worker_receipt();
    case.sandbox.systemctl_ok(&["stop", WORKER_UNIT]);
    let worker_json = case.installation.runtime_dir().join("worker.json");
    case.release().assert_refused(&format!(
        "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
        worker_json.display()
    ));
    // A stale receipt left behind does not make the stopped worker an owner.
    case.write_worker_receipt(&receipt);
    case.release()
        .assert_refused("RuntimeError: credential endpoint has no running native owner");
    case.assert_unlocked();
}

#[test]
fn a_live_installer_lock_is_refused_and_a_dead_one_reaped() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let root = &case.installation.install_root;
    let lock = root.join(".install-lock");
    // An installer that took the lock as install.sh does, and keeps running.
    let mut installer = Command::new("sh")
        .arg("-c")
        .arg(r#"umask 077 && mkdir "$0/.install-lock" && echo $$ > "$0/.install-lock/pid" && exec sleep 60"#)
        .arg(root)
        .spawn()
        .unwrap();
    let owner = format!("{}\n", installer.id());
    poll_until(Duration::from_secs(10), "the installer's lock", || {
        (fs::read_to_string(lock.join("pid")).ok()? == owner).then_some(())
    });
    let mark = case.mark();
    case.release()
        .assert_refused("RuntimeError: another installer owns the installation lock");
    assert!(case.requests_since(mark).is_empty());
    assert_eq!(fs::read_to_string(lock.join("pid")).unwrap(), owner);
    case.assert_lease_held();

    // The installer dies without releasing: its lock is reaped.
    installer.kill().unwrap();
    installer.wait().unwrap();
    assert_eq!(fs::read_to_string(lock.join("pid")).unwrap(), owner);
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
    case.assert_unlocked();
}

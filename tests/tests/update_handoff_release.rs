//! `update-handoff release` against a real systemd user manager and the test
//! worker: the exact sealed handoff is released once, after every check, and
//! every refusal leaves the installation, the worker's lease and the handoff
//! file exactly as they were (test_update_handoff.py's release scenarios).

mod update_handoff_support;

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};

use agents_tests::Switches;
use update_handoff_support::{Case, HEALTH, MAINTENANCE, STATUS};

#[test]
fn releases_the_exact_sealed_handoff_once() {
    let Some(case) = Case::start("releases_the_exact_sealed_handoff_once") else {
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
    let Some(case) = Case::start("activation_journals_and_uninstall_intents_own_recovery") else {
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
    let Some(case) = Case::start("an_idle_worker_is_required") else {
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

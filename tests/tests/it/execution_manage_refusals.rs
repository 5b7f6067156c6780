//! `execution-manage` refusing before anything changes: each test proves the
//! exact stderr line and exit status, that no file, link, journal or lock was
//! left different, that systemd still runs the same processes, and what (if
//! anything) the worker was asked.

use crate::execution_manage_support;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::{Command, Stdio};

use agents_common::GATEWAY_UNIT;
use agents_common::{atomic_write, ExecutionLayout, Platform};
use agents_tests::Role;
use execution_manage_support::{control_requests, Disk, Serving, Site, NEW, OLD};
use python_compat::json::{encode_line, Json};

/// A running site and the state every refusal must leave exactly as found.
struct Untouched {
    disk: Disk,
    serving: Serving,
    mark: usize,
}

fn untouched(site: &Site) -> Untouched {
    Untouched {
        serving: site.assert_serving(&site.layout(OLD, OLD)),
        disk: site.disk(),
        mark: site.request_mark(Role::Worker),
    }
}

impl Untouched {
    /// Nothing changed; returns the control requests the worker saw.
    fn assert_unchanged(&self, site: &Site) -> Vec<String> {
        assert_eq!(
            site.disk(),
            self.disk,
            "files, links and enablement unchanged"
        );
        assert!(site.pending_journal().is_none(), "nothing staged");
        assert!(site.completed_journals().is_empty(), "no journal at all");
        assert_eq!(
            site.assert_serving(&site.layout(OLD, OLD)),
            self.serving,
            "the same processes run"
        );
        site.assert_unlocked();
        control_requests(
            &site.requests_since(Role::Worker, self.mark),
            &self.serving.worker_instance_id,
        )
    }
}

#[test]
fn another_operation_holding_worker_admission_refuses_before_staging() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let lease = site.acquire_foreign_lease("00000000-0000-4000-8000-000000000001");
    let state = untouched(&site);

    site.apply(&site.layout(NEW, OLD), "worker")
        .assert_refused("RuntimeError: another execution operation already owns worker admission");

    assert_eq!(
        state.assert_unchanged(&site),
        ["GET status"],
        "never acquired"
    );
    assert_eq!(
        site.worker_lease(),
        lease,
        "the other operation's hold is intact"
    );
}

#[test]
fn a_worker_receipt_naming_another_process_refuses_before_any_credential() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    // The receipt names the gateway's PID instead of the worker's.
    let receipt_path = site.installation.runtime_dir().join("worker.json");
    let original = fs::read(&receipt_path).unwrap();
    let mut receipt = site.installation.receipt(Role::Worker).unwrap();
    receipt
        .as_object_mut()
        .unwrap()
        .insert("pid", state.serving.gateway_pid);
    atomic_write(
        &receipt_path,
        (encode_line(&receipt, true) + "\n").as_bytes(),
        0o600,
    )
    .unwrap();

    site.apply(&site.layout(NEW, OLD), "worker").assert_refused(
        "RuntimeError: native worker or callback receipt changed before credentials were sent",
    );

    atomic_write(&receipt_path, &original, 0o600).unwrap();
    assert!(
        state.assert_unchanged(&site).is_empty(),
        "no control request was sent"
    );
}

#[test]
fn a_transitioning_service_refuses_before_anything() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let serving = site.assert_serving(&site.layout(OLD, OLD));
    // A drop-in (not a file the activation owns) keeps the restarted gateway
    // in `activating` with no main process for a minute.
    let drop_in = site.sandbox.unit_dir().join(format!("{GATEWAY_UNIT}.d"));
    fs::create_dir(&drop_in).unwrap();
    fs::write(
        drop_in.join("hold.conf"),
        "[Service]\nExecStartPre=/bin/sleep 60\n",
    )
    .unwrap();
    site.sandbox.systemctl_ok(&["daemon-reload"]);
    site.sandbox
        .systemctl_ok(&["restart", "--no-block", GATEWAY_UNIT]);
    site.sandbox.wait_for_unit(
        GATEWAY_UNIT,
        agents_tests::SERVICE_TIMEOUT,
        "activating",
        |state| state.active_state == "activating" && state.main_pid == 0,
    );
    let disk = site.disk();
    let mark = site.request_mark(Role::Worker);

    for (layout, scope) in [
        (site.layout(NEW, OLD), "worker"),
        (site.layout(OLD, NEW), "gateway"),
    ] {
        site.apply(&layout, scope).assert_refused(
            "RuntimeError: native service is transitioning; retry after it settles",
        );
    }

    assert_eq!(site.disk(), disk);
    assert!(site.pending_journal().is_none() && site.completed_journals().is_empty());
    assert_eq!(
        site.sandbox.unit_state(GATEWAY_UNIT).active_state,
        "activating",
        "still settling: the refusals happened while it transitioned"
    );
    let worker = site.sandbox.unit_state(agents_common::WORKER_UNIT);
    assert_eq!(
        worker.main_pid, serving.worker_pid,
        "the worker was not touched"
    );
    assert!(site.requests_since(Role::Worker, mark).is_empty());
    site.assert_unlocked();
}

#[test]
fn a_layout_file_that_is_not_private_is_refused() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    let file = site.layout_file(&site.layout(NEW, OLD));
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    site.manage(&[
        "apply".as_ref(),
        "--layout".as_ref(),
        file.as_os_str(),
        "--scope".as_ref(),
        "worker".as_ref(),
    ])
    .assert_refused(&format!(
        "PermissionError: execution configuration is unsafe: {}",
        file.display()
    ));
    // A symlink to a private layout file is not followed.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    let link = site.sandbox.base().join("layout-link.json");
    symlink(&file, &link).unwrap();
    site.manage(&[
        "apply".as_ref(),
        "--layout".as_ref(),
        link.as_os_str(),
        "--scope".as_ref(),
        "worker".as_ref(),
    ])
    .assert_refused(&format!(
        "OSError: [Errno 40] Too many levels of symbolic links: '{}'",
        link.display()
    ));
    assert!(state.assert_unchanged(&site).is_empty());
}

#[test]
fn symlinked_roots_are_refused_by_every_command() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    let linked_root = site.sandbox.base().join("install-link");
    symlink(&site.installation.install_root, &linked_root).unwrap();
    let mut layout: ExecutionLayout = site.layout(NEW, OLD);
    layout.install_root = linked_root.clone();
    layout.worker_release = linked_root.join("releases").join(NEW);
    layout.gateway_release = linked_root.join("releases").join(OLD);
    let refusal = format!(
        "ValueError: execution path contains a symlink: {}",
        linked_root.display()
    );

    site.apply(&layout, "worker").assert_refused(&refusal);
    for command in ["recover", "inspect"] {
        site.manage(&[command.as_ref(), "--root".as_ref(), linked_root.as_os_str()])
            .assert_refused(&refusal);
    }

    fs::remove_file(&linked_root).unwrap();
    assert!(state.assert_unchanged(&site).is_empty());
}

#[test]
fn a_worker_change_that_also_changes_the_gateway_is_refused_at_staging() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);

    site.apply(&site.layout(NEW, NEW), "worker")
        .assert_refused("ValueError: worker activation changes another component's configuration");
    site.apply(&site.layout(NEW, NEW), "migration")
        .assert_refused("ValueError: execution layout already exists; migration is not an update");

    // The preflight ran for both (health through the gateway, then status).
    assert_eq!(state.assert_unchanged(&site), ["GET status", "GET status"]);
    assert_eq!(site.worker_lease(), Json::Null);
}

#[test]
fn a_legacy_monolith_is_not_migrated_directly() {
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    site.installation
        .set_current(&site.installation.release_dir(OLD));
    site.installation.write_monolith_unit(site.port);
    site.sandbox.systemctl_ok(&["daemon-reload"]);
    site.sandbox
        .systemctl_ok(&["enable", "--now", agents_common::WORKER_UNIT]);
    let running = site.sandbox.wait_for_unit(
        agents_common::WORKER_UNIT,
        agents_tests::SERVICE_TIMEOUT,
        "running",
        |state| state.is_running(),
    );
    let disk = site.disk();

    // No split runtime: the private worker receipt cannot even be looked for.
    site.apply(&site.layout(NEW, NEW), "migration")
        .assert_refused(&format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
            site.installation.runtime_dir().display()
        ));

    assert_eq!(site.disk(), disk);
    assert!(site.pending_journal().is_none() && site.completed_journals().is_empty());
    assert!(
        !site.installation.runtime_dir().exists(),
        "no runtime was prepared"
    );
    let state = site.sandbox.unit_state(agents_common::WORKER_UNIT);
    assert_eq!(
        (state.is_running(), state.main_pid),
        (true, running.main_pid)
    );
    site.assert_unlocked();
}

#[test]
fn nothing_to_recover_or_inspect_is_the_missing_journal() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    let journal = site
        .installation
        .install_root
        .join(".execution-transaction");
    for command in ["recover", "inspect"] {
        site.manage(&[
            command.as_ref(),
            "--root".as_ref(),
            site.installation.install_root.as_os_str(),
        ])
        .assert_refused(&format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
            journal.display()
        ));
    }
    assert!(state.assert_unchanged(&site).is_empty());
}

#[test]
fn usage_errors_exit_2_without_touching_anything() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    let file = site.layout_file(&site.layout(NEW, OLD));
    let output = Command::new(agents_tests::binary_path("execution-manage"))
        .args(["apply", "--scope", "everything", "--layout"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).ends_with(
        "execution-manage apply: error: argument --scope: invalid choice: 'everything' \
         (choose from 'migration', 'gateway', 'worker')\n"
    ));
    assert!(state.assert_unchanged(&site).is_empty());
}

#[test]
fn a_layout_for_the_other_platform_is_refused_under_the_lock() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let state = untouched(&site);
    let mut layout = site.layout(NEW, OLD);
    layout.platform = Platform::Darwin.into();

    site.apply(&layout, "worker")
        .assert_refused("ValueError: native execution platform does not match this host");

    assert!(state.assert_unchanged(&site).is_empty());
}

#[test]
fn a_pending_launchd_journal_is_inspected_but_recovered_only_on_its_host() {
    // A journal staged for a macOS layout names plists; inspect reads it on
    // any host, recover needs the layout's own service manager and refuses
    // here under the lock, touching nothing.
    let Some(site) = Site::empty(agents_tests::test_name!()) else {
        return;
    };
    let mut layout = site.layout(NEW, NEW);
    layout.platform = Platform::Darwin.into();
    let absent = python_compat::json_object! { "state" => "absent", "enabled" => false };
    let prior = Json::Object(python_compat::json_object! {
        "worker" => absent.clone(), "gateway" => absent,
    });
    let staged = execution_manage::ExecutionTransaction::stage(&layout, "migration", &prior, None)
        .expect("a launchd journal stages on any host");
    let plist = site
        .installation
        .home
        .join("Library/LaunchAgents/com.agentsdock.server.plist");
    assert_eq!(
        staged.get("paths").unwrap().get("worker"),
        Some(&Json::from(plist.to_str().unwrap()))
    );
    let journal = std::fs::read(
        site.installation
            .install_root
            .join(".execution-transaction/manifest.json"),
    )
    .unwrap();

    let inspected = site.inspect().assert_ok_json();
    assert_eq!(inspected.get("id"), staged.get("id"));
    assert_eq!(inspected.get("scope"), Some(&Json::from("migration")));
    assert_eq!(inspected.get("phase"), Some(&Json::from("prepared")));

    site.recover()
        .assert_refused("ValueError: native execution platform does not match this host");
    site.assert_unlocked();
    let after = std::fs::read(
        site.installation
            .install_root
            .join(".execution-transaction/manifest.json"),
    )
    .unwrap();
    assert_eq!(after, journal);
    assert!(!plist.exists());
}

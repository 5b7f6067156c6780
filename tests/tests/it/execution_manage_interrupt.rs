//! Ctrl-C (SIGINT) during `execution-manage apply`, as Python meets it with
//! `KeyboardInterrupt`: the failure handling is skipped, so the journal and
//! the worker's sealed hold stay for `recover`, but the installation lock is
//! released after its identity checks and the helper dies by SIGINT. A lock
//! changed meanwhile is refused as the original's `__exit__` refuses it, and a
//! SIGINT the caller ignored stays ignored.
//!
//! Each interrupt lands while the worker holds back its reply to `seal`, so
//! the helper is mid-request with the lock held and services untouched.

use crate::execution_manage_support;

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Child;

use agents_tests::{RequestMatch, Role, Switches};
use execution_manage_support::{finish, receipt_line, rolled_back_line, Site, NEW, OLD};
use python_compat::json::Json;

/// Starts a worker-scope apply to `NEW` and waits until its `seal` stalls.
fn apply_stalled_at_seal(site: &Site, seconds: f64, ignore_sigint: bool) -> Child {
    let mark = site.request_mark(Role::Worker);
    site.switch(
        Role::Worker,
        Switches::stalling(RequestMatch::maintenance("seal"), seconds),
    );
    let file = site.layout_file(&site.layout(NEW, OLD));
    let mut command = site.command();
    command
        .arg("apply")
        .arg("--layout")
        .arg(file)
        .args(["--scope", "worker"]);
    let ignored: &'static [libc::c_int] = if ignore_sigint { &[libc::SIGINT] } else { &[] };
    agents_tests::with_termination_signals(&mut command, ignored);
    let child = command.spawn().expect("execution-manage starts");
    site.wait_for_request(Role::Worker, mark, "seal", |record| {
        record.action.as_deref() == Some("seal") && record.outcome == "stalled"
    });
    child
}

fn interrupt(child: &Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child PID");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT the helper");
}

#[test]
fn ctrl_c_releases_the_lock_and_leaves_the_journal_for_recover() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let old = site.layout(OLD, OLD);
    let before = site.assert_serving(&old);
    let disk = site.disk();
    let identity = site.server_identity();
    let child = apply_stalled_at_seal(&site, 30.0, false);
    interrupt(&child);
    let output = child.wait_with_output().expect("the helper ends");
    site.switch(Role::Worker, Switches::default());

    assert_eq!(output.status.signal(), Some(libc::SIGINT), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "KeyboardInterrupt\n"
    );
    assert_eq!(output.stdout, b"");
    // `with InstallationLock` released the lock on the way out ...
    site.assert_unlocked();
    // ... while `except Exception` never ran: the journal and the sealed
    // hold of this operation stay, and nothing was rolled back yet.
    assert_eq!(site.pending_phase().as_deref(), Some("prepared"));
    let lease = site.worker_lease();
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)), "{lease:?}");

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
    assert_eq!(site.worker_lease(), Json::Null);
    site.assert_unlocked();
}

#[test]
fn ctrl_c_refuses_to_release_a_lock_that_changed_owner() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let child = apply_stalled_at_seal(&site, 30.0, false);
    // Another process rewrote the owner file in place (same inode, 0600),
    // naming a process that has since exited.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let claimed = format!("{}\n", gone.id());
    let owner = site.installation.install_root.join(".install-lock/pid");
    std::fs::write(&owner, &claimed).unwrap();
    assert_eq!(
        std::fs::metadata(&owner).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    interrupt(&child);
    let output = child.wait_with_output().expect("the helper ends");
    site.switch(Role::Worker, Switches::default());

    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "RuntimeError: installation lock owner changed\n"
    );
    // Left exactly as found.
    assert_eq!(std::fs::read_to_string(&owner).unwrap(), claimed);
    assert_eq!(site.pending_phase().as_deref(), Some("prepared"));

    // Once that "owner" is gone the next operation reaps the lock and
    // recovers the interrupted activation.
    let old = site.layout(OLD, OLD);
    let outcome = site.recover();
    assert_eq!(outcome.code, Some(0), "{}", outcome.stderr);
    site.assert_serving(&old);
    site.assert_unlocked();
}

#[test]
fn an_ignored_sigint_stays_ignored() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let child = apply_stalled_at_seal(&site, 2.0, true);
    interrupt(&child);
    let outcome = finish(child);
    site.switch(Role::Worker, Switches::default());

    assert_eq!(outcome.code, Some(0), "{}", outcome.stderr);
    assert_eq!(outcome.stderr, "");
    site.assert_serving(&site.layout(NEW, OLD));
    assert_eq!(site.pending_phase(), None);
    site.assert_unlocked();
}

/// A lock tampered with while the helper waits is never released on Ctrl-C:
/// the helper reports the original's `__exit__` refusal, exits 1, and the lock
/// (and anything moved aside) stays exactly as the tampering left it.
#[test]
fn ctrl_c_refuses_an_unsafe_or_replaced_lock() {
    type Tamper = fn(&Path, u32) -> String;
    let cases: [(&str, Tamper); 3] = [
        ("owner_mode", |lock, _| {
            fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(0o644)).unwrap();
            format!(
                "PermissionError: execution configuration is unsafe: {}/pid\n",
                lock.display()
            )
        }),
        ("directory_mode", |lock, _| {
            fs::set_permissions(lock, fs::Permissions::from_mode(0o750)).unwrap();
            format!(
                "PermissionError: execution directory permissions are unsafe: {}\n",
                lock.display()
            )
        }),
        ("replaced", |lock, pid| {
            // Moved aside and replaced by a look-alike naming the helper.
            fs::rename(lock, lock.with_file_name(".install-lock.aside")).unwrap();
            fs::DirBuilder::new().mode(0o700).create(lock).unwrap();
            fs::write(lock.join("pid"), format!("{pid}\n")).unwrap();
            fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(0o600)).unwrap();
            "RuntimeError: installation lock identity changed\n".to_string()
        }),
    ];
    for (name, tamper) in cases {
        let Some(site) = Site::running(&format!("ctrl_c_refuses_{name}")) else {
            return;
        };
        let child = apply_stalled_at_seal(&site, 30.0, false);
        let root = &site.installation.install_root;
        let lock = root.join(".install-lock");
        let message = tamper(&lock, child.id());
        let tampered = tree(root);
        interrupt(&child);
        let output = child.wait_with_output().expect("the helper ends");
        site.switch(Role::Worker, Switches::default());

        assert_eq!(output.status.code(), Some(1), "{name}: {output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), message, "{name}");
        assert_eq!(tree(root), tampered, "{name}: the locks are left as found");
        assert_eq!(site.pending_phase().as_deref(), Some("prepared"), "{name}");
    }
}

/// Names, modes and contents of the lock directories under `root`.
fn tree(root: &Path) -> Vec<(String, u32, Option<Vec<u8>>)> {
    let mut entries = Vec::new();
    for name in [".install-lock", ".install-lock.aside"] {
        let directory = root.join(name);
        let Ok(info) = fs::symlink_metadata(&directory) else {
            continue;
        };
        entries.push((name.to_string(), info.mode() & 0o7777, None));
        let owner = directory.join("pid");
        if let Ok(info) = fs::symlink_metadata(&owner) {
            entries.push((
                format!("{name}/pid"),
                info.mode() & 0o7777,
                Some(fs::read(&owner).unwrap()),
            ));
        }
    }
    entries
}

//! Serialisation through install.sh's installation lock: of two concurrent
//! installers exactly one proceeds, and the refused one changes nothing.

use crate::execution_manage_support;

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::process::{Command, Stdio};

use agents_tests::{RequestMatch, Role, Stall, Switches};
use execution_manage_support::{finish, receipt_line, Site, NEW, OLD};
use python_compat::json::Json;

/// A stand-in installer process, killed (by its PID) when the test ends.
struct Installer(std::process::Child);

impl Drop for Installer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn of_two_concurrent_applies_exactly_one_proceeds() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let new = site.layout(NEW, OLD);
    let identity = site.server_identity();
    let mark = site.request_mark(Role::Worker);
    // The first apply is held inside its activation (the worker holds back
    // its reply to `acquire`) while the second one starts.
    site.switch(
        Role::Worker,
        Switches {
            stall: Some(Stall {
                on: RequestMatch::maintenance("acquire"),
                seconds: 3.5,
            }),
            ..Switches::default()
        },
    );
    let first = site.spawn_apply(&new, "worker");
    site.wait_for_request(Role::Worker, mark, "the first apply's acquire", |record| {
        record.action.as_deref() == Some("acquire") && record.outcome == "stalled"
    });
    let journal = site.pending_journal().expect("the first apply staged");
    site.switch(Role::Worker, Switches::default());

    let second = site.apply(&new, "worker");

    second.assert_refused("RuntimeError: another installer owns the installation lock");
    assert_eq!(
        site.pending_journal().as_ref(),
        Some(&journal),
        "the second apply did not touch the pending journal"
    );
    let outcome = finish(first);
    let after = site.assert_serving(&new);
    outcome.assert_success(&format!(
        "{{\"ok\": true, \"receipt\": {}, \"scope\": \"worker\"}}\n",
        receipt_line(&after, &new, &identity, true)
    ));
    let retired = site.only_retired_journal();
    assert_eq!(
        retired.get("id"),
        journal.get("id"),
        "the first apply's journal"
    );
    assert_eq!(retired.get("phase"), Some(&Json::from("committed")));
    site.assert_files_of(&new);
    site.assert_unlocked();
}

#[test]
fn apply_is_refused_while_install_sh_holds_the_lock() {
    let Some(site) = Site::running(agents_tests::test_name!()) else {
        return;
    };
    let old = site.layout(OLD, OLD);
    let new = site.layout(NEW, OLD);
    let before = site.assert_serving(&old);
    let disk = site.disk();
    // install.sh's lock: a private `.install-lock` directory whose `pid`
    // (decimal PID and a newline, 0600) names a live installer process.
    let mut installer = Installer(
        Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .expect("a stand-in installer process"),
    );
    let lock = site.installation.install_root.join(".install-lock");
    fs::DirBuilder::new().mode(0o700).create(&lock).unwrap();
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(lock.join("pid"), format!("{}\n", installer.0.id())).unwrap();
    fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(0o600)).unwrap();
    let mark = site.request_mark(Role::Worker);

    site.apply(&new, "worker")
        .assert_refused("RuntimeError: another installer owns the installation lock");
    assert!(site.requests_since(Role::Worker, mark).is_empty());

    assert_eq!(
        fs::read_to_string(lock.join("pid")).unwrap(),
        format!("{}\n", installer.0.id()),
        "the installer's lock is intact"
    );
    assert_eq!(site.disk().without_entry(".install-lock"), disk);
    assert!(site.pending_journal().is_none() && site.completed_journals().is_empty());
    assert_eq!(site.assert_serving(&old), before);

    // Once that installer is gone, its stale lock is reaped and apply runs.
    installer.0.kill().unwrap();
    installer.0.wait().unwrap();
    let identity = site.server_identity();
    let outcome = site.apply(&new, "worker");
    let after = site.assert_serving(&new);
    outcome.assert_success(&format!(
        "{{\"ok\": true, \"receipt\": {}, \"scope\": \"worker\"}}\n",
        receipt_line(&after, &new, &identity, true)
    ));
    site.assert_unlocked();
}

//! Black-box tests of `execution-activation recovery-state` against a real
//! systemd user manager: `unarmed` only with the strict pre-takeover proof
//! (no owner directory, no registration, no enablement, no loaded job),
//! `required` otherwise.

use std::fs;
use std::os::unix::fs::symlink;
use std::process::Output;

use agents_common::{recovery_service_path, Platform};
use agents_tests::journal_writer::{Begin, Roots};
use agents_tests::{binary_path, Sandbox};
use agents_tests::{make_dir, write_file};

/// A fresh split install of 1.1.0 in `prepared`, beside the sandbox home.
fn prepared(sandbox: &Sandbox) -> (Roots, String) {
    let roots = Roots::create(sandbox.base(), sandbox.home());
    roots.write_env("AGENTS_SERVER_PORT=7850\n");
    let staging = roots.staging("1.1.0");
    let id = roots.begin(&Begin::split(&staging, "1.1.0"));
    roots.hold_lock(std::process::id());
    (roots, id)
}

fn recovery_state(sandbox: &Sandbox, roots: &Roots) -> Output {
    sandbox
        .command(binary_path("execution-activation"))
        .args(roots.operation_args("recovery-state", "1.1.0", "127.0.0.1", 7850))
        .output()
        .expect("run recovery-state")
}

#[track_caller]
fn assert_state(output: &Output, state: &str) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(0), format!("{state}\n").as_str(), "")
    );
}

#[test]
fn unarmed_only_with_the_strict_pre_takeover_proof() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let (roots, id) = prepared(&sandbox);
    assert_state(&recovery_state(&sandbox, &roots), "unarmed");

    // An owner directory for this transaction means recovery was armed.
    let owners = roots.root().join(".activation-recovery");
    make_dir(&owners, 0o700);
    assert_state(&recovery_state(&sandbox, &roots), "unarmed");
    make_dir(&owners.join(&id), 0o700);
    assert_state(&recovery_state(&sandbox, &roots), "required");
    fs::remove_dir(owners.join(&id)).unwrap();

    // So does its unit file, or its enablement link even without the file.
    let unit = recovery_service_path(&id, Platform::Linux, sandbox.home());
    fs::create_dir_all(unit.parent().unwrap()).unwrap();
    write_file(&unit, b"[Service]\nExecStart=/bin/true\n", 0o644);
    assert_state(&recovery_state(&sandbox, &roots), "required");
    fs::remove_file(&unit).unwrap();
    let wants = unit.parent().unwrap().join("default.target.wants");
    fs::create_dir_all(&wants).unwrap();
    symlink(&unit, wants.join(unit.file_name().unwrap())).unwrap();
    assert_state(&recovery_state(&sandbox, &roots), "required");
    fs::remove_file(wants.join(unit.file_name().unwrap())).unwrap();
    assert_state(&recovery_state(&sandbox, &roots), "unarmed");

    // A rollback from prepared is still judged by its starting phase.
    roots.record("rolling-back");
    assert_state(&recovery_state(&sandbox, &roots), "unarmed");
}

#[test]
fn any_later_phase_requires_recovery() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let (roots, _id) = prepared(&sandbox);
    roots.record("quiescing");
    assert_state(&recovery_state(&sandbox, &roots), "required");
    roots.record("rolling-back");
    assert_state(&recovery_state(&sandbox, &roots), "required");
}

#[test]
fn a_loaded_job_without_its_registration_is_refused() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let (roots, id) = prepared(&sandbox);
    let unit = recovery_service_path(&id, Platform::Linux, sandbox.home());
    let name = unit.file_name().unwrap().to_str().unwrap().to_string();
    // A transient job of the same name: loaded, with no file at the path.
    let started = sandbox
        .command("systemd-run")
        .args(["--user", "--unit", &name, "/bin/sleep", "300"])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let output = recovery_state(&sandbox, &roots);
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (
            Some(1),
            "",
            "RuntimeError: a native recovery job is loaded without its owned registration\n"
        )
    );
    sandbox.systemctl_ok(&["stop", &name]);
}

#[test]
fn links_that_moved_before_takeover_are_refused() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let (roots, _id) = prepared(&sandbox);
    // In prepared the current link must still be the original (missing).
    symlink(
        roots.releases().join(".staging-1.1.0-4242"),
        roots.root().join("current"),
    )
    .unwrap();
    let output = recovery_state(&sandbox, &roots);
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (
            Some(1),
            "RuntimeError: current release changed before link takeover\n"
        )
    );
}

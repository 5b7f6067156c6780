//! The sandboxed `systemd --user` manager itself: it answers, runs real units
//! with real enablement links and PIDs, and leaves nothing behind.

use std::fs;
use std::path::Path;
use std::time::Duration;

use std::process::Command;

use agents_tests::{poll_until, process_alive, ProcessIdentity, Sandbox};

const UNIT: &str = "sandbox-probe.service";

fn write_probe_unit(sandbox: &Sandbox) {
    let unit = "[Unit]\nDescription=sandbox probe\n\n[Service]\nType=simple\n\
                ExecStart=/bin/sleep 300\n\n[Install]\nWantedBy=default.target\n";
    fs::write(sandbox.unit_dir().join(UNIT), unit).unwrap();
    sandbox.systemctl_ok(&["daemon-reload"]);
}

#[test]
fn manager_runs_with_private_home_and_runtime_dir() {
    let marker = Path::new("/run/systemd/system");
    let host_had_marker = marker.exists();
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let environment = sandbox.systemctl_ok(&["show-environment"]);
    assert!(
        environment
            .lines()
            .any(|line| line == format!("HOME={}", sandbox.home().display())),
        "manager environment lacks the private HOME: {environment}"
    );
    assert!(sandbox.runtime_dir().join("systemd/private").exists());
    // The /run/systemd marker was created only inside the manager's namespace.
    assert_eq!(
        marker.exists(),
        host_had_marker,
        "the host's /run/systemd changed"
    );
    assert!(process_alive(sandbox.manager_pid()));
}

#[test]
fn enable_start_and_show_report_real_state() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let missing = sandbox.unit_state(UNIT);
    assert_eq!(missing.load_state, "not-found");
    assert_eq!(missing.main_pid, 0);

    write_probe_unit(&sandbox);
    let loaded = sandbox.unit_state(UNIT);
    assert_eq!(
        (
            loaded.load_state.as_str(),
            loaded.active_state.as_str(),
            loaded.unit_file_state.as_str()
        ),
        ("loaded", "inactive", "disabled")
    );

    sandbox.systemctl_ok(&["enable", UNIT]);
    let link = sandbox.unit_dir().join("default.target.wants").join(UNIT);
    assert_eq!(fs::read_link(&link).unwrap(), sandbox.unit_dir().join(UNIT));
    assert_eq!(sandbox.unit_state(UNIT).unit_file_state, "enabled");

    sandbox.systemctl_ok(&["start", UNIT]);
    let running = sandbox.wait_for_unit(UNIT, Duration::from_secs(5), "running", |state| {
        state.is_running()
    });
    // systemd reports a simple service running once it forked it; until
    // that process execs, its command line is systemd's "(sleep)" title,
    // and for a moment within the exec it is empty.
    let command = poll_until(Duration::from_secs(5), "the service's exec", || {
        let command = fs::read(format!("/proc/{}/cmdline", running.main_pid)).unwrap();
        (!command.is_empty() && !command.starts_with(b"(sleep)")).then_some(command)
    });
    assert_eq!(
        command, b"/bin/sleep\x00300\x00",
        "MainPID is the real service process"
    );

    let service = ProcessIdentity::of(running.main_pid).unwrap();
    sandbox.systemctl_ok(&["stop", UNIT]);
    let stopped = sandbox.unit_state(UNIT);
    assert_eq!(
        (stopped.active_state.as_str(), stopped.main_pid),
        ("inactive", 0)
    );
    assert!(!service.is_alive());
}

#[test]
fn drop_stops_the_manager_and_its_services_and_removes_the_home() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    write_probe_unit(&sandbox);
    sandbox.systemctl_ok(&["start", UNIT]);
    let service = sandbox.wait_for_unit(UNIT, Duration::from_secs(5), "running", |state| {
        state.is_running()
    });
    let service = ProcessIdentity::of(service.main_pid).unwrap();
    let manager = ProcessIdentity::of(sandbox.manager_pid()).unwrap();
    let base = sandbox.base().to_path_buf();
    let members = sandbox.processes();
    assert!(members.contains(&service.pid) && members.contains(&manager.pid));
    drop(sandbox);
    assert!(!manager.is_alive(), "the manager was stopped");
    assert!(!service.is_alive(), "the manager stopped its service");
    assert!(!base.exists(), "the sandbox home was removed");
}

#[test]
fn sandboxes_running_the_same_unit_do_not_touch_each_other() {
    let (Some(first), Some(second)) = (
        Sandbox::start_or_skip(agents_tests::test_name!()),
        Sandbox::start_or_skip(agents_tests::test_name!()),
    ) else {
        return;
    };
    write_probe_unit(&first);
    assert_eq!(second.unit_state(UNIT).load_state, "not-found");
    write_probe_unit(&second);
    for sandbox in [&first, &second] {
        sandbox.systemctl_ok(&["start", UNIT]);
    }
    let running = |sandbox: &Sandbox| {
        sandbox.wait_for_unit(UNIT, Duration::from_secs(5), "running", |state| {
            state.is_running()
        })
    };
    let (one, two) = (running(&first), running(&second));
    assert_ne!(one.main_pid, two.main_pid);
    assert!(first.processes().contains(&one.main_pid));
    assert!(!first.processes().contains(&two.main_pid));

    // Same unit name, separate cgroups: stopping one leaves the other running.
    let stopped = ProcessIdentity::of(one.main_pid).unwrap();
    first.systemctl_ok(&["stop", UNIT]);
    assert!(!stopped.is_alive());
    assert_eq!(second.unit_state(UNIT), two);
    drop(first);
    assert_eq!(second.unit_state(UNIT), two);
    assert!(process_alive(two.main_pid));
}

const CHILD_MARKER: &str = "AGENTS_TESTS_SKIP_POLICY_CHILD";

/// Run only as a child of the two tests below, with a PATH lacking `unshare`.
#[test]
#[ignore = "helper for the skip-policy tests; runs in a child process"]
fn child_needs_a_sandbox() {
    if std::env::var_os(CHILD_MARKER).is_none() {
        return; // run by hand with --ignored: nothing to probe
    }
    if let Some(_sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) {
        panic!("a sandbox started although unshare is not on PATH");
    }
}

fn run_child_without_unshare(ci: Option<&str>) -> std::process::Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            &agents_tests::test_name(module_path!(), "child_needs_a_sandbox"),
            "--test-threads=1",
        ])
        .env("PATH", "/nonexistent")
        .env(CHILD_MARKER, "1")
        // The child's skip is this test's subject, not one of the suite's.
        .env_remove(agents_tests::SKIP_LOG_ENV)
        .env_remove("CI");
    if let Some(value) = ci {
        command.env("CI", value);
    }
    command.output().unwrap()
}

#[test]
fn a_machine_without_unshare_skips_with_a_reason() {
    let output = run_child_without_unshare(None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child must skip, not fail: {stderr}"
    );
    assert!(
        stderr.contains("SKIPPED child_needs_a_sandbox: systemd sandbox unavailable: `unshare` is not installed"),
        "the skip must say why: {stderr}"
    );
}

#[test]
fn under_ci_a_missing_manager_fails_instead_of_skipping() {
    let output = run_child_without_unshare(Some("true"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "CI=true must fail: {stdout}");
    assert!(stdout.contains("`unshare` is not installed"), "{stdout}");
}

//! NativeServices against a real `systemd --user` manager (one sandboxed
//! manager per test, see `shared/SANDBOX.md`): absent, stopped, running and
//! enabled units as the manager reports them, a stop that waits for a slow
//! exit, a stop that gives up without killing, start, enable/disable,
//! restore, and a daemon-reload that really makes the manager re-read a unit
//! (`start` enables, and `systemctl enable` itself reloads, so this is proven
//! with the manager's `NeedDaemonReload`).
//! Without root/unshare/systemd the tests say why they skip; under `CI=true`
//! they fail instead.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use agents_common::{
    ExecutionLayout, NativeServices, Platform, Role, ServiceRunState, ServiceState,
    SystemCommandRunner,
};
use agents_tests::Sandbox;
use python_compat::{
    json::{Json, JsonObject},
    ErrorClass,
};

const WORKER_UNIT: &str = "agents-server.service";
const GATEWAY_UNIT: &str = "agents-server-gateway.service";

/// A layout whose service files live in the sandbox manager's unit directory;
/// NativeServices reads only the platform and the home.
fn layout(sandbox: &Sandbox) -> ExecutionLayout {
    let base = sandbox.base();
    ExecutionLayout {
        install_root: base.join("install"),
        config_root: base.join("config"),
        state_root: base.join("state"),
        home: sandbox.home().to_path_buf(),
        platform: Platform::Linux.into(),
        worker_release: base.join("install/releases/1.0.0"),
        gateway_release: base.join("install/releases/1.0.0"),
        bind: "127.0.0.1".to_string(),
        port: Json::from(8765),
        environment: Json::Object(JsonObject::new()),
    }
}

/// The real adapter, with its commands aimed at the sandbox's manager.
fn native(sandbox: &Sandbox) -> NativeServices {
    let runner = SystemCommandRunner::default().with_environment(sandbox.env());
    NativeServices::with_runner(&layout(sandbox), Box::new(runner))
}

/// Writes a user unit (0600, as the activation publishes it) running `command`.
fn write_unit(sandbox: &Sandbox, unit: &str, command: &str, extra: &str) {
    let path = sandbox.unit_dir().join(unit);
    let text = format!(
        "[Unit]\nDescription=test {unit}\n\n[Service]\nType=simple\nExecStart={command}\n{extra}\n[Install]\nWantedBy=default.target\n"
    );
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
}

fn wants_link(sandbox: &Sandbox, unit: &str) -> bool {
    sandbox
        .unit_dir()
        .join("default.target.wants")
        .join(unit)
        .symlink_metadata()
        .is_ok()
}

/// The command line `pid` runs once it has exec'd: until then systemd's
/// forked child shows a title such as "(sleep)", and for a moment within
/// the exec, nothing.
fn command_line(pid: u32) -> String {
    agents_tests::poll_until(Duration::from_secs(20), "the service's exec", || {
        let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        (!line.is_empty() && !line.starts_with('(')).then_some(line)
    })
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Polls `observe(role)` until it is running (start is `--no-block`).
fn wait_running(native: &NativeServices, role: &str) -> ServiceState {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = native.observe(role).unwrap();
        if state.state == ServiceRunState::Running {
            return state;
        }
        assert!(Instant::now() < deadline, "{role} never ran: {state:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn observes_absent_stopped_enabled_and_running_units_as_the_manager_reports_them() {
    let Some(sandbox) = Sandbox::start_or_skip("services_systemd::observe") else {
        return;
    };
    let native = native(&sandbox);
    let snapshot = native.snapshot().unwrap();
    assert_eq!(snapshot.worker, ServiceState::absent());
    assert_eq!(snapshot.gateway, ServiceState::absent());

    write_unit(&sandbox, WORKER_UNIT, "/bin/sleep 1001", "");
    native.reload().unwrap();
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(false)
    );
    assert_eq!(
        native.observe(Role::Gateway).unwrap(),
        ServiceState::absent()
    );

    native.set_enabled("worker", true).unwrap();
    assert!(wants_link(&sandbox, WORKER_UNIT));
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(true)
    );

    native.start(Role::Worker).unwrap();
    let running = wait_running(&native, "worker");
    let pid = running.pid.expect("a running unit has its main PID");
    assert_eq!(running, ServiceState::running(true, pid));
    assert_eq!(sandbox.unit_state(WORKER_UNIT).main_pid, pid);
    assert_eq!(command_line(pid), "/bin/sleep 1001 ");
    let snapshot = native.snapshot().unwrap();
    assert_eq!(snapshot.worker, running);
    assert_eq!(snapshot.gateway, ServiceState::absent());

    native.stop(Role::Worker).unwrap();
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(true)
    );
    assert!(!alive(pid), "the stopped unit's process is gone");

    native.set_enabled("worker", false).unwrap();
    assert!(!wants_link(&sandbox, WORKER_UNIT));
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(false)
    );
}

/// Writes a unit that runs `trap` (a shell trap of SIGTERM), then marks
/// `ready` and loops; like the real worker unit, systemd never escalates to
/// SIGKILL.
fn write_trapping_unit(sandbox: &Sandbox, unit: &str, trap: &str, ready: &Path) {
    let script = sandbox.base().join(format!("{unit}.sh"));
    let text = format!(
        "{trap}\n: >'{}'\nwhile :; do sleep 0.1; done\n",
        ready.display()
    );
    fs::write(&script, text).unwrap();
    write_unit(
        sandbox,
        unit,
        &format!("/bin/sh {}", script.display()),
        "TimeoutStopSec=60s\nSendSIGKILL=no\n",
    );
}

/// Starts a worker that exits 0.6 s after SIGTERM and a gateway that ignores
/// it, and waits until both have set their traps; returns the adapter and
/// their main PIDs. systemd signals every process of the unit's cgroup until
/// no new one appears, so the slow one's trap ignores SIGTERM before it forks
/// its sleep (which inherits that). Each marks a file once its trap is set,
/// so a loaded machine cannot deliver SIGTERM before it is.
fn start_a_slow_worker_and_a_stubborn_gateway(sandbox: &Sandbox) -> (NativeServices, u32, u32) {
    let worker_ready = sandbox.base().join("worker.trapped");
    let gateway_ready = sandbox.base().join("gateway.trapped");
    write_trapping_unit(
        sandbox,
        WORKER_UNIT,
        "trap 'trap \"\" TERM; sleep 0.6; exit 0' TERM",
        &worker_ready,
    );
    write_trapping_unit(sandbox, GATEWAY_UNIT, "trap '' TERM", &gateway_ready);
    let native = native(sandbox);
    native.reload().unwrap();
    native.start(Role::Worker).unwrap();
    native.start(Role::Gateway).unwrap();
    let worker = wait_running(&native, "worker").pid.unwrap();
    let gateway = wait_running(&native, "gateway").pid.unwrap();
    for ready in [&worker_ready, &gateway_ready] {
        agents_tests::poll_until(Duration::from_secs(20), "the unit's trap", || {
            ready.exists().then_some(())
        });
    }
    (native, worker, gateway)
}

#[test]
fn stop_waits_for_a_slow_exit_and_never_escalates() {
    let Some(sandbox) = Sandbox::start_or_skip("services_systemd::stop") else {
        return;
    };
    let (native, worker, gateway) = start_a_slow_worker_and_a_stubborn_gateway(&sandbox);

    let started = Instant::now();
    native.stop(Role::Worker).unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "stop returned before the slow exit finished: {:?}",
        started.elapsed()
    );
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(true)
    );
    assert!(!alive(worker));

    let bounded = native.with_timeout(Duration::from_millis(1200));
    let started = Instant::now();
    let err = bounded.stop(Role::Gateway).unwrap_err();
    assert_eq!(err.class(), ErrorClass::Runtime);
    assert_eq!(
        err.message(),
        "native service did not stop; no force kill was attempted"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1200) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
    assert!(alive(gateway), "no kill was sent to the stubborn process");
    let state = bounded.observe(Role::Gateway).unwrap();
    assert_eq!(state.state, ServiceRunState::Transitioning, "{state:?}");
    let err = bounded.snapshot().unwrap_err();
    assert_eq!(
        err.message(),
        "native service is transitioning; retry after it settles"
    );
    // The test (not the adapter) ends the stubborn process, so the manager
    // can shut down promptly.
    sandbox.systemctl_ok(&["kill", "--signal=SIGKILL", GATEWAY_UNIT]);
}

#[test]
fn restore_brings_back_each_recorded_state() {
    let Some(sandbox) = Sandbox::start_or_skip("services_systemd::restore") else {
        return;
    };
    write_unit(&sandbox, WORKER_UNIT, "/bin/sleep 1002", "");
    write_unit(&sandbox, GATEWAY_UNIT, "/bin/sleep 1003", "");
    let native = native(&sandbox);
    native.reload().unwrap();

    // A worker that was running and enabled, now stopped and disabled.
    native
        .restore("worker", &ServiceState::running(true, 1))
        .unwrap();
    let worker = wait_running(&native, "worker");
    assert!(worker.enabled && wants_link(&sandbox, WORKER_UNIT));

    // A gateway that was running but not enabled: started, then disabled.
    native
        .restore("gateway", &ServiceState::running(false, 1))
        .unwrap();
    let gateway = wait_running(&native, "gateway");
    assert!(!gateway.enabled && !wants_link(&sandbox, GATEWAY_UNIT));

    // Stopped priors only change enablement; absent changes nothing.
    native.stop(Role::Worker).unwrap();
    native
        .restore("worker", &ServiceState::stopped(false))
        .unwrap();
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(false)
    );
    native
        .restore("worker", &ServiceState::stopped(true))
        .unwrap();
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::stopped(true)
    );
    native.restore("gateway", &ServiceState::absent()).unwrap();
    assert_eq!(native.observe(Role::Gateway).unwrap(), gateway);
}

#[test]
fn daemon_reload_makes_the_manager_re_read_a_rewritten_unit() {
    let Some(sandbox) = Sandbox::start_or_skip("services_systemd::reload") else {
        return;
    };
    let need_reload = || {
        sandbox
            .systemctl_ok(&["show", WORKER_UNIT, "--property=NeedDaemonReload"])
            .trim()
            .to_string()
    };
    let native = native(&sandbox);
    write_unit(&sandbox, WORKER_UNIT, "/bin/sleep 1004", "");
    native.reload().unwrap();
    native.start(Role::Worker).unwrap();
    let pid = wait_running(&native, "worker").pid.unwrap();
    assert_eq!(command_line(pid), "/bin/sleep 1004 ");
    assert_eq!(need_reload(), "NeedDaemonReload=no");

    write_unit(&sandbox, WORKER_UNIT, "/bin/sleep 1005", "");
    assert_eq!(need_reload(), "NeedDaemonReload=yes");
    native.reload().unwrap();
    assert_eq!(need_reload(), "NeedDaemonReload=no");
    // The running process is untouched by a reload.
    assert_eq!(
        native.observe(Role::Worker).unwrap(),
        ServiceState::running(true, pid)
    );
}

#[test]
fn a_unit_with_a_bad_setting_is_stopped_and_a_missing_file_cannot_start() {
    let Some(sandbox) = Sandbox::start_or_skip("services_systemd::bad_setting") else {
        return;
    };
    write_unit(&sandbox, GATEWAY_UNIT, "relative/program", "");
    let native = native(&sandbox);
    native.reload().unwrap();
    assert_eq!(sandbox.unit_state(GATEWAY_UNIT).load_state, "bad-setting");
    assert_eq!(
        native.observe(Role::Gateway).unwrap(),
        ServiceState::stopped(false)
    );
    let err = native.start(Role::Gateway).unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: native service command failed (systemctl --user)"
    );

    let err = native.start(Role::Worker).unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(sandbox.unit_state(WORKER_UNIT).load_state, "not-found");
    assert!(!wants_link(&sandbox, WORKER_UNIT), "nothing was enabled");
}

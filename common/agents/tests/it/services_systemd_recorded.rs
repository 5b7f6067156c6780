//! NativeServices on systemd, replaying `systemctl --user show` output
//! recorded from a real systemd 252 user manager (property order MainPID,
//! LoadState, ActiveState, UnitFileState) and variations of it: every state
//! branch, every parsing refusal in the original's order, and the commands of
//! stop, start, enable/disable, reload and restore. The same operations run
//! against a real manager in `tests/tests/it/services_systemd.rs`.

use std::time::Duration;

use agents_common::{Platform, Role, ServiceRunState, ServiceState};
use agents_tests::assert_error_is;
use agents_tests::recorded_commands::{
    expect, failure, reply, services, Exchange, Recorded, ServiceHome,
};
use python_compat::ErrorClass;

const WORKER_UNIT: &str = "agents-server.service";
const GATEWAY_UNIT: &str = "agents-server-gateway.service";
const PROPERTIES: &str = "--property=LoadState,ActiveState,UnitFileState,MainPID";

fn show_output(pid: &str, load: &str, active: &str, unit_file: &str) -> String {
    format!("MainPID={pid}\nLoadState={load}\nActiveState={active}\nUnitFileState={unit_file}\n")
}

fn show(unit: &str, stdout: &str) -> Exchange {
    expect(
        &[
            "systemctl",
            "--user",
            "show",
            unit,
            "--no-pager",
            PROPERTIES,
        ],
        reply(0, stdout, ""),
    )
}

fn host(roles: &[&str]) -> ServiceHome {
    ServiceHome::with_files(Platform::Linux, roles)
}

/// Observes the worker with `stdout` as the `show` output.
fn observe(roles: &[&str], stdout: &str) -> agents_common::Result<ServiceState> {
    let host = host(roles);
    let recorded = Recorded::new(vec![show(WORKER_UNIT, stdout)]);
    let result = services(&host.layout, &recorded).observe(Role::Worker);
    assert_eq!(recorded.calls()[0].1, Duration::from_secs(10));
    result
}

#[test]
fn recorded_states_map_to_the_original_dicts() {
    let with_file = &["worker"][..];
    let cases = [
        // Recorded: not loaded and no unit file.
        (
            &[][..],
            show_output("0", "not-found", "inactive", ""),
            ServiceState::absent(),
        ),
        // Recorded: a fresh unit, then enabled and started.
        (
            with_file,
            show_output("0", "loaded", "inactive", "disabled"),
            ServiceState::stopped(false),
        ),
        (
            with_file,
            show_output("15446", "loaded", "active", "enabled"),
            ServiceState::running(true, 15446),
        ),
        (
            with_file,
            show_output("0", "loaded", "failed", "enabled-runtime"),
            ServiceState::stopped(true),
        ),
        (
            with_file,
            show_output("0", "loaded", "inactive", "static"),
            ServiceState::stopped(false),
        ),
        (
            with_file,
            show_output("0", "loaded", "inactive", ""),
            ServiceState::stopped(false),
        ),
        // Recorded: a unit with a bad setting that never started.
        (
            with_file,
            show_output("0", "bad-setting", "inactive", "static"),
            ServiceState::stopped(false),
        ),
        (
            with_file,
            show_output("0", "error", "failed", "enabled"),
            ServiceState::stopped(true),
        ),
        // A unit file the manager has not loaded yet (before daemon-reload).
        (
            with_file,
            show_output("0", "not-found", "inactive", ""),
            ServiceState::stopped(false),
        ),
    ];
    for (roles, stdout, expected) in cases {
        assert_eq!(observe(roles, &stdout).unwrap(), expected, "{stdout:?}");
    }
}

#[test]
fn starting_stopping_and_odd_combinations_are_transitioning() {
    for stdout in [
        show_output("812", "loaded", "activating", "enabled"),
        show_output("812", "loaded", "deactivating", "enabled"),
        show_output("0", "loaded", "active", "enabled"),
        show_output("0", "loaded", "reloading", "enabled"),
        show_output("812", "loaded", "inactive", "disabled"),
    ] {
        let state = observe(&["worker"], &stdout).unwrap();
        assert_eq!(state.state, ServiceRunState::Transitioning, "{stdout:?}");
        assert_eq!(state.pid, None);
    }
    let host = host(&["worker", "gateway"]);
    let recorded = Recorded::new(vec![
        show(
            WORKER_UNIT,
            &show_output("0", "loaded", "inactive", "enabled"),
        ),
        show(
            GATEWAY_UNIT,
            &show_output("77", "loaded", "deactivating", "enabled"),
        ),
    ]);
    let err = failure(services(&host.layout, &recorded).snapshot());
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service is transitioning; retry after it settles",
    );
    assert_eq!(
        err.kind(),
        Some(agents_common::ErrorKind::ServiceTransitioning)
    );
}

#[test]
fn units_without_a_restorable_file_or_with_a_live_bad_process_are_refused() {
    for stdout in [
        show_output("0", "loaded", "inactive", "disabled"),
        show_output("15", "not-found", "inactive", ""),
        show_output("0", "not-found", "active", ""),
    ] {
        let err = failure(observe(&[], &stdout));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            "loaded native service has no safely restorable file",
        );
    }
    for (roles, stdout) in [
        (
            &["worker"][..],
            show_output("15", "bad-setting", "active", "enabled"),
        ),
        (
            &["worker"][..],
            show_output("0", "error", "activating", "enabled"),
        ),
        (
            &[][..],
            show_output("0", "bad-setting", "inactive", "static"),
        ),
    ] {
        let err = failure(observe(roles, &stdout));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            "invalid native service still has an active process",
        );
    }
}

#[test]
fn malformed_show_output_is_refused_with_the_original_messages() {
    let good = show_output("0", "loaded", "inactive", "enabled");
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{good}Garbage\n"),
            "systemd returned ambiguous service ownership",
        ),
        (
            format!("{good}\n"),
            "systemd returned ambiguous service ownership",
        ),
        (
            format!("{good}MainPID=0\n"),
            "systemd returned ambiguous service ownership",
        ),
        (String::new(), "systemd omitted required service ownership"),
        (
            "MainPID=0\nLoadState=loaded\nActiveState=inactive\n".into(),
            "systemd omitted required service ownership",
        ),
        (
            format!("{good}SubState=dead\n"),
            "systemd omitted required service ownership",
        ),
        (
            show_output("0", "masked", "inactive", "masked"),
            "systemd service is not safely manageable",
        ),
        (
            show_output("", "loaded", "inactive", "enabled"),
            "systemd returned an invalid service PID",
        ),
        (
            show_output("-1", "loaded", "inactive", "enabled"),
            "systemd returned an invalid service PID",
        ),
        (
            show_output("12a", "loaded", "inactive", "bogus"),
            "systemd returned an invalid service PID",
        ),
        (
            show_output("0", "loaded", "inactive", "linked"),
            "systemd service enablement is unsupported",
        ),
        (
            show_output("0", "loaded", "inactive", "generated"),
            "systemd service enablement is unsupported",
        ),
        (
            show_output("0", "loaded", "inactive", "masked"),
            "systemd service enablement is unsupported",
        ),
        // LoadState is judged before MainPID, MainPID before UnitFileState.
        (
            show_output("x", "masked", "inactive", "masked"),
            "systemd service is not safely manageable",
        ),
    ];
    for (stdout, message) in cases {
        let err = failure(observe(&["worker"], &stdout));
        assert_error_is(&err, ErrorClass::Runtime, message);
    }
}

#[test]
fn text_mode_line_endings_and_values_containing_equals_signs() {
    let crlf = "MainPID=9\r\nLoadState=loaded\r\nActiveState=active\r\nUnitFileState=enabled\r\n";
    assert_eq!(
        observe(&["worker"], crlf).unwrap(),
        ServiceState::running(true, 9)
    );
    let cr = "MainPID=9\rLoadState=loaded\rActiveState=active\rUnitFileState=enabled";
    assert_eq!(
        observe(&["worker"], cr).unwrap(),
        ServiceState::running(true, 9)
    );
    // Only the first '=' separates; the rest belongs to the value.
    assert_eq!(
        observe(
            &["worker"],
            &show_output("9", "loaded", "active=x", "enabled")
        )
        .unwrap()
        .state,
        ServiceRunState::Transitioning
    );
}

#[test]
fn a_failing_systemctl_is_reported_without_its_output() {
    let host = host(&["worker"]);
    let recorded = Recorded::new(vec![expect(
        &[
            "systemctl",
            "--user",
            "show",
            WORKER_UNIT,
            "--no-pager",
            PROPERTIES,
        ],
        reply(
            1,
            "secret-output",
            "Failed to connect to bus: No medium found\n",
        ),
    )]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service command failed (systemctl --user)",
    );
}

#[test]
fn stop_requests_a_non_blocking_stop_and_polls_until_stopped() {
    let host = host(&["gateway"]);
    let recorded = Recorded::new(vec![
        show(
            GATEWAY_UNIT,
            &show_output("70", "loaded", "active", "enabled"),
        ),
        expect(
            &["systemctl", "--user", "stop", "--no-block", GATEWAY_UNIT],
            reply(0, "", ""),
        ),
        show(
            GATEWAY_UNIT,
            &show_output("70", "loaded", "deactivating", "enabled"),
        ),
        show(
            GATEWAY_UNIT,
            &show_output("0", "loaded", "inactive", "enabled"),
        ),
    ]);
    services(&host.layout, &recorded)
        .stop(Role::Gateway)
        .unwrap();
    assert_eq!(recorded.unused(), 0);
    assert_eq!(recorded.calls()[1].1, Duration::from_secs(10));
}

#[test]
fn a_worker_that_never_stops_is_reported_after_its_bound() {
    let host = host(&["worker"]);
    let running = show_output("70", "loaded", "deactivating", "enabled");
    let recorded = Recorded::new(vec![
        show(
            WORKER_UNIT,
            &show_output("70", "loaded", "active", "enabled"),
        ),
        expect(
            &["systemctl", "--user", "stop", "--no-block", WORKER_UNIT],
            reply(0, "", ""),
        ),
    ])
    .then_repeat(vec![show(WORKER_UNIT, &running)]);
    let err = failure(
        services(&host.layout, &recorded)
            .with_timeout(Duration::from_millis(250))
            .stop(Role::Worker),
    );
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service did not stop; no force kill was attempted",
    );
    assert!(recorded
        .commands()
        .iter()
        .all(|args| args[2] == "show" || args[2] == "stop"));
}

#[test]
fn start_reads_the_unit_then_enables_and_starts_without_blocking() {
    let host = host(&["worker"]);
    let recorded = Recorded::new(vec![
        expect(
            &["systemctl", "--user", "enable", WORKER_UNIT],
            reply(0, "", "Created symlink ...\n"),
        ),
        expect(
            &["systemctl", "--user", "start", "--no-block", WORKER_UNIT],
            reply(0, "", ""),
        ),
    ]);
    services(&host.layout, &recorded)
        .start(Role::Worker)
        .unwrap();
    assert_eq!(recorded.unused(), 0);

    let recorded = Recorded::new(vec![]);
    let err = failure(services(&host.layout, &recorded).start(Role::Gateway));
    assert_eq!(err.class(), ErrorClass::NotFound);
    assert!(recorded.calls().is_empty());
}

#[test]
fn reload_enable_disable_and_restore_run_the_original_commands() {
    let host = host(&["worker", "gateway"]);
    let enable = |unit: &str| expect(&["systemctl", "--user", "enable", unit], reply(0, "", ""));
    let disable = |unit: &str| expect(&["systemctl", "--user", "disable", unit], reply(0, "", ""));
    let start = |unit: &str| {
        expect(
            &["systemctl", "--user", "start", "--no-block", unit],
            reply(0, "", ""),
        )
    };
    let recorded = Recorded::new(vec![
        expect(&["systemctl", "--user", "daemon-reload"], reply(0, "", "")),
        enable(GATEWAY_UNIT),
        disable(WORKER_UNIT),
        // restore: running+enabled, running+disabled, stopped, absent.
        enable(WORKER_UNIT),
        start(WORKER_UNIT),
        enable(GATEWAY_UNIT),
        start(GATEWAY_UNIT),
        disable(GATEWAY_UNIT),
        enable(WORKER_UNIT),
    ]);
    let native = services(&host.layout, &recorded);
    native.reload().unwrap();
    native.set_enabled("gateway", true).unwrap();
    native.set_enabled("worker", false).unwrap();
    native
        .restore("worker", &ServiceState::running(true, 1))
        .unwrap();
    native
        .restore("gateway", &ServiceState::running(false, 1))
        .unwrap();
    native
        .restore("worker", &ServiceState::stopped(true))
        .unwrap();
    native.restore("gateway", &ServiceState::absent()).unwrap();
    assert_eq!(recorded.unused(), 0);

    // Stricter than the original, which maps any role other than "worker" to the
    // gateway unit: an unknown role is refused before any command runs.
    let recorded = Recorded::new(vec![]);
    let refused = services(&host.layout, &recorded)
        .set_enabled("other", true)
        .unwrap_err();
    assert_eq!(
        refused.python_line(),
        "ValueError: unknown execution service role"
    );
}

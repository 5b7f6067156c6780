//! NativeServices and RecoveryService on launchd, replaying recorded
//! `launchctl print-disabled`, `print`, `bootstrap` and `bootout` output
//! (tests/fixtures/launchd, whose README says where each shape comes from)
//! through the injected runner, since launchd cannot run here. Every
//! observation branch, every command with its arguments and timeout, every
//! refusal, and the rule that output is never echoed.

use std::time::{Duration, Instant};

use agents_common::{Error, Platform, RecoveryService, Role, ServiceRunState, ServiceState};
use agents_tests::recorded_commands::{
    domain, expect, failure, launchd_fixture, launchd_output, launchd_print_disabled, reply,
    services, Exchange, Recorded, ServiceHome, LAUNCHD_SECRET,
};
use agents_tests::{assert_error_is, set_mode, TempDir};
use python_compat::{os::current_uid, ErrorClass};

const WORKER: &str = "com.agentsdock.server";
const GATEWAY: &str = "com.agentsdock.gateway";
const SECRET: &str = LAUNCHD_SECRET;

/// The recorded output `name` for `label` with process `pid`.
fn fixture(name: &str, label: &str, pid: &str) -> String {
    launchd_fixture(name, label, pid)
}

/// `launchctl print-disabled gui/<uid>` with our worker's entry set to
/// `value`, or none when `None`.
fn print_disabled(worker_value: Option<&str>) -> String {
    match worker_value {
        Some(value) => launchd_print_disabled(&[(WORKER, value)]),
        None => launchd_print_disabled(&[]),
    }
}

/// `launchctl print gui/<uid>/<label>` of a loaded agent without a process,
/// with `pid_lines` put where launchd prints the process.
fn print_loaded_with(label: &str, pid_lines: &str) -> String {
    let text = fixture("print-not-running.txt", label, "");
    let runs = "\truns = 2\n";
    assert!(text.contains(runs));
    text.replacen(runs, &format!("{runs}{pid_lines}"), 1)
}

fn not_found_stderr(label: &str) -> String {
    fixture("print-not-found.stderr", label, "")
}

fn disabled_call(worker_value: Option<&str>) -> Exchange {
    expect(
        &["/bin/launchctl", "print-disabled", &domain()],
        reply(0, &print_disabled(worker_value), ""),
    )
}

fn print_call(
    label: &str,
    reply_value: agents_common::Result<agents_common::CommandCapture>,
) -> Exchange {
    let target = format!("{}/{label}", domain());
    expect(&["/bin/launchctl", "print", &target], reply_value)
}

fn running(label: &str, pid: u32) -> Exchange {
    print_call(
        label,
        reply(
            0,
            &fixture("print-running.txt", label, &pid.to_string()),
            "",
        ),
    )
}

fn not_found(label: &str) -> Exchange {
    print_call(label, reply(113, "", &not_found_stderr(label)))
}

/// A Darwin layout whose LaunchAgents directory exists, with plists for `roles`.
fn host(roles: &[&str]) -> ServiceHome {
    ServiceHome::with_files(Platform::Darwin, roles)
}

#[test]
fn a_running_agent_reports_its_pid_and_enablement() {
    let host = host(&["worker", "gateway"]);
    let recorded = Recorded::new(vec![
        disabled_call(Some("enabled")),
        running(WORKER, 4242),
        disabled_call(Some("enabled")),
        running(GATEWAY, 4343),
    ]);
    let snapshot = services(&host.layout, &recorded).snapshot().unwrap();
    assert_eq!(snapshot.worker, ServiceState::running(true, 4242));
    assert_eq!(snapshot.gateway, ServiceState::running(true, 4343));
    assert_eq!(
        python_compat::json::encode_line(&snapshot.to_json(), false),
        r#"{"worker": {"state": "running", "enabled": true, "pid": 4242}, "gateway": {"state": "running", "enabled": true, "pid": 4343}}"#
    );
    let timeouts: Vec<Duration> = recorded
        .calls()
        .into_iter()
        .map(|(_, timeout)| timeout)
        .collect();
    assert_eq!(timeouts, vec![Duration::from_secs(10); 4]);
}

#[test]
fn enablement_follows_both_spellings_and_defaults_to_enabled() {
    for (value, enabled) in [
        (Some("enabled"), true),
        (Some("false"), true),
        (Some("disabled"), false),
        (Some("true"), false),
        (None, true),
    ] {
        let host = host(&["worker"]);
        let recorded = Recorded::new(vec![disabled_call(value), running(WORKER, 77)]);
        let state = services(&host.layout, &recorded)
            .observe(Role::Worker)
            .unwrap();
        assert_eq!(state, ServiceState::running(enabled, 77), "{value:?}");
    }
}

#[test]
fn ambiguous_enablement_is_refused_before_the_job_is_queried() {
    let twice = format!(
        "{}\t\"{WORKER}\" => enabled\n",
        print_disabled(Some("disabled"))
    );
    let odd = print_disabled(Some("yes"));
    let on_next_line = format!("\t\"{WORKER}\" =>\n\t\tmaybe\n");
    for output in [twice, odd, on_next_line] {
        let host = host(&["worker"]);
        let recorded = Recorded::new(vec![expect(
            &["/bin/launchctl", "print-disabled", &domain()],
            reply(0, &output, ""),
        )]);
        let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            "launchd returned ambiguous enablement",
        );
        assert_eq!(recorded.calls().len(), 1);
    }
}

#[test]
fn an_unloaded_agent_is_stopped_with_its_plist_and_absent_without() {
    let host_with = host(&["worker"]);
    let recorded = Recorded::new(vec![disabled_call(Some("disabled")), not_found(WORKER)]);
    let state = services(&host_with.layout, &recorded)
        .observe(Role::Worker)
        .unwrap();
    assert_eq!(state, ServiceState::stopped(false));

    let host_without = host(&[]);
    let recorded = Recorded::new(vec![disabled_call(Some("enabled")), not_found(WORKER)]);
    let state = services(&host_without.layout, &recorded)
        .observe(Role::Worker)
        .unwrap();
    assert_eq!(state, ServiceState::absent());
    assert_eq!(
        python_compat::json::encode_line(&state.to_json(), false),
        r#"{"state": "absent", "enabled": false}"#
    );
}

#[test]
fn a_failed_print_without_could_not_find_service_is_unknown_ownership() {
    // A session without a GUI domain (ssh, no login) and a refused target:
    // neither says the job is absent, so ownership is unknown; the output,
    // whatever it holds, is not repeated.
    let no_domain = format!("Could not find domain for user gui: {}\n", current_uid());
    for (status, stdout, stderr) in [
        (113, String::new(), no_domain),
        (
            64,
            fixture("print-running.txt", WORKER, "4242"),
            "Unrecognized target specifier.\n".to_string(),
        ),
    ] {
        let host = host(&["worker"]);
        let recorded = Recorded::new(vec![
            disabled_call(None),
            print_call(WORKER, reply(status, &stdout, &stderr)),
        ]);
        let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            "launchd service ownership is unknown",
        );
    }
}

#[test]
fn a_loaded_agent_without_its_plist_is_refused() {
    let host = host(&[]);
    let recorded = Recorded::new(vec![disabled_call(None), running(WORKER, 4242)]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "loaded native service has no safely restorable plist",
    );
}

#[test]
fn only_exactly_one_positive_pid_line_means_running() {
    let cases = [
        ("", None),
        ("\tpid = 0\n", None),
        ("\tpid = 12\n\tpid = 13\n", None),
        ("\tpid = 12 (exited)\n", None),
        ("\tpid =\n\t\t0099\n", Some(99)),
    ];
    for (pid_lines, pid) in cases {
        let host = host(&["worker"]);
        let recorded = Recorded::new(vec![
            disabled_call(None),
            print_call(WORKER, reply(0, &print_loaded_with(WORKER, pid_lines), "")),
        ]);
        let state = services(&host.layout, &recorded)
            .observe(Role::Worker)
            .unwrap();
        let expected = match pid {
            Some(pid) => ServiceState::running(true, pid),
            None => ServiceState::with_state(ServiceRunState::Transitioning, true),
        };
        assert_eq!(state, expected, "{pid_lines:?}");
    }
}

#[test]
fn snapshot_refuses_a_transitioning_agent() {
    let host = host(&["worker", "gateway"]);
    let recorded = Recorded::new(vec![
        disabled_call(None),
        print_call(
            WORKER,
            reply(0, &fixture("print-spawn-scheduled.txt", WORKER, ""), ""),
        ),
        disabled_call(None),
        not_found(GATEWAY),
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
fn a_failing_command_is_reported_without_its_output() {
    let host = host(&["worker"]);
    let recorded = Recorded::new(vec![expect(
        &["/bin/launchctl", "print-disabled", &domain()],
        reply(1, &fixture("print-running.txt", WORKER, "4242"), SECRET),
    )]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service command failed (/bin/launchctl print-disabled)",
    );
    assert!(!err.python_line().contains(SECRET));
}

#[test]
fn output_that_is_not_utf8_is_a_decode_error() {
    let host = host(&["worker"]);
    let recorded = Recorded::new(vec![expect(
        &["/bin/launchctl", "print-disabled", &domain()],
        Ok(agents_common::CommandCapture {
            status: 0,
            stdout: b"disabled services = {\n\t\"x\xff\" => true\n}\n".to_vec(),
            stderr: Vec::new(),
        }),
    )]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::UnicodeDecode,
        "'utf-8' codec can't decode byte 0xff in position 25: invalid start byte",
    );
}

#[test]
fn an_unsafe_plist_fails_before_any_command() {
    let host = host(&["worker"]);
    let plist = host.layout.service_path(Role::Worker).unwrap();
    set_mode(&plist, 0o666);
    let recorded = Recorded::new(vec![]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", plist.display()),
    );
    let err = failure(services(&host.layout, &recorded).start(Role::Worker));
    assert_eq!(err.class(), ErrorClass::Permission);
    let err = failure(services(&host.layout, &recorded).observe("bogus"));
    assert_error_is(&err, ErrorClass::Value, "unknown execution service role");
    assert!(recorded.calls().is_empty());
}

#[test]
fn stop_boots_out_then_waits_until_the_agent_is_gone() {
    let host = host(&["worker"]);
    let target = format!("{}/{WORKER}", domain());
    let recorded = Recorded::new(vec![
        disabled_call(None),
        running(WORKER, 4242),
        expect(&["/bin/launchctl", "bootout", &target], reply(0, "", "")),
        disabled_call(None),
        running(WORKER, 4242),
        disabled_call(None),
        not_found(WORKER),
    ]);
    services(&host.layout, &recorded)
        .stop(Role::Worker)
        .unwrap();
    assert_eq!(recorded.unused(), 0);
    let bootout = &recorded.calls()[2];
    assert_eq!(
        bootout.1,
        Duration::from_secs(180),
        "worker bootout timeout"
    );
}

#[test]
fn a_gateway_bootout_waits_at_most_thirty_seconds() {
    let host = host(&["gateway"]);
    let target = format!("{}/{GATEWAY}", domain());
    let recorded = Recorded::new(vec![
        disabled_call(None),
        running(GATEWAY, 9),
        expect(&["/bin/launchctl", "bootout", &target], reply(0, "", "")),
        disabled_call(None),
        not_found(GATEWAY),
    ]);
    services(&host.layout, &recorded)
        .stop(Role::Gateway)
        .unwrap();
    assert_eq!(recorded.calls()[2].1, Duration::from_secs(30));

    // With a shorter configured bound, the gateway uses that.
    let recorded = Recorded::new(vec![
        disabled_call(None),
        running(GATEWAY, 9),
        expect(&["/bin/launchctl", "bootout", &target], reply(0, "", "")),
        disabled_call(None),
        not_found(GATEWAY),
    ]);
    services(&host.layout, &recorded)
        .with_timeout(Duration::from_secs(5))
        .stop(Role::Gateway)
        .unwrap();
    assert_eq!(recorded.calls()[2].1, Duration::from_secs(5));
}

#[test]
fn a_stop_that_never_settles_fails_without_escalating() {
    let host = host(&["worker"]);
    let target = format!("{}/{WORKER}", domain());
    let recorded = Recorded::new(vec![
        disabled_call(None),
        running(WORKER, 4242),
        expect(&["/bin/launchctl", "bootout", &target], reply(0, "", "")),
    ])
    .then_repeat(vec![disabled_call(None), running(WORKER, 4242)]);
    let started = Instant::now();
    let err = failure(
        services(&host.layout, &recorded)
            .with_timeout(Duration::from_millis(350))
            .stop(Role::Worker),
    );
    let elapsed = started.elapsed();
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service did not stop; no force kill was attempted",
    );
    assert!(
        elapsed >= Duration::from_millis(350) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    // Polled every 0.1 s (a few observations, not a busy loop), and nothing
    // but bootout acted.
    let commands = recorded.commands();
    let polls = commands.iter().filter(|args| args[1] == "print").count();
    assert!((2..=8).contains(&polls), "{polls} polls");
    assert_eq!(
        commands.iter().filter(|args| args[1] == "bootout").count(),
        1
    );
    assert!(commands
        .iter()
        .all(|args| ["print", "print-disabled", "bootout"].contains(&args[1].as_str())));
}

#[test]
fn stopping_a_stopped_or_absent_agent_does_nothing() {
    let host = host(&["worker"]);
    let recorded = Recorded::new(vec![disabled_call(None), not_found(WORKER)]);
    services(&host.layout, &recorded)
        .stop(Role::Worker)
        .unwrap();
    let recorded = Recorded::new(vec![disabled_call(None), not_found(GATEWAY)]);
    services(&host.layout, &recorded)
        .stop(Role::Gateway)
        .unwrap();
    assert_eq!(recorded.unused(), 0);
}

#[test]
fn start_enables_then_bootstraps_the_plist() {
    let host = host(&["worker"]);
    let target = format!("{}/{WORKER}", domain());
    let recorded = Recorded::new(vec![
        expect(&["/bin/launchctl", "enable", &target], reply(0, "", "")),
        host.bootstrap("worker", reply(0, "", "")),
    ]);
    services(&host.layout, &recorded)
        .start(Role::Worker)
        .unwrap();
    assert_eq!(recorded.unused(), 0);

    let refused = fixture("bootstrap-io-error.stderr", WORKER, "");
    let recorded = Recorded::new(vec![
        expect(&["/bin/launchctl", "enable", &target], reply(0, "", "")),
        host.bootstrap("worker", reply(5, "", &refused)),
    ]);
    let err = failure(services(&host.layout, &recorded).start(Role::Worker));
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "native service command failed (/bin/launchctl bootstrap)",
    );
}

#[test]
fn start_without_a_plist_runs_nothing() {
    let host = host(&[]);
    let recorded = Recorded::new(vec![]);
    let err = failure(services(&host.layout, &recorded).start(Role::Gateway));
    let plist = host.layout.service_path(Role::Gateway).unwrap();
    assert_error_is(
        &err,
        ErrorClass::NotFound,
        &format!("[Errno 2] No such file or directory: '{}'", plist.display()),
    );
    assert!(recorded.calls().is_empty());
}

#[test]
fn restore_returns_each_recorded_state() {
    let host = host(&["worker"]);
    let target = format!("{}/{WORKER}", domain());
    let enable = || expect(&["/bin/launchctl", "enable", &target], reply(0, "", ""));
    let disable = || expect(&["/bin/launchctl", "disable", &target], reply(0, "", ""));
    let bootstrap = || host.bootstrap("worker", reply(0, "", ""));
    let cases: Vec<(ServiceState, Vec<Exchange>)> = vec![
        (ServiceState::absent(), vec![]),
        (ServiceState::running(true, 5), vec![enable(), bootstrap()]),
        (
            ServiceState::running(false, 5),
            vec![enable(), bootstrap(), disable()],
        ),
        (ServiceState::stopped(true), vec![enable()]),
        (ServiceState::stopped(false), vec![disable()]),
    ];
    for (prior, exchanges) in cases {
        let expected = exchanges.len();
        let recorded = Recorded::new(exchanges);
        services(&host.layout, &recorded)
            .restore("worker", &prior)
            .unwrap();
        assert_eq!(recorded.calls().len(), expected, "{prior:?}");
    }
    // reload is a systemd-only step.
    let recorded = Recorded::new(vec![]);
    services(&host.layout, &recorded).reload().unwrap();
    assert!(recorded.calls().is_empty());
}

#[test]
fn runner_errors_propagate_unchanged() {
    let host = host(&["worker"]);
    let timeout = Error::new(
        ErrorClass::Timeout,
        "Command '['/bin/launchctl', 'print-disabled', 'gui/0']' timed out after 10 seconds",
    );
    let recorded = Recorded::new(vec![expect(
        &["/bin/launchctl", "print-disabled", &domain()],
        Err(timeout.clone()),
    )]);
    let err = failure(services(&host.layout, &recorded).observe(Role::Worker));
    assert_eq!(err, timeout);
}

#[test]
fn the_older_true_false_spelling_of_print_disabled_is_read_too() {
    for (value, enabled) in [(Some("true"), false), (Some("false"), true), (None, true)] {
        let host = host(&["worker"]);
        let entries = value
            .map(|value| format!("\t\"{WORKER}\" => {value}\n"))
            .unwrap_or_default();
        let output = launchd_output("print-disabled-boolean.txt", &[("entries", &entries)]);
        let recorded = Recorded::new(vec![
            expect(
                &["/bin/launchctl", "print-disabled", &domain()],
                reply(0, &output, ""),
            ),
            print_call(WORKER, reply(113, "", &not_found_stderr(WORKER))),
        ]);
        let state = services(&host.layout, &recorded)
            .observe(Role::Worker)
            .unwrap();
        assert_eq!(state, ServiceState::stopped(enabled), "{value:?}");
    }
}

#[test]
fn a_refused_bootout_fails_the_stop_without_polling_or_echoing() {
    // launchd refusing the bootout (exit 5), or the job gone between the
    // observation and the bootout (exit 3): the original does not read the
    // reason, it fails the stop as a failed command.
    for (status, stderr) in [
        (5, "bootout-io-error.stderr"),
        (3, "bootout-no-such-process.stderr"),
    ] {
        let host = host(&["worker"]);
        let target = format!("{}/{WORKER}", domain());
        let recorded = Recorded::new(vec![
            disabled_call(Some("enabled")),
            running(WORKER, 4242),
            expect(
                &["/bin/launchctl", "bootout", &target],
                reply(status, "", &fixture(stderr, WORKER, "")),
            ),
        ]);
        let err = failure(services(&host.layout, &recorded).stop(Role::Worker));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            "native service command failed (/bin/launchctl bootout)",
        );
        assert_eq!(recorded.unused(), 0);
        assert_eq!(recorded.calls().len(), 3, "no poll after a refused bootout");
    }
}

#[test]
fn a_refused_enable_or_disable_is_a_failed_command() {
    let host = host(&["worker"]);
    let target = format!("{}/{GATEWAY}", domain());
    for (enabled, action) in [(true, "enable"), (false, "disable")] {
        let recorded = Recorded::new(vec![expect(
            &["/bin/launchctl", action, &target],
            reply(1, "", &format!("Could not {action} service: {SECRET}\n")),
        )]);
        let err = failure(services(&host.layout, &recorded).set_enabled("gateway", enabled));
        assert_error_is(
            &err,
            ErrorClass::Runtime,
            &format!("native service command failed (/bin/launchctl {action})"),
        );
        assert_eq!(recorded.calls()[0].1, Duration::from_secs(10));
    }
    // start stops at a refused enable: nothing is bootstrapped.
    let recorded = Recorded::new(vec![expect(
        &[
            "/bin/launchctl",
            "enable",
            &format!("{}/{WORKER}", domain()),
        ],
        reply(1, "", ""),
    )]);
    failure(services(&host.layout, &recorded).start(Role::Worker));
    assert_eq!(recorded.calls().len(), 1);
}

/// The recovery owner of this transaction, as `execution_recovery` names
/// its launchd job.
const TRANSACTION: &str = "activation-0123456789abcdef01234567";
const RECOVERY_LABEL: &str = "com.agentsdock.recovery.0123456789abcdef01234567";

fn recovery_print(reply_value: agents_common::Result<agents_common::CommandCapture>) -> Exchange {
    let target = format!("{}/{RECOVERY_LABEL}", domain());
    expect(&["/bin/launchctl", "print", &target], reply_value)
}

#[test]
fn a_recovery_job_is_absent_only_when_launchd_cannot_find_it() {
    let temp = TempDir::new("agents-fs-test");
    let plist =
        agents_common::recovery_service_path(TRANSACTION, Platform::Darwin, &temp.join("home"));
    assert_eq!(
        plist,
        temp.join("home/Library/LaunchAgents")
            .join(format!("{RECOVERY_LABEL}.plist"))
    );
    let absent = Recorded::new(vec![recovery_print(reply(
        113,
        "",
        &not_found_stderr(RECOVERY_LABEL),
    ))]);
    RecoveryService::new(TRANSACTION, Platform::Darwin, &absent)
        .assert_absent(&plist)
        .unwrap();
    assert_eq!(absent.calls()[0].1, Duration::from_secs(20));
    let loaded = "a native recovery job is loaded without its owned registration";
    let no_domain = format!("Could not find domain for user gui: {}\n", current_uid());
    for reply_value in [
        reply(0, &fixture("print-running.txt", RECOVERY_LABEL, "812"), ""),
        reply(0, &fixture("print-not-running.txt", RECOVERY_LABEL, ""), ""),
        reply(113, "", &no_domain),
    ] {
        let recorded = Recorded::new(vec![recovery_print(reply_value)]);
        let err = RecoveryService::new(TRANSACTION, Platform::Darwin, &recorded)
            .assert_absent(&plist)
            .unwrap_err();
        assert_error_is(&err, ErrorClass::Runtime, loaded);
    }
}

#[test]
fn a_recovery_job_runs_only_with_a_positive_pid_line() {
    let plist = std::path::Path::new("/Users/alice/Library/LaunchAgents/x.plist");
    let cases = [
        (
            reply(0, &fixture("print-running.txt", RECOVERY_LABEL, "812"), ""),
            true,
        ),
        (
            reply(0, &fixture("print-not-running.txt", RECOVERY_LABEL, ""), ""),
            false,
        ),
        (
            reply(
                0,
                &fixture("print-spawn-scheduled.txt", RECOVERY_LABEL, ""),
                "",
            ),
            false,
        ),
        (
            reply(0, &fixture("print-running.txt", RECOVERY_LABEL, "0"), ""),
            false,
        ),
        (reply(113, "", &not_found_stderr(RECOVERY_LABEL)), false),
    ];
    for (reply_value, expected) in cases {
        let recorded = Recorded::new(vec![recovery_print(reply_value)]);
        let running = RecoveryService::new(TRANSACTION, Platform::Darwin, &recorded)
            .running(plist)
            .unwrap();
        assert_eq!(running, expected);
    }
    let no_domain = format!("Could not find domain for user gui: {}\n", current_uid());
    let recorded = Recorded::new(vec![recovery_print(reply(113, "", &no_domain))]);
    let err = RecoveryService::new(TRANSACTION, Platform::Darwin, &recorded)
        .running(plist)
        .unwrap_err();
    assert_error_is(
        &err,
        ErrorClass::Runtime,
        "cannot inspect native recovery process ownership",
    );
}

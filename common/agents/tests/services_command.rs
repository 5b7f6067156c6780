//! The real command runner with real processes: captured output, stdin from
//! /dev/null, Python's returncode for signals, the timeout that kills the
//! child, a missing program, the extra environment and a discarded stderr.

use std::path::Path;
use std::time::{Duration, Instant};

use agents_common::{CommandRunner, SystemCommandRunner};
use python_compat::ErrorClass;

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

#[test]
fn output_is_captured_and_stdin_is_empty() {
    let runner = SystemCommandRunner::default();
    let capture = runner
        .run(
            &args(&["sh", "-c", "cat; echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(capture.status, 3);
    assert_eq!(capture.stdout, b"out\n");
    assert_eq!(capture.stderr, b"err\n");
}

#[test]
fn a_signalled_command_reports_minus_the_signal() {
    let capture = SystemCommandRunner::default()
        .run(
            &args(&["sh", "-c", "kill -TERM $$"]),
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(capture.status, -15);
}

#[test]
fn a_command_past_its_timeout_is_killed() {
    let marker = std::env::temp_dir().join(format!("agents-runner-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!("echo $$ > {}; exec sleep 30", marker.display());
    let started = Instant::now();
    let err = SystemCommandRunner::default()
        .run(&args(&["sh", "-c", &script]), Duration::from_millis(300))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(err.class(), ErrorClass::Timeout);
    assert_eq!(
        err.message(),
        format!("Command '['sh', '-c', '{script}']' timed out after 0.3 seconds")
    );
    let pid = std::fs::read_to_string(&marker).unwrap();
    std::fs::remove_file(&marker).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "the timed-out child was killed and reaped"
    );
}

#[test]
fn a_missing_program_is_a_file_not_found_error() {
    let err = SystemCommandRunner::default()
        .run(&args(&["agents-no-such-program"]), Duration::from_secs(1))
        .unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(
        err.message(),
        "[Errno 2] No such file or directory: 'agents-no-such-program'"
    );
}

#[test]
fn extra_environment_reaches_the_command() {
    let runner =
        SystemCommandRunner::default().with_environment([("AGENTS_RUNNER_PROBE", "selected")]);
    let capture = runner
        .run(
            &args(&["sh", "-c", "printf %s \"$AGENTS_RUNNER_PROBE\""]),
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(capture.stdout, b"selected");
}

#[test]
fn discarded_stderr_is_dev_null_not_a_pipe() {
    let script = &args(&["sh", "-c", "readlink /proc/$$/fd/2; echo err >&2"]);
    let discarded = SystemCommandRunner::default()
        .with_stderr_discarded()
        .run(script, Duration::from_secs(10))
        .unwrap();
    assert_eq!(discarded.stdout, b"/dev/null\n");
    assert!(discarded.stderr.is_empty());
    let captured = SystemCommandRunner::default()
        .run(script, Duration::from_secs(10))
        .unwrap();
    assert!(captured.stdout.starts_with(b"pipe:["));
    assert_eq!(captured.stderr, b"err\n");
}

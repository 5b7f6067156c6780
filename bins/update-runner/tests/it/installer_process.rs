//! `run_installer` with real processes: the stand-in install.sh records how
//! it was started and then exits, fails, dies by a signal, handles or
//! ignores SIGTERM, while the tests watch the log and the status row. Where
//! the outcome is deterministic it is compared with the original's own
//! `run_installer` on an identical fixture.

use crate::installer_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agents_common::{is_ownership_lost, test_support::OWNERSHIP_LOST_MESSAGE, utc_now};
use agents_tests::{Originals, TempDir};
use installer_support::{
    eventually, original, original_run_call, outcome_json, stand_in_run, stat_identity,
    without_timestamps, Fixture,
};
use python_compat::{json::Json, json_object};
use update_runner::installer::{
    run_installer, InstallerOutcome, InstallerRun, INSTALLER_ENVIRONMENT_SELECTORS,
};

/// Set in the re-executed test binary that plays the update runner.
const RUNNER_ROLE: &str = "INSTALLER_TEST_RUNNER_ROOT";

fn message(result: &agents_common::Result<InstallerOutcome>) -> String {
    match result {
        Ok(outcome) => panic!("expected a failure, got {outcome:?}"),
        Err(error) => error.message().to_string(),
    }
}

fn text(row: &python_compat::json::JsonObject, key: &str) -> String {
    row.get(key)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("row has no text {key}: {row:?}"))
        .to_string()
}

fn int(row: &python_compat::json::JsonObject, key: &str) -> i128 {
    row.get(key)
        .and_then(Json::as_int)
        .unwrap_or_else(|| panic!("row has no integer {key}: {row:?}"))
}

#[test]
fn installer_runs_in_its_own_session_with_a_scrubbed_environment() {
    if let Some(root) = std::env::var_os(RUNNER_ROLE) {
        // The runner's side, in a process whose environment the parent chose.
        let mut run = stand_in_run(Path::new(&root), &["say:started", "exit:0"]);
        run.managed_update_id = Some("upd-42".into());
        run.expected_service_cgroup = Some("/user.slice/agents-server.service".into());
        assert_eq!(run_installer(&run), Ok(InstallerOutcome::Installed));
        return;
    }
    let fixture = Fixture::new();
    let stdin_path = fixture.root.path().join("runner stdin");
    std::fs::write(&stdin_path, "").unwrap();
    let mut environment: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap()),
        ("KEEP_ME".into(), "kept value".into()),
        ("AGENTSDOCK_TOKEN_NOT_LISTED".into(), "kept too".into()),
        (
            RUNNER_ROLE.into(),
            fixture.root.path().to_str().unwrap().into(),
        ),
    ];
    for name in INSTALLER_ENVIRONMENT_SELECTORS {
        environment.push((name.to_string(), format!("leaked {name}")));
    }
    let status = Command::new(std::env::current_exe().unwrap())
        .arg(agents_tests::test_name(
            module_path!(),
            agents_tests::test_name!(),
        ))
        .args(["--exact", "--test-threads=1"])
        .env_clear()
        .envs(environment.iter().map(|(name, value)| (name, value)))
        .stdin(std::fs::File::open(&stdin_path).unwrap())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the runner process failed: {status}");

    let mut expected: Vec<(String, String)> = environment
        .into_iter()
        .filter(|(name, _)| !INSTALLER_ENVIRONMENT_SELECTORS.contains(&name.as_str()))
        .collect();
    expected.push(("AGENTSDOCK_MANAGED_UPDATE_ID".into(), "upd-42".into()));
    expected.push((
        "AGENTSDOCK_EXPECTED_SERVICE_CGROUP".into(),
        "/user.slice/agents-server.service".into(),
    ));
    expected.sort();
    assert_eq!(fixture.environ(), expected);
    // The update's identity travels in the environment only.
    assert_eq!(
        fixture.argv(),
        [
            fixture.program.to_str().unwrap(),
            fixture.record.to_str().unwrap(),
            "say:started",
            "exit:0"
        ]
    );
    // setsid: a session and a process group of its own.
    let (pid, group, session) = fixture.identity();
    assert_eq!((group, session), (pid, pid));
    assert_eq!(
        fixture.recorded("fd0").unwrap(),
        stdin_path.to_str().unwrap()
    );
}

#[test]
fn installer_gets_its_argv_working_directory_and_the_log_as_stdout_and_stderr() {
    let fixture = Fixture::new();
    let run = fixture.run(&[
        "say:to stdout",
        "err:to stderr",
        "exit:0",
        "with space",
        "",
        "\u{fc}n\u{ef}c\u{f6}d\u{e9}",
        "--release-version",
    ]);
    let (_, _, own_session) = stat_identity(&std::fs::read_to_string("/proc/self/stat").unwrap());
    assert_eq!(run_installer(&run), Ok(InstallerOutcome::Installed));
    let mut expected = vec![
        fixture.program.to_str().unwrap().to_string(),
        fixture.record.to_str().unwrap().to_string(),
    ];
    expected.extend(
        [
            "say:to stdout",
            "err:to stderr",
            "exit:0",
            "with space",
            "",
            "\u{fc}n\u{ef}c\u{f6}d\u{e9}",
            "--release-version",
        ]
        .map(String::from),
    );
    assert_eq!(fixture.argv(), expected);
    assert_eq!(
        fixture.recorded("cwd").unwrap(),
        fixture.release.to_str().unwrap()
    );
    let log = fixture.log.to_str().unwrap();
    assert_eq!(fixture.recorded("fd1").unwrap(), log);
    assert_eq!(fixture.recorded("fd2").unwrap(), log);
    let (pid, _, session) = fixture.identity();
    assert_eq!(session, pid);
    assert_ne!(session, own_session);
    let written = String::from_utf8(fixture.log_bytes()).unwrap();
    assert!(
        written.ends_with(" ---\nto stdout\nto stderr\n"),
        "{written:?}"
    );
}

#[test]
fn each_attempt_appends_a_header_to_a_private_log() {
    let fixture = Fixture::new();
    std::fs::write(&fixture.log, "previous attempt\n").unwrap();
    std::fs::set_permissions(&fixture.log, std::fs::Permissions::from_mode(0o644)).unwrap();
    fixture.write_row(&json_object! {
        "update_id" => "upd-1",
        "phase" => "installing",
        "server_key" => "kept",
    });
    let before = utc_now();
    let mut run = fixture.run(&["say:attempt one", "exit:0"]);
    run.expected_update_id = Some("upd-1".into());
    assert_eq!(run_installer(&run), Ok(InstallerOutcome::Installed));
    let row = fixture.row();
    assert_eq!(text(&row, "server_key"), "kept");
    assert!(text(&row, "heartbeat_at") >= before);
    assert_eq!(
        std::fs::metadata(&fixture.log)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // A manual run (no update id) labels its header "manual".
    let run = fixture.run(&["say:attempt two", "exit:0"]);
    assert_eq!(run_installer(&run), Ok(InstallerOutcome::Installed));
    let after = utc_now();

    let log = String::from_utf8(fixture.log_bytes()).unwrap();
    let mut stamps = Vec::new();
    let mut rest = log.as_str();
    for (label, output) in [("upd-1", "attempt one"), ("manual", "attempt two")] {
        let header = format!("\n--- AgentsServer update {label} to 1.2.3 at ");
        let start = rest.find(&header).expect("header present");
        let stamp = &rest[start + header.len()..start + header.len() + 20];
        let expected_tail = format!("{stamp} ---\n{output}\n");
        assert!(
            rest[start + header.len()..].starts_with(&expected_tail),
            "{log:?}"
        );
        stamps.push(stamp.to_string());
        rest = &rest[start + header.len() + expected_tail.len()..];
    }
    assert!(log.starts_with("previous attempt\n\n--- AgentsServer update upd-1"));
    assert!(rest.is_empty(), "unexpected trailing log text {rest:?}");
    for stamp in stamps {
        assert!(
            before <= stamp && stamp <= after,
            "{stamp} not in {before}..{after}"
        );
        assert_eq!(stamp.len(), 20);
        assert!(stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T');
    }
}

/// Twin fixtures: the same steps and prior log for us and for the original.
struct Scenario {
    steps: Vec<String>,
    prior_log: Vec<u8>,
    accepted: &'static [i64],
    tweak: fn(&mut InstallerRun),
}

fn scenario(steps: &[&str], accepted: &'static [i64]) -> Scenario {
    Scenario {
        steps: steps.iter().map(|step| step.to_string()).collect(),
        prior_log: Vec::new(),
        accepted,
        tweak: |_| {},
    }
}

/// Run every scenario through our `run_installer` and through the original's,
/// and require the same outcome and the same log bytes (header times aside).
fn compare_with_original(
    originals: &Originals,
    scenarios: Vec<Scenario>,
) -> Vec<(Fixture, agents_common::Result<InstallerOutcome>)> {
    let mut ours = Vec::new();
    let mut calls = Vec::new();
    let mut original_fixtures = Vec::new();
    for scenario in &scenarios {
        let fixture = Fixture::new();
        let theirs = Fixture::new();
        for twin in [&fixture, &theirs] {
            if !scenario.prior_log.is_empty() {
                std::fs::write(&twin.log, &scenario.prior_log).unwrap();
            }
        }
        let steps: Vec<&str> = scenario.steps.iter().map(String::as_str).collect();
        let mut run = fixture.run(&steps);
        run.rollback_accepted = scenario.accepted.contains(&75);
        (scenario.tweak)(&mut run);
        let mut original_run = theirs.run(&steps);
        (scenario.tweak)(&mut original_run);
        calls.push(original_run_call(&original_run, scenario.accepted));
        original_fixtures.push(theirs);
        let result = run_installer(&run);
        ours.push((fixture, result));
    }
    let expected = original(originals, calls);
    let cases = ours
        .iter()
        .zip(&original_fixtures)
        .zip(&scenarios)
        .zip(expected);
    for ((((fixture, result), theirs), scenario), expected) in cases {
        // Each twin lives under its own root; messages may name it.
        let ours = outcome_json(result, (fixture.root.path(), theirs.root.path()));
        assert_eq!(ours, expected, "steps {:?}", scenario.steps);
        let our_log = without_timestamps(&fixture.log_bytes());
        let original_log = without_timestamps(&theirs.log_bytes());
        assert_eq!(
            String::from_utf8_lossy(&our_log),
            String::from_utf8_lossy(&original_log)
        );
        assert_eq!(our_log, original_log);
    }
    ours
}

#[test]
fn outcomes_and_logs_match_the_original() {
    let originals = agents_tests::require_originals!();
    let mut silent = scenario(&["exit:9"], &[0]);
    silent.prior_log = b"earlier attempt said something\n".to_vec();
    let mut missing_program = scenario(&["exit:0"], &[0]);
    missing_program.tweak = |run| run.program = run.program.with_file_name("absent.sh");
    let mut missing_cwd = scenario(&["exit:0"], &[0]);
    missing_cwd.tweak = |run| run.cwd = run.cwd.join("absent");
    let mut not_executable = scenario(&["exit:0"], &[0]);
    // The release's VERSION file exists but is no program.
    not_executable.tweak = |run| run.program = run.cwd.join("VERSION");
    let results = compare_with_original(
        &originals,
        vec![
            scenario(&["say:all good", "exit:0"], &[0]),
            scenario(
                &[
                    "say:AGENTSDOCK_SETUP_RESULT={\"token\":\"t\"}",
                    "err:curl: Authorization: Bearer abc123",
                    "say:access_token=xyz",
                    "say:useful diagnostic",
                    "exit:7",
                ],
                &[0],
            ),
            silent,
            scenario(&["say:rolled back", "exit:75"], &[0, 75]),
            scenario(&["say:rolled back", "exit:75"], &[0]),
            scenario(&["say:killed", "signal:KILL"], &[0]),
            scenario(&["signal:TERM"], &[0]),
            missing_program,
            missing_cwd,
            not_executable,
        ],
    );
    let messages: Vec<String> = results
        .iter()
        .map(|(_, result)| match result {
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => error.python_line(),
        })
        .collect();
    let program = results[7].0.release.join("absent.sh");
    let cwd = results[8].0.release.join("absent");
    assert_eq!(
        messages,
        [
            "Installed".to_string(),
            "RuntimeError: installer failed (7): curl: Authorization: Bearer [REDACTED]\naccess_token=[REDACTED]\nuseful diagnostic".into(),
            "RuntimeError: installer failed (9): no output; inspect server-update.log".into(),
            "RolledBack".into(),
            "RuntimeError: installer failed (75): rolled back".into(),
            "RuntimeError: installer failed (-9): killed".into(),
            "RuntimeError: installer failed (-15): no output; inspect server-update.log".into(),
            format!(
                "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
                program.display()
            ),
            format!(
                "FileNotFoundError: [Errno 2] No such file or directory: PosixPath('{}')",
                cwd.display()
            ),
            format!(
                "PermissionError: [Errno 13] Permission denied: '{}'",
                results[9].0.release.join("VERSION").display()
            ),
        ]
    );
}

#[test]
fn log_is_trimmed_to_one_mebibyte_like_the_original() {
    let originals = agents_tests::require_originals!();
    let mut history = Vec::new();
    for line in 0..30_000 {
        history.extend_from_slice(
            format!("history line {line:06} of an earlier attempt\n").as_bytes(),
        );
    }
    // End the history inside a line, as a killed installer leaves it.
    history.extend_from_slice(b"AGENTSDOCK_AGENT_TOKEN=half-writ");
    assert!(history.len() > 1_200_000);
    let output_directory = TempDir::with_mode("installer-output", 0o755);
    let output_path = output_directory.path().join("output");
    let mut output = Vec::new();
    for line in 0..9_000 {
        output.extend_from_slice(format!("installer output {line:05}\n").as_bytes());
    }
    std::fs::write(&output_path, &output).unwrap();
    let cat = format!("cat:{}", output_path.display());
    let mut trimmed = scenario(&[&cat, "exit:0"], &[0]);
    trimmed.prior_log = history.clone();
    let mut failed = scenario(&["say:last words", "exit:3"], &[0]);
    failed.prior_log = history;
    let results = compare_with_original(&originals, vec![trimmed, failed]);
    for (fixture, _) in &results {
        let log = fixture.log_bytes();
        assert!(log.len() <= 1024 * 1024, "log is {} bytes", log.len());
        assert!(
            log.len() > 1024 * 1024 - 200,
            "log is only {} bytes",
            log.len()
        );
        // Whole lines only: the cut never leaves a partial line at the top.
        assert!(log.starts_with(b"history line ") || log.starts_with(b"installer output "));
    }
    let log = results[0].0.log_bytes();
    assert!(log.ends_with(b"installer output 08999\n"));
    assert_eq!(
        results[1].1.as_ref().unwrap_err().message(),
        "installer failed (3): last words"
    );
}

#[test]
fn heartbeats_advance_the_row_while_the_installer_runs() {
    let fixture = Fixture::new();
    fixture.write_row(&json_object! {
        "update_id" => "upd-hb",
        "phase" => "installing",
        "server_key" => "kept",
    });
    let mut run = fixture.run(&["say:working", "sleep:2.4", "exit:0"]);
    run.expected_update_id = Some("upd-hb".into());
    run.heartbeat = Duration::from_millis(150);
    let supervisor = std::thread::spawn(move || run_installer(&run));
    let mut seen: Vec<(String, i128, String)> = Vec::new();
    while !supervisor.is_finished() {
        let row = fixture.row();
        if row.get("elapsed_seconds").is_some() {
            let sample = (
                text(&row, "updated_at"),
                int(&row, "elapsed_seconds"),
                text(&row, "message"),
            );
            if seen.last() != Some(&sample) {
                seen.push(sample);
            }
            assert_eq!(text(&row, "phase"), "installing");
            assert_eq!(text(&row, "server_key"), "kept");
            assert!(row.get("heartbeat_at").and_then(Json::as_str).is_some());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(supervisor.join().unwrap(), Ok(InstallerOutcome::Installed));
    let elapsed: Vec<i128> = seen.iter().map(|sample| sample.1).collect();
    assert!(
        elapsed.windows(2).all(|pair| pair[0] <= pair[1]),
        "{seen:?}"
    );
    assert_eq!(elapsed.first(), Some(&1), "{seen:?}");
    assert_eq!(elapsed.last(), Some(&2), "{seen:?}");
    let stamps: Vec<&String> = seen.iter().map(|sample| &sample.0).collect();
    assert!(stamps.windows(2).all(|pair| pair[0] <= pair[1]), "{seen:?}");
    assert!(
        stamps.first() < stamps.last(),
        "updated_at never advanced: {seen:?}"
    );
    for (_, elapsed, message) in &seen {
        assert_eq!(
            message,
            &format!("Installing AgentsServer 1.2.3 ({elapsed}s elapsed).")
        );
    }
}

#[test]
fn first_heartbeat_is_refused_for_a_row_the_update_does_not_own() {
    for row in [
        json_object! {"update_id" => "someone-else", "phase" => "installing"},
        json_object! {"update_id" => "upd-1", "phase" => "failed"},
        json_object! {"phase" => "installing"},
    ] {
        let fixture = Fixture::new();
        fixture.write_row(&row);
        let before = std::fs::read(&fixture.status).unwrap();
        let mut run = fixture.run(&["exit:0"]);
        run.expected_update_id = Some("upd-1".into());
        let error = run_installer(&run).unwrap_err();
        assert!(is_ownership_lost(&error));
        assert_eq!(
            error.python_line(),
            format!("update_runner.UpdateOwnershipLostError: {OWNERSHIP_LOST_MESSAGE}")
        );
        // Nothing started, nothing written.
        assert!(fixture.recorded("argv").is_none());
        assert!(!fixture.log.exists());
        assert_eq!(std::fs::read(&fixture.status).unwrap(), before);
    }
}

#[test]
fn losing_the_row_mid_install_terminates_the_group_and_stops_claiming() {
    let originals = agents_tests::require_originals!();
    let fixture = Fixture::new();
    fixture.write_row(&json_object! {"update_id" => "upd-own", "phase" => "installing"});
    let mut run = fixture.run(&["on-term:0.5:0", "grandchild", "say:working", "sleep:30"]);
    run.expected_update_id = Some("upd-own".into());
    run.heartbeat = Duration::from_millis(100);
    run.termination_poll = Duration::from_millis(200);
    let supervisor = std::thread::spawn(move || run_installer(&run));
    assert!(
        eventually(Duration::from_secs(10), || fixture
            .row()
            .get("elapsed_seconds")
            .is_some()),
        "no heartbeat arrived"
    );
    // The server (another process, under the shared flock) cancels.
    let cancel = Command::new("python3")
        .arg("-B")
        .arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, {:?}); import update_runner as u; \
             from pathlib import Path; u.update_status(Path(sys.argv[1]), phase='cancelled', \
             message='Cancelled by the user.')",
            originals.dir()
        ))
        .arg(&fixture.status)
        .status()
        .unwrap();
    assert!(cancel.success());
    let cancelled = std::fs::read(&fixture.status).unwrap();
    let started = Instant::now();
    let error = supervisor.join().unwrap().unwrap_err();
    assert!(is_ownership_lost(&error), "{error:?}");
    // The installer's TERM handler ran to its end before we returned...
    assert!(fixture.marker("term") && fixture.marker("finished"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // ...the whole group got the signal...
    assert!(eventually(Duration::from_secs(5), || fixture.marker("grandchild-term")));
    // ...and the row is exactly what the server wrote.
    assert_eq!(std::fs::read(&fixture.status).unwrap(), cancelled);
    assert_eq!(text(&fixture.row(), "phase"), "cancelled");
    let log = String::from_utf8(fixture.log_bytes()).unwrap();
    assert!(
        log.ends_with("working\nterm received\nrollback finished\n"),
        "{log:?}"
    );
}

#[test]
fn budget_expiry_sends_sigterm_to_the_group_and_waits_for_the_rollback() {
    let fixture = Fixture::new();
    fixture.write_row(&json_object! {"update_id" => "upd-t", "phase" => "installing"});
    let mut run = fixture.run(&[
        "say:started",
        "say:retrying with Bearer topsecret",
        "grandchild",
        "on-term:3:0",
        "sleep:30",
    ]);
    run.expected_update_id = Some("upd-t".into());
    run.timeout = Duration::from_millis(500);
    run.heartbeat = Duration::from_millis(200);
    run.termination_poll = Duration::from_millis(500);
    let started = Instant::now();
    let result = run_installer(&run);
    let took = started.elapsed();
    assert_eq!(
        message(&result),
        "installer timed out after 0.5 seconds: started\nretrying with Bearer [REDACTED]\nterm received\nrollback finished"
    );
    // Three seconds of rollback after SIGTERM, waited for in full: no SIGKILL.
    assert!(
        took >= Duration::from_millis(3_400),
        "returned after {took:?}"
    );
    assert!(fixture.marker("term") && fixture.marker("finished"));
    assert!(eventually(Duration::from_secs(5), || fixture.marker("grandchild-term")));
    let row = fixture.row();
    let elapsed = int(&row, "elapsed_seconds");
    assert!(elapsed >= 3, "{row:?}");
    assert_eq!(
        text(&row, "message"),
        format!(
            "Installer timeout reached; waiting for its protected rollback to finish ({elapsed}s elapsed)."
        )
    );
    assert_eq!(text(&row, "phase"), "installing");
}

#[test]
fn an_installer_ignoring_sigterm_is_waited_for_with_progress_messages() {
    let fixture = Fixture::new();
    fixture.write_row(&json_object! {"update_id" => "upd-i", "phase" => "installing"});
    let mut run = fixture.run(&[
        "ignore-term",
        "say:stubborn",
        "sleep:2.5",
        "say:done anyway",
        "exit:0",
    ]);
    run.expected_update_id = Some("upd-i".into());
    run.timeout = Duration::from_millis(300);
    run.heartbeat = Duration::from_millis(100);
    run.termination_poll = Duration::from_millis(250);
    let status = fixture.status.clone();
    let supervisor = std::thread::spawn(move || run_installer(&run));
    let mut progress = Vec::new();
    while !supervisor.is_finished() {
        let row = fixture.row();
        let message = row
            .get("message")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        if message.starts_with("Installer timeout reached") && progress.last() != Some(&message) {
            progress.push(message);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = supervisor.join().unwrap();
    assert_eq!(
        message(&result),
        "installer timed out after 0.3 seconds: stubborn\ndone anyway"
    );
    // The progress message kept advancing while the installer ran on.
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(progress.contains(
        &"Installer timeout reached; waiting for its protected rollback to finish (2s elapsed).".to_string()
    ), "{progress:?}");
    assert!(status.exists());
}

#[test]
fn a_timeout_matches_the_original() {
    let originals = agents_tests::require_originals!();
    let mut timed_out = scenario(&["say:started", "sleep:5"], &[0]);
    timed_out.tweak = |run| {
        run.timeout = Duration::from_millis(300);
        run.termination_poll = Duration::from_millis(100);
    };
    let results = compare_with_original(&originals, vec![timed_out]);
    assert_eq!(
        results[0].1.as_ref().unwrap_err().message(),
        "installer timed out after 0.3 seconds: started"
    );
}

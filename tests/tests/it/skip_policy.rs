//! The suite's skip policy and its runner, end to end: a test that needs the
//! Python originals reports itself skipped when `AGENTS_ORIGINALS_DIR` names a
//! folder without them and fails instead under `CI=true`; `run-suite` counts
//! such skips in its summary line and fails a run that leaves a process
//! behind, killing it.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use agents_tests::{
    binary_path, process_alive, TempDir, MISSING_ORIGINALS, ORIGINALS_DIR_ENV, ORIGINAL_FILES,
    SEEDS_DIR_ENV, SKIP_LOG_ENV,
};

const CHILD_MARKER: &str = "AGENTS_TESTS_ORIGINALS_CHILD";
const CHILD: &str = "child_needs_the_originals";

/// Run only as a child of the tests below: prints the folder it was given.
#[test]
#[ignore = "helper for the skip-policy tests; runs in a child process"]
fn child_needs_the_originals() {
    if std::env::var_os(CHILD_MARKER).is_none() {
        return; // run by hand with --ignored: nothing to probe
    }
    let originals = agents_tests::require_originals!();
    println!("ORIGINALS {}", originals.dir().display());
}

/// This test binary running only [`CHILD`], with `originals` as the originals,
/// `CI` as given and the skip log (when any) at `skip_log`.
fn child(originals: &Path, ci: Option<&str>, skip_log: Option<&Path>) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            &agents_tests::test_name(module_path!(), CHILD),
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_MARKER, "1")
        .env(ORIGINALS_DIR_ENV, originals)
        .env_remove(SEEDS_DIR_ENV)
        .env_remove("CI")
        .env_remove(SKIP_LOG_ENV);
    if let Some(value) = ci {
        command.env("CI", value);
    }
    if let Some(log) = skip_log {
        command.env(SKIP_LOG_ENV, log);
    }
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn without_the_originals_a_test_is_reported_skipped() {
    let scratch = TempDir::new("skip-policy");
    let empty = scratch.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let log = scratch.path().join("skipped.log");
    let output: Output = child(&empty, None, Some(&log)).output().unwrap();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "a skip is not a failure: {stderr}");
    let line = format!("SKIPPED {CHILD}: {MISSING_ORIGINALS}\n");
    assert!(stderr.contains(&line), "the skip says why: {stderr}");
    assert_eq!(fs::read_to_string(&log).unwrap(), line);
    assert!(
        !text(&output.stdout).contains("ORIGINALS "),
        "it did not run"
    );
}

#[test]
fn an_incomplete_originals_folder_counts_as_missing() {
    let scratch = TempDir::new("skip-policy");
    for name in &ORIGINAL_FILES[1..] {
        fs::write(scratch.path().join(name), b"").unwrap();
    }
    let output = child(scratch.path(), None, None).output().unwrap();
    assert!(output.status.success());
    assert!(text(&output.stderr).contains(MISSING_ORIGINALS));
}

#[test]
fn under_ci_missing_originals_fail_the_test() {
    let scratch = TempDir::new("skip-policy");
    let log = scratch.path().join("skipped.log");
    let output = child(scratch.path(), Some("true"), Some(&log))
        .output()
        .unwrap();
    // --nocapture: the panic message is on stderr.
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "CI=true must fail: {stderr}");
    assert!(
        stderr.contains(&format!("{CHILD}: {MISSING_ORIGINALS} (CI=true")),
        "{stderr}"
    );
    assert!(!log.exists(), "a failure is not logged as a skip");
}

#[test]
fn the_older_variable_name_still_names_the_originals_and_the_new_one_wins() {
    let scratch = TempDir::new("skip-policy");
    let (complete, empty) = (
        scratch.path().join("complete"),
        scratch.path().join("empty"),
    );
    fs::create_dir(&complete).unwrap();
    fs::create_dir(&empty).unwrap();
    for name in ORIGINAL_FILES {
        fs::write(complete.join(name), b"").unwrap();
    }
    let older = child(&empty, Some("true"), None)
        .env_remove(ORIGINALS_DIR_ENV)
        .env(SEEDS_DIR_ENV, &complete)
        .output()
        .unwrap();
    assert!(older.status.success(), "{}", text(&older.stderr));
    assert!(text(&older.stdout).contains(&format!("ORIGINALS {}\n", complete.display())));
    let both = child(&empty, None, None)
        .env(SEEDS_DIR_ENV, &complete)
        .output()
        .unwrap();
    assert!(both.status.success());
    assert!(
        text(&both.stderr).contains(MISSING_ORIGINALS),
        "AGENTS_ORIGINALS_DIR wins"
    );
}

#[test]
fn a_complete_folder_is_used_wherever_it_is() {
    let scratch = TempDir::new("skip-policy");
    for name in ORIGINAL_FILES {
        fs::write(scratch.path().join(name), b"").unwrap();
    }
    let output = child(scratch.path(), Some("true"), None).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stdout));
    assert!(
        text(&output.stdout).contains(&format!("ORIGINALS {}\n", scratch.path().display())),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn run_suite_counts_skips_in_its_summary() {
    let scratch = TempDir::new("skip-policy");
    let output = Command::new(binary_path("run-suite"))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact"])
        .arg(agents_tests::test_name(module_path!(), CHILD))
        .env(CHILD_MARKER, "1")
        .env(ORIGINALS_DIR_ENV, scratch.path())
        .env_remove("CI")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "tests: 0 passed, 0 failed, 1 skipped (1: {MISSING_ORIGINALS}), 0 ignored\n"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("run-suite: no process started by the suite is left\n"));

    let failed = Command::new(binary_path("run-suite"))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact"])
        .arg(agents_tests::test_name(module_path!(), CHILD))
        .env(CHILD_MARKER, "1")
        .env(ORIGINALS_DIR_ENV, scratch.path())
        .env("CI", "true")
        .output()
        .unwrap();
    let stdout = text(&failed.stdout);
    assert_eq!(failed.status.code(), Some(101), "{stdout}");
    assert!(
        stdout.contains("tests: 0 passed, 1 failed, 0 skipped, 0 ignored\n"),
        "{stdout}"
    );
}

#[test]
fn run_suite_fails_and_kills_what_the_suite_left_running() {
    // The leftover detaches into its own session, as a daemon would.
    let output = Command::new(binary_path("run-suite"))
        .args(["--", "sh", "-c", "setsid sleep 600 & echo \"PID $!\""])
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    let pid: u32 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("PID "))
        .and_then(|pid| pid.parse().ok())
        .expect("the script printed its child's PID");
    assert!(
        stderr.contains(&format!("run-suite: left running by the suite: pid {pid} ")),
        "{stderr}"
    );
    assert!(stderr.contains("sleep 600"), "{stderr}");
    assert!(
        stdout.contains("1 process(es) outlived the suite"),
        "{stdout}"
    );
    assert!(!process_alive(pid), "run-suite killed the leftover");
}

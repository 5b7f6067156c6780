//! update-handoff's command line. The original has no parser (its functions are
//! imported), so the oracle is the same surface declared with Python's
//! argparse — `release --root DIR --handoff-file FILE` and `retry-failed
//! --root DIR --status-file FILE --expected-status FILE_OR_-`, `type=Path`
//! like the functions' parameters — which must end every argv as we do.

use crate::cli_support;

use std::fs;

use agents_tests::TempDir;
use cli_support::{assert_same_as_parser, run, text};

const PROGRAM: &str = "update-handoff";

const PARSER: &str = r#"
import argparse
from pathlib import Path

def main(argv=None):
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("release")
    release.add_argument("--root", type=Path, required=True)
    release.add_argument("--handoff-file", type=Path, required=True)
    retry = commands.add_parser("retry-failed")
    retry.add_argument("--root", type=Path, required=True)
    retry.add_argument("--status-file", type=Path, required=True)
    retry.add_argument("--expected-status", required=True)
    parser.parse_args(argv)
"#;

fn check_all(cases: &[&[&str]]) {
    let dir = TempDir::new("cli-handoff-parser");
    fs::write(dir.path().join("handoff_parser.py"), PARSER).unwrap();
    for args in cases {
        assert_same_as_parser(PROGRAM, dir.path(), "handoff_parser", args);
    }
}

const HANDOFF: &str = "/i/.update-preparations/0123456789abcdef0123456789abcdef/handoff-0123456789abcdef0123456789abcdef.json";

#[test]
fn both_subcommands_in_both_forms() {
    let handoff_joined = format!("--handoff-file={HANDOFF}");
    check_all(&[
        &["release", "--root", "/i", "--handoff-file", HANDOFF],
        &["release", &handoff_joined, "--root=/i"],
        &["release", "--ro", "/i", "--ha", HANDOFF],
        &["release", "--root", "/a", "--root", "/i", "--handoff-file="],
        &[
            "retry-failed",
            "--root",
            "/i",
            "--status-file",
            "/s/admin/server-update.json",
            "--expected-status",
            "-",
        ],
        &[
            "retry-failed",
            "--root=/i",
            "--status-file=/s",
            "--expected-status=/saved.json",
        ],
        &["retry-failed", "--r", "/i", "--s", "/s", "--e", ""],
    ]);
}

#[test]
fn refusals_are_usage_errors() {
    check_all(&[
        &[],
        &["bogus"],
        &["retry"],
        &["release"],
        &["release", "--root", "/i"],
        &["release", "--h", HANDOFF, "--root", "/i"],
        &[
            "release",
            "--root",
            "/i",
            "--handoff-file",
            HANDOFF,
            "--bogus",
        ],
        &[
            "release",
            "--root",
            "/i",
            "--handoff-file",
            HANDOFF,
            "extra",
        ],
        &["release", "--root", "/i", "--handoff-file"],
        &[
            "release",
            "--root",
            "/i",
            "--handoff-file",
            HANDOFF,
            "--status-file",
            "/s",
        ],
        &["retry-failed", "--root", "/i", "--status-file", "/s"],
        &[
            "retry-failed",
            "--root",
            "/i",
            "--st",
            "/s",
            "--expected-status",
        ],
        &[
            "retry-failed",
            "--root",
            "/i",
            "--status-file",
            "/s",
            "--expected-status",
            "--",
        ],
        &["--root", "/i", "retry-failed"],
    ]);
}

#[test]
fn help_exits_zero_and_documents_both_forms() {
    check_all(&[
        &["-h"],
        &["--help", "bogus"],
        &["release", "-h"],
        &["retry-failed", "--he"],
    ]);
    let output = run(PROGRAM, &["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let page = text(&output.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for needle in [
        "release --root DIR --handoff-file FILE",
        "retry-failed --root DIR --status-file FILE --expected-status FILE_OR_-",
        "'-' reads it from standard input",
        "already_released, operation_id, released and worker_instance_id",
    ] {
        assert!(page.contains(needle), "{needle:?} missing from:\n{page}");
    }
}

#[test]
fn an_expected_status_that_is_not_a_small_regular_file_is_refused_without_waiting() {
    let dir = TempDir::new("handoff-expected-status");
    let pipe = dir.path().join("expected.fifo");
    agents_tests::make_fifo(&pipe);
    let huge = dir.path().join("expected.json");
    fs::File::create(&huge).unwrap().set_len(1_048_577).unwrap();
    let directory = dir.path().join("expected.d");
    fs::create_dir(&directory).unwrap();
    for (expected, refusal) in [
        (
            pipe.to_str().unwrap().to_string(),
            "ValueError: expected failed status is not a regular file".to_string(),
        ),
        (
            "/dev/zero".to_string(),
            "ValueError: expected failed status is not a regular file".to_string(),
        ),
        (
            huge.to_str().unwrap().to_string(),
            "ValueError: expected failed status exceeds 1 MiB".to_string(),
        ),
        (
            directory.to_str().unwrap().to_string(),
            format!(
                "IsADirectoryError: [Errno 21] Is a directory: '{}'",
                directory.display()
            ),
        ),
    ] {
        let started = std::time::Instant::now();
        let output = run(
            PROGRAM,
            &[
                "retry-failed",
                "--root",
                "/nonexistent/install",
                "--status-file",
                "/nonexistent/status.json",
                "--expected-status",
                &expected,
            ],
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(output.status.code(), Some(1), "{expected}");
        assert_eq!(text(&output.stderr).trim_end(), refusal, "{expected}");
        assert!(output.stdout.is_empty());
    }
}

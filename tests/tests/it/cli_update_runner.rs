//! update-runner's command line against `update_runner.py`'s own argparse
//! parser, argv for argv: accepted, refused (status 2, the same bytes) or
//! help (status 0), before the runner does anything.

use crate::cli_support;

use agents_tests::Originals;
use cli_support::{assert_same_as_original, oracle, run, run_as, text};

const PROGRAM: &str = "update-runner";
const ORIGINAL: &str = "update_runner";

const REQUIRED: &[&str] = &[
    "--status-file",
    "s/server-update.json",
    "--public-key",
    "/k.pem",
    "--port",
    "8765",
    "--bind",
    "127.0.0.1",
    "--expected-server-identity",
    "srv",
    "--update-id",
    "u1",
];

fn with_required(extra: &[&str]) -> Vec<String> {
    REQUIRED
        .iter()
        .chain(extra)
        .map(|word| word.to_string())
        .collect()
}

fn check(originals: &Originals, args: &[String]) {
    assert_same_as_original(originals, PROGRAM, ORIGINAL, args);
}

#[test]
fn every_option_in_both_forms_is_accepted() {
    let originals = agents_tests::require_originals!();
    let options: &[(&str, Option<&str>)] = &[
        ("--expected-version", Some("1.2.3")),
        ("--current-version", Some("1.2.2")),
        ("--track", Some("beta")),
        ("--npm-descriptor", None),
        ("--prepared-receipt", Some("/r.json")),
        ("--prepared-receipt-sha256", Some("ab")),
        ("--execution-handoff-file", Some("/h.json")),
        ("--recover-only", None),
        ("--recovery-transaction", Some("/t")),
        ("--auth-token-file", Some("/a")),
        ("--expected-service-cgroup", Some("/user.slice/x.service")),
        ("--expected-team-hub-id", Some("hub")),
        ("--expected-team-hub-transport", Some("direct")),
        ("--expected-team-hub-url", Some("https://hub")),
        (
            "--expected-team-hub-direct-ip-url",
            Some("https://10.0.0.1"),
        ),
        ("--team-hub-snapshot", Some("/snap")),
        ("--team-hub-data-dir", Some("/data")),
        ("--repair-failed-team-hub-host", None),
    ];
    for (option, value) in options {
        match value {
            Some(value) => {
                check(&originals, &with_required(&[option, value]));
                check(&originals, &with_required(&[&format!("{option}={value}")]));
                // An empty value is a value (absent stays distinguishable).
                check(&originals, &with_required(&[option, ""]));
                check(&originals, &with_required(&[&format!("{option}=")]));
            }
            None => check(&originals, &with_required(&[option])),
        }
    }
    // The required options themselves in `=` form, in another order.
    check(
        &originals,
        &[
            "--update-id=u1",
            "--bind=127.0.0.1",
            "--port=8765",
            "--public-key=/k.pem",
            "--status-file=/s",
            "--expected-server-identity=srv",
        ]
        .map(String::from),
    );
}

#[test]
fn abbreviations_follow_argparse() {
    let originals = agents_tests::require_originals!();
    for extra in [
        &["--prepared-receipt", "/exact"][..], // exact match beats the longer option
        &["--prepared-receipt-s", "cd"],
        &["--npm"],
        &["--recover-o"],
        &["--recovery", "/t"],
        &["--expected-team-hub-d=https://x"],
        &["--p", "1"],             // ambiguous
        &["--recover"],            // ambiguous
        &["--expected-team", "x"], // ambiguous
        &["--e=x"],                // ambiguous, with a value attached
    ] {
        check(&originals, &with_required(extra));
    }
    check(
        &originals,
        &[
            "--st",
            "s",
            "--pu",
            "/k",
            "--po",
            "1",
            "--b",
            "b",
            "--expected-se",
            "i",
            "--u",
            "u",
        ]
        .map(String::from),
    );
}

#[test]
fn ints_are_python_ints() {
    let originals = agents_tests::require_originals!();
    for port in [
        " 7",
        "+7",
        "0_1",
        "007",
        "-1",
        "\u{663}\u{664}",
        "7 ",
        "\u{a0}7",
        "1_",
        "_1",
        "7.0",
        "0x10",
        "",
        "1e3",
        "--",
        "9999999999999999999999",
    ] {
        check(&originals, &with_required(&["--port", port]));
        if port != "--" {
            check(&originals, &with_required(&[&format!("--port={port}")]));
        }
    }
}

/// Where we refuse (status 2, argparse's wording) what the original's parser
/// accepts with a value no original code can use: `--opt=--` becomes an empty
/// list (argparse drops the `--`). Ints of any size and words that are not
/// UTF-8 are taken and run as the original runs them
/// (tests/tests/it/update_runner_hostile.rs).
#[test]
fn known_deviations_refuse_unusable_values() {
    let originals = agents_tests::require_originals!();
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["--port=--"],
            "\"port\": \"[]\"",
            "argument --port: expected one argument",
        ),
        (
            &["--bind=--"],
            "\"bind\": \"[]\"",
            "argument --bind: expected one argument",
        ),
        (
            &["--track=--"],
            "\"track\": \"[]\"",
            "argument --track: expected one argument",
        ),
    ];
    for (extra, original_value, our_error) in cases {
        let args = with_required(extra);
        let original = cli_support::oracle(&originals, ORIGINAL, PROGRAM, &args);
        assert_eq!(original.status.code(), Some(1), "{extra:?}");
        assert!(
            text(&original.stdout).contains(original_value),
            "{}",
            text(&original.stdout)
        );
        let ours = run(PROGRAM, &args);
        assert_eq!(ours.status.code(), Some(2), "{extra:?}");
        assert!(
            text(&ours.stderr).ends_with(&format!("update-runner: error: {our_error}\n")),
            "{}",
            text(&ours.stderr)
        );
    }
}

#[test]
fn values_that_start_with_a_dash() {
    let originals = agents_tests::require_originals!();
    for extra in [
        &["--bind", "-1"][..],
        &["--bind", "-.5"],
        &["--bind", "-1e5"],
        &["--bind", "-x y"],
        &["--bind", "-x"],
        &["--bind", "-"],
        &["--bind", "--"],
        &["--bind", "--", "x"],
        &["--bind", "--port"],
        &["--bind=--port"],
        &["--port", "-0_7"],
    ] {
        check(&originals, &with_required(extra));
    }
}

#[test]
fn refusals_are_usage_errors() {
    let originals = agents_tests::require_originals!();
    check(&originals, &[]);
    check(&originals, &["--status-file", "s"].map(String::from));
    for extra in [
        &["--track", "nightly"][..],
        &["--track", "Stable"],
        &["--track="],
        &["--bogus"],
        &["--bogus", "value"],
        &["-x"],
        &["positional"],
        &["--npm-descriptor=yes"],
        &["--npm-descriptor="],
        &["--bind"],
        &["--update-id"],
        &["--port", "x", "--bogus"],
        &["--bogus", "--port", "x"],
        &["--", "--update-id", "x"],
    ] {
        check(&originals, &with_required(extra));
    }
}

#[test]
fn repetition_keeps_the_last_value() {
    let originals = agents_tests::require_originals!();
    check(
        &originals,
        &with_required(&["--update-id", "first", "--update-id", "last"]),
    );
    check(
        &originals,
        &with_required(&["--npm-descriptor", "--npm-descriptor"]),
    );
    check(
        &originals,
        &with_required(&["--track", "beta", "--track", "stable", "--track=beta"]),
    );
    check(
        &originals,
        &with_required(&["--track", "nightly", "--track", "beta"]),
    );
}

#[test]
fn help_exits_zero_wherever_it_comes_first() {
    let originals = agents_tests::require_originals!();
    for args in [
        &["-h"][..],
        &["--help"],
        &["--he"],
        &["-hh"],
        &["--help", "--bogus"],
        &["--track", "beta", "-h", "--port", "x"],
        &["-hx"],
        &["-h=x"],
        &["-h="],
        &["--help=x"],
        &["--help="],
        &["--port", "x", "--help"],
        &["--bogus", "--help"],
    ] {
        check(
            &originals,
            &args.iter().map(|word| word.to_string()).collect::<Vec<_>>(),
        );
    }
}

#[test]
fn help_lists_every_option() {
    let output = run(PROGRAM, &["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let page = text(&output.stdout);
    for word in REQUIRED.iter().filter(|word| word.starts_with("--")) {
        assert!(
            page.contains(&format!("\n  {word} ")),
            "{word} missing:\n{page}"
        );
    }
    assert!(page.contains("--track {beta,stable}"), "{page}");
}

#[test]
fn argv0_names_the_program_as_argparse_does() {
    // A migrated release's launcher keeps argv[0] the script's path, and
    // argparse names the program by its base name: `usage: update_runner.py`.
    let originals = agents_tests::require_originals!();
    for (argv0, prog) in [
        ("update_runner.py", "update_runner.py"),
        (
            "/opt/agents/releases/1.0.0/update_runner.py",
            "update_runner.py",
        ),
        (
            "/opt/agents/releases/1.0.0/update-runner-linux-x86_64",
            "update-runner-linux-x86_64",
        ),
    ] {
        for args in [
            with_required(&["--track", "nightly"]),
            vec![],
            vec!["--help".to_string()],
        ] {
            let ours = run_as(PROGRAM, argv0, &args);
            let original = oracle(&originals, ORIGINAL, prog, &args);
            // A help page is compared up to its description (see
            // docs/design/deviations.md): the usage block argparse builds from the name.
            let usage = |page: &[u8]| {
                text(page)
                    .split("\n\n")
                    .next()
                    .unwrap_or_default()
                    .to_string()
            };
            assert_eq!(
                ours.status.code(),
                original.status.code(),
                "{argv0} {args:?}"
            );
            assert_eq!(
                usage(&ours.stdout),
                usage(&original.stdout),
                "{argv0} {args:?}"
            );
            assert_eq!(
                text(&ours.stderr),
                text(&original.stderr),
                "{argv0} {args:?}"
            );
        }
    }
    // Parsing itself never depends on the name.
    for args in [with_required(&[]), with_required(&["--recover-only"])] {
        let plain = run(PROGRAM, &args);
        let renamed = run_as(PROGRAM, "update_runner.py", &args);
        assert_eq!(plain.status.code(), renamed.status.code(), "{args:?}");
        assert_eq!(plain.stdout, renamed.stdout, "{args:?}");
        assert_eq!(plain.stderr, renamed.stderr, "{args:?}");
    }
}

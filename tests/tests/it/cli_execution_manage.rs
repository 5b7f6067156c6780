//! execution-manage's command line against `execution_manage.py`'s own
//! argparse parser, and `inspect` against real pending journals.

use crate::cli_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use agents_common::ExecutionLayout;
use agents_tests::Originals;
use agents_tests::TempDir;
use cli_support::{assert_same_as_original, run, text};
use execution_manage::ExecutionTransaction;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

const PROGRAM: &str = "execution-manage";
const ORIGINAL: &str = "execution_manage";

fn check(originals: &Originals, args: &[&str]) {
    assert_same_as_original(originals, PROGRAM, ORIGINAL, args);
}

#[test]
fn apply_and_recover_in_both_forms() {
    let originals = agents_tests::require_originals!();
    for scope in ["migration", "gateway", "worker"] {
        check(
            &originals,
            &["apply", "--layout", "/l.json", "--scope", scope],
        );
        check(
            &originals,
            &["apply", &format!("--scope={scope}"), "--layout=/l.json"],
        );
    }
    check(&originals, &["apply", "--l", "", "--s", "worker"]);
    check(
        &originals,
        &[
            "apply", "--layout", "/a", "--layout", "/b", "--scope", "worker",
        ],
    );
    check(&originals, &["recover", "--root", "/i"]);
    check(&originals, &["recover", "--root="]);
    check(&originals, &["recover", "--r", "//i//"]);
}

#[test]
fn refusals_are_usage_errors() {
    let originals = agents_tests::require_originals!();
    for args in [
        &[][..],
        &["bogus"],
        &["Apply"],
        &["--root", "/i"],
        &["--bogus", "inspect", "--root", "/i"],
        &["inspect"],
        &["inspect", "--root"],
        &["inspect", "--root", "/i", "--bogus"],
        &["inspect", "--root", "/i", "extra"],
        &["inspect", "--ro", "/i", "--", "x"],
        &["inspect", "--", "--root", "/i"],
        &["--", "inspect", "--root", "/i"],
        &["apply", "--layout", "/l"],
        &["apply", "--scope", "worker"],
        &["apply", "--layout", "/l", "--scope", "w"],
        &["apply", "--layout", "/l", "--scope", "all"],
        &["apply", "--layout", "/l", "--scope=", "--bogus"],
        &["recover", "--root", "/i", "--layout", "/l"],
        &["apply", "inspect"],
        &["inspect", "-hx"],
    ] {
        check(&originals, args);
    }
}

#[test]
fn help_of_each_parser_exits_zero() {
    let originals = agents_tests::require_originals!();
    for args in [
        &["-h"][..],
        &["--help", "bogus"],
        &["--h"],
        &["apply", "-h"],
        &["apply", "--scope", "worker", "--he"],
        &["recover", "--help"],
        &["inspect", "-h", "--bogus"],
    ] {
        check(&originals, args);
    }
}

/// `doctor` is recognised only as the first word, before the original's parser
/// runs: every other command line, including the original's usage errors and
/// help that mention or resemble it, stays byte for byte the original's.
#[test]
fn doctor_leaves_the_original_parser_untouched() {
    let originals = agents_tests::require_originals!();
    for args in [
        &[][..],
        &["-h"],
        &["--help", "doctor"],
        &["doctors"],
        &["Doctor", "--root", "/i"],
        &["doc", "--root", "/i"],
        &["--", "doctor", "--root", "/i"],
        &["inspect", "doctor"],
        &["inspect", "--root", "/i", "doctor"],
        &["--root", "/i", "doctor"],
        &["apply", "--layout", "/l", "--scope", "doctor"],
    ] {
        check(&originals, args);
    }
    // The original's own words for one of them, spelled out: the choices still
    // list only the original's three subcommands.
    let output = run(PROGRAM, &["doctors"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        "usage: execution-manage [-h] {apply,recover,inspect} ...\n\
         execution-manage: error: argument command: invalid choice: 'doctors' (choose from \
         'apply', 'recover', 'inspect')\n"
    );
}

/// doctor's own parser: its usage errors exit 2 with its own usage line,
/// its help exits 0, and neither runs anything.
#[test]
fn doctor_has_its_own_usage_and_help() {
    let usage = "usage: execution-manage doctor [-h] --root ROOT [--state-dir STATE_DIR]\n\
                 \x20                              [--concern {install_lock,activation_journal,execution_transaction,uninstall_intent,update_preparations,update_status,services,layout}]\n\
                 \x20                              [--json]\n";
    for (args, message) in [
        (
            &["doctor"][..],
            "the following arguments are required: --root",
        ),
        (
            &["doctor", "--root", "/i", "--bogus"],
            "unrecognized arguments: --bogus",
        ),
        (
            &["doctor", "--root"],
            "argument --root: expected one argument",
        ),
        (
            &["doctor", "--root", "/i", "--json=yes"],
            "argument --json: ignored explicit argument 'yes'",
        ),
        (
            &["doctor", "--root", "/i", "--concern", "lock"],
            "argument --concern: invalid choice: 'lock' (choose from 'install_lock', \
             'activation_journal', 'execution_transaction', 'uninstall_intent', \
             'update_preparations', 'update_status', 'services', 'layout')",
        ),
    ] {
        let output = run(PROGRAM, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(
            text(&output.stderr),
            format!("{usage}execution-manage doctor: error: {message}\n"),
            "{args:?}"
        );
        assert!(output.stdout.is_empty());
    }
    for args in [&["doctor", "-h"][..], &["doctor", "--root", "/i", "--he"]] {
        let output = run(PROGRAM, args);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        assert!(text(&output.stdout).starts_with(usage), "{args:?}");
        assert!(output.stderr.is_empty());
    }
}

/// An install tree with one complete release, ready for a migration.
struct Install {
    base: TempDir,
}

fn write(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

impl Install {
    fn new() -> Install {
        let base = TempDir::new("cli-manage");
        for root in ["install", "config", "state", "home"] {
            agents_tests::make_dirs(&base.path().join(root), 0o755);
        }
        let release = base.path().join("install/releases/1.0.0");
        agents_tests::make_dirs(&release.join(".venv/bin"), 0o755);
        agents_tests::make_dirs(&base.path().join("install/releases"), 0o755);
        write(&release.join("VERSION"), b"1.0.0\n", 0o644);
        write(&release.join("execution_service.py"), b"# service\n", 0o644);
        write(
            &release.join(".venv/bin/python"),
            b"#!/bin/sh\nexit 0\n",
            0o755,
        );
        Install { base }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.base.path().join(relative)
    }

    fn root(&self) -> PathBuf {
        self.path("install")
    }

    fn layout(&self) -> ExecutionLayout {
        let text = |relative: &str| self.path(relative).to_str().unwrap().to_string();
        let value = Json::Object(json_object! {
            "install_root" => text("install"),
            "config_root" => text("config"),
            "state_root" => text("state"),
            "home" => text("home"),
            "platform" => "Linux",
            "worker_release" => text("install/releases/1.0.0"),
            "gateway_release" => text("install/releases/1.0.0"),
            "bind" => "127.0.0.1",
            "port" => 7850_i64,
            "environment" => JsonObject::new(),
        });
        ExecutionLayout::from_dict(&value).expect("a valid layout")
    }

    fn stage(&self) {
        let absent = json_object! {"state" => "absent", "enabled" => false};
        let services = Json::Object(json_object! {
            "worker" => absent.clone(),
            "gateway" => absent,
        });
        ExecutionTransaction::stage(&self.layout(), "migration", &services, None).unwrap();
    }

    fn journal_path(&self) -> PathBuf {
        self.root().join(".execution-transaction/manifest.json")
    }
}

/// What `execution_manage.main(["inspect", ...])` prints for this journal,
/// computed by Python itself: its json.dumps and uuid.uuid5.
fn python_inspect_line(journal: &Path) -> String {
    let script = r#"
import json, sys, uuid
journal = json.load(open(sys.argv[1], "rb"))
print(json.dumps({"id": journal["id"], "scope": journal["scope"], "phase": journal["phase"],
    "operation_id": str(uuid.uuid5(uuid.NAMESPACE_URL, "agentsdock-execution:" + journal["id"]))},
    sort_keys=True))
"#;
    let output = Command::new("python3")
        .args(["-B", "-c", script])
        .arg(journal)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn inspect_prints_the_pending_journal_like_python() {
    let install = Install::new();
    install.stage();
    let before = fs::read(install.journal_path()).unwrap();
    let root = install.root();
    for args in [
        vec![
            "inspect".to_string(),
            "--root".to_string(),
            root.display().to_string(),
        ],
        vec!["inspect".to_string(), format!("--ro={}/", root.display())],
    ] {
        let output = run(PROGRAM, &args);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert_eq!(
            text(&output.stdout),
            python_inspect_line(&install.journal_path())
        );
        assert!(text(&output.stdout).contains("\"phase\": \"prepared\""));
        assert!(output.stderr.is_empty());
    }
    assert_eq!(
        fs::read(install.journal_path()).unwrap(),
        before,
        "inspect only reads"
    );

    ExecutionTransaction::publish(&root).unwrap();
    let output = run(PROGRAM, &["inspect", "--root", root.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        python_inspect_line(&install.journal_path())
    );
    assert!(text(&output.stdout).contains("\"phase\": \"published\""));
}

#[test]
fn inspect_refusals_print_the_python_exception_line() {
    let install = Install::new();
    let root = install.root();
    let journal_dir = root.join(".execution-transaction");
    let missing = run(PROGRAM, &["inspect", "--root", root.to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}'\n",
            journal_dir.display()
        )
    );
    assert!(missing.stdout.is_empty());

    // `type=Path` turns "" into "."; _path refuses relative paths.
    for relative in ["", "relative/root"] {
        let output = run(PROGRAM, &["inspect", "--root", relative]);
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(
            text(&output.stderr),
            "ValueError: execution paths must be absolute without traversal\n"
        );
    }

    install.stage();
    let journal = install.journal_path();
    let mut tampered = fs::read_to_string(&journal).unwrap();
    tampered = tampered.replace("\"prepared\"", "\"unknown-phase\"");
    write(&journal, tampered.as_bytes(), 0o600);
    let output = run(PROGRAM, &["inspect", "--root", root.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stderr),
        "ValueError: invalid execution transaction state\n"
    );
    assert!(output.stdout.is_empty());
    assert_eq!(
        fs::read_to_string(&journal).unwrap(),
        tampered,
        "a refusal changes nothing"
    );
}

#[test]
fn a_lone_separator_leaves_the_command_missing_as_in_argparse() {
    let originals = agents_tests::require_originals!();
    for args in [["--"].as_slice(), &["--", "--"], &["--", "inspect"]] {
        check(&originals, args);
    }
}

#[test]
fn an_option_given_the_separator_as_its_value_is_a_usage_error() {
    // As execution-activation's: a documented deviation.
    for args in [["inspect", "--root=--"], ["recover", "--root=--"]] {
        let output = cli_support::run(PROGRAM, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            cli_support::text(&output.stderr)
                .ends_with("error: argument --root: expected one argument\n"),
            "{args:?}"
        );
    }
}

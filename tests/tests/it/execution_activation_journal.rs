//! Black-box tests of the `execution-activation` operations that need no
//! service manager: `detect`, `candidate-api-contract`, `previous-worker`
//! and `durability`, plus the outer-journal and install-lock admission every
//! journal-owned operation performs. Journals are written in the documented
//! format by the stand-in journal writer shared with the common crate.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

use agents_tests::binary_path;
use agents_tests::journal_writer::{Begin, Install};
use agents_tests::{make_dir, set_mode, write_file};

/// Run the helper with `args` as a direct child of this test process.
fn helper(args: &[String]) -> Output {
    Command::new(binary_path("execution-activation"))
        .args(args)
        .output()
        .expect("run execution-activation")
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

/// Exit 0 with exactly `stdout` and nothing on stderr.
#[track_caller]
fn assert_prints(output: &Output, stdout: &str) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(0), stdout, ""),
    );
}

/// Exit 1, nothing on stdout, and exactly one stderr line.
#[track_caller]
fn assert_fails(output: &Output, line: &str) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(1), "", format!("{line}\n").as_str()),
    );
}

fn hold_lock(install: &Install, pid: u32) {
    install.hold_lock(pid);
}

/// An update of an installed split 1.0.0 to 1.1.0, held by this process.
fn update(tag: &str) -> Install {
    let install = Install::new(tag);
    install.begin_update();
    hold_lock(&install, std::process::id());
    install
}

/// A fresh split install of 1.1.0, held by this process.
fn fresh(tag: &str) -> Install {
    let install = Install::new(tag);
    install.write_env("AGENTS_SERVER_PORT=7850\n");
    let staging = install.staging("1.1.0");
    install.begin(&Begin::split(&staging, "1.1.0"));
    hold_lock(&install, std::process::id());
    install
}

fn operation(install: &Install, name: &str, version: &str) -> Vec<String> {
    let mut args = vec![name.to_string()];
    args.extend(install.layout_args(version));
    args
}

fn detect(root: &Path) -> Output {
    helper(&words(&["detect", "--root", root.to_str().unwrap()]))
}

#[test]
fn detect_without_journal_follows_the_installed_layout() {
    let install = Install::new("detect-layout");
    assert_prints(&detect(&install.root()), "legacy\n");
    install.release("1.0.0");
    install.install_split("1.0.0");
    assert_prints(&detect(&install.root()), "split\n");
    // A layout manifest that no longer matches its runtime is refused.
    write_file(
        &install.release_dir("1.0.0").join("VERSION"),
        b"1.0.1\n",
        0o644,
    );
    assert_fails(
        &detect(&install.root()),
        "ValueError: installed execution layout no longer matches its runtime",
    );
}

#[test]
fn detect_follows_a_pending_journal_before_the_layout() {
    // Format 3 without any published layout: recovery must stay split.
    let install = fresh("detect-split");
    assert!(!install.root().join("execution-layout.json").exists());
    assert_prints(&detect(&install.root()), "split\n");
    // The journal's own temporaries are cleaned as Python's reader does.
    let leftover = install
        .journal()
        .join(".manifest.json.aaaaaaaaaaaaaaaaaaaaaaaa.tmp");
    write_file(&leftover, b"{", 0o600);
    assert_prints(&detect(&install.root()), "split\n");
    assert!(!leftover.exists());

    // A journal whose `execution` is absent (format 2) is a legacy activation,
    // even with a split layout installed.
    let legacy = Install::new("detect-legacy");
    legacy.release("1.0.0");
    legacy.install_split("1.0.0");
    let staging = legacy.staging("1.1.0");
    legacy.begin(&Begin {
        execution: false,
        ..Begin::split(&staging, "1.1.0")
    });
    assert_prints(&detect(&legacy.root()), "legacy\n");
}

#[test]
fn detect_refusals() {
    let install = Install::new("detect-refusals");
    let generic = install.root().join(".execution-transaction");
    make_dir(&generic, 0o700);
    assert_fails(
        &detect(&install.root()),
        "RuntimeError: independent execution activation must be recovered first",
    );
    fs::remove_dir(&generic).unwrap();

    // A dangling symlink at the journal name is a journal, and unsafe.
    symlink(install.base.join("nowhere"), install.journal()).unwrap();
    assert_fails(
        &detect(&install.root()),
        "PermissionError: activation transaction directory is unsafe",
    );
    fs::remove_file(install.journal()).unwrap();

    // A damaged journal never reads as "no journal".
    let damaged = fresh("detect-damaged");
    damaged.write_manifest(b"{\"format\": 3}\n");
    assert_fails(
        &detect(&damaged.root()),
        "RuntimeError: activation transaction manifest is invalid",
    );

    // The root itself must be a symlink-free absolute path.
    let linked = install.base.join("linked-root");
    symlink(install.root(), &linked).unwrap();
    assert_fails(
        &detect(&linked),
        &format!(
            "ValueError: execution path contains a symlink: {}",
            linked.display()
        ),
    );
}

fn api_contract(candidate: &Path) -> Output {
    helper(&words(&[
        "candidate-api-contract",
        "--root",
        "/unused",
        "--candidate-source",
        candidate.to_str().unwrap(),
    ]))
}

#[test]
fn candidate_api_contract_reads_one_positive_literal() {
    let install = Install::new("contract");
    let candidate = install.staging("1.1.0");
    let source = candidate.join("agent_server.py");
    assert_prints(&api_contract(&candidate), "7\n");
    let refusal = "RuntimeError: candidate API contract is not one positive literal integer";
    for (text, expected) in [
        ("\"\"\"no contract\"\"\"\nVERSION = 1\n", None),
        ("API_CONTRACT_VERSION = 3\nAPI_CONTRACT_VERSION = 4\n", None),
        ("API_CONTRACT_VERSION = int('3')\n", None),
        ("API_CONTRACT_VERSION = 0\n", None),
        ("API_CONTRACT_VERSION = '3'\n", None),
        // A computed reassignment is not a literal and is not counted.
        ("API_CONTRACT_VERSION = 0x0c\nif DEBUG:\n    API_CONTRACT_VERSION = 99\nAPI_CONTRACT_VERSION = compute()\n", Some("12\n")),
    ] {
        write_file(&source, text.as_bytes(), 0o644);
        match expected {
            Some(stdout) => assert_prints(&api_contract(&candidate), stdout),
            None => assert_fails(&api_contract(&candidate), refusal),
        }
    }
    write_file(&source, b"API_CONTRACT_VERSION = 3\n", 0o666);
    assert_fails(
        &api_contract(&candidate),
        "PermissionError: activation configuration file is unsafe",
    );
}

#[test]
fn previous_worker_prints_the_retained_old_generation() {
    let install = update("previous");
    assert_prints(
        &helper(&operation(&install, "previous-worker", "1.1.0")),
        &format!("{}\n", install.release_dir("1.0.0").display()),
    );
    let fresh = fresh("previous-fresh");
    assert_prints(&helper(&operation(&fresh, "previous-worker", "1.1.0")), "");
    // The pinned old worker must still be the same directory.
    let old = install.release_dir("1.0.0");
    write_file(&old.join("VERSION"), b"1.0.9\n", 0o644);
    assert_fails(
        &helper(&operation(&install, "previous-worker", "1.1.0")),
        "RuntimeError: activation rollback release identity changed",
    );
}

#[test]
fn journal_operations_require_the_outer_transaction_and_lock() {
    let install = update("admission");
    let args = operation(&install, "previous-worker", "1.1.0");
    // Through a subshell, as install.sh's run_without_server_secrets does.
    let nested = Command::new("/bin/sh")
        .arg("-c")
        .arg("\"$0\" \"$@\"")
        .arg(binary_path("execution-activation"))
        .args(&args)
        .output()
        .unwrap();
    assert_prints(
        &nested,
        &format!("{}\n", install.release_dir("1.0.0").display()),
    );

    assert_fails(
        &helper(&operation(&install, "previous-worker", "1.2.0")),
        "RuntimeError: split service invocation differs from the outer transaction",
    );
    let mut other = Command::new("/bin/sleep").arg("30").spawn().unwrap();
    hold_lock(&install, other.id());
    assert_fails(
        &helper(&args),
        "RuntimeError: split operation is not a child of the owning installer",
    );
    other.kill().unwrap();
    other.wait().unwrap();
    write_file(&install.root().join(".install-lock/pid"), b"0042\n", 0o600);
    assert_fails(
        &helper(&args),
        "RuntimeError: installer lock identity is invalid",
    );
    set_mode(&install.root().join(".install-lock"), 0o755);
    assert_fails(
        &helper(&args),
        &format!(
            "PermissionError: execution directory permissions are unsafe: {}",
            install.root().join(".install-lock").display()
        ),
    );
    fs::remove_dir_all(install.root().join(".install-lock")).unwrap();
    assert_fails(
        &helper(&args),
        &format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
            install.root().join(".install-lock").display()
        ),
    );

    // A legacy-format journal never authorizes split changes.
    let legacy = Install::new("admission-legacy");
    let staging = legacy.staging("1.1.0");
    legacy.write_env("AGENTS_SERVER_PORT=7850\n");
    legacy.begin(&Begin {
        execution: false,
        ..Begin::split(&staging, "1.1.0")
    });
    hold_lock(&legacy, std::process::id());
    assert_fails(
        &helper(&operation(&legacy, "previous-worker", "1.1.0")),
        "RuntimeError: outer transaction does not authorize split service changes",
    );
}

#[test]
fn durability_flushes_only_before_quiescing() {
    let install = update("durability");
    let before = fs::read(install.manifest_path()).unwrap();
    assert_prints(&helper(&operation(&install, "durability", "1.1.0")), "");
    assert_eq!(fs::read(install.manifest_path()).unwrap(), before);
    install.record("quiescing");
    assert_fails(
        &helper(&operation(&install, "durability", "1.1.0")),
        "RuntimeError: runtime durability must precede native quiescing",
    );
}

//! The split (gateway + worker) path of `uninstall`: the refusals that come
//! before any prompt or change, the purge guard and the confirmation, in
//! both command-line forms (the script's environment hand-over and the
//! helper's own `--root ...` options).

use crate::uninstall_support;
use agents_common::Platform;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;

use agents_tests::{free_port, Installation};
use uninstall_support::*;

/// A complete split installation on disk (no services running: everything
/// here is refused before the services are looked at).
struct SplitFiles {
    installation: Installation,
}

impl SplitFiles {
    fn new() -> SplitFiles {
        SplitFiles::on(Platform::Linux)
    }

    /// The installation as `platform` has it (launchd plists under
    /// `~/Library/LaunchAgents` on Darwin).
    fn on(platform: Platform) -> SplitFiles {
        let installation = Installation::in_temp();
        let worker = installation.add_release("1.0.0");
        let gateway = installation.add_release("1.1.0");
        let mut layout = installation.layout(&worker, &gateway, free_port());
        layout.platform = platform.into();
        installation.install_split(&layout);
        for root in [&installation.install_root, &installation.config_root] {
            fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
        }
        agents_tests::write_file_making_parents(
            &installation.state_root.join("sessions.json"),
            b"{\"sessions\": []}\n",
            0o600,
        );
        SplitFiles { installation }
    }

    /// The script form's environment: HOME and the three root variables.
    fn script_env(&self) -> Vec<(String, OsString)> {
        let i = &self.installation;
        clean_env(&[
            ("HOME", i.home.clone().into_os_string()),
            (
                "AGENTS_SERVER_INSTALL_DIR",
                i.install_root.clone().into_os_string(),
            ),
            (
                "AGENTS_SERVER_CONFIG_DIR",
                i.config_root.clone().into_os_string(),
            ),
            (
                "AGENTSDOCK_STATE_DIR",
                i.state_root.clone().into_os_string(),
            ),
        ])
    }

    /// The helper form's path options.
    fn helper_args(&self) -> Vec<String> {
        let i = &self.installation;
        let text = |path: &PathBuf| path.to_str().unwrap().to_string();
        vec![
            "--root".into(),
            text(&i.install_root),
            "--config-root".into(),
            text(&i.config_root),
            "--state-root".into(),
            text(&i.state_root),
            "--home".into(),
            text(&i.home),
        ]
    }

    fn tree(&self) -> std::collections::BTreeMap<PathBuf, Entry> {
        let base = self.installation.install_root.parent().unwrap();
        snapshot(base)
    }
}

fn refusal(message: &str) -> String {
    format!("Cannot uninstall the separate gateway/execution layout: {message}\n")
}

/// Runs the port in `form` with `extra` arguments and checks it refused with
/// `message`, printing nothing on stdout (prompts aside) and changing nothing.
fn assert_refused(
    files: &SplitFiles,
    helper_form: bool,
    extra: &[&str],
    input: Input,
    message: &str,
) {
    let before = files.tree();
    let mut args: Vec<String> = if helper_form {
        files.helper_args()
    } else {
        Vec::new()
    };
    args.extend(extra.iter().map(|arg| arg.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = if helper_form {
        clean_env(&[("HOME", files.installation.home.clone().into_os_string())])
    } else {
        files.script_env()
    };
    let outcome = run(Implementation::Port, &env, &args, input);
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert!(
        outcome.stderr.ends_with(&refusal(message)),
        "{message:?} expected: {outcome:?}"
    );
    assert_eq!(differences(&before, &files.tree()), Vec::<String>::new());
}

#[test]
fn without_a_terminal_the_uninstall_is_not_confirmed() {
    let files = SplitFiles::new();
    for helper_form in [false, true] {
        assert_refused(
            &files,
            helper_form,
            &[],
            Input::Null,
            "Uninstall was not confirmed; nothing was changed",
        );
        assert_refused(
            &files,
            helper_form,
            &["--yes", "--purge-state"],
            Input::Null,
            "Refusing to purge state without an interactive terminal; --yes never bypasses the \
             state guard",
        );
    }
}

#[test]
fn the_prompts_need_the_exact_path_and_a_yes() {
    let files = SplitFiles::new();
    let state = files.installation.state_root.to_str().unwrap().to_string();
    for helper_form in [false, true] {
        let typed = format!("{state}/\n");
        assert_refused(
            &files,
            helper_form,
            &["--purge-state", "--yes"],
            Input::Terminal(typed.into_bytes()),
            "State path did not match; nothing was changed",
        );
        // Python's input() strips only the newline: surrounding blanks count.
        let typed = format!(" {state}\n");
        assert_refused(
            &files,
            helper_form,
            &["--purge-state", "--yes"],
            Input::Terminal(typed.into_bytes()),
            "State path did not match; nothing was changed",
        );
        for answer in ["n\n", "\n", "yess\n", " y\n"] {
            assert_refused(
                &files,
                helper_form,
                &[],
                Input::Terminal(answer.as_bytes().to_vec()),
                "Uninstall was not confirmed; nothing was changed",
            );
        }
        // The typed path is asked first, then the confirmation.
        let typed = format!("{state}\nno\n");
        assert_refused(
            &files,
            helper_form,
            &["--purge-state"],
            Input::Terminal(typed.into_bytes()),
            "Uninstall was not confirmed; nothing was changed",
        );
    }
}

#[test]
fn provenance_is_checked_before_any_prompt() {
    let files = SplitFiles::new();
    let root = files.installation.install_root.clone();
    for journal in [".activation-transaction", ".execution-transaction"] {
        symlink("missing", root.join(journal)).unwrap();
        for helper_form in [false, true] {
            // --yes and a terminal: only provenance can refuse here.
            assert_refused(
                &files,
                helper_form,
                &["--yes"],
                Input::Null,
                "activation already owns handoff recovery",
            );
        }
        fs::remove_file(root.join(journal)).unwrap();
    }
    // The installed manifest no longer matches its releases.
    let version = files.installation.release_dir("1.0.0").join("VERSION");
    fs::write(&version, b"1.0.1\n").unwrap();
    for helper_form in [false, true] {
        assert_refused(
            &files,
            helper_form,
            &["--yes"],
            Input::Null,
            "installed execution layout changed",
        );
    }
}

#[test]
fn a_launchd_layout_is_refused_on_this_host_before_any_change() {
    // execution_uninstall constructs NativeServices(layout) under the lock,
    // after provenance and the recovery owners; on a Linux host a layout
    // installed for macOS is refused there, in both forms.
    let files = SplitFiles::on(Platform::Darwin);
    let plists = files.installation.home.join("Library/LaunchAgents");
    for name in [
        "com.agentsdock.server.plist",
        "com.agentsdock.gateway.plist",
    ] {
        let plist = std::fs::read_to_string(plists.join(name)).unwrap();
        assert!(plist.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"));
    }
    for helper_form in [false, true] {
        assert_refused(
            &files,
            helper_form,
            &["--yes"],
            Input::Null,
            "native execution platform does not match this host",
        );
    }
    assert!(!files
        .installation
        .install_root
        .join(".install-lock")
        .exists());
}

#[test]
fn the_helper_form_requires_all_four_paths() {
    let files = SplitFiles::new();
    let mut args = files.helper_args();
    args.truncate(6);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = run(Implementation::Port, &clean_env(&[]), &args, Input::Null);
    assert_eq!(outcome.code(), 2);
    assert!(
        outcome
            .stderr
            .ends_with("error: the following arguments are required: --home\n"),
        "{outcome:?}"
    );
}

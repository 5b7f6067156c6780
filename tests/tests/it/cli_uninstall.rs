//! uninstall's command line against `uninstall.sh` itself: the script cut
//! right after its option loop (so it can never remove anything) runs side
//! by side with the binary in the same private HOME and environment, and
//! both must end the same way — root refusals and usage errors with the same
//! bytes and status 2, help with the same page and status 0, or acceptance
//! (the binary then goes on to the uninstall, which in this empty private
//! HOME without a terminal or a service manager refuses and changes nothing).

use crate::cli_support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agents_tests::Originals;
use agents_tests::{binary_path, TempDir};
use cli_support::text;

const PROGRAM: &str = "uninstall";

/// A private HOME plus the script truncated after its option loop.
struct Scene {
    dir: TempDir,
    script: PathBuf,
}

impl Scene {
    fn new(originals: &Originals) -> Scene {
        let dir = TempDir::new("cli-uninstall");
        let home = dir.path().join("home");
        fs::create_dir(&home).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755)).unwrap();
        let source = fs::read_to_string(originals.file("uninstall.sh")).unwrap();
        let mut cut = String::new();
        let mut in_loop = false;
        for line in source.lines() {
            cut.push_str(line);
            cut.push('\n');
            in_loop |= line.starts_with("while (($#)); do");
            if in_loop && line == "done" {
                break;
            }
        }
        assert!(in_loop, "uninstall.sh has no option loop");
        cut.push_str("echo \"PARSED $ASSUME_YES $PURGE_STATE\"\nexit 1\n");
        let script = dir.path().join("uninstall-options.sh");
        fs::write(&script, cut).unwrap();
        Scene { dir, script }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn command(&self, program: &Path, env: &[(&str, Option<&OsStr>)]) -> Command {
        let mut command = Command::new(program);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        command
            .env("HOME", self.home())
            .current_dir(self.dir.path());
        for (name, value) in env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
    }

    fn ours(&self, args: &[&str], env: &[(&str, Option<&OsStr>)]) -> Output {
        self.command(&binary_path(PROGRAM), env)
            .args(args)
            .output()
            .unwrap()
    }

    fn script(&self, args: &[&str], env: &[(&str, Option<&OsStr>)]) -> Output {
        let mut command = self.command(Path::new("bash"), env);
        command.arg(&self.script).args(args).output().unwrap()
    }

    /// Both end the same way; returns our output.
    #[track_caller]
    fn check(&self, args: &[&str], env: &[(&str, Option<&OsStr>)]) -> Output {
        let ours = self.ours(args, env);
        let script = self.script(args, env);
        let context = format!(
            "{args:?} {env:?}\n--- ours {:?}:\n{}{}\n--- script {:?}:\n{}{}",
            ours.status.code(),
            text(&ours.stdout),
            text(&ours.stderr),
            script.status.code(),
            text(&script.stdout),
            text(&script.stderr)
        );
        assert_eq!(ours.status.code(), script.status.code(), "{context}");
        if text(&script.stdout).starts_with("PARSED ") {
            // Accepted: what follows is the uninstall itself (here it refuses
            // without a terminal or a service manager), never a usage error.
            let all = format!("{}{}", text(&ours.stdout), text(&ours.stderr));
            assert!(
                !all.contains("Usage:") && !all.contains("Unknown option"),
                "{context}"
            );
            assert!(!all.contains("not implemented"), "{context}");
        } else {
            assert_eq!(ours.stdout, script.stdout, "{context}");
            assert_eq!(ours.stderr, script.stderr, "{context}");
        }
        ours
    }
}

fn os(text: &str) -> Option<&OsStr> {
    Some(OsStr::new(text))
}

#[test]
fn options_are_exact_words() {
    let originals = agents_tests::require_originals!();
    let scene = Scene::new(&originals);
    for args in [
        &[][..],
        &["--yes"],
        &["--purge-state"],
        &["--yes", "--purge-state", "--yes"],
        &["-h"],
        &["--help"],
        &["--yes", "--help", "--bogus"],
        &["--bogus", "--help"],
        &["--ye"],
        &["--YES"],
        &["-y"],
        &["--yes=1"],
        &["--help=x"],
        &["-hh"],
        &[""],
        &["--"],
        &["--purge-state", "extra"],
    ] {
        scene.check(args, &[]);
    }
}

#[test]
fn help_names_the_normalised_state_root() {
    let originals = agents_tests::require_originals!();
    let scene = Scene::new(&originals);
    fs::create_dir(scene.path("real")).unwrap();
    symlink(scene.path("real"), scene.path("link")).unwrap();
    let via_link = scene.path("link/state/");
    let output = scene.check(
        &["--help"],
        &[("AGENTSDOCK_STATE_DIR", Some(via_link.as_os_str()))],
    );
    assert!(text(&output.stdout).contains(&format!(
        "under {}/state are preserved",
        scene.path("real").display()
    )));
    // The state root comes from the first non-empty of three variables.
    let second = scene.path("second");
    let third = scene.path("third");
    scene.check(
        &["--help"],
        &[
            ("AGENTSDOCK_STATE_DIR", os("")),
            ("AGENTS_SERVER_STATE_DIR", Some(second.as_os_str())),
        ],
    );
    scene.check(
        &["--help"],
        &[("ZENITHBOT_AGENT_DIR", Some(third.as_os_str()))],
    );
    scene.check(
        &["-h"],
        &[
            ("AGENTS_SERVER_INSTALL_DIR", os("")),
            ("AGENTS_SERVER_CONFIG_DIR", os("")),
        ],
    );
}

#[test]
fn unsafe_roots_are_refused_before_options() {
    let originals = agents_tests::require_originals!();
    let scene = Scene::new(&originals);
    let home = scene.home();
    let home_text = home.to_str().unwrap().to_string();
    fs::create_dir(scene.path("real")).unwrap();
    symlink(scene.path("real"), scene.path("linked-root")).unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("AGENTS_SERVER_INSTALL_DIR", "relative/install".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/tmp/x\ny".into()),
        ("AGENTS_SERVER_CONFIG_DIR", "/tmp/x\ry".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "//".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/srv//agents".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/srv/./agents".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/srv/../agents".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/tmp".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/usr/".into()),
        ("AGENTS_SERVER_CONFIG_DIR", home_text.clone()),
        ("AGENTS_SERVER_CONFIG_DIR", format!("{home_text}/.config")),
        ("AGENTSDOCK_STATE_DIR", format!("{home_text}/.local/share/")),
        (
            "AGENTSDOCK_STATE_DIR",
            format!("{home_text}/Library/LaunchAgents"),
        ),
        // The macOS system and per-user roots the script refuses on any host.
        ("AGENTS_SERVER_INSTALL_DIR", "/Applications".into()),
        ("AGENTS_SERVER_INSTALL_DIR", "/Library".into()),
        ("AGENTS_SERVER_CONFIG_DIR", "/System".into()),
        ("AGENTS_SERVER_CONFIG_DIR", "/Users".into()),
        ("AGENTSDOCK_STATE_DIR", "/Volumes/".into()),
        ("AGENTSDOCK_STATE_DIR", "/private".into()),
        ("AGENTS_SERVER_INSTALL_DIR", format!("{home_text}/Library")),
        (
            "AGENTSDOCK_STATE_DIR",
            scene.path("linked-root").to_str().unwrap().into(),
        ),
        (
            "AGENTS_SERVER_CONFIG_DIR",
            format!("{home_text}/.local/share/agents-server/config"),
        ),
        (
            "AGENTSDOCK_STATE_DIR",
            format!("{home_text}/.config/agents-server"),
        ),
        (
            "AGENTS_SERVER_INSTALL_DIR",
            format!("{home_text}/.agentsdock/install"),
        ),
        (
            "AGENTS_SERVER_INSTALL_DIR",
            format!("{home_text}/deep/not/yet/there/"),
        ),
        (
            "AGENTS_SERVER_INSTALL_DIR",
            format!("{home_text}/.local/share/agents-server-2"),
        ),
    ];
    for (name, value) in &cases {
        for args in [&["--help"][..], &["--bogus"], &[]] {
            scene.check(args, &[(name, os(value))]);
        }
    }
}

#[test]
fn home_must_resolve() {
    let originals = agents_tests::require_originals!();
    let scene = Scene::new(&originals);
    let missing = scene.path("no-such-home");
    for home in [os(""), Some(missing.as_os_str()), os("relative-home")] {
        scene.check(&["--help"], &[("HOME", home)]);
        let roots = [
            (
                "AGENTS_SERVER_INSTALL_DIR",
                Some(scene.path("i").into_os_string()),
            ),
            (
                "AGENTS_SERVER_CONFIG_DIR",
                Some(scene.path("c").into_os_string()),
            ),
            (
                "AGENTSDOCK_STATE_DIR",
                Some(scene.path("s").into_os_string()),
            ),
        ];
        let mut env: Vec<(&str, Option<&OsStr>)> = roots
            .iter()
            .map(|(name, value)| (*name, value.as_deref()))
            .collect();
        env.push(("HOME", home));
        scene.check(&["--help"], &env);
    }
    // Without HOME the script stops on `set -u` (status 1) before anything.
    let ours = scene.ours(&["--help"], &[("HOME", None)]);
    let script = scene.script(&["--help"], &[("HOME", None)]);
    assert_eq!(ours.status.code(), Some(1));
    assert_eq!(script.status.code(), Some(1));
    assert!(
        text(&script.stderr).ends_with("HOME: unbound variable\n"),
        "{}",
        text(&script.stderr)
    );
    assert_eq!(text(&ours.stderr), "uninstall: HOME: unbound variable\n");
}

/// `execution_uninstall.main` catches `OSError`, `ValueError` and
/// `RuntimeError` only: a layout whose `install_root` is a number is
/// `Path(7)`'s `TypeError`, which ends in a traceback (found by the
/// generative campaign, generated-1-6663).
#[test]
fn a_layout_path_that_is_a_number_is_pythons_type_error() {
    let install = split_install("uninstall-type-error");
    let manifest_path = install.root().join("execution-layout.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&manifest_path).unwrap()).unwrap();
    manifest["layout"]["install_root"] = serde_json::Value::from(7);
    fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    let before = tree_of(&install);
    let output = uninstall_yes(&install);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stderr),
        "TypeError: expected str, bytes or os.PathLike object, not int\n"
    );
    assert_eq!(tree_of(&install), before, "nothing changed");
}

/// uninstall.sh hands over to the split uninstall only for a manifest that
/// is a regular file (`-f` and not `-L`); with a FIFO in its place and an
/// intent that proves no interrupted removal, the legacy path refuses the
/// split installation (the generative campaign, generated-1-5398).
#[test]
fn a_fifo_in_the_manifests_place_is_not_a_split_layout() {
    let install = split_install("uninstall-fifo-layout");
    let manifest = install.root().join("execution-layout.json");
    fs::remove_file(&manifest).unwrap();
    agents_tests::make_fifo(&manifest);
    fs::write(install.root().join(".execution-uninstall.json"), b"{}\n").unwrap();
    let before = tree_of(&install);
    let output = uninstall_yes(&install);
    assert_ne!(output.status.code(), Some(0));
    assert!(
        text(&output.stderr).ends_with(
            "Use the execution-aware managed lifecycle; the pinned worker has not been changed.\n"
        ),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(tree_of(&install), before, "nothing changed");
}

/// `uninstall --yes` on the installation's roots, its home as `HOME`.
fn uninstall_yes(install: &agents_tests::journal_writer::Install) -> Output {
    Command::new(binary_path(PROGRAM))
        .arg("--yes")
        .env("HOME", install.home())
        .env("AGENTS_SERVER_INSTALL_DIR", install.root())
        .env("AGENTS_SERVER_CONFIG_DIR", install.config_root())
        .env("AGENTSDOCK_STATE_DIR", install.state_root())
        .output()
        .unwrap()
}

/// A finished split installation of 1.0.0, as the journal writer lays it out.
fn split_install(tag: &str) -> agents_tests::journal_writer::Install {
    let install = agents_tests::journal_writer::Install::new(tag);
    install.release("1.0.0");
    install.install_split("1.0.0");
    install
}

/// The roots' and the unit folder's entries, and the manifest's bytes where
/// it is a regular file: what a refused uninstall must leave as it was.
fn tree_of(install: &agents_tests::journal_writer::Install) -> Vec<String> {
    let mut tree = Vec::new();
    for folder in [
        install.root(),
        install.config_root(),
        install.state_root(),
        install.unit_dir(),
    ] {
        tree.push(format!(
            "{}: {:?}",
            folder.display(),
            agents_tests::entries(&folder)
        ));
    }
    let manifest = install.root().join("execution-layout.json");
    if fs::symlink_metadata(&manifest).is_ok_and(|info| info.is_file()) {
        tree.push(String::from_utf8_lossy(&fs::read(&manifest).unwrap()).into_owned());
    }
    tree
}

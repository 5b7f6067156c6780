//! The legacy (single-service) path of `uninstall`, run side by side with the
//! original `uninstall.sh` as the oracle: identical fresh trees, the same
//! environment, then the exit status, both output streams and the resulting
//! trees must be the same, and must be what the script promises.

use crate::uninstall_support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use agents_tests::Originals;
use uninstall_support::*;

/// One implementation's case after its run.
struct Ran {
    case: LegacyCase,
    before: BTreeMap<PathBuf, Entry>,
    outcome: Outcome,
}

impl Ran {
    /// Panics with the changes unless the home tree is as before the run.
    #[track_caller]
    fn assert_unchanged(&self) {
        let changes = differences(&self.before, &self.case.home_tree());
        assert!(changes.is_empty(), "files changed: {changes:?}");
    }

    /// Every file as before the run and the service still running, enabled.
    #[track_caller]
    fn assert_nothing_changed(&self) {
        self.assert_unchanged();
        assert_service_untouched(self);
    }

    /// A refusal with exit status `code` and exactly `stderr` that changed
    /// nothing.
    #[track_caller]
    fn assert_refused(&self, code: i32, stderr: &str) {
        assert_eq!(self.outcome.code(), code, "{:?}", self.outcome);
        assert_eq!(self.outcome.stderr, stderr);
        self.assert_nothing_changed();
    }
}

/// Both runs of a side-by-side comparison for the calling test, which
/// returns (skipped) where the sandbox or the originals are missing:
/// `both_runs!(options, args)`, with an optional [`Input`] (default none)
/// and [`Setup`].
macro_rules! both_runs {
    ($options:expr, $args:expr) => {
        both_runs!($options, $args, Input::Null)
    };
    ($options:expr, $args:expr, $input:expr) => {
        both_runs!($options, $args, $input, Setup::default())
    };
    ($options:expr, $args:expr, $input:expr, $setup:expr) => {
        match side_by_side_with(agents_tests::test_name!(), $options, $setup, $args, $input) {
            Some(runs) => runs,
            None => return,
        }
    };
}

/// Extra environment variables for a case.
type ExtraEnv<'a> = &'a dyn Fn(&LegacyCase) -> Vec<(String, OsString)>;

/// How a case is prepared and run, beyond the fixture options.
#[derive(Default, Clone, Copy)]
struct Setup<'a> {
    /// Changes the fresh case before the run (both cases alike).
    prepare: Option<&'a dyn Fn(&LegacyCase)>,
    /// Extra environment variables, computed per case.
    env: Option<ExtraEnv<'a>>,
}

/// Runs both implementations on identical fresh cases, each changed by
/// `setup` first, checks that their statuses, outputs and resulting trees
/// agree, and returns both.
fn side_by_side_with(
    test: &str,
    options: LegacyOptions,
    setup: Setup<'_>,
    args: &[&str],
    input: Input,
) -> Option<[Ran; 2]> {
    compare(test, |implementation| {
        let case = LegacyCase::start(test, options)?;
        if let Some(prepare) = setup.prepare {
            prepare(&case);
        }
        let before = case.home_tree();
        let mut env = case.env();
        if let Some(extra) = setup.env {
            env.extend(extra(&case));
        }
        let outcome = run(implementation, &env, args, input.clone());
        Some(Ran {
            case,
            before,
            outcome,
        })
    })
}

/// Runs `one` for the original and then the port and checks that they agree.
/// `None` when the test did not run (no sandbox, or no originals: skipped).
fn compare(test: &str, one: impl Fn(Implementation<'_>) -> Option<Ran>) -> Option<[Ran; 2]> {
    let originals = Originals::require(test)?;
    let original = one(Implementation::Original(&originals))?;
    let port = one(Implementation::Port)?;
    assert_eq!(
        original.outcome.normalized(original.case.sandbox.base()),
        port.outcome.normalized(port.case.sandbox.base()),
        "{test}: the port's status and output differ from the original's"
    );
    assert_eq!(original.before, port.before, "{test}: the fixtures differ");
    assert_eq!(
        original.case.home_tree(),
        port.case.home_tree(),
        "{test}: the port left a different tree than the original"
    );
    Some([original, port])
}

fn with_service() -> LegacyOptions {
    LegacyOptions {
        service: true,
        ..Default::default()
    }
}

/// The lines a successful run prints, up to the state notices.
fn removal_lines(roots: &LegacyRoots) -> Vec<String> {
    vec![
        "This will stop and remove the AgentsServer service, release runtime at".to_string(),
        format!(
            "{}, and configuration at {} (including the access token).",
            roots.install.display(),
            roots.config.display()
        ),
        "Stopping agents-server.service".to_string(),
        format!("Removing {}", roots.unit_file().display()),
        format!("Removing release runtime at {}", roots.install.display()),
        format!("Removing configuration at {}", roots.config.display()),
    ]
}

const PRESERVED_TAIL: &str =
    "Re-running ./install.sh will pick ordinary AgentsServer state back up. \
                              Pass --purge-state to also delete it.";
const TEAM_HUB_NOTICE: &str =
    "Preserved Team Hub state is not auto-reactivated in this beta; use a \
                               signed managed recovery or support-assisted restoration.";
const FINAL_LINES: [&str; 3] = [
    "AgentsServer service, release runtime, and configuration removed.",
    "Note: any persistent chat terminals (tmux sessions named zd_*) keep running",
    "independently and are not touched by this script. List them with: tmux ls",
];

fn assert_service_gone(ran: &Ran) {
    let unit = ran.case.sandbox.unit_state(LEGACY_UNIT);
    assert_eq!(
        (
            unit.load_state.as_str(),
            unit.active_state.as_str(),
            unit.main_pid
        ),
        ("not-found", "inactive", 0)
    );
    assert!(!agents_tests::process_alive(ran.case.service_pid.unwrap()));
    assert!(!ran.case.roots.unit_file().exists());
    let wants = ran
        .case
        .sandbox
        .unit_dir()
        .join("default.target.wants")
        .join(LEGACY_UNIT);
    assert!(
        std::fs::symlink_metadata(wants).is_err(),
        "the unit is disabled"
    );
}

fn assert_service_untouched(ran: &Ran) {
    let unit = ran.case.sandbox.unit_state(LEGACY_UNIT);
    assert_eq!(
        unit.main_pid,
        ran.case.service_pid.unwrap(),
        "still running"
    );
    assert_eq!(unit.unit_file_state, "enabled");
}

#[test]
fn yes_without_a_terminal_stops_the_service_and_keeps_state() {
    let runs = both_runs!(with_service(), &["--yes"]);
    for ran in &runs {
        let roots = &ran.case.roots;
        assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
        let mut expected = removal_lines(roots);
        expected.push(format!(
            "Preserved chat history, jobs, files, tokens, and secure-peer credentials at {}.",
            roots.state.display()
        ));
        expected.push(PRESERVED_TAIL.to_string());
        expected.extend(FINAL_LINES.map(String::from));
        assert_eq!(ran.outcome.stdout_lines(), expected);
        assert_eq!(ran.outcome.stderr, "");
        assert!(!roots.install.exists() && !roots.config.exists());
        // State is kept byte for byte.
        let state_before: Vec<_> = ran
            .before
            .iter()
            .filter(|(path, _)| path.starts_with(".agentsdock"))
            .collect();
        let after = ran.case.home_tree();
        let state_after: Vec<_> = after
            .iter()
            .filter(|(path, _)| path.starts_with(".agentsdock"))
            .collect();
        assert_eq!(state_before, state_after);
        assert_service_gone(ran);
    }
}

#[test]
fn team_hub_state_gets_its_notice() {
    let options = LegacyOptions {
        team_hub: true,
        ..with_service()
    };
    let runs = both_runs!(options, &["--yes"]);
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 0);
        let lines = ran.outcome.stdout_lines();
        let at = lines
            .iter()
            .position(|line| *line == TEAM_HUB_NOTICE)
            .expect("the Team Hub notice");
        assert_eq!(lines[at - 1], PRESERVED_TAIL);
        assert_eq!(lines[at + 1..], FINAL_LINES);
        assert!(ran
            .case
            .roots
            .state
            .join("team-hub/team-hub.sqlite3")
            .is_file());
    }
}

#[test]
fn no_terminal_without_yes_is_refused_and_changes_nothing() {
    for ran in &both_runs!(with_service(), &[]) {
        assert_eq!(
            ran.outcome.stdout_lines()[0],
            removal_lines(&ran.case.roots)[0]
        );
        ran.assert_refused(
            1,
            "Refusing to Proceed? without --yes on a non-interactive run.\n\
             Aborted; nothing was changed.\n",
        );
    }
}

#[test]
fn purge_without_a_terminal_is_refused_even_with_yes() {
    let options = LegacyOptions {
        legacy_alias: true,
        ..with_service()
    };
    for ran in &both_runs!(options, &["--yes", "--purge-state"]) {
        assert_eq!(ran.outcome.stdout, "");
        ran.assert_refused(
            1,
            "Refusing to purge state without an interactive terminal; --yes never bypasses \
             the state guard.\n",
        );
    }
}

/// The lines a successful run prints after the removals when state is kept.
fn preserved_lines(roots: &LegacyRoots) -> Vec<String> {
    vec![
        format!(
            "Preserved chat history, jobs, files, tokens, and secure-peer credentials at {}.",
            roots.state.display()
        ),
        PRESERVED_TAIL.to_string(),
    ]
}

fn full_success_lines(roots: &LegacyRoots) -> Vec<String> {
    let mut lines = removal_lines(roots);
    lines.extend(preserved_lines(roots));
    lines.extend(FINAL_LINES.map(String::from));
    lines
}

#[test]
fn unsafe_or_overlapping_roots_exit_2_and_keep_everything() {
    let home_as_install = |case: &LegacyCase| {
        vec![(
            "AGENTS_SERVER_INSTALL_DIR".into(),
            case.roots.home.clone().into_os_string(),
        )]
    };
    let nested_config = |case: &LegacyCase| {
        vec![(
            "AGENTS_SERVER_CONFIG_DIR".into(),
            case.roots.install.join("config").into_os_string(),
        )]
    };
    let expectations: [(ExtraEnv, &str); 2] = [
        (
            &home_as_install,
            "Refusing unsafe AGENTS_SERVER_INSTALL_DIR target: <BASE>/home\n",
        ),
        (
            &nested_config,
            "Refusing overlapping install, configuration, and state roots; each must be a \
             separate directory.\n",
        ),
    ];
    for (env, stderr) in expectations {
        let setup = Setup {
            env: Some(env),
            ..Default::default()
        };
        for ran in &both_runs!(with_service(), &["--yes"], Input::Null, setup) {
            let (code, stdout, actual) = ran.outcome.normalized(ran.case.sandbox.base());
            assert_eq!((code, stdout.as_str(), actual.as_str()), (2, "", stderr));
            ran.assert_nothing_changed();
        }
    }
}

#[test]
fn help_and_unknown_options_change_nothing() {
    for (args, code) in [(&["--yes", "--help"][..], 0), (&["--yes", "--force"], 2)] {
        for ran in &both_runs!(with_service(), args) {
            assert_eq!(ran.outcome.code(), code);
            let usage_stream = if code == 0 {
                &ran.outcome.stdout
            } else {
                assert!(ran
                    .outcome
                    .stderr
                    .starts_with("Unknown option: --force\nUsage: "));
                &ran.outcome.stderr
            };
            assert!(usage_stream.contains("Usage: ./uninstall.sh [--yes] [--purge-state]\n"));
            ran.assert_nothing_changed();
        }
    }
}

#[test]
fn a_live_lock_owner_is_refused() {
    let owner = std::process::id();
    let plant = move |case: &LegacyCase| {
        let lock = case.roots.install.join(".install-lock");
        agents_tests::make_dirs(&lock, 0o700);
        agents_tests::write_file_making_parents(
            &lock.join("pid"),
            format!("{owner}\n").as_bytes(),
            0o644,
        );
    };
    let setup = Setup {
        prepare: Some(&plant),
        ..Default::default()
    };
    for ran in &both_runs!(with_service(), &["--yes"], Input::Null, setup) {
        assert_eq!(ran.outcome.stdout, "");
        ran.assert_refused(
            1,
            &format!(
                "Refusing to uninstall while an AgentsServer install/update is active (PID {owner}).\n"
            ),
        );
    }
}

#[test]
fn a_dead_lock_owner_is_taken_over() {
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let plant = move |case: &LegacyCase| {
        let lock = case.roots.install.join(".install-lock");
        agents_tests::make_dirs(&lock, 0o700);
        agents_tests::write_file_making_parents(
            &lock.join("pid"),
            format!("{dead}\n").as_bytes(),
            0o644,
        );
        agents_tests::write_file_making_parents(
            &lock.join("leftover"),
            b"from the dead installer",
            0o644,
        );
    };
    let setup = Setup {
        prepare: Some(&plant),
        ..Default::default()
    };
    for ran in &both_runs!(with_service(), &["--yes"], Input::Null, setup) {
        assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
        assert_eq!(
            ran.outcome.stdout_lines(),
            full_success_lines(&ran.case.roots)
        );
        assert!(
            !ran.case.roots.install.exists(),
            "lock and install root are gone"
        );
        let stale = ".uninstall-stale-lock-";
        assert!(ran
            .case
            .home_tree()
            .keys()
            .all(|path| !path.to_string_lossy().contains(stale)));
        assert_service_gone(ran);
    }
}

#[test]
fn a_pending_split_transaction_is_refused_before_the_lock() {
    let plant = |case: &LegacyCase| {
        // A dangling symlink counts as present.
        std::os::unix::fs::symlink("missing", case.roots.install.join(".execution-transaction"))
            .unwrap();
    };
    let setup = Setup {
        prepare: Some(&plant),
        ..Default::default()
    };
    for ran in &both_runs!(with_service(), &["--yes"], Input::Null, setup) {
        ran.assert_refused(
            1,
            "This uninstaller does not support the separate gateway/execution layout or its \
             pending transaction.\nUse the execution-aware managed lifecycle; the pinned worker \
             has not been changed.\n",
        );
    }
}

#[test]
fn a_service_that_refuses_to_stop_keeps_every_file() {
    let options = LegacyOptions {
        unstoppable: true,
        ..with_service()
    };
    for ran in &both_runs!(options, &["--yes"]) {
        assert_eq!(ran.outcome.code(), 1);
        assert_eq!(
            ran.outcome.stdout_lines()[2],
            "Stopping agents-server.service"
        );
        assert_eq!(
            ran.outcome.stderr,
            "Could not stop agents-server.service; no files were removed.\n"
        );
        // Every file is kept; only `disable` removed the boot-time link.
        assert_eq!(
            differences(&ran.before, &ran.case.home_tree()),
            [
                "- .config/systemd/user/default.target.wants",
                "- .config/systemd/user/default.target.wants/agents-server.service"
            ]
        );
        let unit = ran.case.sandbox.unit_state(LEGACY_UNIT);
        assert_eq!(
            unit.main_pid,
            ran.case.service_pid.unwrap(),
            "still running"
        );
    }
}

#[test]
fn without_a_service_manager_no_file_is_removed() {
    let elsewhere = |_case: &LegacyCase| {
        vec![(
            "XDG_RUNTIME_DIR".into(),
            OsString::from("/nonexistent-runtime-dir"),
        )]
    };
    let setup = Setup {
        env: Some(&elsewhere),
        ..Default::default()
    };
    for ran in &both_runs!(with_service(), &["--yes"], Input::Null, setup) {
        ran.assert_refused(
            1,
            "The systemd user service manager is unavailable; no files were removed.\n",
        );
    }
}

#[test]
fn without_a_unit_nothing_is_stopped() {
    for ran in &both_runs!(LegacyOptions::default(), &["--yes"]) {
        assert_eq!(ran.outcome.code(), 0);
        let mut expected = removal_lines(&ran.case.roots);
        expected.drain(2..4);
        expected.extend(preserved_lines(&ran.case.roots));
        expected.extend(FINAL_LINES.map(String::from));
        assert_eq!(ran.outcome.stdout_lines(), expected);
    }
}

#[test]
fn the_prompt_accepts_only_the_scripts_yes_words() {
    for (typed, accepted) in [
        (&b"y\n"[..], true),
        (b"YES\n", true),
        (b"  yes\t\n", true),
        (b"Yes\n", false),
        (b"n\n", false),
        (b"\n", false),
        (b"\x04", false),
    ] {
        for ran in &both_runs!(with_service(), &[], Input::Terminal(typed.to_vec())) {
            let roots = &ran.case.roots;
            let mut stdout = removal_lines(roots);
            stdout.truncate(2);
            if accepted {
                assert_eq!(ran.outcome.code(), 0, "{typed:?} {:?}", ran.outcome);
                assert_eq!(ran.outcome.stdout_lines(), full_success_lines(roots));
                assert_eq!(ran.outcome.stderr, "Proceed? [y/N] ");
                assert_service_gone(ran);
            } else {
                assert_eq!(ran.outcome.stdout_lines(), stdout, "{typed:?}");
                ran.assert_refused(1, "Proceed? [y/N] Aborted; nothing was changed.\n");
            }
        }
    }
}

/// One purge attempt: `answer` typed for the state path (`{state}` stands
/// for the case's own state root), then `confirm` unless `--yes` is given.
#[derive(Clone, Copy)]
struct Purge<'a> {
    answer: &'a str,
    confirm: &'a str,
    args: &'a [&'a str],
}

impl Purge<'_> {
    fn assume_yes(&self) -> bool {
        self.args.contains(&"--yes")
    }

    /// Both implementations' runs of this attempt; `None` when skipped.
    fn run(&self, test: &str, options: LegacyOptions) -> Option<[Ran; 2]> {
        compare(test, |implementation| {
            let case = LegacyCase::start(test, options)?;
            let before = case.home_tree();
            let state = case.roots.state.to_string_lossy().into_owned();
            let mut typed = format!("{}\n", self.answer.replace("{state}", &state));
            if !self.assume_yes() {
                typed.push_str(&format!("{}\n", self.confirm));
            }
            let outcome = run(
                implementation,
                &case.env(),
                self.args,
                Input::Terminal(typed.into()),
            );
            Some(Ran {
                case,
                before,
                outcome,
            })
        })
    }
}

const PURGE_REQUESTED: &str =
    "Permanent deletion requested for chat history, jobs, files, and tokens.";

/// A purge that deleted the state, the alias and everything else.
#[track_caller]
fn assert_purged(ran: &Ran, prompt: &str, assume_yes: bool) {
    let roots = &ran.case.roots;
    assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
    let mut expected = vec![PURGE_REQUESTED.to_string()];
    expected.extend(removal_lines(roots));
    expected.push(format!("Deleted {}", roots.state.display()));
    expected.extend(FINAL_LINES.map(String::from));
    assert_eq!(ran.outcome.stdout_lines(), expected);
    let confirm_prompt = if assume_yes { "" } else { "Proceed? [y/N] " };
    assert_eq!(ran.outcome.stderr, format!("{prompt}{confirm_prompt}"));
    assert!(!roots.state.exists());
    assert!(std::fs::symlink_metadata(roots.home.join(".zenithbot-agent")).is_err());
    assert_service_gone(ran);
}

#[test]
fn purging_needs_the_exact_state_path_typed_at_the_terminal() {
    let test = agents_tests::test_name!();
    let options = LegacyOptions {
        legacy_alias: true,
        team_hub: true,
        ..with_service()
    };
    for (answer, confirm, purged) in [
        ("{state}", "y", true),
        (" {state} ", "yes", true),
        ("{state}/", "y", false),
        ("{state}", "n", false),
    ] {
        for args in [&["--purge-state"][..], &["--purge-state", "--yes"]] {
            let purge = Purge {
                answer,
                confirm,
                args,
            };
            let Some(runs) = purge.run(test, options) else {
                return;
            };
            for ran in &runs {
                let prompt = format!(
                    "Type the exact state path to confirm ({}): ",
                    ran.case.roots.state.display()
                );
                if answer.ends_with('/') {
                    assert_eq!(ran.outcome.stdout_lines(), [PURGE_REQUESTED]);
                    ran.assert_refused(
                        1,
                        &format!("{prompt}State path did not match; nothing was changed.\n"),
                    );
                } else if !purged && !purge.assume_yes() {
                    assert_eq!(ran.outcome.code(), 1);
                    ran.assert_unchanged();
                    assert_eq!(
                        ran.outcome.stderr,
                        format!("{prompt}Proceed? [y/N] Aborted; nothing was changed.\n")
                    );
                } else {
                    assert_purged(ran, &prompt, purge.assume_yes());
                }
            }
        }
    }
}

/// A legacy installation with its service, and the uninstaller (started
/// with `ignored` signals set to SIG_IGN) waiting at its "Proceed?" prompt
/// with the lock held; `None` where the sandbox cannot run.
fn at_the_proceed_prompt(
    test: &str,
    implementation: Implementation<'_>,
    ignored: &'static [libc::c_int],
) -> Option<(LegacyCase, BTreeMap<PathBuf, Entry>, Running)> {
    let case = LegacyCase::start(test, with_service())?;
    let before = case.home_tree();
    let running = start_ignoring(
        implementation,
        &case.env(),
        &[],
        Input::Terminal(Vec::new()),
        ignored,
    );
    running.wait_for_stderr("Proceed? [y/N] ");
    assert!(
        case.roots.install.join(".install-lock/pid").is_file(),
        "lock held at the prompt"
    );
    Some((case, before, running))
}

#[test]
fn a_termination_signal_at_the_prompt_exits_130_and_releases_the_lock() {
    let test = agents_tests::test_name!();
    compare(test, |implementation| {
        let (case, before, running) = at_the_proceed_prompt(test, implementation, &[])?;
        running.signal(rustix::process::Signal::TERM);
        let outcome = running.finish();
        assert_eq!(outcome.code(), 130, "{outcome:?}");
        let ran = Ran {
            case,
            before,
            outcome,
        };
        ran.assert_nothing_changed();
        Some(ran)
    });
}

#[test]
fn termination_signals_ignored_by_the_caller_stay_ignored() {
    let test = agents_tests::test_name!();
    compare(test, |implementation| {
        let (case, before, running) = at_the_proceed_prompt(
            test,
            implementation,
            &[libc::SIGHUP, libc::SIGINT, libc::SIGTERM],
        )?;
        // Still waiting at the prompt: the trap could not take them.
        running.assert_survives(&[
            rustix::process::Signal::TERM,
            rustix::process::Signal::INT,
            rustix::process::Signal::HUP,
        ]);
        running.type_input(b"n\n");
        let outcome = running.finish();
        assert_eq!(outcome.code(), 1, "{outcome:?}");
        assert!(
            outcome.stderr.ends_with("Aborted; nothing was changed.\n"),
            "{outcome:?}"
        );
        let ran = Ran {
            case,
            before,
            outcome,
        };
        ran.assert_nothing_changed();
        assert!(!ran.case.roots.install.join(".install-lock").exists());
        Some(ran)
    });
}

#[test]
fn a_missing_install_root_is_created_for_the_lock_and_removed() {
    let remove_install = |case: &LegacyCase| {
        std::fs::remove_dir_all(&case.roots.install).unwrap();
    };
    let setup = Setup {
        prepare: Some(&remove_install),
        ..Default::default()
    };
    for (args, code) in [(&["--yes"][..], 0), (&[][..], 1)] {
        for ran in &both_runs!(with_service(), args, Input::Null, setup) {
            assert_eq!(ran.outcome.code(), code, "{:?}", ran.outcome);
            assert!(
                !ran.case.roots.install.exists(),
                "created for the lock, then removed"
            );
        }
    }
}

// uninstall.sh's Darwin branch (`stop_launchd`), run side by side on a
// recorded macOS host: `uname` and `launchctl` found on PATH first, as the
// script and the port both find them (tests/tests/it/uninstall_support/darwin.rs).

use uninstall_support::darwin::{Bootout, DarwinCase, DarwinHost, LABEL};

/// One implementation's Darwin case after its run.
struct DarwinRan {
    case: DarwinCase,
    before: BTreeMap<PathBuf, Entry>,
    outcome: Outcome,
}

impl DarwinRan {
    fn stdout(&self) -> Vec<String> {
        let base = self.case.base().to_string_lossy().into_owned();
        self.outcome
            .stdout_lines()
            .iter()
            .map(|line| line.replace(&base, "<BASE>"))
            .collect()
    }
}

/// Runs the original and then the port on identical fresh Darwin cases with
/// `--yes`, and checks that status, output, trees and the `launchctl` calls
/// agree.
fn darwin_side_by_side(test: &str, host: DarwinHost) -> Option<[DarwinRan; 2]> {
    let originals = Originals::require(test)?;
    let run_one = |implementation| {
        let case = DarwinCase::start(host);
        let before = case.home_tree();
        let outcome = run(implementation, &case.env(), &["--yes"], Input::Null);
        DarwinRan {
            case,
            before,
            outcome,
        }
    };
    let original = run_one(Implementation::Original(&originals));
    let port = run_one(Implementation::Port);
    assert_eq!(
        original.outcome.normalized(original.case.base()),
        port.outcome.normalized(port.case.base()),
        "{test}: the port's status and output differ from the original's"
    );
    assert_eq!(original.before, port.before, "{test}: the fixtures differ");
    assert_eq!(
        original.case.home_tree(),
        port.case.home_tree(),
        "{test}: the port left a different tree than the original"
    );
    assert_eq!(
        original.case.launchctl_calls(),
        port.case.launchctl_calls(),
        "{test}: the port asked launchd differently"
    );
    Some([original, port])
}

/// The lines of a successful Darwin run, normalised to `<BASE>`.
fn darwin_success_lines(stopping: bool) -> Vec<String> {
    let home = "<BASE>/home";
    let mut lines = vec![
        "This will stop and remove the AgentsServer service, release runtime at".to_string(),
        format!(
            "{home}/.local/share/agents-server, and configuration at {home}/.config/agents-server \
             (including the access token)."
        ),
    ];
    if stopping {
        lines.push(format!("Stopping {LABEL}"));
    }
    lines.extend([
        format!("Removing {home}/Library/LaunchAgents/{LABEL}.plist"),
        format!("Removing {home}/Library/Logs/AgentsServer"),
        format!("Removing release runtime at {home}/.local/share/agents-server"),
        format!("Removing configuration at {home}/.config/agents-server"),
        format!(
            "Preserved chat history, jobs, files, tokens, and secure-peer credentials at \
             {home}/.agentsdock."
        ),
        PRESERVED_TAIL.to_string(),
    ]);
    lines.extend(FINAL_LINES.map(String::from));
    lines
}

#[track_caller]
fn assert_darwin_unchanged(ran: &DarwinRan) {
    let changes = differences(&ran.before, &ran.case.home_tree());
    assert!(changes.is_empty(), "files changed: {changes:?}");
}

/// `launchctl <verb> gui/<uid>/com.agentsdock.server`.
fn agent_call(verb: &str) -> String {
    format!("{verb} gui/{}/{LABEL}", python_compat::os::current_uid())
}

#[track_caller]
fn assert_darwin_removed(ran: &DarwinRan) {
    let home = &ran.case.roots.home;
    assert!(!ran.case.plist().exists() && !ran.case.logs().exists());
    assert!(!ran.case.roots.install.exists() && !ran.case.roots.config.exists());
    // Only the agent's own plist and logs go; the state stays.
    assert!(home
        .join("Library/LaunchAgents/com.example.other.plist")
        .exists());
    assert!(home.join("Library/Logs/other.log").exists());
    assert!(ran.case.roots.state.join("sessions.json").exists());
}

#[test]
fn darwin_a_loaded_agent_is_booted_out_then_its_plist_logs_and_files_go() {
    let test = agents_tests::test_name!();
    let Some(runs) = darwin_side_by_side(test, DarwinHost::default()) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
        assert_eq!(ran.stdout(), darwin_success_lines(true));
        assert_eq!(ran.outcome.stderr, "");
        assert_darwin_removed(ran);
        // Loaded; booted out; then polled until launchd no longer finds it.
        let print = agent_call("print");
        assert_eq!(
            ran.case.launchctl_calls(),
            [
                print.clone(),
                agent_call("bootout"),
                print.clone(),
                print.clone(),
                print
            ]
        );
    }
}

#[test]
fn darwin_without_a_loaded_agent_only_files_are_removed() {
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        loaded: false,
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
        assert_eq!(ran.stdout(), darwin_success_lines(false));
        assert_darwin_removed(ran);
        assert_eq!(ran.case.launchctl_calls(), [agent_call("print")]);
    }
}

#[test]
fn darwin_an_agent_gone_before_its_bootout_is_not_a_failure() {
    // `Boot-out failed: 3: No such process`, and print no longer finds it.
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        bootout: Bootout::AlreadyGone,
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 0, "{:?}", ran.outcome);
        assert_eq!(ran.stdout(), darwin_success_lines(true));
        assert_darwin_removed(ran);
        let print = agent_call("print");
        assert_eq!(
            ran.case.launchctl_calls(),
            [print.clone(), agent_call("bootout"), print.clone(), print]
        );
    }
}

#[test]
fn darwin_a_refused_bootout_keeps_every_file() {
    // `Boot-out failed: 5: Input/output error` and the agent still loaded.
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        bootout: Bootout::Refused,
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 1, "{:?}", ran.outcome);
        assert_eq!(ran.stdout()[2], format!("Stopping {LABEL}"));
        assert_eq!(
            ran.outcome.stderr,
            format!("Could not stop {LABEL}; no files were removed.\n")
        );
        assert_darwin_unchanged(ran);
        let print = agent_call("print");
        assert_eq!(
            ran.case.launchctl_calls(),
            [print.clone(), agent_call("bootout"), print]
        );
    }
}

#[test]
fn darwin_an_agent_that_never_unloads_keeps_every_file() {
    // The bootout is accepted, yet launchd keeps printing the agent: 50
    // polls 0.1 s apart, then the refusal.
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        bootout: Bootout::Ignored,
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 1, "{:?}", ran.outcome);
        assert_eq!(
            ran.outcome.stderr,
            format!("{LABEL} did not stop; no files were removed.\n")
        );
        assert_darwin_unchanged(ran);
        let calls = ran.case.launchctl_calls();
        assert_eq!(calls.len(), 2 + 50);
        assert_eq!(calls[1], agent_call("bootout"));
    }
}

#[test]
fn darwin_another_kernel_is_refused_after_the_prompt() {
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        os_name: "FreeBSD",
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 1, "{:?}", ran.outcome);
        assert_eq!(ran.stdout(), darwin_success_lines(false)[..2]);
        assert_eq!(
            ran.outcome.stderr,
            "Unsupported host OS: FreeBSD; no files were removed.\n"
        );
        assert_darwin_unchanged(ran);
        assert!(ran.case.launchctl_calls().is_empty());
    }
}

#[test]
fn a_failing_uname_ends_the_run_before_anything() {
    // `OS_NAME="$(uname -s)"` is the script's first command, under set -e.
    let test = agents_tests::test_name!();
    let host = DarwinHost {
        uname_status: 3,
        ..DarwinHost::default()
    };
    let Some(runs) = darwin_side_by_side(test, host) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 3, "{:?}", ran.outcome);
        assert_eq!(ran.outcome.stdout, "");
        assert_eq!(ran.outcome.stderr, "uname: cannot get system name\n");
        assert_darwin_unchanged(ran);
        assert!(!ran.case.roots.install.join(".install-lock").exists());
    }
}

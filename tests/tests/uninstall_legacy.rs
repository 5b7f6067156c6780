//! The legacy (single-service) path of `uninstall`, run side by side with the
//! seed `uninstall.sh` as the oracle: identical fresh trees, the same
//! environment, then the exit status, both output streams and the resulting
//! trees must be the same, and must be what the script promises.

mod uninstall_support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use uninstall_support::*;

/// One implementation's case after its run.
struct Ran {
    case: LegacyCase,
    before: BTreeMap<PathBuf, Entry>,
    outcome: Outcome,
}

impl Ran {
    fn unchanged(&self) -> bool {
        self.case.home_tree() == self.before
    }
}

/// Runs both implementations on identical fresh cases, checks that their
/// statuses, outputs and resulting trees agree, and returns both.
fn side_by_side(
    test: &str,
    options: LegacyOptions,
    args: &[&str],
    input: Input,
) -> Option<[Ran; 2]> {
    let mut results = Vec::new();
    for implementation in Implementation::BOTH {
        let case = LegacyCase::start(test, options)?;
        let before = case.home_tree();
        let outcome = run(implementation, &case.env(), args, input.clone());
        results.push(Ran {
            case,
            before,
            outcome,
        });
    }
    let [seed, port]: [Ran; 2] = results.try_into().ok().expect("two runs");
    assert_eq!(
        seed.outcome.normalized(seed.case.sandbox.base()),
        port.outcome.normalized(port.case.sandbox.base()),
        "{test}: the port's status and output differ from the seed's"
    );
    assert_eq!(seed.before, port.before, "{test}: the fixtures differ");
    assert_eq!(
        seed.case.home_tree(),
        port.case.home_tree(),
        "{test}: the port left a different tree than the seed"
    );
    Some([seed, port])
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
    let test = "yes_without_a_terminal_stops_the_service_and_keeps_state";
    let Some(runs) = side_by_side(test, with_service(), &["--yes"], Input::Null) else {
        return;
    };
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
    let Some(runs) = side_by_side(
        "team_hub_state_gets_its_notice",
        options,
        &["--yes"],
        Input::Null,
    ) else {
        return;
    };
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
    let test = "no_terminal_without_yes_is_refused_and_changes_nothing";
    let Some(runs) = side_by_side(test, with_service(), &[], Input::Null) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 1);
        assert_eq!(
            ran.outcome.stdout_lines()[0],
            removal_lines(&ran.case.roots)[0]
        );
        assert_eq!(
            ran.outcome.stderr,
            "Refusing to Proceed? without --yes on a non-interactive run.\n\
             Aborted; nothing was changed.\n"
        );
        assert!(ran.unchanged());
        assert_service_untouched(ran);
    }
}

#[test]
fn purge_without_a_terminal_is_refused_even_with_yes() {
    let options = LegacyOptions {
        legacy_alias: true,
        ..with_service()
    };
    let test = "purge_without_a_terminal_is_refused_even_with_yes";
    let Some(runs) = side_by_side(test, options, &["--yes", "--purge-state"], Input::Null) else {
        return;
    };
    for ran in &runs {
        assert_eq!(ran.outcome.code(), 1);
        assert_eq!(
            ran.outcome.stderr,
            "Refusing to purge state without an interactive terminal; --yes never bypasses \
             the state guard.\n"
        );
        assert_eq!(ran.outcome.stdout, "");
        assert!(ran.unchanged());
        assert_service_untouched(ran);
    }
}

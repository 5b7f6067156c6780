//! The split uninstall against a real systemd user manager running the
//! test worker as worker and gateway: the upstream scenario catalogue of
//! `test_execution_uninstall.py`, refusals that keep everything, failures
//! after services changed, and retried runs after SIGKILL.

use crate::uninstall_support;

use agents_common::{Platform, GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::Role;
use uninstall_support::split::*;
use uninstall_support::*;

/// What [`SplitCase::kept_tree`] records.
type Tree = std::collections::BTreeMap<std::path::PathBuf, Entry>;

fn refusal(message: &str) -> String {
    format!("Cannot uninstall the separate gateway/execution layout: {message}\n")
}

#[test]
fn an_idle_pair_is_removed_and_state_kept() {
    let case = split_case!();
    let state_before = case.state_files();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.stderr, "");
    case.assert_removed(&outcome, true);
    assert_eq!(case.state_files(), state_before, "state kept byte for byte");
    assert_eq!(
        case.maintenance_actions(),
        ["acquire", "seal"],
        "no release"
    );
}

#[test]
fn the_script_form_hands_the_split_layout_over() {
    let case = split_case!();
    let env = case.script_env();
    let outcome = run(Implementation::Port, &env, &["--yes"], Input::Null);
    assert_eq!(outcome.stderr, "");
    case.assert_removed(&outcome, true);
}

#[test]
fn purging_removes_state_and_only_the_alias_that_names_it() {
    let unrelated = agents_tests::TempDir::new("uninstall-unrelated");
    agents_tests::write_file_making_parents(
        &unrelated.path().join("keep.txt"),
        b"not ours\n",
        0o644,
    );
    let case = split_case!(|installation| {
        std::os::unix::fs::symlink(
            &installation.state_root,
            installation.home.join(".zenithbot-agent"),
        )
        .unwrap();
        // A link inside the install root is removed, never followed.
        std::os::unix::fs::symlink(
            unrelated.path(),
            installation.install_root.join("elsewhere"),
        )
        .unwrap();
    });
    let state = case.installation.state_root.to_str().unwrap().to_string();
    let typed = format!("{state}\ny\n");
    let outcome = case.run(&["--purge-state"], Input::Terminal(typed.into_bytes()));
    // stdout is a pipe, so Python's input() writes the prompts there.
    let prompts = format!(
        "Type the exact state path to confirm ({state}): Remove both idle services, runtime and \
         configuration? [y/N] "
    );
    case.assert_removed_after_prompts(&outcome, &prompts, false);
    assert!(outcome.stderr.is_empty(), "{outcome:?}");
    assert!(std::fs::symlink_metadata(case.installation.home.join(".zenithbot-agent")).is_err());
    assert_eq!(
        std::fs::read(unrelated.path().join("keep.txt")).unwrap(),
        b"not ours\n"
    );
}

#[test]
fn an_alias_to_another_directory_survives_a_purge() {
    let other = agents_tests::TempDir::new("uninstall-other-state");
    let case = split_case!(|installation| {
        std::os::unix::fs::symlink(other.path(), installation.home.join(".zenithbot-agent"))
            .unwrap();
    });
    let state = case.installation.state_root.to_str().unwrap().to_string();
    let outcome = case.run(
        &["--purge-state", "--yes"],
        Input::Terminal(format!("{state}\n").into_bytes()),
    );
    let prompt = format!("Type the exact state path to confirm ({state}): ");
    case.assert_removed_after_prompts(&outcome, &prompt, false);
    assert!(std::fs::symlink_metadata(case.installation.home.join(".zenithbot-agent")).is_ok());
}

#[test]
fn group_writable_directories_inside_a_release_are_removable() {
    let case = split_case!(|installation| {
        for dir in ["__pycache__", ".venv/lib"] {
            agents_tests::make_dirs(&installation.release_dir("1.0.0").join(dir), 0o775);
        }
    });
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
}

/// The installation lock the uninstaller takes.
fn install_lock(case: &SplitCase) -> std::path::PathBuf {
    case.installation.install_root.join(".install-lock")
}

/// Runs with `--yes` and checks a refusal that kept every file.
#[track_caller]
fn assert_refused_keeping_files(case: &SplitCase, message: &str) {
    let before = case.kept_tree();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert_eq!(outcome.stderr, refusal(message));
    assert_eq!(outcome.stdout, "");
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
}

/// A failure after the uninstaller asked for the worker's hold: no removal
/// began (`ownership verification` is not needed), every file is kept, the
/// hold was given back after `actions`, and both services run untouched.
#[track_caller]
fn assert_hold_given_back(case: &SplitCase, outcome: &Outcome, before: &Tree, actions: &[&str]) {
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert!(
        !outcome.stderr.contains("ownership verification"),
        "{outcome:?}"
    );
    assert_eq!(changes(before, &case.kept_tree()), Vec::<String>::new());
    assert_eq!(case.maintenance_actions(), actions);
    case.assert_worker_unheld();
    case.assert_services_untouched();
    assert!(case.intent().is_none());
}

/// Runs with `--yes` and checks a refusal that kept everything: files,
/// both services (same PIDs, enabled) and the worker's admission.
#[track_caller]
fn assert_kept(case: &SplitCase, message: &str) {
    assert_refused_keeping_files(case, message);
    case.assert_services_untouched();
    case.assert_worker_unheld();
    assert!(case.intent().is_none());
    assert!(!install_lock(case).exists());
}

#[test]
fn roots_that_are_not_private_are_refused() {
    let case = split_case!();
    for (root, mode) in [
        (&case.installation.install_root, 0o755),
        (&case.installation.config_root, 0o770),
    ] {
        std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        // Neither is exactly 0700, as a private removal root must be.
        let message = format!(
            "execution directory permissions are unsafe: {}",
            root.display()
        );
        assert_kept(&case, &message);
        std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
    }
    assert!(case.maintenance_actions().is_empty());
}

#[test]
fn a_foreign_directory_in_a_removal_tree_is_refused() {
    let case = split_case!();
    let venv = case.installation.release_dir("1.1.0").join(".venv");
    std::os::unix::fs::chown(&venv, Some(4242), None).unwrap();
    assert_kept(
        &case,
        "managed removal tree contains an inaccessible or foreign directory",
    );
    std::os::unix::fs::chown(&venv, Some(0), None).unwrap();
    std::fs::set_permissions(&venv, std::os::unix::fs::PermissionsExt::from_mode(0o655)).unwrap();
    assert_kept(
        &case,
        "managed removal tree contains an inaccessible or foreign directory",
    );
}

#[test]
fn a_busy_worker_or_a_foreign_lease_is_refused() {
    let case = split_case!();
    case.switches(
        Role::Worker,
        agents_tests::Switches {
            blockers: vec![("active_runs".to_string(), 1)],
            ..Default::default()
        },
    );
    assert_kept(
        &case,
        "execution is busy or another operation owns admission",
    );
    assert!(case.maintenance_actions().is_empty(), "no hold requested");
    case.switches(Role::Worker, agents_tests::Switches::default());
    // Another operation holds the worker's admission.
    let record = case.installation.receipt(Role::Worker).unwrap();
    let address = agents_tests::origin_address(
        record
            .get("callback_origin")
            .and_then(python_compat::json::Json::as_str)
            .unwrap(),
    )
    .unwrap();
    let body = format!(
        "{{\"action\": \"acquire\", \"expected_worker_instance_id\": \"{}\", \"operation_id\": \"11111111-2222-4333-8444-555555555555\"}}",
        case.services.worker_instance_id()
    );
    let response = agents_tests::HttpRequest::post_json("/api/admin/execution/maintenance", body)
        .bearer(&case.installation.control_token())
        .send(address)
        .unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    assert_refused_keeping_files(
        &case,
        "execution is busy or another operation owns admission",
    );
    case.assert_services_untouched();
    let lease = case.worker_status();
    assert_eq!(
        lease
            .get("lease")
            .and_then(|lease| lease.get("operation_id")),
        Some(&python_compat::json::Json::from(
            "11111111-2222-4333-8444-555555555555"
        )),
        "the foreign lease is untouched"
    );
}

#[test]
fn a_pending_update_is_refused() {
    let case = split_case!();
    let status = case
        .installation
        .state_root
        .join("admin/server-update.json");
    for phase in ["pending", "starting", "verifying", "installing", "unknown"] {
        agents_tests::write_file_making_parents(
            &status,
            format!("{{\"phase\": \"{phase}\"}}\n").as_bytes(),
            0o600,
        );
        assert_kept(
            &case,
            "an update or prepared candidate is pending; cancel or finish it before uninstalling",
        );
    }
    agents_tests::write_file_making_parents(&status, b"{\"phase\": \"idle\"}\n", 0o644);
    assert_kept(
        &case,
        &format!("execution configuration is unsafe: {}", status.display()),
    );
}

#[test]
fn a_foreign_unit_or_moved_current_is_refused() {
    let case = split_case!();
    let unit = case.sandbox.unit_dir().join(GATEWAY_UNIT);
    let original = std::fs::read(&unit).unwrap();
    let mut foreign = original.clone();
    foreign.extend_from_slice(b"# edited\n");
    std::fs::write(&unit, &foreign).unwrap();
    assert_kept(
        &case,
        "native service configuration is not this installed execution layout",
    );
    assert_eq!(
        std::fs::read(&unit).unwrap(),
        foreign,
        "the foreign unit is untouched"
    );
    std::fs::write(&unit, &original).unwrap();
    case.installation
        .set_current(&case.installation.release_dir("1.0.0"));
    assert_kept(
        &case,
        "gateway current link no longer matches its installed generation",
    );
}

#[test]
fn a_busy_preparation_runner_is_refused() {
    let case = split_case!();
    let preparation = case
        .installation
        .install_root
        .join(".update-preparations")
        .join("a".repeat(32));
    agents_tests::make_dirs(preparation.parent().unwrap(), 0o700);
    agents_tests::make_dirs(&preparation, 0o700);
    let lock = preparation.join("runner.lock");
    agents_tests::write_file_making_parents(&lock, b"", 0o600);
    // `-o`: flock itself holds the lock, so killing it releases the lock.
    let mut holder = agents_tests::GroupChild::spawn(
        std::process::Command::new("flock")
            .arg("-o")
            .arg(&lock)
            .args(["sleep", "600"]),
    )
    .expect("util-linux flock runs");
    agents_tests::poll_until(std::time::Duration::from_secs(5), "flock holds", || {
        let file = std::fs::File::open(&lock).ok()?;
        // Held when a non-blocking shared lock is refused.
        let held =
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).is_err();
        held.then_some(())
    });
    assert_kept(
        &case,
        "another process still owns execution or candidate preparation",
    );
    holder.kill();
    let name = case
        .installation
        .install_root
        .join(".update-preparations/not-a-candidate");
    agents_tests::make_dirs(&name, 0o700);
    assert_kept(
        &case,
        "unknown candidate preparation directory; no files were removed",
    );
}

#[test]
fn a_stopped_worker_without_an_intent_is_refused() {
    let case = split_case!();
    case.sandbox.systemctl_ok(&["stop", WORKER_UNIT]);
    assert_refused_keeping_files(
        &case,
        "safe uninstall requires a healthy running worker and gateway; stopped or broken \
         installations require ownership recovery",
    );
    assert_eq!(case.unit(WORKER_UNIT).active_state, "inactive");
    assert_eq!(case.unit(GATEWAY_UNIT).main_pid, case.services.gateway_pid);
}

fn stall(on: agents_tests::RequestMatch, seconds: f64) -> agents_tests::Switches {
    agents_tests::Switches::stalling(on, seconds)
}

/// Waits until the worker logged a request to `path` (and `action`) with
/// this outcome, at least `count` times.
fn wait_for_request(
    case: &SplitCase,
    path: &str,
    action: Option<&str>,
    outcome: &str,
    count: usize,
) {
    agents_tests::poll_until(
        std::time::Duration::from_secs(30),
        &format!("{count} {outcome} request(s) to {path} {action:?}"),
        || {
            let seen = case
                .requests(Role::Worker)
                .into_iter()
                .filter(|record| {
                    record.path == path
                        && record.action.as_deref() == action
                        && record.outcome == outcome
                })
                .count();
            (seen >= count).then_some(())
        },
    );
}

const MAINTENANCE: &str = "/api/admin/execution/maintenance";
const STATUS: &str = "/api/admin/execution/status";

/// Starts the uninstaller with the worker holding back its reply to
/// maintenance `action` for `seconds`, and waits until it does.
fn run_until_stalled(case: &SplitCase, action: &str, seconds: f64) -> Running {
    case.switches(
        Role::Worker,
        stall(agents_tests::RequestMatch::maintenance(action), seconds),
    );
    let running = case.start_run();
    wait_for_request(case, MAINTENANCE, Some(action), "stalled", 1);
    running
}

/// Re-runs until the uninstall completes (a run killed during a native stop
/// may leave a unit settling); every failed attempt must keep the files.
fn retry_until_removed(case: &SplitCase) {
    for attempt in 1..=5 {
        case.switches(Role::Worker, agents_tests::Switches::default());
        let outcome = case.run(&["--yes"], Input::Null);
        if outcome.code() == 0 {
            case.assert_removed(&outcome, true);
            return;
        }
        assert!(
            outcome
                .stderr
                .starts_with("Cannot uninstall the separate gateway/execution layout: "),
            "attempt {attempt}: {outcome:?}"
        );
        assert!(case.installation.install_root.join("releases").exists());
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    panic!("the retried uninstall never completed");
}

#[test]
fn a_failing_worker_stop_gives_everything_back() {
    let case = split_case!(|installation| {
        // A drop-in (the unit file itself stays exactly as rendered).
        let dropin = installation
            .home
            .join(".config/systemd/user")
            .join(format!("{WORKER_UNIT}.d"));
        agents_tests::write_file_making_parents(
            &dropin.join("refuse.conf"),
            b"[Unit]\nRefuseManualStop=yes\n",
            0o644,
        );
    });
    let before = case.kept_tree();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert!(
        outcome
            .stderr
            .starts_with("Cannot uninstall the separate gateway/execution layout: ")
            && !outcome.stderr.contains("ownership verification"),
        "the stop error itself: {outcome:?}"
    );
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
    // The gateway was started again, both are enabled, the worker never stopped.
    let gateway = case.sandbox.wait_for_unit(
        GATEWAY_UNIT,
        std::time::Duration::from_secs(15),
        "running again",
        |state| state.is_running(),
    );
    assert_ne!(gateway.main_pid, case.services.gateway_pid, "a new gateway");
    assert_eq!(gateway.unit_file_state, "enabled");
    let worker = case.unit(WORKER_UNIT);
    assert_eq!(worker.main_pid, case.services.worker_pid);
    assert_eq!(worker.unit_file_state, "enabled");
    assert_eq!(case.maintenance_actions(), ["acquire", "seal", "release"]);
    case.assert_worker_unheld();
    assert!(case.intent().is_none(), "the intent was withdrawn");
}

/// Another process waiting for the worker's state-owner lock
/// (`admin/state-owner.lock`), which it holds once the worker has stopped.
fn hold_the_state_lease_after_the_worker(case: &SplitCase) -> agents_tests::GroupChild {
    let lease = case.installation.state_root.join("admin/state-owner.lock");
    agents_tests::GroupChild::spawn(
        std::process::Command::new("flock")
            .arg("-o")
            .arg(&lease)
            .args(["sleep", "600"]),
    )
    .expect("util-linux flock runs")
}

/// A run that stopped both services but could not prove the state its own:
/// refused before file removal, only the intent appeared (sealed, its hold
/// not released), both services disabled and stopped.
#[track_caller]
fn assert_stopped_before_file_removal(case: &SplitCase, before: &Tree, outcome: &Outcome) {
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert_eq!(
        outcome.stderr,
        refusal(
            "uninstall stopped before file removal; service/admission recovery requires \
             ownership verification"
        )
    );
    assert_eq!(
        changes(before, &case.kept_tree()),
        [
            "+ install/.execution-uninstall.json",
            "- units/default.target.wants",
            "- units/default.target.wants/agents-server-gateway.service",
            "- units/default.target.wants/agents-server.service",
        ]
    );
    assert_eq!(case.phase().as_deref(), Some("sealed"));
    assert_eq!(
        case.maintenance_actions(),
        ["acquire", "seal"],
        "no release"
    );
    for unit in [WORKER_UNIT, GATEWAY_UNIT] {
        let state = case.unit(unit);
        assert_eq!(
            (state.active_state.as_str(), state.main_pid),
            ("inactive", 0),
            "{unit}"
        );
    }
}

/// A `--yes` retry refused with `message`.
#[track_caller]
fn assert_retry_refused(case: &SplitCase, message: &str) {
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.stderr, refusal(message));
}

/// A retry asking to purge the state the interrupted run keeps is refused.
#[track_caller]
fn assert_a_purging_retry_refused(case: &SplitCase) {
    let state = case.installation.state_root.to_str().unwrap().to_string();
    let outcome = case.run(
        &["--yes", "--purge-state"],
        Input::Terminal(format!("{state}\n").into_bytes()),
    );
    assert!(
        outcome.stderr.ends_with(&refusal(
            "retry must preserve the existing uninstall data-removal choice"
        )),
        "{outcome:?}"
    );
}

/// Rewrites the uninstall intent's phase, as a run killed right after
/// recording `phase` leaves it.
fn record_intent_phase(case: &SplitCase, phase: &str) {
    let root = &case.installation.install_root;
    let mut intent = agents_common::read_uninstall_intent(root, &case.layout)
        .unwrap()
        .unwrap();
    intent.insert("phase", phase);
    agents_common::store_uninstall_intent(root, &intent).unwrap();
}

#[test]
fn a_held_state_lease_keeps_everything_and_a_retry_finishes() {
    let case = split_case!();
    let mut holder = hold_the_state_lease_after_the_worker(&case);
    let before = case.kept_tree();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_stopped_before_file_removal(&case, &before, &outcome);
    // Still held: the retry refuses the same way and changes nothing.
    assert_retry_refused(
        &case,
        "another process still owns execution or candidate preparation",
    );
    holder.kill();
    // A provider child still registered keeps everything.
    case.register_provider_children("[{\"pid\": 4242}]");
    assert_retry_refused(
        &case,
        "provider child ownership remains unresolved; runtime files were retained",
    );
    // A retry must keep the data-removal choice.
    assert_a_purging_retry_refused(&case);
    case.register_provider_children("[]");
    assert_eq!(case.phase().as_deref(), Some("sealed"));
    // As if the last run had been killed right after recording `stopped`.
    record_intent_phase(&case, "stopped");
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
    assert_eq!(
        case.maintenance_actions(),
        ["acquire", "seal"],
        "never contacted again"
    );
}

#[test]
fn a_lost_seal_reply_is_adopted_and_released() {
    let case = split_case!();
    // The seal takes effect, but its reply comes after the 5 s client timeout.
    case.switches(
        Role::Worker,
        stall(agents_tests::RequestMatch::maintenance("seal"), 8.0),
    );
    let before = case.kept_tree();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_hold_given_back(&case, &outcome, &before, &["acquire", "seal", "release"]);
}

#[test]
fn a_refused_hold_withdraws_the_intent() {
    let case = split_case!();
    for (refused, actions) in [
        ("acquire", &["acquire"][..]),
        ("seal", &["acquire", "acquire", "seal", "release"][..]),
    ] {
        case.switches(
            Role::Worker,
            agents_tests::Switches {
                refuse: vec![refused.to_string()],
                ..Default::default()
            },
        );
        let before = case.kept_tree();
        let outcome = case.run(&["--yes"], Input::Null);
        assert_hold_given_back(&case, &outcome, &before, actions);
    }
}

#[test]
fn a_pending_update_after_the_seal_releases_the_hold() {
    let case = split_case!();
    let running = run_until_stalled(&case, "seal", 1.5);
    agents_tests::write_file_making_parents(
        &case
            .installation
            .state_root
            .join("admin/server-update.json"),
        b"{\"phase\": \"pending\"}\n",
        0o600,
    );
    let outcome = running.finish();
    assert_eq!(
        outcome.stderr,
        refusal(
            "an update or prepared candidate is pending; cancel or finish it before uninstalling"
        )
    );
    assert_eq!(case.maintenance_actions(), ["acquire", "seal", "release"]);
    case.assert_worker_unheld();
    case.assert_services_untouched();
    assert!(case.intent().is_none());
}

#[test]
fn sigkill_while_requesting_the_hold_then_a_retry_finishes() {
    let case = split_case!();
    let running = run_until_stalled(&case, "acquire", 30.0);
    assert_eq!(case.phase().as_deref(), Some("prepared"));
    running.signal(rustix::process::Signal::KILL);
    let outcome = running.finish();
    assert!(outcome.status.code().is_none(), "killed: {outcome:?}");
    // The dead uninstaller's lock and intent remain; services untouched.
    assert!(install_lock(&case).exists());
    case.assert_services_untouched();
    retry_until_removed(&case);
}

#[test]
fn sigkill_after_sealing_then_a_retry_finishes() {
    let case = split_case!();
    let running = case.start_run();
    case.wait_for_phase("sealed");
    running.signal(rustix::process::Signal::KILL);
    let _ = running.finish();
    retry_until_removed(&case);
}

/// Kills the uninstaller while it asks the worker's status before stopping
/// it, i.e. after the gateway has stopped.
fn kill_between_the_two_stops(case: &SplitCase) {
    let running = run_until_stalled(case, "seal", 2.0);
    let statuses_before = case
        .requests(Role::Worker)
        .iter()
        .filter(|record| record.path == STATUS)
        .count();
    case.switches(
        Role::Worker,
        stall(agents_tests::RequestMatch::path(STATUS), 60.0),
    );
    wait_for_request(case, STATUS, None, "stalled", 1);
    assert!(
        case.requests(Role::Worker)
            .iter()
            .filter(|record| record.path == STATUS)
            .count()
            > statuses_before
    );
    running.signal(rustix::process::Signal::KILL);
    let _ = running.finish();
    case.switches(Role::Worker, agents_tests::Switches::default());
    assert_eq!(case.phase().as_deref(), Some("sealed"));
    let gateway = case.unit(GATEWAY_UNIT);
    assert_eq!(
        (gateway.active_state.as_str(), gateway.main_pid),
        ("inactive", 0)
    );
    assert_eq!(case.unit(WORKER_UNIT).main_pid, case.services.worker_pid);
}

#[test]
fn sigkill_between_the_gateway_and_worker_stops_then_a_retry_finishes() {
    let case = split_case!();
    kill_between_the_two_stops(&case);
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
}

#[test]
fn a_restarted_worker_keeps_the_hold_of_the_interrupted_uninstall() {
    let case = split_case!();
    kill_between_the_two_stops(&case);
    case.sandbox.systemctl_ok(&["restart", WORKER_UNIT]);
    let operation = case
        .intent()
        .and_then(|intent| intent.get("operation_id").cloned())
        .unwrap();
    let restarted = case
        .installation
        .wait_for_receipt(Role::Worker, "of a new worker", |record| {
            record.get("pid") != Some(&python_compat::json::Json::from(case.services.worker_pid))
        });
    // Its startup hold is the interrupted uninstall's sealed lease.
    let status = case.worker_status();
    let lease = status.get("lease").unwrap();
    assert_eq!(lease.get("operation_id"), Some(&operation), "{status:?}");
    assert_eq!(
        lease.get("sealed"),
        Some(&python_compat::json::Json::Bool(true))
    );
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
    let pid = restarted
        .get("pid")
        .and_then(python_compat::json::Json::as_int)
        .unwrap();
    assert!(!agents_tests::process_alive(pid as u32));
}

/// The run ended as an uncaught `KeyboardInterrupt` ends Python: by SIGINT.
#[track_caller]
fn assert_died_of_interrupt(outcome: &Outcome) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(outcome.status.signal(), Some(2), "{outcome:?}");
    assert!(
        outcome.stderr.ends_with("KeyboardInterrupt\n"),
        "{outcome:?}"
    );
}

#[test]
fn an_interrupt_at_the_prompt_changes_nothing() {
    let case = split_case!();
    let before = case.kept_tree();
    let running = case.start_run_with(&[], Input::Terminal(Vec::new()));
    running.wait_for_stdout("Remove both idle services, runtime and configuration? [y/N] ");
    running.signal(rustix::process::Signal::INT);
    let outcome = running.finish();
    assert_died_of_interrupt(&outcome);
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
    case.assert_services_untouched();
    assert!(case.maintenance_actions().is_empty());
}

#[test]
fn an_interrupt_the_caller_ignored_stays_ignored() {
    let case = split_case!();
    let before = case.kept_tree();
    let args = case.args(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let running = start_ignoring(
        Implementation::Port,
        &case.env(),
        &args,
        Input::Terminal(Vec::new()),
        &[libc::SIGINT],
    );
    running.wait_for_stdout("Remove both idle services, runtime and configuration? [y/N] ");
    // An inherited SIG_IGN is not Python's KeyboardInterrupt.
    running.assert_survives(&[rustix::process::Signal::INT]);
    running.type_input(b"n\n");
    let outcome = running.finish();
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert!(
        outcome
            .stderr
            .ends_with("Uninstall was not confirmed; nothing was changed\n"),
        "{outcome:?}"
    );
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
    case.assert_services_untouched();
}

#[test]
fn an_interrupt_after_the_hold_releases_it_before_dying() {
    let case = split_case!();
    let before = case.kept_tree();
    let running = run_until_stalled(&case, "seal", 2.0);
    running.signal(rustix::process::Signal::INT);
    let outcome = running.finish();
    assert_died_of_interrupt(&outcome);
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
    assert_eq!(case.maintenance_actions(), ["acquire", "seal", "release"]);
    case.assert_worker_unheld();
    case.assert_services_untouched();
    assert!(case.intent().is_none());
    assert!(!install_lock(&case).exists());
}

#[test]
fn a_prepared_intent_with_both_services_stopped_is_finished() {
    let case = split_case!();
    let running = run_until_stalled(&case, "acquire", 30.0);
    running.signal(rustix::process::Signal::KILL);
    let _ = running.finish();
    assert_eq!(case.phase().as_deref(), Some("prepared"));
    case.sandbox
        .systemctl_ok(&["stop", GATEWAY_UNIT, WORKER_UNIT]);
    case.switches(Role::Worker, agents_tests::Switches::default());
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
    assert_eq!(
        case.maintenance_actions(),
        ["acquire"],
        "the stopped worker is never contacted"
    );
}

#[test]
fn a_worker_restarted_during_the_seal_is_finished_by_a_retry() {
    let case = split_case!();
    let running = run_until_stalled(&case, "seal", 4.0);
    // A new worker epoch replaces the one that was sealing: the reply is lost.
    case.sandbox.systemctl_ok(&["restart", WORKER_UNIT]);
    let outcome = running.finish();
    assert_eq!(outcome.code(), 1, "{outcome:?}");
    assert!(
        outcome
            .stderr
            .starts_with("Cannot uninstall the separate gateway/execution layout: "),
        "{outcome:?}"
    );
    // The intent stays: the new worker took it as its startup hold.
    assert_eq!(case.phase().as_deref(), Some("prepared"));
    case.installation
        .wait_for_receipt(Role::Worker, "of the new worker", |record| {
            record.get("pid") != Some(&python_compat::json::Json::from(case.services.worker_pid))
        });
    case.switches(Role::Worker, agents_tests::Switches::default());
    let outcome = case.run(&["--yes"], Input::Null);
    case.assert_removed(&outcome, true);
}

#[test]
fn a_mount_inside_a_removal_tree_is_refused() {
    let case = split_case!(|installation| {
        agents_tests::make_dirs(
            &installation.release_dir("1.0.0").join("__pycache__"),
            0o700,
        );
    });
    let inside = case.installation.release_dir("1.0.0").join("__pycache__");
    let before = case.kept_tree();
    // The uninstaller runs in its own mount namespace with a tmpfs there, so
    // the host's mounts never change.
    let args = case.args(&["--yes"]);
    let output = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs -o mode=0700 tmpfs \"$0\" && exec \"$@\"",
        ])
        .arg(&inside)
        .arg(agents_tests::binary_path("uninstall"))
        .args(&args)
        .env_clear()
        .envs(case.env())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("unshare runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        refusal("managed removal tree contains another mounted filesystem")
    );
    assert_eq!(changes(&before, &case.kept_tree()), Vec::<String>::new());
    case.assert_services_untouched();
    case.assert_worker_unheld();
}

const OWNER: &str = "activation-0123456789abcdef01234567";

fn sha256_hex(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Arms a recovery owner of `case`'s installation the way install.sh leaves
/// one: a private owner directory with its bootstrap payload, `owner.json`
/// pinning the root, payload digests and interpreter, and a terminal proof.
/// Returns the owner directory.
fn arm_recovery_owner(case: &SplitCase, name: &str) -> std::path::PathBuf {
    arm_recovery_owner_on(case, name, Platform::Linux)
}

/// [`arm_recovery_owner`] for an owner whose native job is `platform`'s
/// (a systemd unit on Linux, a launchd plist on Darwin).
fn arm_recovery_owner_on(case: &SplitCase, name: &str, platform: Platform) -> std::path::PathBuf {
    use agents_common::{directory_binding, RECOVERY_PAYLOAD};
    use python_compat::{
        json::{encode_indented, Json},
        json_object,
    };
    let i = &case.installation;
    let parent = i.install_root.join(".activation-recovery");
    if !parent.exists() {
        agents_tests::make_dirs(&parent, 0o700);
    }
    let directory = parent.join(name);
    agents_tests::make_dirs(&directory, 0o700);
    let mut payload = python_compat::json::JsonObject::new();
    for file in RECOVERY_PAYLOAD {
        let content = format!("# retained {file}\n");
        agents_tests::write_file_making_parents(&directory.join(file), content.as_bytes(), 0o600);
        payload.insert(file.to_string(), Json::from(sha256_hex(content.as_bytes())));
    }
    let interpreter = std::fs::canonicalize("/bin/sh").unwrap();
    let text = |path: &std::path::Path| path.to_str().unwrap().to_string();
    let owner = json_object! {
        "format" => 1, "root" => text(&i.install_root),
        "root_binding" => directory_binding(&i.install_root).unwrap(),
        "transaction_id" => name, "version" => "1.1.0", "api_contract" => 1,
        "source_binding" => Json::Null, "source_inventory" => python_compat::json::JsonObject::new(),
        "home" => text(&i.home), "platform" => platform.as_str(),
        "config_root" => text(&i.config_root), "state_root" => text(&i.state_root),
        "bind" => "127.0.0.1", "port" => 7850, "expected_server_identity" => "",
        "managed_update_id" => "", "interpreter" => text(&interpreter),
        "interpreter_sha256" => sha256_hex(&std::fs::read(&interpreter).unwrap()),
        "payload" => payload, "fresh" => false, "status_binding" => Json::Null,
        "expected_service_cgroup" => "",
    };
    agents_tests::write_file_making_parents(
        &directory.join("owner.json"),
        &encode_indented(&Json::Object(owner)),
        0o600,
    );
    let terminal = encode_indented(&Json::Object(json_object! {
        "format" => 1, "transaction_id" => name, "phase" => "committed",
        "snapshot" => python_compat::json::JsonObject::new(),
    }));
    agents_tests::write_file_making_parents(&directory.join("terminal.json"), &terminal, 0o600);
    directory
}

/// The proof `finalized` (and then `_retire`) records for `directory`.
fn finalization_proof(directory: &std::path::Path, name: &str) -> Vec<u8> {
    use python_compat::{
        json::{encode_indented, Json},
        json_object,
    };
    let terminal = std::fs::read(directory.join("terminal.json")).unwrap();
    encode_indented(&Json::Object(json_object! {
        "format" => 1, "transaction_id" => name, "terminal_sha256" => sha256_hex(&terminal),
    }))
}

/// Finalizes and retires the owner in `directory`.
fn retire_owner(directory: &std::path::Path, name: &str) {
    let proof = finalization_proof(directory, name);
    agents_tests::write_file_making_parents(&directory.join("finalized.json"), &proof, 0o600);
    agents_tests::write_file_making_parents(&directory.join("retired.json"), &proof, 0o600);
}

/// Registers the owner's native unit as `arm` leaves it before retirement:
/// the owner's own rendering, private.
fn register_owner(case: &SplitCase, name: &str) -> std::path::PathBuf {
    let directory = case
        .installation
        .install_root
        .join(agents_common::RECOVERY_DIRECTORY)
        .join(name);
    let owner = agents_common::recovery_evidence(&directory.join("owner.json")).unwrap();
    let platform =
        Platform::parse(owner.get("platform").and_then(|p| p.as_str()).unwrap()).unwrap();
    let unit = agents_common::recovery_service_path(name, platform, &case.installation.home);
    let rendered = agents_common::render_recovery_service(&directory, &owner).unwrap();
    let argument = if platform == Platform::Darwin {
        format!("<string>{name}</string>")
    } else {
        format!("\"--transaction-id\" \"{name}\"\n")
    };
    assert!(String::from_utf8_lossy(&rendered).contains(&argument));
    agents_tests::write_file_making_parents(&unit, &rendered, 0o600);
    unit
}

#[test]
fn retired_recovery_owners_do_not_block_the_uninstall() {
    let case = split_case!();
    for name in [OWNER, "activation-fedcba9876543210fedcba98"] {
        let directory = arm_recovery_owner(&case, name);
        retire_owner(&directory, name);
    }
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.stderr, "");
    case.assert_removed(&outcome, true);
}

#[test]
fn an_unretired_recovery_owner_keeps_everything() {
    let case = split_case!();
    let directory = arm_recovery_owner(&case, OWNER);
    // Armed, not yet registered: the original's read of the registration fails.
    let unit =
        agents_common::recovery_service_path(OWNER, Platform::Linux, &case.installation.home);
    assert_kept(
        &case,
        &format!("[Errno 2] No such file or directory: '{}'", unit.display()),
    );
    // Armed and registered, the recovery still live.
    register_owner(&case, OWNER);
    assert_kept(&case, "a durable activation recovery owner has not retired");
    // A registration that is not the owner's own rendering is refused as
    // changed, and stays where it is.
    let registered = std::fs::read(&unit).unwrap();
    let edited = String::from_utf8(registered.clone())
        .unwrap()
        .replace("RestartSec=30s", "RestartSec=1s");
    agents_tests::write_file_making_parents(&unit, edited.as_bytes(), 0o600);
    assert_kept(&case, "recovery native registration changed");
    assert_eq!(std::fs::read(&unit).unwrap(), edited.as_bytes());
    agents_tests::write_file_making_parents(&unit, &registered, 0o600);
    assert_kept(&case, "a durable activation recovery owner has not retired");
    // Finalized but not yet retired.
    let proof = finalization_proof(&directory, OWNER);
    agents_tests::write_file_making_parents(&directory.join("finalized.json"), &proof, 0o600);
    assert_kept(&case, "a durable activation recovery owner has not retired");
    // Retired evidence written, but the registration was not removed yet.
    agents_tests::write_file_making_parents(&directory.join("retired.json"), &proof, 0o600);
    assert_kept(
        &case,
        "a durable activation recovery job is still registered or running",
    );
    std::fs::remove_file(&unit).unwrap();
    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.stderr, "");
    case.assert_removed(&outcome, true);
}

#[test]
fn a_launchd_recovery_owner_is_judged_by_its_plist_and_launchctl() {
    // An owner armed for a macOS home names a launchd job: its plist under
    // ~/Library/LaunchAgents and `/bin/launchctl print` (an absolute path,
    // which this Linux host does not have, as the original finds too).
    let case = split_case!();
    let directory = arm_recovery_owner_on(&case, OWNER, Platform::Darwin);
    let plist =
        agents_common::recovery_service_path(OWNER, Platform::Darwin, &case.installation.home);
    assert_eq!(
        plist.strip_prefix(&case.installation.home).unwrap(),
        std::path::Path::new(
            "Library/LaunchAgents/com.agentsdock.recovery.0123456789abcdef01234567.plist"
        )
    );
    // Armed, not yet registered: reading its registration fails.
    assert_kept(
        &case,
        &format!("[Errno 2] No such file or directory: '{}'", plist.display()),
    );
    // Registered with the owner's own plist: a live recovery.
    register_owner(&case, OWNER);
    assert_kept(&case, "a durable activation recovery owner has not retired");
    let registered = std::fs::read(&plist).unwrap();
    let edited = String::from_utf8(registered.clone())
        .unwrap()
        .replace("<integer>30</integer>", "<integer>1</integer>");
    assert_ne!(edited.as_bytes(), registered.as_slice());
    agents_tests::write_file_making_parents(&plist, edited.as_bytes(), 0o600);
    assert_kept(&case, "recovery native registration changed");
    // Retired, but its plist still registered.
    agents_tests::write_file_making_parents(&plist, &registered, 0o600);
    retire_owner(&directory, OWNER);
    assert_kept(
        &case,
        "a durable activation recovery job is still registered or running",
    );
    // Retired and unregistered: only launchd can say the job is gone.
    std::fs::remove_file(&plist).unwrap();
    assert_kept(
        &case,
        "[Errno 2] No such file or directory: '/bin/launchctl'",
    );
}

#[test]
fn malformed_recovery_evidence_is_refused() {
    let case = split_case!();
    let directory = arm_recovery_owner(&case, OWNER);
    retire_owner(&directory, OWNER);
    let proof = finalization_proof(&directory, OWNER);

    // Retirement without finalization.
    std::fs::remove_file(directory.join("finalized.json")).unwrap();
    assert_kept(&case, "native recovery retirement lacks finalization proof");
    agents_tests::write_file_making_parents(&directory.join("finalized.json"), &proof, 0o600);

    // A terminal proof changed after finalization.
    let terminal = std::fs::read(directory.join("terminal.json")).unwrap();
    agents_tests::write_file_making_parents(
        &directory.join("terminal.json"),
        b"{\"format\": 2}\n",
        0o600,
    );
    assert_kept(&case, "native recovery retirement evidence changed");
    agents_tests::write_file_making_parents(&directory.join("terminal.json"), &terminal, 0o600);

    // A bootstrap source that no longer matches its digest.
    let bootstrap = directory.join("execution_install.py");
    let original = std::fs::read(&bootstrap).unwrap();
    agents_tests::write_file_making_parents(&bootstrap, b"# replaced\n", 0o600);
    assert_kept(&case, "recovery bootstrap source changed");
    agents_tests::write_file_making_parents(&bootstrap, &original, 0o600);

    // An owner record of another transaction, and one that is no object.
    let owner = std::fs::read(directory.join("owner.json")).unwrap();
    let other = String::from_utf8(owner.clone())
        .unwrap()
        .replace(OWNER, "activation-fedcba9876543210fedcba98");
    agents_tests::write_file_making_parents(&directory.join("owner.json"), other.as_bytes(), 0o600);
    assert_kept(&case, "recovery owner does not match its transaction");
    agents_tests::write_file_making_parents(&directory.join("owner.json"), b"[]\n", 0o600);
    assert_kept(&case, "recovery evidence is not an object");
    agents_tests::write_file_making_parents(&directory.join("owner.json"), &owner, 0o600);

    // Evidence that is not private.
    std::fs::set_permissions(
        directory.join("retired.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let unsafe_path = directory.join("retired.json");
    assert_kept(
        &case,
        &format!(
            "execution configuration is unsafe: {}",
            unsafe_path.display()
        ),
    );
    std::fs::set_permissions(
        &unsafe_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    // An entry that is no recovery transaction.
    let stray = directory.with_file_name("notes");
    agents_tests::make_dirs(&stray, 0o700);
    assert_kept(&case, "invalid recovery transaction");
    std::fs::remove_dir(&stray).unwrap();

    let outcome = case.run(&["--yes"], Input::Null);
    assert_eq!(outcome.stderr, "");
    case.assert_removed(&outcome, true);
}

/// The helper form (`--yes`) of `case` under `crash-tracer`, killed on entry
/// to its `kill_at`-th durable system call (never for `None`).
fn traced_helper(case: &SplitCase, kill_at: Option<usize>) -> agents_tests::crash_points::Traced {
    let mut command = std::process::Command::new(agents_tests::binary_path("uninstall"));
    command
        .args(case.args(&["--yes"]))
        .env_clear()
        .envs(case.env())
        .current_dir("/");
    agents_tests::crash_points::run_traced(
        &command,
        &agents_tests::crash_points::helper_injection(),
        kill_at,
    )
}

/// Regression (issue 16): an uninstall killed at the durable call chosen by
/// `choose` (from a complete run's calls) once removal has begun; the rerun
/// used to refuse with `refused` (as the original does) and keep the roots,
/// the lock and the intent. It now finishes the removal. `left` checks what
/// the kill left.
fn a_rerun_finishes_an_interrupted_removal(
    test: &str,
    choose: impl Fn(&[agents_tests::crash_points::DurableCall]) -> usize,
    left: impl Fn(&SplitCase),
    refused: &str,
) {
    let Some(case) = SplitCase::start(test) else {
        return;
    };
    let complete = traced_helper(&case, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let kill_at = choose(&complete.calls);
    let call = complete.calls[kill_at - 1].clone();
    drop(case);
    let case = SplitCase::start(test).expect("the sandbox ran once");
    let state = case.state_files();

    let killed = traced_helper(&case, Some(kill_at));

    assert_eq!(
        killed.killed.as_ref().map(|call| &call.call),
        Some(&call.call),
        "{killed:?}"
    );
    assert_eq!(case.phase().as_deref(), Some("stopped"));
    left(&case);
    let lock = install_lock(&case);
    assert!(lock.join("pid").exists(), "the killed run's lock is left");

    let outcome = case.run(&["--yes"], Input::Null);

    assert!(!outcome.stderr.contains(refused), "{outcome:?}");
    case.assert_removed(&outcome, true);
    assert_eq!(case.state_files(), state, "state kept");
}

#[test]
fn a_rerun_finishes_an_uninstall_killed_at_the_unlink_of_the_worker_unit() {
    a_rerun_finishes_an_interrupted_removal(
        agents_tests::test_name!(),
        |calls| {
            calls
                .iter()
                .find(|call| {
                    call.call.starts_with("unlink")
                        && call.paths.ends_with(&format!("/{WORKER_UNIT}"))
                })
                .expect("the worker unit's unlink")
                .number
        },
        |case| {
            let units = case.sandbox.unit_dir();
            assert!(
                !units.join(GATEWAY_UNIT).exists(),
                "the gateway unit is gone"
            );
            assert!(units.join(WORKER_UNIT).exists(), "the worker unit is left");
        },
        "No such file or directory",
    );
}

/// The durable call right after the first unlink whose path ends with `name`.
fn after_unlink_of(calls: &[agents_tests::crash_points::DurableCall], name: &str) -> usize {
    calls
        .iter()
        .find(|call| call.call.starts_with("unlink") && call.paths.ends_with(name))
        .unwrap_or_else(|| panic!("no unlink of {name}"))
        .number
        + 1
}

#[test]
fn a_rerun_finishes_an_uninstall_killed_at_the_unlink_after_a_release_lost_execution_service_py() {
    a_rerun_finishes_an_interrupted_removal(
        agents_tests::test_name!(),
        |calls| after_unlink_of(calls, "/execution_service.py"),
        |case| {
            let releases = case.installation.install_root.join("releases");
            let incomplete = ["1.0.0", "1.1.0"]
                .iter()
                .filter(|version| {
                    let release = releases.join(version);
                    release.exists() && !release.join("execution_service.py").exists()
                })
                .count();
            assert_eq!(incomplete, 1, "one release lost execution_service.py");
        },
        "execution release is incomplete",
    );
}

#[test]
fn a_rerun_finishes_an_uninstall_killed_at_the_unlink_after_releases_1_0_0_version() {
    a_rerun_finishes_an_interrupted_removal(
        agents_tests::test_name!(),
        |calls| after_unlink_of(calls, "/releases/1.0.0/VERSION"),
        |case| {
            let release = case.installation.install_root.join("releases/1.0.0");
            assert!(release.exists() && !release.join("VERSION").exists());
        },
        "VERSION",
    );
}

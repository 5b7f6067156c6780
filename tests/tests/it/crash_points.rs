//! The crash-point campaign: every state-changing operation of the helpers,
//! killed with SIGKILL on entry to each of its durable system calls
//! (`agents_tests::crash_points`), then followed by what an operator or the
//! next caller would run, converges: every file the helpers own is valid,
//! no temporary is left, the units, the layout manifest and `current` are
//! all the old installation or all the new one, systemd runs exactly the
//! processes the receipts name, the worker's admission and the install lock
//! are free, and nothing outside the installation changed.
//!
//! A normal run samples seven points per operation (the first, the last and
//! five spread between); `scripts/crash-points.sh` runs them all
//! (`AGENTS_CRASH_POINTS=all`) and prints one line per operation.

use std::path::PathBuf;

use crate::crash_points_support;
use crate::execution_manage_support;
use crate::publish_support;
use crate::uninstall_support;
use crate::update_handoff_support;
use crate::update_runner_support;

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::crash_points::{
    helper_injection, run_point, run_traced, run_traced_with_stdin, Campaign, DurableCall,
    Injection, PointResult, Traced,
};
use agents_tests::power_cut::CrashState;
use agents_tests::upstream::Upstream;
use crash_points_support::runner_recovery::{
    runner_injection, InterruptedInstall, RecoveryEnd, RecoveryScene,
};
use crash_points_support::{assert_no_temporaries, assert_unlocked_or_reapable, Outside};
use execution_manage_support::{Site, NEW, OLD};
use uninstall_support::split::SplitCase;
use uninstall_support::{Implementation, Input, LegacyCase, LegacyOptions, Pty};
use update_handoff_support::Case as HandoffCase;
use update_runner_support::{Fixture, Side};

use agents_common::ExecutionLayout;

/// Which `execution-manage apply` a campaign runs.
#[derive(Clone, Copy)]
enum Scope {
    /// A first split install from nothing (release NEW for both).
    Migration,
    /// The worker of a running OLD installation to NEW.
    Worker,
    /// The gateway of a running OLD installation to NEW.
    Gateway,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Migration => "migration",
            Scope::Worker => "worker",
            Scope::Gateway => "gateway",
        }
    }

    /// A fresh scene: the site and the layouts before and after.
    fn site(self, test: &str) -> Option<(Site, Option<ExecutionLayout>, ExecutionLayout)> {
        Some(match self {
            Scope::Migration => {
                let site = Site::empty(test)?;
                let new = site.layout(NEW, NEW);
                (site, None, new)
            }
            Scope::Worker => {
                let site = Site::running(test)?;
                let (old, new) = (site.layout(OLD, OLD), site.layout(NEW, OLD));
                (site, Some(old), new)
            }
            Scope::Gateway => {
                let site = Site::running(test)?;
                let (old, new) = (site.layout(OLD, OLD), site.layout(OLD, NEW));
                (site, Some(old), new)
            }
        })
    }
}

/// `apply` of `layout` under the tracer, killed at `kill_at`.
fn traced_apply(
    site: &Site,
    layout: &ExecutionLayout,
    scope: Scope,
    kill_at: Option<usize>,
) -> Traced {
    site.apply_traced(layout, scope.name(), kill_at)
}

/// `recover` under the tracer, killed at `kill_at`.
fn traced_recover(site: &Site, kill_at: Option<usize>) -> Traced {
    site.recover_traced(kill_at)
}

/// What support staff run after a killed `apply` or `recover`: `recover`
/// while a journal is pending, then `apply` again unless the installation
/// is already the new one. Then every invariant of the new installation.
fn converge(
    site: &Site,
    old: Option<&ExecutionLayout>,
    new: &ExecutionLayout,
    scope: Scope,
    outside: &Outside,
) {
    if site
        .installation
        .install_root
        .join(".execution-transaction")
        .exists()
    {
        let outcome = site.recover();
        assert_eq!(outcome.code, Some(0), "recover after the kill: {outcome:?}");
    }
    let disk = site.disk();
    let is_new = crash_points_support::is_installation_of(site, new);
    let is_old = match old {
        Some(old) => crash_points_support::is_installation_of(site, old),
        None => {
            disk.worker_unit.is_none()
                && disk.gateway_unit.is_none()
                && disk.manifest.is_none()
                && disk.current.is_none()
        }
    };
    assert!(
        is_new || is_old,
        "neither the old nor the new installation: {disk:?}"
    );
    if let (Some(old), false) = (old, is_new) {
        // Fully old: it still serves, exactly as before.
        site.assert_serving(old);
        assert_eq!(
            site.worker_lease(),
            python_compat::json::Json::Null,
            "admission released"
        );
    }
    if !is_new {
        let outcome = site.apply(new, scope.name());
        assert_eq!(outcome.code, Some(0), "apply again: {outcome:?}");
    }
    assert_new(site, new, outside);
}

/// Every invariant of a finished activation of `new`.
fn assert_new(site: &Site, new: &ExecutionLayout, outside: &Outside) {
    site.assert_files_of(new);
    site.assert_serving(new);
    assert_eq!(
        site.worker_lease(),
        python_compat::json::Json::Null,
        "admission released"
    );
    assert!(site.pending_journal().is_none(), "no journal pending");
    crash_points_support::assert_retired_journals_valid(&site.installation.install_root);
    assert_unlocked_or_reapable(&site.installation.install_root);
    assert_no_temporaries(&site.sandbox, &site.installation);
    outside.assert_unchanged();
}

fn apply_campaign(test: &str, scope: Scope) {
    apply_campaign_by(test, scope, None);
}

/// The report's name of the `execution-manage` that runs: the binary, or
/// the original.
fn manage_program(original: Option<&(Upstream, PathBuf)>) -> &'static str {
    match original {
        None => "execution-manage",
        Some(_) => "original execution_manage.py",
    }
}

/// [`apply_campaign`] of the binary (`original: None`) or of the original
/// `execution_manage.py` in that runtime folder (observed, not required to
/// converge), each recovered by the same program.
fn apply_campaign_by(test: &str, scope: Scope, original: Option<&(Upstream, PathBuf)>) {
    let site_of = |test: &str| {
        scope.site(test).map(|(mut site, old, new)| {
            site.original = original.cloned();
            (site, old, new)
        })
    };
    let Some((site, _old, new)) = site_of(test) else {
        return;
    };
    let outside = Outside::around(&site.sandbox, &site.installation);
    let complete = traced_apply(&site, &new, scope, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    assert_new(&site, &new, &outside);
    drop(site);
    let name = format!(
        "{} apply --scope {}",
        manage_program(original),
        scope.name()
    );
    let campaign = Campaign::of(&name, original.is_some());
    campaign.run(complete.calls.len(), |n| {
        let (site, old, new) = site_of(test).expect("the sandbox ran once");
        let outside = Outside::around(&site.sandbox, &site.installation);
        let traced = traced_apply(&site, &new, scope, Some(n));
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
            assert_new(&site, &new, &outside);
            return PointResult::NotReached;
        };
        converge(&site, old.as_ref(), &new, scope, &outside);
        PointResult::Converged(call)
    });
}

#[test]
fn apply_migration_converges_after_a_kill_at_any_durable_call() {
    apply_campaign(agents_tests::test_name!(), Scope::Migration);
}

#[test]
fn apply_worker_converges_after_a_kill_at_any_durable_call() {
    apply_campaign(agents_tests::test_name!(), Scope::Worker);
}

#[test]
fn apply_gateway_converges_after_a_kill_at_any_durable_call() {
    apply_campaign(agents_tests::test_name!(), Scope::Gateway);
}

/// The upstream modules the originals run under the campaign import
/// (`execution_activation.py`, `execution_manage.py`, `update_handoff.py`).
const ORIGINAL_MODULES: [&str; 5] = [
    "activation_transaction.py",
    "execution_durability.py",
    "execution_http.py",
    "execution_install.py",
    "execution_transport.py",
];

/// A runtime folder of the originals beside the upstream `modules` for
/// `test`, and the sources; `None` after reporting the test skipped.
fn original_runtime(test: &str, modules: &[&str]) -> Option<(Upstream, agents_tests::TempDir)> {
    let upstream = Upstream::require(test, modules)?;
    let runtime = agents_tests::TempDir::new("original-runtime");
    upstream.install_runtime(runtime.path());
    Some((upstream, runtime))
}

/// The original `execution_manage.py apply` of every scope (with the
/// upstream modules) under the same campaign, observed. Run by
/// `scripts/upstream-compare.sh` (all states with `AGENTS_POWER_CUT=all
/// AGENTS_CRASH_POINTS=all`).
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_apply_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some((upstream, runtime)) = original_runtime(test, &ORIGINAL_MODULES) else {
        return;
    };
    let original = (upstream, runtime.path().to_path_buf());
    for scope in [Scope::Migration, Scope::Worker, Scope::Gateway] {
        apply_campaign_by(test, scope, Some(&original));
    }
}

/// The original `execution_manage.py recover` of every scope, of a journal
/// its own `apply` left published or committed, under the same campaign,
/// observed. Run by `scripts/upstream-compare.sh`.
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_recover_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some((upstream, runtime)) = original_runtime(test, &ORIGINAL_MODULES) else {
        return;
    };
    let original = (upstream, runtime.path().to_path_buf());
    for scope in [Scope::Worker, Scope::Gateway, Scope::Migration] {
        for pending in [Pending::Published, Pending::Committed] {
            recover_campaign_by(test, scope, pending, Some(&original));
        }
    }
}

/// The call that leaves an activation pending in `phase`: the durable
/// call right after the journal rename that recorded it.
fn after_journal_phase(calls: &[DurableCall], phase_index: usize) -> usize {
    let renames: Vec<usize> = calls
        .iter()
        .filter(|call| {
            call.call.starts_with("rename")
                && call.paths.ends_with(".execution-transaction/manifest.json")
        })
        .map(|call| call.number)
        .collect();
    renames[phase_index] + 1
}

/// Where `recover` takes over a killed activation: once published
/// (services stopped, files new, journal `published`; recovery rolls back)
/// or once committed (recovery finishes).
#[derive(Clone, Copy)]
enum Pending {
    Published,
    Committed,
}

impl Pending {
    /// The index of the journal rename that records this phase.
    fn rename_index(self) -> usize {
        match self {
            Pending::Published => 1,
            Pending::Committed => 2,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Pending::Published => "published, rolls back",
            Pending::Committed => "committed, finishes",
        }
    }
}

/// An activation of `scope` killed once `pending`, then `recover` itself
/// killed at each of its durable calls.
fn recover_campaign(test: &str, scope: Scope, pending: Pending) {
    recover_campaign_by(test, scope, pending, None);
}

/// [`recover_campaign`] of the binary (`original: None`) or of the original
/// `execution_manage.py` in that runtime folder (its own apply leaving the
/// journal; observed, not required to converge).
fn recover_campaign_by(
    test: &str,
    scope: Scope,
    pending: Pending,
    original: Option<&(Upstream, PathBuf)>,
) {
    let program = manage_program(original);
    let name = match scope {
        // The figures docs/design/crash-safety.md quotes name the worker campaigns this way.
        Scope::Worker => format!("{program} recover ({})", pending.describe()),
        _ => format!(
            "{program} recover --scope {} ({})",
            scope.name(),
            pending.describe()
        ),
    };
    let phase_index = pending.rename_index();
    let site_of = |test: &str| {
        scope.site(test).map(|(mut site, old, new)| {
            site.original = original.cloned();
            (site, old, new)
        })
    };
    let Some((site, _old, new)) = site_of(test) else {
        return;
    };
    let complete = traced_apply(&site, &new, scope, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let pending_at = after_journal_phase(&complete.calls, phase_index);
    drop(site);
    let scene = || {
        let (site, old, new) = site_of(test).expect("the sandbox ran once");
        let outside = Outside::around(&site.sandbox, &site.installation);
        let killed = agents_tests::power_cut::scene_setup(|| {
            traced_apply(&site, &new, scope, Some(pending_at))
        });
        assert!(killed.killed.is_some(), "apply was killed at #{pending_at}");
        (site, old, new, outside)
    };
    let (site, old, new, outside) = scene();
    let complete = traced_recover(&site, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    converge(&site, old.as_ref(), &new, scope, &outside);
    drop(site);
    let campaign = Campaign::of(&name, original.is_some());
    campaign.run(complete.calls.len(), |n| {
        let (site, old, new, outside) = scene();
        let traced = traced_recover(&site, Some(n));
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
            converge(&site, old.as_ref(), &new, scope, &outside);
            return PointResult::NotReached;
        };
        converge(&site, old.as_ref(), &new, scope, &outside);
        PointResult::Converged(call)
    });
}

#[test]
fn recover_of_a_published_activation_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Worker,
        Pending::Published,
    );
}

#[test]
fn recover_of_a_committed_activation_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Worker,
        Pending::Committed,
    );
}

#[test]
fn recover_of_a_published_gateway_activation_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Gateway,
        Pending::Published,
    );
}

#[test]
fn recover_of_a_committed_gateway_activation_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Gateway,
        Pending::Committed,
    );
}

#[test]
fn recover_of_a_published_migration_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Migration,
        Pending::Published,
    );
}

#[test]
fn recover_of_a_committed_migration_converges_after_a_kill_at_any_durable_call() {
    recover_campaign(
        agents_tests::test_name!(),
        Scope::Migration,
        Pending::Committed,
    );
}

/// `uninstall.sh`'s command line (`--yes`, `--purge-state` when purging)
/// with the roots of `case` in the environment, as an operator runs it.
fn uninstall_script(
    case: &SplitCase,
    purge: bool,
) -> (Vec<(String, std::ffi::OsString)>, Vec<&'static str>) {
    let env = case.script_env();
    let mut args = vec!["--yes"];
    if purge {
        args.push("--purge-state");
    }
    (env, args)
}

/// The typed answer to the purge guard, if any.
fn uninstall_input(case: &SplitCase, purge: bool) -> Input {
    if purge {
        let typed = format!("{}\n", case.installation.state_root.display());
        Input::Terminal(typed.into_bytes())
    } else {
        Input::Null
    }
}

/// The uninstall of `case` by `implementation` under the tracer, killed at
/// `kill_at`. uninstall.sh execs the Python helper in its own process, so
/// the tracer follows the original there without following any child.
fn traced_uninstall(
    case: &SplitCase,
    implementation: Implementation<'_>,
    purge: bool,
    kill_at: Option<usize>,
) -> Traced {
    let (env, args) = uninstall_script(case, purge);
    let mut command = implementation.command();
    command
        .args(&args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .current_dir("/");
    let pty = purge.then(Pty::open);
    let stdin = match &pty {
        Some(pty) => {
            if let Input::Terminal(typed) = uninstall_input(case, purge) {
                pty.type_input(&typed);
            }
            pty.slave_stdio()
        }
        None => std::process::Stdio::null(),
    };
    run_traced_with_stdin(&command, &helper_injection(), kill_at, stdin)
}

/// Everything a finished uninstall leaves: the roots and units gone, the
/// services' processes ended, the state kept byte for byte (or purged) with
/// no temporary in it, nothing outside changed.
fn assert_uninstalled(
    case: &SplitCase,
    purge: bool,
    state: &[(String, Option<Vec<u8>>)],
    outside: &Outside,
) {
    let i = &case.installation;
    assert!(!i.install_root.exists(), "install root removed");
    assert!(!i.config_root.exists(), "config root removed");
    for unit in [WORKER_UNIT, GATEWAY_UNIT] {
        assert!(
            !case.sandbox.unit_dir().join(unit).exists(),
            "{unit} removed"
        );
        let state = case.unit(unit);
        assert_eq!(
            (state.load_state.as_str(), state.main_pid),
            ("not-found", 0),
            "{unit}"
        );
    }
    for pid in [case.services.worker_pid, case.services.gateway_pid] {
        assert!(
            !agents_tests::process_alive(pid),
            "service process {pid} ended"
        );
    }
    if purge {
        assert!(!i.state_root.exists(), "state purged");
    } else {
        assert_eq!(case.state_files(), state, "state kept byte for byte");
    }
    assert_no_temporaries(&case.sandbox, i);
    outside.assert_unchanged();
}

fn uninstall_campaign(test: &str, name: &str, purge: bool) {
    uninstall_campaign_by(test, name, Implementation::Port, purge);
}

/// [`uninstall_campaign`] of `implementation` (an original's campaign is
/// observed).
fn uninstall_campaign_by(test: &str, name: &str, implementation: Implementation<'_>, purge: bool) {
    let Some(case) = SplitCase::start(test) else {
        return;
    };
    let state = case.state_files();
    let outside = Outside::around(&case.sandbox, &case.installation);
    let complete = traced_uninstall(&case, implementation, purge, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    assert_uninstalled(&case, purge, &state, &outside);
    drop(case);
    let campaign = Campaign::of(name, implementation.is_original());
    campaign.run(complete.calls.len(), |n| {
        uninstall_point(test, implementation, purge, n)
    });
}

/// The split uninstall killed at its `n`-th durable call, then the same
/// uninstall again, and everything a finished uninstall leaves.
fn uninstall_point(
    test: &str,
    implementation: Implementation<'_>,
    purge: bool,
    n: usize,
) -> PointResult {
    let case = SplitCase::start(test).expect("the sandbox ran once");
    let state = case.state_files();
    let outside = Outside::around(&case.sandbox, &case.installation);
    let traced = traced_uninstall(&case, implementation, purge, Some(n));
    let Some(call) = traced.killed else {
        assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
        assert_uninstalled(&case, purge, &state, &outside);
        return PointResult::NotReached;
    };
    // The operator runs the same uninstall again.
    let (env, args) = uninstall_script(&case, purge);
    let again = uninstall_support::run(implementation, &env, &args, uninstall_input(&case, purge));
    assert_eq!(
        again.status.code(),
        Some(0),
        "the same uninstall again: {again:?}"
    );
    assert_uninstalled(&case, purge, &state, &outside);
    PointResult::Converged(call)
}

#[test]
fn split_uninstall_converges_after_a_kill_at_any_durable_call() {
    uninstall_campaign(agents_tests::test_name!(), "uninstall (split)", false);
}

#[test]
fn split_uninstall_purging_state_converges_after_a_kill_at_any_durable_call() {
    uninstall_campaign(
        agents_tests::test_name!(),
        "uninstall --purge-state (split)",
        true,
    );
}

/// The upstream modules the original split uninstall and update_runner.py
/// import, directly or through the other originals: all but the legacy
/// runner, which no campaign reaches.
fn release_modules() -> Vec<&'static str> {
    agents_tests::upstream::UPSTREAM_MODULES
        .into_iter()
        .filter(|name| *name != "execution_legacy_runner.py")
        .collect()
}

/// The original split uninstall (`uninstall.sh`, which execs the upstream
/// `execution_uninstall.py` beside it), keeping and purging the state, under
/// the same campaign, observed. Run by `scripts/upstream-compare.sh`.
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_split_uninstall_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some((_upstream, runtime)) = original_runtime(test, &release_modules()) else {
        return;
    };
    let original = Implementation::Release(runtime.path());
    for (name, purge) in [
        ("original uninstall.sh (split)", false),
        ("original uninstall.sh --purge-state (split)", true),
    ] {
        uninstall_campaign_by(test, name, original, purge);
    }
}

/// A legacy (single-service) installation with its service running, and an
/// alias naming its state when purging.
fn legacy_case(test: &str, purge: bool) -> Option<LegacyCase> {
    LegacyCase::start(
        test,
        LegacyOptions {
            service: true,
            team_hub: true,
            legacy_alias: purge,
            ..Default::default()
        },
    )
}

/// `uninstall.sh --yes [--purge-state]` of `implementation` on `case`,
/// under the tracer (the original followed into the commands it runs, but
/// for `systemctl`, as the binary is traced without the commands it runs).
fn traced_legacy(
    case: &LegacyCase,
    implementation: Implementation<'_>,
    purge: bool,
    kill_at: Option<usize>,
) -> Traced {
    let mut command = implementation.command();
    command
        .args(legacy_args(purge))
        .env_clear()
        .envs(case.env())
        .current_dir("/");
    let mut injection = helper_injection();
    if implementation.is_original() {
        injection.follow = true;
        injection.exclude = vec!["systemctl".to_string()];
    }
    let pty = purge.then(Pty::open);
    let stdin = match &pty {
        Some(pty) => {
            pty.type_input(format!("{}\n", case.roots.state.display()).as_bytes());
            pty.slave_stdio()
        }
        None => std::process::Stdio::null(),
    };
    run_traced_with_stdin(&command, &injection, kill_at, stdin)
}

fn legacy_args(purge: bool) -> Vec<&'static str> {
    if purge {
        vec!["--yes", "--purge-state"]
    } else {
        vec!["--yes"]
    }
}

/// Everything a finished legacy uninstall leaves: install and config roots
/// and the unit gone, the service stopped, the state kept byte for byte (or
/// purged with its alias), no temporary beside the roots, nothing outside
/// changed.
fn assert_legacy_uninstalled(
    case: &LegacyCase,
    purge: bool,
    state: &std::collections::BTreeMap<std::path::PathBuf, uninstall_support::Entry>,
    outside: &Outside,
) {
    let roots = &case.roots;
    assert!(!roots.install.exists(), "install root removed");
    assert!(!roots.config.exists(), "config root removed");
    assert!(!roots.unit_file().exists(), "unit removed");
    let unit = case.sandbox.unit_state(uninstall_support::LEGACY_UNIT);
    assert!(!unit.is_running(), "service stopped: {unit:?}");
    if let Some(pid) = case.service_pid {
        assert!(!agents_tests::process_alive(pid), "service process ended");
    }
    if purge {
        assert!(!roots.state.exists(), "state purged");
        assert!(std::fs::symlink_metadata(roots.home.join(".zenithbot-agent")).is_err());
    } else {
        assert_eq!(
            &uninstall_support::snapshot(&roots.state),
            state,
            "state kept"
        );
    }
    let beside = roots.install.parent().expect("the install root's parent");
    let left: Vec<String> = crash_points_support::sorted_names(beside)
        .into_iter()
        .filter(|name| crash_points_support::is_temporary(name))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
    outside.assert_unchanged();
}

/// The legacy uninstall of `implementation` killed at each durable call,
/// then run again.
fn legacy_campaign(test: &str, name: &str, implementation: Implementation<'_>, purge: bool) {
    let Some(case) = legacy_case(test, purge) else {
        return;
    };
    let state = uninstall_support::snapshot(&case.roots.state);
    let outside = legacy_outside(&case);
    let complete = traced_legacy(&case, implementation, purge, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    assert_legacy_uninstalled(&case, purge, &state, &outside);
    drop(case);
    let campaign = Campaign::of(name, implementation.is_original());
    campaign.run(complete.calls.len(), |n| {
        let case = legacy_case(test, purge).expect("the sandbox ran once");
        let state = uninstall_support::snapshot(&case.roots.state);
        let outside = legacy_outside(&case);
        let traced = traced_legacy(&case, implementation, purge, Some(n));
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
            assert_legacy_uninstalled(&case, purge, &state, &outside);
            return PointResult::NotReached;
        };
        let input = if purge {
            Input::Terminal(format!("{}\n", case.roots.state.display()).into_bytes())
        } else {
            Input::Null
        };
        let again = uninstall_support::run(implementation, &case.env(), &legacy_args(purge), input);
        assert_eq!(
            again.status.code(),
            Some(0),
            "the same uninstall again: {again:?}"
        );
        assert_legacy_uninstalled(&case, purge, &state, &outside);
        PointResult::Converged(call)
    });
}

fn legacy_outside(case: &LegacyCase) -> Outside {
    Outside::beside(&case.sandbox, &case.roots.home)
}

#[test]
fn legacy_uninstall_converges_after_a_kill_at_any_durable_call() {
    legacy_campaign(
        agents_tests::test_name!(),
        "uninstall (legacy)",
        Implementation::Port,
        false,
    );
}

#[test]
fn legacy_uninstall_purging_state_converges_after_a_kill_at_any_durable_call() {
    legacy_campaign(
        agents_tests::test_name!(),
        "uninstall --purge-state (legacy)",
        Implementation::Port,
        true,
    );
}

#[test]
fn original_legacy_uninstall_sh_after_a_kill_at_any_durable_call() {
    let originals = agents_tests::require_originals!();
    legacy_campaign(
        agents_tests::test_name!(),
        "original uninstall.sh (legacy)",
        Implementation::Original(&originals),
        false,
    );
}

#[test]
fn original_legacy_uninstall_sh_purging_state_after_a_kill_at_any_durable_call() {
    let originals = agents_tests::require_originals!();
    legacy_campaign(
        agents_tests::test_name!(),
        "original uninstall.sh --purge-state (legacy)",
        Implementation::Original(&originals),
        true,
    );
}

/// The update the server admits after a runner died: a fresh row (its
/// unknown keys kept) for a new update id, as the server admits a retry.
const RETRY_ID: &str = "fedcba9876543210fedcba9876543210";

/// A signed schema-1 release of 1.2.3 on the local release host.
fn runner_fixture(name: &str) -> Fixture {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    fixture
}

/// The row after a run: it parses as the server's row and keeps the
/// server's own keys.
fn assert_row_valid(row: &python_compat::json::JsonObject, update_id: &str) {
    assert_eq!(
        row.get("update_id")
            .and_then(python_compat::json::Json::as_str),
        Some(update_id),
        "the row still names its update: {row:?}"
    );
    assert_eq!(
        row.get("unknown_server_key")
            .and_then(|kept| kept.get("kept")),
        Some(&python_compat::json::Json::Bool(true)),
        "the server's own keys survive: {row:?}"
    );
}

/// No temporary of the status row (or any other) is left in `admin`.
fn assert_no_admin_temporaries(admin: &std::path::Path) {
    let left: Vec<String> = crash_points_support::sorted_names(admin)
        .into_iter()
        .filter(|name| crash_points_support::is_temporary(name))
        .collect();
    assert!(left.is_empty(), "temporaries left in admin: {left:?}");
}

/// A managed update killed at each durable call of the runner (`side`),
/// then what the server does next: it admits the update again (a fresh
/// update id, its installer's record reset) and the next runner of the same
/// side completes it. Checked: the row the killed runner left parses and
/// keeps the server's keys; the retry ends `complete` (terminal) with the
/// installer run; no temporary is left in the state's admin directory.
fn runner_campaign(name: &str, side: Side<'_>) {
    let fixture = runner_fixture(&name.replace([' ', '.', '(', ')', ','], "-"));
    runner_campaign_with(name, side, &fixture);
}

/// [`runner_campaign`] of the update `fixture` admits.
fn runner_campaign_with(name: &str, side: Side<'_>, fixture: &Fixture) {
    // The fixture's runners inherit the test's environment (python3 on PATH).
    let injection = Injection {
        inherit_environment: true,
        ..helper_injection()
    };
    let complete = run_traced(&fixture.command(side), &injection, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let campaign = Campaign::of(name, matches!(side, Side::Original(_)));
    campaign.run(complete.calls.len(), |n| {
        let traced = run_traced(&fixture.command(side), &injection, Some(n));
        let run = fixture.run_dir(side);
        let admin = run.join("state/admin");
        let status = admin.join("server-update.json");
        let row = agents_common::read_status_unlocked(&status).expect("the row reads");
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
            assert_row_valid(&row, update_runner_support::UPDATE_ID);
            assert_no_admin_temporaries(&admin);
            return PointResult::NotReached;
        };
        assert_row_valid(&row, update_runner_support::UPDATE_ID);
        // The server admits the update again.
        let _ = std::fs::remove_file(run.join("installer/installed"));
        let _ = std::fs::remove_file(run.join("installer/installer.record"));
        let mut retry = fixture.admitted.clone();
        retry.insert("update_id", RETRY_ID);
        fixture.admit(side, &retry, RETRY_ID);
        let output = fixture
            .runner(side, RETRY_ID)
            .output()
            .expect("the next runner runs");
        let outcome = fixture.outcome(side, &output);
        assert_eq!(outcome.exit, Some(0), "the next runner: {outcome:?}");
        assert_eq!(
            outcome.row.get("phase"),
            Some(&python_compat::json::Json::from("complete"))
        );
        assert_row_valid(&outcome.row, RETRY_ID);
        assert!(outcome.installer.is_some(), "install.sh ran");
        assert_no_admin_temporaries(&admin);
        PointResult::Converged(call)
    });
}

#[test]
fn update_runner_converges_after_a_kill_at_any_durable_call() {
    runner_campaign(
        "update-runner (download, extraction, status writes)",
        Side::Port,
    );
}

#[test]
fn original_update_runner_py_after_a_kill_at_any_durable_call() {
    let originals = agents_tests::require_originals!();
    runner_campaign(
        "original update_runner.py (download, extraction, status writes)",
        Side::Original(&originals),
    );
}

/// `update-handoff release` (or `retry-failed` of the saved failed status,
/// given as a file) of `case`, traced and killed at `kill_at`.
fn traced_handoff(case: &HandoffCase, retry: bool, kill_at: Option<usize>) -> Traced {
    let mut command = case.command();
    if retry {
        let expected = case.installation.state_root.join("expected-status.json");
        std::fs::write(
            &expected,
            python_compat::json::encode_indented(&case.failed_status().into()),
        )
        .expect("write the expected status");
        command
            .arg("retry-failed")
            .arg("--root")
            .arg(&case.installation.install_root)
            .arg("--status-file")
            .arg(case.status_path())
            .arg("--expected-status")
            .arg(expected);
    } else {
        command
            .arg("release")
            .arg("--root")
            .arg(&case.installation.install_root)
            .arg("--handoff-file")
            .arg(case.handoff_path());
    }
    run_traced(&command, &helper_injection(), kill_at)
}

/// A handoff to release: the worker holds the failed update's sealed
/// lease; for a retry, the runner's saved failed status owns it.
fn handoff_case(test: &str, retry: bool) -> Option<HandoffCase> {
    let case = HandoffCase::start(test)?;
    if retry {
        case.write_status(&case.failed_status());
    }
    Some(case)
}

/// Everything after the handoff's release: the worker (same process) holds
/// no lease, the install tree and the status file are as before but for a
/// free lock, no temporary is left, nothing outside changed.
fn assert_handoff_released(
    case: &HandoffCase,
    before: &std::collections::BTreeMap<std::path::PathBuf, update_handoff_support::Entry>,
    status: &Option<Vec<u8>>,
    outside: &Outside,
) {
    assert!(
        case.worker_lease().is_null(),
        "the worker's admission is released"
    );
    let unit = case.sandbox.unit_state(WORKER_UNIT);
    assert_eq!(
        unit.main_pid, case.services.worker_pid,
        "the same worker serves"
    );
    assert_unlocked_or_reapable(&case.installation.install_root);
    let mut tree = case.install_tree();
    tree.retain(|path, _| !path.starts_with(".install-lock"));
    assert_eq!(&tree, before, "the installation is unchanged");
    assert_eq!(
        &std::fs::read(case.status_path()).ok(),
        status,
        "the status row is unchanged"
    );
    assert_no_temporaries(&case.sandbox, &case.installation);
    outside.assert_unchanged();
}

/// The handoff release (or retry) killed at each durable call, then run
/// again: it releases the hold, or reports it already released.
fn handoff_campaign(test: &str, name: &str, retry: bool) {
    handoff_campaign_by(test, name, retry, None);
}

/// [`handoff_campaign`] of the binary (`original: None`) or of the original
/// `update_handoff.py` (the upstream sources and a runtime folder; observed,
/// not required to converge), each run again by the same program.
fn handoff_campaign_by(
    test: &str,
    name: &str,
    retry: bool,
    original: Option<&(Upstream, PathBuf)>,
) {
    let case_of = |test: &str| {
        handoff_case(test, retry).map(|mut case| {
            case.original = original.cloned();
            case
        })
    };
    let Some(case) = case_of(test) else {
        return;
    };
    let complete = traced_handoff(&case, retry, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    drop(case);
    let campaign = Campaign::of(name, original.is_some());
    campaign.run(complete.calls.len(), |n| {
        let case = case_of(test).expect("the sandbox ran once");
        let before = case.install_tree();
        let status = std::fs::read(case.status_path()).ok();
        let outside = Outside::around(&case.sandbox, &case.installation);
        let traced = traced_handoff(&case, retry, Some(n));
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
            assert_handoff_released(&case, &before, &status, &outside);
            return PointResult::NotReached;
        };
        let again = traced_handoff(&case, retry, None).outcome;
        // A release the killed run already made leaves nothing to release:
        // `release` refuses the spent handoff, `retry-failed` acknowledges it.
        let spent = again.code == Some(1)
            && again.stderr == "RuntimeError: worker no longer holds the exact sealed handoff\n";
        assert!(
            again.code == Some(0) || (!retry && spent),
            "run again: {again:?}"
        );
        assert_handoff_released(&case, &before, &status, &outside);
        PointResult::Converged(call)
    });
}

#[test]
fn handoff_release_converges_after_a_kill_at_any_durable_call() {
    handoff_campaign(agents_tests::test_name!(), "update-handoff release", false);
}

/// The original `update_handoff.py` `release` and `retry-failed` (with the
/// upstream modules, through the upstream comparison's driver) under the
/// same campaign, observed. Run by `scripts/upstream-compare.sh`.
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_handoff_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some((upstream, runtime)) = original_runtime(test, &ORIGINAL_MODULES) else {
        return;
    };
    let original = (upstream, runtime.path().to_path_buf());
    for (name, retry) in [
        ("original update_handoff.py release", false),
        ("original update_handoff.py retry-failed", true),
    ] {
        handoff_campaign_by(test, name, retry, Some(&original));
    }
}

#[test]
fn handoff_retry_failed_converges_after_a_kill_at_any_durable_call() {
    handoff_campaign(
        agents_tests::test_name!(),
        "update-handoff retry-failed",
        true,
    );
}

/// Nothing but the journal's own manifest is left in install.sh's journal
/// directory, and no staging name of any published kind.
fn assert_publication_clean(case: &publish_support::Case) {
    for kind in ["service", "gateway", "execution_layout"] {
        assert!(case.staging_left(kind).is_empty(), "{kind} staging left");
    }
    let journal = crash_points_support::sorted_names(&case.install.journal());
    assert!(
        journal
            .iter()
            .all(|name| !crash_points_support::is_temporary(name)),
        "journal temporaries: {journal:?}"
    );
    for directory in [case.install.unit_dir(), case.install.root()] {
        let left: Vec<String> = crash_points_support::sorted_names(&directory)
            .into_iter()
            .filter(|name| crash_points_support::is_temporary(name))
            .collect();
        assert!(left.is_empty(), "temporaries left: {left:?}");
    }
}

/// install.sh's `publish` (units and layout manifest through the
/// activation journal, `replace_config` for each) killed at each durable
/// call, then install.sh's next step: `publish` again, which must write the
/// exact golden renderings and leave the journal valid in `linked`.
#[test]
fn activation_publish_converges_after_a_kill_at_any_durable_call() {
    let complete = complete_publish();
    Campaign::new("execution-activation publish (replace_config)")
        .run(complete.calls.len(), publish_point);
}

fn publish_injection() -> Injection {
    Injection {
        inherit_environment: true,
        ..helper_injection()
    }
}

/// A whole traced `publish`, checked.
fn complete_publish() -> Traced {
    let case = publish_support::case("linux-basic");
    let complete = run_traced(&case.publish_command(), &publish_injection(), None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    case.assert_published();
    complete
}

/// `publish` killed at its `n`-th durable call, then run again.
fn publish_point(n: usize) -> PointResult {
    let case = publish_support::case("linux-basic");
    let traced = run_traced(&case.publish_command(), &publish_injection(), Some(n));
    let Some(call) = traced.killed else {
        assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
        case.assert_published();
        assert_publication_clean(&case);
        return PointResult::NotReached;
    };
    let again = case.publish();
    assert_eq!(again.status.code(), Some(0), "publish again: {again:?}");
    case.assert_published();
    assert_publication_clean(&case);
    PointResult::Converged(call)
}

/// Runs `publish` stopped by a power cut in `state` at its last durable
/// call that is `call` on a path containing `fragment`, and asserts that
/// the rerun converges.
fn publish_power_cut_converges(call: &str, fragment: &str, state: CrashState) {
    let complete = complete_publish();
    let at = complete
        .calls
        .iter()
        .rev()
        .find(|durable| durable.is(call, fragment))
        .unwrap_or_else(|| panic!("no {call} of {fragment}: {:?}", complete.calls))
        .number;
    let (result, built) = run_point(at, Some(state), &mut publish_point);
    // With the fix the state may equal the SIGKILL one: nothing is lost.
    let (_, changes) = built.expect("the power cut was built");
    assert!(
        result.is_ok(),
        "{call} {fragment} ({}), lost {}: publish again does not converge",
        state.name(),
        changes.summary()
    );
}

/// Found by the power-cut campaign: the journal named the gateway unit's
/// staged `.source` before the unit directory holding that name was synced,
/// so a power cut at the source's `fchmod` to its published mode (the call
/// right after the journal's rewrite) could lose the name the journal
/// already counted on, and `publish` again refused forever ("activation
/// configuration publication is incomplete"). `replace_config` now syncs the
/// source's directory before the journal names it (the original does not).
#[test]
fn publish_power_cut_at_the_staged_source_fchmod_loses_no_source_name() {
    publish_power_cut_converges("fchmod", "gateway.source", CrashState::Lost);
    publish_power_cut_converges("fchmod", "execution_layout.source", CrashState::Lost);
}

/// Found by the power-cut campaign: the control token was created under its
/// own name and fsynced after its bytes were written, so a power cut before
/// that fsync could keep the name with no bytes (the rename-before-data
/// ordering), a token every later call refuses ("Invalid execution secret
/// file"). The token is now written and synced under a staging name and
/// renamed into place (the original creates the name first).
#[test]
fn publish_power_cut_at_the_control_token_fsync_loses_no_token_bytes() {
    publish_power_cut_converges("fsync", "control.token", CrashState::NamesBeforeData);
    publish_power_cut_converges("fsync", "control.token", CrashState::Lost);
}

/// The original `execution_activation.py publish` (with the upstream
/// modules) under the same campaign, observed: each crash state it does not
/// converge from is listed, the binary's must all converge. Run by
/// `scripts/upstream-compare.sh` (all states with `AGENTS_POWER_CUT=all
/// AGENTS_CRASH_POINTS=all`).
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_publish_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some((_upstream, runtime)) = original_runtime(test, &ORIGINAL_MODULES) else {
        return;
    };
    let command = |case: &publish_support::Case| case.original_publish_command(runtime.path());
    let case = publish_support::case("linux-basic");
    let complete = run_traced(&command(&case), &publish_injection(), None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    case.assert_published();
    drop(case);
    Campaign::observing("original execution_activation.py publish (replace_config)").run(
        complete.calls.len(),
        |n| {
            let case = publish_support::case("linux-basic");
            let traced = run_traced(&command(&case), &publish_injection(), Some(n));
            let Some(call) = traced.killed else {
                assert_eq!(traced.outcome.code, Some(0), "{:?}", traced.outcome);
                case.assert_published();
                return PointResult::NotReached;
            };
            let again = command(&case).output().expect("run the original again");
            assert_eq!(again.status.code(), Some(0), "publish again: {again:?}");
            case.assert_published();
            assert_publication_clean(&case);
            PointResult::Converged(call)
        },
    );
}

/// The prepared activation (`--prepared-receipt`: a staged candidate, its
/// receipt, the signed envelope the server admitted, the recovery intent
/// recorded before install.sh runs) killed at each durable call of the
/// runner, then admitted again and completed by the next runner.
#[test]
fn update_runner_prepared_activation_converges_after_a_kill_at_any_durable_call() {
    let prepared = update_runner_support::prepared::Prepared::new("crash-prepared");
    runner_campaign_with(
        "update-runner --prepared-receipt (prepared activation)",
        Side::Port,
        &prepared.fixture,
    );
}

/// `update-runner --recover-only` (the server's relaunch of an interrupted
/// activation through the running release's install.sh) killed at each
/// durable call, then what the server does next: `--recover-only` again
/// while the journal is retained, or its finalisation of the abandoned row
/// once install.sh retired the journal. The update ends as install.sh's
/// recovery ends it (`end`), on a terminal row, with nothing left behind.
fn recover_only_campaign(name: &str, tag: &str, end: RecoveryEnd) {
    recover_only_campaign_by(name, tag, end, None);
}

/// [`recover_only_campaign`] of the binary, or of the original with
/// `upstream`'s modules (observed).
fn recover_only_campaign_by(name: &str, tag: &str, end: RecoveryEnd, upstream: Option<&Upstream>) {
    let scene = RecoveryScene::new(tag, end, upstream);
    let complete = scene.traced(None);
    let expected = Some(0);
    assert_eq!(complete.outcome.code, expected, "{:?}", complete.outcome);
    scene.assert_ended();
    drop(scene);
    let campaign = Campaign::of(name, upstream.is_some());
    campaign.run(complete.calls.len(), |n| {
        let scene = RecoveryScene::new(tag, end, upstream);
        let traced = scene.traced(Some(n));
        let Some(call) = traced.killed else {
            assert_eq!(traced.outcome.code, expected, "{:?}", traced.outcome);
            scene.assert_ended();
            return PointResult::NotReached;
        };
        scene.converge_after_kill();
        PointResult::Converged(call)
    });
}

#[test]
fn update_runner_recover_only_finishing_converges_after_a_kill_at_any_durable_call() {
    recover_only_campaign(
        "update-runner --recover-only (install.sh finishes)",
        "crash-recover-finishes",
        RecoveryEnd::Finishes,
    );
}

#[test]
fn update_runner_recover_only_rolling_back_converges_after_a_kill_at_any_durable_call() {
    recover_only_campaign(
        "update-runner --recover-only (install.sh rolls back)",
        "crash-recover-rolls-back",
        RecoveryEnd::RollsBack,
    );
}

/// A prepared update whose install.sh died after beginning its journal:
/// the first runner records the retained activation for recovery
/// (`server_update_recovery_pending`). The first runner killed at each
/// durable call, then the server's next step: `--recover-only` where the
/// row hands the journal to recovery, otherwise the abandoned update
/// finalised and admitted again. Every path ends complete.
#[test]
fn update_runner_interrupted_install_converges_through_recovery_after_a_kill_at_any_durable_call() {
    interrupted_install_campaign(
        "update-runner --prepared-receipt, install.sh interrupted (then --recover-only)",
        "crash-interrupted",
        None,
    );
}

/// The interrupted install's campaign of the binary, or of the original
/// with `upstream`'s modules (observed).
fn interrupted_install_campaign(name: &str, tag: &str, upstream: Option<&Upstream>) {
    let mut scene = InterruptedInstall::new(tag, upstream);
    let command = scene.first_run();
    let complete = run_traced(&command, &runner_injection(), None);
    assert_eq!(complete.outcome.code, Some(1), "{:?}", complete.outcome);
    scene.converge();
    let campaign = Campaign::of(name, upstream.is_some());
    campaign.run(complete.calls.len(), |n| {
        let command = scene.first_run();
        let traced = run_traced(&command, &runner_injection(), Some(n));
        scene.converge();
        match traced.killed {
            Some(call) => PointResult::Converged(call),
            None => PointResult::NotReached,
        }
    });
}

/// The original `update_runner.py` of a prepared activation
/// (`--prepared-receipt`), of `--recover-only` (install.sh finishing and
/// rolling back) and of a prepared update whose install.sh was interrupted,
/// with the upstream modules, under the same campaigns, observed. Run by
/// `scripts/upstream-compare.sh`.
#[test]
#[ignore = "needs the upstream modules: scripts/upstream-compare.sh runs it"]
fn an_original_runner_converges_where_the_binary_does() {
    let test = agents_tests::test_name!();
    let Some(upstream) = Upstream::require(test, &release_modules()) else {
        return;
    };
    let mut prepared = update_runner_support::prepared::Prepared::new("crash-prepared-original");
    prepared.fixture.upstream = Some(upstream.modules().to_path_buf());
    runner_campaign_with(
        "original update_runner.py --prepared-receipt (prepared activation)",
        Side::Original(upstream.originals()),
        &prepared.fixture,
    );
    drop(prepared);
    for (name, tag, end) in [
        (
            "original update_runner.py --recover-only (install.sh finishes)",
            "crash-recover-finishes-original",
            RecoveryEnd::Finishes,
        ),
        (
            "original update_runner.py --recover-only (install.sh rolls back)",
            "crash-recover-rolls-back-original",
            RecoveryEnd::RollsBack,
        ),
    ] {
        recover_only_campaign_by(name, tag, end, Some(&upstream));
    }
    interrupted_install_campaign(
        "original update_runner.py --prepared-receipt, install.sh interrupted (then --recover-only)",
        "crash-interrupted-original",
        Some(&upstream),
    );
}

/// `apply --scope worker` of `site` run by the `execution-manage` at
/// `binary`, traced and killed at `kill_at`.
fn traced_apply_by(
    binary: &std::path::Path,
    site: &Site,
    layout: &ExecutionLayout,
    kill_at: Option<usize>,
) -> Traced {
    let mut command = site.sandbox.command(binary);
    command
        .arg("apply")
        .arg("--layout")
        .arg(site.layout_file(layout))
        .args(["--scope", Scope::Worker.name()]);
    run_traced(&command, &helper_injection(), kill_at)
}

/// The first durable call of `publish` on the layout manifest (in the
/// install root), after the journal was renamed into place and the worker
/// unit (in the unit directory) was replaced and made durable.
fn layout_publication(calls: &[DurableCall], layout: &ExecutionLayout) -> usize {
    let manifest = layout.manifest_path().display().to_string();
    let journal = calls
        .iter()
        .position(|call| {
            call.call.starts_with("rename") && call.paths.ends_with("/.execution-transaction")
        })
        .expect("the journal is renamed into place");
    calls[journal..]
        .iter()
        .find(|call| call.paths.contains(&manifest))
        .expect("publish writes the layout manifest")
        .number
}

/// The worker `apply` by `binary` stopped where `publish` begins writing
/// the layout manifest (the worker unit new, the journal renamed into place
/// before, no fsync of the install root since), in `state`, then recovered
/// and checked as the campaign does. `Err` with the check that failed.
fn published_point(test: &str, binary: &std::path::Path, state: CrashState) -> Result<(), String> {
    let (site, _old, new) = Scope::Worker.site(test).expect("the sandbox ran once");
    let complete = traced_apply_by(binary, &site, &new, None);
    assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
    let at = layout_publication(&complete.calls, &new);
    drop(site);
    let mut point = |n| {
        let (site, old, new) = Scope::Worker.site(test).expect("the sandbox ran once");
        let outside = Outside::around(&site.sandbox, &site.installation);
        let traced = traced_apply_by(binary, &site, &new, Some(n));
        let call = traced.killed.expect("killed at the layout manifest");
        converge(&site, old.as_ref(), &new, Scope::Worker, &outside);
        PointResult::Converged(call)
    };
    match run_point(at, Some(state), &mut point) {
        (Ok(_), _) => Ok(()),
        (Err(panic), _) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a check failed".into())),
    }
}

/// The method can fail: an `execution-manage` built without the install
/// root's fsync after its journal appears (the test-only cargo feature
/// `test-drop-journal-fsync`) converges after a SIGKILL where publish
/// begins writing the layout manifest, as the real one does, but not after
/// a power cut there: the journal's name is lost while the worker unit it
/// covers is already new. The real build converges in the same state.
#[test]
fn a_dropped_journal_directory_fsync_is_caught_by_the_power_cut_states() {
    let test = agents_tests::test_name!();
    if Scope::Worker.site(test).is_none() {
        return;
    }
    let dropped =
        agents_tests::power_cut::helper_built_with("execution-manage", "test-drop-journal-fsync");
    let real = agents_tests::binary_path("execution-manage");
    assert_eq!(published_point(test, &real, CrashState::Lost), Ok(()));
    assert_eq!(published_point(test, &dropped, CrashState::Kill), Ok(()));
    let caught = published_point(test, &dropped, CrashState::Lost)
        .expect_err("the power cut catches the dropped directory fsync");
    assert!(
        caught.contains("neither the old nor the new installation"),
        "the worker unit is new with no journal to recover it: {caught}"
    );
}

/// Regression (issue 24): a split uninstall stopped by a power cut at its
/// last durable call, `rmdir` of the install root, with every removal that
/// was not yet durable lost. The port unlinked both units and removed the
/// config root without syncing their directories, then removed the
/// manifest and the intent with the install root synced: the units and the
/// config came back with no proof left, and the rerun left
/// `agents-server-gateway.service` behind. Removal now syncs those
/// directories before the proof goes.
#[test]
fn split_uninstall_power_cut_at_the_install_root_rmdir_loses_no_unit_unlink() {
    let test = agents_tests::test_name!();
    for purge in [false, true] {
        let Some(case) = SplitCase::start(test) else {
            return;
        };
        let complete = traced_uninstall(&case, Implementation::Port, purge, None);
        assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
        drop(case);
        let last = complete.calls.last().expect("durable calls").clone();
        assert_eq!(last.call, "rmdir", "the install root goes last: {last}");
        let mut point = |n| uninstall_point(test, Implementation::Port, purge, n);
        let (result, built) = run_point(last.number, Some(CrashState::Lost), &mut point);
        let (_, changes) = built.expect("the power cut was built");
        assert!(
            result.is_ok(),
            "purge {purge}: lost {}: the uninstall does not converge",
            changes.summary()
        );
    }
}

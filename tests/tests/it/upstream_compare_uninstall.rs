//! Upstream comparison (`scripts/upstream-compare.sh`): `uninstall --yes`
//! of a running split installation against `uninstall.sh`, which hands the
//! split layout to the real upstream `execution_uninstall.py` beside it,
//! each on a fresh identical installation at the same paths: run once
//! (killed at a step, or refused), then run again. Both runs' exit
//! status, stdout and last stderr line, the installation's files (the
//! `.execution-uninstall.json` marker included), the units' states, the
//! worker's lease, the service-manager calls that change something and the
//! worker's requests are compared.

use crate::uninstall_support;

use std::process::Command;

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::upstream::{
    check_scenarios_recorded, compare_scenarios, lease_text, run_to, Helper, KillPoint, Normalizer,
    Observed, Side, SystemctlTrace, Upstream,
};
use agents_tests::{GroupChild, RequestMatch, Role, Sandbox, Switches};
use uninstall_support::split::SplitCase;

/// Processes a scenario keeps running while the uninstaller runs.
type Holders = Vec<GroupChild>;

/// Changes a scenario makes before a run.
type Prepare = fn(&SplitCase, &mut Holders);

struct Scenario {
    name: &'static str,
    /// Where the first run is killed.
    point: KillPoint,
    /// Before the first run.
    before: Prepare,
    /// Before the second run, if there is one.
    rerun: Option<Prepare>,
}

fn nothing(_: &SplitCase, _: &mut Holders) {}

fn release_holders(_: &SplitCase, holders: &mut Holders) {
    for holder in holders.iter_mut() {
        holder.kill();
    }
    holders.clear();
}

fn request(action: &'static str) -> RequestMatch {
    RequestMatch::maintenance(action)
}

fn scenarios() -> Vec<Scenario> {
    let stop_gateway = "--user stop --no-block agents-server-gateway.service";
    vec![
        Scenario {
            name: "removes-a-running-pair",
            point: KillPoint::Never,
            before: nothing,
            rerun: None,
        },
        Scenario {
            name: "killed-at-acquire-then-rerun",
            point: KillPoint::Request(Role::Worker, request("acquire"), None),
            before: nothing,
            rerun: Some(nothing),
        },
        Scenario {
            name: "killed-at-seal-then-rerun",
            point: KillPoint::Request(Role::Worker, request("seal"), None),
            before: nothing,
            rerun: Some(nothing),
        },
        Scenario {
            name: "killed-between-the-stops-then-rerun",
            point: KillPoint::Request(
                Role::Worker,
                RequestMatch::path("/api/admin/execution/status"),
                Some(stop_gateway),
            ),
            before: nothing,
            rerun: Some(nothing),
        },
        Scenario {
            name: "killed-at-the-worker-stop-then-rerun",
            point: KillPoint::Systemctl("--user stop --no-block agents-server.service", 1),
            before: nothing,
            rerun: Some(nothing),
        },
        Scenario {
            name: "killed-at-the-reload-after-removal-started-then-rerun",
            point: KillPoint::Systemctl("--user daemon-reload", 1),
            before: nothing,
            rerun: Some(nothing),
        },
        Scenario {
            name: "held-state-lease-then-rerun",
            point: KillPoint::Never,
            before: |case, holders| {
                let lease = case.installation.state_root.join("admin/state-owner.lock");
                let holder = GroupChild::spawn(
                    Command::new("flock")
                        .arg("-o")
                        .arg(&lease)
                        .args(["sleep", "600"]),
                )
                .expect("util-linux flock runs");
                holders.push(holder);
            },
            rerun: Some(release_holders),
        },
        Scenario {
            name: "unresolved-provider-children-then-rerun",
            point: KillPoint::Never,
            before: |case, _| case.register_provider_children("[{\"pid\": 4242}]"),
            rerun: Some(|case, _| case.register_provider_children("[]")),
        },
        Scenario {
            name: "lost-seal-reply",
            point: KillPoint::Never,
            before: |case, _| {
                case.switches(Role::Worker, Switches::stalling(request("seal"), 8.0));
            },
            rerun: None,
        },
        Scenario {
            name: "refused-acquire",
            point: KillPoint::Never,
            before: |case, _| {
                case.switches(
                    Role::Worker,
                    Switches {
                        refuse: vec!["acquire".to_string()],
                        ..Switches::default()
                    },
                );
            },
            rerun: None,
        },
        Scenario {
            name: "pending-update",
            point: KillPoint::Never,
            before: |case, _| {
                let status = case
                    .installation
                    .state_root
                    .join("admin/server-update.json");
                agents_tests::write_file_making_parents(
                    &status,
                    b"{\"phase\": \"pending\"}\n",
                    0o600,
                );
            },
            rerun: None,
        },
        Scenario {
            name: "busy-worker",
            point: KillPoint::Never,
            before: |case, _| {
                case.switches(
                    Role::Worker,
                    Switches {
                        blockers: vec![("active_runs".to_string(), 1)],
                        ..Switches::default()
                    },
                );
            },
            rerun: None,
        },
    ]
}

/// `uninstall --yes` as uninstall.sh is run, the roots from the environment.
fn uninstall(upstream: &Upstream, side: Side, case: &SplitCase, trace: &SystemctlTrace) -> Command {
    let runtime = case.sandbox.base().join("runtime");
    let mut command = upstream.command(side, Helper::Uninstall, &runtime, &case.sandbox);
    trace.wrap(&mut command, &case.sandbox);
    let i = &case.installation;
    command
        .arg("--yes")
        .env("LC_ALL", "C")
        .env("AGENTS_SERVER_INSTALL_DIR", &i.install_root)
        .env("AGENTS_SERVER_CONFIG_DIR", &i.config_root)
        .env("AGENTS_SERVER_STATE_DIR", &i.state_root);
    command
}

fn run_side(upstream: &Upstream, side: Side, scenario: &Scenario, port: u16) -> Observed {
    let sandbox = Sandbox::start_named("agents-upstream-uninstall").expect("a systemd sandbox");
    let case = SplitCase::start_in(sandbox, port, |_| {});
    let base = case.sandbox.base().to_path_buf();
    upstream.install_runtime(&base.join("runtime"));
    let trace = SystemctlTrace::install(&base.join("trace"));
    let units = [
        (WORKER_UNIT, case.services.worker_pid),
        (GATEWAY_UNIT, case.services.gateway_pid),
    ];
    let mut normalizer = Normalizer::for_run(&base, port);
    let mut observed = Observed::default();
    let mut holders = Holders::new();
    let runs = [Some(scenario.before), scenario.rerun];
    for (index, prepare) in runs.into_iter().enumerate() {
        let Some(prepare) = prepare else {
            continue;
        };
        prepare(&case, &mut holders);
        trace.reset();
        let point = if index == 0 {
            &scenario.point
        } else {
            &KillPoint::Never
        };
        let command = uninstall(upstream, side, &case, &trace);
        let (output, reached) = run_to(command, point, &trace, &case.installation);
        let name = format!("run {}", index + 1);
        observed.record(&format!("{name} kill point reached"), reached.to_string());
        observed.run(&name, &output, &mut normalizer);
        let mut facets = Observed::default();
        facets.installation(&case.sandbox, &case.installation, &mut normalizer);
        facets.services(&case.sandbox, &units);
        let lease = lease_text(&case.sandbox, &case.installation);
        facets.record("lease", normalizer.text(&lease));
        facets.record("systemctl changes", trace.changes());
        observed.merge(&format!("after {name}"), facets);
    }
    release_holders(&case, &mut holders);
    observed.record("maintenance actions", case.maintenance_actions().join(" "));
    observed
}

/// The scenarios, named as the comparison reports them.
fn named_scenarios() -> Vec<(String, Scenario)> {
    scenarios()
        .into_iter()
        .map(|scenario| (format!("uninstall-split-{}", scenario.name), scenario))
        .collect()
}

#[test]
#[ignore = "compares with upstream: run by scripts/upstream-compare.sh"]
fn uninstall_of_a_split_layout_interrupted_and_rerun() {
    compare_scenarios(agents_tests::test_name!(), named_scenarios(), run_side);
}

/// The binary still does what the original did in every scenario
/// (`tests/fixtures/upstream/`, recorded by the comparison above).
#[test]
fn uninstall_of_a_split_layout_as_recorded() {
    let upstream = Upstream::port_only_in_sandbox(agents_tests::test_name!());
    check_scenarios_recorded(upstream, named_scenarios(), run_side);
}

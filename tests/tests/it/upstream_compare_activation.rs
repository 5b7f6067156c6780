//! Upstream comparison (`scripts/upstream-compare.sh`): `execution-activation
//! preflight` and `stop` in front of a running legacy monolith inside an
//! admitted update, against `execution_activation.py` with the real upstream
//! modules: the legacy proof, the recovery intent `preflight` originals into
//! the status row (`update_recovery.activation_intent`, and
//! `require_retired_legacy_intent` with `execution_recovery` and
//! `execution_recovery_status` for an earlier update's intent), and the stop
//! of the monolith under a split activation journal. Each side runs on a
//! fresh identical installation at the same paths; exit status, stdout, the
//! last stderr line, the installation's files (the status row included),
//! the monolith's unit state and the service-manager calls that change
//! something are compared.

use crate::execution_activation_support;

use std::fs;

use agents_common::activation_intent;
use agents_common::WORKER_UNIT;
use agents_tests::journal_writer::Begin;
use agents_tests::upstream::{
    check_scenarios_recorded, compare_scenarios, finish, Helper, Normalizer, Observed, Side,
    SystemctlTrace, Upstream,
};
use agents_tests::{make_dir, Sandbox};
use execution_activation_support::{write_json, Monolith, SERVER};
use python_compat::{
    json::{parse_json, JsonObject},
    json_object,
};

/// An earlier admitted update, whose intent a status row may still carry.
const EARLIER_UPDATE: &str = "fedcba9876543210fedcba9876543210";

/// What a scenario does before the helper runs.
type Prepare = fn(&Monolith<'_>);

/// A scenario: its preparation and the operations run, in order
/// (`preflight` or `stop`, with or without the health file).
struct Scenario {
    name: &'static str,
    prepare: Prepare,
    operations: &'static [(&'static str, bool)],
}

fn nothing(_: &Monolith<'_>) {}

/// Sets the status row's `_activation_recovery` to an intent of another
/// update over this installation (its `current` release as candidate),
/// changed by `edit`.
fn earlier_intent(monolith: &Monolith<'_>, edit: impl FnOnce(&mut JsonObject)) {
    let roots = &monolith.roots;
    let mut intent = activation_intent(
        &roots.root(),
        &roots.release_dir("1.0.0"),
        "1.0.0",
        7,
        EARLIER_UPDATE,
        SERVER,
    )
    .expect("an intent over this installation");
    edit(&mut intent);
    let path = monolith.status_path();
    let mut row = parse_json(&fs::read(&path).unwrap())
        .unwrap()
        .as_object()
        .cloned()
        .unwrap();
    row.insert("_activation_recovery", intent);
    write_json(&path, row);
}

/// The split activation journal install.sh begins before it stops the
/// monolith: candidate 1.1.0 over the running 1.0.0.
fn begin_journal(monolith: &Monolith<'_>) {
    let roots = &monolith.roots;
    let old = roots.release_dir("1.0.0");
    roots.begin(&Begin {
        old: Some((old.clone(), old)),
        service_state: "running".into(),
        service_enabled: false,
        ..Begin::split(&roots.releases().join(".staging-1.1.0-4242"), "1.1.0")
    });
}

/// A PID that no process has any more.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn scenarios() -> Vec<Scenario> {
    const PREFLIGHT: &[(&str, bool)] = &[("preflight", true)];
    vec![
        Scenario {
            name: "preflight-seeds-the-recovery-intent",
            prepare: nothing,
            operations: &[("preflight", true), ("preflight", true)],
        },
        Scenario {
            name: "preflight-refuses-a-busy-monolith",
            prepare: |monolith| monolith.write_health(json_object! {"active_count" => 1}),
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-refuses-without-health",
            prepare: nothing,
            operations: &[("preflight", false)],
        },
        Scenario {
            name: "preflight-refuses-another-admitted-update",
            prepare: |monolith| {
                let update = json_object! {
                    "phase" => "installing", "update_id" => EARLIER_UPDATE, "server_identity" => SERVER,
                };
                write_json(&monolith.update_path(), update);
            },
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-replaces-an-unarmed-earlier-intent",
            prepare: |monolith| earlier_intent(monolith, |_| {}),
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-refuses-an-earlier-intent-of-another-root",
            prepare: |monolith| {
                earlier_intent(monolith, |intent| {
                    intent.insert("root", "/elsewhere/install");
                })
            },
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-refuses-an-earlier-intent-with-a-moved-root",
            prepare: |monolith| {
                earlier_intent(monolith, |intent| {
                    let binding = intent.get_mut("root_binding").unwrap();
                    binding.as_object_mut().unwrap().insert("inode", 1);
                })
            },
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-refuses-an-earlier-intent-with-an-unretired-owner",
            prepare: |monolith| {
                earlier_intent(monolith, |_| {});
                let owners = monolith.roots.root().join(".activation-recovery");
                make_dir(&owners, 0o700);
                make_dir(&owners.join("activation-0123456789abcdef01234567"), 0o700);
            },
            operations: PREFLIGHT,
        },
        Scenario {
            name: "preflight-admits-past-a-dead-split-receipt",
            prepare: |monolith| monolith.abandon_receipt(dead_pid()),
            operations: &[("preflight", true), ("preflight", false)],
        },
        Scenario {
            name: "preflight-refuses-a-live-split-receipt",
            prepare: |monolith| monolith.abandon_receipt(std::process::id()),
            operations: PREFLIGHT,
        },
        Scenario {
            name: "stop-the-monolith-under-the-journal",
            prepare: begin_journal,
            operations: &[("stop", true)],
        },
        Scenario {
            name: "stop-refuses-a-busy-monolith",
            prepare: |monolith| {
                begin_journal(monolith);
                monolith.write_health(json_object! {"active_count" => 1});
            },
            operations: &[("stop", true)],
        },
        Scenario {
            name: "stop-refuses-without-a-journal",
            prepare: nothing,
            operations: &[("stop", true)],
        },
    ]
}

fn run_side(upstream: &Upstream, side: Side, scenario: &Scenario, port: u16) -> Observed {
    let sandbox = Sandbox::start_named("agents-upstream-activation").expect("a systemd sandbox");
    let monolith = Monolith::start_on(&sandbox, port);
    let base = sandbox.base().to_path_buf();
    let runtime = base.join("runtime");
    upstream.install_runtime(&runtime);
    let trace = SystemctlTrace::install(&base.join("trace"));
    (scenario.prepare)(&monolith);
    let mut normalizer = Normalizer::for_run(&base, port);
    let mut observed = Observed::default();
    for (index, (operation, health)) in scenario.operations.iter().enumerate() {
        trace.reset();
        let mut command = upstream.command(side, Helper::ExecutionActivation, &runtime, &sandbox);
        trace.wrap(&mut command, &sandbox);
        command.args(monolith.legacy_args(operation, *health));
        let output = finish(command.spawn().expect("the helper starts"));
        let name = format!("{} {operation}", index + 1);
        observed.run(&name, &output, &mut normalizer);
        let mut facets = Observed::default();
        let roots = &monolith.roots;
        let (root, config, state) = (roots.root(), roots.config_root(), roots.state_root());
        facets.roots(&sandbox, [&root, &config, &state], &mut normalizer);
        facets.services(&sandbox, &[(WORKER_UNIT, monolith.pid)]);
        facets.record("systemctl changes", trace.changes());
        observed.merge(&format!("after {name}"), facets);
    }
    observed
}

/// The scenarios, named as the comparison reports them.
fn named_scenarios() -> Vec<(String, Scenario)> {
    scenarios()
        .into_iter()
        .map(|scenario| {
            (
                format!("execution-activation-legacy-{}", scenario.name),
                scenario,
            )
        })
        .collect()
}

#[test]
#[ignore = "compares with upstream: run by scripts/upstream-compare.sh"]
fn legacy_preflight_stop_and_recovery_intent() {
    compare_scenarios(agents_tests::test_name!(), named_scenarios(), run_side);
}

/// The binary still does what the original did in every scenario
/// (`tests/fixtures/upstream/`, recorded by the comparison above).
#[test]
fn legacy_preflight_stop_and_recovery_intent_as_recorded() {
    let upstream = Upstream::port_only_in_sandbox(agents_tests::test_name!());
    check_scenarios_recorded(upstream, named_scenarios(), run_side);
}

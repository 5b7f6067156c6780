//! Upstream comparison (`scripts/upstream-compare.sh`): `update-runner`'s
//! prepared-receipt updates (`--prepared-receipt`, which the original verifies
//! with upstream's `update_preparation` and `execution_preparation` and
//! records through `update_recovery.activation_intent`), the same with a
//! schema-2 (npm) signed envelope, and `--recover-only` (upstream's
//! `update_recovery.run_recovery` over a format-3 activation journal read
//! by the real `activation_transaction`). Each scenario runs the original with
//! the upstream modules and the binary on identical fixtures and compares
//! the exit status, the last stderr line, the final status row, what
//! install.sh received, the update log, the credential file and what was
//! left behind.

use crate::update_runner_support;

use std::path::Path;

use agents_common::read_status_unlocked;
use agents_tests::upstream::{
    self, check_recorded, check_scenarios_recorded, compare_scenarios, json_text, report, selected,
    Normalizer, Observed, Upstream,
};
use python_compat::json::Json;
use update_runner_support::prepared::{refusals, Prepared, VERSION};
use update_runner_support::recovery::Recovery;
use update_runner_support::{idle_health, updated_health, Outcome, Side};

/// One side's outcome of `prepared` as facets. Its base directory, the
/// ports and the admitted envelope (signed by a key made for the run) are
/// named, so that recorded facts hold on any machine.
fn prepared_facets(prepared: &Prepared, outcome: &Outcome) -> Observed {
    let mut literals = vec![
        (path_text(prepared.fixture.root.path()), "base"),
        (prepared.fixture.health_port().to_string(), "port"),
    ];
    let envelope = prepared
        .fixture
        .admitted
        .get("_prepared_update")
        .and_then(|update| update.get("envelope"))
        .and_then(Json::as_object);
    for (key, name) in [
        ("manifest_base64", "manifest"),
        ("signature_base64", "signature"),
    ] {
        if let Some(value) = envelope.and_then(|envelope| envelope.get(key)) {
            literals.push((value.as_str().unwrap_or_default().to_string(), name));
        }
    }
    let mut normalizer = Normalizer::new(&literals);
    let mut observed = Observed::default();
    observed.record("exit", format!("{:?}", outcome.exit));
    let last = outcome.stderr.lines().last().unwrap_or("");
    observed.record("stderr", normalizer.text(last));
    observed.record(
        "row",
        normalizer.text(&json_text(&Json::Object(outcome.row.clone()))),
    );
    let installer = outcome.installer.as_ref().map(|lines| lines.join("\n"));
    observed.record(
        "installer",
        normalizer.text(installer.as_deref().unwrap_or("(not run)")),
    );
    observed.record(
        "log",
        normalizer.text(outcome.log.as_deref().unwrap_or("(none)")),
    );
    observed.record("leftovers", outcome.leftovers.join("\n"));
    observed.record("credential consumed", outcome.token_consumed.to_string());
    observed
}

/// A prepared-update scenario: its name and how its fixture is made.
type PreparedCase = (String, Box<dyn Fn() -> Prepared>);

fn prepared_cases() -> Vec<PreparedCase> {
    fn case(name: &str, make: impl Fn(&str) -> Prepared + 'static) -> PreparedCase {
        let scenario = format!("update-runner-prepared{name}");
        let tag = format!("upstream{name}");
        (scenario, Box::new(move || make(&tag)))
    }
    // The restarted server reports another API contract: a schema-2
    // envelope pins it, a schema-1 one does not.
    let other_contract = |prepared: Prepared| {
        let after = updated_health(VERSION, 27);
        prepared.fixture.set_health(idle_health(), after);
        prepared
    };
    let mut cases = vec![
        case("", Prepared::new),
        case("-npm", Prepared::npm),
        case("-npm-other-contract", move |tag| {
            other_contract(Prepared::npm(tag))
        }),
        case("-other-contract", move |tag| {
            other_contract(Prepared::new(tag))
        }),
    ];
    for refusal in refusals() {
        cases.push(case(&format!("-{}", refusal.name), move |tag| {
            let mut prepared = Prepared::new(tag);
            (refusal.change)(&mut prepared);
            prepared
        }));
    }
    cases
}

#[test]
#[ignore = "compares with upstream: run by scripts/upstream-compare.sh"]
fn prepared_receipt_updates() {
    let Some(upstream) = Upstream::locate(agents_tests::test_name!()) else {
        return;
    };
    for (scenario, make) in prepared_cases() {
        if !selected(&scenario) {
            continue;
        }
        // The original, then the binary, on the same staged candidate.
        let mut prepared = make();
        prepared.fixture.upstream = Some(upstream.modules().to_path_buf());
        let original = prepared.run_by(Side::Original(upstream.originals()));
        let port = prepared.run_by(Side::Port);
        let [original, port] = [original, port].map(|outcome| prepared_facets(&prepared, &outcome));
        report(&scenario, &original, &port);
    }
}

/// The binary still does what the original did in every prepared-update
/// scenario (`tests/fixtures/upstream/`, recorded by the comparison above).
#[test]
fn prepared_receipt_updates_as_recorded() {
    for (scenario, make) in prepared_cases() {
        let prepared = make();
        let outcome = prepared.run_by(Side::Port);
        check_recorded(&scenario, &prepared_facets(&prepared, &outcome));
    }
}

/// What a `--recover-only` scenario changes before the runner starts, and
/// the transaction it names (`None`: the journal's own).
struct RecoveryCase {
    name: &'static str,
    prepare: fn(&Recovery),
    transaction: Option<&'static str>,
}

fn recovery_cases() -> Vec<RecoveryCase> {
    fn none(_: &Recovery) {}
    vec![
        RecoveryCase {
            name: "complete",
            prepare: none,
            transaction: None,
        },
        RecoveryCase {
            name: "rolled-back",
            prepare: |recovery| {
                recovery.behaviour(
                    "rm -rf \"$AGENTS_SERVER_INSTALL_DIR/.activation-transaction\"\nexit 75\n",
                )
            },
            transaction: None,
        },
        RecoveryCase {
            name: "rollback-retained",
            prepare: |recovery| recovery.behaviour("exit 75\n"),
            transaction: None,
        },
        RecoveryCase {
            name: "unfinalised",
            prepare: |recovery| recovery.behaviour("exit 0\n"),
            transaction: None,
        },
        RecoveryCase {
            name: "installer-failed",
            prepare: |recovery| recovery.behaviour("echo 'rollback failed' >&2\nexit 4\n"),
            transaction: None,
        },
        RecoveryCase {
            name: "transaction-changed",
            prepare: none,
            transaction: Some("activation-000000000000000000000000"),
        },
        RecoveryCase {
            name: "intent-version",
            prepare: |recovery| {
                recovery.edit_row(|row| {
                    row.insert("target_version", "1.1.1");
                })
            },
            transaction: None,
        },
        RecoveryCase {
            name: "intent-missing",
            prepare: |recovery| {
                recovery.edit_row(|row| {
                    row.remove("_activation_recovery");
                })
            },
            transaction: None,
        },
        RecoveryCase {
            name: "row-handoff",
            prepare: |recovery| {
                recovery.edit_row(|row| {
                    row.insert(
                        "_execution_handoff",
                        python_compat::json_object! {"schema" => 1},
                    );
                })
            },
            transaction: None,
        },
        RecoveryCase {
            name: "not-owned",
            prepare: |recovery| {
                recovery.edit_row(|row| {
                    row.insert("phase", "failed");
                    row.insert("message", "Finalised by the server.");
                })
            },
            transaction: None,
        },
    ]
}

/// One side's run of a `--recover-only` case, on its own fresh fixture.
fn recover_side(upstream: &Upstream, side: Side<'_>, case: &RecoveryCase) -> Observed {
    let tag = format!("upstream-{}-{}", case.name, side_label(side));
    let mut recovery = Recovery::interrupted(&tag);
    // Both sides' running release holds the originals and the modules.
    match side {
        Side::Original(_) => recovery.runtime.run_the_original(upstream),
        Side::Port => upstream.install_runtime(&recovery.runtime.dir),
    }
    (case.prepare)(&recovery);
    let transaction = case.transaction.unwrap_or(&recovery.transaction);
    let output = recovery
        .command_with(transaction, &recovery.token_file)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the runner starts");
    let literals = [
        (path_text(&recovery.install.base), "base"),
        (recovery.health.port.to_string(), "port"),
    ];
    let mut normalizer = Normalizer::new(&literals);
    let mut observed = Observed::default();
    observed.run("recover-only", &output, &mut normalizer);
    let row = read_status_unlocked(&recovery.status).map_or_else(
        |error| format!("unreadable: {error}"),
        |row| json_text(&Json::Object(row)),
    );
    observed.record("row", normalizer.text(&row));
    let installer = recovery
        .installer()
        .map_or_else(|| "(not run)".to_string(), |lines| lines.join("\n"));
    observed.record("installer", normalizer.text(&installer));
    let log =
        update_runner_support::read_text(&recovery.status.with_file_name("server-update.log"));
    observed.record("log", normalizer.text(&log_without_times(&log)));
    observed.record("journal present", recovery.journal_present().to_string());
    observed.record(
        "credential consumed",
        (!recovery.token_file.exists()).to_string(),
    );
    observed
}

fn side_label(side: Side<'_>) -> &'static str {
    match side {
        Side::Original(_) => "original",
        Side::Port => "port",
    }
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The log's header lines carry the time of the run.
fn log_without_times(log: &str) -> String {
    log.lines()
        .map(|line| match line.rfind(" at ") {
            Some(at) if line.starts_with("--- ") => format!("{} at <time> ---", &line[..at]),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `--recover-only` cases, named as the comparison reports them.
fn named_recovery_cases() -> Vec<(String, RecoveryCase)> {
    recovery_cases()
        .into_iter()
        .map(|case| (format!("update-runner-recover-only-{}", case.name), case))
        .collect()
}

/// `--recover-only` of `case` run by the comparison's `side`.
fn recover_by(upstream: &Upstream, side: upstream::Side, case: &RecoveryCase, _: u16) -> Observed {
    let side = match side {
        upstream::Side::Original => Side::Original(upstream.originals()),
        upstream::Side::Port => Side::Port,
    };
    recover_side(upstream, side, case)
}

#[test]
#[ignore = "compares with upstream: run by scripts/upstream-compare.sh"]
fn recover_only() {
    compare_scenarios(
        agents_tests::test_name!(),
        named_recovery_cases(),
        recover_by,
    );
}

/// The binary still does what the original did in every `--recover-only`
/// scenario (`tests/fixtures/upstream/`, recorded by the comparison above).
#[test]
fn recover_only_as_recorded() {
    check_scenarios_recorded(
        Some(Upstream::port_only()),
        named_recovery_cases(),
        recover_by,
    );
}

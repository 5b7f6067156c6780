//! Upstream comparison (`scripts/upstream-compare.sh`): `update-handoff
//! release` and `retry-failed` against `update_handoff.py`'s
//! `release_existing_handoff` and `retry_failed_handoff` (called through a
//! driver: the original has no command line), each on a fresh identical split
//! installation whose running worker holds the handoff's sealed lease.
//! Every step's exit status, stdout and last stderr line, the installation's
//! files, the worker's lease and the worker's requests are compared.

use crate::update_handoff_support;

use std::fs;
use std::io::Write;
use std::process::Stdio;

use agents_common::UNINSTALL_INTENT_NAME;
use agents_common::WORKER_UNIT;
use agents_tests::upstream::{
    check_scenarios_recorded, compare_scenarios, finish, lease_text, Helper, Normalizer, Observed,
    Side, Upstream,
};
use agents_tests::{Role, Sandbox, Switches};
use python_compat::json::{encode_compact, JsonObject};
use update_handoff_support::{replace_file, Case, FOREIGN_OPERATION, OPERATION};

/// One side's run of a scenario: the case and what it observed so far.
struct Steps<'a> {
    upstream: &'a Upstream,
    side: Side,
    case: Case,
    observed: Observed,
    normalizer: Normalizer,
    count: usize,
}

impl Steps<'_> {
    fn run(&mut self, arguments: &[&std::ffi::OsStr], stdin: Option<Vec<u8>>) {
        let runtime = self.case.sandbox.base().join("runtime");
        let mut command = self.upstream.command(
            self.side,
            Helper::UpdateHandoff,
            &runtime,
            &self.case.sandbox,
        );
        command.args(arguments);
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command.spawn().expect("the helper starts");
        if let Some(data) = stdin {
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(&data)
                .expect("write the expected status");
        }
        let output = finish(child);
        self.count += 1;
        let name = format!("step {}", self.count);
        self.observed.run(&name, &output, &mut self.normalizer);
        let lease = lease_text(&self.case.sandbox, &self.case.installation);
        self.observed
            .record(&format!("{name} lease"), self.normalizer.text(&lease));
    }

    /// `release --root <install> --handoff-file <the case's handoff>`.
    fn release(&mut self) {
        let root = self.case.installation.install_root.clone();
        let handoff = self.case.handoff_path();
        self.run(
            &[
                "release".as_ref(),
                "--root".as_ref(),
                root.as_os_str(),
                "--handoff-file".as_ref(),
                handoff.as_os_str(),
            ],
            None,
        );
    }

    /// `retry-failed` of the installed status file, `expected` on stdin.
    fn retry(&mut self, expected: &JsonObject) {
        let status = self.case.status_path();
        self.retry_at(&status, expected);
    }

    /// `retry-failed` naming `status_file`, `expected` on stdin.
    fn retry_at(&mut self, status_file: &std::path::Path, expected: &JsonObject) {
        let root = self.case.installation.install_root.clone();
        let stdin = encode_compact(&expected.clone().into()).expect("encode");
        self.run(
            &[
                "retry-failed".as_ref(),
                "--root".as_ref(),
                root.as_os_str(),
                "--status-file".as_ref(),
                status_file.as_os_str(),
                "--expected-status".as_ref(),
                "-".as_ref(),
            ],
            Some(stdin),
        );
    }

    /// The worker refuses (409) the first release; the runner then saved
    /// the failed status that owns the handoff.
    fn fail_first_release(&mut self) {
        self.case.switch(Switches {
            refuse: vec!["release".to_string()],
            ..Switches::default()
        });
        self.release();
        self.case.switch(Switches::default());
        self.case.write_status(&self.case.failed_status());
    }
}

type Scenario = fn(&mut Steps<'_>);

fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        ("release", |steps| steps.release()),
        ("release-twice", |steps| {
            steps.release();
            steps.release();
        }),
        ("release-busy-worker", |steps| {
            steps.case.switch(Switches {
                blockers: vec![("active_runs".to_string(), 1)],
                ..Switches::default()
            });
            steps.release();
        }),
        ("release-under-activation-journal", |steps| {
            let journal = steps
                .case
                .installation
                .install_root
                .join(".execution-transaction");
            agents_tests::make_dir(&journal, 0o700);
            steps.release();
        }),
        ("release-under-uninstall-intent", |steps| {
            let intent = steps
                .case
                .installation
                .install_root
                .join(UNINSTALL_INTENT_NAME);
            fs::write(intent, b"{}\n").unwrap();
            steps.release();
        }),
        ("release-foreign-lease", |steps| {
            let lease_id = steps.case.lease_id.clone();
            steps.case.release_lease(OPERATION, &lease_id);
            steps.case.seal(FOREIGN_OPERATION);
            steps.release();
        }),
        ("release-refused-by-worker", |steps| {
            steps.case.switch(Switches {
                refuse: vec!["release".to_string()],
                ..Switches::default()
            });
            steps.release();
        }),
        ("release-other-server-identity", |steps| {
            let handoff = steps
                .case
                .handoff_with("expected_server_identity", "another-server");
            steps.case.write_handoff(&handoff);
            steps.release();
        }),
        ("release-malformed-handoff", |steps| {
            replace_file(&steps.case.handoff_path(), b"{\"schema\": 1}\n", 0o600);
            steps.release();
        }),
        ("release-stopped-worker", |steps| {
            steps.case.sandbox.systemctl_ok(&["stop", WORKER_UNIT]);
            steps.release();
        }),
        ("retry-failed-then-acknowledged", |steps| {
            steps.fail_first_release();
            let expected = steps.case.failed_status();
            steps.retry(&expected);
            steps.retry(&expected);
        }),
        ("retry-failed-status-mismatch", |steps| {
            steps.fail_first_release();
            let mut changed = steps.case.failed_status();
            changed.insert("error", "rewritten by the server");
            steps.retry(&changed);
            let mut not_failed = steps.case.failed_status();
            not_failed.insert("phase", "installing");
            steps.retry(&not_failed);
        }),
        ("retry-failed-status-outside-state", |steps| {
            steps.fail_first_release();
            let copy = steps
                .case
                .installation
                .install_root
                .join("server-update.json");
            replace_file(&copy, &fs::read(steps.case.status_path()).unwrap(), 0o600);
            let expected = steps.case.failed_status();
            steps.retry_at(&copy, &expected);
        }),
        ("retry-failed-replacement-worker", |steps| {
            steps.fail_first_release();
            steps.case.sandbox.systemctl_ok(&["restart", WORKER_UNIT]);
            steps.case.installation.wait_for_service(
                &steps.case.sandbox,
                WORKER_UNIT,
                Role::Worker,
            );
            let expected = steps.case.failed_status();
            steps.retry(&expected);
        }),
    ]
}

fn run_side(upstream: &Upstream, side: Side, scenario: Scenario, port: u16) -> Observed {
    let sandbox = Sandbox::start_named("agents-upstream-handoff").expect("a systemd sandbox");
    let case = Case::start_in(sandbox, port);
    let base = case.sandbox.base().to_path_buf();
    upstream.install_runtime(&base.join("runtime"));
    let mark = case.mark();
    let mut steps = Steps {
        upstream,
        side,
        case,
        observed: Observed::default(),
        normalizer: Normalizer::for_run(&base, port),
        count: 0,
    };
    scenario(&mut steps);
    let Steps {
        case,
        mut observed,
        mut normalizer,
        ..
    } = steps;
    observed.installation(&case.sandbox, &case.installation, &mut normalizer);
    let requests: Vec<String> = case
        .requests_since(mark)
        .iter()
        .map(|record| {
            format!(
                "{} {} {} {} {}",
                record.instance_id,
                record.method,
                record.path,
                record.action.as_deref().unwrap_or(""),
                record.status
            )
        })
        .collect();
    observed.record("worker requests", normalizer.text(&requests.join("\n")));
    observed
}

/// The scenarios, named as the comparison reports them.
fn named_scenarios() -> Vec<(String, Scenario)> {
    scenarios()
        .into_iter()
        .map(|(name, scenario)| (format!("update-handoff-{name}"), scenario))
        .collect()
}

#[test]
#[ignore = "compares with upstream: run by scripts/upstream-compare.sh"]
fn release_and_retry_failed() {
    compare_scenarios(
        agents_tests::test_name!(),
        named_scenarios(),
        |upstream, side, scenario, port| run_side(upstream, side, *scenario, port),
    );
}

/// The binary still does what the original did in every scenario
/// (`tests/fixtures/upstream/`, recorded by the comparison above).
#[test]
fn release_and_retry_failed_as_recorded() {
    let upstream = Upstream::port_only_in_sandbox(agents_tests::test_name!());
    check_scenarios_recorded(
        upstream,
        named_scenarios(),
        |upstream, side, scenario, port| run_side(upstream, side, *scenario, port),
    );
}

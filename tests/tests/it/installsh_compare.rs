//! install.sh comparison (`scripts/installsh-compare.sh`): upstream's
//! unmodified install.sh (and the installed uninstall.sh) run on the release as
//! published and on the same release after the migration kit, each scenario on
//! a fresh identical sandbox at the same paths. Compared after every step: the
//! exit status, stdout and stderr lines, the helper calls and their exit
//! statuses, the `systemctl` calls that change something, every file of the
//! install, config and state roots and the unit directory, and the units'
//! states (see `agents_tests::installsh_facets` for what is normalised).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use agents_tests::installsh::{
    finish, recover_only_arguments, Host, Release, Scratch, API_CONTRACT, ARCHIVE_SHA256,
    PREPARATION_ID, RELEASE_A, RELEASE_B, RELEASE_UNHEALTHY, SERVER_IDENTITY,
};
use agents_tests::installsh_facets::{self as facets, ReleaseFiles};
use agents_tests::installsh_state;
use agents_tests::upstream::{
    recorded_path, report, selected, Normalizer, Observed, Side, RECORD_ENV,
};
use agents_tests::{free_port, try_poll_until, Sandbox};

/// Where a run of install.sh is interrupted: while the `occurrence`th
/// `systemctl` call with exactly the arguments `call` is held (counted from
/// the first call with exactly the arguments `after`, if given).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Point {
    after: Option<&'static str>,
    call: &'static str,
    occurrence: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kill {
    /// SIGKILL to install.sh's whole process group (a crash).
    Group,
    /// SIGTERM to install.sh alone (its trap runs once the held call returns,
    /// which it does when the held call is ended).
    Term,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// install.sh of a release with extra arguments.
    Install(Release, &'static [&'static str]),
    /// A step's install.sh, interrupted at a point by a signal.
    Interrupted(&'static Step, Point, Kill),
    /// A managed update's install.sh: the server seals the running worker and
    /// passes the handoff and its identity.
    Update(Release),
    /// The managed update's install.sh run again with the same arguments (the
    /// same handoff file), nothing sealed anew.
    UpdateAgain(Release),
    /// The server's retry of the managed update after install.sh said to run
    /// again: the running worker sealed anew (a recovery restarted it
    /// unsealed; a still sealed one keeps its lease), the same handoff
    /// path; the old handoff where no worker can be sealed.
    Retry(Release),
    /// `install.sh --recover-only` of the pending activation of a release, from
    /// the running release, with the journal's transaction id, as
    /// update_recovery.py and the recovery job run it.
    RecoverOnly(Release),
    /// `install.sh --prepare-only` of a release, as update_preparation.py runs
    /// it: a pinned inactive runtime and its receipt.
    PrepareOnly(Release),
    /// The prepared release's install.sh with `--activate-prepared` and the
    /// preparation's pins, as update_runner.py runs it for a managed update.
    ActivatePrepared(Release),
    /// The installed `uninstall.sh --yes`.
    Uninstall,
    /// `execution-manage doctor` followed mechanically, as support staff
    /// would: step 1 run exactly as printed (`sh -c`, without the roots
    /// install.sh is otherwise given), doctor again, until it exits 0.
    DoctorPlan,
}

impl Step {
    /// The release a step installs from, if any.
    fn release(&self) -> Option<Release> {
        match self {
            Step::Install(release, _)
            | Step::Update(release)
            | Step::UpdateAgain(release)
            | Step::Retry(release)
            | Step::RecoverOnly(release)
            | Step::PrepareOnly(release)
            | Step::ActivatePrepared(release) => Some(*release),
            Step::Interrupted(step, _, _) => step.release(),
            Step::Uninstall | Step::DoctorPlan => None,
        }
    }
}

struct Scenario {
    name: &'static str,
    steps: &'static [Step],
}

pub(crate) const NONE: &[&str] = &[];

/// While a fresh install enables the worker.
const ENABLING: Point = Point {
    after: None,
    call: "--user enable agents-server.service",
    occurrence: 1,
};
/// While a fresh install starts the worker.
const STARTING: Point = Point {
    after: None,
    call: "--user start --no-block agents-server.service",
    occurrence: 1,
};
/// Just after an update's activation journal begins (install.sh's first
/// look at the worker's PID after `activation_transaction begin`), before
/// the recovery job is armed.
const JOURNAL_BEGUN: Point = Point {
    after: None,
    call: "--user show agents-server.service --property=MainPID --value",
    occurrence: 1,
};
/// While the `stop` helper stops the worker (the gateway is stopped), the
/// recovery job armed.
const STOPPING: Point = Point {
    after: None,
    call: "--user stop --no-block agents-server.service",
    occurrence: 1,
};
/// Inside the rollback of a candidate that failed its health checks
/// (install.sh's masked window `restore_previous_release`): the candidate's
/// stop, the worker's second stop of the update.
const ROLLING_BACK: Point = Point {
    after: None,
    call: "--user stop --no-block agents-server.service",
    occurrence: 2,
};
/// After the `start` helper started both candidate units, before the first
/// health check (install.sh's look at the worker's PID for it).
const STARTED: Point = Point {
    after: Some("--user start --no-block agents-server-gateway.service"),
    call: "--user show agents-server.service --property=MainPID --value",
    occurrence: 1,
};
/// Inside the first `verify` helper call (its first look at the worker).
const VERIFYING: Point = Point {
    after: Some("--user start --no-block agents-server-gateway.service"),
    call: "--user show agents-server.service --no-pager --property=LoadState,ActiveState,UnitFileState,MainPID",
    occurrence: 1,
};

fn scenarios() -> Vec<Scenario> {
    use Step::*;
    vec![
        Scenario {
            name: "installsh-fresh-install",
            steps: &[Install(RELEASE_A, NONE)],
        },
        Scenario {
            name: "installsh-fresh-install-killed-at-enable-then-rerun",
            steps: &[
                Interrupted(&Install(RELEASE_A, NONE), ENABLING, Kill::Group),
                Install(RELEASE_A, NONE),
            ],
        },
        Scenario {
            name: "installsh-fresh-install-terminated-at-start-then-rerun",
            steps: &[
                Interrupted(&Install(RELEASE_A, NONE), STARTING, Kill::Term),
                Install(RELEASE_A, NONE),
            ],
        },
        Scenario {
            name: "installsh-same-version-again",
            steps: &[Install(RELEASE_A, NONE), Install(RELEASE_A, NONE)],
        },
        Scenario {
            name: "installsh-update-unmanaged-refused",
            steps: &[Install(RELEASE_A, NONE), Install(RELEASE_B, NONE)],
        },
        Scenario {
            name: "installsh-same-version-managed",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_A)],
        },
        Scenario {
            name: "installsh-update",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_B)],
        },
        Scenario {
            name: "installsh-update-unhealthy-rolls-back",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_UNHEALTHY)],
        },
        Scenario {
            // A second managed update (the running worker sealed anew, as
            // the server does for each update) whose candidate never turns
            // healthy, after a first one, then the uninstall: the chain the
            // benchmark (scripts/bench-installsh.sh) runs.
            name: "installsh-update-then-unhealthy-rolls-back",
            steps: &[
                Install(RELEASE_A, NONE),
                Update(RELEASE_B),
                Update(RELEASE_UNHEALTHY),
                Uninstall,
            ],
        },
        Scenario {
            name: "installsh-fresh-install-then-uninstall",
            steps: &[Install(RELEASE_A, NONE), Uninstall],
        },
        Scenario {
            name: "installsh-uninstall",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_B), Uninstall],
        },
        Scenario {
            name: "installsh-update-killed-after-journal-begins-then-recover-only",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), JOURNAL_BEGUN, Kill::Group),
                UpdateAgain(RELEASE_B),
                RecoverOnly(RELEASE_B),
                RecoverOnly(RELEASE_B),
                Retry(RELEASE_B),
                Uninstall,
            ],
        },
        Scenario {
            name: "installsh-update-killed-after-journal-begins-then-doctor",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), JOURNAL_BEGUN, Kill::Group),
                DoctorPlan,
            ],
        },
        Scenario {
            name: "installsh-update-terminated-after-journal-begins-then-rerun",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), JOURNAL_BEGUN, Kill::Term),
                UpdateAgain(RELEASE_B),
                Retry(RELEASE_B),
            ],
        },
        Scenario {
            name: "installsh-update-killed-at-stop-then-rerun",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), STOPPING, Kill::Group),
                UpdateAgain(RELEASE_B),
                Retry(RELEASE_B),
            ],
        },
        Scenario {
            name: "installsh-update-terminated-after-start-then-rerun",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), STARTED, Kill::Term),
                UpdateAgain(RELEASE_B),
                Retry(RELEASE_B),
            ],
        },
        Scenario {
            name: "installsh-update-killed-during-verify-then-rerun",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_B), VERIFYING, Kill::Group),
                UpdateAgain(RELEASE_B),
                Retry(RELEASE_B),
            ],
        },
        Scenario {
            name: "installsh-update-unhealthy-terminated-during-rollback-then-rerun",
            steps: &[
                Install(RELEASE_A, NONE),
                Interrupted(&Update(RELEASE_UNHEALTHY), ROLLING_BACK, Kill::Term),
                UpdateAgain(RELEASE_UNHEALTHY),
                Retry(RELEASE_B),
            ],
        },
        Scenario {
            name: "installsh-prepare-only-then-activate-prepared",
            steps: &[
                Install(RELEASE_A, NONE),
                PrepareOnly(RELEASE_B),
                ActivatePrepared(RELEASE_B),
                Uninstall,
            ],
        },
    ]
}

#[test]
#[ignore = "needs the upstream release tree; run scripts/installsh-compare.sh"]
fn installsh_comparison() {
    let Some(scratch) = Scratch::locate(agents_tests::test_name!()) else {
        return;
    };
    for scenario in scenarios() {
        if !selected(scenario.name) {
            continue;
        }
        let port = free_port();
        let [original, binaries] = Side::BOTH.map(|side| run(&scratch, side, &scenario, port));
        report(scenario.name, &original, &binaries);
    }
}

fn run(scratch: &Scratch, side: Side, scenario: &Scenario, port: u16) -> Observed {
    let sandbox = Sandbox::start_named(scenario.name).expect("the systemd sandbox starts");
    let host = Host::new(Some(&scratch.uv_cache()), &sandbox, port);
    let mut releases = Vec::new();
    for release in scenario.steps.iter().filter_map(Step::release) {
        if !releases.iter().any(|(folder, _)| *folder == release.folder) {
            releases.push((
                release.folder,
                scratch.release(side, sandbox.base(), release),
            ));
        }
    }
    let paths: Vec<&Path> = releases.iter().map(|(_, path)| path.as_path()).collect();
    let files = ReleaseFiles::of(&paths);
    let mut normalizer = facets::normalizer(&host, &files);
    let mut observed = Observed::default();
    let mut transaction = String::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        let label = format!("{} {}", index + 1, step_name(step));
        host.trace.reset();
        if let Step::Uninstall = step {
            if side == Side::Original && std::env::var_os(RECORD_ENV).is_some() {
                installsh_state::record(
                    &sandbox,
                    port,
                    &installsh_state::archive_path(scenario.name),
                );
            }
        }
        if let Some(pending) = pending_transaction(&host) {
            transaction = pending;
        }
        let output = match step {
            Step::Interrupted(inner, point, kill) => {
                interrupted(&host, command(&host, inner, &transaction), *point, *kill)
            }
            Step::DoctorPlan => follow_doctor(&host),
            _ => finish(command(&host, step, &transaction).spawn().unwrap()),
        };
        host.settle();
        observe(
            &mut observed,
            &label,
            &host,
            &files,
            &mut normalizer,
            &output,
        );
    }
    observed
}

/// The command of a step (not yet started); a managed update first seals
/// the running worker. `transaction`: the last activation journal's id seen.
pub(crate) fn command(host: &Host<'_>, step: &Step, transaction: &str) -> Command {
    let release_script =
        |release: &Release| host.sandbox.base().join(release.folder).join("install.sh");
    match step {
        Step::Install(release, arguments) => host.command(
            &release_script(release),
            &install_arguments(host.port, arguments),
        ),
        Step::Update(release) => {
            let handoff = host.seal_handoff();
            host.command(
                &release_script(release),
                &update_arguments(host.port, &handoff),
            )
        }
        Step::UpdateAgain(release) => host.command(
            &release_script(release),
            &update_arguments(host.port, &host.handoff_path()),
        ),
        Step::Retry(release) => {
            let handoff = host.try_seal_handoff().unwrap_or_else(|err| {
                eprintln!("retry: the worker was not sealed anew ({err})");
                host.handoff_path()
            });
            host.command(
                &release_script(release),
                &update_arguments(host.port, &handoff),
            )
        }
        Step::RecoverOnly(release) => {
            // The running release's installer (update_recovery.py runs the one
            // beside update_runner.py; the job, its armed runtime's).
            let running = host.roots()[0]
                .join("current")
                .canonicalize()
                .expect("a current release");
            let arguments = recover_only_arguments(
                release.version,
                API_CONTRACT,
                transaction,
                SERVER_IDENTITY,
                host.port,
            );
            host.command(&running.join("install.sh"), &arguments)
        }
        Step::PrepareOnly(release) => {
            let receipt = receipt_path(host);
            let arguments = [
                "--non-interactive",
                "--prepare-only",
                "--prepared-receipt",
                &receipt.to_string_lossy(),
                "--release-version",
                release.version,
                "--expected-api-contract",
                API_CONTRACT,
                "--prepared-archive-sha256",
                ARCHIVE_SHA256,
            ];
            host.command(&release_script(release), &arguments)
        }
        Step::ActivatePrepared(release) => {
            let receipt = receipt_path(host);
            let candidate = prepared_candidate(&receipt);
            let handoff = host.seal_handoff();
            let mut arguments = vec![
                "--non-interactive".to_string(),
                "--release-version".to_string(),
                release.version.to_string(),
                "--port".to_string(),
                host.port.to_string(),
                "--bind".to_string(),
                "127.0.0.1".to_string(),
                "--expected-server-identity".to_string(),
                SERVER_IDENTITY.to_string(),
                "--activate-prepared".to_string(),
                receipt.to_string_lossy().into_owned(),
                "--prepared-archive-sha256".to_string(),
                ARCHIVE_SHA256.to_string(),
                "--execution-mode".to_string(),
                "split".to_string(),
                "--execution-handoff-file".to_string(),
                handoff.to_string_lossy().into_owned(),
            ];
            arguments.extend([
                "--expected-api-contract".to_string(),
                API_CONTRACT.to_string(),
            ]);
            host.command(&candidate.join("install.sh"), &arguments)
        }
        Step::Uninstall => host.command(&host.roots()[0].join("current/uninstall.sh"), &["--yes"]),
        Step::Interrupted(inner, _, _) => command(host, inner, transaction),
        Step::DoctorPlan => unreachable!("doctor's plan is followed, not one command"),
    }
}

/// Follows doctor's plan (the built `execution-manage doctor`) mechanically
/// until it exits 0, within four commands: each step 1 must be a command,
/// run exactly as printed; it must exit 0, or 75 for install.sh's
/// `--recover-only` (it restored the prior release; upstream's recovery
/// launchers accept both). Returns what happened as one run's output: a
/// line per doctor run and per command (stdout), the commands' stderr, and
/// doctor's last exit status.
fn follow_doctor(host: &Host<'_>) -> Output {
    use std::os::unix::process::ExitStatusExt as _;
    let (mut stdout, mut stderr, mut commands) = (String::new(), Vec::new(), 0);
    loop {
        let output = host
            .sandbox
            .command(agents_tests::binary_path("execution-manage"))
            .args(["doctor", "--root"])
            .arg(&host.roots()[0])
            .arg("--json")
            .env("PATH", host.path())
            .output()
            .expect("doctor runs");
        let report = python_compat::json::parse_json(&output.stdout)
            .unwrap_or_else(|err| panic!("doctor printed no JSON ({err}): {output:?}"));
        let code = output.status.code().expect("doctor exits");
        stdout.push_str(&format!("doctor: exit {code}\n"));
        if code == 0 {
            return Output {
                status: std::process::ExitStatus::from_raw(0),
                stdout: stdout.into_bytes(),
                stderr,
            };
        }
        let step = report
            .get("plan")
            .and_then(|plan| plan.as_array())
            .and_then(|plan| plan.first())
            .cloned()
            .unwrap_or_else(|| panic!("doctor exited {code} without a plan: {report:?}"));
        let field = |key: &str| {
            step.get(key)
                .and_then(|value| value.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let line = field("command");
        assert_eq!(
            field("kind"),
            "command",
            "step 1 cannot be followed: {step:?}"
        );
        assert!(commands < 4, "not healthy after 4 commands: {stdout}");
        commands += 1;
        let run = finish(host.shell_line(&line).spawn().unwrap());
        host.settle();
        let status = run.status.code().expect("the command exits");
        stdout.push_str(&format!("step 1: {line} => exit {status}\n"));
        stderr.extend_from_slice(&run.stderr);
        let recover_only = line.contains(" --recover-only ");
        assert!(
            status == 0 || (recover_only && status == 75),
            "{line}: exit {status}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

/// `<install>/.prepared-receipts/<PREPARATION_ID>.json`.
fn receipt_path(host: &Host<'_>) -> PathBuf {
    host.roots()[0]
        .join(".prepared-receipts")
        .join(format!("{PREPARATION_ID}.json"))
}

/// The prepared runtime a receipt names (its `"candidate"`).
fn prepared_candidate(receipt: &Path) -> PathBuf {
    let data = std::fs::read(receipt)
        .unwrap_or_else(|err| panic!("the preparation receipt {}: {err}", receipt.display()));
    let value = python_compat::json::parse_json(&data).expect("a JSON receipt");
    let candidate = value
        .get("candidate")
        .and_then(|candidate| candidate.as_str())
        .expect("the receipt names its candidate");
    PathBuf::from(candidate)
}

/// The id of the pending activation journal, if one is there.
fn pending_transaction(host: &Host<'_>) -> Option<String> {
    let manifest = host.roots()[0].join(".activation-transaction/manifest.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let at = text.find("\"activation-")? + 1;
    Some(text[at..at + "activation-".len() + 24].to_string())
}

fn observe(
    observed: &mut Observed,
    label: &str,
    host: &Host<'_>,
    files: &ReleaseFiles,
    normalizer: &mut Normalizer,
    output: &std::process::Output,
) {
    facets::run(observed, label, output, normalizer);
    facets::helper_calls(observed, label, &host.exec_log(), normalizer);
    facets::installation(observed, label, host, files, normalizer);
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Install(release, arguments) => format!(
            "install {}{}",
            release.version,
            arguments
                .iter()
                .map(|word| format!(" {word}"))
                .collect::<String>()
        ),
        Step::Interrupted(inner, point, kill) => format!(
            "{} interrupted at {} #{}{} {kill:?}",
            step_name(inner),
            point.call,
            point.occurrence,
            point
                .after
                .map(|anchor| format!(" after {anchor}"))
                .unwrap_or_default(),
        ),
        Step::Update(release) => format!("managed install {}", release.version),
        Step::UpdateAgain(release) => format!("managed install {} again", release.version),
        Step::Retry(release) => format!("managed install {} retried", release.version),
        Step::RecoverOnly(release) => format!("recover-only {}", release.version),
        Step::PrepareOnly(release) => format!("prepare-only {}", release.version),
        Step::ActivatePrepared(release) => format!("activate-prepared {}", release.version),
        Step::Uninstall => "uninstall".to_string(),
        Step::DoctorPlan => "doctor's plan followed".to_string(),
    }
}

fn install_arguments(port: u16, extra: &[&str]) -> Vec<String> {
    let mut arguments = vec![
        "--non-interactive".to_string(),
        "--port".to_string(),
        port.to_string(),
        "--bind".to_string(),
        "127.0.0.1".to_string(),
    ];
    arguments.extend(extra.iter().map(|word| word.to_string()));
    arguments
}

/// A managed update's arguments: the handoff file and the identity it names.
fn update_arguments(port: u16, handoff: &Path) -> Vec<String> {
    let mut arguments = install_arguments(port, NONE);
    arguments.extend([
        "--execution-handoff-file".to_string(),
        handoff.to_string_lossy().into_owned(),
        "--expected-server-identity".to_string(),
        SERVER_IDENTITY.to_string(),
    ]);
    arguments
}

/// Runs install.sh until the interrupt's `systemctl` call is held, then
/// interrupts it; returns its output.
fn interrupted(host: &Host<'_>, mut command: Command, point: Point, kill: Kill) -> Output {
    match point.after {
        Some(anchor) => host.stall_after(anchor, point.call, point.occurrence),
        None => host.trace.stall_at(point.call, point.occurrence),
    }
    let mut child = command.spawn().unwrap();
    // Staging and uv's sync come first: allow for a loaded machine.
    let reached = try_poll_until(Duration::from_secs(180), "the held call", || {
        if host.trace.stalled() {
            return Some(true);
        }
        matches!(child.try_wait(), Ok(Some(_))).then_some(false)
    })
    .unwrap_or(false);
    if !reached {
        host.clear_stall();
        let output = finish(child);
        panic!(
            "install.sh never made the call {}: {}",
            point.call,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    match kill {
        Kill::Group => crash(child.id()),
        Kill::Term => {
            let installer = installer_pid(child.id()).expect("install.sh runs under strace");
            signal(installer, rustix::process::Signal::TERM);
            if let Some(held) = host.trace.stalled_pid() {
                signal(held, rustix::process::Signal::KILL);
            }
        }
    }
    let output = finish(child);
    host.clear_stall();
    output
}

/// SIGKILL to every process of install.sh's group but its leader, `strace`,
/// which as install.sh's parent then reaps it, as a user's shell would: an
/// install.sh left a zombie would still own its install lock for the
/// recovery job (the suite's runner, a subreaper, reaps orphans only at
/// its end).
fn crash(leader: u32) {
    for _ in 0..20 {
        let members: Vec<u32> = group_members(leader)
            .into_iter()
            .filter(|pid| *pid != leader)
            .collect();
        if members.is_empty() {
            return;
        }
        for pid in members {
            signal(pid, rustix::process::Signal::KILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The live (not zombie) processes whose process group is `leader`'s.
fn group_members(leader: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command's closing parenthesis: state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == leader.to_string()
        })
        .collect()
}

fn installer_pid(strace: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// The binaries still do, on the very installation install.sh left with the
/// originals, what the originals did when that installation was uninstalled
/// (recorded by the comparison above): each scenario ending in an uninstall
/// is replayed from its recorded state (`tests/fixtures/installsh/`, see
/// `agents_tests::installsh_state`) with the binaries and the kit's
/// launchers in its release trees, its services started, and the installed
/// `uninstall.sh --yes` run as the comparison runs it; its exit status,
/// output, helper calls, `systemctl` calls, units and every file left must be
/// the recorded ones. Needs no upstream file.
#[test]
fn installsh_uninstall_as_recorded() {
    for scenario in scenarios() {
        if !matches!(scenario.steps.last(), Some(Step::Uninstall)) {
            continue;
        }
        let test = agents_tests::test_name!();
        let Some(sandbox) = Sandbox::start_or_skip(test) else {
            return;
        };
        let port = free_port();
        let host = Host::new(None, &sandbox, port);
        installsh_state::replay(
            &sandbox,
            port,
            &installsh_state::archive_path(scenario.name),
        );
        installsh_state::wait_healthy(&sandbox, port);
        host.trace.reset();
        let script = host.roots()[0].join("current/uninstall.sh");
        let output = finish(host.command(&script, &["--yes"]).spawn().unwrap());
        host.settle();
        let label = format!("{} {}", scenario.steps.len(), step_name(&Step::Uninstall));
        let files = ReleaseFiles::of(&[]);
        let mut normalizer = facets::normalizer(&host, &files);
        let mut replayed = Observed::default();
        observe(
            &mut replayed,
            &label,
            &host,
            &files,
            &mut normalizer,
            &output,
        );
        let path = recorded_path(scenario.name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (scripts/installsh-compare.sh --record writes it)",
                path.display()
            )
        });
        let recorded = facets::renumbered(&Observed::from_text(&text), &label);
        let replayed = facets::renumbered(&replayed, &label);
        let mut differing = Vec::new();
        let names: std::collections::BTreeSet<&String> =
            recorded.keys().chain(replayed.keys()).collect();
        for name in names {
            let (left, right) = (recorded.get(name), replayed.get(name));
            if left != right {
                eprintln!(
                    "--- {}: {name}\n  recorded: {}\n  replayed: {}",
                    scenario.name,
                    left.map_or("(none)".into(), |text| text.replace('\n', "\n            ")),
                    right.map_or("(none)".into(), |text| text.replace('\n', "\n            ")),
                );
                differing.push(name.clone());
            }
        }
        assert!(
            differing.is_empty(),
            "{}: the binaries' uninstall no longer does what the originals' did ({}): {}",
            scenario.name,
            path.display(),
            differing.join(", ")
        );
    }
}

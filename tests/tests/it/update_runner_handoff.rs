//! `update-runner`'s failure path with a split worker's sealed handoff, end
//! to end: a real split installation under a real `systemd --user` manager
//! whose test worker holds the sealed lease the server acquired for the
//! update, a signed release host on 127.0.0.1, and an update that fails
//! before the installer. The runner publishes the failed row first, then
//! releases the exact lease outside the status lock, and records the outcome
//! on the row (`update_runner.main`).
//!
//! The original runs every scenario too, in its own installation: python3 runs
//! `update_runner.py` as-is, but its failure handler imports
//! `update_handoff`, whose `execution_install`, `execution_transport` and
//! `execution_http` are not among the originals. The original's run therefore gets an
//! `update_handoff` module whose `release_existing_handoff` runs our
//! `update-handoff release` (the same function, proven against upstream's
//! scenarios by the update_handoff tests): the original's own `main` decides
//! when to release, under which lock, and what the row says.

use crate::update_handoff_support;
use crate::update_runner_support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::forward_proxy::ForwardProxy;
use agents_tests::{binary_path, Originals, RequestRecord, Switches};
use python_compat::{
    json::{encode_indented, parse_json, Json, JsonObject},
    json_object,
};
use update_handoff_support::{
    finish, Case, Entry, Outcome, HEALTH, MAINTENANCE, OPERATION, PREPARATION_ID, STATUS, UPDATE_ID,
};
use update_runner::release::INVALID_SIGNATURE_MESSAGE;
use update_runner_support::{Fixture, Member, Served};

/// The release the update asks for.
const TARGET: &str = "1.2.3";
/// Its signature on the release host.
const SIGNATURE_PATH: &str = "/releases/download/v1.2.3/agents-server-manifest.sig";
/// Its archive on the release host.
const ARCHIVE_PATH: &str = "/releases/download/v1.2.3/agents-server-1.2.3.tar.gz";
/// `update_runner.main`'s report of a hold it could not release.
const NOT_RELEASED: &str = "The update failed and its execution hold could not be released safely.";
const RELEASE_FAILED: &str = "server_update_handoff_release_failed";
const RELEASE_ACTION: &str = "Retry the update to finish releasing its execution hold.";

/// Which implementation runs the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner<'a> {
    Original(&'a Originals),
    Port,
}

/// Both implementations, the port first.
fn runners(originals: &Originals) -> [Runner<'_>; 2] {
    [Runner::Port, Runner::Original(originals)]
}

impl Runner<'_> {
    /// `original` or `port`, for fixture names and messages.
    fn label(self) -> &'static str {
        match self {
            Runner::Original(_) => "original",
            Runner::Port => "port",
        }
    }

    /// The row's message for a bad signature: Python's `InvalidSignature`
    /// has no text; the port names the failure (update_runner_refusals).
    fn bad_signature_message(self) -> &'static str {
        match self {
            Runner::Original(_) => "",
            Runner::Port => INVALID_SIGNATURE_MESSAGE,
        }
    }
}

/// Runs the original's `main()` with its release URLs pointed at the test host
/// and `update_handoff.release_existing_handoff` served by `update-handoff
/// release` (see the file's doc): a failed release raises, like upstream's.
const ORIGINAL_LAUNCHER: &str = r#"
import json, os, subprocess, sys, types
sys.path.insert(0, os.environ["ORIGINALS_DIR"])
import update_runner
update_runner.RELEASE_BASE = os.environ["AGENTS_SERVER_RELEASE_BASE"]
update_runner.RELEASES_API_URL = os.environ["AGENTS_SERVER_RELEASES_API_URL"]

def release_existing_handoff(root, handoff_file, *, control=None, services=None):
    done = subprocess.run(
        [os.environ["UPDATE_HANDOFF"], "release", "--root", str(root), "--handoff-file", str(handoff_file)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return json.loads(done.stdout)

update_handoff = types.ModuleType("update_handoff")
update_handoff.release_existing_handoff = release_existing_handoff
sys.modules["update_handoff"] = update_handoff
sys.argv = ["update_runner.py"] + sys.argv[1:]
raise SystemExit(update_runner.main())
"#;

/// A split installation whose worker holds the update's sealed handoff, the
/// admitted row naming it, and a release host publishing `TARGET`.
struct Scenario {
    case: Case,
    releases: Fixture,
    /// The row the server admitted the update with.
    admitted: JsonObject,
    /// Extra environment of the runner.
    environment: Vec<(String, String)>,
}

impl Scenario {
    /// `None` when no systemd sandbox is available here.
    fn start(test: &str, members: &[Member]) -> Option<Scenario> {
        let case = Case::start(test)?;
        let releases = Fixture::new(test);
        let archive = releases.archive(members);
        releases.publish_legacy(TARGET, &archive);
        fs::create_dir(releases.root.path().join("tmp")).unwrap();
        // The server's fresh row (SERVER_UPDATE fields it writes before
        // launching the runner), with the handoff it sealed.
        let admitted = json_object! {
            "phase" => "starting",
            "update_id" => UPDATE_ID,
            "preparation_id" => PREPARATION_ID,
            "track" => "stable",
            "current_track" => "stable",
            "target_version" => TARGET,
            "latest_version" => TARGET,
            "update_available" => true,
            "message" => "Starting the AgentsServer update.",
            "runner_pid" => Json::Null,
            "started_at" => "2024-01-01T00:00:00Z",
            "finished_at" => Json::Null,
            "_execution_handoff" => case.handoff(),
        };
        case.write_status(&admitted);
        Some(Scenario {
            case,
            releases,
            admitted,
            environment: Vec::new(),
        })
    }

    /// The runner's temporary directory (`TMPDIR`).
    fn tmp(&self) -> PathBuf {
        self.releases.root.path().join("tmp")
    }

    /// `update-runner` as the server launches it for this update, in the
    /// sandbox's environment (so its `systemctl --user` reaches the manager).
    fn spawn_runner(&self, runner: Runner<'_>) -> Child {
        let case = &self.case;
        let mut command = match runner {
            Runner::Port => case.sandbox.command(binary_path("update-runner")),
            Runner::Original(originals) => {
                let mut command = case.sandbox.command("python3");
                command
                    .args(["-B", "-c", ORIGINAL_LAUNCHER])
                    .env("ORIGINALS_DIR", originals.dir())
                    .env("UPDATE_HANDOFF", binary_path("update-handoff"));
                command
            }
        };
        command
            .arg("--status-file")
            .arg(case.status_path())
            .arg("--public-key")
            .arg(&self.releases.key.pem_path)
            .args(["--port", &self.releases.health_port().to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--expected-version", TARGET, "--current-version", "1.2.2"])
            .args(["--update-id", UPDATE_ID])
            .args(["--expected-server-identity", &case.server_identity])
            .arg("--execution-handoff-file")
            .arg(case.handoff_path())
            .env("AGENTS_SERVER_INSTALL_DIR", &case.installation.install_root)
            .env("AGENTS_SERVER_RELEASE_BASE", self.releases.release_base())
            .env("AGENTS_SERVER_RELEASES_API_URL", self.releases.api_url())
            .env("TMPDIR", self.tmp())
            .envs(self.environment.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command.spawn().expect("spawn update-runner")
    }

    fn run_runner(&self, runner: Runner<'_>) -> Outcome {
        finish(self.spawn_runner(runner))
    }

    /// The status row as saved, checked to be the private, sorted, indented
    /// document `atomic_json` writes.
    fn row(&self) -> JsonObject {
        let path = self.case.status_path();
        let data = fs::read(&path).unwrap();
        let row = parse_json(&data)
            .ok()
            .and_then(|row| row.as_object().cloned())
            .expect("the row is a JSON object");
        assert_eq!(data, encode_indented(&Json::Object(row.clone())), "format");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "update_handoff reads the row as a private file"
        );
        row
    }

    /// What the failure handler leaves before any release outcome: the
    /// admitted row after `checking`, published as failed with `message`,
    /// still owning the handoff; timestamps as `<time>`.
    fn failed_row(&self, message: &str) -> JsonObject {
        let mut row = self.admitted.clone();
        for (key, value) in json_object! {
            "phase" => "failed",
            "message" => message,
            "runner_pid" => Json::Null,
            "heartbeat_at" => Json::Null,
            "error_code" => RELEASE_FAILED,
            "retryable" => true,
            "error_action" => RELEASE_ACTION,
            "finished_at" => "<time>",
            "updated_at" => "<time>",
        } {
            row.insert(key, value);
        }
        row
    }

    /// The failed row once the handoff was released.
    fn released_row(&self, message: &str) -> JsonObject {
        let mut row = self.failed_row(message);
        row.insert("_execution_handoff", Json::Null);
        row.insert("error_code", Json::Null);
        row.insert("error_action", Json::Null);
        row
    }

    /// The worker's and the gateway's MainPIDs as systemd reports them.
    fn main_pids(&self) -> (u32, u32) {
        let sandbox = &self.case.sandbox;
        (
            sandbox.unit_state(WORKER_UNIT).main_pid,
            sandbox.unit_state(GATEWAY_UNIT).main_pid,
        )
    }

    /// Entries left in the runner's temporary directory.
    fn leftovers(&self) -> Vec<String> {
        fs::read_dir(self.tmp())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

/// `finished_at` and `updated_at` (a fresh `utc_now()`) as `<time>`.
fn normalised(mut row: JsonObject) -> JsonObject {
    for key in ["finished_at", "updated_at"] {
        let stamp = row.get(key).and_then(Json::as_str).unwrap_or_default();
        let shape = stamp.len() == 20
            && stamp.ends_with('Z')
            && stamp.as_bytes()[10] == b'T'
            && stamp.bytes().enumerate().all(|(index, byte)| {
                matches!(index, 4 | 7 | 10 | 13 | 16 | 19) || byte.is_ascii_digit()
            });
        assert!(shape, "{key} is a UTC second: {stamp:?}");
        row.insert(key, "<time>");
    }
    row
}

/// The handoff file's identity, mode, time and bytes.
fn handoff_file_state(path: &Path) -> (u64, u32, i64, i64, Vec<u8>) {
    let meta = fs::metadata(path).unwrap();
    (
        meta.ino(),
        meta.mode(),
        meta.mtime(),
        meta.mtime_nsec(),
        fs::read(path).unwrap(),
    )
}

/// What a failed update must leave exactly as it was: the services' main
/// PIDs, the handoff file and the installation.
struct Untouched {
    pids: (u32, u32),
    handoff: (u64, u32, i64, i64, Vec<u8>),
    tree: BTreeMap<PathBuf, Entry>,
}

impl Scenario {
    /// The scenario's [`Untouched`] state now.
    fn untouched(&self) -> Untouched {
        Untouched {
            pids: self.main_pids(),
            handoff: handoff_file_state(&self.case.handoff_path()),
            tree: self.case.install_tree(),
        }
    }

    /// Services, handoff file and installation are as `before`, and no
    /// installation lock is left.
    #[track_caller]
    fn assert_untouched(&self, before: &Untouched) {
        let case = &self.case;
        assert_eq!(
            self.main_pids(),
            before.pids,
            "the services were not touched"
        );
        assert_eq!(handoff_file_state(&case.handoff_path()), before.handoff);
        assert_eq!(
            case.install_tree(),
            before.tree,
            "the installation is unchanged"
        );
        case.assert_unlocked();
    }

    /// While the runner releases the handoff: its failed row (with
    /// `message`) is durable, it does not hold the status flock (the
    /// worker's callback reads this row), and the worker still holds the
    /// lease (read from the worker's persisted state, not asked: the request
    /// log must show the runner's requests alone).
    fn assert_published_failed_outside_the_status_lock(&self, message: &str) {
        let case = &self.case;
        assert_eq!(normalised(self.row()), self.failed_row(message));
        let lock = fs::File::open(
            case.status_path()
                .with_file_name(".server-update.json.lock"),
        )
        .expect("the runner's status lock file");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .expect("the runner does not hold the status lock while releasing");
        let persisted = fs::read(
            case.installation
                .state_root
                .join("admin/execution-maintenance.json"),
        )
        .unwrap();
        let lease = parse_json(&persisted).unwrap().get("lease").cloned();
        assert_eq!(
            lease.as_ref().and_then(|lease| lease.get("lease_id")),
            Some(&Json::from(case.lease_id.as_str()))
        );
    }
}

/// Status, authenticated health, status again, then one release POST with
/// the control token answered `release_status`.
fn assert_one_release(requests: &[RequestRecord], release_status: u16) {
    let seen: Vec<_> = requests
        .iter()
        .map(|record| {
            (
                record.method.as_str(),
                record.path.as_str(),
                record.credential.as_str(),
                record.action.as_deref(),
                record.status,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("GET", STATUS, "control", None, 200),
            ("GET", HEALTH, "agent", None, 200),
            ("GET", STATUS, "control", None, 200),
            (
                "POST",
                MAINTENANCE,
                "control",
                Some("release"),
                release_status
            ),
        ]
    );
}

/// Exit 1 with nothing printed: the row is the runner's only report.
#[track_caller]
fn assert_silent_failure(outcome: &Outcome) {
    assert_eq!(
        (
            outcome.code,
            outcome.stdout.as_str(),
            outcome.stderr.as_str()
        ),
        (Some(1), "", ""),
        "runner outcome"
    );
}

fn well_formed() -> Vec<Member> {
    Fixture::legacy_members(TARGET)
}

#[test]
fn a_bad_signature_fails_the_update_and_releases_the_sealed_handoff() {
    let originals = agents_tests::require_originals!();
    for runner in runners(&originals) {
        let test = format!("runner_handoff_signature_{}", runner.label());
        let Some(scenario) = Scenario::start(&test, &well_formed()) else {
            return;
        };
        let case = &scenario.case;
        scenario
            .releases
            .serve(SIGNATURE_PATH, Served::ok(vec![7u8; 64]));
        case.assert_lease_held();
        let before = scenario.untouched();
        assert_eq!(
            before.pids,
            (case.services.worker_pid, case.services.gateway_pid)
        );
        let mark = case.mark();

        assert_silent_failure(&scenario.run_runner(runner));

        assert_eq!(
            normalised(scenario.row()),
            scenario.released_row(runner.bad_signature_message()),
            "{}",
            runner.label()
        );
        // Only the exact lease's owner gets a 200 for `release` (any other
        // operation or lease id is a 409), and the worker now holds nothing.
        assert_one_release(&case.requests_since(mark), 200);
        assert!(
            case.worker_lease().is_null(),
            "the worker released its hold"
        );
        scenario.assert_untouched(&before);
        assert_eq!(scenario.leftovers(), Vec::<String>::new());
        assert!(
            !scenario
                .releases
                .host_requests()
                .iter()
                .any(|path| path == ARCHIVE_PATH),
            "the archive was never fetched"
        );
    }
}

#[test]
fn a_refused_archive_is_published_failed_before_the_release_outside_the_status_lock() {
    let originals = agents_tests::require_originals!();
    // An archive without install.sh: extracted, then refused.
    let top = format!("agents-server-{TARGET}");
    let members = [
        Member::dir(&format!("{top}/")),
        Member::file(&format!("{top}/VERSION"), b"1.2.3\n"),
    ];
    let message = "release archive has an invalid layout";
    for runner in runners(&originals) {
        let test = format!("runner_handoff_archive_{}", runner.label());
        let Some(scenario) = Scenario::start(&test, &members) else {
            return;
        };
        let case = &scenario.case;
        let before = scenario.untouched();

        // Hold the worker's health reply: the release is under way.
        case.stall_health();
        let mark = case.mark();
        let child = scenario.spawn_runner(runner);
        let outcome = case.during_health(child, mark, || {
            scenario.assert_published_failed_outside_the_status_lock(message);
        });
        assert_silent_failure(&outcome);

        assert_eq!(
            normalised(scenario.row()),
            scenario.released_row(message),
            "{}",
            runner.label()
        );
        let requests = case.requests_since(mark);
        assert_eq!(requests[1].outcome, "stalled");
        assert_one_release(&requests, 200);
        assert!(
            case.worker_lease().is_null(),
            "the worker released its hold"
        );
        scenario.assert_untouched(&before);
        assert!(
            scenario
                .releases
                .host_requests()
                .iter()
                .any(|path| path == ARCHIVE_PATH),
            "the archive was downloaded"
        );
        assert_eq!(
            scenario.leftovers(),
            Vec::<String>::new(),
            "nothing extracted is left behind"
        );
    }
}

#[test]
fn a_refused_release_is_reported_retryably_and_the_servers_retry_finishes_it() {
    let originals = agents_tests::require_originals!();
    for runner in runners(&originals) {
        let test = format!("runner_handoff_refused_{}", runner.label());
        let Some(scenario) = Scenario::start(&test, &well_formed()) else {
            return;
        };
        let case = &scenario.case;
        scenario
            .releases
            .serve(SIGNATURE_PATH, Served::ok(vec![7u8; 64]));
        let before = scenario.untouched();
        case.switch(Switches {
            refuse: vec!["release".to_string()],
            ..Switches::default()
        });
        let mark = case.mark();

        assert_silent_failure(&scenario.run_runner(runner));

        let row = scenario.row();
        assert_eq!(
            normalised(row.clone()),
            scenario.failed_row(NOT_RELEASED),
            "{}",
            runner.label()
        );
        assert_one_release(&case.requests_since(mark), 409);
        case.assert_lease_held();
        scenario.assert_untouched(&before);
        assert_eq!(scenario.leftovers(), Vec::<String>::new());

        // The saved row is exactly what the server's handoff retry accepts.
        case.switch(Switches::default());
        let mark = case.mark();
        case.retry(&row)
            .assert_released(false, &case.services.worker_instance_id());
        assert_eq!(case.maintenance_since(mark), ["release"]);
        assert!(case.worker_lease().is_null());
        assert_eq!(
            scenario.row(),
            row,
            "the retry leaves the row to the server"
        );
        assert_eq!(
            row.get("_execution_handoff"),
            Some(&Json::Object(case.handoff()))
        );
        assert_eq!(
            case.handoff().get("operation_id"),
            Some(&Json::from(OPERATION))
        );
    }
}

#[test]
fn the_worker_control_channel_never_goes_through_a_proxy() {
    // Every proxy variable names a real proxy and no_proxy is empty: the
    // release host is reached through it, the worker's control channel and
    // its callback health (loopback, pinned to the worker's PID) are not.
    let Some(proxy) = ForwardProxy::start_or_skip(agents_tests::test_name!(), None) else {
        return;
    };
    let Some(mut scenario) = Scenario::start("runner_handoff_proxy", &well_formed()) else {
        return;
    };
    let url = proxy.url();
    scenario.environment = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"]
        .iter()
        .map(|name| (name.to_string(), url.clone()))
        .chain([
            ("no_proxy".to_string(), String::new()),
            ("NO_PROXY".to_string(), String::new()),
        ])
        .collect();
    scenario
        .releases
        .serve(SIGNATURE_PATH, Served::ok(vec![7u8; 64]));
    let case = &scenario.case;
    let mark = case.mark();

    assert_silent_failure(&scenario.run_runner(Runner::Port));

    assert_eq!(
        normalised(scenario.row()),
        scenario.released_row(Runner::Port.bad_signature_message())
    );
    assert_one_release(&case.requests_since(mark), 200);
    assert!(
        case.worker_lease().is_null(),
        "the worker released its hold"
    );
    let release_host = scenario
        .releases
        .release_base()
        .trim_end_matches("/releases")
        .to_string();
    let requests = proxy.requests();
    assert!(
        requests.iter().any(|line| line.contains(SIGNATURE_PATH)),
        "the release host was reached through the proxy: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|line| line.starts_with(&format!("GET {release_host}/"))),
        "only the release host went through the proxy: {requests:?}"
    );
}

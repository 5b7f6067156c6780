//! A stand-in installer drives `execution-activation` through install.sh's
//! lifecycle orders (install-sh-contract §2) against a real systemd user
//! manager running the test worker: a fresh install, an update of a running
//! split install under a sealed handoff, and a rollback after the candidate
//! started. After each step it checks the helper's stdout and exit status,
//! the units, the links, the journal and the worker's lease.
//!
//! The journal itself is advanced by the stand-in journal writer, as
//! install.sh advances it with activation_transaction.py.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use agents_common::{
    config_staging_paths, ActivationInvocation, ActivationManifest, ExecutionLayout,
    NativeServices, ServiceSnapshot, SystemCommandRunner, WorkerControl,
};
use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::journal_writer::{Begin, Roots};
use agents_tests::write_file;
use agents_tests::{
    binary_path, free_port, poll_until, test_worker_path, HttpRequest, Sandbox, AGENT_TOKEN,
};
use execution_activation::replace_config::replace_config;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

/// How long a started unit may take to publish its receipt.
const SERVICE_TIMEOUT: Duration = Duration::from_secs(20);

/// install.sh, reduced to the helper calls and journal steps of §2.
struct Installer<'a> {
    sandbox: &'a Sandbox,
    roots: Roots,
    interpreter: PathBuf,
    /// The candidate being activated.
    version: String,
    health_files: std::cell::Cell<u32>,
}

impl<'a> Installer<'a> {
    fn new(sandbox: &'a Sandbox) -> Installer<'a> {
        let mut roots = Roots::create(sandbox.base(), sandbox.home());
        roots.port = free_port();
        roots.write_env(&format!("AGENTSDOCK_AGENT_TOKEN={AGENT_TOKEN}\n"));
        roots.hold_lock(std::process::id());
        // The services run the test worker as `.venv/bin/python`.
        let interpreter = sandbox.base().join("python-home/bin/python3.11");
        fs::create_dir_all(interpreter.parent().unwrap()).unwrap();
        fs::copy(test_worker_path(), &interpreter).unwrap();
        fs::set_permissions(&interpreter, fs::Permissions::from_mode(0o755)).unwrap();
        Installer {
            sandbox,
            roots,
            interpreter,
            version: String::new(),
            health_files: std::cell::Cell::new(0),
        }
    }

    fn release(&self, version: &str) -> PathBuf {
        self.roots
            .release_running(version, version, &self.interpreter)
    }

    fn staging(&mut self, version: &str) -> PathBuf {
        self.version = version.to_string();
        self.roots.release_running(
            &format!(".staging-{version}-4242"),
            version,
            &self.interpreter,
        )
    }

    fn layout(&self, version: &str) -> ExecutionLayout {
        self.roots.layout(version)
    }

    /// `execution_activation_command OP ...` with install.sh's common flags.
    fn run(&self, operation: &str, extra: &[&str]) -> Output {
        let mut args = self.roots.operation_args(
            operation,
            &self.version,
            "127.0.0.1",
            i128::from(self.roots.port),
        );
        args.extend([
            "--expected-server-identity".to_string(),
            self.server_identity(),
        ]);
        args.extend(extra.iter().map(|item| item.to_string()));
        self.sandbox
            .command(binary_path("execution-activation"))
            .args(args)
            .output()
            .expect("run execution-activation")
    }

    /// Exit 0, nothing on stderr; returns stdout.
    #[track_caller]
    fn ok(&self, operation: &str, extra: &[&str]) -> String {
        let output = self.run(operation, extra);
        assert_eq!(
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).as_ref()
            ),
            (Some(0), ""),
            "{operation} failed"
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Exit 1 with exactly this stderr line and no stdout.
    #[track_caller]
    fn fails(&self, operation: &str, extra: &[&str], line: &str) {
        let output = self.run(operation, extra);
        assert_eq!(
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).as_ref(),
                String::from_utf8_lossy(&output.stderr).as_ref()
            ),
            (Some(1), "", format!("{line}\n").as_str()),
            "{operation}"
        );
    }

    /// The stable identity the test worker reports for this state root.
    fn server_identity(&self) -> String {
        let path = self.roots.state_root().join("server-identity");
        fs::read_to_string(path)
            .map(|text| text.trim().to_string())
            .unwrap_or_default()
    }

    /// install.sh's health proof: the raw authenticated `/api/health` body of
    /// the public listener, in a private file under `state/admin`.
    fn health_file(&self) -> PathBuf {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.roots.port));
        let body = poll_until(SERVICE_TIMEOUT, "public health", || {
            let response = HttpRequest::get("/api/health")
                .bearer(AGENT_TOKEN)
                .send(address)
                .ok()?;
            (response.status == 200).then_some(response.body)
        });
        let admin = self.roots.state_root().join("admin");
        fs::create_dir_all(&admin).unwrap();
        fs::set_permissions(&admin, fs::Permissions::from_mode(0o700)).unwrap();
        let count = self.health_files.get() + 1;
        self.health_files.set(count);
        let path = admin.join(format!(".install-health.{count:06}"));
        write_file(&path, &body, 0o600);
        path
    }

    fn verify(&self, operation: &str) {
        let health = self.health_file();
        self.ok(operation, &["--health-file", health.to_str().unwrap()]);
        fs::remove_file(health).unwrap();
    }

    /// install.sh's write_runtime_env: the env file through the journal.
    fn replace_env(&self) {
        let (_directory, manifest) = ActivationManifest::read(&self.roots.root(), false).unwrap();
        let (source, _) =
            config_staging_paths(&self.roots.env_path(), manifest.transaction_id(), "env");
        write_file(
            &source,
            format!("AGENTSDOCK_AGENT_TOKEN={AGENT_TOKEN}\n").as_bytes(),
            0o600,
        );
        let args = ActivationInvocation::owned(&manifest, &self.roots.root());
        replace_config(&args, "env", &source, 0o600).unwrap();
    }

    fn phase(&self) -> String {
        self.roots
            .manifest()
            .get("phase")
            .and_then(Json::as_str)
            .unwrap()
            .to_string()
    }

    fn record(&self, phase: &str) {
        self.roots.record(phase);
        assert_eq!(self.phase(), phase);
    }

    /// `systemctl is-enabled`: the on-disk enablement links (`show` may
    /// report a cached UnitFileState until the next reload).
    fn enablement(&self, unit: &str) -> String {
        let output = self.sandbox.systemctl(&["is-enabled", unit]);
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    fn unit(&self, unit: &str) -> agents_tests::UnitState {
        self.sandbox.unit_state(unit)
    }

    /// Waits until both units run and the worker's receipt names the
    /// worker unit's MainPID.
    fn wait_running(&self, version: &str) {
        poll_until(SERVICE_TIMEOUT, "both services running", || {
            let worker = self.unit(WORKER_UNIT);
            let gateway = self.unit(GATEWAY_UNIT);
            let receipt = fs::read(self.roots.runtime_dir().join("worker.json")).ok()?;
            let receipt = python_compat::json::parse_json(&receipt).ok()?;
            let release = self.roots.release_dir(version);
            (worker.is_running()
                && gateway.is_running()
                && receipt.get("pid") == Some(&Json::from(worker.main_pid))
                && receipt.get("release_root") == Some(&Json::from(release.to_str().unwrap())))
            .then_some(())
        });
    }

    fn manager(&self, version: &str) -> Manager {
        let runner = SystemCommandRunner::default().with_environment(self.sandbox.env());
        Manager(NativeServices::with_runner(
            &self.layout(version),
            Box::new(runner),
        ))
    }

    /// The worker's current lease, read over its private control channel.
    fn lease(&self, version: &str) -> Json {
        let manager = self.manager(version);
        let control = WorkerControl::new().services(&manager);
        let (_record, status) = control.status(&self.layout(version)).unwrap();
        status.get("lease").cloned().unwrap_or(Json::Null)
    }

    fn operation_id(&self) -> String {
        let manifest = self.roots.manifest();
        manifest
            .get("execution")
            .and_then(|execution| execution.get("operation_id"))
            .and_then(Json::as_str)
            .unwrap()
            .to_string()
    }

    /// The lease is the sealed hold of this activation's operation.
    #[track_caller]
    fn assert_held(&self, version: &str) {
        let lease = self.lease(version);
        assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)), "{lease:?}");
        assert_eq!(
            lease.get("operation_id"),
            Some(&Json::from(self.operation_id()))
        );
    }

    fn current_target(&self) -> PathBuf {
        fs::read_link(self.roots.root().join("current")).unwrap()
    }
}

/// The sandbox's manager as WorkerControl reads native state.
struct Manager(NativeServices);

impl ServiceSnapshot for Manager {
    fn snapshot_json(&self) -> agents_common::Result<JsonObject> {
        Ok(self
            .0
            .snapshot()?
            .to_json()
            .as_object()
            .cloned()
            .unwrap_or_default())
    }
}

/// The unit files' modes and ownership as publish leaves them.
#[track_caller]
fn assert_units_published(roots: &Roots) {
    for path in [roots.service_path(), roots.gateway_path()] {
        let info = fs::metadata(&path).unwrap();
        assert_eq!(
            (info.mode() & 0o7777, info.nlink()),
            (0o644, 1),
            "{}",
            path.display()
        );
    }
    let manifest = fs::metadata(roots.root().join("execution-layout.json")).unwrap();
    assert_eq!(manifest.mode() & 0o7777, 0o600);
}

#[test]
fn fresh_install_through_commit() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    let staging = installer.staging("1.1.0");
    assert_eq!(
        installer.ok(
            "candidate-api-contract",
            &["--candidate-source", staging.to_str().unwrap()]
        ),
        "7\n"
    );
    assert_eq!(installer.ok("preflight", &["--health-file", ""]), "");
    assert_eq!(installer.ok("snapshot", &[]), "absent|false\n");
    installer.roots.begin(&Begin::split(&staging, "1.1.0"));
    assert_eq!(installer.ok("detect", &[]), "split\n");
    assert_eq!(installer.ok("durability", &[]), "");
    installer.record("quiescing");
    assert_eq!(installer.ok("preflight", &["--health-file", ""]), "");
    assert_eq!(installer.ok("suppress", &[]), "");
    assert_eq!(installer.ok("stop", &["--health-file", ""]), "");
    installer.record("quiesced");
    installer.record("linking");
    installer.roots.activate_files();
    installer.record("linked");
    assert_eq!(
        installer.current_target(),
        installer.roots.release_dir("1.1.0")
    );
    installer.replace_env();
    assert_eq!(installer.ok("publish", &[]), "");
    assert_units_published(&installer.roots);
    installer.record("candidate-starting");
    assert_eq!(installer.ok("stop", &["--health-file", ""]), "");
    assert_eq!(installer.ok("start", &[]), "");
    installer.wait_running("1.1.0");
    assert_eq!(installer.enablement(WORKER_UNIT), "enabled");
    assert_eq!(installer.enablement(GATEWAY_UNIT), "enabled");
    // The candidate worker holds its sealed startup lease for this journal.
    installer.assert_held("1.1.0");
    installer.verify("verify");
    installer.record("candidate-healthy");
    installer.record("committing");
    installer.verify("verify");
    installer.record("committed");
    // Release only after settlement; the hold is gone afterwards.
    assert_eq!(installer.ok("release", &[]), "");
    assert_eq!(installer.lease("1.1.0"), Json::Null);
    installer.roots.finish();
    assert_eq!(installer.ok("detect", &[]), "split\n");
    assert!(installer.unit(WORKER_UNIT).is_running());
}

/// A running split 1.0.0 whose worker sealed a handoff lease for a managed
/// update, and the server-admitted handoff file.
fn running_split(installer: &Installer) -> (JsonObject, PathBuf) {
    installer.release("1.0.0");
    installer.roots.install_split("1.0.0");
    let layout = installer.layout("1.0.0");
    agents_common::prepare_runtime(&layout).unwrap();
    installer.sandbox.systemctl_ok(&["daemon-reload"]);
    installer
        .sandbox
        .systemctl_ok(&["enable", WORKER_UNIT, GATEWAY_UNIT]);
    installer.sandbox.systemctl_ok(&["start", WORKER_UNIT]);
    installer.sandbox.systemctl_ok(&["start", GATEWAY_UNIT]);
    installer.wait_running("1.0.0");
    let operation = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";
    let manager = installer.manager("1.0.0");
    let control = WorkerControl::new().services(&manager);
    let pid = i64::from(installer.unit(WORKER_UNIT).main_pid);
    let hold = control.seal_for_stop(&layout, operation, pid).unwrap();
    // The stable server identity is what the worker reports.
    let health =
        python_compat::json::parse_json(&fs::read(installer.health_file()).unwrap()).unwrap();
    let identity = health
        .get("server_identity")
        .and_then(Json::as_str)
        .unwrap()
        .to_string();
    fs::write(
        installer.roots.state_root().join("server-identity"),
        format!("{identity}\n"),
    )
    .unwrap();
    let handoff = json_object! {
        "schema" => 1,
        "operation_id" => operation,
        "worker_instance_id" => hold.record.get("instance_id").cloned().unwrap(),
        "lease_id" => hold.lease.get("lease_id").cloned().unwrap(),
        "expected_server_identity" => identity.as_str(),
    };
    let preparations = installer.roots.root().join(".update-preparations");
    let directory = preparations.join("00112233445566778899aabbccddeeff");
    fs::create_dir_all(&directory).unwrap();
    for path in [&preparations, &directory] {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let path = directory.join("handoff-ffeeddccbbaa99887766554433221100.json");
    write_file(
        &path,
        &python_compat::json::encode_indented(&Json::Object(handoff.clone())),
        0o600,
    );
    (handoff, path)
}

/// `activation_transaction begin` for the update of the running split
/// 1.0.0 to the staged 1.1.0 under the server-admitted `handoff`.
fn begin_handoff_update(installer: &Installer, handoff: JsonObject, staging: &std::path::Path) {
    let old = installer.roots.release_dir("1.0.0");
    installer.roots.begin(&Begin {
        old: Some((old.clone(), old)),
        service_state: "running".into(),
        service_enabled: true,
        gateway_state: "running".into(),
        gateway_enabled: true,
        handoff: Some(Json::Object(handoff)),
        ..Begin::split(staging, "1.1.0")
    });
}

/// The update sequence up to a started, verified candidate.
fn update_to_candidate(installer: &mut Installer) -> PathBuf {
    let (handoff, handoff_file) = running_split(installer);
    let handoff_arg = handoff_file.to_str().unwrap().to_string();
    let staging = installer.staging("1.1.0");
    let stop_args = ["--health-file", "", "--handoff-file", handoff_arg.as_str()];
    assert_eq!(installer.ok("preflight", &stop_args), "");
    assert_eq!(installer.ok("snapshot", &[]), "running|true\n");
    begin_handoff_update(installer, handoff, &staging);
    assert_eq!(installer.ok("durability", &[]), "");
    installer.record("quiescing");
    assert_eq!(installer.ok("preflight", &stop_args), "");
    assert_eq!(installer.ok("suppress", &[]), "");
    assert_eq!(installer.enablement(WORKER_UNIT), "disabled");
    assert_eq!(installer.enablement(GATEWAY_UNIT), "disabled");
    assert_eq!(installer.ok("stop", &stop_args), "");
    assert!(
        !installer.unit(WORKER_UNIT).is_running() && !installer.unit(GATEWAY_UNIT).is_running()
    );
    installer.record("quiesced");
    installer.record("linking");
    installer.roots.activate_files();
    installer.record("linked");
    installer.replace_env();
    assert_eq!(installer.ok("publish", &[]), "");
    assert_units_published(&installer.roots);
    installer.record("candidate-starting");
    assert_eq!(installer.ok("stop", &stop_args), "");
    assert_eq!(installer.ok("start", &[]), "");
    installer.wait_running("1.1.0");
    installer.assert_held("1.1.0");
    installer.verify("verify");
    handoff_file
}

#[test]
fn update_of_a_running_split_install_through_commit() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    update_to_candidate(&mut installer);
    installer.record("candidate-healthy");
    installer.record("committing");
    installer.verify("verify");
    installer.record("committed");
    // previous-worker names the pinned old generation until the journal ends.
    assert_eq!(
        installer.ok("previous-worker", &[]),
        format!("{}\n", installer.roots.release_dir("1.0.0").display())
    );
    assert_eq!(installer.ok("release", &[]), "");
    assert_eq!(installer.lease("1.1.0"), Json::Null);
    installer.roots.finish();
    assert_eq!(
        installer.current_target(),
        installer.roots.release_dir("1.1.0")
    );
}

#[test]
fn rollback_after_the_candidate_started() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    let handoff_file = update_to_candidate(&mut installer);
    let stop_args = [
        "--health-file",
        "",
        "--handoff-file",
        handoff_file.to_str().unwrap(),
    ];
    // Release is refused before settlement.
    installer.fails(
        "release",
        &[],
        "RuntimeError: admission cannot reopen before verified transaction settlement",
    );
    installer.record("rolling-back");
    assert_eq!(installer.ok("suppress", &[]), "");
    assert_eq!(installer.ok("stop", &stop_args), "");
    assert!(!installer.unit(WORKER_UNIT).is_running());
    installer.roots.restore_files();
    installer.record("rolled-back");
    assert_eq!(
        installer.current_target(),
        installer.roots.release_dir("1.0.0")
    );
    assert_eq!(installer.ok("restore", &[]), "");
    installer.wait_running("1.0.0");
    assert_eq!(installer.enablement(WORKER_UNIT), "enabled");
    assert_eq!(
        installer.ok("previous-worker", &[]),
        format!("{}\n", installer.roots.release_dir("1.0.0").display())
    );
    // The restored old worker holds the activation's startup lease again.
    installer.assert_held("1.0.0");
    installer.verify("verify-restored");
    installer.record("rollback-healthy");
    assert_eq!(installer.ok("release", &[]), "");
    assert_eq!(installer.lease("1.0.0"), Json::Null);
    installer.roots.finish();
}

#[test]
fn stop_refuses_a_worker_without_the_sealed_handoff() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    let (_handoff, handoff_file) = running_split(&installer);
    installer.staging("1.1.0");
    // Without the handoff the operation is unknown: the sealed lease is not ours.
    installer.fails(
        "preflight",
        &["--health-file", ""],
        "RuntimeError: running worker has no exact sealed installer handoff",
    );
    // A handoff naming another server identity is refused before anything.
    installer.fails(
        "preflight",
        &[
            "--health-file",
            "",
            "--handoff-file",
            handoff_file.to_str().unwrap(),
            "--expected-server-identity",
            "someone-else",
        ],
        "RuntimeError: preflight handoff server identity changed",
    );
    assert!(installer.unit(WORKER_UNIT).is_running());
}

/// The update sequence up to the quiesced phase (both services stopped).
fn update_to_quiesced(installer: &mut Installer) -> PathBuf {
    let (handoff, handoff_file) = running_split(installer);
    let handoff_arg = handoff_file.to_str().unwrap().to_string();
    let staging = installer.staging("1.1.0");
    let stop_args = ["--health-file", "", "--handoff-file", handoff_arg.as_str()];
    begin_handoff_update(installer, handoff, &staging);
    assert_eq!(installer.ok("durability", &[]), "");
    installer.record("quiescing");
    assert_eq!(installer.ok("preflight", &stop_args), "");
    assert_eq!(installer.ok("suppress", &[]), "");
    assert_eq!(installer.ok("stop", &stop_args), "");
    // An interrupted installer repeats the step: stop is idempotent.
    assert_eq!(installer.ok("stop", &stop_args), "");
    installer.record("quiesced");
    handoff_file
}

#[test]
fn rollback_from_the_quiescing_group_restores_the_old_services() {
    let Some(sandbox) = Sandbox::start_or_skip("rollback_from_the_quiescing_group") else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    update_to_quiesced(&mut installer);
    installer.record("rolling-back");
    installer.roots.restore_files();
    installer.record("rolled-back");
    assert_eq!(installer.ok("restore", &[]), "");
    installer.wait_running("1.0.0");
    // Restoring again is a no-op for running roles (enablement only).
    assert_eq!(installer.ok("restore", &[]), "");
    assert_eq!(installer.enablement(WORKER_UNIT), "enabled");
    assert_eq!(installer.enablement(GATEWAY_UNIT), "enabled");
    assert_eq!(
        installer.ok("previous-worker", &[]),
        format!("{}\n", installer.roots.release_dir("1.0.0").display())
    );
    installer.verify("verify-restored");
    installer.record("rollback-healthy");
    assert_eq!(installer.ok("release", &[]), "");
    assert_eq!(installer.lease("1.0.0"), Json::Null);
    installer.roots.finish();
    assert_eq!(
        installer.current_target(),
        installer.roots.release_dir("1.0.0")
    );
}

#[test]
fn rollback_from_the_linked_group_after_publication() {
    let Some(sandbox) = Sandbox::start_or_skip("rollback_from_the_linked_group") else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    update_to_quiesced(&mut installer);
    installer.record("linking");
    installer.roots.activate_files();
    installer.record("linked");
    installer.replace_env();
    assert_eq!(installer.ok("publish", &[]), "");
    // From linking..authority with a prior service: suppress, stop, restore.
    installer.record("rolling-back");
    assert_eq!(installer.ok("suppress", &[]), "");
    assert_eq!(installer.ok("stop", &["--health-file", ""]), "");
    installer.roots.restore_files();
    installer.record("rolled-back");
    let unit = fs::read_to_string(installer.roots.service_path()).unwrap();
    assert!(
        unit.contains("releases/1.0.0"),
        "the old unit is back:\n{unit}"
    );
    assert_eq!(installer.ok("restore", &[]), "");
    installer.wait_running("1.0.0");
    installer.verify("verify-restored");
    installer.record("rollback-healthy");
    assert_eq!(installer.ok("release", &[]), "");
    installer.roots.finish();
}

#[test]
fn verify_refuses_mismatched_health_and_a_lost_hold() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    update_to_candidate(&mut installer);
    // A health body naming another worker version is not the paired release.
    let health = installer.health_file();
    let mut body = python_compat::json::parse_json(&fs::read(&health).unwrap()).unwrap();
    let mut worker = body
        .get("execution_service")
        .and_then(Json::as_object)
        .cloned()
        .unwrap();
    worker.insert("version", "1.0.0");
    body.as_object_mut()
        .unwrap()
        .insert("execution_service", worker);
    write_file(&health, &python_compat::json::encode_indented(&body), 0o600);
    installer.fails(
        "verify",
        &["--health-file", health.to_str().unwrap()],
        "RuntimeError: candidate gateway and worker do not match the paired release",
    );
    // A readable but non-private health file is refused outright.
    fs::set_permissions(&health, fs::Permissions::from_mode(0o644)).unwrap();
    installer.fails(
        "verify",
        &["--health-file", health.to_str().unwrap()],
        "PermissionError: activation transaction file is unsafe",
    );
    // Once the activation's hold is gone, the candidate is not ours to verify.
    let layout = installer.layout("1.1.0");
    let manager = installer.manager("1.1.0");
    WorkerControl::new()
        .services(&manager)
        .release(&layout, &installer.operation_id())
        .unwrap();
    installer.record("candidate-healthy");
    let fresh = installer.health_file();
    installer.fails(
        "verify",
        &["--health-file", fresh.to_str().unwrap()],
        "RuntimeError: candidate worker is not held by this activation",
    );
    // After commit the hold is no longer required.
    installer.record("committing");
    installer.record("committed");
    installer.verify("verify");
}

#[test]
fn preflight_refuses_a_handoff_for_another_lease() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    let (mut handoff, handoff_file) = running_split(&installer);
    installer.staging("1.1.0");
    handoff.insert("lease_id", "00000000-0000-4000-8000-000000000000");
    write_file(
        &handoff_file,
        &python_compat::json::encode_indented(&Json::Object(handoff)),
        0o600,
    );
    installer.fails(
        "preflight",
        &[
            "--health-file",
            "",
            "--handoff-file",
            handoff_file.to_str().unwrap(),
        ],
        "RuntimeError: retiring worker identity changed after admission",
    );
    assert!(installer.unit(WORKER_UNIT).is_running());
}

/// install.sh's rollback before quiescing (from `prepared` or `guarded`):
/// nothing was stopped, so there is no stop and no restore; the journal's
/// files are restored and `finish_activation_transaction` runs only
/// `release`, which gives the untouched old worker its admission back.
fn rollback_before_quiescing(installer: &mut Installer, guarded: bool) {
    let (handoff, handoff_file) = running_split(installer);
    let worker_pid = installer.unit(WORKER_UNIT).main_pid;
    let gateway_pid = installer.unit(GATEWAY_UNIT).main_pid;
    let units = [
        fs::read(installer.roots.service_path()).unwrap(),
        fs::read(installer.roots.gateway_path()).unwrap(),
    ];
    let handoff_arg = handoff_file.to_str().unwrap().to_string();
    let stop_args = ["--health-file", "", "--handoff-file", handoff_arg.as_str()];
    let staging = installer.staging("1.1.0");
    assert_eq!(installer.ok("preflight", &stop_args), "");
    assert_eq!(installer.ok("snapshot", &[]), "running|true\n");
    begin_handoff_update(installer, handoff, &staging);
    if guarded {
        installer.record("guarded");
    }
    assert_eq!(installer.ok("durability", &[]), "");
    installer.assert_held("1.0.0");
    // The activation fails here; EXIT cleanup rolls back.
    installer.record("rolling-back");
    installer.fails(
        "release",
        &[],
        "RuntimeError: admission cannot reopen before verified transaction settlement",
    );
    installer.roots.restore_files();
    installer.record("rolled-back");
    installer.record("rollback-healthy");
    // finish_activation_transaction: release first.
    assert_eq!(installer.ok("release", &[]), "");
    assert_eq!(installer.lease("1.0.0"), Json::Null);
    installer.roots.finish();
    // Nothing native changed: same processes, same enablement and units.
    assert_eq!(installer.unit(WORKER_UNIT).main_pid, worker_pid);
    assert_eq!(installer.unit(GATEWAY_UNIT).main_pid, gateway_pid);
    assert_eq!(installer.enablement(WORKER_UNIT), "enabled");
    assert_eq!(installer.enablement(GATEWAY_UNIT), "enabled");
    assert_eq!(
        [
            fs::read(installer.roots.service_path()).unwrap(),
            fs::read(installer.roots.gateway_path()).unwrap(),
        ],
        units
    );
    assert_eq!(
        installer.current_target(),
        installer.roots.release_dir("1.0.0")
    );
    assert_eq!(installer.ok("detect", &[]), "split\n");
    // A release after the journal is gone has no transaction to settle.
    let output = installer.run("release", &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("FileNotFoundError: "),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn rollback_from_prepared_runs_only_release() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    rollback_before_quiescing(&mut installer, false);
}

#[test]
fn rollback_from_guarded_runs_only_release() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let mut installer = Installer::new(&sandbox);
    rollback_before_quiescing(&mut installer, true);
}

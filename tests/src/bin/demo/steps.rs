//! The demo's steps, in order. Every step runs the built helpers for real
//! and checks the outcome it reports; a step that does not hold ends the
//! demo with an error.

use std::cell::Cell;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agents_common::ExecutionLayout;
use agents_tests::server_control::{seal_worker, worker_status};
use agents_tests::server_status::{read_row, utc_now, write_json, Row};
use agents_tests::upstream_activation::hyphenated;
use agents_tests::upstream_json::json_bytes;
use agents_tests::upstream_layout::Layout;
use agents_tests::{
    binary_path, free_port, try_poll_until, HttpRequest, Installation, ProcessIdentity,
    ReleaseFile, ReleaseHost, RequestMatch, Role, Sandbox, SandboxError, Stall, Switches,
    AGENT_TOKEN,
};
use python_compat::{
    json::{parse_json, Json},
    json_object,
};

use crate::installer::{interpreter, FAULT_FILE, GATEWAY_UNIT, LOG_PREFIX, WORKER_UNIT};
use agents_tests::journal_writer::API_CONTRACT;

type Result<T> = std::result::Result<T, String>;

/// The installed release, the update, and the broken candidate.
const A: &str = "1.0.0";
const B: &str = "1.1.0";
const C: &str = "1.2.0";
/// The server's update IDs (`uuid4().hex`) of the two managed updates.
const UPDATE_B: &str = "b0b0b0b0b0b04b0b8b0b0b0b0b0b0b0b";
const UPDATE_C: &str = "c0c0c0c0c0c04c0c8c0c0c0c0c0c0c0c";
/// How long services and helpers may take for one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The worker hotfix support staff try to pin, on disk beside A.
const HOTFIX: &str = "1.0.1";
/// How long worker A holds back its reply to the pin's admission acquire:
/// the window in which `inspect` must see the activation pending.
const ACQUIRE_STALL_SECONDS: f64 = 1.5;
/// What `apply --scope worker` prints when an agent run starts before the
/// worker is sealed: the worker answers the seal with 409, and the pinned
/// control client accepts only 200.
const PIN_REFUSED: &str = "RuntimeError: pinned HTTP response is invalid\n";
/// What `apply --scope worker` prints once install.sh has published the units.
const PIN_NOT_RETAINED: &str =
    "RuntimeError: retained service configuration no longer matches its layout\n";
/// State the installation keeps across an uninstall (chat history).
const STATE_FILE: &str = "sessions.json";
/// The activation journal install.sh keeps while it activates a release.
const ACTIVATION_JOURNAL: &str = ".activation-transaction";
/// The journal `execution-manage apply` keeps while it activates a layout.
const EXECUTION_JOURNAL: &str = ".execution-transaction";

/// Exit code and output of one helper run.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn of(output: Output) -> Outcome {
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Exit 0 and nothing on stderr; returns stdout.
    fn success(self, what: &str) -> Result<String> {
        if self.code == Some(0) && self.stderr.is_empty() {
            Ok(self.stdout)
        } else {
            Err(format!(
                "{what} failed ({:?}): {}{}",
                self.code, self.stdout, self.stderr
            ))
        }
    }

    /// Exit 0 with one JSON line on stdout.
    fn json(self, what: &str) -> Result<Json> {
        let stdout = self.success(what)?;
        parse_json(stdout.trim_end().as_bytes()).map_err(|err| format!("{what}: {err}: {stdout}"))
    }
}

/// Who systemd runs, proven by each receipt naming its unit's MainPID.
struct Serving {
    worker_pid: u32,
    gateway_pid: u32,
    server_identity: String,
}

struct Demo {
    // Dropped before the sandbox: they live in the sandbox directory.
    installation: Installation,
    releases: ReleaseHost,
    sandbox: Sandbox,
    port: u16,
    started: Instant,
    step: Cell<u32>,
}

/// Runs every step; the sandbox (and with it every process) is stopped
/// before this returns, whatever happened.
pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    println!(
        "demo: the AgentsServer lifecycle helpers end to end \
         (private systemd --user manager, loopback only)"
    );
    let sandbox = match Sandbox::start() {
        Ok(sandbox) => sandbox,
        Err(SandboxError::Unavailable(why)) => {
            return Err(format!(
                "{why}; run scripts/setup.sh as root on a Linux machine first"
            ))
        }
        Err(err) => return Err(err.to_string()),
    };
    let manager = ProcessIdentity::of(sandbox.manager_pid())
        .ok_or("the systemd --user manager exited at once")?;
    let demo = Demo {
        installation: Installation::in_sandbox(&sandbox),
        releases: ReleaseHost::start(sandbox.base()),
        sandbox,
        port: free_port(),
        started,
        step: Cell::new(0),
    };
    demo.say(
        "sandbox",
        &format!(
            "systemd --user pid {} in its own mount namespace and cgroup under {}",
            manager.pid,
            demo.sandbox.base().display()
        ),
    );
    let outcome = demo.steps();
    let Demo { sandbox, .. } = demo;
    drop(sandbox);
    outcome?;
    if manager.is_alive() {
        return Err(format!(
            "the manager (pid {}) is still running",
            manager.pid
        ));
    }
    println!(
        "demo: done in {:.1}s; the manager stopped and its directory was removed",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

impl Demo {
    fn steps(&self) -> Result<()> {
        self.releases()?;
        self.install(A)?;
        self.pin_refused_by_new_work(HOTFIX)?;
        self.update_to(B)?;
        self.broken_candidate(C)?;
        self.pin_after_managed_updates(HOTFIX)?;
        self.doctor_on_a_stale_lock(HOTFIX)?;
        self.uninstall()
    }

    /// Prints one numbered step line.
    fn say(&self, label: &str, text: &str) {
        let step = self.step.get() + 1;
        self.step.set(step);
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "[{step:2}] {elapsed:5.1}s  {label:<10} {text}");
        let _ = stdout.flush();
    }

    fn root(&self) -> &Path {
        &self.installation.install_root
    }

    fn layout(&self, worker: &str, gateway: &str) -> ExecutionLayout {
        self.installation.layout(
            &self.installation.release_dir(worker),
            &self.installation.release_dir(gateway),
            self.port,
        )
    }

    /// A helper with only the manager's environment, output captured.
    fn helper(&self, name: &str) -> Command {
        let mut command = self.sandbox.command(binary_path(name));
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    /// The layout as the private file `apply --layout` reads.
    fn layout_file(&self, layout: &ExecutionLayout, name: &str) -> Result<PathBuf> {
        let path = self.sandbox.base().join(format!("layout-{name}.json"));
        let layout = Layout::of(layout).map_err(|err| err.python_line())?;
        fs::write(&path, json_bytes(&layout.to_value()))
            .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o600)))
            .map_err(|err| format!("write {}: {err}", path.display()))?;
        Ok(path)
    }

    fn apply_command(&self, layout: &ExecutionLayout, scope: &str) -> Result<Command> {
        let file = self.layout_file(layout, scope)?;
        let mut command = self.helper("execution-manage");
        command
            .arg("apply")
            .arg("--layout")
            .arg(file)
            .args(["--scope", scope]);
        Ok(command)
    }

    /// `execution-manage apply`, checked: one `{"ok": true, ...}` line.
    fn apply(&self, layout: &ExecutionLayout, scope: &str) -> Result<Json> {
        let output = self
            .apply_command(layout, scope)?
            .output()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let result = Outcome::of(output).json(&format!("apply --scope {scope}"))?;
        if result.get("ok") != Some(&Json::Bool(true)) {
            return Err(format!(
                "apply --scope {scope} did not report ok: {result:?}"
            ));
        }
        Ok(result)
    }

    /// Authenticated health through the gateway's public loopback listener.
    fn health(&self) -> Result<Json> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let response = HttpRequest::get("/api/health")
            .bearer(AGENT_TOKEN)
            .send(address)
            .map_err(|err| format!("GET /api/health: {err}"))?;
        if response.status != 200 {
            return Err(format!("GET /api/health answered {}", response.status));
        }
        parse_json(&response.body).map_err(|err| format!("health is not JSON: {err}"))
    }

    /// Waits until systemd runs worker and gateway from these releases, each
    /// receipt naming its MainPID and health reporting both versions.
    fn serving(&self, worker: &str, gateway: &str) -> Result<Serving> {
        let text = |value: Option<&Json>| value.and_then(Json::as_str).unwrap_or("").to_string();
        let version = |health: &Json, component: &str| {
            text(
                health
                    .get(component)
                    .and_then(|identity| identity.get("version")),
            )
        };
        let release = |version: &str| self.installation.release_dir(version);
        try_poll_until(
            STEP_TIMEOUT,
            &format!("worker {worker} and gateway {gateway} to serve"),
            || {
                let worker_state = self.sandbox.unit_state(WORKER_UNIT);
                let gateway_state = self.sandbox.unit_state(GATEWAY_UNIT);
                let worker_receipt = self.installation.receipt(Role::Worker)?;
                let gateway_receipt = self.installation.receipt(Role::Gateway)?;
                let pid = |receipt: &Json| receipt.get("pid").and_then(Json::as_int);
                let releases_match = text(worker_receipt.get("release_root"))
                    == release(worker).to_string_lossy()
                    && text(gateway_receipt.get("release_root"))
                        == release(gateway).to_string_lossy();
                let running = worker_state.is_running()
                    && gateway_state.is_running()
                    && pid(&worker_receipt) == Some(i128::from(worker_state.main_pid))
                    && pid(&gateway_receipt) == Some(i128::from(gateway_state.main_pid));
                if !(running && releases_match) {
                    return None;
                }
                let health = self.health().ok()?;
                (version(&health, "execution_service") == worker
                    && version(&health, "gateway") == gateway)
                    .then(|| Serving {
                        worker_pid: worker_state.main_pid,
                        gateway_pid: gateway_state.main_pid,
                        server_identity: text(health.get("server_identity")),
                    })
            },
        )
    }

    /// One line on the native services and health.
    fn show_services(&self, serving: &Serving, worker: &str, gateway: &str) {
        let enabled = |unit: &str| self.sandbox.unit_state(unit).unit_file_state;
        self.say(
            "services",
            &format!(
                "{WORKER_UNIT} active/{} pid {} (worker {worker}) | {GATEWAY_UNIT} active/{} pid {} \
                 (gateway {gateway}) | health ok on 127.0.0.1:{}",
                enabled(WORKER_UNIT),
                serving.worker_pid,
                enabled(GATEWAY_UNIT),
                serving.gateway_pid,
                self.port
            ),
        );
    }

    /// Release A on disk, private roots as install.sh creates them, some
    /// state the uninstall must keep, and B and C signed on the release
    /// host (C carries the fault its installer trips over).
    fn releases(&self) -> Result<()> {
        let interpreter = interpreter(self.root())?;
        for version in [A, HOTFIX] {
            let python = self
                .installation
                .add_release(version)
                .join(".venv/bin/python");
            fs::remove_file(&python)
                .and_then(|()| std::os::unix::fs::symlink(&interpreter, &python))
                .map_err(|err| format!("link {}: {err}", python.display()))?;
        }
        let installation = &self.installation;
        for root in [
            &installation.install_root,
            &installation.config_root,
            &installation.state_root,
        ] {
            fs::set_permissions(root, fs::Permissions::from_mode(0o700))
                .map_err(|err| format!("chmod {}: {err}", root.display()))?;
        }
        let state = installation.state_root.join(STATE_FILE);
        private_file(&state, b"{\"chats\": [\"kept across uninstall\"]}\n")?;
        let demo = std::env::current_exe().map_err(|err| format!("the demo's path: {err}"))?;
        let install_sh = format!(
            "#!/bin/sh\n# Stand-in installer: the demo drives execution-activation.\nexec '{}' install-sh \"$@\"\n",
            demo.display()
        );
        let server = format!("\"\"\"AgentsServer\"\"\"\nAPI_CONTRACT_VERSION = {API_CONTRACT}\n");
        for version in [B, C] {
            let version_file = format!("{version}\n");
            let mut files = vec![
                ReleaseFile {
                    name: "install.sh",
                    data: install_sh.as_bytes(),
                    mode: 0o644,
                },
                ReleaseFile {
                    name: "VERSION",
                    data: version_file.as_bytes(),
                    mode: 0o644,
                },
                ReleaseFile {
                    name: "agent_server.py",
                    data: server.as_bytes(),
                    mode: 0o644,
                },
                ReleaseFile {
                    name: "execution_service.py",
                    data: b"# stand-in: the test worker runs instead\n",
                    mode: 0o644,
                },
            ];
            let fault: &[u8] = b"its worker never reports healthy (forced by the demo)\n";
            if version == C {
                files.push(ReleaseFile {
                    name: FAULT_FILE,
                    data: fault,
                    mode: 0o644,
                });
            }
            self.releases.publish(version, &files);
        }
        self.say(
            "releases",
            &format!(
                "A {A} and the worker hotfix {HOTFIX} in install/releases/ (their .venv/bin/python3.11 \
                 is the test worker); B {B} and C {C} signed (Ed25519) on {}; roots install/ config/ state/ (0700) beside HOME",
                self.releases.release_base()
            ),
        );
        Ok(())
    }

    /// Migration: both services from nothing, by `execution-manage apply`.
    fn install(&self, version: &str) -> Result<()> {
        let result = self.apply(&self.layout(version, version), "migration")?;
        let serving = self.serving(version, version)?;
        let receipt = result.get("receipt").cloned().unwrap_or(Json::Null);
        self.say(
            "install A",
            &format!(
                "execution-manage apply --scope migration: ok, worker {} pid {}, gateway {} pid {}",
                receipt
                    .get("worker_version")
                    .and_then(Json::as_str)
                    .unwrap_or("?"),
                serving.worker_pid,
                receipt
                    .get("gateway_version")
                    .and_then(Json::as_str)
                    .unwrap_or("?"),
                serving.gateway_pid
            ),
        );
        self.show_services(&serving, version, version);
        Ok(())
    }

    /// The health fields the server proves before and after an update: no
    /// active or queued work, an empty service cgroup, and its secure-peer
    /// state (both roles, as the
    /// public health merges the application's fields).
    fn advertise_idle_server(&self) {
        let switches = Switches {
            health_extra: json_object! {
                "active_count" => 0,
                "update_blocking_queued_count" => 0,
                "update_service_cgroup" => json_object! {
                    "safe" => true,
                    "unknown_descendant_count" => 0,
                    "inspection" => "verified",
                },
                "capabilities" => json_object! {
                    "secure_peer_v1" => json_object! {
                        "available" => true,
                        "state_available" => true,
                        "state_error_code" => Json::Null,
                        "required" => false,
                        "version" => 1,
                        "control_path" => "/api/admin/secure-peers/v1/status",
                        "proxy_prefix" => "/api/team-hub-secure",
                    },
                },
            },
            ..Switches::default()
        };
        for role in [Role::Worker, Role::Gateway] {
            self.installation.set_switches(role, &switches);
        }
    }

    /// The server's part before it launches the runner: seal the running
    /// worker's admission for `update_id` over its private control channel
    /// and write the handoff install.sh proves its stop with.
    fn seal_handoff(&self, update_id: &str, serving: &Serving) -> Result<PathBuf> {
        let operation = hyphenated(update_id);
        let hold = seal_worker(
            &self.installation.runtime_dir(),
            &operation,
            serving.worker_pid,
        )
        .map_err(|err| format!("seal the worker for the update: {err}"))?;
        let preparations = self.root().join(".update-preparations");
        let directory = preparations.join(update_id);
        let path = directory.join(format!("handoff-{update_id}.json"));
        private_dir(&preparations)?;
        private_dir(&directory)?;
        private_file(
            &path,
            &hold.handoff_bytes(&operation, &serving.server_identity),
        )?;
        Ok(path)
    }

    fn admin(&self) -> PathBuf {
        self.installation.state_root.join("admin")
    }

    /// A managed update to `version` exactly as the server starts one: the
    /// sealed handoff, the admitted `starting` row, the one-time health
    /// credential, then `update-runner` with the server's argv. Prints one
    /// line per status phase and per installer step as they happen; returns
    /// the runner's exit code and its final row.
    fn managed_update(
        &self,
        update_id: &str,
        from: &str,
        version: &str,
    ) -> Result<(Option<i32>, Row)> {
        let serving = self.serving(from, from)?;
        self.advertise_idle_server();
        let handoff = self.seal_handoff(update_id, &serving)?;
        let admin = self.admin();
        private_dir(&admin)?;
        let status = admin.join("server-update.json");
        let admitted = serde_json::json!({
            "phase": "starting",
            "update_id": update_id,
            "track": "stable",
            "current_track": "stable",
            "target_version": version,
            "latest_version": version,
            "update_available": true,
            "message": "Starting the AgentsServer update.",
            "runner_pid": null,
            "started_at": utc_now(),
            "finished_at": null,
        });
        write_json(&status, &admitted).map_err(|err| format!("admit the update: {err}"))?;
        let token = admin.join(format!(".server-update-{update_id}.auth.json"));
        write_json(&token, &serde_json::json!({"token": AGENT_TOKEN}))
            .map_err(|err| format!("write the health credential: {err}"))?;
        let installation = &self.installation;
        let mut runner = self.sandbox.command(binary_path("update-runner"));
        runner
            .arg("--status-file")
            .arg(&status)
            .arg("--public-key")
            .arg(self.releases.public_key_path())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--expected-version", version, "--current-version", from])
            .args(["--track", "stable", "--update-id", update_id])
            .args(["--expected-server-identity", &serving.server_identity])
            .arg("--auth-token-file")
            .arg(&token)
            .arg("--execution-handoff-file")
            .arg(&handoff)
            .env("AGENTS_SERVER_INSTALL_DIR", &installation.install_root)
            .env("AGENTS_SERVER_CONFIG_DIR", &installation.config_root)
            .env("AGENTS_SERVER_STATE_DIR", &installation.state_root)
            .env("AGENTS_SERVER_RELEASE_BASE", self.releases.release_base())
            .env(
                "AGENTS_SERVER_RELEASES_API_URL",
                self.releases.releases_api_url(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = runner
            .spawn()
            .map_err(|err| format!("update-runner: {err}"))?;
        let log = admin.join("server-update.log");
        let log_start = fs::metadata(&log).map(|info| info.len()).unwrap_or(0);
        let mut log_lines_seen = 0;
        let mut phase = String::new();
        let journal = self.root().join(ACTIVATION_JOURNAL).join("manifest.json");
        let mut journal_phases: Vec<String> = Vec::new();
        let deadline = Instant::now() + STEP_TIMEOUT * 2;
        let exit = loop {
            let finished = child
                .try_wait()
                .map_err(|err| format!("update-runner: {err}"))?;
            if let Ok(row) = read_row(&status) {
                let now = text_field(&row, "phase");
                if now != phase {
                    self.say(
                        &format!("row {version}"),
                        &format!("{now}: {}", summary(&row)),
                    );
                    phase = now;
                }
            }
            if let Some(now) = fs::read(&journal)
                .ok()
                .and_then(|data| parse_json(&data).ok())
                .and_then(|manifest| {
                    manifest
                        .get("phase")
                        .and_then(Json::as_str)
                        .map(str::to_string)
                })
            {
                if journal_phases.last() != Some(&now) {
                    journal_phases.push(now);
                }
            }
            let lines = installer_lines(&log, log_start);
            for line in &lines[log_lines_seen.min(lines.len())..] {
                self.say("install.sh", line);
            }
            log_lines_seen = lines.len();
            if let Some(exit) = finished {
                break exit;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "update-runner did not finish the update to {version}"
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let row = read_row(&status).map_err(|err| format!("status row: {err}"))?;
        self.say(
            "journal",
            &format!(
                "install/{ACTIVATION_JOURNAL} phases seen: {}; then retired",
                journal_phases.join(" > ")
            ),
        );
        if fs::symlink_metadata(&token).is_ok() {
            return Err("the runner did not consume its one-time credential".to_string());
        }
        Ok((exit.code(), row))
    }

    /// The journal is gone, `current` names the gateway's release, systemd
    /// runs worker and gateway from these releases and the activation's
    /// admission hold is released.
    fn settled_on(&self, worker: &str, gateway: &str) -> Result<Serving> {
        for journal in [ACTIVATION_JOURNAL, EXECUTION_JOURNAL] {
            if fs::symlink_metadata(self.root().join(journal)).is_ok() {
                return Err(format!("the journal {journal} is left behind"));
            }
        }
        let current = fs::read_link(self.root().join("current")).ok();
        if current.as_deref() != Some(self.installation.release_dir(gateway).as_path()) {
            return Err(format!(
                "`current` does not name release {gateway}: {current:?}"
            ));
        }
        let serving = self.serving(worker, gateway)?;
        let held = self
            .health()?
            .get("execution_service")
            .and_then(|identity| identity.get("maintenance_held"))
            .cloned();
        if held != Some(Json::Bool(false)) {
            return Err(format!("the worker's admission is still held: {held:?}"));
        }
        Ok(serving)
    }

    /// B through `update-runner`: checked, downloaded, verified and
    /// installed by its stand-in install.sh driving `execution-activation`.
    fn update_to(&self, version: &str) -> Result<()> {
        let before = self.serving(A, A)?;
        let (exit, row) = self.managed_update(UPDATE_B, A, version)?;
        let expected = format!("AgentsServer {version} is installed and healthy.");
        if exit != Some(0)
            || text_field(&row, "phase") != "complete"
            || text_field(&row, "message") != expected
            || text_field(&row, "installed_version") != version
        {
            return Err(format!(
                "the update to {version} did not complete ({exit:?}): {row:?}"
            ));
        }
        let download = format!("/releases/download/v{version}/");
        let fetched: Vec<String> = self
            .releases
            .requests()
            .into_iter()
            .filter_map(|path| path.strip_prefix(&download).map(str::to_string))
            .collect();
        let archive = format!("agents-server-{version}.tar.gz");
        for name in [
            "agents-server-manifest.json",
            "agents-server-manifest.sig",
            &archive,
        ] {
            if !fetched.iter().any(|fetched| fetched == name) {
                return Err(format!(
                    "the runner never fetched {name} of {version}: {fetched:?}"
                ));
            }
        }
        let after = self.settled_on(version, version)?;
        if after.worker_pid == before.worker_pid
            || after.gateway_pid == before.gateway_pid
            || after.server_identity != before.server_identity
        {
            return Err("the update did not replace both services under the same identity".into());
        }
        self.show_services(&after, version, version);
        Ok(())
    }

    /// C's installer fails after its candidate started: install.sh rolls
    /// back to B itself and the runner records the failure.
    fn broken_candidate(&self, version: &str) -> Result<()> {
        let before = self.serving(B, B)?;
        let (exit, row) = self.managed_update(UPDATE_C, B, version)?;
        let message = text_field(&row, "message");
        if exit != Some(1)
            || text_field(&row, "phase") != "failed"
            || !message.starts_with("installer failed (1): ")
            || !message.contains(&format!("release {version} was rolled back"))
        {
            return Err(format!(
                "release {version} did not fail as expected ({exit:?}): {row:?}"
            ));
        }
        let restored = self.settled_on(B, B)?;
        if restored.server_identity != before.server_identity {
            return Err("the rollback changed the server identity".to_string());
        }
        self.say(
            "failed C",
            &format!(
                "update-runner exit 1; the failed row ends with the installer's {:?}; \
                 current -> releases/{B}, worker and gateway {B} serve again",
                message.lines().last().unwrap_or("")
            ),
        );
        self.show_services(&restored, B, B);
        Ok(())
    }

    /// Support staff pin the worker to the hotfix `version` with
    /// `execution-manage apply --scope worker` while worker A is idle. Worker
    /// A holds back its reply to the admission `acquire` (which already took
    /// effect) for a moment, so the activation is observably pending:
    /// `execution-manage inspect` must print exactly the pending journal's id
    /// and the operation that owns worker A's lease, in phase `prepared`.
    /// Then an agent run starts before the seal: the worker refuses to seal,
    /// and the activation rolls its journal back and releases the admission
    /// before any service changed.
    fn pin_refused_by_new_work(&self, version: &str) -> Result<()> {
        let before = self.serving(A, A)?;
        let mark = self.installation.requests(Role::Worker).len();
        let stalled_acquire = Switches {
            stall: Some(Stall {
                on: RequestMatch::maintenance("acquire"),
                seconds: ACQUIRE_STALL_SECONDS,
            }),
            ..Switches::default()
        };
        self.installation
            .set_switches(Role::Worker, &stalled_acquire);
        let child = self
            .apply_command(&self.layout(version, A), "worker")?
            .spawn()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let mut child = KillOnDrop(Some(child));
        let held = try_poll_until(STEP_TIMEOUT, "worker A to hold back its acquire", || {
            let stalled = self.installation.requests(Role::Worker)[mark..]
                .iter()
                .any(|record| {
                    record.pid == before.worker_pid
                        && record.action.as_deref() == Some("acquire")
                        && record.outcome == "stalled"
                });
            if stalled {
                return Some(true);
            }
            (!child.running()).then_some(false)
        })?;
        if !held {
            let outcome = Outcome::of(
                child
                    .take()
                    .wait_with_output()
                    .map_err(|err| format!("execution-manage: {err}"))?,
            );
            return Err(format!(
                "apply --scope worker ended before its acquire ({:?}): {}{}",
                outcome.code, outcome.stdout, outcome.stderr
            ));
        }
        let inspected = self.pending_activation(&before)?;
        self.say(
            "inspect",
            &format!(
                "execution-manage inspect --root install/ while the pin to {version} waits: {}",
                inspected.trim_end()
            ),
        );
        let busy = Switches {
            blockers: vec![("active_runs".to_string(), 1)],
            ..Switches::default()
        };
        self.installation.set_switches(Role::Worker, &busy);
        let outcome = Outcome::of(
            child
                .take()
                .wait_with_output()
                .map_err(|err| format!("execution-manage: {err}"))?,
        );
        self.installation
            .set_switches(Role::Worker, &Switches::default());
        if outcome.code != Some(1) || !outcome.stdout.is_empty() || outcome.stderr != PIN_REFUSED {
            return Err(format!(
                "the pin was not refused as expected ({:?}): {}{}",
                outcome.code, outcome.stdout, outcome.stderr
            ));
        }
        let seal_refused = self.installation.requests(Role::Worker)[mark..]
            .iter()
            .any(|record| {
                record.pid == before.worker_pid
                    && record.action.as_deref() == Some("seal")
                    && record.status == 409
            });
        if !seal_refused {
            return Err("the busy worker never refused the pin's seal".to_string());
        }
        let id = inspected_field(&inspected, "id")?;
        let retired = self
            .root()
            .join(format!(".execution-completed-{id}"))
            .join("manifest.json");
        let phase = fs::read(&retired)
            .ok()
            .and_then(|data| parse_json(&data).ok())
            .and_then(|journal| {
                journal
                    .get("phase")
                    .and_then(Json::as_str)
                    .map(str::to_string)
            });
        if phase.as_deref() != Some("rolled-back") {
            return Err(format!(
                "the inspected activation was not retired as rolled back: {phase:?}"
            ));
        }
        let after = self.settled_on(A, A)?;
        if after.worker_pid != before.worker_pid
            || after.gateway_pid != before.gateway_pid
            || after.server_identity != before.server_identity
        {
            return Err(format!(
                "the refused pin changed a service: worker pid {} -> {}, gateway pid {} -> {}",
                before.worker_pid, after.worker_pid, before.gateway_pid, after.gateway_pid
            ));
        }
        self.say(
            "refused",
            &format!(
                "an agent run started before the seal: worker {A} answered it 409, apply --scope \
                 worker exit 1, {}; activation {id} rolled back and retired, admission released, \
                 worker pid {} and gateway pid {} untouched",
                PIN_REFUSED.trim_end(),
                after.worker_pid,
                after.gateway_pid
            ),
        );
        self.show_services(&after, A, A);
        Ok(())
    }

    /// The same pin after the managed updates is refused before anything is
    /// staged, as upstream refuses it: install.sh's publish wrote the units
    /// 0644, and `apply` retains only a unit byte- and mode-equal to its own
    /// rendering (0600).
    fn pin_after_managed_updates(&self, version: &str) -> Result<()> {
        let before = self.serving(B, B)?;
        let gateway_unit = self.sandbox.unit_dir().join(GATEWAY_UNIT);
        let mode = fs::metadata(&gateway_unit)
            .map(|info| info.permissions().mode() & 0o777)
            .map_err(|err| format!("{}: {err}", gateway_unit.display()))?;
        let retired = completed_journals(self.root());
        let output = self
            .apply_command(&self.layout(version, B), "worker")?
            .output()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let outcome = Outcome::of(output);
        if outcome.code != Some(1)
            || !outcome.stdout.is_empty()
            || outcome.stderr != PIN_NOT_RETAINED
        {
            return Err(format!(
                "the pin after the managed updates was not refused as expected ({:?}): {}{}",
                outcome.code, outcome.stdout, outcome.stderr
            ));
        }
        if mode != 0o644 || completed_journals(self.root()) != retired {
            return Err(format!(
                "the refusal is not the retained-unit check: gateway unit mode {mode:o}, \
                 journals {retired:?}"
            ));
        }
        let after = self.settled_on(B, B)?;
        if (after.worker_pid, after.gateway_pid) != (before.worker_pid, before.gateway_pid) {
            return Err("the refused pin changed a service".to_string());
        }
        self.say(
            "pin again",
            &format!(
                "apply --scope worker ({version}) after the managed updates: exit 1, {}; the \
                 units install.sh published are 0644, apply retains only its own 0600 rendering; \
                 nothing staged or changed",
                PIN_NOT_RETAINED.trim_end()
            ),
        );
        Ok(())
    }

    /// `execution-manage doctor --json`, checked to change nothing under the
    /// install root (modes and mtimes included); returns its exit code and
    /// report.
    fn doctor(&self) -> Result<(Option<i32>, Json)> {
        let before = tree_stamp(self.root());
        let output = self
            .helper("execution-manage")
            .arg("doctor")
            .arg("--root")
            .arg(self.root())
            .arg("--json")
            .output()
            .map_err(|err| format!("execution-manage doctor: {err}"))?;
        if tree_stamp(self.root()) != before {
            return Err("doctor changed the installation".to_string());
        }
        let outcome = Outcome::of(output);
        let report = parse_json(outcome.stdout.as_bytes())
            .map_err(|err| format!("doctor printed no JSON ({err}): {}", outcome.stderr))?;
        Ok((outcome.code, report))
    }

    /// Support staff's pin is killed while it waits for the gateway's
    /// authenticated health, after it took the install lock: doctor names
    /// the stale lock of the dead PID and the exact command that removes
    /// it; run as printed, doctor reports everything healthy again.
    fn doctor_on_a_stale_lock(&self, version: &str) -> Result<()> {
        let mark = self.installation.requests(Role::Gateway).len();
        let stalled_health = Switches {
            stall: Some(Stall {
                on: RequestMatch::path("/api/health"),
                seconds: 30.0,
            }),
            ..Switches::default()
        };
        self.installation
            .set_switches(Role::Gateway, &stalled_health);
        let child = self
            .apply_command(&self.layout(version, B), "worker")?
            .spawn()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let dead = child.id();
        let mut child = KillOnDrop(Some(child));
        let waiting = try_poll_until(STEP_TIMEOUT, "the pin to wait for health", || {
            let stalled = self.installation.requests(Role::Gateway)[mark..]
                .iter()
                .any(|record| record.path == "/api/health" && record.outcome == "stalled");
            stalled.then_some(())
        });
        let mut helper = child.take();
        let killed = helper.kill().and_then(|()| helper.wait());
        self.installation
            .set_switches(Role::Gateway, &Switches::default());
        waiting?;
        killed.map_err(|err| format!("kill the pin: {err}"))?;
        let (code, report) = self.doctor()?;
        let concern = |key: &str| {
            report
                .get("concerns")
                .and_then(|concerns| concerns.get(key))
                .cloned()
                .unwrap_or(Json::Null)
        };
        let field = |value: &Json, key: &str| {
            value
                .get(key)
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string()
        };
        let lock = concern("install_lock");
        // The plan's one step, as support staff follow it.
        let steps = report.get("plan").and_then(Json::as_array).cloned();
        let command = match steps.as_deref() {
            Some([step]) => field(step, "command"),
            _ => String::new(),
        };
        let others_fine = report
            .get("concerns")
            .and_then(Json::as_object)
            .is_some_and(|concerns| {
                concerns.iter().all(|(key, value)| {
                    key == "install_lock"
                        || ["healthy", "absent"].contains(&field(value, "status").as_str())
                })
            });
        let owner = lock.get("found").and_then(|found| found.get("owner_pid"));
        if code != Some(1)
            || field(&lock, "status") != "stuck"
            || owner != Some(&Json::from(dead))
            || !others_fine
            || command.is_empty()
        {
            return Err(format!("doctor did not name the stale lock: {report:?}"));
        }
        self.say(
            "doctor",
            &format!(
                "pin to {version} SIGKILLed holding the lock: doctor exit 1, install lock \
                 stuck ({}); plan step 1: {command}",
                field(&lock, "summary")
            ),
        );
        let output = self
            .sandbox
            .command("sh")
            .args(["-c", &command])
            .output()
            .map_err(|err| format!("sh: {err}"))?;
        Outcome::of(output).success(&command)?;
        let (code, report) = self.doctor()?;
        if code != Some(0) || report.get("healthy") != Some(&Json::Bool(true)) {
            return Err(format!("doctor is not healthy after the fix: {report:?}"));
        }
        let concerns = report
            .get("concerns")
            .and_then(Json::as_object)
            .map_or(0, |concerns| concerns.len());
        self.say(
            "doctor",
            &format!(
                "after the suggested command: exit 0, all {concerns} concerns healthy or absent"
            ),
        );
        Ok(())
    }

    /// `execution-manage inspect --root install/` during the pin, checked
    /// against the pending journal on disk and the worker's own lease;
    /// returns its stdout line.
    fn pending_activation(&self, serving: &Serving) -> Result<String> {
        let journal = self.root().join(EXECUTION_JOURNAL).join("manifest.json");
        let journal_before =
            fs::read(&journal).map_err(|err| format!("the pending journal: {err}"))?;
        let output = self
            .helper("execution-manage")
            .arg("inspect")
            .arg("--root")
            .arg(self.root())
            .output()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let stdout = Outcome::of(output).success("inspect")?;
        if fs::read(&journal).ok().as_deref() != Some(journal_before.as_slice()) {
            return Err("inspect changed the pending journal".to_string());
        }
        let id = parse_json(&journal_before)
            .ok()
            .and_then(|journal| journal.get("id").and_then(Json::as_str).map(str::to_string))
            .ok_or("the pending journal has no id")?;
        let status = worker_status(&self.installation.runtime_dir(), serving.worker_pid)
            .map_err(|err| format!("the worker's status: {err}"))?;
        let operation = status["lease"]["operation_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if operation.is_empty() {
            return Err(format!("the worker holds no admission lease: {status}"));
        }
        let expected = format!(
            "{{\"id\": \"{id}\", \"operation_id\": \"{operation}\", \"phase\": \"prepared\", \
             \"scope\": \"worker\"}}\n"
        );
        if stdout != expected {
            return Err(format!(
                "inspect printed {stdout:?}, not the pending activation {expected:?}"
            ));
        }
        Ok(stdout)
    }

    /// `uninstall --yes` as a user runs uninstall.sh: roots from the
    /// environment; everything goes but the state.
    fn uninstall(&self) -> Result<()> {
        let installation = &self.installation;
        let output = self
            .helper("uninstall")
            .arg("--yes")
            .env("AGENTS_SERVER_INSTALL_DIR", &installation.install_root)
            .env("AGENTS_SERVER_CONFIG_DIR", &installation.config_root)
            .env("AGENTS_SERVER_STATE_DIR", &installation.state_root)
            .output()
            .map_err(|err| format!("uninstall: {err}"))?;
        let stdout = Outcome::of(output).success("uninstall --yes")?;
        let gone = |path: &Path| fs::symlink_metadata(path).is_err();
        let units_gone = [WORKER_UNIT, GATEWAY_UNIT].iter().all(|unit| {
            gone(&self.sandbox.unit_dir().join(unit))
                && self.sandbox.unit_state(unit).load_state == "not-found"
        });
        if !(gone(&installation.install_root) && gone(&installation.config_root) && units_gone) {
            return Err(format!("uninstall left files or units behind: {stdout}"));
        }
        if fs::read(installation.state_root.join(STATE_FILE)).is_err() {
            return Err("uninstall did not preserve the state".to_string());
        }
        let left: Vec<u32> = self
            .sandbox
            .processes()
            .into_iter()
            .filter(|pid| *pid != self.sandbox.manager_pid())
            .collect();
        if !left.is_empty() {
            return Err(format!("processes still run after uninstall: {left:?}"));
        }
        self.say(
            "uninstall",
            &format!(
                "uninstall --yes: \"{}\" units, install/ and config/ gone, state/{STATE_FILE} kept, \
                 no service runs",
                stdout.lines().next().unwrap_or("")
            ),
        );
        Ok(())
    }
}

/// A row's message on one line: a failed installer's log tail is counted,
/// not printed.
fn summary(row: &Row) -> String {
    let message = text_field(row, "message");
    let mut lines = message.lines();
    let first = lines.next().unwrap_or("").to_string();
    match lines.count() {
        0 => first,
        more => format!("{first} (+{more} more lines of server-update.log)"),
    }
}

fn text_field(row: &Row, key: &str) -> String {
    row.get(key)
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The installer's step lines appended to `log` after `start`.
fn installer_lines(log: &Path, start: u64) -> Vec<String> {
    let data = fs::read(log).unwrap_or_default();
    let appended = data.get(start as usize..).unwrap_or_default();
    String::from_utf8_lossy(appended)
        .lines()
        .filter_map(|line| line.strip_prefix(LOG_PREFIX))
        .map(str::to_string)
        .collect()
}

fn private_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(0o700)))
        .map_err(|err| format!("mkdir {}: {err}", path.display()))
}

fn private_file(path: &Path, data: &[u8]) -> Result<()> {
    fs::write(path, data)
        .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(0o600)))
        .map_err(|err| format!("write {}: {err}", path.display()))
}

/// A field of the `inspect` line the demo already checked.
fn inspected_field(line: &str, key: &str) -> Result<String> {
    parse_json(line.trim_end().as_bytes())
        .ok()
        .and_then(|inspected| {
            inspected
                .get(key)
                .and_then(Json::as_str)
                .map(str::to_string)
        })
        .ok_or(format!("inspect printed no {key}: {line}"))
}

/// A helper child that is killed and reaped if the demo fails while it runs.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn take(&mut self) -> Child {
        self.0.take().expect("the helper is taken once")
    }

    /// Whether the helper has not exited yet.
    fn running(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every entry under `root` with its mode, mtime and size, sorted.
fn tree_stamp(root: &Path) -> Vec<(PathBuf, u32, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(&path) {
                pending.extend(
                    entries
                        .filter_map(|entry| entry.ok())
                        .map(|entry| entry.path()),
                );
            }
        }
        found.push((
            path,
            meta.mode(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.size(),
        ));
    }
    found.sort();
    found
}

/// The names of the retired execution journals under `root`, sorted.
fn completed_journals(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(".execution-completed-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

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

use agents_common::{
    encode_indented, parse_json, ExecutionLayout, Json, GATEWAY_UNIT, WORKER_UNIT,
};
use agents_tests::{
    binary_path, free_port, try_poll_until, HttpRequest, Installation, ProcessIdentity,
    RequestMatch, RequestRecord, Role, Sandbox, SandboxError, Stall, Switches, AGENT_TOKEN,
};

type Result<T> = std::result::Result<T, String>;

/// The installed release, the update, and the broken candidate.
const A: &str = "1.0.0";
const B: &str = "1.1.0";
const C: &str = "1.2.0";
/// How long services and helpers may take for one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// State the installation keeps across an uninstall (chat history).
const STATE_FILE: &str = "sessions.json";
/// The identity the broken candidate C reports instead of the server's.
const FOREIGN_IDENTITY: &str = "another-server";

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
    worker_instance_id: String,
    gateway_pid: u32,
    server_identity: String,
}

struct Demo {
    // Dropped before the sandbox: its roots live in the sandbox directory.
    installation: Installation,
    sandbox: Sandbox,
    port: u16,
    started: Instant,
    step: Cell<u32>,
}

/// Runs every step; the sandbox (and with it every process) is stopped
/// before this returns, whatever happened.
pub fn run() -> Result<()> {
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
        self.activate(B)?;
        self.broken_candidate(C)?;
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

    fn manage(&self, args: &[&std::ffi::OsStr]) -> Result<Outcome> {
        let output = self
            .helper("execution-manage")
            .args(args)
            .output()
            .map_err(|err| format!("execution-manage: {err}"))?;
        Ok(Outcome::of(output))
    }

    /// The layout as the private file `apply --layout` reads.
    fn layout_file(&self, layout: &ExecutionLayout, name: &str) -> Result<PathBuf> {
        let path = self.sandbox.base().join(format!("layout-{name}.json"));
        fs::write(&path, encode_indented(&layout.to_dict()))
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
                        worker_instance_id: text(worker_receipt.get("instance_id")),
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

    /// Releases A, B and C on disk, private roots as install.sh creates
    /// them, and some state the uninstall must keep.
    fn releases(&self) -> Result<()> {
        for version in [A, B, C] {
            self.installation.add_release(version);
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
        fs::write(&state, b"{\"chats\": [\"kept across uninstall\"]}\n")
            .and_then(|()| fs::set_permissions(&state, fs::Permissions::from_mode(0o600)))
            .map_err(|err| format!("write {}: {err}", state.display()))?;
        self.say(
            "releases",
            &format!(
                "A {A}, B {B}, C {C} in install/releases/ (each .venv/bin/python is the test \
                 worker); roots install/ config/ state/ (0700) beside HOME"
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

    /// Worker, then gateway, to `version`.
    ///
    /// This is where the managed update slots in once `update-runner`
    /// delivers updates: a local signed release server offering `version`,
    /// `update-runner` checking, downloading and verifying it and running
    /// its installer, which drives `execution-activation` through quiesce,
    /// publish, start, verify and commit while the status row moves through
    /// its phases. Until then the same activation runs through
    /// `execution-manage`, one scope at a time.
    fn activate(&self, version: &str) -> Result<()> {
        let before = self.serving(A, A)?;
        self.apply(&self.layout(version, A), "worker")?;
        let after = self.serving(version, A)?;
        if after.gateway_pid != before.gateway_pid || after.worker_pid == before.worker_pid {
            return Err("the worker activation did not replace exactly the worker".to_string());
        }
        self.say(
            "worker B",
            &format!(
                "execution-manage apply --scope worker: ok, worker {version} pid {} replaced pid {} \
                 under a sealed hold; gateway pid {} untouched",
                after.worker_pid, before.worker_pid, after.gateway_pid
            ),
        );
        self.apply(&self.layout(version, version), "gateway")?;
        let done = self.serving(version, version)?;
        if done.worker_pid != after.worker_pid || done.gateway_pid == after.gateway_pid {
            return Err("the gateway activation did not replace exactly the gateway".to_string());
        }
        let current = fs::read_link(self.root().join("current")).ok();
        if current.as_deref() != Some(self.installation.release_dir(version).as_path()) {
            return Err(format!(
                "`current` does not name release {version}: {current:?}"
            ));
        }
        self.say(
            "gateway B",
            &format!(
                "execution-manage apply --scope gateway: ok, gateway {version} pid {} replaced pid {}; \
                 `current` -> releases/{version}",
                done.gateway_pid, after.gateway_pid
            ),
        );
        self.show_services(&done, version, version);
        Ok(())
    }

    fn requests_since(&self, mark: usize) -> Vec<RequestRecord> {
        self.installation
            .requests(Role::Worker)
            .into_iter()
            .skip(mark)
            .collect()
    }

    fn wait_for_seal(
        &self,
        mark: usize,
        what: &str,
        instance_other_than: Option<&str>,
    ) -> Result<()> {
        try_poll_until(STEP_TIMEOUT, what, || {
            self.requests_since(mark)
                .into_iter()
                .find(|record| {
                    record.action.as_deref() == Some("seal")
                        && record.outcome == "stalled"
                        && instance_other_than.is_none_or(|old| record.instance_id != old)
                })
                .map(|_| ())
        })
    }

    /// Release C's worker comes up under another server identity: the
    /// activation refuses to commit it and restores B. The worker switches
    /// make C misbehave: every seal is held back for a second, so C's
    /// identity can be switched on after the preflight recorded the real
    /// one, and off again while the rollback seals C, before B restarts.
    fn broken_candidate(&self, version: &str) -> Result<()> {
        let before = self.serving(B, B)?;
        let mark = self.installation.requests(Role::Worker).len();
        let stalled_seal = |server_identity: Option<&str>| Switches {
            stall: Some(Stall {
                on: RequestMatch::maintenance("seal"),
                seconds: 1.0,
            }),
            server_identity: server_identity.map(str::to_string),
            ..Switches::default()
        };
        self.installation
            .set_switches(Role::Worker, &stalled_seal(None));
        let child = self
            .apply_command(&self.layout(version, B), "worker")?
            .spawn()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let mut child = KillOnDrop(Some(child));
        self.wait_for_seal(mark, "the seal of worker B", None)?;

        let root = self.root().as_os_str();
        let pending = self
            .manage(&["inspect".as_ref(), "--root".as_ref(), root])?
            .json("inspect")?;
        let field = |key: &str| {
            pending
                .get(key)
                .and_then(Json::as_str)
                .unwrap_or("?")
                .to_string()
        };
        self.say(
            "inspect",
            &format!(
                "execution-manage inspect while C is applied: activation {} scope {} phase {}",
                field("id"),
                field("scope"),
                field("phase")
            ),
        );
        if field("scope") != "worker" {
            return Err(format!("inspect shows another activation: {pending:?}"));
        }

        self.installation
            .set_switches(Role::Worker, &stalled_seal(Some(FOREIGN_IDENTITY)));
        self.wait_for_seal(
            mark,
            "the rollback's seal of candidate C",
            Some(&before.worker_instance_id),
        )?;
        self.installation
            .set_switches(Role::Worker, &Switches::default());
        let output = child
            .take()
            .wait_with_output()
            .map_err(|err| format!("execution-manage: {err}"))?;
        let outcome = Outcome::of(output);
        let expected = "ValueError: activation changed the authenticated server identity\n";
        if outcome.code != Some(1) || outcome.stderr != expected || !outcome.stdout.is_empty() {
            return Err(format!(
                "the broken candidate was not refused as expected ({:?}): {}{}",
                outcome.code, outcome.stdout, outcome.stderr
            ));
        }
        let restored = self.serving(B, B)?;
        if restored.server_identity != before.server_identity
            || restored.gateway_pid != before.gateway_pid
        {
            return Err(
                "the rollback did not restore worker B behind the same gateway".to_string(),
            );
        }
        self.say(
            "broken C",
            &format!(
                "execution-manage apply --scope worker (C): exit 1, {}; rolled back to worker {B} \
                 (pid {}), gateway pid {} untouched",
                expected.trim_end(),
                restored.worker_pid,
                restored.gateway_pid
            ),
        );
        self.show_services(&restored, B, B);
        Ok(())
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

/// A background helper that is killed if the demo fails while it runs.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn take(&mut self) -> Child {
        self.0.take().expect("the helper is taken once")
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

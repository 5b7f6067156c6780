//! A real installation on disk for the helpers to work on: owned roots,
//! versioned releases whose interpreter is the test worker, `current`, the
//! config `env` with the agent token, rendered units, the installed layout
//! manifest, and a way to start it all under a [`Sandbox`].

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::upstream_files::{atomic_write, prepare_runtime, read_secret};
use crate::upstream_json::json_bytes;
use crate::upstream_layout::Layout;
use agents_common::{ExecutionLayout, Platform, GATEWAY_UNIT, WORKER_UNIT};
use python_compat::{
    json::{parse_json, Json},
    json_object,
};

use crate::binaries::test_worker_path;
use crate::http_client::{origin_address, HttpRequest};
use crate::poll::{poll_until, try_poll_until, POLL_INTERVAL};
use crate::sandbox::Sandbox;
use crate::tempdir::TempDir;
use crate::worker_files::{errors_log_path, RequestRecord, Role, Switches};

/// The agent token every fixture writes to `config/env`.
pub const AGENT_TOKEN: &str = "test-agent-token-0123456789abcdef";

/// How long services may take to start and publish their receipts.
pub const SERVICE_TIMEOUT: Duration = Duration::from_secs(15);

/// A port on 127.0.0.1 that was free a moment ago, for a layout's public
/// port. It is taken below the kernel's ephemeral range (32768 and up), so a
/// worker's callback listener or an outgoing connection can never grab it
/// between this check and the gateway's bind; a per-process offset and a
/// counter keep concurrent tests apart.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id().wrapping_mul(7_919);
    for _ in 0..SPAN {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + offset.wrapping_add(step.wrapping_mul(101)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN);
}

fn directory(path: &Path, mode: u32) {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
    // Exact, whatever the umask.
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod a fixture directory");
}

fn file(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod a fixture file");
}

/// An installation: `install/`, `config/`, `state/` (0755) beside a home.
#[derive(Debug)]
pub struct Installation {
    /// `install_root` (`releases/`, `current`, manifest, journals).
    pub install_root: PathBuf,
    /// `config_root` (holds `env`).
    pub config_root: PathBuf,
    /// `state_root` (holds `execution/`, `admin/`, `test-worker/`).
    pub state_root: PathBuf,
    /// The service user's home (the sandbox's `HOME` when in a sandbox).
    pub home: PathBuf,
    _temp: Option<TempDir>,
}

/// Both split services, started and proven: each receipt's PID is the
/// MainPID systemd reports.
#[derive(Debug, Clone)]
pub struct SplitServices {
    /// The worker's `worker.json`.
    pub worker: Json,
    /// The gateway's `gateway.json`.
    pub gateway: Json,
    /// The worker's PID (systemd MainPID).
    pub worker_pid: u32,
    /// The gateway's PID (systemd MainPID).
    pub gateway_pid: u32,
}

impl SplitServices {
    /// The worker's private callback listener (from its receipt).
    pub fn callback(&self) -> SocketAddr {
        origin_address(
            self.worker
                .get("callback_origin")
                .and_then(Json::as_str)
                .unwrap_or_default(),
        )
        .expect("worker.json has a callback origin")
    }

    /// The worker's receipt `instance_id`.
    pub fn worker_instance_id(&self) -> String {
        receipt_text(&self.worker, "instance_id")
    }
}

fn receipt_text(receipt: &Json, key: &str) -> String {
    receipt
        .get(key)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("receipt lacks {key}: {receipt:?}"))
        .to_string()
}

fn receipt_pid(receipt: &Json) -> u32 {
    receipt
        .get("pid")
        .and_then(Json::as_int)
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or(0)
}

impl Installation {
    /// Roots beside the sandbox's home, whose `HOME` the layout uses, so the
    /// sandbox's manager loads the units.
    pub fn in_sandbox(sandbox: &Sandbox) -> Installation {
        Installation::create(sandbox.base(), sandbox.home(), None)
    }

    /// Roots and home under a new temp directory (no systemd needed).
    pub fn in_temp() -> Installation {
        let temp = TempDir::new("agents-install");
        let home = temp.path().join("home");
        directory(&home, 0o755);
        let base = temp.path().to_path_buf();
        Installation::create(&base, &home, Some(temp))
    }

    fn create(base: &Path, home: &Path, temp: Option<TempDir>) -> Installation {
        let installation = Installation {
            install_root: base.join("install"),
            config_root: base.join("config"),
            state_root: base.join("state"),
            home: home.to_path_buf(),
            _temp: temp,
        };
        for root in [
            &installation.install_root,
            &installation.config_root,
            &installation.state_root,
        ] {
            directory(root, 0o755);
        }
        directory(&installation.install_root.join("releases"), 0o755);
        installation.write_env(&[("AGENTSDOCK_AGENT_TOKEN", AGENT_TOKEN)]);
        installation
    }

    /// Rewrites `config/env` (0600) with these `KEY=VALUE` lines.
    pub fn write_env(&self, entries: &[(&str, &str)]) {
        let text: String = entries
            .iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect();
        file(&self.config_root.join("env"), text.as_bytes(), 0o600);
    }

    /// The agent token in `config/env`.
    pub fn agent_token(&self) -> &'static str {
        AGENT_TOKEN
    }

    /// `install/releases/<version>`.
    pub fn release_dir(&self, version: &str) -> PathBuf {
        self.install_root.join("releases").join(version)
    }

    /// Creates a complete release: `VERSION` (`<version>\n`),
    /// `execution_service.py` and `agent_server.py` (regular, nlink 1; the
    /// latter declares `API_CONTRACT_VERSION = 1`), and `.venv/bin/python`, a
    /// symlink to the built test worker.
    pub fn add_release(&self, version: &str) -> PathBuf {
        let release = self.release_dir(version);
        directory(&release, 0o755);
        file(
            &release.join("VERSION"),
            format!("{version}\n").as_bytes(),
            0o644,
        );
        file(
            &release.join("execution_service.py"),
            b"# stand-in: the test worker runs instead\n",
            0o644,
        );
        file(
            &release.join("agent_server.py"),
            b"API_CONTRACT_VERSION = 1\n",
            0o644,
        );
        directory(&release.join(".venv/bin"), 0o755);
        symlink(test_worker_path(), release.join(".venv/bin/python"))
            .expect("link the test worker");
        release
    }

    /// Points `install/current` at `release` (absolute target, replaced
    /// atomically).
    pub fn set_current(&self, release: &Path) {
        let temporary = self.install_root.join(".current.fixture-tmp");
        let _ = fs::remove_file(&temporary);
        symlink(release, &temporary).expect("create the current link");
        fs::rename(&temporary, self.install_root.join("current"))
            .expect("replace the current link");
    }

    /// `state/execution`, the services' runtime directory.
    pub fn runtime_dir(&self) -> PathBuf {
        self.state_root.join("execution")
    }

    /// A Linux layout over this installation, public listener on
    /// `127.0.0.1:<port>`, its environment holding the agent token as
    /// `execution_activation` copies it from `config/env`.
    ///
    /// That copy is what delivers the token: systemd (252) ignores the
    /// rendered `EnvironmentFile="<config>/env"` line because a quoted path
    /// is "not absolute", so the units' `Environment=` lines are the only
    /// source, upstream as here.
    pub fn layout(
        &self,
        worker_release: &Path,
        gateway_release: &Path,
        port: u16,
    ) -> ExecutionLayout {
        ExecutionLayout {
            install_root: self.install_root.clone(),
            config_root: self.config_root.clone(),
            state_root: self.state_root.clone(),
            home: self.home.clone(),
            platform: Platform::Linux.into(),
            worker_release: worker_release.to_path_buf(),
            gateway_release: gateway_release.to_path_buf(),
            bind: "127.0.0.1".to_string(),
            port: Json::from(u32::from(port)),
            environment: Json::Object(json_object! {"AGENTSDOCK_AGENT_TOKEN" => AGENT_TOKEN}),
        }
    }

    /// Writes both rendered units (mode 0600, as the journal publishes them),
    /// rendered by the stand-ins' own template ([`upstream_layout`]).
    ///
    /// [`upstream_layout`]: crate::upstream_layout
    pub fn write_units(&self, layout: &ExecutionLayout) {
        let layout = upstream(layout);
        for role in ["worker", "gateway"] {
            let unit = layout
                .render_service(role)
                .unwrap_or_else(|err| panic!("render {role}: {}", err.python_line()));
            let path = layout.service_path(role);
            atomic_write(&path, unit.as_bytes(), 0o600)
                .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
        }
    }

    /// Writes `execution-layout.json` (0600) as a finished activation leaves it.
    pub fn write_manifest(&self, layout: &ExecutionLayout) {
        let layout = upstream(layout);
        let manifest = layout
            .manifest()
            .unwrap_or_else(|err| panic!("layout manifest: {}", err.python_line()));
        atomic_write(&layout.manifest_path(), &json_bytes(&manifest), 0o600)
            .expect("write the manifest");
    }

    /// A completed split installation on disk: runtime directory and control
    /// token, units, manifest, and `current` at the gateway release.
    pub fn install_split(&self, layout: &ExecutionLayout) {
        prepare_runtime(&layout.state_root)
            .unwrap_or_else(|err| panic!("prepare the runtime: {err}"));
        self.set_current(&layout.gateway_release);
        self.write_units(layout);
        self.write_manifest(layout);
    }

    /// Writes the legacy single-process unit (`agents-server.service`) that
    /// runs `current/agent_server.py serve` as the test worker's monolith.
    pub fn write_monolith_unit(&self, port: u16) {
        let current = self.install_root.join("current");
        let state = self.state_root.display();
        let unit = format!(
            "[Unit]\nDescription=AgentsServer (legacy)\nAfter=network-online.target\n\n[Service]\n\
             Type=simple\nWorkingDirectory={current}\nEnvironmentFile={config}/env\n\
             Environment=AGENTSDOCK_STATE_DIR={state}\nEnvironment=AGENTS_SERVER_STATE_DIR={state}\n\
             ExecStart={current}/.venv/bin/python {current}/agent_server.py serve --bind 127.0.0.1 --port {port}\n\
             Restart=always\nRestartSec=2\nUMask=0077\n\n[Install]\nWantedBy=default.target\n",
            current = current.display(),
            config = self.config_root.display(),
        );
        let path = self.home.join(".config/systemd/user").join(WORKER_UNIT);
        directory(path.parent().expect("units have a directory"), 0o755);
        file(&path, unit.as_bytes(), 0o644);
    }

    /// The control token (`state/execution/control.token`).
    pub fn control_token(&self) -> String {
        read_secret(&self.runtime_dir().join("control.token"))
            .unwrap_or_else(|err| panic!("control token: {err}"))
    }

    /// A role's receipt (`worker.json` / `gateway.json`), if present and JSON.
    pub fn receipt(&self, role: Role) -> Option<Json> {
        let data = fs::read(self.runtime_dir().join(format!("{}.json", role.name()))).ok()?;
        parse_json(&data).ok()
    }

    /// Waits for a receipt that satisfies `accept`.
    pub fn wait_for_receipt(&self, role: Role, what: &str, accept: impl Fn(&Json) -> bool) -> Json {
        poll_until(
            SERVICE_TIMEOUT,
            &format!("{}.json {what}", role.name()),
            || self.receipt(role).filter(|receipt| accept(receipt)),
        )
    }

    /// Replaces a role's misbehaviour switches (takes effect on its next request).
    pub fn set_switches(&self, role: Role, switches: &Switches) {
        switches
            .store(&self.state_root, role)
            .unwrap_or_else(|err| panic!("store switches: {err}"));
    }

    /// Every request a role has logged.
    pub fn requests(&self, role: Role) -> Vec<RequestRecord> {
        RequestRecord::read_all(&self.state_root, role)
    }

    /// The requests a role logged after `mark` (an earlier count of
    /// [`Installation::requests`]).
    pub fn requests_since(&self, role: Role, mark: usize) -> Vec<RequestRecord> {
        self.requests(role).into_iter().skip(mark).collect()
    }

    /// The running worker's private callback listener, from its receipt.
    pub fn worker_callback(&self) -> SocketAddr {
        let receipt = self
            .receipt(Role::Worker)
            .expect("the worker has a receipt");
        origin_address(
            receipt
                .get("callback_origin")
                .and_then(Json::as_str)
                .unwrap_or_default(),
        )
        .expect("the receipt has a callback origin")
    }

    /// The running worker's private status, asked directly with the control
    /// token (the answer must be 200).
    pub fn worker_status(&self) -> Json {
        let response = HttpRequest::get("/api/admin/execution/status")
            .bearer(&self.control_token())
            .send(self.worker_callback())
            .expect("the worker answers status");
        assert_eq!(response.status, 200, "status: {:?}", response.detail());
        response.json()
    }

    /// The lease the worker's status reports (`null` when none is held).
    pub fn worker_lease(&self) -> Json {
        self.worker_status()
            .get("lease")
            .cloned()
            .expect("status carries the lease")
    }

    /// Why the role's starts failed so far (empty when none did).
    pub fn startup_errors(&self, role: Role) -> String {
        fs::read_to_string(errors_log_path(&self.state_root, role)).unwrap_or_default()
    }

    /// Loads the units into the sandbox's manager, enables both, starts the
    /// worker, then the gateway, and waits until each receipt names the
    /// MainPID systemd reports and the public listener answers.
    pub fn start_split(&self, sandbox: &Sandbox, layout: &ExecutionLayout) -> SplitServices {
        sandbox.systemctl_ok(&["daemon-reload"]);
        sandbox.systemctl_ok(&["enable", WORKER_UNIT, GATEWAY_UNIT]);
        sandbox.systemctl_ok(&["start", WORKER_UNIT]);
        let (worker, worker_pid) = self.wait_for_service(sandbox, WORKER_UNIT, Role::Worker);
        sandbox.systemctl_ok(&["start", GATEWAY_UNIT]);
        let (gateway, gateway_pid) = self.wait_for_service(sandbox, GATEWAY_UNIT, Role::Gateway);
        let public = SocketAddr::from((
            [127, 0, 0, 1],
            layout.public_port().expect("a validated port"),
        ));
        poll_until(SERVICE_TIMEOUT, "the gateway's public listener", || {
            let health = HttpRequest::get("/api/health")
                .bearer(AGENT_TOKEN)
                .send(public)
                .ok()?;
            (health.status == 200).then_some(())
        });
        SplitServices {
            worker,
            gateway,
            worker_pid,
            gateway_pid,
        }
    }

    /// The service's command line and environment exactly as the rendered
    /// unit runs it (ExecStart arguments; the layout environment plus the
    /// layout-authoritative variables), for tests that need no systemd.
    pub fn service_command(&self, layout: &ExecutionLayout, role: Role) -> Command {
        let arguments = upstream(layout).service_arguments(role.name());
        let mut command = Command::new(&arguments[0]);
        command
            .args(&arguments[1..])
            .env_clear()
            .stdin(Stdio::null());
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        for (key, value) in layout.environment_variables() {
            command.env(key, value);
        }
        let port = layout
            .public_port()
            .map(|port| port.to_string())
            .unwrap_or_default();
        command
            .env("AGENTS_SERVER_INSTALL_DIR", &layout.install_root)
            .env("AGENTS_SERVER_CONFIG_DIR", &layout.config_root)
            .env("AGENTSDOCK_STATE_DIR", &layout.state_root)
            .env("AGENTS_SERVER_STATE_DIR", &layout.state_root)
            .env("AGENTSDOCK_AGENT_BIND", &layout.bind)
            .env("AGENTSDOCK_AGENT_PORT", port)
            .env("AGENTSDOCK_EXECUTION_ROLE", role.name())
            .env("AGENTSDOCK_EXECUTION_RUNTIME_DIR", layout.runtime_dir());
        command
    }

    /// Waits until `unit` runs and the role's receipt carries its MainPID.
    pub fn wait_for_service(&self, sandbox: &Sandbox, unit: &str, role: Role) -> (Json, u32) {
        let what = format!("{unit} with a receipt naming its MainPID");
        try_poll_until(SERVICE_TIMEOUT, &what, || {
            let state = sandbox.unit_state(unit);
            let receipt = self.receipt(role)?;
            (state.is_running() && receipt_pid(&receipt) == state.main_pid)
                .then_some((receipt, state.main_pid))
        })
        .unwrap_or_else(|message| {
            panic!(
                "{message}; last state {:?}; startup errors:\n{}",
                sandbox.unit_state(unit),
                self.startup_errors(role)
            )
        })
    }
}

/// The stand-ins' own validated layout of a fixture layout.
fn upstream(layout: &ExecutionLayout) -> Layout {
    Layout::of(layout).unwrap_or_else(|err| panic!("layout: {}", err.python_line()))
}

/// A service process started directly (see [`Installation::service_command`]);
/// stopped with SIGTERM (then SIGKILL) on drop.
#[derive(Debug)]
pub struct DirectService {
    child: Child,
}

impl DirectService {
    /// Spawns the command (stdout and stderr inherited).
    pub fn spawn(mut command: Command) -> DirectService {
        DirectService {
            child: command.spawn().expect("spawn the test worker"),
        }
    }

    /// The process's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and returns the exit status once it exits.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + SERVICE_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let _ = self.child.kill();
        self.child.wait().expect("reap the test worker")
    }
}

impl Drop for DirectService {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

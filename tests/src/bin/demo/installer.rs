//! The stand-in `install.sh` of the demo's releases: the archive's script
//! execs `demo install-sh <install.sh's arguments>`, and this drives the
//! real `execution-activation` through install.sh's update order
//! (install-sh-contract §2) against the sandbox's systemd: quiesce
//! (durability, suppress, stop under the sealed handoff), link and publish,
//! start, verify, commit and release. The journal steps between the helper
//! calls are the shared stand-in journal writer's, as install.sh advances
//! them with activation_transaction.py.
//!
//! A release carrying `DEMO_FAULT` fails after its candidate started, and
//! the installer rolls back through the journal (suppress, stop, restore
//! files, restore, verify-restored, release) before exiting 1, as install.sh
//! does when its candidate never becomes healthy.
//!
//! Each step prints one line to stdout, which the runner appends to
//! `server-update.log`; the demo reads the steps from there.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use agents_common::Platform;
use agents_tests::{binary_path, test_worker_path, try_poll_until, HttpRequest, AGENT_TOKEN};
use python_compat::json::{parse_json, Json};

use agents_tests::journal_writer::{Begin, Roots};

/// The file whose presence makes a release's installer fail after start.
pub(crate) const FAULT_FILE: &str = "DEMO_FAULT";
/// Every line the installer prints starts with this, so the demo can find
/// them in `server-update.log`.
pub(crate) const LOG_PREFIX: &str = "install.sh: ";
/// The payload of every demo release besides install.sh.
pub(crate) const PAYLOAD: [&str; 3] = ["VERSION", "agent_server.py", "execution_service.py"];

/// The systemd user units install.sh's layout names (upstream's
/// `WORKER_UNIT` and the gateway's), spelled here rather than taken from the
/// helpers' crate.
pub(crate) const WORKER_UNIT: &str = "agents-server.service";
pub(crate) const GATEWAY_UNIT: &str = "agents-server-gateway.service";

/// Operations that take only install.sh's common flags.
const NO_ARGS: &[&str] = &[];
const SERVICE_TIMEOUT: Duration = Duration::from_secs(20);

type Result<T> = std::result::Result<T, String>;

/// install.sh's arguments as `update-runner` passes them.
struct Arguments {
    version: String,
    port: u16,
    bind: String,
    server_identity: String,
    handoff_file: Option<String>,
}

fn parse(args: &[String]) -> Result<Arguments> {
    let value = |flag: &str| {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|index| args.get(index + 1))
            .cloned()
    };
    let required = |flag: &str| value(flag).ok_or(format!("install.sh: {flag} is required"));
    Ok(Arguments {
        version: required("--release-version")?,
        port: required("--port")?
            .parse()
            .map_err(|_| "install.sh: --port is not a port".to_string())?,
        bind: required("--bind")?,
        server_identity: required("--expected-server-identity")?,
        handoff_file: value("--execution-handoff-file"),
    })
}

/// Runs install.sh; the exit code the runner sees.
pub(crate) fn run(args: &[String]) -> u8 {
    match parse(args).and_then(|arguments| Installer::new(arguments)?.install()) {
        Ok(()) => 0,
        Err(message) => {
            println!("{LOG_PREFIX}failed: {message}");
            1
        }
    }
}

struct Installer {
    args: Arguments,
    roots: Roots,
    source: PathBuf,
}

fn environment(name: &str) -> Result<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .ok_or(format!("{name} is not set"))
}

impl Installer {
    fn new(args: Arguments) -> Result<Installer> {
        let roots = Roots {
            platform: Platform::Linux,
            port: args.port,
            root: environment("AGENTS_SERVER_INSTALL_DIR")?,
            config_root: environment("AGENTS_SERVER_CONFIG_DIR")?,
            state_root: environment("AGENTS_SERVER_STATE_DIR")?,
            home: environment("HOME")?,
        };
        let source = std::env::current_dir().map_err(|err| format!("cwd: {err}"))?;
        Ok(Installer {
            args,
            roots,
            source,
        })
    }

    fn say(&self, step: &str) {
        println!("{LOG_PREFIX}{step}");
    }

    /// The whole update under install.sh's lock directory.
    fn install(&self) -> Result<()> {
        let lock = self.roots.root().join(".install-lock");
        self.roots.hold_lock(std::process::id());
        let outcome = self.update();
        let _ = fs::remove_dir_all(&lock);
        outcome
    }

    fn update(&self) -> Result<()> {
        let version = &self.args.version;
        let staging = self.stage()?;
        let contract = self.helper(
            "candidate-api-contract",
            &["--candidate-source", &text(&staging)],
        )?;
        self.say(&format!(
            "staged releases/{} (API contract {})",
            staging.file_name().unwrap_or_default().to_string_lossy(),
            contract.trim()
        ));
        let stop_args = self.stop_args();
        self.helper("preflight", &stop_args)?;
        let snapshot = self.helper("snapshot", NO_ARGS)?;
        let old = fs::read_link(self.roots.root().join("current"))
            .map_err(|err| format!("current: {err}"))?;
        let handoff = match &self.args.handoff_file {
            Some(path) => Some(
                parse_json(&fs::read(path).map_err(|err| format!("{path}: {err}"))?)
                    .map_err(|err| format!("{path}: {err}"))?,
            ),
            None => None,
        };
        self.roots.begin(&Begin {
            old: Some((old.clone(), old)),
            service_state: "running".into(),
            service_enabled: true,
            gateway_state: "running".into(),
            gateway_enabled: true,
            handoff,
            ..Begin::split(&staging, version)
        });
        self.say(&format!(
            "journal begun (services were {}); quiesce: durability, suppress, stop",
            snapshot.trim()
        ));
        self.helper("durability", NO_ARGS)?;
        self.roots.record("quiescing");
        self.helper("preflight", &stop_args)?;
        self.helper("suppress", NO_ARGS)?;
        self.helper("stop", &stop_args)?;
        self.roots.record("quiesced");
        self.roots.record("linking");
        self.roots.activate_files();
        self.roots.record("linked");
        self.replace_env()?;
        self.helper("publish", NO_ARGS)?;
        self.say("linked and published: current -> the candidate, units rendered");
        self.roots.record("candidate-starting");
        self.helper("stop", &stop_args)?;
        self.helper("start", NO_ARGS)?;
        self.wait_running(&self.roots.release_dir(version))?;
        self.say("candidate started under its sealed startup hold");
        if self.source.join(FAULT_FILE).exists() {
            let fault = fs::read_to_string(self.source.join(FAULT_FILE)).unwrap_or_default();
            self.say(&format!("candidate refused: {}", fault.trim()));
            self.roll_back(&stop_args)?;
            return Err(format!("release {version} was rolled back"));
        }
        self.verify("verify")?;
        self.roots.record("candidate-healthy");
        self.roots.record("committing");
        self.verify("verify")?;
        self.roots.record("committed");
        self.helper("release", NO_ARGS)?;
        self.roots.finish();
        self.say(&format!(
            "verified, committed and released: AgentsServer {version} is active"
        ));
        Ok(())
    }

    /// install.sh's rollback after the candidate started.
    fn roll_back(&self, stop_args: &[String]) -> Result<()> {
        self.roots.record("rolling-back");
        self.helper("suppress", NO_ARGS)?;
        self.helper("stop", stop_args)?;
        self.roots.restore_files();
        self.roots.record("rolled-back");
        self.helper("restore", NO_ARGS)?;
        let previous = self.helper("previous-worker", NO_ARGS)?;
        self.wait_running(Path::new(previous.trim()))?;
        self.verify("verify-restored")?;
        self.roots.record("rollback-healthy");
        self.helper("release", NO_ARGS)?;
        self.roots.finish();
        self.say(&format!(
            "rolled back: current and units restored, releases/{} restarted, verified, admission released",
            Path::new(previous.trim())
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        ));
        Ok(())
    }

    /// `releases/.staging-<version>-<pid>` from the extracted release, its
    /// `.venv/bin/python` linked to the [`interpreter`].
    fn stage(&self) -> Result<PathBuf> {
        let version = &self.args.version;
        let staging = self
            .roots
            .releases()
            .join(format!(".staging-{version}-{}", std::process::id()));
        let interpreter = interpreter(&self.roots.root())?;
        let io = |what: &Path, err: std::io::Error| format!("{}: {err}", what.display());
        fs::create_dir(&staging).map_err(|err| io(&staging, err))?;
        for name in PAYLOAD {
            let target = staging.join(name);
            fs::copy(self.source.join(name), &target).map_err(|err| io(&target, err))?;
            fs::set_permissions(&target, fs::Permissions::from_mode(0o644))
                .map_err(|err| io(&target, err))?;
        }
        let bin = staging.join(".venv/bin");
        fs::create_dir_all(&bin).map_err(|err| io(&bin, err))?;
        symlink(&interpreter, bin.join("python")).map_err(|err| io(&bin, err))?;
        Ok(staging)
    }

    /// `--health-file "" [--handoff-file F]`: the quiesce checks' arguments.
    fn stop_args(&self) -> Vec<String> {
        let mut args = vec!["--health-file".to_string(), String::new()];
        if let Some(handoff) = &self.args.handoff_file {
            args.extend(["--handoff-file".to_string(), handoff.clone()]);
        }
        args
    }

    /// `execution-activation OP` with install.sh's common flags; its
    /// stdout, or its stderr as the error.
    fn helper(&self, operation: &str, extra: &[impl AsRef<str>]) -> Result<String> {
        let mut args = self.roots.operation_args(
            operation,
            &self.args.version,
            &self.args.bind,
            i128::from(self.args.port),
        );
        args.extend([
            "--expected-server-identity".to_string(),
            self.args.server_identity.clone(),
        ]);
        args.extend(extra.iter().map(|item| item.as_ref().to_string()));
        let output = std::process::Command::new(binary_path("execution-activation"))
            .args(&args)
            .output()
            .map_err(|err| format!("execution-activation: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "execution-activation {operation}: {}",
                String::from_utf8_lossy(&output.stderr).trim_end()
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// install.sh's write_runtime_env: the env file through the journal
    /// (`activation_transaction replace-config --kind env`, the journal
    /// writer's stand-in for it).
    fn replace_env(&self) -> Result<()> {
        let env = format!("AGENTSDOCK_AGENT_TOKEN={AGENT_TOKEN}\n");
        self.roots.replace_config("env", env.as_bytes(), 0o600)
    }

    /// Both units running and the worker's receipt naming the worker
    /// unit's MainPID and `release`.
    fn wait_running(&self, release: &Path) -> Result<()> {
        let show = |unit: &str| -> Option<(bool, String)> {
            let output = std::process::Command::new("systemctl")
                .args(["--user", "show", unit, "-p", "ActiveState", "-p", "MainPID"])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            let field = |name: &str| {
                text.lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap_or("")
                    .to_string()
            };
            Some((field("ActiveState=") == "active", field("MainPID=")))
        };
        try_poll_until(SERVICE_TIMEOUT, "both services running", || {
            let (worker_active, worker_pid) = show(WORKER_UNIT)?;
            let (gateway_active, _) = show(GATEWAY_UNIT)?;
            let receipt = fs::read(self.roots.runtime_dir().join("worker.json")).ok()?;
            let receipt = parse_json(&receipt).ok()?;
            let pid = receipt.get("pid").and_then(Json::as_int)?.to_string();
            let root = receipt.get("release_root").and_then(Json::as_str)?;
            (worker_active && gateway_active && pid == worker_pid && Path::new(root) == release)
                .then_some(())
        })
    }

    /// `verify`/`verify-restored` with install.sh's health proof: the raw
    /// authenticated `/api/health` body in a private file under
    /// `state/admin`.
    fn verify(&self, operation: &str) -> Result<()> {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.args.port));
        let body = try_poll_until(SERVICE_TIMEOUT, "public health", || {
            let response = HttpRequest::get("/api/health")
                .bearer(AGENT_TOKEN)
                .send(address)
                .ok()?;
            (response.status == 200).then_some(response.body)
        })?;
        let path = self
            .roots
            .state_root()
            .join(format!("admin/.install-health.{}", std::process::id()));
        fs::write(&path, body)
            .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o600)))
            .map_err(|err| format!("{}: {err}", path.display()))?;
        let outcome = self.helper(operation, &["--health-file", &text(&path)]);
        let _ = fs::remove_file(&path);
        outcome.map(|_| ())
    }
}

/// The interpreter every release's `.venv/bin/python` links to: the test
/// worker, copied once beside the roots of `install_root` under a Python
/// name (as a real venv links its interpreter; the durability barrier
/// accepts nothing else).
pub(crate) fn interpreter(install_root: &Path) -> Result<PathBuf> {
    let base = install_root.parent().unwrap_or(install_root);
    let interpreter = base.join("python-home/bin/python3.11");
    if !interpreter.exists() {
        let directory = interpreter.parent().unwrap_or(base);
        fs::create_dir_all(directory)
            .and_then(|()| fs::copy(test_worker_path(), &interpreter))
            .and_then(|_| fs::set_permissions(&interpreter, fs::Permissions::from_mode(0o755)))
            .map_err(|err| format!("{}: {err}", interpreter.display()))?;
    }
    Ok(interpreter)
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

//! A real `systemd --user` manager per test (see `shared/SANDBOX.md`).
//!
//! The manager runs in its own mount namespace, where a private tmpfs over
//! `/run/systemd` provides the `/run/systemd/system` marker systemd demands,
//! so nothing on the machine changes. It has a private `HOME` (whose
//! `.config/systemd/user` holds the units) and `XDG_RUNTIME_DIR` (whose
//! `systemd/private` socket `systemctl --user` reaches from any namespace).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use crate::cgroup::{ControlGroup, JOIN_ATTEMPTS};
use crate::poll::try_poll_until;
use crate::skip::skip;
use crate::tempdir::TempDir;

/// How long the manager may take to answer `systemctl --user show-environment`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the manager may take to stop its units and exit after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// Used when the test process has no PATH.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why no manager could be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxError {
    /// The machine cannot run a sandboxed manager at all (not root, no
    /// `unshare` or `systemd`): tests skip, except under `CI=true`.
    Unavailable(String),
    /// The machine should have been able to, but the manager did not come up.
    Failed(String),
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxError::Unavailable(why) => write!(f, "systemd sandbox unavailable: {why}"),
            SandboxError::Failed(why) => write!(f, "systemd sandbox failed: {why}"),
        }
    }
}

/// The four properties the helpers read from `systemctl --user show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitState {
    /// `LoadState` (`loaded`, `not-found`, ...).
    pub load_state: String,
    /// `ActiveState` (`active`, `inactive`, `failed`, `activating`, ...).
    pub active_state: String,
    /// `UnitFileState` (`enabled`, `disabled`, or empty for a missing unit).
    pub unit_file_state: String,
    /// `MainPID`, 0 when nothing runs.
    pub main_pid: u32,
}

impl UnitState {
    /// True when the unit is active with a main process.
    pub fn is_running(&self) -> bool {
        self.active_state == "active" && self.main_pid > 0
    }
}

/// One running `systemd --user` manager with its private home; stopped by PID
/// and removed on drop.
///
/// Create it on the test's own thread and drop it there: the manager is tied to
/// the creating thread by `PR_SET_PDEATHSIG`, so a crashed test binary cannot
/// leave it running.
#[derive(Debug)]
pub struct Sandbox {
    manager: Child,
    cgroup: ControlGroup,
    home: PathBuf,
    runtime_dir: PathBuf,
    path_var: OsString,
    // Last, so the directory is removed after the manager has stopped.
    base: TempDir,
}

fn find_program(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .chain(extra.iter().map(PathBuf::from))
        .find(|candidate| {
            fs::metadata(candidate).is_ok_and(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
        })
}

impl Sandbox {
    /// Starts a manager and waits until it answers.
    pub fn start() -> Result<Sandbox, SandboxError> {
        Sandbox::start_in(|| TempDir::new("agents-sandbox"))
    }

    /// [`Sandbox::start`] whose base directory is exactly
    /// `<temp dir>/<name>` (see [`TempDir::fixed`]): two managers started one
    /// after the other with the same name give the same paths.
    pub fn start_named(name: &str) -> Result<Sandbox, SandboxError> {
        Sandbox::start_in(|| TempDir::fixed(name))
    }

    fn start_in(base: impl FnOnce() -> TempDir) -> Result<Sandbox, SandboxError> {
        let euid = rustix::process::geteuid();
        if !euid.is_root() {
            return Err(SandboxError::Unavailable(format!(
                "tests run as uid {}, but a private mount namespace needs root",
                euid.as_raw()
            )));
        }
        let missing = |name: &str| {
            SandboxError::Unavailable(format!(
                "`{name}` is not installed (scripts/setup.sh installs it)"
            ))
        };
        let unshare = find_program("unshare", &[]).ok_or_else(|| missing("unshare"))?;
        let systemd = find_program(
            "systemd",
            &["/usr/lib/systemd/systemd", "/lib/systemd/systemd"],
        )
        .ok_or_else(|| missing("systemd"))?;
        find_program("systemctl", &[]).ok_or_else(|| missing("systemctl"))?;

        let base = base();
        let home = base.path().join("home");
        let runtime_dir = base.path().join("run");
        let failed =
            |what: &str, err: std::io::Error| SandboxError::Failed(format!("{what}: {err}"));
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&home)
            .map_err(|err| failed("cannot create the sandbox home", err))?;
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755))
            .map_err(|err| failed("cannot chmod the sandbox home", err))?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&runtime_dir)
            .map_err(|err| failed("cannot create XDG_RUNTIME_DIR", err))?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(home.join(".config/systemd/user"))
            .map_err(|err| failed("cannot create the unit directory", err))?;
        let log_path = base.path().join("manager.log");
        let log = fs::File::create(&log_path)
            .map_err(|err| failed("cannot create the manager log", err))?;
        let log_err = log
            .try_clone()
            .map_err(|err| failed("cannot duplicate the manager log", err))?;
        let path_var = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());

        let name = base.path().file_name().expect("a temp dir has a name");
        let cgroup = ControlGroup::create(&name.to_string_lossy())
            .map_err(|err| SandboxError::Failed(err.to_string()))?;
        let joiner = cgroup
            .joiner()
            .map_err(|err| failed("cannot name the sandbox cgroup", err))?;

        let mut command = Command::new(unshare);
        command
            .args(["-m", "sh", "-c"])
            // `$0` is the systemd binary; `unshare` and `sh` exec, so the PID
            // we spawn is the manager's PID.
            .arg(concat!(
                "mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system && ",
                "exec \"$0\" --user"
            ))
            .arg(&systemd)
            .env_clear()
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            .env("PATH", &path_var)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        // SAFETY: only async-signal-safe system calls run between fork and exec.
        unsafe {
            command.pre_exec(move || {
                rustix::process::setsid()?;
                #[cfg(target_os = "linux")]
                rustix::process::set_parent_process_death_signal(Some(Signal::TERM))?;
                // Joined before exec, so the manager starts in its own groups.
                joiner.join()
            });
        }
        let manager = command.spawn().map_err(|err| {
            let groups = cgroup.directories();
            SandboxError::Failed(format!(
                "cannot spawn the manager in its cgroups {groups:?} \
                 (a vanished group is recreated up to {JOIN_ATTEMPTS} times): {err}"
            ))
        })?;
        let mut sandbox = Sandbox {
            manager,
            cgroup,
            home,
            runtime_dir,
            path_var,
            base,
        };
        let ready = try_poll_until(STARTUP_TIMEOUT, "systemctl --user show-environment", || {
            if let Ok(Some(status)) = sandbox.manager.try_wait() {
                return Some(Err(format!("the manager exited early ({status})")));
            }
            let answered = sandbox.systemctl(&["show-environment"]).status.success();
            answered.then_some(Ok(()))
        });
        match ready {
            Ok(Ok(())) => Ok(sandbox),
            Ok(Err(why)) | Err(why) => {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                Err(SandboxError::Failed(format!(
                    "{why}; manager output:\n{log}"
                )))
            }
        }
    }

    /// Starts a manager, or explains on stderr why this test did not run and
    /// returns `None`. Under `CI=true` a machine that cannot run the manager
    /// fails the test instead; a manager that does not come up always fails it.
    pub fn start_or_skip(test: &str) -> Option<Sandbox> {
        match Sandbox::start() {
            Ok(sandbox) => Some(sandbox),
            Err(SandboxError::Unavailable(why)) => {
                skip(test, &format!("systemd sandbox unavailable: {why}"));
                None
            }
            Err(err) => panic!("{test}: {err}"),
        }
    }

    /// The private temp directory holding `home/`, `run/` and `manager.log`;
    /// installation fixtures put their roots beside `home/`.
    pub fn base(&self) -> &Path {
        self.base.path()
    }

    /// The manager's `HOME` (0755).
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The manager's `XDG_RUNTIME_DIR` (0700).
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    /// Where the manager reads user units: `HOME/.config/systemd/user`.
    pub fn unit_dir(&self) -> PathBuf {
        self.home.join(".config/systemd/user")
    }

    /// The manager's PID.
    pub fn manager_pid(&self) -> u32 {
        self.manager.id()
    }

    /// The environment a child needs to reach this manager: `HOME`,
    /// `XDG_RUNTIME_DIR` and `PATH`.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("HOME", self.home.clone().into_os_string()),
            ("XDG_RUNTIME_DIR", self.runtime_dir.clone().into_os_string()),
            ("PATH", self.path_var.clone()),
        ]
    }

    /// A command with a clean environment holding only [`Sandbox::env`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        command.env_clear().envs(self.env()).stdin(Stdio::null());
        command
    }

    /// Runs `systemctl --user <args>` against this manager.
    pub fn systemctl(&self, args: &[&str]) -> Output {
        self.command("systemctl")
            .arg("--user")
            .args(args)
            .output()
            .expect("systemctl runs")
    }

    /// Runs `systemctl --user <args>`, failing the test unless it succeeds;
    /// returns stdout.
    pub fn systemctl_ok(&self, args: &[&str]) -> String {
        let output = self.systemctl(args);
        if !output.status.success() {
            panic!(
                "systemctl --user {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `LoadState`, `ActiveState`, `UnitFileState` and `MainPID` of a unit, as
    /// the helpers query them.
    pub fn unit_state(&self, unit: &str) -> UnitState {
        let text = self.systemctl_ok(&[
            "show",
            unit,
            "--no-pager",
            "--property=LoadState,ActiveState,UnitFileState,MainPID",
        ]);
        let property = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("systemctl show {unit} omitted {name}: {text:?}"))
                .to_string()
        };
        UnitState {
            load_state: property("LoadState"),
            active_state: property("ActiveState"),
            unit_file_state: property("UnitFileState"),
            main_pid: property("MainPID").parse().expect("MainPID is a number"),
        }
    }

    /// Waits until `accept` holds for the unit's state, and returns that state.
    pub fn wait_for_unit(
        &self,
        unit: &str,
        timeout: Duration,
        what: &str,
        accept: impl Fn(&UnitState) -> bool,
    ) -> UnitState {
        let mut last = None;
        let outcome = try_poll_until(timeout, &format!("{unit} to be {what}"), || {
            let state = self.unit_state(unit);
            let accepted = accept(&state).then(|| state.clone());
            last = Some(state);
            accepted
        });
        outcome.unwrap_or_else(|message| {
            let status = self.systemctl(&["status", "--no-pager", unit]);
            panic!(
                "{message}; last state {last:?}; status:\n{}",
                String::from_utf8_lossy(&status.stdout)
            )
        })
    }

    /// PIDs in the manager's private cgroup: the manager and every process
    /// it started, however they forked.
    pub fn processes(&self) -> Vec<u32> {
        self.cgroup.members()
    }

    /// The manager's private cgroup directories, one per systemd hierarchy;
    /// removed when the sandbox is dropped.
    pub fn cgroups(&self) -> Vec<PathBuf> {
        self.cgroup.directories().to_vec()
    }

    fn stop_manager(&mut self) {
        if let Ok(None) = self.manager.try_wait() {
            let pid = Pid::from_raw(self.manager.id() as i32).expect("a child PID is positive");
            let _ = kill_process(pid, Signal::TERM);
            let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.manager.try_wait() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = self.manager.try_wait() {
                eprintln!(
                    "warning: systemd --user {pid:?} ignored SIGTERM for {SHUTDOWN_TIMEOUT:?}"
                );
            }
        }
        let leftovers = self.cgroup.remove();
        if !leftovers.is_empty() {
            eprintln!("warning: killed processes the manager left behind: {leftovers:?}");
        }
        let _ = self.manager.wait();
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop_manager();
    }
}

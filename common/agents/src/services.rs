//! The native service manager adapter of `execution_manage.NativeServices`:
//! observe, stop, start, enable, disable and restore the worker and gateway
//! jobs through `systemctl --user` (Linux) or `/bin/launchctl` (Darwin).
//!
//! Every command goes through an injectable [`CommandRunner`]; output is read
//! with the original's exact parsing rules and refusals, and never echoed in an
//! error because `launchctl print` can contain environment secrets.
//!
//! Deviations from the original, none reachable with real service-manager output:
//! - PIDs are `u32`: a journal `pid` above `u32::MAX` is refused as an invalid
//!   process identity, a launchd `pid = N` beyond it reads as transitioning,
//!   and systemd's `MainPID` must be ASCII digits fitting a `u32` (Python's
//!   `isdigit` also admits other Unicode digits);
//! - a command that outlives its timeout is killed like `subprocess.run` does,
//!   but reported as a `TimeoutError` (the crate has no `SubprocessError`
//!   class) whose text prints whole seconds without `.0` (`180`, not `180.0`).

mod command;
pub use command::CommandCapture;
mod launchd;
mod systemd;

use std::thread::sleep;
use std::time::{Duration, Instant};

pub use command::{CommandRunner, SystemCommandRunner};

use crate::error::{Error, ErrorKind, Result};
use crate::fs::{check_text, read_file, snapshot};
use crate::layout::ExecutionLayout;
use crate::named::OrName;
use crate::platform::Platform;
use crate::role::Role;
use python_compat::{
    json::{Json, JsonObject},
    os::current_uid,
};

/// The original's default bound for a worker stop (and a launchd worker bootout).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);
/// A gateway stop waits at most this long (`min(timeout, 30)`).
const GATEWAY_STOP_LIMIT: Duration = Duration::from_secs(30);
/// Timeout of every other native command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll interval while waiting for a stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Whether a native job exists and runs (the `state` of the Python dict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceRunState {
    /// No unit file or plist, and nothing loaded.
    Absent,
    /// Configured but not running.
    Stopped,
    /// Running with a main process.
    Running,
    /// Starting or stopping; `snapshot` refuses to act on it.
    Transitioning,
}

impl ServiceRunState {
    /// The Python spelling (`absent`, `stopped`, `running`, `transitioning`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceRunState::Absent => "absent",
            ServiceRunState::Stopped => "stopped",
            ServiceRunState::Running => "running",
            ServiceRunState::Transitioning => "transitioning",
        }
    }
}

/// One job's observed state, or a prior state recorded in a journal.
///
/// Converts to and from the original's dict `{"state", "enabled", "pid"?,
/// "instance_id"?}` because journals store it and Python reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceState {
    /// Whether it exists and runs.
    pub state: ServiceRunState,
    /// Whether the job starts at login (unit enabled / launchd not disabled).
    pub enabled: bool,
    /// Main process of a running job.
    pub pid: Option<u32>,
    /// The worker's receipt instance, which `apply` records next to the PID.
    pub instance_id: Option<String>,
}

impl ServiceState {
    /// `{"state": "absent", "enabled": false}`.
    pub fn absent() -> Self {
        Self::with_state(ServiceRunState::Absent, false)
    }

    /// A configured job that is not running.
    pub fn stopped(enabled: bool) -> Self {
        Self::with_state(ServiceRunState::Stopped, enabled)
    }

    /// A running job and its main process.
    pub fn running(enabled: bool, pid: u32) -> Self {
        ServiceState {
            pid: Some(pid),
            ..Self::with_state(ServiceRunState::Running, enabled)
        }
    }

    /// A state without process identity.
    pub fn with_state(state: ServiceRunState, enabled: bool) -> Self {
        ServiceState {
            state,
            enabled,
            pid: None,
            instance_id: None,
        }
    }

    /// The Python dict, keys in the original's insertion order.
    pub fn to_json(&self) -> Json {
        let mut object = JsonObject::new();
        object.insert("state", Json::from(self.state.as_str()));
        object.insert("enabled", Json::Bool(self.enabled));
        if let Some(pid) = self.pid {
            object.insert("pid", Json::from(pid));
        }
        if let Some(instance_id) = &self.instance_id {
            object.insert("instance_id", Json::from(instance_id.as_str()));
        }
        Json::Object(object)
    }

    /// Reads one recorded prior state with the per-role checks of the original's
    /// `_service_states`: keys within `state`, `enabled`, `pid`, `instance_id`
    /// (the first two required), state `absent`/`stopped`/`running`, a boolean
    /// `enabled` that is false when absent (ValueError `invalid prior native
    /// service state`), an int `pid` above 0 (`invalid native service process
    /// identity`) and a control-free `instance_id`.
    ///
    /// Deviation: a `pid` above `u32::MAX` is refused with the process
    /// identity message (Python accepts any positive int; no OS has such PIDs).
    pub fn from_json(value: &Json) -> Result<Self> {
        let invalid = || Error::value("invalid prior native service state");
        let item = value.as_object().ok_or_else(invalid)?;
        let allowed = ["state", "enabled", "pid", "instance_id"];
        if item.get("state").is_none()
            || item.get("enabled").is_none()
            || !item.keys().all(|key| allowed.contains(&key.as_str()))
        {
            return Err(invalid());
        }
        let state = match item.get("state").and_then(Json::as_str) {
            Some("absent") => ServiceRunState::Absent,
            Some("stopped") => ServiceRunState::Stopped,
            Some("running") => ServiceRunState::Running,
            _ => return Err(invalid()),
        };
        let enabled = item
            .get("enabled")
            .and_then(Json::as_bool)
            .ok_or_else(invalid)?;
        if state == ServiceRunState::Absent && enabled {
            return Err(invalid());
        }
        let pid = match item.get("pid") {
            None => None,
            Some(pid) => Some(
                pid.as_int()
                    .filter(|pid| *pid > 0)
                    .and_then(|pid| u32::try_from(pid).ok())
                    .ok_or_else(|| Error::value("invalid native service process identity"))?,
            ),
        };
        let instance_id = match item.get("instance_id") {
            None => None,
            Some(instance) => {
                let text = instance.as_str().ok_or_else(|| {
                    Error::value(
                        "configuration text must be nonempty and contain no control characters",
                    )
                })?;
                check_text(text)?;
                Some(text.to_string())
            }
        };
        Ok(ServiceState {
            state,
            enabled,
            pid,
            instance_id,
        })
    }
}

/// Both jobs at one moment (the original's `snapshot()` dict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStates {
    /// The worker job (`agents-server.service` / `com.agentsdock.server`).
    pub worker: ServiceState,
    /// The gateway job (`agents-server-gateway.service` / `com.agentsdock.gateway`).
    pub gateway: ServiceState,
}

impl ServiceStates {
    /// The state of `role`; `None` for a name that is no role.
    pub fn role(&self, role: impl OrName<Role>) -> Option<&ServiceState> {
        Some(self.of(role.into_member().ok()?))
    }

    fn of(&self, role: Role) -> &ServiceState {
        match role {
            Role::Worker => &self.worker,
            Role::Gateway => &self.gateway,
        }
    }

    /// `{"worker": {...}, "gateway": {...}}`, as journals record prior services.
    pub fn to_json(&self) -> Json {
        let mut object = JsonObject::new();
        for role in Role::ALL {
            object.insert(role.as_str(), self.of(role).to_json());
        }
        Json::Object(object)
    }
}

/// The worker and gateway jobs of one layout on the host's service manager.
pub struct NativeServices {
    layout: ExecutionLayout,
    runner: Box<dyn CommandRunner>,
    timeout: Duration,
}

impl NativeServices {
    /// The real service manager for `layout`.
    ///
    /// Refuses with ValueError `native execution platform does not match this
    /// host` unless the host is Linux or macOS and `layout.platform` names it
    /// (`Darwin` exactly on macOS).
    pub fn new(layout: &ExecutionLayout) -> Result<Self> {
        let host_is_darwin = cfg!(target_os = "macos");
        let supported_host = cfg!(any(target_os = "linux", target_os = "macos"));
        if !supported_host || (layout.platform == Platform::Darwin) != host_is_darwin {
            return Err(Error::value(
                "native execution platform does not match this host",
            ));
        }
        Ok(Self::with_runner(
            layout,
            Box::new(SystemCommandRunner::default()),
        ))
    }

    /// The service manager of `layout` reached through `runner`, without the
    /// host check (the original skips it for an injected `run`).
    pub fn with_runner(layout: &ExecutionLayout, runner: Box<dyn CommandRunner>) -> Self {
        NativeServices {
            layout: layout.clone(),
            runner,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Changes the bound of a worker stop (default 180 s); a gateway stop waits
    /// at most the smaller of this and 30 s.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Any platform but `Linux` takes the launchd branch, as in the original.
    fn is_linux(&self) -> bool {
        self.layout.platform.uses_systemctl()
    }

    fn target(role: Role) -> String {
        format!("gui/{}/{}", current_uid(), role.label())
    }

    /// How long a stop of `role` may take.
    fn stop_bound(&self, role: Role) -> Duration {
        if role == Role::Worker {
            self.timeout
        } else {
            self.timeout.min(GATEWAY_STOP_LIMIT)
        }
    }

    /// Runs one command; a non-zero exit is RuntimeError `native service
    /// command failed (<program> <first argument>)` unless `allow_failure`.
    fn command(
        &self,
        args: &[&str],
        allow_failure: bool,
        timeout: Duration,
    ) -> Result<CommandOutput> {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let CommandCapture {
            status,
            stdout,
            stderr,
        } = self.runner.run(&args, timeout)?;
        let output = CommandOutput {
            status,
            stdout: python_compat::text_mode(&stdout)?,
            stderr: python_compat::text_mode(&stderr)?,
        };
        if output.status != 0 && !allow_failure {
            // launchctl print can contain environment secrets: never echo output.
            return Err(Error::runtime(format!(
                "native service command failed ({} {})",
                args[0], args[1]
            )));
        }
        Ok(output)
    }

    /// The current state of one job (the original's `_observe`), including
    /// `transitioning`, which `snapshot` refuses.
    pub fn observe(&self, role: impl OrName<Role>) -> Result<ServiceState> {
        let role = role.into_member()?;
        let exists =
            snapshot(&self.layout.service_path(role)?)?.get("exists") == Some(&Json::Bool(true));
        if self.is_linux() {
            let properties = format!("--property={}", systemd::PROPERTIES.join(","));
            let unit = role.unit();
            let args = [
                "systemctl",
                "--user",
                "show",
                unit,
                "--no-pager",
                &properties,
            ];
            let result = self.command(&args, false, COMMAND_TIMEOUT)?;
            return systemd::unit_state(&result.stdout, exists);
        }
        let domain = format!("gui/{}", current_uid());
        let disabled = self.command(
            &["/bin/launchctl", "print-disabled", &domain],
            false,
            COMMAND_TIMEOUT,
        )?;
        let enabled = launchd::enablement(&disabled.stdout, role.label())?;
        let target = Self::target(role);
        let result = self.command(&["/bin/launchctl", "print", &target], true, COMMAND_TIMEOUT)?;
        if result.status != 0 {
            if !result.stderr.contains("Could not find service") {
                return Err(Error::runtime("launchd service ownership is unknown"));
            }
            return Ok(if exists {
                ServiceState::stopped(enabled)
            } else {
                ServiceState::absent()
            });
        }
        if !exists {
            return Err(Error::runtime(
                "loaded native service has no safely restorable plist",
            ));
        }
        Ok(launchd::loaded_state(&result.stdout, enabled))
    }

    /// Both jobs, worker first; RuntimeError `native service is transitioning;
    /// retry after it settles` while either is starting or stopping.
    pub fn snapshot(&self) -> Result<ServiceStates> {
        let states = ServiceStates {
            worker: self.observe(Role::Worker)?,
            gateway: self.observe(Role::Gateway)?,
        };
        if states.worker.state == ServiceRunState::Transitioning
            || states.gateway.state == ServiceRunState::Transitioning
        {
            return Err(
                Error::runtime("native service is transitioning; retry after it settles")
                    .with_kind(ErrorKind::ServiceTransitioning),
            );
        }
        Ok(states)
    }

    /// Stops a job without blocking in the manager, then polls every 0.1 s
    /// until it is stopped or absent, for up to the stop bound (180 s worker,
    /// 30 s gateway). It never escalates: on timeout, RuntimeError `native
    /// service did not stop; no force kill was attempted`.
    pub fn stop(&self, role: impl OrName<Role>) -> Result<()> {
        let role = role.into_member()?;
        let settled = |state: &ServiceState| {
            matches!(
                state.state,
                ServiceRunState::Absent | ServiceRunState::Stopped
            )
        };
        if settled(&self.observe(role)?) {
            return Ok(());
        }
        let bound = self.stop_bound(role);
        if self.is_linux() {
            let args = ["systemctl", "--user", "stop", "--no-block", role.unit()];
            self.command(&args, false, COMMAND_TIMEOUT)?;
        } else {
            let target = Self::target(role);
            self.command(&["/bin/launchctl", "bootout", &target], false, bound)?;
        }
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if settled(&self.observe(role)?) {
                return Ok(());
            }
            sleep(STOP_POLL);
        }
        Err(Error::runtime(
            "native service did not stop; no force kill was attempted",
        ))
    }

    /// `systemctl --user daemon-reload` (nothing on launchd).
    pub fn reload(&self) -> Result<()> {
        if self.is_linux() {
            self.command(
                &["systemctl", "--user", "daemon-reload"],
                false,
                COMMAND_TIMEOUT,
            )?;
        }
        Ok(())
    }

    /// Enables or disables a job's start at login.
    pub fn set_enabled(&self, role: impl OrName<Role>, enabled: bool) -> Result<()> {
        let role = role.into_member()?;
        let action = if enabled { "enable" } else { "disable" };
        if self.is_linux() {
            let args = ["systemctl", "--user", action, role.unit()];
            self.command(&args, false, COMMAND_TIMEOUT)?;
        } else {
            let target = Self::target(role);
            self.command(&["/bin/launchctl", action, &target], false, COMMAND_TIMEOUT)?;
        }
        Ok(())
    }

    /// Starts a job: its unit file or plist must be a safe readable file; the
    /// job is enabled, then started without blocking (launchd: bootstrapped).
    pub fn start(&self, role: impl OrName<Role>) -> Result<()> {
        let role = role.into_member()?;
        let path = self.layout.service_path(role)?;
        read_file(&path, false)?;
        self.set_enabled(role, true)?;
        if self.is_linux() {
            let args = ["systemctl", "--user", "start", "--no-block", role.unit()];
            self.command(&args, false, COMMAND_TIMEOUT)?;
        } else {
            let domain = format!("gui/{}", current_uid());
            let path = path.to_string_lossy();
            let args = ["/bin/launchctl", "bootstrap", &domain, &path];
            self.command(&args, false, COMMAND_TIMEOUT)?;
        }
        Ok(())
    }

    /// Returns a job to a recorded prior state: nothing for `absent`, a start
    /// for `running`, and the recorded enablement otherwise (or when a running
    /// job was disabled).
    pub fn restore(&self, role: impl OrName<Role>, prior: &ServiceState) -> Result<()> {
        let role = role.into_member()?;
        match prior.state {
            ServiceRunState::Absent => return Ok(()),
            ServiceRunState::Running => self.start(role)?,
            _ => {}
        }
        if prior.state != ServiceRunState::Running || !prior.enabled {
            self.set_enabled(role, prior.enabled)?;
        }
        Ok(())
    }
}

/// A command's outcome as the original's `text=True` sees it.
struct CommandOutput {
    status: i32,
    stdout: String,
    stderr: String,
}

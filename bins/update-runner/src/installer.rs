//! Supervision of `install.sh` by the update runner (`update_runner.py`'s
//! `run_installer`, `terminate_installer` and `installer_environment`).
//!
//! The runner starts the release's installer in its own session with a
//! scrubbed environment, appends its output to `server-update.log` behind a
//! header, and keeps the `server-update.json` row alive with a heartbeat
//! (compare-and-swap on the owning update) every 10 s. Past the 1,800 s budget
//! it sends SIGTERM to the installer's process group and then waits for as
//! long as the installer's protected rollback takes: never SIGKILL, because
//! once activation began only install.sh can put the old release back.
//! Failures carry a bounded, redacted tail of this attempt's log.
//!
//! Kept from the original on purpose: an error of a heartbeat write other than
//! lost ownership (an unsafe lock file, a full disk) propagates at once and
//! leaves the installer running in its session, exactly as Python's
//! unhandled exception did.
//!
//! Deviations from `subprocess.Popen`, neither reachable with a release's
//! install.sh started by the server: descriptors the runner inherited
//! without close-on-exec are not closed (the server starts the runner with
//! `close_fds`, and everything the runner opens is close-on-exec), and a
//! program without a `#!` line is run by `/bin/sh` (the C library's
//! `execvp`) where Python fails with "Exec format error".

mod log;
mod redact;

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};

use agents_common::{is_ownership_lost, update_status, utc_now, Error, Result, StatusPhase};
use python_compat::json_object;

pub use log::{installer_log_tail, trim_installer_log, INSTALLER_LOG_MAX_BYTES};

/// The enclosing budget of one installer run (install.sh itself allows its
/// dependency synchronisation 1,200 s, so a healthy installer finishes first).
pub const INSTALLER_TIMEOUT_SECONDS: u64 = 1_800;
/// Interval of the status heartbeat while the installer runs.
pub const INSTALLER_HEARTBEAT_SECONDS: u64 = 10;
/// Interval of the progress messages while a terminated installer rolls back.
pub const INSTALLER_TERMINATION_POLL_SECONDS: u64 = 10;
/// The installer's exit status for "the interrupted activation was rolled
/// back to the verified previous installation" (recovery accepts it).
pub const INSTALLER_ROLLED_BACK_EXIT: i32 = 75;
/// The log beside `server-update.json` that receives every installer attempt.
pub const INSTALLER_LOG_NAME: &str = "server-update.log";
/// Variables removed from the installer's environment: the runner's own
/// credentials and any Python or uv workspace it was started from, which
/// must not leak into (or redirect) the installed release.
pub const INSTALLER_ENVIRONMENT_SELECTORS: [&str; 17] = [
    "AGENTSDOCK_AGENT_TOKEN",
    "AGENTSDOCK_EXPECTED_SERVICE_CGROUP",
    "AGENTSDOCK_MANAGED_UPDATE_ID",
    "AGENTSDOCK_PROVIDER_AUTHORITY_FILE",
    "AGENTSDOCK_PUBLISH_TOKEN",
    "CONDA_PREFIX",
    "PYTHONHOME",
    "PYTHONPATH",
    "UV_CONFIG_FILE",
    "UV_NO_PROJECT",
    "UV_PROJECT",
    "UV_PROJECT_ENVIRONMENT",
    "UV_PYTHON",
    "UV_WORKING_DIR",
    "VIRTUAL_ENV",
    "ZENITHBOT_AGENT_TOKEN",
    "ZENITHDOCK_AGENT_TOKEN",
];

/// Longest sleep between two checks of the installer's exit (Python's
/// `Popen.wait(timeout)` polls with the same cap).
const EXIT_POLL_CAP: Duration = Duration::from_millis(50);

/// One installer run: what to start, where it logs, which update it serves
/// and the time budgets (the original's constants unless a test shortens them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallerRun {
    /// The installer to execute (the release's `install.sh`).
    pub program: PathBuf,
    /// Its arguments, after the program.
    pub arguments: Vec<OsString>,
    /// Working directory of the installer (the release source directory).
    pub cwd: PathBuf,
    /// The `server-update.json` row that receives heartbeats.
    pub status_path: PathBuf,
    /// The log the installer's stdout and stderr are appended to.
    pub log_path: PathBuf,
    /// The release version being installed (log header and messages).
    pub version: String,
    /// The update that must still own the row for every heartbeat; `None`
    /// writes heartbeats unconditionally (a manual run).
    pub expected_update_id: Option<String>,
    /// Exported to the installer as `AGENTSDOCK_MANAGED_UPDATE_ID`.
    pub managed_update_id: Option<String>,
    /// Exported to the installer as `AGENTSDOCK_EXPECTED_SERVICE_CGROUP`.
    pub expected_service_cgroup: Option<String>,
    /// Budget before the installer is asked to stop (SIGTERM to its group).
    pub timeout: Duration,
    /// Interval of the status heartbeat.
    pub heartbeat: Duration,
    /// Interval of the progress messages while waiting after SIGTERM.
    pub termination_poll: Duration,
    /// Whether exit status 75 means a completed rollback (recovery) rather
    /// than a failure (`accepted_returncodes=(0, 75)` in the original).
    pub rollback_accepted: bool,
    /// Credential values replaced by `[REDACTED]` wherever they appear in a
    /// failure's log tail ([`runner_secrets`]); none by default.
    pub secrets: Vec<String>,
}

impl InstallerRun {
    /// A run with the original's defaults: the log is `server-update.log` beside
    /// the status file, no update ids or cgroup, 1,800 s budget, 10 s
    /// heartbeat and termination poll, exit 75 is a failure.
    pub fn new(
        program: impl Into<PathBuf>,
        arguments: Vec<OsString>,
        cwd: impl Into<PathBuf>,
        status_path: impl Into<PathBuf>,
        version: impl Into<String>,
    ) -> InstallerRun {
        let status_path = status_path.into();
        InstallerRun {
            program: program.into(),
            arguments,
            cwd: cwd.into(),
            log_path: status_path.with_file_name(INSTALLER_LOG_NAME),
            status_path,
            version: version.into(),
            expected_update_id: None,
            managed_update_id: None,
            expected_service_cgroup: None,
            timeout: Duration::from_secs(INSTALLER_TIMEOUT_SECONDS),
            heartbeat: Duration::from_secs(INSTALLER_HEARTBEAT_SECONDS),
            termination_poll: Duration::from_secs(INSTALLER_TERMINATION_POLL_SECONDS),
            rollback_accepted: false,
            secrets: Vec::new(),
        }
    }
}

/// The runner's own credential variables: scrubbed from the installer's
/// environment, and their values redacted from its log tail.
const CREDENTIAL_VARIABLES: [&str; 4] = [
    "AGENTSDOCK_AGENT_TOKEN",
    "AGENTSDOCK_PUBLISH_TOKEN",
    "ZENITHBOT_AGENT_TOKEN",
    "ZENITHDOCK_AGENT_TOKEN",
];

/// Every secret value this runner knows: the server's one-time health
/// credential and its credential variables. Stricter than the original, whose
/// patterns alone miss a token after `xBearer` or `Bearer\xff`: the values
/// themselves are redacted from failure messages wherever they appear.
pub fn runner_secrets(health_credential: &str) -> Vec<String> {
    let mut secrets: Vec<String> = CREDENTIAL_VARIABLES
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .chain(std::iter::once(health_credential.to_string()))
        .filter(|value| !value.is_empty())
        .collect();
    secrets.sort();
    secrets.dedup();
    secrets
}

/// How a supervised installer finished when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallerOutcome {
    /// Exit status 0.
    Installed,
    /// Exit status 75 while [`InstallerRun::rollback_accepted`]: the
    /// interrupted activation was rolled back (the original's `InstallerRolledBack`).
    RolledBack,
}

/// `run_installer`: run the installer to completion under supervision.
///
/// Errors, each with the original's message: the first heartbeat or any later one
/// refused because the update lost the row (`UpdateOwnershipLostError`, see
/// [`is_ownership_lost`]; the installer is then terminated and joined first),
/// `installer timed out after {budget} seconds[: tail]` once the terminated
/// installer has exited, `installer failed ({code}): {tail}` for any other
/// exit status (a death by signal is the negative signal number), and the
/// OS errors of the log, the spawn and the status row.
pub fn run_installer(run: &InstallerRun) -> Result<InstallerOutcome> {
    if let Some(update_id) = &run.expected_update_id {
        update_status(
            &run.status_path,
            Some(update_id),
            json_object! {"heartbeat_at" => utc_now()},
        )?;
    }
    if let Some(parent) = run.log_path.parent() {
        std::fs::create_dir_all(parent).map_err(|err| Error::from_io_path(&err, parent))?;
    }
    let update_label = match run.expected_update_id.as_deref() {
        Some(update_id) if !update_id.is_empty() => update_id,
        _ => "manual",
    };
    let header = format!(
        "\n--- AgentsServer update {update_label} to {} at {} ---\n",
        run.version,
        utc_now()
    );
    trim_installer_log(
        &run.log_path,
        INSTALLER_LOG_MAX_BYTES.saturating_sub(header.len() as u64),
    )?;
    let started = Instant::now();
    let deadline = started + run.timeout;
    let (log, attempt_start) = open_attempt_log(&run.log_path, header.as_bytes())?;
    let mut child = spawn_installer(run, &log)?;
    let status = loop {
        let now = Instant::now();
        if now >= deadline {
            drop(log);
            return Err(expire_budget(run, &mut child, started, attempt_start));
        }
        if let Some(status) = wait_for_exit(&mut child, run.heartbeat.min(deadline - now))? {
            break status;
        }
        let elapsed = elapsed_seconds(started);
        let message = format!(
            "Installing AgentsServer {} ({elapsed}s elapsed).",
            run.version
        );
        match report_installing(run, message, elapsed) {
            Ok(()) => {}
            Err(lost) if is_ownership_lost(&lost) => {
                terminate_installer(&mut child, run.termination_poll, &|| Ok(()))?;
                drop(log);
                trim_installer_log(&run.log_path, INSTALLER_LOG_MAX_BYTES)?;
                return Err(lost);
            }
            Err(other) => return Err(other),
        }
    };
    drop(log);
    let returncode = python_returncode(status);
    let tail = if returncode != 0 {
        installer_log_tail(&run.log_path, attempt_start, &run.secrets)
    } else {
        String::new()
    };
    trim_installer_log(&run.log_path, INSTALLER_LOG_MAX_BYTES)?;
    if returncode == INSTALLER_ROLLED_BACK_EXIT && run.rollback_accepted {
        return Ok(InstallerOutcome::RolledBack);
    }
    if returncode != 0 {
        let detail = if tail.is_empty() {
            "no output; inspect server-update.log"
        } else {
            &tail
        };
        return Err(Error::runtime(format!(
            "installer failed ({returncode}): {detail}"
        )));
    }
    Ok(InstallerOutcome::Installed)
}

/// The budget is spent: SIGTERM to the installer's group, wait for its
/// protected rollback however long it takes (reporting progress on the row,
/// even if the update no longer owns it: errors are ignored), then the
/// timeout error with this attempt's tail.
fn expire_budget(
    run: &InstallerRun,
    child: &mut Child,
    started: Instant,
    attempt_start: u64,
) -> Error {
    let report_protected_recovery = || {
        let elapsed = elapsed_seconds(started);
        let message = format!(
            "Installer timeout reached; waiting for its protected rollback to finish ({elapsed}s elapsed)."
        );
        report_installing(run, message, elapsed)
    };
    if let Err(error) = terminate_installer(child, run.termination_poll, &report_protected_recovery)
    {
        return error;
    }
    let tail = installer_log_tail(&run.log_path, attempt_start, &run.secrets);
    if let Err(error) = trim_installer_log(&run.log_path, INSTALLER_LOG_MAX_BYTES) {
        return error;
    }
    let detail = if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    };
    Error::runtime(format!(
        "installer timed out after {} seconds{detail}",
        python_compat::format_g(run.timeout.as_secs_f64())
    ))
}

/// A progress write on the row (CAS on the owning update, when there is
/// one): phase `installing`, `message`, `heartbeat_at` and `elapsed_seconds`.
fn report_installing(run: &InstallerRun, message: String, elapsed: u64) -> Result<()> {
    update_status(
        &run.status_path,
        run.expected_update_id.as_deref(),
        json_object! {
            "phase" => StatusPhase::Installing,
            "message" => message,
            "heartbeat_at" => utc_now(),
            "elapsed_seconds" => elapsed,
        },
    )
    .map(drop)
}

/// Open the log for appending, make it private, write this attempt's header
/// and return where the attempt's own output begins.
fn open_attempt_log(log_path: &Path, header: &[u8]) -> Result<(File, u64)> {
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(log_path)
        .map_err(|err| Error::from_io_path(&err, log_path))?;
    std::fs::set_permissions(log_path, std::fs::Permissions::from_mode(0o600))
        .map_err(|err| Error::from_io_path(&err, log_path))?;
    log.write_all(header)?;
    // With O_APPEND the offset after a write is the end of the file.
    let attempt_start = log.stream_position()?;
    Ok((log, attempt_start))
}

/// Start the installer: stdout and stderr on the log, stdin inherited, a new
/// session (so SIGTERM can reach every stage worker as one group), and the
/// scrubbed environment plus the managed update's identity.
fn spawn_installer(run: &InstallerRun, log: &File) -> Result<Child> {
    let mut command = Command::new(&run.program);
    command
        .args(&run.arguments)
        .current_dir(&run.cwd)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log.try_clone()?));
    for name in INSTALLER_ENVIRONMENT_SELECTORS {
        command.env_remove(name);
    }
    if let Some(update_id) = &run.managed_update_id {
        command.env("AGENTSDOCK_MANAGED_UPDATE_ID", update_id);
    }
    if let Some(cgroup) = &run.expected_service_cgroup {
        command.env("AGENTSDOCK_EXPECTED_SERVICE_CGROUP", cgroup);
    }
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the
    // parent, which is all a pre-exec hook between fork and exec may do.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
    command.spawn().map_err(|err| {
        // Popen names the program, or the working directory when changing
        // into it failed; the original passes that one as a Path, so Python
        // shows its repr.
        if std::fs::metadata(&run.cwd).is_ok_and(|info| info.is_dir()) {
            return Error::from_io_path(&err, &run.program);
        }
        let without_path = Error::from(match err.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::from(err.kind()),
        });
        Error::new(
            without_path.class(),
            format!(
                "{}: PosixPath('{}')",
                without_path.message(),
                python_compat::path::shown(&run.cwd)
            ),
        )
    })
}

/// `terminate_installer`: SIGTERM to the installer's process group (to the
/// process alone if that fails), then wait without any deadline, calling
/// `on_wait` before each `poll` interval. Its errors are ignored: losing the
/// row must not turn a safe join into a detached installer or a SIGKILL.
fn terminate_installer(
    child: &mut Child,
    poll: Duration,
    on_wait: &dyn Fn() -> Result<()>,
) -> Result<()> {
    if child.try_wait()?.is_some() {
        return Ok(());
    }
    let pid = Pid::from_child(child);
    if kill_process_group(pid, Signal::TERM).is_err() {
        let _ = kill_process(pid, Signal::TERM);
    }
    loop {
        let _ = on_wait();
        if wait_for_exit(child, poll)?.is_some() {
            return Ok(());
        }
    }
}

/// `Popen.wait(timeout)`: the exit status, or `None` once `timeout` passed.
fn wait_for_exit(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(delay.min(deadline - now));
        delay = (delay * 2).min(EXIT_POLL_CAP);
    }
}

/// Whole seconds since `started`, at least 1 (`max(1, int(elapsed))`).
fn elapsed_seconds(started: Instant) -> u64 {
    started.elapsed().as_secs().max(1)
}

/// `Popen.returncode`: the exit status, or minus the signal that killed it.
fn python_returncode(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => -signal,
        (None, None) => -1,
    }
}

#[cfg(test)]
mod tests {
    use python_compat::format_g;

    #[test]
    fn general_format_matches_python() {
        // Expected values are Python's format(x, "g").
        let cases = [
            (1800.0, "1800"),
            (0.08, "0.08"),
            (0.25, "0.25"),
            (1.0, "1"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (2.5e-7, "2.5e-07"),
            (0.1 + 0.2, "0.3"),
            (1e100, "1e+100"),
            (0.0, "0"),
        ];
        for (value, expected) in cases {
            assert_eq!(format_g(value), expected, "{value}");
        }
    }
}

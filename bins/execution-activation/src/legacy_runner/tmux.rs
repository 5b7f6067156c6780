//! `_tmux` / `_tmux_at`: the one pane of the old updater's tmux session on
//! the default socket, and the tmux server process behind it.

use std::path::Path;
use std::time::Duration;

use rustix::fs::{Access, FileType};

use super::kernel::{process, Process};
use super::pins::{directory_pin, resolve_strict};
use super::LegacyRunnerProbe;
use agents_common::{Error, Result};
use python_compat::{
    decode_utf8,
    os::{current_uid, is_type, lstat, permission_bits},
    path::{pure_path, resolve},
    shlex, splitlines,
};

/// The `-F` format of `list-panes`: one `|`-separated row per pane.
pub const PANE_FORMAT: &str = "#{session_name}|#{session_id}|#{pane_id}|#{pane_pid}|#{pane_dead}|#{pid}|#{pane_start_command}";
/// The original's `timeout=5` for the tmux query.
const TMUX_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest `list-panes` output accepted.
const MAX_PANE_OUTPUT: usize = 64 * 1024;

/// `(st_dev, st_ino, st_uid, st_mode)` of the tmux socket.
type SocketPin = (u64, u64, u32, u32);

/// What `_tmux` proves about the session's single pane; compared whole when
/// the proof is repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pane {
    /// `#{session_name}`.
    pub session: String,
    /// `#{session_id}` (`$N`).
    pub session_id: String,
    /// `#{pane_id}` (`%N`).
    pub pane_id: String,
    /// `#{pane_pid}`: the process the pane started.
    pub pane_pid: i128,
    /// The tmux server (`#{pid}`), which must run the pinned tmux binary.
    pub server: Process,
    /// The words of `#{pane_start_command}` ([`launch_arguments`]).
    pub launch: Vec<String>,
    socket: SocketPin,
}

/// `_tmux(session)`: the pane on the default socket, queried with the
/// `tmux` found on `PATH` (resolved).
pub(super) fn tmux(probe: &dyn LegacyRunnerProbe, session: &str) -> Result<Pane> {
    let socket = probe.tmux_socket()?;
    let Some(program) = probe.tmux_program() else {
        return Err(Error::runtime("legacy tmux executable is unavailable"));
    };
    tmux_at(probe, session, &socket, &resolve_strict(&program)?)
}

/// The pane of `session` on the tmux server at `socket`, proven to be that
/// server (pinned executable, owner, socket inode) before its answer is
/// believed. Ports `_tmux_at(session, socket, executable)`.
fn tmux_at(
    probe: &dyn LegacyRunnerProbe,
    session: &str,
    socket: &Path,
    executable: &Path,
) -> Result<Pane> {
    directory_pin(&python_compat::path::parent(socket), true)?;
    let socket_info = lstat(socket)?;
    let uid = current_uid();
    if !is_type(&socket_info, FileType::Socket)
        || socket_info.st_uid != uid
        || permission_bits(&socket_info) & 0o007 != 0
        || socket_info.st_nlink != 1
    {
        return Err(Error::runtime("legacy tmux socket is not owned"));
    }
    let binary =
        rustix::fs::stat(executable).map_err(|errno| Error::from_errno(errno, executable))?;
    if !is_type(&binary, FileType::RegularFile)
        || ![0, uid].contains(&binary.st_uid)
        || permission_bits(&binary) & 0o022 != 0
        || rustix::fs::access(executable, Access::EXEC_OK).is_err()
    {
        return Err(Error::runtime("legacy tmux executable is unsafe"));
    }
    let text = |path: &Path| path.to_string_lossy().into_owned();
    let argv = [
        text(executable),
        "-S".to_string(),
        text(socket),
        "list-panes".to_string(),
        "-s".to_string(),
        "-t".to_string(),
        format!("={session}"),
        "-F".to_string(),
        PANE_FORMAT.to_string(),
    ];
    // The old bootstrap dropped TMUX/TMUX_TMPDIR; -S and a clean
    // environment keep the caller's from selecting another server.
    let environment = [
        ("PATH", "/usr/bin:/bin".to_string()),
        ("HOME", home()?),
        ("LC_ALL", "C".to_string()),
    ];
    let result = probe.run(&argv, &environment, TMUX_TIMEOUT)?;
    if result.status != 0 || result.stdout.len() > MAX_PANE_OUTPUT {
        return Err(Error::runtime("legacy updater tmux pane is unavailable"));
    }
    let rows = splitlines(decode_utf8(&result.stdout)?);
    let [row] = rows.as_slice() else {
        return Err(Error::runtime(
            "legacy updater tmux session must have one pane",
        ));
    };
    let fields: Vec<&str> = row.splitn(7, '|').collect();
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let tagged = |text: &str, tag: &str| text.strip_prefix(tag).is_some_and(digits);
    let valid = fields.len() == 7
        && fields[0] == session
        && tagged(fields[1], "$")
        && tagged(fields[2], "%")
        && digits(fields[3])
        && fields[4] == "0"
        && digits(fields[5]);
    if !valid {
        return Err(Error::runtime(
            "legacy updater tmux pane identity is invalid",
        ));
    }
    // Python ints are unbounded; no live PID is this large.
    let number = |text: &str| text.parse::<i128>().unwrap_or(i128::MAX);
    let server = process(probe, number(fields[5]))?;
    if resolve(&server.executable)?.as_os_str() != executable.as_os_str() {
        return Err(Error::runtime("legacy tmux process executable changed"));
    }
    let pin = |info: &rustix::fs::Stat| -> SocketPin {
        #[allow(clippy::unnecessary_cast)]
        (
            info.st_dev as u64,
            info.st_ino as u64,
            info.st_uid,
            info.st_mode as u32,
        )
    };
    let binding = pin(&socket_info);
    if pin(&lstat(socket)?) != binding {
        return Err(Error::runtime("legacy tmux socket changed"));
    }
    Ok(Pane {
        session: fields[0].to_string(),
        session_id: fields[1].to_string(),
        pane_id: fields[2].to_string(),
        pane_pid: number(fields[3]),
        server,
        launch: launch_arguments(fields[6])?,
        socket: binding,
    })
}

/// `_launch_arguments(display)`: the updater's command line from tmux's
/// display of the one shell command the pane was started with, decoded,
/// never evaluated. Older tmux shows the command text itself; newer tmux
/// quotes the single argument given to `new-session`, which adds one layer
/// of quoting. The caller compares every word with the kernel's arguments.
fn launch_arguments(display: &str) -> Result<Vec<String>> {
    if display.chars().any(|c| (c as u32) < 32 || c as u32 == 127) {
        return Err(Error::runtime(
            "legacy tmux launch display contains control characters",
        ));
    }
    let mut arguments = shlex::split(display)?;
    if let [single] = arguments.as_slice() {
        arguments = shlex::split(single)?;
    }
    if arguments.len() < 2 {
        return Err(Error::runtime(
            "legacy tmux launch display is missing arguments or nested",
        ));
    }
    Ok(arguments)
}

/// `str(Path.home())`, from `HOME` (the password database fallback of
/// Python is not consulted).
fn home() -> Result<String> {
    match std::env::var_os("HOME") {
        Some(home) if !home.is_empty() => {
            Ok(pure_path(Path::new(&home)).to_string_lossy().into_owned())
        }
        _ => Err(Error::runtime("Could not determine home directory.")),
    }
}

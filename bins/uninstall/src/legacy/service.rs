//! Stopping the one legacy service before any file is removed: the systemd
//! user unit `agents-server.service` on Linux, the launchd agent
//! `com.agentsdock.server` on macOS, each with the script's bounded wait
//! (50 polls, 0.1 s apart) and its refusal to remove files while the
//! service may still run.
//!
//! The commands are looked up on PATH, as the script runs them (`uname`
//! too, so the host it names decides the branch), behind [`Host`] so the
//! launchd path can be exercised off macOS.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::shell::{rm_f, rm_rf};
use super::Exit;
use crate::output::{say, warn};
use crate::roots::join_bytes;

/// What the service stop needs from the machine.
pub(crate) trait Host {
    /// Runs a command with its output discarded (`>/dev/null 2>&1`); true
    /// when it ran and exited 0.
    fn quiet(&mut self, program: &str, args: &[&OsStr]) -> bool;
    /// Runs a command with its output shown (the script's `daemon-reload`).
    fn shown(&mut self, program: &str, args: &[&OsStr]) -> bool;
    /// `sleep 0.1` between polls; `Err` when a trapped signal arrived.
    fn pause(&mut self) -> Result<(), Exit>;
}

/// The real machine: commands on PATH with the uninstaller's stdin.
pub(crate) struct RealHost;

impl Host for RealHost {
    fn quiet(&mut self, program: &str, args: &[&OsStr]) -> bool {
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    fn shown(&mut self, program: &str, args: &[&OsStr]) -> bool {
        match Command::new(program).args(args).status() {
            Ok(status) => status.success(),
            Err(err) => {
                warn(&[
                    b"uninstall: ",
                    program.as_bytes(),
                    b": ",
                    err.to_string().as_bytes(),
                ]);
                false
            }
        }
    }

    fn pause(&mut self) -> Result<(), Exit> {
        std::thread::sleep(Duration::from_millis(100));
        super::checkpoint()
    }
}

/// The legacy systemd unit.
const SERVICE_NAME: &str = "agents-server";
/// The legacy launchd label.
const LABEL: &str = "com.agentsdock.server";
/// How many times the script polls for the stop (0.1 s apart).
const STOP_POLLS: usize = 50;

/// `OS_NAME="$(uname -s)"`, the script's first command: the host's name as
/// the `uname` found on PATH prints it, trailing newlines removed. Under
/// `set -e` a `uname` that cannot run or fails ends the script at once with
/// bash's status (127 not found, 126 not executable, else uname's own).
pub(crate) fn os_name() -> Result<OsString, Exit> {
    let output = Command::new("uname")
        .arg("-s")
        .stderr(Stdio::inherit())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(err) => {
            let (status, reason) = match err.kind() {
                std::io::ErrorKind::NotFound => (127, "command not found".to_string()),
                std::io::ErrorKind::PermissionDenied => (126, "Permission denied".to_string()),
                _ => (126, err.to_string()),
            };
            warn(&[b"uninstall: uname: ", reason.as_bytes()]);
            return Err(Exit(status));
        }
    };
    if !output.status.success() {
        let status = match (output.status.code(), output.status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        };
        return Err(Exit(u8::try_from(status & 0xff).unwrap_or(1)));
    }
    let mut name = output.stdout;
    while name.last() == Some(&b'\n') {
        name.pop();
    }
    Ok(OsString::from_vec(name))
}

/// Stops the service and removes its definition (and macOS logs), or
/// refuses with every file kept.
pub(super) fn stop_and_remove(host: &mut dyn Host, os: &OsStr, home: &OsStr) -> Result<(), Exit> {
    match os.as_bytes() {
        b"Darwin" => stop_launchd(host, home),
        b"Linux" => stop_systemd(host, home),
        _ => {
            warn(&[
                b"Unsupported host OS: ",
                os.as_bytes(),
                b"; no files were removed.",
            ]);
            Err(Exit(1))
        }
    }
}

fn stop_launchd(host: &mut dyn Host, home: &OsStr) -> Result<(), Exit> {
    let plist = join_bytes(
        home,
        format!("/Library/LaunchAgents/{LABEL}.plist").as_bytes(),
    );
    // `id -u` prints the effective uid.
    let target = OsString::from(format!(
        "gui/{}/{LABEL}",
        rustix::process::geteuid().as_raw()
    ));
    let print = |host: &mut dyn Host| host.quiet("launchctl", &[OsStr::new("print"), &target]);
    if print(host) {
        super::checkpoint()?;
        say(&[b"Stopping ", LABEL.as_bytes()]);
        if !host.quiet("launchctl", &[OsStr::new("bootout"), &target]) && print(host) {
            warn(&[
                b"Could not stop ",
                LABEL.as_bytes(),
                b"; no files were removed.",
            ]);
            return Err(Exit(1));
        }
        super::checkpoint()?;
        if !wait_until_stopped(host, print)? {
            warn(&[LABEL.as_bytes(), b" did not stop; no files were removed."]);
            return Err(Exit(1));
        }
    }
    super::checkpoint()?;
    if is_file(&plist) {
        say(&[b"Removing ", plist.as_os_str().as_bytes()]);
        rm_f(&plist).map_err(|()| Exit(1))?;
    }
    let logs = join_bytes(home, b"/Library/Logs/AgentsServer");
    if is_dir(&logs) {
        say(&[b"Removing ", logs.as_os_str().as_bytes()]);
        rm_rf(&logs).map_err(|()| Exit(1))?;
    }
    Ok(())
}

fn stop_systemd(host: &mut dyn Host, home: &OsStr) -> Result<(), Exit> {
    let unit = format!("{SERVICE_NAME}.service");
    let service_file: PathBuf =
        join_bytes(home, format!("/.config/systemd/user/{unit}").as_bytes());
    let user = OsStr::new("--user");
    if !host.quiet("systemctl", &[user, OsStr::new("show-environment")]) {
        warn(&[b"The systemd user service manager is unavailable; no files were removed."]);
        return Err(Exit(1));
    }
    super::checkpoint()?;
    let is_active = |host: &mut dyn Host| {
        host.quiet(
            "systemctl",
            &[
                user,
                OsStr::new("is-active"),
                OsStr::new("--quiet"),
                OsStr::new(&unit),
            ],
        )
    };
    if is_file(&service_file) || is_active(host) {
        super::checkpoint()?;
        say(&[b"Stopping ", unit.as_bytes()]);
        let disabled = host.quiet(
            "systemctl",
            &[
                user,
                OsStr::new("disable"),
                OsStr::new("--now"),
                OsStr::new(&unit),
            ],
        );
        if !disabled && is_active(host) {
            warn(&[
                b"Could not stop ",
                unit.as_bytes(),
                b"; no files were removed.",
            ]);
            return Err(Exit(1));
        }
        super::checkpoint()?;
        if !wait_until_stopped(host, is_active)? {
            warn(&[unit.as_bytes(), b" did not stop; no files were removed."]);
            return Err(Exit(1));
        }
    }
    super::checkpoint()?;
    if is_file(&service_file) {
        say(&[b"Removing ", service_file.as_os_str().as_bytes()]);
        rm_f(&service_file).map_err(|()| Exit(1))?;
        // `systemctl --user daemon-reload || true`
        host.shown("systemctl", &[user, OsStr::new("daemon-reload")]);
        super::checkpoint()?;
    }
    Ok(())
}

/// The script's poll loop: true once `running` reports false.
fn wait_until_stopped(
    host: &mut dyn Host,
    running: impl Fn(&mut dyn Host) -> bool,
) -> Result<bool, Exit> {
    for _ in 0..STOP_POLLS {
        if !running(host) {
            return Ok(true);
        }
        super::checkpoint()?;
        host.pause()?;
    }
    Ok(false)
}

/// `[[ -f path ]]`: a regular file, following symlinks.
fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
}

/// `[[ -d path ]]`.
fn is_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Decides a command's success from its line and how often it ran before.
    type Answer = Box<dyn FnMut(&str, usize) -> bool>;

    /// Answers commands from a script of `(command line, success)` rules;
    /// records every call.
    struct FakeHost {
        calls: Vec<String>,
        answer: Answer,
    }

    impl FakeHost {
        fn new(answer: impl FnMut(&str, usize) -> bool + 'static) -> Self {
            FakeHost {
                calls: Vec::new(),
                answer: Box::new(answer),
            }
        }

        fn record(&mut self, program: &str, args: &[&OsStr]) -> bool {
            let mut line = program.to_string();
            for arg in args {
                line.push(' ');
                line.push_str(&arg.to_string_lossy());
            }
            let count = self.calls.iter().filter(|call| **call == line).count();
            self.calls.push(line.clone());
            (self.answer)(&line, count)
        }
    }

    impl Host for FakeHost {
        fn quiet(&mut self, program: &str, args: &[&OsStr]) -> bool {
            self.record(program, args)
        }

        fn shown(&mut self, program: &str, args: &[&OsStr]) -> bool {
            self.record(program, args)
        }

        fn pause(&mut self) -> Result<(), Exit> {
            self.calls.push("sleep 0.1".into());
            Ok(())
        }
    }

    fn mac_home() -> (PathBuf, PathBuf, PathBuf) {
        let home = std::env::temp_dir().join(format!(
            "uninstall-launchd-{}-{}",
            std::process::id(),
            crate::legacy::tests_counter()
        ));
        let plist = home.join(format!("Library/LaunchAgents/{LABEL}.plist"));
        let logs = home.join("Library/Logs/AgentsServer");
        fs::create_dir_all(plist.parent().unwrap()).unwrap();
        fs::write(&plist, b"<plist/>").unwrap();
        fs::create_dir_all(&logs).unwrap();
        fs::write(logs.join("server.log"), b"log").unwrap();
        (home, plist, logs)
    }

    fn target() -> String {
        format!("gui/{}/{LABEL}", rustix::process::geteuid().as_raw())
    }

    #[test]
    fn launchd_agent_is_booted_out_then_plist_and_logs_removed() {
        let (home, plist, logs) = mac_home();
        let print = format!("launchctl print {}", target());
        let bootout = format!("launchctl bootout {}", target());
        let mut host = FakeHost::new({
            let print = print.clone();
            move |line, count| line != print || count == 0
        });
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("Darwin"), home.as_os_str()),
            Ok(())
        );
        assert_eq!(host.calls, [print.clone(), bootout, print]);
        assert!(!plist.exists() && !logs.exists());
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn launchd_agent_that_stays_loaded_keeps_every_file() {
        let (home, plist, logs) = mac_home();
        // bootout fails and the agent is still printed.
        let mut host = FakeHost::new(|line, _| !line.starts_with("launchctl bootout"));
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("Darwin"), home.as_os_str()),
            Err(Exit(1))
        );
        assert_eq!(host.calls.len(), 3);
        // bootout succeeds but the agent never goes away: 50 polls, then refusal.
        let mut host = FakeHost::new(|_, _| true);
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("Darwin"), home.as_os_str()),
            Err(Exit(1))
        );
        let polls = host
            .calls
            .iter()
            .filter(|call| call.contains(" print "))
            .count();
        let sleeps = host
            .calls
            .iter()
            .filter(|call| *call == "sleep 0.1")
            .count();
        assert_eq!((polls, sleeps), (1 + STOP_POLLS, STOP_POLLS));
        assert!(plist.exists() && logs.join("server.log").exists());
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn launchd_without_a_loaded_agent_only_removes_files() {
        let (home, plist, logs) = mac_home();
        let mut host = FakeHost::new(|_, _| false);
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("Darwin"), home.as_os_str()),
            Ok(())
        );
        assert_eq!(host.calls, [format!("launchctl print {}", target())]);
        assert!(!plist.exists() && !logs.exists());
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn systemd_unit_that_stays_active_keeps_its_file() {
        let home = std::env::temp_dir().join(format!(
            "uninstall-systemd-{}-{}",
            std::process::id(),
            crate::legacy::tests_counter()
        ));
        let unit = home.join(".config/systemd/user/agents-server.service");
        fs::create_dir_all(unit.parent().unwrap()).unwrap();
        fs::write(&unit, b"[Service]\n").unwrap();
        // `disable --now` succeeds, yet the unit stays active.
        let mut host = FakeHost::new(|_, _| true);
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("Linux"), home.as_os_str()),
            Err(Exit(1))
        );
        assert_eq!(
            host.calls[..3],
            [
                "systemctl --user show-environment",
                "systemctl --user disable --now agents-server.service",
                "systemctl --user is-active --quiet agents-server.service",
            ]
        );
        let sleeps = host
            .calls
            .iter()
            .filter(|call| *call == "sleep 0.1")
            .count();
        assert_eq!(sleeps, STOP_POLLS);
        assert!(unit.exists());
        fs::remove_dir_all(home).unwrap();
    }

    #[test]
    fn other_systems_are_refused_before_any_command() {
        let mut host = FakeHost::new(|_, _| true);
        assert_eq!(
            stop_and_remove(&mut host, OsStr::new("FreeBSD"), OsStr::new("/nonexistent")),
            Err(Exit(1))
        );
        assert!(host.calls.is_empty());
    }
}

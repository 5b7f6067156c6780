//! A macOS host for uninstall.sh's `Darwin` branch on Linux: a directory put
//! first on `PATH` holding a `uname` that names the host and a `launchctl`
//! stand-in that keeps one agent's state and answers with the recorded
//! launchd outputs of `tests/fixtures/launchd` (see its README). Both the
//! original script and the port find them there, as they would find the
//! real ones; every `launchctl` call is logged so their sequences compare.
//!
//! The stand-in implements launchd's observable behaviour itself:
//! `print gui/<uid>/<label>` succeeds while the agent is loaded and says
//! `Could not find service` (exit 113) once it is not; `bootout` unloads it,
//! after `linger` more successful prints, or is refused as configured.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agents_tests::recorded_commands::launchd_output;
use agents_tests::TempDir;

use super::{clean_env, legacy_install, snapshot_under, Entry, LegacyOptions, LegacyRoots};

/// The legacy agent's label.
pub(crate) const LABEL: &str = "com.agentsdock.server";

/// How `launchctl bootout` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bootout {
    /// Exit 0; the agent is gone after `linger` more prints.
    Unloads { linger: u32 },
    /// Exit 0, yet the agent stays loaded for ever.
    Ignored,
    /// `Boot-out failed: 5: Input/output error`, exit 5; still loaded.
    Refused,
    /// `Boot-out failed: 3: No such process`, exit 3; the agent is gone.
    AlreadyGone,
}

/// The macOS host one run sees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DarwinHost {
    /// What `uname -s` prints (`Darwin`, or another kernel).
    pub os_name: &'static str,
    /// `uname`'s exit status (0, or a failure that ends the script).
    pub uname_status: i32,
    /// Whether the agent is loaded (bootstrapped) when the run starts.
    pub loaded: bool,
    /// How a bootout is answered.
    pub bootout: Bootout,
}

impl Default for DarwinHost {
    fn default() -> Self {
        DarwinHost {
            os_name: "Darwin",
            uname_status: 0,
            loaded: true,
            bootout: Bootout::Unloads { linger: 2 },
        }
    }
}

/// A legacy installation in a macOS-shaped home, with its fake host.
pub(crate) struct DarwinCase {
    temp: TempDir,
    /// The installation's roots (the script's defaults under the home).
    pub roots: LegacyRoots,
    host_dir: PathBuf,
}

const LAUNCHCTL: &str = r#"#!/bin/bash
# launchd for one agent: state is "loaded", "absent", "stuck" or "linger N".
dir="$(dirname -- "$0")/launchd"
printf '%s\n' "$*" >> "$dir/calls"
state="$(cat "$dir/state")"
case "$1" in
  print)
    case "$state" in
      absent) cat "$dir/print-not-found.stderr" >&2; exit 113 ;;
      "linger 0") echo absent > "$dir/state"
                  cat "$dir/print-not-found.stderr" >&2; exit 113 ;;
      linger\ *) echo "linger $(( ${state#linger } - 1 ))" > "$dir/state" ;;
    esac
    cat "$dir/print-running.txt"; exit 0 ;;
  bootout)
    [[ "$state" != absent ]] || { cat "$dir/bootout-no-such-process.stderr" >&2; exit 3; }
    case "$(cat "$dir/bootout")" in
      refused) cat "$dir/bootout-io-error.stderr" >&2; exit 5 ;;
      gone) echo absent > "$dir/state"
            cat "$dir/bootout-no-such-process.stderr" >&2; exit 3 ;;
      ignored) echo stuck > "$dir/state"; exit 0 ;;
      linger\ *) cat "$dir/bootout" > "$dir/state"; exit 0 ;;
    esac ;;
esac
echo "Unrecognized subcommand: $1" >&2
exit 64
"#;

const UNAME: &str = r#"#!/bin/bash
dir="$(dirname -- "$0")/launchd"
[[ "$*" == "-s" ]] || { echo "uname: only -s is recorded" >&2; exit 64; }
status="$(cat "$dir/uname-status")"
[[ "$status" == 0 ]] || { echo "uname: cannot get system name" >&2; exit "$status"; }
cat "$dir/os-name"
"#;

impl DarwinCase {
    /// A fresh legacy installation whose home has the agent's plist, its
    /// logs and another user agent, on `host`.
    pub(crate) fn start(host: DarwinHost) -> DarwinCase {
        let temp = TempDir::with_mode("agents-darwin-uninstall", 0o755);
        let home = temp.path().join("home");
        fs::create_dir(&home).unwrap();
        let roots = legacy_install(&home, LegacyOptions::default());
        let agents = home.join("Library/LaunchAgents");
        agents_tests::write_file_making_parents(
            &agents.join(format!("{LABEL}.plist")),
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\"/>\n",
            0o644,
        );
        agents_tests::write_file_making_parents(
            &agents.join("com.example.other.plist"),
            b"<plist version=\"1.0\"/>\n",
            0o644,
        );
        let logs = home.join("Library/Logs/AgentsServer");
        agents_tests::write_file_making_parents(&logs.join("server.log"), b"started\n", 0o644);
        agents_tests::write_file_making_parents(
            &home.join("Library/Logs/other.log"),
            b"kept\n",
            0o644,
        );
        let host_dir = temp.path().join("host");
        let state_dir = host_dir.join("launchd");
        fs::create_dir_all(&state_dir).unwrap();
        for (name, script) in [("launchctl", LAUNCHCTL), ("uname", UNAME)] {
            let path = host_dir.join(name);
            fs::write(&path, script).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let values = [
            ("uid", python_compat::os::current_uid().to_string()),
            ("label", LABEL.to_string()),
            ("home", home.to_string_lossy().into_owned()),
            ("pid", "4242".to_string()),
            ("secret", "sk-proj-never-echoed".to_string()),
        ];
        let values: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for name in [
            "print-running.txt",
            "print-not-found.stderr",
            "bootout-io-error.stderr",
            "bootout-no-such-process.stderr",
        ] {
            fs::write(state_dir.join(name), launchd_output(name, &values)).unwrap();
        }
        let bootout = match host.bootout {
            Bootout::Unloads { linger } => format!("linger {linger}"),
            Bootout::Ignored => "ignored".to_string(),
            Bootout::Refused => "refused".to_string(),
            Bootout::AlreadyGone => "gone".to_string(),
        };
        for (name, value) in [
            (
                "state",
                if host.loaded { "loaded" } else { "absent" }.to_string(),
            ),
            ("bootout", bootout),
            ("os-name", host.os_name.to_string()),
            ("uname-status", host.uname_status.to_string()),
            ("calls", String::new()),
        ] {
            let line = if value.is_empty() {
                value
            } else {
                value + "\n"
            };
            fs::write(state_dir.join(name), line).unwrap();
        }
        DarwinCase {
            temp,
            roots,
            host_dir,
        }
    }

    /// The directory every path of this case is under (`<BASE>` in outputs).
    pub(crate) fn base(&self) -> &Path {
        self.temp.path()
    }

    /// `HOME` and a `PATH` that finds the fake host's `uname` and
    /// `launchctl` first.
    pub(crate) fn env(&self) -> Vec<(String, OsString)> {
        let mut path = OsString::from(&self.host_dir);
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()));
        clean_env(&[
            ("HOME", self.roots.home.clone().into_os_string()),
            ("PATH", path),
        ])
    }

    /// Every `launchctl` call so far, one argument line each.
    pub(crate) fn launchctl_calls(&self) -> Vec<String> {
        let calls = fs::read_to_string(self.host_dir.join("launchd/calls")).unwrap();
        calls.lines().map(str::to_string).collect()
    }

    /// The agent's plist.
    pub(crate) fn plist(&self) -> PathBuf {
        self.roots
            .home
            .join("Library/LaunchAgents")
            .join(format!("{LABEL}.plist"))
    }

    /// The agent's log directory.
    pub(crate) fn logs(&self) -> PathBuf {
        self.roots.home.join("Library/Logs/AgentsServer")
    }

    /// The home's files by relative path (`<BASE>` in link targets).
    pub(crate) fn home_tree(&self) -> std::collections::BTreeMap<PathBuf, Entry> {
        snapshot_under(&self.roots.home, self.base())
    }
}

//! Everything doctor reads once and several concerns share: the install
//! root and what kind of installation it holds, the installed layout, the
//! state directory, the install lock's owner, the native services and the
//! worker's private status.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use agents_common::{
    entry_present, inspect_lock, installed_layout, normalize_path, owned_directory,
    read_status_unlocked, Error, ExecutionLayout, LockInspection, NativeServices, Platform,
    ServiceStates, WorkerControl, LAYOUT_NAME, TRANSACTION_NAME,
};
use python_compat::{
    json::{Json, JsonObject},
    path::absolute_path,
};

use super::concern::Waiter;
use super::process::Process;
use super::programs::{helper_words, Helper};

/// Programs that take the install lock: install.sh, the helpers (by their
/// binary or Python names) and the server (a handoff retry).
pub(super) const LOCK_TAKERS: &[&str] = &[
    "install.sh",
    "execution-manage",
    "execution_manage.py",
    "update-handoff",
    "update_handoff.py",
    "uninstall",
    "uninstall.sh",
    "execution_uninstall.py",
    "update-runner",
    "update_runner.py",
    "agent_server.py",
];
/// `execution-manage` (apply and recover own `.execution-transaction`).
pub(super) const MANAGE: &[&str] = &["execution-manage", "execution_manage.py"];
/// install.sh (owns `.activation-transaction`).
pub(super) const INSTALLER: &[&str] = &["install.sh"];
/// The uninstaller (owns `.execution-uninstall.json`).
pub(super) const UNINSTALLER: &[&str] = &[
    "uninstall",
    "uninstall.sh",
    "execution_uninstall.py",
    "execution_uninstall",
];
/// The server's update runner and the handoff helper (release a handoff).
pub(super) const HANDOFF_RELEASERS: &[&str] = &[
    "update-handoff",
    "update_handoff.py",
    "update-runner",
    "update_runner.py",
    "agent_server.py",
];

/// What the install root holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// The root does not exist.
    Missing,
    /// The root exists but cannot be used (not an owned directory, a
    /// symlink in its path, ...): every helper refuses it.
    Unusable(String),
    /// Nothing but (at most) the install lock.
    Empty,
    /// A split gateway/worker installation (`execution-layout.json`).
    Split,
    /// A legacy single-service installation (`current`, no layout).
    Legacy,
    /// No layout and no `current` yet, but an activation journal: a first
    /// installation is under way or was interrupted.
    Installing,
    /// Something is left, but neither a layout, `current` nor a journal.
    HalfRemoved(Vec<String>),
}

impl Kind {
    /// The `installation.kind` word.
    pub(super) fn word(&self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::Unusable(_) => "unusable",
            Kind::Empty => "empty",
            Kind::Split => "split",
            Kind::Legacy => "legacy",
            Kind::Installing => "installing",
            Kind::HalfRemoved(_) => "half-removed",
        }
    }
}

/// What doctor read, once.
pub(super) struct Context {
    /// The install root, absolute and normalised as the helpers normalise it.
    pub root: PathBuf,
    /// What it holds.
    pub kind: Kind,
    /// The installed layout, when `execution-layout.json` is valid.
    pub layout: Option<ExecutionLayout>,
    /// `installed_layout`'s refusal, when the manifest exists but is refused.
    pub layout_error: Option<Error>,
    /// The state directory holding `admin/server-update.json`, and where it
    /// came from (`option`, `layout`, `environment`, `home`).
    pub state_dir: Option<(PathBuf, &'static str)>,
    /// The service user's home (the layout's, else `$HOME`).
    pub home: Option<PathBuf>,
    /// The install lock as the next acquirer would judge it.
    pub lock: Result<Option<LockInspection>, Error>,
    /// The lock owner's process, when the lock names one.
    pub lock_owner: Option<Process>,
    /// The native worker and gateway jobs (of the layout, or of the legacy
    /// unit names under `home`).
    pub native: Option<Result<ServiceStates, Error>>,
    /// The worker's receipt and private status (a read), asked at most once
    /// and only when a concern needs it.
    worker: OnceCell<Option<Result<(JsonObject, JsonObject), Error>>>,
    /// The server's update status row, when the state directory has one.
    pub row: Option<JsonObject>,
    /// When doctor started.
    pub now: SystemTime,
    /// The installed release whose helpers doctor's commands run.
    pub release: Option<PathBuf>,
    /// The running doctor's own executable.
    pub doctor_exe: Option<PathBuf>,
}

impl Context {
    /// Reads everything; never fails (what cannot be read is recorded).
    pub(super) fn read(root: &Path, state_dir: Option<&Path>) -> Context {
        let now = SystemTime::now();
        let absolute = absolute_path(root);
        let (root, kind) = match normalize_path(&absolute) {
            Ok(root) => {
                let kind = kind_of(&root);
                (root, kind)
            }
            Err(error) => (absolute, Kind::Unusable(error.python_line())),
        };
        let usable = !matches!(kind, Kind::Missing | Kind::Unusable(_));
        let (layout, layout_error) = match usable && present(&root.join(LAYOUT_NAME)) {
            true => match installed_layout(&root) {
                Ok(layout) => (Some(layout), None),
                Err(error) => (None, Some(error)),
            },
            false => (None, None),
        };
        let home = layout
            .as_ref()
            .map(|layout| layout.home.clone())
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
        // Nothing installed: an uninstall keeps the state root it printed,
        // which nothing here names, so `~/.agentsdock` would be a guess.
        let installed = !matches!(kind, Kind::Missing | Kind::Empty);
        let state_dir = state_dir
            .map(|dir| (absolute_path(dir), "option"))
            .or_else(|| {
                layout
                    .as_ref()
                    .map(|layout| (layout.state_root.clone(), "layout"))
            })
            .or_else(|| {
                [
                    "AGENTSDOCK_STATE_DIR",
                    "AGENTS_SERVER_STATE_DIR",
                    "ZENITHBOT_AGENT_DIR",
                ]
                .iter()
                .find_map(|name| std::env::var_os(name).filter(|value| !value.is_empty()))
                .map(|dir| (absolute_path(dir), "environment"))
            })
            .or_else(|| {
                home.as_ref()
                    .filter(|_| installed)
                    .map(|home| (home.join(".agentsdock"), "home"))
            });
        let lock = if usable {
            inspect_lock(&root)
        } else {
            Ok(None)
        };
        let lock_owner = match &lock {
            Ok(Some(LockInspection {
                owner: Some(pid), ..
            })) => Some(Process::of(*pid)),
            _ => None,
        };
        let native = native_layout(layout.as_ref(), home.as_deref(), &root)
            .map(|native| NativeServices::new(&native).and_then(|services| services.snapshot()));
        let row = state_dir
            .as_ref()
            .map(|(dir, _)| dir.join("admin/server-update.json"))
            .filter(|path| present(path))
            .and_then(|path| read_status_unlocked(&path).ok());
        Context {
            root,
            kind,
            layout,
            layout_error,
            state_dir,
            home,
            lock,
            lock_owner,
            native,
            worker: OnceCell::new(),
            row,
            now,
            release: None,
            doctor_exe: std::env::current_exe().ok(),
        }
        .with_release()
    }

    /// Finds the installed release: the layout's worker release, else
    /// what `current` resolves to.
    fn with_release(mut self) -> Context {
        self.release = match &self.layout {
            Some(layout) => Some(layout.worker_release.clone()),
            None if self.root_has("current") => {
                std::fs::canonicalize(self.root.join("current")).ok()
            }
            None => None,
        };
        self
    }

    /// The words that run `helper` with `arguments` on this host.
    pub(super) fn helper_argv(&self, helper: Helper, arguments: &[&str]) -> Vec<String> {
        let mut words = helper_words(helper, self.release.as_deref(), self.doctor_exe.as_deref());
        words.extend(arguments.iter().map(|word| word.to_string()));
        words
    }

    /// The lock owner as a waiter: its PID, its program and since when it
    /// holds the install lock.
    pub(super) fn lock_waiter(&self) -> Option<Waiter> {
        let owner = self.lock_owner.as_ref()?;
        let since = match &self.lock {
            Ok(Some(inspection)) => Some(self.stamp(inspection.since)),
            _ => None,
        };
        Some(Waiter {
            pid: owner.pid,
            program: owner.program().unwrap_or_else(|| "?".to_string()),
            since,
        })
    }

    /// `%Y-%m-%dT%H:%M:%SZ` of a time.
    pub(super) fn stamp(&self, time: SystemTime) -> String {
        let seconds = time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64);
        agents_common::format_utc(seconds)
    }

    /// The live lock owner running one of `programs`, if any.
    pub(super) fn owner_running(&self, programs: &[&str]) -> Option<&Process> {
        self.lock_owner
            .as_ref()
            .filter(|owner| owner.alive && owner.runs_any(programs))
    }

    /// `root/<name>` as text.
    pub(super) fn root_path(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }

    /// Whether `root/<name>` exists (even as a dangling symlink).
    pub(super) fn root_has(&self, name: &str) -> bool {
        !matches!(self.kind, Kind::Missing | Kind::Unusable(_)) && present(&self.root.join(name))
    }

    /// Seconds since `path` last changed (not following a symlink).
    pub(super) fn age_of(&self, path: &Path) -> Option<u64> {
        let modified = std::fs::symlink_metadata(path).ok()?.modified().ok()?;
        Some(self.seconds_since(modified))
    }

    /// Whole seconds from `then` to doctor's start (0 for the future).
    pub(super) fn seconds_since(&self, then: SystemTime) -> u64 {
        self.now
            .duration_since(then)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0)
    }

    /// Seconds since a status timestamp (`%Y-%m-%dT%H:%M:%SZ`).
    pub(super) fn seconds_since_stamp(&self, stamp: &str) -> Option<u64> {
        let seconds = parse_utc(stamp)?;
        let then = UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(seconds).ok()?);
        Some(self.seconds_since(then))
    }

    /// The row's text field (`""` when absent or not text).
    pub(super) fn row_text(&self, key: &str) -> String {
        self.row
            .as_ref()
            .and_then(|row| row.get(key))
            .map(python_compat::str_or_empty)
            .unwrap_or_default()
    }

    /// The running worker's receipt and private status (`None` when no
    /// split worker runs): one authenticated status read, the first time a
    /// concern asks.
    pub(super) fn worker(&self) -> Option<&Result<(JsonObject, JsonObject), Error>> {
        self.worker
            .get_or_init(|| {
                let runs = matches!(&self.native, Some(Ok(states))
                    if states.worker.state == agents_common::ServiceRunState::Running);
                match (&self.layout, runs) {
                    (Some(layout), true) => Some(WorkerControl::new().status(layout)),
                    _ => None,
                }
            })
            .as_ref()
    }

    /// The lease the running worker reports (`None` when unknown).
    pub(super) fn worker_lease(&self) -> Option<&Json> {
        match self.worker() {
            Some(Ok((_record, status))) => status.get("lease"),
            _ => None,
        }
    }

    /// The worker's lease operation, when it holds one.
    pub(super) fn lease_operation(&self) -> Option<&str> {
        self.worker_lease()?.get("operation_id")?.as_str()
    }
}

/// `exists() or is_symlink()`, treating errors as absent.
pub(super) fn present(path: &Path) -> bool {
    entry_present(path).unwrap_or(true)
}

fn kind_of(root: &Path) -> Kind {
    match std::fs::symlink_metadata(root) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Kind::Missing,
        Err(error) => return Kind::Unusable(Error::from_io_path(&error, root).python_line()),
        Ok(_) => {}
    }
    if let Err(error) = owned_directory(root, false) {
        return Kind::Unusable(error.python_line());
    }
    if present(&root.join(LAYOUT_NAME)) {
        return Kind::Split;
    }
    if present(&root.join("current")) {
        return Kind::Legacy;
    }
    if present(&root.join(TRANSACTION_NAME)) || present(&root.join(".activation-transaction")) {
        return Kind::Installing;
    }
    let mut left: Vec<String> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name != ".install-lock")
                .collect()
        })
        .unwrap_or_default();
    left.sort();
    if left.is_empty() {
        Kind::Empty
    } else {
        Kind::HalfRemoved(left)
    }
}

/// The layout whose unit names the native snapshot observes: the installed
/// one, or (without one) the same unit names under `home` on this host's
/// platform, which is where a legacy service or leftover units live.
fn native_layout(
    layout: Option<&ExecutionLayout>,
    home: Option<&Path>,
    root: &Path,
) -> Option<ExecutionLayout> {
    if let Some(layout) = layout {
        return Some(layout.clone());
    }
    let home = home?;
    let platform = if cfg!(target_os = "macos") {
        Platform::Darwin
    } else {
        Platform::Linux
    };
    Some(ExecutionLayout {
        install_root: root.to_path_buf(),
        config_root: root.to_path_buf(),
        state_root: root.to_path_buf(),
        home: home.to_path_buf(),
        platform: platform.into(),
        worker_release: root.join("current"),
        gateway_release: root.join("current"),
        bind: "127.0.0.1".to_string(),
        port: Json::Null,
        environment: Json::Object(JsonObject::new()),
    })
}

/// `%Y-%m-%dT%H:%M:%SZ` (the status rows' `utc_now()`) as Unix seconds.
pub(super) fn parse_utc(stamp: &str) -> Option<i64> {
    let bytes = stamp.as_bytes();
    let shaped = bytes.len() == 20
        && bytes[19] == b'Z'
        && bytes[10] == b'T'
        && [4, 7].iter().all(|&index| bytes[index] == b'-')
        && [13, 16].iter().all(|&index| bytes[index] == b':');
    if !shaped {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> { stamp.get(range)?.parse().ok() };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_timestamps_parse_back() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(parse_utc("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(parse_utc("2099-12-31T23:59:59Z"), Some(4_102_444_799));
        assert_eq!(parse_utc("2023-11-14 22:13:20Z"), None);
        assert_eq!(parse_utc("2023-13-14T22:13:20Z"), None);
        assert_eq!(parse_utc(""), None);
    }
}

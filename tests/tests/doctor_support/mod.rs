//! `execution-manage doctor` as its black-box tests run it: one `--json`
//! report with accessors for its concerns, the proof that a doctor run
//! changed nothing of the installation, and a suggested command run exactly
//! as printed.

#![allow(dead_code)] // each test file uses a different part

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use agents_tests::profile_dir;
use python_compat::json::{parse_json, Json};

use crate::execution_manage_support::{Outcome, Site};

/// The concerns, in report order.
pub(crate) const CONCERNS: [&str; 8] = [
    "install_lock",
    "activation_journal",
    "execution_transaction",
    "uninstall_intent",
    "update_preparations",
    "update_status",
    "services",
    "layout",
];

/// One `doctor --json` run.
pub(crate) struct Doctor {
    pub outcome: Outcome,
    pub report: Json,
}

impl Doctor {
    pub(crate) fn concern(&self, key: &str) -> &Json {
        self.report
            .get("concerns")
            .and_then(|concerns| concerns.get(key))
            .unwrap_or_else(|| panic!("no concern {key}: {}", self.outcome.stdout))
    }

    pub(crate) fn status(&self, key: &str) -> String {
        text(self.concern(key).get("status"))
    }

    pub(crate) fn action(&self, key: &str) -> &Json {
        self.concern(key).get("action").unwrap_or(&Json::Null)
    }

    pub(crate) fn action_kind(&self, key: &str) -> String {
        text(self.action(key).get("kind"))
    }

    pub(crate) fn command(&self, key: &str) -> String {
        text(self.action(key).get("command"))
    }

    pub(crate) fn found(&self, key: &str, field: &str) -> Json {
        self.concern(key)
            .get("found")
            .and_then(|found| found.get(field))
            .cloned()
            .unwrap_or(Json::Null)
    }

    pub(crate) fn kind(&self) -> String {
        text(
            self.report
                .get("installation")
                .and_then(|installation| installation.get("kind")),
        )
    }

    /// `concern status` for every concern, for readable failures.
    pub(crate) fn statuses(&self) -> Vec<String> {
        CONCERNS
            .iter()
            .map(|key| format!("{key} {}", self.status(key)))
            .collect()
    }

    /// The concerns that are neither healthy nor absent, with their status
    /// words, in report order; the report names exactly [`CONCERNS`].
    #[track_caller]
    pub(crate) fn attention(&self) -> Vec<(String, String)> {
        let mut named: Vec<&str> = self
            .report
            .get("concerns")
            .and_then(Json::as_object)
            .map(|concerns| concerns.iter().map(|(key, _)| key.as_str()).collect())
            .unwrap_or_default();
        named.sort_unstable();
        let mut known = CONCERNS;
        known.sort_unstable();
        assert_eq!(named, known, "{}", self.outcome.stdout);
        CONCERNS
            .iter()
            .map(|key| (key.to_string(), self.status(key)))
            .filter(|(_, status)| status != "healthy" && status != "absent")
            .collect()
    }

    /// Exit 0 and every concern healthy or absent, with no action.
    #[track_caller]
    pub(crate) fn assert_healthy(&self) {
        assert_eq!(
            self.outcome.code,
            Some(0),
            "{:?}\n{}",
            self.statuses(),
            self.outcome.stdout
        );
        assert_eq!(self.report.get("healthy"), Some(&Json::Bool(true)));
        for key in CONCERNS {
            assert!(
                ["healthy", "absent"].contains(&self.status(key).as_str()),
                "{key}: {}",
                self.outcome.stdout
            );
            assert_eq!(self.action(key), &Json::Null, "{key}");
        }
    }

    /// Exactly these concerns not healthy or absent, with these status
    /// words; exit 1 and not healthy unless there are none.
    #[track_caller]
    pub(crate) fn assert_attention(&self, expected: &[(&str, &str)]) {
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(key, status)| (key.to_string(), status.to_string()))
            .collect();
        assert_eq!(self.attention(), expected, "{}", self.outcome.stdout);
        assert_eq!(
            self.outcome.code,
            Some(if expected.is_empty() { 0 } else { 1 }),
            "{}",
            self.outcome.stdout
        );
        assert_eq!(
            self.report.get("healthy"),
            Some(&Json::Bool(expected.is_empty()))
        );
    }
}

/// The text of a JSON string, empty for anything else.
pub(crate) fn text(value: Option<&Json>) -> String {
    value.and_then(Json::as_str).unwrap_or_default().to_string()
}

/// `doctor --root <root> [--state-dir <state>] --json` in the sandbox.
fn run_doctor(site: &Site, root: &Path, state_dir: Option<&Path>) -> Doctor {
    let mut arguments: Vec<&std::ffi::OsStr> =
        vec!["doctor".as_ref(), "--root".as_ref(), root.as_os_str()];
    if let Some(state_dir) = state_dir {
        arguments.extend(["--state-dir".as_ref(), state_dir.as_os_str()]);
    }
    arguments.push("--json".as_ref());
    let outcome = site.manage(&arguments);
    assert!(outcome.stderr.is_empty(), "{outcome:?}");
    let report = parse_json(outcome.stdout.as_bytes())
        .unwrap_or_else(|err| panic!("doctor printed no JSON ({err}): {outcome:?}"));
    Doctor { outcome, report }
}

/// doctor on `root` with the site's state root named.
pub(crate) fn doctor_at(site: &Site, root: &Path) -> Doctor {
    run_doctor(site, root, Some(&site.installation.state_root))
}

/// doctor on the site's installation, its state root named, proven not to
/// change anything.
pub(crate) fn doctor(site: &Site) -> Doctor {
    unchanged(site, || doctor_at(site, &site.installation.install_root))
}

/// doctor on the site's installation finding the state root itself (as
/// the server's support page runs it), proven not to change anything.
pub(crate) fn doctor_finding_state(site: &Site) -> Doctor {
    unchanged(site, || {
        run_doctor(site, &site.installation.install_root, None)
    })
}

/// Runs `run`, requiring every byte, mode, mtime and inode of the
/// installation to be as it was.
fn unchanged(site: &Site, run: impl FnOnce() -> Doctor) -> Doctor {
    let before = installation_tree(site);
    let report = run();
    assert_eq!(
        changes(&before, &installation_tree(site)),
        Vec::<String>::new(),
        "doctor changed the installation"
    );
    report
}

/// One entry as found, without following links: kind, mode, mtime and
/// content (a file's bytes, a link's target).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Directory(u32, i64, i64),
    File(u32, i64, i64, u64, Vec<u8>),
    Link(PathBuf, i64, i64),
    Other,
}

fn walk(root: &Path, relative: &Path, entries: &mut BTreeMap<PathBuf, Entry>) {
    let path = root.join(relative);
    let Ok(meta) = fs::symlink_metadata(&path) else {
        return;
    };
    let (mode, seconds, nanos) = (meta.mode() & 0o7777, meta.mtime(), meta.mtime_nsec());
    let entry = if meta.file_type().is_symlink() {
        Entry::Link(fs::read_link(&path).unwrap(), seconds, nanos)
    } else if meta.is_dir() {
        let mut names: Vec<OsString> = fs::read_dir(&path)
            .map(|items| {
                items
                    .filter_map(|item| item.ok())
                    .map(|item| item.file_name())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        for name in names {
            walk(root, &relative.join(name), entries);
        }
        Entry::Directory(mode, seconds, nanos)
    } else if meta.is_file() {
        Entry::File(
            mode,
            seconds,
            nanos,
            meta.ino(),
            fs::read(&path).unwrap_or_default(),
        )
    } else {
        Entry::Other
    };
    entries.insert(relative.to_path_buf(), entry);
}

/// Everything of the installation: install and config roots, the unit
/// directory and the state root (except the test worker's own request
/// logs and switches, which are test instrumentation).
fn installation_tree(site: &Site) -> BTreeMap<PathBuf, Entry> {
    let installation = &site.installation;
    let mut tree = BTreeMap::new();
    for (name, root) in [
        ("install", installation.install_root.clone()),
        ("config", installation.config_root.clone()),
        ("units", site.sandbox.unit_dir()),
        ("state", installation.state_root.clone()),
    ] {
        let mut entries = BTreeMap::new();
        walk(&root, Path::new(""), &mut entries);
        for (path, entry) in entries {
            if name == "state" && path.starts_with("test-worker") {
                continue;
            }
            tree.insert(Path::new(name).join(path), entry);
        }
    }
    tree
}

fn changes(before: &BTreeMap<PathBuf, Entry>, after: &BTreeMap<PathBuf, Entry>) -> Vec<String> {
    let mut found = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => found.push(format!("- {}", path.display())),
            Some(now) if now != entry => found.push(format!("~ {}", path.display())),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|path| !before.contains_key(*path)) {
        found.push(format!("+ {}", path.display()));
    }
    found
}

/// Runs a suggested command line exactly as printed, with `sh -c`, in the
/// sandbox's environment, the built helpers first on `PATH` (where a
/// migrated release puts them on a real host) and the agent token a
/// support engineer takes from the config directory's env file.
pub(crate) fn run_suggested(site: &Site, command: &str) -> Outcome {
    let path = format!(
        "{}:{}",
        profile_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Outcome::from(
        site.sandbox
            .command("sh")
            .args(["-c", command])
            .env("PATH", path)
            .env("AGENTSDOCK_AGENT_TOKEN", site.installation.agent_token())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("sh runs"),
    )
}

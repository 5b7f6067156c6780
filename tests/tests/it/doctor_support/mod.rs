//! `execution-manage doctor` as its black-box tests run it: one `--json`
//! report with accessors for its concerns and its plan, the proof that a
//! doctor run changed nothing of the installation, and the plan followed
//! mechanically, each step run exactly as printed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

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
    /// words; exit 0 when there are none, 1 when one is invalid or none is
    /// in progress (a step to take), 3 when the plan only waits for an owner
    /// in progress.
    #[track_caller]
    pub(crate) fn assert_attention(&self, expected: &[(&str, &str)]) {
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(key, status)| (key.to_string(), status.to_string()))
            .collect();
        assert_eq!(self.attention(), expected, "{}", self.outcome.stdout);
        let has = |word: &str| expected.iter().any(|(_, status)| status == word);
        let code = match () {
            _ if expected.is_empty() => 0,
            _ if has("invalid") => 1,
            _ if has("in progress") => 3,
            _ => 1,
        };
        assert_eq!(self.outcome.code, Some(code), "{}", self.outcome.stdout);
        assert_eq!(self.report.get("exit_status"), Some(&Json::from(code)));
        assert_eq!(
            self.report.get("healthy"),
            Some(&Json::Bool(expected.is_empty()))
        );
    }
}

impl Doctor {
    /// The plan's steps.
    pub(crate) fn plan(&self) -> Vec<Json> {
        self.report
            .get("plan")
            .and_then(Json::as_array)
            .cloned()
            .unwrap_or_else(|| panic!("no plan: {}", self.outcome.stdout))
    }

    /// Step `number` (from 1).
    #[track_caller]
    pub(crate) fn step(&self, number: usize) -> Json {
        let plan = self.plan();
        let step = plan
            .get(number - 1)
            .unwrap_or_else(|| panic!("no step {number}: {}", self.outcome.stdout))
            .clone();
        assert_eq!(step.get("step"), Some(&Json::from(number)));
        step
    }

    /// The plan has exactly these steps: (kind, resolves).
    #[track_caller]
    pub(crate) fn assert_plan(&self, expected: &[(&str, &[&str])]) {
        let found: Vec<(String, Vec<String>)> = self
            .plan()
            .iter()
            .map(|step| {
                let resolves = step
                    .get("resolves")
                    .and_then(Json::as_array)
                    .map(|ids| ids.iter().map(|id| text(Some(id))).collect())
                    .unwrap_or_default();
                (text(step.get("kind")), resolves)
            })
            .collect();
        let expected: Vec<(String, Vec<String>)> = expected
            .iter()
            .map(|(kind, ids)| {
                (
                    kind.to_string(),
                    ids.iter().map(|id| id.to_string()).collect(),
                )
            })
            .collect();
        assert_eq!(found, expected, "{}", self.outcome.stdout);
    }

    /// The plan stops at once: one contact-engineering step with the
    /// refusal `refusal`, and no concern offers a command of its own.
    #[track_caller]
    pub(crate) fn assert_stops(&self, refusal: &str) {
        let plan = self.plan();
        assert_eq!(plan.len(), 1, "{}", self.outcome.stdout);
        assert_eq!(text(plan[0].get("kind")), "contact-engineering");
        assert_eq!(text(plan[0].get("refusal")), refusal);
        assert_eq!(plan[0].get("command"), Some(&Json::Null));
        for key in CONCERNS {
            assert_eq!(
                self.action(key).get("command").unwrap_or(&Json::Null),
                &Json::Null,
                "{key} offers a command: {}",
                self.outcome.stdout
            );
        }
        assert_eq!(self.outcome.code, Some(1));
    }
}

/// Nothing to wait for after a command.
pub(crate) fn at_once(_: &Site) {}

/// What following a plan did: each step's command as printed and how it
/// ended, and doctor's last report.
pub(crate) struct Followed {
    pub commands: Vec<(String, Outcome)>,
    pub last: Doctor,
}

/// Follows doctor's plan mechanically, as support staff would: runs step 1
/// exactly as printed (`sh -c`, the helpers NOT on `PATH`), runs doctor
/// again, and repeats until it exits 0, within `steps` commands. A wait
/// (a service manager still settling after a command) is waited out; an
/// instruction or a contact-engineering step cannot be followed and fails.
///
/// `settle` runs after each command, before doctor runs again: what the
/// command started (a restarted worker writing its receipt) settles first,
/// so doctor's own unchanged-check sees only doctor.
#[track_caller]
pub(crate) fn follow_plan(
    site: &Site,
    run: fn(&Site) -> Doctor,
    settle: &dyn Fn(&Site),
    steps: usize,
) -> Followed {
    let mut commands = Vec::new();
    let mut waits = 0;
    loop {
        let report = run(site);
        if report.outcome.code == Some(0) {
            report.assert_healthy();
            assert!(report.plan().is_empty(), "{}", report.outcome.stdout);
            return Followed {
                commands,
                last: report,
            };
        }
        let step = report.step(1);
        match text(step.get("kind")).as_str() {
            "command" => {
                assert!(
                    commands.len() < steps,
                    "not healthy after {steps} steps ({commands:?}): {}",
                    report.outcome.stdout
                );
                let command = text(step.get("command"));
                // A tool runs the step's argv, without a shell.
                let argv: Vec<String> = step
                    .get("argv")
                    .and_then(Json::as_array)
                    .unwrap_or_else(|| panic!("a command step without argv: {command}"))
                    .iter()
                    .map(|word| text(Some(word)))
                    .collect();
                let outcome = run_argv(site, &argv);
                assert_eq!(outcome.code, Some(0), "{command}: {outcome:?}");
                commands.push((command, outcome));
                settle(site);
            }
            "wait" if waits < 30 => {
                waits += 1;
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            other => panic!(
                "step 1 is {other}, which cannot be followed mechanically: {}",
                report.outcome.stdout
            ),
        }
    }
}

/// A plan step's argv run as a tool runs it: no shell, the sandbox's
/// environment and the agent token a `$AGENTSDOCK_AGENT_TOKEN` line reads.
pub(crate) fn run_argv(site: &Site, argv: &[String]) -> Outcome {
    Outcome::from(
        site.sandbox
            .command(&argv[0])
            .args(&argv[1..])
            .env("AGENTSDOCK_AGENT_TOKEN", site.installation.agent_token())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("the step's program runs"),
    )
}

/// The path doctor prints for a helper it finds beside itself (the
/// fixture's releases carry no helpers): the built binary, canonical as
/// the running doctor sees its own executable.
pub(crate) fn helper(name: &str) -> String {
    fs::canonicalize(agents_tests::binary_path(name))
        .unwrap()
        .display()
        .to_string()
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

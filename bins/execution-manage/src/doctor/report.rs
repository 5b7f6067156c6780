//! The report doctor prints: one [`Concern`] per file or process it judges,
//! each with a status word, what was found and, unless it is healthy, the
//! action that resolves it; rendered as an aligned human summary with
//! details, or as one JSON document with the same content.

use std::fmt::Write as _;
use std::io::Write;

use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object,
};

use super::plan::{Plan, Step, StepKind};

/// How one concern stands. The order is the severity a summary reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Nothing is there, and nothing needs to be.
    Absent,
    /// There, and exactly what its owning helper accepts.
    Healthy,
    /// Owned by a process that is still running: wait for it.
    InProgress,
    /// Left behind by an owner that is gone: the action resolves it.
    Stuck,
    /// Refused by the helper that owns it: no helper may resolve it.
    Invalid,
}

impl Status {
    /// The word both outputs use.
    pub fn word(self) -> &'static str {
        match self {
            Status::Absent => "absent",
            Status::Healthy => "healthy",
            Status::InProgress => "in progress",
            Status::Stuck => "stuck",
            Status::Invalid => "invalid",
        }
    }

    /// Healthy or absent: nothing to do.
    pub fn is_fine(self) -> bool {
        matches!(self, Status::Absent | Status::Healthy)
    }

    /// ANSI colour of the word on a terminal.
    fn colour(self) -> &'static str {
        match self {
            Status::Absent | Status::Healthy => "32",
            Status::InProgress => "33",
            Status::Stuck | Status::Invalid => "31;1",
        }
    }
}

/// The concerns doctor judges: a closed set, each with its JSON key and
/// human title.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConcernId {
    /// `.install-lock`.
    InstallLock,
    /// install.sh's `.activation-transaction`.
    ActivationJournal,
    /// An explicit activation's `.execution-transaction`.
    ExecutionTransaction,
    /// The split uninstall's `.execution-uninstall.json`.
    UninstallIntent,
    /// `.update-preparations/` and its handoffs.
    UpdatePreparations,
    /// The server's `admin/server-update.json` and its runner.
    UpdateStatus,
    /// The native worker and gateway against their receipts.
    Services,
    /// The installed layout, `current` and the unit files.
    Layout,
}

impl ConcernId {
    /// Every concern, in the order the summary lists them.
    pub const ALL: [ConcernId; 8] = [
        ConcernId::InstallLock,
        ConcernId::ActivationJournal,
        ConcernId::ExecutionTransaction,
        ConcernId::UninstallIntent,
        ConcernId::UpdatePreparations,
        ConcernId::UpdateStatus,
        ConcernId::Services,
        ConcernId::Layout,
    ];

    /// The order the plan resolves them in: an owner before what it owns.
    /// The journals and the intent own the lock, the services and the
    /// files while they are pending; a handoff is released only once no
    /// journal owns recovery; the update row follows its handoff; a lock
    /// no journal reaps is removed before services are started.
    pub const DEPENDENCY_ORDER: [ConcernId; 8] = [
        ConcernId::ActivationJournal,
        ConcernId::ExecutionTransaction,
        ConcernId::UninstallIntent,
        ConcernId::UpdatePreparations,
        ConcernId::UpdateStatus,
        ConcernId::InstallLock,
        ConcernId::Services,
        ConcernId::Layout,
    ];

    /// The JSON keys (and `--concern` names), in [`ConcernId::ALL`]'s order.
    pub const KEYS: [&'static str; 8] = [
        "install_lock",
        "activation_journal",
        "execution_transaction",
        "uninstall_intent",
        "update_preparations",
        "update_status",
        "services",
        "layout",
    ];

    /// The JSON key and `--concern` name.
    pub fn key(self) -> &'static str {
        Self::KEYS[self as usize]
    }

    /// The human title.
    pub fn title(self) -> &'static str {
        match self {
            ConcernId::InstallLock => "install lock",
            ConcernId::ActivationJournal => "activation journal",
            ConcernId::ExecutionTransaction => "execution transaction",
            ConcernId::UninstallIntent => "uninstall intent",
            ConcernId::UpdatePreparations => "update preparations",
            ConcernId::UpdateStatus => "update status",
            ConcernId::Services => "services",
            ConcernId::Layout => "layout",
        }
    }

    /// The concern a key names.
    pub fn from_key(key: &str) -> Option<ConcernId> {
        ConcernId::ALL.into_iter().find(|id| id.key() == key)
    }
}

/// What resolves a concern that is not healthy, as its own judgement
/// found it (the plan decides which of these are offered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run this exact command line; `argv` are its words when it is one
    /// program's (none for a shell line with `&&` or `$VARIABLE`); `text`
    /// says what it does.
    Command {
        /// The line, as printed.
        command: String,
        /// Its words, when it is one program's.
        argv: Option<Vec<String>>,
        /// What it does.
        text: String,
    },
    /// The owner still runs: wait for it, then run doctor again.
    Wait(String),
    /// What to do when no exact command line can be known here (install.sh's
    /// own arguments, the server's settings).
    Instruction(String),
    /// No helper may resolve it: the refusal the owning helper prints.
    ContactEngineering(String),
}

impl Action {
    /// A command of one program: its words, quoted as `shlex.quote` does.
    pub fn run(argv: Vec<String>, text: impl Into<String>) -> Action {
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        Action::Command {
            command: command_line(&words),
            argv: Some(argv),
            text: text.into(),
        }
    }

    /// A shell line (`sh -c` runs it as printed).
    pub fn shell(command: String, text: impl Into<String>) -> Action {
        Action::Command {
            command,
            argv: None,
            text: text.into(),
        }
    }

    /// The command line, when the action is one.
    pub fn command(&self) -> Option<&str> {
        match self {
            Action::Command { command, .. } => Some(command),
            _ => None,
        }
    }
}

/// The process a concern in progress waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Its PID.
    pub pid: u32,
    /// The program its command line runs (`execution_manage.py`,
    /// `install.sh`, `update-runner`, ...).
    pub program: String,
    /// Since when it holds what the concern judges (UTC stamp), if known.
    pub since: Option<String>,
}

/// One judged concern.
#[derive(Debug, Clone)]
pub struct Concern {
    /// Which concern.
    pub id: ConcernId,
    /// The file or directory judged.
    pub path: Option<String>,
    /// The verdict.
    pub status: Status,
    /// One line for the summary.
    pub summary: String,
    /// What was found, with the concern's fixed keys (`null` when unknown).
    pub found: JsonObject,
    /// The owning helper's refusal, when it refuses.
    pub error: Option<String>,
    /// What resolves it on its own (never for healthy or absent, none when
    /// another concern's resolution resolves it).
    pub action: Option<Action>,
    /// The concern whose resolution resolves this one too (a journal owns
    /// the lock, the services and the files while it is pending).
    pub resolved_by: Option<ConcernId>,
    /// The process it waits for, while in progress.
    pub waits_for: Option<Waiter>,
}

impl Concern {
    /// A concern with nothing found yet.
    pub fn new(id: ConcernId) -> Concern {
        Concern {
            id,
            path: None,
            status: Status::Absent,
            summary: String::new(),
            found: JsonObject::new(),
            error: None,
            action: None,
            resolved_by: None,
            waits_for: None,
        }
    }

    fn to_json(&self, plan: &Plan) -> Json {
        Json::Object(json_object! {
            "status" => self.status.word(),
            "summary" => self.summary.as_str(),
            "path" => self.path.as_deref(),
            "found" => self.found.clone(),
            "error" => self.error.as_deref(),
            "action" => plan.concern_action_json(self),
        })
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    /// `installation`: root, kind, state directory, ...
    pub installation: JsonObject,
    /// The installation line of the human output.
    pub headline: String,
    /// Every concern reported, in display order.
    pub concerns: Vec<Concern>,
    /// The plan over those concerns.
    pub plan: Plan,
}

impl Report {
    /// The report of `concerns` with the plan made over all of them,
    /// showing only `focus` when one concern was asked for.
    pub fn new(
        installation: JsonObject,
        headline: String,
        concerns: Vec<Concern>,
        focus: Option<ConcernId>,
    ) -> Report {
        let plan = Plan::of(&concerns);
        match focus {
            None => Report {
                installation,
                headline,
                concerns,
                plan,
            },
            Some(id) => Report {
                installation,
                headline,
                plan: plan.restricted_to(&[id]),
                concerns: concerns.into_iter().filter(|c| c.id == id).collect(),
            },
        }
    }

    /// Whether every concern is healthy or absent (exit status 0).
    pub fn healthy(&self) -> bool {
        self.concerns.iter().all(|concern| concern.status.is_fine())
    }

    /// The exit status: 0 healthy, 1 a step to take, 3 only waiting.
    pub fn exit_status(&self) -> u8 {
        match self.healthy() {
            true => 0,
            false => self.plan.exit_status().max(1),
        }
    }

    /// The `--json` document (sorted keys, two-space indent).
    pub fn to_json(&self) -> Vec<u8> {
        let mut concerns = JsonObject::new();
        for concern in &self.concerns {
            concerns.insert(concern.id.key(), concern.to_json(&self.plan));
        }
        let steps: Vec<Json> = self.plan.steps.iter().map(Step::to_json).collect();
        encode_indented(&Json::Object(json_object! {
            "format" => 2,
            "healthy" => self.healthy(),
            "exit_status" => u32::from(self.exit_status()),
            "installation" => self.installation.clone(),
            "concerns" => concerns,
            "plan" => steps,
        }))
    }

    /// The human report: the summary (one aligned line per concern), the
    /// plan, then the details of every concern that needs attention.
    pub fn to_text(&self, colour: bool) -> String {
        let paint = |status: Status| {
            let word = status.word();
            let padded = format!("{word:<12}");
            if colour {
                format!(
                    "\x1b[{}m{word}\x1b[0m{}",
                    status.colour(),
                    &padded[word.len()..]
                )
            } else {
                padded
            }
        };
        let width = self
            .concerns
            .iter()
            .map(|concern| concern.id.title().len())
            .max()
            .unwrap_or(0);
        let mut text = String::new();
        text.push_str(&self.headline);
        text.push_str("\n\n");
        for concern in &self.concerns {
            let line = format!(
                "  {:<width$}  {}{}",
                concern.id.title(),
                paint(concern.status),
                concern.summary
            );
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text.push_str(&plan_text(&self.plan));
        let attention: Vec<&Concern> = self
            .concerns
            .iter()
            .filter(|concern| !concern.status.is_fine())
            .collect();
        for concern in &attention {
            text.push('\n');
            text.push_str(&format!(
                "{}: {}\n",
                concern.id.title(),
                paint(concern.status).trim_end()
            ));
            text.push_str(&details(concern, &self.plan));
        }
        text.push('\n');
        text.push_str(&match attention.len() {
            0 => format!("All {} concerns are healthy.\n", self.concerns.len()),
            count => format!(
                "{count} of {} concerns need attention.\n",
                self.concerns.len()
            ),
        });
        text
    }

    /// Prints the chosen output on stdout.
    pub fn print(&self, json: bool) -> std::io::Result<()> {
        use std::io::IsTerminal;
        let mut stdout = std::io::stdout().lock();
        if json {
            stdout.write_all(&self.to_json())?;
        } else {
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            stdout.write_all(self.to_text(colour).as_bytes())?;
        }
        stdout.flush()
    }
}

/// The numbered plan: each step's command (or wait, instruction, stop),
/// the concerns it resolves and what it does.
fn plan_text(plan: &Plan) -> String {
    if plan.steps.is_empty() {
        return String::new();
    }
    let mut text = String::from(match plan.exit_status() {
        3 => "\nPlan (nothing to run while an owner runs):\n",
        _ if plan.steps.len() == 1 => "\nPlan:\n",
        _ => "\nPlan (in order; run doctor again after each step):\n",
    });
    for step in &plan.steps {
        let indent = " ".repeat(format!("  {}. ", step.number).len());
        let _ = writeln!(text, "  {}. {}", step.number, step.headline());
        let titles: Vec<&str> = step.resolves.iter().map(|id| id.title()).collect();
        let verb = match step.kind {
            StepKind::ContactEngineering { .. } => "about",
            StepKind::Wait { .. } => "for",
            _ => "resolves",
        };
        let _ = writeln!(text, "{indent}{verb}: {}", titles.join(", "));
        let note = match &step.kind {
            StepKind::Instruction => None,
            _ => Some(&step.text).filter(|note| !note.is_empty()),
        };
        if let Some(note) = note {
            let _ = writeln!(text, "{indent}{note}");
        }
    }
    text
}

/// The detail lines of one concern: path, everything found, the refusal
/// and its place in the plan, aligned.
fn details(concern: &Concern, plan: &Plan) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    if let Some(path) = &concern.path {
        rows.push(("path".to_string(), path.clone()));
    }
    for (key, value) in concern.found.iter() {
        if value.is_null() {
            continue;
        }
        let text = match value {
            Json::Str(text) => text.clone(),
            other => python_compat::json::encode_line(other, false),
        };
        rows.push((key.replace('_', " "), text));
    }
    if let Some(error) = &concern.error {
        rows.push(("refused with".to_string(), error.clone()));
    }
    if let Some(line) = plan.role_line(concern.id) {
        rows.push(("plan".to_string(), line));
    }
    let width = rows.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (key, value) in &rows {
        let _ = writeln!(text, "  {key:<width$}  {value}");
    }
    text
}

/// `shlex.quote`: a word the shell reads back unchanged.
pub(super) fn quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./-_".contains(&b));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\"'\"'"))
    }
}

/// A command line of quoted words.
pub(super) fn command_line(words: &[&str]) -> String {
    words
        .iter()
        .map(|word| quote(word))
        .collect::<Vec<_>>()
        .join(" ")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_as_shlex_quotes_them() {
        assert_eq!(quote("/a/b-c_d.json"), "/a/b-c_d.json");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\"'\"'s'");
        assert_eq!(
            command_line(&["execution-manage", "recover", "--root", "/x y"]),
            "execution-manage recover --root '/x y'"
        );
    }

    fn report(statuses: &[Status]) -> Report {
        let concerns = statuses
            .iter()
            .enumerate()
            .map(|(index, status)| {
                let mut concern = Concern::new([ConcernId::InstallLock, ConcernId::Layout][index]);
                concern.status = *status;
                concern.summary = format!("summary {index}");
                if *status == Status::Stuck {
                    concern.action = Some(Action::run(
                        ["/x/execution-manage", "recover", "--root", "/r"]
                            .map(String::from)
                            .to_vec(),
                        "finishes it",
                    ));
                } else if *status == Status::Invalid {
                    concern.action = Some(Action::ContactEngineering("ValueError: bad".into()));
                    concern.error = Some("ValueError: bad".into());
                }
                concern
            })
            .collect();
        Report::new(
            JsonObject::new(),
            "execution-manage doctor: split installation at /r".to_string(),
            concerns,
            None,
        )
    }

    #[test]
    fn the_summary_is_aligned_then_the_plan_then_details() {
        let text = report(&[Status::Stuck, Status::Healthy]).to_text(false);
        assert_eq!(
            text,
            "execution-manage doctor: split installation at /r\n\n\
             \x20 install lock  stuck       summary 0\n\
             \x20 layout        healthy     summary 1\n\
             \nPlan:\n\
             \x20 1. /x/execution-manage recover --root /r\n\
             \x20    resolves: install lock\n\
             \x20    finishes it\n\
             \ninstall lock: stuck\n\
             \x20 plan  step 1\n\
             \n1 of 2 concerns need attention.\n"
        );
        let healthy = report(&[Status::Healthy, Status::Absent]).to_text(false);
        assert!(healthy.ends_with("summary 1\n\nAll 2 concerns are healthy.\n"));
        assert!(!healthy.contains("Plan"));
    }

    #[test]
    fn a_refusal_stops_the_plan() {
        let text = report(&[Status::Invalid, Status::Healthy]).to_text(false);
        assert!(text.contains(
            "\nPlan:\n  1. stop here and contact engineering with: ValueError: bad\n     about: \
             install lock\n"
        ));
        assert!(text.contains("\n  refused with  ValueError: bad\n  plan          step 1\n"));
    }

    #[test]
    fn colour_wraps_only_the_status_word() {
        let text = report(&[Status::Invalid, Status::Healthy]).to_text(true);
        assert!(text.contains("  install lock  \x1b[31;1minvalid\x1b[0m     summary 0\n"));
        assert!(text.contains("\ninstall lock: \x1b[31;1minvalid\x1b[0m\n"));
    }

    #[test]
    fn json_has_the_same_content_with_stable_keys() {
        let document = report(&[Status::Stuck, Status::Absent]).to_json();
        let value = python_compat::json::parse_json(&document).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "concerns",
                "exit_status",
                "format",
                "healthy",
                "installation",
                "plan"
            ]
        );
        assert_eq!(value.get("healthy"), Some(&Json::Bool(false)));
        assert_eq!(value.get("exit_status"), Some(&Json::from(1)));
        let lock = value.get("concerns").unwrap().get("install_lock").unwrap();
        let keys: Vec<&String> = lock.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["action", "error", "found", "path", "status", "summary"]
        );
        let action = lock.get("action").unwrap();
        assert_eq!(
            action.get("command"),
            Some(&Json::from("/x/execution-manage recover --root /r"))
        );
        assert_eq!(action.get("step"), Some(&Json::from(1)));
        let step = &value.get("plan").unwrap().as_array().unwrap()[0];
        assert_eq!(step.get("command"), action.get("command"));
        assert_eq!(
            step.get("resolves"),
            Some(&Json::from(vec!["install_lock"]))
        );
        let layout = value.get("concerns").unwrap().get("layout").unwrap();
        assert_eq!(layout.get("action"), Some(&Json::Null));
    }

    #[test]
    fn one_concern_keeps_its_steps_numbers() {
        let mut concerns = report(&[Status::Stuck, Status::Healthy]).concerns;
        concerns[1].status = Status::Stuck;
        concerns[1].action = Some(Action::shell("true".into(), "nothing"));
        let full = Report::new(JsonObject::new(), String::new(), concerns.clone(), None);
        assert_eq!(full.plan.steps.len(), 2);
        let one = Report::new(
            JsonObject::new(),
            String::new(),
            concerns,
            Some(ConcernId::Layout),
        );
        assert_eq!(one.concerns.len(), 1);
        assert_eq!(one.plan.steps.len(), 1);
        assert_eq!(one.plan.steps[0].number, 2);
        assert_eq!(one.exit_status(), 1);
    }
}

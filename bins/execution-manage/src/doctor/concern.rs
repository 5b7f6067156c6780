//! What doctor judges: one [`Concern`] per file or process, its status
//! word, what was found, and the action that resolves it; the report
//! ([`super::report`]) and the plan ([`super::plan`]) are built from these.

use python_compat::json::JsonObject;

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
    pub(super) fn colour(self) -> &'static str {
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
    /// Run this exact command line; `argv` are its words (one program's, or
    /// `sh -c <line>` for a shell line with `&&` or `$VARIABLE`); `text`
    /// says what it does.
    Command {
        /// The line, as printed.
        command: String,
        /// Its words: a tool runs these without a shell.
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

    /// A shell line: its argv is `sh -c <line>`, which runs it as printed.
    pub fn shell(command: String, text: impl Into<String>) -> Action {
        Action::Command {
            argv: Some(vec!["sh".into(), "-c".into(), command.clone()]),
            command,
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
}

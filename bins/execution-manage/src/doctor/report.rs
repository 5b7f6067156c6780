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

/// What resolves a concern that is not healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run this exact command line (shell syntax); `text` says what it does.
    Command { command: String, text: String },
    /// The owner still runs: wait for it, then run doctor again.
    Wait(String),
    /// What to do when no exact command line can be known here (install.sh's
    /// own arguments, the server's settings).
    Instruction(String),
    /// No helper may resolve it: the refusal the owning helper prints.
    ContactEngineering(String),
}

impl Action {
    /// `{"kind", "command", "text"}`.
    pub fn to_json(&self) -> Json {
        let (kind, command, text) = match self {
            Action::Command { command, text } => ("command", Json::from(command.as_str()), text),
            Action::Wait(text) => ("wait", Json::Null, text),
            Action::Instruction(text) => ("instruction", Json::Null, text),
            Action::ContactEngineering(text) => ("contact-engineering", Json::Null, text),
        };
        Json::Object(json_object! {
            "kind" => kind,
            "command" => command,
            "text" => text.as_str(),
        })
    }

    /// The command line, when the action is one.
    pub fn command(&self) -> Option<&str> {
        match self {
            Action::Command { command, .. } => Some(command),
            _ => None,
        }
    }
}

/// One judged concern.
#[derive(Debug, Clone)]
pub struct Concern {
    /// The JSON key (`install_lock`, ...).
    pub key: &'static str,
    /// The human title (`install lock`, ...).
    pub title: &'static str,
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
    /// What resolves it (never for healthy or absent).
    pub action: Option<Action>,
}

impl Concern {
    /// A concern with nothing found yet.
    pub fn new(key: &'static str, title: &'static str) -> Concern {
        Concern {
            key,
            title,
            path: None,
            status: Status::Absent,
            summary: String::new(),
            found: JsonObject::new(),
            error: None,
            action: None,
        }
    }

    fn to_json(&self) -> Json {
        Json::Object(json_object! {
            "status" => self.status.word(),
            "summary" => self.summary.as_str(),
            "path" => self.path.as_deref(),
            "found" => self.found.clone(),
            "error" => self.error.as_deref(),
            "action" => self.action.as_ref().map_or(Json::Null, Action::to_json),
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
    /// Every concern, in display order.
    pub concerns: Vec<Concern>,
}

impl Report {
    /// Whether every concern is healthy or absent (exit status 0).
    pub fn healthy(&self) -> bool {
        self.concerns.iter().all(|concern| concern.status.is_fine())
    }

    /// The `--json` document (sorted keys, two-space indent).
    pub fn to_json(&self) -> Vec<u8> {
        let mut concerns = JsonObject::new();
        for concern in &self.concerns {
            concerns.insert(concern.key, concern.to_json());
        }
        encode_indented(&Json::Object(json_object! {
            "format" => 1,
            "healthy" => self.healthy(),
            "installation" => self.installation.clone(),
            "concerns" => concerns,
        }))
    }

    /// The human report: the summary (one aligned line per concern), then
    /// the details of every concern that needs attention.
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
            .map(|concern| concern.title.len())
            .max()
            .unwrap_or(0);
        let mut text = String::new();
        text.push_str(&self.headline);
        text.push_str("\n\n");
        for concern in &self.concerns {
            let line = format!(
                "  {:<width$}  {}{}",
                concern.title,
                paint(concern.status),
                concern.summary
            );
            text.push_str(line.trim_end());
            text.push('\n');
        }
        let attention: Vec<&Concern> = self
            .concerns
            .iter()
            .filter(|concern| !concern.status.is_fine())
            .collect();
        for concern in &attention {
            text.push('\n');
            text.push_str(&format!(
                "{}: {}\n",
                concern.title,
                paint(concern.status).trim_end()
            ));
            text.push_str(&details(concern));
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

/// The detail lines of one concern: path, everything found, the refusal
/// and the action, aligned.
fn details(concern: &Concern) -> String {
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
    let engineering = matches!(&concern.action, Some(Action::ContactEngineering(text))
        if Some(text) == concern.error.as_ref());
    if let Some(error) = concern.error.as_ref().filter(|_| !engineering) {
        rows.push(("refused with".to_string(), error.clone()));
    }
    match &concern.action {
        Some(Action::Command { command, text }) => {
            rows.push(("resolve".to_string(), command.clone()));
            if !text.is_empty() {
                rows.push((String::new(), format!("({text})")));
            }
        }
        Some(Action::Wait(text)) => rows.push(("wait".to_string(), text.clone())),
        Some(Action::Instruction(text)) => rows.push(("resolve".to_string(), text.clone())),
        Some(Action::ContactEngineering(text)) => rows.push((
            "resolve".to_string(),
            format!("contact engineering: {text}"),
        )),
        None => {}
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
                let mut concern = Concern::new(
                    ["install_lock", "layout"][index],
                    ["install lock", "layout"][index],
                );
                concern.status = *status;
                concern.summary = format!("summary {index}");
                if !status.is_fine() {
                    concern.action = Some(Action::Command {
                        command: "execution-manage recover --root /r".to_string(),
                        text: "finishes it".to_string(),
                    });
                }
                concern
            })
            .collect();
        Report {
            installation: JsonObject::new(),
            headline: "execution-manage doctor: split installation at /r".to_string(),
            concerns,
        }
    }

    #[test]
    fn the_summary_is_aligned_and_details_follow_for_what_needs_attention() {
        let text = report(&[Status::Stuck, Status::Healthy]).to_text(false);
        assert_eq!(
            text,
            "execution-manage doctor: split installation at /r\n\n\
             \x20 install lock  stuck       summary 0\n\
             \x20 layout        healthy     summary 1\n\
             \ninstall lock: stuck\n\
             \x20 resolve  execution-manage recover --root /r\n\
             \x20          (finishes it)\n\
             \n1 of 2 concerns need attention.\n"
        );
        assert!(report(&[Status::Healthy, Status::Absent])
            .to_text(false)
            .ends_with("\nAll 2 concerns are healthy.\n"));
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
        assert_eq!(value.get("healthy"), Some(&Json::Bool(false)));
        let lock = value.get("concerns").unwrap().get("install_lock").unwrap();
        let keys: Vec<&String> = lock.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["action", "error", "found", "path", "status", "summary"]
        );
        assert_eq!(
            lock.get("action").unwrap().get("command"),
            Some(&Json::from("execution-manage recover --root /r"))
        );
        let layout = value.get("concerns").unwrap().get("layout").unwrap();
        assert_eq!(layout.get("action"), Some(&Json::Null));
    }
}

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

use super::concern::{Concern, ConcernId, Status};
use super::plan::{Plan, Step, StepKind};

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
            concerns.insert(concern.id.key(), concern_json(concern, &self.plan));
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

/// One concern's JSON object, its action as the plan places it.
fn concern_json(concern: &Concern, plan: &Plan) -> Json {
    Json::Object(json_object! {
        "status" => concern.status.word(),
        "summary" => concern.summary.as_str(),
        "path" => concern.path.as_deref(),
        "found" => concern.found.clone(),
        "error" => concern.error.as_deref(),
        "action" => plan.concern_action_json(concern),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::concern::Action;

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

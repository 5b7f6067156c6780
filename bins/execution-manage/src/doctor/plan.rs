//! The one plan doctor prints after its summary: the concerns that need
//! attention, in dependency order, turned into numbered steps that are safe
//! to follow from top to bottom.
//!
//! - Anything no helper may resolve (an `invalid` concern, or a `stuck` one
//!   whose only resolution is engineering's) makes the plan a single "stop
//!   here and contact engineering" step: nothing else is suggested, because
//!   acting on the rest (removing a lock, restarting a service) could destroy
//!   what engineering needs.
//! - Otherwise, while an owner still runs, the plan only waits: one step per
//!   process waited for (PID, program, since when), and no command at all.
//! - Otherwise each `stuck` concern gets one step: a command runnable
//!   exactly as printed (or an instruction where no command can be known).
//!   A concern that another's step resolves (a lock the journal's recovery
//!   reaps, services a pending journal stopped) says "resolved by step N".

use python_compat::{json::Json, json_object};

use super::concern::{Action, Concern, ConcernId, Status};

/// What one step asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// Run this command exactly as printed.
    Command {
        /// The line, as printed.
        command: String,
        /// Its words, when it is one program's.
        argv: Option<Vec<String>>,
    },
    /// Do this by hand (no exact command can be known here).
    Instruction,
    /// Wait for this process (or for what `text` names), then run doctor
    /// again.
    Wait {
        /// The PID waited for, when a process is.
        pid: Option<u32>,
        /// The program its command line runs.
        program: Option<String>,
        /// Since when it holds what it owns (UTC stamp).
        since: Option<String>,
    },
    /// Stop here and contact engineering with this refusal.
    ContactEngineering {
        /// The owning helper's refusal, exactly as it prints it.
        refusal: String,
    },
}

impl StepKind {
    /// The `kind` word of the JSON form.
    pub fn word(&self) -> &'static str {
        match self {
            StepKind::Command { .. } => "command",
            StepKind::Instruction => "instruction",
            StepKind::Wait { .. } => "wait",
            StepKind::ContactEngineering { .. } => "contact-engineering",
        }
    }
}

/// One numbered step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Its number, from 1.
    pub number: usize,
    /// What it asks for.
    pub kind: StepKind,
    /// What it does (a command), the instruction itself, or what the wait
    /// is for.
    pub text: String,
    /// The concerns it resolves (or waits for, or stops at).
    pub resolves: Vec<ConcernId>,
}

impl Step {
    /// The line after the number in the human plan.
    pub fn headline(&self) -> String {
        match &self.kind {
            StepKind::Command { command, .. } => command.clone(),
            StepKind::Instruction => self.text.clone(),
            StepKind::Wait {
                pid: Some(pid),
                program,
                since,
            } => format!(
                "wait for PID {pid} ({}){} to exit; then run doctor again",
                program.as_deref().unwrap_or("?"),
                since
                    .as_deref()
                    .map(|since| format!(", which has held it since {since},"))
                    .unwrap_or_default()
            ),
            StepKind::Wait { .. } => format!("wait: {}", self.text),
            StepKind::ContactEngineering { refusal } => {
                format!("stop here and contact engineering with: {refusal}")
            }
        }
    }

    /// `{step, kind, command, argv, resolves, text, waits_for}`.
    pub fn to_json(&self) -> Json {
        let (command, argv) = match &self.kind {
            StepKind::Command { command, argv } => (
                Json::from(command.as_str()),
                argv.clone().map_or(Json::Null, Json::from),
            ),
            _ => (Json::Null, Json::Null),
        };
        let waits_for = match &self.kind {
            StepKind::Wait {
                pid,
                program,
                since,
            } => Json::Object(json_object! {
                "pid" => *pid,
                "program" => program.clone(),
                "since" => since.clone(),
            }),
            _ => Json::Null,
        };
        let refusal = match &self.kind {
            StepKind::ContactEngineering { refusal } => Json::from(refusal.as_str()),
            _ => Json::Null,
        };
        let resolves: Vec<&str> = self.resolves.iter().map(|id| id.key()).collect();
        Json::Object(json_object! {
            "step" => self.number,
            "kind" => self.kind.word(),
            "command" => command,
            "argv" => argv,
            "resolves" => resolves,
            "text" => self.text.as_str(),
            "waits_for" => waits_for,
            "refusal" => refusal,
        })
    }
}

/// How the plan treats one concern that needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its own step resolves it (or waits for its owner).
    Own(usize),
    /// Another concern's step resolves it too.
    ResolvedBy(usize),
    /// The plan stops at this step before it: nothing is offered.
    Stopped(usize),
    /// Nothing runs while an owner runs: run doctor again after this wait.
    AfterWait(usize),
}

/// The plan.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    roles: Vec<(ConcernId, Role)>,
}

impl Plan {
    /// The plan for `concerns` (any order; only those needing attention
    /// count).
    pub fn of(concerns: &[Concern]) -> Plan {
        let ordered: Vec<&Concern> = ConcernId::DEPENDENCY_ORDER
            .iter()
            .filter_map(|id| concerns.iter().find(|concern| concern.id == *id))
            .filter(|concern| !concern.status.is_fine())
            .collect();
        let mut plan = Plan::default();
        if ordered.is_empty() {
            return plan;
        }
        let stopper = ordered
            .iter()
            .find(|concern| matches!(concern.action, Some(Action::ContactEngineering(_))));
        if let Some(stopper) = stopper {
            plan.stop(stopper, &ordered);
        } else if ordered
            .iter()
            .any(|concern| concern.status == Status::InProgress && concern.resolved_by.is_none())
        {
            plan.wait(&ordered);
        } else {
            plan.resolve(&ordered);
        }
        plan
    }

    /// A single step: stop and contact engineering with `stopper`'s refusal.
    fn stop(&mut self, stopper: &Concern, ordered: &[&Concern]) {
        let Some(Action::ContactEngineering(refusal)) = &stopper.action else {
            unreachable!("the stopper's action is contact engineering")
        };
        self.steps.push(Step {
            number: 1,
            kind: StepKind::ContactEngineering {
                refusal: refusal.clone(),
            },
            text: format!(
                "no helper may resolve the {}; leave the installation as it is",
                stopper.id.title()
            ),
            resolves: vec![stopper.id],
        });
        for concern in ordered {
            let role = match concern.id == stopper.id {
                true => Role::Own(1),
                false => Role::Stopped(1),
            };
            self.roles.push((concern.id, role));
        }
    }

    /// One wait step per process (or condition) an in-progress concern
    /// waits for; everything else waits too.
    fn wait(&mut self, ordered: &[&Concern]) {
        for concern in ordered {
            if concern.status != Status::InProgress || concern.resolved_by.is_some() {
                continue;
            }
            let same = self
                .steps
                .iter_mut()
                .find(|step| match (&step.kind, &concern.waits_for) {
                    (StepKind::Wait { pid: Some(pid), .. }, Some(waiter)) => *pid == waiter.pid,
                    _ => false,
                });
            if let Some(step) = same {
                step.resolves.push(concern.id);
                let number = step.number;
                self.roles.push((concern.id, Role::Own(number)));
                continue;
            }
            let number = self.steps.len() + 1;
            let text = match &concern.action {
                Some(Action::Wait(text) | Action::Instruction(text)) => text.clone(),
                _ => format!("the {} settles", concern.id.title()),
            };
            self.steps.push(Step {
                number,
                kind: StepKind::Wait {
                    pid: concern.waits_for.as_ref().map(|waiter| waiter.pid),
                    program: concern.waits_for.as_ref().map(|w| w.program.clone()),
                    since: concern.waits_for.as_ref().and_then(|w| w.since.clone()),
                },
                text,
                resolves: vec![concern.id],
            });
            self.roles.push((concern.id, Role::Own(number)));
        }
        let last = self.steps.len();
        for concern in ordered {
            if self.role(concern.id).is_some() {
                continue;
            }
            let role = match self.owner_step(concern, ordered) {
                Some(number) => Role::ResolvedBy(number),
                None => Role::AfterWait(last),
            };
            self.attach(concern.id, role);
        }
    }

    /// One step per stuck concern that resolves on its own (commands that
    /// are the same are one step); the others are resolved by their
    /// owner's step.
    fn resolve(&mut self, ordered: &[&Concern]) {
        for concern in ordered.iter().filter(|c| c.resolved_by.is_none()) {
            let (kind, text) = match &concern.action {
                Some(Action::Command {
                    command,
                    argv,
                    text,
                }) => (
                    StepKind::Command {
                        command: command.clone(),
                        argv: argv.clone(),
                    },
                    text.clone(),
                ),
                Some(Action::Instruction(text) | Action::Wait(text)) => {
                    (StepKind::Instruction, text.clone())
                }
                _ => (
                    StepKind::Instruction,
                    format!("run doctor again; the {} may settle", concern.id.title()),
                ),
            };
            let same = self
                .steps
                .iter_mut()
                .find(|step| step.kind == kind && kind != StepKind::Instruction);
            if let Some(step) = same {
                step.resolves.push(concern.id);
                let number = step.number;
                self.roles.push((concern.id, Role::ResolvedBy(number)));
                continue;
            }
            let number = self.steps.len() + 1;
            self.steps.push(Step {
                number,
                kind,
                text,
                resolves: vec![concern.id],
            });
            self.roles.push((concern.id, Role::Own(number)));
        }
        for concern in ordered.iter().filter(|c| c.resolved_by.is_some()) {
            let number = self.owner_step(concern, ordered).unwrap_or(1);
            self.attach(concern.id, Role::ResolvedBy(number));
        }
    }

    /// The step of the concern that resolves `concern` (following a chain
    /// of owners), if it has one.
    fn owner_step(&self, concern: &Concern, ordered: &[&Concern]) -> Option<usize> {
        let mut owner = concern.resolved_by?;
        for _ in 0..ConcernId::ALL.len() {
            if let Some(Role::Own(number) | Role::ResolvedBy(number)) = self.role(owner) {
                return Some(number);
            }
            owner = ordered
                .iter()
                .find(|candidate| candidate.id == owner)?
                .resolved_by?;
        }
        None
    }

    /// Records `role` and names the concern in the step it refers to.
    fn attach(&mut self, id: ConcernId, role: Role) {
        let (Role::ResolvedBy(number) | Role::Own(number)) = role else {
            self.roles.push((id, role));
            return;
        };
        if let Some(step) = self.steps.get_mut(number - 1) {
            step.resolves.push(id);
        }
        self.roles.push((id, role));
    }

    /// How the plan treats `id` (none when it needs no attention).
    pub fn role(&self, id: ConcernId) -> Option<Role> {
        self.roles
            .iter()
            .find(|(concern, _)| *concern == id)
            .map(|(_, role)| *role)
    }

    /// Only the steps `ids` refer to (for `--concern`), numbers kept.
    pub fn restricted_to(&self, ids: &[ConcernId]) -> Plan {
        let numbers: Vec<usize> = ids
            .iter()
            .filter_map(|id| self.role(*id))
            .map(|role| match role {
                Role::Own(n) | Role::ResolvedBy(n) | Role::Stopped(n) | Role::AfterWait(n) => n,
            })
            .collect();
        Plan {
            steps: self
                .steps
                .iter()
                .filter(|step| numbers.contains(&step.number))
                .cloned()
                .collect(),
            roles: self
                .roles
                .iter()
                .filter(|(id, _)| ids.contains(id))
                .copied()
                .collect(),
        }
    }

    /// The exit status: 0 nothing to do, 3 only waiting (an owner still
    /// runs), 1 a step to take (a command, an instruction, or contacting
    /// engineering).
    pub fn exit_status(&self) -> u8 {
        if self.steps.is_empty() {
            0
        } else if self
            .steps
            .iter()
            .all(|step| matches!(step.kind, StepKind::Wait { .. }))
        {
            3
        } else {
            1
        }
    }

    /// Whether step `number` is a wait.
    fn waits(&self, number: usize) -> bool {
        self.steps
            .get(number.wrapping_sub(1))
            .is_some_and(|step| matches!(step.kind, StepKind::Wait { .. }))
    }

    /// What "resolved by" says: a wait step's owner resolves it once it
    /// ends, which the wait covers.
    fn resolved_by_text(&self, number: usize) -> String {
        match self.waits(number) {
            true => format!("waits with step {number}, for its owner"),
            false => format!("resolved by step {number}"),
        }
    }

    /// The line the details print for a concern's place in the plan.
    pub fn role_line(&self, id: ConcernId) -> Option<String> {
        Some(match self.role(id)? {
            Role::Own(number) => format!("step {number}"),
            Role::ResolvedBy(number) => self.resolved_by_text(number),
            Role::Stopped(number) => {
                format!("nothing to do: stop at step {number} and contact engineering")
            }
            Role::AfterWait(number) => format!("run doctor again after step {number}"),
        })
    }

    /// A concern's `action` member: its own action with its step, or what
    /// the plan does with it instead.
    pub fn concern_action_json(&self, concern: &Concern) -> Json {
        let Some(role) = self.role(concern.id) else {
            return Json::Null;
        };
        let (kind, command, text, step) = match (role, &concern.action) {
            (Role::Own(number), Some(action)) => {
                let (kind, command, text) = match action {
                    Action::Command { command, text, .. } => {
                        ("command", Json::from(command.as_str()), text.clone())
                    }
                    Action::Wait(text) => ("wait", Json::Null, text.clone()),
                    Action::Instruction(text) => ("instruction", Json::Null, text.clone()),
                    Action::ContactEngineering(text) => {
                        ("contact-engineering", Json::Null, text.clone())
                    }
                };
                (kind, command, text, number)
            }
            (Role::Own(number), None) => ("instruction", Json::Null, String::new(), number),
            (Role::ResolvedBy(number), _) => (
                "resolved-by",
                Json::Null,
                self.resolved_by_text(number),
                number,
            ),
            (Role::Stopped(number), _) => (
                "stopped",
                Json::Null,
                format!("stop at step {number} and contact engineering"),
                number,
            ),
            (Role::AfterWait(number), _) => (
                "after-wait",
                Json::Null,
                format!("run doctor again after step {number}"),
                number,
            ),
        };
        Json::Object(json_object! {
            "kind" => kind,
            "command" => command,
            "text" => text,
            "step" => step,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::concern::Waiter;

    fn concern(id: ConcernId, status: Status, action: Option<Action>) -> Concern {
        let mut concern = Concern::new(id);
        concern.status = status;
        concern.action = action;
        concern
    }

    fn recover() -> Action {
        Action::run(
            [
                "/r/1.0.0/execution-manage-linux-x86_64",
                "recover",
                "--root",
                "/i",
            ]
            .map(String::from)
            .to_vec(),
            "restores the prior services",
        )
    }

    #[test]
    fn a_refusal_is_the_only_step_and_nothing_else_is_offered() {
        let mut services = concern(ConcernId::Services, Status::Invalid, None);
        services.resolved_by = Some(ConcernId::ExecutionTransaction);
        let lock = concern(
            ConcernId::InstallLock,
            Status::Stuck,
            Some(Action::shell(
                "rm -- /i/.install-lock/pid && rmdir -- /i/.install-lock".into(),
                "",
            )),
        );
        let journal = concern(
            ConcernId::ExecutionTransaction,
            Status::Invalid,
            Some(Action::ContactEngineering("ValueError: bad journal".into())),
        );
        let plan = Plan::of(&[lock, journal, services]);
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(
            plan.steps[0].headline(),
            "stop here and contact engineering with: ValueError: bad journal"
        );
        assert_eq!(
            plan.role(ConcernId::ExecutionTransaction),
            Some(Role::Own(1))
        );
        assert_eq!(plan.role(ConcernId::InstallLock), Some(Role::Stopped(1)));
        assert_eq!(plan.role(ConcernId::Services), Some(Role::Stopped(1)));
        assert_eq!(plan.exit_status(), 1);
        assert!(plan
            .steps
            .iter()
            .all(|step| !matches!(step.kind, StepKind::Command { .. })));
    }

    #[test]
    fn while_an_owner_runs_the_plan_only_waits_for_it() {
        let waiter = Waiter {
            pid: 4242,
            program: "execution_manage.py".into(),
            since: Some("2026-01-02T03:04:05Z".into()),
        };
        let mut lock = concern(
            ConcernId::InstallLock,
            Status::InProgress,
            Some(Action::Wait("w".into())),
        );
        lock.waits_for = Some(waiter.clone());
        let mut journal = concern(
            ConcernId::ExecutionTransaction,
            Status::InProgress,
            Some(Action::Wait("w".into())),
        );
        journal.waits_for = Some(waiter);
        let mut services = concern(ConcernId::Services, Status::InProgress, None);
        services.resolved_by = Some(ConcernId::ExecutionTransaction);
        let stale = concern(
            ConcernId::UpdateStatus,
            Status::Stuck,
            Some(Action::shell("curl x".into(), "finalizes")),
        );
        let plan = Plan::of(&[lock, journal, services, stale]);
        assert_eq!(plan.steps.len(), 1, "{plan:?}");
        assert_eq!(
            plan.steps[0].headline(),
            "wait for PID 4242 (execution_manage.py), which has held it since \
             2026-01-02T03:04:05Z, to exit; then run doctor again"
        );
        assert_eq!(
            plan.steps[0].resolves,
            [
                ConcernId::ExecutionTransaction,
                ConcernId::InstallLock,
                ConcernId::Services
            ]
        );
        assert_eq!(plan.role(ConcernId::Services), Some(Role::ResolvedBy(1)));
        assert_eq!(
            plan.role_line(ConcernId::Services).as_deref(),
            Some("waits with step 1, for its owner")
        );
        assert_eq!(plan.role(ConcernId::UpdateStatus), Some(Role::AfterWait(1)));
        assert_eq!(plan.exit_status(), 3);
    }

    #[test]
    fn stuck_concerns_get_one_step_each_and_owned_ones_are_resolved_by_it() {
        let journal = concern(
            ConcernId::ExecutionTransaction,
            Status::Stuck,
            Some(recover()),
        );
        let mut lock = concern(ConcernId::InstallLock, Status::Stuck, None);
        lock.resolved_by = Some(ConcernId::ExecutionTransaction);
        let mut layout = concern(ConcernId::Layout, Status::Stuck, None);
        layout.resolved_by = Some(ConcernId::ExecutionTransaction);
        let same = concern(ConcernId::UpdateStatus, Status::Stuck, Some(recover()));
        let start = concern(
            ConcernId::Services,
            Status::Stuck,
            Some(Action::run(
                ["systemctl", "--user", "start", "agents-gateway.service"]
                    .map(String::from)
                    .to_vec(),
                "starts it",
            )),
        );
        let plan = Plan::of(&[layout, start, lock, same, journal]);
        assert_eq!(plan.steps.len(), 2, "{plan:?}");
        assert_eq!(
            plan.steps[0].headline(),
            "/r/1.0.0/execution-manage-linux-x86_64 recover --root /i"
        );
        assert_eq!(
            plan.steps[0].resolves,
            [
                ConcernId::ExecutionTransaction,
                ConcernId::UpdateStatus,
                ConcernId::InstallLock,
                ConcernId::Layout
            ]
        );
        assert_eq!(
            plan.steps[1].headline(),
            "systemctl --user start agents-gateway.service"
        );
        assert_eq!(
            plan.role(ConcernId::ExecutionTransaction),
            Some(Role::Own(1))
        );
        assert_eq!(
            plan.role(ConcernId::UpdateStatus),
            Some(Role::ResolvedBy(1))
        );
        assert_eq!(plan.role(ConcernId::InstallLock), Some(Role::ResolvedBy(1)));
        assert_eq!(plan.role(ConcernId::Services), Some(Role::Own(2)));
        assert_eq!(plan.exit_status(), 1);
        let json = plan.steps[0].to_json();
        assert_eq!(
            json.get("argv"),
            Some(&Json::from(vec![
                "/r/1.0.0/execution-manage-linux-x86_64",
                "recover",
                "--root",
                "/i"
            ]))
        );
        let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "argv",
                "command",
                "kind",
                "refusal",
                "resolves",
                "step",
                "text",
                "waits_for"
            ]
        );
    }

    #[test]
    fn each_concern_has_its_key() {
        for (id, key) in ConcernId::ALL.into_iter().zip(ConcernId::KEYS) {
            assert_eq!(id.key(), key);
            assert_eq!(ConcernId::from_key(key), Some(id));
        }
    }

    #[test]
    fn healthy_concerns_make_no_plan() {
        let plan = Plan::of(&[concern(ConcernId::Layout, Status::Healthy, None)]);
        assert!(plan.steps.is_empty());
        assert_eq!(plan.exit_status(), 0);
        assert_eq!(plan.role(ConcernId::Layout), None);
    }
}

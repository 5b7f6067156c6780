//! What runs and what it runs from: the native worker and gateway against
//! their receipts, the installed layout manifest with `current` and the unit
//! files, and the install lock that serialises every change.

use agents_common::{
    installed_service_files, read_file, ErrorKind, ExecutionLayout, ServiceRunState, ServiceState,
    ServiceStates, WorkerControl, GATEWAY_UNIT as GATEWAY_UNIT_NAME,
    WORKER_UNIT as WORKER_UNIT_NAME,
};
use python_compat::json::{parse_json, Json};

use super::concern::{Action, Concern, ConcernId, Status};
use super::context::{Context, Kind, LOCK_TAKERS};
use super::journals::PendingActivation;
use super::process::Process;

/// A concern that can own the services and files while it is pending (a
/// journal or intent), with the worker admission operation it uses.
pub(super) struct Owner<'a> {
    /// Its concern, as judged.
    pub concern: &'a Concern,
    /// The maintenance operation whose lease it holds on the worker.
    pub operation: Option<String>,
}

/// The pending owners, most specific first, and what a pending explicit
/// activation has published.
pub(super) struct Owners<'a> {
    /// The owners.
    pub owners: Vec<Owner<'a>>,
    /// The pending `.execution-transaction`, when it is readable.
    pub activation: Option<PendingActivation>,
}

impl Owners<'_> {
    /// The first owner that is not absent or healthy: while it is pending,
    /// services may be stopped and files mid-change on its behalf.
    fn pending(&self) -> Option<&Concern> {
        self.owners
            .iter()
            .map(|owner| owner.concern)
            .find(|concern| !concern.status.is_fine())
    }

    /// The first pending journal or intent (not a handoff): it owns the
    /// published layout until it is resolved.
    fn pending_journal(&self) -> Option<&Concern> {
        self.owners
            .iter()
            .map(|owner| owner.concern)
            .filter(|concern| concern.id != ConcernId::UpdatePreparations)
            .find(|concern| !concern.status.is_fine())
    }

    /// The concern whose operation holds `operation` on the worker.
    fn of_operation(&self, operation: &str) -> Option<&Concern> {
        self.owners
            .iter()
            .find(|owner| owner.operation.as_deref() == Some(operation))
            .map(|owner| owner.concern)
    }
}

/// Defers a concern to the pending owner that explains it: the owner's
/// step resolves it (or its wait covers it), and it offers nothing itself.
fn defer(concern: &mut Concern, owner: &Concern, what: &str) {
    concern.status = owner.status.max(Status::InProgress);
    concern.summary = format!(
        "{what} while the {} is {}",
        owner.id.title(),
        owner.status.word()
    );
    concern.action = None;
    concern.resolved_by = Some(owner.id);
}

fn role_json(state: Option<&ServiceState>, receipt_pid: Option<i128>) -> Json {
    let Some(state) = state else {
        return Json::Null;
    };
    Json::Object(python_compat::json_object! {
        "state" => state.state.as_str(),
        "enabled" => state.enabled,
        "main_pid" => state.pid,
        "receipt_pid" => receipt_pid,
    })
}

/// The gateway's `gateway.json` PID (read privately, as the helpers read
/// receipts).
fn gateway_receipt(layout: &ExecutionLayout) -> Result<i128, agents_common::Error> {
    let (data, _mode) = read_file(&layout.runtime_dir().join("gateway.json"), true)?;
    let value = parse_json(&data)?;
    value
        .get("pid")
        .and_then(Json::as_int)
        .filter(|pid| *pid > 0 && value.get("role") == Some(&Json::from("gateway")))
        .ok_or_else(|| agents_common::Error::runtime("gateway process receipt is invalid"))
}

/// The native services against their receipts: systemd's (launchd's)
/// MainPID must be the PID each receipt names, as every helper requires
/// before it sends a credential, and the worker's private status (a read)
/// must come from that receipt's instance.
pub(super) fn services(ctx: &Context, owners: &Owners) -> Concern {
    let mut concern = Concern::new(ConcernId::Services);
    concern.found.insert("worker", Json::Null);
    concern.found.insert("gateway", Json::Null);
    concern.found.insert("lease", Json::Null);
    let states = match &ctx.native {
        None => {
            concern.summary = "no home directory known for the service manager".to_string();
            return concern;
        }
        Some(Err(error)) => return manager_refused(ctx, error, concern),
        Some(Ok(states)) => states,
    };
    let Some(layout) = &ctx.layout else {
        return services_without_layout(ctx, owners, states, concern);
    };
    let problems = receipt_problems(layout, states, &mut concern);
    if !problems.is_empty() {
        return judge_problems(problems, owners, concern);
    }
    judge_admission(ctx, states, owners, concern)
}

/// The service manager did not answer as every helper requires.
fn manager_refused(ctx: &Context, error: &agents_common::Error, mut concern: Concern) -> Concern {
    let line = error.python_line();
    if matches!(ctx.kind, Kind::Missing | Kind::Empty) {
        concern.summary = format!("nothing installed; the service manager did not answer ({line})");
        return concern;
    }
    concern.error = Some(line.clone());
    if error.kind() == Some(ErrorKind::ServiceTransitioning) {
        concern.status = Status::InProgress;
        concern.summary = "a native service is starting or stopping".to_string();
        concern.action = Some(Action::Wait(
            "the service manager is starting or stopping a job; run doctor again".to_string(),
        ));
    } else {
        concern.status = Status::Invalid;
        concern.summary = format!("every helper refuses the service manager's view: {line}");
        concern.action = Some(Action::ContactEngineering(line));
    }
    concern
}

/// What is wrong with the native jobs of the installed layout against
/// their receipts.
#[derive(Debug, Default)]
struct Problems {
    /// Running units whose MainPID is not their receipt's, one line each.
    mismatched: Vec<(&'static str, String)>,
    /// Units that are not running.
    stopped: Vec<&'static str>,
    /// Units without a unit file.
    missing: Vec<&'static str>,
}

impl Problems {
    fn is_empty(&self) -> bool {
        self.mismatched.is_empty() && self.stopped.is_empty() && self.missing.is_empty()
    }

    fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .mismatched
            .iter()
            .map(|(_, line)| line.clone())
            .collect();
        parts.extend(
            self.stopped
                .iter()
                .map(|unit| format!("{unit} is not running")),
        );
        parts.extend(
            self.missing
                .iter()
                .map(|unit| format!("{unit} has no unit file")),
        );
        parts.join("; ")
    }
}

/// Compares each running unit's MainPID with its receipt; records both in
/// `found`. A receipt naming another PID says whose PID that is.
fn receipt_problems(
    layout: &ExecutionLayout,
    states: &ServiceStates,
    concern: &mut Concern,
) -> Problems {
    let worker_receipt = WorkerControl::new().worker_record(layout);
    let worker_pid = worker_receipt
        .as_ref()
        .ok()
        .and_then(|record| record.get("pid").and_then(Json::as_int));
    let gateway = gateway_receipt(layout);
    let gateway_pid = gateway.as_ref().ok().copied();
    concern
        .found
        .insert("worker", role_json(Some(&states.worker), worker_pid));
    concern
        .found
        .insert("gateway", role_json(Some(&states.gateway), gateway_pid));
    let mut problems = Problems::default();
    let units = [
        (
            &states.worker,
            WORKER_UNIT_NAME,
            worker_receipt.as_ref().map(|_| worker_pid),
        ),
        (
            &states.gateway,
            GATEWAY_UNIT_NAME,
            gateway.as_ref().map(|pid| Some(*pid)),
        ),
    ];
    for (state, unit, receipt) in &units {
        match state.state {
            ServiceRunState::Running => {
                let main = state.pid.map(i128::from).unwrap_or(0);
                let line = match receipt {
                    Ok(pid) if *pid == state.pid.map(i128::from) => continue,
                    Ok(pid) => {
                        let pid = pid.unwrap_or(0);
                        format!(
                            "{unit} MainPID {main} but its receipt names PID {pid}, {}",
                            whose_pid(pid, states)
                        )
                    }
                    Err(error) => format!(
                        "{unit} MainPID {main} but its receipt is refused: {}",
                        error.python_line()
                    ),
                };
                problems.mismatched.push((unit, line));
            }
            ServiceRunState::Absent => problems.missing.push(unit),
            _ => problems.stopped.push(unit),
        }
    }
    problems
}

/// Whose PID a receipt names: another unit's MainPID, a process running
/// some program, or nobody.
fn whose_pid(pid: i128, states: &ServiceStates) -> String {
    let unit = [
        (&states.worker, WORKER_UNIT_NAME),
        (&states.gateway, GATEWAY_UNIT_NAME),
    ]
    .into_iter()
    .find(|(state, _)| {
        state.state == ServiceRunState::Running && state.pid.map(i128::from) == Some(pid)
    });
    if let Some((_, unit)) = unit {
        return format!("which is {unit}'s MainPID");
    }
    match u32::try_from(pid).ok().map(Process::of) {
        Some(process) if process.alive => format!(
            "which runs {}",
            process
                .program()
                .unwrap_or_else(|| "an unknown program".to_string())
        ),
        _ => "which is no running process".to_string(),
    }
}

/// Stopped, missing or mismatched units: a pending owner's, or what
/// resolves them.
fn judge_problems(problems: Problems, owners: &Owners, mut concern: Concern) -> Concern {
    let what = problems.summary();
    if let Some(owner) = owners.pending() {
        defer(&mut concern, owner, &what);
        return concern;
    }
    concern.summary = what;
    concern.status = Status::Stuck;
    if !problems.missing.is_empty() {
        concern.status = Status::Invalid;
        concern.action = Some(Action::ContactEngineering(
            "RuntimeError: native service configuration is not this installed execution layout"
                .to_string(),
        ));
    } else if !problems.mismatched.is_empty() {
        let mut words = vec!["systemctl", "--user", "restart"];
        words.extend(problems.mismatched.iter().map(|(unit, _)| *unit));
        concern.action = Some(Action::run(
            words.into_iter().map(String::from).collect(),
            "restarts it, interrupting work its process is doing, so its new process writes its \
             receipt; every helper refuses to act while systemd's MainPID and the receipt disagree",
        ));
    } else {
        let mut words = vec!["systemctl", "--user", "start"];
        words.extend(problems.stopped.iter().copied());
        concern.action = Some(Action::run(
            words.into_iter().map(String::from).collect(),
            "starts the stopped services of the installed layout",
        ));
    }
    concern
}

/// Both units run as their receipts say: the worker's private status and
/// who holds its admission.
fn judge_admission(
    ctx: &Context,
    states: &ServiceStates,
    owners: &Owners,
    mut concern: Concern,
) -> Concern {
    let (record, status) = match ctx.worker() {
        Some(Ok(read)) => read,
        Some(Err(error)) => {
            let line = error.python_line();
            concern.status = Status::Invalid;
            concern.summary = format!("the worker's private status is refused: {line}");
            concern.error = Some(line.clone());
            concern.action = Some(Action::ContactEngineering(line));
            return concern;
        }
        None => unreachable!("a running worker's status is read"),
    };
    let lease = status.get("lease").cloned().unwrap_or(Json::Null);
    concern.found.insert("lease", lease.clone());
    concern.summary = format!(
        "worker PID {} and gateway PID {} are their receipts' (worker {})",
        states.worker.pid.unwrap_or(0),
        states.gateway.pid.unwrap_or(0),
        record
            .get("instance_id")
            .and_then(Json::as_str)
            .unwrap_or("?"),
    );
    concern.status = Status::Healthy;
    let Some(operation) = lease.get("operation_id").and_then(Json::as_str) else {
        concern.summary.push_str(", admission open");
        return concern;
    };
    let sealed = lease.get("sealed") == Some(&Json::Bool(true));
    match owners.of_operation(operation) {
        Some(owner) => concern.summary.push_str(&format!(
            ", admission {} by the {}",
            if sealed { "sealed" } else { "held" },
            owner.id.title()
        )),
        None if sealed => {
            concern.status = Status::Stuck;
            concern.summary.push_str(&format!(
                ", admission sealed by operation {operation}, which no journal, intent or \
                 handoff names"
            ));
            concern.action = Some(Action::ContactEngineering(format!(
                "the worker holds a sealed admission lease of operation {operation} that no \
                 helper owns; no helper may release it"
            )));
        }
        None => {
            concern.status = Status::InProgress;
            concern.summary.push_str(&format!(
                ", admission held by operation {operation} (expires unless sealed)"
            ));
            concern.action = Some(Action::Wait(
                "another maintenance client holds the worker's admission; it expires unless \
                 sealed"
                    .to_string(),
            ));
        }
    }
    concern
}

/// Services where no split layout is installed: the legacy single service,
/// or leftover units of a removed installation.
fn services_without_layout(
    ctx: &Context,
    owners: &Owners,
    states: &ServiceStates,
    mut concern: Concern,
) -> Concern {
    concern
        .found
        .insert("worker", role_json(Some(&states.worker), None));
    concern
        .found
        .insert("gateway", role_json(Some(&states.gateway), None));
    let absent = |state: &ServiceState| state.state == ServiceRunState::Absent;
    match ctx.kind {
        Kind::Legacy => match states.worker.state {
            ServiceRunState::Running => {
                concern.status = Status::Healthy;
                concern.summary = format!(
                    "legacy {WORKER_UNIT_NAME} runs (PID {})",
                    states.worker.pid.unwrap_or(0)
                );
            }
            _ if owners.pending().is_some() => {
                let owner = owners.pending().expect("checked");
                defer(
                    &mut concern,
                    owner,
                    &format!("{WORKER_UNIT_NAME} is not running"),
                );
            }
            ServiceRunState::Absent => {
                concern.status = Status::Invalid;
                concern.summary = format!("legacy installation without {WORKER_UNIT_NAME}");
                concern.action = Some(Action::ContactEngineering(format!(
                    "no {WORKER_UNIT_NAME} unit serves this legacy installation"
                )));
            }
            _ => {
                concern.status = Status::Stuck;
                concern.summary = format!("legacy {WORKER_UNIT_NAME} is not running");
                concern.action = Some(Action::run(
                    ["systemctl", "--user", "start", WORKER_UNIT_NAME]
                        .map(String::from)
                        .to_vec(),
                    "starts the legacy service",
                ));
            }
        },
        _ if absent(&states.worker) && absent(&states.gateway) => {
            concern.summary = "no native units".to_string();
        }
        _ if owners.pending().is_some() => {
            let owner = owners.pending().expect("checked");
            defer(
                &mut concern,
                owner,
                "native units without an installed layout",
            );
        }
        _ => {
            concern.status = Status::Invalid;
            concern.summary = "native units remain without an installed layout".to_string();
            concern.action = Some(Action::ContactEngineering(
                "native units remain, but no installed execution layout owns them".to_string(),
            ));
        }
    }
    concern
}

/// The installed layout manifest (`installed_layout`, which every helper
/// reads the installation through), the unit files and `current` as the
/// uninstaller admits them, or what else the install root holds.
pub(super) fn layout(ctx: &Context, owners: &Owners) -> Concern {
    let mut concern = Concern::new(ConcernId::Layout);
    concern.path = Some(ctx.root_path(agents_common::LAYOUT_NAME));
    for key in [
        "worker_release",
        "gateway_release",
        "current",
        "left",
        "recovery_leaves",
    ] {
        concern.found.insert(key, Json::Null);
    }
    let current = std::fs::read_link(ctx.root.join("current"))
        .ok()
        .map(|target| target.display().to_string());
    concern.found.insert("current", current.clone());
    let contact = |concern: &mut Concern, line: String| {
        concern.status = Status::Invalid;
        concern.error = Some(line.clone());
        concern.action = Some(Action::ContactEngineering(line));
    };
    match &ctx.kind {
        Kind::Missing => concern.summary = format!("nothing installed at {}", ctx.root.display()),
        Kind::Empty => concern.summary = "the install root is empty".to_string(),
        Kind::Unusable(line) => {
            concern.summary = format!("every helper refuses the install root: {line}");
            contact(&mut concern, line.clone());
        }
        Kind::Installing => match owners.pending() {
            Some(owner) => defer(&mut concern, owner, "no layout yet"),
            None => {
                concern.status = Status::Stuck;
                concern.summary = "no layout yet and no journal pending".to_string();
                concern.action = Some(Action::Instruction(
                    "rerun install.sh with the arguments of the interrupted first installation"
                        .to_string(),
                ));
            }
        },
        Kind::HalfRemoved(left) => {
            concern.found.insert("left", left.clone());
            concern.summary = format!(
                "partly removed: no layout and no current, but {} remain",
                left.join(", ")
            );
            match owners.pending() {
                Some(owner) => defer(&mut concern, owner, "partly removed"),
                None => contact(
                    &mut concern,
                    format!(
                        "the installation was partly removed ({} remain); no helper resumes a \
                         removal without its layout",
                        left.join(", ")
                    ),
                ),
            }
        }
        Kind::Legacy => {
            let version = std::fs::canonicalize(ctx.root.join("current"))
                .ok()
                .and_then(|release| std::fs::read_to_string(release.join("VERSION")).ok());
            match version {
                Some(version) => {
                    concern.status = Status::Healthy;
                    concern.summary = format!(
                        "legacy single-service installation, current -> {} (version {})",
                        current.as_deref().unwrap_or("?"),
                        version.trim()
                    );
                }
                None => match owners.pending() {
                    Some(owner) => defer(&mut concern, owner, "current does not resolve"),
                    None => {
                        concern.summary = "legacy current does not resolve to a release".into();
                        contact(
                            &mut concern,
                            "the legacy current link does not resolve to a release with a VERSION"
                                .to_string(),
                        );
                    }
                },
            }
        }
        Kind::Split => split_layout(ctx, owners, &mut concern, current.as_deref()),
    }
    concern
}

/// A split installation's layout: what is published, and, while a journal
/// is pending, that it is pending and what its recovery leaves.
fn split_layout(ctx: &Context, owners: &Owners, concern: &mut Concern, current: Option<&str>) {
    let contact = |concern: &mut Concern, line: String| {
        concern.status = Status::Invalid;
        concern.error = Some(line.clone());
        concern.action = Some(Action::ContactEngineering(line));
    };
    let Some(layout) = &ctx.layout else {
        let line = ctx
            .layout_error
            .as_ref()
            .map(agents_common::Error::python_line)
            .unwrap_or_default();
        concern.summary = format!("every helper refuses it: {line}");
        contact(concern, line);
        return;
    };
    let text = |path: &std::path::Path| path.display().to_string();
    concern
        .found
        .insert("worker_release", text(&layout.worker_release));
    concern
        .found
        .insert("gateway_release", text(&layout.gateway_release));
    let published = format!(
        "worker {} and gateway {}",
        release_name(&layout.worker_release),
        release_name(&layout.gateway_release)
    );
    let files = installed_service_files(layout);
    let owner = match &files {
        Ok(_) => owners.pending_journal(),
        Err(_) => owners.pending(),
    };
    match (files, owner) {
        (_, Some(owner)) => {
            let mut what = match owner.id {
                ConcernId::UninstallIntent => {
                    format!("{published} published; the pending uninstall removes them")
                }
                ConcernId::ActivationJournal => format!(
                    "{published} published; install.sh's pending journal decides what stays"
                ),
                _ => format!("{published} published; what recovery leaves is unknown"),
            };
            if let (ConcernId::ExecutionTransaction, Some(pending)) = (owner.id, &owners.activation)
            {
                what = format!(
                    "{published} published by pending {} (phase {})",
                    pending.id, pending.phase
                );
                if let Some((worker, gateway)) = &pending.leaves {
                    what.push_str(&format!(
                        "; recovery leaves worker {} and gateway {}",
                        release_name(worker),
                        release_name(gateway)
                    ));
                    concern.found.insert(
                        "recovery_leaves",
                        python_compat::json_object! {
                            "worker_release" => text(worker),
                            "gateway_release" => text(gateway),
                        },
                    );
                }
            }
            defer(concern, owner, &what);
        }
        (Ok(_), None) => {
            concern.status = Status::Healthy;
            concern.summary = format!(
                "{published} as installed; units as rendered; current -> {}",
                current.unwrap_or("?")
            );
        }
        (Err(error), None) => {
            let line = error.python_line();
            concern.summary = format!("the uninstaller refuses it: {line}");
            contact(concern, line);
        }
    }
}

fn release_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `.install-lock` as the next acquirer judges it (the reaper's own
/// checks, read-only). A dead owner's lock is reaped by whichever lock
/// taker runs next; `resolvers` are the concerns whose command would.
pub(super) fn install_lock(ctx: &Context, resolvers: &[&Concern]) -> Concern {
    let mut concern = Concern::new(ConcernId::InstallLock);
    concern.path = Some(ctx.root_path(".install-lock"));
    for key in [
        "owner_pid",
        "owner",
        "owner_program",
        "owner_command_line",
        "age_seconds",
    ] {
        concern.found.insert(key, Json::Null);
    }
    let inspection = match &ctx.lock {
        Ok(None) => {
            concern.summary = "no installer holds the installation".to_string();
            return concern;
        }
        Ok(Some(inspection)) => inspection,
        Err(error) => {
            let line = error.python_line();
            concern.status = Status::Invalid;
            concern.summary = format!("every installer and helper refuses it: {line}");
            concern.error = Some(line.clone());
            concern.action = Some(Action::ContactEngineering(line));
            return concern;
        }
    };
    concern
        .found
        .insert("age_seconds", ctx.seconds_since(inspection.since));
    let (Some(pid), Some(owner)) = (inspection.owner, &ctx.lock_owner) else {
        concern.status = Status::Healthy;
        concern.summary =
            "an empty lock directory; the next owner's rename replaces it".to_string();
        return concern;
    };
    concern.found.insert("owner_pid", pid);
    concern.found.insert("owner", owner.state_word());
    concern.found.insert("owner_program", owner.program());
    concern
        .found
        .insert("owner_command_line", owner.command_line.clone());
    let program = owner.program().unwrap_or_else(|| "?".to_string());
    if owner.zombie {
        concern.status = Status::InProgress;
        concern.summary = format!("owner PID {pid} exited, but its parent has not reaped it");
        concern.action = Some(Action::Wait(format!(
            "every lock taker still counts PID {pid} as alive until its parent reaps it"
        )));
        concern.waits_for = ctx.lock_waiter();
    } else if owner.alive && owner.runs_any(LOCK_TAKERS) {
        concern.status = Status::InProgress;
        concern.summary = format!("held by PID {pid} ({program})");
        concern.action = Some(Action::Wait(format!(
            "PID {pid} ({program}) owns the installation; run doctor again when it exits"
        )));
        concern.waits_for = ctx.lock_waiter();
    } else if owner.alive {
        concern.status = Status::Stuck;
        concern.summary = format!("owner PID {pid} is alive but runs {program}, not an installer");
        concern.action = Some(Action::ContactEngineering(format!(
            "RuntimeError: another installer owns the installation lock (PID {pid} was reused \
             by {program}; no lock taker reaps a live owner)"
        )));
    } else {
        concern.status = Status::Stuck;
        concern.summary = format!("owner PID {pid} is gone (stale)");
        stale_lock(ctx, pid, resolvers, &mut concern);
    }
    concern
}

/// A dead owner's lock: the step of a stuck journal or intent reaps it as
/// it takes the lock; otherwise removing it is the step.
fn stale_lock(ctx: &Context, pid: u32, resolvers: &[&Concern], concern: &mut Concern) {
    let reaper = resolvers.iter().find(|resolver| {
        resolver.status == Status::Stuck
            && matches!(
                &resolver.action,
                Some(Action::Command { .. } | Action::Instruction(_))
            )
    });
    if let Some(reaper) = reaper {
        concern.resolved_by = Some(reaper.id);
        return;
    }
    let lock = ctx.root.join(".install-lock");
    let pid_file = lock.join("pid");
    concern.action = Some(Action::shell(
        format!(
            "rm -- {} && rmdir -- {}",
            super::concern::quote(&pid_file.display().to_string()),
            super::concern::quote(&lock.display().to_string())
        ),
        format!(
            "removes the lock PID {pid} left behind; every installer and helper also reaps it \
             when it next takes the lock"
        ),
    ));
}

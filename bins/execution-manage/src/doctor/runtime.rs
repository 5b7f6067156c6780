//! What runs and what it runs from: the native worker and gateway against
//! their receipts, the installed layout manifest with `current` and the unit
//! files, and the install lock that serialises every change.

use agents_common::{
    installed_service_files, read_file, ExecutionLayout, ServiceRunState, ServiceState,
    WorkerControl, GATEWAY_UNIT as GATEWAY_UNIT_NAME, WORKER_UNIT as WORKER_UNIT_NAME,
};
use python_compat::json::{parse_json, Json};

use super::context::{Context, Kind, LOCK_TAKERS};
use super::report::{command_line, Action, Concern, Status};

/// A concern that can own the services and files while it is pending (a
/// journal or intent), with the worker admission operation it uses.
pub(super) struct Owner<'a> {
    /// Its concern, as judged.
    pub concern: &'a Concern,
    /// The maintenance operation whose lease it holds on the worker.
    pub operation: Option<String>,
}

/// The pending owners, most specific first.
pub(super) struct Owners<'a>(pub Vec<Owner<'a>>);

impl Owners<'_> {
    /// The first owner that is not absent or healthy: while it is pending,
    /// services may be stopped and files mid-change on its behalf.
    fn pending(&self) -> Option<&Concern> {
        self.0
            .iter()
            .map(|owner| owner.concern)
            .find(|concern| !concern.status.is_fine())
    }

    /// The concern whose operation holds `operation` on the worker.
    fn of_operation(&self, operation: &str) -> Option<&Concern> {
        self.0
            .iter()
            .find(|owner| owner.operation.as_deref() == Some(operation))
            .map(|owner| owner.concern)
    }
}

/// Defers a concern to the pending owner that explains it.
fn defer(concern: &mut Concern, owner: &Concern, what: &str) {
    concern.status = owner.status.max(Status::InProgress);
    concern.summary = format!(
        "{what} while the {} is {}",
        owner.title,
        owner.status.word()
    );
    concern.action = Some(Action::Instruction(format!(
        "resolved with the {} (see that concern)",
        owner.title
    )));
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
    let mut concern = Concern::new("services", "services");
    concern.found.insert("worker", Json::Null);
    concern.found.insert("gateway", Json::Null);
    concern.found.insert("lease", Json::Null);
    let states = match &ctx.native {
        None => {
            concern.summary = "no home directory known for the service manager".to_string();
            return concern;
        }
        Some(Err(error)) if matches!(ctx.kind, Kind::Missing | Kind::Empty) => {
            concern.summary = format!(
                "nothing installed; the service manager did not answer ({})",
                error.python_line()
            );
            return concern;
        }
        Some(Err(error)) => {
            let line = error.python_line();
            concern.error = Some(line.clone());
            if line.contains("transitioning") {
                concern.status = Status::InProgress;
                concern.summary = "a native service is starting or stopping".to_string();
                concern.action = Some(Action::Wait(
                    "the service manager is starting or stopping a job; run doctor again"
                        .to_string(),
                ));
            } else {
                concern.status = Status::Invalid;
                concern.summary =
                    format!("every helper refuses the service manager's view: {line}");
                concern.action = Some(Action::ContactEngineering(line));
            }
            return concern;
        }
        Some(Ok(states)) => states,
    };
    let Some(layout) = &ctx.layout else {
        return services_without_layout(ctx, owners, states, concern);
    };
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
    let mut stopped = Vec::new();
    let mut mismatched = Vec::new();
    let mut missing = Vec::new();
    for (state, unit, receipt) in [
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
    ] {
        match state.state {
            ServiceRunState::Running => {
                let main = state.pid.map(i128::from);
                match receipt {
                    Ok(pid) if pid == main => {}
                    Ok(pid) => mismatched.push(format!(
                        "{unit} MainPID {} but its receipt names PID {}",
                        main.unwrap_or(0),
                        pid.unwrap_or(0)
                    )),
                    Err(error) => mismatched.push(format!(
                        "{unit} MainPID {} but its receipt is refused ({})",
                        main.unwrap_or(0),
                        error.python_line()
                    )),
                }
            }
            ServiceRunState::Absent => missing.push(unit),
            _ => stopped.push(unit),
        }
    }
    let problems = !(stopped.is_empty() && mismatched.is_empty() && missing.is_empty());
    if problems {
        let what = [
            mismatched.join("; "),
            stopped
                .iter()
                .map(|unit| format!("{unit} is not running"))
                .collect::<Vec<_>>()
                .join("; "),
            missing
                .iter()
                .map(|unit| format!("{unit} has no unit file"))
                .collect::<Vec<_>>()
                .join("; "),
        ]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
        if let Some(owner) = owners.pending() {
            defer(&mut concern, owner, &what);
            return concern;
        }
        concern.summary = what;
        if !missing.is_empty() {
            concern.status = Status::Invalid;
            concern.action = Some(Action::ContactEngineering(
                "RuntimeError: native service configuration is not this installed execution \
                 layout"
                    .to_string(),
            ));
        } else if !mismatched.is_empty() {
            concern.status = Status::Stuck;
            let units: Vec<&str> = [WORKER_UNIT_NAME, GATEWAY_UNIT_NAME]
                .into_iter()
                .filter(|unit| mismatched.iter().any(|line| line.starts_with(unit)))
                .collect();
            let mut words = vec!["systemctl", "--user", "restart"];
            words.extend(&units);
            concern.action = Some(Action::Command {
                command: command_line(&words),
                text: "restarts it so its new process writes its receipt; every helper refuses \
                       to act while systemd's MainPID and the receipt disagree (interrupts work \
                       that process is doing)"
                    .to_string(),
            });
        } else {
            concern.status = Status::Stuck;
            let mut words = vec!["systemctl", "--user", "start"];
            words.extend(stopped.iter().copied());
            concern.action = Some(Action::Command {
                command: command_line(&words),
                text: "starts the stopped services of the installed layout".to_string(),
            });
        }
        return concern;
    }
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
            owner.title
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
    states: &agents_common::ServiceStates,
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
                concern.action = Some(Action::Command {
                    command: command_line(&["systemctl", "--user", "start", WORKER_UNIT_NAME]),
                    text: "starts the legacy service".to_string(),
                });
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
    let mut concern = Concern::new("layout", "layout");
    concern.path = Some(ctx.root_path(agents_common::LAYOUT_NAME));
    for key in ["worker_release", "gateway_release", "current", "left"] {
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
        Kind::Split => {
            let Some(layout) = &ctx.layout else {
                let line = ctx
                    .layout_error
                    .as_ref()
                    .map(agents_common::Error::python_line)
                    .unwrap_or_default();
                concern.summary = format!("every helper refuses it: {line}");
                contact(&mut concern, line);
                return concern;
            };
            let text = |path: &std::path::Path| path.display().to_string();
            concern
                .found
                .insert("worker_release", text(&layout.worker_release));
            concern
                .found
                .insert("gateway_release", text(&layout.gateway_release));
            match installed_service_files(layout) {
                Ok(_) => {
                    concern.status = Status::Healthy;
                    concern.summary = format!(
                        "worker {} and gateway {} as installed; units as rendered; current -> {}",
                        release_name(&layout.worker_release),
                        release_name(&layout.gateway_release),
                        current.as_deref().unwrap_or("?")
                    );
                }
                Err(error) => {
                    let line = error.python_line();
                    match owners.pending() {
                        Some(owner) => {
                            defer(&mut concern, owner, &format!("files mid-change ({line})"))
                        }
                        None => {
                            concern.summary = format!("the uninstaller refuses it: {line}");
                            contact(&mut concern, line);
                        }
                    }
                }
            }
        }
    }
    concern
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
    let mut concern = Concern::new("install_lock", "install lock");
    concern.path = Some(ctx.root_path(".install-lock"));
    for key in ["owner_pid", "owner", "owner_command_line", "age_seconds"] {
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
    concern
        .found
        .insert("owner_command_line", owner.command_line.clone());
    if owner.zombie {
        concern.status = Status::InProgress;
        concern.summary = format!("owner PID {pid} exited, but its parent has not reaped it");
        concern.action = Some(Action::Wait(format!(
            "every lock taker still counts PID {pid} as alive until its parent reaps it"
        )));
    } else if owner.alive && owner.runs_any(LOCK_TAKERS) {
        let program = owner.command_line.clone().unwrap_or_default();
        concern.status = Status::InProgress;
        concern.summary = format!("held by PID {pid} ({})", short(&program));
        concern.action = Some(Action::Wait(format!(
            "PID {pid} ({}) owns the installation; run doctor again when it exits",
            short(&program)
        )));
    } else if owner.alive {
        concern.status = Status::Stuck;
        concern.summary = format!(
            "owner PID {pid} is alive but runs {}, not an installer",
            short(owner.command_line.as_deref().unwrap_or("?"))
        );
        concern.action = Some(Action::ContactEngineering(format!(
            "RuntimeError: another installer owns the installation lock (PID {pid} was reused \
             by another program; no lock taker reaps a live owner)"
        )));
    } else {
        concern.status = Status::Stuck;
        concern.summary = format!("owner PID {pid} is gone (stale)");
        let reaper = resolvers.iter().find(|resolver| {
            resolver.status == Status::Stuck
                && matches!(
                    &resolver.action,
                    Some(Action::Command { .. } | Action::Instruction(_))
                )
        });
        concern.action = Some(match reaper.and_then(|resolver| resolver.action.clone()) {
            Some(Action::Command { command, .. }) => Action::Command {
                command,
                text: format!(
                    "the {}'s command reaps the dead owner's lock as it takes it",
                    reaper.map(|resolver| resolver.title).unwrap_or_default()
                ),
            },
            Some(Action::Instruction(text)) => Action::Instruction(format!(
                "{text} (it reaps the dead owner's lock as it takes it)"
            )),
            _ => {
                let lock = ctx.root.join(".install-lock");
                let pid_file = lock.join("pid");
                Action::Command {
                    command: format!(
                        "rm -- {} && rmdir -- {}",
                        super::report::quote(&pid_file.display().to_string()),
                        super::report::quote(&lock.display().to_string())
                    ),
                    text: format!(
                        "removes the lock PID {pid} left behind; every installer and helper also \
                         reaps it when it next takes the lock"
                    ),
                }
            }
        });
    }
    concern
}

/// A command line cut to a readable length.
fn short(line: &str) -> String {
    const LIMIT: usize = 80;
    if line.chars().count() <= LIMIT {
        return line.to_string();
    }
    let cut: String = line.chars().take(LIMIT).collect();
    format!("{cut}...")
}

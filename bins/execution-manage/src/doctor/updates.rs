//! Managed updates: the candidate preparations and sealed worker handoffs
//! under `.update-preparations/`, and the server's `server-update.json` row
//! with its detached runner.

use std::path::{Path, PathBuf};

use agents_common::{
    check_handoff_release, owned_directory, read_file, read_update_handoff, Error, ErrorKind,
    RUNNER_OWNED_ACTIVE_PHASES,
};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    os::current_uid,
};

use super::concern::{Action, Concern, ConcernId, Status, Waiter};
use super::context::{present, Context, HANDOFF_RELEASERS};
use super::process::{flock_holders, Process};
use super::programs::Helper;

/// The server's grace after the row's last update before it treats a
/// runner that is not alive as gone (`SERVER_UPDATE_START_GRACE_SECONDS`).
pub(super) const GRACE_SECONDS: u64 = 45;
/// The error code of a failed update whose handoff was not released.
const RELEASE_FAILED: &str = "server_update_handoff_release_failed";
/// Phases that leave nothing pending.
const SETTLED: [&str; 8] = [
    "idle",
    "available",
    "current",
    "unavailable",
    "complete",
    "failed",
    "cancelled",
    "canceled",
];

/// One handoff file as judged.
#[derive(Debug, Clone)]
pub(super) struct Handoff {
    /// The update it belongs to (from its file name).
    pub update_id: String,
    /// Its maintenance operation, when the file is readable.
    pub operation_id: Option<String>,
    /// The verdict.
    pub status: Status,
    /// What resolves it.
    pub action: Option<Action>,
    /// The concern whose resolution resolves it too.
    pub resolved_by: Option<ConcernId>,
    /// The process it waits for, while its update runs.
    pub waits_for: Option<Waiter>,
}

/// Whether the row names update `update_id` in a runner phase and that
/// runner is alive and the expected program.
fn update_running(ctx: &Context, update_id: &str) -> bool {
    let phase = ctx.row_text("phase");
    ctx.row_text("update_id") == update_id
        && (phase == "pending"
            || (RUNNER_OWNED_ACTIVE_PHASES.contains(&phase.as_str())
                && !matches!(runner(ctx).1, RunnerState::Gone | RunnerState::Foreign)))
}

/// `.update-preparations/<32 hex>/`: each candidate preparation must be a
/// private, well-named directory (the uninstaller's admission checks); a
/// `runner.lock` someone holds is a preparation still running; each
/// `handoff-<update>.json` is judged by `update-handoff release`'s own
/// checks (without its lock, without its request).
pub(super) fn preparations(ctx: &Context) -> (Concern, Vec<Handoff>) {
    let mut concern = Concern::new(ConcernId::UpdatePreparations);
    let parent = ctx.root.join(".update-preparations");
    concern.path = Some(parent.display().to_string());
    concern
        .found
        .insert("preparations", Json::Array(Vec::new()));
    if !ctx.root_has(".update-preparations") {
        concern.summary = "no update preparation".to_string();
        return (concern, Vec::new());
    }
    let refuse = |concern: &mut Concern, error: Error| {
        let line = error.python_line();
        concern.status = Status::Invalid;
        concern.summary = format!("the uninstaller refuses it: {line}");
        concern.error = Some(line.clone());
        concern.action = Some(Action::ContactEngineering(line));
    };
    if let Err(error) = owned_directory(&parent, true) {
        refuse(&mut concern, error);
        return (concern, Vec::new());
    }
    let names = super::entry_names(&parent);
    let mut items = Vec::new();
    let mut handoffs = Vec::new();
    let mut tally = Tally {
        status: Status::Healthy,
        actions: Vec::new(),
        notes: Vec::new(),
    };
    for name in &names {
        if !python_compat::is_lower_hex(name, 32) {
            refuse(
                &mut concern,
                Error::runtime("unknown candidate preparation directory; no files were removed"),
            );
            return (concern, handoffs);
        }
        let directory = parent.join(name);
        if let Err(error) = owned_directory(&directory, true) {
            refuse(&mut concern, error);
            return (concern, handoffs);
        }
        let lock = directory.join("runner.lock");
        let mut holders = Vec::new();
        if present(&lock) {
            if let Err(error) = safe_lease(&lock) {
                refuse(&mut concern, error);
                return (concern, handoffs);
            }
            holders = flock_holders(&lock);
        }
        if !holders.is_empty() {
            tally.status = tally.status.max(Status::InProgress);
            let holder = Process::of(holders[0]);
            concern.waits_for.get_or_insert(Waiter {
                pid: holders[0],
                program: holder.program().unwrap_or_else(|| "?".to_string()),
                since: std::fs::symlink_metadata(&lock)
                    .and_then(|info| info.modified())
                    .ok()
                    .map(|time| ctx.stamp(time)),
            });
            tally
                .notes
                .push(format!("preparation {name} runs (PID {})", holders[0]));
            tally.actions.push(Action::Wait(format!(
                "the preparation runner (PID {}) holds {}; run doctor again when it exits",
                holders[0],
                lock.display()
            )));
        }
        let judged = judge_handoffs(ctx, &directory, &mut concern, &mut tally, &mut handoffs);
        items.push(Json::Object(python_compat::json_object! {
            "id" => name.as_str(),
            "runner_lock_holders" => holders,
            "handoffs" => judged,
        }));
    }
    concern.found.insert("preparations", Json::Array(items));
    concern.status = tally.status;
    concern.summary = match tally.notes.is_empty() {
        true => format!("{} preparation(s), nothing held", names.len()),
        false => tally.notes.join("; "),
    };
    concern.action = combine(tally.actions, tally.status);
    if concern
        .action
        .as_ref()
        .is_some_and(|action| action.command().is_some())
    {
        // A handoff of its own to release: not waiting on a journal.
        concern.resolved_by = None;
    }
    (concern, handoffs)
}

/// What the preparations add up to so far.
struct Tally {
    status: Status,
    actions: Vec<Action>,
    notes: Vec<String>,
}

/// Judges each handoff of one preparation; returns their `found` entries.
fn judge_handoffs(
    ctx: &Context,
    directory: &Path,
    concern: &mut Concern,
    tally: &mut Tally,
    handoffs: &mut Vec<Handoff>,
) -> Vec<Json> {
    let mut judged = Vec::new();
    for file in handoff_files(directory) {
        let handoff = judge_handoff(ctx, &file);
        tally.status = tally.status.max(handoff.status);
        tally.notes.push(format!(
            "handoff of update {} {}",
            handoff.update_id,
            match handoff.status {
                Status::Healthy => "released",
                Status::InProgress => "held by its running update",
                Status::Stuck => "still sealed",
                _ => "refused",
            }
        ));
        if let Some(action) = &handoff.action {
            tally.actions.push(action.clone());
        }
        concern.resolved_by = concern.resolved_by.or(handoff.resolved_by);
        if concern.waits_for.is_none() {
            concern.waits_for = handoff.waits_for.clone();
        }
        judged.push(Json::Object(python_compat::json_object! {
            "file" => file.display().to_string(),
            "update_id" => handoff.update_id.as_str(),
            "operation_id" => handoff.operation_id.clone(),
            "status" => handoff.status.word(),
        }));
        handoffs.push(handoff);
    }
    judged
}

/// The action of the most severe items: one command, or several joined so
/// they run in order.
fn combine(actions: Vec<Action>, status: Status) -> Option<Action> {
    if status.is_fine() {
        return None;
    }
    let commands: Vec<&Action> = actions
        .iter()
        .filter(|action| action.command().is_some())
        .collect();
    match commands.len() {
        0 => actions.into_iter().next(),
        1 => Some(commands[0].clone()),
        _ => Some(Action::shell(
            commands
                .iter()
                .filter_map(|action| action.command())
                .collect::<Vec<_>>()
                .join(" && "),
            "releases each sealed handoff",
        )),
    }
}

/// `_owned_lease`'s checks of a runner lock file, without taking the lock.
fn safe_lease(path: &Path) -> agents_common::Result<()> {
    let info = std::fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    use std::os::unix::fs::MetadataExt as _;
    if !info.file_type().is_file()
        || info.uid() != current_uid()
        || info.nlink() != 1
        || info.mode() & 0o7777 != 0o600
    {
        return Err(Error::permission("uninstall ownership lease is unsafe"));
    }
    Ok(())
}

/// `handoff-<32 hex>.json` files of one preparation, sorted.
fn handoff_files(directory: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.path())
                .filter(|path| update_of(path).is_some())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn update_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix("handoff-")?.strip_suffix(".json")?;
    python_compat::is_lower_hex(hex, 32).then(|| hex.to_string())
}

fn judge_handoff(ctx: &Context, file: &Path) -> Handoff {
    let update_id = update_of(file).unwrap_or_default();
    let mut handoff = Handoff {
        update_id: update_id.clone(),
        operation_id: None,
        status: Status::Healthy,
        action: None,
        resolved_by: None,
        waits_for: None,
    };
    match read_update_handoff(&ctx.root, file) {
        Ok(fields) => {
            handoff.operation_id = fields
                .get("operation_id")
                .and_then(Json::as_str)
                .map(str::to_string)
        }
        Err(error) => {
            handoff.status = Status::Invalid;
            handoff.action = Some(Action::ContactEngineering(error.python_line()));
            return handoff;
        }
    }
    let running = update_running(ctx, &update_id)
        || ctx
            .owner_running(HANDOFF_RELEASERS)
            .is_some_and(|_| ctx.lease_operation() == handoff.operation_id.as_deref());
    let root = ctx.root.display().to_string();
    let file_text = file.display().to_string();
    let release = Action::run(
        ctx.helper_argv(
            Helper::UpdateHandoff,
            &["release", "--root", &root, "--handoff-file", &file_text],
        ),
        format!(
            "releases the worker's sealed hold of failed update {update_id} after proving it is \
             still exactly this handoff's"
        ),
    );
    if running {
        // The row's runner, else the releaser holding the install lock.
        handoff.waits_for = runner_waiter(ctx).or_else(|| {
            ctx.owner_running(HANDOFF_RELEASERS)
                .and_then(|_| ctx.lock_waiter())
        });
    }
    match check_handoff_release(&ctx.root, file, None, None) {
        Ok(check) if !check.held => {}
        Ok(_) if running => {
            handoff.status = Status::InProgress;
            handoff.action = Some(Action::Wait(format!(
                "update {update_id} is running and owns its handoff; run doctor again when it ends"
            )));
        }
        Ok(_) => {
            handoff.status = Status::Stuck;
            handoff.action = Some(release);
        }
        Err(error) => {
            let held = ctx.lease_operation().is_some()
                && ctx.lease_operation() == handoff.operation_id.as_deref();
            if ctx.worker_lease().is_some() && !held {
                // The worker holds no lease of this operation: nothing of
                // this handoff is left to release.
                return handoff;
            }
            let line = error.python_line();
            handoff.status = if running {
                Status::InProgress
            } else {
                Status::Stuck
            };
            handoff.action = Some(if running {
                Action::Wait(format!(
                    "update {update_id} is running and owns its handoff"
                ))
            } else if let Some(owner) = recovery_owner(ctx, error.kind()) {
                handoff.resolved_by = Some(owner);
                Action::Instruction(format!(
                    "update-handoff release refuses ({line}); resolve that journal or intent \
                     first (see its concern), which takes over this worker"
                ))
            } else {
                Action::ContactEngineering(format!("update-handoff release refuses: {line}"))
            });
        }
    }
    handoff
}

/// The journal or intent that owns recovery, by the kind of
/// `update-handoff release`'s refusal.
fn recovery_owner(ctx: &Context, kind: Option<ErrorKind>) -> Option<ConcernId> {
    match kind? {
        ErrorKind::UninstallOwnsRecovery => Some(ConcernId::UninstallIntent),
        ErrorKind::ActivationOwnsRecovery if ctx.root_has(".activation-transaction") => {
            Some(ConcernId::ActivationJournal)
        }
        ErrorKind::ActivationOwnsRecovery => Some(ConcernId::ExecutionTransaction),
        _ => None,
    }
}

/// The row's runner as a waiter, when it runs.
fn runner_waiter(ctx: &Context) -> Option<Waiter> {
    let (process, _state) = runner(ctx);
    let process = process?;
    let since = ctx.row_text("started_at");
    Some(Waiter {
        pid: process.pid,
        program: process.program().unwrap_or_else(|| "?".to_string()),
        since: (!since.is_empty()).then_some(since),
    })
}

/// How the row's runner stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunnerState {
    /// The row names no runner (launching, or recovery pending).
    None,
    /// Alive and the expected program with this update's `--update-id`.
    Running,
    /// Alive but another program: the server treats the runner as gone.
    Foreign,
    /// Not alive.
    Gone,
}

/// The server's liveness check of the row's `runner_pid`: alive, its
/// command line names the runner (`update_runner.py`, or the `update-runner`
/// binary) and `--update-id <id>` as separate words.
fn runner(ctx: &Context) -> (Option<Process>, RunnerState) {
    let pid = ctx
        .row
        .as_ref()
        .and_then(|row| row.get("runner_pid"))
        .and_then(Json::as_int)
        .filter(|pid| *pid > 1)
        .and_then(|pid| u32::try_from(pid).ok());
    let Some(pid) = pid else {
        return (None, RunnerState::None);
    };
    let process = Process::of(pid);
    let update_id = ctx.row_text("update_id");
    let state = if !process.alive || process.zombie {
        RunnerState::Gone
    } else {
        let line = process.command_line.clone().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let program = line.contains("update_runner.py") || process.runs_any(&["update-runner"]);
        let update = words
            .windows(2)
            .any(|pair| pair[0] == "--update-id" && pair[1] == update_id);
        if program && update {
            RunnerState::Running
        } else {
            RunnerState::Foreign
        }
    };
    (Some(process), state)
}

/// What the server does with an abandoned row, as a command where the
/// server's address is known: its update status read finalizes the row
/// (or resumes a retained activation) once it is older than the grace.
fn server_action(ctx: &Context, age: Option<u64>) -> Action {
    let wait = match age {
        Some(age) if age < GRACE_SECONDS => format!(
            "; the server waits until {GRACE_SECONDS} s after the row's last update ({} s from now)",
            GRACE_SECONDS - age
        ),
        _ => String::new(),
    };
    let text = format!(
        "the server finalizes an update whose runner is gone (or relaunches its retained \
         activation recovery) when it next reads its update status{wait}; \
         AGENTSDOCK_AGENT_TOKEN is the agent token in the config directory's env file"
    );
    match server_origin(ctx) {
        Some(origin) => Action::shell(
            format!(
                "curl -fsS -H \"X-AgentsDock-Token: $AGENTSDOCK_AGENT_TOKEN\" {origin}/api/admin/update"
            ),
            text,
        ),
        None => Action::Instruction(format!(
            "open the application's update settings, or restart the server: {text}"
        )),
    }
}

/// `http://host:port` of the server's public listener, from the installed
/// layout (loopback for a wildcard bind, as the helpers' health client).
fn server_origin(ctx: &Context) -> Option<String> {
    let layout = ctx.layout.as_ref()?;
    let port = layout.public_port()?;
    let host = match layout.bind.as_str() {
        "0.0.0.0" | "localhost" => "127.0.0.1".to_string(),
        "::" | "[::]" | "::1" | "[::1]" => "[::1]".to_string(),
        bind if bind.contains(':') => format!("[{bind}]"),
        bind => bind.to_string(),
    };
    Some(format!("http://{host}:{port}"))
}

/// `state/admin/server-update.json`, read as the server and the runner
/// read it (`read_status_unlocked`, without the status flock) and as
/// `update-handoff retry-failed` and the uninstaller require it (private).
pub(super) fn update_status(ctx: &Context, handoffs: &[Handoff]) -> Concern {
    let mut concern = Concern::new(ConcernId::UpdateStatus);
    for key in [
        "phase",
        "update_id",
        "target_version",
        "runner_pid",
        "runner",
        "runner_command_line",
        "updated_at",
        "age_seconds",
        "error_code",
        "message",
    ] {
        concern.found.insert(key, Json::Null);
    }
    let Some((state_dir, _source)) = &ctx.state_dir else {
        concern.summary = "no state directory known; pass --state-dir".to_string();
        return concern;
    };
    let path = state_dir.join("admin/server-update.json");
    concern.path = Some(path.display().to_string());
    if !present(&path) {
        concern.summary = "no update status (idle)".to_string();
        return concern;
    }
    let Some(row) = read_row(ctx, &path, &mut concern) else {
        return concern;
    };
    let seen = RowSeen::of(ctx, row, &path, &mut concern);
    let shown = if seen.phase.is_empty() {
        "idle"
    } else {
        &seen.phase
    };
    concern.summary = match seen.update_id.is_empty() {
        true => shown.to_string(),
        false => format!("{shown} (update {})", seen.update_id),
    };
    if SETTLED.contains(&shown) {
        settled(ctx, &seen, handoffs, &mut concern);
    } else if seen.phase == "pending" {
        concern.status = Status::InProgress;
        concern
            .summary
            .push_str(", waiting for the server to be idle");
        concern.action = Some(Action::Wait(
            "the server starts the reserved update once it is idle".to_string(),
        ));
    } else if !RUNNER_OWNED_ACTIVE_PHASES.contains(&seen.phase.as_str()) {
        let error = Error::value(format!("unknown server update phase {:?}", seen.phase));
        refuse_row(&mut concern, "the server", error);
    } else {
        active(ctx, &seen, &mut concern);
    }
    concern
}

/// The row's refusal by the reader that refuses it; no helper resolves it.
fn refuse_row(concern: &mut Concern, who: &str, error: Error) {
    let line = error.python_line();
    concern.status = Status::Invalid;
    concern.summary = format!("{who} refuses it: {line}");
    concern.error = Some(line.clone());
    concern.action = Some(Action::ContactEngineering(line));
}

/// The row as its readers require it (private, a JSON object the server
/// reads), or `None` after recording the refusal.
fn read_row<'a>(ctx: &'a Context, path: &Path, concern: &mut Concern) -> Option<&'a JsonObject> {
    let data = match read_file(path, true) {
        Ok((data, _mode)) => data,
        Err(error) => {
            refuse_row(concern, "update-handoff retry-failed", error);
            return None;
        }
    };
    match parse_json(&data) {
        Ok(Json::Object(_)) => {}
        Ok(_) => {
            let error = Error::value("server update status is not a JSON object");
            refuse_row(concern, "the server", error);
            return None;
        }
        Err(error) => {
            refuse_row(concern, "the uninstaller", error.into());
            return None;
        }
    }
    if ctx.row.is_none() {
        let error = Error::value("server update status is unreadable");
        refuse_row(concern, "the server", error);
    }
    ctx.row.as_ref()
}

/// What the row says, and its runner as the server's liveness check sees it.
struct RowSeen {
    phase: String,
    update_id: String,
    error_code: String,
    age: Option<u64>,
    process: Option<Process>,
    state: RunnerState,
}

impl RowSeen {
    /// Reads the row's fields and its runner, recording them in `found`.
    fn of(ctx: &Context, row: &JsonObject, path: &Path, concern: &mut Concern) -> RowSeen {
        let text = |key: &str| ctx.row_text(key);
        // A row the server wrote without `updated_at` ages from the file's mtime.
        let age = ctx
            .seconds_since_stamp(&text("updated_at"))
            .or_else(|| ctx.age_of(path));
        let (process, state) = runner(ctx);
        let found = &mut concern.found;
        for key in [
            "phase",
            "update_id",
            "target_version",
            "error_code",
            "message",
            "updated_at",
        ] {
            found.insert(key, row.get(key).cloned().unwrap_or(Json::Null));
        }
        found.insert("age_seconds", age);
        if let Some(process) = &process {
            found.insert("runner_pid", process.pid);
            found.insert(
                "runner",
                match state {
                    RunnerState::Running => "alive, the expected runner",
                    RunnerState::Foreign => "alive, but not this update's runner",
                    _ => process.state_word(),
                },
            );
            found.insert("runner_command_line", process.command_line.clone());
        }
        RowSeen {
            phase: text("phase"),
            update_id: text("update_id"),
            error_code: text("error_code"),
            age,
            process,
            state,
        }
    }
}

/// A settled row: healthy, unless it is a failed update whose execution
/// hold is not released yet (its handoff says what resolves that).
fn settled(_ctx: &Context, seen: &RowSeen, handoffs: &[Handoff], concern: &mut Concern) {
    concern.status = Status::Healthy;
    if seen.phase != "failed" || seen.error_code != RELEASE_FAILED {
        return;
    }
    let handoff = handoffs
        .iter()
        .find(|handoff| handoff.update_id == seen.update_id);
    match handoff {
        Some(handoff) if !handoff.status.is_fine() => {
            concern.status = handoff.status;
            concern.summary.push_str(match handoff.status {
                Status::InProgress => ", its execution hold is being released",
                _ => ", its execution hold is not released",
            });
            concern.action = handoff.action.clone();
            concern.resolved_by = handoff.resolved_by;
            concern.waits_for = handoff.waits_for.clone();
        }
        _ => concern.summary.push_str(
            ", its execution hold is released (the server clears the error on the next update \
             retry)",
        ),
    }
}

/// A row in a runner phase: in progress while its runner runs (or the
/// server is launching it), stuck once the runner is gone.
fn active(ctx: &Context, seen: &RowSeen, concern: &mut Concern) {
    match seen.state {
        RunnerState::Running => {
            concern.status = Status::InProgress;
            let pid = seen
                .process
                .as_ref()
                .map(|process| process.pid)
                .unwrap_or_default();
            concern
                .summary
                .push_str(&format!(", runner PID {pid} alive"));
            concern.action = Some(Action::Wait(format!(
                "the update runner (PID {pid}) is working; run doctor again when the row settles"
            )));
            concern.waits_for = runner_waiter(ctx);
        }
        RunnerState::None if seen.age.is_some_and(|age| age < GRACE_SECONDS) => {
            concern.status = Status::InProgress;
            concern
                .summary
                .push_str(", no runner yet (the server is launching it)");
            concern.action = Some(Action::Wait(
                "the server is launching the update runner; run doctor again shortly".to_string(),
            ));
        }
        _ => {
            concern.status = Status::Stuck;
            concern.summary.push_str(match (&seen.process, seen.state) {
                (Some(_), RunnerState::Foreign) => ", its runner PID now runs another program",
                (Some(_), _) => ", its runner is gone",
                _ => ", no runner",
            });
            concern.action = Some(server_action(ctx, seen.age));
        }
    }
}

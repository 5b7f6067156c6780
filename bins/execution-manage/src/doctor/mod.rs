//! `execution-manage doctor --root INSTALL_ROOT [--state-dir DIR] [--json]`:
//! one strictly read-only report of what is stuck in an installation and the
//! exact command that resolves it.
//!
//! Each concern is judged with the reader its owning helper applies, so
//! doctor never calls healthy what that helper would refuse: the install
//! lock with the reaper's checks ([`agents_common::inspect_lock`]),
//! install.sh's journal with `ActivationManifest::read` and
//! `execution_context`, an explicit activation with
//! [`ExecutionTransaction::load`](crate::ExecutionTransaction::load) and
//! `check_publication` (as `recover`), the uninstall intent with
//! `read_uninstall_intent`, handoffs with `update-handoff release`'s own
//! checks ([`agents_common::check_handoff_release`]), the update row with
//! `read_status_unlocked`, the layout with `installed_layout` and
//! `installed_service_files`.
//!
//! Doctor takes no lock and writes nothing; the only requests it sends are
//! reads (the worker's private status and, for a held handoff, its callback
//! health), and the service manager is only asked `show`. While an owner
//! runs (install.sh, an apply, an update, an uninstall) it reports that
//! owner as in progress, not as stuck.

mod cli;
mod concern;
mod context;
mod journals;
mod plan;
mod process;
mod programs;
mod recover_only;
mod report;
mod runtime;
mod updates;

use std::ffi::OsString;
use std::process::ExitCode;

use python_compat::{argparse::try_parse_command_line, json::Json, json_object};

pub use cli::{doctor_words, DoctorArgs, DOCTOR_SPEC};
pub use concern::{Action, Concern, ConcernId, Status, Waiter};
pub use plan::{Plan, Role, Step, StepKind};
pub use report::Report;

use context::{Context, Kind};
use runtime::{Owner, Owners};

/// Runs doctor with the words after `doctor`: its exit status (0 healthy,
/// 1 a step to take, 2 usage, 3 only waiting for an owner that runs).
pub fn main(words: &[OsString]) -> ExitCode {
    let args = match try_parse_command_line(&DOCTOR_SPEC, words) {
        Ok(parsed) => DoctorArgs::from_parsed(&parsed),
        Err(exit) => exit.exit(),
    };
    let report = diagnose(&args);
    if report.print(args.json).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::from(report.exit_status())
}

/// Judges every concern of the installation `args` names and plans their
/// resolution.
pub fn diagnose(args: &DoctorArgs) -> Report {
    let ctx = Context::read(&args.root, args.state_dir.as_deref());
    let activation = journals::activation(&ctx);
    let (transaction, transaction_operation, pending) = journals::execution_transaction(&ctx);
    let (uninstall, uninstall_operation) = journals::uninstall_intent(&ctx);
    let (preparations, handoffs) = updates::preparations(&ctx);
    let update_status = updates::update_status(&ctx, &handoffs);
    let activation_operation = activation
        .found
        .get("operation_id")
        .and_then(Json::as_str)
        .map(str::to_string);
    let mut owners = vec![
        Owner {
            concern: &transaction,
            operation: transaction_operation,
        },
        Owner {
            concern: &uninstall,
            operation: uninstall_operation,
        },
        Owner {
            concern: &activation,
            operation: activation_operation,
        },
    ];
    owners.extend(handoffs.iter().map(|handoff| Owner {
        concern: &preparations,
        operation: handoff.operation_id.clone(),
    }));
    let owners = Owners {
        owners,
        activation: pending.clone(),
    };
    let services = runtime::services(&ctx, &owners);
    let layout = runtime::layout(&ctx, &owners);
    let lock = runtime::install_lock(
        &ctx,
        &[&transaction, &uninstall, &activation, &preparations],
    );
    let (installation, headline) = installation(&ctx, pending.as_ref());
    Report::new(
        installation,
        headline,
        vec![
            lock,
            activation,
            transaction,
            uninstall,
            preparations,
            update_status,
            services,
            layout,
        ],
        args.concern,
    )
}

/// The `installation` member and the human headline.
fn installation(
    ctx: &Context,
    pending: Option<&journals::PendingActivation>,
) -> (python_compat::json::JsonObject, String) {
    let root = ctx.root.display();
    let summary = match &ctx.kind {
        Kind::Missing => format!("no installation at {root} (the install root does not exist)"),
        Kind::Unusable(line) => format!("unusable install root {root}: {line}"),
        Kind::Empty => format!("empty install root {root} (nothing installed)"),
        Kind::Split => match &ctx.layout {
            Some(layout) => format!(
                "split gateway/worker installation at {root} (worker {}, gateway {}{})",
                release_name(&layout.worker_release),
                release_name(&layout.gateway_release),
                match pending {
                    Some(pending) => format!(" published; {} pending", pending.id),
                    None => String::new(),
                }
            ),
            None => format!("split gateway/worker installation at {root} (its layout is refused)"),
        },
        Kind::Legacy => format!("legacy single-service installation at {root}"),
        Kind::Installing => format!("first installation under way at {root} (no layout yet)"),
        Kind::HalfRemoved(left) => format!(
            "half-removed installation at {root} (only {} remain)",
            left.join(", ")
        ),
    };
    let (state_dir, source) = match &ctx.state_dir {
        Some((dir, source)) => (Some(dir.display().to_string()), Some(*source)),
        None => (None, None),
    };
    let state_line = match (&state_dir, source) {
        (Some(dir), Some(source)) => format!(
            "state directory {dir} ({})",
            match source {
                "option" => "from --state-dir",
                "layout" => "from the installed layout",
                "environment" => "from the environment",
                _ => "the default under HOME",
            }
        ),
        _ if matches!(ctx.kind, Kind::Missing | Kind::Empty) => "no state directory known: \
             nothing is installed here; an uninstall keeps the state root it printed (pass it \
             as --state-dir)"
            .to_string(),
        _ => "no state directory known (pass --state-dir)".to_string(),
    };
    let object = json_object! {
        "root" => ctx.root.display().to_string(),
        "kind" => ctx.kind.word(),
        "summary" => summary.as_str(),
        "state_dir" => state_dir,
        "state_dir_source" => source,
        "home" => ctx.home.as_ref().map(|home| home.display().to_string()),
    };
    let headline = format!("execution-manage doctor: {summary}\n{state_line}");
    (object, headline)
}

/// The names in `directory`, sorted; none when it cannot be listed (the
/// concern that needs the directory reports that itself).
fn entry_names(directory: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn release_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

//! The three journals that claim an installation while an operation runs:
//! install.sh's `.activation-transaction`, an explicit activation's
//! `.execution-transaction` and the split uninstall's
//! `.execution-uninstall.json`. Each is read with its owning helper's own
//! reader, so a journal doctor calls resumable is one that helper accepts.

use agents_common::{
    execution_context, maintenance_operation_id, no_activation, read_uninstall_intent,
    ActivationManifest, TRANSACTION_NAME, UNINSTALL_INTENT_NAME,
};
use python_compat::json::Json;

use super::concern::{Action, Concern, ConcernId, Status};
use super::context::{Context, Kind, INSTALLER, MANAGE, UNINSTALLER};
use super::process::Process;
use super::programs::Helper;
use super::recover_only::{recover_only_argv, Unavailable};
use crate::ExecutionTransaction;

/// What a pending `.execution-transaction` has published and what its
/// recovery leaves installed (the layout concern reports both).
#[derive(Debug, Clone)]
pub(super) struct PendingActivation {
    /// The journal's id.
    pub id: String,
    /// Its phase.
    pub phase: String,
    /// The worker and gateway releases `recover` leaves (the journal's
    /// target once committed, else the prior layout it rolls back to).
    pub leaves: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// install.sh's journal directory.
const ACTIVATION_JOURNAL: &str = ".activation-transaction";

/// A refused journal: the helper that owns it prints `error` and stops;
/// no helper may resolve it.
fn refused(concern: &mut Concern, who: &str, error: &agents_common::Error) {
    let line = error.python_line();
    concern.status = Status::Invalid;
    concern.summary = format!("{who} refuses it: {line}");
    concern.error = Some(line.clone());
    concern.action = Some(Action::ContactEngineering(line));
}

/// A live owner: wait for it, naming the program its command line runs.
fn owned_by(ctx: &Context, concern: &mut Concern, owner: &Process) {
    let pid = owner.pid;
    let program = owner.program().unwrap_or_else(|| "?".to_string());
    concern.status = Status::InProgress;
    concern.found.insert("owner_pid", pid);
    concern.action = Some(Action::Wait(format!(
        "PID {pid} ({program}) holds the install lock and owns it; run doctor again when it exits"
    )));
    concern.waits_for = ctx.lock_waiter();
}

/// install.sh's `.activation-transaction`, read as install.sh's journal
/// reader reads it (`_read_manifest` without cleanup; a split-service
/// journal also through `execution_context`, which checks the links and
/// configuration files against its phase).
pub(super) fn activation(ctx: &Context) -> Concern {
    let mut concern = Concern::new(ConcernId::ActivationJournal);
    concern.path = Some(ctx.root_path(ACTIVATION_JOURNAL));
    for key in [
        "transaction_id",
        "format",
        "phase",
        "release_version",
        "intent",
        "operation_id",
        "age_seconds",
        "owner_pid",
    ] {
        concern.found.insert(key, Json::Null);
    }
    if !ctx.root_has(ACTIVATION_JOURNAL) {
        concern.summary = "no install.sh activation pending".to_string();
        return concern;
    }
    let read = ActivationManifest::read(&ctx.root, false).and_then(|(_directory, manifest)| {
        if manifest.is_execution() {
            execution_context(&ctx.root)?;
        }
        Ok(manifest)
    });
    let manifest = match read {
        Ok(manifest) => manifest,
        Err(error) => {
            refused(&mut concern, "install.sh's journal reader", &error);
            return concern;
        }
    };
    let (id, phase, version) = (
        manifest.transaction_id().to_string(),
        manifest.phase().to_string(),
        manifest.text("release_version").to_string(),
    );
    let found = &mut concern.found;
    found.insert("transaction_id", id.as_str());
    found.insert("format", manifest.get("format").clone());
    found.insert("phase", phase.as_str());
    found.insert("release_version", version.as_str());
    found.insert("intent", manifest.get("intent").clone());
    found.insert(
        "operation_id",
        manifest.execution_field("operation_id").clone(),
    );
    found.insert(
        "age_seconds",
        ctx.age_of(&ctx.root.join(ACTIVATION_JOURNAL).join("manifest.json")),
    );
    concern.summary = format!("{id} of release {version}, phase {phase}");
    if let Some(owner) = ctx.owner_running(INSTALLER) {
        owned_by(ctx, &mut concern, owner);
        return concern;
    }
    concern.status = Status::Stuck;
    concern.summary.push_str(", no installer runs");
    let recovery = ctx
        .row
        .as_ref()
        .and_then(|row| row.get("_activation_recovery"))
        .and_then(Json::as_object)
        .is_some_and(|intent| {
            intent.get("version") == Some(&Json::from(version.as_str()))
                && agents_common::RUNNER_OWNED_ACTIVE_PHASES
                    .contains(&ctx.row_text("phase").as_str())
        });
    if recovery {
        concern.resolved_by = Some(ConcernId::UpdateStatus);
    }
    concern.action = Some(if recovery {
        Action::Instruction(format!(
            "the server resumes it: update {} retains its activation recovery, and the server \
             relaunches update_runner.py --recover-only on its next update status read (see \
             the update status concern)",
            ctx.row_text("update_id")
        ))
    } else {
        resume(ctx, &manifest)
    });
    concern
}

/// A journal no installer or update owns any more: install.sh's own
/// `--recover-only` where it can run here, else what to do and why not.
fn resume(ctx: &Context, manifest: &ActivationManifest) -> Action {
    let (id, phase, version) = (
        manifest.transaction_id(),
        manifest.phase(),
        manifest.text("release_version"),
    );
    match recover_only_argv(ctx, manifest) {
        Ok(argv) => Action::run(
            argv,
            format!(
                "install.sh resumes {id} from phase {phase} and retires the journal: it exits 0 \
                 when it finished the committed activation of {version}, 75 when it restored \
                 the prior release and services (its \"Run the installer again\" is about the \
                 update, not this plan); either way run doctor again"
            ),
        ),
        Err(Unavailable::NotSplit) => Action::Instruction(format!(
            "rerun install.sh with the same arguments as the interrupted run (release \
             {version}); it resumes {id} from phase {phase}, and only install.sh may (its \
             --recover-only resumes split activations only)"
        )),
        Err(Unavailable::Missing(why)) => Action::Instruction(format!(
            "run install.sh --recover-only --non-interactive --release-version {version} \
             --expected-api-contract {} --expected-activation-id {id} (and \
             --expected-server-identity, the state directory's server-identity) from an \
             unpacked release (the candidate {version}'s or the installed one's); it resumes \
             {id} from phase {phase}, and only install.sh may; no command can be printed \
             here: {why}",
            python_compat::str_or_empty(manifest.execution_field("api_contract"))
        )),
    }
}

/// The `.execution-transaction` of an explicit `apply`, read as `recover`
/// reads it: `ExecutionTransaction::load` (the whole journal against the
/// layout it names, units re-rendered, VERSION files re-read) and
/// `check_publication` (nothing outside the journal changed its files).
/// Returns the concern and the journal's maintenance operation.
pub(super) fn execution_transaction(
    ctx: &Context,
) -> (Concern, Option<String>, Option<PendingActivation>) {
    let mut concern = Concern::new(ConcernId::ExecutionTransaction);
    concern.path = Some(ctx.root_path(TRANSACTION_NAME));
    for key in [
        "id",
        "scope",
        "phase",
        "operation_id",
        "age_seconds",
        "owner_pid",
    ] {
        concern.found.insert(key, Json::Null);
    }
    let (drafts, retired) = leftovers(ctx);
    concern.found.insert("drafts", drafts);
    concern.found.insert("retired", retired);
    if !ctx.root_has(TRANSACTION_NAME) {
        concern.summary = "no explicit activation pending".to_string();
        return (concern, None, None);
    }
    let loaded = ExecutionTransaction::load(&ctx.root).and_then(|(journal, layout)| {
        ExecutionTransaction::check_publication(&journal, &layout)?;
        Ok((journal, layout))
    });
    let (journal, target) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => {
            refused(&mut concern, "execution-manage recover", &error);
            return (concern, None, None);
        }
    };
    let text = |key: &str| {
        journal
            .get(key)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let operation = maintenance_operation_id(&journal).ok();
    let found = &mut concern.found;
    found.insert("id", text("id"));
    found.insert("scope", text("scope"));
    found.insert("phase", text("phase"));
    found.insert("operation_id", operation.clone());
    found.insert(
        "age_seconds",
        ctx.age_of(&ctx.root.join(TRANSACTION_NAME).join("manifest.json")),
    );
    concern.summary = format!(
        "{} (scope {}), phase {}",
        text("id"),
        text("scope"),
        text("phase")
    );
    let committed = text("phase") == "committed";
    let leaves = match committed {
        true => Some(target),
        false => ExecutionTransaction::prior_layout(&journal).ok(),
    };
    let pending = PendingActivation {
        id: text("id"),
        phase: text("phase"),
        leaves: leaves.map(|layout| (layout.worker_release, layout.gateway_release)),
    };
    if let Some(owner) = ctx.owner_running(MANAGE) {
        owned_by(ctx, &mut concern, owner);
        return (concern, operation, Some(pending));
    }
    concern.status = Status::Stuck;
    concern.summary.push_str(", its execution-manage is gone");
    let root = ctx.root.display().to_string();
    concern.action = Some(Action::run(
        ctx.helper_argv(Helper::ExecutionManage, &["recover", "--root", &root]),
        match committed {
            true => "finishes the committed activation and retires its journal",
            false => "restores the prior services, files and current, and retires the journal",
        },
    ));
    (concern, operation, Some(pending))
}

/// Unreferenced drafts of a crashed `stage` and retired journals (audit
/// evidence), counted.
fn leftovers(ctx: &Context) -> (usize, usize) {
    if matches!(ctx.kind, Kind::Missing | Kind::Unusable(_)) {
        return (0, 0);
    }
    let names = super::entry_names(&ctx.root);
    let count = |prefix: &str| names.iter().filter(|name| name.starts_with(prefix)).count();
    (count(".execution-draft-"), count(".execution-completed-"))
}

/// The split uninstall's retained `.execution-uninstall.json`, read with
/// the uninstaller's own reader against the installed layout. Returns the
/// concern and the intent's maintenance operation.
pub(super) fn uninstall_intent(ctx: &Context) -> (Concern, Option<String>) {
    let mut concern = Concern::new(ConcernId::UninstallIntent);
    concern.path = Some(ctx.root_path(UNINSTALL_INTENT_NAME));
    for key in [
        "phase",
        "operation_id",
        "purge_state",
        "age_seconds",
        "owner_pid",
    ] {
        concern.found.insert(key, Json::Null);
    }
    if !ctx.root_has(UNINSTALL_INTENT_NAME) {
        concern.summary = "no uninstall pending".to_string();
        return (concern, None);
    }
    let Some(layout) = &ctx.layout else {
        let error = agents_common::installed_layout(&ctx.root)
            .err()
            .unwrap_or_else(|| agents_common::Error::runtime("installed layout changed"));
        refused(&mut concern, "uninstall", &error);
        return (concern, None);
    };
    let intent = match read_uninstall_intent(&ctx.root, layout) {
        Ok(Some(intent)) => intent,
        Ok(None) => {
            concern.summary = "no uninstall pending".to_string();
            return (concern, None);
        }
        Err(error) => {
            refused(&mut concern, "uninstall", &error);
            return (concern, None);
        }
    };
    let field = |key: &str| intent.get(key).cloned().unwrap_or(Json::Null);
    let operation = field("operation_id").as_str().map(str::to_string);
    let phase = python_compat::str_or_empty(&field("phase"));
    let purge = field("purge_state") == Json::Bool(true);
    let found = &mut concern.found;
    found.insert("phase", phase.as_str());
    found.insert("operation_id", field("operation_id"));
    found.insert("purge_state", purge);
    found.insert(
        "age_seconds",
        ctx.age_of(&ctx.root.join(UNINSTALL_INTENT_NAME)),
    );
    concern.summary = format!(
        "operation {}, phase {phase}",
        operation.as_deref().unwrap_or("?")
    );
    if let Some(owner) = ctx.owner_running(UNINSTALLER) {
        owned_by(ctx, &mut concern, owner);
        return (concern, operation);
    }
    concern.status = Status::Stuck;
    concern.summary.push_str(", its uninstaller is gone");
    let text = |path: &std::path::Path| path.display().to_string();
    let (root, config, state, home) = (
        text(&ctx.root),
        text(&layout.config_root),
        text(&layout.state_root),
        text(&layout.home),
    );
    let mut words = vec![
        "--root",
        &root,
        "--config-root",
        &config,
        "--state-root",
        &state,
        "--home",
        &home,
        "--yes",
    ];
    if purge {
        words.push("--purge-state");
    }
    let mut what = format!("resumes the interrupted uninstall from phase {phase}");
    if purge {
        what.push_str("; it keeps the recorded choice to purge state, which asks for the exact state path at a terminal");
    }
    if let Err(error) = no_activation(&ctx.root) {
        what.push_str(&format!(
            "; it refuses ({}) until the pending activation is resolved",
            error.python_line()
        ));
    }
    concern.action = Some(Action::run(
        ctx.helper_argv(Helper::Uninstall, &words),
        what,
    ));
    (concern, operation)
}

//! `execution-activation`: the split gateway/worker service operations that
//! install.sh runs during activation and rollback (the port of
//! `execution_activation.py`).
//!
//! There is deliberately no independent commit, rollback, snapshot or lock:
//! every mutating operation requires install.sh's outer activation journal
//! and its install lock. Only `detect`, `snapshot`, `candidate-api-contract`,
//! `previous-worker` and `recovery-state` print (one line install.sh
//! captures); every failure is one line on stderr and exit status 1. Signals
//! the installer ignored stay ignored: nothing here installs handlers.
//!
//! # Map by concern
//!
//! - The command line and the context every journal-owned operation
//!   establishes first: `cli` ([`Args`], [`SPEC`]), `context`.
//! - Before the installer touches anything: `detect` (split mode or not),
//!   `api_contract` (`candidate-api-contract`, through the `python_source`
//!   crate), `admission` (`preflight`, `stop`), `recovery_state`.
//! - Publishing a candidate: [`publish`] (units and plists), [`durability`]
//!   (flushing every retained generation), [`replace_config`] (the journal's
//!   write-ahead configuration publication), [`environment`] (the runtime
//!   env file).
//! - Around link takeover: `native` (the service manager), `operations`
//!   (`start`, `suppress`, `restore`, `release`, `previous-worker`),
//!   `verify` (the health install.sh fetched).
//! - Old installations: [`legacy_runner`] (the read-only proof that the
//!   legacy runner is gone), `retired_intent` (an old updater's recovery
//!   intent).

mod admission;
mod api_contract;
mod cli;
mod context;
mod detect;
pub mod durability;
pub mod environment;
pub mod legacy_runner;
mod native;
mod operations;
pub mod publish;
mod recovery_state;
pub mod replace_config;
mod retired_intent;
mod verify;

use crate::durability::flush_activation;
use agents_common::{locate_release, Error, Result, SystemCommandRunner};
use python_compat::json::Json;

pub use cli::{Args, SPEC};

use cli::Operation;
use context::{command_layout, print_line, transaction};

/// Runs one operation as install.sh invoked it; the error is the one line
/// `exit_status` prints.
pub fn run(args: Args) -> Result<()> {
    match args.operation {
        Operation::CandidateApiContract => {
            let contract = api_contract::candidate_api_contract(&args.candidate_source)?;
            return print_line(&contract);
        }
        Operation::Detect => return print_line(detect::detect(&args.root)?),
        _ => {}
    }
    let layout = command_layout(&args)?;
    let services = native::connect(&layout)?;
    let services = services.as_ref();
    match args.operation {
        Operation::Snapshot => return operations::snapshot(services),
        Operation::Preflight => return operations::preflight(&args, &layout, services),
        _ => {}
    }
    let value = transaction(&args, &layout)?;
    match args.operation {
        Operation::RecoveryState => print_line(recovery_state::recovery_state(
            &args,
            &value,
            &SystemCommandRunner::default(),
        )?),
        Operation::Durability => {
            flush_activation(&layout.install_root, &value)?;
            if transaction(&args, &layout)? != value {
                return Err(Error::runtime(
                    "activation journal changed during runtime durability barrier",
                ));
            }
            Ok(())
        }
        Operation::Publish => publish::publish(&layout),
        Operation::Verify | Operation::VerifyRestored => {
            verify::verify_components(&args, &layout, &value, services)
        }
        Operation::PreviousWorker => previous_worker(&value),
        Operation::Stop => operations::stop(&args, &layout, &value, services),
        Operation::Suppress => operations::suppress(services),
        Operation::Start => operations::start(services),
        Operation::Restore => operations::restore(&value, services),
        Operation::Release => operations::release(&value, &layout, services),
        Operation::CandidateApiContract
        | Operation::Detect
        | Operation::Snapshot
        | Operation::Preflight => unreachable!("{} is dispatched above", args.operation.word()),
    }
}

/// `previous-worker`: the retained worker generation a restored split
/// install runs again; nothing for a legacy monolith.
fn previous_worker(value: &agents_common::ActivationManifest) -> Result<()> {
    if value.get("execution_layout").get("existed") != Some(&Json::Bool(true)) {
        return Ok(());
    }
    let old_worker = value
        .execution_field("old_worker_release")
        .as_object()
        .cloned();
    let previous = match old_worker {
        Some(release) if !release.is_empty() => locate_release(&release, &[])?,
        _ => None,
    };
    match previous {
        Some(path) => print_line(&path.to_string_lossy()),
        None => Err(Error::runtime("previous worker generation is unavailable")),
    }
}

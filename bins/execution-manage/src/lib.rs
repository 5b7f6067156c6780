//! `execution-manage`: explicit gateway/worker activation and recovery for
//! support staff (the port of `execution_manage.py`).
//!
//! `apply` and `recover` change services and files under install.sh's
//! installation lock; `inspect` only reads. [`doctor`] (recognised as the
//! first word before the original's parser runs, which stays byte for byte the
//! original's) reports, strictly read-only, what is stuck in an installation and
//! the exact command that resolves it. Every command prints its result as
//! `json.dumps(result, sort_keys=True)` on one line; a failure prints the
//! Python exception line on stderr and exits 1 (usage errors exit 2).
//!
//! Ctrl-C behaves as Python's `KeyboardInterrupt` does: the controller's
//! failure handling is skipped (the journal stays for `recover`), the
//! installation lock is released after its checks, and the process dies by
//! SIGINT (see the install lock's interrupt handling).
//!
//! # Map by concern
//!
//! - `cli`: the original's parser and the typed arguments ([`Args`], [`SPEC`]).
//! - `controller`: `ActivationController`, the orchestration of `apply` and
//!   `recover` under the installation lock.
//! - `transaction`: the `.execution-transaction` journal it writes and
//!   resumes ([`ExecutionTransaction`]).
//! - [`doctor`]: the read-only report of what is stuck and how to resolve it.

mod cli;
mod controller;
pub mod doctor;
mod scope;
mod transaction;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use agents_common::{
    maintenance_operation_id, read_file, ExecutionLayout, InstallationLock, Result,
};
use python_compat::{
    argparse::parse_argv,
    exit_status,
    json::{encode_line, parse_json, Json},
    json_object,
};

pub use cli::{Args, SPEC};
pub use scope::Scope;

use controller::ActivationController;
pub use transaction::ExecutionTransaction;

/// The helper as a process: `doctor` as the first word after the program's
/// name goes to its own parser; every other command line is parsed as the
/// original's argparse does (help exits 0, a usage error 2) and run; a
/// failure prints its one Python exception line on stderr and exits 1.
pub fn run(argv: &[OsString]) -> ExitCode {
    if let Some(rest) = doctor::doctor_words(argv.get(1..).unwrap_or_default()) {
        return doctor::main(rest);
    }
    exit_status(execute(Args::from_parsed(&parse_argv(&SPEC, argv))))
}

/// Runs one command and prints its result line; the error is the one line
/// `exit_status` prints.
fn execute(args: Args) -> Result<()> {
    let result = match args {
        Args::Apply { layout, scope } => apply(&layout, scope)?,
        Args::Recover { root } => recover(&root)?,
        Args::Inspect { root } => inspect(&root)?,
    };
    // json.dumps(result, sort_keys=True) and print's newline.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", encode_line(&result, true))?;
    stdout.flush()?;
    Ok(())
}

/// Activates the layout of a private JSON file for one scope.
fn apply(layout_file: &Path, scope: Scope) -> Result<Json> {
    let (data, _mode) = read_file(layout_file, true)?;
    let layout = ExecutionLayout::from_dict(&parse_json(&data)?)?;
    let root = layout.install_root.clone();
    InstallationLock::hold(&root, || ActivationController::new(layout)?.apply(scope))
}

/// Finishes or rolls back the pending activation of `root`. The journal is
/// validated before the lock is taken, and again by the controller under it.
fn recover(root: &Path) -> Result<Json> {
    let (_journal, layout) = ExecutionTransaction::load(root)?;
    let root = layout.install_root.clone();
    InstallationLock::hold(&root, || ActivationController::new(layout)?.recover())
}

/// The pending journal's identity, read-only: `_load` validates the whole
/// journal against the layout it names first.
fn inspect(root: &Path) -> Result<Json> {
    let (journal, _layout) = ExecutionTransaction::load(root)?;
    let field = |key: &str| journal.get(key).cloned().unwrap_or(Json::Null);
    Ok(Json::Object(json_object! {
        "id" => field("id"),
        "scope" => field("scope"),
        "phase" => field("phase"),
        "operation_id" => maintenance_operation_id(&journal)?,
    }))
}

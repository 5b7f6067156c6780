//! `execution-manage`: explicit gateway/worker activation and recovery for
//! support staff (the port of `execution_manage.py`).

mod cli;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use agents_common::{
    encode_line, exit_status, json_object, maintenance_operation_id, not_implemented,
    parse_command_line, ExecutionTransaction, Json, Result,
};

use cli::{Args, PROGRAM, SPEC};

fn main() -> ExitCode {
    let args = Args::from_parsed(&parse_command_line(&SPEC));
    exit_status(run(args))
}

fn run(args: Args) -> Result<()> {
    let result = match args {
        Args::Apply { .. } => not_implemented(PROGRAM, "apply"),
        Args::Recover { .. } => not_implemented(PROGRAM, "recover"),
        Args::Inspect { root } => inspect(&root)?,
    };
    // json.dumps(result, sort_keys=True) and print's newline.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", encode_line(&result, true))?;
    stdout.flush()?;
    Ok(())
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

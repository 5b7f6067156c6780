//! `execution-activation`: the split gateway/worker service operations that
//! install.sh runs during activation and rollback (the port of
//! `execution_activation.py`).

mod cli;

use std::process::ExitCode;

use agents_common::{exit_status, not_implemented, parse_command_line, Result};

use cli::{Args, PROGRAM, SPEC};

fn main() -> ExitCode {
    let args = Args::from_parsed(&parse_command_line(&SPEC));
    exit_status(run(args))
}

fn run(args: Args) -> Result<()> {
    not_implemented(PROGRAM, args.operation.word())
}

//! `update-handoff`: releases a split worker's sealed maintenance handoff
//! after a failed update, before the installer runs (the port of
//! `update_handoff.py`).

mod cli;

use std::process::ExitCode;

use agents_common::{exit_status, not_implemented, parse_command_line, Result};

use cli::{Args, PROGRAM, SPEC};

fn main() -> ExitCode {
    let args = Args::from_parsed(&parse_command_line(&SPEC));
    exit_status(run(args))
}

fn run(args: Args) -> Result<()> {
    not_implemented(PROGRAM, args.operation())
}

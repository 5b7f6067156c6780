//! `update-runner`: downloads, verifies and installs an AgentsServer release
//! for a managed update (the port of `update_runner.py`).

mod cli;

use std::process::ExitCode;

use agents_common::{exit_status, not_implemented, parse_command_line, Result};

use cli::{Args, PROGRAM, SPEC};

fn main() -> ExitCode {
    let args = Args::from_parsed(&parse_command_line(&SPEC));
    exit_status(run(args))
}

fn run(args: Args) -> Result<()> {
    if args.recover_only {
        not_implemented(PROGRAM, "recovery")
    }
    not_implemented(PROGRAM, "update")
}

//! `update-handoff`: parses the command line and runs it (see the library
//! crate).

use std::process::ExitCode;

use python_compat::{argparse::parse_command_line, exit_status};
use update_handoff::{run, Args, SPEC};

fn main() -> ExitCode {
    exit_status(run(Args::from_parsed(&parse_command_line(&SPEC))))
}

//! `update-runner`: parses the server's command line and runs the update
//! (see the library crate); the row it writes is the result, the exit status
//! only informational.

use std::process::ExitCode;

use python_compat::argparse::parse_command_line;
use update_runner::{run, Args, SPEC};

fn main() -> ExitCode {
    if run(&Args::from_parsed(&parse_command_line(&SPEC))) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

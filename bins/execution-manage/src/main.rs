//! `execution-manage`: parses the support command line and runs it (see the
//! library crate).

use std::process::ExitCode;

use agents_common::{exit_status, parse_command_line};
use execution_manage::{run, Args, SPEC};

fn main() -> ExitCode {
    exit_status(run(Args::from_parsed(&parse_command_line(&SPEC))))
}

//! `execution-activation`: parses install.sh's command line and runs the
//! operation (see the library crate).

use std::process::ExitCode;

use agents_common::{exit_status, parse_command_line};
use execution_activation::{run, Args, SPEC};

fn main() -> ExitCode {
    exit_status(run(Args::from_parsed(&parse_command_line(&SPEC))))
}

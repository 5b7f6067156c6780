//! `execution-activation`: parses install.sh's command line and runs the
//! operation (see the library crate).

use std::process::ExitCode;

use execution_activation::{run, Args, SPEC};
use python_compat::{argparse::parse_command_line, exit_status};

fn main() -> ExitCode {
    exit_status(run(Args::from_parsed(&parse_command_line(&SPEC))))
}

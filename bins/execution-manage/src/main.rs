//! `execution-manage`: the support command line (see the library crate).

use std::process::ExitCode;

fn main() -> ExitCode {
    execution_manage::run(&std::env::args_os().collect::<Vec<_>>())
}

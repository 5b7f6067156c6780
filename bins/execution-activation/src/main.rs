//! `execution-activation`: install.sh's activation helper (see the library
//! crate).

use std::process::ExitCode;

fn main() -> ExitCode {
    execution_activation::run(&std::env::args_os().collect::<Vec<_>>())
}

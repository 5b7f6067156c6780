//! `update-runner`: the server's detached update runner (see the library
//! crate); the row it writes is the result, the exit status only
//! informational.

use std::process::ExitCode;

fn main() -> ExitCode {
    update_runner::run(&std::env::args_os().collect::<Vec<_>>())
}

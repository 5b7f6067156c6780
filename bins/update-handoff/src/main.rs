//! `update-handoff`: releases a split worker's sealed handoff (see the
//! library crate).

use std::process::ExitCode;

fn main() -> ExitCode {
    update_handoff::run(&std::env::args_os().collect::<Vec<_>>())
}

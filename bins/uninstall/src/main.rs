//! `uninstall`: `uninstall.sh`'s command line, or the split helper's when
//! the words are its path options (see the library crate).

use std::process::ExitCode;

fn main() -> ExitCode {
    uninstall::run(&std::env::args_os().collect::<Vec<_>>())
}

//! `uninstall`: `uninstall.sh`'s command line, or the split helper's when
//! the words are its path options (see the library crate).

use std::ffi::OsString;
use std::process::ExitCode;

use python_compat::argparse::parse_command_line;
use uninstall::{is_helper_form, run_helper, run_script, HELPER_SPEC};

fn main() -> ExitCode {
    let words: Vec<OsString> = std::env::args_os().skip(1).collect();
    if is_helper_form(&words) {
        return ExitCode::from(run_helper(&parse_command_line(&HELPER_SPEC)));
    }
    ExitCode::from(run_script(&words))
}

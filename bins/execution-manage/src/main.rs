//! `execution-manage`: parses the support command line and runs it (see the
//! library crate). `doctor` as the first word has its own parser; every
//! other command line goes to the seed-compatible one unchanged.

use std::ffi::OsString;
use std::process::ExitCode;

use execution_manage::{doctor, run, Args, SPEC};
use python_compat::{argparse::parse_command_line, exit_status};

fn main() -> ExitCode {
    let words: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some(rest) = doctor::doctor_words(&words) {
        return doctor::main(rest);
    }
    exit_status(run(Args::from_parsed(&parse_command_line(&SPEC))))
}

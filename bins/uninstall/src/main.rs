//! `uninstall`: removes a legacy or split AgentsServer installation, keeping
//! its state unless purged (the port of `uninstall.sh` and
//! `execution_uninstall.py`).

mod cli;

use std::ffi::OsString;
use std::process::ExitCode;

use agents_common::{exit_status, not_implemented, Result};

use cli::{Args, PROGRAM};

fn main() -> ExitCode {
    let words: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = cli::parse(|name| std::env::var_os(name), &words).unwrap_or_else(|exit| exit.exit());
    exit_status(run(args))
}

fn run(_args: Args) -> Result<()> {
    not_implemented(PROGRAM, "uninstall")
}

//! `uninstall`: the port of `uninstall.sh` and of the split-layout helper
//! it hands over to (`execution_uninstall.py`), as one executable.
//!
//! Without path options it is the script: roots from the environment,
//! refused when unsafe (exit 2), then either the legacy single-service
//! uninstall or, when the install root holds `execution-layout.json`, the
//! idle-only split uninstall with the script's roots. With `--root` and the
//! other path options it is the split helper itself.

mod command_line;
mod legacy;
mod output;
mod roots;
mod signals;
mod terminal;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use command_line::{is_helper_form, parse_script_options, usage, ScriptOptions};
use output::warn;

fn main() -> ExitCode {
    let words: Vec<OsString> = std::env::args_os().skip(1).collect();
    if is_helper_form(&words) {
        let _arguments = agents_common::parse_command_line(&command_line::HELPER_SPEC);
        return ExitCode::from(split_unavailable());
    }
    ExitCode::from(run_script(&words))
}

/// `uninstall.sh` from its first line to its hand-over or legacy path.
fn run_script(words: &[OsString]) -> u8 {
    let roots = match roots::managed_roots(&roots::ProcessEnvironment) {
        Ok(roots) => roots,
        Err(refusal) => {
            warn(&[&refusal.message]);
            return refusal.status;
        }
    };
    let state = roots.state.as_os_str().as_bytes();
    let (assume_yes, purge_state) = match parse_script_options(words) {
        ScriptOptions::Run {
            assume_yes,
            purge_state,
        } => (assume_yes, purge_state),
        ScriptOptions::Help => {
            output::prompt_stdout(&usage(state));
            return 0;
        }
        ScriptOptions::Unknown(word) => {
            warn(&[b"Unknown option: ", word.as_bytes()]);
            output::prompt_stderr(&usage(state));
            return 2;
        }
    };
    let manifest = roots.install.join(agents_common::LAYOUT_NAME);
    if std::fs::symlink_metadata(&manifest).is_ok_and(|meta| meta.file_type().is_file()) {
        return split_unavailable();
    }
    legacy::run(
        &roots,
        legacy::Options {
            assume_yes,
            purge_state,
        },
        &mut legacy::RealHost,
    )
}

/// The script's refusal when it cannot run the split helper.
fn split_unavailable() -> u8 {
    warn(&[b"Cannot uninstall the separate gateway/execution layout: its maintained Python helper is unavailable; no services were changed."]);
    1
}

//! `uninstall`: the port of `uninstall.sh` and of the split-layout helper
//! it hands over to (`execution_uninstall.py`), as one executable.
//!
//! Without path options it is the script: roots from the environment,
//! refused when unsafe (exit 2), then either the legacy single-service
//! uninstall or, when the install root holds `execution-layout.json`, the
//! idle-only split uninstall with the script's roots. With `--root` and the
//! other path options it is the split helper itself.
//!
//! # Map by concern
//!
//! - `command_line`: the two command-line forms; `roots`: the three managed
//!   roots and the refusal of unsafe ones.
//! - `legacy`: the single-service uninstall of `uninstall.sh`; `split`: the
//!   idle-only split uninstall of `execution_uninstall.py`.
//! - The script's terminal behaviour: `terminal` (confirmation), `signals`
//!   (its `trap`), `output` (its `echo`).

mod command_line;
mod legacy;
mod output;
mod roots;
mod signals;
mod split;
mod terminal;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use python_compat::argparse::parse_argv;

use command_line::{parse_script_options, usage, ScriptOptions};
use output::warn;

pub use command_line::{is_helper_form, HELPER_SPEC};

/// The helper as a process: `argv` (the program's name first) is the split
/// helper's command line when its words are the helper's path options
/// (parsed as the original's argparse does), and `uninstall.sh`'s otherwise;
/// the exit status is the script's or the helper's.
pub fn run(argv: &[OsString]) -> ExitCode {
    let words = argv.get(1..).unwrap_or_default();
    let status = if is_helper_form(words) {
        run_helper(&parse_argv(&HELPER_SPEC, argv))
    } else {
        run_script(words)
    };
    ExitCode::from(status)
}

/// The split helper's form (`--root ...`) with its parsed command line: its
/// exit status.
fn run_helper(parsed: &python_compat::argparse::ParsedArgs) -> u8 {
    split::main(&split_args(parsed))
}

/// The helper's typed arguments from its parsed command line.
fn split_args(parsed: &python_compat::argparse::ParsedArgs) -> split::SplitArgs {
    let path = |long: &str| {
        parsed
            .path(long)
            .expect("argparse requires every path option")
            .to_path_buf()
    };
    split::SplitArgs {
        paths: split::Paths {
            root: path("root"),
            config_root: path("config-root"),
            state_root: path("state-root"),
            home: path("home"),
        },
        assume_yes: parsed.flag("yes"),
        purge_state: parsed.flag("purge-state"),
    }
}

/// The script's hand-over to the split helper: its command line, built from
/// the normalised roots and the raw `HOME`, parsed as the helper parses it.
fn hand_over(roots: &roots::ManagedRoots, assume_yes: bool, purge_state: bool) -> u8 {
    let mut words: Vec<OsString> = vec![
        "--root".into(),
        roots.install.clone().into(),
        "--config-root".into(),
        roots.config.clone().into(),
        "--state-root".into(),
        roots.state.clone().into(),
        "--home".into(),
        roots.home.clone().into(),
    ];
    if assume_yes {
        words.push("--yes".into());
    }
    if purge_state {
        words.push("--purge-state".into());
    }
    match python_compat::argparse::try_parse_command_line(&command_line::HELPER_SPEC, &words) {
        Ok(parsed) => split::main(&split_args(&parsed)),
        Err(exit) => exit.exit(),
    }
}

/// `uninstall.sh` from its first line to its hand-over or legacy path: its
/// exit status.
fn run_script(words: &[OsString]) -> u8 {
    let os = match legacy::os_name() {
        Ok(os) => os,
        Err(legacy::Exit(status)) => return status,
    };
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
    // The split layout is handed over while its manifest is a regular file
    // (uninstall.sh's `-f` and not `-L`), and also once the manifest is gone
    // but the retained intent proves a split removal that was killed at its
    // very end; uninstall.sh would run its legacy path there. Anything else
    // (a FIFO in the manifest's place, an intent that proves nothing) goes
    // the original's way.
    let manifest = std::fs::symlink_metadata(roots.install.join(agents_common::LAYOUT_NAME));
    let split = match manifest {
        Ok(meta) => meta.file_type().is_file(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            matches!(
                agents_common::read_interrupted_removal(&roots.install),
                Ok(Some(_))
            )
        }
        Err(_) => false,
    };
    if split {
        return hand_over(&roots, assume_yes, purge_state);
    }
    legacy::run(
        &roots,
        legacy::Options {
            assume_yes,
            purge_state,
        },
        &os,
        &mut legacy::RealHost,
    )
}

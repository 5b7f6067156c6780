//! The split (gateway + worker) uninstall: `execution_uninstall.main`.
//!
//! Provenance is checked before any prompt; the purge guard (typed state
//! path at a terminal, never bypassed by `--yes`) comes before the `[y/N]`
//! confirmation; every failure is one `Cannot uninstall the separate
//! gateway/execution layout: <message>` line on stderr and status 1, except
//! those `main` does not catch (a `TypeError`), whose traceback's last line
//! it is.
//!
//! Python's `input()` is followed: the prompt goes to stderr when stdin and
//! stdout are both terminals, else to stdout; only the newline is stripped.
//! End of input at a prompt ends the run with status 1 and an `EOFError`
//! line (Python prints a traceback there).

mod algorithm;
mod checks;
#[cfg(test)]
mod launchd_tests;
mod native;

use std::os::unix::ffi::OsStrExt;

use agents_common::{
    installed_layout, no_activation, normalize_path, read_interrupted_removal, Error,
};
use python_compat::ErrorClass;

pub(crate) use algorithm::{uninstall, Failure, Paths};
pub(crate) use native::native_services;

use crate::output::{prompt_stderr, prompt_stdout, say, warn};
use crate::signals;
use crate::terminal::{read_raw_line, stdin_is_terminal, RawLine};

/// The helper's arguments (paths as argparse's `type=Path` made them).
#[derive(Debug, Clone)]
pub(crate) struct SplitArgs {
    /// `--root`, `--config-root`, `--state-root`, `--home`.
    pub paths: Paths,
    /// `--yes`.
    pub assume_yes: bool,
    /// `--purge-state`.
    pub purge_state: bool,
}

/// Why a prompt did not yield an answer.
enum NoAnswer {
    Error(Error),
    EndOfInput,
    Interrupted,
}

/// Runs the split uninstall and returns the exit status.
pub(crate) fn main(args: &SplitArgs) -> u8 {
    signals::trap_interrupt();
    let outcome = confirm(args).and_then(|()| {
        uninstall(&args.paths, args.purge_state, &|layout| {
            native_services(layout)
        })
        .map_err(|failure| match failure {
            Failure::Error(error) => NoAnswer::Error(error),
            Failure::Interrupted => NoAnswer::Interrupted,
        })
    });
    match outcome {
        Ok(removed) => {
            say(&[b"AgentsServer gateway, execution service, release runtime and configuration removed."]);
            if removed.state_preserved {
                say(&[
                    b"Preserved chat history, jobs, files, Team Hub state and secure-peer credentials at ",
                    removed.state_root.as_os_str().as_bytes(),
                ]);
            }
            say(&[b"Persistent chat terminals remain independent and were not stopped."]);
            0
        }
        // `except (OSError, ValueError, RuntimeError)`: anything else (a
        // `TypeError` of a layout field that is no path) ends in Python's
        // traceback, whose last line is the exception's.
        Err(NoAnswer::Error(error)) if !reported_by_main(&error) => {
            warn(&[error.python_line().as_bytes()]);
            1
        }
        Err(NoAnswer::Error(error)) => {
            warn(&[
                b"Cannot uninstall the separate gateway/execution layout: ",
                error.message().as_bytes(),
            ]);
            1
        }
        Err(NoAnswer::EndOfInput) => {
            warn(&[b"EOFError: EOF when reading a line"]);
            1
        }
        Err(NoAnswer::Interrupted) => {
            warn(&[b"KeyboardInterrupt"]);
            signals::die_of_interrupt()
        }
    }
}

/// Whether `execution_uninstall.main` catches the error to print its one
/// `Cannot uninstall ...` line.
fn reported_by_main(error: &Error) -> bool {
    [ErrorClass::Os, ErrorClass::Value, ErrorClass::Runtime]
        .into_iter()
        .any(|class| error.is_a(class))
}

/// Provenance, then the purge guard, then the confirmation. An uninstall
/// killed while removing files proves its provenance with its retained
/// intent instead, as its installed layout may be partly gone.
fn confirm(args: &SplitArgs) -> Result<(), NoAnswer> {
    let provenance = no_activation(&args.paths.root)
        .and_then(|()| normalize_path(&args.paths.root))
        .and_then(|root| {
            installed_layout(&root).map(|_| ()).or_else(|err| {
                match read_interrupted_removal(&root) {
                    Ok(Some(_intent)) => Ok(()),
                    _ => Err(err),
                }
            })
        });
    provenance.map_err(NoAnswer::Error)?;
    if args.purge_state {
        if !stdin_is_terminal() {
            return Err(NoAnswer::Error(Error::runtime(
                "Refusing to purge state without an interactive terminal; --yes never bypasses the \
                 state guard",
            )));
        }
        let state = args.paths.state_root.as_os_str().as_bytes();
        let prompt = [b"Type the exact state path to confirm (", state, b"): "].concat();
        if python_input(&prompt)? != state {
            return Err(NoAnswer::Error(Error::runtime(
                "State path did not match; nothing was changed",
            )));
        }
    }
    if !args.assume_yes {
        let confirmed = stdin_is_terminal() && {
            let reply =
                python_input(b"Remove both idle services, runtime and configuration? [y/N] ")?;
            let reply = String::from_utf8_lossy(&reply).to_lowercase();
            reply == "y" || reply == "yes"
        };
        if !confirmed {
            return Err(NoAnswer::Error(Error::runtime(
                "Uninstall was not confirmed; nothing was changed",
            )));
        }
    }
    Ok(())
}

/// `input(prompt)`: the line without its newline.
fn python_input(prompt: &[u8]) -> Result<Vec<u8>, NoAnswer> {
    let stdout_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    if stdin_is_terminal() && stdout_terminal {
        prompt_stderr(prompt);
    } else {
        prompt_stdout(prompt);
    }
    match read_raw_line() {
        RawLine::Complete(line) => Ok(line),
        RawLine::Ended(line) if !line.is_empty() => Ok(line),
        RawLine::Ended(_) => Err(NoAnswer::EndOfInput),
        RawLine::Interrupted => Err(NoAnswer::Interrupted),
    }
}

//! doctor's own command line. `doctor` is recognised as the first word
//! before the original-compatible parser runs, so that parser's usage, help and
//! choices stay exactly `execution_manage.py`'s; doctor has its own usage
//! and help, in the same argparse style.

use std::ffi::OsString;
use std::path::PathBuf;

use python_compat::argparse::{CommandSpec, OptionSpec, ParsedArgs, ValueKind};

use super::concern::ConcernId;

/// The word that selects doctor.
pub(super) const WORD: &str = "doctor";

/// `execution-manage doctor`'s parser.
pub static DOCTOR_SPEC: CommandSpec = CommandSpec {
    name: "execution-manage doctor",
    summary: "",
    description: "Reports, strictly read-only, what is stuck in an installation and the exact \
                  command that resolves it: the install lock, install.sh's activation journal, \
                  an explicit activation's transaction, the uninstall intent, update \
                  preparations and handoffs, the server's update status and its runner, the \
                  native services against their receipts, and the installed layout with its \
                  current link. Takes no lock and writes nothing.\n\n\
                  After the summary it prints one numbered plan: run its steps in order, \
                  exactly as printed, running doctor again after each.\n\n\
                  Exit status: 0 when every concern is healthy or absent, 1 when the plan has \
                  a step to take (a command, an instruction, or contacting engineering), 2 on \
                  a usage error, 3 when the plan only waits for an owner that still runs.\n\n\
                  The words the report uses (receipt, admission lease, sealed hold, handoff, \
                  journal, recovery owner) are explained in docs/glossary.md of the helpers' \
                  source.",
    positional: None,
    options: &[
        OptionSpec {
            long: "root",
            kind: ValueKind::Path,
            required: true,
            help: "installation root to examine",
        },
        OptionSpec {
            long: "state-dir",
            kind: ValueKind::Path,
            required: false,
            help: "state directory holding admin/server-update.json (default: the installed \
                   layout's, else the server's environment, else ~/.agentsdock)",
        },
        OptionSpec {
            long: "concern",
            kind: ValueKind::Choice(&ConcernId::KEYS),
            required: false,
            help: "report only this concern and the plan's steps for it (its exit status too)",
        },
        OptionSpec {
            long: "json",
            kind: ValueKind::Flag,
            required: false,
            help: "print one JSON document instead of the human report",
        },
    ],
    subcommands: &[],
};

/// doctor's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorArgs {
    /// `--root`.
    pub root: PathBuf,
    /// `--state-dir`, if given.
    pub state_dir: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
    /// `--concern`: only this concern.
    pub concern: Option<ConcernId>,
}

impl DoctorArgs {
    /// Types the parsed command line.
    pub fn from_parsed(parsed: &ParsedArgs) -> DoctorArgs {
        DoctorArgs {
            root: parsed.path("root").expect("required").to_path_buf(),
            state_dir: parsed.path("state-dir").map(PathBuf::from),
            json: parsed.flag("json"),
            concern: parsed.text("concern").and_then(ConcernId::from_key),
        }
    }
}

/// The words after `doctor` when `words` (the arguments after the program
/// name) select doctor; `None` leaves them to the original's parser.
pub fn doctor_words(words: &[OsString]) -> Option<&[OsString]> {
    match words.split_first() {
        Some((first, rest)) if first == WORD => Some(rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use python_compat::argparse::{try_parse_command_line, CommandLineExit};

    fn parse(words: &[&str]) -> Result<DoctorArgs, CommandLineExit> {
        try_parse_command_line(&DOCTOR_SPEC, words).map(|parsed| DoctorArgs::from_parsed(&parsed))
    }

    #[test]
    fn only_the_first_word_selects_doctor() {
        let words = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            doctor_words(&words(&["doctor", "--root", "/r"])),
            Some(&words(&["--root", "/r"])[..])
        );
        for other in [
            &["inspect", "doctor"][..],
            &["--", "doctor"],
            &["Doctor"],
            &["doc"],
            &[],
        ] {
            assert_eq!(doctor_words(&words(other)), None, "{other:?}");
        }
    }

    #[test]
    fn options_in_argparse_forms() {
        assert_eq!(
            parse(&["--root", "/i/", "--json"]).unwrap(),
            DoctorArgs {
                root: "/i".into(),
                state_dir: None,
                json: true,
                concern: None,
            }
        );
        assert_eq!(
            parse(&["--st=/s", "--r", "/i"]).unwrap(),
            DoctorArgs {
                root: "/i".into(),
                state_dir: Some("/s".into()),
                json: false,
                concern: None,
            }
        );
    }

    const USAGE: &str = "usage: execution-manage doctor [-h] --root ROOT [--state-dir STATE_DIR]\n\
        \x20                              [--concern {install_lock,activation_journal,execution_transaction,uninstall_intent,update_preparations,update_status,services,layout}]\n\
        \x20                              [--json]\n";

    #[test]
    fn an_unknown_concern_is_a_usage_error() {
        assert_eq!(
            parse(&["--root", "/r", "--concern", "layout"])
                .unwrap()
                .concern,
            Some(ConcernId::Layout)
        );
        match parse(&["--root", "/r", "--concern", "lock"]) {
            Err(CommandLineExit::Usage(text)) => assert!(
                text.ends_with("argument --concern: invalid choice: 'lock' (choose from 'install_lock', 'activation_journal', 'execution_transaction', 'uninstall_intent', 'update_preparations', 'update_status', 'services', 'layout')\n"),
                "{text}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_and_help_are_doctors_own() {
        match parse(&[]) {
            Err(CommandLineExit::Usage(text)) => assert_eq!(
                text,
                format!(
                    "{USAGE}execution-manage doctor: error: the following arguments are \
                     required: --root\n"
                )
            ),
            other => panic!("{other:?}"),
        }
        match parse(&["-h"]) {
            Err(CommandLineExit::Help(text)) => {
                assert!(text.starts_with(&format!("{USAGE}\nReports, strictly read-only,")));
                assert!(text.contains("  --json "), "{text}");
            }
            other => panic!("{other:?}"),
        }
        match parse(&["--root", "/r", "extra"]) {
            Err(CommandLineExit::Usage(text)) => {
                assert!(text
                    .ends_with("execution-manage doctor: error: unrecognized arguments: extra\n"))
            }
            other => panic!("{other:?}"),
        }
    }
}

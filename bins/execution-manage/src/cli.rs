//! execution-manage's command line: `execution_manage.py`'s argparse parser
//! with its three subcommands.

use std::path::PathBuf;

use python_compat::argparse::{CommandSpec, OptionSpec, ParsedArgs, ValueKind};

use crate::scope::Scope;

/// The program name in usage and error lines.
pub(crate) const PROGRAM: &str = "execution-manage";

/// The activation scopes `apply` accepts, in the original's `choices=` order.
const SCOPES: &[&str] = &["migration", "gateway", "worker"];

const ROOT: OptionSpec = OptionSpec {
    long: "root",
    kind: ValueKind::Path,
    required: true,
    help: "installation root holding the pending .execution-transaction",
};

/// The parser, subcommand for subcommand as the original declares it.
pub static SPEC: CommandSpec = CommandSpec {
    name: PROGRAM,
    summary: "",
    description: "Explicit activation and recovery of the separately managed gateway and \
                  worker services, serialized with install.sh's installation lock. apply and \
                  recover change services and files; inspect only reads.",
    positional: None,
    options: &[],
    subcommands: &[
        CommandSpec {
            name: "apply",
            summary: "activate a layout for one scope",
            description: "Stages, publishes and verifies the execution layout written in \
                          --layout for the given scope, rolling back on failure.",
            positional: None,
            options: &[
                OptionSpec {
                    long: "layout",
                    kind: ValueKind::Path,
                    required: true,
                    help: "private JSON file holding the layout to activate",
                },
                OptionSpec {
                    long: "scope",
                    kind: ValueKind::Choice(SCOPES),
                    required: true,
                    help: "which services the activation replaces",
                },
            ],
            subcommands: &[],
        },
        CommandSpec {
            name: "recover",
            summary: "finish or roll back a pending activation",
            description: "Recovers the pending execution activation of --root.",
            positional: None,
            options: &[ROOT],
            subcommands: &[],
        },
        CommandSpec {
            name: "inspect",
            summary: "print the pending activation (read-only)",
            description: "Prints the id, scope, phase and maintenance operation id of the \
                          pending execution activation of --root as one JSON line.",
            positional: None,
            options: &[ROOT],
            subcommands: &[],
        },
    ],
};

/// The operation and its arguments. Paths are `pathlib.Path` values, as the
/// original's `type=Path` makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// `apply`: activate a layout for one scope.
    Apply {
        /// `--layout`: the private JSON file holding the layout to activate.
        layout: PathBuf,
        /// `--scope`: which services the activation replaces.
        scope: Scope,
    },
    /// `recover`: finish or roll back a pending activation.
    Recover {
        /// `--root`: the installation root.
        root: PathBuf,
    },
    /// `inspect`: print the pending activation (read-only).
    Inspect {
        /// `--root`: the installation root.
        root: PathBuf,
    },
}

impl Args {
    /// Types the parsed command line.
    pub fn from_parsed(parsed: &ParsedArgs) -> Args {
        let path = |long| PathBuf::from(parsed.path(long).expect("required by the parser"));
        match parsed.subcommand() {
            Some("apply") => Args::Apply {
                layout: path("layout"),
                // argparse's `choices=` admitted only a scope's name.
                scope: Scope::parse(parsed.text("scope").expect("required"))
                    .expect("a declared choice"),
            },
            Some("recover") => Args::Recover { root: path("root") },
            Some("inspect") => Args::Inspect { root: path("root") },
            other => panic!("the parser admits only declared subcommands, not {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use python_compat::argparse::{try_parse_command_line, CommandLineExit};

    fn parse(words: &[&str]) -> Result<Args, CommandLineExit> {
        try_parse_command_line(&SPEC, words).map(|parsed| Args::from_parsed(&parsed))
    }

    fn usage_error(words: &[&str]) -> String {
        match parse(words) {
            Err(CommandLineExit::Usage(text)) => text,
            other => panic!("{words:?} gave {other:?}"),
        }
    }

    // Expected values: vars(parser.parse_args(argv)) of the original's parser.
    #[test]
    fn subcommands_in_both_forms() {
        assert_eq!(
            parse(&["apply", "--layout", "/l.json", "--scope", "gateway"]).unwrap(),
            Args::Apply {
                layout: "/l.json".into(),
                scope: Scope::Gateway
            }
        );
        assert_eq!(
            parse(&["apply", "--scope=worker", "--layout=//x//l.json/"]).unwrap(),
            Args::Apply {
                layout: "//x/l.json".into(),
                scope: Scope::Worker
            }
        );
        assert_eq!(
            parse(&["recover", "--r", "/i/"]).unwrap(),
            Args::Recover { root: "/i".into() }
        );
        assert_eq!(
            parse(&["inspect", "--root="]).unwrap(),
            Args::Inspect { root: ".".into() }
        );
        assert_eq!(
            parse(&["inspect", "--root", "/a", "--root", "/b"]).unwrap(),
            Args::Inspect { root: "/b".into() }
        );
    }

    #[test]
    fn the_choices_are_the_scopes_in_order() {
        let names: Vec<&str> = Scope::ALL.iter().map(|scope| scope.as_str()).collect();
        assert_eq!(SCOPES, names.as_slice());
    }

    #[test]
    fn errors_name_the_parser_that_reports_them() {
        assert!(usage_error(&[])
            .ends_with("execution-manage: error: the following arguments are required: command\n"));
        assert!(usage_error(&["inspect"]).starts_with(
            "usage: execution-manage inspect [-h] --root ROOT\n\
             execution-manage inspect: error: the following arguments are required: --root\n"
        ));
        assert!(usage_error(&["inspect", "--root", "/r", "--bogus"])
            .ends_with("\nexecution-manage: error: unrecognized arguments: --bogus\n"));
        assert!(
            usage_error(&["apply", "--layout", "/l", "--scope", "w"]).ends_with(
                "execution-manage apply: error: argument --scope: invalid choice: 'w' \
             (choose from 'migration', 'gateway', 'worker')\n"
            )
        );
        assert!(usage_error(&["bogus"]).ends_with(
            "execution-manage: error: argument command: invalid choice: 'bogus' \
             (choose from 'apply', 'recover', 'inspect')\n"
        ));
    }

    #[test]
    fn help_of_the_subcommand_or_the_top() {
        match parse(&["inspect", "-h"]) {
            Err(CommandLineExit::Help(text)) => {
                assert!(text.starts_with("usage: execution-manage inspect [-h] --root ROOT\n"))
            }
            other => panic!("{other:?}"),
        }
        match parse(&["--he", "inspect"]) {
            Err(CommandLineExit::Help(text)) => assert!(
                text.starts_with("usage: execution-manage [-h] {apply,recover,inspect} ...\n")
            ),
            other => panic!("{other:?}"),
        }
    }
}

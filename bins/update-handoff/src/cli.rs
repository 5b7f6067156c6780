//! update-handoff's command line. `update_handoff.py` has no CLI of its own
//! (the update runner and the server import it); this surface exposes its two
//! entry points, `release_existing_handoff` and `retry_failed_handoff`, with
//! argparse conventions like the other helpers.

use std::path::PathBuf;

use python_compat::argparse::{CommandSpec, OptionSpec, ParsedArgs, ValueKind};

/// The program name in usage and error lines.
pub(crate) const PROGRAM: &str = "update-handoff";

const fn required(long: &'static str, kind: ValueKind, help: &'static str) -> OptionSpec {
    OptionSpec {
        long,
        kind,
        required: true,
        help,
    }
}

const ROOT: OptionSpec = required("root", ValueKind::Path, "installation root");

/// The parser: `release` and `retry-failed`.
pub static SPEC: CommandSpec = CommandSpec {
    name: PROGRAM,
    summary: "",
    description: "Releases a split worker's sealed maintenance handoff once its update has \
                  failed before the installer ran, after proving the worker is unchanged and \
                  idle. It never stops processes, changes update status or deletes evidence. \
                  On success it prints one JSON object with the sorted keys \
                  already_released, operation_id, released and worker_instance_id, \
                  and exits 0. Any refusal prints one line (the Python exception class \
                  and message) on standard error, exits 1 and changes nothing.\n\n\
                  release --root DIR --handoff-file FILE: release the handoff FILE (inside \
                  DIR/.update-preparations) that a failed update left held.\n\n\
                  retry-failed --root DIR --status-file FILE --expected-status FILE_OR_-: \
                  finish the release a failed update recorded in its status FILE, but only \
                  while that file still equals the JSON status read from FILE_OR_- ('-' reads \
                  it from standard input); also succeeds when the worker already released it.",
    positional: None,
    options: &[],
    subcommands: &[
        CommandSpec {
            name: "release",
            summary: "release a failed update's held handoff",
            description: "Releases the handoff FILE that a failed update left held, after \
                          proving the native worker, its receipt and its authenticated \
                          health still match the handoff and the worker is idle.",
            positional: None,
            options: &[
                ROOT,
                required(
                    "handoff-file",
                    ValueKind::Path,
                    "DIR/.update-preparations/<id>/handoff-<id>.json",
                ),
            ],
            subcommands: &[],
        },
        CommandSpec {
            name: "retry-failed",
            summary: "finish the release a failed status records",
            description: "Finishes the handoff release recorded in a failed update's status \
                          file while that file is unchanged from --expected-status \
                          ('-' reads the expected status JSON from standard input).",
            positional: None,
            options: &[
                ROOT,
                required(
                    "status-file",
                    ValueKind::Path,
                    "the installation's server-update.json",
                ),
                required(
                    "expected-status",
                    ValueKind::RawPath,
                    "file holding the expected status JSON, or - for standard input",
                ),
            ],
            subcommands: &[],
        },
    ],
};

/// Where the expected status JSON comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusSource {
    /// `-`: standard input.
    Stdin,
    /// A file (the path exactly as given).
    File(PathBuf),
}

/// The operation and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// `release`: release a failed update's held handoff.
    Release {
        /// `--root`: the installation root.
        root: PathBuf,
        /// `--handoff-file`: the sealed handoff.
        handoff_file: PathBuf,
    },
    /// `retry-failed`: finish the release a failed status records.
    RetryFailed {
        /// `--root`: the installation root.
        root: PathBuf,
        /// `--status-file`: the installation's `server-update.json`.
        status_file: PathBuf,
        /// `--expected-status`: the expected status JSON, from a file or
        /// standard input.
        expected_status: StatusSource,
    },
}

impl Args {
    /// Types the parsed command line.
    pub fn from_parsed(parsed: &ParsedArgs) -> Args {
        let path = |long| PathBuf::from(parsed.path(long).expect("required by the parser"));
        match parsed.subcommand() {
            Some("release") => Args::Release {
                root: path("root"),
                handoff_file: path("handoff-file"),
            },
            Some("retry-failed") => Args::RetryFailed {
                root: path("root"),
                status_file: path("status-file"),
                expected_status: match path("expected-status") {
                    stdin if stdin.as_os_str() == "-" => StatusSource::Stdin,
                    file => StatusSource::File(file),
                },
            },
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

    #[test]
    fn both_subcommands_in_both_forms() {
        let release = Args::Release {
            root: "/i".into(),
            handoff_file: "/i/.update-preparations/a/handoff-a.json".into(),
        };
        assert_eq!(
            parse(&[
                "release",
                "--root",
                "/i",
                "--handoff-file",
                "/i/.update-preparations/a/handoff-a.json"
            ])
            .unwrap(),
            release
        );
        assert_eq!(
            parse(&[
                "release",
                "--handoff=/i/.update-preparations/a/handoff-a.json",
                "--ro=/i/"
            ])
            .unwrap(),
            release
        );
        assert_eq!(
            parse(&[
                "retry-failed",
                "--root",
                "/i",
                "--status-file",
                "/s/admin/server-update.json",
                "--expected-status",
                "-"
            ])
            .unwrap(),
            Args::RetryFailed {
                root: "/i".into(),
                status_file: "/s/admin/server-update.json".into(),
                expected_status: StatusSource::Stdin,
            }
        );
        assert_eq!(
            parse(&[
                "retry-failed",
                "--root=/i",
                "--status-file=/s",
                "--expected-status=./saved.json"
            ])
            .unwrap(),
            Args::RetryFailed {
                root: "/i".into(),
                status_file: "/s".into(),
                expected_status: StatusSource::File("./saved.json".into()),
            }
        );
    }

    #[test]
    fn refusals_are_usage_errors() {
        for words in [
            &[][..],
            &["release", "--root", "/i"],
            &["release", "--h", "x"],
            &["retry-failed", "--root", "/i", "--status-file", "/s"],
            &[
                "retry-failed",
                "--root",
                "/i",
                "--status-file",
                "/s",
                "--expected-status",
            ],
            &["release", "--root", "/i", "--handoff-file", "/h", "--bogus"],
            &["retry", "--root", "/i"],
        ] {
            assert!(
                matches!(parse(words), Err(CommandLineExit::Usage(_))),
                "{words:?}"
            );
        }
    }

    #[test]
    fn help_documents_both_subcommands() {
        let Err(CommandLineExit::Help(text)) = parse(&["--help"]) else {
            panic!("--help must print help");
        };
        for needle in [
            "release --root DIR --handoff-file FILE",
            "retry-failed --root DIR --status-file FILE",
            "--expected-status FILE_OR_-",
            "already_released",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }
}

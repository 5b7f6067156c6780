//! execution-activation's command line: `execution_activation.py`'s argparse
//! parser (the operation word and its options, with the original's defaults).

use std::path::PathBuf;

use agents_common::PlatformName;
use python_compat::argparse::{CommandSpec, OptionSpec, ParsedArgs, PositionalSpec, ValueKind};

/// The program name in usage and error lines.
pub(crate) const PROGRAM: &str = "execution-activation";

/// The operations install.sh runs, in the original's `choices=` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Detect,
    Snapshot,
    CandidateApiContract,
    Preflight,
    Durability,
    Publish,
    Stop,
    Start,
    Suppress,
    Restore,
    Verify,
    VerifyRestored,
    PreviousWorker,
    Release,
    RecoveryState,
}

impl Operation {
    /// Every operation with its command-line word, in the original's order.
    pub const ALL: [(Operation, &'static str); 15] = [
        (Operation::Detect, "detect"),
        (Operation::Snapshot, "snapshot"),
        (Operation::CandidateApiContract, "candidate-api-contract"),
        (Operation::Preflight, "preflight"),
        (Operation::Durability, "durability"),
        (Operation::Publish, "publish"),
        (Operation::Stop, "stop"),
        (Operation::Start, "start"),
        (Operation::Suppress, "suppress"),
        (Operation::Restore, "restore"),
        (Operation::Verify, "verify"),
        (Operation::VerifyRestored, "verify-restored"),
        (Operation::PreviousWorker, "previous-worker"),
        (Operation::Release, "release"),
        (Operation::RecoveryState, "recovery-state"),
    ];

    /// The command-line word.
    pub fn word(self) -> &'static str {
        Operation::ALL
            .iter()
            .find(|(operation, _)| *operation == self)
            .map(|(_, word)| *word)
            .expect("every operation has a word")
    }

    fn from_word(word: &str) -> Operation {
        Operation::ALL
            .iter()
            .find(|(_, known)| *known == word)
            .map(|(operation, _)| *operation)
            .unwrap_or_else(|| panic!("the parser admits only known operations, not {word:?}"))
    }
}

const CHOICES: [&str; 15] = {
    let mut words = [""; 15];
    let mut index = 0;
    while index < 15 {
        words[index] = Operation::ALL[index].1;
        index += 1;
    }
    words
};

const fn option(long: &'static str, kind: ValueKind, help: &'static str) -> OptionSpec {
    OptionSpec {
        long,
        kind,
        required: false,
        help,
    }
}

/// The parser, option for option as the original declares it.
pub static SPEC: CommandSpec = CommandSpec {
    name: PROGRAM,
    summary: "",
    description: "The split gateway/worker service operations that install.sh runs inside \
                  its own activation transaction and install lock. Mutating operations \
                  require that transaction; detect, snapshot, candidate-api-contract and \
                  preflight only read.",
    positional: Some(PositionalSpec {
        dest: "command",
        choices: &CHOICES,
        help: "the operation to run",
    }),
    options: &[
        OptionSpec {
            long: "root",
            kind: ValueKind::RawPath,
            required: true,
            help: "installation root",
        },
        option("config-root", ValueKind::RawPath, "configuration root"),
        option("state-root", ValueKind::RawPath, "state root"),
        option(
            "home",
            ValueKind::RawPath,
            "home directory holding the service definitions",
        ),
        option("platform", ValueKind::Text, "Linux or Darwin"),
        option(
            "release-dir",
            ValueKind::RawPath,
            "the release that runs both services",
        ),
        option("bind", ValueKind::Text, "public bind address"),
        option("port", ValueKind::Int, "public port"),
        option(
            "candidate-source",
            ValueKind::RawPath,
            "candidate release source tree",
        ),
        option(
            "release-version",
            ValueKind::Text,
            "candidate release version",
        ),
        option(
            "api-contract",
            ValueKind::Int,
            "candidate API contract (default 0)",
        ),
        option(
            "health-file",
            ValueKind::RawPath,
            "file holding the verified health reply",
        ),
        option(
            "update-file",
            ValueKind::RawPath,
            "the managed update's status file",
        ),
        option(
            "handoff-file",
            ValueKind::RawPath,
            "the split worker's sealed update handoff",
        ),
        option(
            "managed-update-id",
            ValueKind::Text,
            "the managed update being installed",
        ),
        option(
            "expected-native-pid",
            ValueKind::Int,
            "service PID the installer observed (default 0)",
        ),
        option(
            "expected-server-identity",
            ValueKind::Text,
            "stable identity of the server",
        ),
    ],
    subcommands: &[],
};

/// The arguments with the original's defaults applied: options without a default
/// stay `None` (the original passes `None` on), the others default to `""` or 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The operation (the positional word).
    pub operation: Operation,
    /// `--root`: the installation root.
    pub root: PathBuf,
    /// `--config-root`: the configuration root.
    pub config_root: Option<PathBuf>,
    /// `--state-root`: the state root.
    pub state_root: Option<PathBuf>,
    /// `--home`: the home directory holding the service definitions.
    pub home: Option<PathBuf>,
    /// `--platform`: `Linux` or `Darwin`; other text is kept for the step
    /// that refuses it (layout validation), as the original takes any string.
    pub platform: Option<PlatformName>,
    /// `--release-dir`: the release that runs both services.
    pub release_dir: Option<PathBuf>,
    /// `--bind`: the public bind address.
    pub bind: Option<String>,
    /// `--port`: the public port.
    pub port: Option<i128>,
    /// `--candidate-source`: the candidate release source tree.
    pub candidate_source: PathBuf,
    /// `--release-version`: the candidate release version.
    pub release_version: String,
    /// `--api-contract`: the candidate API contract (default 0).
    pub api_contract: i128,
    /// `--health-file`: the file holding the verified health reply.
    pub health_file: PathBuf,
    /// `--update-file`: the managed update's status file.
    pub update_file: PathBuf,
    /// `--handoff-file`: the split worker's sealed update handoff.
    pub handoff_file: PathBuf,
    /// `--managed-update-id`: the managed update being installed.
    pub managed_update_id: String,
    /// `--expected-native-pid`: the service PID the installer observed
    /// (default 0).
    pub expected_native_pid: i128,
    /// `--expected-server-identity`: the stable identity of the server.
    pub expected_server_identity: String,
}

impl Args {
    /// Types the parsed command line.
    pub fn from_parsed(parsed: &ParsedArgs) -> Args {
        let text = |long| parsed.text(long).map(str::to_string);
        let path = |long| parsed.path(long).map(PathBuf::from);
        Args {
            operation: Operation::from_word(
                parsed.positional().expect("the operation is required"),
            ),
            root: path("root").expect("--root is required"),
            config_root: path("config-root"),
            state_root: path("state-root"),
            home: path("home"),
            platform: parsed.text("platform").map(PlatformName::parse),
            release_dir: path("release-dir"),
            bind: text("bind"),
            port: parsed.int("port"),
            candidate_source: path("candidate-source").unwrap_or_default(),
            release_version: text("release-version").unwrap_or_default(),
            api_contract: parsed.int("api-contract").unwrap_or(0),
            health_file: path("health-file").unwrap_or_default(),
            update_file: path("update-file").unwrap_or_default(),
            handoff_file: path("handoff-file").unwrap_or_default(),
            managed_update_id: text("managed-update-id").unwrap_or_default(),
            expected_native_pid: parsed.int("expected-native-pid").unwrap_or(0),
            expected_server_identity: text("expected-server-identity").unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agents_common::Platform;
    use python_compat::argparse::{try_parse_command_line, CommandLineExit};

    fn parse(words: &[&str]) -> Result<Args, CommandLineExit> {
        try_parse_command_line(&SPEC, words).map(|parsed| Args::from_parsed(&parsed))
    }

    #[test]
    fn every_operation_word_parses_to_its_operation() {
        for (operation, word) in Operation::ALL {
            assert_eq!(parse(&[word, "--root", "/r"]).unwrap().operation, operation);
            assert_eq!(operation.word(), word);
        }
    }

    // Expected values: vars(parser.parse_args(argv)) of the original's parser.
    #[test]
    fn defaults_match_the_original() {
        assert_eq!(
            parse(&["detect", "--root", "/r"]).unwrap(),
            Args {
                operation: Operation::Detect,
                root: "/r".into(),
                config_root: None,
                state_root: None,
                home: None,
                platform: None,
                release_dir: None,
                bind: None,
                port: None,
                candidate_source: PathBuf::new(),
                release_version: String::new(),
                api_contract: 0,
                health_file: PathBuf::new(),
                update_file: PathBuf::new(),
                handoff_file: PathBuf::new(),
                managed_update_id: String::new(),
                expected_native_pid: 0,
                expected_server_identity: String::new(),
            }
        );
    }

    #[test]
    fn install_sh_stop_invocation_in_both_forms() {
        // install.sh's `stop` argv (install-sh-contract §2), then the same
        // options as `--name=value` with the operation last.
        let words = [
            "stop",
            "--root",
            "/i",
            "--config-root",
            "/c",
            "--state-root",
            "/s",
            "--home",
            "/h",
            "--platform",
            "Linux",
            "--release-dir",
            "/i/releases/1.0.0",
            "--bind",
            "127.0.0.1",
            "--port",
            "8765",
            "--expected-server-identity",
            "srv",
            "--health-file",
            "",
            "--managed-update-id",
            "m",
            "--handoff-file",
            "/f",
            "--candidate-source",
            "/rt",
            "--release-version",
            "1.0.0",
            "--api-contract",
            "3",
            "--update-file",
            "/u",
            "--expected-native-pid",
            "42",
        ];
        let separate = parse(&words).unwrap();
        let mut joined: Vec<String> = words[1..]
            .chunks(2)
            .map(|pair| format!("{}={}", pair[0], pair[1]))
            .collect();
        joined.push("stop".to_string());
        let joined: Vec<&str> = joined.iter().map(String::as_str).collect();
        let joined = parse(&joined).unwrap();
        assert_eq!(separate, joined);
        assert_eq!(separate.port, Some(8765));
        assert_eq!(separate.api_contract, 3);
        assert_eq!(separate.expected_native_pid, 42);
        assert_eq!(separate.platform, Some(Platform::Linux.into()));
        assert_eq!(
            separate.release_dir,
            Some(PathBuf::from("/i/releases/1.0.0"))
        );
        assert_eq!(separate.update_file, PathBuf::from("/u"));
    }

    #[test]
    fn abbreviations_negative_numbers_and_repetition() {
        let args = parse(&[
            "--ro",
            "/first",
            "verify",
            "--root",
            "/last",
            "--po=-0_7",
            "--expected-n",
            "-1",
            "--api",
            "\u{663}",
        ])
        .unwrap();
        assert_eq!(args.root, PathBuf::from("/last"));
        assert_eq!(args.port, Some(-7));
        assert_eq!(args.expected_native_pid, -1);
        assert_eq!(args.api_contract, 3);
    }

    #[test]
    fn refusals_are_usage_errors() {
        for words in [
            &["detect"][..],
            &["--root", "/r"],
            &["bogus", "--root", "/r"],
            &["detect", "--root", "/r", "extra"],
            &["detect", "--root", "/r", "--port", "x"],
            &["detect", "--root", "/r", "--port", "-0_7"],
            &["detect", "--root", "/r", "--port", "-0_7"],
            &["detect", "--root", "/r", "--h"],
            &["detect", "--root"],
            &["detect", "--root", "/r", "--bogus"],
        ] {
            match parse(words) {
                Err(CommandLineExit::Usage(text)) => {
                    assert!(
                        text.starts_with("usage: execution-activation [-h]"),
                        "{text}"
                    )
                }
                other => panic!("{words:?} gave {other:?}"),
            }
        }
    }
}

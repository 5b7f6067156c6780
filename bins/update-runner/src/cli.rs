//! The update runner's command line: every option of `update_runner.py`'s
//! argparse parser, in its order, with its requirements and defaults.

use std::ffi::OsString;
use std::path::PathBuf;

use agents_common::{Error, Result};
use python_compat::{
    argparse::{CommandSpec, OptionSpec, ParsedArgs, ValueKind},
    PythonInt,
};

/// The program name in usage and error lines, whatever `argv[0]` is: the
/// server may start the runner as `update_runner.py` for its liveness check.
pub(crate) const PROGRAM: &str = "update-runner";

/// `sorted(RELEASE_TRACKS)`, the order argparse lists the choices in.
const TRACK_CHOICES: &[&str] = &["beta", "stable"];

const fn option(
    long: &'static str,
    kind: ValueKind,
    required: bool,
    help: &'static str,
) -> OptionSpec {
    OptionSpec {
        long,
        kind,
        required,
        help,
    }
}

/// The parser, option for option as the original declares it.
pub static SPEC: CommandSpec = CommandSpec {
    name: PROGRAM,
    summary: "",
    description: "Downloads, verifies and installs an AgentsServer release for the \
                  managed update the server started, reporting progress in its status file.",
    positional: None,
    options: &[
        option(
            "status-file",
            ValueKind::RawPath,
            true,
            "the server-update.json status row this update owns",
        ),
        option(
            "public-key",
            ValueKind::RawPath,
            true,
            "PEM Ed25519 key that signs release manifests",
        ),
        // argparse keeps any int and any str (undecodable bytes as
        // surrogate escapes), and the original passes both on to install.sh.
        option("port", ValueKind::AnyInt, true, "the server's public port"),
        option(
            "bind",
            ValueKind::RawPath,
            true,
            "the server's bind address",
        ),
        option(
            "expected-version",
            ValueKind::Text,
            false,
            "install exactly this release version",
        ),
        option(
            "current-version",
            ValueKind::Text,
            false,
            "the version running now",
        ),
        option(
            "track",
            ValueKind::Choice(TRACK_CHOICES),
            false,
            "release track (default: stable)",
        ),
        option(
            "npm-descriptor",
            ValueKind::Flag,
            false,
            "the release is described by an npm package",
        ),
        option(
            "prepared-receipt",
            ValueKind::RawPath,
            false,
            "receipt of an already prepared release",
        ),
        option(
            "prepared-receipt-sha256",
            ValueKind::Text,
            false,
            "SHA-256 of the prepared receipt",
        ),
        option(
            "execution-handoff-file",
            ValueKind::RawPath,
            false,
            "the split worker's sealed handoff",
        ),
        option(
            "recover-only",
            ValueKind::Flag,
            false,
            "only recover an interrupted installation",
        ),
        option(
            "recovery-transaction",
            ValueKind::RawPath,
            false,
            "the interrupted transaction to recover",
        ),
        option(
            "auth-token-file",
            ValueKind::RawPath,
            false,
            "one-time file holding the server's access token",
        ),
        option(
            "expected-server-identity",
            ValueKind::RawPath,
            true,
            "stable identity of the server being updated",
        ),
        option(
            "update-id",
            ValueKind::Text,
            true,
            "the update this runner owns",
        ),
        option(
            "expected-service-cgroup",
            ValueKind::Text,
            false,
            "the server's service cgroup",
        ),
        option(
            "expected-team-hub-id",
            ValueKind::Text,
            false,
            "identity of the Team Hub this server hosts",
        ),
        option(
            "expected-team-hub-transport",
            ValueKind::Text,
            false,
            "the hosted Team Hub's transport",
        ),
        option(
            "expected-team-hub-url",
            ValueKind::Text,
            false,
            "the hosted Team Hub's URL",
        ),
        option(
            "expected-team-hub-direct-ip-url",
            ValueKind::Text,
            false,
            "the hosted Team Hub's direct-IP URL",
        ),
        option(
            "team-hub-snapshot",
            ValueKind::Text,
            false,
            "Team Hub snapshot for rollback",
        ),
        option(
            "team-hub-data-dir",
            ValueKind::Text,
            false,
            "Team Hub data directory",
        ),
        option(
            "repair-failed-team-hub-host",
            ValueKind::Flag,
            false,
            "repair a Team Hub host whose update failed",
        ),
    ],
    subcommands: &[],
};

/// The runner's arguments with argparse's defaults applied. `None` means the
/// option was absent; `Some("")` means it was given empty — the original tells
/// the two apart (`getattr(args, ..., None) is not None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// `--status-file`: the `server-update.json` status row this update owns.
    pub status_file: PathBuf,
    /// `--public-key`: the PEM Ed25519 key that signs release manifests.
    pub public_key: PathBuf,
    /// `--port`: the server's public port; any int argparse reads, passed on
    /// as Python prints it.
    pub port: PythonInt,
    /// `--bind`: the server's bind address, passed to install.sh byte for byte.
    pub bind: OsString,
    /// `--expected-version`: install exactly this release version.
    pub expected_version: Option<String>,
    /// `--current-version`: the version running now.
    pub current_version: Option<String>,
    /// `--track`: the release track (`stable`, the default, or `beta`).
    pub track: String,
    /// `--npm-descriptor`: the release is described by an npm package.
    pub npm_descriptor: bool,
    /// `--prepared-receipt`: the receipt of an already prepared release.
    pub prepared_receipt: Option<PathBuf>,
    /// `--prepared-receipt-sha256`: the SHA-256 of the prepared receipt.
    pub prepared_receipt_sha256: Option<String>,
    /// `--execution-handoff-file`: the split worker's sealed handoff.
    pub execution_handoff_file: Option<PathBuf>,
    /// `--recover-only`: only recover an interrupted installation.
    pub recover_only: bool,
    /// `--recovery-transaction`: the interrupted transaction to recover.
    pub recovery_transaction: Option<PathBuf>,
    /// `--auth-token-file`: the one-time file holding the server's access token.
    pub auth_token_file: Option<PathBuf>,
    /// `--expected-server-identity` compared with the server's: its text,
    /// undecodable bytes as U+FFFD (Python holds them as surrogate escapes,
    /// which no identity a server reports contains either).
    pub expected_server_identity: String,
    /// The identity as given, for install.sh's argument list.
    pub expected_server_identity_argument: OsString,
    /// `--update-id`: the update this runner owns.
    pub update_id: UpdateId,
    /// `--expected-service-cgroup`: the server's service cgroup.
    pub expected_service_cgroup: Option<String>,
    /// `--expected-team-hub-id`: the identity of the Team Hub this server hosts.
    pub expected_team_hub_id: Option<String>,
    /// `--expected-team-hub-transport`: the hosted Team Hub's transport.
    pub expected_team_hub_transport: Option<String>,
    /// `--expected-team-hub-url`: the hosted Team Hub's URL.
    pub expected_team_hub_url: Option<String>,
    /// `--expected-team-hub-direct-ip-url`: the hosted Team Hub's direct-IP URL.
    pub expected_team_hub_direct_ip_url: Option<String>,
    /// `--team-hub-snapshot`: the Team Hub snapshot for rollback.
    pub team_hub_snapshot: Option<String>,
    /// `--team-hub-data-dir`: the Team Hub data directory.
    pub team_hub_data_dir: Option<String>,
    /// `--repair-failed-team-hub-host`: repair a Team Hub host whose update
    /// failed.
    pub repair_failed_team_hub_host: bool,
}

/// `--update-id`, read once: the server's admitted update this run owns.
///
/// The original reads it in two spellings: `update_recovery` compares the word
/// as given, while `run_update`, `main`'s failure handler and the Team Hub
/// fence use `str(args.update_id).strip()`, and only `run_update` checks its
/// shape, after its earlier checks. So both spellings and the shape's
/// verdict are kept, and the refusal is raised where the original raises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateId {
    given: String,
    stripped: String,
    well_formed: bool,
}

impl UpdateId {
    /// Reads the argument as given.
    pub fn new(given: String) -> UpdateId {
        let stripped = python_compat::strip(&given).to_string();
        let well_formed = is_update_id(&stripped);
        UpdateId {
            given,
            stripped,
            well_formed,
        }
    }

    /// The word as given (what `update_recovery` compares with the row).
    pub fn given(&self) -> &str {
        &self.given
    }

    /// `str(args.update_id or "").strip()`: the id the status row, the
    /// handoff and the Team Hub fence are keyed by.
    pub fn stripped(&self) -> &str {
        &self.stripped
    }

    /// The stripped id, or `run_update`'s refusal when it does not match
    /// `[A-Za-z0-9][A-Za-z0-9._:-]{0,127}`.
    pub fn checked(&self) -> Result<&str> {
        if self.well_formed {
            Ok(&self.stripped)
        } else {
            Err(Error::runtime(
                "managed update is missing a valid update ID",
            ))
        }
    }
}

/// `re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", id)`.
fn is_update_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    (1..=128).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-'))
}

fn required<T>(value: Option<T>, long: &str) -> T {
    value.unwrap_or_else(|| panic!("--{long} is required by the parser"))
}

impl Args {
    /// Types the parsed command line.
    pub fn from_parsed(parsed: &ParsedArgs) -> Args {
        let text = |long| parsed.text(long).map(str::to_string);
        let path = |long| parsed.path(long).map(PathBuf::from);
        let raw = |long| {
            parsed
                .path(long)
                .map(|value| value.as_os_str().to_os_string())
        };
        let identity = required(raw("expected-server-identity"), "expected-server-identity");
        Args {
            status_file: required(path("status-file"), "status-file"),
            public_key: required(path("public-key"), "public-key"),
            port: required(parsed.any_int("port").cloned(), "port"),
            bind: required(raw("bind"), "bind"),
            expected_version: text("expected-version"),
            current_version: text("current-version"),
            track: text("track").unwrap_or_else(|| "stable".to_string()),
            npm_descriptor: parsed.flag("npm-descriptor"),
            prepared_receipt: path("prepared-receipt"),
            prepared_receipt_sha256: text("prepared-receipt-sha256"),
            execution_handoff_file: path("execution-handoff-file"),
            recover_only: parsed.flag("recover-only"),
            recovery_transaction: path("recovery-transaction"),
            auth_token_file: path("auth-token-file"),
            expected_server_identity: identity.to_string_lossy().into_owned(),
            expected_server_identity_argument: identity,
            update_id: UpdateId::new(required(text("update-id"), "update-id")),
            expected_service_cgroup: text("expected-service-cgroup"),
            expected_team_hub_id: text("expected-team-hub-id"),
            expected_team_hub_transport: text("expected-team-hub-transport"),
            expected_team_hub_url: text("expected-team-hub-url"),
            expected_team_hub_direct_ip_url: text("expected-team-hub-direct-ip-url"),
            team_hub_snapshot: text("team-hub-snapshot"),
            team_hub_data_dir: text("team-hub-data-dir"),
            repair_failed_team_hub_host: parsed.flag("repair-failed-team-hub-host"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::release::RELEASE_TRACKS;
    use python_compat::argparse::{try_parse_command_line, CommandLineExit};
    use std::ffi::OsString;

    fn parse(words: &[&str]) -> std::result::Result<Args, CommandLineExit> {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        try_parse_command_line(&SPEC, &words).map(|parsed| Args::from_parsed(&parsed))
    }

    #[test]
    fn update_ids_are_stripped_once_and_their_shape_checked_where_the_original_checks_it() {
        for good in [
            "0123456789abcdef0123456789abcdef",
            "a",
            &"a".repeat(128),
            " a:b.c_d-e ",
        ] {
            let id = UpdateId::new(good.to_string());
            assert_eq!(id.given(), good);
            assert_eq!(id.checked().unwrap(), good.trim());
        }
        for bad in ["", "-a", ".a", "a b", "a/b", &"a".repeat(129), "\x1c"] {
            let id = UpdateId::new(bad.to_string());
            assert_eq!(
                id.checked().unwrap_err().python_line(),
                "RuntimeError: managed update is missing a valid update ID",
                "{bad:?}"
            );
        }
        // str.strip() also drops the separators U+001C..U+001F.
        assert_eq!(UpdateId::new("\x1fu1\x1c".into()).stripped(), "u1");
    }

    /// The required options, for the tests of what is built from them.
    pub(crate) const REQUIRED: &[&str] = &[
        "--status-file",
        "/s",
        "--public-key",
        "/k",
        "--port",
        "7",
        "--bind",
        "b",
        "--expected-server-identity",
        "i",
        "--update-id",
        "u",
    ];

    fn with_required(extra: &[&'static str]) -> Vec<&'static str> {
        REQUIRED
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect()
    }

    #[test]
    fn track_choices_are_the_sorted_release_tracks() {
        let mut tracks = RELEASE_TRACKS.to_vec();
        tracks.sort();
        assert_eq!(TRACK_CHOICES, tracks.as_slice());
    }

    // Expected values: vars(parser.parse_args(argv)) of the original's parser.
    #[test]
    fn defaults_match_the_original() {
        let args = parse(REQUIRED).unwrap();
        assert_eq!(
            args,
            Args {
                status_file: "/s".into(),
                public_key: "/k".into(),
                port: PythonInt::Small(7),
                bind: "b".into(),
                expected_version: None,
                current_version: None,
                track: "stable".into(),
                npm_descriptor: false,
                prepared_receipt: None,
                prepared_receipt_sha256: None,
                execution_handoff_file: None,
                recover_only: false,
                recovery_transaction: None,
                auth_token_file: None,
                expected_server_identity: "i".into(),
                expected_server_identity_argument: "i".into(),
                update_id: UpdateId::new("u".into()),
                expected_service_cgroup: None,
                expected_team_hub_id: None,
                expected_team_hub_transport: None,
                expected_team_hub_url: None,
                expected_team_hub_direct_ip_url: None,
                team_hub_snapshot: None,
                team_hub_data_dir: None,
                repair_failed_team_hub_host: false,
            }
        );
    }

    #[test]
    fn every_option_in_both_forms() {
        let separate = parse(&with_required(&[
            "--expected-version",
            "1.2.3",
            "--current-version",
            "1.2.2",
            "--track",
            "beta",
            "--npm-descriptor",
            "--prepared-receipt",
            "/r",
            "--prepared-receipt-sha256",
            "ab",
            "--execution-handoff-file",
            "/h",
            "--recover-only",
            "--recovery-transaction",
            "/t",
            "--auth-token-file",
            "/a",
            "--expected-service-cgroup",
            "/c",
            "--expected-team-hub-id",
            "hub",
            "--expected-team-hub-transport",
            "tr",
            "--expected-team-hub-url",
            "http://u",
            "--expected-team-hub-direct-ip-url",
            "http://1",
            "--team-hub-snapshot",
            "/snap",
            "--team-hub-data-dir",
            "/data",
            "--repair-failed-team-hub-host",
        ]))
        .unwrap();
        let joined = parse(&[
            "--status-file=/s",
            "--public-key=/k",
            "--port=7",
            "--bind=b",
            "--expected-server-identity=i",
            "--update-id=u",
            "--expected-version=1.2.3",
            "--current-version=1.2.2",
            "--track=beta",
            "--npm-descriptor",
            "--prepared-receipt=/r",
            "--prepared-receipt-sha256=ab",
            "--execution-handoff-file=/h",
            "--recover-only",
            "--recovery-transaction=/t",
            "--auth-token-file=/a",
            "--expected-service-cgroup=/c",
            "--expected-team-hub-id=hub",
            "--expected-team-hub-transport=tr",
            "--expected-team-hub-url=http://u",
            "--expected-team-hub-direct-ip-url=http://1",
            "--team-hub-snapshot=/snap",
            "--team-hub-data-dir=/data",
            "--repair-failed-team-hub-host",
        ])
        .unwrap();
        assert_eq!(separate, joined);
        assert_eq!(separate.track, "beta");
        assert!(
            separate.npm_descriptor
                && separate.recover_only
                && separate.repair_failed_team_hub_host
        );
        assert_eq!(separate.prepared_receipt_sha256.as_deref(), Some("ab"));
        assert_eq!(separate.recovery_transaction, Some(PathBuf::from("/t")));
        assert_eq!(
            separate.expected_team_hub_direct_ip_url.as_deref(),
            Some("http://1")
        );
    }

    #[test]
    fn empty_values_differ_from_absent_ones() {
        let args = parse(&with_required(&[
            "--expected-team-hub-url",
            "",
            "--execution-handoff-file=",
            "--bind",
            "",
        ]))
        .unwrap();
        assert_eq!(args.expected_team_hub_url.as_deref(), Some(""));
        assert_eq!(args.execution_handoff_file, Some(PathBuf::new()));
        assert_eq!(args.bind, "");
        assert_eq!(args.expected_team_hub_transport, None);
    }

    #[test]
    fn abbreviations_repetition_and_python_ints() {
        let args = parse(&with_required(&[
            "--prepared-receipt",
            "/exact",
            "--prepared-receipt-s",
            "cd",
            "--po",
            " +0_8 ",
            "--bind",
            "-1",
            "--update-id",
            "first",
            "--update-id",
            "last",
            "--recover-o",
        ]))
        .unwrap();
        assert_eq!(args.prepared_receipt, Some(PathBuf::from("/exact")));
        assert_eq!(args.prepared_receipt_sha256.as_deref(), Some("cd"));
        assert_eq!(args.port, PythonInt::Small(8));
        assert_eq!(args.bind, "-1");
        assert_eq!(args.update_id.given(), "last");
        assert!(args.recover_only);
    }

    #[test]
    fn refusals_are_usage_errors() {
        for extra in [
            &["--track", "nightly"][..],
            &["--port", "7.0"],
            &["--p", "1"],
            &["--recover"],
            &["--bogus"],
            &["--npm-descriptor=yes"],
            &["--bind"],
            &["positional"],
        ] {
            match parse(&with_required(extra)) {
                Err(CommandLineExit::Usage(text)) => {
                    assert!(text.starts_with("usage: update-runner [-h]"), "{text}")
                }
                other => panic!("{extra:?} gave {other:?}"),
            }
        }
    }
}

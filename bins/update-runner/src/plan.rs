//! The run the server asked for, typed once from the command line (the
//! high-level arguments, as ripgrep's `HiArgs` are to its `LowArgs`): which
//! mode, which release source, what the server and its Team Hub are expected
//! to be. Everything after parsing reads this plan, never [`Args`].
//!
//! Building it cannot fail: argparse already refused what the command line
//! cannot hold. The checks the original raises in a fixed order (paths
//! resolved, identity and cgroup shapes, Team Hub consistency) stay where it
//! raises them, in `update` and `recovery`, so the first refusal and its
//! message are the same.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use python_compat::PythonInt;

use crate::cli::{Args, UpdateId};
use crate::release::normalized_release_track;

/// One run of the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `--status-file` as given: the `server-update.json` row this update
    /// owns (resolved where the original resolves it).
    pub(crate) status_file: PathBuf,
    /// `--update-id`: the update this runner owns.
    pub(crate) update_id: UpdateId,
    /// `--auth-token-file`: the one-time file holding the server's token.
    pub(crate) auth_token_file: Option<PathBuf>,
    /// What the running server is expected to be.
    pub(crate) server: ExpectedServer,
    /// The hosted Team Hub's options, as given.
    pub(crate) team_hub: TeamHubOptions,
    /// `--execution-handoff-file` when given non-empty: the split worker's
    /// sealed handoff.
    pub(crate) handoff_file: Option<PathBuf>,
    /// An update, or the recovery of an interrupted one.
    pub(crate) mode: Mode,
}

/// The server being updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpectedServer {
    /// `--port`: its public port, passed on as Python prints it.
    pub(crate) port: PythonInt,
    /// `--bind`: its bind address, passed to install.sh byte for byte.
    pub(crate) bind: OsString,
    /// `--expected-server-identity` as text (undecodable bytes as U+FFFD).
    pub(crate) identity: String,
    /// The identity as given, for install.sh's argument list.
    pub(crate) identity_argument: OsString,
    /// `--expected-service-cgroup` as given.
    pub(crate) service_cgroup: Option<String>,
}

/// The Team Hub options as given (`None` absent, `Some("")` given empty:
/// the original tells them apart); `TeamHub::validate` checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TeamHubOptions {
    /// `--expected-team-hub-id`.
    pub(crate) hub_id: Option<String>,
    /// `--expected-team-hub-transport`.
    pub(crate) transport: Option<String>,
    /// `--expected-team-hub-url`.
    pub(crate) url: Option<String>,
    /// `--expected-team-hub-direct-ip-url`.
    pub(crate) direct_ip_url: Option<String>,
    /// `--team-hub-snapshot`.
    pub(crate) snapshot: Option<String>,
    /// `--team-hub-data-dir`.
    pub(crate) data_dir: Option<String>,
    /// `--repair-failed-team-hub-host`.
    pub(crate) repair: bool,
}

/// What the run does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A managed update (`run_update`).
    Update(UpdateRequest),
    /// `--recover-only` (`update_recovery.run_recovery`).
    Recover(RecoveryRequest),
}

/// A managed update's release request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpdateRequest {
    /// `--public-key` as given: the PEM Ed25519 key that signs manifests.
    pub(crate) public_key: PathBuf,
    /// `--track`, normalized (`stable` or `beta`).
    pub(crate) track: &'static str,
    /// `--expected-version`: install exactly this version.
    pub(crate) expected_version: Option<String>,
    /// `--current-version`: the version running now.
    pub(crate) current_version: Option<String>,
    /// Where the signed manifest comes from.
    pub(crate) source: ReleaseSource,
}

/// The one source of the signed manifest, in the original's precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReleaseSource {
    /// `--prepared-receipt` given non-empty: a release prepared ahead.
    Prepared {
        /// The receipt's path.
        receipt: PathBuf,
        /// `--prepared-receipt-sha256`, compared with the admitted row's.
        receipt_sha256: Option<String>,
    },
    /// `--npm-descriptor`: the admitted row's npm release envelope.
    NpmDescriptor,
    /// The release host's signed manifest for the track.
    ReleaseHost,
}

/// A recovery's pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecoveryRequest {
    /// `--recovery-transaction`: the interrupted transaction to recover.
    pub(crate) transaction: Option<PathBuf>,
    /// `--expected-version`: the release the journal must be activating.
    pub(crate) expected_version: Option<String>,
}

/// A path option given non-empty (the original's `if args.x:`).
fn non_empty(path: Option<PathBuf>) -> Option<PathBuf> {
    path.filter(|path| !path.as_os_str().is_empty())
}

impl Plan {
    /// Types the parsed arguments.
    pub(crate) fn from_args(args: Args) -> Plan {
        let mode = if args.recover_only {
            Mode::Recover(RecoveryRequest {
                transaction: args.recovery_transaction,
                expected_version: args.expected_version,
            })
        } else {
            let source = match non_empty(args.prepared_receipt) {
                Some(receipt) => ReleaseSource::Prepared {
                    receipt,
                    receipt_sha256: args.prepared_receipt_sha256,
                },
                None if args.npm_descriptor => ReleaseSource::NpmDescriptor,
                None => ReleaseSource::ReleaseHost,
            };
            Mode::Update(UpdateRequest {
                public_key: args.public_key,
                // argparse's choices= admitted only a release track.
                track: normalized_release_track(Some(&args.track)).expect("a release track"),
                expected_version: args.expected_version,
                current_version: args.current_version,
                source,
            })
        };
        Plan {
            status_file: args.status_file,
            update_id: args.update_id,
            auth_token_file: args.auth_token_file,
            server: ExpectedServer {
                port: args.port,
                bind: args.bind,
                identity: args.expected_server_identity,
                identity_argument: args.expected_server_identity_argument,
                service_cgroup: args.expected_service_cgroup,
            },
            team_hub: TeamHubOptions {
                hub_id: args.expected_team_hub_id,
                transport: args.expected_team_hub_transport,
                url: args.expected_team_hub_url,
                direct_ip_url: args.expected_team_hub_direct_ip_url,
                snapshot: args.team_hub_snapshot,
                data_dir: args.team_hub_data_dir,
                repair: args.repair_failed_team_hub_host,
            },
            handoff_file: non_empty(args.execution_handoff_file),
            mode,
        }
    }

    /// The sealed handoff file, when the update carries one.
    pub(crate) fn handoff_file(&self) -> Option<&Path> {
        self.handoff_file.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{tests::REQUIRED, SPEC};
    use python_compat::argparse::try_parse_command_line;

    fn plan(extra: &[&str]) -> Plan {
        let mut words = REQUIRED.to_vec();
        words.extend_from_slice(extra);
        let parsed = try_parse_command_line(&SPEC, &words).unwrap();
        Plan::from_args(Args::from_parsed(&parsed))
    }

    fn request(plan: &Plan) -> &UpdateRequest {
        match &plan.mode {
            Mode::Update(request) => request,
            Mode::Recover(_) => panic!("not an update: {plan:?}"),
        }
    }

    #[test]
    fn the_release_source_follows_the_originals_precedence() {
        assert_eq!(request(&plan(&[])).source, ReleaseSource::ReleaseHost);
        assert_eq!(
            request(&plan(&["--npm-descriptor"])).source,
            ReleaseSource::NpmDescriptor
        );
        // An empty receipt is no receipt (`if args.prepared_receipt:`).
        assert_eq!(
            request(&plan(&["--prepared-receipt=", "--npm-descriptor"])).source,
            ReleaseSource::NpmDescriptor
        );
        assert_eq!(
            request(&plan(&[
                "--npm-descriptor",
                "--prepared-receipt",
                "/r",
                "--prepared-receipt-sha256",
                "ab",
            ]))
            .source,
            ReleaseSource::Prepared {
                receipt: "/r".into(),
                receipt_sha256: Some("ab".into()),
            }
        );
    }

    #[test]
    fn tracks_are_normalized_and_values_kept_as_given() {
        let update = plan(&["--track", "beta", "--expected-version", " 1.2.3 "]);
        assert_eq!(request(&update).track, "beta");
        assert_eq!(
            request(&update).expected_version.as_deref(),
            Some(" 1.2.3 ")
        );
        assert_eq!(request(&plan(&[])).track, "stable");
        assert_eq!(update.server.identity, "i");
        assert_eq!(update.server.port, PythonInt::Small(7));
        assert_eq!(update.handoff_file(), None);
        assert_eq!(plan(&["--execution-handoff-file="]).handoff_file(), None);
        assert_eq!(
            plan(&["--execution-handoff-file", "/h"]).handoff_file(),
            Some(Path::new("/h"))
        );
    }

    #[test]
    fn recover_only_carries_the_recovery_pins() {
        let recovery = plan(&[
            "--recover-only",
            "--recovery-transaction",
            "/t",
            "--expected-version",
            "1.0.0",
            "--prepared-receipt",
            "/ignored",
        ]);
        assert_eq!(
            recovery.mode,
            Mode::Recover(RecoveryRequest {
                transaction: Some("/t".into()),
                expected_version: Some("1.0.0".into()),
            })
        );
    }
}

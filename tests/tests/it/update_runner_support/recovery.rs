//! `update-runner --recover-only` scenes: the running release (a copy of
//! the binary beside a stand-in `install.sh` in recovery mode), the server's
//! relaunch of an interrupted activation, and an update of an installed split
//! 1.0.0 to 1.1.0 interrupted after install.sh began its format-3 journal
//! (written by the test stand-in for install.sh's journal writer) with the
//! durable `_activation_recovery` intent the runner recorded before it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use agents_common::{activation_intent, read_status_unlocked, utc_now, StatusLock};
use agents_tests::journal_writer::{Begin, Install, API_CONTRACT};
use agents_tests::server_status::write_row;
use agents_tests::upstream::Upstream;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

use super::{make_executable, updated_health, Reply, TestServer, IDENTITY};

/// The update the interrupted activation belongs to.
pub(crate) const UPDATE_ID: &str = "fedcba9876543210fedcba9876543210";
/// The version it activates.
pub(crate) const VERSION: &str = "1.1.0";

/// The stand-in of the running release's install.sh in recovery mode: it
/// records its invocation, runs the test's behaviour and, by default,
/// finalises the journal as a completed recovery would.
pub(crate) const RECOVERY_INSTALL_SH: &str = r#"#!/bin/bash
record="$H15_FIXTURE"
{
  printf 'cwd=%s\n' "$PWD"
  for argument in "$@"; do printf 'arg=%s\n' "$argument"; done
  if [ -n "${AGENTSDOCK_MANAGED_UPDATE_ID+x}" ]; then printf 'env AGENTSDOCK_MANAGED_UPDATE_ID=%s\n' "$AGENTSDOCK_MANAGED_UPDATE_ID"; fi
} > "$record/installer.record"
if [ -f "$record/behaviour.sh" ]; then . "$record/behaviour.sh"; fi
rm -rf "$AGENTS_SERVER_INSTALL_DIR/.activation-transaction"
touch "$record/installed"
exit 0
"#;

/// What the rollback of [`RECOVERY_INSTALL_SH`] does instead of finishing:
/// install.sh's verified rollback retires the journal and exits 75.
pub(crate) const ROLLBACK_BEHAVIOUR: &str =
    "rm -rf \"$AGENTS_SERVER_INSTALL_DIR/.activation-transaction\"\nexit 75\n";

/// Which update runner a running release starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// Its copy of the `update-runner` binary.
    Binary,
    /// `python3 -B update_runner.py` beside the upstream modules.
    Original,
}

/// The running release the server starts recovery from: a copy of the
/// `update-runner` binary beside the recovery `install.sh` stand-in (and,
/// for the originals' campaigns, `update_runner.py` and its modules).
pub(crate) struct RunningRelease {
    pub dir: PathBuf,
    runner: Runner,
}

impl RunningRelease {
    /// Lays the release out in `dir` (created).
    pub(crate) fn at(dir: &Path) -> RunningRelease {
        std::fs::create_dir_all(dir).unwrap();
        let binary = dir.join("update-runner");
        // Copied by a child process: a copy written by this process would
        // leave its write descriptor, for a moment, in the children other
        // test threads fork, and executing the copy then fails with
        // ETXTBSY ("Text file busy").
        let copied = std::process::Command::new("cp")
            .arg(agents_tests::binary_path("update-runner"))
            .arg(&binary)
            .status()
            .expect("cp runs");
        assert!(copied.success(), "cp of update-runner: {copied}");
        std::fs::write(dir.join("install.sh"), RECOVERY_INSTALL_SH).unwrap();
        make_executable(&dir.join("install.sh"));
        make_executable(&binary);
        RunningRelease {
            dir: dir.to_path_buf(),
            runner: Runner::Binary,
        }
    }

    /// From now on the release runs the original `update_runner.py`, put
    /// beside the upstream modules it imports.
    pub(crate) fn run_the_original(&mut self, upstream: &Upstream) {
        upstream.install_runtime(&self.dir);
        self.runner = Runner::Original;
    }

    /// The update runner this release starts, with no arguments yet.
    pub(crate) fn program(&self) -> Command {
        match self.runner {
            Runner::Binary => Command::new(self.dir.join("update-runner")),
            Runner::Original => {
                let mut command = Command::new("python3");
                command.arg("-B").arg(self.dir.join("update_runner.py"));
                command
            }
        }
    }

    /// The server's `--recover-only` command line and environment for
    /// `launch`, run by this release's update runner.
    pub(crate) fn command(&self, launch: &Launch<'_>) -> Command {
        let mut command = self.program();
        command
            .args([
                "--recover-only",
                "--recovery-transaction",
                launch.transaction,
            ])
            .arg("--status-file")
            .arg(launch.status)
            .arg("--public-key")
            .arg(self.dir.join("absent.pem"))
            .args(["--port", &launch.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--expected-version", launch.version, "--track", "stable"])
            .args([
                "--expected-server-identity",
                IDENTITY,
                "--update-id",
                launch.update_id,
            ])
            .arg("--auth-token-file")
            .arg(launch.token_file)
            .env("AGENTS_SERVER_INSTALL_DIR", launch.install_root)
            .env("H15_FIXTURE", launch.record);
        command
    }
}

/// One launch of `--recover-only` by the server.
pub(crate) struct Launch<'a> {
    pub status: &'a Path,
    pub token_file: &'a Path,
    pub port: u16,
    pub transaction: &'a str,
    pub version: &'a str,
    pub update_id: &'a str,
    pub install_root: &'a Path,
    /// The stand-in installer's record directory (`H15_FIXTURE`).
    pub record: &'a Path,
}

/// The server resuming an interrupted activation of `update_id`
/// (`resume_server_update_activation`): its one-time credential file
/// holding `token`, then, under the status lock, the row set to
/// `restarting` with the runner and the last error cleared. Returns the
/// credential file.
pub(crate) fn server_resumes(status: &Path, update_id: &str, token: &str) -> PathBuf {
    let _lock = StatusLock::acquire(status).unwrap();
    let mut row = read_status_unlocked(status).unwrap();
    let token_file = status.with_file_name(format!(
        ".server-recovery-{update_id}-{}.auth.json",
        python_compat::token_hex(16).unwrap()
    ));
    write_row(&token_file, &json_object! {"token" => token}).unwrap();
    for (key, value) in json_object! {
        "phase" => "restarting",
        "runner_pid" => Json::Null,
        "heartbeat_at" => utc_now(),
        "error_code" => Json::Null,
        "error_action" => Json::Null,
        "retryable" => Json::Null,
        "message" => "Resuming the interrupted server activation.",
    } {
        row.insert(key, value);
    }
    write_row(status, &row).unwrap();
    token_file
}

/// An interrupted split activation with its recovery intent, the running
/// release, and the AgentsServer health endpoint on 127.0.0.1.
pub(crate) struct Recovery {
    pub install: Install,
    pub transaction: String,
    pub runtime: RunningRelease,
    pub record: PathBuf,
    pub status: PathBuf,
    pub token_file: PathBuf,
    pub health: TestServer,
    _after: Arc<Mutex<JsonObject>>,
}

impl Recovery {
    /// An update of an installed split 1.0.0 to 1.1.0 interrupted after
    /// install.sh began its journal.
    pub(crate) fn interrupted(tag: &str) -> Recovery {
        let install = Install::new(&format!("runner-recovery-{tag}"));
        install.release("1.0.0");
        install.write_env("AGENTS_SERVER_PORT=7850\n");
        install.install_split("1.0.0");
        let candidate = install.staging(VERSION);
        let old = install.release_dir("1.0.0");
        let transaction = install.begin(&Begin {
            old: Some((old.clone(), old)),
            service_state: "running".into(),
            service_enabled: true,
            gateway_state: "running".into(),
            gateway_enabled: true,
            ..Begin::split(&candidate, VERSION)
        });
        let intent = activation_intent(
            &install.root(),
            &candidate,
            VERSION,
            i128::from(API_CONTRACT),
            UPDATE_ID,
            IDENTITY,
        )
        .unwrap();
        let runtime = RunningRelease::at(&install.base.join("runtime"));
        let record = install.base.join("record");
        std::fs::create_dir_all(&record).unwrap();
        let admin = install.state_root().join("admin");
        let status = admin.join("server-update.json");
        write_row(
            &status,
            &json_object! {
                "phase" => "restarting",
                "update_id" => UPDATE_ID,
                "track" => "stable",
                "target_version" => VERSION,
                "message" => "Resuming the interrupted server activation.",
                "runner_pid" => Json::Null,
                "heartbeat_at" => "2024-01-01T00:00:00Z",
                "_activation_recovery" => intent,
                "unknown_server_key" => json_object! {"kept" => true},
            },
        )
        .unwrap();
        let token_file = admin.join(format!(".server-recovery-{UPDATE_ID}-0123.auth.json"));
        write_row(&token_file, &json_object! {"token" => "recovery-token"}).unwrap();
        let after = Arc::new(Mutex::new(updated_health(
            VERSION,
            i128::from(API_CONTRACT),
        )));
        let served = after.clone();
        let installed = record.join("installed");
        let health = TestServer::start(move |request| {
            if request.header("Authorization") != Some("Bearer recovery-token") {
                return Reply::status(401, "Unauthorized");
            }
            let document = if installed.exists() {
                served.lock().unwrap().clone()
            } else {
                // The interrupted server is not answering as the new release.
                updated_health("1.0.0", i128::from(API_CONTRACT))
            };
            Reply::ok(&python_compat::json::encode_compact(&Json::Object(document)).unwrap())
        });
        Recovery {
            install,
            transaction,
            runtime,
            record,
            status,
            token_file,
            health,
            _after: after,
        }
    }

    pub(crate) fn behaviour(&self, script: &str) {
        std::fs::write(self.record.join("behaviour.sh"), script).unwrap();
    }

    pub(crate) fn edit_row(&self, edit: impl FnOnce(&mut JsonObject)) {
        let mut row = read_status_unlocked(&self.status).unwrap();
        edit(&mut row);
        write_row(&self.status, &row).unwrap();
    }

    /// The server's launch of `--recover-only` for `transaction` with the
    /// credential in `token_file`.
    pub(crate) fn command_with(&self, transaction: &str, token_file: &Path) -> Command {
        let root = self.install.root();
        self.runtime.command(&Launch {
            status: &self.status,
            token_file,
            port: self.health.port,
            transaction,
            version: VERSION,
            update_id: UPDATE_ID,
            install_root: &root,
            record: &self.record,
        })
    }

    /// The first launch, for `transaction`.
    pub(crate) fn command(&self, transaction: &str) -> Command {
        self.command_with(transaction, &self.token_file)
    }

    pub(crate) fn run(&self, transaction: &str) -> (Option<i32>, JsonObject) {
        let output = self.command(transaction).output().unwrap();
        (
            output.status.code(),
            read_status_unlocked(&self.status).unwrap(),
        )
    }

    pub(crate) fn installer(&self) -> Option<Vec<String>> {
        std::fs::read_to_string(self.record.join("installer.record"))
            .ok()
            .map(|text| text.lines().map(str::to_string).collect())
    }

    pub(crate) fn journal_present(&self) -> bool {
        std::fs::symlink_metadata(self.install.root().join(".activation-transaction")).is_ok()
    }
}

//! The scenes of the `update-runner --recover-only` campaigns: the
//! recovery runner itself killed at each durable call, and a prepared
//! managed update whose install.sh was interrupted mid-activation, its
//! runner killed at each durable call, finished by recovery where the
//! server's flow hands it to recovery.
//!
//! What comes after a kill is what the server does with a row whose runner
//! is gone (`finalize_abandoned_server_update`, `resume_server_update_
//! activation`): an active row carrying `_activation_recovery` while an
//! activation journal exists is resumed through `--recover-only` by the
//! running release; any other active row is finalised (complete when the
//! server already answers as the target release, failed otherwise), and a
//! failed first update is admitted again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use agents_common::{
    read_status_unlocked, utc_now, Platform, StatusLock, RUNNER_OWNED_ACTIVE_PHASES,
};
use agents_tests::crash_points::{helper_injection, Injection, Traced};
use agents_tests::journal_writer::{Begin, Roots};
use agents_tests::server_status::write_row;
use agents_tests::upstream::Upstream;
use agents_tests::Outcome;
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object,
};

use super::{assert_unlocked_or_reapable, is_temporary, sorted_names, Outside};
use crate::update_runner_support::prepared::{Prepared, VERSION as PREPARED_VERSION};
use crate::update_runner_support::recovery::{
    server_resumes, Launch, Recovery, RunningRelease, ROLLBACK_BEHAVIOUR, UPDATE_ID,
};
use crate::update_runner_support::{Side, IDENTITY, UPDATE_ID as FIRST_UPDATE_ID};

/// The server's own key every row carries; each writer must keep it.
const SERVER_KEY: &str = "unknown_server_key";

/// The injection of the runners: they inherit the test's environment.
pub(crate) fn runner_injection() -> Injection {
    Injection {
        inherit_environment: true,
        ..helper_injection()
    }
}

/// How the running release's install.sh ends the recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecoveryEnd {
    /// It finishes the activation: the server answers as the new release.
    Finishes,
    /// Its verified rollback restores the old release (exit 75).
    RollsBack,
}

/// The row as stored: it must parse as a JSON object (a reader that falls
/// back to `{}` would hide a torn write), name `update_id` and keep the
/// server's own key.
pub(crate) fn stored_row(status: &Path, update_id: &str) -> JsonObject {
    let bytes = fs::read(status).expect("the row exists");
    let row = match parse_json(&bytes) {
        Ok(Json::Object(row)) => row,
        other => panic!("the row is not a JSON object: {other:?}"),
    };
    assert_eq!(
        row.get("update_id").and_then(Json::as_str),
        Some(update_id),
        "the row still names its update: {row:?}"
    );
    assert_eq!(
        row.get(SERVER_KEY).and_then(|kept| kept.get("kept")),
        Some(&Json::Bool(true)),
        "the server's own keys survive: {row:?}"
    );
    row
}

fn phase(row: &JsonObject) -> &str {
    row.get("phase").and_then(Json::as_str).unwrap_or("")
}

fn is_active(row: &JsonObject) -> bool {
    RUNNER_OWNED_ACTIVE_PHASES.contains(&phase(row))
}

/// True when the server hands `row` to `--recover-only`: active, with its
/// recovery intent, while an activation journal exists.
fn recovery_takes_over(row: &JsonObject, root: &Path) -> bool {
    is_active(row)
        && row
            .get("_activation_recovery")
            .is_some_and(|intent| !intent.is_null())
        && fs::symlink_metadata(root.join(".activation-transaction")).is_ok()
}

/// `finalize_abandoned_server_update` of an active row whose runner is gone
/// and that no journal holds: `complete` when the server already answers as
/// the target release (`installed`), `failed` otherwise.
fn server_finalizes(status: &Path, installed: bool) {
    let _lock = StatusLock::acquire(status).unwrap();
    let mut row = read_status_unlocked(status).unwrap();
    assert!(is_active(&row), "only an active row is finalised: {row:?}");
    let (phase, message) = if installed {
        ("complete", "AgentsServer is installed and healthy.")
    } else {
        (
            "failed",
            "The detached updater exited before reporting completion. See server-update.log.",
        )
    };
    row.insert("phase", phase);
    row.insert("message", message);
    row.insert("runner_pid", Json::Null);
    row.insert("heartbeat_at", Json::Null);
    row.insert("finished_at", utc_now());
    write_row(status, &row).unwrap();
}

/// Runs `command` (`what`, for the message) and requires exit `code`.
fn exits_with(command: &mut Command, code: i32, what: &str) {
    let outcome = Outcome::of(command);
    assert_eq!(outcome.code, Some(code), "{what}: {outcome:?}");
}

/// The temporaries left in `directories`.
fn temporaries_in(directories: &[PathBuf]) -> Vec<String> {
    directories
        .iter()
        .flat_map(|directory| {
            sorted_names(directory)
                .into_iter()
                .filter(|name| is_temporary(name))
                .map(move |name| directory.join(name).display().to_string())
        })
        .collect()
}

/// No temporary left in `directories`.
fn assert_no_temporaries_in(directories: &[PathBuf]) {
    let left = temporaries_in(directories);
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// The journal as install.sh left it: its directory listing and manifest
/// bytes, `None` when there is none.
fn journal(root: &Path) -> Option<(Vec<String>, Vec<u8>)> {
    let directory = root.join(".activation-transaction");
    fs::symlink_metadata(&directory).ok()?;
    Some((
        sorted_names(&directory),
        fs::read(directory.join("manifest.json")).unwrap_or_default(),
    ))
}

/// A `--recover-only` scene and what it must end as.
pub(crate) struct RecoveryScene {
    pub recovery: Recovery,
    pub end: RecoveryEnd,
    journal: Option<(Vec<String>, Vec<u8>)>,
    outside: Outside,
}

impl RecoveryScene {
    /// An interrupted activation whose recovery ends as `end`, recovered
    /// by the binary, or by the original with `upstream`'s modules.
    pub(crate) fn new(tag: &str, end: RecoveryEnd, upstream: Option<&Upstream>) -> RecoveryScene {
        let mut recovery = Recovery::interrupted(tag);
        if let Some(upstream) = upstream {
            recovery.runtime.run_the_original(upstream);
        }
        if end == RecoveryEnd::RollsBack {
            recovery.behaviour(ROLLBACK_BEHAVIOUR);
        }
        let root = recovery.install.root();
        let journal = journal(&root);
        assert!(journal.is_some(), "the interrupted activation's journal");
        let outside = Outside::with_link(&recovery.install.base, &root, &recovery.install.home());
        RecoveryScene {
            recovery,
            end,
            journal,
            outside,
        }
    }

    /// The server's first `--recover-only`, traced and killed at `kill_at`.
    pub(crate) fn traced(&self, kill_at: Option<usize>) -> Traced {
        let command = self.recovery.command(&self.recovery.transaction);
        agents_tests::crash_points::run_traced(&command, &runner_injection(), kill_at)
    }

    /// What a killed recovery left: the row valid, the journal untouched or
    /// retired by install.sh; then what the server runs next (`--recover-only`
    /// again while the journal is retained, or its finalisation of the
    /// abandoned row) and every invariant of the ended update.
    pub(crate) fn converge_after_kill(&self) {
        let r = &self.recovery;
        let root = r.install.root();
        let row = stored_row(&r.status, UPDATE_ID);
        let now = journal(&root);
        assert!(
            now.is_none() || now == self.journal,
            "the runner never writes the journal: {now:?}"
        );
        if recovery_takes_over(&row, &root) {
            let token_file = server_resumes(&r.status, UPDATE_ID, "recovery-token");
            exits_with(
                &mut r.command_with(&r.transaction, &token_file),
                0,
                "the relaunched recovery",
            );
        } else if is_active(&row) {
            assert!(
                now.is_none(),
                "a retained journal is recovered, never finalised"
            );
            assert!(r.installer().is_some(), "install.sh ended the activation");
            server_finalizes(&r.status, r.record.join("installed").exists());
        }
        self.assert_outcome();
        let admin = r.status.parent().unwrap().to_path_buf();
        if !temporaries_in(std::slice::from_ref(&admin)).is_empty() {
            // Killed inside its own write of the row: the server's Python
            // writer leaves the runner's temporary; the next runner that
            // writes the row (under the status lock) removes it.
            self.next_update_fails_early();
        }
        assert_no_temporaries_in(&[admin, root]);
    }

    /// The next update the server admits, whose runner fails before any
    /// download (its public key is absent) and records `failed`: the next
    /// writer of the row after the ended one.
    fn next_update_fails_early(&self) {
        let r = &self.recovery;
        let token_file = r
            .status
            .with_file_name(format!(".server-update-{NEXT_ID}.auth.json"));
        {
            let _lock = StatusLock::acquire(&r.status).unwrap();
            let mut row = read_status_unlocked(&r.status).unwrap();
            for (key, value) in json_object! {
                "phase" => "starting",
                "update_id" => NEXT_ID,
                "runner_pid" => Json::Null,
                "finished_at" => Json::Null,
                "_activation_recovery" => Json::Null,
            } {
                row.insert(key, value);
            }
            write_row(&r.status, &row).unwrap();
            write_row(&token_file, &json_object! {"token" => "next-token"}).unwrap();
        }
        let mut runner = r.runtime.program();
        runner
            .arg("--status-file")
            .arg(&r.status)
            .arg("--public-key")
            .arg(r.runtime.dir.join("absent.pem"))
            .args(["--port", &r.health.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--current-version", "1.1.0", "--update-id", NEXT_ID])
            .args(["--expected-server-identity", IDENTITY])
            .arg("--auth-token-file")
            .arg(&token_file)
            .env("AGENTS_SERVER_INSTALL_DIR", r.install.root())
            .env("H15_FIXTURE", &r.record);
        exits_with(&mut runner, 1, "the next runner");
        let row = stored_row(&r.status, NEXT_ID);
        assert_eq!(phase(&row), "failed", "{row:?}");
    }

    /// The update ended as `end` says, recorded on a terminal row, with
    /// nothing left behind.
    pub(crate) fn assert_ended(&self) {
        self.assert_outcome();
        let r = &self.recovery;
        let admin = r.status.parent().unwrap().to_path_buf();
        assert_no_temporaries_in(&[admin, r.install.root()]);
    }

    /// [`Self::assert_ended`] but for temporaries: the update ended as `end`
    /// says, on a terminal row, the journal retired, the lock free and
    /// nothing outside changed.
    fn assert_outcome(&self) {
        let r = &self.recovery;
        let root = r.install.root();
        let row = stored_row(&r.status, UPDATE_ID);
        let expected = match self.end {
            RecoveryEnd::Finishes => "complete",
            RecoveryEnd::RollsBack => "failed",
        };
        assert_eq!(phase(&row), expected, "the row: {row:?}");
        assert_eq!(row.get("runner_pid"), Some(&Json::Null), "{row:?}");
        assert_eq!(
            self.end == RecoveryEnd::Finishes,
            r.record.join("installed").exists(),
            "the server answers as the release the row names"
        );
        assert!(journal(&root).is_none(), "install.sh retired the journal");
        assert_unlocked_or_reapable(&root);
        self.outside.assert_unchanged();
    }
}

/// The update the server admits after the recovered one ended.
const NEXT_ID: &str = "0123456789abcdef0123456789abcdef";

/// The update the server admits again after a first update failed.
const RETRY_ID: &str = "fedcba9876543210fedcba9876543210";

/// The stand-in's behaviour: the first run renames the staged journal into
/// place (as `activation_transaction begin` publishes it) and dies there.
const INTERRUPTED_BEHAVIOUR: &str = r#"if [ -d "$record/pending-journal" ]; then
  mv "$record/pending-journal" "$AGENTS_SERVER_INSTALL_DIR/.activation-transaction"
  kill -9 $$
fi
"#;

/// A prepared managed update whose install.sh dies once, right after it
/// began its activation journal (as a crash of install.sh leaves it), and
/// the running release the server recovers it with.
pub(crate) struct InterruptedInstall {
    pub prepared: Prepared,
    pub runtime: RunningRelease,
    /// The originals' sources when the originals run the update.
    upstream: Option<Upstream>,
    /// The journal the stand-in publishes on the current run.
    transaction: String,
    outside: Outside,
}

impl InterruptedInstall {
    /// The scene run by the binary, or by the original with `upstream`'s
    /// modules (both the first runner and the running release's).
    pub(crate) fn new(name: &str, upstream: Option<&Upstream>) -> InterruptedInstall {
        let mut prepared = Prepared::new(name);
        prepared.fixture.behaviour = Some(INTERRUPTED_BEHAVIOUR.into());
        let base = prepared.fixture.root.path().to_path_buf();
        let mut runtime = RunningRelease::at(&base.join("runtime"));
        if let Some(upstream) = upstream {
            prepared.fixture.upstream = Some(upstream.modules().to_path_buf());
            runtime.run_the_original(upstream);
        }
        let outside = Outside::with_link(&base, &prepared.root, &base.join("home"));
        InterruptedInstall {
            prepared,
            runtime,
            upstream: upstream.cloned(),
            transaction: String::new(),
            outside,
        }
    }

    /// The side that runs the update.
    fn side(&self) -> Side<'_> {
        match &self.upstream {
            Some(upstream) => Side::Original(upstream.originals()),
            None => Side::Port,
        }
    }

    fn run_dir(&self) -> PathBuf {
        self.prepared.fixture.run_dir(self.side())
    }

    fn status(&self) -> PathBuf {
        self.run_dir().join("state/admin/server-update.json")
    }

    fn record(&self) -> PathBuf {
        self.run_dir().join("installer")
    }

    /// The roots install.sh's journal describes: the prepared install
    /// root; configuration and units that do not exist yet.
    fn roots(&self) -> Roots {
        let base = self.prepared.fixture.root.path();
        Roots {
            platform: Platform::Linux,
            port: 7850,
            root: self.prepared.root.clone(),
            config_root: base.join("config"),
            state_root: base.join("journal-state"),
            home: base.join("home"),
        }
    }

    /// The first runner of a fresh admission: the row admitted, the
    /// credential written, and the journal install.sh will publish staged
    /// in the record directory.
    pub(crate) fn first_run(&mut self) -> std::process::Command {
        let root = self.prepared.root.clone();
        assert!(journal(&root).is_none(), "no journal before the update");
        let command = self.prepared.fixture.command(self.side());
        let roots = self.roots();
        // The journal pins the API contract of the signed manifest.
        let api_contract = self
            .prepared
            .manifest
            .get("api_contract_version")
            .and_then(Json::as_int)
            .expect("the manifest's API contract");
        self.transaction = roots.begin(&Begin {
            api_contract: i64::try_from(api_contract).unwrap(),
            ..Begin::split(&self.prepared.candidate, PREPARED_VERSION)
        });
        fs::rename(
            root.join(".activation-transaction"),
            self.record().join("pending-journal"),
        )
        .unwrap();
        command
    }

    /// What the server does after the first runner ended or was killed:
    /// recovery through the running release when the row hands the
    /// retained journal to it; otherwise the abandoned row finalised and, if
    /// it failed, the update admitted again (install.sh not interrupted
    /// this time) and completed by the next runner. Then every invariant.
    pub(crate) fn converge(&self) {
        let root = self.prepared.root.clone();
        let status = self.status();
        let record = self.record();
        let row = stored_row(&status, FIRST_UPDATE_ID);
        if recovery_takes_over(&row, &root) {
            assert!(!record.join("pending-journal").exists());
            // The fixture's health endpoint knows each side's credential.
            let token = format!("{}-token", self.side().label());
            let token_file = server_resumes(&status, FIRST_UPDATE_ID, &token);
            exits_with(
                &mut self.runtime.command(&Launch {
                    status: &status,
                    token_file: &token_file,
                    port: self.prepared.fixture.health_port(),
                    transaction: &self.transaction,
                    version: PREPARED_VERSION,
                    update_id: FIRST_UPDATE_ID,
                    install_root: &root,
                    record: &record,
                }),
                0,
                "the recovery",
            );
            let row = stored_row(&status, FIRST_UPDATE_ID);
            assert_eq!(phase(&row), "complete", "{row:?}");
        } else {
            assert!(journal(&root).is_none(), "no journal was published");
            if is_active(&row) {
                server_finalizes(&status, record.join("installed").exists());
            }
            let row = stored_row(&status, FIRST_UPDATE_ID);
            if phase(&row) != "complete" {
                self.admit_again();
            }
        }
        self.assert_ended();
    }

    /// The server admits the update again; the next runner completes it.
    fn admit_again(&self) {
        let record = self.record();
        // install.sh is interrupted only once.
        let _ = fs::remove_dir_all(record.join("pending-journal"));
        for name in ["installed", "installer.record"] {
            let _ = fs::remove_file(record.join(name));
        }
        let fixture = &self.prepared.fixture;
        let mut retry = fixture.admitted.clone();
        retry.insert("update_id", RETRY_ID);
        fixture.admit(self.side(), &retry, RETRY_ID);
        exits_with(
            &mut fixture.runner(self.side(), RETRY_ID),
            0,
            "the next runner",
        );
        let row = stored_row(&self.status(), RETRY_ID);
        assert_eq!(phase(&row), "complete", "{row:?}");
    }

    /// The update is complete on a terminal row; no journal, staged
    /// journal, temporary or lock is left; nothing outside changed.
    fn assert_ended(&self) {
        let root = &self.prepared.root;
        let row = read_status_unlocked(&self.status()).unwrap();
        assert_eq!(phase(&row), "complete", "{row:?}");
        assert_eq!(row.get("runner_pid"), Some(&Json::Null), "{row:?}");
        assert!(self.record().join("installed").exists(), "installed");
        assert!(journal(root).is_none(), "install.sh retired the journal");
        assert!(!self.record().join("pending-journal").exists());
        assert_unlocked_or_reapable(root);
        let admin = self.status().parent().unwrap().to_path_buf();
        assert_no_temporaries_in(&[admin, root.clone(), root.join("releases")]);
        self.outside.assert_unchanged();
    }
}

//! The `.execution-transaction` journal against real install trees: every
//! phase transition, the bytes it publishes (checked against the golden
//! renderings), and each refusal leaving the files as they were.

use agents_tests::assert_case_refused;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agents_common::{render_service, ExecutionLayout};
use agents_tests::{assert_error, link, set_mode, write_file, InstallBase};
use execution_manage::ExecutionTransaction;
use python_compat::{
    json::{encode_indented, parse_json, Json, JsonObject},
    json_object, ErrorClass,
};

/// Each watched file's path with its bytes and mode (`None` when absent).
type FilesState = Vec<(String, Option<(Vec<u8>, u32)>)>;

/// An install tree with releases and the layout the test activates.
struct Install {
    base: InstallBase,
}

impl Install {
    fn new(tag: &str, releases: &[&str]) -> Install {
        let base = InstallBase::new(tag);
        for version in releases {
            base.release(version);
        }
        Install { base }
    }

    fn root(&self) -> PathBuf {
        self.base.join("install")
    }

    fn layout(&self, worker: &str, gateway: &str) -> ExecutionLayout {
        let value = Json::Object(self.base.layout("Linux", worker, gateway));
        ExecutionLayout::from_dict(&value).expect("valid layout")
    }

    fn journal_dir(&self) -> PathBuf {
        self.root().join(".execution-transaction")
    }

    fn journal(&self) -> Json {
        parse_json(&fs::read(self.journal_dir().join("manifest.json")).unwrap()).unwrap()
    }

    /// Every file the transaction may touch, with its bytes and mode, plus
    /// the `current` link text: compared before and after a refusal.
    fn state(&self) -> FilesState {
        let mut paths = [
            self.base
                .join("home/.config/systemd/user/agents-server.service"),
            self.base
                .join("home/.config/systemd/user/agents-server-gateway.service"),
            self.root().join("execution-layout.json"),
            self.journal_dir().join("manifest.json"),
        ];
        paths.sort();
        let mut state: Vec<_> = paths
            .iter()
            .map(|path| {
                let entry = fs::read(path)
                    .ok()
                    .map(|data| (data, fs::metadata(path).unwrap().mode() & 0o7777));
                (path.display().to_string(), entry)
            })
            .collect();
        let current = fs::read_link(self.root().join("current"))
            .ok()
            .map(|target| (target.to_string_lossy().as_bytes().to_vec(), 0));
        state.push(("current".into(), current));
        state
    }
}

fn absent_services() -> Json {
    Json::Object(json_object! {
        "worker" => json_object! {"state" => "absent", "enabled" => false},
        "gateway" => json_object! {"state" => "absent", "enabled" => false},
    })
}

fn stopped_services() -> Json {
    Json::Object(json_object! {
        "worker" => json_object! {"state" => "stopped", "enabled" => true},
        "gateway" => json_object! {"state" => "stopped", "enabled" => true},
    })
}

/// The server identity the receipts report (and a staged migration may
/// expect).
const SERVER_IDENTITY: &str = "0123456789abcdef01234567";

fn receipt(layout: &ExecutionLayout, worker_version: &str, gateway_version: &str) -> Json {
    Json::Object(json_object! {
        "gateway_version" => gateway_version,
        "worker_version" => worker_version,
        "worker_release" => layout.worker_release.to_str().unwrap(),
        "protocol_version" => 1_i64,
        "server_identity" => SERVER_IDENTITY,
        "gateway_pid" => 4242_i64,
        "worker_pid" => 4343_i64,
        "worker_instance_id" => "8d2f0c0e9a7a4c1f9d1c3b5a7e9f0a1b",
        "maintenance_held" => true,
    })
}

fn golden_case(name: &str) -> JsonObject {
    let golden = parse_json(&agents_tests::golden_bytes("layouts.json")).unwrap();
    let cases = golden.get("cases").and_then(Json::as_array).unwrap();
    cases
        .iter()
        .find(|case| case.get("name").and_then(Json::as_str) == Some(name))
        .and_then(Json::as_object)
        .cloned()
        .unwrap()
}

fn golden_text(case: &JsonObject, key: &str, base: &InstallBase) -> Vec<u8> {
    case.get(key)
        .and_then(Json::as_str)
        .unwrap()
        .replace("{BASE}", &base.text())
        .into_bytes()
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Stage, publish, commit and finish a migration to `version`.
fn migrate(install: &Install, version: &str) -> ExecutionLayout {
    let layout = install.layout(version, version);
    ExecutionTransaction::stage(&layout, "migration", &absent_services(), None).unwrap();
    ExecutionTransaction::publish(&install.root()).unwrap();
    ExecutionTransaction::commit(&install.root(), &receipt(&layout, version, version)).unwrap();
    ExecutionTransaction::finish(&install.root()).unwrap();
    layout
}

/// A migration to 0.1.25 staged in a fresh install tree (no prior
/// services): where the phase walk and the commit, finish and load
/// refusals start, each moving it only as far as it needs.
struct Migration {
    install: Install,
    layout: ExecutionLayout,
    /// The pending journal `stage` returned.
    pending_journal: Json,
}

impl Migration {
    fn staged(tag: &str, expected_server_identity: Option<&str>) -> Migration {
        let install = Install::new(tag, &["0.1.25"]);
        let layout = install.layout("0.1.25", "0.1.25");
        let pending_journal = ExecutionTransaction::stage(
            &layout,
            "migration",
            &absent_services(),
            expected_server_identity,
        )
        .unwrap();
        Migration {
            install,
            layout,
            pending_journal,
        }
    }

    /// The receipt of the migrated components, as `commit` accepts it.
    fn receipt(&self) -> Json {
        receipt(&self.layout, "0.1.25", "0.1.25")
    }

    /// That receipt with `key` set to `value`.
    fn receipt_with(&self, key: &str, value: Json) -> Json {
        let mut changed = self.receipt();
        changed.as_object_mut().unwrap().insert(key, value);
        changed
    }

    /// The journal's `manifest.json`.
    fn manifest_path(&self) -> PathBuf {
        self.install.journal_dir().join("manifest.json")
    }

    // The transaction's steps, on this install root.

    fn publish(&self) -> agents_common::Result<Json> {
        ExecutionTransaction::publish(&self.install.root())
    }

    fn commit(&self, receipt: &Json) -> agents_common::Result<Json> {
        ExecutionTransaction::commit(&self.install.root(), receipt)
    }

    fn rollback(&self) -> agents_common::Result<Json> {
        ExecutionTransaction::rollback(&self.install.root())
    }

    fn finish(&self) -> agents_common::Result<()> {
        ExecutionTransaction::finish(&self.install.root())
    }

    fn load(&self) -> agents_common::Result<(Json, ExecutionLayout)> {
        ExecutionTransaction::load(&self.install.root())
    }
}

/// The names of the `.execution-draft-*` entries in `root`.
fn drafts(root: &Path) -> Vec<String> {
    fs::read_dir(root)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".execution-draft-"))
        .collect()
}

/// The pending journal is private and complete before anything changes:
/// checks what staging `migration` left, and returns the journal's ID.
fn assert_staged_before_any_change(migration: &Migration) -> String {
    let install = &migration.install;
    assert_eq!(mode(&install.journal_dir()), 0o700);
    assert_eq!(mode(&migration.manifest_path()), 0o600);
    let journal = install.journal();
    assert_eq!(journal, migration.pending_journal);
    assert_eq!(
        fs::read(migration.manifest_path()).unwrap(),
        encode_indented(&migration.pending_journal)
    );
    let id = journal.get("id").and_then(Json::as_str).unwrap();
    assert!(id.starts_with("execution-") && id.len() == 34, "{id}");
    assert_eq!(journal.get("phase"), Some(&Json::from("prepared")));
    assert_eq!(journal.get("current_before"), Some(&Json::Null));
    assert!(!install.root().join("execution-layout.json").exists());
    let drafts = drafts(&install.root());
    assert!(
        drafts.is_empty(),
        "the draft is renamed, not left behind: {drafts:?}"
    );
    id.to_string()
}

/// What publishing `migration` wrote: the golden `linux-basic` units and
/// layout manifest, private, and `current` naming the gateway release.
fn assert_published_linux_basic(migration: &Migration) {
    let install = &migration.install;
    let golden = golden_case("linux-basic");
    let units = install.base.join("home/.config/systemd/user");
    for (file, key) in [
        ("agents-server.service", "worker_service"),
        ("agents-server-gateway.service", "gateway_service"),
    ] {
        assert_eq!(
            fs::read(units.join(file)).unwrap(),
            golden_text(&golden, key, &install.base),
            "{file}"
        );
        assert_eq!(mode(&units.join(file)), 0o600);
    }
    let manifest = install.root().join("execution-layout.json");
    assert_eq!(
        fs::read(&manifest).unwrap(),
        golden_text(&golden, "layout_manifest_file", &install.base)
    );
    assert_eq!(mode(&manifest), 0o600);
    assert_eq!(
        fs::read_link(install.root().join("current")).unwrap(),
        migration.layout.gateway_release
    );
}

#[test]
fn migration_publishes_golden_bytes_and_retires_the_journal() {
    let migration = Migration::staged("txn-migrate", None);
    let install = &migration.install;
    let id = assert_staged_before_any_change(&migration);

    let published = migration.publish().unwrap();
    assert_eq!(published.get("phase"), Some(&Json::from("published")));
    assert_published_linux_basic(&migration);

    // Publishing again from `published` converges without rewriting anything.
    let before = install.state();
    migration.publish().unwrap();
    assert_eq!(install.state(), before);

    let committed = migration.commit(&migration.receipt()).unwrap();
    assert_eq!(committed.get("phase"), Some(&Json::from("committed")));
    // The receipt is kept verbatim, extra keys included.
    assert_eq!(committed.get("receipt"), Some(&migration.receipt()));
    migration.finish().unwrap();
    assert!(!install.journal_dir().exists());
    let retired = install
        .root()
        .join(format!(".execution-completed-{id}/manifest.json"));
    let retired = parse_json(&fs::read(retired).unwrap()).unwrap();
    assert_eq!(retired.get("phase"), Some(&Json::from("committed")));
}

#[test]
fn rollback_removes_what_a_migration_published() {
    let install = Install::new("txn-rollback", &["0.1.25"]);
    let layout = install.layout("0.1.25", "0.1.25");
    let untouched = install.state();
    ExecutionTransaction::stage(&layout, "migration", &absent_services(), None).unwrap();
    ExecutionTransaction::publish(&install.root()).unwrap();
    let rolled = ExecutionTransaction::rollback(&install.root()).unwrap();
    assert_eq!(rolled.get("phase"), Some(&Json::from("rolled-back")));
    // Rolling back again is idempotent.
    ExecutionTransaction::rollback(&install.root()).unwrap();
    ExecutionTransaction::finish(&install.root()).unwrap();
    assert_eq!(install.state(), untouched);
    assert!(!install.journal_dir().exists());
}

#[test]
fn a_launchd_migration_publishes_the_golden_plists_and_rolls_them_back() {
    // execution_install renders plists for a Darwin layout and journals
    // them exactly like units: 0600, in ~/Library/LaunchAgents (created
    // private when missing), and rollback removes them again.
    let install = Install::new("txn-launchd", &["0.1.25"]);
    let value = Json::Object(install.base.layout("Darwin", "0.1.25", "0.1.25"));
    let layout = ExecutionLayout::from_dict(&value).expect("valid layout");
    let agents = install.base.join("home/Library/LaunchAgents");
    assert!(!agents.exists());
    let staged =
        ExecutionTransaction::stage(&layout, "migration", &absent_services(), None).unwrap();
    let paths = staged.get("paths").unwrap();
    let golden = golden_case("darwin-basic");
    for (role, file, key) in [
        ("worker", "com.agentsdock.server.plist", "worker_service"),
        ("gateway", "com.agentsdock.gateway.plist", "gateway_service"),
    ] {
        let path = agents.join(file);
        assert_eq!(
            paths.get(role).and_then(Json::as_str),
            Some(path.to_str().unwrap())
        );
        let desired = staged.get("after").unwrap().get(role).unwrap();
        assert_eq!(desired.get("mode"), Some(&Json::from(0o600)));
        ExecutionTransaction::publish(&install.root()).unwrap();
        assert_eq!(
            fs::read(&path).unwrap(),
            golden_text(&golden, key, &install.base),
            "{file}"
        );
        assert_eq!(mode(&path), 0o600);
    }
    assert_eq!(mode(&agents), 0o700);
    assert_eq!(mode(agents.parent().unwrap()), 0o700);
    ExecutionTransaction::rollback(&install.root()).unwrap();
    ExecutionTransaction::finish(&install.root()).unwrap();
    assert_eq!(fs::read_dir(&agents).unwrap().count(), 0);
    assert!(!install.root().join("execution-layout.json").exists());
}

#[test]
fn worker_update_restores_the_previous_unit_with_its_mode() {
    let install = Install::new("txn-worker", &["1.0.0", "1.1.0"]);
    let old = migrate(&install, "1.0.0");
    let unit = install
        .base
        .join("home/.config/systemd/user/agents-server.service");
    // An operator-visible mode that rollback must restore exactly.
    fs::set_permissions(&unit, fs::Permissions::from_mode(0o644)).unwrap();
    let old_state = install.state();

    let layout = install.layout("1.1.0", "1.0.0");
    let journal =
        ExecutionTransaction::stage(&layout, "worker", &stopped_services(), None).unwrap();
    assert_eq!(
        journal.get("current_before"),
        Some(&Json::from(old.gateway_release.to_str().unwrap()))
    );
    ExecutionTransaction::publish(&install.root()).unwrap();
    assert_eq!(
        fs::read(&unit).unwrap(),
        render_service(&layout, "worker").unwrap()
    );
    assert_eq!(mode(&unit), 0o600);
    // Only the worker unit and the manifest change in worker scope.
    let gateway_unit = install
        .base
        .join("home/.config/systemd/user/agents-server-gateway.service");
    assert_eq!(
        fs::read(&gateway_unit).unwrap(),
        render_service(&old, "gateway").unwrap()
    );

    ExecutionTransaction::rollback(&install.root()).unwrap();
    ExecutionTransaction::finish(&install.root()).unwrap();
    assert_eq!(install.state(), old_state);
    assert_eq!(mode(&unit), 0o644);
}

#[test]
fn stage_refusals_change_nothing() {
    let install = Install::new("txn-stage", &["1.0.0", "1.1.0"]);
    let layout = install.layout("1.0.0", "1.0.0");
    let untouched = install.state();
    assert_error(
        ExecutionTransaction::stage(&layout, "everything", &absent_services(), None),
        ErrorClass::Value,
        "unknown execution activation scope",
    );
    assert_error(
        ExecutionTransaction::stage(&layout, "worker", &absent_services(), None),
        ErrorClass::Value,
        "execution activation requires a previous layout",
    );
    let one_service = Json::Object(json_object! {
        "worker" => json_object! {"state" => "absent", "enabled" => false},
    });
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &one_service, None),
        ErrorClass::Value,
        "both prior native service states are required",
    );
    for bad in [
        json_object! {"state" => "absent", "enabled" => true},
        json_object! {"state" => "paused", "enabled" => false},
        json_object! {"state" => "stopped", "enabled" => 1_i64},
        json_object! {"state" => "stopped"},
        json_object! {"state" => "stopped", "enabled" => false, "colour" => "red"},
    ] {
        let services = Json::Object(
            json_object! {"worker" => bad, "gateway" => json_object! {"state" => "absent", "enabled" => false}},
        );
        assert_error(
            ExecutionTransaction::stage(&layout, "migration", &services, None),
            ErrorClass::Value,
            "invalid prior native service state",
        );
    }
    let bad_pid = Json::Object(json_object! {
        "worker" => json_object! {"state" => "running", "enabled" => true, "pid" => 0_i64},
        "gateway" => json_object! {"state" => "absent", "enabled" => false},
    });
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &bad_pid, None),
        ErrorClass::Value,
        "invalid native service process identity",
    );
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &stopped_services(), None),
        ErrorClass::Value,
        "loaded native service has no restorable configuration",
    );
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &absent_services(), Some("a\nb")),
        ErrorClass::Value,
        "configuration text must be nonempty and contain no control characters",
    );
    // A dangling legacy journal link still blocks execution activation.
    link(
        Path::new("/nonexistent/journal"),
        &install.root().join(".activation-transaction"),
    );
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &absent_services(), None),
        ErrorClass::Runtime,
        "legacy activation recovery must finish before execution activation",
    );
    fs::remove_file(install.root().join(".activation-transaction")).unwrap();
    assert_eq!(install.state(), untouched);

    ExecutionTransaction::stage(&layout, "migration", &absent_services(), None).unwrap();
    let pending = install.state();
    assert_error(
        ExecutionTransaction::stage(&layout, "migration", &absent_services(), None),
        ErrorClass::FileExists,
        "an execution activation is already pending",
    );
    assert_eq!(install.state(), pending);
}

#[test]
fn component_scopes_refuse_foreign_changes() {
    let install = Install::new("txn-scope", &["1.0.0", "1.1.0"]);
    migrate(&install, "1.0.0");
    let settled = install.state();
    // Gateway scope may change only the gateway release.
    let layout = install.layout("1.1.0", "1.1.0");
    assert_error(
        ExecutionTransaction::stage(&layout, "gateway", &stopped_services(), None),
        ErrorClass::Value,
        "gateway activation changes another component's configuration",
    );
    // A retained unit that no longer matches its layout is never overwritten.
    let unit = install
        .base
        .join("home/.config/systemd/user/agents-server.service");
    let original = fs::read(&unit).unwrap();
    write_file(&unit, b"[Unit]\nDescription=edited by hand\n", 0o600);
    let layout = install.layout("1.0.0", "1.1.0");
    assert_error(
        ExecutionTransaction::stage(&layout, "gateway", &stopped_services(), None),
        ErrorClass::Runtime,
        "retained service configuration no longer matches its layout",
    );
    write_file(&unit, &original, 0o600);
    // A running retained worker must be named exactly for gateway scope.
    let running = Json::Object(json_object! {
        "worker" => json_object! {"state" => "running", "enabled" => true, "pid" => 77_i64},
        "gateway" => json_object! {"state" => "stopped", "enabled" => true},
    });
    assert_error(
        ExecutionTransaction::stage(&layout, "gateway", &running, None),
        ErrorClass::Value,
        "gateway activation requires the retained worker's process identity",
    );
    assert_error(
        ExecutionTransaction::stage(
            &install.layout("1.0.0", "1.0.0"),
            "migration",
            &absent_services(),
            None,
        ),
        ErrorClass::Value,
        "execution layout already exists; migration is not an update",
    );
    assert_eq!(install.state(), settled);
}

#[test]
fn outside_changes_block_every_later_step() {
    let install = Install::new("txn-outside", &["0.1.25"]);
    let layout = install.layout("0.1.25", "0.1.25");
    ExecutionTransaction::stage(&layout, "migration", &absent_services(), None).unwrap();
    ExecutionTransaction::publish(&install.root()).unwrap();
    let unit = install
        .base
        .join("home/.config/systemd/user/agents-server.service");
    write_file(&unit, b"tampered\n", 0o600);
    let tampered = install.state();
    let message = "worker configuration changed outside execution activation";
    assert_error(
        ExecutionTransaction::commit(&install.root(), &receipt(&layout, "0.1.25", "0.1.25")),
        ErrorClass::Runtime,
        message,
    );
    assert_error(
        ExecutionTransaction::rollback(&install.root()),
        ErrorClass::Runtime,
        message,
    );
    assert_error(
        ExecutionTransaction::publish(&install.root()),
        ErrorClass::Runtime,
        message,
    );
    assert_eq!(install.state(), tampered);
    fs::write(&unit, render_service(&layout, "worker").unwrap()).unwrap();

    // `current` pointing at another release is someone else's change.
    let other = install.base.release("9.9.9");
    fs::remove_file(install.root().join("current")).unwrap();
    link(&other, &install.root().join("current"));
    assert_error(
        ExecutionTransaction::commit(&install.root(), &receipt(&layout, "0.1.25", "0.1.25")),
        ErrorClass::Runtime,
        "gateway current changed outside execution activation",
    );
}

const HEALTH_MISMATCH: &str = "authenticated component health does not match the activation";

/// Receipts a published migration must not commit, each one key off the
/// matching receipt: (what, key, value, ValueError).
fn receipts_not_matching() -> [(&'static str, &'static str, Json, &'static str); 4] {
    [
        (
            "another worker version",
            "worker_version",
            Json::from("0.1.24"),
            HEALTH_MISMATCH,
        ),
        ("worker PID 0", "worker_pid", Json::Int(0), HEALTH_MISMATCH),
        (
            "a boolean gateway PID",
            "gateway_pid",
            Json::Bool(true),
            HEALTH_MISMATCH,
        ),
        (
            "another server identity",
            "server_identity",
            Json::from("somebody-else"),
            "activation changed the authenticated server identity",
        ),
    ]
}

/// The name of the temporary a killed save of the journal leaves.
const SAVE_TEMPORARY: &str = ".manifest.json.0123456789abcdef01234567.tmp";

/// Files in the journal directory that are not exactly a temporary its
/// save leaves (a foreign name, or that name without the journal's private
/// mode): (what, name, mode).
const UNEXPECTED_FILES: [(&str, &str, u32); 3] = [
    ("a foreign name", "notes.txt", 0o600),
    (
        "a temporary with a short token",
        ".manifest.json.0123.tmp",
        0o600,
    ),
    ("the temporary readable by its group", SAVE_TEMPORARY, 0o640),
];

#[test]
fn commit_and_finish_refusals() {
    let migration = Migration::staged("txn-commit", Some(SERVER_IDENTITY));
    assert_error(
        migration.commit(&migration.receipt()),
        ErrorClass::Value,
        "execution activation has not been published",
    );
    assert_error(
        migration.finish(),
        ErrorClass::Value,
        "execution activation is not finished",
    );
    migration.publish().unwrap();
    let published = migration.install.state();
    for (case, key, value, refusal) in receipts_not_matching() {
        let receipt = migration.receipt_with(key, value);
        assert_case_refused(
            migration.commit(&receipt),
            (ErrorClass::Value, refusal),
            case,
        );
    }
    assert_eq!(migration.install.state(), published);

    migration.commit(&migration.receipt()).unwrap();
    assert_error(
        migration.rollback(),
        ErrorClass::Value,
        "committed execution activation cannot roll back",
    );
    let journal = migration.install.journal_dir();
    let unexpected = (
        ErrorClass::Runtime,
        "execution transaction contains unexpected files",
    );
    for (case, name, mode) in UNEXPECTED_FILES {
        write_file(&journal.join(name), b"{}", mode);
        assert_case_refused(migration.finish(), unexpected, case);
        fs::remove_file(journal.join(name)).unwrap();
    }
    // The temporary of a killed save is the journal's own: retirement
    // removes it (the original refuses it forever).
    write_file(&journal.join(SAVE_TEMPORARY), b"{\"partial", 0o600);
    migration.finish().unwrap();
    assert!(!journal.exists());
}

/// A change to the journal's JSON, as a table entry.
type JournalEdit = fn(&mut JsonObject);

/// Journals that parse but are not one this helper wrote for the install:
/// (what, edit, ValueError).
fn edited_journals() -> [(&'static str, JournalEdit, &'static str); 6] {
    [
        (
            "an unknown key",
            |journal| {
                journal.insert("extra", 1_i64);
            },
            "invalid execution transaction",
        ),
        (
            "a malformed ID",
            |journal| {
                journal.insert("id", "execution-XYZ");
            },
            "invalid execution transaction identity",
        ),
        (
            "an unknown phase",
            |journal| {
                journal.insert("phase", "dreaming");
            },
            "invalid execution transaction state",
        ),
        (
            "another current after",
            |journal| {
                journal.insert("current_after", "/elsewhere");
            },
            "execution transaction paths changed",
        ),
        (
            "a snapshot writable by others, with a wrong digest",
            |journal| {
                let mut before = journal.get("before").unwrap().as_object().unwrap().clone();
                let snapshot = json_object! {
                    "exists" => true, "mode" => 0o666_i64, "sha256" => "00", "data" => "",
                };
                before.insert("worker", snapshot);
                journal.insert("before", before);
            },
            "invalid execution snapshot content",
        ),
        (
            "a previous current outside the releases",
            |journal| {
                journal.insert("current_before", "/tmp");
            },
            "previous execution current escaped release root",
        ),
    ]
}

#[test]
fn load_refuses_unsafe_or_stale_journals() {
    let migration = Migration::staged("txn-load", None);
    let manifest = migration.manifest_path();
    let original = fs::read(&manifest).unwrap();

    set_mode(&manifest, 0o644);
    assert_error(
        migration.load(),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", manifest.display()),
    );
    set_mode(&manifest, 0o600);

    for (case, edit, refusal) in edited_journals() {
        let mut journal = parse_json(&original).unwrap();
        edit(journal.as_object_mut().unwrap());
        write_file(&manifest, &encode_indented(&journal), 0o600);
        assert_case_refused(migration.load(), (ErrorClass::Value, refusal), case);
    }
    write_file(&manifest, &original, 0o600);
    migration.load().unwrap();

    // A changed VERSION re-renders differently: the pending plan is stale.
    let version = migration
        .install
        .base
        .join("install/releases/0.1.25/VERSION");
    write_file(&version, b"0.1.26\n", 0o644);
    assert_error(
        migration.load(),
        ErrorClass::Value,
        "execution transaction content changed",
    );
}

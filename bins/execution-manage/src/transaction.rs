//! The independent execution transaction of `execution_install`: the
//! `.execution-transaction` journal that makes a split gateway/worker
//! activation restartable at every step.
//!
//! The journal is a complete plan written before any configuration changes:
//! snapshots of both service files and the layout manifest as they were
//! (`before`) and as they must become (`after`), the `current` link on both
//! sides, the prior native service states and, once health is proven, the
//! receipt. Every operation reloads and re-validates the journal from disk
//! (re-rendering the units and re-reading both VERSION files), then checks that
//! nothing outside the transaction touched the files, so a crash at any point
//! leaves a journal that `publish`, `rollback`, `commit` or `finish` can resume.
//! Python code reads the same journal (the worker derives its startup hold from
//! it), so keys, phases and bytes match `execution_install` exactly.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::scope::Scope;
use agents_common::{
    atomic_write, check_text, desired, fsync_directory, layout_manifest, maintenance_operation_id,
    normalize_path, owned_directory, read_file, remove_abandoned_drafts, remove_atomic_temporaries,
    render_service, snapshot, Error, ExecutionLayout, OrName, Result, Role, ServiceState, FORMAT,
    MAX_CONFIG_BYTES, PROTOCOL_VERSION, TRANSACTION_NAME,
};
use python_compat::{
    json::{encode_indented, parse_json, Json, JsonObject},
    json_object,
    os::current_uid,
    token_hex,
};

/// Every phase a pending journal can be in.
const PHASES: [&str; 6] = [
    "prepared",
    "publishing",
    "published",
    "committed",
    "rolling-back",
    "rolled-back",
];
/// The snapshot keys, in the order Python checks them.
const KEYS: [&str; 3] = ["worker", "gateway", "layout"];
/// The journal's exact key set.
const JOURNAL_KEYS: [&str; 13] = [
    "format",
    "id",
    "scope",
    "phase",
    "layout",
    "prior_services",
    "paths",
    "before",
    "after",
    "current_before",
    "current_after",
    "receipt",
    "expected_server_identity",
];

/// The pending execution activation of one install root.
///
/// Each associated function mirrors one `execution_install` function and, like
/// it, takes the install root and reloads the journal, so callers can be
/// killed between any two calls and resume with the next.
pub struct ExecutionTransaction;

impl ExecutionTransaction {
    /// `stage`: validates the plan and publishes a complete pending journal
    /// (phase `prepared`) before any configuration changes. The caller must
    /// hold the [`agents_common::InstallationLock`].
    pub fn stage(
        layout: &ExecutionLayout,
        scope: impl OrName<Scope>,
        prior_services: &Json,
        expected_server_identity: Option<&str>,
    ) -> Result<Json> {
        layout.validate()?;
        if let Some(identity) = expected_server_identity {
            check_text(identity)?;
        }
        let scope = scope.into_member()?;
        check_service_states(prior_services)?;
        let prior_worker = prior_services.get("worker").and_then(Json::as_object);
        if scope == Scope::Gateway && state_of(prior_services, Role::Worker) == Some("running") {
            let worker = prior_worker.expect("validated service state");
            if !worker.contains_key("pid") || !worker.contains_key("instance_id") {
                return Err(Error::value(
                    "gateway activation requires the retained worker's process identity",
                ));
            }
        }
        let legacy = layout.install_root.join(".activation-transaction");
        if entry_exists(&legacy) {
            return Err(Error::runtime(
                "legacy activation recovery must finish before execution activation",
            ));
        }
        let journal_dir = layout.transaction_dir();
        if entry_exists(&journal_dir) {
            return Err(already_pending());
        }
        check_prior_layout(layout, scope)?;
        let paths = journal_paths(layout)?;
        let mut before = JsonObject::new();
        for key in KEYS {
            let path = paths.get(key).and_then(Json::as_str).expect("journal path");
            before.insert(key, snapshot(Path::new(path))?);
        }
        for role in Role::ALL {
            let exists = before
                .get(role.as_str())
                .and_then(|item| item.get("exists"));
            if exists != Some(&Json::Bool(true)) && state_of(prior_services, role) != Some("absent")
            {
                return Err(Error::value(
                    "loaded native service has no restorable configuration",
                ));
            }
        }
        let current = current_target(layout)?;
        let id = format!("execution-{}", token_hex(12)?);
        let value = Json::Object(json_object! {
            "format" => FORMAT,
            "id" => id.as_str(),
            "scope" => scope.as_str(),
            "phase" => "prepared",
            "layout" => layout.to_dict(),
            "prior_services" => prior_services.clone(),
            "paths" => paths,
            "before" => before,
            "after" => desired_after(layout)?,
            "current_before" => current,
            "current_after" => path_text(&layout.gateway_release),
            "expected_server_identity" => expected_server_identity,
            "receipt" => Json::Null,
        });
        // A complete journal appears atomically: a crash while preparing leaves
        // only an unreferenced private draft, never a half-written pending
        // journal that would block a safe retry. This retry removes such
        // drafts (the original leaves them forever).
        remove_abandoned_journal_drafts(&layout.install_root)?;
        let draft = layout.install_root.join(format!(".execution-draft-{id}"));
        create_private_directory(&draft)?;
        atomic_write(
            &draft.join("manifest.json"),
            &encode_indented(&value),
            0o600,
        )?;
        if entry_exists(&journal_dir) {
            return Err(already_pending());
        }
        std::fs::rename(&draft, &journal_dir).map_err(|err| Error::from_io_path(&err, &draft))?;
        // The fsync a test build drops to show the power-cut campaign fails.
        #[cfg(not(feature = "test-drop-journal-fsync"))]
        fsync_directory(&layout.install_root)?;
        Ok(value)
    }

    /// `_load`: reads the pending journal of `root` and re-validates all of it
    /// against the layout it names (units re-rendered, VERSION files re-read),
    /// returning the journal and its layout.
    pub fn load(root: &Path) -> Result<(Json, ExecutionLayout)> {
        let root = normalize_path(root)?;
        owned_directory(&root, false)?;
        let directory = root.join(TRANSACTION_NAME);
        owned_directory(&directory, true)?;
        let (data, _mode) = read_file(&directory.join("manifest.json"), true)?;
        let value = parse_json(&data)?;
        let well_formed = value.as_object().is_some_and(|journal| {
            journal.len() == JOURNAL_KEYS.len()
                && JOURNAL_KEYS.iter().all(|key| journal.contains_key(key))
                && journal.get("format") == Some(&Json::from(FORMAT))
        });
        if !well_formed {
            return Err(Error::value("invalid execution transaction"));
        }
        maintenance_operation_id(&value)?;
        let identity = field(&value, "expected_server_identity");
        if !identity.is_null() {
            check_text(identity.as_str().unwrap_or_default())?;
        }
        let layout = ExecutionLayout::from_dict(field(&value, "layout"))?;
        if layout.install_root != root {
            return Err(Error::value(
                "execution transaction belongs to another install root",
            ));
        }
        let scope_known = field(&value, "scope")
            .as_str()
            .is_some_and(|scope| Scope::parse(scope).is_ok());
        let phase_known = field(&value, "phase")
            .as_str()
            .is_some_and(|phase| PHASES.contains(&phase));
        if !scope_known || !phase_known {
            return Err(Error::value("invalid execution transaction state"));
        }
        check_service_states(field(&value, "prior_services"))?;
        let expected_paths = journal_paths(&layout)?;
        if *field(&value, "paths") != expected_paths
            || *field(&value, "current_after") != Json::from(path_text(&layout.gateway_release))
        {
            return Err(Error::value("execution transaction paths changed"));
        }
        let before_keys_match = field(&value, "before").as_object().is_some_and(|before| {
            before.len() == KEYS.len() && KEYS.iter().all(|key| before.contains_key(key))
        });
        if *field(&value, "after") != desired_after(&layout)? || !before_keys_match {
            return Err(Error::value("execution transaction content changed"));
        }
        for item in object(field(&value, "before")).values() {
            check_before_snapshot(item)?;
        }
        if let Json::Str(before) = field(&value, "current_before") {
            let target = root.join(before);
            let resolved = python_compat::path::resolve_strict(&target)?;
            if resolved.parent() != Some(root.join("releases").as_path()) {
                return Err(Error::value(
                    "previous execution current escaped release root",
                ));
            }
        } else if !field(&value, "current_before").is_null() {
            return Err(Error::value(
                "previous execution current escaped release root",
            ));
        }
        Ok((value, layout))
    }

    /// The layout the journal's `before` snapshot holds: what rolling the
    /// journal back leaves installed.
    pub fn prior_layout(journal: &Json) -> Result<ExecutionLayout> {
        snapshot_layout(field(field(journal, "before"), "layout"))
    }

    /// `_check_publication`: proves that every service file, the layout
    /// manifest and `current` are in a state this journal produced (before, or
    /// after for the affected keys); anything else was changed by someone else
    /// and must not be overwritten.
    pub fn check_publication(journal: &Json, layout: &ExecutionLayout) -> Result<()> {
        let affected = affected(journal);
        for key in KEYS {
            let actual = snapshot(&journal_path(journal, key))?;
            let matches_before = actual == *side(journal, "before", key);
            let matches_after = affected.contains(&key) && actual == *side(journal, "after", key);
            if !matches_before && !matches_after {
                return Err(Error::runtime(format!(
                    "{key} configuration changed outside execution activation"
                )));
            }
        }
        let current = Json::from(current_target(layout)?);
        if current != *field(journal, "current_before")
            && current != *field(journal, "current_after")
        {
            return Err(Error::runtime(
                "gateway current changed outside execution activation",
            ));
        }
        Ok(())
    }

    /// `publish`: writes the affected files and, unless only the worker
    /// changes, points `current` at the candidate gateway release. Re-runnable
    /// from `publishing` after a crash.
    pub fn publish(root: &Path) -> Result<Json> {
        let (mut journal, layout) = Self::load(root)?;
        if !phase_in(&journal, &["prepared", "publishing", "published"]) {
            return Err(Error::value(
                "execution activation cannot publish in this phase",
            ));
        }
        Self::check_publication(&journal, &layout)?;
        save_phase(&mut journal, &layout, "publishing")?;
        for key in affected(&journal) {
            let path = journal_path(&journal, key);
            let item = side(&journal, "after", key);
            if snapshot(&path)? != *item {
                atomic_write(&path, &snapshot_data(item)?, snapshot_mode(item))?;
            }
        }
        if scope(&journal) != Scope::Worker {
            replace_link(&layout, field(&journal, "current_after").as_str())?;
        }
        save_phase(&mut journal, &layout, "published")?;
        Ok(journal)
    }

    /// `rollback`: restores every affected file (original mode included) and
    /// `current` to the `before` side. Any phase but `committed`; re-runnable.
    pub fn rollback(root: &Path) -> Result<Json> {
        let (mut journal, layout) = Self::load(root)?;
        if phase(&journal) == "committed" {
            return Err(Error::value(
                "committed execution activation cannot roll back",
            ));
        }
        Self::check_publication(&journal, &layout)?;
        save_phase(&mut journal, &layout, "rolling-back")?;
        for key in affected(&journal) {
            let path = journal_path(&journal, key);
            let item = side(&journal, "before", key);
            if snapshot(&path)? == *item {
                continue;
            }
            if item.get("exists") == Some(&Json::Bool(true)) {
                atomic_write(&path, &snapshot_data(item)?, snapshot_mode(item))?;
            } else {
                std::fs::remove_file(&path).map_err(|err| Error::from_io_path(&err, &path))?;
                fsync_directory(path.parent().unwrap_or(Path::new("/")))?;
            }
        }
        if scope(&journal) != Scope::Worker {
            replace_link(&layout, field(&journal, "current_before").as_str())?;
        }
        save_phase(&mut journal, &layout, "rolled-back")?;
        Ok(journal)
    }

    /// `commit`: records caller-verified component health (never inferred from
    /// files) after proving the publication is complete; the receipt is stored
    /// verbatim. From here on the activation can only be finished, not undone.
    pub fn commit(root: &Path, receipt: &Json) -> Result<Json> {
        let (mut journal, layout) = Self::load(root)?;
        if phase(&journal) != "published" {
            return Err(Error::value("execution activation has not been published"));
        }
        Self::check_publication(&journal, &layout)?;
        for key in affected(&journal) {
            if snapshot(&journal_path(&journal, key))? != *side(&journal, "after", key) {
                return Err(Error::runtime("execution publication is incomplete"));
            }
        }
        if Json::from(current_target(&layout)?) != *field(&journal, "current_after") {
            return Err(Error::runtime("gateway release link is not the candidate"));
        }
        let expected = layout_manifest(&layout)?;
        let missing = Json::Null;
        let get = |key: &str| receipt.get(key).unwrap_or(&missing);
        let positive_int = |key: &str| get(key).as_int().is_some_and(|pid| pid > 0);
        let health_matches = receipt.as_object().is_some()
            && get("gateway_version") == field(&expected, "gateway_version")
            && get("worker_version") == field(&expected, "worker_version")
            && *get("worker_release") == Json::from(path_text(&layout.worker_release))
            && *get("protocol_version") == Json::from(PROTOCOL_VERSION)
            && get("server_identity")
                .as_str()
                .is_some_and(|id| !id.is_empty())
            && positive_int("gateway_pid")
            && positive_int("worker_pid");
        if !health_matches {
            return Err(Error::value(
                "authenticated component health does not match the activation",
            ));
        }
        let identity = field(&journal, "expected_server_identity");
        if !identity.is_null() && get("server_identity") != identity {
            return Err(Error::value(
                "activation changed the authenticated server identity",
            ));
        }
        let retained = field(field(&journal, "prior_services"), "worker");
        if scope(&journal) == Scope::Gateway
            && retained.get("state") == Some(&Json::from("running"))
        {
            let same_pid = retained.get("pid") == Some(get("worker_pid"));
            let same_instance = retained.get("instance_id") == Some(get("worker_instance_id"));
            if !same_pid || !same_instance {
                return Err(Error::value(
                    "gateway activation did not preserve the exact worker process",
                ));
            }
        }
        object_mut(&mut journal).insert("receipt", receipt.clone());
        save_phase(&mut journal, &layout, "committed")?;
        Ok(journal)
    }

    /// `finish`: retires a terminal journal (committed or rolled back) to
    /// `.execution-completed-<id>` after proving the files still match the side
    /// it ended on. Nothing is deleted: the journal stays as audit evidence.
    pub fn finish(root: &Path) -> Result<()> {
        let (journal, layout) = Self::load(root)?;
        let side_name = match phase(&journal) {
            "committed" => "after",
            "rolled-back" => "before",
            _ => return Err(Error::value("execution activation is not finished")),
        };
        Self::check_publication(&journal, &layout)?;
        let affected = affected(&journal);
        for key in KEYS {
            let expected = if affected.contains(&key) {
                side(&journal, side_name, key)
            } else {
                side(&journal, "before", key)
            };
            if snapshot(&journal_path(&journal, key))? != *expected {
                return Err(Error::runtime(
                    "execution terminal configuration no longer matches its receipt",
                ));
            }
        }
        let current = Json::from(current_target(&layout)?);
        if current != *field(&journal, &format!("current_{side_name}")) {
            return Err(Error::runtime(
                "execution terminal release no longer matches its receipt",
            ));
        }
        let directory = layout.transaction_dir();
        remove_own_leftovers(&journal, &layout)?;
        let entries = std::fs::read_dir(&directory)
            .map_err(|err| Error::from_io_path(&err, &directory))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|err| Error::from_io_path(&err, &directory))?;
        if entries.len() != 1 || entries[0] != "manifest.json" {
            return Err(Error::runtime(
                "execution transaction contains unexpected files",
            ));
        }
        let id = field(&journal, "id").as_str().unwrap_or_default();
        let retired = layout
            .install_root
            .join(format!(".execution-completed-{id}"));
        std::fs::rename(&directory, &retired)
            .map_err(|err| Error::from_io_path(&err, &directory))?;
        fsync_directory(&layout.install_root)
    }

    /// The layout a journal's `before` manifest snapshot describes (the
    /// installation as it was), or `None` for a migration from a legacy install.
    pub fn previous_layout(journal: &Json) -> Result<Option<ExecutionLayout>> {
        let previous = side(journal, "before", "layout");
        if previous.get("exists") != Some(&Json::Bool(true)) {
            return Ok(None);
        }
        snapshot_layout(previous).map(Some)
    }
}

/// `_current_target`: the raw link text of `install_root/current` (possibly
/// relative, compared as a string), after proving it is an owned symlink into
/// `releases/`; `None` when there is no link.
pub(crate) fn current_target(layout: &ExecutionLayout) -> Result<Option<String>> {
    let current = layout.current();
    let info = match std::fs::symlink_metadata(&current) {
        Ok(info) => info,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(Error::from_io_path(&err, &current)),
    };
    use std::os::unix::fs::MetadataExt as _;
    if !info.file_type().is_symlink() || info.uid() != current_uid() {
        return Err(Error::permission(
            "execution current must be an owned release symlink",
        ));
    }
    let target = python_compat::path::resolve_strict(&current)?;
    if target.parent() != Some(layout.install_root.join("releases").as_path()) {
        return Err(Error::permission(
            "execution current must point into retained releases",
        ));
    }
    owned_directory(&target, false)?;
    let link = std::fs::read_link(&current).map_err(|err| Error::from_io_path(&err, &current))?;
    Ok(Some(path_text(&link)))
}

/// `_service_states`: the prior native states a journal records must have
/// exactly the shape `restore` can act on.
pub(crate) fn check_service_states(value: &Json) -> Result<()> {
    let both = value.as_object().is_some_and(|states| {
        states.len() == 2 && states.contains_key("worker") && states.contains_key("gateway")
    });
    if !both {
        return Err(Error::value(
            "both prior native service states are required",
        ));
    }
    // Each role in the journal's own order, as Python iterates the dict.
    for item in object(value).values() {
        ServiceState::from_json(item)?;
    }
    Ok(())
}

/// Prefix of the draft directory `stage` renames into the pending journal.
const DRAFT_PREFIX: &str = ".execution-draft-";
/// Prefix of the temporary link `_replace_link` renames over `current`.
const CURRENT_TEMPORARY_PREFIX: &str = ".execution-current-";

/// Removes what a killed earlier run of this journal left unfinished, before
/// `finish` proves the journal directory holds only `manifest.json`: the
/// temporaries of an interrupted rewrite of the journal itself (private, as
/// the journal is), of the service files and the layout manifest it names,
/// and an unrenamed `current` link. Each must carry exactly the name this
/// helper gives it and be this uid's own; anything else is left for
/// `finish` to refuse. The original leaves all of them, and a journal
/// temporary then blocks its `finish` forever (`execution transaction
/// contains unexpected files`). Runs under the installation lock, so no
/// live writer's temporary can be taken.
fn remove_own_leftovers(journal: &Json, layout: &ExecutionLayout) -> Result<()> {
    remove_atomic_temporaries(&layout.transaction_dir().join("manifest.json"), true)?;
    for key in KEYS {
        remove_atomic_temporaries(&journal_path(journal, key), false)?;
    }
    let root = &layout.install_root;
    let mut removed = false;
    for entry in std::fs::read_dir(root).map_err(|err| Error::from_io_path(&err, root))? {
        let entry = entry.map_err(|err| Error::from_io_path(&err, root))?;
        let name = entry.file_name();
        let ours = name
            .to_str()
            .is_some_and(|name| python_compat::is_prefixed_hex(name, CURRENT_TEMPORARY_PREFIX, 24));
        let path = entry.path();
        let own_link = std::fs::symlink_metadata(&path).is_ok_and(|info| {
            use std::os::unix::fs::MetadataExt as _;
            info.file_type().is_symlink() && info.uid() == current_uid()
        });
        if ours && own_link {
            std::fs::remove_file(&path).map_err(|err| Error::from_io_path(&err, &path))?;
            removed = true;
        }
    }
    if removed {
        fsync_directory(root)?;
    }
    Ok(())
}

/// Removes the drafts of journals that a killed `stage` never published
/// (`.execution-draft-execution-<24 hex>`): a private directory of this uid
/// holding nothing but its `manifest.json` and that file's unfinished
/// temporaries, all private regular files of this uid. No pending journal
/// exists (the caller checked) and the installation lock is held, so no
/// live `stage` owns one. Anything else under such a name is left alone.
fn remove_abandoned_journal_drafts(root: &Path) -> Result<()> {
    remove_abandoned_drafts(root, b"manifest.json", |name| {
        std::str::from_utf8(name).is_ok_and(|name| {
            name.strip_prefix(DRAFT_PREFIX)
                .is_some_and(|id| python_compat::is_prefixed_hex(id, "execution-", 24))
        })
    })
}

/// `exists() or is_symlink()`: an entry (even a dangling link) is present.
fn entry_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn already_pending() -> Error {
    Error::file_exists("an execution activation is already pending")
}

/// `mkdir(mode=0o700)`: the process umask applies, as in Python.
fn create_private_directory(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|err| Error::from_io_path(&err, path))
}

/// `str(path)` for a path that passed `_path` (UTF-8 by construction).
fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `stage`'s check of the installed layout: a migration finds none; a
/// component activation finds one that differs only in that component's
/// release, and the retained service's file still renders from it.
fn check_prior_layout(layout: &ExecutionLayout, scope: Scope) -> Result<()> {
    let prior_layout = snapshot(&layout.manifest_path())?;
    if scope == Scope::Migration {
        if prior_layout.get("exists") == Some(&Json::Bool(true)) {
            return Err(Error::value(
                "execution layout already exists; migration is not an update",
            ));
        }
        return Ok(());
    }
    if prior_layout.get("exists") != Some(&Json::Bool(true)) {
        return Err(Error::value(
            "execution activation requires a previous layout",
        ));
    }
    let old = snapshot_layout(&prior_layout)?;
    let (old_fields, new_fields) = (old.to_dict(), layout.to_dict());
    let (allowed, retained) = if scope == Scope::Gateway {
        ("gateway_release", Role::Worker)
    } else {
        ("worker_release", Role::Gateway)
    };
    let changed_elsewhere = object(&old_fields)
        .iter()
        .any(|(key, value)| key != allowed && new_fields.get(key) != Some(value));
    if changed_elsewhere {
        return Err(Error::value(format!(
            "{} activation changes another component's configuration",
            scope.as_str()
        )));
    }
    if snapshot(&layout.service_path(retained)?)? != desired(&render_service(&old, retained)?) {
        return Err(Error::runtime(
            "retained service configuration no longer matches its layout",
        ));
    }
    Ok(())
}

/// The `paths` member: both service files and the layout manifest.
fn journal_paths(layout: &ExecutionLayout) -> Result<Json> {
    Ok(Json::Object(json_object! {
        "worker" => path_text(&layout.service_path(Role::Worker)?),
        "gateway" => path_text(&layout.service_path(Role::Gateway)?),
        "layout" => path_text(&layout.manifest_path()),
    }))
}

/// The `after` member, recomputed from the layout (so template or VERSION
/// drift invalidates a pending journal instead of publishing stale bytes).
fn desired_after(layout: &ExecutionLayout) -> Result<Json> {
    Ok(Json::Object(json_object! {
        "worker" => desired(&render_service(layout, Role::Worker)?),
        "gateway" => desired(&render_service(layout, Role::Gateway)?),
        "layout" => desired(&encode_indented(&layout_manifest(layout)?)),
    }))
}

/// One `before` entry must be `{"exists": false}` or a complete, self-
/// consistent snapshot that is safe to write back.
fn check_before_snapshot(item: &Json) -> Result<()> {
    let absent = Json::Object(json_object! {"exists" => false});
    if *item == absent {
        return Ok(());
    }
    let complete = item.as_object().is_some_and(|snapshot| {
        snapshot.len() == 4
            && ["exists", "mode", "sha256", "data"]
                .iter()
                .all(|key| snapshot.contains_key(key))
    });
    if !complete {
        return Err(Error::value("invalid execution snapshot"));
    }
    let content = decode_base64(item.get("data").and_then(Json::as_str))?;
    let mode_ok = matches!(item.get("mode"), Some(Json::Int(mode)) if (0..=0o777).contains(mode) && mode & 0o022 == 0);
    let digest = hex_digest(&content);
    // `exists is True`: the bool itself, not a number equal to it.
    let valid = matches!(item.get("exists"), Some(Json::Bool(true)))
        && mode_ok
        && content.len() as u64 <= MAX_CONFIG_BYTES
        && item.get("sha256").and_then(Json::as_str) == Some(digest.as_str());
    if !valid {
        return Err(Error::value("invalid execution snapshot content"));
    }
    Ok(())
}

/// `base64.b64decode(data, validate=True)`: strict alphabet and padding
/// (binascii.Error is a ValueError).
fn decode_base64(data: Option<&str>) -> Result<Vec<u8>> {
    let Some(data) = data else {
        return Err(Error::value("invalid execution snapshot content"));
    };
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|err| match err {
            base64::DecodeError::InvalidByte(..) => Error::value("Only base64 data is allowed"),
            _ => Error::value("Incorrect padding"),
        })
}

fn hex_digest(data: &[u8]) -> String {
    python_compat::hex(&Sha256::digest(data))
}

/// The layout stored in a manifest snapshot's data (the previous install).
fn snapshot_layout(item: &Json) -> Result<ExecutionLayout> {
    let data = decode_base64(item.get("data").and_then(Json::as_str))?;
    let previous = parse_json(&data)?;
    ExecutionLayout::from_dict(previous.subscript("layout")?)
}

fn snapshot_data(item: &Json) -> Result<Vec<u8>> {
    decode_base64(item.get("data").and_then(Json::as_str))
}

fn snapshot_mode(item: &Json) -> u32 {
    item.get("mode")
        .and_then(Json::as_int)
        .and_then(|mode| u32::try_from(mode).ok())
        .unwrap_or(0o600)
}

/// `_affected`: which snapshot keys this scope may change.
fn affected(journal: &Json) -> &'static [&'static str] {
    match scope(journal) {
        Scope::Gateway => &["gateway", "layout"],
        Scope::Worker => &["worker", "layout"],
        _ => &["worker", "gateway", "layout"],
    }
}

/// `_replace_link`: points `current` at `target` with an atomic rename (or
/// removes it for `None`), then makes the change durable.
fn replace_link(layout: &ExecutionLayout, target: Option<&str>) -> Result<()> {
    if current_target(layout)?.as_deref() == target {
        return Ok(());
    }
    let current = layout.current();
    match target {
        None => {
            std::fs::remove_file(&current).map_err(|err| Error::from_io_path(&err, &current))?
        }
        Some(target) => {
            let temporary = layout
                .install_root
                .join(format!(".execution-current-{}", token_hex(12)?));
            std::os::unix::fs::symlink(target, &temporary)
                .map_err(|err| Error::from_io_path(&err, &temporary))?;
            std::fs::rename(&temporary, &current)
                .map_err(|err| Error::from_io_path(&err, &temporary))?;
        }
    }
    fsync_directory(&layout.install_root)
}

/// `_save` with a new phase: the journal is rewritten atomically (0600).
fn save_phase(journal: &mut Json, layout: &ExecutionLayout, phase: &str) -> Result<()> {
    object_mut(journal).insert("phase", phase);
    atomic_write(
        &layout.transaction_dir().join("manifest.json"),
        &encode_indented(journal),
        0o600,
    )
}

fn phase_in(journal: &Json, phases: &[&str]) -> bool {
    phases.contains(&phase(journal))
}

fn phase(journal: &Json) -> &str {
    field(journal, "phase").as_str().unwrap_or_default()
}

/// The scope of a loaded journal (`load` refused any other name; an
/// unreadable one would take `_affected`'s widest branch, migration's).
fn scope(journal: &Json) -> Scope {
    let name = field(journal, "scope").as_str().unwrap_or_default();
    Scope::parse(name).unwrap_or(Scope::Migration)
}

fn state_of(services: &Json, role: Role) -> Option<&str> {
    services.get(role.as_str())?.get("state")?.as_str()
}

fn journal_path(journal: &Json, key: &str) -> PathBuf {
    PathBuf::from(
        field(field(journal, "paths"), key)
            .as_str()
            .unwrap_or_default(),
    )
}

fn side<'a>(journal: &'a Json, side: &str, key: &str) -> &'a Json {
    field(field(journal, side), key)
}

/// A member of a validated journal (missing members read as `null`, which no
/// check accepts).
fn field<'a>(value: &'a Json, key: &str) -> &'a Json {
    const NULL: &Json = &Json::Null;
    value.get(key).unwrap_or(NULL)
}

fn object(value: &Json) -> &JsonObject {
    static EMPTY: std::sync::OnceLock<JsonObject> = std::sync::OnceLock::new();
    value
        .as_object()
        .unwrap_or_else(|| EMPTY.get_or_init(JsonObject::new))
}

fn object_mut(value: &mut Json) -> &mut JsonObject {
    value
        .as_object_mut()
        .expect("a loaded journal is an object")
}

//! `_read_manifest`: the schema-closed validation of
//! `.activation-transaction/manifest.json`, in Python's order and with its
//! messages, so a damaged or foreign journal fails exactly where install.sh's
//! own Python journal writer would fail.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::config::{config_kinds, config_modes, config_staging_paths};
use super::io::{
    is_owned_safe_directory, read_private_file, ACTIVATION_CONFIG_LIMIT, ACTIVATION_CONTROL_LIMIT,
};
use super::text::{has_exact_keys, safe_text};
use super::volume::{rebase_volume_bindings, SystemVolumes, VolumeProbe};
use crate::error::{Error, Result};
use crate::fs::fsync_directory_nofollow;
use python_compat::{
    hex, in_str_set,
    ipaddress::ip_address,
    is_lower_hex, is_prefixed_hex,
    json::{encode_compact_sorted, parse_json, Json, JsonObject},
    loose_int, member_truthy,
    os::{current_uid, is_type, lstat, permission_bits, unlink},
    path::{absolute_path, is_strict_ancestor, pure_path_text, same_path},
    strict_int,
    uuid::is_canonical_uuid,
};

/// Name of the journal directory under the install root.
pub const ACTIVATION_JOURNAL_NAME: &str = ".activation-transaction";
/// `FORMAT` of a journal written by `begin` without execution metadata.
const FORMAT: i64 = 2;
/// `EXECUTION_FORMAT`: a split-service journal.
const EXECUTION_FORMAT: i64 = 3;
/// Every phase of the outer activation.
pub(crate) const PHASES: [&str; 19] = [
    "prepared",
    "guarded",
    "quiescing",
    "quiesced",
    "linking",
    "linked",
    "stopping",
    "stopped",
    "fencing",
    "fenced",
    "authorizing",
    "authority",
    "candidate-starting",
    "candidate-healthy",
    "committing",
    "committed",
    "rolling-back",
    "rolled-back",
    "rollback-healthy",
];
/// Phases of a rollback, which alone carry `rollback_from`.
pub(crate) const ROLLBACK_PHASES: [&str; 3] = ["rolling-back", "rolled-back", "rollback-healthy"];
/// The 31 keys every format carries.
const BASE_KEYS: [&str; 31] = [
    "format",
    "transaction_id",
    "release_version",
    "release_dir",
    "candidate_release",
    "old_target",
    "old_release",
    "current",
    "previous",
    "previous_release",
    "env_path",
    "env",
    "service_path",
    "service",
    "service_state",
    "service_enabled",
    "legacy_service_state",
    "legacy_service_enabled",
    "prior_port",
    "prior_bind_address",
    "intent",
    "client_binding",
    "desired_env",
    "desired_service",
    "phase",
    "rollback_from",
    "hub",
    "guard",
    "authority_pending",
    "observed_env_sha256",
    "observed_service_sha256",
];
const RELEASE_KEYS: [&str; 5] = ["source", "target", "device", "inode", "version_sha256"];
const EXECUTION_KEYS: [&str; 7] = [
    "runtime_dir",
    "operation_id",
    "gateway_state",
    "gateway_enabled",
    "old_worker_release",
    "handoff",
    "api_contract",
];
/// The keys of a server-admitted worker handoff (`update_handoff`).
pub(crate) const HANDOFF_KEYS: [&str; 5] = [
    "schema",
    "operation_id",
    "worker_instance_id",
    "lease_id",
    "expected_server_identity",
];
const SERVICE_STATES: [&str; 3] = ["absent", "stopped", "running"];

/// A validated activation journal manifest (the dict `_read_manifest`
/// returns). Equality is Python dict equality, which the helper uses to prove
/// the journal did not change across a barrier.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationManifest {
    value: JsonObject,
}

impl ActivationManifest {
    /// `_read_manifest(root, cleanup=...)`: reads and validates
    /// `<root>/.activation-transaction/manifest.json`, re-hashing every backup.
    /// With `cleanup`, leftover manifest temporaries are removed first.
    /// Returns the journal directory and the manifest.
    pub fn read(root: &Path, cleanup: bool) -> Result<(PathBuf, Self)> {
        Self::read_on(root, cleanup, &SystemVolumes)
    }

    /// [`ActivationManifest::read`] with the host's volumes seen through
    /// `volumes` (macOS journals rebase their device numbers on every read).
    pub fn read_on(
        root: &Path,
        cleanup: bool,
        volumes: &dyn VolumeProbe,
    ) -> Result<(PathBuf, Self)> {
        read_manifest(root, &root.join(ACTIVATION_JOURNAL_NAME), cleanup, volumes)
    }

    /// The value of `key` (`Null` when absent, which validation excludes).
    pub fn get(&self, key: &str) -> &Json {
        self.value.get(key).unwrap_or(&Json::Null)
    }

    /// The text of a string field (empty when not a string).
    pub fn text(&self, key: &str) -> &str {
        self.get(key).as_str().unwrap_or_default()
    }

    /// The current phase.
    pub fn phase(&self) -> &str {
        self.text("phase")
    }

    /// The `activation-<24 hex>` ownership key.
    pub fn transaction_id(&self) -> &str {
        self.text("transaction_id")
    }

    /// True for a format-3 (split execution) journal.
    pub fn is_execution(&self) -> bool {
        self.get("format") == &Json::from(EXECUTION_FORMAT)
    }

    /// The `execution` metadata of a format-3 journal.
    pub fn execution(&self) -> Option<&JsonObject> {
        self.get("execution").as_object()
    }

    /// One field of the `execution` metadata (`Null` when absent).
    pub fn execution_field(&self, key: &str) -> &Json {
        self.execution()
            .and_then(|execution| execution.get(key))
            .unwrap_or(&Json::Null)
    }

    /// A release-identity field (`candidate_release`, `old_release`, ...) as
    /// an object; empty for `{}`.
    pub fn release(&self, key: &str) -> JsonObject {
        self.get(key).as_object().cloned().unwrap_or_default()
    }

    /// The configuration kinds this journal owns (`_config_kinds`).
    pub fn config_kinds(&self) -> &'static [&'static str] {
        config_kinds(self.is_execution())
    }

    /// The whole manifest as JSON.
    pub fn as_json(&self) -> Json {
        Json::Object(self.value.clone())
    }

    /// `_canonical(value)`: the exact manifest bytes (compact, sorted keys,
    /// ASCII escapes, trailing newline).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        encode_compact_sorted(&Json::Object(self.value.clone()))
    }

    /// `{**value, "phase": phase}`: the same journal judged as if it were in
    /// `phase` (recovery-state re-validates a rollback against the phase it
    /// started from).
    pub fn with_phase(&self, phase: &str) -> Self {
        let mut value = self.value.clone();
        value.insert("phase", phase);
        ActivationManifest { value }
    }

    /// The mutable dict, for the journal's own writer (`replace_config`).
    pub fn object_mut(&mut self) -> &mut JsonObject {
        &mut self.value
    }
}

/// `_canonical` of an arbitrary journal value (test journals, begin).
pub fn canonical_manifest_bytes(value: &Json) -> Vec<u8> {
    encode_compact_sorted(value)
}

fn read_manifest(
    root: &Path,
    directory: &Path,
    cleanup: bool,
    volumes: &dyn VolumeProbe,
) -> Result<(PathBuf, ActivationManifest)> {
    validate_owned_root(root, "activation transaction root is unsafe")?;
    let releases = root.join("releases");
    validate_owned_root(&releases, "activation releases root is unsafe")?;
    let info = lstat(directory)?;
    if !is_type(&info, rustix::fs::FileType::Directory)
        || info.st_uid != current_uid()
        || permission_bits(&info) != 0o700
    {
        return Err(Error::permission(
            "activation transaction directory is unsafe",
        ));
    }
    if cleanup {
        cleanup_manifest_temporaries(directory)?;
    }
    let data = read_private_file(&directory.join("manifest.json"), ACTIVATION_CONTROL_LIMIT)?;
    let value = parse_json(&data)
        .map_err(|_| Error::runtime("activation transaction manifest is invalid"))?;
    let mut value = match value {
        Json::Object(object) => object,
        _ => return Err(Error::runtime("activation transaction manifest is invalid")),
    };
    validate(root, &releases, directory, &mut value, volumes)?;
    Ok((directory.to_path_buf(), ActivationManifest { value }))
}

/// `_validate_root` / `_validate_releases_root`.
fn validate_owned_root(path: &Path, message: &str) -> Result<()> {
    if !is_owned_safe_directory(&lstat(path)?) {
        return Err(Error::permission(message));
    }
    Ok(())
}

/// `_cleanup_manifest_temps`: removes `.manifest.json.<24 hex>.tmp` leftovers
/// of an interrupted rewrite, refusing anything that is not a private file.
fn cleanup_manifest_temporaries(directory: &Path) -> Result<()> {
    let mut removed = false;
    let entries =
        std::fs::read_dir(directory).map_err(|error| Error::from_io_path(&error, directory))?;
    for entry in entries {
        let entry = entry.map_err(|error| Error::from_io_path(&error, directory))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_temporary = name
            .strip_prefix(".manifest.json.")
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .is_some_and(|token| is_lower_hex(token, 24));
        if !is_temporary {
            continue;
        }
        let path = directory.join(name);
        let info = lstat(&path)?;
        if !is_type(&info, rustix::fs::FileType::RegularFile)
            || info.st_uid != current_uid()
            || info.st_nlink != 1
            || permission_bits(&info) != 0o600
        {
            return Err(Error::permission(
                "activation transaction staging file is unsafe",
            ));
        }
        unlink(&path)?;
        removed = true;
    }
    if removed {
        fsync_directory_nofollow(directory)?;
    }
    Ok(())
}

fn invalid(message: &str) -> Error {
    Error::runtime(format!("activation transaction {message}"))
}

/// `_validate`: the whole journal manifest, check by check in the
/// original's order (the first failing check names the refusal).
fn validate(
    root: &Path,
    releases: &Path,
    directory: &Path,
    value: &mut JsonObject,
    volumes: &dyn VolumeProbe,
) -> Result<()> {
    let format = check_format_and_keys(value)?;
    let execution_format = format == ManifestFormat::Execution;
    let kinds = config_kinds(execution_format);
    check_phase(value)?;
    let transaction_id = check_identity_and_links(value, kinds)?;
    check_backups(value, kinds, directory)?;
    check_services_and_binding(value)?;
    check_desired_configuration(value, kinds, &transaction_id)?;
    check_release_paths(root, releases, value)?;
    if execution_format {
        validate_execution(root, value)?;
    }
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    validate_hub(field("hub"), text_of(field("intent")).as_str())?;
    validate_guard(field("guard"))?;
    rebase_volume_bindings(volumes, value, format == ManifestFormat::Legacy)
}

/// Which of the three manifest formats a journal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ManifestFormat {
    /// Format 1: no volume bindings; device numbers are rebased.
    Legacy,
    /// [`FORMAT`]: with volume bindings.
    Current,
    /// [`EXECUTION_FORMAT`]: also the split layout's files.
    Execution,
}

/// The format, and exactly its keys.
fn check_format_and_keys(value: &JsonObject) -> Result<ManifestFormat> {
    let format = value.get("format").cloned().unwrap_or(Json::Null);
    let is_format = |number: i64| format == Json::from(number);
    let execution_format = is_format(EXECUTION_FORMAT);
    let mut expected: Vec<String> = BASE_KEYS.iter().map(|key| key.to_string()).collect();
    if is_format(FORMAT) || execution_format {
        expected.push("volume_bindings".into());
    }
    if execution_format {
        expected.push("execution".into());
        for kind in ["gateway", "execution_layout"] {
            expected.extend([
                kind.to_string(),
                format!("{kind}_path"),
                format!("desired_{kind}"),
                format!("observed_{kind}_sha256"),
            ]);
        }
    }
    let keys_match =
        value.len() == expected.len() && expected.iter().all(|key| value.contains_key(key));
    if !keys_match {
        return Err(invalid("manifest is invalid"));
    }
    if execution_format {
        Ok(ManifestFormat::Execution)
    } else if is_format(FORMAT) {
        Ok(ManifestFormat::Current)
    } else if is_format(1) {
        Ok(ManifestFormat::Legacy)
    } else {
        Err(invalid("manifest is invalid"))
    }
}

/// The phase, and the rollback origin a rollback phase needs.
fn check_phase(value: &JsonObject) -> Result<()> {
    let get = |key: &str| value.get(key);
    if !in_str_set(get("phase"), &PHASES)? {
        return Err(invalid("phase is invalid"));
    }
    let phase = get("phase").and_then(Json::as_str).unwrap_or_default();
    let rollback_from = get("rollback_from").unwrap_or(&Json::Null);
    if !rollback_from.is_null()
        && (!in_str_set(Some(rollback_from), &PHASES)?
            || in_str_set(
                Some(rollback_from),
                &[
                    "rolling-back",
                    "rolled-back",
                    "rollback-healthy",
                    "committing",
                    "committed",
                ],
            )?
            || !ROLLBACK_PHASES.contains(&phase))
    {
        return Err(invalid("rollback origin is invalid"));
    }
    if ROLLBACK_PHASES.contains(&phase) && rollback_from.is_null() {
        return Err(invalid("rollback origin is missing"));
    }
    Ok(())
}

/// The transaction id, version and paths, the rollback and previous
/// releases' shapes and both link states; returns the transaction id.
fn check_identity_and_links(value: &JsonObject, kinds: &[&str]) -> Result<String> {
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    let transaction_id = safe_text(field("transaction_id"), "id", 64)?;
    if !is_prefixed_hex(transaction_id, "activation-", 24) {
        return Err(invalid("id is invalid"));
    }
    safe_text(field("release_version"), "version", 128)?;
    safe_text(field("release_dir"), "release_dir", 4096)?;
    for kind in kinds {
        let name = format!("{kind}_path");
        safe_text(field(&name), &name, 4096)?;
    }
    match field("old_target").as_str() {
        Some(text) if !text.contains(['\0', '\r', '\n']) => {}
        _ => return Err(invalid("old target is invalid")),
    }
    let empty = Json::Object(JsonObject::new());
    let old_release = field("old_release");
    if old_release != &empty && !valid_release(old_release) {
        return Err(invalid("rollback release is invalid"));
    }
    let previous_release = field("previous_release");
    if previous_release != &empty && !valid_release(previous_release) {
        return Err(invalid("previous release is invalid"));
    }
    for name in ["current", "previous"] {
        let item = field(name);
        let target = item.get("target").and_then(Json::as_str);
        if !has_exact_keys(Some(item), &["kind", "target"])
            || !in_str_set(item.get("kind"), &["missing", "symlink", "directory"])?
            || target.is_none_or(|text| text.contains(['\n', '\r', '\0']))
            || (name == "previous" && item.get("kind").and_then(Json::as_str) == Some("directory"))
        {
            return Err(invalid("link state is invalid"));
        }
    }
    Ok(transaction_id.to_string())
}

/// Each configuration's backup metadata, and the backup's bytes where the
/// configuration existed.
fn check_backups(value: &JsonObject, kinds: &[&str], directory: &Path) -> Result<()> {
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    for kind in kinds {
        let item = field(kind);
        let existed = item.get("existed").and_then(Json::as_bool);
        let sha = item.get("sha256");
        let mode = loose_int(item.get("mode"));
        let valid = has_exact_keys(Some(item), &["existed", "backup", "sha256", "mode"])
            && existed.is_some()
            && item.get("backup") == Some(&Json::from(format!("{kind}.backup")))
            && match existed {
                Some(true) => {
                    sha.and_then(Json::as_str)
                        .is_some_and(|text| is_lower_hex(text, 64))
                        && mode.is_some_and(|mode| [0o600, 0o640, 0o644].contains(&mode))
                }
                _ => sha.is_some_and(Json::is_null) && item.get("mode").is_some_and(Json::is_null),
            };
        if !valid {
            return Err(invalid("backup metadata is invalid"));
        }
        if existed == Some(true) {
            let backup = directory.join(format!("{kind}.backup"));
            let digest = hex(&Sha256::digest(read_private_file(
                &backup,
                ACTIVATION_CONFIG_LIMIT,
            )?));
            if sha != Some(&Json::from(digest)) {
                return Err(invalid("backup changed"));
            }
        }
    }
    Ok(())
}

/// The prior service states and enablement, the prior port and bind, the
/// intent and the client binding.
fn check_services_and_binding(value: &JsonObject) -> Result<()> {
    let get = |key: &str| value.get(key);
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    if !in_str_set(get("service_state"), &SERVICE_STATES)? {
        return Err(invalid("service state is invalid"));
    }
    if field("service_enabled").as_bool().is_none() {
        return Err(invalid("service enablement is invalid"));
    }
    if !in_str_set(get("legacy_service_state"), &SERVICE_STATES)? {
        return Err(invalid("legacy service state is invalid"));
    }
    if field("legacy_service_enabled").as_bool().is_none() {
        return Err(invalid("legacy enablement is invalid"));
    }
    if !loose_int(get("prior_port")).is_some_and(|port| (1..=65535).contains(&port)) {
        return Err(invalid("prior port is invalid"));
    }
    let prior_bind = safe_text(field("prior_bind_address"), "prior bind", 64)?;
    if prior_bind != "localhost" {
        match canonical_ip(prior_bind) {
            None => return Err(invalid("prior bind is invalid")),
            Some(text) if text != prior_bind => return Err(invalid("prior bind is noncanonical")),
            Some(_) => {}
        }
    }
    if !in_str_set(
        get("intent"),
        &[
            "ordinary",
            "server-update",
            "host-reactivation",
            "failed-host-repair",
        ],
    )? {
        return Err(invalid("intent is invalid"));
    }
    let client_binding_ok = field("client_binding").as_str().is_some_and(|text| {
        text.chars().count() <= 64 * 1024 && !text.contains(['\0', '\r', '\n'])
    });
    if !client_binding_ok {
        return Err(invalid("client binding is invalid"));
    }
    Ok(())
}

/// The staged desired configurations, the authority state and each
/// configuration's observed history.
fn check_desired_configuration(
    value: &JsonObject,
    kinds: &[&str],
    transaction_id: &str,
) -> Result<()> {
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    for kind in kinds {
        let item = field(&format!("desired_{kind}"));
        let destination =
            absolute_path(field(&format!("{kind}_path")).as_str().unwrap_or_default());
        let (expected_source, _publication) =
            config_staging_paths(&destination, transaction_id, kind);
        if item.is_null() {
            continue;
        }
        let positive = |key: &str| strict_int(item.get(key)).is_some_and(|number| number > 0);
        let valid = has_exact_keys(Some(item), &["sha256", "mode", "source", "device", "inode"])
            && item
                .get("sha256")
                .and_then(Json::as_str)
                .is_some_and(|text| is_lower_hex(text, 64))
            && loose_int(item.get("mode")).is_some_and(|mode| {
                config_modes(kind, true)
                    .iter()
                    .any(|&allowed| i128::from(allowed) == mode)
            })
            && item.get("source") == Some(&Json::from(pure_path_text(&expected_source)))
            && positive("device")
            && positive("inode");
        if !valid {
            return Err(Error::runtime(
                "activation desired configuration is invalid",
            ));
        }
    }
    if field("authority_pending").as_bool().is_none() {
        return Err(invalid("authority state is invalid"));
    }
    for kind in kinds {
        let history_ok = field(&format!("observed_{kind}_sha256"))
            .as_array()
            .is_some_and(|items| {
                items.iter().all(|item| {
                    item.is_null() || item.as_str().is_some_and(|text| is_lower_hex(text, 64))
                })
            });
        if !history_ok {
            return Err(invalid("configuration history is invalid"));
        }
    }
    Ok(())
}

/// The candidate, rollback and previous releases' paths: inside `releases`
/// (or, for the rollback source, the `current` link), normalized, and the
/// candidate's target the journal's release directory.
fn check_release_paths(root: &Path, releases: &Path, value: &JsonObject) -> Result<()> {
    let field = |key: &str| value.get(key).unwrap_or(&Json::Null);
    let old_release = field("old_release");
    let previous_release = field("previous_release");
    let candidate = field("candidate_release");
    if !valid_release(candidate) {
        return Err(invalid("candidate release is invalid"));
    }
    let text = |item: &Json, key: &str| {
        item.get(key)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let release_version = text_of(field("release_version"));
    let release_dir_text = text_of(field("release_dir"));
    let release_dir = absolute_path(&release_dir_text);
    let candidate_source = absolute_path(text(candidate, "source"));
    let candidate_target = absolute_path(text(candidate, "target"));
    if release_dir_text != pure_path_text(&release_dir)
        || !is_release_version(&release_version)
        || !same_path(&release_dir, &releases.join(&release_version))
        || text(candidate, "source") != pure_path_text(&candidate_source)
        || text(candidate, "target") != pure_path_text(&candidate_target)
        || !same_path(&super::io::parent_of(&candidate_source), releases)
        || same_path(&candidate_source, &candidate_target)
        || !same_path(&candidate_target, &release_dir)
    {
        return Err(invalid("release path is invalid"));
    }
    if member_truthy(Some(old_release)) {
        let old_source = absolute_path(text(old_release, "source"));
        let old_target = absolute_path(text(old_release, "target"));
        if text(old_release, "source") != pure_path_text(&old_source)
            || text(old_release, "target") != pure_path_text(&old_target)
            || !same_path(&super::io::parent_of(&old_target), releases)
            || (!same_path(&super::io::parent_of(&old_source), releases)
                && !same_path(&old_source, &root.join("current")))
            || text_of(field("old_target")) != pure_path_text(&old_target)
        {
            return Err(invalid("rollback release path is invalid"));
        }
    } else if !text_of(field("old_target")).is_empty() {
        return Err(invalid("rollback release path is invalid"));
    }
    if member_truthy(Some(previous_release)) {
        let previous_source = absolute_path(text(previous_release, "source"));
        let previous_target = absolute_path(text(previous_release, "target"));
        if text(previous_release, "source") != pure_path_text(&previous_source)
            || text(previous_release, "target") != pure_path_text(&previous_target)
            || !same_path(&super::io::parent_of(&previous_source), releases)
            || !same_path(&super::io::parent_of(&previous_target), releases)
        {
            return Err(invalid("previous release path is invalid"));
        }
    }
    Ok(())
}

fn text_of(value: &Json) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// `valid_release(release)` of `_read_manifest`.
fn valid_release(release: &Json) -> bool {
    let text_starts_with_root = |key: &str| {
        release
            .get(key)
            .and_then(Json::as_str)
            .is_some_and(|text| text.starts_with('/'))
    };
    has_exact_keys(Some(release), &RELEASE_KEYS)
        && text_starts_with_root("source")
        && text_starts_with_root("target")
        && loose_int(release.get("device")).is_some_and(|device| device >= 0)
        && loose_int(release.get("inode")).is_some_and(|inode| inode > 0)
        && release
            .get("version_sha256")
            .and_then(Json::as_str)
            .is_some_and(|text| is_lower_hex(text, 64))
}

/// `[A-Za-z0-9][A-Za-z0-9._+-]{0,127}`.
fn is_release_version(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b".-_+".contains(&b))
}

/// `_execution_gateway_path(service)`: the gateway unit or plist beside the
/// worker's.
pub(crate) fn execution_gateway_path(service: &Path) -> Result<PathBuf> {
    let name = super::io::file_name(service);
    let gateway = match name {
        b"agents-server.service" => "agents-server-gateway.service",
        b"com.agentsdock.server.plist" => "com.agentsdock.gateway.plist",
        _ => {
            return Err(Error::runtime(
                "execution activation requires the managed worker service",
            ))
        }
    };
    Ok(super::io::parent_of(service).join(gateway))
}

/// `_validate_execution_metadata` (format 3 only).
fn validate_execution(root: &Path, value: &JsonObject) -> Result<()> {
    let execution = value.get("execution");
    if !has_exact_keys(execution, &EXECUTION_KEYS) {
        return Err(Error::runtime("activation execution metadata is invalid"));
    }
    let execution = execution.and_then(Json::as_object).expect("checked object");
    let null = Json::Null;
    let member = |key: &str| execution.get(key).unwrap_or(&null);
    let runtime_text = safe_text(member("runtime_dir"), "execution runtime", 4096)?;
    let runtime = absolute_path(runtime_text);
    let runtime_parent = super::io::parent_of(&runtime);
    let layout_invalid = || Error::runtime("activation execution layout is invalid");
    if runtime_text != pure_path_text(&runtime)
        || super::io::file_name(&runtime) != b"execution"
        || same_path(root, &runtime_parent)
        || is_strict_ancestor(Path::new(&pure_path_text(root)), &runtime_parent)
        || !in_str_set(execution.get("gateway_state"), &SERVICE_STATES)?
        || member("gateway_enabled").as_bool().is_none()
        || strict_int(execution.get("api_contract")).is_none_or(|contract| contract < 0)
    {
        return Err(layout_invalid());
    }
    let service = absolute_path(
        value
            .get("service_path")
            .and_then(Json::as_str)
            .unwrap_or_default(),
    );
    let gateway = execution_gateway_path(&service)?;
    if value.get("gateway_path") != Some(&Json::from(pure_path_text(&gateway)))
        || value.get("execution_layout_path")
            != Some(&Json::from(pure_path_text(
                root.join("execution-layout.json"),
            )))
    {
        return Err(layout_invalid());
    }
    let operation = member("operation_id").as_str();
    if !operation.is_some_and(is_canonical_uuid) {
        return Err(Error::runtime("activation execution operation is invalid"));
    }
    let old = member("old_worker_release");
    let prior_invalid = || Error::runtime("activation prior worker release is invalid");
    if member_truthy(Some(old)) {
        let target = absolute_path(old.get("target").and_then(Json::as_str).unwrap_or_default());
        if !valid_release(old) || !same_path(&super::io::parent_of(&target), &root.join("releases"))
        {
            return Err(prior_invalid());
        }
    } else if old != &Json::Object(JsonObject::new()) {
        return Err(prior_invalid());
    }
    let handoff = member("handoff");
    if !handoff.is_null() {
        if !has_exact_keys(Some(handoff), &HANDOFF_KEYS)
            || strict_int(handoff.get("schema")) != Some(1)
            || handoff.get("operation_id") != execution.get("operation_id")
        {
            return Err(Error::runtime("activation execution handoff is invalid"));
        }
        if !handoff
            .get("lease_id")
            .and_then(Json::as_str)
            .is_some_and(is_canonical_uuid)
        {
            return Err(Error::runtime(
                "activation execution handoff lease is invalid",
            ));
        }
        for key in ["worker_instance_id", "lease_id", "expected_server_identity"] {
            safe_text(
                handoff.get(key).unwrap_or(&null),
                &format!("execution {key}"),
                240,
            )?;
        }
    }
    Ok(())
}

/// `_validate_hub_metadata(hub, intent=...)`: the Team Hub fence record.
fn validate_hub(hub: &Json, intent: &str) -> Result<()> {
    if hub == &Json::Object(JsonObject::new()) {
        return Ok(());
    }
    let hub_invalid = || invalid("Hub state is invalid");
    let keys = [
        "kind",
        "data_dir",
        "hub_id",
        "host_identity",
        "operation_id",
        "snapshot",
        "fence_device",
        "fence_inode",
    ];
    if !has_exact_keys(Some(hub), &keys) {
        return Err(hub_invalid());
    }
    let (Some(data_dir_raw), Some(snapshot_raw)) = (
        hub.get("data_dir").and_then(Json::as_str),
        hub.get("snapshot").and_then(Json::as_str),
    ) else {
        return Err(hub_invalid());
    };
    let data_dir = absolute_path(data_dir_raw);
    let snapshot = absolute_path(snapshot_raw);
    let text = |key: &str| hub.get(key).and_then(Json::as_str);
    let snapshot_name = String::from_utf8_lossy(super::io::file_name(&snapshot)).into_owned();
    let positive = |key: &str| strict_int(hub.get(key)).is_some_and(|number| number > 0);
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    if data_dir_raw != pure_path_text(&data_dir)
        || snapshot_raw != pure_path_text(&snapshot)
        || !same_path(
            &super::io::parent_of(&snapshot),
            &data_dir.join("maintenance-backups"),
        )
        || !snapshot_name
            .strip_prefix("snapshot_")
            .is_some_and(|rest| pattern(rest, None, |b| alnum(b) || b == b'_', 1, usize::MAX))
        || !in_str_set(hub.get("kind"), &["server-update", "host-reactivation"])?
        || !text("hub_id")
            .is_some_and(|id| pattern(id, None, |b| alnum(b) || b"_.:-".contains(&b), 8, 240))
        || !text("host_identity").is_some_and(|id| {
            pattern(
                id,
                Some(alnum),
                |b| alnum(b) || b"._:@/-".contains(&b),
                7,
                239,
            )
        })
        || !text("operation_id").is_some_and(|id| {
            pattern(
                id,
                Some(alnum),
                |b| alnum(b) || b"._:-".contains(&b),
                0,
                127,
            )
        })
        || !positive("fence_device")
        || !positive("fence_inode")
    {
        return Err(hub_invalid());
    }
    let kind = text("kind").unwrap_or_default();
    if (kind == "server-update" && intent != "server-update")
        || (kind == "host-reactivation"
            && intent != "host-reactivation"
            && intent != "failed-host-repair")
    {
        return Err(invalid("Hub intent changed"));
    }
    Ok(())
}

/// A fixed-class ASCII regular expression: an optional first character class,
/// then `min..=max` characters of `rest`.
fn pattern(
    text: &str,
    first: Option<fn(u8) -> bool>,
    rest: impl Fn(u8) -> bool,
    min: usize,
    max: usize,
) -> bool {
    let mut bytes = text.as_bytes();
    if let Some(first) = first {
        match bytes.split_first() {
            Some((&head, tail)) if first(head) => bytes = tail,
            _ => return false,
        }
    }
    (min..=max).contains(&bytes.len()) && bytes.iter().all(|&b| rest(b))
}

/// `_validate_guard_metadata(guard)`: the cold-handoff startup guard record.
fn validate_guard(guard: &Json) -> Result<()> {
    if guard == &Json::Object(JsonObject::new()) {
        return Ok(());
    }
    let positive = |key: &str| strict_int(guard.get(key)).is_some_and(|number| number > 0);
    if !has_exact_keys(Some(guard), &["id", "device", "inode"])
        || !guard
            .get("id")
            .and_then(Json::as_str)
            .is_some_and(|id| is_prefixed_hex(id, "cold-handoff-", 24))
        || !positive("device")
        || !positive("inode")
    {
        return Err(invalid("guard state is invalid"));
    }
    Ok(())
}

/// `str(ipaddress.ip_address(text))`, or `None` when Python refuses it.
fn canonical_ip(text: &str) -> Option<String> {
    ip_address(text).ok().map(|address| address.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_print_like_python() {
        assert_eq!(canonical_ip("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(canonical_ip("::1").as_deref(), Some("::1"));
        assert_eq!(canonical_ip("0:0:0:0:0:0:0:1").as_deref(), Some("::1"));
        assert_eq!(
            canonical_ip("::ffff:1.2.3.4").as_deref(),
            Some("::ffff:102:304")
        );
        assert_eq!(
            canonical_ip("fe80::1%eth0").as_deref(),
            Some("fe80::1%eth0")
        );
        assert_eq!(canonical_ip("fe80::1%").as_deref(), None);
        assert_eq!(canonical_ip("localhost"), None);
        assert_eq!(canonical_ip("01.2.3.4"), None);
    }

    #[test]
    fn release_versions_follow_the_journal_pattern() {
        assert!(is_release_version("1.0.7-beta.5"));
        assert!(!is_release_version(".hidden"));
        assert!(!is_release_version(&"1".repeat(129)));
    }
}

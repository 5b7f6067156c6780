//! `_read_manifest` / `execution_context` over real journals in the format
//! install.sh's Python writer produces: every refusal in Python's order and
//! wording, the canonical bytes, and temporary cleanup.

use std::fs;
use std::os::unix::fs::symlink;

use agents_common::{
    execution_context, test_support::canonical_manifest_bytes, ActivationManifest,
};
use agents_tests::journal_writer::{Begin, Install};
use agents_tests::{assert_case_refused, assert_error, set_mode, write_file};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object, ErrorClass,
};

/// A fresh split install: only the staged candidate, env, no services.
fn fresh(tag: &str) -> (Install, String) {
    let install = Install::new(tag);
    let staging = install.staging("1.1.0");
    install.write_env("AGENTS_SERVER_PORT=7850\n");
    let id = install.begin(&Begin::split(&staging, "1.1.0"));
    (install, id)
}

/// An update of an installed split 1.0.0 to 1.1.0.
fn update(tag: &str) -> (Install, String) {
    let install = Install::new(tag);
    let id = install.begin_update();
    (install, id)
}

#[test]
fn canonical_encoding_matches_the_golden_vectors() {
    let golden = agents_tests::golden_bytes("json.json");
    let golden = parse_json(&golden).unwrap();
    let vectors = golden.get("vectors").and_then(Json::as_array).unwrap();
    assert!(!vectors.is_empty());
    for vector in vectors {
        let expected = vector
            .get("compact_sorted_ascii")
            .and_then(Json::as_str)
            .unwrap();
        let value = vector.get("value").unwrap();
        assert_eq!(
            String::from_utf8(canonical_manifest_bytes(value)).unwrap(),
            expected,
            "vector {value:?}"
        );
    }
}

#[test]
fn a_fresh_split_journal_reads_back_byte_for_byte() {
    let (install, id) = fresh("fresh");
    let stored = fs::read(install.manifest_path()).unwrap();
    let (directory, manifest) = ActivationManifest::read(&install.root(), true).unwrap();
    assert_eq!(directory, install.journal());
    assert_eq!(manifest.canonical_bytes(), stored);
    assert_eq!(manifest.transaction_id(), id);
    assert_eq!(manifest.phase(), "prepared");
    assert!(manifest.is_execution());
    assert_eq!(
        manifest.execution_field("gateway_state"),
        &Json::from("absent")
    );
    let context = execution_context(&install.root())
        .unwrap()
        .expect("format 3");
    assert_eq!(context, manifest);
}

#[test]
fn an_update_journal_pins_the_old_worker_and_backups() {
    let (install, _id) = update("update");
    let context = execution_context(&install.root())
        .unwrap()
        .expect("format 3");
    let old = context.release("old_release");
    assert_eq!(
        old.get("target"),
        Some(&Json::from(install.release_dir("1.0.0").to_str().unwrap()))
    );
    assert_eq!(
        context.execution_field("old_worker_release"),
        &Json::Object(old)
    );
    assert_eq!(
        context.get("execution_layout").get("existed"),
        Some(&Json::Bool(true))
    );
    for kind in ["env", "service", "gateway", "execution_layout"] {
        assert!(
            install.journal().join(format!("{kind}.backup")).exists(),
            "{kind}"
        );
    }
}

#[test]
fn a_legacy_format_journal_has_no_execution_context() {
    let install = Install::new("legacy");
    let staging = install.staging("1.1.0");
    install.begin(&Begin {
        execution: false,
        ..Begin::split(&staging, "1.1.0")
    });
    assert_eq!(execution_context(&install.root()).unwrap(), None);
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    assert!(!manifest.is_execution());
}

#[test]
fn a_missing_journal_is_file_not_found() {
    let install = Install::new("missing");
    let error = execution_context(&install.root()).unwrap_err();
    assert_eq!(error.class(), ErrorClass::NotFound);
    assert_eq!(
        error.message(),
        format!(
            "[Errno 2] No such file or directory: '{}'",
            install.journal().display()
        )
    );
}

#[test]
fn temporaries_of_an_interrupted_rewrite_are_removed_only_with_cleanup() {
    let (install, _id) = fresh("temps");
    let leftover = install
        .journal()
        .join(".manifest.json.0123456789abcdef01234567.tmp");
    let unrelated = install.journal().join(".manifest.json.XYZ.tmp");
    write_file(&leftover, b"partial", 0o600);
    write_file(&unrelated, b"other", 0o600);
    ActivationManifest::read(&install.root(), false).unwrap();
    assert!(leftover.exists());
    ActivationManifest::read(&install.root(), true).unwrap();
    assert!(!leftover.exists());
    assert!(unrelated.exists());
    write_file(&leftover, b"partial", 0o644);
    assert_error(
        ActivationManifest::read(&install.root(), true),
        ErrorClass::Permission,
        "activation transaction staging file is unsafe",
    );
    assert!(leftover.exists(), "an unsafe temporary is never removed");
}

#[test]
fn unsafe_directories_and_files_are_refused() {
    let (install, _id) = fresh("unsafe");
    let read = || ActivationManifest::read(&install.root(), true);
    set_mode(&install.root(), 0o775);
    assert_error(
        read(),
        ErrorClass::Permission,
        "activation transaction root is unsafe",
    );
    set_mode(&install.root(), 0o700);
    set_mode(&install.releases(), 0o777);
    assert_error(
        read(),
        ErrorClass::Permission,
        "activation releases root is unsafe",
    );
    set_mode(&install.releases(), 0o755);
    set_mode(&install.journal(), 0o750);
    assert_error(
        read(),
        ErrorClass::Permission,
        "activation transaction directory is unsafe",
    );
    set_mode(&install.journal(), 0o700);
    set_mode(&install.manifest_path(), 0o640);
    assert_error(
        read(),
        ErrorClass::Permission,
        "activation transaction file is unsafe",
    );
    set_mode(&install.manifest_path(), 0o600);
    let linked = install.journal().join("manifest.linked");
    fs::hard_link(install.manifest_path(), &linked).unwrap();
    assert_error(
        read(),
        ErrorClass::Permission,
        "activation transaction file is unsafe",
    );
    fs::remove_file(&linked).unwrap();
    read().expect("restored journal reads again");
}

#[test]
fn a_symlinked_manifest_or_journal_is_refused() {
    let (install, _id) = fresh("symlink");
    let real = install.journal().join("real.json");
    fs::rename(install.manifest_path(), &real).unwrap();
    symlink(&real, install.manifest_path()).unwrap();
    let error = ActivationManifest::read(&install.root(), true).unwrap_err();
    assert_eq!(error.class(), ErrorClass::Os);
    assert_eq!(
        error.errno(),
        Some(40),
        "O_NOFOLLOW refuses the link: {error:?}"
    );
    fs::remove_file(install.manifest_path()).unwrap();
    fs::rename(&real, install.manifest_path()).unwrap();
    let moved = install.root().join("journal.real");
    fs::rename(install.journal(), &moved).unwrap();
    symlink(&moved, install.journal()).unwrap();
    assert_error(
        ActivationManifest::read(&install.root(), true),
        ErrorClass::Permission,
        "activation transaction directory is unsafe",
    );
}

/// One change to a valid manifest, kept as data so that a table row reads
/// as what it breaks.
enum Change {
    /// `manifest[key] = value`.
    Set(&'static str, Json),
    /// `del manifest[key]`.
    Remove(&'static str),
    /// `manifest[outer][key] = value`.
    SetIn(&'static str, &'static str, Json),
    /// `del manifest[outer][key]`.
    RemoveIn(&'static str, &'static str),
    /// Several changes, in order.
    All(Vec<Change>),
}

fn set(key: &'static str, value: impl Into<Json>) -> Change {
    Change::Set(key, value.into())
}

fn set_in(outer: &'static str, key: &'static str, value: impl Into<Json>) -> Change {
    Change::SetIn(outer, key, value.into())
}

/// A change of one member of the manifest's `execution` object.
fn execution(key: &'static str, value: impl Into<Json>) -> Change {
    set_in("execution", key, value)
}

impl Change {
    fn apply(self, manifest: &mut JsonObject) {
        match self {
            Change::Set(key, value) => {
                manifest.insert(key, value);
            }
            Change::Remove(key) => {
                manifest.remove(key);
            }
            Change::SetIn(outer, key, value) => {
                let mut object = Self::nested(manifest, outer);
                object.insert(key, value);
                manifest.insert(outer, object);
            }
            Change::RemoveIn(outer, key) => {
                let mut object = Self::nested(manifest, outer);
                object.remove(key);
                manifest.insert(outer, object);
            }
            Change::All(changes) => changes
                .into_iter()
                .for_each(|change| change.apply(manifest)),
        }
    }

    fn nested(manifest: &JsonObject, outer: &str) -> JsonObject {
        manifest
            .get(outer)
            .and_then(Json::as_object)
            .cloned()
            .unwrap()
    }
}

/// A table row: (what is wrong, the change that makes it so, the exact
/// `RuntimeError` message Python's reader gives).
type ManifestRefusal = (&'static str, Change, &'static str);

/// Apply `edit` to a valid fresh journal and expect `message`.
#[track_caller]
fn refused_after(edit: impl FnOnce(&mut JsonObject), message: &str) {
    let (install, _id) = fresh("refusal");
    install.edit_manifest(edit);
    assert_error(
        ActivationManifest::read(&install.root(), true),
        ErrorClass::Runtime,
        message,
    );
}

/// Reading `install`'s journal raises `RuntimeError(message)`; a failure
/// names `case`.
#[track_caller]
fn assert_read_refused(install: &Install, message: &str, case: &str) {
    assert_case_refused(
        ActivationManifest::read(&install.root(), true),
        (ErrorClass::Runtime, message),
        case,
    );
}

/// Runs every row of a refusal table, each on its own valid fresh journal.
#[track_caller]
fn assert_each_refused(rows: Vec<ManifestRefusal>) {
    for (case, change, message) in rows {
        let (install, _id) = fresh("refusal");
        install.edit_manifest(|manifest| change.apply(manifest));
        assert_read_refused(&install, message, case);
    }
}

const INVALID: &str = "activation transaction manifest is invalid";
const ROLLBACK_ORIGIN_INVALID: &str = "activation transaction rollback origin is invalid";
const TRANSACTION_ID_INVALID: &str = "activation transaction id is invalid";
const BACKUP_METADATA_INVALID: &str = "activation transaction backup metadata is invalid";

/// The document's keys and format, then the phase and its rollback origin.
fn document_and_phase_refusals() -> Vec<ManifestRefusal> {
    vec![
        ("an unknown key", set("extra", 1), INVALID),
        ("no hub key", Change::Remove("hub"), INVALID),
        ("a newer format", set("format", 4), INVALID),
        ("an older format", set("format", 2), INVALID),
        (
            "an unknown phase",
            set("phase", "flying"),
            "activation transaction phase is invalid",
        ),
        (
            "a rollback origin outside a rollback",
            set("rollback_from", "prepared"),
            ROLLBACK_ORIGIN_INVALID,
        ),
        (
            "rolling back from committed",
            Change::All(vec![
                set("phase", "rolling-back"),
                set("rollback_from", "committed"),
            ]),
            ROLLBACK_ORIGIN_INVALID,
        ),
        (
            "rolled back without an origin",
            set("phase", "rolled-back"),
            "activation transaction rollback origin is missing",
        ),
    ]
}

/// The transaction's identity, its recorded paths and the release links.
fn identity_and_link_refusals() -> Vec<ManifestRefusal> {
    vec![
        (
            "a transaction ID that is no hex",
            set("transaction_id", "activation-XYZ"),
            TRANSACTION_ID_INVALID,
        ),
        (
            "a transaction ID too long",
            set("transaction_id", format!("activation-{}", "a".repeat(60))),
            TRANSACTION_ID_INVALID,
        ),
        (
            "a version of 129 characters",
            set("release_version", "v".repeat(129)),
            "activation transaction version is invalid",
        ),
        (
            "an empty release_dir",
            set("release_dir", ""),
            "activation transaction release_dir is invalid",
        ),
        (
            "a gateway_path with a newline",
            set("gateway_path", "/x\n"),
            "activation transaction gateway_path is invalid",
        ),
        (
            "an old target with a NUL",
            set("old_target", "a\0b"),
            "activation transaction old target is invalid",
        ),
        (
            "an incomplete rollback release",
            set("old_release", json_object! { "source" => "/x" }),
            "activation transaction rollback release is invalid",
        ),
        (
            "a null previous release",
            set("previous_release", Json::Null),
            "activation transaction previous release is invalid",
        ),
        (
            "a directory link state with an empty target",
            set(
                "previous",
                json_object! { "kind" => "directory", "target" => "" },
            ),
            "activation transaction link state is invalid",
        ),
    ]
}

/// The configuration backups, then the service states recorded before the
/// activation.
fn backup_and_service_refusals() -> Vec<ManifestRefusal> {
    vec![
        (
            "a service backup of another name",
            set_in("service", "backup", "other.backup"),
            BACKUP_METADATA_INVALID,
        ),
        (
            "an env backup of mode 0700",
            set_in("env", "mode", 0o700),
            BACKUP_METADATA_INVALID,
        ),
        (
            "an env backup of another digest",
            set_in("env", "sha256", "0".repeat(64)),
            "activation transaction backup changed",
        ),
        (
            "an unknown service state",
            set("service_state", "paused"),
            "activation transaction service state is invalid",
        ),
        (
            "a string service enablement",
            set("service_enabled", "yes"),
            "activation transaction service enablement is invalid",
        ),
        (
            "a null legacy service state",
            set("legacy_service_state", Json::Null),
            "activation transaction legacy service state is invalid",
        ),
        (
            "an integer legacy enablement",
            set("legacy_service_enabled", 0),
            "activation transaction legacy enablement is invalid",
        ),
    ]
}

/// The prior listener, the intent, the client binding and the configuration
/// the activation installs.
fn listener_and_configuration_refusals() -> Vec<ManifestRefusal> {
    let desired_service = json_object! {
        "sha256" => "0".repeat(64), "mode" => 0o644, "source" => "/elsewhere",
        "device" => 1, "inode" => 1,
    };
    vec![
        (
            "prior port 0",
            set("prior_port", 0),
            "activation transaction prior port is invalid",
        ),
        (
            "a prior bind that is a host name",
            set("prior_bind_address", "host.example"),
            "activation transaction prior bind is invalid",
        ),
        (
            "a zero-padded IPv6 prior bind",
            set("prior_bind_address", "::0001"),
            "activation transaction prior bind is noncanonical",
        ),
        (
            "an unknown intent",
            set("intent", "other"),
            "activation transaction intent is invalid",
        ),
        (
            "a client binding with a carriage return",
            set("client_binding", "a\rb"),
            "activation transaction client binding is invalid",
        ),
        (
            "a desired service from elsewhere",
            set("desired_service", desired_service),
            "activation desired configuration is invalid",
        ),
        (
            "a null authority state",
            set("authority_pending", Json::Null),
            "activation transaction authority state is invalid",
        ),
        (
            "a configuration history entry that is no digest",
            set("observed_env_sha256", vec![Json::from("abc")]),
            "activation transaction configuration history is invalid",
        ),
    ]
}

/// The release paths, checked last, against the releases directory.
fn release_path_refusals() -> Vec<ManifestRefusal> {
    vec![
        (
            "a candidate release of inode 0",
            set_in("candidate_release", "inode", 0),
            "activation transaction candidate release is invalid",
        ),
        (
            "a candidate staged outside the releases",
            set_in("candidate_release", "source", "/tmp/elsewhere/stage"),
            "activation transaction release path is invalid",
        ),
        (
            "an old target outside the releases",
            set("old_target", "/somewhere"),
            "activation transaction rollback release path is invalid",
        ),
    ]
}

/// Each row breaks one field of an otherwise valid journal and must be
/// refused with that field's own wording; the groups, and the rows in them,
/// follow the order in which Python's reader checks the fields.
#[test]
fn schema_refusals_follow_python_order_and_wording() {
    for group in [
        document_and_phase_refusals(),
        identity_and_link_refusals(),
        backup_and_service_refusals(),
        listener_and_configuration_refusals(),
        release_path_refusals(),
    ] {
        assert_each_refused(group);
    }
}

#[test]
fn accepted_variants_match_python() {
    // Python's isinstance(x, int) accepts a bool port; canonical IPv6 binds.
    let (install, _id) = fresh("variants");
    install.edit_manifest(|v| {
        v.insert("prior_port", true);
        v.insert("prior_bind_address", "::1");
        v.insert("client_binding", "{\"a\":1}");
    });
    ActivationManifest::read(&install.root(), true).expect("Python accepts these");
}

const LAYOUT_INVALID: &str = "activation execution layout is invalid";
const PRIOR_WORKER_INVALID: &str = "activation prior worker release is invalid";

/// A handoff record of `operation` and `lease`, otherwise well formed.
fn handoff(operation: &str, lease: &str) -> Json {
    Json::Object(json_object! {
        "schema" => 1, "operation_id" => operation, "worker_instance_id" => "w1",
        "lease_id" => lease, "expected_server_identity" => "server-1",
    })
}

/// Wrong execution metadata that needs nothing of the journal it breaks.
fn execution_refusals() -> Vec<ManifestRefusal> {
    let old_worker_elsewhere = json_object! {
        "source" => "/elsewhere/1.0.0", "target" => "/elsewhere/1.0.0", "device" => 1,
        "inode" => 2, "version_sha256" => "a".repeat(64),
    };
    vec![
        (
            "no API contract",
            Change::RemoveIn("execution", "api_contract"),
            "activation execution metadata is invalid",
        ),
        (
            "an empty runtime directory",
            execution("runtime_dir", ""),
            "activation transaction execution runtime is invalid",
        ),
        (
            "a runtime directory elsewhere in /tmp",
            execution("runtime_dir", "/tmp/state/runtime"),
            LAYOUT_INVALID,
        ),
        (
            "an integer gateway_enabled",
            execution("gateway_enabled", 1),
            LAYOUT_INVALID,
        ),
        (
            "a negative API contract",
            execution("api_contract", -1),
            LAYOUT_INVALID,
        ),
        (
            "a gateway unit at another path",
            set("gateway_path", "/tmp/other.service"),
            LAYOUT_INVALID,
        ),
        (
            "a service unit that is not the managed worker's",
            set("service_path", "/tmp/x/zenithbot-agent.service"),
            "execution activation requires the managed worker service",
        ),
        (
            "an upper-case operation ID",
            execution("operation_id", "6BA7B811-9DAD-11D1-80B4-00C04FD430C8"),
            "activation execution operation is invalid",
        ),
        (
            "a null prior worker release",
            execution("old_worker_release", Json::Null),
            PRIOR_WORKER_INVALID,
        ),
        (
            "a prior worker release outside the releases",
            execution("old_worker_release", old_worker_elsewhere),
            PRIOR_WORKER_INVALID,
        ),
        (
            "a handoff of another operation",
            execution(
                "handoff",
                handoff(
                    "11111111-1111-1111-1111-111111111111",
                    "22222222-2222-2222-2222-222222222222",
                ),
            ),
            "activation execution handoff is invalid",
        ),
    ]
}

/// The `execution` object of a format-3 journal, and the unit paths an
/// execution activation needs, each refused with Python's wording.
#[test]
fn execution_metadata_refusals() {
    assert_each_refused(execution_refusals());

    // The two changes below depend on the journal they break: its own
    // install root and its own operation ID.
    let (install, _id) = fresh("runtime-inside");
    let inside = install.root().join("state/execution");
    let runtime_inside = execution("runtime_dir", inside.to_str().unwrap());
    install.edit_manifest(|manifest| runtime_inside.apply(manifest));
    assert_read_refused(
        &install,
        LAYOUT_INVALID,
        "a runtime directory inside the install root",
    );

    let (install, _id) = fresh("handoff-lease");
    install.edit_manifest(|manifest| {
        let operation = manifest.get("execution").unwrap().get("operation_id");
        let operation = operation.unwrap().as_str().unwrap().to_string();
        execution("handoff", handoff(&operation, "not-a-uuid")).apply(manifest);
    });
    assert_read_refused(
        &install,
        "activation execution handoff lease is invalid",
        "a handoff of this operation whose lease is no UUID",
    );
}

#[test]
fn hub_guard_and_volume_refusals() {
    refused_after(
        |v| {
            v.insert("hub", json_object! { "kind" => "server-update" });
        },
        "activation transaction Hub state is invalid",
    );
    let hub = json_object! {
        "kind" => "server-update", "data_dir" => "/tmp/hub",
        "hub_id" => "hub-12345678", "host_identity" => "host-12345678",
        "operation_id" => "op-1", "snapshot" => "/tmp/hub/maintenance-backups/snapshot_1",
        "fence_device" => 1, "fence_inode" => 2,
    };
    let valid_hub = hub.clone();
    refused_after(
        move |v| {
            v.insert("hub", valid_hub);
        },
        "activation transaction Hub intent changed",
    );
    let (install, _id) = fresh("hub-ok");
    let accepted = hub.clone();
    install.edit_manifest(move |v| {
        v.insert("intent", "server-update");
        v.insert("hub", accepted);
    });
    ActivationManifest::read(&install.root(), true).expect("a well-formed fence record");
    let mut bad_snapshot = hub.clone();
    bad_snapshot.insert("snapshot", "/tmp/hub/snapshot_1");
    refused_after(
        move |v| {
            v.insert("intent", "server-update");
            v.insert("hub", bad_snapshot);
        },
        "activation transaction Hub state is invalid",
    );
    refused_after(
        |v| {
            v.insert(
                "guard",
                json_object! { "id" => "cold-handoff-xyz", "device" => 1, "inode" => 1 },
            );
        },
        "activation transaction guard state is invalid",
    );
    refused_after(
        |v| {
            v.insert(
                "volume_bindings",
                json_object! { "01" => json_object! { "anchor" => "/", "uuid" => "x" } },
            );
        },
        "activation volume binding is invalid",
    );
    refused_after(
        |v| {
            v.insert(
                "volume_bindings",
                json_object! { "64769" => json_object! {
                    "anchor" => "/tmp", "uuid" => "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
                } },
            );
        },
        "activation volume binding is unsupported",
    );
    refused_after(
        |v| {
            v.insert("volume_bindings", Json::Array(Vec::new()));
        },
        "activation volume bindings are invalid",
    );
}

#[test]
fn undecodable_manifests_are_invalid() {
    let (install, _id) = fresh("undecodable");
    for data in [&b"{"[..], b"\xff\xfe\x00", b"[1, 2]\n", b""] {
        install.write_manifest(data);
        assert_error(
            ActivationManifest::read(&install.root(), true),
            ErrorClass::Runtime,
            "activation transaction manifest is invalid",
        );
    }
}

/// `value.get(key) not in {...}` hashes the value first: a list or an object
/// in a field the journal checks against a set of strings is Python's
/// `TypeError` (found by the generative campaign, generated-1-711), where a
/// string outside the set is the field's own refusal.
#[test]
fn an_unhashable_value_in_a_set_checked_field_is_pythons_type_error() {
    for (key, item, class) in [
        ("intent", Json::Object(JsonObject::new()), "dict"),
        ("phase", Json::Array(Vec::new()), "list"),
        ("service_state", Json::Object(JsonObject::new()), "dict"),
    ] {
        let (install, _id) = fresh("unhashable");
        install.edit_manifest(|value| {
            value.insert(key, item.clone());
        });
        assert_error(
            ActivationManifest::read(&install.root(), true),
            ErrorClass::Type,
            &format!("unhashable type: '{class}'"),
        );
    }
}

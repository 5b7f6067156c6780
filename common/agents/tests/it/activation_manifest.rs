//! `_read_manifest` / `execution_context` over real journals in the format
//! install.sh's Python writer produces: every refusal in Python's order and
//! wording, the canonical bytes, and temporary cleanup.

use std::fs;
use std::os::unix::fs::symlink;

use agents_common::{
    execution_context, test_support::canonical_manifest_bytes, ActivationManifest,
};
use agents_tests::journal_writer::{Begin, Install};
use agents_tests::{assert_error, set_mode, write_file};
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

/// Replace a member of one nested object.
fn set_in(value: &mut JsonObject, outer: &str, key: &str, item: impl Into<Json>) {
    let mut object = value.get(outer).and_then(Json::as_object).cloned().unwrap();
    object.insert(key, item.into());
    value.insert(outer, object);
}

#[test]
fn schema_refusals_follow_python_order_and_wording() {
    let invalid = "activation transaction manifest is invalid";
    refused_after(
        |v| {
            v.insert("extra", 1);
        },
        invalid,
    );
    refused_after(
        |v| {
            v.remove("hub");
        },
        invalid,
    );
    refused_after(
        |v| {
            v.insert("format", 4);
        },
        invalid,
    );
    refused_after(
        |v| {
            v.insert("format", 2);
        },
        invalid,
    );
    refused_after(
        |v| {
            v.insert("phase", "flying");
        },
        "activation transaction phase is invalid",
    );
    refused_after(
        |v| {
            v.insert("rollback_from", "prepared");
        },
        "activation transaction rollback origin is invalid",
    );
    refused_after(
        |v| {
            v.insert("phase", "rolling-back");
            v.insert("rollback_from", "committed");
        },
        "activation transaction rollback origin is invalid",
    );
    refused_after(
        |v| {
            v.insert("phase", "rolled-back");
        },
        "activation transaction rollback origin is missing",
    );
    refused_after(
        |v| {
            v.insert("transaction_id", "activation-XYZ");
        },
        "activation transaction id is invalid",
    );
    refused_after(
        |v| {
            v.insert("transaction_id", format!("activation-{}", "a".repeat(60)));
        },
        "activation transaction id is invalid",
    );
    refused_after(
        |v| {
            v.insert("release_version", "v".repeat(129));
        },
        "activation transaction version is invalid",
    );
    refused_after(
        |v| {
            v.insert("release_dir", "");
        },
        "activation transaction release_dir is invalid",
    );
    refused_after(
        |v| {
            v.insert("gateway_path", "/x\n");
        },
        "activation transaction gateway_path is invalid",
    );
    refused_after(
        |v| {
            v.insert("old_target", "a\0b");
        },
        "activation transaction old target is invalid",
    );
    refused_after(
        |v| {
            v.insert("old_release", json_object! { "source" => "/x" });
        },
        "activation transaction rollback release is invalid",
    );
    refused_after(
        |v| {
            v.insert("previous_release", Json::Null);
        },
        "activation transaction previous release is invalid",
    );
    refused_after(
        |v| {
            v.insert(
                "previous",
                json_object! { "kind" => "directory", "target" => "" },
            );
        },
        "activation transaction link state is invalid",
    );
    refused_after(
        |v| set_in(v, "service", "backup", "other.backup"),
        "activation transaction backup metadata is invalid",
    );
    refused_after(
        |v| {
            set_in(v, "env", "mode", 0o700);
        },
        "activation transaction backup metadata is invalid",
    );
    refused_after(
        |v| set_in(v, "env", "sha256", "0".repeat(64)),
        "activation transaction backup changed",
    );
    refused_after(
        |v| {
            v.insert("service_state", "paused");
        },
        "activation transaction service state is invalid",
    );
    refused_after(
        |v| {
            v.insert("service_enabled", "yes");
        },
        "activation transaction service enablement is invalid",
    );
    refused_after(
        |v| {
            v.insert("legacy_service_state", Json::Null);
        },
        "activation transaction legacy service state is invalid",
    );
    refused_after(
        |v| {
            v.insert("legacy_service_enabled", 0);
        },
        "activation transaction legacy enablement is invalid",
    );
    refused_after(
        |v| {
            v.insert("prior_port", 0);
        },
        "activation transaction prior port is invalid",
    );
    refused_after(
        |v| {
            v.insert("prior_bind_address", "host.example");
        },
        "activation transaction prior bind is invalid",
    );
    refused_after(
        |v| {
            v.insert("prior_bind_address", "::0001");
        },
        "activation transaction prior bind is noncanonical",
    );
    refused_after(
        |v| {
            v.insert("intent", "other");
        },
        "activation transaction intent is invalid",
    );
    refused_after(
        |v| {
            v.insert("client_binding", "a\rb");
        },
        "activation transaction client binding is invalid",
    );
    refused_after(
        |v| {
            v.insert(
                "desired_service",
                json_object! {
                    "sha256" => "0".repeat(64), "mode" => 0o644, "source" => "/elsewhere",
                    "device" => 1, "inode" => 1,
                },
            );
        },
        "activation desired configuration is invalid",
    );
    refused_after(
        |v| {
            v.insert("authority_pending", Json::Null);
        },
        "activation transaction authority state is invalid",
    );
    refused_after(
        |v| {
            v.insert("observed_env_sha256", vec![Json::from("abc")]);
        },
        "activation transaction configuration history is invalid",
    );
    refused_after(
        |v| set_in(v, "candidate_release", "inode", 0),
        "activation transaction candidate release is invalid",
    );
    refused_after(
        |v| set_in(v, "candidate_release", "source", "/tmp/elsewhere/stage"),
        "activation transaction release path is invalid",
    );
    refused_after(
        |v| {
            v.insert("old_target", "/somewhere");
        },
        "activation transaction rollback release path is invalid",
    );
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

#[test]
fn execution_metadata_refusals() {
    let execution =
        |key: &'static str, item: Json| move |v: &mut JsonObject| set_in(v, "execution", key, item);
    refused_after(
        |v| {
            let mut object = v
                .get("execution")
                .and_then(Json::as_object)
                .cloned()
                .unwrap();
            object.remove("api_contract");
            v.insert("execution", object);
        },
        "activation execution metadata is invalid",
    );
    refused_after(
        execution("runtime_dir", Json::from("")),
        "activation transaction execution runtime is invalid",
    );
    let (install, _id) = fresh("runtime-inside");
    let inside = install.root().join("state/execution");
    install.edit_manifest(|v| set_in(v, "execution", "runtime_dir", inside.to_str().unwrap()));
    assert_error(
        ActivationManifest::read(&install.root(), true),
        ErrorClass::Runtime,
        "activation execution layout is invalid",
    );
    refused_after(
        execution("runtime_dir", Json::from("/tmp/state/runtime")),
        "activation execution layout is invalid",
    );
    refused_after(
        execution("gateway_enabled", Json::from(1)),
        "activation execution layout is invalid",
    );
    refused_after(
        execution("api_contract", Json::from(-1)),
        "activation execution layout is invalid",
    );
    refused_after(
        |v| {
            v.insert("gateway_path", "/tmp/other.service");
        },
        "activation execution layout is invalid",
    );
    refused_after(
        |v| {
            v.insert("service_path", "/tmp/x/zenithbot-agent.service");
        },
        "execution activation requires the managed worker service",
    );
    refused_after(
        execution(
            "operation_id",
            Json::from("6BA7B811-9DAD-11D1-80B4-00C04FD430C8"),
        ),
        "activation execution operation is invalid",
    );
    refused_after(
        execution("old_worker_release", Json::Null),
        "activation prior worker release is invalid",
    );
    refused_after(
        execution(
            "old_worker_release",
            Json::Object(json_object! {
                "source" => "/elsewhere/1.0.0", "target" => "/elsewhere/1.0.0", "device" => 1,
                "inode" => 2, "version_sha256" => "a".repeat(64),
            }),
        ),
        "activation prior worker release is invalid",
    );
    let handoff = |operation: &str, lease: &str| {
        Json::Object(json_object! {
            "schema" => 1, "operation_id" => operation, "worker_instance_id" => "w1",
            "lease_id" => lease, "expected_server_identity" => "server-1",
        })
    };
    refused_after(
        execution(
            "handoff",
            handoff(
                "11111111-1111-1111-1111-111111111111",
                "22222222-2222-2222-2222-222222222222",
            ),
        ),
        "activation execution handoff is invalid",
    );
    let (install, _id) = fresh("handoff-lease");
    install.edit_manifest(|v| {
        let operation = v
            .get("execution")
            .unwrap()
            .get("operation_id")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        set_in(v, "execution", "handoff", handoff(&operation, "not-a-uuid"));
    });
    assert_error(
        ActivationManifest::read(&install.root(), true),
        ErrorClass::Runtime,
        "activation execution handoff lease is invalid",
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

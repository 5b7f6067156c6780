//! The installed manifest (`active_worker_release`), the private runtime
//! directory (`prepare_runtime`) and maintenance operation ids, on real files.

use std::fs;
use std::os::unix::fs::MetadataExt;

use agents_common::{
    active_worker_release, atomic_write, layout_manifest, maintenance_operation_id,
    prepare_runtime, test_support::read_secret, ExecutionLayout,
};
use agents_tests::{assert_error, link, make_dir, set_mode, with, write_file, InstallBase};
use python_compat::{
    json::{encode_indented, parse_json, Json, JsonObject},
    json_object,
    uuid::uuid5_url,
    ErrorClass,
};

const NO_LONGER_MATCHES: &str = "installed execution layout no longer matches its runtime";
const INVALID_MANIFEST: &str = "installed execution layout is invalid";

/// A base with releases 1.0.6 (worker) and 1.0.7 (gateway).
fn installed(tag: &str) -> (InstallBase, ExecutionLayout) {
    let base = InstallBase::new(tag);
    base.release("1.0.6");
    base.release("1.0.7");
    let value = Json::Object(base.layout("Linux", "1.0.6", "1.0.7"));
    let layout = ExecutionLayout::from_dict(&value).unwrap();
    (base, layout)
}

fn write_manifest(layout: &ExecutionLayout, value: &Json) {
    atomic_write(&layout.manifest_path(), &encode_indented(value), 0o600).unwrap();
}

#[test]
fn no_manifest_means_no_active_worker() {
    let (base, _layout) = installed("absent");
    assert_eq!(active_worker_release(&base.join("install")).unwrap(), None);
}

#[test]
fn install_root_is_checked_before_the_manifest() {
    let (base, _layout) = installed("root");
    link(&base.join("install"), &base.join("install-link"));
    assert_error(
        active_worker_release(&base.join("install-link")),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            base.join("install-link").display()
        ),
    );
    let missing = active_worker_release(&base.join("missing")).unwrap_err();
    assert_eq!(missing.class(), ErrorClass::NotFound);
    set_mode(&base.join("install"), 0o777);
    assert_error(
        active_worker_release(&base.join("install")),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            base.join("install").display()
        ),
    );
}

#[test]
fn a_matching_manifest_pins_the_worker_release() {
    let (base, layout) = installed("active");
    write_manifest(&layout, &layout_manifest(&layout).unwrap());
    assert_eq!(
        active_worker_release(&base.join("install")).unwrap(),
        Some(base.join("install/releases/1.0.6"))
    );
    // The manifest is private: 0644 is refused by the guarded reader.
    set_mode(&layout.manifest_path(), 0o644);
    assert_error(
        active_worker_release(&base.join("install")),
        ErrorClass::Permission,
        &format!(
            "execution configuration is unsafe: {}",
            layout.manifest_path().display()
        ),
    );
    // A symlinked manifest is the raw ELOOP of O_NOFOLLOW.
    fs::rename(layout.manifest_path(), base.join("manifest-real")).unwrap();
    link(&base.join("manifest-real"), &layout.manifest_path());
    let error = active_worker_release(&base.join("install")).unwrap_err();
    assert_eq!((error.class(), error.errno()), (ErrorClass::Os, Some(40)));
}

#[test]
fn manifest_must_be_an_object_of_format_1() {
    let (base, layout) = installed("format");
    let manifest = layout_manifest(&layout).unwrap();
    let root = base.join("install");
    for bad in [
        Json::Array(vec![manifest.clone()]),
        Json::Null,
        with(manifest.as_object().unwrap(), "format", 2_i64),
        with(manifest.as_object().unwrap(), "format", "1"),
        {
            let mut copy = manifest.as_object().unwrap().clone();
            copy.remove("format");
            Json::Object(copy)
        },
    ] {
        write_manifest(&layout, &bad);
        assert_error(
            active_worker_release(&root),
            ErrorClass::Value,
            INVALID_MANIFEST,
        );
    }
    write_file(&layout.manifest_path(), b"{\"format\": 1,", 0o600);
    assert_eq!(
        active_worker_release(&root).unwrap_err().class(),
        ErrorClass::JsonDecode
    );
    // Python equality: `true == 1 == 1.0`, so the original accepts these, both in
    // the format check and in the whole-document comparison.
    for format in [Json::from(true), Json::from(1.0)] {
        write_manifest(
            &layout,
            &with(manifest.as_object().unwrap(), "format", format),
        );
        assert_eq!(
            active_worker_release(&root).unwrap(),
            Some(base.join("install/releases/1.0.6"))
        );
    }
    // The embedded layout gets from_dict's full validation.
    for layout_value in [
        Json::Null,
        Json::Object(JsonObject::new()),
        with(
            manifest.get("layout").unwrap().as_object().unwrap(),
            "port",
            0_i64,
        ),
    ] {
        let document = with(manifest.as_object().unwrap(), "layout", layout_value);
        write_manifest(&layout, &document);
        let error = active_worker_release(&root).unwrap_err();
        assert_eq!(error.class(), ErrorClass::Value, "{}", error.python_line());
        assert_ne!(error.message(), NO_LONGER_MATCHES);
    }
}

#[test]
fn a_changed_version_or_foreign_manifest_no_longer_matches() {
    let (base, layout) = installed("stale");
    let root = base.join("install");
    let manifest = layout_manifest(&layout).unwrap();
    write_manifest(&layout, &manifest);
    write_file(
        &base.join("install/releases/1.0.7/VERSION"),
        b"1.0.7-hotfix\n",
        0o644,
    );
    assert_error(
        active_worker_release(&root),
        ErrorClass::Value,
        NO_LONGER_MATCHES,
    );
    write_file(
        &base.join("install/releases/1.0.7/VERSION"),
        b"1.0.7\n",
        0o644,
    );
    assert!(active_worker_release(&root).unwrap().is_some());

    // Any extra or changed key breaks the whole-document equality.
    for document in [
        with(manifest.as_object().unwrap(), "extra", true),
        with(manifest.as_object().unwrap(), "socket_path", "/elsewhere"),
        with(
            manifest.as_object().unwrap(),
            "retained_releases",
            Json::Array(vec![]),
        ),
    ] {
        write_manifest(&layout, &document);
        assert_error(
            active_worker_release(&root),
            ErrorClass::Value,
            NO_LONGER_MATCHES,
        );
    }

    // A valid manifest of another installation.
    let (_other_base, other) = installed("foreign");
    write_manifest(&layout, &layout_manifest(&other).unwrap());
    assert_error(
        active_worker_release(&root),
        ErrorClass::Value,
        NO_LONGER_MATCHES,
    );
}

#[test]
fn prepare_runtime_creates_private_state_and_never_rotates_the_token() {
    let (base, layout) = installed("runtime");
    prepare_runtime(&layout).unwrap();
    let runtime = base.join("state/execution");
    for directory in [runtime.clone(), runtime.join("logs")] {
        let info = fs::symlink_metadata(&directory).unwrap();
        assert!(info.is_dir());
        assert_eq!(info.mode() & 0o7777, 0o700, "{}", directory.display());
    }
    let token_path = runtime.join("control.token");
    let token = read_secret(&token_path).unwrap();
    assert_eq!(token.len(), 64);
    assert_eq!(
        fs::symlink_metadata(&token_path).unwrap().mode() & 0o7777,
        0o600
    );
    prepare_runtime(&layout).unwrap();
    assert_eq!(read_secret(&token_path).unwrap(), token);

    // A token written by someone else first is kept as is.
    let (base, layout) = installed("runtime-existing");
    let runtime = base.join("state/execution");
    make_dir(&runtime, 0o700);
    let existing = "0123456789abcdef".repeat(4);
    write_file(&runtime.join("control.token"), existing.as_bytes(), 0o600);
    prepare_runtime(&layout).unwrap();
    assert_eq!(
        read_secret(&runtime.join("control.token")).unwrap(),
        existing
    );

    // A malformed existing token fails closed instead of being replaced.
    write_file(
        &runtime.join("control.token"),
        format!("{existing}\n").as_bytes(),
        0o600,
    );
    assert_error(
        prepare_runtime(&layout),
        ErrorClass::Runtime,
        "Invalid execution secret file",
    );
    assert_eq!(
        fs::read(runtime.join("control.token")).unwrap(),
        format!("{existing}\n").into_bytes()
    );
}

#[test]
fn prepare_runtime_refuses_a_shared_runtime_directory_and_invalid_layouts() {
    let (base, layout) = installed("runtime-0755");
    let runtime = base.join("state/execution");
    make_dir(&runtime, 0o755);
    assert_error(
        prepare_runtime(&layout),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            runtime.display()
        ),
    );
    assert!(!runtime.join("logs").exists());
    assert!(!runtime.join("control.token").exists());

    // validate runs first: nothing is created for a broken layout.
    let (base, layout) = installed("runtime-invalid");
    fs::remove_file(base.join("install/releases/1.0.7/.venv/bin/python")).unwrap();
    assert_error(
        prepare_runtime(&layout),
        ErrorClass::Value,
        "execution release is incomplete: .venv/bin/python",
    );
    assert!(!base.join("state/execution").exists());
}

#[test]
fn operation_ids_are_python_uuid5_of_the_journal_id() {
    // Vectors computed with Python's uuid.uuid5(uuid.NAMESPACE_URL, name).
    let vectors = [
        (
            "execution-000000000000000000000000",
            "85efcaaf-5f93-5352-b00d-95a2551e6a7c",
        ),
        (
            "execution-0123456789abcdef01234567",
            "b5914c0d-4b01-5e86-bcd8-1e9626e330e6",
        ),
    ];
    for (id, expected) in vectors {
        let journal = Json::Object(json_object! {"id" => id, "scope" => "worker"});
        assert_eq!(maintenance_operation_id(&journal).unwrap(), expected);
    }
    assert_eq!(
        uuid5_url("agentsdock-activation:activation-0123456789abcdef01234567"),
        "550eebd3-3754-5784-b3e7-003dc3232ac0"
    );
    assert_eq!(uuid5_url(""), "1b4db7eb-4057-5ddf-91e0-36dec72071f5");
    assert_eq!(
        uuid5_url("http://example.com/é"),
        "b4227355-a932-55b8-a997-0c7e5b3aaf10"
    );
}

#[test]
fn operation_ids_refuse_malformed_journal_ids() {
    let bad_ids = [
        Json::from("execution-00000000000000000000000"),
        Json::from("execution-0000000000000000000000000"),
        Json::from("execution-0123456789ABCDEF01234567"),
        Json::from("Execution-0123456789abcdef01234567"),
        Json::from("execution-0123456789abcdef01234567\n"),
        Json::from(" execution-0123456789abcdef01234567"),
        Json::from("execution-0123456789abcdef0123456g"),
        Json::from("activation-0123456789abcdef01234567"),
        Json::from(5_i64),
        Json::Null,
    ];
    for id in bad_ids {
        let journal = Json::Object(json_object! {"id" => id});
        assert_error(
            maintenance_operation_id(&journal),
            ErrorClass::Value,
            "invalid execution transaction identity",
        );
    }
    for journal in [Json::Object(JsonObject::new()), Json::Array(vec![])] {
        assert_error(
            maintenance_operation_id(&journal),
            ErrorClass::Value,
            "invalid execution transaction identity",
        );
    }
}

#[test]
fn the_manifest_round_trips_through_its_file() {
    let (base, layout) = installed("roundtrip");
    let manifest = layout_manifest(&layout).unwrap();
    write_manifest(&layout, &manifest);
    let stored = parse_json(&fs::read(layout.manifest_path()).unwrap()).unwrap();
    assert_eq!(stored, manifest);
    assert_eq!(
        stored.get("retained_releases"),
        Some(&Json::from(vec![
            base.join("install/releases/1.0.6").to_str().unwrap(),
            base.join("install/releases/1.0.7").to_str().unwrap(),
        ]))
    );
}

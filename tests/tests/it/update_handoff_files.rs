//! `update-handoff release` refuses an unsafe or malformed handoff file, a
//! handoff outside its owned preparation directory, and a missing or changed
//! layout manifest, before it sends the worker anything; the lease, the
//! handoff and the installation stay exactly as they were.

use crate::update_handoff_support;
use agents_common::Platform;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use python_compat::json::{encode_indented, Json};
use update_handoff_support::{replace_file, Case, UPDATE_ID};

/// Runs the helper on the case's handoff path and asserts the refusal, that
/// nothing reached the worker and that the lease is still held.
#[track_caller]
fn assert_refused_before_any_request(case: &Case, what: &str, refusal: &str) {
    let mark = case.mark();
    let outcome = case.release();
    assert_eq!(outcome.refusal_line(), refusal, "{what}: {outcome:?}");
    assert!(case.requests_since(mark).is_empty(), "{what}: no request");
    case.assert_unlocked();
}

#[test]
fn unsafe_or_malformed_handoff_files_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let path = case.handoff_path();
    let shown = path.display().to_string();
    let unsafe_file = format!("PermissionError: execution configuration is unsafe: {shown}");
    for mode in [0o644, 0o666, 0o400, 0o700] {
        case.write_handoff(&case.handoff());
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        assert_refused_before_any_request(&case, &format!("mode {mode:o}"), &unsafe_file);
    }
    case.write_handoff(&case.handoff());
    let second_link = path.with_file_name("second-link");
    fs::hard_link(&path, &second_link).unwrap();
    assert_refused_before_any_request(&case, "a hard link", &unsafe_file);
    fs::remove_file(&second_link).unwrap();

    let schema = "ValueError: invalid handoff schema";
    let identity = "ValueError: invalid handoff operation or lease";
    let name = "ValueError: invalid handoff worker or server identity";
    let mut missing = case.handoff();
    missing.remove("lease_id");
    let mut extra = case.handoff();
    extra.insert("lease_expires_at", Json::Null);
    let documents: Vec<(&str, Json, &str)> = vec![
        (
            "schema true",
            case.handoff_with("schema", true).into(),
            schema,
        ),
        (
            "schema 1.0",
            case.handoff_with("schema", 1.0).into(),
            schema,
        ),
        ("schema 2", case.handoff_with("schema", 2).into(), schema),
        (
            "schema \"1\"",
            case.handoff_with("schema", "1").into(),
            schema,
        ),
        ("a missing key", missing.into(), schema),
        ("an extra key", extra.into(), schema),
        ("a list", Json::Array(vec![case.handoff().into()]), schema),
        (
            "a non-UUID operation",
            case.handoff_with("operation_id", "not-a-uuid").into(),
            "ValueError: badly formed hexadecimal UUID string",
        ),
        (
            "an uppercase operation",
            case.handoff_with("operation_id", "01234567-89AB-CDEF-0123-456789ABCDEF")
                .into(),
            identity,
        ),
        (
            "an unhyphenated lease",
            case.handoff_with("lease_id", "0123456789abcdef0123456789abcdef")
                .into(),
            identity,
        ),
        (
            "a numeric lease",
            case.handoff_with("lease_id", 5).into(),
            identity,
        ),
        (
            "a dotted worker instance",
            case.handoff_with("worker_instance_id", "a.b").into(),
            name,
        ),
        (
            "a 129-character server identity",
            case.handoff_with("expected_server_identity", "s".repeat(129))
                .into(),
            name,
        ),
        (
            "an empty worker instance",
            case.handoff_with("worker_instance_id", "").into(),
            name,
        ),
    ];
    for (what, document, refusal) in documents {
        replace_file(&path, &encode_indented(&document), 0o600);
        assert_refused_before_any_request(&case, what, refusal);
    }
    let duplicated = format!(
        "{{\"schema\": 1, \"schema\": 1, {}",
        &String::from_utf8(encode_indented(&case.handoff().into())).unwrap()[1..]
    );
    replace_file(&path, duplicated.as_bytes(), 0o600);
    assert_refused_before_any_request(
        &case,
        "a duplicate key",
        "ValueError: duplicate handoff field",
    );
    replace_file(&path, b"", 0o600);
    assert_refused_before_any_request(
        &case,
        "an empty file",
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    );

    // A symlink at the handoff's name is refused, even to a valid copy.
    let copy = path.with_file_name("copy.json");
    replace_file(&copy, &encode_indented(&case.handoff().into()), 0o600);
    fs::remove_file(&path).unwrap();
    symlink(&copy, &path).unwrap();
    assert_refused_before_any_request(
        &case,
        "a symlink",
        &format!("ValueError: execution path contains a symlink: {shown}"),
    );
    fs::remove_file(&path).unwrap();
    fs::remove_file(&copy).unwrap();

    // Everything else as it was: the same worker still releases it.
    case.write_handoff(&case.handoff());
    case.assert_lease_held();
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
}

#[test]
fn handoffs_outside_their_preparation_directory_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let root = case.installation.install_root.clone();
    let preparations = root.join(".update-preparations");
    let outside = "ValueError: handoff is outside its owned preparation directory";
    let document = encode_indented(&case.handoff().into());
    let upper = "A".repeat(32);
    let short = "a".repeat(31);
    let candidates = [
        preparations
            .join(&upper)
            .join(format!("handoff-{UPDATE_ID}.json")),
        preparations
            .join(&short)
            .join(format!("handoff-{UPDATE_ID}.json")),
        preparations
            .join("a".repeat(32))
            .join(format!("handoff-{}.json", "B".repeat(32))),
        preparations
            .join("a".repeat(32))
            .join(format!("handoff-{UPDATE_ID}.json.bak")),
        preparations
            .join("a".repeat(32))
            .join(format!("handoff-{UPDATE_ID}")),
        root.join(".update-preparation")
            .join("a".repeat(32))
            .join(format!("handoff-{UPDATE_ID}.json")),
        case.installation
            .state_root
            .join(".update-preparations")
            .join("a".repeat(32))
            .join(format!("handoff-{UPDATE_ID}.json")),
    ];
    for candidate in &candidates {
        let directory = candidate.parent().unwrap();
        fs::create_dir_all(directory).unwrap();
        fs::set_permissions(directory, fs::Permissions::from_mode(0o700)).unwrap();
        replace_file(candidate, &document, 0o600);
        let mark = case.mark();
        let outcome = case
            .command()
            .arg("release")
            .arg("--root")
            .arg(&root)
            .arg("--handoff-file")
            .arg(candidate)
            .output()
            .unwrap();
        assert_eq!(
            (
                outcome.status.code(),
                String::from_utf8_lossy(&outcome.stderr).into_owned()
            ),
            (Some(1), format!("{outcome_line}\n", outcome_line = outside)),
            "{}",
            candidate.display()
        );
        assert!(case.requests_since(mark).is_empty());
        fs::remove_file(candidate).unwrap();
    }
    let relative = case
        .command()
        .current_dir(&root)
        .args(["release", "--root"])
        .arg(&root)
        .arg("--handoff-file")
        .arg(format!(
            ".update-preparations/{}/handoff-{UPDATE_ID}.json",
            "a".repeat(32)
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&relative.stderr),
        "ValueError: execution paths must be absolute without traversal\n"
    );

    // Both directories must be private and owned.
    let preparation = case.handoff_path().parent().unwrap().to_path_buf();
    for directory in [&preparations, &preparation] {
        fs::set_permissions(directory, fs::Permissions::from_mode(0o750)).unwrap();
        let mark = case.mark();
        case.release().assert_refused(&format!(
            "PermissionError: execution directory permissions are unsafe: {}",
            directory.display()
        ));
        assert!(case.requests_since(mark).is_empty());
        fs::set_permissions(directory, fs::Permissions::from_mode(0o700)).unwrap();
    }
    case.assert_lease_held();
}

#[test]
fn the_installed_layout_must_be_present_and_unchanged() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let manifest = case.layout.manifest_path();
    let original = fs::read(&manifest).unwrap();
    let moved = manifest.with_file_name("execution-layout.json.moved");
    fs::rename(&manifest, &moved).unwrap();
    assert_refused_before_any_request(
        &case,
        "no manifest",
        &format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}'",
            manifest.display()
        ),
    );
    fs::rename(&moved, &manifest).unwrap();

    // Valid JSON that is not exactly the manifest of its own layout.
    let mut changed = python_compat::json::parse_json(&original).unwrap();
    if let Json::Object(object) = &mut changed {
        object.insert("format", 99);
    }
    replace_file(&manifest, &encode_indented(&changed), 0o600);
    assert_refused_before_any_request(
        &case,
        "a changed manifest",
        "ValueError: installed execution layout changed",
    );
    replace_file(&manifest, b"[]\n", 0o600);
    assert_refused_before_any_request(
        &case,
        "a list",
        "ValueError: installed execution layout is invalid",
    );
    replace_file(&manifest, &original, 0o644);
    assert_refused_before_any_request(
        &case,
        "a readable manifest",
        &format!(
            "PermissionError: execution configuration is unsafe: {}",
            manifest.display()
        ),
    );
    replace_file(&manifest, &original, 0o600);
    case.assert_lease_held();
}

#[test]
fn a_layout_installed_for_macos_is_refused_before_any_request() {
    // update_handoff builds NativeServices(layout) under the lock, after the
    // handoff and the installed layout are read: a launchd layout is
    // refused on this Linux host before the worker is asked anything.
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let manifest = case.layout.manifest_path();
    let original = fs::read(&manifest).unwrap();
    let mut darwin = case.layout.clone();
    darwin.platform = Platform::Darwin.into();
    let rendered = agents_common::layout_manifest(&darwin).unwrap();
    assert_eq!(
        rendered
            .get("layout")
            .and_then(|layout| layout.get("platform")),
        Some(&Json::from("Darwin"))
    );
    replace_file(&manifest, &encode_indented(&rendered), 0o600);
    assert_refused_before_any_request(
        &case,
        "a launchd layout",
        "ValueError: native execution platform does not match this host",
    );
    replace_file(&manifest, &original, 0o600);
    case.assert_lease_held();
}

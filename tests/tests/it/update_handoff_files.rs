//! `update-handoff release` refuses an unsafe or malformed handoff file, a
//! handoff outside its owned preparation directory, and a missing or changed
//! layout manifest, before it sends the worker anything; the lease, the
//! handoff and the installation stay exactly as they were.

use crate::update_handoff_support;
use agents_common::Platform;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use python_compat::json::{encode_indented, Json};
use update_handoff_support::{replace_file, Case, PREPARATION_ID, UPDATE_ID};

/// Runs the helper on the case's handoff path and asserts the refusal, that
/// nothing reached the worker and that no installation lock is left behind.
#[track_caller]
fn assert_refused_before_any_request(case: &Case, what: &str, refusal: &str) {
    let mark = case.mark();
    let outcome = case.release();
    assert_eq!(outcome.refusal_line(), refusal, "{what}: {outcome:?}");
    assert!(case.requests_since(mark).is_empty(), "{what}: no request");
    case.assert_unlocked();
}

/// The end of every refusal test: with the exact handoff written back, the
/// worker still holds the sealed lease and the same worker releases it, so
/// the refusals changed nothing else.
#[track_caller]
fn assert_released_once_the_handoff_is_restored(case: &Case) {
    case.write_handoff(&case.handoff());
    case.assert_lease_held();
    case.release()
        .assert_released(false, &case.services.worker_instance_id());
}

/// Handoff file modes other than the private 0600 the runner writes.
const UNSAFE_MODES: [u32; 4] = [0o644, 0o666, 0o400, 0o700];

#[test]
fn unsafe_handoff_files_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let path = case.handoff_path();
    let shown = path.display().to_string();
    let unsafe_file = format!("PermissionError: execution configuration is unsafe: {shown}");
    for mode in UNSAFE_MODES {
        case.write_handoff(&case.handoff());
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        assert_refused_before_any_request(&case, &format!("mode {mode:o}"), &unsafe_file);
    }
    case.write_handoff(&case.handoff());
    let second_link = path.with_file_name("second-link");
    fs::hard_link(&path, &second_link).unwrap();
    assert_refused_before_any_request(&case, "a hard link", &unsafe_file);
    fs::remove_file(&second_link).unwrap();

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

    assert_released_once_the_handoff_is_restored(&case);
}

/// Not the five keys with schema 1.
const BAD_SCHEMA: &str = "ValueError: invalid handoff schema";
/// An operation or lease that is no canonical UUID.
const BAD_IDS: &str = "ValueError: invalid handoff operation or lease";
/// A worker instance or server identity that is no short plain name.
const BAD_NAMES: &str = "ValueError: invalid handoff worker or server identity";

/// Private (0600) handoff files whose content is wrong, each with the
/// refusal the original names: (what, the file's bytes, refusal line), in
/// the order of the original's checks (schema, ids, names, then parsing).
fn malformed_handoffs(case: &Case) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let document = |json: Json| encode_indented(&json);
    let changed = |key: &str, value: Json| document(case.handoff_with(key, value).into());
    let mut missing = case.handoff();
    missing.remove("lease_id");
    let mut extra = case.handoff();
    extra.insert("lease_expires_at", Json::Null);
    let indented = String::from_utf8(document(case.handoff().into())).unwrap();
    let duplicated = format!("{{\"schema\": 1, \"schema\": 1, {}", &indented[1..]);
    vec![
        ("schema true", changed("schema", true.into()), BAD_SCHEMA),
        ("schema 1.0", changed("schema", 1.0.into()), BAD_SCHEMA),
        ("schema 2", changed("schema", 2.into()), BAD_SCHEMA),
        ("schema \"1\"", changed("schema", "1".into()), BAD_SCHEMA),
        ("a missing key", document(missing.into()), BAD_SCHEMA),
        ("an extra key", document(extra.into()), BAD_SCHEMA),
        (
            "a list",
            document(Json::Array(vec![case.handoff().into()])),
            BAD_SCHEMA,
        ),
        (
            "a non-UUID operation",
            changed("operation_id", "not-a-uuid".into()),
            "ValueError: badly formed hexadecimal UUID string",
        ),
        (
            "an uppercase operation",
            changed(
                "operation_id",
                "01234567-89AB-CDEF-0123-456789ABCDEF".into(),
            ),
            BAD_IDS,
        ),
        (
            "an unhyphenated lease",
            changed("lease_id", "0123456789abcdef0123456789abcdef".into()),
            BAD_IDS,
        ),
        ("a numeric lease", changed("lease_id", 5.into()), BAD_IDS),
        (
            "a dotted worker instance",
            changed("worker_instance_id", "a.b".into()),
            BAD_NAMES,
        ),
        (
            "a 129-character server identity",
            changed("expected_server_identity", "s".repeat(129).into()),
            BAD_NAMES,
        ),
        (
            "an empty worker instance",
            changed("worker_instance_id", "".into()),
            BAD_NAMES,
        ),
        (
            "a duplicate key",
            duplicated.into_bytes(),
            "ValueError: duplicate handoff field",
        ),
        (
            "an empty file",
            Vec::new(),
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
        ),
    ]
}

#[test]
fn malformed_handoff_files_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    for (what, data, refusal) in malformed_handoffs(&case) {
        replace_file(&case.handoff_path(), &data, 0o600);
        assert_refused_before_any_request(&case, what, refusal);
    }
    assert_released_once_the_handoff_is_restored(&case);
}

/// Private handoff files in private directories that are not the owned
/// preparation directory's `handoff-<update id>.json`: a preparation id in
/// uppercase or one digit short, another update id in uppercase, a backup
/// or extensionless name, a misspelled `.update-preparation` and the
/// state root's `.update-preparations`.
fn misplaced_handoffs(case: &Case) -> [PathBuf; 7] {
    let root = &case.installation.install_root;
    let preparations = root.join(".update-preparations");
    let owned = preparations.join(PREPARATION_ID);
    let name = format!("handoff-{UPDATE_ID}.json");
    [
        preparations.join("A".repeat(32)).join(&name),
        preparations.join("a".repeat(31)).join(&name),
        owned.join(format!("handoff-{}.json", "B".repeat(32))),
        owned.join(format!("{name}.bak")),
        owned.join(format!("handoff-{UPDATE_ID}")),
        root.join(".update-preparation")
            .join(PREPARATION_ID)
            .join(&name),
        case.installation
            .state_root
            .join(".update-preparations")
            .join(PREPARATION_ID)
            .join(&name),
    ]
}

/// `update-handoff release` of the installation with `handoff_file` as given.
fn release_command(case: &Case, handoff_file: &Path) -> Command {
    let mut command = case.command();
    command
        .arg("release")
        .arg("--root")
        .arg(&case.installation.install_root)
        .arg("--handoff-file")
        .arg(handoff_file);
    command
}

/// The exit status and stderr of a finished helper.
fn status_and_stderr(output: &Output) -> (Option<i32>, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn handoffs_outside_their_preparation_directory_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    let outside = "ValueError: handoff is outside its owned preparation directory";
    let document = encode_indented(&case.handoff().into());
    for candidate in misplaced_handoffs(&case) {
        let directory = candidate.parent().unwrap();
        fs::create_dir_all(directory).unwrap();
        fs::set_permissions(directory, fs::Permissions::from_mode(0o700)).unwrap();
        replace_file(&candidate, &document, 0o600);
        let mark = case.mark();
        let output = release_command(&case, &candidate).output().unwrap();
        assert_eq!(
            status_and_stderr(&output),
            (Some(1), format!("{outside}\n")),
            "{}",
            candidate.display()
        );
        assert!(case.requests_since(mark).is_empty());
        fs::remove_file(&candidate).unwrap();
    }
    let relative = format!(".update-preparations/{PREPARATION_ID}/handoff-{UPDATE_ID}.json");
    let output = release_command(&case, Path::new(&relative))
        .current_dir(&case.installation.install_root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "ValueError: execution paths must be absolute without traversal\n"
    );
    case.assert_lease_held();
}

#[test]
fn preparation_directories_that_are_not_private_are_refused() {
    let Some(case) = Case::start(agents_tests::test_name!()) else {
        return;
    };
    // Both `.update-preparations` and the preparation must be private.
    let preparations = case.installation.install_root.join(".update-preparations");
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

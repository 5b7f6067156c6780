//! The `.execution-uninstall.json` intent: exact keys and bytes (checked by
//! a live CPython round trip), what the worker's startup reader accepts, and
//! every refusal of a marker that no longer names this installation.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use agents_common::test_support::pending_uninstall_operation;
use agents_common::{
    read_uninstall_intent, store_uninstall_intent, write_uninstall_intent, ExecutionLayout,
    UNINSTALL_INTENT_NAME,
};
use agents_tests::{free_port, Installation};
use python_compat::json::{encode_indented, parse_json, Json, JsonObject};

const OPERATION: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn installed() -> (Installation, ExecutionLayout) {
    let installation = Installation::in_temp();
    let worker = installation.add_release("1.0.0");
    let gateway = installation.add_release("1.1.0");
    let layout = installation.layout(&worker, &gateway, free_port());
    installation.install_split(&layout);
    (installation, layout)
}

fn intent_path(installation: &Installation) -> std::path::PathBuf {
    installation.install_root.join(UNINSTALL_INTENT_NAME)
}

/// `json.dumps(json.loads(data), sort_keys=True, indent=2) + "\n"` by CPython.
fn python_rendering(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json,sys; v=json.loads(sys.stdin.buffer.read()); \
             sys.stdout.write(json.dumps(v, sort_keys=True, indent=2) + '\\n')",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (the byte format is checked against CPython)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(data).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    output.stdout
}

fn binding(path: &Path) -> Json {
    let meta = fs::symlink_metadata(path).unwrap();
    let mut object = JsonObject::new();
    object.insert("device", Json::Int(meta.dev().into()));
    object.insert("inode", Json::Int(meta.ino().into()));
    object.insert("volume_uuid", Json::Null);
    Json::Object(object)
}

/// The keys of an intent, sorted.
const INTENT_KEYS: [&str; 10] = [
    "format",
    "gateway_release",
    "identities",
    "layout_sha256",
    "operation_id",
    "phase",
    "purge_state",
    "root",
    "server_identity",
    "worker_release",
];

/// `sha256sum FILE`, an oracle independent of the helpers.
fn sha256sum(path: &Path) -> String {
    let output = Command::new("sha256sum").arg(path).output().unwrap();
    let digest = String::from_utf8(output.stdout).unwrap();
    digest.split(' ').next().unwrap().to_string()
}

#[test]
fn the_written_intent_has_pythons_keys_bytes_and_mode() {
    let (installation, layout) = installed();
    let written = write_uninstall_intent(
        &installation.install_root,
        &layout,
        OPERATION,
        true,
        "server_a",
    )
    .unwrap();
    let path = intent_path(&installation);
    let data = fs::read(&path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(data, python_rendering(&data), "sorted, indent-2, newline");
    assert_eq!(data, encode_indented(&Json::Object(written.clone())));
    let value = parse_json(&data).unwrap();
    let mut keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, INTENT_KEYS);
    assert_names_this_installation(&value, &installation, &layout);
    // Read back exactly.
    let read = read_uninstall_intent(&installation.install_root, &layout)
        .unwrap()
        .unwrap();
    assert_eq!(read, written);
}

/// The values of a freshly written intent (purging state, for
/// `server_a`): this installation's root, releases, layout digest and
/// directory identities, the operation, and phase `prepared`.
fn assert_names_this_installation(
    value: &Json,
    installation: &Installation,
    layout: &ExecutionLayout,
) {
    let text = |key: &str| value.get(key).and_then(Json::as_str).unwrap().to_string();
    assert_eq!(value.get("format"), Some(&Json::Int(1)));
    assert_eq!(text("root"), installation.install_root.to_str().unwrap());
    assert_eq!(
        text("worker_release"),
        layout.worker_release.to_str().unwrap()
    );
    assert_eq!(
        text("gateway_release"),
        layout.gateway_release.to_str().unwrap()
    );
    assert_eq!(text("operation_id"), OPERATION);
    assert_eq!(text("server_identity"), "server_a");
    assert_eq!(text("phase"), "prepared");
    assert_eq!(value.get("purge_state"), Some(&Json::Bool(true)));
    assert!(!fs::read(layout.manifest_path()).unwrap().is_empty());
    assert_eq!(text("layout_sha256"), sha256sum(&layout.manifest_path()));
    let identities = value.get("identities").unwrap();
    assert_eq!(
        identities.get("root"),
        Some(&binding(&installation.install_root))
    );
    assert_eq!(
        identities.get("worker"),
        Some(&binding(&layout.worker_release))
    );
    assert_eq!(
        identities.get("gateway"),
        Some(&binding(&layout.gateway_release))
    );
}

#[test]
fn a_second_intent_is_refused_even_as_a_dangling_symlink() {
    let (installation, layout) = installed();
    let root = &installation.install_root;
    write_uninstall_intent(root, &layout, OPERATION, true, "server_a").unwrap();
    let another = || {
        write_uninstall_intent(root, &layout, OPERATION, true, "s")
            .unwrap_err()
            .python_line()
    };
    let exists = "RuntimeError: another uninstall intent already exists";
    assert_eq!(another(), exists);
    let path = intent_path(&installation);
    fs::remove_file(&path).unwrap();
    symlink("missing", &path).unwrap();
    assert_eq!(another(), exists);
}

#[test]
fn the_startup_reader_names_the_retained_worker_and_never_writes() {
    let (installation, layout) = installed();
    let root = &installation.install_root;
    let not_retained = "RuntimeError: worker is not retained by the pending uninstall";
    let err = pending_uninstall_operation(root, &layout.worker_release).unwrap_err();
    assert_eq!(err.python_line(), not_retained, "no intent");
    write_uninstall_intent(root, &layout, OPERATION, false, "server_a").unwrap();
    let path = intent_path(&installation);
    let before = (
        fs::read(&path).unwrap(),
        fs::metadata(&path).unwrap().mtime_nsec(),
    );
    assert_eq!(
        pending_uninstall_operation(root, &layout.worker_release).unwrap(),
        OPERATION
    );
    let err = pending_uninstall_operation(root, &layout.gateway_release).unwrap_err();
    assert_eq!(err.python_line(), not_retained, "another release");
    let after = (
        fs::read(&path).unwrap(),
        fs::metadata(&path).unwrap().mtime_nsec(),
    );
    assert_eq!(before, after);
    for journal in [".activation-transaction", ".execution-transaction"] {
        symlink("missing", root.join(journal)).unwrap();
        let err = pending_uninstall_operation(root, &layout.worker_release).unwrap_err();
        assert_eq!(
            err.python_line(),
            "RuntimeError: activation already owns handoff recovery"
        );
        assert_eq!(
            err.kind(),
            Some(agents_common::ErrorKind::ActivationOwnsRecovery)
        );
        fs::remove_file(root.join(journal)).unwrap();
    }
}

/// Rewrites the intent with `change` applied and returns the reader's error line.
fn refusal(
    installation: &Installation,
    layout: &ExecutionLayout,
    change: impl FnOnce(&mut JsonObject),
) -> String {
    let root = &installation.install_root;
    let path = intent_path(installation);
    let _ = fs::remove_file(&path);
    let mut intent = write_uninstall_intent(root, layout, OPERATION, false, "server_a").unwrap();
    change(&mut intent);
    store_uninstall_intent(root, &intent).unwrap();
    read_uninstall_intent(root, layout)
        .unwrap_err()
        .python_line()
}

/// How a refusal case changes the intent just written.
#[derive(Debug)]
enum Change {
    /// Removes the top-level `key`.
    Remove(&'static str),
    /// Sets the top-level `key`.
    Set(&'static str, Json),
    /// Removes the identity of `which` (`root`, `worker` or `gateway`).
    RemoveIdentity(&'static str),
    /// Sets the field `key` of the identity of `which`.
    SetIdentity(&'static str, &'static str, Json),
}

impl Change {
    fn apply(self, intent: &mut JsonObject) {
        fn identities(intent: &mut JsonObject) -> &mut JsonObject {
            let identities = intent.get_mut("identities").unwrap();
            identities.as_object_mut().unwrap()
        }
        match self {
            Change::Remove(key) => {
                intent.remove(key);
            }
            Change::Set(key, value) => {
                intent.insert(key, value);
            }
            Change::RemoveIdentity(which) => {
                identities(intent).remove(which);
            }
            Change::SetIdentity(which, key, value) => {
                let identity = identities(intent).get_mut(which).unwrap();
                identity.as_object_mut().unwrap().insert(key, value);
            }
        }
    }
}

/// The reader's refusal of an intent that is well formed but names
/// another installation, or is not an intent it wrote.
const MISMATCH: &str = "ValueError: uninstall intent does not match this installed runtime";

/// Every way a marker can fail to be exactly this installation's, and
/// the reader's refusal of it.
fn not_this_installation() -> Vec<(Change, &'static str)> {
    use Change::*;
    vec![
        (Remove("phase"), MISMATCH),
        (Set("extra", 1_i64.into()), MISMATCH),
        (Set("format", true.into()), MISMATCH),
        (Set("format", 2_i64.into()), MISMATCH),
        (Set("purge_state", 0_i64.into()), MISMATCH),
        (Set("root", "/elsewhere".into()), MISMATCH),
        (Set("worker_release", "/elsewhere".into()), MISMATCH),
        (Set("gateway_release", "/elsewhere".into()), MISMATCH),
        (Set("phase", "deleting".into()), MISMATCH),
        (Set("server_identity", "has space".into()), MISMATCH),
        (Set("server_identity", 7_i64.into()), MISMATCH),
        (Set("operation_id", 7_i64.into()), MISMATCH),
        (
            Set("operation_id", OPERATION.to_uppercase().into()),
            MISMATCH,
        ),
        (
            Set("operation_id", "not-a-uuid".into()),
            "ValueError: badly formed hexadecimal UUID string",
        ),
        (
            RemoveIdentity("gateway"),
            "ValueError: uninstall intent identities are invalid",
        ),
        (
            SetIdentity("root", "inode", true.into()),
            "ValueError: invalid preparation directory identity",
        ),
        (
            SetIdentity("worker", "inode", 1_i64.into()),
            "RuntimeError: prepared directory identity changed",
        ),
        (
            SetIdentity("gateway", "device", 1_i64.into()),
            "RuntimeError: prepared filesystem identity changed",
        ),
        (
            SetIdentity("gateway", "volume_uuid", "ABC".into()),
            "RuntimeError: prepared filesystem identity changed",
        ),
        (
            Set("layout_sha256", "0".repeat(64).into()),
            "RuntimeError: installed execution layout changed after uninstall admission",
        ),
    ]
}

#[test]
fn a_marker_that_is_not_exactly_this_installation_is_refused() {
    let (installation, layout) = installed();
    for (change, expected) in not_this_installation() {
        let case = format!("{change:?}");
        assert_eq!(
            refusal(&installation, &layout, |intent| change.apply(intent)),
            expected,
            "{case}"
        );
    }
}

#[test]
fn an_unsafe_or_replaced_marker_is_refused() {
    let (installation, layout) = installed();
    let root = &installation.install_root;
    let path = intent_path(&installation);
    write_uninstall_intent(root, &layout, OPERATION, false, "server_a").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        read_uninstall_intent(root, &layout)
            .unwrap_err()
            .python_line(),
        format!(
            "PermissionError: execution configuration is unsafe: {}",
            path.display()
        )
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    // A symlinked marker is never followed.
    let aside = root.join("intent-copy.json");
    fs::rename(&path, &aside).unwrap();
    symlink(&aside, &path).unwrap();
    let err = read_uninstall_intent(root, &layout).unwrap_err();
    assert_eq!(
        err.python_line(),
        format!(
            "OSError: [Errno 40] Too many levels of symbolic links: '{}'",
            path.display()
        )
    );
    fs::remove_file(&path).unwrap();
    fs::rename(&aside, &path).unwrap();
    // The worker release replaced by another directory at the same path.
    let moved = installation.install_root.join("releases/moved");
    fs::rename(&layout.worker_release, &moved).unwrap();
    fs::create_dir(&layout.worker_release).unwrap();
    for entry in fs::read_dir(&moved).unwrap() {
        let entry = entry.unwrap();
        fs::rename(entry.path(), layout.worker_release.join(entry.file_name())).unwrap();
    }
    assert_eq!(
        read_uninstall_intent(root, &layout)
            .unwrap_err()
            .python_line(),
        "RuntimeError: prepared directory identity changed"
    );
    // Not JSON at all.
    fs::write(&path, b"{").unwrap();
    let err = read_uninstall_intent(root, &layout).unwrap_err();
    assert_eq!(
        err.python_line(),
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: \
         line 1 column 2 (char 1)"
    );
}

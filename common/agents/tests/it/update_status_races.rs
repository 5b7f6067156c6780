//! The `server-update.json` protocol against the original running in real Python
//! processes: both sides serialise on the same flock, the CAS refuses writes
//! once the server changed the row, unknown keys survive, and the bytes and
//! refusals match `update_runner.py`.

use agents_tests::release_support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agents_common::{
    is_ownership_lost, read_status_unlocked, update_status, update_status_unlocked, StatusLock,
};
use agents_tests::Originals;
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object, ErrorClass,
};
use release_support::{python_oracle, TempDir};

/// Start the original in a child python3 running `script` with `path` bound.
fn spawn_python(originals: &Originals, script: &str, path: &Path) -> std::process::Child {
    Command::new("python3")
        .arg("-B")
        .arg("-c")
        .arg(format!(
            "import sys, json, time\nsys.path.insert(0, {:?})\nimport update_runner\nfrom pathlib import Path\np = Path({:?})\n{script}",
            originals.dir(),
            path.to_str().unwrap()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 is required for the status protocol tests")
}

fn row(path: &Path) -> JsonObject {
    match parse_json(&std::fs::read(path).unwrap()).unwrap() {
        Json::Object(object) => object,
        other => panic!("row is {other:?}"),
    }
}

#[test]
fn rust_and_python_writers_serialise_on_the_same_flock() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("status-race");
    let path = dir.path().join("server-update.json");
    let rounds = 150;
    let mut python = spawn_python(
        &originals,
        &format!(
            "for _ in range({rounds}):\n    with update_runner.server_update_status_lock(p):\n        cur = update_runner._read_status_unlocked(p)\n        time.sleep(0.001)\n        update_runner._update_status_unlocked(p, cur, counter=cur.get('counter', 0) + 1, server_field={{'kept': True}})\n"
        ),
        &path,
    );
    for _ in 0..rounds {
        let _lock = StatusLock::acquire(&path).unwrap();
        let current = read_status_unlocked(&path).unwrap();
        let counter = current.get("counter").and_then(Json::as_int).unwrap_or(0);
        std::thread::sleep(Duration::from_millis(1));
        update_status_unlocked(&path, &current, json_object! {"counter" => counter + 1}).unwrap();
    }
    assert!(python.wait().unwrap().success());
    let final_row = row(&path);
    assert_eq!(
        final_row.get("counter").and_then(Json::as_int),
        Some(2 * rounds),
        "a lost update means the two writers did not exclude each other"
    );
    assert_eq!(
        final_row.get("server_field"),
        Some(&Json::Object(json_object! {"kept" => true}))
    );
}

#[test]
fn a_writer_blocks_until_the_server_releases_the_lock() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("status-block");
    let path = dir.path().join("server-update.json");
    std::fs::write(&path, b"{\"update_id\": \"u1\", \"phase\": \"starting\"}\n").unwrap();
    let mut python = spawn_python(
        &originals,
        "with update_runner.server_update_status_lock(p):\n    print('locked', flush=True)\n    time.sleep(1.0)\n    cur = update_runner._read_status_unlocked(p)\n    update_runner._update_status_unlocked(p, cur, phase='checking', server_note='written while locked')\n",
        &path,
    );
    let mut line = String::new();
    BufReader::new(python.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let started = Instant::now();
    let written = update_status(&path, Some("u1"), json_object! {"message" => "ours"}).unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "update_status did not wait for the server's flock"
    );
    assert!(python.wait().unwrap().success());
    assert_eq!(written.get("phase"), Some(&Json::from("checking")));
    assert_eq!(
        written.get("server_note"),
        Some(&Json::from("written while locked"))
    );
    assert_eq!(row(&path), written);
}

#[test]
fn the_cas_refuses_once_the_row_is_no_longer_ours() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("status-cas");
    let path = dir.path().join("state/server-update.json");
    let initial = json_object! {
        "update_id" => "u1",
        "phase" => "downloading",
        "_npm_release" => json_object! {"manifest_base64" => "e30=", "signature_base64" => "x"},
        "attempt_history" => vec![Json::from("kept")],
        "retryable" => true,
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        python_compat::json::encode_indented(&Json::Object(initial.clone())),
    )
    .unwrap();
    let written = update_status(
        &path,
        Some("u1"),
        json_object! {"phase" => "verifying", "retryable" => Json::Null, "runner_pid" => 42},
    )
    .unwrap();
    for (key, value) in initial.iter() {
        if key != "phase" && key != "retryable" {
            assert_eq!(written.get(key), Some(value), "{key} must survive");
        }
    }
    assert_eq!(
        written.get("retryable"),
        Some(&Json::Null),
        "None is written as null"
    );
    let stamp = written.get("updated_at").and_then(Json::as_str).unwrap();
    assert_eq!(stamp.len(), 20);
    assert!(stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T');
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The server (original) finalises the row; from then on the runner may not write.
    let mut server = spawn_python(
        &originals,
        "update_runner.update_status(p, phase='failed', message='cancelled by the server')\n",
        &path,
    );
    assert!(server.wait().unwrap().success());
    let before = std::fs::read(&path).unwrap();
    assert_ne!(before, bytes);
    for (update_id, label) in [("u1", "finalised phase"), ("u2", "other update")] {
        let error =
            update_status(&path, Some(update_id), json_object! {"message" => "late"}).unwrap_err();
        assert!(is_ownership_lost(&error), "{label}: {error:?}");
        assert_eq!(
            error.python_line(),
            "update_runner.UpdateOwnershipLostError: detached updater no longer owns the server update status"
        );
        assert!(error.is_a(ErrorClass::Runtime));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{label}: row changed"
        );
    }
    // Without an expected id the write is unconditional (the server's use).
    update_status(&path, None, json_object! {"message" => "unconditional"}).unwrap();
    assert_eq!(
        row(&path).get("message"),
        Some(&Json::from("unconditional"))
    );
    // Only our temporary files may appear, and none survive.
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn rows_are_written_and_read_exactly_as_the_original_does() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("status-bytes");
    let cases: Vec<(&str, &[u8])> = vec![
        (
            "object",
            b"{\"b\": 1, \"a\": [1.5, \"\\u00e9\", null], \"update_id\": \"u\"}",
        ),
        ("array", b"[1, 2]"),
        ("garbage", b"{not json"),
        ("bom", b"\xef\xbb\xbf{\"a\": 1}"),
        ("empty", b""),
        (
            "non-ascii",
            "{\"name\": \"caf\u{e9} \u{1f600}\"}".as_bytes(),
        ),
        ("not utf-8", b"{\"a\": \"\xff\"}"),
        ("bad continuation", b"{\"a\": \"\xc3(\"}"),
        ("cut sequence", b"{\"a\": \"\xe2\x82"),
    ];
    let mut inputs = Vec::new();
    for (label, content) in &cases {
        let path = dir.path().join(format!("{label}.json"));
        std::fs::write(&path, content).unwrap();
        inputs.push(Json::from(path.to_str().unwrap()));
    }
    let original = python_oracle(
        &originals,
        r#"
from pathlib import Path
out = []
for name in json.load(sys.stdin):
    try:
        value = update_runner._read_status_unlocked(Path(name))
        out.append({"ok": value, "bytes": json.dumps(value, indent=2, sort_keys=True) + "\n"})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#,
        &python_compat::json::encode_compact(&Json::Array(inputs.clone())).unwrap(),
    );
    for ((label, _), (input, expected)) in cases
        .iter()
        .zip(inputs.iter().zip(original.as_array().unwrap()))
    {
        let path = Path::new(input.as_str().unwrap());
        match (read_status_unlocked(path), expected.get("ok")) {
            (Ok(ours), Some(original_value)) => {
                assert_eq!(&Json::Object(ours.clone()), original_value, "{label}");
                let written = dir.path().join(format!("{label}.out.json"));
                agents_common::test_support::atomic_json(&written, &ours).unwrap();
                assert_eq!(
                    std::fs::read(&written).unwrap(),
                    expected.get("bytes").unwrap().as_str().unwrap().as_bytes(),
                    "{label}: bytes differ from json.dump(indent=2, sort_keys=True) + newline"
                );
            }
            (Err(error), None) => {
                assert_eq!(
                    expected.get("error"),
                    Some(&Json::from(error.class().python_name())),
                    "{label}"
                );
                assert_eq!(
                    expected.get("message"),
                    Some(&Json::from(error.message())),
                    "{label}"
                );
            }
            (ours, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
        }
    }
}

#[test]
fn unsafe_lock_files_are_refused_like_the_original() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("status-lock");
    let make = |label: &str| {
        let case = dir.path().join(label);
        std::fs::create_dir(&case).unwrap();
        let status = case.join("server-update.json");
        (status.clone(), case.join(".server-update.json.lock"))
    };
    let mut statuses = Vec::new();
    let (status, lock) = make("symlink");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &lock).unwrap();
    statuses.push(status);
    let (status, lock) = make("hardlink");
    std::fs::write(&lock, b"").unwrap();
    std::fs::hard_link(&lock, dir.path().join("hardlink/second-name")).unwrap();
    statuses.push(status);
    let (status, lock) = make("directory");
    std::fs::create_dir(&lock).unwrap();
    statuses.push(status);
    let root = rustix::process::getuid().is_root();
    if root {
        let (status, lock) = make("foreign");
        std::fs::write(&lock, b"").unwrap();
        std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
        statuses.push(status);
    }
    let inputs: Vec<Json> = statuses
        .iter()
        .map(|path| Json::from(path.to_str().unwrap()))
        .collect();
    let original = python_oracle(
        &originals,
        r#"
from pathlib import Path
out = []
for name in json.load(sys.stdin):
    try:
        update_runner.update_status(Path(name), message="x")
        out.append({"ok": True})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#,
        &python_compat::json::encode_compact(&Json::Array(inputs)).unwrap(),
    );
    for (status, expected) in statuses.iter().zip(original.as_array().unwrap()) {
        let error = update_status(status, None, json_object! {"message" => "x"}).unwrap_err();
        assert_eq!(
            Some(error.message()),
            expected.get("message").and_then(Json::as_str),
            "{status:?}"
        );
        let class = match expected.get("error").and_then(Json::as_str).unwrap() {
            "PermissionError" => ErrorClass::Permission,
            "IsADirectoryError" => ErrorClass::IsADirectory,
            "OSError" => ErrorClass::Os,
            other => panic!("unexpected original class {other}"),
        };
        assert_eq!(error.class(), class, "{status:?}");
        assert!(!status.exists(), "a refused lock must not write the row");
    }
    // A lock left 0644 by someone else is made private again.
    let (status, lock) = make("loose-mode");
    std::fs::write(&lock, b"").unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    update_status(&status, None, json_object! {"message" => "x"}).unwrap();
    assert_eq!(std::fs::metadata(&lock).unwrap().mode() & 0o777, 0o600);
}

//! `snapshot` (`_snapshot`) and `desired` (`_desired`): the journal records,
//! compared with the exact `json.dumps` text Python produces for them.

use std::os::unix::fs::symlink;

use agents_common::{desired, snapshot};
use agents_tests::{assert_error_is, assert_os_error, write_file, TempDir};
use python_compat::{
    json::{encode_line, Json},
    ErrorClass,
};

/// `json.dumps(record)` (insertion order, default separators), as Python prints it.
fn python_text(record: &Json) -> String {
    encode_line(record, false)
}

#[test]
fn snapshot_records_mode_hash_and_padded_base64() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("unit");
    write_file(&path, b"hello\n", 0o644);
    assert_eq!(
        python_text(&snapshot(&path).unwrap()),
        r#"{"exists": true, "mode": 420, "sha256": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03", "data": "aGVsbG8K"}"#
    );
    write_file(&path, b"\x00\x01\x02\x03\x04\xff\xfe", 0o600);
    assert_eq!(
        python_text(&snapshot(&path).unwrap()),
        r#"{"exists": true, "mode": 384, "sha256": "ec0c4242ceae675eeddad2211e962a864b48eb3e0bec22c3be753450246638f2", "data": "AAECAwT//g=="}"#
    );
}

#[test]
fn snapshot_of_a_missing_file_is_only_exists_false() {
    let dir = TempDir::new("agents-fs-test");
    assert_eq!(
        python_text(&snapshot(&dir.join("missing")).unwrap()),
        r#"{"exists": false}"#
    );
}

#[test]
fn snapshot_propagates_every_other_refusal() {
    let dir = TempDir::new("agents-fs-test");
    write_file(&dir.join("real"), b"x", 0o600);
    let link = dir.join("link");
    symlink(dir.join("real"), &link).unwrap();
    let error = snapshot(&link).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &link,
    );
    // A dangling symlink is not "missing" either.
    let dangling = dir.join("dangling");
    symlink(dir.join("nowhere"), &dangling).unwrap();
    let error = snapshot(&dangling).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &dangling,
    );

    let writable = dir.join("writable");
    write_file(&writable, b"x", 0o664);
    assert_error_is(
        &snapshot(&writable).unwrap_err(),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", writable.display()),
    );
}

#[test]
fn desired_is_the_snapshot_of_a_0600_file() {
    assert_eq!(
        python_text(&desired(b"")),
        r#"{"exists": true, "mode": 384, "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "data": ""}"#
    );
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("unit");
    write_file(&path, b"hello\n", 0o600);
    assert_eq!(snapshot(&path).unwrap(), desired(b"hello\n"));
    write_file(&path, b"hello\n", 0o644);
    assert_ne!(snapshot(&path).unwrap(), desired(b"hello\n"));
}

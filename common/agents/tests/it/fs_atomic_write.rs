//! `atomic_write` (`_atomic_write`): exact content and mode, replacement of a
//! symlink instead of following it, parent checks, and no temporary left over.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use agents_common::atomic_write;
use agents_tests::{assert_error_is, chown_other, entries, make_dir, mode_of, write_file, TempDir};
use python_compat::ErrorClass;

#[test]
fn writes_the_bytes_with_exactly_the_requested_mode() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("unit.service");
    atomic_write(&path, b"[Unit]\n", 0o644).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"[Unit]\n");
    assert_eq!(mode_of(&path), 0o644);
    assert_eq!(entries(dir.path()), ["unit.service"]);

    let before = fs::metadata(&path).unwrap().ino();
    atomic_write(&path, b"", 0o600).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"");
    assert_eq!(mode_of(&path), 0o600);
    // Replaced by rename, never rewritten in place.
    assert_ne!(fs::metadata(&path).unwrap().ino(), before);
    assert_eq!(entries(dir.path()), ["unit.service"]);
}

#[test]
fn replaces_a_symlink_instead_of_following_it() {
    let dir = TempDir::new("agents-fs-test");
    let target = dir.join("target");
    write_file(&target, b"keep", 0o600);
    let link = dir.join("link");
    symlink(&target, &link).unwrap();
    atomic_write(&link, b"new", 0o600).unwrap();
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_file());
    assert_eq!(fs::read(&link).unwrap(), b"new");
    assert_eq!(fs::read(&target).unwrap(), b"keep");

    let dangling = dir.join("dangling");
    symlink(dir.join("nowhere"), &dangling).unwrap();
    atomic_write(&dangling, b"x", 0o600).unwrap();
    assert!(fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_file());
    assert!(!dir.join("nowhere").exists());
}

#[test]
fn creates_missing_parents_as_0700() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("a/b/file");
    atomic_write(&path, b"x", 0o600).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"x");
    assert_eq!(mode_of(&dir.join("a")), 0o700);
    assert_eq!(mode_of(&dir.join("a/b")), 0o700);
}

#[test]
fn leaves_no_temporary_when_the_rename_fails() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("target");
    make_dir(&path, 0o700);
    write_file(&path.join("inside"), b"", 0o600);
    let error = atomic_write(&path, b"data", 0o600).unwrap_err();
    // Python: `[Errno 21] Is a directory: '<dir>/.target.<24 hex>.tmp' -> '<dir>/target'`.
    assert_eq!(error.class(), ErrorClass::IsADirectory);
    assert_eq!(error.errno(), Some(21));
    let prefix = format!(
        "[Errno 21] Is a directory: '{}/.target.",
        dir.path().display()
    );
    let suffix = format!(".tmp' -> '{}'", path.display());
    let message = error.message();
    assert!(
        message.starts_with(&prefix) && message.ends_with(&suffix),
        "{message}"
    );
    let random = &message[prefix.len()..message.len() - suffix.len()];
    assert_eq!(random.len(), 24, "{message}");
    assert!(
        random
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{message}"
    );
    assert_eq!(entries(dir.path()), ["target"]);
    assert_eq!(entries(&path), ["inside"]);
}

#[test]
fn refuses_unsafe_parents_without_writing() {
    let dir = TempDir::new("agents-fs-test");

    let foreign = dir.join("foreign");
    make_dir(&foreign, 0o700);
    chown_other(&foreign);
    assert_error_is(
        &atomic_write(&foreign.join("f"), b"x", 0o600).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            foreign.display()
        ),
    );
    assert!(entries(&foreign).is_empty());

    let shared = dir.join("shared");
    make_dir(&shared, 0o775);
    assert_error_is(
        &atomic_write(&shared.join("f"), b"x", 0o600).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            shared.display()
        ),
    );
    assert!(entries(&shared).is_empty());

    make_dir(&dir.join("real"), 0o700);
    symlink(dir.join("real"), dir.join("link")).unwrap();
    let through = dir.join("link");
    assert_error_is(
        &atomic_write(&through.join("f"), b"x", 0o600).unwrap_err(),
        ErrorClass::Value,
        &format!("execution path contains a symlink: {}", through.display()),
    );
    assert!(entries(&dir.join("real")).is_empty());

    let relative = atomic_write(Path::new("relative/f"), b"x", 0o600).unwrap_err();
    assert_error_is(
        &relative,
        ErrorClass::Value,
        "execution paths must be absolute without traversal",
    );
}

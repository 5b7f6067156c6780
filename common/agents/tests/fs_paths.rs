//! `check_text`, `normalize_path` (`_path`), `owned_directory` and
//! `ensure_directory` against real directories, symlinks and owners.
//!
//! Expected strings are what Python 3.11 prints for the same layouts.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use agents_common::{check_text, ensure_directory, normalize_path, owned_directory};
use agents_tests::{
    assert_error_is, assert_os_error, chown_other, make_dir, mode_of, write_file, TempDir,
};
use python_compat::ErrorClass;

const TEXT: &str = "configuration text must be nonempty and contain no control characters";
const TRAVERSAL: &str = "execution paths must be absolute without traversal";

fn path(text: &str) -> PathBuf {
    PathBuf::from(text)
}

fn symlink_message(path: &str) -> String {
    format!("execution path contains a symlink: {path}")
}

#[test]
fn check_text_refuses_empty_and_control_characters_only() {
    for bad in ["", "a\tb", "line\n", "\u{1f}", "nul\0"] {
        assert_error_is(&check_text(bad).unwrap_err(), ErrorClass::Value, TEXT);
    }
    for good in ["a", " ", "del\u{7f}", "é", "😀", "%$\"'\\"] {
        check_text(good).unwrap();
    }
}

#[test]
fn normalize_path_applies_python_path_normalisation() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    make_dir(&dir.join("real"), 0o700);
    let expected = dir.join("real");
    for form in [
        format!("{d}/real"),
        format!("{d}//real"),
        format!("{d}/./real"),
        format!("{d}/real/"),
        format!("//{d}/real"),
    ] {
        assert_eq!(normalize_path(&path(&form)).unwrap(), expected, "{form}");
    }
    // Non-existent tails and names below a regular file are fine.
    assert_eq!(
        normalize_path(&path(&format!("{d}/real/missing//deeper/"))).unwrap(),
        dir.join("real/missing/deeper")
    );
    write_file(&dir.join("file"), b"x", 0o600);
    assert_eq!(
        normalize_path(&dir.join("file/x")).unwrap(),
        dir.join("file/x")
    );
    assert_eq!(normalize_path(&dir.join("...")).unwrap(), dir.join("..."));
    assert_eq!(normalize_path(Path::new("/")).unwrap(), Path::new("/"));
    assert_eq!(normalize_path(Path::new("///")).unwrap(), Path::new("/"));
    // DEL and non-ASCII are not control characters.
    let odd = format!("{d}/del\u{7f}é");
    assert_eq!(normalize_path(&path(&odd)).unwrap(), path(&odd));
}

#[test]
fn normalize_path_refuses_relative_paths_and_traversal() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    make_dir(&dir.join("real"), 0o700);
    for bad in [
        String::new(),
        "relative/path".to_string(),
        "./x".to_string(),
        format!("{d}/real/../real"),
        format!("{d}/.."),
        "/..".to_string(),
    ] {
        let error = normalize_path(&path(&bad)).unwrap_err();
        assert_error_is(&error, ErrorClass::Value, TRAVERSAL);
    }
}

#[test]
fn normalize_path_refuses_a_leading_double_slash() {
    // POSIX leaves `//` implementation-defined; Python keeps it, so resolve()
    // (which yields one slash) differs and the path counts as a symlink.
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    let form = format!("/{d}");
    assert_error_is(
        &normalize_path(&path(&form)).unwrap_err(),
        ErrorClass::Value,
        &symlink_message(&form),
    );
    assert_error_is(
        &normalize_path(Path::new("//")).unwrap_err(),
        ErrorClass::Value,
        &symlink_message("//"),
    );
}

#[test]
fn normalize_path_refuses_symlinks_anywhere_in_the_existing_prefix() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    make_dir(&dir.join("real"), 0o700);
    symlink(dir.join("real"), dir.join("link")).unwrap();
    symlink("real", dir.join("relative")).unwrap();
    symlink(dir.join("missing"), dir.join("dangling")).unwrap();
    for (given, shown) in [
        (format!("{d}/link"), format!("{d}/link")),
        (format!("{d}/link/x"), format!("{d}/link/x")),
        (format!("{d}//link/./x/"), format!("{d}/link/x")),
        (format!("{d}/relative"), format!("{d}/relative")),
        (format!("{d}/dangling"), format!("{d}/dangling")),
        (format!("{d}/dangling/x"), format!("{d}/dangling/x")),
    ] {
        let error = normalize_path(&path(&given)).unwrap_err();
        assert_error_is(&error, ErrorClass::Value, &symlink_message(&shown));
    }
}

#[test]
fn normalize_path_reports_symlink_loops_as_runtime_errors() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    symlink("self", dir.join("self")).unwrap();
    symlink("b", dir.join("a")).unwrap();
    symlink("a", dir.join("b")).unwrap();
    symlink("deeper/x", dir.join("deeper")).unwrap();
    symlink("it's", dir.join("it's")).unwrap();
    // The message names realpath's result, which is not always the input.
    for (given, shown) in [
        (format!("{d}/self"), format!("'{d}/self'")),
        (format!("{d}/self/x"), format!("'{d}/self/x'")),
        (format!("{d}/a"), format!("'{d}/a'")),
        (format!("{d}/a/z"), format!("'{d}/a/z'")),
        (format!("{d}/deeper"), format!("'{d}/deeper/x'")),
        (format!("{d}/it's"), format!("\"{d}/it's\"")),
    ] {
        let error = normalize_path(&path(&given)).unwrap_err();
        assert_error_is(
            &error,
            ErrorClass::Runtime,
            &format!("Symlink loop from {shown}"),
        );
    }
}

#[test]
fn normalize_path_refuses_nul_control_characters_and_non_utf8() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    assert_error_is(
        &normalize_path(&path(&format!("{d}/a\0b"))).unwrap_err(),
        ErrorClass::Value,
        "embedded null byte",
    );
    for bad in [
        format!("{d}/tab\there"),
        format!("{d}/new\nline"),
        format!("{d}/\u{1b}"),
    ] {
        assert_error_is(
            &normalize_path(&path(&bad)).unwrap_err(),
            ErrorClass::Value,
            TEXT,
        );
    }
    // Deliberate deviation: Python would accept surrogate-escaped bytes.
    let mut raw = dir.path().as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/\xff");
    let error = normalize_path(Path::new(OsStr::from_bytes(&raw))).unwrap_err();
    assert_error_is(&error, ErrorClass::Value, TEXT);
}

#[test]
fn owned_directory_accepts_owned_directories_without_group_or_other_write() {
    let dir = TempDir::new("agents-fs-test");
    for (mode, private_ok) in [
        (0o700, true),
        (0o755, false),
        (0o750, false),
        (0o711, false),
    ] {
        let target = dir.join(format!("d{mode:o}"));
        make_dir(&target, mode);
        owned_directory(&target, false).unwrap();
        assert_eq!(
            owned_directory(&target, true).is_ok(),
            private_ok,
            "{mode:o}"
        );
    }
}

#[test]
fn owned_directory_refuses_wrong_kinds_owners_and_modes() {
    let dir = TempDir::new("agents-fs-test");
    let not_owned = |p: &Path| {
        format!(
            "execution directory is not an owned directory: {}",
            p.display()
        )
    };
    let unsafe_mode = |p: &Path| {
        format!(
            "execution directory permissions are unsafe: {}",
            p.display()
        )
    };

    let file = dir.join("file");
    write_file(&file, b"", 0o700);
    assert_error_is(
        &owned_directory(&file, false).unwrap_err(),
        ErrorClass::Permission,
        &not_owned(&file),
    );

    make_dir(&dir.join("real"), 0o700);
    let link = dir.join("link");
    symlink(dir.join("real"), &link).unwrap();
    assert_error_is(
        &owned_directory(&link, false).unwrap_err(),
        ErrorClass::Permission,
        &not_owned(&link),
    );

    let foreign = dir.join("foreign");
    make_dir(&foreign, 0o700);
    chown_other(&foreign);
    assert_error_is(
        &owned_directory(&foreign, false).unwrap_err(),
        ErrorClass::Permission,
        &not_owned(&foreign),
    );

    for mode in [0o720, 0o702, 0o777, 0o1777] {
        let target = dir.join(format!("m{mode:o}"));
        make_dir(&target, mode);
        for private in [false, true] {
            let error = owned_directory(&target, private).unwrap_err();
            assert_error_is(&error, ErrorClass::Permission, &unsafe_mode(&target));
        }
    }
    // Private means exactly 0700: set-id and sticky bits count.
    for mode in [0o750, 0o701, 0o500, 0o1700, 0o2700] {
        let target = dir.join(format!("p{mode:o}"));
        make_dir(&target, mode);
        let error = owned_directory(&target, true).unwrap_err();
        assert_error_is(&error, ErrorClass::Permission, &unsafe_mode(&target));
    }

    let missing = dir.join("missing");
    let error = owned_directory(&missing, false).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::NotFound,
        "[Errno 2] No such file or directory",
        &missing,
    );
    assert_eq!(error.errno(), Some(2));
}

#[test]
fn ensure_directory_creates_missing_parents_private_and_returns_the_normal_form() {
    let dir = TempDir::new("agents-fs-test");
    let d = dir.path().to_str().unwrap();
    let created = ensure_directory(&path(&format!("{d}/a//b/./c/")), true).unwrap();
    assert_eq!(created, dir.join("a/b/c"));
    for made in ["a", "a/b", "a/b/c"] {
        let info = fs::symlink_metadata(dir.join(made)).unwrap();
        assert!(info.is_dir());
        assert_eq!(info.mode() & 0o7777, 0o700, "{made}");
    }
    // Existing directories are only checked, never changed.
    make_dir(&dir.join("open"), 0o755);
    assert_eq!(
        ensure_directory(&dir.join("open"), false).unwrap(),
        dir.join("open")
    );
    assert_eq!(mode_of(&dir.join("open")), 0o755);
}

#[test]
fn ensure_directory_refuses_unsafe_existing_entries_without_creating_anything() {
    let dir = TempDir::new("agents-fs-test");
    let open = dir.join("open");
    make_dir(&open, 0o755);
    assert_error_is(
        &ensure_directory(&open, true).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            open.display()
        ),
    );

    // A missing child of a foreign directory: the parent check fails first.
    let foreign = dir.join("foreign");
    make_dir(&foreign, 0o700);
    chown_other(&foreign);
    assert_error_is(
        &ensure_directory(&foreign.join("child"), false).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            foreign.display()
        ),
    );
    assert!(!foreign.join("child").exists());

    let file = dir.join("file");
    write_file(&file, b"", 0o600);
    assert_error_is(
        &ensure_directory(&file.join("child"), false).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            file.display()
        ),
    );

    let group_writable = dir.join("shared");
    make_dir(&group_writable, 0o770);
    assert_error_is(
        &ensure_directory(&group_writable.join("x/y"), false).unwrap_err(),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            group_writable.display()
        ),
    );
    assert!(!group_writable.join("x").exists());

    make_dir(&dir.join("real"), 0o700);
    symlink(dir.join("real"), dir.join("link")).unwrap();
    let through = dir.join("link/new");
    assert_error_is(
        &ensure_directory(&through, false).unwrap_err(),
        ErrorClass::Value,
        &symlink_message(through.to_str().unwrap()),
    );
    assert!(!dir.join("real/new").exists());
}

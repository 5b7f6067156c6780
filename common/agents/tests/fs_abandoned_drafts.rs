//! `remove_abandoned_drafts`, which both the install lock and the execution
//! journal use to take back what a writer killed before publishing left: it
//! removes exactly the drafts that hold nothing but their file and its
//! unfinished temporaries, and leaves every other draft-named entry as it is.

use std::os::unix::fs::symlink;
use std::path::Path;

use agents_common::remove_abandoned_drafts;
use agents_tests::{chown_other, entries, make_dir, write_file, TempDir};

const FILE: &str = "manifest.json";
const TEMPORARY: &str = ".manifest.json.0123456789abcdef01234567.tmp";

fn is_draft(name: &[u8]) -> bool {
    name.starts_with(b".draft-")
}

/// A private draft directory `name` holding `files` (private, this uid's).
fn draft(root: &Path, name: &str, files: &[&str]) {
    let directory = root.join(name);
    make_dir(&directory, 0o700);
    for file in files {
        write_file(&directory.join(file), b"{}", 0o600);
    }
}

#[test]
fn a_draft_of_its_file_and_temporaries_is_removed() {
    let dir = TempDir::new("agents-drafts");
    let root = dir.path();
    draft(root, ".draft-file", &[FILE]);
    draft(root, ".draft-both", &[FILE, TEMPORARY]);
    draft(root, ".draft-temporary", &[TEMPORARY]);
    draft(root, ".draft-empty", &[]);
    remove_abandoned_drafts(root, FILE.as_bytes(), is_draft).unwrap();
    assert_eq!(entries(root), Vec::<String>::new());
}

#[test]
fn any_other_draft_named_entry_is_left_alone() {
    let dir = TempDir::new("agents-drafts");
    let root = dir.path();
    // Not named as a draft.
    draft(root, "kept-name", &[FILE]);
    // Something that is not the draft's file or its temporary.
    draft(root, ".draft-foreign", &[FILE, "notes.txt"]);
    draft(root, ".draft-other-temporary", &[".manifest.json.0123.tmp"]);
    // A file that is not private, or has a second link.
    draft(root, ".draft-readable", &[FILE]);
    write_file(&root.join(".draft-readable").join(FILE), b"{}", 0o644);
    draft(root, ".draft-linked", &[FILE]);
    std::fs::hard_link(
        root.join(".draft-linked").join(FILE),
        root.join(".draft-linked").join(TEMPORARY),
    )
    .unwrap();
    // A directory that is not private, or not this uid's.
    draft(root, ".draft-open", &[FILE]);
    std::fs::set_permissions(
        root.join(".draft-open"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    draft(root, ".draft-foreign-owner", &[FILE]);
    chown_other(&root.join(".draft-foreign-owner"));
    // A link to a draft-shaped directory, and a plain file.
    draft(root, "target", &[FILE]);
    symlink(root.join("target"), root.join(".draft-link")).unwrap();
    write_file(&root.join(".draft-plain"), b"{}", 0o600);
    let before = entries(root);
    remove_abandoned_drafts(root, FILE.as_bytes(), is_draft).unwrap();
    assert_eq!(entries(root), before);
    assert_eq!(entries(&root.join("target")), [FILE]);
    assert_eq!(entries(&root.join(".draft-foreign")), [FILE, "notes.txt"]);
}

#[test]
fn a_missing_root_is_an_error() {
    let dir = TempDir::new("agents-drafts");
    let missing = dir.path().join("missing");
    assert!(remove_abandoned_drafts(&missing, FILE.as_bytes(), is_draft).is_err());
}

//! A write of the status row removes the temporaries that a writer killed
//! before renaming left beside it (`mkstemp`'s `.server-update.json.<8>.tmp`),
//! and nothing else: other names, files that are not private, and files
//! with a second link stay.

use std::path::Path;

use agents_common::{update_status_unlocked, StatusLock};
use agents_tests::{entries, write_file, TempDir};
use python_compat::{json::JsonObject, json_object};

fn row() -> JsonObject {
    json_object! {"phase" => "checking", "update_id" => "0123456789abcdef0123456789abcdef"}
}

fn write_row(status: &Path) {
    let _lock = StatusLock::acquire(status).unwrap();
    update_status_unlocked(status, &row(), json_object! {"message" => "next"}).unwrap();
}

#[test]
fn a_killed_writers_temporaries_are_removed_by_the_next_write() {
    let dir = TempDir::new("agents-status-leftovers");
    let status = dir.path().join("server-update.json");
    // This port's (eight hex) and Python mkstemp's (its alphabet) names.
    write_file(
        &dir.path().join(".server-update.json.0a1b2c3d.tmp"),
        b"{",
        0o600,
    );
    write_file(
        &dir.path().join(".server-update.json.k_9zq0x1.tmp"),
        b"{",
        0o600,
    );
    write_row(&status);
    assert_eq!(
        entries(dir.path()),
        [".server-update.json.lock", "server-update.json"]
    );
}

#[test]
fn anything_else_beside_the_row_is_left_alone() {
    let dir = TempDir::new("agents-status-leftovers");
    let status = dir.path().join("server-update.json");
    let kept = [
        // Not a mkstemp name of the row: other lengths, alphabet, target.
        ".server-update.json.0a1b2c3.tmp",
        ".server-update.json.0A1B2C3D.tmp",
        ".server-update.json.0a1b2c3d.tmp.old",
        ".other.json.0a1b2c3d.tmp",
        // A mkstemp name whose file is readable by others.
        ".server-update.json.readable.tmp",
    ];
    for name in kept {
        let mode = if name.contains("readable") {
            0o644
        } else {
            0o600
        };
        write_file(&dir.path().join(name), b"{", mode);
    }
    // A mkstemp name with a second link.
    write_file(&dir.path().join("elsewhere"), b"{", 0o600);
    std::fs::hard_link(
        dir.path().join("elsewhere"),
        dir.path().join(".server-update.json.linked01.tmp"),
    )
    .unwrap();
    let before = entries(dir.path());
    write_row(&status);
    let mut expected = before;
    expected.extend([
        ".server-update.json.lock".to_string(),
        "server-update.json".to_string(),
    ]);
    expected.sort();
    assert_eq!(entries(dir.path()), expected);
}

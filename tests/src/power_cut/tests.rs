//! The persistence model on hand-written call sequences, and its
//! materialisation on a real directory.

use super::*;
use crate::tempdir::TempDir;

fn p(text: &str) -> PathBuf {
    PathBuf::from(text)
}

fn file(bytes: &[u8]) -> Before {
    Before::File {
        mode: 0o600,
        bytes: bytes.to_vec(),
    }
}

fn dir() -> Before {
    Before::Dir { mode: 0o700 }
}

fn create(path: &str) -> Recorded {
    Recorded::Open {
        path: p(path),
        create: true,
        truncate: true,
    }
}

fn write(path: &str) -> Recorded {
    Recorded::Write {
        path: p(path),
        offset: 0,
        length: 3,
    }
}

/// The bytes a state gives `path` (`None`: absent; `Some(None)`: as issued).
fn bytes_at(model: &Model, state: CrashState, path: &str) -> Option<Option<Vec<u8>>> {
    match model.tree(state).get(&p(path))? {
        Node::File(_, bytes) => Some(bytes.clone()),
        other => panic!("{path} is not a file: {other:?}"),
    }
}

/// write, rename over the old file, and no fsync at all: the old bytes
/// when everything is lost, an empty file under the new name when the
/// rename reached the disk before the data.
#[test]
fn a_rename_before_the_data_fsync_loses_the_file_bytes() {
    let record = [
        Recorded::Before(p("/r/f"), file(b"old")),
        Recorded::Before(p("/r/f.tmp"), Before::Absent),
        create("/r/f.tmp"),
        write("/r/f.tmp"),
        Recorded::Rename(p("/r/f.tmp"), p("/r/f")),
    ];
    let model = Model::replay(&record);
    assert_eq!(bytes_at(&model, CrashState::Kill, "/r/f"), Some(None));
    assert_eq!(
        bytes_at(&model, CrashState::Lost, "/r/f"),
        Some(None),
        "the old file, untouched"
    );
    assert_eq!(bytes_at(&model, CrashState::Lost, "/r/f.tmp"), None);
    assert_eq!(
        bytes_at(&model, CrashState::NamesBeforeData, "/r/f"),
        Some(Some(Vec::new())),
        "the new name, empty"
    );
    assert!(!model.changes(CrashState::NamesBeforeData).is_empty());
}

/// The durable pattern (fsync the file, rename, fsync the directory)
/// leaves nothing for a power cut to take: every state is the SIGKILL one.
#[test]
fn fsync_rename_fsync_directory_is_durable_in_every_state() {
    let record = [
        Recorded::Before(p("/r/f"), file(b"old")),
        Recorded::Before(p("/r/f.tmp"), Before::Absent),
        create("/r/f.tmp"),
        write("/r/f.tmp"),
        Recorded::Fsync(p("/r/f.tmp"), Some(b"new".to_vec())),
        Recorded::Close(p("/r/f.tmp")),
        Recorded::Rename(p("/r/f.tmp"), p("/r/f")),
        Recorded::Fsync(p("/r"), None),
    ];
    let model = Model::replay(&record);
    for state in CrashState::ALL {
        assert!(model.changes(state).is_empty(), "{state:?}");
    }
}

/// Without the directory fsync after it the rename may be lost: the old
/// file under its name, the new bytes still in the temporary (whose
/// creation an earlier directory fsync made durable).
#[test]
fn a_rename_without_the_directory_fsync_is_undone() {
    let record = [
        Recorded::Before(p("/r/f"), file(b"old")),
        Recorded::Before(p("/r/f.tmp"), Before::Absent),
        create("/r/f.tmp"),
        Recorded::Fsync(p("/r"), None),
        write("/r/f.tmp"),
        Recorded::Fsync(p("/r/f.tmp"), Some(b"new".to_vec())),
        Recorded::Rename(p("/r/f.tmp"), p("/r/f")),
    ];
    let model = Model::replay(&record);
    let lost = model.changes(CrashState::Lost);
    assert_eq!(lost.remove, [p("/r/f")]);
    let created: Vec<&PathBuf> = lost.create.iter().map(|(path, _)| path).collect();
    assert_eq!(created, [&p("/r/f"), &p("/r/f.tmp")]);
    assert!(model.changes(CrashState::NamesBeforeData).is_empty());
}

/// A file moved between directories when only the source directory was
/// synced: gone from the source, not yet in the target, lost.
#[test]
fn a_move_with_only_the_source_directory_synced_loses_the_file() {
    let record = [
        Recorded::Before(p("/r/a"), dir()),
        Recorded::Before(p("/r/a/f"), file(b"data")),
        Recorded::Before(p("/r/b"), dir()),
        Recorded::Before(p("/r/b/f"), Before::Absent),
        Recorded::Rename(p("/r/a/f"), p("/r/b/f")),
        Recorded::Fsync(p("/r/a"), None),
    ];
    let model = Model::replay(&record);
    let lost = model.tree(CrashState::Lost);
    assert!(!lost.contains_key(&p("/r/a/f")), "gone from the source");
    assert!(!lost.contains_key(&p("/r/b/f")), "not in the target");
    assert!(model.tree(CrashState::Kill).contains_key(&p("/r/b/f")));
}

/// A directory made without syncing its parent takes everything in it,
/// synced or not, when it is lost.
#[test]
fn a_new_directory_whose_parent_was_not_synced_loses_its_files() {
    let record = [
        Recorded::Before(p("/r/d"), Before::Absent),
        Recorded::Mkdir(p("/r/d")),
        create("/r/d/x"),
        write("/r/d/x"),
        Recorded::Fsync(p("/r/d/x"), Some(b"abc".to_vec())),
        Recorded::Fsync(p("/r/d"), None),
    ];
    let model = Model::replay(&record);
    let lost = model.tree(CrashState::Lost);
    assert!(!lost.contains_key(&p("/r/d")));
    assert!(!lost.contains_key(&p("/r/d/x")));
    let mut synced = record.to_vec();
    synced.push(Recorded::Fsync(p("/r"), None));
    let model = Model::replay(&synced);
    assert_eq!(
        bytes_at(&model, CrashState::Lost, "/r/d/x"),
        Some(None),
        "kept once the parent was synced"
    );
}

/// An unlink, or a write in place, not yet durable: the file comes back
/// as it was before the operation.
#[test]
fn an_unsynced_unlink_or_overwrite_comes_back_as_before() {
    let record = [
        Recorded::Before(p("/r/gone"), file(b"kept")),
        Recorded::Unlink(p("/r/gone")),
        Recorded::Before(p("/r/row"), file(b"{\"phase\": \"one\"}")),
        Recorded::Open {
            path: p("/r/row"),
            create: false,
            truncate: true,
        },
        write("/r/row"),
    ];
    let model = Model::replay(&record);
    assert_eq!(bytes_at(&model, CrashState::Kill, "/r/gone"), None);
    assert!(matches!(
        bytes_at(&model, CrashState::Lost, "/r/gone"),
        Some(None)
    ));
    assert_eq!(
        bytes_at(&model, CrashState::Lost, "/r/row"),
        Some(Some(b"{\"phase\": \"one\"}".to_vec()))
    );
}

#[test]
fn record_lines_parse_and_bad_ones_are_refused() {
    let text = "pre\t/r/f\tfile\t600\t6f6c64\n\
                pre\t/r/t\tabsent\n\
                open\t/r/t\t80241\t3\n\
                write\t/r/t\t0\t5\n\
                fsync\t/r/t\t68656c6c6f\n\
                rename\t/r/t\t/r/f\n\
                fsync\t/r\tdir\n";
    let record = parse_record(text).expect("parses");
    assert_eq!(record[0], Recorded::Before(p("/r/f"), file(b"old")));
    assert_eq!(
        record[2],
        Recorded::Open {
            path: p("/r/t"),
            create: true,
            truncate: true
        }
    );
    assert_eq!(
        record[4],
        Recorded::Fsync(p("/r/t"), Some(b"hello".to_vec()))
    );
    assert!(parse_record("rename\t/only-one\n").is_err());
    assert!(parse_record("fsync\t/r\t6\n").is_err(), "odd hex");
}

/// The crash state written over a real directory a SIGKILL left.
#[test]
fn materialise_rewrites_the_killed_tree_into_the_crash_state() {
    let scratch = TempDir::new("power-cut-model");
    let root = scratch.path().to_path_buf();
    let at = |name: &str| root.join(name);
    let text = |path: &Path| path.to_string_lossy().into_owned();
    // Before: f = "old". The operation: a new temporary written and renamed
    // over f, a directory made, f.tmp never synced; no fsync at all.
    let record = vec![
        Recorded::Before(at("f"), file(b"old")),
        Recorded::Before(at("f.tmp"), Before::Absent),
        create(&text(&at("f.tmp"))),
        write(&text(&at("f.tmp"))),
        Recorded::Rename(at("f.tmp"), at("f")),
        Recorded::Before(at("d"), Before::Absent),
        Recorded::Mkdir(at("d")),
    ];
    let kill_disk = || {
        let _ = fs::remove_dir_all(at("d"));
        fs::write(at("f"), b"new").unwrap();
        fs::create_dir(at("d")).unwrap();
    };
    let model = Model::replay(&record);
    kill_disk();
    let changes = materialise(&model, CrashState::Lost).expect("materialise");
    assert!(!changes.is_empty());
    assert_eq!(fs::read(at("f")).unwrap(), b"old");
    assert!(!at("d").exists() && !at("f.tmp").exists());
    kill_disk();
    materialise(&model, CrashState::NamesBeforeData).expect("materialise");
    assert_eq!(fs::read(at("f")).unwrap(), b"", "the renamed file, empty");
    assert!(at("d").is_dir());
    kill_disk();
    assert!(materialise(&model, CrashState::Kill).unwrap().is_empty());
    assert_eq!(fs::read(at("f")).unwrap(), b"new");
}

/// A status row renamed into place before its bytes were synced is empty
/// once the name reaches the disk first: the crash-state check refuses it,
/// while a lock file the operation only created (empty by design) passes
/// the check after recovery.
#[test]
fn an_unsynced_row_is_refused_and_a_created_lock_is_not() {
    let scratch = TempDir::new("power-cut-checks");
    let at = |name: &str| scratch.path().join(name);
    let text = |name: &str| at(name).to_string_lossy().into_owned();
    let row = b"{\"update_id\": \"a\", \"phase\": \"installing\"}";
    let record = vec![
        Recorded::Before(at("server-update.json"), file(b"{}")),
        Recorded::Before(at("row.tmp"), Before::Absent),
        create(&text("row.tmp")),
        write(&text("row.tmp")),
        Recorded::Rename(at("row.tmp"), at("server-update.json")),
        Recorded::Before(at("row.lock"), Before::Absent),
        create(&text("row.lock")),
    ];
    fs::write(at("server-update.json"), row).unwrap();
    fs::write(at("row.lock"), b"").unwrap();
    let model = Model::replay(&record);
    check_owned_files(&model);
    materialise(&model, CrashState::NamesBeforeData).unwrap();
    assert_eq!(fs::read(at("server-update.json")).unwrap(), b"");
    let refused =
        std::panic::catch_unwind(|| check_crash_state(&model, CrashState::NamesBeforeData));
    assert!(refused.is_err(), "an empty row is unreadable JSON");
    let emptied = std::panic::catch_unwind(|| check_owned_files(&model));
    assert!(emptied.is_err(), "a written file left empty is refused");
}

/// A directory that existed before, removed without syncing its parent,
/// comes back in the lost state; on disk it could only come back as a new
/// inode, so the state says it cannot be built faithfully.
#[test]
fn a_removed_directory_that_comes_back_is_marked_unbuildable() {
    let record = [
        Recorded::Before(p("/r/d"), dir()),
        Recorded::Before(p("/r/d/f"), file(b"x")),
        Recorded::Unlink(p("/r/d/f")),
        Recorded::Rmdir(p("/r/d")),
    ];
    let model = Model::replay(&record);
    assert_eq!(model.changes(CrashState::Lost).resurrected, [p("/r/d")]);
    // Known first only as the way to its file (`rm -r` names the file
    // before the directory), it existed before all the same.
    let implied = [
        Recorded::Before(p("/r/e/f"), file(b"x")),
        Recorded::Unlink(p("/r/e/f")),
        Recorded::Before(p("/r/e"), dir()),
        Recorded::Rmdir(p("/r/e")),
    ];
    let model = Model::replay(&implied);
    assert_eq!(model.changes(CrashState::Lost).resurrected, [p("/r/e")]);
    let mut synced = record.to_vec();
    synced.push(Recorded::Fsync(p("/r"), None));
    assert!(Model::replay(&synced).changes(CrashState::Lost).is_empty());
}

/// A staged file linked to a second name, the directory synced, then the
/// first name unlinked with no sync after: in the lost state the first name
/// comes back, and on disk it must be the same inode (a hard link), since
/// helpers prove a staged file by its identity.
#[test]
fn a_lost_unlink_of_one_of_two_links_comes_back_as_the_same_inode() {
    use std::os::unix::fs::MetadataExt;
    let scratch = TempDir::new("power-cut-links");
    let root = scratch.path().to_path_buf();
    let at = |name: &str| root.join(name);
    let text = |name: &str| at(name).to_string_lossy().into_owned();
    let record = vec![
        Recorded::Before(at("staged.source"), Before::Absent),
        Recorded::Before(at("staged.publication"), Before::Absent),
        create(&text("staged.source")),
        write(&text("staged.source")),
        Recorded::Fsync(at("staged.source"), Some(b"new".to_vec())),
        Recorded::Link(at("staged.source"), at("staged.publication")),
        Recorded::Fsync(root.clone(), None),
        Recorded::Unlink(at("staged.source")),
    ];
    fs::write(at("staged.publication"), b"new").unwrap();
    let model = Model::replay(&record);
    let changes = materialise(&model, CrashState::Lost).expect("materialise");
    assert_eq!(changes.summary(), format!("+{}", text("staged.source")));
    let source = fs::metadata(at("staged.source")).unwrap();
    let publication = fs::metadata(at("staged.publication")).unwrap();
    assert_eq!(source.ino(), publication.ino(), "one inode, two names");
    assert_eq!(publication.nlink(), 2);
    assert_eq!(fs::read(at("staged.source")).unwrap(), b"new");
}

/// A staged file renamed over its destination with no directory sync after:
/// in the lost state the staging name comes back and the destination goes,
/// and on disk the staging name must be the very inode (a rename undone),
/// not a copy.
#[test]
fn a_lost_rename_gives_the_old_name_back_to_the_same_inode() {
    use std::os::unix::fs::MetadataExt;
    let scratch = TempDir::new("power-cut-rename");
    let root = scratch.path().to_path_buf();
    let at = |name: &str| root.join(name);
    let text = |name: &str| at(name).to_string_lossy().into_owned();
    let record = vec![
        Recorded::Before(at("staged"), Before::Absent),
        Recorded::Before(at("published"), Before::Absent),
        create(&text("staged")),
        write(&text("staged")),
        Recorded::Fsync(at("staged"), Some(b"new".to_vec())),
        Recorded::Fsync(root.clone(), None),
        Recorded::Rename(at("staged"), at("published")),
    ];
    fs::write(at("published"), b"new").unwrap();
    let inode = fs::metadata(at("published")).unwrap().ino();
    let model = Model::replay(&record);
    materialise(&model, CrashState::Lost).expect("materialise");
    assert!(!at("published").exists());
    assert_eq!(
        fs::metadata(at("staged")).unwrap().ino(),
        inode,
        "the same inode"
    );
    assert_eq!(
        fs::metadata(at("staged")).unwrap().nlink(),
        1,
        "no holding name left"
    );
    assert_eq!(fs::read(at("staged")).unwrap(), b"new");
    let left: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["staged"]);
}

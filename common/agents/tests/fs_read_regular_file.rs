//! `read_regular_file`, the bounded reader of files a helper is handed: it
//! never waits on a FIFO or device, never reads past its cap, refuses a
//! symlinked leaf only when asked to, and reports missing files and
//! directories as Python's `read_bytes()` would.

use std::fs;
use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use agents_common::{read_regular_file, BoundedRead, Leaf};
use agents_tests::TempDir;
use python_compat::ErrorClass;

#[test]
fn a_regular_file_within_the_cap_is_read_whole_through_a_followed_link_too() {
    let dir = TempDir::new("bounded-read");
    let file = dir.path().join("key.pem");
    fs::write(&file, b"0123456789").unwrap();
    let link = dir.path().join("link.pem");
    symlink(&file, &link).unwrap();
    for leaf in [Leaf::Follow, Leaf::Refuse] {
        assert_eq!(
            read_regular_file(&file, 10, leaf).unwrap(),
            BoundedRead::Contents(b"0123456789".to_vec())
        );
    }
    assert_eq!(
        read_regular_file(&link, 10, Leaf::Follow).unwrap(),
        BoundedRead::Contents(b"0123456789".to_vec())
    );
    assert_eq!(
        read_regular_file(&link, 10, Leaf::Refuse).unwrap(),
        BoundedRead::NotRegular,
        "a link at the leaf is refused, not followed"
    );
    assert_eq!(
        read_regular_file(&file, 0, Leaf::Follow).unwrap(),
        BoundedRead::TooLarge
    );
    assert_eq!(
        read_regular_file(&file, 9, Leaf::Follow).unwrap(),
        BoundedRead::TooLarge,
        "one byte over the cap"
    );
    let empty = dir.path().join("empty");
    fs::write(&empty, b"").unwrap();
    assert_eq!(
        read_regular_file(&empty, 0, Leaf::Refuse).unwrap(),
        BoundedRead::Contents(Vec::new())
    );
}

#[test]
fn fifos_devices_and_huge_files_are_answered_at_once() {
    let dir = TempDir::new("bounded-read-hostile");
    let pipe = dir.path().join("fifo");
    agents_tests::make_fifo(&pipe);
    let huge = dir.path().join("huge");
    fs::File::create(&huge).unwrap().set_len(1 << 40).unwrap();
    let started = Instant::now();
    for leaf in [Leaf::Follow, Leaf::Refuse] {
        assert_eq!(
            read_regular_file(&pipe, 64, leaf).unwrap(),
            BoundedRead::NotRegular
        );
        assert_eq!(
            read_regular_file(std::path::Path::new("/dev/zero"), 64, leaf).unwrap(),
            BoundedRead::NotRegular
        );
        assert_eq!(
            read_regular_file(&huge, 64 * 1024, leaf).unwrap(),
            BoundedRead::TooLarge
        );
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn missing_files_directories_and_link_loops_are_python_os_errors() {
    let dir = TempDir::new("bounded-read-errors");
    let missing = dir.path().join("missing");
    let error = read_regular_file(&missing, 64, Leaf::Refuse).unwrap_err();
    assert_eq!(error.class(), ErrorClass::NotFound);
    assert_eq!(
        error.message(),
        format!(
            "[Errno 2] No such file or directory: '{}'",
            missing.display()
        )
    );
    let error = read_regular_file(dir.path(), 64, Leaf::Follow).unwrap_err();
    assert_eq!(error.errno(), Some(rustix::io::Errno::ISDIR.raw_os_error()));
    assert_eq!(
        error.message(),
        format!("[Errno 21] Is a directory: '{}'", dir.path().display())
    );
    // A loop above the leaf is an error, not "not a regular file".
    let looped = dir.path().join("loop");
    symlink(&looped, &looped).unwrap();
    let through = looped.join("file");
    let error = read_regular_file(&through, 64, Leaf::Refuse).unwrap_err();
    assert_eq!(error.errno(), Some(rustix::io::Errno::LOOP.raw_os_error()));
    // The looped link itself, at the leaf, is refused as a link.
    assert_eq!(
        read_regular_file(&looped, 64, Leaf::Refuse).unwrap(),
        BoundedRead::NotRegular
    );
}

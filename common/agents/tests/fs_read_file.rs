//! `read_file` (`_read_file`): every refusal with its Python class and message,
//! including the two races it guards against (file replaced while reading,
//! file grown past the limit after the size check), provoked for real.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agents_common::{read_file, MAX_CONFIG_BYTES};
use agents_tests::{assert_error_is, assert_os_error, chown_other, make_dir, write_file, TempDir};
use python_compat::ErrorClass;

const RACE_BUDGET: Duration = Duration::from_secs(20);

fn unsafe_message(path: &Path) -> String {
    format!("execution configuration is unsafe: {}", path.display())
}

#[track_caller]
fn assert_unsafe(path: &Path, private: bool) {
    let error = read_file(path, private).unwrap_err();
    assert_error_is(&error, ErrorClass::Permission, &unsafe_message(path));
}

#[test]
fn returns_the_bytes_and_the_permission_bits() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("config.json");
    write_file(&path, b"{\"a\": 1}\n", 0o644);
    assert_eq!(
        read_file(&path, false).unwrap(),
        (b"{\"a\": 1}\n".to_vec(), 0o644)
    );
    write_file(&path, b"", 0o600);
    assert_eq!(read_file(&path, true).unwrap(), (Vec::new(), 0o600));
    write_file(&path, b"x", 0o400);
    assert_eq!(read_file(&path, false).unwrap(), (b"x".to_vec(), 0o400));
    // The path is taken in Python's normal form, also in messages.
    let spelled = format!("{}//./config.json", dir.path().display());
    assert_eq!(read_file(Path::new(&spelled), false).unwrap().0, b"x");
}

#[test]
fn accepts_exactly_the_size_limit() {
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("limit");
    write_file(&path, &vec![b'a'; MAX_CONFIG_BYTES as usize], 0o600);
    assert_eq!(
        read_file(&path, true).unwrap().0.len() as u64,
        MAX_CONFIG_BYTES
    );
}

#[test]
fn refuses_a_symlink_at_the_leaf_with_the_raw_eloop_error() {
    let dir = TempDir::new("agents-fs-test");
    write_file(&dir.join("real"), b"x", 0o600);
    let link = dir.join("link");
    symlink(dir.join("real"), &link).unwrap();
    let error = read_file(&link, false).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &link,
    );
    assert_eq!(error.errno(), Some(40));
    let dangling = dir.join("dangling");
    symlink(dir.join("missing"), &dangling).unwrap();
    let error = read_file(&dangling, false).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &dangling,
    );
}

#[test]
fn missing_file_is_the_raw_file_not_found_error() {
    let dir = TempDir::new("agents-fs-test");
    let missing = dir.join("missing");
    let error = read_file(&missing, false).unwrap_err();
    assert!(error.is_not_found());
    assert_os_error(
        &error,
        ErrorClass::NotFound,
        "[Errno 2] No such file or directory",
        &missing,
    );
}

#[test]
fn refuses_files_that_are_not_owned_private_single_regular_files() {
    let dir = TempDir::new("agents-fs-test");

    let directory = dir.join("directory");
    make_dir(&directory, 0o700);
    assert_unsafe(&directory, false);

    let foreign = dir.join("foreign");
    write_file(&foreign, b"x", 0o600);
    chown_other(&foreign);
    assert_unsafe(&foreign, false);

    for mode in [0o620, 0o602, 0o666] {
        let path = dir.join(format!("m{mode:o}"));
        write_file(&path, b"x", mode);
        assert_unsafe(&path, false);
        assert_unsafe(&path, true);
    }
    // Private means exactly 0600.
    for mode in [0o640, 0o604, 0o400, 0o700, 0o4600] {
        let path = dir.join(format!("p{mode:o}"));
        write_file(&path, b"x", mode);
        read_file(&path, false).unwrap();
        assert_unsafe(&path, true);
    }

    let linked = dir.join("linked");
    write_file(&linked, b"x", 0o600);
    fs::hard_link(&linked, dir.join("second-name")).unwrap();
    assert_unsafe(&linked, false);

    let oversized = dir.join("oversized");
    write_file(
        &oversized,
        &vec![b'a'; MAX_CONFIG_BYTES as usize + 1],
        0o600,
    );
    assert_unsafe(&oversized, false);

    // A FIFO is refused by the regular-file check instead of blocking in open.
    let fifo = dir.join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_unsafe(&fifo, false);
}

#[test]
fn refuses_a_file_replaced_while_reading() {
    // A second thread atomically swaps two different inodes at the path
    // (renameat2 RENAME_EXCHANGE) until read_file opens one inode and then
    // finds the other at the path.
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("config");
    let other = dir.join("other");
    write_file(&path, &vec![b'a'; 64 * 1024], 0o600);
    write_file(&other, &vec![b'b'; 64 * 1024], 0o600);
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, path, other) = (stop.clone(), path.clone(), other.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &path,
                    rustix::fs::CWD,
                    &other,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
            }
        })
    };
    let started = Instant::now();
    let mut seen_change = false;
    while !seen_change && started.elapsed() < RACE_BUDGET {
        match read_file(&path, true) {
            // A consistent read returns one file's bytes, never a mixture.
            Ok((data, _)) => assert!(data.iter().all(|&b| b == data[0])),
            Err(error) => {
                assert_error_is(
                    &error,
                    ErrorClass::Runtime,
                    "execution configuration changed while reading",
                );
                seen_change = true;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        seen_change,
        "the swap was never observed within {RACE_BUDGET:?}"
    );
}

#[test]
fn refuses_a_file_that_grew_past_the_limit_after_the_size_check() {
    // A second thread flips the file's size between 1 byte and more than the
    // limit with ftruncate, until fstat sees the small size and the read then
    // returns more than MAX_CONFIG_BYTES.
    let dir = TempDir::new("agents-fs-test");
    let path = dir.join("config");
    write_file(&path, b"a", 0o600);
    let stop = Arc::new(AtomicBool::new(false));
    let resizer = {
        let (stop, path) = (stop.clone(), path.clone());
        thread::spawn(move || {
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                file.set_len(MAX_CONFIG_BYTES + 4096).unwrap();
                file.set_len(1).unwrap();
            }
        })
    };
    let started = Instant::now();
    let mut seen_growth = false;
    while !seen_growth && started.elapsed() < RACE_BUDGET {
        match read_file(&path, true) {
            Ok((data, _)) => assert!(data.len() as u64 <= MAX_CONFIG_BYTES),
            Err(error) if error.class() == ErrorClass::Permission => {
                assert_error_is(&error, ErrorClass::Permission, &unsafe_message(&path));
            }
            Err(error) => {
                assert_error_is(
                    &error,
                    ErrorClass::Value,
                    "execution configuration exceeds size limit",
                );
                seen_growth = true;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    resizer.join().unwrap();
    assert!(
        seen_growth,
        "the growth was never observed within {RACE_BUDGET:?}"
    );
}

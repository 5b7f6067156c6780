//! `read_secret` (`_read_secret`) and `ensure_execution_secret`: every refusal
//! with its class and message, the `.control.token.lock` flock protocol
//! observed through `/proc/locks`, and real processes racing to create the token.

use std::fs::{self, File};
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agents_common::test_support::{ensure_execution_secret, read_secret};
use agents_tests::{
    assert_error_is, assert_os_error, chown_other, entries, make_dir, mode_of, set_mode,
    write_file, TempDir,
};
use python_compat::ErrorClass;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const INVALID: &str = "Invalid execution secret file";
const UNSAFE_SECRET: &str = "Execution secret must be an owned 0600 regular file";
const UNSAFE_PARENT: &str = "Execution directory must be owned with mode 0700";
const TRAVERSES: &str = "Execution path traverses a non-directory or link";
const NOT_CANONICAL: &str = "Execution paths must be absolute and canonical";
const UNSAFE_LOCK: &str = "Execution initializer lock must be an owned 0600 regular file";
const LOCK_CHANGED: &str = "Execution initializer lock changed during acquisition";

/// A private runtime directory (0700) inside a fresh temp dir.
fn runtime() -> (TempDir, PathBuf) {
    let dir = TempDir::new("agents-fs-test");
    let runtime = dir.join("execution");
    make_dir(&runtime, 0o700);
    (dir, runtime)
}

fn is_token(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[test]
fn read_secret_returns_exactly_64_lowercase_hex() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    write_file(&path, TOKEN.as_bytes(), 0o600);
    assert_eq!(read_secret(&path).unwrap(), TOKEN);
}

#[test]
fn read_secret_refuses_malformed_contents() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    let upper = TOKEN.to_uppercase();
    for bad in [
        format!("{TOKEN}\n"),
        upper,
        TOKEN[..63].to_string(),
        format!("{TOKEN}0"),
        format!("{}g", &TOKEN[..63]),
        format!(" {}", &TOKEN[..63]),
        String::new(),
    ] {
        write_file(&path, bad.as_bytes(), 0o600);
        assert_error_is(
            &read_secret(&path).unwrap_err(),
            ErrorClass::Runtime,
            INVALID,
        );
    }
}

#[test]
fn read_secret_refuses_files_that_are_not_owned_0600_single_regular_files() {
    let (_dir, runtime) = runtime();
    for mode in [0o640, 0o644, 0o400, 0o700, 0o4600] {
        let path = runtime.join(format!("m{mode:o}"));
        write_file(&path, TOKEN.as_bytes(), mode);
        assert_error_is(
            &read_secret(&path).unwrap_err(),
            ErrorClass::Runtime,
            UNSAFE_SECRET,
        );
    }
    let foreign = runtime.join("foreign");
    write_file(&foreign, TOKEN.as_bytes(), 0o600);
    chown_other(&foreign);
    assert_error_is(
        &read_secret(&foreign).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_SECRET,
    );

    let linked = runtime.join("linked");
    write_file(&linked, TOKEN.as_bytes(), 0o600);
    fs::hard_link(&linked, runtime.join("second-name")).unwrap();
    assert_error_is(
        &read_secret(&linked).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_SECRET,
    );

    let directory = runtime.join("directory");
    make_dir(&directory, 0o600);
    assert_error_is(
        &read_secret(&directory).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_SECRET,
    );

    let target = runtime.join("target");
    write_file(&target, TOKEN.as_bytes(), 0o600);
    let link = runtime.join("link");
    symlink(&target, &link).unwrap();
    let error = read_secret(&link).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &link,
    );

    let missing = runtime.join("missing");
    let error = read_secret(&missing).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::NotFound,
        "[Errno 2] No such file or directory",
        &missing,
    );
}

#[test]
fn read_secret_refuses_unsafe_parents_and_ancestors() {
    let dir = TempDir::new("agents-fs-test");
    for mode in [0o750, 0o755, 0o701, 0o1700, 0o500] {
        let parent = dir.join(format!("m{mode:o}"));
        make_dir(&parent, 0o700);
        write_file(&parent.join("control.token"), TOKEN.as_bytes(), 0o600);
        set_mode(&parent, mode);
        let error = read_secret(&parent.join("control.token")).unwrap_err();
        assert_error_is(&error, ErrorClass::Runtime, UNSAFE_PARENT);
    }
    let foreign = dir.join("foreign");
    make_dir(&foreign, 0o700);
    write_file(&foreign.join("control.token"), TOKEN.as_bytes(), 0o600);
    chown_other(&foreign);
    let error = read_secret(&foreign.join("control.token")).unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, UNSAFE_PARENT);

    // A symlink anywhere in the chain, even to a perfectly private directory.
    let real = dir.join("real");
    make_dir(&real, 0o700);
    make_dir(&real.join("execution"), 0o700);
    write_file(
        &real.join("execution/control.token"),
        TOKEN.as_bytes(),
        0o600,
    );
    symlink(&real, dir.join("middle")).unwrap();
    symlink(real.join("execution"), dir.join("parent")).unwrap();
    for through in ["middle/execution/control.token", "parent/control.token"] {
        let error = read_secret(&dir.join(through)).unwrap_err();
        assert_error_is(&error, ErrorClass::Runtime, TRAVERSES);
    }
    write_file(&dir.join("file"), b"", 0o700);
    let error = read_secret(&dir.join("file/control.token")).unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, TRAVERSES);

    let missing = dir.join("missing");
    let error = read_secret(&missing.join("control.token")).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::NotFound,
        "[Errno 2] No such file or directory",
        &missing,
    );

    for bad in [
        PathBuf::from("relative/control.token"),
        real.join("execution/../execution/control.token"),
    ] {
        assert_error_is(
            &read_secret(&bad).unwrap_err(),
            ErrorClass::Runtime,
            NOT_CANONICAL,
        );
    }
}

#[test]
fn ensure_creates_one_private_token_and_keeps_the_lock_file() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    let token = ensure_execution_secret(&path).unwrap();
    assert!(is_token(&token), "{token:?}");
    assert_eq!(
        fs::read(&path).unwrap(),
        token.as_bytes(),
        "no newline, nothing else"
    );
    assert_eq!(mode_of(&path), 0o600);
    let lock = runtime.join(".control.token.lock");
    assert_eq!(mode_of(&lock), 0o600);
    assert_eq!(fs::read(&lock).unwrap(), b"");
    assert_eq!(entries(&runtime), [".control.token.lock", "control.token"]);
    assert_eq!(read_secret(&path).unwrap(), token);

    // Never rotated: the same file, untouched.
    let before = fs::metadata(&path).unwrap();
    assert_eq!(ensure_execution_secret(&path).unwrap(), token);
    let after = fs::metadata(&path).unwrap();
    assert_eq!(
        (before.ino(), before.mtime_nsec()),
        (after.ino(), after.mtime_nsec())
    );

    // Tokens are random, not derived from the path.
    let (_other_dir, other) = self::runtime();
    assert_ne!(
        ensure_execution_secret(&other.join("control.token")).unwrap(),
        token
    );
}

#[test]
fn ensure_fails_closed_on_an_existing_bad_token() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    write_file(&path, format!("{TOKEN}\n").as_bytes(), 0o600);
    assert_error_is(
        &ensure_execution_secret(&path).unwrap_err(),
        ErrorClass::Runtime,
        INVALID,
    );
    assert_eq!(fs::read(&path).unwrap(), format!("{TOKEN}\n").as_bytes());

    write_file(&path, TOKEN.as_bytes(), 0o644);
    assert_error_is(
        &ensure_execution_secret(&path).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_SECRET,
    );
    assert_eq!(mode_of(&path), 0o644);

    // A symlink planted at the token path is never followed or replaced.
    fs::remove_file(&path).unwrap();
    let elsewhere = runtime.join("elsewhere");
    symlink(&elsewhere, &path).unwrap();
    let error = ensure_execution_secret(&path).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &path,
    );
    assert!(!elsewhere.exists());
}

#[test]
fn ensure_refuses_unsafe_lock_files_without_creating_the_token() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    let lock = runtime.join(".control.token.lock");

    for mode in [0o644, 0o640, 0o400] {
        write_file(&lock, b"", mode);
        assert_error_is(
            &ensure_execution_secret(&path).unwrap_err(),
            ErrorClass::Runtime,
            UNSAFE_LOCK,
        );
        fs::remove_file(&lock).unwrap();
    }
    write_file(&lock, b"", 0o600);
    chown_other(&lock);
    assert_error_is(
        &ensure_execution_secret(&path).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_LOCK,
    );
    fs::remove_file(&lock).unwrap();

    write_file(&lock, b"", 0o600);
    fs::hard_link(&lock, runtime.join("lock-alias")).unwrap();
    assert_error_is(
        &ensure_execution_secret(&path).unwrap_err(),
        ErrorClass::Runtime,
        UNSAFE_LOCK,
    );
    fs::remove_file(&lock).unwrap();
    fs::remove_file(runtime.join("lock-alias")).unwrap();

    make_dir(&lock, 0o700);
    let error = ensure_execution_secret(&path).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::IsADirectory,
        "[Errno 21] Is a directory",
        &lock,
    );
    fs::remove_dir(&lock).unwrap();

    let target = runtime.join("lock-target");
    write_file(&target, b"", 0o600);
    symlink(&target, &lock).unwrap();
    let error = ensure_execution_secret(&path).unwrap_err();
    assert_os_error(
        &error,
        ErrorClass::Os,
        "[Errno 40] Too many levels of symbolic links",
        &lock,
    );

    assert!(!path.exists());
}

#[test]
fn ensure_refuses_unsafe_parents() {
    let dir = TempDir::new("agents-fs-test");
    let open = dir.join("open");
    make_dir(&open, 0o755);
    let error = ensure_execution_secret(&open.join("control.token")).unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, UNSAFE_PARENT);
    assert!(entries(&open).is_empty());

    let real = dir.join("real");
    make_dir(&real, 0o700);
    symlink(&real, dir.join("link")).unwrap();
    let error = ensure_execution_secret(&dir.join("link/control.token")).unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, TRAVERSES);
    assert!(entries(&real).is_empty());

    let error = ensure_execution_secret(Path::new("control.token")).unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, NOT_CANONICAL);
}

/// Waits until `/proc/locks` lists a blocked flock waiter on `path`'s inode.
fn wait_for_flock_waiter(path: &Path) {
    let suffix = format!(":{} ", fs::metadata(path).unwrap().ino());
    let started = Instant::now();
    loop {
        let locks = fs::read_to_string("/proc/locks").unwrap();
        if locks
            .lines()
            .any(|line| line.contains("-> FLOCK") && line.contains(&suffix))
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no waiter on {path:?}:\n{locks}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A creator of `runtime/control.token` blocked on the initializer lock,
/// which this test holds (flock on the returned file) until it drops it.
struct WaitingCreator {
    path: PathBuf,
    lock_path: PathBuf,
    held: File,
    creator: thread::JoinHandle<agents_common::Result<String>>,
}

fn creator_waiting_on_held_lock(runtime: &Path) -> WaitingCreator {
    let path = runtime.join("control.token");
    let lock_path = runtime.join(".control.token.lock");
    write_file(&lock_path, b"", 0o600);
    let held = File::open(&lock_path).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let creator = {
        let path = path.clone();
        thread::spawn(move || ensure_execution_secret(&path))
    };
    wait_for_flock_waiter(&lock_path);
    WaitingCreator {
        path,
        lock_path,
        held,
        creator,
    }
}

#[test]
fn ensure_waits_for_the_initializer_lock() {
    let (_dir, runtime) = runtime();
    let WaitingCreator {
        path,
        held,
        creator,
        ..
    } = creator_waiting_on_held_lock(&runtime);
    assert!(!path.exists(), "the token was created without the lock");
    drop(held);
    let token = creator.join().unwrap().unwrap();
    assert_eq!(fs::read(&path).unwrap(), token.as_bytes());
}

#[test]
fn ensure_refuses_a_lock_file_replaced_while_waiting() {
    let (_dir, runtime) = runtime();
    let WaitingCreator {
        path,
        lock_path,
        held,
        creator,
    } = creator_waiting_on_held_lock(&runtime);
    // Another inode takes the lock's name while the creator waits on the old one.
    let replacement = runtime.join("replacement");
    write_file(&replacement, b"", 0o600);
    fs::rename(&replacement, &lock_path).unwrap();
    drop(held);
    let error = creator.join().unwrap().unwrap_err();
    assert_error_is(&error, ErrorClass::Runtime, LOCK_CHANGED);
    assert!(!path.exists());
}

const RACE_DIR: &str = "AGENTS_FS_SECRET_RACE_DIR";
const RACE_START: &str = "AGENTS_FS_SECRET_RACE_START_NS";

/// Child side of the race below: a no-op unless started by it.
#[test]
fn secret_race_child() {
    let (Ok(runtime), Ok(start)) = (std::env::var(RACE_DIR), std::env::var(RACE_START)) else {
        return;
    };
    let start: u128 = start.parse().unwrap();
    // Spin until the common start instant so the processes really overlap.
    while SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        < start
    {
        std::hint::spin_loop();
    }
    match ensure_execution_secret(&Path::new(&runtime).join("control.token")) {
        Ok(token) => println!("RACE-TOKEN={token}"),
        Err(error) => println!("RACE-ERROR={}", error.python_line()),
    }
}

#[test]
fn racing_processes_all_get_the_same_token() {
    const PROCESSES: usize = 8;
    const ROUNDS: usize = 12;
    let exe = std::env::current_exe().unwrap();
    for round in 0..ROUNDS {
        let (_dir, runtime) = runtime();
        let start =
            SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_millis(150);
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .arg(agents_tests::test_name(module_path!(), "secret_race_child"))
                    .args(["--exact", "--nocapture", "--test-threads=1"])
                    .env(RACE_DIR, &runtime)
                    .env(RACE_START, start.as_nanos().to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut tokens = Vec::new();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success());
            let stdout = String::from_utf8(output.stdout).unwrap();
            // libtest prints the test name on the same line before our output.
            let line = stdout
                .lines()
                .find_map(|line| line.find("RACE-").map(|at| &line[at..]))
                .unwrap_or_else(|| panic!("child printed no result:\n{stdout}"));
            let token = line
                .strip_prefix("RACE-TOKEN=")
                .unwrap_or_else(|| panic!("round {round}: {line}"));
            tokens.push(token.to_string());
        }
        let stored = fs::read_to_string(runtime.join("control.token")).unwrap();
        assert!(is_token(&stored));
        assert!(
            tokens.iter().all(|token| *token == stored),
            "round {round}: {tokens:?} vs {stored}"
        );
        assert_eq!(entries(&runtime), [".control.token.lock", "control.token"]);
    }
}

/// A crash before the rename leaves the staging name with whatever reached
/// the disk and no token: the next caller (under the lock) replaces that
/// staging file and publishes a whole token; nothing else is left.
#[test]
fn ensure_replaces_a_staging_token_a_crash_left_and_leaves_no_staging_name() {
    let (_dir, runtime) = runtime();
    let path = runtime.join("control.token");
    let staging = runtime.join(".control.token.new");
    fs::write(&staging, b"0123").unwrap();
    let token = ensure_execution_secret(&path).unwrap();
    assert!(is_token(&token), "{token:?}");
    assert_eq!(fs::read(&path).unwrap(), token.as_bytes());
    assert_eq!(fs::metadata(&path).unwrap().nlink(), 1);
    assert_eq!(entries(&runtime), [".control.token.lock", "control.token"]);
}

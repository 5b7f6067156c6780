//! InstallationLock against real files: acquisition, reaping, every refusal of
//! an existing lock, and every refusal of release. Each refusal must leave the
//! existing lock exactly as it was and no draft directory behind.

use std::fs;
use std::os::unix::fs::{chown, symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use agents_common::InstallationLock;
use agents_tests::install_lock_fixtures::{
    dead_pid, drafts, listing, lock_path, plant_lock, LiveProcess, TempRoot,
};
use python_compat::ErrorClass;

const OTHER_UID: u32 = 65534;

/// A change a test makes to a planted lock's owner file.
type Tamper = fn(&Path);

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Inode, mode and content of the lock's owner file, to prove it was not touched.
fn owner_fingerprint(root: &Path) -> (u64, u32, Vec<u8>) {
    let owner = lock_path(root).join("pid");
    let info = fs::symlink_metadata(&owner).unwrap();
    (
        info.ino(),
        info.mode(),
        fs::read(&owner).unwrap_or_default(),
    )
}

fn refused(root: &Path) -> agents_common::Error {
    InstallationLock::acquire(root).expect_err("the lock must be refused")
}

#[test]
fn acquire_publishes_a_private_owner_file_and_release_removes_it() {
    let temp = TempRoot::new("basic");
    let root = temp.root();
    let lock = InstallationLock::acquire(&root).unwrap();
    let path = lock_path(&root);
    assert_eq!(lock.path(), path);
    assert_eq!(mode(&path), 0o700);
    assert_eq!(listing(&path), ["pid"]);
    assert_eq!(mode(&path.join("pid")), 0o600);
    assert_eq!(
        fs::read(path.join("pid")).unwrap(),
        format!("{}\n", std::process::id()).into_bytes()
    );
    let info = fs::symlink_metadata(&path).unwrap();
    assert_eq!(lock.identity(), Some((info.dev(), info.ino())));
    assert_eq!(listing(&root), [".install-lock"]);
    lock.release().unwrap();
    assert!(listing(&root).is_empty());
}

#[test]
fn the_root_must_be_an_owned_safe_directory() {
    let temp = TempRoot::new("root");
    let root = temp.root();

    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
    let err = refused(&root);
    assert_eq!(err.class(), ErrorClass::Permission);
    assert_eq!(
        err.message(),
        format!(
            "execution directory permissions are unsafe: {}",
            root.display()
        )
    );
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();

    chown(&root, Some(OTHER_UID), None).unwrap();
    let err = refused(&root);
    assert_eq!(
        err.python_line(),
        format!(
            "PermissionError: execution directory is not an owned directory: {}",
            root.display()
        )
    );
    chown(&root, Some(0), None).unwrap();
    assert!(listing(&root).is_empty());

    let missing = temp.path().join("missing");
    let err = refused(&missing);
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(
        err.message(),
        format!(
            "[Errno 2] No such file or directory: '{}'",
            missing.display()
        )
    );

    let link = temp.path().join("link");
    symlink(&root, &link).unwrap();
    let err = refused(&link);
    assert_eq!(
        err.python_line(),
        format!(
            "ValueError: execution path contains a symlink: {}",
            link.display()
        )
    );
    let err = refused(Path::new("relative/root"));
    assert_eq!(
        err.python_line(),
        "ValueError: execution paths must be absolute without traversal"
    );
    assert!(listing(&root).is_empty());
}

#[test]
fn a_live_owner_keeps_the_lock() {
    let temp = TempRoot::new("live");
    let root = temp.root();
    let owner = LiveProcess::start();
    plant_lock(&root, format!("{}\n", owner.pid()).as_bytes(), 0o600);
    let before = owner_fingerprint(&root);
    let err = refused(&root);
    assert_eq!(
        err.python_line(),
        "RuntimeError: another installer owns the installation lock"
    );
    assert_eq!(owner_fingerprint(&root), before);
    assert_eq!(listing(&root), [".install-lock"]);
}

#[test]
fn a_second_acquire_in_the_owning_process_is_refused() {
    let temp = TempRoot::new("self");
    let root = temp.root();
    let lock = InstallationLock::acquire(&root).unwrap();
    let err = refused(&root);
    assert_eq!(
        err.message(),
        "another installer owns the installation lock"
    );
    assert!(drafts(&root).is_empty());
    lock.release().unwrap();
}

#[test]
fn a_dead_owner_is_reaped_and_replaced() {
    let temp = TempRoot::new("dead");
    let root = temp.root();
    // Both spellings install.sh may leave: with and without the newline, 0600 or 0644.
    for (contents, owner_mode) in [
        (format!("{}\n", dead_pid()), 0o600),
        (format!("{}", dead_pid()), 0o644),
    ] {
        plant_lock(&root, contents.as_bytes(), owner_mode);
        let lock = InstallationLock::acquire(&root).unwrap();
        assert_eq!(
            fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
            format!("{}\n", std::process::id())
        );
        assert_eq!(listing(&root), [".install-lock"]);
        lock.release().unwrap();
        assert!(listing(&root).is_empty());
    }
}

#[test]
fn an_empty_lock_left_by_a_crash_is_replaced() {
    let temp = TempRoot::new("empty");
    let root = temp.root();
    fs::create_dir(lock_path(&root)).unwrap();
    fs::set_permissions(lock_path(&root), fs::Permissions::from_mode(0o700)).unwrap();
    let lock = InstallationLock::acquire(&root).unwrap();
    assert_eq!(listing(&lock_path(&root)), ["pid"]);
    lock.release().unwrap();
    assert!(listing(&root).is_empty());
}

#[test]
fn unknown_files_in_the_lock_are_refused() {
    let temp = TempRoot::new("unknown");
    let root = temp.root();
    let lock = lock_path(&root);
    fs::create_dir(&lock).unwrap();
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(lock.join("other"), b"keep").unwrap();
    let err = refused(&root);
    assert_eq!(
        err.python_line(),
        "RuntimeError: installation lock contains unknown files"
    );
    assert_eq!(listing(&lock), ["other"]);
    assert!(drafts(&root).is_empty());

    // A dead owner's pid is reaped first (as the original does); the unknown file
    // then keeps the directory from being replaced.
    fs::write(lock.join("pid"), format!("{}\n", dead_pid())).unwrap();
    fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(0o600)).unwrap();
    let err = refused(&root);
    assert_eq!(err.message(), "installation lock contains unknown files");
    assert_eq!(listing(&lock), ["other"]);
    assert_eq!(fs::read(lock.join("other")).unwrap(), b"keep");
    assert!(drafts(&root).is_empty());
}

#[test]
fn an_unsafe_owner_file_is_refused_without_touching_it() {
    let temp = TempRoot::new("unsafe-owner");
    let dead = format!("{}\n", dead_pid());
    let unsafe_owner = "PermissionError: installation lock owner is unsafe";

    let cases: [(&str, Tamper); 5] = [
        ("mode 0666", |_| {}),
        ("mode 0640", |owner| {
            fs::set_permissions(owner, fs::Permissions::from_mode(0o640)).unwrap()
        }),
        ("mode 0700", |owner| {
            fs::set_permissions(owner, fs::Permissions::from_mode(0o700)).unwrap()
        }),
        ("other uid", |owner| {
            fs::set_permissions(owner, fs::Permissions::from_mode(0o600)).unwrap();
            chown(owner, Some(OTHER_UID), None).unwrap();
        }),
        ("nlink 2", |owner| {
            fs::set_permissions(owner, fs::Permissions::from_mode(0o600)).unwrap();
            fs::hard_link(
                owner,
                owner.parent().unwrap().parent().unwrap().join("pid-link"),
            )
            .unwrap();
        }),
    ];
    for (index, (label, adjust)) in cases.iter().enumerate() {
        let root = temp.path().join(format!("root-{index}"));
        fs::create_dir(&root).unwrap();
        plant_lock(&root, dead.as_bytes(), 0o666);
        adjust(&lock_path(&root).join("pid"));
        let before = owner_fingerprint(&root);
        let entries = listing(&root);
        let err = refused(&root);
        assert_eq!(err.python_line(), unsafe_owner, "{label}");
        assert_eq!(owner_fingerprint(&root), before, "{label}");
        assert_eq!(listing(&root), entries, "{label}: no draft left");
    }
}

#[test]
fn owner_files_that_are_not_regular_files_are_refused() {
    let temp = TempRoot::new("special-owner");
    let root = temp.root();
    let lock = lock_path(&root);
    fs::create_dir(&lock).unwrap();
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o700)).unwrap();

    fs::create_dir(lock.join("pid")).unwrap();
    assert_eq!(
        refused(&root).python_line(),
        "PermissionError: installation lock owner is unsafe"
    );
    fs::remove_dir(lock.join("pid")).unwrap();

    // A FIFO must be refused, not block the reaper forever.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        lock.join("pid"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_eq!(
        refused(&root).python_line(),
        "PermissionError: installation lock owner is unsafe"
    );
    fs::remove_file(lock.join("pid")).unwrap();

    let target = temp.path().join("real-pid");
    fs::write(&target, format!("{}\n", dead_pid())).unwrap();
    symlink(&target, lock.join("pid")).unwrap();
    let err = refused(&root);
    assert_eq!(err.class(), ErrorClass::Os);
    assert_eq!(
        err.message(),
        "[Errno 40] Too many levels of symbolic links: 'pid'"
    );
    assert!(fs::symlink_metadata(lock.join("pid"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(listing(&root), [".install-lock"]);
}

#[test]
fn invalid_owner_contents_are_refused() {
    let temp = TempRoot::new("invalid-owner");
    let too_long = "1".repeat(21);
    let too_big_for_a_pid = "99999999999999999999";
    let cases: [&[u8]; 11] = [
        b"",
        b"\n",
        b"abc\n",
        b"0\n",
        b"1\n",
        b"12\n\n",
        b" 12\n",
        b"-5\n",
        b"12\r\n",
        too_long.as_bytes(),
        too_big_for_a_pid.as_bytes(),
    ];
    for (index, contents) in cases.iter().enumerate() {
        let root = temp.path().join(format!("root-{index}"));
        fs::create_dir(&root).unwrap();
        plant_lock(&root, contents, 0o600);
        let before = owner_fingerprint(&root);
        let err = refused(&root);
        assert_eq!(
            err.python_line(),
            "ValueError: installation lock owner is invalid",
            "{contents:?}"
        );
        assert_eq!(owner_fingerprint(&root), before);
        assert_eq!(listing(&root), [".install-lock"]);
    }
}

#[test]
fn an_unsafe_lock_directory_is_refused() {
    let temp = TempRoot::new("unsafe-dir");
    let dead = format!("{}\n", dead_pid());

    let root = temp.path().join("open");
    fs::create_dir(&root).unwrap();
    let lock = plant_lock(&root, dead.as_bytes(), 0o600);
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o750)).unwrap();
    let err = refused(&root);
    assert_eq!(
        err.python_line(),
        format!(
            "PermissionError: execution directory permissions are unsafe: {}",
            lock.display()
        )
    );
    assert_eq!(listing(&lock), ["pid"]);

    let root = temp.path().join("foreign");
    fs::create_dir(&root).unwrap();
    let lock = plant_lock(&root, dead.as_bytes(), 0o600);
    chown(&lock, Some(OTHER_UID), None).unwrap();
    let err = refused(&root);
    assert_eq!(
        err.python_line(),
        format!(
            "PermissionError: execution directory is not an owned directory: {}",
            lock.display()
        )
    );
    assert_eq!(listing(&lock), ["pid"]);

    // A symlink or a file in the lock's place: rename refuses with ENOTDIR,
    // reported as Python's two-path OSError.
    let root = temp.path().join("symlinked");
    fs::create_dir(&root).unwrap();
    let elsewhere = temp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, lock_path(&root)).unwrap();
    let file_root = temp.path().join("file");
    fs::create_dir(&file_root).unwrap();
    fs::write(lock_path(&file_root), b"x").unwrap();
    for root in [root, file_root] {
        let err = refused(&root);
        assert_eq!(err.class(), ErrorClass::NotADirectory);
        let message = err.message();
        let prefix = format!(
            "[Errno 20] Not a directory: '{}/.install-lock.",
            root.display()
        );
        let suffix = format!(".tmp' -> '{}'", lock_path(&root).display());
        assert!(
            message.starts_with(&prefix) && message.ends_with(&suffix),
            "{message}"
        );
        assert_eq!(listing(&root), [".install-lock"]);
    }
    assert!(listing(&elsewhere).is_empty());
}

/// Holds the lock, lets `tamper` change it, and returns the release error.
fn release_after(label: &str, tamper: impl FnOnce(&Path)) -> (TempRoot, agents_common::Error) {
    let temp = TempRoot::new(label);
    let root = temp.root();
    let lock = InstallationLock::acquire(&root).unwrap();
    tamper(&lock_path(&root));
    let err = lock.release().expect_err("release must refuse");
    (temp, err)
}

fn write_owner(lock: &Path, contents: &str, mode: u32) {
    fs::write(lock.join("pid"), contents).unwrap();
    fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn release_refuses_a_replaced_lock_directory() {
    let (temp, err) = release_after("replaced", |lock| {
        fs::rename(lock, lock.with_file_name("moved")).unwrap();
        fs::create_dir(lock).unwrap();
        fs::set_permissions(lock, fs::Permissions::from_mode(0o700)).unwrap();
        write_owner(lock, &format!("{}\n", std::process::id()), 0o600);
    });
    assert_eq!(
        err.python_line(),
        "RuntimeError: installation lock identity changed"
    );
    let lock = lock_path(&temp.root());
    assert_eq!(listing(&lock), ["pid"], "the replacement is left alone");
}

#[test]
fn release_refuses_a_changed_owner() {
    let (temp, err) = release_after("owner", |lock| write_owner(lock, "4242\n", 0o600));
    assert_eq!(
        err.python_line(),
        "RuntimeError: installation lock owner changed"
    );
    assert_eq!(
        fs::read(lock_path(&temp.root()).join("pid")).unwrap(),
        b"4242\n"
    );

    let (temp, err) = release_after("extra", |lock| fs::write(lock.join("extra"), b"").unwrap());
    assert_eq!(err.message(), "installation lock owner changed");
    assert_eq!(listing(&lock_path(&temp.root())), ["extra", "pid"]);

    let (temp, err) = release_after("owner-mode", |lock| {
        fs::set_permissions(lock.join("pid"), fs::Permissions::from_mode(0o644)).unwrap()
    });
    let owner = lock_path(&temp.root()).join("pid");
    assert_eq!(
        err.python_line(),
        format!(
            "PermissionError: execution configuration is unsafe: {}",
            owner.display()
        )
    );
    assert!(owner.exists());
}

#[test]
fn release_refuses_a_missing_or_opened_lock_directory() {
    let (temp, err) = release_after("removed", |lock| fs::remove_dir_all(lock).unwrap());
    assert!(err.is_not_found());
    assert_eq!(
        err.message(),
        format!(
            "[Errno 2] No such file or directory: '{}'",
            lock_path(&temp.root()).display()
        )
    );

    let (temp, err) = release_after("opened", |lock| {
        fs::set_permissions(lock, fs::Permissions::from_mode(0o755)).unwrap()
    });
    let lock = lock_path(&temp.root());
    assert_eq!(
        err.python_line(),
        format!(
            "PermissionError: execution directory permissions are unsafe: {}",
            lock.display()
        )
    );
    assert_eq!(listing(&lock), ["pid"]);
}

#[test]
fn dropping_a_held_lock_releases_it_only_if_it_is_still_ours() {
    let temp = TempRoot::new("drop");
    let root = temp.root();
    drop(InstallationLock::acquire(&root).unwrap());
    assert!(listing(&root).is_empty());

    let lock = InstallationLock::acquire(&root).unwrap();
    write_owner(&lock_path(&root), "4242\n", 0o600);
    drop(lock);
    assert_eq!(fs::read(lock_path(&root).join("pid")).unwrap(), b"4242\n");
}

#[test]
fn hold_releases_after_the_body_and_reports_release_failures_first() {
    let temp = TempRoot::new("hold");
    let root = temp.root();
    let value = InstallationLock::hold(&root, || {
        assert!(lock_path(&root).exists());
        Ok(7)
    })
    .unwrap();
    assert_eq!(value, 7);
    assert!(listing(&root).is_empty());

    let err = InstallationLock::hold(&root, || -> agents_common::Result<()> {
        Err(agents_common::Error::value("body failed"))
    })
    .unwrap_err();
    assert_eq!(err.message(), "body failed");
    assert!(listing(&root).is_empty(), "released after a failing body");

    let err = InstallationLock::hold(&root, || {
        write_owner(&lock_path(&root), "4242\n", 0o600);
        Err::<(), _>(agents_common::Error::value("body failed"))
    })
    .unwrap_err();
    assert_eq!(err.message(), "installation lock owner changed");
}

/// `inspect_lock` judges an existing lock exactly as the next acquirer's
/// reaper would, and changes nothing.
#[test]
fn inspect_reports_the_owner_as_the_reaper_judges_it_without_touching_it() {
    use agents_common::inspect_lock;
    let temp = TempRoot::new("inspect");
    let root = temp.root();
    assert_eq!(inspect_lock(&root).unwrap(), None);

    let live = LiveProcess::start();
    plant_lock(&root, format!("{}\n", live.pid()).as_bytes(), 0o600);
    let before = (listing(&lock_path(&root)), owner_fingerprint(&root));
    let found = inspect_lock(&root).unwrap().unwrap();
    assert_eq!((found.owner, found.alive), (Some(live.pid()), true));
    assert_eq!(
        refused(&root).python_line(),
        "RuntimeError: another installer owns the installation lock"
    );

    let dead = dead_pid();
    fs::write(lock_path(&root).join("pid"), format!("{dead}\n")).unwrap();
    let found = inspect_lock(&root).unwrap().unwrap();
    assert_eq!((found.owner, found.alive), (Some(dead), false));
    assert_eq!(listing(&lock_path(&root)), before.0, "nothing reaped");

    fs::set_permissions(
        lock_path(&root).join("pid"),
        fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let error = inspect_lock(&root).unwrap_err();
    assert_eq!(error.class(), ErrorClass::Permission);
    assert_eq!(error.python_line(), refused(&root).python_line());

    fs::remove_file(lock_path(&root).join("pid")).unwrap();
    let empty = inspect_lock(&root).unwrap().unwrap();
    assert_eq!((empty.owner, empty.alive), (None, false));
    fs::write(lock_path(&root).join("stray"), b"").unwrap();
    assert_eq!(
        inspect_lock(&root).unwrap_err().python_line(),
        "RuntimeError: installation lock contains unknown files"
    );
}

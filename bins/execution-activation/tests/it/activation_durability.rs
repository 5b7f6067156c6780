//! `flush_activation`: the runtime durability barrier over real release
//! trees, and each refusal that keeps it from vouching for an unsafe tree.

use std::fs;
use std::os::unix::fs::symlink;

use agents_common::ActivationManifest;
use agents_tests::journal_writer::{Begin, Install};
use agents_tests::{assert_error, set_mode, write_file};
use execution_activation::durability::{flush_activation, flush_activation_on, FullSync};
use python_compat::ErrorClass;

/// An update journal in `prepared` with old and candidate releases.
fn prepared(tag: &str) -> Install {
    let install = Install::new(tag);
    install.release("1.0.0");
    install.write_env("AGENTS_SERVER_PORT=7850\n");
    install.install_split("1.0.0");
    let staging = install.staging("1.1.0");
    let old = install.release_dir("1.0.0");
    install.begin(&Begin {
        old: Some((old.clone(), old)),
        ..Begin::split(&staging, "1.1.0")
    });
    install
}

fn flush(install: &Install) -> agents_common::Result<()> {
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    flush_activation(&install.root(), &manifest)
}

#[test]
fn a_prepared_activation_flushes_without_changing_anything() {
    let install = prepared("ok");
    // A venv interpreter linked outside the tree must be a Python; one owned
    // by root (these tests run as root) is skipped, as the original never
    // traverses OS-managed installations.
    let interpreter = install.base.join("python-home/bin/python3.11");
    fs::create_dir_all(interpreter.parent().unwrap()).unwrap();
    write_file(&interpreter, b"#!/bin/sh\n", 0o755);
    let python = install.release_dir("1.0.0").join(".venv/bin/python3");
    symlink(&interpreter, &python).unwrap();
    let before = fs::read(install.manifest_path()).unwrap();
    flush(&install).unwrap();
    assert_eq!(fs::read(install.manifest_path()).unwrap(), before);
}

#[test]
fn the_install_root_must_be_private_and_the_phase_early() {
    let install = prepared("root");
    set_mode(&install.root(), 0o755);
    assert_error(
        flush(&install),
        ErrorClass::Permission,
        "activation durability requires a private install root",
    );
    set_mode(&install.root(), 0o700);
    install.record("quiescing");
    assert_error(
        flush(&install),
        ErrorClass::Runtime,
        "runtime durability must precede native quiescing",
    );
}

#[test]
fn trees_with_unsafe_members_are_refused() {
    let install = prepared("members");
    let candidate = install.releases().join(".staging-1.1.0-4242");
    let fifo = candidate.join("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert_error(
        flush(&install),
        ErrorClass::Value,
        "durability tree contains a special file",
    );
    fs::remove_file(&fifo).unwrap();

    let link = candidate.join("escape");
    symlink("/etc/hostname", &link).unwrap();
    assert_error(
        flush(&install),
        ErrorClass::Value,
        "external durability link is not a Python interpreter",
    );
    fs::remove_file(&link).unwrap();

    let control = candidate.join("bad\u{1}name");
    write_file(&control, b"x", 0o644);
    assert_error(
        flush(&install),
        ErrorClass::Value,
        "durability member contains control characters",
    );
    fs::remove_file(&control).unwrap();

    let dangling = candidate.join(".venv/bin/python9");
    symlink(candidate.join("missing"), &dangling).unwrap();
    let error = flush(&install).unwrap_err();
    assert_eq!(error.class(), ErrorClass::NotFound, "{error:?}");
    fs::remove_file(&dangling).unwrap();

    set_mode(&candidate.join("VERSION"), 0o666);
    assert_error(
        flush(&install),
        ErrorClass::Permission,
        "activation release identity is unsafe",
    );
    set_mode(&candidate.join("VERSION"), 0o644);
    flush(&install).expect("restored tree flushes");
}

#[test]
fn a_release_that_left_the_journal_is_not_retained() {
    let install = prepared("moved");
    let old = install.release_dir("1.0.0");
    fs::rename(&old, install.releases().join("elsewhere")).unwrap();
    let (_directory, manifest) = {
        // execution_context would already refuse; read the manifest raw.
        ActivationManifest::read(&install.root(), false).unwrap()
    };
    assert_error(
        flush_activation(&install.root(), &manifest),
        ErrorClass::Runtime,
        "durability runtime is not retained by the journal",
    );
}

/// A host's full-barrier call, recorded: which files got `F_FULLFSYNC`
/// (by device and inode), failing with `errno` when set.
struct RecordedSync {
    darwin: bool,
    errno: Option<rustix::io::Errno>,
    files: std::cell::RefCell<Vec<(u64, u64)>>,
}

impl RecordedSync {
    fn on(darwin: bool) -> RecordedSync {
        RecordedSync {
            darwin,
            errno: None,
            files: std::cell::RefCell::new(Vec::new()),
        }
    }
}

impl FullSync for RecordedSync {
    fn host_is_darwin(&self) -> bool {
        self.darwin
    }

    fn full_fsync(&self, file: std::os::fd::BorrowedFd<'_>) -> rustix::io::Result<()> {
        let info = rustix::fs::fstat(file)?;
        #[allow(clippy::unnecessary_cast)]
        self.files
            .borrow_mut()
            .push((info.st_dev as u64, info.st_ino as u64));
        self.errno.map_or(Ok(()), Err)
    }
}

fn identity(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let info = fs::metadata(path).unwrap();
    (info.dev(), info.ino())
}

fn flush_with(install: &Install, sync: &RecordedSync) -> agents_common::Result<()> {
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    flush_activation_on(&install.root(), &manifest, sync)
}

#[test]
fn on_macos_each_retained_release_version_gets_a_full_fsync() {
    // fsync alone need not drain a Mac's volatile write cache: the original adds
    // F_FULLFSYNC for each release's VERSION anchor, once per release, and
    // for nothing else the walk flushes.
    let install = prepared("fullfsync");
    let sync = RecordedSync::on(true);
    flush_with(&install, &sync).unwrap();
    let candidate = install.releases().join(".staging-1.1.0-4242/VERSION");
    let old = install.release_dir("1.0.0").join("VERSION");
    assert_eq!(
        sync.files.borrow().as_slice(),
        [identity(&candidate), identity(&old)]
    );
    // Off macOS there is no such call.
    let linux = RecordedSync::on(false);
    flush_with(&install, &linux).unwrap();
    assert!(linux.files.borrow().is_empty());
}

#[test]
fn a_refused_full_fsync_fails_the_barrier() {
    // A volume that cannot drain its cache (F_FULLFSYNC refused, as on some
    // network filesystems) fails durability with the OS error, as
    // fcntl.fcntl raises it; nothing vouches for the release.
    let install = prepared("fullfsync-refused");
    let sync = RecordedSync {
        errno: Some(rustix::io::Errno::NOTSUP),
        ..RecordedSync::on(true)
    };
    let error = flush_with(&install, &sync).unwrap_err();
    let errno = rustix::io::Errno::NOTSUP.raw_os_error();
    assert_eq!(error.errno(), Some(errno));
    assert_eq!(
        error.python_line(),
        format!("OSError: [Errno {errno}] Operation not supported")
    );
    assert_eq!(sync.files.borrow().len(), 1, "the first anchor fails it");
}

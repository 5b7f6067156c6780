//! A private temporary directory that is removed when the test ends.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A freshly created, owner-only (0700) directory under the system temp dir,
/// removed recursively on drop.
///
/// The path is canonical (no symlinked ancestors), because the layout checks
/// refuse any symlink on the way to an execution root.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a new directory whose name starts with `prefix`.
    ///
    /// Panics when no directory can be created: a test cannot run without one.
    pub fn new(prefix: &str) -> TempDir {
        TempDir::with_mode(prefix, 0o700)
    }

    /// Like [`TempDir::new`], with exactly `mode` (e.g. 0755 where a test
    /// needs a root others may traverse, as install.sh's roots are).
    pub fn with_mode(prefix: &str, mode: u32) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let parent = std::env::temp_dir()
            .canonicalize()
            .expect("the system temp directory must exist");
        for _ in 0..64 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|elapsed| elapsed.subsec_nanos())
                .unwrap_or(0);
            let name = format!(
                "{prefix}-{}-{}-{nanos:08x}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let path = parent.join(name);
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // The umask may have narrowed DirBuilder's mode.
                    fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                        .unwrap_or_else(|err| panic!("chmod {}: {err}", path.display()));
                    return TempDir { path };
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => panic!("cannot create a temp directory {}: {err}", path.display()),
            }
        }
        panic!(
            "cannot find a free temp directory name under {}",
            parent.display()
        );
    }

    /// Exactly `<system temp dir>/<name>` (0700), replacing what a run that
    /// crashed may have left there. Comparisons run both implementations one
    /// after the other at the same paths, so that files naming their roots
    /// compare byte for byte; `name` must be unique to the caller.
    pub fn fixed(name: &str) -> TempDir {
        let parent = std::env::temp_dir()
            .canonicalize()
            .expect("the system temp directory must exist");
        let path = parent.join(name);
        match fs::remove_dir_all(&path) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                panic!("cannot clear {}: {err}", path.display())
            }
            _ => {}
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|err| panic!("chmod {}: {err}", path.display()));
        TempDir { path }
    }

    /// The directory's canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<dir>/<relative>`.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.path.join(relative)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_dir_all(&self.path) {
            if err.kind() != io::ErrorKind::NotFound {
                // Never panic in drop (it may run while unwinding); say what was left.
                eprintln!("warning: could not remove {}: {err}", self.path.display());
            }
        }
    }
}

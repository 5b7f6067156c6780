//! The Python originals: the five 1.0.7-beta.5 helper sources that oracle
//! tests run side by side with the binaries.
//!
//! They are not part of the project (CONTRIBUTING.md says where to get them
//! and their sha256). Tests find them through [`ORIGINALS_DIR_ENV`]
//! (`AGENTS_ORIGINALS_DIR`), or the older name [`SEEDS_DIR_ENV`]
//! (`AGENTS_SEEDS_DIR`), which default to `../shared/seeds/extracted` beside
//! the checkout when that folder exists.
//! A test that needs them starts with [`require_originals!`]: without them it
//! is reported as skipped (and fails under `CI=true`), and the [`Originals`]
//! value it gets is the only way to reach the sources, so no oracle can run
//! by accident in a test that did not ask.

use std::path::{Path, PathBuf};

use crate::fixtures::workspace_root;
use crate::skip::skip;

/// The variable naming the folder that holds the Python originals.
pub const ORIGINALS_DIR_ENV: &str = "AGENTS_ORIGINALS_DIR";

/// The variable's earlier name, still read when the new one is not set.
pub const SEEDS_DIR_ENV: &str = "AGENTS_SEEDS_DIR";

/// The sources a complete originals folder holds.
pub const ORIGINAL_FILES: [&str; 5] = [
    "execution_activation.py",
    "execution_manage.py",
    "uninstall.sh",
    "update_handoff.py",
    "update_runner.py",
];

/// Why an oracle test did not run.
pub const MISSING_ORIGINALS: &str = "Python originals not found (set AGENTS_ORIGINALS_DIR)";

/// Proof that the Python originals are present, with their folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Originals {
    dir: PathBuf,
}

impl Originals {
    /// The originals named by `AGENTS_ORIGINALS_DIR` (or `AGENTS_SEEDS_DIR`),
    /// or by default `../shared/seeds/extracted` beside the checkout; `None`
    /// unless that folder holds every file of [`ORIGINAL_FILES`].
    pub fn locate() -> Option<Originals> {
        let named = [ORIGINALS_DIR_ENV, SEEDS_DIR_ENV]
            .into_iter()
            .filter_map(std::env::var_os)
            .find(|dir| !dir.is_empty());
        let dir = match named {
            Some(dir) => PathBuf::from(dir),
            None => workspace_root().join("../shared/seeds/extracted"),
        };
        let complete = ORIGINAL_FILES.iter().all(|name| dir.join(name).is_file());
        let dir = dir.canonicalize().ok()?;
        complete.then_some(Originals { dir })
    }

    /// The originals for `test`, or `None` after reporting the test as
    /// skipped (a failure under `CI=true`).
    pub fn require(test: &str) -> Option<Originals> {
        let found = Originals::locate();
        if found.is_none() {
            skip(test, MISSING_ORIGINALS);
        }
        found
    }

    /// The folder holding the sources (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One source, e.g. `originals.file("uninstall.sh")`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The [`Originals`] for the calling test, or `return` from it after
/// reporting it as skipped: `let originals = agents_tests::require_originals!();`.
#[macro_export]
macro_rules! require_originals {
    () => {
        match $crate::Originals::require($crate::test_name!()) {
            Some(originals) => originals,
            None => return,
        }
    };
}

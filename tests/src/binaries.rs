//! Where the built helper binaries and the test worker are.
//!
//! Cargo builds only the test's own package's binaries for integration tests,
//! so the five helpers and the test worker are found beside the test
//! executable in the shared target directory instead.

use std::path::PathBuf;

/// The five helper executables under test.
pub const HELPERS: [&str; 5] = [
    "uninstall",
    "update-runner",
    "update-handoff",
    "execution-activation",
    "execution-manage",
];

/// The test-only worker program (see the `test-worker` binary).
pub const TEST_WORKER: &str = "test-worker";

/// The profile directory (`target/debug` or `target/release`) the running
/// test executable was built into.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let mut dir = exe
        .parent()
        .expect("the test executable lives in a directory")
        .to_path_buf();
    // Integration tests and unit tests run from `<profile>/deps`; binaries
    // (the test worker itself, when it asks) run from `<profile>`.
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.pop();
    }
    dir
}

/// The absolute path of a workspace binary, e.g. `binary_path("uninstall")`.
///
/// Panics with the fix when the binary has not been built.
pub fn binary_path(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    if !path.is_file() {
        panic!(
            "{} is missing: run `cargo build --workspace` first \
             (Cargo does not build other packages' binaries for integration tests)",
            path.display()
        );
    }
    path
}

/// The built test worker, which installation fixtures link as each release's
/// `.venv/bin/python`.
pub fn test_worker_path() -> PathBuf {
    binary_path(TEST_WORKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let panic = std::panic::catch_unwind(|| binary_path("no-such-helper")).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("run `cargo build --workspace` first"),
            "{message}"
        );
        assert!(
            profile_dir().join("deps").is_dir(),
            "the profile dir holds deps/"
        );
    }
}

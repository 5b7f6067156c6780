//! One test of the running test binary, run again by itself in a child
//! process. Each crate's integration tests share one binary, so a test that
//! changes what a whole process shares (the umask, the environment, the
//! cgroups named after its PID) does that work in a child of its own, where
//! no other test runs beside it.

use std::process::{Command, Output};

/// Set in the child [`alone`] starts: the test is running by itself there.
pub const ALONE_ENV: &str = "AGENTS_TESTS_ALONE";

/// The name libtest gives `test` of the module whose `module_path!()` is
/// `module_path`: the path below the crate root (`<module>::<test>`).
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// Whether this process is the child [`alone`] started.
pub fn running_alone() -> bool {
    std::env::var_os(ALONE_ENV).is_some()
}

/// This test binary running only `test` (of the module whose `module_path!()`
/// is `module_path`), on one thread, with [`ALONE_ENV`] set; check its output
/// with [`assert_passed_alone`].
pub fn alone(module_path: &str, test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .arg(test_name(module_path, test))
        .args([
            "--exact",
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(ALONE_ENV, "1");
    command
}

/// Asserts that the child of [`alone`] ran its one test and the test passed
/// (a name that matches nothing would pass with no test run).
pub fn assert_passed_alone(output: &Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "the test run alone failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Unless this process is already that child, runs `test` alone in a child
/// process ([`alone`]), asserts that it passed and returns true: the caller
/// then returns, its work done in the child. In the child, returns false.
pub fn ran_alone(module_path: &str, test: &str) -> bool {
    if running_alone() {
        return false;
    }
    let output = alone(module_path, test)
        .output()
        .expect("the test binary runs");
    assert_passed_alone(&output);
    true
}

//! Tests that cannot run on this machine say so instead of passing silently.
//!
//! A skipped test writes `SKIPPED <test>: <reason>` straight to stderr
//! (libtest captures only the print macros) and, when `scripts/test.sh` set
//! [`SKIP_LOG_ENV`], appends the same line to that file, so the run's summary
//! can count skips and name their reasons. Under `CI=true` nothing may be
//! skipped: the test fails with the reason instead.

use std::fs::OpenOptions;
use std::io::Write;

/// The file (set by the suite runner) that collects one line per skipped test.
pub const SKIP_LOG_ENV: &str = "AGENTS_TEST_SKIP_LOG";

/// True under `CI=true`, where every test must run.
pub fn ci_requires_everything() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Records that `test` did not run because of `reason`, or panics with the
/// reason under `CI=true`.
pub fn skip(test: &str, reason: &str) {
    if ci_requires_everything() {
        panic!("{test}: {reason} (CI=true: nothing may be skipped)");
    }
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        // One O_APPEND write per line: parallel tests never interleave.
        if let Ok(mut log) = OpenOptions::new().append(true).create(true).open(path) {
            let _ = log.write_all(line.as_bytes());
        }
    }
}

/// The name of the function this macro is used in (a test's own name), for
/// skip lines: `fn here` nests inside the caller, so its type name is the
/// caller's path plus `::here`.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::function_name(::std::any::type_name_of_val(&here))
    }};
}

/// The last path segment of a [`test_name!`] type path that is not `here` or
/// a closure.
#[doc(hidden)]
pub fn function_name(type_path: &'static str) -> &'static str {
    type_path
        .rsplit("::")
        .find(|segment| *segment != "here" && *segment != "{{closure}}")
        .unwrap_or(type_path)
}

#[cfg(test)]
mod tests {
    use super::function_name;

    #[test]
    fn the_function_name_is_the_last_real_segment() {
        assert_eq!(function_name("cli_uninstall::prompts::here"), "prompts");
        assert_eq!(
            function_name("a::b::the_test::{{closure}}::here"),
            "the_test"
        );
        assert_eq!(
            crate::test_name!(),
            "the_function_name_is_the_last_real_segment"
        );
    }
}

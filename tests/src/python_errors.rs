//! Checks of a helper's failure as Python would have raised it: the
//! exception class and `str(exc)` exactly.

use std::path::Path;

use agents_common::Error;
use python_compat::ErrorClass;

/// Asserts that `result` failed with the Python class and exact message.
#[track_caller]
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, Error>,
    class: ErrorClass,
    message: &str,
) {
    match result {
        Ok(value) => panic!("expected {class:?} {message:?}, got Ok({value:?})"),
        Err(error) => assert_error_is(&error, class, message),
    }
}

/// [`assert_error`] for one row of a table of cases: every failure message
/// names `case`, so a failing row says which one it is.
#[track_caller]
pub fn assert_case_refused<T: std::fmt::Debug>(
    result: Result<T, Error>,
    (class, message): (ErrorClass, &str),
    case: &str,
) {
    match result {
        Ok(value) => panic!("{case}: expected {class:?} {message:?}, got Ok({value:?})"),
        Err(error) => assert_eq!(
            (error.class(), error.message()),
            (class, message),
            "{case}: unexpected error: {}",
            error.python_line()
        ),
    }
}

/// Asserts the Python exception class and the exact `str(exc)` of an error.
#[track_caller]
pub fn assert_error_is(error: &Error, class: ErrorClass, message: &str) {
    assert_eq!(
        (error.class(), error.message()),
        (class, message),
        "unexpected error: {}",
        error.python_line()
    );
}

/// Asserts a raw OSError worded as Python words it: `strerror` is Python's
/// `[Errno n] text` (written out literally by each test) and the path follows.
#[track_caller]
pub fn assert_os_error(error: &Error, class: ErrorClass, strerror: &str, path: &Path) {
    assert_error_is(error, class, &format!("{strerror}: '{}'", path.display()));
}

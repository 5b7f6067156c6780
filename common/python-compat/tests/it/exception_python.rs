//! The `OSError` subclass and message of every errno, against CPython
//! itself: `OSError(errno, os.strerror(errno))` becomes the subclass of
//! CPython's errno table, and the last traceback line is
//! `Class: [Errno N] text`. `python3` must be installed (it is in CI).

use std::process::Command;

use python_compat::{ErrorClass, Exception};

/// Every errno value Linux defines.
const ERRNOS: std::ops::RangeInclusive<i32> = 1..=133;

/// CPython's `Class: [Errno N] text` line for each errno in [`ERRNOS`].
fn cpython_lines() -> Vec<String> {
    let program = format!(
        "import os\nfor n in range({}, {}):\n    e = OSError(n, os.strerror(n))\n    print('%s: %s' % (type(e).__name__, e))\n",
        ERRNOS.start(),
        ERRNOS.end() + 1
    );
    let output = Command::new("python3")
        .args(["-B", "-c", &program])
        .output()
        .expect("python3 runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_errno_gets_cpythons_class_and_message() {
    let expected = cpython_lines();
    let ours: Vec<String> = ERRNOS
        .map(|errno| Exception::from(std::io::Error::from_raw_os_error(errno)).python_line())
        .collect();
    assert_eq!(ours, expected);
    // The subclasses CPython names: none of them falls back to OSError.
    let subclassed = expected
        .iter()
        .filter(|line| !line.starts_with("OSError: "))
        .count();
    assert_eq!(subclassed, 18, "{expected:#?}");
}

#[test]
fn the_connection_classes_are_connection_errors_and_all_are_os_errors() {
    for class in [
        ErrorClass::BrokenPipe,
        ErrorClass::ConnectionAborted,
        ErrorClass::ConnectionRefused,
        ErrorClass::ConnectionReset,
    ] {
        assert!(class.is_a(ErrorClass::Connection), "{class:?}");
        assert!(class.is_a(ErrorClass::Os), "{class:?}");
        assert!(!class.is_a(ErrorClass::NotFound), "{class:?}");
    }
    for errno in ERRNOS {
        let class = ErrorClass::of_errno(rustix::io::Errno::from_raw_os_error(errno));
        assert!(class.is_a(ErrorClass::Os), "{errno}: {class:?}");
    }
    assert!(!ErrorClass::Connection.is_a(ErrorClass::BrokenPipe));
    assert!(!ErrorClass::IsADirectory.is_a(ErrorClass::NotADirectory));
}

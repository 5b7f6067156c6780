//! The `OSError` subclass and message of every errno, against CPython
//! itself: `OSError(errno, os.strerror(errno))` becomes the subclass of
//! CPython's errno table, and the last traceback line is
//! `Class: [Errno N] text`. `python3` must be installed (it is in CI).

use std::os::unix::ffi::OsStringExt as _;

use crate::cpython::{printed_lines, python};

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
    printed_lines(&mut python(&program))
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

/// CPython's `str(exc)` of `os.stat(path)` and of `os.rename(path, path + "2")`
/// for a path that does not exist, given as hex bytes (surrogate-escaped, as
/// Python holds argv words and paths).
fn cpython_messages(path: &[u8]) -> (String, String) {
    let hex: String = path.iter().map(|byte| format!("{byte:02x}")).collect();
    let program = "import os, sys\n\
        p = os.fsdecode(bytes.fromhex(sys.argv[1]))\n\
        for call in (lambda: os.stat(p), lambda: os.rename(p, p + '2')):\n\
        \x20   try:\n\
        \x20       call()\n\
        \x20   except OSError as e:\n\
        \x20       sys.stdout.buffer.write(str(e).encode('utf-8', 'backslashreplace') + b'\\0')\n";
    let output = python(program).arg(&hex).output().expect("python3 runs");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let mut parts = text.split('\0');
    (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    )
}

#[test]
fn filenames_in_os_errors_are_quoted_as_python_quotes_them() {
    use std::os::unix::ffi::OsStrExt as _;
    let missing = std::io::Error::from_raw_os_error(2);
    for path in [
        b"/nonexistent/plain".as_slice(),
        b"/nonexistent/it's",
        b"/nonexistent/both'\"",
        b"/nonexistent/line\nbreak",
        b"/nonexistent/tab\tand\\backslash",
        b"/nonexistent//double",
        b"/nonexistent/caf\xc3\xa9",
        b"/nonexistent/\xff\xfe not utf-8",
        b"/nonexistent/\x1b[31mescape",
    ] {
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
        let renamed = {
            let mut bytes = path.as_os_str().as_bytes().to_vec();
            bytes.push(b'2');
            std::path::PathBuf::from(std::ffi::OsString::from_vec(bytes))
        };
        let (stat, rename) = cpython_messages(path.as_os_str().as_bytes());
        assert_eq!(Exception::from_io_path(&missing, path).message(), stat);
        assert_eq!(
            Exception::from_io_paths(&missing, path, &renamed).message(),
            rename
        );
        assert!(!stat.contains('\n'), "{stat}");
    }
}

#[test]
fn a_failed_lookup_is_pythons_gaierror_found_by_type() {
    use python_compat::socket::{getaddrinfo, LookupFailure};
    // `.invalid` never resolves (RFC 6761): no resolver is asked.
    let host = "no-such-host.invalid";
    let error = getaddrinfo(host, 80).unwrap_err();
    let failure = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<LookupFailure>())
        .copied()
        .expect("a lookup failure carries its EAI code");
    let program = "import socket, sys\ntry:\n    socket.getaddrinfo(sys.argv[1], 80, 0, socket.SOCK_STREAM)\nexcept socket.gaierror as e:\n    print('%s|%s' % (e.errno, e))";
    let printed = printed_lines(python(program).arg(host)).join("\n");
    let (code, text) = printed
        .trim_end()
        .split_once('|')
        .expect("python's gaierror");
    assert_eq!(failure.code.to_string(), code);
    assert_eq!(Exception::from_socket(error).message(), text);
    assert!(Exception::is_connect_failure(
        &getaddrinfo(host, 80).unwrap_err()
    ));
    // A name that resolves gives its addresses, in getaddrinfo's order.
    let loopback = getaddrinfo("127.0.0.1", 8080).unwrap();
    assert_eq!(loopback, vec!["127.0.0.1:8080".parse().unwrap()]);
}

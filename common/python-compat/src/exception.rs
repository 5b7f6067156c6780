//! Python's exception model as the originals raise, catch and print it: the
//! class of an exception, `isinstance` among the classes, `str(exc)`, the
//! errno of an `OSError`, and the last line of a traceback.
//!
//! The originals branch on exception classes (`_snapshot` treats only
//! `FileNotFoundError` as "absent"; `_wait_receipt` retries `OSError`,
//! `ValueError` and `RuntimeError`; `stage` raises `FileExistsError`), so an
//! exception keeps its class next to its message instead of collapsing
//! everything into one string.

use std::fmt;
use std::io::{self, Write as _};
use std::path::Path;
use std::process::ExitCode;

/// The Python class of an exception: the built-in and standard-library
/// classes the originals raise, and classes an original defines itself
/// ([`ErrorClass::Defined`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A raw `OSError` (for example `ELOOP` from `O_NOFOLLOW`).
    Os,
    /// `PermissionError`: an `OSError` raised by the originals' ownership and mode checks.
    Permission,
    /// `FileNotFoundError`: an `OSError` that callers treat as "absent".
    NotFound,
    /// `FileExistsError`: an `OSError` (for example a pending journal already exists).
    FileExists,
    /// `TimeoutError`: an `OSError` raised when a socket deadline passes
    /// (`ETIMEDOUT`).
    Timeout,
    /// `BlockingIOError`: `EAGAIN`, `EALREADY`, `EINPROGRESS` (a lock taken
    /// with `LOCK_NB` that someone holds).
    BlockingIo,
    /// `ChildProcessError`: `ECHILD`.
    ChildProcess,
    /// `ConnectionError`: the base of the four connection classes below.
    Connection,
    /// `BrokenPipeError` (a `ConnectionError`): `EPIPE`, `ESHUTDOWN`.
    BrokenPipe,
    /// `ConnectionAbortedError` (a `ConnectionError`): `ECONNABORTED`.
    ConnectionAborted,
    /// `ConnectionRefusedError` (a `ConnectionError`): `ECONNREFUSED`.
    ConnectionRefused,
    /// `ConnectionResetError` (a `ConnectionError`): `ECONNRESET`.
    ConnectionReset,
    /// `InterruptedError`: `EINTR`.
    Interrupted,
    /// `IsADirectoryError`: `EISDIR`.
    IsADirectory,
    /// `NotADirectoryError`: `ENOTDIR`.
    NotADirectory,
    /// `ProcessLookupError`: `ESRCH`.
    ProcessLookup,
    /// `ValueError`.
    Value,
    /// `TypeError`: a value of the wrong type, such as `Path(None)`.
    Type,
    /// `KeyError`: `value[key]` of a dict without the key.
    Key,
    /// `json.JSONDecodeError` (a `ValueError`): a document that does not parse.
    JsonDecode,
    /// `UnicodeDecodeError` (a `ValueError`): bytes that are not text.
    UnicodeDecode,
    /// `RuntimeError`.
    Runtime,
    /// `RecursionError` (a `RuntimeError`): nesting past Python's limit.
    Recursion,
    /// `tarfile.ReadError`: an archive that ends inside a member.
    TarRead,
    /// `SyntaxError`: source code `ast.parse` refuses.
    Syntax,
    /// `IndentationError` (a `SyntaxError`): a block that is not indented
    /// as the grammar requires.
    Indentation,
    /// `TabError` (an `IndentationError`): tabs and spaces mixed so that the
    /// indentation depends on the tab width.
    Tab,
    /// A class a Python module defines itself (`class Name(Base)`).
    Defined(&'static DefinedClass),
}

/// `class Name(Base)` in a Python module: the name a traceback shows and the
/// class it derives from.
#[derive(Debug, PartialEq, Eq)]
pub struct DefinedClass {
    /// The qualified name (`module.Name`), as the last line of a traceback
    /// shows it.
    pub name: &'static str,
    /// The base class: `except Base` catches this class too.
    pub base: ErrorClass,
}

/// Set in a debug build's environment, [`Exception::python_line`] names a
/// `FileNotFoundError` `OSError` (a deliberately wrong class, for the test
/// that the generative campaign reports it).
pub const INJECTED_WRONG_CLASS_ENV: &str = "PYTHON_COMPAT_TEST_WRONG_CLASS";

impl ErrorClass {
    /// The Python class name, as the last line of a Python traceback shows it.
    pub fn python_name(self) -> &'static str {
        match self {
            ErrorClass::Os => "OSError",
            ErrorClass::Permission => "PermissionError",
            ErrorClass::NotFound => "FileNotFoundError",
            ErrorClass::FileExists => "FileExistsError",
            ErrorClass::Timeout => "TimeoutError",
            ErrorClass::BlockingIo => "BlockingIOError",
            ErrorClass::ChildProcess => "ChildProcessError",
            ErrorClass::Connection => "ConnectionError",
            ErrorClass::BrokenPipe => "BrokenPipeError",
            ErrorClass::ConnectionAborted => "ConnectionAbortedError",
            ErrorClass::ConnectionRefused => "ConnectionRefusedError",
            ErrorClass::ConnectionReset => "ConnectionResetError",
            ErrorClass::Interrupted => "InterruptedError",
            ErrorClass::IsADirectory => "IsADirectoryError",
            ErrorClass::NotADirectory => "NotADirectoryError",
            ErrorClass::ProcessLookup => "ProcessLookupError",
            ErrorClass::Value => "ValueError",
            ErrorClass::Type => "TypeError",
            ErrorClass::Key => "KeyError",
            ErrorClass::JsonDecode => "json.decoder.JSONDecodeError",
            ErrorClass::UnicodeDecode => "UnicodeDecodeError",
            ErrorClass::Runtime => "RuntimeError",
            ErrorClass::Recursion => "RecursionError",
            ErrorClass::TarRead => "tarfile.ReadError",
            ErrorClass::Syntax => "SyntaxError",
            ErrorClass::Indentation => "IndentationError",
            ErrorClass::Tab => "TabError",
            ErrorClass::Defined(class) => class.name,
        }
    }

    /// The `OSError` subclass CPython 3.11 raises for `errno` (its
    /// `errnomap`, built in `Objects/exceptions.c`); `OSError` itself for
    /// every errno that table does not name.
    pub fn of_errno(errno: rustix::io::Errno) -> ErrorClass {
        use rustix::io::Errno;
        match errno {
            Errno::AGAIN | Errno::ALREADY | Errno::INPROGRESS => ErrorClass::BlockingIo,
            Errno::PIPE | Errno::SHUTDOWN => ErrorClass::BrokenPipe,
            Errno::CHILD => ErrorClass::ChildProcess,
            Errno::CONNABORTED => ErrorClass::ConnectionAborted,
            Errno::CONNREFUSED => ErrorClass::ConnectionRefused,
            Errno::CONNRESET => ErrorClass::ConnectionReset,
            Errno::EXIST => ErrorClass::FileExists,
            Errno::NOENT => ErrorClass::NotFound,
            Errno::ISDIR => ErrorClass::IsADirectory,
            Errno::NOTDIR => ErrorClass::NotADirectory,
            Errno::INTR => ErrorClass::Interrupted,
            Errno::ACCESS | Errno::PERM => ErrorClass::Permission,
            Errno::SRCH => ErrorClass::ProcessLookup,
            Errno::TIMEDOUT => ErrorClass::Timeout,
            _ => ErrorClass::Os,
        }
    }

    /// Python's `issubclass(self, base)` among these classes: an original's
    /// `except ValueError` also catches a `JSONDecodeError`, and callers branch
    /// the way it does.
    pub fn is_a(self, base: ErrorClass) -> bool {
        let parent = match self {
            ErrorClass::Permission
            | ErrorClass::NotFound
            | ErrorClass::FileExists
            | ErrorClass::Timeout
            | ErrorClass::BlockingIo
            | ErrorClass::ChildProcess
            | ErrorClass::Connection
            | ErrorClass::Interrupted
            | ErrorClass::IsADirectory
            | ErrorClass::NotADirectory
            | ErrorClass::ProcessLookup => Some(ErrorClass::Os),
            ErrorClass::BrokenPipe
            | ErrorClass::ConnectionAborted
            | ErrorClass::ConnectionRefused
            | ErrorClass::ConnectionReset => Some(ErrorClass::Connection),
            ErrorClass::JsonDecode | ErrorClass::UnicodeDecode => Some(ErrorClass::Value),
            ErrorClass::Recursion => Some(ErrorClass::Runtime),
            ErrorClass::Indentation => Some(ErrorClass::Syntax),
            ErrorClass::Tab => Some(ErrorClass::Indentation),
            ErrorClass::Defined(class) => Some(class.base),
            ErrorClass::Os
            | ErrorClass::Value
            | ErrorClass::Type
            | ErrorClass::Key
            | ErrorClass::Runtime
            | ErrorClass::TarRead
            | ErrorClass::Syntax => None,
        };
        self == base || parent.is_some_and(|parent| parent.is_a(base))
    }
}

/// A raised exception: its class, `str(exc)`, and the errno of a raw
/// `OSError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    class: ErrorClass,
    message: String,
    errno: Option<i32>,
}

/// The result of an operation that raises as Python does.
pub type Result<T> = std::result::Result<T, Exception>;

impl Exception {
    /// A `ValueError` with the original's exact message.
    pub fn value(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Value, message)
    }

    /// A `RuntimeError` with the original's exact message.
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Runtime, message)
    }

    /// A `PermissionError` raised by an ownership or mode check (no errno).
    pub fn permission(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permission, message)
    }

    /// A `FileExistsError` raised with a message (no errno).
    pub fn file_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::FileExists, message)
    }

    /// `Path(value)` of a value that is not text: Python's `TypeError`
    /// naming the value's type (`NoneType`, `list`, ...).
    pub fn not_a_path(type_name: &str) -> Self {
        Self::new(
            ErrorClass::Type,
            format!("expected str, bytes or os.PathLike object, not {type_name}"),
        )
    }

    /// An exception of any class with a message.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Exception {
            class,
            message: message.into(),
            errno: None,
        }
    }

    /// A raw OS error about `path`, classified as Python classifies errno values
    /// and worded like Python's `str(OSError)`: `[Errno 2] No such file or directory: '/x'`,
    /// the path as `repr` quotes it (a line break as `\n`, an undecodable
    /// byte as `\udcXX`), so no path can add a line to the message.
    pub fn from_io_path(err: &io::Error, path: &Path) -> Self {
        let mut exception = Self::from(clone_io(err));
        exception.message = format!("{}: {}", exception.message, repr_path(path));
        exception
    }

    /// A raw OS error about two paths (a rename, a link), worded like
    /// Python's `str(OSError)` of one: `[Errno 18] ...: 'from' -> 'to'`.
    pub fn from_io_paths(err: &io::Error, from: &Path, to: &Path) -> Self {
        let mut exception = Self::from(clone_io(err));
        exception.message = format!(
            "{}: {} -> {}",
            exception.message,
            repr_path(from),
            repr_path(to)
        );
        exception
    }

    /// A raw OS error from an errno value, about `path`.
    pub fn from_errno(errno: rustix::io::Errno, path: &Path) -> Self {
        Self::from_io_path(&io::Error::from_raw_os_error(errno.raw_os_error()), path)
    }

    /// A raw OS error from an errno value, about two paths.
    pub fn from_errno_paths(errno: rustix::io::Errno, from: &Path, to: &Path) -> Self {
        Self::from_io_paths(
            &io::Error::from_raw_os_error(errno.raw_os_error()),
            from,
            to,
        )
    }

    /// The Python exception class.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The message without the class name (Python's `str(exc)`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The errno of a raw OS error, if there was one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// True for `FileNotFoundError`, the only error `_snapshot` treats as "absent".
    pub fn is_not_found(&self) -> bool {
        self.class == ErrorClass::NotFound
    }

    /// True for every class that is an `OSError` in Python.
    pub fn is_os_error(&self) -> bool {
        self.class.is_a(ErrorClass::Os)
    }

    /// `isinstance(exc, base)`: the exception's class is `base` or one of its
    /// subclasses.
    pub fn is_a(&self, base: ErrorClass) -> bool {
        self.class.is_a(base)
    }

    /// The last line of the Python traceback (`RuntimeError: message`).
    pub fn python_line(&self) -> String {
        format!("{}: {}", self.shown_class(), self.message)
    }

    /// The class name the line shows. In a debug build told to by
    /// [`INJECTED_WRONG_CLASS_ENV`], `FileNotFoundError` shows as `OSError`:
    /// the fault the generative campaign's own test must catch. Release
    /// builds do not read the variable.
    fn shown_class(&self) -> &'static str {
        #[cfg(debug_assertions)]
        if self.class == ErrorClass::NotFound
            && std::env::var_os(INJECTED_WRONG_CLASS_ENV).is_some()
        {
            return ErrorClass::Os.python_name();
        }
        self.class.python_name()
    }
}

impl AsRef<Exception> for Exception {
    fn as_ref(&self) -> &Exception {
        self
    }
}

/// `repr(str(path))` of a path Python holds as surrogate-escaped text.
fn repr_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    crate::text::repr_surrogateescape(path.as_os_str().as_bytes())
}

fn clone_io(err: &io::Error) -> io::Error {
    match err.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(err.kind(), err.to_string()),
    }
}

impl From<io::Error> for Exception {
    fn from(err: io::Error) -> Self {
        let Some(code) = err.raw_os_error() else {
            let class = if err.kind() == io::ErrorKind::TimedOut {
                ErrorClass::Timeout
            } else {
                ErrorClass::Os
            };
            return Exception::new(class, err.to_string());
        };
        let class = ErrorClass::of_errno(rustix::io::Errno::from_raw_os_error(code));
        let text = io::Error::from_raw_os_error(code).to_string();
        // Rust renders "No such file or directory (os error 2)"; Python renders
        // "[Errno 2] No such file or directory".
        let text = text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string();
        Exception {
            class,
            message: format!("[Errno {code}] {text}"),
            errno: Some(code),
        }
    }
}

impl From<rustix::io::Errno> for Exception {
    fn from(errno: rustix::io::Errno) -> Self {
        Exception::from(io::Error::from_raw_os_error(errno.raw_os_error()))
    }
}

impl fmt::Display for Exception {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exception {}

/// The exit of a Python program whose `main` returned or raised: 0, or the
/// traceback's last line (`RuntimeError: message`) on stderr and 1.
pub fn exit_status<E: AsRef<Exception>>(result: std::result::Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = writeln!(io::stderr(), "{}", error.as_ref().python_line());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_like_python() {
        let err = Exception::from_io_path(&io::Error::from_raw_os_error(2), Path::new("/missing"));
        assert_eq!(err.class(), ErrorClass::NotFound);
        assert_eq!(
            err.python_line(),
            "FileNotFoundError: [Errno 2] No such file or directory: '/missing'"
        );
        let err = Exception::from(io::Error::from_raw_os_error(40));
        assert_eq!(err.class(), ErrorClass::Os);
        assert_eq!(err.errno(), Some(40));
        assert!(err.is_os_error());
        assert!(!Exception::value("x").is_os_error());
    }

    #[test]
    fn subclasses_are_caught_by_their_bases_as_in_python() {
        let decode = Exception::new(
            ErrorClass::JsonDecode,
            "Expecting value: line 1 column 1 (char 0)",
        );
        assert!(decode.is_a(ErrorClass::Value));
        assert!(!decode.is_a(ErrorClass::Runtime));
        assert_eq!(
            decode.python_line(),
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
        );
        assert!(ErrorClass::UnicodeDecode.is_a(ErrorClass::Value));
        assert!(ErrorClass::Recursion.is_a(ErrorClass::Runtime));
        assert!(ErrorClass::NotFound.is_a(ErrorClass::Os));
        assert!(!ErrorClass::Os.is_a(ErrorClass::NotFound));
        assert!(!ErrorClass::TarRead.is_a(ErrorClass::Value));
    }

    #[test]
    fn defined_classes_derive_from_their_base() {
        static LOST: DefinedClass = DefinedClass {
            name: "module.LostError",
            base: ErrorClass::Runtime,
        };
        let lost = ErrorClass::Defined(&LOST);
        assert!(lost.is_a(ErrorClass::Runtime));
        assert!(lost.is_a(lost));
        assert!(!lost.is_a(ErrorClass::Value));
        assert!(!ErrorClass::Runtime.is_a(lost));
        assert_eq!(
            Exception::new(lost, "gone").python_line(),
            "module.LostError: gone"
        );
    }

    #[test]
    fn syntax_error_classes_nest_as_in_python() {
        // issubclass(TabError, IndentationError), issubclass(IndentationError,
        // SyntaxError); none of them is a ValueError.
        assert!(ErrorClass::Tab.is_a(ErrorClass::Indentation));
        assert!(ErrorClass::Tab.is_a(ErrorClass::Syntax));
        assert!(ErrorClass::Indentation.is_a(ErrorClass::Syntax));
        assert!(!ErrorClass::Indentation.is_a(ErrorClass::Tab));
        assert!(!ErrorClass::Syntax.is_a(ErrorClass::Indentation));
        assert!(!ErrorClass::Syntax.is_a(ErrorClass::Value));
        assert!(!ErrorClass::UnicodeDecode.is_a(ErrorClass::Syntax));
        assert_eq!(
            Exception::new(
                ErrorClass::Tab,
                "inconsistent use of tabs and spaces in indentation"
            )
            .python_line(),
            "TabError: inconsistent use of tabs and spaces in indentation"
        );
        assert_eq!(
            Exception::new(ErrorClass::Indentation, "unexpected indent").python_line(),
            "IndentationError: unexpected indent"
        );
        assert_eq!(ErrorClass::Syntax.python_name(), "SyntaxError");
    }
}

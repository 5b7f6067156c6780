//! One error type that remembers which Python exception class the seed raises.
//!
//! The seeds branch on exception classes (`_snapshot` treats only
//! `FileNotFoundError` as "absent"; `_wait_receipt` retries `OSError`,
//! `ValueError` and `RuntimeError`; `stage` raises `FileExistsError`), so the
//! port keeps the class next to the message instead of collapsing everything
//! into one string.

use std::fmt;
use std::io;
use std::path::Path;

/// The Python exception class an error corresponds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A raw `OSError` (for example `ELOOP` from `O_NOFOLLOW`).
    Os,
    /// `PermissionError`: an `OSError` raised by the seeds' ownership and mode checks.
    Permission,
    /// `FileNotFoundError`: an `OSError` that callers treat as "absent".
    NotFound,
    /// `FileExistsError`: an `OSError` (for example a pending journal already exists).
    FileExists,
    /// `TimeoutError`: an `OSError` raised when a socket deadline passes.
    Timeout,
    /// `ValueError`.
    Value,
    /// `json.JSONDecodeError` (a `ValueError`): a document that does not parse.
    JsonDecode,
    /// `UnicodeDecodeError` (a `ValueError`): bytes that are not text.
    UnicodeDecode,
    /// `RuntimeError`.
    Runtime,
    /// `RecursionError` (a `RuntimeError`): nesting past Python's limit.
    Recursion,
    /// `update_runner.UpdateOwnershipLostError` (a `RuntimeError`): the status
    /// row no longer belongs to this runner, which must stop writing.
    OwnershipLost,
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
}

impl ErrorClass {
    /// The Python class name, as the last line of a Python traceback shows it.
    pub fn python_name(self) -> &'static str {
        match self {
            ErrorClass::Os => "OSError",
            ErrorClass::Permission => "PermissionError",
            ErrorClass::NotFound => "FileNotFoundError",
            ErrorClass::FileExists => "FileExistsError",
            ErrorClass::Timeout => "TimeoutError",
            ErrorClass::Value => "ValueError",
            ErrorClass::JsonDecode => "json.decoder.JSONDecodeError",
            ErrorClass::UnicodeDecode => "UnicodeDecodeError",
            ErrorClass::Runtime => "RuntimeError",
            ErrorClass::Recursion => "RecursionError",
            ErrorClass::OwnershipLost => "update_runner.UpdateOwnershipLostError",
            ErrorClass::TarRead => "tarfile.ReadError",
            ErrorClass::Syntax => "SyntaxError",
            ErrorClass::Indentation => "IndentationError",
            ErrorClass::Tab => "TabError",
        }
    }

    /// Python's `issubclass(self, base)` among these classes: a seed's
    /// `except ValueError` also catches a `JSONDecodeError`, and callers branch
    /// the way it does.
    pub fn is_a(self, base: ErrorClass) -> bool {
        let parent = match self {
            ErrorClass::Permission
            | ErrorClass::NotFound
            | ErrorClass::FileExists
            | ErrorClass::Timeout => Some(ErrorClass::Os),
            ErrorClass::JsonDecode | ErrorClass::UnicodeDecode => Some(ErrorClass::Value),
            ErrorClass::Recursion | ErrorClass::OwnershipLost => Some(ErrorClass::Runtime),
            ErrorClass::Indentation => Some(ErrorClass::Syntax),
            ErrorClass::Tab => Some(ErrorClass::Indentation),
            ErrorClass::Os
            | ErrorClass::Value
            | ErrorClass::Runtime
            | ErrorClass::TarRead
            | ErrorClass::Syntax => None,
        };
        self == base || parent.is_some_and(|parent| parent.is_a(base))
    }
}

/// An error with the seed's message and exception class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    class: ErrorClass,
    message: String,
    errno: Option<i32>,
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A `ValueError` with the seed's exact message.
    pub fn value(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Value, message)
    }

    /// A `RuntimeError` with the seed's exact message.
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

    /// An error of any class with a message.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Error {
            class,
            message: message.into(),
            errno: None,
        }
    }

    /// A raw OS error about `path`, classified as Python classifies errno values
    /// and worded like Python's `str(OSError)`: `[Errno 2] No such file or directory: '/x'`.
    pub fn from_io_path(err: &io::Error, path: &Path) -> Self {
        let mut error = Self::from(clone_io(err));
        error.message = format!("{}: '{}'", error.message, path.display());
        error
    }

    /// A raw OS error from an errno value, about `path`.
    pub fn from_errno(errno: rustix::io::Errno, path: &Path) -> Self {
        Self::from_io_path(&io::Error::from_raw_os_error(errno.raw_os_error()), path)
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

    /// `isinstance(error, base)`: the error's class is `base` or one of its
    /// subclasses.
    pub fn is_a(&self, base: ErrorClass) -> bool {
        self.class.is_a(base)
    }

    /// The one line a helper prints on stderr before exiting 1: the same text as
    /// the last line of the Python traceback (`RuntimeError: message`).
    pub fn python_line(&self) -> String {
        format!("{}: {}", self.class.python_name(), self.message)
    }
}

/// The prefix std puts before `gai_strerror` text when a host lookup fails.
const LOOKUP_FAILURE_PREFIX: &str = "failed to lookup address information: ";

/// glibc's `gai_strerror` texts and their `EAI_*` codes, which Python shows as
/// `socket.gaierror` (`[Errno -2] Name or service not known`).
const GAI_ERRORS: [(i32, &str); 12] = [
    (-1, "Bad value for ai_flags"),
    (-2, "Name or service not known"),
    (-3, "Temporary failure in name resolution"),
    (-4, "Non-recoverable failure in name resolution"),
    (-5, "No address associated with hostname"),
    (-6, "ai_family not supported"),
    (-7, "ai_socktype not supported"),
    (-8, "Servname not supported for ai_socktype"),
    (-9, "Address family for hostname not supported"),
    (-10, "Memory allocation failure"),
    (-11, "System error"),
    (-12, "Argument buffer overflow"),
];

impl Error {
    /// A failed socket operation worded as Python's socket layer raises it:
    /// a deadline is `TimeoutError('timed out')`, a failed host lookup is
    /// `socket.gaierror`, anything else the `OSError` of its errno. Status rows
    /// carry this text, so operators see the seed's words.
    pub fn from_socket(err: io::Error) -> Self {
        if matches!(
            err.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) {
            return Error::new(ErrorClass::Timeout, "timed out");
        }
        if err.raw_os_error().is_none() {
            let text = err.to_string();
            if let Some(detail) = text.strip_prefix(LOOKUP_FAILURE_PREFIX) {
                return Error::new(
                    ErrorClass::Os,
                    match GAI_ERRORS.iter().find(|(_, known)| *known == detail) {
                        Some((code, _)) => format!("[Errno {code}] {detail}"),
                        None => detail.to_string(),
                    },
                );
            }
        }
        Error::from(err)
    }

    /// True when `err` ended a request before any byte reached the server
    /// (host lookup, connect): the failures urllib wraps in `URLError`.
    pub fn is_connect_failure(err: &io::Error) -> bool {
        let lookup =
            err.raw_os_error().is_none() && err.to_string().starts_with(LOOKUP_FAILURE_PREFIX);
        // std's connect_timeout reports its deadline without an errno; a read
        // deadline carries EAGAIN.
        let connect_deadline =
            err.kind() == io::ErrorKind::TimedOut && err.raw_os_error().is_none();
        lookup
            || connect_deadline
            || matches!(
                err.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
                    | io::ErrorKind::NetworkDown
                    | io::ErrorKind::AddrNotAvailable
            )
    }

    /// urllib's `URLError` around this error: `<urlopen error [Errno 111]
    /// Connection refused>`, a plain `OSError` without an errno of its own.
    pub fn into_url_error(self) -> Self {
        Error::new(ErrorClass::Os, format!("<urlopen error {}>", self.message))
    }
}

fn clone_io(err: &io::Error) -> io::Error {
    match err.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(err.kind(), err.to_string()),
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        let Some(code) = err.raw_os_error() else {
            let class = if err.kind() == io::ErrorKind::TimedOut {
                ErrorClass::Timeout
            } else {
                ErrorClass::Os
            };
            return Error::new(class, err.to_string());
        };
        let class = match rustix::io::Errno::from_raw_os_error(code) {
            rustix::io::Errno::NOENT => ErrorClass::NotFound,
            rustix::io::Errno::EXIST => ErrorClass::FileExists,
            rustix::io::Errno::ACCESS | rustix::io::Errno::PERM => ErrorClass::Permission,
            rustix::io::Errno::TIMEDOUT | rustix::io::Errno::AGAIN => ErrorClass::Timeout,
            _ => ErrorClass::Os,
        };
        let text = io::Error::from_raw_os_error(code).to_string();
        // Rust renders "No such file or directory (os error 2)"; Python renders
        // "[Errno 2] No such file or directory".
        let text = text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string();
        Error {
            class,
            message: format!("[Errno {code}] {text}"),
            errno: Some(code),
        }
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(errno: rustix::io::Errno) -> Self {
        Error::from(io::Error::from_raw_os_error(errno.raw_os_error()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_like_python() {
        let err = Error::from_io_path(&io::Error::from_raw_os_error(2), Path::new("/missing"));
        assert_eq!(err.class(), ErrorClass::NotFound);
        assert_eq!(
            err.python_line(),
            "FileNotFoundError: [Errno 2] No such file or directory: '/missing'"
        );
        let err = Error::from(io::Error::from_raw_os_error(40));
        assert_eq!(err.class(), ErrorClass::Os);
        assert_eq!(err.errno(), Some(40));
        assert!(err.is_os_error());
        assert!(!Error::value("x").is_os_error());
    }

    #[test]
    fn subclasses_are_caught_by_their_bases_as_in_python() {
        let decode = Error::new(
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
        assert!(ErrorClass::OwnershipLost.is_a(ErrorClass::Runtime));
        assert!(ErrorClass::NotFound.is_a(ErrorClass::Os));
        assert!(!ErrorClass::Os.is_a(ErrorClass::NotFound));
        assert!(!ErrorClass::TarRead.is_a(ErrorClass::Value));
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
            Error::new(
                ErrorClass::Tab,
                "inconsistent use of tabs and spaces in indentation"
            )
            .python_line(),
            "TabError: inconsistent use of tabs and spaces in indentation"
        );
        assert_eq!(
            Error::new(ErrorClass::Indentation, "unexpected indent").python_line(),
            "IndentationError: unexpected indent"
        );
        assert_eq!(ErrorClass::Syntax.python_name(), "SyntaxError");
    }

    #[test]
    fn socket_errors_read_like_python_and_urllib() {
        // std's own wording of a failed lookup, as minreq passes it on.
        let lookup = || {
            io::Error::other(format!(
                "{LOOKUP_FAILURE_PREFIX}Temporary failure in name resolution"
            ))
        };
        assert!(Error::is_connect_failure(&lookup()));
        assert_eq!(
            Error::from_socket(lookup()).into_url_error().python_line(),
            "OSError: <urlopen error [Errno -3] Temporary failure in name resolution>"
        );
        let refused = io::Error::from_raw_os_error(111);
        assert!(Error::is_connect_failure(&refused));
        assert_eq!(
            Error::from_socket(refused).into_url_error().message(),
            "<urlopen error [Errno 111] Connection refused>"
        );
        // Once connected: a read deadline (EAGAIN) and a reset stay raw.
        let read_deadline = io::Error::from_raw_os_error(11);
        assert!(!Error::is_connect_failure(&read_deadline));
        assert_eq!(
            Error::from_socket(read_deadline).python_line(),
            "TimeoutError: timed out"
        );
        let reset = io::Error::from_raw_os_error(104);
        assert!(!Error::is_connect_failure(&reset));
        assert_eq!(
            Error::from_socket(reset).message(),
            "[Errno 104] Connection reset by peer"
        );
        // connect_timeout's own deadline has no errno.
        let connect_deadline = io::Error::new(io::ErrorKind::TimedOut, "connection timed out");
        assert!(Error::is_connect_failure(&connect_deadline));
        assert_eq!(
            Error::from_socket(connect_deadline)
                .into_url_error()
                .message(),
            "<urlopen error timed out>"
        );
    }
}

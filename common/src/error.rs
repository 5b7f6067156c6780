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
    /// `ValueError` (including `json.JSONDecodeError` and `UnicodeDecodeError`).
    Value,
    /// `RuntimeError`.
    Runtime,
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
            ErrorClass::Runtime => "RuntimeError",
        }
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
        matches!(
            self.class,
            ErrorClass::Os
                | ErrorClass::Permission
                | ErrorClass::NotFound
                | ErrorClass::FileExists
                | ErrorClass::Timeout
        )
    }

    /// The one line a helper prints on stderr before exiting 1: the same text as
    /// the last line of the Python traceback (`RuntimeError: message`).
    pub fn python_line(&self) -> String {
        format!("{}: {}", self.class.python_name(), self.message)
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
}

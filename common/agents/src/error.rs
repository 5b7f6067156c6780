//! The helpers' error: the Python exception the original raises
//! ([`python_compat::Exception`]), so callers branch on its class as the
//! originals do and the one line a helper prints is the original's traceback line.
//!
//! Python's own rules (classes, `isinstance`, `str(OSError)`) live with the
//! exception; this type adds what callers branch on beyond the Python class:
//! an [`ErrorKind`], so no caller reads the message to decide what happened.

use std::fmt;
use std::io;
use std::path::Path;

use python_compat::{ErrorClass, Exception};

/// An error with the original's message and exception class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    exception: Exception,
    kind: Option<ErrorKind>,
}

/// A condition a caller branches on, beyond the Python class. The message
/// (and so the printed line) stays the original's; the kind only names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The service manager is starting or stopping a job (`native service
    /// is transitioning; retry after it settles`): retrying later may pass.
    ServiceTransitioning,
    /// An activation journal (install.sh's or execution-manage's) owns the
    /// installation, so handoff recovery must wait for it.
    ActivationOwnsRecovery,
    /// An uninstall intent owns the installation's execution recovery.
    UninstallOwnsRecovery,
}

/// Result alias used throughout the helpers.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A `ValueError` with the original's exact message.
    pub fn value(message: impl Into<String>) -> Self {
        Exception::value(message).into()
    }

    /// A `RuntimeError` with the original's exact message.
    pub fn runtime(message: impl Into<String>) -> Self {
        Exception::runtime(message).into()
    }

    /// A `PermissionError` raised by an ownership or mode check (no errno).
    pub fn permission(message: impl Into<String>) -> Self {
        Exception::permission(message).into()
    }

    /// A `FileExistsError` raised with a message (no errno).
    pub fn file_exists(message: impl Into<String>) -> Self {
        Exception::file_exists(message).into()
    }

    /// An error of any class with a message.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Exception::new(class, message).into()
    }

    /// A raw OS error about `path`, classified and worded as Python's
    /// `OSError` ([`Exception::from_io_path`]).
    pub fn from_io_path(err: &io::Error, path: &Path) -> Self {
        Exception::from_io_path(err, path).into()
    }

    /// A raw OS error from an errno value, about `path`.
    pub fn from_errno(errno: rustix::io::Errno, path: &Path) -> Self {
        Exception::from_errno(errno, path).into()
    }

    /// A raw OS error from an errno value, about two paths (`'from' -> 'to'`).
    pub fn from_errno_paths(errno: rustix::io::Errno, from: &Path, to: &Path) -> Self {
        Exception::from_errno_paths(errno, from, to).into()
    }

    /// The same error, naming the condition callers branch on.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// The condition this error names, when a caller may branch on it.
    pub fn kind(&self) -> Option<ErrorKind> {
        self.kind
    }

    /// The Python exception the original raises.
    pub fn exception(&self) -> &Exception {
        &self.exception
    }

    /// The Python exception class.
    pub fn class(&self) -> ErrorClass {
        self.exception.class()
    }

    /// The message without the class name (Python's `str(exc)`).
    pub fn message(&self) -> &str {
        self.exception.message()
    }

    /// The errno of a raw OS error, if there was one.
    pub fn errno(&self) -> Option<i32> {
        self.exception.errno()
    }

    /// True for `FileNotFoundError`, the only error `_snapshot` treats as "absent".
    pub fn is_not_found(&self) -> bool {
        self.exception.is_not_found()
    }

    /// True for every class that is an `OSError` in Python.
    pub fn is_os_error(&self) -> bool {
        self.exception.is_os_error()
    }

    /// `isinstance(error, base)`: the error's class is `base` or one of its
    /// subclasses.
    pub fn is_a(&self, base: ErrorClass) -> bool {
        self.exception.is_a(base)
    }

    /// The one line a helper prints on stderr before exiting 1: the same text as
    /// the last line of the Python traceback (`RuntimeError: message`).
    pub fn python_line(&self) -> String {
        self.exception.python_line()
    }
}

impl From<Exception> for Error {
    fn from(exception: Exception) -> Self {
        Error {
            exception,
            kind: None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Exception::from(err).into()
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(errno: rustix::io::Errno) -> Self {
        Exception::from(errno).into()
    }
}

impl AsRef<Exception> for Error {
    fn as_ref(&self) -> &Exception {
        &self.exception
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.exception, f)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_answer_as_the_exception_they_wrap() {
        let raw = io::Error::from_raw_os_error(2);
        let path = Path::new("/missing");
        let (err, exception) = (
            Error::from_io_path(&raw, path),
            Exception::from_io_path(&raw, path),
        );
        assert_eq!(err.exception(), &exception);
        assert_eq!(
            (err.class(), err.message(), err.errno(), err.python_line()),
            (
                exception.class(),
                exception.message(),
                exception.errno(),
                exception.python_line()
            )
        );
        assert!(err.is_not_found() && err.is_os_error() && err.is_a(ErrorClass::Os));
        assert_eq!(err.to_string(), exception.to_string());
        assert_eq!(Error::value("bad").exception(), &Exception::value("bad"));
    }

    #[test]
    fn a_kind_names_the_condition_without_changing_the_line() {
        let plain = Error::runtime("native service is transitioning; retry after it settles");
        let kinded = plain.clone().with_kind(ErrorKind::ServiceTransitioning);
        assert_eq!(plain.kind(), None);
        assert_eq!(kinded.kind(), Some(ErrorKind::ServiceTransitioning));
        assert_eq!(kinded.python_line(), plain.python_line());
        assert_eq!(kinded.exception(), plain.exception());
    }
}

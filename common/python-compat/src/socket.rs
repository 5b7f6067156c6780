//! A failed socket operation as Python's `socket` module raises it, and as
//! `urllib` wraps it in `URLError`: the status rows carry these words, so
//! operators see the original's.

use std::io;

use crate::exception::{ErrorClass, Exception};

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

impl Exception {
    /// A failed socket operation worded as Python's socket layer raises it:
    /// a deadline is `TimeoutError('timed out')`, a failed host lookup is
    /// `socket.gaierror`, anything else the `OSError` of its errno.
    pub fn from_socket(err: io::Error) -> Self {
        if matches!(
            err.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ) {
            return Exception::new(ErrorClass::Timeout, "timed out");
        }
        if err.raw_os_error().is_none() {
            let text = err.to_string();
            if let Some(detail) = text.strip_prefix(LOOKUP_FAILURE_PREFIX) {
                return Exception::new(
                    ErrorClass::Os,
                    match GAI_ERRORS.iter().find(|(_, known)| *known == detail) {
                        Some((code, _)) => format!("[Errno {code}] {detail}"),
                        None => detail.to_string(),
                    },
                );
            }
        }
        Exception::from(err)
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

    /// urllib's `URLError` around this exception: `<urlopen error [Errno 111]
    /// Connection refused>`, a plain `OSError` without an errno of its own.
    pub fn into_url_error(self) -> Self {
        Exception::new(
            ErrorClass::Os,
            format!("<urlopen error {}>", self.message()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_errors_read_like_python_and_urllib() {
        // std's own wording of a failed lookup, as minreq passes it on.
        let lookup = || {
            io::Error::other(format!(
                "{LOOKUP_FAILURE_PREFIX}Temporary failure in name resolution"
            ))
        };
        assert!(Exception::is_connect_failure(&lookup()));
        assert_eq!(
            Exception::from_socket(lookup())
                .into_url_error()
                .python_line(),
            "OSError: <urlopen error [Errno -3] Temporary failure in name resolution>"
        );
        let refused = io::Error::from_raw_os_error(111);
        assert!(Exception::is_connect_failure(&refused));
        assert_eq!(
            Exception::from_socket(refused).into_url_error().message(),
            "<urlopen error [Errno 111] Connection refused>"
        );
        // Once connected: a read deadline (EAGAIN) and a reset stay raw.
        let read_deadline = io::Error::from_raw_os_error(11);
        assert!(!Exception::is_connect_failure(&read_deadline));
        assert_eq!(
            Exception::from_socket(read_deadline).python_line(),
            "TimeoutError: timed out"
        );
        let reset = io::Error::from_raw_os_error(104);
        assert!(!Exception::is_connect_failure(&reset));
        assert_eq!(
            Exception::from_socket(reset).message(),
            "[Errno 104] Connection reset by peer"
        );
        // connect_timeout's own deadline has no errno.
        let connect_deadline = io::Error::new(io::ErrorKind::TimedOut, "connection timed out");
        assert!(Exception::is_connect_failure(&connect_deadline));
        assert_eq!(
            Exception::from_socket(connect_deadline)
                .into_url_error()
                .message(),
            "<urlopen error timed out>"
        );
    }
}

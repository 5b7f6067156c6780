//! A failed socket operation as Python's `socket` module raises it, and as
//! `urllib` wraps it in `URLError`: the status rows carry these words, so
//! operators see the original's.

use std::io;

use crate::exception::{ErrorClass, Exception};

/// A failed host lookup: `getaddrinfo`'s `EAI_*` code, which Python raises
/// as `socket.gaierror` (`[Errno -2] Name or service not known`, the text
/// `gai_strerror` gives on this host). Carried inside an `io::Error` so the
/// socket layer's callers keep one error type; [`Exception::from_socket`]
/// finds it by type, never by wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupFailure {
    /// The `EAI_*` code `getaddrinfo` returned.
    pub code: i32,
}

impl LookupFailure {
    /// `gai_strerror(code)`, as Python's `socket.gaierror` words it.
    pub fn text(self) -> String {
        // SAFETY: gai_strerror returns a pointer to a static NUL-terminated
        // string for any code.
        let text = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(self.code)) };
        text.to_string_lossy().into_owned()
    }
}

impl std::fmt::Display for LookupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[Errno {}] {}", self.code, self.text())
    }
}

impl std::error::Error for LookupFailure {}

/// `socket.getaddrinfo(host, port, 0, SOCK_STREAM)`: the addresses to try in
/// order. A failed lookup is an `io::Error` holding a [`LookupFailure`]
/// (`EAI_SYSTEM` is the errno's own error, as CPython raises it).
pub fn getaddrinfo(host: &str, port: u16) -> io::Result<Vec<std::net::SocketAddr>> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    let name = std::ffi::CString::new(host)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "embedded null character"))?;
    let service = std::ffi::CString::new(port.to_string()).expect("digits have no NUL");
    // SAFETY: an all-zero addrinfo is a valid hints value.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `list` is freed below.
    let code = unsafe { libc::getaddrinfo(name.as_ptr(), service.as_ptr(), &hints, &mut list) };
    if code == libc::EAI_SYSTEM {
        return Err(io::Error::last_os_error());
    }
    if code != 0 {
        return Err(io::Error::other(LookupFailure { code }));
    }
    let mut addresses = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: `entry` is a node of the list getaddrinfo returned; its
        // ai_addr holds a sockaddr of the length and family it names.
        let info = unsafe { &*entry };
        match info.ai_family {
            libc::AF_INET => {
                // SAFETY: as above, an AF_INET address is a sockaddr_in.
                let raw = unsafe { &*(info.ai_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr));
                addresses.push(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(raw.sin_port),
                )));
            }
            libc::AF_INET6 => {
                // SAFETY: as above, an AF_INET6 address is a sockaddr_in6.
                let raw = unsafe { &*(info.ai_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(raw.sin6_addr.s6_addr);
                addresses.push(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(raw.sin6_port),
                    raw.sin6_flowinfo,
                    raw.sin6_scope_id,
                )));
            }
            _ => {}
        }
        entry = info.ai_next;
    }
    // SAFETY: `list` came from a successful getaddrinfo and is freed once.
    unsafe { libc::freeaddrinfo(list) };
    Ok(addresses)
}

/// The lookup failure an `io::Error` carries, if it is one.
fn lookup_failure(err: &io::Error) -> Option<LookupFailure> {
    err.get_ref()?.downcast_ref::<LookupFailure>().copied()
}

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
        if let Some(failure) = lookup_failure(&err) {
            return Exception::new(ErrorClass::Os, failure.to_string());
        }
        Exception::from(err)
    }

    /// True when `err` ended a request before any byte reached the server
    /// (host lookup, connect): the failures urllib wraps in `URLError`.
    pub fn is_connect_failure(err: &io::Error) -> bool {
        let lookup = lookup_failure(err).is_some();
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
        // EAI_AGAIN, as getaddrinfo reports a resolver it cannot reach.
        let lookup = || {
            io::Error::other(LookupFailure {
                code: libc::EAI_AGAIN,
            })
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

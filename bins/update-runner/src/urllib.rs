//! One HTTP/1.1 GET as `urllib.request.urlopen` performs it, over TCP or TLS,
//! for the release host and the server's health endpoint: straight to the
//! host or through the proxy the environment names ([`crate::proxy`]; the
//! health endpoint is always reached directly), see [`connect`].
//!
//! The original reads every response through `http.client`, whose limits and
//! error words reach the status row the server shows; the response is read
//! by [`python_compat::http_client`], over a stream whose every read is
//! bounded by what remains of the request's deadline.
//!
//! Stricter than urllib (docs/design/security.md): the whole request shares one
//! deadline, so a peer that trickles a byte every few seconds cannot keep a
//! download or a health probe open for ever; and a header value with a
//! control character is refused before anything is sent, without repeating
//! the value (urllib echoes it, a credential included).

mod connect;
mod tls;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::proxy::{self, ProxyEnvironment, RequestScheme, Route};
use agents_common::Error;
use python_compat::http_client::{self, host_port, read_response, LineReader, ReadFailure};
use python_compat::{ErrorClass, Exception, PythonInt};

/// Why a request failed, in the three ways urllib lets failures through.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Connecting or sending failed: urllib wraps it in `URLError`
    /// (`<urlopen error [Errno 111] Connection refused>`).
    Connect(io::Error),
    /// The socket failed while the response was read (raw `OSError`).
    Socket(io::Error),
    /// `http.client` refused the response (`BadStatusLine`, `LineTooLong`,
    /// `HTTPException`, `IncompleteRead`), or the request was refused before
    /// it was sent: the exception as Python words it.
    Protocol(Error),
}

impl Failure {
    /// The exception the original's `except` sees, worded as Python words it.
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Connect(error) => Exception::from_socket(error).into_url_error().into(),
            Failure::Socket(error) => Exception::from_socket(error).into(),
            Failure::Protocol(error) => error,
        }
    }
}

impl From<Exception> for Failure {
    fn from(exception: Exception) -> Self {
        Failure::Protocol(exception.into())
    }
}

impl From<ReadFailure> for Failure {
    fn from(failure: ReadFailure) -> Self {
        match failure {
            ReadFailure::Socket(error) => Failure::Socket(error),
            ReadFailure::Protocol(exception) => exception.into(),
        }
    }
}

/// The response of [`get`], read as `http.client` reads it.
pub(crate) type Response = http_client::Response<Deadlined<Stream>>;

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

/// Where a URL points: `http` or `https`, the host, the port and the
/// request target (`path?query`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    tls: bool,
    host: String,
    /// `int()` of the URL's port, any size, as http.client keeps it.
    port: PythonInt,
    selector: String,
}

impl Target {
    /// `urllib.parse.urlsplit` for the absolute `http`/`https` URLs the
    /// runner fetches.
    fn parse(url: &str) -> Result<Target, Failure> {
        let unknown = || Failure::Protocol(Error::value(format!("unknown url type: {url:?}")));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(unknown());
        };
        let rest = rest.split('#').next().unwrap_or("");
        let (authority, selector) = match rest.find(['/', '?']) {
            Some(index) if rest[index..].starts_with('?') => {
                (&rest[..index], format!("/{}", &rest[index..]))
            }
            Some(index) => (&rest[..index], rest[index..].to_string()),
            None => (rest, "/".to_string()),
        };
        let authority = authority.rsplit('@').next().unwrap_or("");
        let (host, port) = host_port(authority, if tls { 443 } else { 80 })?;
        if host.is_empty() {
            return Err(Failure::Protocol(Error::new(
                ErrorClass::Os,
                "no host given",
            )));
        }
        Ok(Target {
            tls,
            host,
            port,
            selector,
        })
    }

    /// The `Host` header: the port only when it is not the scheme's default.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        if self.port == PythonInt::Small(default) {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// How urllib's `ProxyHandler` sends a request to this URL under
    /// `routing`.
    fn route(&self, url: &str, routing: Routing) -> Result<Route, Failure> {
        match routing {
            Routing::Direct => Ok(Route::Direct),
            Routing::Environment => {
                let scheme = if self.tls {
                    RequestScheme::Https
                } else {
                    RequestScheme::Http
                };
                ProxyEnvironment::of_process()
                    .route(scheme, &proxy::request_host(url))
                    .map_err(Failure::Protocol)
            }
        }
    }
}

/// Whether a request may go through a proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routing {
    /// As urllib routes it: the `*_proxy` environment decides (release hosts).
    Environment,
    /// Never through a proxy (the server's own loopback endpoints).
    Direct,
}

/// The connection: plain TCP, or TLS verified against the system trust
/// store (see [`tls`]).
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tls::TlsStream>),
}

/// A stream over one TCP socket, whose timeouts bound each read and write.
trait OverTcp: Read {
    fn socket(&self) -> &TcpStream;
}

impl OverTcp for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl OverTcp for Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(socket) => socket,
            Stream::Tls(stream) => &stream.sock,
        }
    }
}

/// A stream each read of which waits at most for what remains of the
/// request's one deadline: a peer that trickles bytes cannot hold it open.
pub(crate) struct Deadlined<S> {
    stream: S,
    deadline: Instant,
}

impl<S: OverTcp> Read for Deadlined<S> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let timeout = remaining(self.deadline)?;
        self.stream.socket().set_read_timeout(Some(timeout))?;
        self.stream.read(buffer).map_err(|error| {
            if error.kind() == io::ErrorKind::WouldBlock {
                timed_out()
            } else {
                error
            }
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(socket) => socket.read(buffer),
            Stream::Tls(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(socket) => socket.write(buffer),
            Stream::Tls(stream) => stream.write(buffer),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(socket) => socket.flush(),
            Stream::Tls(stream) => stream.flush(),
        }
    }
}

/// What remains of the request's one deadline, as a socket timeout; an
/// elapsed deadline is a `TimeoutError`.
fn remaining(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
        .ok_or_else(timed_out)
}

/// `GET url` with `headers` (after `Host` and `Accept-Encoding: identity`,
/// before `Connection: close`), sent along the route `routing` allows, the
/// whole exchange bounded by `deadline`; returns the response once its
/// status line and headers are read, whatever the status.
pub(crate) fn get(
    url: &str,
    headers: &[(&str, &str)],
    deadline: Instant,
    routing: Routing,
) -> Result<Response, Failure> {
    let target = Target::parse(url)?;
    for (name, value) in headers {
        // Stricter than http.client, which refuses only an unfolded CR or LF
        // and echoes the value (a credential) in its message.
        if value.bytes().any(|byte| byte < 0x20 || byte == 0x7f) {
            return Err(Failure::Protocol(Error::value(format!(
                "Invalid header value for {name}: it contains control characters"
            ))));
        }
    }
    let route = target.route(url, routing)?;
    let connection = connect::open(url, &target, &route, deadline)?;
    let reader = send(connection, &target, headers, deadline)?;
    Ok(read_response(reader)?)
}

/// Write the request on `connection`: the proxy's credentials, when it
/// needs them, after the caller's headers, as urllib orders them.
fn send(
    connection: connect::Connection,
    target: &Target,
    headers: &[(&str, &str)],
    deadline: Instant,
) -> Result<LineReader<Deadlined<Stream>>, Failure> {
    let mut request = format!(
        "GET {} HTTP/1.1\r\nAccept-Encoding: identity\r\nHost: {}\r\n",
        connection.request_target,
        target.host_header()
    );
    let proxy_authorization = connection.proxy_authorization.as_deref();
    let proxy_header = proxy_authorization.map(|value| ("Proxy-Authorization", value));
    for (name, value) in headers.iter().copied().chain(proxy_header) {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    let mut stream = connection.stream;
    let timeout = remaining(deadline).map_err(Failure::Connect)?;
    let socket = stream.socket();
    socket
        .set_write_timeout(Some(timeout))
        .and_then(|()| socket.set_read_timeout(Some(timeout)))
        .map_err(Failure::Connect)?;
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(Failure::Connect)?;
    Ok(LineReader::new(Deadlined { stream, deadline }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_split_as_urlsplit_splits_them() {
        let target = Target::parse("https://github.com/a/b?per_page=100#x").unwrap();
        assert_eq!(
            target,
            Target {
                tls: true,
                host: "github.com".into(),
                port: PythonInt::Small(443),
                selector: "/a/b?per_page=100".into()
            }
        );
        assert_eq!(target.host_header(), "github.com");
        let local = Target::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (local.port.clone(), local.selector.as_str()),
            (PythonInt::Small(8080), "/")
        );
        assert_eq!(local.host_header(), "127.0.0.1:8080");
        let v6 = Target::parse("http://[::1]:9/x").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.port.clone()),
            ("::1", PythonInt::Small(9))
        );
        assert_eq!(v6.host_header(), "[::1]:9");
        assert!(Target::parse("ftp://x/").is_err());
        assert!(Target::parse("http://x:port/").is_err());
    }
}

//! One HTTP/1.1 GET as `urllib.request.urlopen` performs it, over TCP or TLS,
//! for the release host and the server's health endpoint: straight to the
//! host or through the proxy the environment names ([`crate::proxy`]; the
//! health endpoint is always reached directly), see [`connect`].
//!
//! The seed reads every response through `http.client`, and its limits and
//! error texts reach the status row the server shows: a status line over
//! 65536 bytes (`got more than 65536 bytes when reading status line`), more
//! than 100 header lines (`got more than 100 headers`), a Content-Length that
//! is not an int or negative (ignored: the body then ends with the
//! connection), a reason phrase in any bytes (decoded as latin-1), a bad
//! chunk size (`IncompleteRead(0 bytes read)`). This reader applies exactly
//! those rules, and never holds more than the caller asks to read.
//!
//! Stricter than urllib (README, "Security"): the whole request shares one
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
use python_compat::{ErrorClass, Exception, PythonInt};

/// `http.client._MAXLINE`: the longest status, header, chunk-size or
/// trailer line.
const MAX_LINE: usize = 65_536;
/// `http.client._MAXHEADERS`: header lines counted with the blank one.
const MAX_HEADERS: usize = 100;
/// Bytes asked of the socket at a time.
const READ_CHUNK: usize = 64 * 1024;

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
    /// The exception the seed's `except` sees, worded as Python words it.
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Connect(error) => Exception::from_socket(error).into_url_error().into(),
            Failure::Socket(error) => Exception::from_socket(error).into(),
            Failure::Protocol(error) => error,
        }
    }
}

fn protocol(message: impl Into<String>) -> Failure {
    Failure::Protocol(Error::new(ErrorClass::Os, message))
}

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
        let (host, port) = connect::host_port(authority, if tls { 443 } else { 80 })?;
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
enum Stream {
    Plain(TcpStream),
    Tls(Box<tls::TlsStream>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(socket) => socket,
            Stream::Tls(stream) => &stream.sock,
        }
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

/// An open response whose status is known and whose body has not been read.
pub(crate) struct Response {
    /// The status code.
    pub(crate) code: u16,
    /// The reason phrase, latin-1 decoded and stripped (`response.reason`).
    pub(crate) reason: String,
    /// The header lines in order, latin-1 decoded, names as sent.
    headers: Vec<(String, String)>,
    body: Body,
    reader: LineReader,
}

/// How the body ends (`HTTPResponse.length` / `chunked`).
enum Body {
    /// `Content-Length` bytes remain.
    Length(u64),
    /// Chunked: `None` before the next chunk-size line, `Some(0)` once the
    /// last chunk and the trailer are read.
    Chunked { left: Option<u64>, done: bool },
    /// The body ends when the server closes the connection.
    UntilClose,
}

impl Response {
    /// The first value of header `name`, case-insensitively
    /// (`response.headers.get(name)`).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Every header line, in order.
    pub(crate) fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// `response.read(amount)` into `sink`: at most `amount` bytes, fewer when
    /// the body ends first; a broken chunk is `IncompleteRead`, as in
    /// `http.client`. Returns the number of bytes written.
    pub(crate) fn read(&mut self, amount: u64, sink: &mut dyn Write) -> Result<u64, Failure> {
        match &mut self.body {
            Body::Length(left) => {
                let wanted = amount.min(*left);
                let copied = self.reader.copy(wanted, sink)?;
                *left -= copied;
                Ok(copied)
            }
            Body::UntilClose => self.reader.copy(amount, sink),
            Body::Chunked { .. } => self.read_chunked(amount, sink),
        }
    }

    /// `_read_chunked(amt)`.
    fn read_chunked(&mut self, mut amount: u64, sink: &mut dyn Write) -> Result<u64, Failure> {
        let mut total = 0u64;
        let incomplete = |total: u64| protocol(format!("IncompleteRead({total} bytes read)"));
        loop {
            let Body::Chunked { left, done } = &mut self.body else {
                unreachable!("a chunked body");
            };
            if *done {
                return Ok(total);
            }
            let chunk_left = match *left {
                Some(chunk_left) if chunk_left > 0 => chunk_left,
                previous => {
                    // `_get_chunk_left`: the CRLF after a finished chunk,
                    // then the next size line.
                    if previous == Some(0) && self.reader.exact(2).is_err() {
                        return Err(incomplete(total));
                    }
                    let line = self.reader.line("chunk size")?;
                    let size_text = line.split(|byte| *byte == b';').next().unwrap_or(&[]);
                    let size = std::str::from_utf8(size_text)
                        .ok()
                        .and_then(python_compat::int_hex)
                        .filter(|size| *size >= 0)
                        .and_then(|size| u64::try_from(size).ok());
                    let Some(size) = size else {
                        return Err(incomplete(total));
                    };
                    if size == 0 {
                        // `_read_and_discard_trailer`.
                        loop {
                            let trailer = self.reader.line("trailer line")?;
                            if matches!(trailer.as_slice(), b"\r\n" | b"\n" | b"") {
                                break;
                            }
                        }
                        *done = true;
                        *left = Some(0);
                        return Ok(total);
                    }
                    *left = Some(size);
                    size
                }
            };
            let wanted = amount.min(chunk_left);
            let copied = self.reader.copy(wanted, sink)?;
            total += copied;
            if copied < wanted {
                return Err(incomplete(total));
            }
            let Body::Chunked { left, .. } = &mut self.body else {
                unreachable!("a chunked body");
            };
            *left = Some(chunk_left - copied);
            amount -= copied;
            if amount == 0 {
                return Ok(total);
            }
        }
    }
}

/// A buffered reader over the connection that honours the deadline and
/// never buffers more than one socket read beyond what was asked.
struct LineReader {
    stream: Stream,
    buffer: Vec<u8>,
    start: usize,
    deadline: Instant,
}

impl LineReader {
    fn new(stream: Stream, deadline: Instant) -> Self {
        LineReader {
            stream,
            buffer: Vec::new(),
            start: 0,
            deadline,
        }
    }

    /// The connection back; bytes read but not consumed are dropped.
    fn into_stream(self) -> Stream {
        self.stream
    }

    fn buffered(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    /// One more socket read into the buffer; false at end of stream.
    fn fill(&mut self) -> Result<bool, Failure> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            let timeout = remaining(self.deadline).map_err(Failure::Socket)?;
            self.stream
                .socket()
                .set_read_timeout(Some(timeout))
                .map_err(Failure::Socket)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(count) => {
                    self.buffer.extend_from_slice(&chunk[..count]);
                    return Ok(true);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Failure::Socket(timed_out()))
                }
                Err(error) => return Err(Failure::Socket(error)),
            }
        }
    }

    /// `fp.readline(_MAXLINE + 1)`: one line with its `\n`, or what remains
    /// at end of stream; longer than `_MAXLINE` is `LineTooLong(what)`.
    fn line(&mut self, what: &str) -> Result<Vec<u8>, Failure> {
        let mut scanned = 0;
        loop {
            let available = self.buffered();
            if let Some(end) = available[scanned..].iter().position(|byte| *byte == b'\n') {
                let length = scanned + end + 1;
                if length > MAX_LINE {
                    return Err(protocol(format!(
                        "got more than {MAX_LINE} bytes when reading {what}"
                    )));
                }
                let line = available[..length].to_vec();
                self.start += length;
                return Ok(line);
            }
            scanned = available.len();
            if scanned > MAX_LINE {
                return Err(protocol(format!(
                    "got more than {MAX_LINE} bytes when reading {what}"
                )));
            }
            if !self.fill()? {
                let line = self.buffered().to_vec();
                self.start = self.buffer.len();
                return Ok(line);
            }
        }
    }

    /// Exactly `count` bytes (`_safe_read`), or an error at end of stream.
    fn exact(&mut self, count: usize) -> Result<Vec<u8>, Failure> {
        while self.buffered().len() < count {
            if !self.fill()? {
                return Err(protocol("IncompleteRead(0 bytes read)"));
            }
        }
        let data = self.buffered()[..count].to_vec();
        self.start += count;
        Ok(data)
    }

    /// Up to `count` bytes into `sink`; fewer when the stream ends.
    fn copy(&mut self, count: u64, sink: &mut dyn Write) -> Result<u64, Failure> {
        let mut copied = 0u64;
        while copied < count {
            if self.buffered().is_empty() && !self.fill()? {
                break;
            }
            let available = self.buffered();
            let take = usize::try_from(count - copied)
                .unwrap_or(usize::MAX)
                .min(available.len());
            sink.write_all(&available[..take])
                .map_err(|error| Failure::Protocol(Error::from(error)))?;
            self.start += take;
            copied += take as u64;
        }
        Ok(copied)
    }
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
    read_response(reader)
}

/// Write the request on `connection`: the proxy's credentials, when it
/// needs them, after the caller's headers, as urllib orders them.
fn send(
    connection: connect::Connection,
    target: &Target,
    headers: &[(&str, &str)],
    deadline: Instant,
) -> Result<LineReader, Failure> {
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
    Ok(LineReader::new(stream, deadline))
}

/// `HTTPResponse.begin`: the status (a `100 Continue` skipped), the
/// headers, and how the body ends.
fn read_response(mut reader: LineReader) -> Result<Response, Failure> {
    let (code, reason) = loop {
        let (code, reason) = read_status(&mut reader)?;
        if code != 100 {
            break (code, reason);
        }
        // A 100 Continue's own headers are skipped.
        read_header_lines(&mut reader)?;
    };
    let headers = parse_headers(&read_header_lines(&mut reader)?);
    let first = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let chunked =
        first("transfer-encoding").is_some_and(|value| value.eq_ignore_ascii_case("chunked"));
    let length = first("content-length")
        .filter(|value| !value.is_empty() && !chunked)
        .and_then(python_compat::python_int)
        .and_then(|length| u64::try_from(length).ok());
    let body = if code == 204 || code == 304 || (100..200).contains(&code) {
        Body::Length(0)
    } else if chunked {
        Body::Chunked {
            left: None,
            done: false,
        }
    } else {
        match length {
            Some(length) => Body::Length(length),
            None => Body::UntilClose,
        }
    };
    Ok(Response {
        code,
        reason,
        headers,
        body,
        reader,
    })
}

/// `_read_status`: the version, the code and the reason of one status line.
fn read_status(reader: &mut LineReader) -> Result<(u16, String), Failure> {
    let raw = reader.line("status line")?;
    if raw.is_empty() {
        return Err(Failure::Socket(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "Remote end closed connection without response",
        )));
    }
    let line = python_compat::decode_latin1(&raw);
    let bad = || protocol(line.clone());
    let mut words = python_compat::split_max(&line, 2).into_iter();
    let version = words.next().unwrap_or("");
    let status = words.next().unwrap_or("");
    let reason = words.next().unwrap_or("");
    if !version.starts_with("HTTP/") {
        return Err(bad());
    }
    let code = python_compat::python_int(status)
        .filter(|code| (100..=999).contains(code))
        .ok_or_else(bad)?;
    Ok((code as u16, python_compat::strip(reason).to_string()))
}

/// `_read_headers`: the header lines up to and including the blank one,
/// at most `_MAXHEADERS` of them.
fn read_header_lines(reader: &mut LineReader) -> Result<Vec<Vec<u8>>, Failure> {
    let mut lines = Vec::new();
    loop {
        let line = reader.line("header line")?;
        let end = matches!(line.as_slice(), b"\r\n" | b"\n" | b"");
        lines.push(line);
        if lines.len() > MAX_HEADERS {
            return Err(protocol(format!("got more than {MAX_HEADERS} headers")));
        }
        if end {
            return Ok(lines);
        }
    }
}

/// The `email` parser's view of the header block: `Name: value` lines (the
/// value without surrounding white space), continuation lines folded into the
/// previous value, and nothing after a line that is not a header.
fn parse_headers(lines: &[Vec<u8>]) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for raw in lines {
        let line = python_compat::decode_latin1(raw);
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = headers.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
                continue;
            }
        }
        let Some((name, value)) = line.split_once(':') else {
            break;
        };
        headers.push((name.to_string(), value.trim().to_string()));
    }
    headers
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

    #[test]
    fn headers_read_like_the_email_parser() {
        let lines: Vec<Vec<u8>> = [
            "Content-Length:  12 \r\n",
            "X-Folded: a\r\n",
            "  b\r\n",
            "not a header\r\n",
            "After: lost\r\n",
            "\r\n",
        ]
        .iter()
        .map(|line| line.as_bytes().to_vec())
        .collect();
        assert_eq!(
            parse_headers(&lines),
            [
                ("Content-Length".to_string(), "12".to_string()),
                ("X-Folded".to_string(), "a b".to_string())
            ]
        );
    }
}

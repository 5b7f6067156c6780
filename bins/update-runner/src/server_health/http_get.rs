//! One urllib-style `GET http://127.0.0.1:<port>/api/health`, with the
//! failures worded and classified as `urllib.request.urlopen` raises them,
//! because the readiness wait retries exactly the transport-level ones.
//!
//! Deviation: urllib follows redirects; a health endpoint never redirects, so
//! a 3xx is reported as the `HTTPError` urllib raises when it cannot follow.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use crate::release::UPDATER_USER_AGENT;
use agents_common::{Error, ErrorClass};

/// Largest response head accepted (http.client allows 100 headers of 64 KiB).
const MAX_HEAD_BYTES: usize = 100 * 65_536;

/// A failed request: the exception text and class Python reports, and
/// whether `transient_server_readiness_error` would call it transient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GetFailure {
    pub(crate) error: Error,
    pub(crate) transient: bool,
}

impl GetFailure {
    fn status(code: u16, reason: &str) -> Self {
        GetFailure {
            error: Error::new(ErrorClass::Os, format!("HTTP Error {code}: {reason}")),
            transient: code == 503,
        }
    }

    fn protocol(message: impl Into<String>) -> Self {
        GetFailure {
            error: Error::new(ErrorClass::Os, message),
            transient: false,
        }
    }
}

/// `ConnectionRefusedError`, `ConnectionResetError`, `ConnectionAbortedError`
/// and `TimeoutError`: the server is not (yet) listening or answering.
fn transient_kind(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
    )
}

/// A socket error raised directly (while reading the response).
fn socket_failure(error: io::Error) -> GetFailure {
    GetFailure {
        transient: transient_kind(&error),
        error: Error::from_socket(error),
    }
}

/// A socket error while connecting or sending, which urllib wraps in
/// `URLError` (`<urlopen error ...>`).
fn url_error(error: io::Error) -> GetFailure {
    GetFailure {
        transient: transient_kind(&error),
        error: Error::from_socket(error).into_url_error(),
    }
}

/// GET `path` on `127.0.0.1:port` with `headers`, each socket operation
/// bounded by `timeout`, and return at most `limit` bytes of a 2xx body.
pub(crate) fn get(
    port: i128,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
    limit: usize,
) -> Result<Vec<u8>, GetFailure> {
    let Ok(port) = u16::try_from(port) else {
        return Err(GetFailure {
            error: Error::new(ErrorClass::Os, "getsockaddrarg: port must be 0-65535."),
            transient: false,
        });
    };
    let timeout = timeout.max(Duration::from_millis(1));
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(url_error)?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nAccept-Encoding: identity\r\nHost: 127.0.0.1:{port}\r\n\
         User-Agent: {UPDATER_USER_AGENT}\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    stream.set_write_timeout(Some(timeout)).map_err(url_error)?;
    stream.set_read_timeout(Some(timeout)).map_err(url_error)?;
    stream.write_all(request.as_bytes()).map_err(url_error)?;

    let mut reader = Buffered::new(stream);
    let status_line = reader.line()?;
    if status_line.is_empty() {
        // http.client.RemoteDisconnected, a ConnectionResetError.
        return Err(GetFailure {
            error: Error::new(
                ErrorClass::Os,
                "Remote end closed connection without response",
            ),
            transient: true,
        });
    }
    let (code, reason) = parse_status_line(&status_line)?;
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut head_bytes = status_line.len();
    loop {
        let line = reader.line()?;
        head_bytes += line.len();
        if head_bytes > MAX_HEAD_BYTES {
            return Err(GetFailure::protocol("got more than 100 headers"));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let Some((name, value)) = text.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.trim().eq_ignore_ascii_case("content-length") {
            content_length = value.parse().ok();
        } else if name.trim().eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    if !(200..300).contains(&code) {
        return Err(GetFailure::status(code, &reason));
    }
    let wanted = limit.saturating_add(1);
    if chunked {
        reader.read_chunked(wanted)
    } else {
        reader.read_body(content_length.map_or(wanted, |length| length.min(wanted)))
    }
}

fn parse_status_line(line: &[u8]) -> Result<(u16, String), GetFailure> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\r', '\n']);
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    let reason = parts.next().unwrap_or("").trim();
    let parsed = code
        .parse::<u16>()
        .ok()
        .filter(|code| code.to_string().len() == 3 && (100..=999).contains(code));
    match parsed {
        Some(code) if version.starts_with("HTTP/") => Ok((code, reason.to_string())),
        // http.client.BadStatusLine carries the repr of the line.
        _ => Err(GetFailure::protocol(format!("{text:?}"))),
    }
}

/// A small read buffer over the connection (http.client's `fp`).
struct Buffered {
    stream: TcpStream,
    buffer: Vec<u8>,
    eof: bool,
}

impl Buffered {
    fn new(stream: TcpStream) -> Self {
        Buffered {
            stream,
            buffer: Vec::new(),
            eof: false,
        }
    }

    /// Read more into the buffer; false at end of stream.
    fn fill(&mut self) -> Result<bool, GetFailure> {
        if self.eof {
            return Ok(false);
        }
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(count) => {
                    self.buffer.extend_from_slice(&chunk[..count]);
                    return Ok(true);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(socket_failure(error)),
            }
        }
    }

    /// One line including its `\n` (or what remains at end of stream).
    fn line(&mut self) -> Result<Vec<u8>, GetFailure> {
        loop {
            if let Some(end) = self.buffer.iter().position(|byte| *byte == b'\n') {
                return Ok(self.buffer.drain(..=end).collect());
            }
            if self.buffer.len() > 65_536 {
                return Err(GetFailure::protocol(
                    "got more than 65536 bytes when reading",
                ));
            }
            if !self.fill()? {
                return Ok(std::mem::take(&mut self.buffer));
            }
        }
    }

    /// Up to `count` body bytes; fewer when the stream ends first.
    fn read_body(&mut self, count: usize) -> Result<Vec<u8>, GetFailure> {
        while self.buffer.len() < count && self.fill()? {}
        let take = count.min(self.buffer.len());
        Ok(self.buffer.drain(..take).collect())
    }

    /// Up to `count` bytes of a chunked body.
    fn read_chunked(&mut self, count: usize) -> Result<Vec<u8>, GetFailure> {
        let incomplete = || GetFailure::protocol("IncompleteRead(0 bytes read)");
        let mut body = Vec::new();
        while body.len() < count {
            let line = self.line()?;
            let text = String::from_utf8_lossy(&line);
            let size_text = text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| incomplete())?;
            if size == 0 {
                break;
            }
            let data = self.read_body(size)?;
            if data.len() < size {
                return Err(incomplete());
            }
            body.extend_from_slice(&data);
            self.line()?;
        }
        body.truncate(count);
        Ok(body)
    }
}

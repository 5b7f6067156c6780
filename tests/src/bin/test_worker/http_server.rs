//! Minimal HTTP/1.1 serving: one request per connection, answered with
//! `Connection: close`, one thread per connection so a stalled reply never
//! blocks other requests.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use python_compat::{
    json::{encode_compact, Json},
    json_object,
};

/// Longest request head accepted.
const MAXIMUM_HEAD: usize = 64 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request head, with the connection to read its body from and
/// answer on.
#[derive(Debug)]
pub(crate) struct Request {
    /// Request method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// The query string, if the target had a `?`.
    pub query: Option<String>,
    /// Header fields in order: lowercased name, value with outer blanks trimmed.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The client's address.
    pub peer: SocketAddr,
    stream: TcpStream,
    /// Bytes received after the head (the start of the body).
    pending: Vec<u8>,
}

/// How reading a body ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// All declared bytes arrived.
    Complete(Vec<u8>),
    /// The deadline passed first.
    TimedOut,
    /// The client closed the connection first.
    Interrupted,
}

fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl Request {
    /// Reads and parses a request head.
    pub(crate) fn read(mut stream: TcpStream) -> io::Result<Request> {
        let peer = stream.peer_addr()?;
        stream.set_read_timeout(Some(HEAD_TIMEOUT))?;
        let mut received = Vec::new();
        let end = loop {
            if let Some(end) = received.windows(4).position(|window| window == b"\r\n\r\n") {
                break end;
            }
            if received.len() > MAXIMUM_HEAD {
                return Err(malformed("request head too long"));
            }
            let mut chunk = [0u8; 8192];
            let count = stream.read(&mut chunk)?;
            if count == 0 {
                return Err(malformed("connection closed before the request head ended"));
            }
            received.extend_from_slice(&chunk[..count]);
        };
        let pending = received[end + 4..].to_vec();
        let head = &received[..end];
        let mut lines = head
            .split(|b| *b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
        let request_line = std::str::from_utf8(lines.next().unwrap_or_default())
            .map_err(|_| malformed("request line is not text"))?;
        let mut parts = request_line.split(' ');
        let (Some(method), Some(target), Some(_version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("bad request line"));
        };
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path.to_string(), Some(query.to_string())),
            None => (target.to_string(), None),
        };
        let mut headers = Vec::new();
        for line in lines {
            let colon = line
                .iter()
                .position(|b| *b == b':')
                .ok_or_else(|| malformed("header without colon"))?;
            let name = std::str::from_utf8(&line[..colon])
                .map_err(|_| malformed("header name is not text"))?;
            if name.is_empty() || name.contains([' ', '\t']) {
                return Err(malformed("bad header name"));
            }
            headers.push((name.to_ascii_lowercase(), trim(&line[colon + 1..]).to_vec()));
        }
        Ok(Request {
            method: method.to_string(),
            path,
            query,
            headers,
            peer,
            stream,
            pending,
        })
    }

    /// Every value of a header, by lowercase name.
    pub(crate) fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(candidate, _)| candidate == name)
            .map(|(_, value)| value.as_slice())
            .collect()
    }

    /// Reads exactly `length` body bytes before `timeout` passes.
    pub(crate) fn read_body(&mut self, length: usize, timeout: Duration) -> Body {
        let deadline = Instant::now() + timeout;
        let mut body = std::mem::take(&mut self.pending);
        while body.len() < length {
            let Some(remaining) = deadline
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())
            else {
                return Body::TimedOut;
            };
            if self.stream.set_read_timeout(Some(remaining)).is_err() {
                return Body::Interrupted;
            }
            let mut chunk = vec![0u8; (length - body.len()).min(8192)];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Body::Interrupted,
                Ok(count) => body.extend_from_slice(&chunk[..count]),
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Body::TimedOut
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Body::Interrupted,
            }
        }
        body.truncate(length);
        Body::Complete(body)
    }

    /// Sends the reply and closes the connection.
    pub(crate) fn respond(mut self, reply: &Reply) -> io::Result<()> {
        self.stream.write_all(&reply.encode())?;
        self.stream.flush()?;
        let _ = self.stream.shutdown(Shutdown::Write);
        Ok(())
    }
}

/// A response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers besides `content-length` and `connection`.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

impl Reply {
    /// A JSON reply with a body already encoded.
    pub(crate) fn json(status: u16, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".to_string(), "application/json".to_string())],
            body,
        }
    }

    /// `{"detail": text}`, the app's error shape.
    pub(crate) fn detail(status: u16, text: &str) -> Reply {
        let body = Json::Object(json_object! {"detail" => text});
        Reply::json(
            status,
            encode_compact(&body).expect("a detail object encodes"),
        )
    }

    fn encode(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Serves every connection of `listener` on its own thread, forever.
pub(crate) fn serve(listener: TcpListener, handler: Arc<dyn Fn(Request) + Send + Sync>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let handler = Arc::clone(&handler);
        thread::spawn(move || match Request::read(stream) {
            Ok(request) => handler(request),
            Err(err) => eprintln!("test-worker: unreadable request: {err}"),
        });
    }
}

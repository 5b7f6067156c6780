//! A plain HTTP/1.1 client for talking to test workers over real loopback
//! sockets, including requests no well-behaved client would send.
//!
//! One request per connection (`Connection: close`), the whole response read
//! to end of stream: exactly how the helpers' pinned client talks.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use python_compat::json::{parse_json, Json};

/// Timeout of [`HttpRequest::send`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A request under construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A response as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code of the status line.
    pub status: u16,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body (cut to `Content-Length` when one was sent).
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// A request with any method and request target (path plus query).
    pub fn new(method: &str, target: &str) -> HttpRequest {
        HttpRequest {
            method: method.to_string(),
            target: target.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A `GET` without a body.
    pub fn get(target: &str) -> HttpRequest {
        HttpRequest::new("GET", target)
    }

    /// A `POST` of a JSON body with `Content-Type: application/json`.
    pub fn post_json(target: &str, body: impl Into<Vec<u8>>) -> HttpRequest {
        HttpRequest::new("POST", target)
            .header("Content-Type", "application/json")
            .body(body)
    }

    /// Adds a header line (repeatable, so duplicates can be tested).
    pub fn header(mut self, name: &str, value: &str) -> HttpRequest {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> HttpRequest {
        self.header("Authorization", &format!("Bearer {token}"))
    }

    /// Sets the body; `Content-Length` is added unless a header sets one.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> HttpRequest {
        self.body = body.into();
        self
    }

    /// The exact bytes sent to `host`.
    pub fn encode(&self, host: &str) -> Vec<u8> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {host}\r\n",
            self.method, self.target
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let has = |wanted: &str| {
            self.headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case(wanted))
        };
        if !has("content-length")
            && !has("transfer-encoding")
            && (!self.body.is_empty() || self.method == "POST")
        {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        if !has("connection") {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// Sends the request and reads the response within [`DEFAULT_TIMEOUT`].
    pub fn send(&self, address: SocketAddr) -> io::Result<HttpResponse> {
        self.send_with_timeout(address, DEFAULT_TIMEOUT)
    }

    /// Sends the request and reads the response within `timeout` (a timeout
    /// is an `io::Error` of kind `WouldBlock` or `TimedOut`).
    pub fn send_with_timeout(
        &self,
        address: SocketAddr,
        timeout: Duration,
    ) -> io::Result<HttpResponse> {
        send_raw(address, &self.encode(&address.to_string()), timeout)
    }
}

/// Sends raw bytes and reads one response until the server closes.
pub fn send_raw(
    address: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(request)?;
    let mut received = Vec::new();
    stream.read_to_end(&mut received)?;
    HttpResponse::parse(&received)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl HttpResponse {
    /// Parses a complete response (head and body up to end of stream).
    pub fn parse(received: &[u8]) -> io::Result<HttpResponse> {
        let end = received
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .ok_or_else(|| {
                invalid(format!(
                    "no complete response head in {} bytes",
                    received.len()
                ))
            })?;
        let head = String::from_utf8_lossy(&received[..end]);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
            .collect();
        let mut body = received[end + 4..].to_vec();
        let declared = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.parse::<usize>().ok());
        if let Some(length) = declared {
            body.truncate(length);
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(candidate, _)| candidate.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON; fails the test when it is not JSON.
    pub fn json(&self) -> Json {
        parse_json(&self.body).unwrap_or_else(|err| {
            panic!(
                "response {} is not JSON ({err}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `detail` text of an error body, if it has one.
    pub fn detail(&self) -> Option<String> {
        parse_json(&self.body)
            .ok()?
            .get("detail")?
            .as_str()
            .map(str::to_string)
    }
}

/// The socket address of an origin such as a receipt's
/// `callback_origin` (`http://127.0.0.1:<port>`).
pub fn origin_address(origin: &str) -> Option<SocketAddr> {
    origin.strip_prefix("http://")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_and_responses_parse() {
        let request = HttpRequest::post_json("/p?q", "{}").bearer("t");
        assert_eq!(
            String::from_utf8(request.encode("127.0.0.1:9")).unwrap(),
            "POST /p?q HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Type: application/json\r\n\
             Authorization: Bearer t\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        );
        let explicit = HttpRequest::get("/")
            .header("Content-Length", "5")
            .encode("h");
        assert!(!String::from_utf8(explicit)
            .unwrap()
            .contains("Content-Length: 0"));
        let response = HttpResponse::parse(
            b"HTTP/1.1 409 Conflict\r\nContent-Length: 14\r\n\r\n{\"detail\":\"x\"}extra",
        )
        .unwrap();
        assert_eq!(
            (response.status, response.detail().as_deref()),
            (409, Some("x"))
        );
        assert_eq!(response.header("content-length"), Some("14"));
        assert!(HttpResponse::parse(b"HTTP/1.1 200 OK\r\n").is_err());
        assert_eq!(
            origin_address("http://127.0.0.1:80"),
            Some(SocketAddr::from(([127, 0, 0, 1], 80)))
        );
        assert_eq!(origin_address("https://127.0.0.1:80"), None);
    }
}

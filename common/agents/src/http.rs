//! `execution_http.request_json`: one HTTP request over a loopback connection
//! whose far end is first proven to belong to an exact process.
//!
//! The helpers send bearer credentials (the agent token, the worker control
//! token) to ports that any local process could have taken over after a crash.
//! So nothing, not even the request line, is written until the kernel shows
//! that the connected socket belongs to the expected PID and the caller has
//! re-checked that this PID is still the admitted native service.

mod ownership;
mod url;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, SocketAddrV6, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use ownership::Endpoint;
pub use ownership::LsofRunner;
pub(crate) use ownership::SystemLsof;
use python_compat::{
    json::{encode_compact, parse_json, Json, JsonObject},
    python_int, ErrorClass,
};
pub(crate) use url::url_split;

/// Largest response header block, in bytes.
const MAXIMUM_HEADERS: usize = 64 * 1024;
/// Largest `recv` of one read.
const CHUNK: usize = 64 * 1024;
/// Pause between ownership attempts.
const PROOF_INTERVAL: Duration = Duration::from_millis(10);

/// `sys.get_int_max_str_digits()` default: longer decimal text is refused by `int()`.
const PYTHON_INT_MAX_DIGITS: usize = 4300;

const INVALID_RESPONSE: &str = "pinned HTTP response is invalid";

/// What `request_json` needs besides the URL and the bearer token: whom the
/// connection must belong to, the re-check to run once that is proven, and
/// the request's body and bounds.
pub struct PinnedRequest<'a> {
    expected_pid: i64,
    platform: &'a str,
    verify_owner: &'a mut dyn FnMut() -> Result<()>,
    body: Option<&'a Json>,
    timeout: f64,
    maximum_body: i64,
    lsof: &'a dyn LsofRunner,
}

impl<'a> PinnedRequest<'a> {
    /// A GET pinned to process `expected_pid` on `platform` (`Linux` or
    /// `Darwin`), with Python's defaults: 5 s overall and a 1 MiB body limit.
    /// `verify_owner` runs exactly once, after ownership is proven and before
    /// any byte is sent; its error aborts the request.
    pub fn new(
        expected_pid: i64,
        platform: &'a str,
        verify_owner: &'a mut dyn FnMut() -> Result<()>,
    ) -> Self {
        PinnedRequest {
            expected_pid,
            platform,
            verify_owner,
            body: None,
            timeout: 5.0,
            maximum_body: 1024 * 1024,
            lsof: &SystemLsof,
        }
    }

    /// Sends `body` as a compact JSON POST instead of a GET (even `{}`);
    /// `None` keeps the GET.
    pub fn body(mut self, body: Option<&'a Json>) -> Self {
        self.body = body;
        self
    }

    /// One deadline, in seconds, for connecting, proving, sending and
    /// receiving (`0 < timeout <= 60`).
    pub fn timeout(mut self, seconds: f64) -> Self {
        self.timeout = seconds;
        self
    }

    /// Largest request payload and response body, in bytes (1 to 16 MiB).
    pub fn maximum_body(mut self, bytes: i64) -> Self {
        self.maximum_body = bytes;
        self
    }

    /// Replaces the `lsof` runner of the macOS proof, so that proof can be
    /// exercised with recorded output on any host.
    pub fn lsof_runner(mut self, runner: &'a dyn LsofRunner) -> Self {
        self.lsof = runner;
        self
    }
}

/// Connects once to the literal-IP `url`, proves that the connection belongs
/// to the request's process, runs its `verify_owner`, then sends one GET or
/// POST with `Authorization: Bearer <token>` and returns the JSON object of
/// a `200` response.
///
/// Refusals keep Python's classes: bad arguments are `ValueError`s raised
/// before any I/O; an unproven owner, any response other than a well-formed
/// bounded `200`, or a non-object body is a `RuntimeError`; connection
/// failures and socket timeouts are `OSError`s (`TimeoutError`); an
/// undecodable body is the JSON module's `ValueError`.
pub fn request_json(url: &str, token: &str, request: PinnedRequest<'_>) -> Result<JsonObject> {
    let PinnedRequest {
        expected_pid,
        platform,
        verify_owner,
        body,
        timeout,
        maximum_body,
        lsof,
    } = request;
    if expected_pid <= 1 || !matches!(platform, "Linux" | "Darwin") {
        return Err(Error::value("pinned HTTP process identity is invalid"));
    }
    let target = Target::parse(url)?;
    check_token(token)?;
    let bounded = timeout > 0.0 && timeout <= 60.0 && maximum_body > 0 && maximum_body <= 16 << 20;
    if !bounded {
        return Err(Error::value("pinned HTTP bounds are invalid"));
    }
    let maximum_body = maximum_body as usize;
    let payload = match body {
        None => Vec::new(),
        Some(body) => encode_compact(body)?,
    };
    if payload.len() > maximum_body {
        return Err(Error::value("pinned HTTP request exceeds limit"));
    }

    let timeout = Duration::from_secs_f64(timeout);
    let deadline = Instant::now() + timeout;
    let response = {
        let mut connection =
            TcpStream::connect_timeout(&target.socket_address()?, timeout).map_err(socket_error)?;
        let server = Endpoint::from_socket(connection.peer_addr()?);
        let client = Endpoint::from_socket(connection.local_addr()?);
        loop {
            let remaining = remaining(deadline).ok_or_else(|| {
                Error::runtime("pinned HTTP connection ownership could not be proven")
            })?;
            let owned = if platform == "Linux" {
                ownership::linux_connection_owned(expected_pid, &server, &client)?
            } else {
                ownership::darwin_connection_owned(expected_pid, &server, &client, remaining, lsof)?
            };
            if owned {
                break;
            }
            thread::sleep(remaining_or_zero(deadline).min(PROOF_INTERVAL));
        }
        // A socket of a stale epoch can still be owned by the PID; the caller
        // re-checks its service manager and receipts now.
        verify_owner()?;
        let remaining = remaining(deadline)
            .ok_or_else(|| Error::runtime("pinned HTTP ownership verification timed out"))?;
        let mut request = target.request_head(token, body.is_some(), payload.len());
        request.extend_from_slice(&payload);
        connection.set_write_timeout(Some(remaining))?;
        connection.write_all(&request).map_err(socket_error)?;
        receive_response(&mut connection, deadline, maximum_body)?
    };
    match parse_json(&response)? {
        Json::Object(object) => Ok(object),
        _ => Err(Error::runtime("pinned HTTP returned an invalid object")),
    }
}

/// The checked endpoint and request target of the URL.
struct Target {
    hostname: String,
    address: python_compat::ipaddress::PyIp,
    port: u16,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self> {
        let exact_endpoint = || Error::value("pinned HTTP requires an exact local IP endpoint");
        let parts = url_split(url)?;
        if parts.scheme != "http" {
            return Err(exact_endpoint());
        }
        let hostname = parts.hostname().ok_or_else(exact_endpoint)?;
        let port = parts
            .port()?
            .filter(|port| *port != 0)
            .ok_or_else(exact_endpoint)?;
        let falsy = |value: Option<&str>| value.is_none_or(str::is_empty);
        if !falsy(parts.username()) || !falsy(parts.password()) || !parts.fragment.is_empty() {
            return Err(exact_endpoint());
        }
        // Numeric addresses only: DNS or a proxy must not rewrite the endpoint.
        let address = python_compat::ipaddress::ip_address(&hostname)?;
        let mut path = if parts.path.is_empty() {
            "/".to_string()
        } else {
            parts.path
        };
        if !parts.query.is_empty() {
            path = format!("{path}?{}", parts.query);
        }
        if !path.chars().all(|c| ('!'..='~').contains(&c)) {
            return Err(Error::value("pinned HTTP path is invalid"));
        }
        Ok(Target {
            hostname,
            address,
            port,
            path,
        })
    }

    fn socket_address(&self) -> Result<SocketAddr> {
        Ok(match self.address.ip() {
            IpAddr::V4(ip) => SocketAddr::from((ip, self.port)),
            IpAddr::V6(ip) => {
                let scope_id = match self.address.scope() {
                    None => 0,
                    // Numeric zones only; a zone name is not resolved here.
                    Some(zone) => zone.parse::<u32>().map_err(|_| {
                        Error::new(ErrorClass::Os, "[Errno -2] Name or service not known")
                    })?,
                };
                SocketAddr::V6(SocketAddrV6::new(ip, self.port, 0, scope_id))
            }
        })
    }

    /// Request line and headers, in Python's exact order, through the blank line.
    fn request_head(&self, token: &str, post: bool, length: usize) -> Vec<u8> {
        let host = if self.hostname.contains(':') {
            format!("[{}]:{}", self.hostname, self.port)
        } else {
            format!("{}:{}", self.hostname, self.port)
        };
        let method = if post { "POST" } else { "GET" };
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
             Accept: application/json\r\nConnection: close\r\n",
            self.path
        );
        if post {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {length}\r\n"
            ));
        }
        head.push_str("\r\n");
        head.into_bytes()
    }
}

fn check_token(token: &str) -> Result<()> {
    let length = token.chars().count();
    if !(1..=4096).contains(&length) || !token.chars().all(|c| ('!'..='~').contains(&c)) {
        return Err(Error::value("pinned HTTP credential format is invalid"));
    }
    Ok(())
}

/// Time left before `deadline`, or `None` once it has passed.
fn remaining(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|left| !left.is_zero())
}

fn remaining_or_zero(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Python raises `TimeoutError("timed out")` when a socket timeout passes;
/// other socket errors keep their errno wording.
fn socket_error(err: io::Error) -> Error {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            Error::new(ErrorClass::Timeout, "timed out")
        }
        _ => Error::from(err),
    }
}

/// One `recv` of at most `limit` bytes with the time left as socket timeout;
/// `None` is the caller's "deadline passed" refusal.
fn receive(connection: &mut TcpStream, deadline: Instant, limit: usize) -> Result<Option<Vec<u8>>> {
    let Some(left) = remaining(deadline) else {
        return Ok(None);
    };
    connection.set_read_timeout(Some(left))?;
    let mut chunk = vec![0u8; limit];
    loop {
        match connection.read(&mut chunk) {
            Ok(count) => {
                chunk.truncate(count);
                return Ok(Some(chunk));
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(socket_error(err)),
        }
    }
}

fn invalid() -> Error {
    Error::runtime(INVALID_RESPONSE)
}

/// Reads and checks a response: exactly `200`, a bounded header block without
/// folding, duplicate names or transfer coding, and a body bounded by
/// `maximum_body` and by any declared `Content-Length`.
fn receive_response(
    connection: &mut TcpStream,
    deadline: Instant,
    maximum_body: usize,
) -> Result<Vec<u8>> {
    let mut payload: Vec<u8> = Vec::new();
    let header_end = loop {
        let limit = CHUNK.min(MAXIMUM_HEADERS + 4 - payload.len());
        let chunk = receive(connection, deadline, limit)?.ok_or_else(invalid)?;
        if chunk.is_empty() {
            return Err(invalid());
        }
        payload.extend_from_slice(&chunk);
        let found = payload.windows(4).position(|window| window == b"\r\n\r\n");
        match found {
            Some(end) if end > MAXIMUM_HEADERS => return Err(invalid()),
            Some(end) => break end,
            None if payload.len() > MAXIMUM_HEADERS => return Err(invalid()),
            None => {}
        }
    };
    let content_length = content_length(&payload[..header_end], maximum_body)?;
    let mut body = payload.split_off(header_end + 4);
    if body.len() > maximum_body || content_length.is_some_and(|length| body.len() > length) {
        return Err(invalid());
    }
    while content_length.is_none_or(|length| body.len() < length) {
        let chunk = receive(
            connection,
            deadline,
            CHUNK.min(maximum_body + 1 - body.len()),
        )?
        .ok_or_else(invalid)?;
        if chunk.is_empty() {
            break;
        }
        body.extend_from_slice(&chunk);
        if body.len() > maximum_body {
            return Err(invalid());
        }
    }
    if content_length.is_some_and(|length| body.len() != length) {
        return Err(invalid());
    }
    Ok(body)
}

/// Checks the status line and headers (decoded as latin-1) and returns the
/// declared `Content-Length`, parsed with Python's `int(value, 10)`.
fn content_length(raw_headers: &[u8], maximum_body: usize) -> Result<Option<usize>> {
    let text = python_compat::decode_latin1(raw_headers);
    let mut lines = text.split("\r\n");
    let status: Vec<&str> = lines.next().unwrap_or("").splitn(3, ' ').collect();
    if status.len() < 2 || !matches!(status[0], "HTTP/1.0" | "HTTP/1.1") || status[1] != "200" {
        return Err(invalid());
    }
    let mut headers = std::collections::HashMap::new();
    for line in lines {
        if line.is_empty() || line.starts_with([' ', '\t']) {
            return Err(invalid());
        }
        let (name, value) = line.split_once(':').ok_or_else(invalid)?;
        let name = python_compat::strip(name).to_lowercase();
        if name.is_empty() || headers.contains_key(&name) {
            return Err(invalid());
        }
        headers.insert(name, python_compat::strip(value).to_string());
    }
    if headers.contains_key("transfer-encoding") {
        return Err(invalid());
    }
    let Some(value) = headers.get("content-length") else {
        return Ok(None);
    };
    // Python's int() also refuses more than 4300 digits, leading zeros included.
    let digit_count = value.chars().filter(|c| c.is_ascii_digit()).count();
    if digit_count > PYTHON_INT_MAX_DIGITS {
        return Err(invalid());
    }
    let length = python_int(value).ok_or_else(invalid)?;
    if length < 0 || length > maximum_body as i128 {
        return Err(invalid());
    }
    Ok(Some(length as usize))
}

//! How `http.client` reads a response: the status line, the header block,
//! and a body that ends by `Content-Length`, by chunks or with the
//! connection, with `http.client`'s limits and exception words.
//!
//! The originals read every response through `http.client`, and its limits and
//! error texts reach the status row the server shows: a status line over
//! 65536 bytes (`got more than 65536 bytes when reading status line`), more
//! than 100 header lines (`got more than 100 headers`), a Content-Length that
//! is not an int or negative (ignored: the body then ends with the
//! connection), a reason phrase in any bytes (decoded as latin-1), a bad
//! chunk size (`IncompleteRead(0 bytes read)`). This reader applies exactly
//! those rules over any byte stream, and never holds more than one socket
//! read beyond what the caller asks to read. Connecting, proxies, TLS and
//! deadlines are the caller's: its stream decides how each read may block.

use std::io::{self, Read, Write};

use crate::exception::{ErrorClass, Exception};
use crate::int::{int_hex, python_int, PythonInt};
use crate::text::{decode_latin1, split_max, strip};

/// `http.client._MAXLINE`: the longest status, header, chunk-size or
/// trailer line.
const MAX_LINE: usize = 65_536;
/// `http.client._MAXHEADERS`: header lines counted with the blank one.
const MAX_HEADERS: usize = 100;
/// Bytes asked of the stream at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Why reading a response failed, in the two ways `http.client` lets
/// failures through.
#[derive(Debug)]
pub enum ReadFailure {
    /// The stream failed (the socket's own `OSError`, a deadline included):
    /// the caller words it as Python's socket layer does.
    Socket(io::Error),
    /// `http.client` refused the response (`BadStatusLine`, `LineTooLong`,
    /// `HTTPException`, `IncompleteRead`): the exception as Python words it.
    Protocol(Exception),
}

fn protocol(message: impl Into<String>) -> ReadFailure {
    ReadFailure::Protocol(Exception::new(ErrorClass::Os, message))
}

/// `HTTPConnection._get_hostport(host, None)`: the host (brackets of an
/// IPv6 literal removed) and `int()` of the text after its last `:` outside
/// brackets; none or an empty one is `default`.
pub fn host_port(text: &str, default: u16) -> Result<(String, PythonInt), Exception> {
    let colon = text.rfind(':');
    let bracket = text.rfind(']');
    let (host, port) = match colon {
        Some(index) if colon > bracket => {
            let digits = &text[index + 1..];
            let port = match PythonInt::parse(digits) {
                Some(port) => port,
                None if digits.is_empty() => PythonInt::Small(i128::from(default)),
                None => return Err(Exception::value(format!("nonnumeric port: '{digits}'"))),
            };
            (&text[..index], port)
        }
        _ => (text, PythonInt::Small(i128::from(default))),
    };
    let host = match host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
    {
        Some(inner) => inner,
        None => host,
    };
    Ok((host.to_string(), port))
}

/// The buffered reader `http.client` reads through (`sock.makefile("rb")`):
/// lines within `_MAXLINE`, exact counts, and copies of at most what was
/// asked, never buffering more than one read of the stream beyond it.
pub struct LineReader<S> {
    stream: S,
    buffer: Vec<u8>,
    start: usize,
}

impl<S: Read> LineReader<S> {
    /// A reader of `stream`, nothing buffered yet.
    pub fn new(stream: S) -> Self {
        LineReader {
            stream,
            buffer: Vec::new(),
            start: 0,
        }
    }

    /// The stream back; bytes read but not consumed are dropped, as
    /// `http.client`'s buffered reader drops them.
    pub fn into_inner(self) -> S {
        self.stream
    }

    fn buffered(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    /// One more read of the stream into the buffer; false at end of stream.
    fn fill(&mut self) -> Result<bool, ReadFailure> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(count) => {
                    self.buffer.extend_from_slice(&chunk[..count]);
                    return Ok(true);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(ReadFailure::Socket(error)),
            }
        }
    }

    /// `fp.readline(_MAXLINE + 1)`: one line with its `\n`, or what remains
    /// at end of stream; longer than `_MAXLINE` is `LineTooLong(what)`.
    pub fn line(&mut self, what: &str) -> Result<Vec<u8>, ReadFailure> {
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
    fn exact(&mut self, count: usize) -> Result<Vec<u8>, ReadFailure> {
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
    fn copy(&mut self, count: u64, sink: &mut dyn Write) -> Result<u64, ReadFailure> {
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
                .map_err(|error| ReadFailure::Protocol(Exception::from(error)))?;
            self.start += take;
            copied += take as u64;
        }
        Ok(copied)
    }
}

/// An open response whose status is known and whose body has not been read
/// (`HTTPResponse` after `begin()`).
pub struct Response<S> {
    /// The status code.
    pub code: u16,
    /// The reason phrase, latin-1 decoded and stripped (`response.reason`).
    pub reason: String,
    /// The header lines in order, latin-1 decoded, names as sent.
    headers: Vec<(String, String)>,
    body: Body,
    reader: LineReader<S>,
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

impl<S: Read> Response<S> {
    /// The first value of header `name`, case-insensitively
    /// (`response.headers.get(name)`).
    pub fn header(&self, name: &str) -> Option<&str> {
        first_header(&self.headers, name)
    }

    /// Every header line, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// `response.read(amount)` into `sink`: at most `amount` bytes, fewer when
    /// the body ends first; a broken chunk is `IncompleteRead`, as in
    /// `http.client`. Returns the number of bytes written.
    pub fn read(&mut self, amount: u64, sink: &mut dyn Write) -> Result<u64, ReadFailure> {
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
    fn read_chunked(&mut self, mut amount: u64, sink: &mut dyn Write) -> Result<u64, ReadFailure> {
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
                        .and_then(int_hex)
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

fn first_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// `HTTPResponse.begin`: the status (a `100 Continue` skipped), the
/// headers, and how the body ends.
pub fn read_response<S: Read>(mut reader: LineReader<S>) -> Result<Response<S>, ReadFailure> {
    let (code, reason) = loop {
        let (code, reason) = read_status(&mut reader)?;
        if code != 100 {
            break (code, reason);
        }
        // A 100 Continue's own headers are skipped.
        read_header_lines(&mut reader)?;
    };
    let headers = parse_headers(&read_header_lines(&mut reader)?);
    let chunked = first_header(&headers, "transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"));
    let length = first_header(&headers, "content-length")
        .filter(|value| !value.is_empty() && !chunked)
        .and_then(python_int)
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

/// `_read_status`: the code and the reason of one status line. A stream
/// that ends before it is `RemoteDisconnected`, a `ConnectionResetError`.
pub fn read_status<S: Read>(reader: &mut LineReader<S>) -> Result<(u16, String), ReadFailure> {
    let raw = reader.line("status line")?;
    if raw.is_empty() {
        return Err(ReadFailure::Socket(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "Remote end closed connection without response",
        )));
    }
    let line = decode_latin1(&raw);
    let bad = || protocol(line.clone());
    let mut words = split_max(&line, 2).into_iter();
    let version = words.next().unwrap_or("");
    let status = words.next().unwrap_or("");
    let reason = words.next().unwrap_or("");
    if !version.starts_with("HTTP/") {
        return Err(bad());
    }
    let code = python_int(status)
        .filter(|code| (100..=999).contains(code))
        .ok_or_else(bad)?;
    Ok((code as u16, strip(reason).to_string()))
}

/// `_read_headers`: the header lines up to and including the blank one,
/// at most `_MAXHEADERS` of them.
fn read_header_lines<S: Read>(reader: &mut LineReader<S>) -> Result<Vec<Vec<u8>>, ReadFailure> {
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
        let line = decode_latin1(raw);
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

    #[test]
    fn host_ports_split_like_get_hostport() {
        let cases = [
            ("proxy:3128", ("proxy", 3128)),
            ("proxy", ("proxy", 80)),
            ("proxy:", ("proxy", 80)),
            ("[::1]:8080", ("::1", 8080)),
            ("[::1]", ("::1", 80)),
            ("proxy: +3_128 ", ("proxy", 3128)),
        ];
        for (text, (host, port)) in cases {
            let (parsed_host, parsed_port) = host_port(text, 80).unwrap();
            assert_eq!(
                (parsed_host.as_str(), parsed_port),
                (host, PythonInt::Small(port)),
                "{text}"
            );
        }
        let error = host_port("proxy:http", 80).unwrap_err();
        assert_eq!(error.python_line(), "ValueError: nonnumeric port: 'http'");
    }
}

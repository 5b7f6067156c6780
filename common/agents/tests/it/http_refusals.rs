//! Every refusal of the pinned client: argument checks (all before any I/O)
//! and response checks (all the one generic `RuntimeError`), plus the Python
//! quirks that are accepted. Expected messages and verdicts were produced by
//! running upstream's checks under Python 3.11.7.

use agents_common::{Platform, PlatformName};
use std::net::TcpListener;
use std::time::Duration;

use agents_common::test_support::{request_json, PinnedRequest};
use agents_tests::loopback_peers::{Reply, ThreadServer};
use python_compat::{
    json::{Json, JsonObject},
    ErrorClass,
};

/// A listening port that must see no connection: arguments are refused
/// before any I/O.
struct Untouched {
    listener: TcpListener,
}

impl Untouched {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Untouched { listener }
    }

    fn port(&self) -> u16 {
        self.listener.local_addr().unwrap().port()
    }

    /// The URL of a request to this port that passes the URL checks.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port())
    }

    fn assert_untouched(&self) {
        let accepted = self.listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a refused request must not connect: {accepted:?}"
        );
    }
}

/// One `request_json` call: this process, Linux, a one-letter token, the
/// default bounds and no body, unless a test changes one of them.
struct Call<'a> {
    url: String,
    token: &'a str,
    pid: i64,
    platform: PlatformName,
    timeout: f64,
    maximum_body: i64,
    body: Option<Json>,
}

impl<'a> Call<'a> {
    fn new(url: impl Into<String>) -> Self {
        Call {
            url: url.into(),
            token: "t",
            pid: i64::from(std::process::id()),
            platform: Platform::Linux.into(),
            timeout: 5.0,
            maximum_body: 1024 * 1024,
            body: None,
        }
    }

    fn pid(self, pid: i64) -> Self {
        Call { pid, ..self }
    }

    fn platform(self, name: &str) -> Self {
        let platform = PlatformName::parse(name);
        Call { platform, ..self }
    }

    fn token(self, token: &'a str) -> Self {
        Call { token, ..self }
    }

    fn timeout(self, timeout: f64) -> Self {
        Call { timeout, ..self }
    }

    fn maximum_body(self, maximum_body: i64) -> Self {
        Call {
            maximum_body,
            ..self
        }
    }

    fn body(self, body: Json) -> Self {
        let body = Some(body);
        Call { body, ..self }
    }

    fn run(&self) -> agents_common::Result<JsonObject> {
        let mut verify = || panic!("verify_owner must not run for {}", self.url);
        request_json(
            &self.url,
            self.token,
            PinnedRequest::new(self.pid, &self.platform, &mut verify)
                .body(self.body.as_ref())
                .timeout(self.timeout)
                .maximum_body(self.maximum_body),
        )
    }

    /// The call is refused with `ValueError(message)`; a failure names
    /// `case` and the URL.
    #[track_caller]
    fn assert_refused(&self, message: &str, case: &str) {
        match self.run() {
            Ok(value) => panic!(
                "{case}: {}: expected {message:?}, got Ok({value:?})",
                self.url
            ),
            Err(error) => assert_eq!(
                (error.class(), error.message()),
                (ErrorClass::Value, message),
                "{case}: {}",
                self.url
            ),
        }
    }
}

/// A table row: (what is wrong, the call, the exact `ValueError` message).
type ArgumentRefusal<'a> = (String, Call<'a>, String);

/// A row of [`ArgumentRefusal`] from anything string-like.
fn refusal<'a>(
    case: impl Into<String>,
    call: Call<'a>,
    message: impl Into<String>,
) -> ArgumentRefusal<'a> {
    (case.into(), call, message.into())
}

fn one_key(value: Json) -> Json {
    let mut object = JsonObject::new();
    object.insert("k", value);
    Json::Object(object)
}

const IDENTITY_INVALID: &str = "pinned HTTP process identity is invalid";
const NOT_EXACT_ENDPOINT: &str = "pinned HTTP requires an exact local IP endpoint";
const CREDENTIAL_INVALID: &str = "pinned HTTP credential format is invalid";
const BOUNDS_INVALID: &str = "pinned HTTP bounds are invalid";
const PATH_INVALID: &str = "pinned HTTP path is invalid";

/// The process identity: checked first, even before the URL.
fn identity_refusals(url: &str) -> Vec<ArgumentRefusal<'static>> {
    let mut rows = Vec::new();
    for pid in [1, 0, -1] {
        let call = Call::new(url).pid(pid);
        rows.push(refusal(format!("PID {pid}"), call, IDENTITY_INVALID));
    }
    for platform in ["linux", "Windows", ""] {
        let call = Call::new(url).platform(platform);
        rows.push(refusal(
            format!("platform {platform:?}"),
            call,
            IDENTITY_INVALID,
        ));
    }
    let before_url = Call::new("bad").pid(0);
    rows.push(refusal(
        "PID 0 with a bad URL",
        before_url,
        IDENTITY_INVALID,
    ));
    rows
}

/// A row for a call to `url`, all else as [`Call::new`] has it.
fn url_refusal(case: &str, url: String, message: impl Into<String>) -> ArgumentRefusal<'static> {
    refusal(case, Call::new(url), message)
}

/// URLs that are not one exact `http://<IP>:<port>/<path>` (`p` is the
/// port), refused with pinned HTTP's own messages.
fn inexact_url_refusals(p: u16) -> Vec<ArgumentRefusal<'static>> {
    let not_exact = [
        ("https", format!("https://127.0.0.1:{p}/")),
        ("no scheme", format!("127.0.0.1:{p}/")),
        ("no host", format!("http://:{p}/")),
        ("no port", "http://127.0.0.1/".to_string()),
        ("an empty port", "http://127.0.0.1:/".to_string()),
        ("port 0", "http://127.0.0.1:0/".to_string()),
        ("a user name", format!("http://u@127.0.0.1:{p}/")),
        ("a password", format!("http://:p@127.0.0.1:{p}/")),
        ("a fragment", format!("http://127.0.0.1:{p}/#f")),
    ];
    let bad_path = [
        ("a space in the path", format!("http://127.0.0.1:{p}/a b")),
        ("a non-ASCII path", format!("http://127.0.0.1:{p}/é")),
        ("DEL in the query", format!("http://127.0.0.1:{p}/?\x7f")),
    ];
    let not_exact = not_exact.map(|(case, url)| url_refusal(case, url, NOT_EXACT_ENDPOINT));
    let bad_path = bad_path.map(|(case, url)| url_refusal(case, url, PATH_INVALID));
    not_exact.into_iter().chain(bad_path).collect()
}

/// URLs refused on the way by the `urllib.parse` or `ipaddress` step that
/// fails, with that step's own message (`p` is the port).
fn url_parse_refusals(p: u16) -> Vec<ArgumentRefusal<'static>> {
    let not_an_ip = |host: &str| format!("'{host}' does not appear to be an IPv4 or IPv6 address");
    vec![
        url_refusal(
            "a signed port",
            format!("http://127.0.0.1:+{p}/"),
            format!("Port could not be cast to integer value as '+{p}'"),
        ),
        url_refusal(
            "port 70000",
            "http://127.0.0.1:70000/".to_string(),
            "Port out of range 0-65535",
        ),
        url_refusal(
            "a host name",
            format!("http://localhost:{p}/"),
            not_an_ip("localhost"),
        ),
        url_refusal(
            "an upper-case host name",
            format!("http://LOCALHOST:{p}/"),
            not_an_ip("localhost"),
        ),
        url_refusal(
            "a zero-padded IPv4 address",
            format!("http://127.0.0.01:{p}/"),
            not_an_ip("127.0.0.01"),
        ),
        url_refusal(
            "IPv4 in brackets",
            format!("http://[127.0.0.1]:{p}/"),
            "An IPv4 address cannot be in brackets",
        ),
        url_refusal(
            "an unclosed bracket",
            format!("http://[::1:{p}/"),
            "Invalid IPv6 URL",
        ),
        url_refusal(
            "an IPvFuture address",
            format!("http://[v1.x]:{p}/"),
            not_an_ip("v1.x"),
        ),
        url_refusal(
            "a host that NFKC changes",
            format!("http://127.0.0.1\u{2100}:{p}/"),
            format!(
                "netloc '127.0.0.1\u{2100}:{p}' contains invalid characters under NFKC normalization"
            ),
        ),
    ]
}

/// The token, checked after the URL and before the bounds.
fn credential_refusals<'a>(url: &str, too_long: &'a str) -> Vec<ArgumentRefusal<'a>> {
    let mut rows: Vec<_> = [
        ("an empty token", ""),
        ("a space", "a b"),
        ("a non-ASCII token", "é"),
        ("DEL", "a\x7f"),
        ("4097 characters", too_long),
    ]
    .into_iter()
    .map(|(case, token)| refusal(case, Call::new(url).token(token), CREDENTIAL_INVALID))
    .collect();
    let before_bounds = Call::new(url).token("a b").timeout(0.0);
    rows.push(refusal(
        "a bad token and timeout 0",
        before_bounds,
        CREDENTIAL_INVALID,
    ));
    rows
}

/// The timeout and body bounds, then the body itself.
fn bounds_refusals(url: &str) -> Vec<ArgumentRefusal<'static>> {
    let mut rows = Vec::new();
    for timeout in [0.0, -1.0, 60.0001, f64::NAN] {
        let call = Call::new(url).timeout(timeout);
        rows.push(refusal(format!("timeout {timeout}"), call, BOUNDS_INVALID));
    }
    for maximum_body in [0, -5, 16 * 1024 * 1024 + 1] {
        let call = Call::new(url).maximum_body(maximum_body);
        rows.push(refusal(
            format!("maximum body {maximum_body}"),
            call,
            BOUNDS_INVALID,
        ));
    }
    // {"k":"123"} is 11 bytes.
    let over_limit = Call::new(url)
        .maximum_body(10)
        .body(one_key(Json::from("123")));
    rows.push(refusal(
        "an 11-byte body over a maximum of 10",
        over_limit,
        "pinned HTTP request exceeds limit",
    ));
    let nan = Call::new(url).body(one_key(Json::Float(f64::NAN)));
    rows.push(refusal(
        "a NaN in the body",
        nan,
        "Out of range float values are not JSON compliant",
    ));
    rows
}

/// Every argument check raises Python's `ValueError` with its own message,
/// and none of them lets the request open a connection.
#[test]
fn argument_refusals_are_value_errors_before_any_io() {
    let port = Untouched::new();
    let url = port.url();
    let too_long = "a".repeat(4097);
    let rows = identity_refusals(&url)
        .into_iter()
        .chain(inexact_url_refusals(port.port()))
        .chain(url_parse_refusals(port.port()))
        .chain(credential_refusals(&url, &too_long))
        .chain(bounds_refusals(&url));
    for (case, call, message) in rows {
        call.assert_refused(&message, &case);
    }
    port.assert_untouched();
}

#[test]
fn python_quirks_pass_validation_and_reach_the_socket() {
    // Each of these passes upstream's checks, so it reaches connect(), which
    // a closed port refuses: the refusal proves validation let it through.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let p = closed;
    let long = "a".repeat(4096);
    let accepted = [
        Call::new(format!("http://@127.0.0.1:{p}/")),
        Call::new(format!("http://:@127.0.0.1:{p}/")),
        Call::new(format!("http://127.0.0.1:{p}/#")),
        Call::new(format!("http://127.0.0.1:{p}/a\tb")),
        Call::new(format!(" \x01http://127.0.0.1:{p}")),
        Call::new(format!("http://127.0.0.1:{p:06}/")),
        Call {
            token: &long,
            ..Call::new(format!("http://127.0.0.1:{p}/"))
        },
        Call {
            timeout: 60.0,
            ..Call::new(format!("http://127.0.0.1:{p}/"))
        },
        Call {
            maximum_body: 16 * 1024 * 1024,
            ..Call::new(format!("http://127.0.0.1:{p}/"))
        },
        Call {
            maximum_body: 11,
            body: Some(one_key(Json::from("123"))),
            ..Call::new(format!("http://127.0.0.1:{p}/"))
        },
    ];
    for call in accepted {
        let err = call.run().unwrap_err();
        assert_eq!(
            (err.class(), err.message()),
            (
                ErrorClass::ConnectionRefused,
                "[Errno 111] Connection refused"
            ),
            "{}",
            call.url
        );
    }
}

fn respond(raw: impl Into<Vec<u8>>, maximum_body: i64) -> agents_common::Result<JsonObject> {
    let server = ThreadServer::start(Reply::After(raw.into()));
    let call = Call {
        maximum_body,
        ..Call::new(server.url("/"))
    };
    let mut verify = || Ok(());
    let result = request_json(
        &call.url,
        "t",
        PinnedRequest::new(call.pid, Platform::Linux, &mut verify).maximum_body(maximum_body),
    );
    server.finish();
    result
}

fn headers_of_exact_length(total: usize) -> String {
    // "HTTP/1.1 200 OK\r\nX: " + filler + "\r\nContent-Length: 2" = total bytes.
    let fixed = "HTTP/1.1 200 OK\r\nX: \r\nContent-Length: 2".len();
    format!(
        "HTTP/1.1 200 OK\r\nX: {}\r\nContent-Length: 2",
        "a".repeat(total - fixed)
    )
}

/// The maximum body given to the client unless a row tests the limit.
const DEFAULT_MAXIMUM: i64 = 1 << 20;
/// The maximum body of the rows that test the limit.
const SMALL_MAXIMUM: i64 = 16;

/// A table row: (what is wrong with the reply, the reply's bytes).
type MalformedReply = (&'static str, &'static [u8]);

/// Status lines other than `HTTP/1.x 200`, exactly spelt.
const BAD_STATUS_LINES: &[MalformedReply] = &[
    (
        "201",
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
    ),
    (
        "404",
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
    ),
    (
        "302",
        b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 2\r\n\r\n{}",
    ),
    (
        "100 first",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n{}",
    ),
    ("HTTP/2", b"HTTP/2 200\r\nContent-Length: 2\r\n\r\n{}"),
    ("lowercase version", b"http/1.1 200 OK\r\n\r\n{}"),
    ("double space", b"HTTP/1.1  200 OK\r\n\r\n{}"),
    ("0200", b"HTTP/1.1 0200 OK\r\n\r\n{}"),
    ("status only", b"HTTP/1.1\r\n\r\n{}"),
];

/// Header blocks the client refuses: names that repeat once compared as
/// Python compares them, folded or malformed lines, a transfer coding.
const BAD_HEADERS: &[MalformedReply] = &[
    (
        "duplicate name",
        b"HTTP/1.1 200 OK\r\nContent-Type: a\r\ncontent-type: b\r\n\r\n{}",
    ),
    (
        "duplicate after strip",
        b"HTTP/1.1 200 OK\r\nX: a\r\nx  : b\r\n\r\n{}",
    ),
    (
        "duplicate after latin-1 lowercasing",
        b"HTTP/1.1 200 OK\r\nX-\xe9: 1\r\nX-\xc9: 2\r\n\r\n{}",
    ),
    ("obs-fold space", b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n{}"),
    ("obs-fold tab", b"HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n{}"),
    ("no colon", b"HTTP/1.1 200 OK\r\nBogus\r\n\r\n{}"),
    ("empty name", b"HTTP/1.1 200 OK\r\n\x1c : v\r\n\r\n{}"),
    (
        "transfer-encoding",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n{}",
    ),
];

/// Content-Length values the client refuses, or that the two-byte body
/// does not match: (what is wrong, the value).
const BAD_LENGTHS: &[(&str, &str)] = &[
    ("length text", "two"),
    ("length negative", "-1"),
    ("length trailing _", "2_"),
    ("length hex", "0x2"),
    ("body beyond length", "1"),
    ("short body", "10"),
];

/// A 200 reply of the body `{}` with the Content-Length `value`.
fn with_length(value: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {value}\r\n\r\n{{}}").into_bytes()
}

/// Replies that end before their headers do.
const TRUNCATED: &[MalformedReply] = &[
    (
        "EOF in headers",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
    ),
    ("empty response", b""),
];

/// Replies past a limit, each with the maximum body the client is given:
/// (what is wrong, the reply's bytes, the maximum body).
fn replies_past_a_limit() -> Vec<(&'static str, Vec<u8>, i64)> {
    let digits_4301 = format!("{}2", "0".repeat(4300));
    let big_headers = headers_of_exact_length(65_537);
    let unbounded = format!("HTTP/1.1 200 OK\r\n\r\n{{\"k\":\"{}\"}}", "a".repeat(20));
    let endless = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(80_000));
    vec![
        (
            "length of 4301 digits",
            with_length(&digits_4301),
            DEFAULT_MAXIMUM,
        ),
        ("length over maximum", with_length("17"), SMALL_MAXIMUM),
        (
            "unbounded body over maximum",
            unbounded.into_bytes(),
            SMALL_MAXIMUM,
        ),
        (
            "headers over 64 KiB",
            format!("{big_headers}\r\n\r\n{{}}").into_bytes(),
            DEFAULT_MAXIMUM,
        ),
        (
            "no header end within 64 KiB",
            endless.into_bytes(),
            DEFAULT_MAXIMUM,
        ),
    ]
}

/// The reply is refused with the client's one generic `RuntimeError`; a
/// failure names `case`.
#[track_caller]
fn assert_reply_invalid(case: &str, raw: impl Into<Vec<u8>>, maximum_body: i64) {
    match respond(raw, maximum_body) {
        Ok(value) => panic!("{case}: expected the generic refusal, got Ok({value:?})"),
        Err(error) => assert_eq!(
            error.python_line(),
            "RuntimeError: pinned HTTP response is invalid",
            "{case}"
        ),
    }
}

/// Whatever is wrong with a reply, the caller sees the same generic
/// `RuntimeError`, as upstream's checks raise it.
#[test]
fn every_malformed_or_non_200_response_is_the_one_runtime_error() {
    for (case, raw) in [BAD_STATUS_LINES, BAD_HEADERS, TRUNCATED].concat() {
        assert_reply_invalid(case, raw, DEFAULT_MAXIMUM);
    }
    for (case, length) in BAD_LENGTHS {
        assert_reply_invalid(case, with_length(length), DEFAULT_MAXIMUM);
    }
    for (case, raw, maximum_body) in replies_past_a_limit() {
        assert_reply_invalid(case, raw, maximum_body);
    }
}

#[test]
fn python_parsing_quirks_are_accepted() {
    let at_limit = headers_of_exact_length(65_536);
    let exact_body = format!("{{\"k\":\"{}\"}}", "a".repeat(8)); // 16 bytes
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        (
            "no reason phrase",
            b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        ("HTTP/1.0", b"HTTP/1.0 200 OK\r\n\r\n{}".to_vec(), 1 << 20),
        (
            "int() spelling",
            b"HTTP/1.1 200 OK\r\nContent-Length: +0_2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length of 4300 digits",
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}2\r\n\r\n{{}}",
                "0".repeat(4299)
            )
            .into_bytes(),
            1 << 20,
        ),
        (
            "padded name and value",
            b"HTTP/1.1 200 OK\r\nContent-Length \x1f: \xa02 \r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "read to EOF",
            b"HTTP/1.1 200 OK\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "latin-1 header",
            b"HTTP/1.1 200 OK\r\nX-\xe9: \xff\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "headers at 64 KiB",
            format!("{at_limit}\r\n\r\n{{}}").into_bytes(),
            1 << 20,
        ),
        (
            "body at maximum",
            format!("HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{exact_body}").into_bytes(),
            16,
        ),
        (
            "unbounded body at maximum",
            format!("HTTP/1.1 200 OK\r\n\r\n{exact_body}").into_bytes(),
            16,
        ),
        (
            "UTF-8 BOM body",
            b"HTTP/1.1 200 OK\r\n\r\n\xef\xbb\xbf{}".to_vec(),
            1 << 20,
        ),
        (
            "UTF-16 body",
            b"HTTP/1.1 200 OK\r\n\r\n{\x00}\x00".to_vec(),
            1 << 20,
        ),
    ];
    for (name, raw, maximum_body) in cases {
        let result = respond(raw, maximum_body);
        assert!(result.is_ok(), "{name}: {result:?}");
    }
    // The last duplicate JSON key wins, as json.loads does.
    let result = respond(&b"HTTP/1.1 200 OK\r\n\r\n{\"a\":1,\"a\":2}"[..], 1 << 20).unwrap();
    assert_eq!(result.get("a"), Some(&Json::Int(2)));
}

#[test]
fn bodies_that_are_not_json_objects() {
    for body in ["[1]", "null", "\"x\"", "1"] {
        let raw = format!("HTTP/1.1 200 OK\r\n\r\n{body}");
        let err = respond(raw, 1 << 20).unwrap_err();
        assert_eq!(
            err.python_line(),
            "RuntimeError: pinned HTTP returned an invalid object",
            "{body}"
        );
    }
    // Undecodable JSON is the json module's ValueError.
    let err = respond(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..],
        1 << 20,
    )
    .unwrap_err();
    assert_eq!(
        err.python_line(),
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
    );
}

#[test]
fn a_slow_body_past_the_deadline_is_refused() {
    // Headers arrive, the rest never does: the socket timeout (the time left)
    // passes inside recv and surfaces as TimeoutError.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        agents_tests::loopback_peers::read_request(&mut stream);
        std::io::Write::write_all(
            &mut stream,
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{",
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(2500));
    });
    let mut verify = || Ok(());
    let err = request_json(
        &format!("http://127.0.0.1:{port}/"),
        "t",
        PinnedRequest::new(i64::from(std::process::id()), Platform::Linux, &mut verify)
            .timeout(1.0),
    )
    .unwrap_err();
    assert_eq!(err.python_line(), "TimeoutError: timed out");
    server.join().unwrap();
}

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

    fn assert_untouched(&self) {
        let accepted = self.listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a refused request must not connect: {accepted:?}"
        );
    }
}

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

    fn refused_with(&self, message: &str) {
        let err = self.run().unwrap_err();
        assert_eq!(
            (err.class(), err.message()),
            (ErrorClass::Value, message),
            "{}",
            self.url
        );
    }
}

fn one_key(value: Json) -> Json {
    let mut object = JsonObject::new();
    object.insert("k", value);
    Json::Object(object)
}

#[test]
fn argument_refusals_are_value_errors_before_any_io() {
    let port = Untouched::new();
    let p = port.port();
    let url = format!("http://127.0.0.1:{p}/");
    let identity = "pinned HTTP process identity is invalid";
    for pid in [1, 0, -1] {
        Call {
            pid,
            ..Call::new(&url)
        }
        .refused_with(identity);
    }
    for platform in ["linux", "Windows", ""] {
        Call {
            platform: PlatformName::parse(platform),
            ..Call::new(&url)
        }
        .refused_with(identity);
    }
    // The identity is checked before the URL.
    Call {
        pid: 0,
        ..Call::new("bad")
    }
    .refused_with(identity);

    let exact = "pinned HTTP requires an exact local IP endpoint";
    for bad in [
        format!("https://127.0.0.1:{p}/"),
        format!("127.0.0.1:{p}/"),
        format!("http://:{p}/"),
        "http://127.0.0.1/".to_string(),
        "http://127.0.0.1:/".to_string(),
        "http://127.0.0.1:0/".to_string(),
        format!("http://u@127.0.0.1:{p}/"),
        format!("http://:p@127.0.0.1:{p}/"),
        format!("http://127.0.0.1:{p}/#f"),
    ] {
        Call::new(bad).refused_with(exact);
    }
    let cases = [
        (format!("http://127.0.0.1:+{p}/"), format!("Port could not be cast to integer value as '+{p}'")),
        ("http://127.0.0.1:70000/".into(), "Port out of range 0-65535".into()),
        (format!("http://localhost:{p}/"), "'localhost' does not appear to be an IPv4 or IPv6 address".into()),
        (format!("http://LOCALHOST:{p}/"), "'localhost' does not appear to be an IPv4 or IPv6 address".into()),
        (format!("http://127.0.0.01:{p}/"), "'127.0.0.01' does not appear to be an IPv4 or IPv6 address".into()),
        (format!("http://[127.0.0.1]:{p}/"), "An IPv4 address cannot be in brackets".into()),
        (format!("http://[::1:{p}/"), "Invalid IPv6 URL".into()),
        (format!("http://[v1.x]:{p}/"), "'v1.x' does not appear to be an IPv4 or IPv6 address".into()),
        (
            format!("http://127.0.0.1\u{2100}:{p}/"),
            format!("netloc '127.0.0.1\u{2100}:{p}' contains invalid characters under NFKC normalization"),
        ),
        (format!("http://127.0.0.1:{p}/a b"), "pinned HTTP path is invalid".into()),
        (format!("http://127.0.0.1:{p}/é"), "pinned HTTP path is invalid".into()),
        (format!("http://127.0.0.1:{p}/?\x7f"), "pinned HTTP path is invalid".into()),
    ];
    for (bad, message) in cases {
        Call::new(bad).refused_with(&message);
    }

    let credential = "pinned HTTP credential format is invalid";
    let long = "a".repeat(4097);
    for token in ["", "a b", "é", "a\x7f", long.as_str()] {
        Call {
            token,
            ..Call::new(&url)
        }
        .refused_with(credential);
    }
    // The token is checked before the bounds.
    Call {
        token: "a b",
        timeout: 0.0,
        ..Call::new(&url)
    }
    .refused_with(credential);

    let bounds = "pinned HTTP bounds are invalid";
    for timeout in [0.0, -1.0, 60.0001, f64::NAN] {
        Call {
            timeout,
            ..Call::new(&url)
        }
        .refused_with(bounds);
    }
    for maximum_body in [0, -5, 16 * 1024 * 1024 + 1] {
        Call {
            maximum_body,
            ..Call::new(&url)
        }
        .refused_with(bounds);
    }
    // {"k":"123"} is 11 bytes.
    Call {
        maximum_body: 10,
        body: Some(one_key(Json::from("123"))),
        ..Call::new(&url)
    }
    .refused_with("pinned HTTP request exceeds limit");
    Call {
        body: Some(one_key(Json::Float(f64::NAN))),
        ..Call::new(&url)
    }
    .refused_with("Out of range float values are not JSON compliant");

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

#[test]
fn every_malformed_or_non_200_response_is_the_one_runtime_error() {
    let big = headers_of_exact_length(65_537);
    let cases: Vec<(String, Vec<u8>, i64)> = vec![
        (
            "201".into(),
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "404".into(),
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "302".into(),
            b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "100 first".into(),
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "HTTP/2".into(),
            b"HTTP/2 200\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "lowercase version".into(),
            b"http/1.1 200 OK\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "double space".into(),
            b"HTTP/1.1  200 OK\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "0200".into(),
            b"HTTP/1.1 0200 OK\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "status only".into(),
            b"HTTP/1.1\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "duplicate name".into(),
            b"HTTP/1.1 200 OK\r\nContent-Type: a\r\ncontent-type: b\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "duplicate after strip".into(),
            b"HTTP/1.1 200 OK\r\nX: a\r\nx  : b\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "duplicate after latin-1 lowercasing".into(),
            b"HTTP/1.1 200 OK\r\nX-\xe9: 1\r\nX-\xc9: 2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "obs-fold space".into(),
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "obs-fold tab".into(),
            b"HTTP/1.1 200 OK\r\nX: a\r\n\tb\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "no colon".into(),
            b"HTTP/1.1 200 OK\r\nBogus\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "empty name".into(),
            b"HTTP/1.1 200 OK\r\n\x1c : v\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "transfer-encoding".into(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length text".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length negative".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length trailing _".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2_\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length hex".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "length of 4301 digits".into(),
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}2\r\n\r\n{{}}",
                "0".repeat(4300)
            )
            .into_bytes(),
            1 << 20,
        ),
        (
            "length over maximum".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{}".to_vec(),
            16,
        ),
        (
            "body beyond length".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "short body".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}".to_vec(),
            1 << 20,
        ),
        (
            "unbounded body over maximum".into(),
            format!("HTTP/1.1 200 OK\r\n\r\n{{\"k\":\"{}\"}}", "a".repeat(20)).into_bytes(),
            16,
        ),
        (
            "EOF in headers".into(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n".to_vec(),
            1 << 20,
        ),
        ("empty response".into(), Vec::new(), 1 << 20),
        (
            "headers over 64 KiB".into(),
            format!("{big}\r\n\r\n{{}}").into_bytes(),
            1 << 20,
        ),
        (
            "no header end within 64 KiB".into(),
            format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(80_000)).into_bytes(),
            1 << 20,
        ),
    ];
    for (name, raw, maximum_body) in cases {
        let err = respond(raw, maximum_body).unwrap_err();
        assert_eq!(
            err.python_line(),
            "RuntimeError: pinned HTTP response is invalid",
            "{name}"
        );
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

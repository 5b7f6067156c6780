//! The pinned client against real loopback sockets: exact request bytes,
//! ownership proven before any byte (same-PID server thread vs. a server in a
//! child process), `verify_owner` ordering, the macOS `lsof` proof through an
//! injected runner, and timeouts.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use agents_common::{
    test_support::{request_json, LsofRunner, PinnedRequest},
    Error, Platform,
};
use agents_tests::loopback_peers::{counting, ok_json, ChildServer, Reply, ThreadServer};
use python_compat::{
    json::{Json, JsonObject},
    ErrorClass,
};

fn own_pid() -> i64 {
    i64::from(std::process::id())
}

fn object(pairs: &[(&str, Json)]) -> JsonObject {
    let mut object = JsonObject::new();
    for (key, value) in pairs {
        object.insert(*key, value.clone());
    }
    object
}

#[test]
fn get_sends_exact_bytes_after_proof_and_returns_the_object() {
    let server = ThreadServer::start(Reply::After(ok_json(r#"{"ok": true, "n": 1}"#)));
    let calls = Cell::new(0);
    let mut verify = counting(&calls);
    let result = request_json(
        &server.url("/api/admin/execution/status?x=1&y=%20"),
        "tok-EN_123",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify),
    )
    .unwrap();
    assert_eq!(
        result,
        object(&[("ok", Json::Bool(true)), ("n", Json::Int(1))])
    );
    assert_eq!(calls.get(), 1);
    let port = server.address.port();
    let expected = format!(
        "GET /api/admin/execution/status?x=1&y=%20 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Authorization: Bearer tok-EN_123\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        String::from_utf8(server.finish().received).unwrap(),
        expected
    );
}

#[test]
fn post_sends_compact_insertion_ordered_json_with_length() {
    let server = ThreadServer::start(Reply::After(ok_json(r#"{"lease":null}"#)));
    let port = server.address.port();
    let body = Json::Object(object(&[
        ("action", Json::from("seal")),
        ("expected_worker_instance_id", Json::from("abc")),
        ("operation_id", Json::from("é\u{7f}")),
        ("lease_id", Json::Int(7)),
    ]));
    let calls = Cell::new(0);
    let mut verify = counting(&calls);
    let result = request_json(
        &format!("HTTP://127.0.0.1:{port}/api/admin/execution/maintenance"),
        "t",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify).body(Some(&body)),
    )
    .unwrap();
    assert_eq!(result, object(&[("lease", Json::Null)]));
    let payload = r#"{"action":"seal","expected_worker_instance_id":"abc","operation_id":"\u00e9\u007f","lease_id":7}"#;
    let expected = format!(
        "POST /api/admin/execution/maintenance HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Authorization: Bearer t\r\nAccept: application/json\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    assert_eq!(
        String::from_utf8(server.finish().received).unwrap(),
        expected
    );
}

#[test]
fn an_empty_object_body_is_still_a_post_and_an_empty_path_is_slash() {
    let server = ThreadServer::start(Reply::After(ok_json("{}")));
    let port = server.address.port();
    let empty = Json::Object(JsonObject::new());
    let mut verify = || Ok(());
    request_json(
        &format!("http://127.0.0.1:{port}"),
        "t",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify).body(Some(&empty)),
    )
    .unwrap();
    let received = String::from_utf8(server.finish().received).unwrap();
    assert!(received.starts_with("POST / HTTP/1.1\r\n"), "{received}");
    assert!(
        received.ends_with("Content-Length: 2\r\n\r\n{}"),
        "{received}"
    );
}

#[test]
fn ipv6_loopback_is_bracketed_in_host_and_owned() {
    let server = ThreadServer::start_on("[::1]:0", Reply::After(ok_json(r#"{"v6":1}"#)));
    let port = server.address.port();
    let mut verify = || Ok(());
    let result = request_json(
        &format!("http://[::1]:{port}/api/health"),
        "t",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify),
    )
    .unwrap();
    assert_eq!(result.get("v6"), Some(&Json::Int(1)));
    let received = String::from_utf8(server.finish().received).unwrap();
    assert!(
        received.contains(&format!("\r\nHost: [::1]:{port}\r\n")),
        "{received}"
    );
}

#[test]
fn verify_owner_runs_once_on_the_proven_connection() {
    let server = ThreadServer::start(Reply::After(ok_json("{}")));
    let calls = Cell::new(0);
    let server_ref = &server;
    let mut verify = || {
        calls.set(calls.get() + 1);
        // The connection exists (ownership was proven on it)...
        assert!(server_ref.accepted_client(Duration::from_secs(5)).is_some());
        Ok(())
    };
    request_json(
        &server.url("/"),
        "t",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify),
    )
    .unwrap();
    assert_eq!(calls.get(), 1);
    server.finish();
}

#[test]
fn verify_owner_failure_propagates_and_nothing_is_sent() {
    let server = ThreadServer::start(Reply::Silent(Duration::from_secs(10)));
    let calls = Cell::new(0);
    let mut verify = || {
        calls.set(calls.get() + 1);
        Err(Error::runtime(
            "native worker or callback receipt changed before credentials were sent",
        ))
    };
    let err = request_json(
        &server.url("/"),
        "secret",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify),
    )
    .unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: native worker or callback receipt changed before credentials were sent"
    );
    assert_eq!(calls.get(), 1);
    assert!(server.finish().received.is_empty());
}

#[test]
fn verify_owner_outliving_the_deadline_sends_nothing() {
    let server = ThreadServer::start(Reply::Silent(Duration::from_secs(10)));
    let mut verify = || {
        std::thread::sleep(Duration::from_millis(1200));
        Ok(())
    };
    let err = request_json(
        &server.url("/"),
        "secret",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify).timeout(1.0),
    )
    .unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: pinned HTTP ownership verification timed out"
    );
    assert!(server.finish().received.is_empty());
}

#[test]
fn a_port_owned_by_another_process_gets_no_byte() {
    let mut child = ChildServer::start("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    let calls = Cell::new(0);
    let mut verify = counting(&calls);
    let started = Instant::now();
    let err = request_json(
        &child.url("/api/health"),
        "secret",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify).timeout(0.5),
    )
    .unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: pinned HTTP connection ownership could not be proven"
    );
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(calls.get(), 0, "verify_owner must not run without proof");
    assert_eq!(child.bytes_received(), 0);
}

#[test]
fn the_child_processes_own_pid_is_proven_across_processes() {
    let mut child =
        ChildServer::start("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"child\":1}");
    let calls = Cell::new(0);
    let mut verify = counting(&calls);
    let result = request_json(
        &child.url("/api/health"),
        "secret",
        PinnedRequest::new(child.pid(), Platform::Linux, &mut verify),
    )
    .unwrap();
    assert_eq!(result.get("child"), Some(&Json::Int(1)));
    assert_eq!(calls.get(), 1);
    assert!(child.bytes_received() > 0);
}

#[test]
fn a_pid_that_does_not_hold_the_socket_proves_nothing() {
    // PID 2 holds no socket of this connection; a PID beyond pid_max has no
    // /proc entry at all. Only this test process holds the accepted socket.
    for pid in [2, 4_000_000_000] {
        let server = ThreadServer::start(Reply::Silent(Duration::from_secs(10)));
        let mut verify = || panic!("verify_owner must not run");
        let err = request_json(
            &server.url("/"),
            "secret",
            PinnedRequest::new(pid, Platform::Linux, &mut verify).timeout(0.1),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "pinned HTTP connection ownership could not be proven"
        );
        assert!(server.finish().received.is_empty());
    }
}

/// An `lsof` stand-in that answers with realistic `-Fn` output describing the
/// connection the test server accepted, as macOS prints it.
struct AcceptedLsof<'a> {
    server: &'a ThreadServer,
    pid: i64,
    output: fn(server: SocketAddr, client: SocketAddr) -> Vec<u8>,
    calls: Mutex<Vec<Vec<String>>>,
    client: OnceLock<SocketAddr>,
}

impl<'a> AcceptedLsof<'a> {
    fn new(server: &'a ThreadServer, output: fn(SocketAddr, SocketAddr) -> Vec<u8>) -> Self {
        AcceptedLsof {
            server,
            pid: 4242,
            output,
            calls: Mutex::new(Vec::new()),
            client: OnceLock::new(),
        }
    }
}

impl LsofRunner for AcceptedLsof<'_> {
    fn run(&self, argv: &[String], _timeout: Duration) -> Option<Vec<u8>> {
        self.calls.lock().unwrap().push(argv.to_vec());
        assert_eq!(argv[4], self.pid.to_string());
        if self.client.get().is_none() {
            let client = self.server.accepted_client(Duration::from_secs(5))?;
            let _ = self.client.set(client);
        }
        Some((self.output)(self.server.address, *self.client.get()?))
    }
}

#[test]
fn darwin_proof_uses_lsof_output_for_the_exact_connection() {
    let server = ThreadServer::start(Reply::After(ok_json(r#"{"mac":true}"#)));
    let lsof = AcceptedLsof::new(&server, |server, client| {
        format!("p4242\nf12\nn{server}->{client}\n").into_bytes()
    });
    let calls = Cell::new(0);
    let mut verify = counting(&calls);
    let result = request_json(
        &server.url("/api/health"),
        "secret",
        PinnedRequest::new(4242, Platform::Darwin, &mut verify).lsof_runner(&lsof),
    )
    .unwrap();
    assert_eq!(result.get("mac"), Some(&Json::Bool(true)));
    assert_eq!(calls.get(), 1);
    assert_eq!(
        lsof.calls.lock().unwrap()[0],
        [
            "/usr/sbin/lsof",
            "-nP",
            "-a",
            "-p",
            "4242",
            "-iTCP",
            "-sTCP:ESTABLISHED",
            "-Fn"
        ]
    );
    assert!(!server.finish().received.is_empty());
}

#[test]
fn darwin_proof_refuses_swapped_ends_and_retries_until_the_deadline() {
    let server = ThreadServer::start(Reply::Silent(Duration::from_secs(10)));
    // The client's own socket row: ends swapped, never the server's.
    let lsof = AcceptedLsof::new(&server, |server, client| {
        format!("p4242\nf12\nn{client}->{server}\n").into_bytes()
    });
    let mut verify = || panic!("verify_owner must not run");
    let err = request_json(
        &server.url("/"),
        "secret",
        PinnedRequest::new(4242, Platform::Darwin, &mut verify)
            .timeout(0.3)
            .lsof_runner(&lsof),
    )
    .unwrap_err();
    assert_eq!(
        err.message(),
        "pinned HTTP connection ownership could not be proven"
    );
    assert!(
        lsof.calls.lock().unwrap().len() >= 2,
        "the proof is retried"
    );
    assert!(server.finish().received.is_empty());
}

#[test]
fn darwin_non_ascii_lsof_output_is_a_value_error_and_sends_nothing() {
    let server = ThreadServer::start(Reply::Silent(Duration::from_secs(10)));
    let lsof = AcceptedLsof::new(&server, |server, client| {
        format!("p4242\nf12\nn{server}->{client}\ncé\n").into_bytes()
    });
    let mut verify = || panic!("verify_owner must not run");
    let err = request_json(
        &server.url("/"),
        "secret",
        PinnedRequest::new(4242, Platform::Darwin, &mut verify).lsof_runner(&lsof),
    )
    .unwrap_err();
    assert_eq!(err.class(), ErrorClass::UnicodeDecode);
    assert!(
        err.message()
            .starts_with("'ascii' codec can't decode byte 0xc3 in position "),
        "{err}"
    );
    assert!(server.finish().received.is_empty());
}

#[test]
fn a_silent_server_times_out_as_timeout_error() {
    let server = ThreadServer::start(Reply::Silent(Duration::from_secs(5)));
    let mut verify = || Ok(());
    let started = Instant::now();
    let err = request_json(
        &server.url("/"),
        "secret",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify).timeout(1.0),
    )
    .unwrap_err();
    assert_eq!(err.python_line(), "TimeoutError: timed out");
    assert!(err.is_os_error());
    assert!(started.elapsed() < Duration::from_secs(3));
    // The request itself was sent before the wait.
    assert!(server.finish().received.starts_with(b"GET / HTTP/1.1\r\n"));
}

#[test]
fn a_closed_port_is_a_raw_connection_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut verify = || panic!("verify_owner must not run");
    let err = request_json(
        &format!("http://127.0.0.1:{port}/"),
        "secret",
        PinnedRequest::new(own_pid(), Platform::Linux, &mut verify),
    )
    .unwrap_err();
    // Python raises ConnectionRefusedError, an OSError with this text.
    assert_eq!(
        (err.class(), err.message()),
        (
            ErrorClass::ConnectionRefused,
            "[Errno 111] Connection refused"
        )
    );
}

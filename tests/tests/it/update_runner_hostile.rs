//! Hostile input to `update-runner`, side by side with the original where the
//! original is safe, and stricter than it where it is not (docs/design/security.md).
//! Every case checks the final status row: no input may leave an admitted
//! update unrecorded.

use crate::update_runner_support;

use std::ffi::OsString;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

use agents_tests::release_support::{gnu_sparse_tar_gz, gzip_bomb_tar_gz, Member};
use python_compat::json::{encode_indented, parse_json, Json, JsonObject};
use update_runner_support::{idle_health, updated_health, Fixture, Side, UPDATE_ID};

/// A value json.loads returns but no Rust string or i128 can hold: a lone
/// surrogate in a value and in a key, an escaped pair split over two encoded
/// surrogates, and ints beyond 128 bits.
fn exotic() -> Json {
    parse_json(
        b"{\"lone\": \"a\\ud800b\", \"\\udc80key\": 1, \"split\": \"\xed\xa0\xbd\xed\xb8\x80\", \
          \"big\": 1267650600228229401496703205376000000000000, \"negative\": -170141183460469231731687303715884105729}",
    )
    .expect("json.loads accepts it")
}

fn with_exotic(mut object: JsonObject) -> JsonObject {
    object.insert("exotic", exotic());
    object
}

#[test]
fn rows_and_health_documents_python_accepts_are_held_and_kept_byte_for_byte() {
    let originals = agents_tests::require_originals!();
    let mut fixture = Fixture::new("hostile-json");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    fixture.admitted = with_exotic(fixture.admitted.clone());
    fixture.set_health(
        with_exotic(idle_health()),
        with_exotic(updated_health("1.2.3", 28)),
    );
    let (original, port) = fixture.compare(&originals, None);
    assert_eq!(
        original.exit,
        Some(0),
        "the original completes: {}",
        original.stderr
    );
    assert_eq!(port.row.get("phase"), Some(&Json::from("complete")));
    assert_eq!(port.row.get("update_id"), Some(&Json::from(UPDATE_ID)));
    // The server's exotic values survive every runner write, exactly as
    // json.dumps writes them (and json.loads reads them back: the split pair
    // is written as the escapes of one character, which then reads as one).
    let written_once = parse_json(&encode_indented(&exotic())).unwrap();
    assert_eq!(port.row.get("exotic"), Some(&written_once));
    let written = String::from_utf8(encode_indented(&Json::Object(port.row.clone()))).unwrap();
    for text in [
        "\"a\\ud800b\"",
        "\"\\udc80key\": 1",
        "\"\\ud83d\\ude00\"",
        "1267650600228229401496703205376000000000000",
        "-170141183460469231731687303715884105729",
    ] {
        assert!(written.contains(text), "{text} in {written}");
    }
}

/// The pinned release's manifest on the release host.
const MANIFEST_PATH: &str = "/releases/download/v1.2.3/agents-server-manifest.json";
/// Memory any sane run stays far below; an unbounded read blows through it.
const MEMORY_BOUND_KIB: u64 = 96 * 1024;

/// A pinned 1.2.3 update whose manifest the test answers itself; returns
/// the fixture and the manifest's real bytes.
fn pinned(name: &str) -> (Fixture, Vec<u8>) {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    let manifest = fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    let bytes = update_runner_support::manifest_bytes(&Json::Object(manifest));
    (fixture, bytes)
}

/// Writes `head` and `body` and closes.
fn respond(head: Vec<u8>, body: Vec<u8>) -> impl Fn(&mut TcpStream) + Send + Sync + 'static {
    move |stream: &mut TcpStream| {
        let _ = stream.write_all(&head);
        let _ = stream.write_all(&body);
    }
}

/// Runs `test` alone in a fresh child process unless this is that child. A
/// measured run's peak RSS (wait4) includes the memory high-water mark of
/// the process that started it, which exec carries over, so the bounded
/// tests measure from a process that runs only them, not from the suite's.
fn measured_alone(test: &str) -> bool {
    agents_tests::ran_alone(module_path!(), test)
}

fn expect_bounded(outcome: &update_runner_support::Outcome, seconds: u64) {
    assert!(
        outcome.peak_rss_kib < MEMORY_BOUND_KIB,
        "peak RSS {} KiB",
        outcome.peak_rss_kib
    );
    assert!(
        outcome.elapsed < Duration::from_secs(seconds),
        "took {:?}",
        outcome.elapsed
    );
}

fn message(row: &JsonObject) -> &str {
    row.get("message").and_then(Json::as_str).unwrap_or("")
}

/// A response's head and body, as written.
type HeadAndBody = (Vec<u8>, Vec<u8>);

/// A `200 OK` head with `extra` header lines, closing the connection.
fn ok_head(extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

/// An odd answer of the release host to the manifest request, and the
/// phase the original's row ends in.
struct HttpEdge {
    label: &'static str,
    /// The head and body written before closing, given the manifest's real bytes.
    response: fn(&[u8]) -> HeadAndBody,
    /// `complete` or `failed`.
    phase: &'static str,
}

/// What http.client accepts (the update completes) and what it refuses.
fn http_edge_cases() -> [HttpEdge; 7] {
    [
        // http.client ignores a negative length and reads to the end.
        HttpEdge {
            label: "negative content length",
            response: |body| (ok_head("Content-Length: -1\r\n"), body.to_vec()),
            phase: "complete",
        },
        // The reason phrase is latin-1 to http.client: any bytes pass.
        HttpEdge {
            label: "non-utf8 reason",
            response: |body| {
                (
                    b"HTTP/1.1 200 \xff\xfe\r\nConnection: close\r\n\r\n".to_vec(),
                    body.to_vec(),
                )
            },
            phase: "complete",
        },
        // 100 header lines plus the blank one exceed http.client's 100.
        HttpEdge {
            label: "101 header lines",
            response: |body| {
                let many: String = (0..100).map(|n| format!("X-{n}: y\r\n")).collect();
                (ok_head(&many), body.to_vec())
            },
            phase: "failed",
        },
        // An invalid length is ignored by http.client; the original's own int()
        // of it then refuses.
        HttpEdge {
            label: "invalid content length",
            response: |body| (ok_head("Content-Length: abc\r\n"), body.to_vec()),
            phase: "failed",
        },
        HttpEdge {
            label: "bad chunk size",
            response: |_| {
                (
                    ok_head("Transfer-Encoding: chunked\r\n"),
                    b"zz\r\nxx\r\n0\r\n\r\n".to_vec(),
                )
            },
            phase: "failed",
        },
        HttpEdge {
            label: "a status line over 65536 bytes",
            response: |_| {
                let head = format!("HTTP/1.1 200 {}\r\n\r\n", "x".repeat(70_000));
                (head.into_bytes(), Vec::new())
            },
            phase: "failed",
        },
        HttpEdge {
            label: "a bad status line",
            response: |_| (b"HTTQ/1.1 200 OK\r\n\r\n".to_vec(), Vec::new()),
            phase: "failed",
        },
    ]
}

#[test]
fn release_host_http_edge_cases_end_as_the_original_ends() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    let originals = agents_tests::require_originals!();
    for HttpEdge {
        label,
        response,
        phase,
    } in http_edge_cases()
    {
        let (fixture, manifest) = pinned(&format!("http-{}", label.replace(' ', "-")));
        let (head, body) = response(&manifest);
        fixture.serve(
            MANIFEST_PATH,
            update_runner_support::Served::raw(respond(head, body)),
        );
        let (original, port) = fixture.compare(&originals, None);
        assert_eq!(
            original.row.get("phase").and_then(Json::as_str),
            Some(phase),
            "{label}: the original's row {:?}",
            original.row
        );
        expect_bounded(&port, 30);
        eprintln!("{label}: {}", message(&port.row));
    }
}

#[test]
fn header_lines_that_would_switch_minreqs_budget_off_stay_bounded() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    // Each line is 65535 bytes ending in a bare \n: minreq's header budget
    // subtracted len + 2 and wrapped around on exactly this line.
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("http-wrapping-headers");
    fixture.serve(
        MANIFEST_PATH,
        update_runner_support::Served::raw(|stream: &mut TcpStream| {
            if stream.write_all(b"HTTP/1.1 200 OK\r\n").is_err() {
                return;
            }
            let line = format!("X: {}\n", "y".repeat(65_535 - 4));
            for _ in 0..10_000 {
                if stream.write_all(line.as_bytes()).is_err() {
                    return;
                }
            }
        }),
    );
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(message(&port.row), "got more than 100 headers");
    expect_bounded(&port, 30);
}

#[test]
fn an_endless_chunk_of_health_is_refused_at_its_limit() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("health-endless-chunk");
    fixture.set_raw_health(|stream: &mut TcpStream| {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\n";
        if stream.write_all(head).is_err() {
            return;
        }
        let data = vec![b'{'; 64 * 1024];
        // 64 MiB at most, far past the 1 MB limit.
        for _ in 0..1024 {
            if stream.write_all(&data).is_err() {
                return;
            }
        }
    });
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(
        message(&port.row),
        "could not verify that AgentsServer is idle before restart: \
         server health response exceeds its safety limit"
    );
    expect_bounded(&port, 30);
}

#[test]
fn a_trickling_health_endpoint_cannot_hold_the_runner() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    // The original waits for ever here (urllib's timeout bounds each read, and
    // a byte arrives every 3 s); the port bounds each whole probe, so the
    // readiness wait retries and gives up at its own 45 s limit.
    let (fixture, _) = pinned("health-trickle");
    fixture.set_raw_health(|stream: &mut TcpStream| {
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{"
            .iter()
            .cycle()
            .take(200)
        {
            if stream.write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(3));
        }
    });
    let port = fixture.run(Side::Port);
    assert_eq!(port.exit, Some(1), "{}", port.stderr);
    assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
    assert_eq!(
        message(&port.row),
        "AgentsServer startup readiness timed out after 45 seconds"
    );
    expect_bounded(&port, 60);
}

#[test]
fn a_health_credential_with_control_characters_is_refused_without_echoing_it() {
    let originals = agents_tests::require_originals!();
    let (mut fixture, _) = pinned("health-crlf-token");
    let token = "secret-token\r\nX-Injected: 1";
    fixture.token = Some(token.to_string());
    let refusal = "could not verify that AgentsServer is idle before restart: \
                   Invalid header value for Authorization: it contains control characters";
    let (original, port) = fixture.compare(&originals, Some(refusal));
    // http.client refuses too, but repeats the credential in the row.
    assert!(
        message(&original.row).contains("secret-token"),
        "{:?}",
        original.row
    );
    assert!(!message(&port.row).contains("secret-token"));
    assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
    assert!(
        !fixture
            .health_requests()
            .iter()
            .any(|request| request.contains("X-Injected")),
        "nothing with the injected header reached the server"
    );
}

/// Builds a case's archive bytes for a fixture.
type ArchiveOf = Box<dyn Fn(&Fixture) -> Vec<u8>>;

#[test]
fn archives_past_the_extraction_budget_fail_the_update_quickly_and_leave_nothing() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    // The original has no budget: it writes a terabyte-sized sparse file or
    // three gigabytes of zeros, reads a gigabyte name into memory and copies
    // it into the row. The port refuses each from its headers.
    const ROOT: &str = "agents-server-1.2.3";
    let long_name = Member {
        declared_size: Some(1 << 30),
        ..Member::special("././@LongLink", b'L')
    };
    let cases: Vec<(&str, ArchiveOf)> = vec![
        (
            "sparse",
            Box::new(|_| gnu_sparse_tar_gz(&format!("{ROOT}/install.sh"), 1 << 40)),
        ),
        (
            "gzip bomb",
            Box::new(|_| gzip_bomb_tar_gz(ROOT, &format!("{ROOT}/install.sh"), 3 << 30)),
        ),
        (
            "long name",
            Box::new(move |fixture| fixture.archive(&[Member::dir(ROOT), long_name.clone()])),
        ),
        (
            "members",
            Box::new(|fixture| {
                let mut members = Fixture::legacy_members("1.2.3");
                members.extend(
                    std::iter::repeat_with(|| Member::dir(&format!("{ROOT}/again"))).take(50_001),
                );
                fixture.archive(&members)
            }),
        ),
    ];
    for (label, archive) in cases {
        let mut fixture = Fixture::new(&format!("hostile-archive-{}", label.replace(' ', "-")));
        let archive = archive(&fixture);
        fixture.publish_legacy("1.2.3", &archive);
        fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
        let port = fixture.run(Side::Port);
        assert_eq!(port.exit, Some(1), "{label}: {}", port.stderr);
        assert_eq!(
            port.row.get("phase"),
            Some(&Json::from("failed")),
            "{label}"
        );
        assert_eq!(
            message(&port.row),
            "release archive exceeds its extraction budget",
            "{label}"
        );
        assert!(port.installer.is_none(), "{label}: the installer never ran");
        assert!(
            port.leftovers.is_empty(),
            "{label}: the workspace is removed: {:?}",
            port.leftovers
        );
        expect_bounded(&port, 30);
    }
}

/// A sparse file of `size` bytes: large to `stat`, free to create.
fn sparse_file(path: &std::path::Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

#[test]
fn a_credential_that_is_not_a_small_regular_file_is_refused_and_only_its_entry_removed() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    // The original resolves a symlinked credential and deletes the file it
    // points at, waits for ever on a FIFO and reads any size whole.
    let (mut fixture, _) = pinned("hostile-credential");
    let planted = fixture.root.path().join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    let victim = planted.join("victim.json");
    std::fs::write(&victim, br#"{"token": "port-token"}"#).unwrap();
    let link = planted.join("link.auth.json");
    let pipe = planted.join("fifo.auth.json");
    let huge = planted.join("huge.auth.json");
    let cases = [
        (
            &link,
            "server update health credential is not a regular file",
        ),
        (
            &pipe,
            "server update health credential is not a regular file",
        ),
        (&huge, "server update health credential exceeds 64 KiB"),
    ];
    for (path, refusal) in cases {
        let _ = std::fs::remove_file(path);
        if path == &link {
            std::os::unix::fs::symlink(&victim, &link).unwrap();
        } else if path == &pipe {
            agents_tests::make_fifo(&pipe);
        } else {
            sparse_file(&huge, 300 << 20);
        }
        // argparse keeps the last --auth-token-file, as does the port.
        fixture.options = vec![
            "--expected-version".into(),
            "1.2.3".into(),
            "--auth-token-file".into(),
            path.to_string_lossy().into_owned(),
        ];
        let port = fixture.run(Side::Port);
        assert_eq!(port.exit, Some(1), "{refusal}: {}", port.stderr);
        assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
        assert_eq!(message(&port.row), refusal);
        assert!(
            std::fs::symlink_metadata(path).is_err(),
            "{path:?}: the entry at the credential path is removed"
        );
        assert!(port.installer.is_none());
        expect_bounded(&port, 30);
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        br#"{"token": "port-token"}"#,
        "the symlink's target survives"
    );
}

#[test]
fn a_public_key_that_is_not_a_small_regular_file_fails_the_update_without_waiting() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    let (mut fixture, _) = pinned("hostile-public-key");
    let planted = fixture.root.path().join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    let pipe = planted.join("key.pem");
    agents_tests::make_fifo(&pipe);
    let huge = planted.join("huge.pem");
    sparse_file(&huge, 300 << 20);
    for (key, refusal) in [
        (pipe.as_path(), "release public key is not a regular file"),
        (
            std::path::Path::new("/dev/zero"),
            "release public key is not a regular file",
        ),
        (huge.as_path(), "release public key exceeds 64 KiB"),
    ] {
        fixture.options = vec![
            "--expected-version".into(),
            "1.2.3".into(),
            "--public-key".into(),
            key.to_string_lossy().into_owned(),
        ];
        let port = fixture.run(Side::Port);
        assert_eq!(port.exit, Some(1), "{key:?}: {}", port.stderr);
        assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
        assert_eq!(message(&port.row), refusal, "{key:?}");
        expect_bounded(&port, 30);
    }
}

#[test]
fn a_status_file_that_is_not_a_small_regular_file_ends_the_run_without_waiting() {
    if measured_alone(agents_tests::test_name!()) {
        return;
    }
    let (mut fixture, _) = pinned("hostile-status");
    let planted = fixture.root.path().join("planted");
    std::fs::create_dir_all(&planted).unwrap();
    let pipe = planted.join("fifo-status.json");
    agents_tests::make_fifo(&pipe);
    let huge = planted.join("huge-status.json");
    sparse_file(&huge, 200 << 20);
    // A FIFO reads as no row at all, as the original reads an unreadable file;
    // an oversized row is refused unread. Either way the runner cannot
    // prove it owns the update and stops as the original stops then: exit 1,
    // nothing written, nothing on stderr.
    for status in [&pipe, &huge] {
        fixture.options = vec![
            "--expected-version".into(),
            "1.2.3".into(),
            "--status-file".into(),
            status.to_string_lossy().into_owned(),
        ];
        let port = fixture.run(Side::Port);
        assert_eq!(port.exit, Some(1), "{status:?}: {}", port.stderr);
        assert_eq!(port.stderr, "", "{status:?}");
        assert!(port.installer.is_none());
        expect_bounded(&port, 30);
    }
    assert_eq!(
        std::fs::metadata(&huge).unwrap().len(),
        200 << 20,
        "the oversized row is left as it was"
    );
    assert!(std::fs::symlink_metadata(&pipe)
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn an_installer_printing_a_credential_cannot_put_it_in_the_row() {
    // The original's patterns miss a token after `xBearer` or `Bearer\xff`; the
    // port also redacts the credential values it knows (the health token
    // and its own credential variables) wherever they appear.
    let originals = agents_tests::require_originals!();
    let (mut fixture, _) = pinned("hostile-installer-tail");
    let token = "health-3f9c2e71";
    fixture.token = Some(token.to_string());
    fixture.behaviour = Some(format!(
        "printf 'xBearer {token}\\n'\nprintf 'Bearer\\377{token}\\n'\n\
         printf 'agent=%s\\n' runner-secret\nexit 3\n"
    ));
    let original = fixture.run(Side::Original(&originals));
    let port = fixture.run(Side::Port);
    assert_eq!(original.exit, Some(1));
    assert!(message(&original.row).contains(token), "{:?}", original.row);
    assert!(message(&original.row).contains("runner-secret"));
    assert_eq!(port.exit, Some(1), "{}", port.stderr);
    assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
    assert_eq!(
        message(&port.row),
        "installer failed (3): xBearer [REDACTED]\n\
         Bearer\u{fffd}[REDACTED]\nagent=[REDACTED]"
    );
}

/// The bind address that is not UTF-8: install.sh must get it byte for byte.
const RAW_BIND: &[u8] = b"127.0.0.\xe9";

/// Arguments argparse takes that the port must run as the original does:
/// (label, extra arguments, the phase both rows end in). argparse keeps any
/// int and any bytes (as surrogate escapes).
fn arguments_argparse_takes(health_port: u16) -> Vec<(&'static str, Vec<OsString>, &'static str)> {
    vec![
        // The bind address only reaches install.sh, byte for byte.
        (
            "bind not utf-8",
            vec!["--bind".into(), OsString::from_vec(RAW_BIND.to_vec())],
            "complete",
        ),
        // Never equal to the identity a server reports.
        (
            "identity not utf-8",
            vec![
                "--expected-server-identity".into(),
                OsString::from_vec(b"server-\xe9".to_vec()),
            ],
            "failed",
        ),
        // int() spellings; install.sh gets str(int).
        (
            "port spelled loosely",
            vec![
                "--port".into(),
                format!(" +0{}_{} ", health_port / 10, health_port % 10).into(),
            ],
            "complete",
        ),
        // getaddrinfo keeps the low 16 bits: the original reaches the server.
        (
            "port past 65535",
            vec![
                "--port".into(),
                (u32::from(health_port) + 65_536).to_string().into(),
            ],
            "complete",
        ),
        (
            "negative port",
            vec!["--port".into(), "-1".into()],
            "failed",
        ),
        (
            "45-digit port",
            vec!["--port".into(), "7".repeat(45).into()],
            "failed",
        ),
    ]
}

/// compare() checks the installer's arguments lossily decoded; the port's
/// installer must have got [`RAW_BIND`] itself.
fn assert_the_installer_got_the_raw_bind(fixture: &Fixture) {
    let record = std::fs::read(
        fixture
            .run_dir(Side::Port)
            .join("installer/installer.record"),
    )
    .expect("the installer ran");
    let line = [b"arg=", RAW_BIND, b"\n"].concat();
    assert!(
        record
            .windows(line.len())
            .any(|window| window == line.as_slice()),
        "{}",
        OsString::from_vec(record.clone()).as_bytes().escape_ascii()
    );
}

#[test]
fn arguments_argparse_takes_are_run_as_the_original_runs_them() {
    // The original then completes or records the failure, and so must the
    // port: once the row is admitted, no argument may leave it unrecorded.
    let originals = agents_tests::require_originals!();
    let (mut fixture, _) = pinned("hostile-arguments");
    for (label, arguments, phase) in arguments_argparse_takes(fixture.health_port()) {
        fixture.raw_options = arguments;
        let (original, port) = fixture.compare(&originals, None);
        assert_eq!(
            original.row.get("phase"),
            Some(&Json::from(phase)),
            "{label}: original {:?}",
            original.row
        );
        assert_eq!(port.exit, original.exit, "{label}: {}", port.stderr);
        if label == "bind not utf-8" {
            assert_the_installer_got_the_raw_bind(&fixture);
        }
    }
}

#[test]
fn damaged_archives_and_overly_nested_manifests_end_as_the_original_ends() {
    let originals = agents_tests::require_originals!();
    let gzip = |data: &[u8]| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    };
    let (fixture, _) = pinned("hostile-damaged-archive");
    let whole = fixture.archive(&Fixture::legacy_members("1.2.3"));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // A download cut inside the gzip stream, signed as it is.
        ("truncated gzip", whole[..whole.len() / 2].to_vec()),
        ("empty archive", gzip(b"")),
        ("not gzip", b"plain text".to_vec()),
        ("zero blocks only", gzip(&[0u8; 1024])),
    ];
    // Messages may name the run's own scratch directory.
    let scratch = |message: &str, side: &str| {
        let mut text = message.replace(&format!("/{side}/tmp/"), "/<run>/tmp/");
        if let Some(at) = text.find("agents-server-update-") {
            let end = at + "agents-server-update-".len() + 8;
            text.replace_range(at..end.min(text.len()), "agents-server-update-<random>");
        }
        text
    };
    for (label, archive) in cases {
        fixture.publish_legacy("1.2.3", &archive);
        let original = fixture.run(Side::Original(&originals));
        let port = fixture.run(Side::Port);
        assert_eq!(
            original.row.get("phase"),
            Some(&Json::from("failed")),
            "{label}: {:?}",
            original.row
        );
        assert_eq!(port.row.get("phase"), original.row.get("phase"), "{label}");
        assert_eq!(port.exit, original.exit, "{label}");
        assert_eq!(
            scratch(message(&port.row), "port"),
            scratch(message(&original.row), "original"),
            "{label}"
        );
        assert!(
            port.installer.is_none() && original.installer.is_none(),
            "{label}"
        );
        assert!(port.leftovers.is_empty(), "{label}: {:?}", port.leftovers);
    }
    // A signed manifest nested past Python's recursion limit: the
    // publisher's bytes with a deep member spliced in, then signed.
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    let manifest = fixture.publish_legacy("1.2.3", &archive);
    let bytes = update_runner_support::manifest_bytes(&Json::Object(manifest));
    let deep = format!("{{\"deep\": {}0{},", "[".repeat(5_000), "]".repeat(5_000));
    let bytes = [deep.as_bytes(), &bytes[1..]].concat();
    let signature = fixture.key.sign(&bytes);
    fixture.serve(MANIFEST_PATH, update_runner_support::Served::ok(bytes));
    fixture.serve(
        "/releases/download/v1.2.3/agents-server-manifest.sig",
        update_runner_support::Served::ok(signature),
    );
    let (original, _) = fixture.compare(&originals, None);
    assert!(
        message(&original.row).contains("maximum recursion depth exceeded"),
        "{:?}",
        original.row
    );
}

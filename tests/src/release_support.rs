//! Release-signing fixtures shared by the update-runner tests, the black-box
//! tests and the demo: real Ed25519 keys, signed manifests, hand-built tar.gz
//! archives, a recording HTTP server on 127.0.0.1, and the original
//! `update_runner.py` run by python3 as the oracle.
// Plain data carriers of test fixtures; their field names say what they hold.
#![allow(missing_docs)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Originals;
pub use crate::TempDir;
use ed25519_dalek::pkcs8::EncodePublicKey;
use ed25519_dalek::{Signer, SigningKey};
use python_compat::json::{parse_json, Json};

/// Release base the tests trust instead of GitHub.
pub const TEST_RELEASE_BASE: &str = "http://127.0.0.1:9/releases";
/// npm registry prefix the tests trust.
pub const TEST_NPM_BASE: &str = "http://127.0.0.1:9/npm/@agentsdock/server/-/";

/// A freshly generated Ed25519 key pair with its public key written as the
/// SPKI PEM file the runner reads.
pub struct TestKey {
    pub signing: SigningKey,
    pub pem_path: PathBuf,
}

impl TestKey {
    pub fn generate(directory: &Path, name: &str) -> TestKey {
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut secret)
            .unwrap();
        let signing = SigningKey::from_bytes(&secret);
        let pem = signing
            .verifying_key()
            .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .unwrap();
        let pem_path = directory.join(name);
        std::fs::write(&pem_path, pem).unwrap();
        TestKey { signing, pem_path }
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.signing.sign(message).to_bytes().to_vec()
    }
}

/// Python's `json.dumps(value, indent=2, sort_keys=True) + "\n"`, the
/// publisher's manifest serialisation.
pub fn manifest_bytes(value: &Json) -> Vec<u8> {
    python_compat::json::encode_indented(value)
}

/// Run `script` with python3 (the originals on `sys.path`), feeding `input`
/// on stdin, and parse its stdout as JSON. Panics with stderr when Python
/// fails: once the originals are there, the oracle is part of the test.
pub fn python_oracle(originals: &Originals, script: &str, input: &[u8]) -> Json {
    let preamble = format!(
        "import sys, json, base64\nsys.path.insert(0, {:?})\nimport update_runner\n",
        originals.dir()
    );
    let mut child = Command::new("python3")
        .arg("-B")
        .arg("-c")
        .arg(format!("{preamble}{script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required for the oracle tests (scripts/setup.sh installs it)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_json(&output.stdout).unwrap()
}

/// One rejected metadata response for the rate-limit oracle: status code
/// and raw header pairs.
pub type RejectedResponse<'a> = (i32, Vec<(&'a str, &'a str)>);

/// The original's `release_rate_limit_delay` of each response at `now` (Unix
/// seconds), in the oracle's process (so its `TZ` applies): an int or null.
pub fn original_rate_limit_delays(
    originals: &Originals,
    cases: &[RejectedResponse<'_>],
    now: f64,
) -> Vec<Json> {
    let input: Vec<Json> = cases
        .iter()
        .map(|(code, headers)| {
            Json::Object(python_compat::json_object! {
                "code" => *code,
                "headers" => headers
                    .iter()
                    .map(|(name, value)| Json::Array(vec![Json::from(*name), Json::from(*value)]))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let script = format!(
        r#"
from email.message import Message
from urllib.error import HTTPError
update_runner.time.time = lambda: {now:?}
out = []
for case in json.load(sys.stdin):
    headers = Message()
    for name, value in case["headers"]:
        headers[name] = value
    error = HTTPError("http://127.0.0.1/", case["code"], "reason", headers, None)
    out.append(update_runner.release_rate_limit_delay(error))
print(json.dumps(out))
"#
    );
    let original = python_oracle(
        originals,
        &script,
        &python_compat::json::encode_compact(&Json::Array(input)).unwrap(),
    );
    original.as_array().unwrap().to_vec()
}

/// Base64 (standard, padded) for passing bytes to the oracle.
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One member of a hand-built tar archive; every field is written raw so
/// hostile names, types and modes reach the extractor unchanged.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: Vec<u8>,
    pub typeflag: u8,
    pub mode: u32,
    pub data: Vec<u8>,
    /// Header size when it differs from the data written (truncated members).
    pub declared_size: Option<u64>,
    pub linkname: Vec<u8>,
    pub mtime: u64,
    pub uid: u64,
    /// PAX `path` record replacing the header name.
    pub pax_path: Option<Vec<u8>>,
}

impl Member {
    pub fn file(name: &str, data: &[u8]) -> Member {
        Member {
            name: name.as_bytes().to_vec(),
            typeflag: b'0',
            mode: 0o644,
            data: data.to_vec(),
            declared_size: None,
            linkname: Vec::new(),
            mtime: 1_700_000_000,
            uid: 4321,
            pax_path: None,
        }
    }

    pub fn dir(name: &str) -> Member {
        Member {
            typeflag: b'5',
            mode: 0o755,
            ..Member::file(name, b"")
        }
    }

    pub fn special(name: &str, typeflag: u8) -> Member {
        Member {
            typeflag,
            ..Member::file(name, b"")
        }
    }

    pub fn link(name: &str, typeflag: u8, target: &str) -> Member {
        Member {
            typeflag,
            linkname: target.as_bytes().to_vec(),
            ..Member::file(name, b"")
        }
    }

    pub fn mode(mut self, mode: u32) -> Member {
        self.mode = mode;
        self
    }
}

/// A PAX extended header (`x`) carrying `records`, for the member after it.
pub fn pax_header(records: &[(&str, &str)]) -> Member {
    let mut data = Vec::new();
    for (key, value) in records {
        let body = format!(" {key}={value}\n");
        // Each record's length counts its own digits.
        let mut length = body.len() + 1;
        while length.to_string().len() + body.len() != length {
            length = length.to_string().len() + body.len();
        }
        data.extend_from_slice(format!("{length}{body}").as_bytes());
    }
    Member {
        data,
        ..Member::special("././@PaxHeader", b'x')
    }
}

/// Bytes of a gzip tar holding one old-GNU sparse member (`S`) at `name`
/// whose sparse map puts 512 bytes of data at the end of `real_size` bytes
/// of hole: tarfile would create a file of that apparent size.
pub fn gnu_sparse_tar_gz(name: &str, real_size: u64) -> Vec<u8> {
    // GNU base-256 numeric fields hold sizes past the octal field's 8 GiB.
    let base256 = |value: u64| {
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[4..].copy_from_slice(&value.to_be_bytes());
        field
    };
    let mut header = tar::Header::new_gnu();
    header.set_path(name).unwrap();
    header.set_entry_type(tar::EntryType::GNUSparse);
    header.set_mode(0o755);
    header.set_size(512);
    {
        let gnu = header.as_gnu_mut().unwrap();
        gnu.realsize = base256(real_size);
        gnu.sparse[0].offset = base256(real_size - 512);
        gnu.sparse[0].numbytes = base256(512);
    }
    header.set_cksum();
    let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    out.write_all(header.as_bytes()).unwrap();
    out.write_all(&[b'x'; 512]).unwrap();
    out.write_all(&[0u8; 1024]).unwrap();
    out.finish().unwrap()
}

/// Bytes of a gzip bomb: `directory`, then a member at `name` of `size`
/// zero bytes, as concatenated gzip members (one compressed MiB of zeros
/// repeated) so building it takes milliseconds however large `size` is.
pub fn gzip_bomb_tar_gz(directory: &str, name: &str, size: u64) -> Vec<u8> {
    let gzip = |data: &[u8]| {
        let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        out.write_all(data).unwrap();
        out.finish().unwrap()
    };
    let mut head = Vec::new();
    for (path, kind, length) in [
        (directory, tar::EntryType::Directory, 0),
        (name, tar::EntryType::Regular, size),
    ] {
        let mut header = tar::Header::new_ustar();
        header.set_path(path).unwrap();
        header.set_entry_type(kind);
        header.set_mode(0o755);
        header.set_size(length);
        header.set_cksum();
        head.extend_from_slice(header.as_bytes());
    }
    const MIB: u64 = 1 << 20;
    assert_eq!(size % MIB, 0, "whole MiB only");
    let mut bytes = gzip(&head);
    let zeros = gzip(&vec![0u8; MIB as usize]);
    for _ in 0..size / MIB {
        bytes.extend_from_slice(&zeros);
    }
    bytes.extend_from_slice(&gzip(&[0u8; 1024]));
    bytes
}

/// Write `members` as a gzip-compressed ustar archive (PAX records where
/// asked), ending with the two zero blocks unless the last member is
/// truncated (then the stream simply stops, as a cut download would).
pub fn write_tar_gz(path: &Path, members: &[Member]) {
    let file = std::fs::File::create(path).unwrap();
    let mut out = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut truncated = false;
    for member in members {
        if let Some(pax_path) = &member.pax_path {
            let mut record = format!(" path={}\n", String::from_utf8_lossy(pax_path)).into_bytes();
            let mut length = record.len() + 2;
            while format!("{length}").len() + record.len() != length {
                length = format!("{length}").len() + record.len();
            }
            record.splice(0..0, format!("{length}").into_bytes());
            write_member(
                &mut out,
                b"././@PaxHeader",
                b'x',
                0o644,
                &record,
                None,
                b"",
                0,
                0,
            );
        }
        write_member(
            &mut out,
            &member.name,
            member.typeflag,
            member.mode,
            &member.data,
            member.declared_size,
            &member.linkname,
            member.mtime,
            member.uid,
        );
        truncated = member.declared_size.is_some();
    }
    if !truncated {
        out.write_all(&[0u8; 1024]).unwrap();
    }
    out.finish().unwrap();
}

#[allow(clippy::too_many_arguments)]
fn write_member(
    out: &mut impl Write,
    name: &[u8],
    typeflag: u8,
    mode: u32,
    data: &[u8],
    declared_size: Option<u64>,
    linkname: &[u8],
    mtime: u64,
    uid: u64,
) {
    let mut header = tar::Header::new_ustar();
    {
        let ustar = header.as_ustar_mut().unwrap();
        let name = &name[..name.len().min(100)];
        ustar.name[..name.len()].copy_from_slice(name);
        let link = &linkname[..linkname.len().min(100)];
        ustar.linkname[..link.len()].copy_from_slice(link);
    }
    header.set_entry_type(tar::EntryType::new(typeflag));
    header.set_mode(mode);
    header.set_size(declared_size.unwrap_or(data.len() as u64));
    header.set_mtime(mtime);
    header.set_uid(uid);
    header.set_gid(uid);
    header.set_cksum();
    out.write_all(header.as_bytes()).unwrap();
    out.write_all(data).unwrap();
    if declared_size.is_none() {
        let padding = (512 - data.len() % 512) % 512;
        out.write_all(&vec![0; padding]).unwrap();
    }
}

/// One request the test server received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// What the test server answers.
pub struct Reply {
    pub status: u16,
    pub reason: &'static str,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// `Content-Length` to declare; `None` sends none and closes after the body.
    pub content_length: Option<u64>,
    /// Writes the whole response itself instead (hostile peers: malformed
    /// heads, endless or trickled bodies); it should stop once a write fails.
    pub raw: Option<RawResponder>,
}

/// A response written byte by byte by the test.
pub type RawResponder = std::sync::Arc<dyn Fn(&mut std::net::TcpStream) + Send + Sync>;

impl Reply {
    /// A response the test writes itself on the connection.
    pub fn raw(responder: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static) -> Reply {
        Reply {
            raw: Some(std::sync::Arc::new(responder)),
            ..Reply::ok(b"")
        }
    }

    pub fn ok(body: &[u8]) -> Reply {
        Reply {
            raw: None,
            status: 200,
            reason: "OK",
            headers: Vec::new(),
            body: body.to_vec(),
            content_length: Some(body.len() as u64),
        }
    }

    pub fn status(status: u16, reason: &'static str) -> Reply {
        Reply {
            status,
            reason,
            ..Reply::ok(b"")
        }
    }

    pub fn redirect(status: u16, location: &str) -> Reply {
        let mut reply = Reply::status(status, "Found");
        reply
            .headers
            .push(("Location".to_string(), location.to_string()));
        reply
    }
}

type Handler = dyn Fn(&SeenRequest) -> Reply + Send + Sync;

/// A real HTTP/1.1 server on 127.0.0.1 (one response per connection), over
/// plain TCP or TLS, that records every request; it stops when dropped.
pub struct TestServer {
    pub port: u16,
    /// The host name its URLs use (`127.0.0.1` unless a test changes it).
    pub host_name: String,
    pub requests: std::sync::Arc<std::sync::Mutex<Vec<SeenRequest>>>,
    tls: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start(handler: impl Fn(&SeenRequest) -> Reply + Send + Sync + 'static) -> TestServer {
        TestServer::serve(None, std::sync::Arc::new(handler))
    }

    /// An HTTPS server presenting `config`'s certificate; raw replies are
    /// plain-TCP only.
    pub fn start_tls(
        config: std::sync::Arc<rustls::ServerConfig>,
        handler: impl Fn(&SeenRequest) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        TestServer::serve(Some(config), std::sync::Arc::new(handler))
    }

    fn serve(
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
        handler: std::sync::Arc<Handler>,
    ) -> TestServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen, stopping) = (requests.clone(), stop.clone());
        let secure = tls.is_some();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let Some(config) = &tls else {
                    if let Some(raw) = answer(&mut stream, handler.as_ref(), &seen) {
                        raw(&mut stream);
                    }
                    continue;
                };
                // A client that refuses the certificate closes the handshake.
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let Ok(connection) = rustls::ServerConnection::new(config.clone()) else {
                    continue;
                };
                let mut secured = rustls::StreamOwned::new(connection, stream);
                let _ = answer(&mut secured, handler.as_ref(), &seen);
                secured.conn.send_close_notify();
                let _ = secured.flush();
            }
        });
        TestServer {
            port,
            host_name: "127.0.0.1".to_string(),
            requests,
            tls: secure,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}:{}{path}", self.host_name, self.port)
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.requests.lock().unwrap().clone()
    }
}

/// Read one request on `stream`, record it and write the handler's reply;
/// a raw reply is returned for the caller to write on the plain socket.
fn answer(
    stream: &mut (impl Read + Write),
    handler: &Handler,
    seen: &std::sync::Mutex<Vec<SeenRequest>>,
) -> Option<RawResponder> {
    let request = read_request(stream)?;
    seen.lock().unwrap().push(request.clone());
    let reply = handler(&request);
    if reply.raw.is_some() {
        return reply.raw;
    }
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reply.reason);
    for (key, value) in &reply.headers {
        head.push_str(&format!("{key}: {value}\r\n"));
    }
    if let Some(length) = reply.content_length {
        head.push_str(&format!("Content-Length: {length}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&reply.body);
    let _ = stream.flush();
    None
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read_request(stream: &mut impl Read) -> Option<SeenRequest> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect();
    Some(SeenRequest { path, headers })
}

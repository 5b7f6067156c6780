//! Real loopback peers for the pinned HTTP client tests: a one-shot server
//! thread inside the test process (so the connection is owned by this PID)
//! and a one-shot server in a child process (so it is not).

// Fixture plumbing whose names say what each item is; documenting every
// field would repeat them.
#![allow(missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use agents_common::Result;

/// What the server thread saw: the client's address and every byte it sent.
pub struct Seen {
    pub client: SocketAddr,
    pub received: Vec<u8>,
}

/// How the server thread answers.
pub enum Reply {
    /// Read one request (head plus any Content-Length body), then write these
    /// bytes and close.
    After(Vec<u8>),
    /// Read until the client closes or `Duration` passes, answering nothing.
    Silent(Duration),
}

/// A server thread of this process that accepts exactly one connection.
pub struct ThreadServer {
    pub address: SocketAddr,
    accepted: Receiver<SocketAddr>,
    handle: JoinHandle<Seen>,
}

impl ThreadServer {
    pub fn start(reply: Reply) -> Self {
        Self::start_on("127.0.0.1:0", reply)
    }

    pub fn start_on(bind: &str, reply: Reply) -> Self {
        let listener = TcpListener::bind(bind).expect("bind loopback");
        let address = listener.local_addr().unwrap();
        let (accepted_tx, accepted) = mpsc::channel();
        let handle = thread::spawn(move || {
            let (mut stream, client) = listener.accept().expect("accept");
            let _ = accepted_tx.send(client);
            let received = match reply {
                Reply::After(response) => {
                    let request = read_request(&mut stream);
                    // The client may stop reading early (oversized headers); that is its right.
                    let _ = stream.write_all(&response);
                    request
                }
                Reply::Silent(limit) => read_until_close(&mut stream, limit),
            };
            Seen { client, received }
        });
        ThreadServer {
            address,
            accepted,
            handle,
        }
    }

    /// `http://<address><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// The client address of the accepted connection, once accepted.
    pub fn accepted_client(&self, wait: Duration) -> Option<SocketAddr> {
        self.accepted.recv_timeout(wait).ok()
    }

    pub fn finish(self) -> Seen {
        self.handle.join().expect("server thread")
    }
}

/// Reads one HTTP request: the head, then as many body bytes as its
/// Content-Length says.
pub fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .map_or(0, |v| v.parse().unwrap());
            if data.len() >= end + 4 + length {
                return data;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return data,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
}

fn read_until_close(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut data = Vec::new();
    let _ = stream.read_to_end(&mut data);
    data
}

/// `HTTP/1.1 200 OK` with a Content-Length and `body`.
pub fn ok_json(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A one-shot server in a child Python process: it prints its port, accepts
/// one connection, waits for the request head (or for the client to close),
/// answers `response` if any request arrived, and finally prints how many
/// bytes it received.
pub struct ChildServer {
    pub child: Child,
    pub port: u16,
    stdout: BufReader<ChildStdout>,
}

const CHILD_SERVER: &str = r#"
import socket, sys
response = sys.argv[1].encode("latin-1")
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
connection, _ = listener.accept()
connection.settimeout(15)
received = b""
try:
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            break
        received += chunk
    if received:
        connection.sendall(response)
except OSError:
    pass
connection.close()
print(len(received), flush=True)
"#;

impl ChildServer {
    pub fn start(response: &str) -> Self {
        let mut child = Command::new("python3")
            .args(["-B", "-c", CHILD_SERVER, response])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must be available to run the child server");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let port = line.trim().parse().expect("child server port");
        ChildServer {
            child,
            port,
            stdout,
        }
    }

    pub fn pid(&self) -> i64 {
        i64::from(self.child.id())
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Bytes the child received, after the client side has closed.
    pub fn bytes_received(&mut self) -> usize {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let _ = self.child.wait();
        line.trim().parse().expect("child server byte count")
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        // Only this test's own child, by its handle; it has usually exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `verify_owner` callback that counts its calls.
pub fn counting(calls: &std::cell::Cell<u32>) -> impl FnMut() -> Result<()> + '_ {
    move || {
        calls.set(calls.get() + 1);
        Ok(())
    }
}

/// One request as a scripted server saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub target: String,
    /// Header lines in order, as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub raw: Vec<u8>,
}

impl Request {
    fn parse(raw: Vec<u8>) -> Self {
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(raw.len());
        let head = String::from_utf8_lossy(&raw[..end]).to_string();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or("").split(' ');
        let method = request_line.next().unwrap_or("").to_string();
        let target = request_line.next().unwrap_or("").to_string();
        let headers = lines
            .filter_map(|line| line.split_once(": "))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let body = raw.get(end + 4..).unwrap_or_default().to_vec();
        Request {
            method,
            target,
            headers,
            body,
            raw,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

type Handler = Box<dyn FnMut(&Request) -> Vec<u8> + Send>;

/// A server thread of this process answering every connection with
/// `handler(request)` until it is stopped; it keeps every request.
pub struct ScriptedServer {
    pub address: SocketAddr,
    requests: std::sync::Arc<std::sync::Mutex<Vec<Request>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    pub fn start(bind: &str, handler: impl FnMut(&Request) -> Vec<u8> + Send + 'static) -> Self {
        let listener = TcpListener::bind(bind).expect("bind loopback");
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (seen, stopped) = (requests.clone(), stop.clone());
        let mut handler: Handler = Box::new(handler);
        let handle = thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let (mut stream, _) = match listener.accept() {
                    Ok(connection) => connection,
                    Err(_) => {
                        thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                stream.set_nonblocking(false).unwrap();
                let raw = read_request(&mut stream);
                if raw.is_empty() {
                    continue; // the client gave up before sending anything
                }
                let request = Request::parse(raw);
                let response = handler(&request);
                seen.lock().unwrap().push(request);
                let _ = stream.write_all(&response);
            }
        });
        ScriptedServer {
            address,
            requests,
            stop,
            handle: Some(handle),
        }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

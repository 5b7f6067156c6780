//! Opening the connection one request is sent on, as `urlopen`'s handlers
//! open it for each [`Route`]: to the host itself, to a forward proxy (the
//! request line then carries the whole URL), or through an HTTP `CONNECT`
//! tunnel (`http.client`'s `_tunnel`) with TLS to the host inside it.
//!
//! Every step before the request is sent fails as urllib lets it: socket
//! errors, TLS errors and a refused tunnel (`Tunnel connection failed: 407
//! Proxy Authentication Required`) as `URLError`, a malformed proxy reply as
//! `http.client`'s own exception. All of it shares the request's deadline.

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::{remaining, tls, Deadlined, Failure, Stream, Target};
use crate::proxy::{self, Proxy, Route};
use agents_common::Error;
use python_compat::http_client::{host_port, read_status, LineReader, ReadFailure};
use python_compat::{ErrorClass, Exception, PythonInt};

/// `http.client.HTTP_PORT` and `HTTPS_PORT`: the ports a connection without
/// one uses (a proxy without a port, too, by the connection's class).
const HTTP_PORT: u16 = 80;
const HTTPS_PORT: u16 = 443;

/// An open connection and how the request must be written on it.
pub(super) struct Connection {
    pub(super) stream: Stream,
    /// The request line's target: the path, or the whole URL for a
    /// forward proxy.
    pub(super) request_target: String,
    /// `Proxy-Authorization` to send with the request (forward proxies).
    pub(super) proxy_authorization: Option<String>,
}

/// Connect for `url` (already parsed as `target`) along `route`.
pub(super) fn open(
    url: &str,
    target: &Target,
    route: &Route,
    deadline: Instant,
) -> Result<Connection, Failure> {
    match route {
        Route::Direct => {
            let socket = tcp(&target.host, &target.port, deadline)?;
            Ok(Connection {
                stream: secure_if(target.tls, socket, &target.host, deadline)?,
                request_target: target.selector.clone(),
                proxy_authorization: None,
            })
        }
        Route::Forward { proxy, tls } => {
            let default = if *tls { HTTPS_PORT } else { HTTP_PORT };
            let (host, port) = host_port(&proxy.host_port, default)?;
            let socket = tcp(&host, &port, deadline)?;
            Ok(Connection {
                stream: secure_if(*tls, socket, &host, deadline)?,
                request_target: url.to_string(),
                proxy_authorization: proxy.authorization.clone(),
            })
        }
        Route::Tunnel { proxy } => {
            let (host, port) = host_port(&proxy.host_port, HTTPS_PORT)?;
            let (tunnel_host, tunnel_port) = host_port(&proxy::request_host(url), HTTPS_PORT)?;
            let socket = tcp(&host, &port, deadline)?;
            let socket = tunnel(socket, &tunnel_host, &tunnel_port, proxy, deadline)?;
            Ok(Connection {
                stream: secure_if(true, socket, &tunnel_host, deadline)?,
                request_target: target.selector.clone(),
                proxy_authorization: None,
            })
        }
        Route::UnknownScheme(scheme) => Err(Failure::Protocol(
            Exception::new(ErrorClass::Os, format!("unknown url type: {scheme}"))
                .into_url_error()
                .into(),
        )),
    }
}

/// TLS to `host` over `socket` when `secure`, the handshake bounded by the
/// deadline; the plain socket otherwise.
fn secure_if(
    secure: bool,
    socket: TcpStream,
    host: &str,
    deadline: Instant,
) -> Result<Stream, Failure> {
    if !secure {
        return Ok(Stream::Plain(socket));
    }
    let stream =
        tls::wrap(socket, host, deadline).map_err(|failure| Failure::Connect(failure.0))?;
    Ok(Stream::Tls(Box::new(stream)))
}

/// The port getaddrinfo(3) resolves for Python's int: CPython passes it as
/// a C long's decimal text (`OverflowError` beyond), and glibc reads that
/// with `strtoul` into an `int`: a negative result is an unknown service
/// name, anything else keeps its low 16 bits (port 70000 connects to 4464,
/// as Python's does).
pub(super) fn service_port(port: &PythonInt) -> Result<u16, Failure> {
    let value = port
        .as_i128()
        .and_then(|value| i64::try_from(value).ok())
        .ok_or_else(|| {
            Failure::Protocol(Error::new(
                ErrorClass::Runtime,
                "Python int too large to convert to C long",
            ))
        })?;
    // strtoul negates a leading minus in unsigned arithmetic.
    let service = value as u64 as u32 as i32;
    if service < 0 {
        return Err(Failure::Protocol(
            Exception::new(
                ErrorClass::Os,
                "[Errno -8] Servname not supported for ai_socktype",
            )
            .into_url_error()
            .into(),
        ));
    }
    Ok(service as u16)
}

/// `socket.create_connection((host, port))`: each resolved address in turn
/// until one connects; the last error otherwise.
fn tcp(host: &str, port: &PythonInt, deadline: Instant) -> Result<TcpStream, Failure> {
    let port = service_port(port)?;
    let mut last = None;
    let addresses = python_compat::socket::getaddrinfo(host, port).map_err(Failure::Connect)?;
    for address in addresses {
        let timeout = remaining(deadline).map_err(Failure::Connect)?;
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(socket) => return Ok(socket),
            Err(error) => last = Some(error),
        }
    }
    Err(Failure::Connect(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "getaddrinfo returns an empty list")
    })))
}

/// `HTTPConnection._tunnel`: `CONNECT host:port HTTP/1.0` with the proxy's
/// credentials, a `200` status line and the reply's header lines (any
/// number, each within `_MAXLINE`) read; the socket is then the host's.
fn tunnel(
    socket: TcpStream,
    host: &str,
    port: &PythonInt,
    proxy: &Proxy,
    deadline: Instant,
) -> Result<TcpStream, Failure> {
    let mut request = format!("CONNECT {host}:{port} HTTP/1.0\r\n");
    if let Some(authorization) = &proxy.authorization {
        request.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
    }
    request.push_str("\r\n");
    let mut socket = socket;
    let timeout = remaining(deadline).map_err(Failure::Connect)?;
    socket
        .set_write_timeout(Some(timeout))
        .and_then(|()| socket.write_all(request.as_bytes()))
        .map_err(Failure::Connect)?;
    let mut reader = LineReader::new(Deadlined {
        stream: socket,
        deadline,
    });
    // Socket errors while connecting are all URLError, the reply's too.
    let as_connect = |failure| match failure {
        ReadFailure::Socket(error) => Failure::Connect(error),
        ReadFailure::Protocol(exception) => Failure::from(exception),
    };
    let (code, reason) = read_status(&mut reader).map_err(as_connect)?;
    if code != 200 {
        return Err(Failure::Connect(io::Error::other(format!(
            "Tunnel connection failed: {code} {reason}"
        ))));
    }
    loop {
        let line = reader.line("header line").map_err(as_connect)?;
        if matches!(line.as_slice(), b"\r\n" | b"\n" | b"") {
            break;
        }
    }
    // Bytes the proxy sent past its reply are dropped, as http.client's
    // buffered reader drops them.
    Ok(reader.into_inner().stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::urllib::{get, Routing};
    use std::time::Duration;

    /// A peer that accepts one connection and says nothing for `hold`.
    fn silent_peer(hold: Duration) -> (u16, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let accepted = listener.accept();
            std::thread::sleep(hold);
            drop(accepted);
        });
        (port, peer)
    }

    #[test]
    fn a_silent_tls_peer_ends_at_the_deadline_in_cpythons_words() {
        let (port, peer) = silent_peer(Duration::from_secs(3));
        let script = "import sys, urllib.request\n\
            try: urllib.request.urlopen(sys.argv[1], timeout=1)\n\
            except Exception as exc: print(exc)";
        let url = format!("https://127.0.0.1:{port}/");
        let output = std::process::Command::new("python3")
            .args(["-B", "-c", script, &url])
            .output()
            .expect("python3 (scripts/setup.sh installs it)");
        peer.join().unwrap();
        let python = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let (port, peer) = silent_peer(Duration::from_secs(3));
        let started = Instant::now();
        let url = format!("https://127.0.0.1:{port}/");
        let deadline = started + Duration::from_secs(1);
        let Err(failure) = get(&url, &[], deadline, Routing::Direct) else {
            panic!("a silent peer cannot answer");
        };
        assert!(started.elapsed() < Duration::from_millis(2500));
        peer.join().unwrap();
        assert_eq!(failure.into_error().message(), python);
    }
}

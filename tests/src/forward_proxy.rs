//! Real forward proxies on loopback for the update-runner's proxy tests,
//! from Debian's packages (installed by `scripts/setup.sh`), each started by
//! the test on a free 127.0.0.1 port with its own configuration in a
//! temporary directory and stopped (killed by its PID and reaped) when
//! dropped:
//!
//! - tinyproxy, plain HTTP, optionally requiring Basic credentials: its log
//!   shows `CONNECT host:port HTTP/1.0` for a tunnel and
//!   `GET http://... HTTP/1.1` for a forwarded request;
//! - squid with an `https_port`, a proxy that is itself reached over TLS
//!   (`http_proxy=https://...`): its access log shows `GET http://...`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::test_tls::ServerIdentity;
use crate::{free_port, skip, TempDir};

/// Which proxy program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    Tinyproxy,
    Squid,
}

impl Program {
    /// Where Debian installs it.
    fn candidates(self) -> [&'static str; 2] {
        match self {
            Program::Tinyproxy => ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"],
            Program::Squid => ["/usr/sbin/squid", "/usr/bin/squid"],
        }
    }

    /// Its foreground command line for `config`.
    fn arguments(self, config: &Path) -> [&std::ffi::OsStr; 3] {
        match self {
            Program::Tinyproxy => ["-d".as_ref(), "-c".as_ref(), config.as_os_str()],
            Program::Squid => ["-N".as_ref(), "-f".as_ref(), config.as_os_str()],
        }
    }
}

/// A running proxy.
pub struct ForwardProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    program: Program,
    child: Child,
    log: PathBuf,
    _dir: TempDir,
}

impl ForwardProxy {
    /// A tinyproxy for `test`, requiring `credentials` (user, password:
    /// letters, digits, `-`, `.`, `_`) when given; `None` after reporting the
    /// test skipped when it is not installed (a failure under `CI=true`).
    pub fn start_or_skip(test: &str, credentials: Option<(&str, &str)>) -> Option<ForwardProxy> {
        let dir = TempDir::new("forward-proxy");
        let port = free_port();
        let log = dir.path().join("tinyproxy.log");
        let mut config = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 60\nMaxClients 20\n\
             LogFile \"{}\"\nLogLevel Connect\n",
            log.display()
        );
        if let Some((user, password)) = credentials {
            config.push_str(&format!("BasicAuth {user} {password}\n"));
        }
        ForwardProxy::start(test, Program::Tinyproxy, dir, port, &config, log)
    }

    /// A squid for `test` that clients reach over TLS, presenting
    /// `identity`; `None` after reporting the test skipped when squid is not
    /// installed.
    pub fn start_tls_or_skip(test: &str, identity: &ServerIdentity) -> Option<ForwardProxy> {
        let dir = TempDir::new("forward-proxy");
        // squid drops to its own user, which must write the logs here.
        crate::set_mode(dir.path(), 0o777);
        let port = free_port();
        let (certificate, key) = identity.write_pem(dir.path());
        let log = dir.path().join("access.log");
        let config = format!(
            "https_port 127.0.0.1:{port} tls-cert={} tls-key={}\n\
             http_access allow all\ncache deny all\npid_filename none\n\
             visible_hostname test-proxy\ndns_nameservers 127.0.0.1\n\
             access_log stdio:{}\ncache_log {}\ncoredump_dir {}\n",
            certificate.display(),
            key.display(),
            log.display(),
            dir.path().join("cache.log").display(),
            dir.path().display()
        );
        ForwardProxy::start(test, Program::Squid, dir, port, &config, log)
    }

    fn start(
        test: &str,
        program: Program,
        dir: TempDir,
        port: u16,
        config: &str,
        log: PathBuf,
    ) -> Option<ForwardProxy> {
        let candidates = program.candidates();
        let Some(path) = candidates.iter().map(Path::new).find(|path| path.exists()) else {
            skip(
                test,
                &format!("{program:?} not installed (scripts/setup.sh installs it)"),
            );
            return None;
        };
        let config_path = dir.path().join("proxy.conf");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(path)
            .args(program.arguments(&config_path))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the proxy");
        let mut proxy = ForwardProxy {
            port,
            program,
            child,
            log,
            _dir: dir,
        };
        proxy.wait_until_listening();
        Some(proxy)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{:?} exited with {status}: {}",
                    self.program,
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not listen",
                self.program
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:<port>` (`https://` for squid), as `*_proxy` names it.
    pub fn url(&self) -> String {
        let scheme = match self.program {
            Program::Tinyproxy => "http",
            Program::Squid => "https",
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The proxy URL carrying `user:password@` as given (already quoted).
    pub fn url_with_credentials(&self, user: &str, password: &str) -> String {
        self.url()
            .replacen("://", &format!("://{user}:{password}@"), 1)
    }

    /// Its whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every request it received so far, in order: tinyproxy's whole request
    /// lines (`CONNECT 127.0.0.1:443 HTTP/1.0`, `GET http://127.0.0.1:9/x
    /// HTTP/1.1`), squid's method and URL (`GET http://127.0.0.1:9/x`).
    pub fn requests(&self) -> Vec<String> {
        let text = self.log_text();
        match self.program {
            Program::Tinyproxy => text
                .lines()
                .filter_map(|line| line.split_once("]: Request (file descriptor "))
                .filter_map(|(_, rest)| rest.split_once("): "))
                .map(|(_, request)| request.to_string())
                .collect(),
            // time elapsed client code/status bytes method URL ...; a
            // connection that ended before a request (a refused TLS
            // handshake) is logged with the method `-`.
            Program::Squid => text
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let method = fields.get(5).filter(|method| **method != "-")?;
                    Some(format!("{method} {}", fields.get(6)?))
                })
                .collect(),
        }
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! A real forward proxy on loopback for the update-runner's proxy tests:
//! Debian's `tinyproxy` (installed by `scripts/setup.sh`), started by the
//! test on a free 127.0.0.1 port with its own configuration in a temporary
//! directory, optionally requiring Basic credentials, and stopped (killed
//! by its PID and reaped) when dropped. Its log tells which requests went
//! through it: `CONNECT host:port HTTP/1.0` for a tunnel, `GET http://...`
//! for a forwarded request.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, skip, TempDir};

/// Where Debian installs the proxy.
const TINYPROXY_PATHS: [&str; 2] = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"];
/// Why a proxy test cannot run without it.
pub const MISSING_PROXY: &str = "tinyproxy not installed (scripts/setup.sh installs it)";

/// A running tinyproxy.
pub struct ForwardProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    log: PathBuf,
    _dir: TempDir,
}

impl ForwardProxy {
    /// A proxy for `test`, requiring `credentials` (user, password) when
    /// given; `None` after reporting the test skipped when tinyproxy is not
    /// installed (a failure under `CI=true`).
    pub fn start_or_skip(test: &str, credentials: Option<(&str, &str)>) -> Option<ForwardProxy> {
        let Some(program) = TINYPROXY_PATHS
            .iter()
            .map(Path::new)
            .find(|path| path.exists())
        else {
            skip(test, MISSING_PROXY);
            return None;
        };
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
        let config_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(program)
            .arg("-d")
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tinyproxy");
        let mut proxy = ForwardProxy {
            port,
            child,
            log,
            _dir: dir,
        };
        proxy.wait_until_listening();
        Some(proxy)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("tinyproxy exited with {status}: {}", self.log_text());
            }
            assert!(Instant::now() < deadline, "tinyproxy did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:<port>`, as `http_proxy` names it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The proxy URL carrying `user:password@` as given (already quoted).
    pub fn url_with_credentials(&self, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// Its whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every request line it received so far, in order
    /// (`CONNECT 127.0.0.1:443 HTTP/1.0`, `GET http://127.0.0.1:9/x HTTP/1.1`).
    pub fn requests(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter_map(|line| line.split_once("]: Request (file descriptor "))
            .filter_map(|(_, rest)| rest.split_once("): "))
            .map(|(_, request)| request.to_string())
            .collect()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

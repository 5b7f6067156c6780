//! Running one native service-manager command the way the original's
//! `subprocess.run(args, stdin=DEVNULL, capture_output=True, text=True,
//! timeout=..., check=False)` does, behind a trait so tests can replay
//! recorded `systemctl` / `launchctl` output.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use python_compat::{repr_list, ErrorClass};

/// What one native command printed (`subprocess.run(capture_output=True)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandCapture {
    /// The exit status (`returncode`), negative for a signal.
    pub status: i32,
    /// Captured stdout bytes.
    pub stdout: Vec<u8>,
    /// Captured stderr bytes.
    pub stderr: Vec<u8>,
}

/// Runs one native command for [`NativeServices`](super::NativeServices).
///
/// Tests inject an implementation that replays recorded output; production
/// uses [`SystemCommandRunner`].
pub trait CommandRunner {
    /// Runs `args` (the program first) with standard input from `/dev/null`,
    /// capturing both output streams, and kills it once `timeout` passes.
    /// A non-zero exit is a normal result, not an error.
    fn run(&self, args: &[String], timeout: Duration) -> Result<CommandCapture>;
}

/// The real runner: the program is looked up on `PATH` (`systemctl`) or given
/// absolutely (`/bin/launchctl`), and inherits this process's environment plus
/// any variables set with [`SystemCommandRunner::with_environment`].
#[derive(Debug, Clone, Default)]
pub struct SystemCommandRunner {
    environment: Vec<(OsString, OsString)>,
    clean_environment: bool,
    discard_stderr: bool,
}

impl SystemCommandRunner {
    /// Adds variables to every command's environment, for example the `HOME`
    /// and `XDG_RUNTIME_DIR` that select one particular systemd user manager.
    pub fn with_environment<K, V>(mut self, variables: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.environment.extend(
            variables
                .into_iter()
                .map(|(key, value)| (key.into(), value.into())),
        );
        self
    }

    /// Starts commands with only the variables given by
    /// [`SystemCommandRunner::with_environment`] (Python's `env=`), so nothing
    /// inherited, such as `DYLD_*` or `TMUX`, reaches the program.
    pub fn with_clean_environment(mut self) -> Self {
        self.clean_environment = true;
        self
    }

    /// Sends standard error to `/dev/null` (Python's `stderr=DEVNULL`)
    /// instead of capturing it; the capture's `stderr` is then empty.
    pub fn with_stderr_discarded(mut self) -> Self {
        self.discard_stderr = true;
        self
    }
}

impl CommandRunner for SystemCommandRunner {
    fn run(&self, args: &[String], timeout: Duration) -> Result<CommandCapture> {
        let (program, arguments) = args
            .split_first()
            .ok_or_else(|| Error::value("native service command is empty"))?;
        let mut command = Command::new(program);
        if self.clean_environment {
            command.env_clear();
        }
        let mut child = command
            .args(arguments)
            .envs(self.environment.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if self.discard_stderr {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .spawn()
            .map_err(|err| Error::from_io_path(&err, Path::new(program)))?;
        // Drain both pipes on their own threads so a chatty command cannot
        // block on a full pipe while the deadline is enforced here.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                // Python's returncode: the exit code, or minus the signal.
                let code = status
                    .code()
                    .unwrap_or_else(|| -status.signal().unwrap_or(0));
                return Ok(CommandCapture {
                    status: code,
                    stdout: stdout.join().unwrap_or_default(),
                    stderr: stderr.join().unwrap_or_default(),
                });
            }
            if Instant::now() >= deadline {
                // subprocess.run kills only the direct child, waits, and raises
                // TimeoutExpired; the reader threads are left to finish alone.
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::new(
                    ErrorClass::Timeout,
                    format!(
                        "Command '{}' timed out after {} seconds",
                        repr_list(args),
                        seconds(timeout)
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

fn drain<R: Read + Send + 'static>(stream: Option<R>) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut data = Vec::new();
        if let Some(mut stream) = stream {
            let _ = stream.read_to_end(&mut data);
        }
        data
    })
}

/// The timeout as the original passes it: whole seconds print as Python ints.
fn seconds(timeout: Duration) -> String {
    if timeout.subsec_nanos() == 0 {
        timeout.as_secs().to_string()
    } else {
        format!("{:?}", timeout.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_print_like_python_numbers() {
        assert_eq!(seconds(Duration::from_secs(10)), "10");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5");
        assert_eq!(
            repr_list(&["systemctl".into(), "--user".into()]),
            "['systemctl', '--user']"
        );
    }
}

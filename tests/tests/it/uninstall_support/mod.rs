//! Shared support of the `uninstall` black-box tests: running the original
//! `uninstall.sh` (the oracle) and the port side by side, a pseudo-terminal
//! for the prompts, legacy installation fixtures and file-tree snapshots.

pub(crate) mod darwin;
pub(crate) mod pty;
pub(crate) mod split;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use agents_tests::{binary_path, poll_until, Originals, Sandbox};

pub(crate) use pty::Pty;

/// Which implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Implementation<'a> {
    /// `bash uninstall.sh` of the Python originals, the oracle.
    Original(&'a Originals),
    /// `bash uninstall.sh` of a release runtime folder: the original beside
    /// the upstream `execution_uninstall.py` it hands a split layout to.
    Release(&'a Path),
    /// The `uninstall` binary under test.
    Port,
}

impl Implementation<'_> {
    /// A command running this implementation with no arguments yet.
    pub(crate) fn command(self) -> Command {
        let script = match self {
            Implementation::Original(originals) => originals.file("uninstall.sh"),
            Implementation::Release(runtime) => runtime.join("uninstall.sh"),
            Implementation::Port => return Command::new(binary_path("uninstall")),
        };
        let mut command = Command::new("bash");
        command.arg(script);
        command
    }

    /// True for the oracle's scripts, whose campaigns are observed.
    pub(crate) fn is_original(self) -> bool {
        !matches!(self, Implementation::Port)
    }
}

/// What stdin is.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    /// `/dev/null`: not a terminal.
    Null,
    /// A pseudo-terminal on which these bytes are typed (the answers,
    /// newline-terminated; `\x04` at a line start is end of input).
    Terminal(Vec<u8>),
}

/// How one run ended.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

impl Outcome {
    /// The exit code (panics when killed by a signal).
    pub(crate) fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }

    /// Both streams with `base` replaced by `<BASE>`, for comparing runs in
    /// different directories.
    pub(crate) fn normalized(&self, base: &Path) -> (i32, String, String) {
        let base = base.to_string_lossy();
        (
            self.code(),
            self.stdout.replace(base.as_ref(), "<BASE>"),
            self.stderr.replace(base.as_ref(), "<BASE>"),
        )
    }

    /// stdout lines.
    pub(crate) fn stdout_lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

/// The environment of a run: only these variables (plus `LC_ALL=C`, so the
/// coreutils messages of both implementations are the same).
pub(crate) fn clean_env(vars: &[(&str, OsString)]) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vars
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    env.push(("LC_ALL".into(), "C".into()));
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push((
            "PATH".into(),
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        ));
    }
    env
}

/// A started run whose output is collected in the background.
pub(crate) struct Running {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<thread::JoinHandle<()>>,
    // Kept open until the child has exited.
    pty: Option<Pty>,
}

fn collect(
    mut stream: impl Read + Send + 'static,
) -> (Arc<Mutex<Vec<u8>>>, thread::JoinHandle<()>) {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buffer);
    let handle = thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(count) => sink.lock().unwrap().extend_from_slice(&chunk[..count]),
            }
        }
    });
    (buffer, handle)
}

/// Starts `implementation args` with exactly `env` and `input`.
pub(crate) fn start(
    implementation: Implementation<'_>,
    env: &[(String, OsString)],
    args: &[&str],
    input: Input,
) -> Running {
    start_ignoring(implementation, env, args, input, &[])
}

/// [`start`] with `ignored` signals set to `SIG_IGN` in the uninstaller, as a
/// caller such as `nohup` or a masking installer leaves them. HUP, INT and
/// TERM are otherwise at their defaults, whatever the test run inherited (a
/// suite started in the background ignores INT).
pub(crate) fn start_ignoring(
    implementation: Implementation<'_>,
    env: &[(String, OsString)],
    args: &[&str],
    input: Input,
    ignored: &'static [libc::c_int],
) -> Running {
    let mut command = implementation.command();
    agents_tests::with_termination_signals(&mut command, ignored);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let pty = match &input {
        Input::Null => {
            command.stdin(Stdio::null());
            None
        }
        Input::Terminal(_) => {
            let pty = Pty::open();
            command.stdin(pty.slave_stdio());
            Some(pty)
        }
    };
    let mut child = command.spawn().expect("the uninstaller starts");
    if let (Some(pty), Input::Terminal(typed)) = (&pty, &input) {
        pty.type_input(typed);
    }
    let (stdout, out_reader) = collect(child.stdout.take().unwrap());
    let (stderr, err_reader) = collect(child.stderr.take().unwrap());
    Running {
        child,
        stdout,
        stderr,
        readers: vec![out_reader, err_reader],
        pty,
    }
}

impl Running {
    /// The PID of the uninstaller (bash or the port).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// stderr so far.
    pub(crate) fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// stdout so far.
    pub(crate) fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Waits (bounded) until stdout contains `text`.
    pub(crate) fn wait_for_stdout(&self, text: &str) {
        poll_until(
            Duration::from_secs(20),
            &format!("stdout to show {text:?}"),
            || self.stdout_so_far().contains(text).then_some(()),
        );
    }

    /// Waits (bounded) until stderr contains `text`.
    pub(crate) fn wait_for_stderr(&self, text: &str) {
        poll_until(
            Duration::from_secs(20),
            &format!("stderr to show {text:?}"),
            || self.stderr_so_far().contains(text).then_some(()),
        );
    }

    /// Types more input on the terminal.
    pub(crate) fn type_input(&self, bytes: &[u8]) {
        self.pty
            .as_ref()
            .expect("stdin is a terminal")
            .type_input(bytes);
    }

    /// Sends a signal to the uninstaller.
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).expect("the uninstaller is running");
    }

    /// Sends each of `signals` and requires the uninstaller to be still
    /// running a moment later (the signals were ignored).
    pub(crate) fn assert_survives(&self, signals: &[rustix::process::Signal]) {
        for &signal in signals {
            self.signal(signal);
        }
        thread::sleep(Duration::from_millis(300));
        assert!(
            agents_tests::process_alive(self.pid()),
            "the uninstaller must survive {signals:?}, which it inherited as ignored"
        );
    }

    /// Waits (bounded: 60 s) for the end of the run.
    pub(crate) fn finish(mut self) -> Outcome {
        let status = poll_until(Duration::from_secs(60), "the uninstaller to exit", || {
            self.child.try_wait().expect("waitpid works")
        });
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        drop(self.pty.take());
        let text = |buffer: &Arc<Mutex<Vec<u8>>>| {
            String::from_utf8_lossy(&buffer.lock().unwrap()).into_owned()
        };
        Outcome {
            status,
            stdout: text(&self.stdout),
            stderr: text(&self.stderr),
        }
    }
}

/// Runs to the end.
pub(crate) fn run(
    implementation: Implementation<'_>,
    env: &[(String, OsString)],
    args: &[&str],
    input: Input,
) -> Outcome {
    start(implementation, env, args, input).finish()
}

/// One entry of a file-tree snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A directory and its permission bits.
    Directory(u32),
    /// A regular file, its permission bits and content.
    File(u32, Vec<u8>),
    /// A symlink and its target.
    Link(PathBuf),
    /// Anything else (FIFO, socket, device).
    Other,
}

/// Every entry under `root` (not following symlinks), by relative path;
/// empty when `root` does not exist.
pub(crate) fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut entries = BTreeMap::new();
    if fs::symlink_metadata(root).is_ok() {
        walk(root, Path::new(""), &mut entries);
    }
    entries
}

fn walk(root: &Path, relative: &Path, entries: &mut BTreeMap<PathBuf, Entry>) {
    let path = root.join(relative);
    let meta = fs::symlink_metadata(&path).unwrap();
    let mode = meta.mode() & 0o7777;
    let entry = if meta.file_type().is_symlink() {
        Entry::Link(fs::read_link(&path).unwrap())
    } else if meta.is_dir() {
        let mut names: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            walk(root, &relative.join(name), entries);
        }
        Entry::Directory(mode)
    } else if meta.is_file() {
        Entry::File(mode, fs::read(&path).unwrap())
    } else {
        Entry::Other
    };
    entries.insert(relative.to_path_buf(), entry);
}

/// [`snapshot`] of `root` with `base` in symlink targets replaced by
/// `<BASE>`, so trees built under different bases compare.
pub(crate) fn snapshot_under(root: &Path, base: &Path) -> BTreeMap<PathBuf, Entry> {
    let base = base.to_string_lossy().into_owned();
    snapshot(root)
        .into_iter()
        .map(|(path, entry)| match entry {
            Entry::Link(target) => (
                path,
                Entry::Link(PathBuf::from(
                    target.to_string_lossy().replace(&base, "<BASE>"),
                )),
            ),
            other => (path, other),
        })
        .collect()
}

/// The legacy unit name.
pub(crate) const LEGACY_UNIT: &str = "agents-server.service";

/// Where a legacy installation lives (the script's default roots).
#[derive(Debug, Clone)]
pub(crate) struct LegacyRoots {
    /// `HOME`.
    pub home: PathBuf,
    /// `$HOME/.local/share/agents-server`.
    pub install: PathBuf,
    /// `$HOME/.config/agents-server`.
    pub config: PathBuf,
    /// `$HOME/.agentsdock`.
    pub state: PathBuf,
}

impl LegacyRoots {
    /// The default roots under `home`.
    pub(crate) fn under(home: &Path) -> LegacyRoots {
        LegacyRoots {
            home: home.to_path_buf(),
            install: home.join(".local/share/agents-server"),
            config: home.join(".config/agents-server"),
            state: home.join(".agentsdock"),
        }
    }

    /// The unit file of the legacy service.
    pub(crate) fn unit_file(&self) -> PathBuf {
        self.home.join(".config/systemd/user").join(LEGACY_UNIT)
    }
}

/// What the legacy fixture contains besides the basics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LegacyOptions {
    /// `state/team-hub/team-hub.sqlite3` exists.
    pub team_hub: bool,
    /// `$HOME/.zenithbot-agent` is a symlink to the state root.
    pub legacy_alias: bool,
    /// The unit file is installed, enabled and started (else no service).
    pub service: bool,
    /// The unit refuses manual stops (`RefuseManualStop=yes`).
    pub unstoppable: bool,
}

/// A realistic legacy installation under `home`: a release with a venv, a
/// `current` link, hidden files, generated configuration with a token, and
/// state with chat history and secure-peer credentials.
pub(crate) fn legacy_install(home: &Path, options: LegacyOptions) -> LegacyRoots {
    let roots = LegacyRoots::under(home);
    let release = roots.install.join("releases/1.0.6");
    agents_tests::write_file_making_parents(&release.join("VERSION"), b"1.0.6\n", 0o644);
    agents_tests::write_file_making_parents(
        &release.join("agent_server.py"),
        b"print('server')\n",
        0o644,
    );
    agents_tests::make_dirs(&release.join(".venv/lib"), 0o775);
    agents_tests::write_file_making_parents(
        &release.join(".venv/pyvenv.cfg"),
        b"home = /usr/bin\n",
        0o644,
    );
    symlink("releases/1.0.6", roots.install.join("current")).unwrap();
    agents_tests::write_file_making_parents(
        &roots.install.join(".release-channel"),
        b"beta\n",
        0o600,
    );
    agents_tests::write_file_making_parents(
        &roots.config.join("env"),
        b"AGENTSDOCK_AGENT_TOKEN=legacy-token-0123456789\n",
        0o600,
    );
    agents_tests::write_file_making_parents(
        &roots.state.join("sessions.json"),
        b"{\"sessions\": []}\n",
        0o600,
    );
    agents_tests::write_file_making_parents(
        &roots.state.join("secure-peers/client/identity.key"),
        b"private-key\n",
        0o600,
    );
    if options.team_hub {
        agents_tests::write_file_making_parents(
            &roots.state.join("team-hub/team-hub.sqlite3"),
            b"SQLite",
            0o600,
        );
    }
    if options.legacy_alias {
        symlink(&roots.state, home.join(".zenithbot-agent")).unwrap();
    }
    roots
}

/// Installs, enables and starts the legacy unit in `sandbox` (a long sleep
/// standing in for the monolithic server).
pub(crate) fn start_legacy_service(sandbox: &Sandbox, unstoppable: bool) -> u32 {
    let refuse = if unstoppable {
        "RefuseManualStop=yes\n"
    } else {
        ""
    };
    let unit = format!(
        "[Unit]\nDescription=AgentsServer (legacy test stand-in)\n{refuse}\n[Service]\n\
         Type=simple\nExecStart=/bin/sleep 600\n\n[Install]\nWantedBy=default.target\n"
    );
    fs::write(sandbox.unit_dir().join(LEGACY_UNIT), unit).unwrap();
    sandbox.systemctl_ok(&["daemon-reload"]);
    sandbox.systemctl_ok(&["enable", "--now", LEGACY_UNIT]);
    sandbox
        .wait_for_unit(LEGACY_UNIT, Duration::from_secs(10), "running", |state| {
            state.is_running()
        })
        .main_pid
}

/// A sandbox with a legacy installation, for one implementation.
pub(crate) struct LegacyCase {
    /// The sandboxed manager and home.
    pub sandbox: Sandbox,
    /// The installation's roots.
    pub roots: LegacyRoots,
    /// The service's PID when it was started.
    pub service_pid: Option<u32>,
}

impl LegacyCase {
    /// Starts a sandbox (or returns `None` when this machine cannot) and
    /// builds the installation in its home.
    pub(crate) fn start(test: &str, options: LegacyOptions) -> Option<LegacyCase> {
        let sandbox = Sandbox::start_or_skip(test)?;
        let roots = legacy_install(sandbox.home(), options);
        let service_pid = options
            .service
            .then(|| start_legacy_service(&sandbox, options.unstoppable));
        Some(LegacyCase {
            sandbox,
            roots,
            service_pid,
        })
    }

    /// The run environment: the sandbox's HOME, XDG_RUNTIME_DIR and PATH.
    pub(crate) fn env(&self) -> Vec<(String, OsString)> {
        clean_env(&self.sandbox.env())
    }

    /// The home directory's files by relative path, with the sandbox base
    /// in symlink targets replaced by `<BASE>` so cases compare.
    pub(crate) fn home_tree(&self) -> BTreeMap<PathBuf, Entry> {
        snapshot_under(&self.roots.home, self.sandbox.base())
    }
}

/// What changed between two snapshots, one line per path: `- path` (gone),
/// `+ path` (new) or `~ path` (changed), in path order.
pub(crate) fn differences(
    before: &BTreeMap<PathBuf, Entry>,
    after: &BTreeMap<PathBuf, Entry>,
) -> Vec<String> {
    let mut changes = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => changes.push(format!("- {}", path.display())),
            Some(now) if now != entry => changes.push(format!("~ {}", path.display())),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|path| !before.contains_key(*path)) {
        changes.push(format!("+ {}", path.display()));
    }
    changes.sort_by(|a, b| a[2..].cmp(&b[2..]));
    changes
}

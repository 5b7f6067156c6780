//! `verify_legacy_runner` over a real installed tree (directories, the
//! `current` link, pinned files, a framework interpreter, authenticated
//! bodies, a real Unix socket for tmux) with the kernel and tmux replayed
//! from recorded data shaped as Darwin returns it: `proc_bsdinfo` bytes,
//! `KERN_PROCARGS2` buffers and `list-panes -F` rows.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agents_common::{CommandCapture, Platform, Result};
use agents_tests::set_mode;
use execution_activation::legacy_runner::{
    verify_legacy_runner, LegacyRunnerClaim, LegacyRunnerProbe, SystemLegacyProbe,
    PROC_BSDINFO_SIZE, TMUX_PANE_FORMAT,
};
use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object,
    os::current_uid,
};

const UPDATE: &str = "0123456789abcdef0123456789abcdef";
const IDENTITY: &str = "server-identity-1";
const OLD: &str = "1.0.6";
const TARGET: &str = "1.0.7";
const NATIVE: i32 = 4242;
const INSTALLER: i32 = 5001;
const RUNNER: i32 = 5000;
const TMUX_SERVER: i32 = 4000;

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn own_pid() -> i32 {
    std::process::id() as i32
}

/// `proc_bsdinfo` as `proc_pidinfo(PROC_PIDTBSDINFO)` fills it.
#[derive(Clone, Copy)]
struct Bsd {
    status: u32,
    pid: u32,
    ppid: u32,
    uid: u32,
    start_sec: u64,
    start_usec: u64,
}

impl Bsd {
    fn live(pid: i32, ppid: i32) -> Bsd {
        Bsd {
            status: 2, // SRUN
            pid: pid as u32,
            ppid: ppid as u32,
            uid: current_uid(),
            start_sec: 1_700_000_000 + pid as u64,
            start_usec: 250_000,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut raw = vec![0u8; PROC_BSDINFO_SIZE];
        let mut put = |offset: usize, bytes: &[u8]| {
            raw[offset..offset + bytes.len()].copy_from_slice(bytes);
        };
        put(4, &self.status.to_ne_bytes());
        put(12, &self.pid.to_ne_bytes());
        put(16, &self.ppid.to_ne_bytes());
        for offset in [20, 28, 36] {
            put(offset, &self.uid.to_ne_bytes()); // uid, ruid, svuid
        }
        for offset in [24, 32, 40] {
            put(offset, &20u32.to_ne_bytes()); // gid, rgid, svgid (staff)
        }
        put(48, b"Python\0");
        put(120, &self.start_sec.to_ne_bytes());
        put(128, &self.start_usec.to_ne_bytes());
        raw
    }
}

/// A `KERN_PROCARGS2` buffer: argc, the exec path, NUL padding, argv, the
/// environment and the apple strings.
fn procargs(exec: &Path, argv: &[String]) -> Vec<u8> {
    let mut raw = (argv.len() as i32).to_ne_bytes().to_vec();
    raw.extend_from_slice(exec.to_str().unwrap().as_bytes());
    raw.push(0);
    while raw.len() % 8 != 0 {
        raw.push(0);
    }
    let tail = [
        "TERM=xterm-256color".to_string(),
        "TMUX=/private/tmp/tmux-501/default,1234,0".to_string(),
        format!("executable_path={}", exec.display()),
        "ptr_munge=".to_string(),
    ];
    for word in argv.iter().chain(&tail) {
        raw.extend_from_slice(word.as_bytes());
        raw.push(0);
    }
    raw
}

/// One recorded process.
#[derive(Clone)]
struct Fake {
    bsd: Vec<u8>,
    /// What every `proc_pidinfo` after the first returns, when set.
    bsd_later: Option<Vec<u8>>,
    path: Option<Vec<u8>>,
    size: Option<usize>,
    args: Option<Vec<u8>>,
    calls: Cell<usize>,
}

impl Fake {
    fn new(bsd: Bsd, exec: &Path, argv: &[String]) -> Fake {
        let args = procargs(exec, argv);
        Fake {
            bsd: bsd.bytes(),
            bsd_later: None,
            path: Some(exec.to_str().unwrap().as_bytes().to_vec()),
            size: Some(args.len()),
            args: Some(args),
            calls: Cell::new(0),
        }
    }
}

type Hook = Box<dyn FnOnce(&Recorded)>;
/// One recorded tmux query: argv, environment, timeout.
type TmuxRun = (Vec<String>, Vec<(String, String)>, Duration);

/// The recorded kernel and tmux of one scenario.
struct Recorded {
    darwin: bool,
    processes: RefCell<HashMap<i32, Fake>>,
    socket: PathBuf,
    program: Option<PathBuf>,
    replies: RefCell<Vec<CommandCapture>>,
    runs: RefCell<Vec<TmuxRun>>,
    /// Runs once, right after the first tmux query (the end of the first
    /// pass of the proof), to change something before it is repeated.
    after_first_query: RefCell<Option<Hook>>,
}

impl Recorded {
    fn with<T>(&self, pid: i32, read: impl FnOnce(&Fake) -> T) -> Option<T> {
        self.processes.borrow().get(&pid).map(read)
    }

    /// `pid` (a child of `ppid`) as a new incarnation: the same PID, started
    /// later.
    fn restart(&self, pid: i32, ppid: i32) {
        let reborn = Bsd {
            start_sec: 1_800_000_000,
            ..Bsd::live(pid, ppid)
        };
        self.processes.borrow_mut().get_mut(&pid).unwrap().bsd = reborn.bytes();
    }
}

impl LegacyRunnerProbe for Recorded {
    fn host_is_darwin(&self) -> bool {
        self.darwin
    }
    fn bsd_info(&self, pid: i32) -> Vec<u8> {
        self.with(pid, |fake| {
            let first = fake.calls.get() == 0;
            fake.calls.set(fake.calls.get() + 1);
            match (&fake.bsd_later, first) {
                (Some(later), false) => later.clone(),
                _ => fake.bsd.clone(),
            }
        })
        .unwrap_or_default()
    }
    fn executable_path(&self, pid: i32) -> Option<Vec<u8>> {
        self.with(pid, |fake| fake.path.clone()).flatten()
    }
    fn arguments_size(&self, pid: i32) -> Option<usize> {
        self.with(pid, |fake| fake.size).flatten()
    }
    fn arguments(&self, pid: i32, capacity: usize) -> Option<Vec<u8>> {
        self.with(pid, |fake| {
            fake.args
                .clone()
                .map(|args| args[..capacity.min(args.len())].to_vec())
        })
        .flatten()
    }
    fn tmux_socket(&self) -> Result<PathBuf> {
        Ok(self.socket.clone())
    }
    fn tmux_program(&self) -> Option<PathBuf> {
        self.program.clone()
    }
    fn run(
        &self,
        argv: &[String],
        environment: &[(&str, String)],
        timeout: Duration,
    ) -> Result<CommandCapture> {
        let environment = environment
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect();
        self.runs
            .borrow_mut()
            .push((argv.to_vec(), environment, timeout));
        let reply = {
            let mut replies = self.replies.borrow_mut();
            if replies.len() > 1 {
                replies.remove(0)
            } else {
                replies[0].clone()
            }
        };
        if let Some(hook) = self.after_first_query.borrow_mut().take() {
            hook(self);
        }
        Ok(reply)
    }
}

fn reply(stdout: &str) -> CommandCapture {
    CommandCapture {
        status: 0,
        stdout: stdout.as_bytes().to_vec(),
        stderr: Vec::new(),
    }
}

fn write(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn directory(path: &Path, mode: u32) {
    fs::create_dir_all(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Writes `body` as a private authenticated JSON body, as the server does.
fn write_body(path: &Path, body: &JsonObject) {
    write(path, &encode_indented(&Json::Object(body.clone())), 0o600);
}

/// Replaces `path` by a new file with the same bytes and `mode`.
fn recreate(path: &Path, mode: u32) {
    // The old file stays linked until the new one exists, so the file
    // system cannot hand the new one the old inode back.
    let aside = path.with_extension("recreated-aside");
    fs::rename(path, &aside).unwrap();
    write(path, &fs::read(&aside).unwrap(), mode);
    fs::remove_file(&aside).unwrap();
}

/// `items` as owned argv words, as the kernel records them.
fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// An old macOS install with its updater running in tmux, the installer
/// (this test process) below it.
struct Scenario {
    base: PathBuf,
    root: PathBuf,
    state: PathBuf,
    release: PathBuf,
    python: PathBuf,
    companion: PathBuf,
    tmux: PathBuf,
    claim: LegacyRunnerClaim,
    status: JsonObject,
    health: JsonObject,
    admitted: JsonObject,
    runner_argv: Vec<String>,
    native_argv: Vec<String>,
    probe: Recorded,
    _listener: UnixListener,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

impl Scenario {
    fn new() -> Scenario {
        let base = PathBuf::from(format!(
            "/tmp/agents-legacy-runner-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&base);
        directory(&base, 0o755);
        let root = base.join("install");
        let release = root.join("releases").join(OLD);
        directory(&release, 0o755);
        fs::set_permissions(root.join("releases"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        write(
            &release.join("VERSION"),
            format!("{OLD}\n").as_bytes(),
            0o644,
        );
        write(&release.join("update_runner.py"), b"# runner\n", 0o644);
        write(
            &release.join("agent_server.py"),
            b"API_CONTRACT_VERSION = 6\n",
            0o644,
        );
        write(
            &release.join("release-public-key.pem"),
            b"-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n",
            0o644,
        );
        symlink(format!("releases/{OLD}"), root.join("current")).unwrap();
        // A python.org framework build behind the release's venv.
        let versioned = base.join("Library/Frameworks/Python.framework/Versions/3.11");
        let python = versioned.join("bin/python3.11");
        let companion = versioned.join("Resources/Python.app/Contents/MacOS/Python");
        for executable in [&python, &companion] {
            directory(executable.parent().unwrap(), 0o755);
            write(executable, b"\xcf\xfa\xed\xfe", 0o755);
        }
        directory(&release.join(".venv/bin"), 0o755);
        symlink(&python, release.join(".venv/bin/python")).unwrap();
        let state = base.join("state");
        directory(&state.join("admin"), 0o700);
        fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).unwrap();
        let socket_directory = base.join(format!("tmux-{}", current_uid()));
        directory(&socket_directory, 0o700);
        let socket = socket_directory.join("default");
        let listener = UnixListener::bind(&socket).unwrap();
        fs::set_permissions(&socket, fs::Permissions::from_mode(0o770)).unwrap();
        let tmux = base.join("homebrew/bin/tmux");
        directory(tmux.parent().unwrap(), 0o755);
        write(&tmux, b"\xcf\xfa\xed\xfe", 0o755);

        let current = root.join("current");
        let text = |path: PathBuf| path.to_str().unwrap().to_string();
        let mut runner_argv = vec![
            text(current.join(".venv/bin/python")),
            text(current.join("update_runner.py")),
        ];
        runner_argv.extend(words(&[
            "--status-file",
            state.join("admin/server-update.json").to_str().unwrap(),
            "--public-key",
            current.join("release-public-key.pem").to_str().unwrap(),
            "--port",
            "8765",
            "--bind",
            "127.0.0.1",
            "--expected-version",
            TARGET,
            "--current-version",
            OLD,
            "--track",
            "stable",
            "--update-id",
            UPDATE,
            "--expected-server-identity",
            IDENTITY,
            "--auth-token-file",
            state
                .join(format!("admin/.server-update-{UPDATE}.auth.json"))
                .to_str()
                .unwrap(),
        ]));
        let mut native_argv = vec![
            text(current.join(".venv/bin/python")),
            text(current.join("agent_server.py")),
        ];
        native_argv.extend(words(&["serve", "--bind", "127.0.0.1", "--port", "8765"]));
        let status = json_object! {
            "update_id" => UPDATE,
            "phase" => "installing",
            "target_version" => TARGET,
            "track" => "stable",
            "current_version" => OLD,
            "updated_at" => "2024-05-01T10:00:00Z",
        };
        let health = json_object! {
            "server_identity" => IDENTITY,
            "server_instance_id" => "b1946ac92492d2347c6235b4d2611184",
            "server_version" => OLD,
            "active_count" => 0,
            "update_blocking_queued_count" => 0,
            "queued" => json_object! {"default" => 0, "review" => 0},
            "update_service_cgroup" => json_object! {"safe" => true, "unknown_descendant_count" => 0},
            "execution_service" => Json::Null,
            "gateway" => Json::Null,
        };
        let admitted = json_object! {
            "update_id" => UPDATE,
            "phase" => "installing",
            "target_version" => TARGET,
            "track" => "stable",
            "server_identity" => IDENTITY,
            "server_instance_id" => "b1946ac92492d2347c6235b4d2611184",
        };
        let claim = LegacyRunnerClaim {
            platform: Some(Platform::Darwin),
            managed_update_id: String::new(),
            root: root.clone(),
            state_root: state.clone(),
            health_file: state.join("admin/health.json"),
            update_file: state.join("admin/update.json"),
            release_version: TARGET.into(),
            expected_server_identity: IDENTITY.into(),
            expected_native_pid: i128::from(NATIVE),
            bind: Some("127.0.0.1".into()),
            port: Some(8765),
        };
        let probe = Recorded {
            darwin: true,
            processes: RefCell::new(HashMap::new()),
            socket,
            program: Some(tmux.clone()),
            replies: RefCell::new(Vec::new()),
            runs: RefCell::new(Vec::new()),
            after_first_query: RefCell::new(None),
        };
        let mut scenario = Scenario {
            base,
            root,
            state,
            release,
            python,
            companion,
            tmux,
            claim,
            status,
            health,
            admitted,
            runner_argv,
            native_argv,
            probe,
            _listener: listener,
        };
        scenario.record_processes();
        scenario.set_pane(&scenario.pane_row());
        scenario
    }

    /// The kernel's table: this helper, the installer shell, the runner
    /// (the pane's process), the tmux server, and the native listener. The
    /// framework launcher re-execs, so Python processes run the companion.
    fn record_processes(&mut self) {
        let table = [
            (
                own_pid(),
                INSTALLER,
                PathBuf::from("/usr/local/libexec/agentsdock/execution-activation"),
                words(&["execution-activation", "preflight", "--root"]),
            ),
            (
                INSTALLER,
                RUNNER,
                PathBuf::from("/bin/bash"),
                words(&["/bin/bash", "install.sh", "--managed-update"]),
            ),
            (
                RUNNER,
                TMUX_SERVER,
                self.companion.clone(),
                self.runner_argv.clone(),
            ),
            (
                TMUX_SERVER,
                1,
                self.tmux.clone(),
                words(&["tmux", "new-session", "-d", "-s", "agents_server_update"]),
            ),
            (NATIVE, 1, self.companion.clone(), self.native_argv.clone()),
        ];
        let mut processes = self.probe.processes.borrow_mut();
        processes.clear();
        for (pid, ppid, exec, argv) in table {
            processes.insert(pid, Fake::new(Bsd::live(pid, ppid), &exec, &argv));
        }
    }

    /// The `list-panes -F` row of the updater's pane, its start command
    /// quoted as tmux prints it.
    fn pane_row(&self) -> String {
        let command: Vec<String> = self
            .runner_argv
            .iter()
            .map(|word| format!("\"{word}\""))
            .collect();
        format!(
            "agents_server_update_{UPDATE}|$3|%7|{RUNNER}|0|{TMUX_SERVER}|{}\n",
            command.join(" ")
        )
    }

    fn set_pane(&self, stdout: &str) {
        *self.probe.replies.borrow_mut() = vec![reply(stdout)];
    }

    fn process(&self, pid: i32, change: impl FnOnce(&mut Fake)) {
        change(self.probe.processes.borrow_mut().get_mut(&pid).unwrap());
    }

    fn set_argv(&self, pid: i32, argv: &[String]) {
        let exec = PathBuf::from(
            std::str::from_utf8(self.probe.processes.borrow()[&pid].path.as_ref().unwrap())
                .unwrap(),
        );
        self.process(pid, |fake| {
            let args = procargs(&exec, argv);
            fake.size = Some(args.len());
            fake.args = Some(args);
        });
    }

    fn write_bodies(&self) {
        let admin = self.state.join("admin");
        for (name, value) in [
            ("server-update.json", &self.status),
            ("health.json", &self.health),
            ("update.json", &self.admitted),
        ] {
            write_body(&admin.join(name), value);
        }
    }

    fn verify(&self) -> Result<String> {
        self.write_bodies();
        verify_legacy_runner(&self.claim, &Json::Object(self.status.clone()), &self.probe)
    }

    #[track_caller]
    fn refused(&self, message: &str) {
        match self.verify() {
            Ok(id) => panic!("admitted {id}, expected {message:?}"),
            Err(error) => assert_eq!(error.message(), message),
        }
    }

    /// Checks what the proof concludes for the table case `case`, naming
    /// the case when it concludes otherwise.
    #[track_caller]
    fn concludes(&self, verdict: Verdict, case: &str) {
        let outcome = self.verify();
        let as_expected = match (&outcome, verdict) {
            (Ok(id), Verdict::Admitted) => id == UPDATE,
            (Err(error), Verdict::Refused(message)) => error.message() == message,
            (Err(error), Verdict::NotFound) => error.is_not_found(),
            _ => false,
        };
        assert!(as_expected, "{case}: expected {verdict:?}, got {outcome:?}");
    }

    /// The runner (and so its pane's start command) runs `argv` instead;
    /// the rest of the kernel's table is recorded afresh.
    fn run_runner_with(&mut self, argv: Vec<String>) {
        self.runner_argv = argv;
        self.record_processes();
        self.set_pane(&self.pane_row());
    }

    /// Runs `change` once between the two passes of the proof: right after
    /// its first tmux query, before everything is read again.
    fn between_passes(&self, change: impl FnOnce(&Recorded) + 'static) {
        *self.probe.after_first_query.borrow_mut() = Some(Box::new(change));
    }

    /// [`Scenario::between_passes`] for a change to the installed tree.
    fn on_disk_between_passes(&self, change: TreeChange) {
        let disk = OnDisk {
            root: self.root.clone(),
            state: self.state.clone(),
            release: self.release.clone(),
            companion: self.companion.clone(),
            health: self.health.clone(),
            status: self.status.clone(),
        };
        self.between_passes(move |_probe| change(&disk));
    }
}

/// What the proof must conclude in a table case.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    /// The update is admitted: the proof returns its ID.
    Admitted,
    /// Refused with exactly this message.
    Refused(&'static str),
    /// Refused because a path it follows does not exist.
    NotFound,
}

/// A change to a fresh scenario, as a table entry.
type Change = fn(&Scenario);

#[test]
fn the_exact_legacy_runner_in_its_tmux_pane_is_admitted() {
    let scenario = Scenario::new();
    assert_eq!(scenario.verify().unwrap(), UPDATE);
    // Both passes asked tmux the same question, on the pinned socket, with
    // only the original's three variables.
    let runs = scenario.probe.runs.borrow();
    assert_eq!(runs.len(), 2);
    let (argv, environment, timeout) = &runs[0];
    assert_eq!(
        argv,
        &[
            scenario.tmux.to_str().unwrap().to_string(),
            "-S".into(),
            scenario.probe.socket.to_str().unwrap().into(),
            "list-panes".into(),
            "-s".into(),
            "-t".into(),
            format!("=agents_server_update_{UPDATE}"),
            "-F".into(),
            TMUX_PANE_FORMAT.into(),
        ]
    );
    assert_eq!(
        TMUX_PANE_FORMAT,
        "#{session_name}|#{session_id}|#{pane_id}|#{pane_pid}|#{pane_dead}|#{pid}|#{pane_start_command}"
    );
    let names: Vec<&str> = environment.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(names, ["PATH", "HOME", "LC_ALL"]);
    assert_eq!(environment[0].1, "/usr/bin:/bin");
    assert_eq!(environment[2].1, "C");
    assert_eq!(*timeout, Duration::from_secs(5));
    assert_eq!(runs[1], runs[0]);
}

#[test]
fn a_plain_interpreter_without_framework_is_admitted_too() {
    let mut scenario = Scenario::new();
    // A Homebrew/uv interpreter: no companion, the kernel runs it directly.
    let plain = scenario.base.join("opt/python/bin/python3.12");
    directory(plain.parent().unwrap(), 0o755);
    write(&plain, b"\x7fELF", 0o755);
    fs::remove_file(scenario.release.join(".venv/bin/python")).unwrap();
    symlink(&plain, scenario.release.join(".venv/bin/python")).unwrap();
    scenario.companion = plain;
    scenario.record_processes();
    assert_eq!(scenario.verify().unwrap(), UPDATE);
}

#[test]
fn the_fallback_applies_only_to_a_runner_less_darwin_update() {
    let mut scenario = Scenario::new();
    scenario.probe.darwin = false;
    scenario.refused("legacy ancestry fallback does not apply");
    scenario.probe.darwin = true;
    for platform in [Some(Platform::Linux), None] {
        scenario.claim.platform = platform;
        scenario.refused("legacy ancestry fallback does not apply");
    }
    scenario.claim.platform = Some(Platform::Darwin);
    scenario.claim.managed_update_id = UPDATE.into();
    scenario.refused("legacy ancestry fallback does not apply");
    scenario.claim.managed_update_id.clear();
    scenario.status.insert("runner_pid", Json::Null);
    scenario.refused("legacy ancestry fallback does not apply");
    scenario.status.remove("runner_pid");
    for identity in [
        Json::from(UPDATE.to_uppercase()),
        Json::from(&UPDATE[1..]),
        Json::from(7),
        Json::Null,
    ] {
        scenario.status.insert("update_id", identity);
        scenario.refused("legacy update identity is invalid");
    }
}

#[test]
fn directories_must_be_canonical_owned_and_safe() {
    let mut scenario = Scenario::new();
    let alias = scenario.base.join("alias");
    symlink(&scenario.root, &alias).unwrap();
    scenario.claim.root = alias;
    scenario.refused("legacy proof directory must be canonical");
    scenario.claim.root = scenario.root.join("releases/..");
    scenario.refused("legacy proof directory must be canonical");
    scenario.claim.root = scenario.root.clone();
    let releases = scenario.root.join("releases");
    fs::set_permissions(&releases, fs::Permissions::from_mode(0o775)).unwrap();
    scenario.refused("legacy proof directory is not owned and safe");
    fs::set_permissions(&releases, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&scenario.release, fs::Permissions::from_mode(0o757)).unwrap();
    scenario.refused("legacy proof directory is not owned and safe");
    fs::set_permissions(&scenario.release, fs::Permissions::from_mode(0o755)).unwrap();
    scenario.claim.state_root = scenario.base.join("missing-state");
    assert!(scenario.verify().unwrap_err().is_not_found());
}

#[test]
fn the_runner_belongs_to_the_linked_retained_release() {
    let scenario = Scenario::new();
    let current = scenario.root.join("current");
    fs::remove_file(&current).unwrap();
    directory(&current, 0o755);
    scenario.refused("legacy current release is not an owned link");
    fs::remove_dir(&current).unwrap();
    let hidden = scenario.root.join("releases/.staged");
    directory(&hidden, 0o755);
    symlink(&hidden, &current).unwrap();
    scenario.refused("legacy updater must belong to the retained installed release");
    fs::remove_file(&current).unwrap();
    symlink(scenario.base.join("state"), &current).unwrap();
    scenario.refused("legacy updater must belong to the retained installed release");
    fs::remove_file(&current).unwrap();
    symlink("releases/9.9.9", &current).unwrap();
    assert!(scenario.verify().unwrap_err().is_not_found());
}

#[test]
fn installed_files_are_single_owned_and_not_writable_by_others() {
    let scenario = Scenario::new();
    let version = scenario.release.join("VERSION");
    fs::hard_link(&version, scenario.base.join("VERSION.copy")).unwrap();
    scenario.refused("legacy proof file is not owned and safe");
    fs::remove_file(scenario.base.join("VERSION.copy")).unwrap();
    let key = scenario.release.join("release-public-key.pem");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o664)).unwrap();
    scenario.refused("legacy proof file is not owned and safe");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let runner = scenario.release.join("update_runner.py");
    fs::remove_file(&runner).unwrap();
    symlink(scenario.release.join("agent_server.py"), &runner).unwrap();
    let error = scenario.verify().unwrap_err();
    assert!(
        error
            .message()
            .contains("Too many levels of symbolic links"),
        "{error:?}"
    );
}

#[test]
fn the_interpreter_and_framework_are_pinned() {
    let scenario = Scenario::new();
    let versions = scenario
        .python
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap();
    fs::set_permissions(versions, fs::Permissions::from_mode(0o775)).unwrap();
    scenario.refused("legacy Python executable or framework directory is unsafe");
    fs::set_permissions(versions, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&scenario.python, fs::Permissions::from_mode(0o644)).unwrap();
    scenario.refused("legacy Python executable or framework directory is unsafe");
    fs::set_permissions(&scenario.python, fs::Permissions::from_mode(0o755)).unwrap();
    // The companion must be the real file, not a link to another binary.
    let moved = scenario.base.join("Python.real");
    fs::rename(&scenario.companion, &moved).unwrap();
    symlink(&moved, &scenario.companion).unwrap();
    scenario.refused("legacy Python framework companion is not canonical");
}

#[test]
fn authenticated_bodies_come_from_the_private_admin_directory() {
    let mut scenario = Scenario::new();
    for outside in [
        scenario.state.join("health.json"),
        scenario.state.join("admin/../admin/health.json"),
        PathBuf::new(),
    ] {
        scenario.claim.health_file = outside;
        scenario.refused("legacy authenticated proof is outside private admin directory");
    }
    scenario.claim.health_file = scenario.state.join("admin/health.json");
    let admitted = scenario.state.join("admin/update.json");
    scenario.write_bodies();
    fs::set_permissions(&admitted, fs::Permissions::from_mode(0o644)).unwrap();
    let error = verify_legacy_runner(
        &scenario.claim,
        &Json::Object(scenario.status.clone()),
        &scenario.probe,
    )
    .unwrap_err();
    assert_eq!(error.message(), "legacy proof file is not owned and safe");
}

#[test]
fn authenticated_json_is_one_object_without_duplicates_within_a_mebibyte() {
    let scenario = Scenario::new();
    let health = scenario.state.join("admin/health.json");
    let verify = |data: &[u8]| {
        scenario.write_bodies();
        write(&health, data, 0o600);
        verify_legacy_runner(
            &scenario.claim,
            &Json::Object(scenario.status.clone()),
            &scenario.probe,
        )
        .unwrap_err()
    };
    assert_eq!(verify(b"[1, 2]").message(), "legacy proof JSON is invalid");
    let duplicate = verify(b"{\"active_count\": 0, \"active_count\": 0}");
    assert_eq!(
        duplicate.python_line(),
        "ValueError: duplicate legacy proof field"
    );
    let mut large = b"{\"pad\": \"".to_vec();
    large.resize(1024 * 1024 + 1, b'x');
    assert_eq!(verify(&large).message(), "legacy proof JSON exceeds limit");
}

#[test]
fn every_status_view_pins_the_same_runner_less_update() {
    let mut scenario = Scenario::new();
    for (key, value) in [
        ("phase", Json::from("completed")),
        ("target_version", Json::from("1.0.8")),
        ("track", Json::from("nightly")),
    ] {
        let saved = scenario.status.get(key).cloned().unwrap();
        scenario.status.insert(key, value);
        scenario.refused("legacy admitted update changed");
        scenario.status.insert(key, saved);
    }
    // The durable row or the admitted body may not carry a runner PID.
    scenario.admitted.insert("runner_pid", 77);
    scenario.refused("legacy admitted update changed");
    scenario.admitted.remove("runner_pid");
    scenario.admitted.insert("track", "beta");
    scenario.refused("legacy authenticated update does not match durable status");
    scenario.admitted.insert("track", "stable");
    // The durable row read from disk differs from the caller's copy.
    scenario.write_bodies();
    let mut durable = scenario.status.clone();
    durable.insert("track", "beta");
    write(
        &scenario.state.join("admin/server-update.json"),
        &encode_indented(&Json::Object(durable)),
        0o600,
    );
    let error = verify_legacy_runner(
        &scenario.claim,
        &Json::Object(scenario.status.clone()),
        &scenario.probe,
    )
    .unwrap_err();
    assert_eq!(
        error.message(),
        "legacy authenticated update does not match durable status"
    );
}

#[test]
fn the_server_must_be_the_idle_installed_one() {
    let mut scenario = Scenario::new();
    let cases: Vec<(&str, Option<Json>)> = vec![
        ("server_identity", Some(Json::from("other"))),
        ("server_instance_id", None),
        ("server_instance_id", Some(Json::from(""))),
        ("server_instance_id", Some(Json::from("another-instance"))),
        ("server_version", Some(Json::from(TARGET))),
        ("active_count", Some(Json::from(1))),
        ("active_count", Some(Json::Bool(false))),
        ("update_blocking_queued_count", Some(Json::from(2))),
        ("update_blocking_queued_count", Some(Json::Null)),
        (
            "update_service_cgroup",
            Some(Json::from(
                json_object! {"safe" => 1, "unknown_descendant_count" => 0},
            )),
        ),
        (
            "update_service_cgroup",
            Some(Json::from(
                json_object! {"safe" => true, "unknown_descendant_count" => 1},
            )),
        ),
        (
            "update_service_cgroup",
            Some(Json::from(json_object! {"safe" => true})),
        ),
        ("update_service_cgroup", None),
        ("update_service_cgroup", Some(Json::Null)),
        ("queued", Some(Json::from(vec![Json::from(0)]))),
    ];
    for (key, value) in cases {
        let saved = scenario.health.get(key).cloned();
        match value {
            Some(value) => {
                scenario.health.insert(key, value);
            }
            None => {
                scenario.health.remove(key);
            }
        }
        scenario.refused("legacy authenticated idle health does not match");
        match saved {
            Some(saved) => {
                scenario.health.insert(key, saved);
            }
            None => {
                scenario.health.remove(key);
            }
        }
    }
    scenario.admitted.insert("server_identity", "other");
    scenario.refused("legacy authenticated idle health does not match");
    scenario.admitted.insert("server_identity", IDENTITY);
    // Without an explicit count the queued total decides (Python sums even
    // when the count is present; floats and bools add as numbers).
    scenario.health.remove("update_blocking_queued_count");
    scenario
        .health
        .insert("queued", json_object! {"a" => 1, "b" => -1});
    assert_eq!(scenario.verify().unwrap(), UPDATE);
    scenario
        .health
        .insert("queued", json_object! {"a" => 0.5, "b" => 0.5, "c" => true});
    scenario.refused("legacy authenticated idle health does not match");
    scenario.health.insert("queued", json_object! {"a" => "0"});
    scenario.refused("legacy authenticated idle health does not match");
    scenario.health.insert("update_blocking_queued_count", 0.0);
    scenario.health.insert("queued", json_object! {});
    assert_eq!(scenario.verify().unwrap(), UPDATE);
}

#[test]
fn kernel_process_records_must_be_live_owned_and_stable() {
    let mut scenario = Scenario::new();
    for pid in [0, 1, -5] {
        scenario.claim.expected_native_pid = pid;
        scenario.refused("legacy runner proof requires a live Darwin process");
    }
    scenario.claim.expected_native_pid = 9999; // no such process
    scenario.refused("legacy process identity is unavailable");
    scenario.claim.expected_native_pid = i128::from(i32::MAX) + 1;
    scenario.refused("legacy process identity is unavailable");
    scenario.claim.expected_native_pid = i128::from(NATIVE);
    let invalid = [
        Bsd {
            uid: current_uid() + 1,
            ..Bsd::live(NATIVE, 1)
        },
        Bsd {
            status: 5,
            ..Bsd::live(NATIVE, 1)
        },
        Bsd {
            start_sec: 0,
            ..Bsd::live(NATIVE, 1)
        },
        Bsd {
            pid: 4243,
            ..Bsd::live(NATIVE, 1)
        },
    ];
    for bsd in invalid {
        scenario.process(NATIVE, |fake| fake.bsd = bsd.bytes());
        scenario.refused("legacy process owner or incarnation is invalid");
    }
    scenario.record_processes();
    scenario.process(NATIVE, |fake| fake.bsd.truncate(PROC_BSDINFO_SIZE - 8));
    scenario.refused("legacy process identity is unavailable");
    scenario.record_processes();
    scenario.process(NATIVE, |fake| fake.path = None);
    scenario.refused("legacy process executable is unavailable");
    scenario.record_processes();
    for size in [None, Some(0), Some(2 * 1024 * 1024 + 1)] {
        scenario.process(NATIVE, |fake| fake.size = size);
        scenario.refused("legacy process arguments are unavailable");
    }
    scenario.record_processes();
    scenario.process(NATIVE, |fake| fake.args = None);
    scenario.refused("legacy process arguments changed while reading");
    scenario.record_processes();
    // The PID was recycled between the two proc_pidinfo calls.
    let reborn = Bsd {
        start_usec: 999_999,
        ..Bsd::live(NATIVE, 1)
    };
    scenario.process(NATIVE, |fake| fake.bsd_later = Some(reborn.bytes()));
    scenario.refused("legacy process incarnation changed while reading");
    scenario.record_processes();
    // Only argc strings are read; a short buffer is refused.
    scenario.process(NATIVE, |fake| {
        let args = fake.args.as_mut().unwrap();
        args[..4].copy_from_slice(&600i32.to_ne_bytes());
    });
    scenario.refused("legacy process argument count is invalid");
}

#[test]
fn the_native_listener_is_the_installed_server_with_the_layout_options() {
    let mut scenario = Scenario::new();
    let mut argv = scenario.native_argv.clone();
    argv[1] = scenario
        .base
        .join("elsewhere/agent_server.py")
        .to_str()
        .unwrap()
        .into();
    scenario.set_argv(NATIVE, &argv);
    scenario.refused("legacy native process belongs to another installed release");
    let mut argv = scenario.native_argv.clone();
    argv[0] = ".venv/bin/python".into();
    scenario.set_argv(NATIVE, &argv);
    scenario.refused("legacy native process belongs to another installed release");
    scenario.record_processes();
    scenario.process(NATIVE, |fake| {
        fake.path = Some(b"/usr/bin/python3".to_vec())
    });
    scenario.refused("legacy native process belongs to another installed release");
    scenario.record_processes();
    let with = |extra: &[&str]| {
        let mut argv = scenario.native_argv.clone();
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv
    };
    scenario.set_argv(NATIVE, &with(&["--debug"]));
    scenario.refused("legacy runner options are malformed");
    scenario.set_argv(NATIVE, &with(&["--port", "8765"]));
    scenario.refused("legacy runner options are ambiguous");
    scenario.set_argv(NATIVE, &with(&["--log=x", "1"]));
    scenario.refused("legacy runner options are ambiguous");
    scenario.set_argv(NATIVE, &with(&["-v", "1"]));
    scenario.refused("legacy runner options are ambiguous");
    scenario.set_argv(NATIVE, &with(&["--workers", "2"]));
    scenario.refused("legacy native listener arguments differ");
    let mut argv = scenario.native_argv.clone();
    argv[2] = "run".into();
    scenario.set_argv(NATIVE, &argv);
    scenario.refused("legacy native listener arguments differ");
    scenario.record_processes();
    scenario.claim.port = Some(8766);
    scenario.refused("legacy native listener arguments differ");
    scenario.claim.port = Some(8765);
    scenario.claim.bind = None;
    scenario.refused("legacy native listener arguments differ");
}

const NOT_UNIQUE: &str = "legacy updater ancestor is not unique";
const ARGUMENTS_DIFFER: &str = "legacy updater arguments do not match admitted update";
const PROTOCOL_DIFFERS: &str = "legacy updater options differ from the installed protocol";

/// Installer ancestries without exactly one runner in them: (what, change,
/// refusal).
fn ancestries_without_one_runner() -> [(&'static str, Change, &'static str); 3] {
    [
        (
            "the installer was started outside the runner",
            |s| s.process(INSTALLER, |fake| fake.bsd = Bsd::live(INSTALLER, 1).bytes()),
            NOT_UNIQUE,
        ),
        (
            "the installer shell was itself a runner",
            |s| {
                let runner = s.runner_argv.clone();
                s.process(INSTALLER, |fake| {
                    *fake = Fake::new(Bsd::live(INSTALLER, RUNNER), &s.companion, &runner)
                })
            },
            NOT_UNIQUE,
        ),
        (
            "a cycle in the recorded ancestry",
            |s| {
                s.process(TMUX_SERVER, |fake| {
                    fake.bsd = Bsd::live(TMUX_SERVER, own_pid()).bytes()
                })
            },
            "legacy process ancestry contains a cycle",
        ),
    ]
}

/// `argv` with the value of the option `key` set to `value`.
fn with_option(argv: &[String], key: &str, value: &str) -> Vec<String> {
    let mut argv = argv.to_vec();
    let at = argv.iter().position(|word| word == key).unwrap();
    argv[at + 1] = value.to_string();
    argv
}

/// `argv` without the option `key` and its value.
fn without_option(argv: &[String], key: &str) -> Vec<String> {
    let mut argv = argv.to_vec();
    let at = argv.iter().position(|word| word == key).unwrap();
    argv.drain(at..at + 2);
    argv
}

/// Runner command lines that differ from the installed one of `scenario`:
/// (what, argv, verdict). Writes the other status file one case names.
fn runner_command_lines(scenario: &Scenario) -> Vec<(&'static str, Vec<String>, Verdict)> {
    use Verdict::{Admitted, NotFound, Refused};
    let installed = &scenario.runner_argv;
    let set = |key: &str, value: &str| with_option(installed, key, value);
    // The status file option must resolve to the durable status itself.
    let other_status = scenario.state.join("admin/other.json");
    write(&other_status, b"{}", 0o600);
    let unknown_option = [installed.clone(), words(&["--channel", "x"])].concat();
    // Team Hub options and no credential file are part of the protocol.
    let team_hub = [
        without_option(installed, "--auth-token-file"),
        words(&["--expected-team-hub-id", "hub-1234"]),
    ]
    .concat();
    vec![
        (
            "another current version",
            set("--current-version", "1.0.5"),
            Refused(ARGUMENTS_DIFFER),
        ),
        (
            "another track",
            set("--track", "beta"),
            Refused(ARGUMENTS_DIFFER),
        ),
        (
            "another server identity",
            set("--expected-server-identity", "x"),
            Refused(ARGUMENTS_DIFFER),
        ),
        (
            "another credential file",
            set("--auth-token-file", "/tmp/token.json"),
            Refused("legacy updater credential handoff path differs"),
        ),
        (
            "another status file",
            set("--status-file", other_status.to_str().unwrap()),
            Refused(ARGUMENTS_DIFFER),
        ),
        (
            "a missing public key",
            set("--public-key", "/nonexistent/key.pem"),
            NotFound,
        ),
        (
            "an unknown option",
            unknown_option,
            Refused(PROTOCOL_DIFFERS),
        ),
        (
            "no track",
            without_option(installed, "--track"),
            Refused(PROTOCOL_DIFFERS),
        ),
        (
            "a Team Hub update without a credential file",
            team_hub,
            Admitted,
        ),
    ]
}

#[test]
fn exactly_one_ancestor_is_the_installed_runner_with_the_admitted_options() {
    for (case, change, refusal) in ancestries_without_one_runner() {
        let scenario = Scenario::new();
        change(&scenario);
        scenario.concludes(Verdict::Refused(refusal), case);
    }
    let mut scenario = Scenario::new();
    for (case, argv, verdict) in runner_command_lines(&scenario) {
        scenario.run_runner_with(argv);
        scenario.concludes(verdict, case);
    }
}

#[test]
fn tmux_is_the_owned_default_server_with_a_safe_binary() {
    let mut scenario = Scenario::new();
    scenario.probe.program = None;
    scenario.refused("legacy tmux executable is unavailable");
    scenario.probe.program = Some(scenario.tmux.clone());
    let socket_directory = scenario.probe.socket.parent().unwrap().to_path_buf();
    fs::set_permissions(&socket_directory, fs::Permissions::from_mode(0o750)).unwrap();
    scenario.refused("legacy proof directory is not owned and safe");
    fs::set_permissions(&socket_directory, fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&scenario.probe.socket, fs::Permissions::from_mode(0o774)).unwrap();
    scenario.refused("legacy tmux socket is not owned");
    fs::set_permissions(&scenario.probe.socket, fs::Permissions::from_mode(0o700)).unwrap();
    fs::hard_link(&scenario.probe.socket, socket_directory.join("alias")).unwrap();
    scenario.refused("legacy tmux socket is not owned");
    fs::remove_file(socket_directory.join("alias")).unwrap();
    let socket = scenario.probe.socket.clone();
    fs::rename(&socket, socket_directory.join("moved")).unwrap();
    write(&socket, b"", 0o600);
    scenario.refused("legacy tmux socket is not owned");
    fs::remove_file(&socket).unwrap();
    fs::rename(socket_directory.join("moved"), &socket).unwrap();
    fs::set_permissions(&scenario.tmux, fs::Permissions::from_mode(0o775)).unwrap();
    scenario.refused("legacy tmux executable is unsafe");
    fs::set_permissions(&scenario.tmux, fs::Permissions::from_mode(0o644)).unwrap();
    scenario.refused("legacy tmux executable is unsafe");
    fs::set_permissions(&scenario.tmux, fs::Permissions::from_mode(0o755)).unwrap();
    // A PATH entry that links to the binary is resolved first.
    let link = scenario.base.join("tmux-link");
    symlink(&scenario.tmux, &link).unwrap();
    scenario.probe.program = Some(link);
    assert_eq!(scenario.verify().unwrap(), UPDATE);
    // The server process must run that very binary.
    scenario.process(TMUX_SERVER, |fake| {
        fake.path = Some(b"/usr/local/bin/tmux".to_vec())
    });
    scenario.refused("legacy tmux process executable changed");
}

#[test]
fn the_session_has_exactly_one_live_well_formed_pane() {
    let scenario = Scenario::new();
    let row = scenario.pane_row();
    *scenario.probe.replies.borrow_mut() = vec![CommandCapture {
        status: 1,
        stdout: Vec::new(),
        stderr: b"can't find session: agents_server_update\n".to_vec(),
    }];
    scenario.refused("legacy updater tmux pane is unavailable");
    scenario.set_pane(&"x".repeat(64 * 1024 + 1));
    scenario.refused("legacy updater tmux pane is unavailable");
    for stdout in ["", &format!("{row}{row}")] {
        scenario.set_pane(stdout);
        scenario.refused("legacy updater tmux session must have one pane");
    }
    // One empty line is one row, with the wrong shape.
    scenario.set_pane("\n");
    scenario.refused("legacy updater tmux pane identity is invalid");
    let field = |index: usize, value: &str| {
        let mut fields: Vec<String> = row.trim_end().splitn(7, '|').map(str::to_string).collect();
        fields[index] = value.to_string();
        fields.join("|")
    };
    for bad in [
        field(0, "agents_server_update_other"),
        field(1, "3"),
        field(1, "$"),
        field(2, "$7"),
        field(3, "-5000"),
        field(4, "1"),
        field(5, "pid"),
        format!("agents_server_update_{UPDATE}|$3|%7|{RUNNER}|0"),
    ] {
        scenario.set_pane(&bad);
        scenario.refused("legacy updater tmux pane identity is invalid");
    }
    scenario.probe.replies.borrow_mut()[0].stdout = b"\xff\n".to_vec();
    assert_eq!(
        scenario.verify().unwrap_err().python_line(),
        "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    );
}

#[test]
fn the_pane_started_the_runner_and_holds_this_installer() {
    let scenario = Scenario::new();
    let row = scenario.pane_row();
    let (head, command) = row.trim_end().rsplit_once('|').unwrap();
    let with_command = |command: &str| format!("{head}|{command}\n");
    for command in [
        format!("{command} \"--extra\""),
        command.replacen(&format!("\"{}\"", scenario.runner_argv[0]), "python3", 1),
        command.replacen(
            &format!("\"{}\"", scenario.runner_argv[0]),
            "/usr/bin/python3",
            1,
        ),
    ] {
        scenario.set_pane(&with_command(&command));
        scenario.refused("legacy updater launch command does not match kernel arguments");
    }
    scenario.set_pane(&with_command("\"unclosed"));
    assert_eq!(
        scenario.verify().unwrap_err().python_line(),
        "ValueError: No closing quotation"
    );
    // A display that decodes to fewer than two words, even after the one
    // extra layer of quoting newer tmux adds, is no launch command.
    let program = format!("\"{}\"", scenario.runner_argv[0]);
    let nested = format!("'\"{}\"'", scenario.runner_argv.join(" "));
    for display in [String::new(), program, nested] {
        scenario.set_pane(&with_command(&display));
        scenario.refused("legacy tmux launch display is missing arguments or nested");
    }
    for control in ['\t', '\x7f', '\x01'] {
        scenario.set_pane(&with_command(&format!("{command}{control}")));
        scenario.refused("legacy tmux launch display contains control characters");
    }
    // The pane's process is not in this installer's ancestry.
    scenario.set_pane(&row.replace(&format!("|{RUNNER}|"), &format!("|{NATIVE}|")));
    scenario.refused("legacy updater is outside its admitted tmux pane");
    // The pane sits above its tmux server in the chain.
    scenario.set_pane(&row.replace(&format!("|{RUNNER}|"), &format!("|{TMUX_SERVER}|")));
    scenario.refused("legacy updater is outside its admitted tmux pane");
    // The pane is the runner's child, not its ancestor.
    scenario.set_pane(&row.replace(&format!("|{RUNNER}|"), &format!("|{INSTALLER}|")));
    scenario.refused("legacy updater is outside its admitted tmux pane");
}

#[test]
fn newer_tmux_quoting_the_whole_command_is_decoded_once_more() {
    // tmux 3.x displays the single command argument of `new-session` quoted
    // as one word: `"<python> <update_runner.py> --status-file ..."`.
    let scenario = Scenario::new();
    let row = scenario.pane_row();
    let (head, _command) = row.trim_end().rsplit_once('|').unwrap();
    let command = scenario.runner_argv.join(" ");
    // Nothing in it that double quotes would have to escape.
    assert!(!command.contains(['"', '\\', '$', '`']), "{command}");
    scenario.set_pane(&format!("{head}|\"{command}\"\n"));
    assert_eq!(scenario.verify().unwrap(), UPDATE);
    // The decoded words are still compared with the kernel's arguments.
    scenario.set_pane(&format!("{head}|\"{command} --extra\"\n"));
    scenario.refused("legacy updater launch command does not match kernel arguments");
}

/// What a change between the two passes may touch: the tree's paths and
/// the bodies written there (the change runs inside the probe, so it cannot
/// borrow the scenario).
struct OnDisk {
    root: PathBuf,
    state: PathBuf,
    release: PathBuf,
    companion: PathBuf,
    health: JsonObject,
    status: JsonObject,
}

const AUTHORITY_CHANGED: &str = "legacy updater authority changed during verification";
const RUNTIME_CHANGED: &str = "legacy installed runtime changed during verification";

/// A change to the installed tree, as a table entry.
type TreeChange = fn(&OnDisk);

/// The installed tree and bodies the proof binds, changed after its first
/// pass and before it is repeated: (what, change, refusal).
fn tree_changes() -> [(&'static str, TreeChange, &'static str); 7] {
    [
        (
            "the health body is rewritten",
            |disk| {
                let mut health = disk.health.clone();
                health.insert("note", "rewritten");
                write_body(&disk.state.join("admin/health.json"), &health);
            },
            AUTHORITY_CHANGED,
        ),
        // Same bytes in a new file: its pin (inode) differs.
        (
            "the admitted body is recreated",
            |disk| recreate(&disk.state.join("admin/update.json"), 0o600),
            AUTHORITY_CHANGED,
        ),
        (
            "the durable status completes",
            |disk| {
                let mut status = disk.status.clone();
                status.insert("phase", "completed");
                write_body(&disk.state.join("admin/server-update.json"), &status);
            },
            "legacy admitted update changed",
        ),
        (
            "the releases directory changes mode",
            |disk| set_mode(&disk.root.join("releases"), 0o750),
            "legacy release directory changed during verification",
        ),
        (
            "a release file is recreated",
            |disk| recreate(&disk.release.join("agent_server.py"), 0o644),
            RUNTIME_CHANGED,
        ),
        (
            "current is relinked to the same release",
            |disk| {
                let current = disk.root.join("current");
                fs::remove_file(&current).unwrap();
                symlink(&disk.release, &current).unwrap();
            },
            RUNTIME_CHANGED,
        ),
        (
            "the framework companion changes mode",
            |disk| set_mode(&disk.companion, 0o700),
            RUNTIME_CHANGED,
        ),
    ]
}

/// The kernel's and tmux's answers, changed between the passes: (what,
/// change, refusal).
fn view_changes() -> [(&'static str, Change, &'static str); 3] {
    [
        (
            "tmux answers with another pane",
            |s| {
                let row = s.pane_row();
                *s.probe.replies.borrow_mut() =
                    vec![reply(&row), reply(&row.replace("|%7|", "|%8|"))];
            },
            AUTHORITY_CHANGED,
        ),
        (
            "the installer is reborn",
            |s| s.between_passes(|probe| probe.restart(INSTALLER, RUNNER)),
            AUTHORITY_CHANGED,
        ),
        (
            "the native listener restarts",
            |s| s.between_passes(|probe| probe.restart(NATIVE, 1)),
            AUTHORITY_CHANGED,
        ),
    ]
}

#[test]
fn any_change_before_the_proof_is_repeated_refuses() {
    for (case, change, refusal) in tree_changes() {
        let scenario = Scenario::new();
        scenario.on_disk_between_passes(change);
        scenario.concludes(Verdict::Refused(refusal), case);
    }
    for (case, change, refusal) in view_changes() {
        let scenario = Scenario::new();
        change(&scenario);
        scenario.concludes(Verdict::Refused(refusal), case);
    }
}

#[test]
fn the_production_probe_refuses_off_darwin_and_runs_with_a_clean_environment() {
    // The leak probe is in this process's environment: set it only in a child
    // running this test alone, not under the other tests of the binary.
    if !agents_tests::running_alone() {
        let test = agents_tests::test_name!();
        let output = agents_tests::alone(module_path!(), test)
            .env("AGENTS_LEGACY_PROBE_LEAK", "1")
            .output()
            .unwrap();
        agents_tests::assert_passed_alone(&output);
        return;
    }
    let scenario = Scenario::new();
    scenario.write_bodies();
    let error = verify_legacy_runner(
        &scenario.claim,
        &Json::Object(scenario.status.clone()),
        &SystemLegacyProbe,
    )
    .unwrap_err();
    assert_eq!(error.message(), "legacy ancestry fallback does not apply");
    let probe = SystemLegacyProbe;
    assert_eq!(probe.host_is_darwin(), cfg!(target_os = "macos"));
    assert_eq!(
        probe.tmux_socket().unwrap(),
        PathBuf::from(format!("/tmp/tmux-{}/default", current_uid()))
    );
    // The tmux query sees only the variables it is given.
    assert_eq!(
        std::env::var("AGENTS_LEGACY_PROBE_LEAK").as_deref(),
        Ok("1")
    );
    let result = probe
        .run(
            &["/usr/bin/env".to_string()],
            &[
                ("PATH", "/usr/bin:/bin".to_string()),
                ("LC_ALL", "C".to_string()),
            ],
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(result.status, 0);
    let mut lines: Vec<String> = String::from_utf8(result.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines, ["LC_ALL=C", "PATH=/usr/bin:/bin"]);
}

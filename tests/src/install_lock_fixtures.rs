//! Real-process support for the installation lock tests: private roots,
//! planted locks, dead and live PIDs, and contenders in other processes (the
//! `install_lock_holder` example and the install.sh-protocol shell script).
// Fixture plumbing whose names say what each item is; documenting every
// field would repeat them.
#![allow(missing_docs)]

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::TempDir;

/// A unique 0755 directory under the system temp dir, removed on drop.
pub struct TempRoot {
    dir: TempDir,
}

impl TempRoot {
    pub fn new(label: &str) -> Self {
        TempRoot {
            dir: TempDir::with_mode(&format!("agents-lock-{label}"), 0o755),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A 0755 install root inside this temp dir.
    pub fn root(&self) -> PathBuf {
        let root = self.dir.join("install");
        if !root.exists() {
            fs::DirBuilder::new().mode(0o755).create(&root).unwrap();
        }
        root
    }
}

/// `<root>/.install-lock`.
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(".install-lock")
}

/// Creates `<root>/.install-lock` (0700) with a `pid` file of `contents` and `mode`.
pub fn plant_lock(root: &Path, contents: &[u8], mode: u32) -> PathBuf {
    let lock = lock_path(root);
    fs::DirBuilder::new().mode(0o700).create(&lock).unwrap();
    let owner = lock.join("pid");
    fs::write(&owner, contents).unwrap();
    fs::set_permissions(&owner, fs::Permissions::from_mode(mode)).unwrap();
    lock
}

/// Every entry of `root` sorted, so a test can prove a refusal changed nothing.
pub fn listing(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Draft directories (`.install-lock.<pid>.<hex>.tmp`) left in `root`.
pub fn drafts(root: &Path) -> Vec<String> {
    listing(root)
        .into_iter()
        .filter(|name| name.starts_with(".install-lock.") && name.ends_with(".tmp"))
        .collect()
}

/// The PID of a process that has exited and been reaped.
pub fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A live process, killed and reaped on drop.
pub struct LiveProcess(Child);

impl LiveProcess {
    pub fn start() -> Self {
        LiveProcess(
            Command::new("sleep")
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for LiveProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Name of the ignored test that a test binary using `Kind::Rust` contenders
/// declares at its root as their entry point (the test binary re-runs itself).
pub const HOLDER_ENTRY: &str = "lock_holder_process";
const HOLDER_ARGS: &str = "AGENTS_LOCK_HOLDER_ARGS";

/// Body of the `HOLDER_ENTRY` test: in a contender process, takes the lock as
/// `ROOT GO REPORT UNTIL` say (the same interface as `install_sh_lock.sh`) and
/// exits; in a normal test run it returns at once.
pub fn holder_process() {
    let Ok(args) = std::env::var(HOLDER_ARGS) else {
        return;
    };
    let args: Vec<&str> = args.split('\n').collect();
    let [root, go, report, until] = args[..] else {
        panic!("{HOLDER_ARGS} must hold ROOT GO REPORT UNTIL");
    };
    if go != "-" {
        wait_for(Path::new(go));
    }
    let lock = match agents_common::InstallationLock::acquire(Path::new(root)) {
        Ok(lock) => lock,
        Err(err) => {
            publish(Path::new(report), &format!("refused {}", err.python_line()));
            std::process::exit(1);
        }
    };
    publish(Path::new(report), "acquired");
    match until {
        // Exit without running Drop: the lock stays on disk, naming a dead process.
        "abandon" => std::process::exit(0),
        "-" => {}
        path => wait_for(Path::new(path)),
    }
    let done = suffixed(Path::new(report), "done");
    match lock.release() {
        Ok(()) => {
            publish(&done, "released");
            std::process::exit(0);
        }
        Err(err) => {
            publish(&done, &err.python_line());
            std::process::exit(1);
        }
    }
}

fn wait_for(path: &Path) {
    while !path.exists() {
        sleep(Duration::from_millis(2));
    }
}

/// Writes one line under a temporary name and renames it, so readers see it whole.
fn publish(path: &Path, line: &str) {
    let temporary = suffixed(path, "tmp");
    fs::write(&temporary, format!("{line}\n")).unwrap();
    fs::rename(&temporary, path).unwrap();
}

/// `<path>.<suffix>`, the names `install_sh_lock.sh` uses too.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}.{suffix}", path.display()))
}

/// The install.sh-protocol stand-in next to these tests.
pub fn shell_script() -> PathBuf {
    crate::fixture_path("install_lock/install_sh_lock.sh")
}

/// Which implementation of the lock protocol a contender runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `InstallationLock`, in this test binary re-run as `HOLDER_ENTRY`.
    Rust,
    /// install.sh's protocol in `sh install_sh_lock.sh`.
    Shell,
}

/// Another process that takes the lock; killed on drop if still running, so a
/// failing test leaves no process behind.
pub struct Contender {
    pub kind: Kind,
    child: Child,
    report: PathBuf,
}

impl Contender {
    /// Starts a contender reporting to the fresh path `report` (and, after a
    /// release, `<report>.done`).
    pub fn spawn(kind: Kind, root: &Path, go: &str, report: &Path, until: &str) -> Self {
        let program = match kind {
            Kind::Rust => std::env::current_exe().unwrap(),
            Kind::Shell => shell_script(),
        };
        Self::start(kind, &program, root, go, report, until, |_| {})
    }

    /// Like `spawn`, as user and group `id` (an unprivileged account). The
    /// contender runs a copy of its program (this test binary, or the
    /// shell script) beside `report`: the checkout may sit under a
    /// directory only its owner can enter (`mktemp -d` makes it 0700).
    pub fn spawn_as(
        kind: Kind,
        root: &Path,
        go: &str,
        report: &Path,
        until: &str,
        id: u32,
    ) -> Self {
        let original = match kind {
            Kind::Rust => std::env::current_exe().unwrap(),
            Kind::Shell => shell_script(),
        };
        let program = report.with_extension("program");
        // Copied by cp, a child process: a copy written by this process
        // would leave its write descriptor, for a moment, in the children
        // other test threads fork, and running it could fail with ETXTBSY.
        let copied = Command::new("cp")
            .arg(&original)
            .arg(&program)
            .status()
            .unwrap();
        assert!(copied.success(), "cp {}: {copied}", original.display());
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
        Self::start(kind, &program, root, go, report, until, |command| {
            std::os::unix::process::CommandExt::uid(command, id);
            std::os::unix::process::CommandExt::gid(command, id);
        })
    }

    fn start(
        kind: Kind,
        program: &Path,
        root: &Path,
        go: &str,
        report: &Path,
        until: &str,
        adjust: impl FnOnce(&mut Command),
    ) -> Self {
        let mut command = match kind {
            Kind::Rust => {
                let mut command = Command::new(program);
                command
                    .args(["--exact", HOLDER_ENTRY, "--include-ignored", "--nocapture"])
                    .env(
                        HOLDER_ARGS,
                        [root.to_str().unwrap(), go, report.to_str().unwrap(), until].join("\n"),
                    );
                command
            }
            Kind::Shell => {
                let mut command = Command::new("sh");
                command
                    .arg(program)
                    .arg(root)
                    .arg(go)
                    .arg(report)
                    .arg(until);
                command
            }
        };
        command.stdin(Stdio::null()).stdout(Stdio::null());
        adjust(&mut command);
        Contender {
            kind,
            child: command.spawn().unwrap(),
            report: report.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The contender's `acquired` / `refused ...` line, waiting up to 20 s for it.
    pub fn outcome(&self) -> String {
        read_when_present(&self.report, self.kind, self.pid())
    }

    /// Waits for the process to end; returns its exit code and, if it held the
    /// lock and released it, its `released` / failure line.
    pub fn finish(mut self) -> (Option<i32>, Option<String>) {
        let status = self.child.wait().unwrap();
        let done = fs::read_to_string(suffixed(&self.report, "done"))
            .ok()
            .map(|text| text.trim_end().to_string());
        (status.code(), done)
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_when_present(path: &Path, kind: Kind, pid: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = fs::read_to_string(path) {
            return text.trim_end().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{kind:?} contender {pid} never reported"
        );
        sleep(Duration::from_millis(2));
    }
}

/// Creates an empty marker file (the GO / UNTIL signals).
pub fn touch(path: &Path) {
    fs::write(path, b"").unwrap();
}

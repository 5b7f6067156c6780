//! A release migrated by `scripts/migration-kit.sh` and staged by its
//! (stand-in) install.sh, driven exactly as install.sh, the server and
//! support staff drive the Python helpers: each launcher must behave like
//! the binary it runs (stdout, stderr, exit code), the staged runtime must
//! still compile and import as install.sh checks it, and the update runner
//! started as `update_runner.py` must pass the server's liveness check and
//! keep the signals its launcher ignored.

use crate::migration_kit_support;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agents_tests::{poll_until, Originals, Outcome, TempDir, HELPERS};
use migration_kit_support::{dist, foreign_executable, staged, FakeRelease, HOST_TARGET};

/// The interpreter install.sh would find for `detect` under an older release:
/// the system python3, not the staged runtime's. Resolved to the interpreter
/// itself, because a version manager's shim on PATH changes the environment
/// it passes on (pyenv exports the working directory as `PYENV_DIR`).
fn system_python() -> &'static Path {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("run python3");
        assert!(output.status.success(), "python3 names its interpreter");
        PathBuf::from(String::from_utf8(output.stdout).unwrap().trim_end())
    })
}

/// A command with a small fixed environment, so a launcher run and a direct
/// run see exactly the same one.
fn command(program: impl AsRef<OsStr>, home: &Path) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(home);
    command
}

struct Runtime {
    release: FakeRelease,
    /// The staged runtime (`<rt>` in install.sh's helper calls).
    stage: PathBuf,
    /// A private HOME and scratch space.
    home: PathBuf,
}

impl Runtime {
    /// A release migrated with the built helpers for this host (and stand-ins
    /// for the other platforms), staged by its install.sh.
    fn new(originals: &Originals) -> Runtime {
        Runtime::staged(originals, Some(&[HOST_TARGET, "aarch64-apple-darwin"]))
    }

    /// A release migrated with the platforms `targets` (None: not migrated),
    /// staged by its install.sh.
    fn staged(originals: &Originals, targets: Option<&[&str]>) -> Runtime {
        let release = FakeRelease::new(originals);
        if let Some(targets) = targets {
            release.migrate_with(&dist(release.temp(), targets));
        }
        let stage = release.stage();
        let home = release.temp().join("home");
        fs::create_dir(&home).unwrap();
        Runtime {
            release,
            stage,
            home,
        }
    }

    /// `<rt>/.venv/bin/python -B <rt>/<module> <args>`, as install.sh runs
    /// execution_activation.py (with PYTHONPATH=<rt>) and the server runs
    /// update_runner.py.
    fn script(&self, module: &str, args: &[&OsStr]) -> Command {
        let mut command = command(self.stage.join(".venv/bin/python"), &self.home);
        command
            .env("PYTHONPATH", &self.stage)
            .arg("-B")
            .arg(self.stage.join(module))
            .args(args);
        command
    }

    /// `PYTHONPATH=<source> python3 -B -m <module> <args>`: install.sh's
    /// `detect` against the unpacked release it is about to install.
    fn module(&self, module: &str, args: &[&OsStr]) -> Command {
        let mut command = command(system_python(), &self.home);
        command
            .env("PYTHONPATH", &self.release.source)
            .args(["-B", "-m", module])
            .args(args);
        command
    }

    /// The binary for this host itself (`name` is the helper), from the
    /// same runtime, with the argv[0] its launcher gives it: the path of the
    /// entry point `entry_point` beside it.
    fn binary(&self, directory: &Path, name: &str, entry_point: &str, args: &[&OsStr]) -> Command {
        let mut command = command(directory.join(staged(name, HOST_TARGET)), &self.home);
        command.arg0(directory.join(entry_point)).args(args);
        command
    }

    fn scratch(&self, name: &str) -> PathBuf {
        self.release.temp().join(name)
    }

    /// A folder in the scratch space named `name` and a byte that is not
    /// UTF-8, made.
    fn scratch_not_utf8(&self, name: &str) -> PathBuf {
        let mut path = self.scratch(name).into_os_string().into_vec();
        path.push(0xff);
        let path = PathBuf::from(OsString::from_vec(path));
        fs::create_dir_all(&path).unwrap();
        path
    }
}

fn os(words: &[&str]) -> Vec<std::ffi::OsString> {
    words.iter().map(Into::into).collect()
}

fn refs(words: &[std::ffi::OsString]) -> Vec<&OsStr> {
    words.iter().map(AsRef::as_ref).collect()
}

/// Runs both and requires the same exit code, stdout and stderr; returns it.
fn same(what: &str, mut launcher: Command, mut direct: Command) -> Outcome {
    let through_launcher = Outcome::of(&mut launcher);
    let from_binary = Outcome::of(&mut direct);
    assert_eq!(through_launcher, from_binary, "{what}: launcher vs binary");
    assert!(
        !through_launcher.stderr.contains("Traceback"),
        "{what}: {through_launcher:?}"
    );
    through_launcher
}

impl Runtime {
    /// The staged `entry_point` run as a script and the staged binary of
    /// `helper` run directly, both with `args`: [`same`] of the two.
    fn script_as_binary(
        &self,
        what: &str,
        entry_point: &str,
        helper: &str,
        args: &[&OsStr],
    ) -> Outcome {
        same(
            what,
            self.script(entry_point, args),
            self.binary(&self.stage, helper, entry_point, args),
        )
    }

    /// The directory `name` in the scratch space, made where missing.
    fn scratch_dir(&self, name: &str) -> PathBuf {
        let directory = self.scratch(name);
        fs::create_dir_all(&directory).unwrap();
        directory
    }
}

/// `<command> --root <root>`.
fn with_root(command: &str, root: &Path) -> Vec<OsString> {
    [os(&[command, "--root"]), vec![root.into()]].concat()
}

/// Each run of the table as the launcher and as the binary: the same
/// outcome, with exit code `code`.
fn assert_each_like_the_binary(
    runtime: &Runtime,
    entry_point: &str,
    helper: &str,
    runs: &[(&str, Vec<OsString>, Option<i32>)],
) {
    for (what, args, code) in runs {
        let outcome = runtime.script_as_binary(what, entry_point, helper, &refs(args));
        assert_eq!(outcome.code, *code, "{what}: {outcome:?}");
    }
}

#[test]
fn launchers_behave_exactly_like_the_binaries_they_run() {
    let originals = agents_tests::require_originals!();
    let runtime = Runtime::new(&originals);
    // The stage got every binary, executable, through RELEASE_FILES + chmod 755.
    for helper in HELPERS {
        let meta = fs::metadata(runtime.stage.join(staged(helper, HOST_TARGET))).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o755,
            "{helper} in the stage"
        );
    }
    assert_detect_behaves_like_the_binary(&runtime);
    assert_install_sh_arguments_reach_the_binary(&runtime);

    // execution_manage.py for support staff; update_runner.py as the
    // server starts it, for what ends at once.
    let inspect = with_root("inspect", &runtime.scratch_dir("empty-root"));
    assert_each_like_the_binary(
        &runtime,
        "execution_manage.py",
        "execution-manage",
        &[
            ("inspect without a layout", inspect, Some(1)),
            ("manage --help", os(&["--help"]), Some(0)),
            ("manage without a command", os(&[]), Some(2)),
        ],
    );
    assert_each_like_the_binary(
        &runtime,
        "update_runner.py",
        "update-runner",
        &[
            ("runner --help", os(&["--help"]), Some(0)),
            (
                "runner without its required options",
                os(&["--port", "1"]),
                Some(2),
            ),
        ],
    );
    assert_uninstall_launchers_behave_like_the_binary(&runtime, &originals);
    assert_staged_modules_compile_and_import(&runtime);
}

/// `detect` as install.sh runs it from the stage and, with `-m` under the
/// system interpreter, from the unpacked release before staging: both as
/// the binary, and as each other.
fn assert_detect_behaves_like_the_binary(runtime: &Runtime) {
    let legacy_root = runtime.scratch_dir("legacy-root");
    let pending_root = runtime.scratch("pending-root");
    fs::create_dir_all(pending_root.join(".execution-transaction")).unwrap();
    let detect_cases = [
        (
            "detect on a legacy root",
            with_root("detect", &legacy_root),
            Some(0),
        ),
        (
            "detect on a pending execution activation",
            with_root("detect", &pending_root),
            Some(1),
        ),
        ("detect without --root", os(&["detect"]), Some(2)),
    ];
    for (what, args, code) in &detect_cases {
        let args = refs(args);
        let script = runtime.script_as_binary(
            what,
            "execution_activation.py",
            "execution-activation",
            &args,
        );
        assert_eq!(script.code, *code, "{what}: {script:?}");
        // The -m form under the system interpreter runs the unpacked
        // release's binary: install.sh's detect before staging.
        let module = same(
            what,
            runtime.module("execution_activation", &args),
            runtime.binary(
                &runtime.release.source,
                "execution-activation",
                "execution_activation.py",
                &args,
            ),
        );
        assert_eq!(module, script, "{what}: -m and script forms agree");
    }
    assert_eq!(
        Outcome::of(&mut runtime.script(
            "execution_activation.py",
            &refs(&with_root("detect", &legacy_root))
        ))
        .stdout,
        "legacy\n"
    );
}

/// install.sh's full argument list for an operation, empty values
/// included, reaches the binary unchanged.
fn assert_install_sh_arguments_reach_the_binary(runtime: &Runtime) {
    let legacy_root = runtime.scratch_dir("legacy-root");
    let path = |name: &str| runtime.scratch(name).into_os_string();
    let stop = [
        os(&["stop", "--root"]),
        vec![legacy_root.clone().into()],
        os(&["--config-root"]),
        vec![path("config")],
        os(&["--state-root"]),
        vec![path("state")],
        os(&["--home"]),
        vec![runtime.home.clone().into()],
        os(&["--platform", "Linux", "--release-dir"]),
        vec![legacy_root.join("releases/1.0.8").into()],
        os(&[
            "--bind",
            "127.0.0.1",
            "--port",
            "7850",
            "--expected-server-identity",
            "",
            "--health-file",
            "",
            "--managed-update-id",
            "",
            "--handoff-file",
            "",
            "--candidate-source",
        ]),
        vec![runtime.stage.clone().into()],
        os(&["--release-version", "1.0.8", "--api-contract", "0"]),
    ]
    .concat();
    let outcome = runtime.script_as_binary(
        "stop with install.sh's arguments",
        "execution_activation.py",
        "execution-activation",
        &refs(&stop),
    );
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert!(
        outcome.stderr.starts_with("FileNotFoundError: "),
        "{outcome:?}"
    );
}

/// execution_uninstall.py as the original uninstall.sh hands over to it,
/// and uninstall.sh itself, which keeps the original script's options,
/// output and exit codes.
fn assert_uninstall_launchers_behave_like_the_binary(runtime: &Runtime, originals: &Originals) {
    let helper_args = [
        os(&["--root"]),
        vec![runtime.scratch_dir("empty-root").into()],
        os(&["--config-root"]),
        vec![runtime.scratch("config").into()],
        os(&["--state-root"]),
        vec![runtime.scratch("state").into()],
        os(&["--home"]),
        vec![runtime.home.clone().into()],
        os(&["--yes"]),
    ]
    .concat();
    let outcome = runtime.script_as_binary(
        "the split uninstall helper without a layout",
        "execution_uninstall.py",
        "uninstall",
        &refs(&helper_args),
    );
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert!(
        outcome
            .stderr
            .starts_with("Cannot uninstall the separate gateway/execution layout: "),
        "{outcome:?}"
    );

    for (what, args, code) in [
        ("uninstall.sh --help", os(&["--help"]), Some(0)),
        (
            "uninstall.sh with an unknown option",
            os(&["--bogus"]),
            Some(2),
        ),
    ] {
        let args = refs(&args);
        let mut launcher = command("bash", &runtime.home);
        launcher.arg(runtime.stage.join("uninstall.sh")).args(&args);
        let outcome = same(
            what,
            launcher,
            runtime.binary(&runtime.stage, "uninstall", "uninstall.sh", &args),
        );
        assert_eq!(outcome.code, code, "{what}: {outcome:?}");
        let mut original = command("bash", &runtime.home);
        original.arg(originals.file("uninstall.sh")).args(&args);
        assert_eq!(
            Outcome::of(&mut original),
            outcome,
            "{what}: the launcher answers as the original script"
        );
    }
}

/// install.sh's compile check over every staged module, and its import
/// check plus the names other Python code imports from these modules:
/// importing must not start any binary.
fn assert_staged_modules_compile_and_import(runtime: &Runtime) {
    let stage = &runtime.stage;
    let modules: Vec<PathBuf> = fs::read_dir(stage)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .collect();
    assert_eq!(modules.len(), 9, "{modules:?}");
    let compiled = Outcome::of(
        command(stage.join(".venv/bin/python"), &runtime.home)
            .args(["-m", "py_compile"])
            .args(&modules),
    );
    assert_eq!(compiled.code, Some(0), "{compiled:?}");
    let imports = "\
import execution_activation, update_handoff, execution_uninstall, execution_manage, update_runner
from update_handoff import retry_failed_handoff, release_existing_handoff, _installed_layout, _no_activation
from update_runner import (atomic_json, server_update_status_lock, update_status, utc_now,
    UpdateOwnershipLostError, RUNNER_OWNED_ACTIVE_PHASES, main)
from execution_manage import InstallationLock, NativeServices, WorkerControl, ActivationController
from execution_activation import command_layout, main as activation_main
import os, sys
sys.stdout.write('imported in %s\\n' % os.path.basename(os.readlink('/proc/self/exe')))
";
    let imported = Outcome::of(
        command(stage.join(".venv/bin/python"), &runtime.home)
            .env("PYTHONPATH", stage)
            .args(["-B", "-c", imports]),
    );
    // Still the interpreter: no launcher ran on import.
    assert!(
        imported.stdout.starts_with("imported in python") && imported.stdout.ends_with('\n'),
        "{imported:?}"
    );
    assert_eq!(imported.code, Some(0), "{imported:?}");
}

/// The server's liveness matcher: the command line (arguments joined by
/// spaces) contains `update_runner.py` and matches
/// `(?:^|\s)--update-id\s+<id>(?:\s|$)`.
fn server_sees_runner(command_line: &str, update_id: &str) -> bool {
    if !command_line.contains("update_runner.py") {
        return false;
    }
    let flag = "--update-id";
    command_line.match_indices(flag).any(|(at, _)| {
        let before_ok = command_line[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        let rest = &command_line[at + flag.len()..];
        let value = rest.trim_start();
        let spaced = value.len() < rest.len();
        before_ok
            && spaced
            && value
                .strip_prefix(update_id)
                .is_some_and(|after| after.chars().next().is_none_or(char::is_whitespace))
    })
}

#[test]
fn the_liveness_matcher_is_the_servers() {
    let id = "0123456789abcdef0123456789abcdef";
    let line = format!("/rt/update_runner.py --status-file s --update-id {id} --port 1");
    assert!(server_sees_runner(&line, id));
    assert!(server_sees_runner(
        &format!("/rt/update_runner.py --update-id  {id}"),
        id
    ));
    assert!(!server_sees_runner(
        &format!("/rt/update_runner.py --update-id {id}0"),
        id
    ));
    assert!(!server_sees_runner(
        &format!("/rt/update_runner.py x--update-id {id}"),
        id
    ));
    assert!(!server_sees_runner(
        &format!("/rt/update_runner.py --update-id={id}"),
        id
    ));
    assert!(!server_sees_runner(
        &format!("/rt/update-runner --update-id {id}"),
        id
    ));
}

/// A pipe whose write end (for the child's stdout and stderr) is already full,
/// so the child blocks on its first write until the test drains it.
struct FullPipe {
    read: fs::File,
    write: OwnedFd,
    prefilled: usize,
}

impl FullPipe {
    fn new(prefill: bool) -> FullPipe {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just created and are owned here.
        let (read, write) =
            unsafe { (fs::File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut prefilled = 0;
        if prefill {
            let fd = write.as_raw_fd();
            // SAFETY: fcntl on a descriptor this function owns.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            assert_eq!(
                // SAFETY: fcntl on a descriptor this function owns.
                unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) },
                0
            );
            let chunk = [b'#'; 4096];
            loop {
                // SAFETY: writes from a live buffer of the given length.
                let written = unsafe { libc::write(fd, chunk.as_ptr().cast(), chunk.len()) };
                if written <= 0 {
                    break;
                }
                prefilled += written as usize;
            }
            // SAFETY: fcntl on a descriptor this function owns.
            assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) }, 0);
        }
        FullPipe {
            read,
            write,
            prefilled,
        }
    }

    fn attach(&self, command: &mut Command) {
        command
            .stdout(Stdio::from(self.write.try_clone().unwrap()))
            .stderr(Stdio::from(self.write.try_clone().unwrap()));
    }

    /// Everything the child wrote after the prefill, once it closed the pipe.
    fn drain(self) -> std::thread::JoinHandle<String> {
        let FullPipe {
            mut read,
            write,
            prefilled,
        } = self;
        drop(write);
        std::thread::spawn(move || {
            let mut data = Vec::new();
            read.read_to_end(&mut data).unwrap();
            String::from_utf8_lossy(&data[prefilled..]).into_owned()
        })
    }
}

/// Starts `command` with SIGHUP, SIGINT and SIGTERM ignored, as install.sh's
/// masked windows (`trap '' HUP INT TERM`) start their helpers.
/// Takes the command so its copies of the pipe's write end close once the
/// child has them.
fn spawn_masked(mut command: Command) -> std::process::Child {
    agents_tests::with_termination_signals(
        &mut command,
        &[libc::SIGHUP, libc::SIGINT, libc::SIGTERM],
    );
    command.stdin(Stdio::null()).spawn().expect("spawn")
}

/// Holds `admin/.server-update.json.lock` as the server does while it writes
/// the status row: the runner blocks on it.
fn hold_status_lock(admin: &Path) -> fs::File {
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(admin.join(".server-update.json.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor the returned File owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    lock
}

fn signals_ignored(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .unwrap()
        .trim();
    u64::from_str_radix(mask, 16).unwrap()
}

/// The server's arguments for a runner of update `update_id` whose status
/// row is in `admin`.
fn runner_args(runtime: &Runtime, admin: &Path, update_id: &str) -> Vec<OsString> {
    [
        os(&["--status-file"]),
        vec![admin.join("server-update.json").into()],
        os(&["--public-key"]),
        vec![runtime.stage.join("release-public-key.pem").into()],
        os(&[
            "--port",
            "9",
            "--bind",
            "127.0.0.1",
            "--expected-version",
            "1.0.8",
            "--current-version",
            "1.0.7-beta.5",
            "--track",
            "beta",
            "--expected-server-identity",
            "migration-kit-identity",
            "--update-id",
            update_id,
        ]),
    ]
    .concat()
}

/// Waits until process `pid` runs `binary` with its new argument block in
/// place, and returns that argv. The kernel points `exe` at the new program
/// a moment before it lays out the new argument block, so the command line
/// is awaited too.
fn argv_once_it_runs(pid: u32, binary: &Path) -> Vec<String> {
    poll_until(
        Duration::from_secs(10),
        "the launcher to exec update-runner",
        || {
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|byte| *byte == 0)
                .filter(|word| !word.is_empty())
                .map(|word| String::from_utf8_lossy(word).into_owned())
                .collect();
            (exe == binary && !argv.is_empty()).then_some(argv)
        },
    )
}

/// Removes everything from `admin` but the status lock file: the state a
/// runner starts from.
fn keep_only_the_status_lock(admin: &Path) {
    for entry in fs::read_dir(admin).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name() != Some(OsStr::new(".server-update.json.lock")) {
            fs::remove_file(&path).unwrap();
        }
    }
}

#[test]
fn the_update_runner_launcher_passes_the_liveness_check_and_keeps_ignored_signals() {
    let originals = agents_tests::require_originals!();
    let runtime = Runtime::new(&originals);
    let update_id = "5f1d2c3b4a5968778695a4b3c2d1e0f1";
    let state = TempDir::new("migration-kit-state");
    let admin = state.path().join("admin");
    fs::create_dir(&admin).unwrap();
    fs::set_permissions(&admin, fs::Permissions::from_mode(0o700)).unwrap();
    let args = runner_args(&runtime, &admin, update_id);
    let args = refs(&args);

    // The server's launch: <venv python> <rt>/update_runner.py ..., with the
    // status row locked and output blocked, so the runner stays alive.
    let lock = hold_status_lock(&admin);
    let pipe = FullPipe::new(true);
    let mut launcher = runtime.script("update_runner.py", &args);
    pipe.attach(&mut launcher);
    let mut child = spawn_masked(launcher);
    let pid = child.id();
    let binary =
        fs::canonicalize(runtime.stage.join(staged("update-runner", HOST_TARGET))).unwrap();
    let argv = argv_once_it_runs(pid, &binary);
    assert_eq!(
        PathBuf::from(&argv[0]),
        runtime.stage.join("update_runner.py"),
        "argv[0] stays the script path: {argv:?}"
    );
    let command_line = argv.join(" ");
    assert!(
        server_sees_runner(&command_line, update_id),
        "{command_line}"
    );
    assert!(
        !server_sees_runner(&command_line, "5f1d2c3b4a5968778695a4b3c2d1e0f"),
        "{command_line}"
    );
    let ignored = signals_ignored(pid);
    for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
        assert_ne!(
            ignored & (1 << (signal - 1)),
            0,
            "signal {signal} in {ignored:x}"
        );
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the runner is still alive"
    );

    // Let it finish, then run the binary itself with the same arguments and
    // the same (fresh) state: same exit code and output.
    let output = pipe.drain();
    drop(lock);
    let launched = child.wait().unwrap();
    let launched_output = output.join().unwrap();
    keep_only_the_status_lock(&admin);
    let pipe = FullPipe::new(false);
    let mut direct = runtime.binary(&runtime.stage, "update-runner", "update_runner.py", &args);
    pipe.attach(&mut direct);
    let mut child = spawn_masked(direct);
    let output = pipe.drain();
    let direct_status = child.wait().unwrap();
    assert_eq!(launched.code(), direct_status.code());
    assert_eq!(launched_output, output.join().unwrap());
}

/// A host as the launchers see it: `uname -s`, `uname -m`, `uname -r`, what
/// glibc reports (None: not glibc, as on musl), and whether the glibc
/// platform's dynamic loader exists.
struct FakeHost {
    system: &'static str,
    machine: &'static str,
    release: &'static str,
    libc: Option<&'static str>,
    loader: bool,
}

/// What each launcher must choose on each host: the staged name's platform
/// tag, or None for the original.
const HOST_CHOICES: [(FakeHost, Option<&str>); 14] = [
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "5.10.0",
            libc: Some("glibc 2.17"),
            loader: true,
        },
        Some("linux-x86_64"),
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "6.1.0",
            libc: Some("glibc 3.0"),
            loader: true,
        },
        Some("linux-x86_64"),
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "3.10.0",
            libc: Some("glibc 2.16"),
            loader: true,
        },
        None,
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "3.10.0",
            libc: Some("glibc 2.9"),
            loader: true,
        },
        None,
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "6.6.0",
            libc: None,
            loader: true,
        },
        None,
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "x86_64",
            release: "6.6.0",
            libc: Some("glibc 2.36"),
            loader: false,
        },
        None,
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "aarch64",
            release: "6.1.0",
            libc: Some("glibc 2.31"),
            loader: true,
        },
        Some("linux-aarch64"),
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "aarch64",
            release: "6.1.0",
            libc: Some("glibc 2.31"),
            loader: false,
        },
        None,
    ),
    (
        FakeHost {
            system: "Darwin",
            machine: "arm64",
            release: "20.1.0",
            libc: None,
            loader: false,
        },
        Some("darwin-arm64"),
    ),
    (
        FakeHost {
            system: "Darwin",
            machine: "arm64",
            release: "19.6.0",
            libc: None,
            loader: false,
        },
        None,
    ),
    (
        FakeHost {
            system: "Darwin",
            machine: "x86_64",
            release: "16.0.0",
            libc: None,
            loader: false,
        },
        Some("darwin-x86_64"),
    ),
    (
        FakeHost {
            system: "Darwin",
            machine: "x86_64",
            release: "15.6.0",
            libc: None,
            loader: false,
        },
        None,
    ),
    (
        FakeHost {
            system: "Linux",
            machine: "riscv64",
            release: "6.1.0",
            libc: Some("glibc 2.36"),
            loader: true,
        },
        None,
    ),
    (
        FakeHost {
            system: "FreeBSD",
            machine: "amd64",
            release: "14.0-RELEASE",
            libc: None,
            loader: false,
        },
        None,
    ),
];

/// Runs a migrated Python entry point's launcher block as `__main__` with the
/// host faked (`os.uname`, `os.confstr`, the loader's `os.path.exists`) and
/// `os.execv` recording its choice: `EXEC <path>` or `ORIGINAL`.
fn python_choice(block: &str, module: &Path, host: &FakeHost) -> String {
    let harness = r##"
import os, sys
system, machine, release, libc, loader, module = sys.argv[1:7]
block = sys.stdin.read()
real_exists = os.path.exists
os.uname = lambda: os.uname_result((system, "host", release, "#1", machine))
def confstr(name):
    if name != "CS_GNU_LIBC_VERSION" or libc == "-":
        raise ValueError("unrecognized configuration name")
    return libc
os.confstr = confstr
os.path.exists = lambda path: (loader == "yes") if path.startswith(("/lib/ld-", "/lib64/ld-")) else real_exists(path)
def execv(path, argv):
    print("EXEC " + path)
    sys.exit(0)
os.execv = execv
exec(compile(block, module, "exec"), {"__name__": "__main__", "__file__": module})
print("ORIGINAL")
"##;
    let mut child = Command::new("python3")
        .args(["-B", "-c", harness, host.system, host.machine, host.release])
        .arg(host.libc.unwrap_or("-"))
        .arg(if host.loader { "yes" } else { "no" })
        .arg(module)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(block.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

/// Runs uninstall.sh's launcher block from a script beside it with `uname`
/// and `getconf` faked as shell functions and `exec` recording its choice.
/// The loader check reads the real file system (bash cannot fake `[[ -e ]]`).
fn shell_choice(block: &str, stage: &Path, host: &FakeHost) -> String {
    let probe = stage.join("launcher-probe.sh");
    let script = format!(
        "uname() {{ case \"$1\" in -s) echo '{}' ;; -m) echo '{}' ;; -r) echo '{}' ;; esac; }}\n\
         getconf() {{ {} }}\n\
         exec() {{ echo \"EXEC $3\"; exit 0; }}\n\
         {block}echo ORIGINAL\n",
        host.system,
        host.machine,
        host.release,
        host.libc
            .map(|libc| format!("echo '{libc}';"))
            .unwrap_or_else(|| "return 1;".to_string()),
    );
    fs::write(&probe, script).unwrap();
    let output = Command::new("bash").arg(&probe).output().unwrap();
    fs::remove_file(&probe).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn each_launcher_chooses_the_binary_built_for_the_host() {
    let originals = agents_tests::require_originals!();
    let all = migration_kit_support::all_targets();
    let runtime = Runtime::staged(&originals, Some(&all));
    let stage = &runtime.stage;
    let expected = |tag: Option<&str>, binary: &str| match tag {
        Some(tag) => format!("EXEC {}", stage.join(format!("{binary}-{tag}")).display()),
        None => "ORIGINAL".to_string(),
    };
    for (module, binary) in [
        ("execution_activation.py", "execution-activation"),
        ("execution_manage.py", "execution-manage"),
        ("update_runner.py", "update-runner"),
        ("execution_uninstall.py", "uninstall"),
    ] {
        let text = fs::read_to_string(stage.join(module)).unwrap();
        let block = migration_kit_support::launcher_block(&text).unwrap();
        for (host, tag) in &HOST_CHOICES {
            assert_eq!(
                python_choice(block, &stage.join(module), host),
                expected(*tag, binary),
                "{module} on {} {} {} {:?} loader {}",
                host.system,
                host.machine,
                host.release,
                host.libc,
                host.loader
            );
        }
    }
    let text = fs::read_to_string(stage.join("uninstall.sh")).unwrap();
    let block = migration_kit_support::launcher_block(&text).unwrap();
    let real_loader = |tag: &str| match tag {
        "linux-x86_64" => Path::new("/lib64/ld-linux-x86-64.so.2").exists(),
        "linux-aarch64" => Path::new("/lib/ld-linux-aarch64.so.1").exists(),
        _ => true,
    };
    for (host, tag) in &HOST_CHOICES {
        // The loader of a Linux host is this machine's: a row that needs it
        // absent, or present where this machine lacks it, is not one bash
        // can be shown.
        let linux_tag = match host.machine {
            "x86_64" => "linux-x86_64",
            _ => "linux-aarch64",
        };
        if host.system == "Linux" && host.loader != real_loader(linux_tag) {
            continue;
        }
        assert_eq!(
            shell_choice(block, stage, host),
            expected(*tag, "uninstall"),
            "uninstall.sh on {} {} {} {:?}",
            host.system,
            host.machine,
            host.release,
            host.libc
        );
    }
}

/// Ways the binary for this host can fail to fit or run.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Missing,
    NotExecutable,
    /// Another CPU's Linux executable in this host's slot.
    WrongArchitecture,
    /// This CPU's macOS executable in this host's slot.
    WrongSystem,
    /// This host's header on a file the kernel refuses to load.
    Unloadable,
    /// The binary cut to its first 1,000 bytes: its header still passes.
    Truncated,
    /// One byte changed in the middle: same size, same header.
    OneByteChanged,
    /// A FIFO in the binary's place: opening it must not wait for a writer.
    Fifo,
}

impl Damage {
    fn apply(self, path: &Path) {
        let other_cpu = if HOST_TARGET.starts_with("x86_64") {
            "aarch64-unknown-linux-gnu"
        } else {
            "x86_64-unknown-linux-gnu"
        };
        let same_cpu_mac = if HOST_TARGET.starts_with("x86_64") {
            "x86_64-apple-darwin"
        } else {
            "aarch64-apple-darwin"
        };
        let replace = |bytes: Vec<u8>| {
            fs::remove_file(path).unwrap();
            fs::write(path, bytes).unwrap();
            fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
        };
        match self {
            Damage::Missing => fs::remove_file(path).unwrap(),
            Damage::NotExecutable => {
                fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap()
            }
            Damage::WrongArchitecture => replace(foreign_executable(other_cpu)),
            Damage::WrongSystem => replace(foreign_executable(same_cpu_mac)),
            Damage::Unloadable => replace(foreign_executable(HOST_TARGET)),
            Damage::Truncated => {
                let mut bytes = fs::read(path).unwrap();
                bytes.truncate(1000);
                replace(bytes)
            }
            Damage::Fifo => {
                fs::remove_file(path).unwrap();
                let made = std::process::Command::new("mkfifo")
                    .arg(path)
                    .status()
                    .unwrap();
                assert!(made.success(), "mkfifo {}", path.display());
            }
            Damage::OneByteChanged => {
                let mut bytes = fs::read(path).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x01;
                replace(bytes)
            }
        }
    }
}

/// The runs that tell the original from the binary, in install.sh's, the
/// server's, support staff's and uninstall.sh's forms, each with whether its
/// outcome differs between them (so it proves which one ran), and the
/// outcomes with this runtime's private directory written `<temp>`.
fn probes(runtime: &Runtime) -> Vec<(&'static str, bool, Outcome)> {
    probes_with(runtime, &|_| {})
}

/// A change to a probe's command before it runs (an environment entry added,
/// another working directory).
type Adjust<'a> = &'a dyn Fn(&mut Command);

/// [`probes`], each command changed by `adjust`.
fn probes_with(runtime: &Runtime, adjust: Adjust) -> Vec<(&'static str, bool, Outcome)> {
    let scratch = |name: &str| runtime.scratch_dir(name).into_os_string();
    let legacy = [os(&["detect", "--root"]), vec![scratch("legacy-root")]].concat();
    let split_root = scratch("split-root");
    fs::write(Path::new(&split_root).join("execution-layout.json"), "{}\n").unwrap();
    let helper = [
        os(&["--root"]),
        vec![scratch("empty-root")],
        os(&["--config-root"]),
        vec![scratch("config")],
        os(&["--state-root"]),
        vec![scratch("state")],
        os(&["--home"]),
        vec![runtime.home.clone().into()],
        os(&["--yes"]),
    ]
    .concat();
    let uninstall = |args: &[&str]| {
        let mut command = command("bash", &runtime.home);
        command
            .arg(runtime.stage.join("uninstall.sh"))
            .args(args)
            .env("AGENTS_SERVER_INSTALL_DIR", &split_root)
            .env("AGENTS_SERVER_CONFIG_DIR", scratch("config"))
            .env("AGENTSDOCK_STATE_DIR", scratch("state"));
        command
    };
    let temp = runtime.release.temp().to_str().unwrap().to_string();
    let mut runs: Vec<(&str, bool, Command)> = vec![
        (
            "detect as install.sh runs it",
            true,
            runtime.script("execution_activation.py", &refs(&legacy)),
        ),
        (
            "detect under the previous interpreter",
            true,
            runtime.module("execution_activation", &refs(&legacy)),
        ),
        (
            "support staff's execution_manage.py",
            false,
            runtime.script("execution_manage.py", &refs(&os(&["--help"]))),
        ),
        (
            "the server's update_runner.py",
            false,
            runtime.script("update_runner.py", &refs(&os(&["--port", "1"]))),
        ),
        (
            "the split uninstall helper",
            true,
            runtime.script("execution_uninstall.py", &refs(&helper)),
        ),
        (
            "uninstall.sh on a split layout",
            true,
            uninstall(&["--yes"]),
        ),
        (
            "uninstall.sh with an unknown option",
            false,
            uninstall(&["--bogus"]),
        ),
    ];
    runs.iter_mut()
        .map(|(what, tells, command)| {
            adjust(command);
            let mut outcome = Outcome::of(command);
            outcome.stderr = as_published(runtime, &outcome.stderr);
            outcome.stdout = outcome.stdout.replace(&temp, "<temp>");
            outcome.stderr = outcome.stderr.replace(&temp, "<temp>");
            (*what, *tells, outcome)
        })
        .collect()
}

/// A traceback's `File "<path>", line N` lines with N counted as in the
/// published file: a migrated entry point has the launcher's lines before the
/// original code, so the same original line has a higher number there.
fn as_published(runtime: &Runtime, stderr: &str) -> String {
    let shift = |path: &str, line: usize| {
        let Ok(text) = fs::read_to_string(path) else {
            return line;
        };
        let Some(block) = migration_kit_support::launcher_block(&text) else {
            return line;
        };
        let before = text[..text.find(block).unwrap()].matches('\n').count();
        let added = block.matches('\n').count();
        if line > before + added {
            line - added
        } else {
            line
        }
    };
    let mut lines = Vec::new();
    for line in stderr.split_inclusive('\n') {
        let located = line
            .strip_prefix("  File \"")
            .and_then(|rest| rest.split_once("\", line "))
            .and_then(|(path, rest)| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let number: usize = digits.parse().ok()?;
                Some((path, number, &rest[digits.len()..]))
            });
        match located {
            Some((path, number, rest))
                if path.starts_with(runtime.release.temp().to_str().unwrap()) =>
            {
                lines.push(format!(
                    "  File \"{path}\", line {}{rest}",
                    shift(path, number)
                ));
            }
            _ => lines.push(line.to_string()),
        }
    }
    lines.concat()
}

/// Applies `damage` to this host's five binaries in the stage and in the
/// unpacked release (where `-m` finds them).
fn damage_host_binaries(runtime: &Runtime, damage: Damage) {
    for directory in [&runtime.stage, &runtime.release.source] {
        for helper in HELPERS {
            damage.apply(&directory.join(staged(helper, HOST_TARGET)));
        }
    }
}

#[test]
fn every_fallback_runs_the_original_with_the_originals_result() {
    let originals = agents_tests::require_originals!();
    let unmigrated = probes(&Runtime::staged(&originals, None));
    let migrated = probes(&Runtime::new(&originals));
    for ((what, tells, original), (_, _, binary)) in unmigrated.iter().zip(&migrated) {
        if *tells {
            assert_ne!(
                original, binary,
                "{what}: the probe tells the original from the binary"
            );
        }
    }
    for damage in [
        Damage::Missing,
        Damage::NotExecutable,
        Damage::WrongArchitecture,
        Damage::WrongSystem,
        Damage::Unloadable,
        Damage::Truncated,
        Damage::OneByteChanged,
        Damage::Fifo,
    ] {
        let runtime = Runtime::new(&originals);
        damage_host_binaries(&runtime, damage);
        // Every launcher checks the binary against the size and sha256 the
        // kit recorded before it execs, so each falls back silently: not
        // even bash's report of a failed exec reaches stderr.
        for ((what, _, original), (_, _, fallen_back)) in unmigrated.iter().zip(probes(&runtime)) {
            assert_eq!(&fallen_back, original, "{what} with the binary {damage:?}");
        }
    }
}

#[test]
fn a_release_without_a_binary_for_this_host_answers_as_an_unmigrated_one() {
    let originals = agents_tests::require_originals!();
    let unmigrated = probes(&Runtime::staged(&originals, None));
    let elsewhere: Vec<&str> = migration_kit_support::all_targets()
        .into_iter()
        .filter(|target| *target != HOST_TARGET)
        .collect();
    let runtime = Runtime::staged(&originals, Some(&elsewhere));
    assert!(!runtime
        .stage
        .join(staged("uninstall", HOST_TARGET))
        .exists());
    assert_eq!(probes(&runtime), unmigrated);
}

/// A path that is not UTF-8 reaches Python as surrogate escapes, which the
/// original writes on into its journals and the binaries refuse: wherever an
/// argument, the environment or the working directory holds such bytes, the
/// migrated release must answer as the unmigrated one, and the binary alone
/// must not.
#[test]
fn calls_whose_paths_may_not_be_utf8_run_the_original() {
    let originals = agents_tests::require_originals!();
    let unmigrated = Runtime::staged(&originals, None);
    let migrated = Runtime::new(&originals);
    let plain = probes(&migrated);
    let environment = |command: &mut Command| {
        command.env("AGENTS_NOT_UTF8", OsString::from_vec(b"/tmp/\xff".to_vec()));
    };
    // A relative path is resolved against the working directory, so its
    // bytes reach the helper as an argument's would. PWD names it through a
    // link that is UTF-8, as a shell started there would keep it.
    let directory = |runtime: &Runtime| {
        let path = runtime.scratch_not_utf8("cwd");
        let link = runtime.scratch("cwd-link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        move |command: &mut Command| {
            command.current_dir(&path).env("PWD", &link);
        }
    };
    let cases: [(&str, Adjust, Adjust); 2] = [
        ("an environment", &environment, &environment),
        (
            "a working directory",
            &directory(&unmigrated),
            &directory(&migrated),
        ),
    ];
    for (which, original_side, migrated_side) in cases {
        let expected = probes_with(&unmigrated, original_side);
        for (((what, tells, original), (_, _, binary)), (_, _, launched)) in expected
            .iter()
            .zip(&plain)
            .zip(probes_with(&migrated, migrated_side))
        {
            if *tells {
                assert_ne!(original, binary, "{what}: the probe tells them apart");
            }
            assert_eq!(&launched, original, "{what} with {which} that is not UTF-8");
        }
    }

    let detect = |runtime: &Runtime| -> [OsString; 3] {
        let root = runtime.scratch_not_utf8("legacy-root").into_os_string();
        [OsString::from("detect"), OsString::from("--root"), root]
    };
    let args = detect(&unmigrated);
    let original = Outcome::of(&mut unmigrated.script("execution_activation.py", &refs(&args)));
    let args = detect(&migrated);
    let launched = Outcome::of(&mut migrated.script("execution_activation.py", &refs(&args)));
    let binary = Outcome::of(&mut migrated.binary(
        &migrated.stage,
        "execution-activation",
        "execution_activation.py",
        &refs(&args),
    ));
    let shown = |mut outcome: Outcome, runtime: &Runtime| {
        let temp = runtime.release.temp().to_str().unwrap();
        outcome.stderr = as_published(runtime, &outcome.stderr).replace(temp, "<temp>");
        outcome
    };
    // The fake release's upstream modules are stand-ins, so the original gets
    // no further than they let it; the binary refuses the path itself.
    let original = shown(original, &unmigrated);
    let refusal = "configuration text must be nonempty and contain no control characters";
    assert!(!original.stderr.contains(refusal), "{original:?}");
    assert_eq!(shown(launched, &migrated), original);
    let binary = shown(binary, &migrated);
    assert!(binary.stderr.contains(refusal), "{binary:?}");
}

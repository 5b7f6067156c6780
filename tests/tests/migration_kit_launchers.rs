//! A release migrated by `scripts/migration-kit.sh` and staged by its
//! (stand-in) install.sh, driven exactly as install.sh, the server and
//! support staff drive the Python helpers: each launcher must behave like
//! the binary it runs (stdout, stderr, exit code), the staged runtime must
//! still compile and import as install.sh checks it, and the update runner
//! started as `update_runner.py` must pass the server's liveness check and
//! keep the signals its launcher ignored.

mod migration_kit_support;

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agents_tests::{poll_until, Originals, Outcome, TempDir, HELPERS};
use migration_kit_support::FakeRelease;

/// The interpreter install.sh would find for `detect` under an older release:
/// the system python3, not the staged runtime's.
const SYSTEM_PYTHON: &str = "python3";

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
    fn new(originals: &Originals) -> Runtime {
        let release = FakeRelease::new(originals);
        release.migrate();
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
        let mut command = command(SYSTEM_PYTHON, &self.home);
        command
            .env("PYTHONPATH", &self.release.source)
            .args(["-B", "-m", module])
            .args(args);
        command
    }

    /// The binary itself, from the same runtime.
    fn binary(&self, directory: &Path, name: &str, args: &[&OsStr]) -> Command {
        let mut command = command(directory.join(name), &self.home);
        command.args(args);
        command
    }

    fn scratch(&self, name: &str) -> PathBuf {
        self.release.temp().join(name)
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

#[test]
fn launchers_behave_exactly_like_the_binaries_they_run() {
    let originals = agents_tests::require_originals!();
    let runtime = Runtime::new(&originals);
    let stage = &runtime.stage;

    // The stage got every binary, executable, through RELEASE_FILES + chmod 755.
    for helper in HELPERS {
        let meta = fs::metadata(stage.join(helper)).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o755,
            "{helper} in the stage"
        );
    }

    let legacy_root = runtime.scratch("legacy-root");
    fs::create_dir(&legacy_root).unwrap();
    let pending_root = runtime.scratch("pending-root");
    fs::create_dir_all(pending_root.join(".execution-transaction")).unwrap();
    let root_arg = |root: &Path| [os(&["detect", "--root"]), vec![root.into()]].concat();
    let detect_cases = [
        ("detect on a legacy root", root_arg(&legacy_root), Some(0)),
        (
            "detect on a pending execution activation",
            root_arg(&pending_root),
            Some(1),
        ),
        ("detect without --root", os(&["detect"]), Some(2)),
    ];
    for (what, args, code) in &detect_cases {
        let args = refs(args);
        let script = same(
            what,
            runtime.script("execution_activation.py", &args),
            runtime.binary(stage, "execution-activation", &args),
        );
        assert_eq!(script.code, *code, "{what}: {script:?}");
        // The -m form under the system interpreter runs the unpacked
        // release's binary: install.sh's detect before staging.
        let module = same(
            what,
            runtime.module("execution_activation", &args),
            runtime.binary(&runtime.release.source, "execution-activation", &args),
        );
        assert_eq!(module, script, "{what}: -m and script forms agree");
    }
    assert_eq!(
        Outcome::of(&mut runtime.script("execution_activation.py", &refs(&root_arg(&legacy_root))))
            .stdout,
        "legacy\n"
    );

    // install.sh's full argument list for an operation, empty values
    // included, reaches the binary unchanged.
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
        vec![stage.clone().into()],
        os(&["--release-version", "1.0.8", "--api-contract", "0"]),
    ]
    .concat();
    let outcome = same(
        "stop with install.sh's arguments",
        runtime.script("execution_activation.py", &refs(&stop)),
        runtime.binary(stage, "execution-activation", &refs(&stop)),
    );
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert!(
        outcome.stderr.starts_with("FileNotFoundError: "),
        "{outcome:?}"
    );

    // execution_manage.py for support staff.
    let empty_root = runtime.scratch("empty-root");
    fs::create_dir(&empty_root).unwrap();
    let inspect = [os(&["inspect", "--root"]), vec![empty_root.clone().into()]].concat();
    for (what, args, code) in [
        ("inspect without a layout", inspect, Some(1)),
        ("manage --help", os(&["--help"]), Some(0)),
        ("manage without a command", os(&[]), Some(2)),
    ] {
        let args = refs(&args);
        let outcome = same(
            what,
            runtime.script("execution_manage.py", &args),
            runtime.binary(stage, "execution-manage", &args),
        );
        assert_eq!(outcome.code, code, "{what}: {outcome:?}");
    }

    // update_runner.py as the server starts it, for what ends at once.
    for (what, args, code) in [
        ("runner --help", os(&["--help"]), Some(0)),
        (
            "runner without its required options",
            os(&["--port", "1"]),
            Some(2),
        ),
    ] {
        let args = refs(&args);
        let outcome = same(
            what,
            runtime.script("update_runner.py", &args),
            runtime.binary(stage, "update-runner", &args),
        );
        assert_eq!(outcome.code, code, "{what}: {outcome:?}");
    }

    // execution_uninstall.py as the original uninstall.sh hands over to it.
    let helper_args = [
        os(&["--root"]),
        vec![empty_root.clone().into()],
        os(&["--config-root"]),
        vec![runtime.scratch("config").into()],
        os(&["--state-root"]),
        vec![runtime.scratch("state").into()],
        os(&["--home"]),
        vec![runtime.home.clone().into()],
        os(&["--yes"]),
    ]
    .concat();
    let outcome = same(
        "the split uninstall helper without a layout",
        runtime.script("execution_uninstall.py", &refs(&helper_args)),
        runtime.binary(stage, "uninstall", &refs(&helper_args)),
    );
    assert_eq!(outcome.code, Some(1), "{outcome:?}");
    assert!(
        outcome
            .stderr
            .starts_with("Cannot uninstall the separate gateway/execution layout: "),
        "{outcome:?}"
    );

    // uninstall.sh keeps the original script's options, output and exit codes.
    for (what, args, code) in [
        ("uninstall.sh --help", os(&["--help"]), Some(0)),
        (
            "uninstall.sh with an unknown option",
            os(&["--bogus"]),
            Some(2),
        ),
    ] {
        let args = refs(&args);
        let mut wrapper = command("bash", &runtime.home);
        wrapper.arg(stage.join("uninstall.sh")).args(&args);
        let outcome = same(what, wrapper, runtime.binary(stage, "uninstall", &args));
        assert_eq!(outcome.code, code, "{what}: {outcome:?}");
        let mut original = command("bash", &runtime.home);
        original.arg(originals.file("uninstall.sh")).args(&args);
        assert_eq!(
            Outcome::of(&mut original),
            outcome,
            "{what}: the wrapper answers as the original script"
        );
    }

    // install.sh's compile check over every staged module, and its import
    // check plus the names other Python code imports from these modules:
    // importing must not start any binary.
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

    // A runtime that lost its binary fails closed, with one line, status 1.
    fs::remove_file(stage.join("execution-manage")).unwrap();
    let missing = Outcome::of(&mut runtime.script("execution_manage.py", &[OsStr::new("--help")]));
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(
        missing
            .stderr
            .starts_with("execution_manage.py: cannot run "),
        "{missing:?}"
    );
    assert_eq!(missing.stderr.lines().count(), 1, "{missing:?}");
    assert_eq!(missing.stdout, "");
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
    // SAFETY: only async-signal-safe signal(2) calls run between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                if libc::signal(signal, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
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

#[test]
fn the_update_runner_launcher_passes_the_liveness_check_and_keeps_ignored_signals() {
    let originals = agents_tests::require_originals!();
    let runtime = Runtime::new(&originals);
    let update_id = "5f1d2c3b4a5968778695a4b3c2d1e0f1";
    let state = TempDir::new("migration-kit-state");
    let admin = state.path().join("admin");
    fs::create_dir(&admin).unwrap();
    fs::set_permissions(&admin, fs::Permissions::from_mode(0o700)).unwrap();
    let args = [
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
    .concat();
    let args = refs(&args);

    // The server's launch: <venv python> <rt>/update_runner.py ..., with the
    // status row locked and output blocked, so the runner stays alive.
    let lock = hold_status_lock(&admin);
    let pipe = FullPipe::new(true);
    let mut launcher = runtime.script("update_runner.py", &args);
    pipe.attach(&mut launcher);
    let mut child = spawn_masked(launcher);
    let pid = child.id();
    let binary = fs::canonicalize(runtime.stage.join("update-runner")).unwrap();
    poll_until(
        Duration::from_secs(10),
        "the launcher to exec update-runner",
        || {
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (exe == binary).then_some(())
        },
    );
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = raw
        .split(|byte| *byte == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
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
    // The same starting state for the direct run: only the lock file.
    for entry in fs::read_dir(&admin).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name() != Some(OsStr::new(".server-update.json.lock")) {
            fs::remove_file(&path).unwrap();
        }
    }

    let pipe = FullPipe::new(false);
    let mut direct = runtime.binary(&runtime.stage, "update-runner", &args);
    pipe.attach(&mut direct);
    let mut child = spawn_masked(direct);
    let output = pipe.drain();
    let direct_status = child.wait().unwrap();
    assert_eq!(launched.code(), direct_status.code());
    assert_eq!(launched_output, output.join().unwrap());
}

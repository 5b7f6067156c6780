//! The comparison with upstream's real install.sh (`scripts/installsh-compare.sh`):
//! the unmodified installer runs in the systemd sandbox twice per scenario, on
//! identical fresh homes at the same paths, once on the release as published
//! (the Python originals, [`Side::Original`]) and once on the same release after the
//! migration kit (the binaries, [`Side::Port`]).
//!
//! The release tree comes from a scratch folder outside the project
//! ([`SCRATCH_ENV`]); `scripts/installsh_release.py` copies it and stands in the
//! server the same way for both sides. Without the folder every comparison says
//! so and does nothing (they are all `#[ignore]`d).

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agents_common::WORKER_UNIT;

use crate::binaries::{profile_dir, test_worker_path};
use crate::poll::try_poll_until;
use crate::sandbox::Sandbox;
use crate::server_control::seal_worker;
use crate::tempdir::TempDir;
use crate::upstream::{Side, SystemctlTrace, REPORT_PREFIX};
use crate::upstream_activation::hyphenated;

/// The variable naming the scratch folder that holds the upstream release tree.
pub const SCRATCH_ENV: &str = "AGENTS_INSTALLSH_DIR";

/// A release the scenarios install: its folder name beside the sandbox home,
/// its `VERSION`, and a failing health status for a candidate that must roll
/// back.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// Folder name under the sandbox base.
    pub folder: &'static str,
    /// `VERSION` (a release version the preparation receipt accepts).
    pub version: &'static str,
    /// `/api/health` answered with this status instead of 200.
    pub health_status: Option<u16>,
}

/// The release as published (1.0.7-beta.5).
pub const RELEASE_A: Release = Release {
    folder: "release-a",
    version: "1.0.7-beta.5",
    health_status: None,
};

/// A second release: the same tree with a new `VERSION`.
pub const RELEASE_B: Release = Release {
    folder: "release-b",
    version: "1.0.7-beta.6",
    health_status: None,
};

/// A release whose server never answers its health check.
pub const RELEASE_UNHEALTHY: Release = Release {
    folder: "release-unhealthy",
    version: "1.0.7-beta.7",
    health_status: Some(503),
};

/// The scratch folder and what the comparisons share between runs (the
/// dependency lock, uv's cache).
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    work: TempDir,
}

impl Scratch {
    /// The folder named by [`SCRATCH_ENV`]; `None` (after saying so) when unset.
    pub fn locate(test: &str) -> Option<Scratch> {
        let dir = match std::env::var_os(SCRATCH_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                eprintln!(
                    "{REPORT_PREFIX} {test}: not run: {SCRATCH_ENV} is not set \
                     (scripts/installsh-compare.sh sets it)"
                );
                return None;
            }
        };
        let dir = dir
            .canonicalize()
            .unwrap_or_else(|err| panic!("{SCRATCH_ENV}={}: {err}", dir.display()));
        assert!(
            dir.join("install.sh").is_file(),
            "{SCRATCH_ENV}={} holds no install.sh (docs/design/upstream-comparison.md, install.sh comparison)",
            dir.display()
        );
        Some(Scratch {
            dir,
            work: TempDir::new("installsh-work"),
        })
    }

    /// Builds `release` for `side` at `<base>/<folder>`: the upstream tree with
    /// the server stood in, and for the binaries the migration kit applied.
    pub fn release(&self, side: Side, base: &Path, release: Release) -> PathBuf {
        let output = base.join(release.folder);
        let mut command = Command::new("python3");
        command
            .arg("-B")
            .arg(crate::workspace_root().join("scripts/installsh_release.py"))
            .arg(&self.dir)
            .arg(&output)
            .arg("--test-worker")
            .arg(test_worker_path())
            .args(["--version", release.version])
            .arg("--lock-dir")
            .arg(self.work.path().join("lock"))
            .env("PATH", tool_path());
        if let Some(status) = release.health_status {
            command.args(["--health-status", &status.to_string()]);
        }
        succeed(&mut command, "scripts/installsh_release.py");
        if side == Side::Port {
            migrate(&output);
        }
        output
    }

    /// uv's cache, shared by every run so a dependency is fetched once.
    pub fn uv_cache(&self) -> PathBuf {
        self.work.path().join("uv-cache")
    }
}

/// Puts the binaries into an unpacked release: the one call of the migration
/// kit (`scripts/migration-kit.sh --dist`), with this build's binaries as the
/// only platform (`<dist>/<target>/<helper>`, beside the release).
pub fn migrate(release: &Path) {
    let dist = release.with_extension("dist");
    let folder = dist.join(host_target());
    fs::create_dir_all(&folder).unwrap();
    for binary in crate::HELPERS {
        let staged = folder.join(binary);
        if !staged.exists() {
            link_or_copy(&profile_dir().join(binary), &staged);
        }
    }
    crate::release_dist::record_build(&dist);
    let mut command = Command::new("bash");
    command
        .arg(crate::workspace_root().join("scripts/migration-kit.sh"))
        .arg("--dist")
        .arg(&dist)
        .arg(release)
        .stdout(Stdio::null());
    succeed(&mut command, "scripts/migration-kit.sh");
}

/// `to` as a hard link to `from` (the kit copies it anyway), or a copy
/// where the two are on different filesystems.
pub fn link_or_copy(from: &Path, to: &Path) {
    if fs::hard_link(from, to).is_err() {
        fs::copy(from, to).unwrap_or_else(|err| panic!("copy {}: {err}", from.display()));
    }
}

/// The Rust target these tests' binaries were built for (Linux only).
pub fn host_target() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-gnu",
        _ => "x86_64-unknown-linux-gnu",
    }
}

/// The kit's name tag of [`host_target`]'s binaries (`<helper>-<tag>`).
pub fn host_tag() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "linux-aarch64",
        _ => "linux-x86_64",
    }
}

fn succeed(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The directory holding the `uv` executable (installed from PyPI by
/// `scripts/setup.sh`; its Python package names it).
pub fn uv_dir() -> PathBuf {
    try_uv_dir()
        .unwrap_or_else(|err| panic!("uv is not installed (scripts/setup.sh installs it): {err}"))
}

/// [`uv_dir`], or where it would be when uv is not installed (a recorded
/// installation replayed without uv names it in its units' `PATH`).
pub fn uv_literal() -> PathBuf {
    try_uv_dir().unwrap_or_else(|_| PathBuf::from("/nonexistent/uv/bin"))
}

/// [`uv_dir`], or why there is none.
pub fn try_uv_dir() -> Result<PathBuf, String> {
    let output = Command::new("python3")
        .args(["-c", "import uv; print(uv.find_uv_bin())"])
        .output()
        .expect("python3 runs");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    Ok(path
        .parent()
        .expect("uv lives in a directory")
        .to_path_buf())
}

/// The PATH the harness's own tools run with: uv's directory and the system's.
fn tool_path() -> OsString {
    let mut paths = vec![uv_literal()];
    paths.extend(
        [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ]
        .iter()
        .map(PathBuf::from),
    );
    std::env::join_paths(paths).expect("a PATH")
}

/// `systemctl` as install.sh's supported systems answer it: systemd 252
/// (Debian 12) prints nothing for `is-enabled` of a unit that does not exist
/// and exits 1, later systemd prints `not-found` and exits 4, which install.sh
/// requires before a fresh install. Everything else goes to `next` unchanged.
/// First, the first call with exactly the arguments in `@LOG@/anchor-at`
/// arms the log's stall (see [`Host::stall_after`]).
const SYSTEMCTL_SHIM: &str = "#!/bin/sh\n\
log=@LOG@\n\
if [ -f \"$log/anchor-at\" ] && [ \"$*\" = \"$(cat \"$log/anchor-at\")\" ]; then\n\
  rm -f \"$log/anchor-at\" \"$log/stall-seen\"\n\
  mv \"$log/anchor-occurrence\" \"$log/stall-occurrence\"\n\
  mv \"$log/anchor-stall\" \"$log/stall-at\"\n\
fi\n\
if [ \"$1\" = \"--user\" ] && [ \"$2\" = \"is-enabled\" ] && [ $# -eq 3 ]; then\n\
  out=$(@NEXT@ \"$@\" 2>/dev/null); status=$?\n\
  if [ -z \"$out\" ] && [ \"$(@NEXT@ --user show \"$3\" --property=LoadState --value)\" = not-found ]; then\n\
    echo not-found; exit 4\n\
  fi\n\
  [ -z \"$out\" ] || printf '%s\\n' \"$out\"\n\
  exit $status\n\
fi\n\
exec @NEXT@ \"$@\"\n";

/// One side's run of a scenario: the sandbox, the installation's roots under
/// its base, the `systemctl` log and the environment install.sh runs with.
#[derive(Debug)]
pub struct Host<'a> {
    /// The sandbox whose manager the services run under.
    pub sandbox: &'a Sandbox,
    /// The public port the installation uses.
    pub port: u16,
    /// Every `systemctl` call, stallable (see [`SystemctlTrace`]).
    pub trace: SystemctlTrace,
    exec_times: bool,
}

impl<'a> Host<'a> {
    /// Prepares `sandbox` (fresh) for install.sh: the `systemctl` shim and
    /// log, uv's configuration (the machine's trust store, the shared cache).
    /// `uv_cache`: where uv keeps what it fetched (`None`: no uv is run).
    pub fn new(uv_cache: Option<&Path>, sandbox: &'a Sandbox, port: u16) -> Host<'a> {
        let base = sandbox.base();
        let trace = SystemctlTrace::install(&base.join("systemctl-log"));
        let bin = base.join("bin");
        fs::create_dir_all(&bin).unwrap();
        let next = base.join("systemctl-log/bin/systemctl");
        let shim = SYSTEMCTL_SHIM
            .replace("@NEXT@", &format!("'{}'", next.display()))
            .replace(
                "@LOG@",
                &format!("'{}'", base.join("systemctl-log").display()),
            );
        fs::write(bin.join("systemctl"), shim).unwrap();
        fs::set_permissions(bin.join("systemctl"), fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(cache) = uv_cache {
            let uv_config = sandbox.home().join(".config/uv");
            fs::create_dir_all(&uv_config).unwrap();
            fs::write(
                uv_config.join("uv.toml"),
                format!("system-certs = true\ncache-dir = \"{}\"\n", cache.display()),
            )
            .unwrap();
        }
        Host {
            sandbox,
            port,
            trace,
            exec_times: false,
        }
    }

    /// The same host, its exec log timed: each line starts with the
    /// seconds since the epoch (`strace -ttt`), and strace stops the traced
    /// processes only at the calls it logs (`--seccomp-bpf`), so timing
    /// what runs costs little. The comparisons' facets read untimed logs.
    pub fn timed(mut self) -> Host<'a> {
        self.exec_times = true;
        self
    }

    /// `<base>/install`, `<base>/config`, `<base>/state`.
    pub fn roots(&self) -> [PathBuf; 3] {
        let base = self.sandbox.base();
        [
            base.join("install"),
            base.join("config"),
            base.join("state"),
        ]
    }

    /// The PATH install.sh runs with (see [`tool_path`]), the shim first.
    pub fn path(&self) -> OsString {
        let mut paths = vec![self.sandbox.base().join("bin")];
        paths.extend(std::env::split_paths(&tool_path()));
        std::env::join_paths(paths).expect("a PATH")
    }

    /// `bash <script> <arguments>` under `strace` (every exec and exit, for
    /// the helper calls), in the sandbox's environment with the roots set,
    /// from the sandbox base, stdin `/dev/null`, in its own process group.
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, script: &Path, arguments: &[S]) -> Command {
        let [install, config, state] = self.roots();
        let mut command = self.traced("bash");
        command
            .arg(script)
            .args(arguments)
            .env("AGENTS_SERVER_INSTALL_DIR", install)
            .env("AGENTS_SERVER_CONFIG_DIR", config)
            .env("AGENTSDOCK_STATE_DIR", state)
            // A candidate that never turns healthy is given up after 10 s, not 45.
            .env("AGENTS_SERVER_HEALTH_CHECK_ATTEMPTS", HEALTH_CHECK_ATTEMPTS);
        command
    }

    /// `sh -c <line>` under `strace` as [`Host::command`] runs install.sh, but
    /// without the roots in its environment: a command printed for support
    /// staff, who have only their own (the sandbox's) environment.
    pub fn shell_line(&self, line: &str) -> Command {
        let mut command = self.traced("sh");
        command.args(["-c", line]);
        command
    }

    /// `program` under `strace` writing [`Host::exec_log`], with the shim's
    /// PATH, from the sandbox base, piped, in its own process group.
    fn traced(&self, program: &str) -> Command {
        let mut command = self.sandbox.command("strace");
        if self.exec_times {
            command.args(["-ttt", "--seccomp-bpf"]);
        }
        command
            .args([
                "-f",
                "-q",
                "-e",
                "trace=execve",
                "-e",
                "signal=none",
                "-s",
                "65535",
                "-o",
            ])
            .arg(self.exec_log())
            .arg(program)
            .env("PATH", self.path())
            .env("LANG", "C.UTF-8")
            .current_dir(self.sandbox.base())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }

    /// Stalls the `occurrence`th call with exactly the arguments `call`
    /// counted from the first call with exactly the arguments `anchor` (a
    /// point after a call whose count is timing's, such as a health poll).
    pub fn stall_after(&self, anchor: &str, call: &str, occurrence: u32) {
        let log = self.sandbox.base().join("systemctl-log");
        for stale in ["stall-at", "stall-seen", "stalled"] {
            let _ = fs::remove_file(log.join(stale));
        }
        fs::write(log.join("anchor-occurrence"), occurrence.to_string()).unwrap();
        fs::write(log.join("anchor-stall"), call).unwrap();
        fs::write(log.join("anchor-at"), anchor).unwrap();
    }

    /// Stops stalling, anchored or not.
    pub fn clear_stall(&self) {
        self.trace.clear();
        let log = self.sandbox.base().join("systemctl-log");
        for armed in ["anchor-at", "anchor-occurrence", "anchor-stall"] {
            let _ = fs::remove_file(log.join(armed));
        }
    }

    /// Where `strace` writes the exec log of the current run.
    pub fn exec_log(&self) -> PathBuf {
        self.sandbox.base().join("exec.log")
    }

    /// Waits until the activation recovery job install.sh armed has retired
    /// (its unit removed by itself), so both sides are observed settled.
    pub fn settle(&self) {
        let units = self.sandbox.unit_dir();
        let pending = || {
            fs::read_dir(&units)
                .map(|entries| {
                    entries.filter_map(Result::ok).any(|entry| {
                        entry
                            .file_name()
                            .to_string_lossy()
                            .starts_with("agents-server-recovery-")
                    })
                })
                .unwrap_or(false)
        };
        // The job removes its unit file, then releases the install lock.
        let lock = self.roots()[0].join(".install-lock");
        let _ = try_poll_until(
            Duration::from_secs(60),
            "the recovery job to retire",
            || (!pending() && !lock.exists()).then_some(()),
        );
        // What systemd still does after the job ended (a restart of a
        // unit it started) settles within a moment.
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Waits up to four minutes for `child` (install.sh under strace) and returns
/// its output; kills its process group if it does not end.
pub fn finish(child: Child) -> Output {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(Duration::from_secs(240)) {
        Ok(output) => output.expect("wait for install.sh"),
        Err(_) => {
            crate::upstream::kill_group(pid);
            panic!("install.sh {pid} did not finish within 240 s")
        }
    }
}

/// How many one-second health checks install.sh makes before it gives up.
pub const HEALTH_CHECK_ATTEMPTS: &str = "10";

/// The update the scenarios' managed installs belong to (32 hex digits).
pub const UPDATE_ID: &str = "5e7e00000000400080000000000000a1";

/// The API contract of the stand-in server (`scripts/installsh_release.py`),
/// which a prepared or recovered activation is pinned to.
pub const API_CONTRACT: &str = "1";

/// The preparation the scenarios' `--prepare-only` belongs to (its receipt is
/// `<install>/.prepared-receipts/<id>.json`, as update_preparation.py names it).
pub const PREPARATION_ID: &str = "5e7e00000000400080000000000000b2";

/// The signed archive digest a preparation and its activation are pinned to.
/// No archive exists here (the release is unpacked already): install.sh and
/// the preparation receipt only compare the two pins.
pub const ARCHIVE_SHA256: &str = "5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e5e7e";

/// The server identity the stand-in server reports
/// (`scripts/installsh_release.py`).
pub const SERVER_IDENTITY: &str = "5e7e5e7e5e7e5e7e5e7e5e7e";

/// install.sh's arguments that resume only the pending split activation
/// `transaction` of `version`, as upstream's recovery launchers pass them
/// (update_recovery.py's and the armed recovery job's): the pins its
/// `--recover-only` gate checks against the journal (release version, API
/// contract, transaction id), the identity its recovery owner requires of an
/// existing installation, then the listener (which install.sh otherwise reads
/// from the configuration). The comparison's recover-only steps run these,
/// and upstream's install.sh resumes the journal with them (exit 75 after a
/// rollback, recorded in `installsh-update-killed-after-journal-begins-then-recover-only`).
pub fn recover_only_arguments(
    version: &str,
    api_contract: &str,
    transaction: &str,
    identity: &str,
    port: u16,
) -> Vec<String> {
    [
        "--recover-only",
        "--non-interactive",
        "--release-version",
        version,
        "--expected-api-contract",
        api_contract,
        "--expected-activation-id",
        transaction,
        "--expected-server-identity",
        identity,
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ]
    .map(str::to_string)
    .to_vec()
}

impl Host<'_> {
    /// The server's part of a managed update, before it runs install.sh:
    /// seal the running worker's admission over its private control channel
    /// and write the handoff file install.sh proves its stop with. Returns the
    /// handoff file.
    pub fn seal_handoff(&self) -> PathBuf {
        self.try_seal_handoff()
            .unwrap_or_else(|err| panic!("seal the worker for the update: {err}"))
    }

    /// [`Host::seal_handoff`], or why the running worker cannot be sealed.
    pub fn try_seal_handoff(&self) -> Result<PathBuf, String> {
        let root = self.roots()[0].clone();
        // The runtime directory as the installed layout file names it.
        let manifest: serde_json::Value = fs::read(root.join("execution-layout.json"))
            .map_err(|err| format!("execution-layout.json: {err}"))
            .and_then(|data| serde_json::from_slice(&data).map_err(|err| err.to_string()))?;
        let runtime_dir = PathBuf::from(
            manifest["runtime_dir"]
                .as_str()
                .ok_or("execution-layout.json has no runtime_dir")?,
        );
        let operation = hyphenated(UPDATE_ID);
        let worker_pid = self.sandbox.unit_state(WORKER_UNIT).main_pid;
        let hold = seal_worker(&runtime_dir, &operation, worker_pid)?;
        let path = self.handoff_path();
        let directory = path.parent().expect("a directory").to_path_buf();
        fs::create_dir_all(&directory).unwrap();
        for dir in [root.join(".update-preparations"), directory] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        }
        crate::write_file(
            &path,
            &hold.handoff_bytes(&operation, SERVER_IDENTITY),
            0o600,
        );
        Ok(path)
    }

    /// Where [`Host::seal_handoff`] writes the handoff file:
    /// `<install>/.update-preparations/<UPDATE_ID>/handoff-<UPDATE_ID>.json`.
    pub fn handoff_path(&self) -> PathBuf {
        self.roots()[0]
            .join(".update-preparations")
            .join(UPDATE_ID)
            .join(format!("handoff-{UPDATE_ID}.json"))
    }
}

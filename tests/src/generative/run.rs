//! One side of one scenario: the state built at the campaign's fixed path,
//! the damages applied, each command run under a deadline in the systemd
//! sandbox, and what the side left behind observed.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::invocation::Invocation;
use super::scenario::{Program, Scenario};
use super::state;
use crate::files::make_dirs;
use crate::release_support::{Reply, TestServer};
use crate::sandbox::Sandbox;
use crate::upstream::{kill_group, Normalizer, Observed, Side, SystemctlTrace, Upstream};

/// Set in a debug build's environment, `python_compat` names every
/// `FileNotFoundError` `OSError`: the fault the campaign must report.
pub use python_compat::INJECTED_WRONG_CLASS_ENV as WRONG_CLASS_ENV;

/// The commands' working directory, under the scenario's base.
const WORKING_DIRECTORY: &str = "cwd";

/// How long one command may take before it counts as waiting for ever
/// (the original blocks on a FIFO where a file belongs).
const DEADLINE: Duration = Duration::from_secs(5);

/// Which implementation runs a side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideRun {
    /// The Python original on the upstream modules.
    Original,
    /// The binary.
    Port,
    /// The binary of a debug build told to name one error class wrongly
    /// ([`WRONG_CLASS_ENV`]).
    Injected,
}

/// What a difference is judged against when it is shrunk: the original,
/// or (without the upstream modules) the binary without the injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// The original.
    Original,
    /// The clean binary.
    Port,
}

impl Reference {
    /// The side that stands for the reference.
    pub fn side(self) -> SideRun {
        match self {
            Reference::Original => SideRun::Original,
            Reference::Port => SideRun::Port,
        }
    }
}

/// The sandbox, the originals' runtime folder and the fixed base every
/// scenario is built at, one after the other.
pub struct Bench {
    releases: TestServer,
    sandbox: Sandbox,
    upstream: Upstream,
    runtime: PathBuf,
    base: PathBuf,
    output: PathBuf,
    systemctl: SystemctlTrace,
}

impl Bench {
    /// A bench in `sandbox` for `upstream` (the originals' runtime is
    /// compiled once, so each call imports cached modules).
    pub fn new(sandbox: Sandbox, upstream: Upstream) -> Bench {
        let work = sandbox.base().join("campaign");
        let runtime = work.join("runtime");
        upstream.install_runtime(&runtime);
        if runtime.join("execution_install.py").is_file() {
            let compiled = Command::new("python3")
                .args(["-m", "compileall", "-q"])
                .arg(&runtime)
                .status()
                .expect("python3 runs");
            assert!(compiled.success(), "compile the originals' runtime");
        }
        let output = work.join("output");
        fs::create_dir_all(&output).expect("the output folder");
        let systemctl = SystemctlTrace::install(&work.join("systemctl"));
        let base = scenario_base();
        Bench {
            releases: release_host(base.join(state::SERVED)),
            base,
            sandbox,
            upstream,
            runtime,
            output,
            systemctl,
        }
    }

    /// Whether the originals are here (else only the binaries run).
    pub fn has_originals(&self) -> bool {
        self.runtime.join("execution_install.py").is_file()
    }

    /// Runs `scenario` as `side` runs it and returns what it observed.
    pub fn run(&self, scenario: &Scenario, side: SideRun) -> Observed {
        remove_tree(&self.base);
        let status = state::build(
            &self.base,
            scenario.program,
            scenario.start,
            &self.release_base(),
        );
        // Relative paths (an empty `--root`) land in the scenario's tree.
        make_dirs(&self.base.join(WORKING_DIRECTORY), 0o755);
        for damage in &scenario.damages {
            damage.apply(&self.base);
        }
        self.systemctl.reset();
        let mut normalizer = Normalizer::new(&[
            (self.base.to_string_lossy().into_owned(), "base"),
            (
                self.sandbox.base().to_string_lossy().into_owned(),
                "sandbox",
            ),
            (self.releases.url(""), "release-host"),
            (self.releases.port.to_string(), "host-port"),
            (std::process::id().to_string(), "test-pid"),
        ]);
        let mut observed = Observed::default();
        for (at, invocation) in scenario.invocations.iter().enumerate() {
            let stdin = invocation.feeds_status().then(|| status.clone());
            let name = format!("step {}", at + 1);
            match self.step(scenario.program, invocation, side, stdin) {
                Some(output) => observed.run(&name, &output, &mut normalizer),
                None => observed.record(&format!("{name} exit"), "waited past the deadline"),
            }
        }
        observed.record("systemctl", normalizer.text(&self.systemctl.changes()));
        // What the release host serves is input, and its signature covers
        // the host's port, which differs from run to run.
        observed.tree("files", &self.base, &[state::SERVED], &mut normalizer);
        without_temporary_names(&observed)
    }

    fn step(
        &self,
        program: Program,
        invocation: &Invocation,
        side: SideRun,
        stdin: Option<Vec<u8>>,
    ) -> Option<Output> {
        let mut command = self.command(program, side);
        let port = self.releases.port.to_string();
        command.args(expand(&invocation.words(), &self.base, &port));
        let (stdout, stderr) = (self.output.join("stdout"), self.output.join("stderr"));
        command
            .stdout(fs::File::create(&stdout).expect("stdout file"))
            .stderr(fs::File::create(&stderr).expect("stderr file"))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = command.spawn().expect("the helper starts");
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            use std::io::Write as _;
            let _ = pipe.write_all(&data);
        }
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the helper") {
                break Some(status);
            }
            if started.elapsed() > DEADLINE {
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        kill_group(child.id());
        let _ = child.wait();
        Some(Output {
            status: status?,
            stdout: fs::read(&stdout).unwrap_or_default(),
            stderr: fs::read(&stderr).unwrap_or_default(),
        })
    }

    /// Where the release host publishes (`AGENTS_SERVER_RELEASE_BASE`).
    fn release_base(&self) -> String {
        self.releases.url("/releases")
    }

    fn command(&self, program: Program, side: SideRun) -> Command {
        let upstream_side = match side {
            SideRun::Original => Side::Original,
            SideRun::Port | SideRun::Injected => Side::Port,
        };
        let mut command = if program == Program::Runner && side == SideRun::Original {
            let mut command = self.sandbox.command("python3");
            command
                .args(["-B", "-c", RUNNER_DRIVER])
                .env("ORIGINAL_RUNTIME", &self.runtime)
                .process_group(0);
            command
        } else {
            self.upstream.command(
                upstream_side,
                program.helper(),
                &self.runtime,
                &self.sandbox,
            )
        };
        self.systemctl.wrap(&mut command, &self.sandbox);
        command.current_dir(self.base.join(WORKING_DIRECTORY));
        let install = self.base.join("install");
        match program {
            Program::Uninstall => {
                command
                    .env("HOME", self.base.join("home"))
                    .env("AGENTS_SERVER_INSTALL_DIR", &install)
                    .env("AGENTS_SERVER_CONFIG_DIR", self.base.join("config"))
                    .env("AGENTSDOCK_STATE_DIR", self.base.join("state"));
            }
            Program::Runner => {
                // Releases come from the campaign's host, never a proxy.
                command
                    .env("AGENTS_SERVER_INSTALL_DIR", &install)
                    .env("AGENTS_SERVER_RELEASE_BASE", self.release_base())
                    .env(
                        "AGENTS_SERVER_RELEASES_API_URL",
                        self.releases.url(RELEASES_API),
                    );
                for name in ["https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"] {
                    command.env_remove(name);
                }
            }
            _ => {}
        }
        if upstream_side == Side::Port && program != Program::Handoff {
            // As a migrated release's launcher runs it: argv[0] stays the
            // original's path, which names the program in usage lines.
            command.arg0(self.runtime.join(program.helper().source()));
        }
        if side == SideRun::Injected {
            command.env(WRONG_CLASS_ENV, "1");
        }
        command
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(parent) = self.base.parent() {
            remove_tree(parent);
        }
    }
}

/// The releases API path the host answers 404 on: runs name their version.
const RELEASES_API: &str = "/api/releases?per_page=100";

/// `update_runner.py`'s `main()` with its release URLs pointed at the
/// campaign's host (the port reads them from the environment), argv[0] the
/// original's path.
const RUNNER_DRIVER: &str = r#"
import os, sys
runtime = os.environ["ORIGINAL_RUNTIME"]
sys.path.insert(0, runtime)
import update_runner
update_runner.RELEASE_BASE = os.environ["AGENTS_SERVER_RELEASE_BASE"]
update_runner.RELEASES_API_URL = os.environ["AGENTS_SERVER_RELEASES_API_URL"]
sys.argv = [os.path.join(runtime, "update_runner.py")] + sys.argv[1:]
raise SystemExit(update_runner.main())
"#;

/// Serves the release files of the scenario at hand from `served`
/// (`manifest.json`, `manifest.sig`, `archive.tar.gz`), and the running
/// server's health (`health.json`, the runner's `--port` is the host's):
/// 404 for what is not there, 500 for what is not a regular file.
fn release_host(served: PathBuf) -> TestServer {
    let download = format!("/releases/download/v{}/", state::TARGET_VERSION);
    TestServer::start(move |request| {
        let name = match request.path.strip_prefix(&download) {
            Some("agents-server-manifest.json") => "manifest.json",
            Some("agents-server-manifest.sig") => "manifest.sig",
            Some(name) if name.ends_with(".tar.gz") => "archive.tar.gz",
            _ if request.path == "/api/health" => "health.json",
            _ => return Reply::status(404, "Not Found"),
        };
        let path = served.join(name);
        match fs::symlink_metadata(&path) {
            Ok(info) if info.is_file() => Reply::ok(&fs::read(&path).unwrap_or_default()),
            Ok(_) => Reply::status(500, "Internal Server Error"),
            Err(_) => Reply::status(404, "Not Found"),
        }
    })
}

/// Where scenarios are built: the same path in every run (the first free
/// of `/tmp/agents-generative-00` to `-99`, taken by creating it), so a
/// damage that cuts a file holding the path at a fraction of its length
/// leaves the same bytes at recording and at replay; a random or PID-named
/// folder would leave a different partial name each time.
fn scenario_base() -> PathBuf {
    for slot in 0..100 {
        let base = PathBuf::from(format!("/tmp/agents-generative-{slot:02}"));
        if std::fs::create_dir(&base).is_ok() {
            return base.join("g");
        }
    }
    panic!("/tmp/agents-generative-00 to -99 are all taken: remove the stale ones");
}

/// The words with `{placeholders}` replaced by the paths under `base` (and
/// `{host-port}` by the release host's port).
fn expand(words: &[Vec<u8>], base: &Path, host_port: &str) -> Vec<OsString> {
    let mut placeholders = state::placeholders(base);
    placeholders.push(("{host-port}", PathBuf::from(host_port)));
    words
        .iter()
        .map(|word| {
            let mut word = word.clone();
            for (name, path) in &placeholders {
                word = replace(&word, name.as_bytes(), path.as_os_str().as_encoded_bytes());
            }
            OsString::from_vec(word)
        })
        .collect()
}

fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    while at < haystack.len() {
        if haystack[at..].starts_with(needle) {
            out.extend_from_slice(with);
            at += needle.len();
        } else {
            out.push(haystack[at]);
            at += 1;
        }
    }
    out
}

/// The runner's work folder (`tempfile.TemporaryDirectory(prefix=
/// "agents-server-update-")`) has eight random characters, named by where
/// it occurs: `<tmp>`.
fn without_temporary_names(observed: &Observed) -> Observed {
    const PREFIX: &str = "agents-server-update-";
    let mut cleaned = Observed::default();
    for (facet, value) in observed.facets() {
        let mut text = String::with_capacity(value.len());
        let mut rest = value.as_str();
        while let Some(at) = rest.find(PREFIX) {
            let (before, after) = rest.split_at(at + PREFIX.len());
            text.push_str(before);
            let random = after.chars().take(8).collect::<String>();
            if random.len() == 8
                && random
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                text.push_str("<tmp>");
                rest = &after[8..];
            } else {
                rest = after;
            }
        }
        text.push_str(rest);
        cleaned.record(facet, text);
    }
    cleaned
}

/// Removes `path` whatever a damage made of it.
fn remove_tree(path: &Path) {
    if fs::symlink_metadata(path).is_ok() {
        // Root (as the tests run) removes whatever the modes say.
        fs::remove_dir_all(path).unwrap_or_else(|err| panic!("remove {}: {err}", path.display()));
    }
}

//! `execution_legacy_runner.verify_legacy_runner`: the read-only proof that
//! an installer descends from an old macOS updater that never recorded its
//! `runner_pid`.
//!
//! Such a runner is a Python `update_runner.py` of the installed release,
//! started in a tmux session named after the update, and the installer must
//! be its descendant inside that pane. Everything the proof relies on is
//! pinned (directories, the `current` link, four installed files, the
//! interpreter and its framework companion, the authenticated health and
//! update bodies, the durable status, the kernel's view of every process and
//! the tmux pane) and then read again: any change refuses.
//!
//! The kernel and tmux are reached only through [`LegacyRunnerProbe`], so
//! the proof compiles and is tested on every platform with recorded
//! `proc_bsdinfo`, `KERN_PROCARGS2` and `list-panes` data; the production
//! probe reads them on macOS and reports any other host as not Darwin (the
//! original's `sys.platform` check), which refuses.
//!
//! Deviations (hostile input only, all refusing): `\d`/`str.isdigit` accept
//! ASCII digits only; installed files are opened with `O_NONBLOCK` (a FIFO is
//! refused instead of blocking); a health body whose `queued` or
//! `update_service_cgroup` is not an object refuses with the idle-health
//! message where Python raises `AttributeError`/`TypeError`; `HOME` must be
//! set for the tmux query.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agents_common::{CommandCapture, Error, Platform, Result, StatusPhase};
use python_compat::{
    decode_utf8, is_lower_hex,
    json::{Json, JsonObject},
    member_truthy,
    os::{is_type, lstat, read_link},
    path::{pure_path, resolve},
    strict_int, strip,
};

// Facts, each checked against the headers; Linux builds use only some.
#[allow(dead_code)]
mod darwin_abi;
mod kernel;
mod pins;
mod system;
mod tmux;

pub use darwin_abi::PROC_BSDINFO_SIZE;
pub use system::SystemLegacyProbe;
pub use tmux::PANE_FORMAT as TMUX_PANE_FORMAT;

use kernel::{chain, process, Process};
use pins::{directory_pin, python_proof, read_json, read_pinned, resolve_strict, StatPin};
use tmux::tmux;

/// What the legacy-runner proof reads from the kernel and from tmux.
///
/// Production uses [`SystemLegacyProbe`]; tests replay recorded kernel
/// buffers and tmux output.
pub trait LegacyRunnerProbe {
    /// `sys.platform == "darwin"`: the proof applies only on macOS.
    fn host_is_darwin(&self) -> bool;
    /// `proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, buffer, 136)`: the bytes the
    /// kernel filled (a complete native-endian `proc_bsdinfo` is
    /// [`PROC_BSDINFO_SIZE`] bytes; anything else is a failed call).
    fn bsd_info(&self, pid: i32) -> Vec<u8>;
    /// `proc_pidpath(pid, buffer, 4096)`: the executable path, `None` when
    /// the call returns 0 or less.
    fn executable_path(&self, pid: i32) -> Option<Vec<u8>>;
    /// The size `sysctl({CTL_KERN, KERN_PROCARGS2, pid})` reports for a
    /// null buffer, `None` when the call fails.
    fn arguments_size(&self, pid: i32) -> Option<usize>;
    /// The `KERN_PROCARGS2` buffer read with room for `capacity` bytes (the
    /// bytes the kernel wrote), `None` when the call fails.
    fn arguments(&self, pid: i32, capacity: usize) -> Option<Vec<u8>>;
    /// The default tmux socket: `realpath(/tmp)/tmux-<uid>/default`.
    fn tmux_socket(&self) -> Result<PathBuf>;
    /// `shutil.which("tmux")`.
    fn tmux_program(&self) -> Option<PathBuf>;
    /// Runs `argv` with exactly `environment`, standard input from
    /// `/dev/null`, standard error discarded, killed after `timeout`.
    fn run(
        &self,
        argv: &[String],
        environment: &[(&str, String)],
        timeout: Duration,
    ) -> Result<CommandCapture>;
}

/// The installer's command line as the proof reads it (the original's `args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LegacyRunnerClaim {
    /// `--platform` when it names a supported platform (`None` when not
    /// given or unsupported: the fallback applies to `Darwin` only).
    pub platform: Option<Platform>,
    /// `--managed-update-id` (must be empty for this fallback).
    pub managed_update_id: String,
    /// `--root`.
    pub root: PathBuf,
    /// `--state-root`.
    pub state_root: PathBuf,
    /// `--health-file`: the installer's authenticated idle health body.
    pub health_file: PathBuf,
    /// `--update-file`: the authenticated update status body.
    pub update_file: PathBuf,
    /// `--release-version`: the target of the admitted update.
    pub release_version: String,
    /// `--expected-server-identity`.
    pub expected_server_identity: String,
    /// `--expected-native-pid`: the running monolith's PID.
    pub expected_native_pid: i128,
    /// `--bind` (`None` when not given).
    pub bind: Option<String>,
    /// `--port` (`None` when not given).
    pub port: Option<i128>,
}

/// The installed files the proof pins, in the original's order.
const PINNED_FILES: [&str; 4] = [
    "VERSION",
    "update_runner.py",
    "agent_server.py",
    "release-public-key.pem",
];
/// Options a legacy runner may carry beyond the required ones.
const OPTIONAL_RUNNER_OPTIONS: [&str; 7] = [
    "--auth-token-file",
    "--expected-team-hub-id",
    "--expected-team-hub-transport",
    "--expected-team-hub-url",
    "--expected-team-hub-direct-ip-url",
    "--team-hub-snapshot",
    "--team-hub-data-dir",
];

/// `verify_legacy_runner(args, status)`: the admitted update id, once this
/// process is proven to descend, inside the update's tmux pane, from the
/// installed release's own `update_runner.py` for exactly that update, with
/// the native listener idle. Reads only; refuses (RuntimeError) on any gap.
pub fn verify_legacy_runner(
    claim: &LegacyRunnerClaim,
    status: &Json,
    probe: &dyn LegacyRunnerProbe,
) -> Result<String> {
    if !probe.host_is_darwin()
        || claim.platform != Some(Platform::Darwin)
        || !claim.managed_update_id.is_empty()
        || status.get("runner_pid").is_some()
    {
        return Err(Error::runtime("legacy ancestry fallback does not apply"));
    }
    let identifier = match status.get("update_id").and_then(Json::as_str) {
        Some(text) if is_lower_hex(text, 32) => text.to_string(),
        _ => return Err(Error::runtime("legacy update identity is invalid")),
    };
    Proof::gather(claim, &identifier, status, probe)?.verify_unchanged(claim, probe)?;
    Ok(identifier)
}

/// Every pin of one pass of the proof.
struct Proof {
    identifier: String,
    roots: Vec<(PathBuf, pins::DirectoryPin)>,
    current: PathBuf,
    link: StatPin,
    link_target: String,
    release: PathBuf,
    files: Vec<(&'static str, pins::FilePin)>,
    interpreter: PathBuf,
    python: pins::PythonProof,
    status_file: PathBuf,
    health_path: PathBuf,
    update_path: PathBuf,
    health: (Json, pins::FilePin),
    admitted: (Json, pins::FilePin),
    pins: StatusPins,
    native: Process,
    chain: Vec<Process>,
    pane: tmux::Pane,
}

/// `(update_id, target_version, track)` of a status row.
type StatusPins = (Json, Json, Json);

impl Proof {
    /// One pass of the proof, phase by phase in the original's order: the
    /// installed release, the authenticated update files, the native
    /// listener, then the runner and its tmux pane.
    fn gather(
        claim: &LegacyRunnerClaim,
        identifier: &str,
        status: &Json,
        probe: &dyn LegacyRunnerProbe,
    ) -> Result<Proof> {
        let installed = Installed::pin(claim)?;
        let state = pure_path(&claim.state_root);
        let authenticated = Authenticated::read(claim, &state, status, identifier)?;
        check_idle_health(
            &authenticated.health.0,
            &authenticated.admitted.0,
            claim,
            &installed.old_version,
        )?;
        let native = process(probe, claim.expected_native_pid)?;
        let ancestry = Ancestry {
            native_executable: resolve(&native.executable)?,
            python: &installed.python,
            release: &installed.release,
        };
        let port = check_native_listener(claim, &native, &ancestry)?;
        let text = |path: &Path| Some(path.to_string_lossy().into_owned());
        let expected = [
            ("--status-file", text(&authenticated.status_file)),
            (
                "--public-key",
                text(&installed.release.join("release-public-key.pem")),
            ),
            ("--port", Some(port)),
            ("--bind", claim.bind.clone()),
            ("--expected-version", Some(claim.release_version.clone())),
            ("--current-version", Some(installed.old_version.clone())),
            ("--track", authenticated.pins.2.as_str().map(str::to_string)),
            ("--update-id", Some(identifier.to_string())),
            (
                "--expected-server-identity",
                Some(claim.expected_server_identity.clone()),
            ),
        ];
        let (chain, pane) = find_runner(probe, &ancestry, &expected, &state, identifier)?;
        Ok(Proof {
            identifier: identifier.to_string(),
            roots: installed.roots,
            current: installed.current,
            link: installed.link,
            link_target: installed.link_target,
            release: installed.release,
            files: installed.files,
            interpreter: installed.interpreter,
            python: installed.python,
            status_file: authenticated.status_file,
            health_path: authenticated.health_path,
            update_path: authenticated.update_path,
            health: authenticated.health,
            admitted: authenticated.admitted,
            pins: authenticated.pins,
            native,
            chain,
            pane,
        })
    }

    /// Repeats every mutable authority binding: no cached proof authorizes
    /// the stop.
    fn verify_unchanged(
        &self,
        claim: &LegacyRunnerClaim,
        probe: &dyn LegacyRunnerProbe,
    ) -> Result<()> {
        let authority_changed = chain(probe, own_pid())? != self.chain
            || process(probe, claim.expected_native_pid)? != self.native
            || tmux(probe, &self.pane.session)? != self.pane
            || status_pins(&read_json(&self.status_file)?.0, &self.identifier, claim)? != self.pins
            || read_json(&self.health_path)? != self.health
            || read_json(&self.update_path)? != self.admitted;
        if authority_changed {
            return Err(Error::runtime(
                "legacy updater authority changed during verification",
            ));
        }
        for (path, pin) in &self.roots {
            if directory_pin(path, false)? != *pin {
                return Err(Error::runtime(
                    "legacy release directory changed during verification",
                ));
            }
        }
        let mut runtime_changed = StatPin::of(&lstat(&self.current)?) != self.link
            || read_link(&self.current)? != self.link_target
            || resolve(&self.current)? != self.release
            || python_proof(&self.interpreter)? != self.python;
        for (name, pin) in &self.files {
            runtime_changed =
                runtime_changed || read_pinned(&self.release.join(name), false)? != *pin;
        }
        if runtime_changed {
            return Err(Error::runtime(
                "legacy installed runtime changed during verification",
            ));
        }
        Ok(())
    }
}

/// Which processes run the pinned Python on a script of the release.
/// The retained installed release the legacy updater must belong to: the
/// pinned roots, the owned `current` link, the release it resolves to, its
/// pinned files and its interpreter.
struct Installed {
    roots: Vec<(PathBuf, pins::DirectoryPin)>,
    current: PathBuf,
    link: StatPin,
    link_target: String,
    release: PathBuf,
    files: Vec<(&'static str, pins::FilePin)>,
    /// The release's `VERSION`, stripped.
    old_version: String,
    interpreter: PathBuf,
    python: pins::PythonProof,
}

impl Installed {
    fn pin(claim: &LegacyRunnerClaim) -> Result<Installed> {
        let root = pure_path(&claim.root);
        let state = pure_path(&claim.state_root);
        let mut roots = Vec::new();
        for path in [
            root.clone(),
            root.join("releases"),
            state.clone(),
            state.join("admin"),
        ] {
            let pin = directory_pin(&path, false)?;
            roots.push((path, pin));
        }
        let current = root.join("current");
        let link_info = lstat(&current)?;
        if !is_type(&link_info, rustix::fs::FileType::Symlink)
            || link_info.st_uid != python_compat::os::current_uid()
        {
            return Err(Error::runtime(
                "legacy current release is not an owned link",
            ));
        }
        let link_target = read_link(&current)?;
        let release = resolve_strict(&current)?;
        let hidden = release
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with('.'));
        if python_compat::path::parent(&release) != root.join("releases") || hidden {
            return Err(Error::runtime(
                "legacy updater must belong to the retained installed release",
            ));
        }
        let release_pin = directory_pin(&release, false)?;
        roots.push((release.clone(), release_pin));
        let mut files = Vec::new();
        for name in PINNED_FILES {
            files.push((name, read_pinned(&release.join(name), false)?));
        }
        let old_version = strip(decode_utf8(&files[0].1.data)?).to_string();
        let interpreter = release.join(".venv/bin/python");
        let python = python_proof(&interpreter)?;
        Ok(Installed {
            roots,
            current,
            link: StatPin::of(&link_info),
            link_target,
            release,
            files,
            old_version,
            interpreter,
            python,
        })
    }
}

/// The authenticated update: the private health and admission files beside
/// the status row, all three naming the same update, version and track.
struct Authenticated {
    status_file: PathBuf,
    health_path: PathBuf,
    update_path: PathBuf,
    health: (Json, pins::FilePin),
    admitted: (Json, pins::FilePin),
    pins: StatusPins,
}

impl Authenticated {
    fn read(
        claim: &LegacyRunnerClaim,
        state: &Path,
        status: &Json,
        identifier: &str,
    ) -> Result<Authenticated> {
        let status_file = state.join("admin/server-update.json");
        let health_path = pure_path(&claim.health_file);
        let update_path = pure_path(&claim.update_file);
        for path in [&health_path, &update_path] {
            if python_compat::path::parent(path) != state.join("admin")
                || !pins::is_canonical(path)?
            {
                return Err(Error::runtime(
                    "legacy authenticated proof is outside private admin directory",
                ));
            }
        }
        let health = read_json(&health_path)?;
        let admitted = read_json(&update_path)?;
        let pins = status_pins(status, identifier, claim)?;
        if status_pins(&read_json(&status_file)?.0, identifier, claim)? != pins
            || status_pins(&admitted.0, identifier, claim)? != pins
        {
            return Err(Error::runtime(
                "legacy authenticated update does not match durable status",
            ));
        }
        Ok(Authenticated {
            status_file,
            health_path,
            update_path,
            health,
            admitted,
            pins,
        })
    }
}

/// The native listener runs the installed release's `agent_server.py serve`
/// with the claimed bind and port; returns the port as the runner was given
/// it.
fn check_native_listener(
    claim: &LegacyRunnerClaim,
    native: &Process,
    ancestry: &Ancestry<'_>,
) -> Result<String> {
    if !ancestry.runs(native, "agent_server.py")? {
        return Err(Error::runtime(
            "legacy native process belongs to another installed release",
        ));
    }
    let native_options = options(native.argv.get(3..).unwrap_or_default())?;
    let port = claim
        .port
        .map_or_else(|| "None".to_string(), |port| port.to_string());
    let listener = [
        ("--bind", claim.bind.clone()),
        ("--port", Some(port.clone())),
    ];
    if native.argv.get(2).map(String::as_str) != Some("serve")
        || !same_options(&native_options, &listener)
    {
        return Err(Error::runtime("legacy native listener arguments differ"));
    }
    Ok(port)
}

/// The one `update_runner.py` among this process's ancestors, with the
/// expected options, launched by its admitted tmux pane; returns the
/// ancestor chain and the pane.
fn find_runner(
    probe: &dyn LegacyRunnerProbe,
    ancestry: &Ancestry<'_>,
    expected: &[(&str, Option<String>)],
    state: &Path,
    identifier: &str,
) -> Result<(Vec<Process>, tmux::Pane)> {
    let chain = chain(probe, own_pid())?;
    let mut runners = Vec::new();
    for candidate in chain.iter().skip(1) {
        if ancestry.runs(candidate, "update_runner.py")? {
            runners.push(candidate);
        }
    }
    let [runner] = runners.as_slice() else {
        return Err(Error::runtime("legacy updater ancestor is not unique"));
    };
    check_runner_options(runner, expected, state, identifier)?;
    let pane = tmux(probe, &format!("agents_server_update_{identifier}"))?;
    let launched = match pane.launch.split_first() {
        Some((program, rest)) => {
            rest == runner.argv.get(1..).unwrap_or_default()
                && Path::new(program).is_absolute()
                && ancestry
                    .python
                    .executables
                    .contains(&resolve(Path::new(program))?)
        }
        None => false,
    };
    if !launched {
        return Err(Error::runtime(
            "legacy updater launch command does not match kernel arguments",
        ));
    }
    let position = |pid: i128| chain.iter().position(|item| item.pid == pid);
    let ordered = match (
        position(runner.pid),
        position(pane.pane_pid),
        position(pane.server.pid),
    ) {
        (Some(runner), Some(pane), Some(server)) => runner <= pane && pane < server,
        _ => false,
    };
    if !ordered {
        return Err(Error::runtime(
            "legacy updater is outside its admitted tmux pane",
        ));
    }
    Ok((chain, pane))
}

struct Ancestry<'a> {
    native_executable: PathBuf,
    python: &'a pins::PythonProof,
    release: &'a Path,
}

impl Ancestry<'_> {
    /// `python_process(process, script)`: absolute executable and first two
    /// arguments, the same pinned interpreter as the native listener, and
    /// `argv[1]` resolving to `release/script`.
    fn runs(&self, process: &Process, script: &str) -> Result<bool> {
        let [first, second, ..] = process.argv.as_slice() else {
            return Ok(false);
        };
        let absolute = process.executable.is_absolute()
            && Path::new(first).is_absolute()
            && Path::new(second).is_absolute();
        Ok(absolute
            && self.python.executables.contains(&self.native_executable)
            && resolve(&process.executable)? == self.native_executable
            && self
                .python
                .executables
                .contains(&resolve(Path::new(first))?)
            && resolve(Path::new(second))? == self.release.join(script))
    }
}

/// `status_pins(value)`: a runner-less row of the admitted update, active,
/// for the claimed target on a release track.
fn status_pins(value: &Json, identifier: &str, claim: &LegacyRunnerClaim) -> Result<StatusPins> {
    let field = |key: &str| value.get(key).cloned().unwrap_or(Json::Null);
    let active = StatusPhase::runner_owned_value(value.get("phase"));
    let tracked = value
        .get("track")
        .and_then(Json::as_str)
        .is_some_and(|track| ["stable", "beta"].contains(&track));
    if value.get("runner_pid").is_some()
        || field("update_id") != Json::from(identifier)
        || !active
        || field("target_version") != Json::from(claim.release_version.as_str())
        || !tracked
    {
        return Err(Error::runtime("legacy admitted update changed"));
    }
    Ok((field("update_id"), field("target_version"), field("track")))
}

/// The idle-health comparison of the original: the same server instance and
/// identity in both authenticated bodies, the installed version serving, and
/// nothing active, queued or of unknown cgroup ownership.
fn check_idle_health(
    health: &Json,
    admitted: &Json,
    claim: &LegacyRunnerClaim,
    old_version: &str,
) -> Result<()> {
    let identity = Json::from(claim.expected_server_identity.as_str());
    let zero = Json::from(0);
    let instance = health.get("server_instance_id");
    let cgroup = match health.get("update_service_cgroup") {
        None => Some(JsonObject::new()),
        Some(value) => value.as_object().cloned(),
    };
    let blocked = || -> Option<bool> {
        // The original's `get(key, default)` evaluates the queued sum eagerly.
        let total = queued_sum(health.get("queued"))?;
        let count = health
            .get("update_blocking_queued_count")
            .cloned()
            .unwrap_or(total);
        let cgroup = cgroup.as_ref()?;
        Some(
            count != zero
                || !matches!(cgroup.get("safe"), Some(Json::Bool(true)))
                || cgroup
                    .get("unknown_descendant_count")
                    .is_none_or(|count| *count != zero),
        )
    };
    let refused = health.get("server_identity") != Some(&identity)
        || admitted.get("server_identity") != Some(&identity)
        || !member_truthy(instance)
        || admitted.get("server_instance_id") != instance
        || health.get("server_version") != Some(&Json::from(old_version))
        || strict_int(health.get("active_count")) != Some(0)
        || blocked().unwrap_or(true);
    if refused {
        return Err(Error::runtime(
            "legacy authenticated idle health does not match",
        ));
    }
    Ok(())
}

/// `sum(health.get("queued", {}).values())`, or `None` where Python raises
/// (not an object, or a value that is not a number).
fn queued_sum(queued: Option<&Json>) -> Option<Json> {
    let queued = match queued {
        None => return Some(Json::from(0)),
        Some(value) => value.as_object()?,
    };
    let mut integer: i128 = 0;
    let mut float: Option<f64> = None;
    for value in queued.values() {
        match (value, float.as_mut()) {
            (Json::Int(number), None) => integer = integer.checked_add(*number)?,
            (Json::Bool(flag), None) => integer += i128::from(*flag),
            (Json::Float(number), None) => float = Some(integer as f64 + number),
            (Json::Int(number), Some(total)) => *total += *number as f64,
            (Json::Bool(flag), Some(total)) => *total += f64::from(u8::from(*flag)),
            (Json::Float(number), Some(total)) => *total += number,
            _ => return None,
        }
    }
    Some(float.map_or(Json::Int(integer), Json::Float))
}

/// `_options(argv)`: `--key value` pairs, no `=` in a key, no repeats.
fn options(argv: &[String]) -> Result<Vec<(String, String)>> {
    if argv.len() % 2 != 0 {
        return Err(Error::runtime("legacy runner options are malformed"));
    }
    let mut values: Vec<(String, String)> = Vec::new();
    for pair in argv.chunks(2) {
        let (key, value) = (&pair[0], &pair[1]);
        if !key.starts_with("--") || key.contains('=') || values.iter().any(|(k, _)| k == key) {
            return Err(Error::runtime("legacy runner options are ambiguous"));
        }
        values.push((key.clone(), value.clone()));
    }
    Ok(values)
}

/// Dict equality of parsed options with expected ones (`None` never equals
/// an option's text, as Python's `None != "..."`).
fn same_options(options: &[(String, String)], expected: &[(&str, Option<String>)]) -> bool {
    options.len() == expected.len()
        && expected.iter().all(|(key, value)| {
            options
                .iter()
                .any(|(k, v)| k == key && value.as_deref() == Some(v.as_str()))
        })
}

/// The runner's options: exactly the installed protocol, each matching the
/// admitted update (`--status-file` and `--public-key` after strict
/// resolution), and a credential file only at its fixed private path.
fn check_runner_options(
    runner: &Process,
    expected: &[(&str, Option<String>)],
    state: &Path,
    identifier: &str,
) -> Result<()> {
    let runner_options = options(runner.argv.get(2..).unwrap_or_default())?;
    let allowed = |key: &str| {
        expected.iter().any(|(k, _)| *k == key) || OPTIONAL_RUNNER_OPTIONS.contains(&key)
    };
    let get = |key: &str| {
        runner_options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    if runner_options.iter().any(|(key, _)| !allowed(key))
        || expected.iter().any(|(key, _)| get(key).is_none())
    {
        return Err(Error::runtime(
            "legacy updater options differ from the installed protocol",
        ));
    }
    for (key, value) in expected {
        let mut observed = get(key).unwrap_or_default().to_string();
        if ["--status-file", "--public-key"].contains(key) {
            observed = resolve_strict(Path::new(&observed))?
                .to_string_lossy()
                .into_owned();
        }
        if value.as_deref() != Some(observed.as_str()) {
            return Err(Error::runtime(
                "legacy updater arguments do not match admitted update",
            ));
        }
    }
    let credential = state
        .join("admin")
        .join(format!(".server-update-{identifier}.auth.json"));
    if get("--auth-token-file").is_some_and(|path| path != credential.to_string_lossy()) {
        return Err(Error::runtime(
            "legacy updater credential handoff path differs",
        ));
    }
    Ok(())
}

/// `os.getpid()`.
fn own_pid() -> i128 {
    i128::from(rustix::process::getpid().as_raw_nonzero().get())
}

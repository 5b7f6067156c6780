//! Shared support of the installer supervision tests: a release directory
//! with the stand-in `install.sh`, its recordings, the status row, and the
//! original's own functions run by python3 as the oracle.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agents_common::Result;
use agents_tests::{Originals, TempDir};
use python_compat::json::{encode_compact, encode_indented, parse_json, Json, JsonObject};
use update_runner::installer::{InstallerOutcome, InstallerRun};

const STAND_IN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/installer_support/stand_in_install.sh"
);
const ORACLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/installer_support/original_oracle.py"
);

/// An installation under a temporary root: `release dir/install.sh` (the
/// stand-in), `admin/server-update.json` and its log, and a folder where the
/// stand-in records how it was started.
pub(crate) struct Fixture {
    pub root: TempDir,
    pub release: PathBuf,
    pub program: PathBuf,
    pub record: PathBuf,
    pub status: PathBuf,
    pub log: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let root = TempDir::with_mode("installer", 0o755);
        // A space in the release path keeps quoting honest.
        let release = root.path().join("release 1.2.3");
        let record = root.path().join("record");
        let admin = root.path().join("admin");
        for directory in [&release, &record, &admin] {
            std::fs::create_dir(directory).unwrap();
        }
        let program = release.join("install.sh");
        std::fs::copy(STAND_IN, &program).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(release.join("VERSION"), "1.2.3\n").unwrap();
        Fixture {
            status: admin.join("server-update.json"),
            log: admin.join("server-update.log"),
            root,
            release,
            program,
            record,
        }
    }

    /// A run of the stand-in with `steps`, the original's defaults otherwise.
    pub(crate) fn run(&self, steps: &[&str]) -> InstallerRun {
        stand_in_run(self.root.path(), steps)
    }

    /// Write the status row (as the server would: sorted, indented).
    pub(crate) fn write_row(&self, row: &JsonObject) {
        std::fs::write(&self.status, encode_indented(&Json::Object(row.clone()))).unwrap();
    }

    pub(crate) fn row(&self) -> JsonObject {
        match parse_json(&std::fs::read(&self.status).unwrap()).unwrap() {
            Json::Object(row) => row,
            other => panic!("status row is not an object: {other:?}"),
        }
    }

    pub(crate) fn log_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.log).unwrap_or_default()
    }

    pub(crate) fn recorded(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.record.join(name))
            .ok()
            .map(|text| text.trim_end_matches('\n').to_string())
    }

    pub(crate) fn argv(&self) -> Vec<String> {
        let raw = self.recorded("argv").expect("the installer recorded argv");
        raw.split_terminator('\0').map(str::to_string).collect()
    }

    pub(crate) fn environ(&self) -> Vec<(String, String)> {
        let raw = std::fs::read(self.record.join("environ")).unwrap();
        let mut pairs: Vec<(String, String)> = raw
            .split(|byte| *byte == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let text = String::from_utf8(entry.to_vec()).unwrap();
                let (name, value) = text.split_once('=').unwrap();
                (name.to_string(), value.to_string())
            })
            .collect();
        pairs.sort();
        pairs
    }

    /// (pid, process group, session) of the installer from `/proc/pid/stat`.
    pub(crate) fn identity(&self) -> (i32, i32, i32) {
        stat_identity(&self.recorded("stat").unwrap())
    }

    pub(crate) fn marker(&self, name: &str) -> bool {
        self.record.join(name).exists()
    }
}

/// (pid, process group, session) from a `/proc/<pid>/stat` line. A session
/// whose leader lives outside our PID namespace reads as 0 (as on CI runners),
/// which `getsid(2)` wrappers that insist on a positive PID cannot represent.
pub(crate) fn stat_identity(stat: &str) -> (i32, i32, i32) {
    let pid = stat.split(' ').next().unwrap().parse().unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // state ppid pgrp session ...
    (pid, fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

/// The run of [`Fixture::run`] for the fixture rooted at `root`, for a
/// process that did not create the fixture.
pub(crate) fn stand_in_run(root: &Path, steps: &[&str]) -> InstallerRun {
    let release = root.join("release 1.2.3");
    let mut arguments = vec![OsString::from(root.join("record"))];
    arguments.extend(steps.iter().map(OsString::from));
    InstallerRun::new(
        release.join("install.sh"),
        arguments,
        &release,
        root.join("admin").join("server-update.json"),
        "1.2.3",
    )
}

/// The InstallerRun's keyword arguments for the original's `run_installer`.
pub(crate) fn original_run_call(run: &InstallerRun, accepted: &[i64]) -> Json {
    let text = |path: &Path| Json::from(path.to_str().unwrap());
    let optional = |value: &Option<String>| value.as_deref().map_or(Json::Null, Json::from);
    let mut command = vec![text(&run.program)];
    command.extend(
        run.arguments
            .iter()
            .map(|argument| Json::from(argument.to_str().unwrap())),
    );
    let mut arguments = JsonObject::new();
    arguments.insert("command", Json::Array(command));
    arguments.insert("cwd", text(&run.cwd));
    arguments.insert("status_path", text(&run.status_path));
    arguments.insert("log_path", text(&run.log_path));
    arguments.insert("version", run.version.as_str());
    arguments.insert("expected_update_id", optional(&run.expected_update_id));
    arguments.insert("managed_update_id", optional(&run.managed_update_id));
    arguments.insert(
        "expected_service_cgroup",
        optional(&run.expected_service_cgroup),
    );
    arguments.insert("timeout_seconds", run.timeout.as_secs_f64());
    arguments.insert("heartbeat_seconds", run.heartbeat.as_secs_f64());
    arguments.insert(
        "accepted_returncodes",
        Json::Array(accepted.iter().map(|code| Json::from(*code)).collect()),
    );
    let mut call = JsonObject::new();
    call.insert("run", arguments);
    call.insert("termination_poll", run.termination_poll.as_secs_f64());
    Json::Object(call)
}

/// Run the original's functions on `calls` (see original_oracle.py) in one python3.
/// Panics with Python's stderr when the oracle itself fails.
pub(crate) fn original(originals: &Originals, calls: Vec<Json>) -> Vec<Json> {
    let mut request = JsonObject::new();
    request.insert("originals", originals.dir().to_str().expect("a UTF-8 path"));
    request.insert("calls", Json::Array(calls));
    let mut child = Command::new("python3")
        .arg("-B")
        .arg(ORACLE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required for the oracle tests (scripts/setup.sh installs it)");
    let body = encode_compact(&Json::Object(request)).unwrap();
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "original oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    match parse_json(&output.stdout).unwrap() {
        Json::Array(results) => results,
        other => panic!("unexpected oracle answer {other:?}"),
    }
}

/// Our outcome in the oracle's shape, with the `(ours, theirs)` fixture
/// root renamed in the message so twin fixtures compare.
pub(crate) fn outcome_json(result: &Result<InstallerOutcome>, roots: (&Path, &Path)) -> Json {
    let mut object = JsonObject::new();
    match result {
        Ok(InstallerOutcome::Installed) => {
            object.insert("outcome", "installed");
        }
        Ok(InstallerOutcome::RolledBack) => {
            object.insert("outcome", "rolled_back");
        }
        Err(error) => {
            object.insert("outcome", "error");
            object.insert("class", error.class().python_name());
            let (ours, theirs) = (roots.0.to_str().unwrap(), roots.1.to_str().unwrap());
            object.insert("message", error.message().replace(ours, theirs));
        }
    }
    Json::Object(object)
}

/// The log with every header's timestamp replaced, so two runs compare.
pub(crate) fn without_timestamps(log: &[u8]) -> Vec<u8> {
    let mut out = log.to_vec();
    let marker = b" at ";
    let mut at = 0;
    while let Some(found) = find(&out[at..], b"--- AgentsServer update ") {
        let start = at + found;
        let line_end = start + find(&out[start..], b"\n").unwrap_or(out.len() - start);
        if let Some(stamp) = rfind(&out[start..line_end], marker) {
            let stamp = start + stamp + marker.len();
            if line_end - stamp >= 20 {
                out[stamp..stamp + 20].copy_from_slice(b"YYYY-MM-DDTHH:MM:SSZ");
            }
        }
        at = line_end;
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .rposition(|window| window == needle)
}

/// Poll `condition` every 10 ms for up to `limit`.
pub(crate) fn eventually(limit: Duration, condition: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// A deterministic generator for the differential tests (xorshift64*).
pub(crate) struct Random(u64);

impl Random {
    pub(crate) fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

//! Black-box fixture of the update runner: a signed release host and an
//! AgentsServer health endpoint on 127.0.0.1, a real Ed25519 key, real
//! tar.gz/tgz archives carrying a stand-in `install.sh`, and an admitted
//! `server-update.json` row. The same update runs through the original
//! (`update_runner.py` under python3, its release URLs pointed at the local
//! host) and through the `update-runner` binary, each in its own copy of the
//! state, and the outcomes are compared: exit status, the final status row,
//! what the installer received, its log, and that nothing was left behind.

pub(crate) use agents_tests::release_support;

pub(crate) mod network;
pub(crate) mod prepared;
pub(crate) mod recovery;

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use agents_common::read_status_unlocked;
use agents_tests::server_status::write_row;
use base64::Engine as _;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use sha2::{Digest, Sha256, Sha512};

use agents_tests::Originals;
pub(crate) use release_support::{
    manifest_bytes, Member, RawResponder, Reply, TempDir, TestKey, TestServer,
};

/// The admitted update (a server's `uuid4().hex`).
pub(crate) const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
/// The stable server identity.
pub(crate) const IDENTITY: &str = "server-identity-1";
/// The version the server runs before the update.
pub(crate) const CURRENT: &str = "1.2.2";

/// The stand-in installer: it records what it received, runs the test's
/// behaviour (`$H15_FIXTURE/behaviour.sh`) and marks the server updated.
pub(crate) const INSTALL_SH: &str = r#"#!/bin/bash
record="$H15_FIXTURE"
{
  printf 'cwd=%s\n' "$PWD"
  for argument in "$@"; do printf 'arg=%s\n' "$argument"; done
  for name in AGENTSDOCK_MANAGED_UPDATE_ID AGENTSDOCK_EXPECTED_SERVICE_CGROUP AGENTSDOCK_AGENT_TOKEN VIRTUAL_ENV H15_FIXTURE; do
    if [ -n "${!name+x}" ]; then printf 'env %s=%s\n' "$name" "${!name}"; fi
  done
} > "$record/installer.record"
if [ -f "$record/behaviour.sh" ]; then . "$record/behaviour.sh"; fi
touch "$record/installed"
exit 0
"#;

/// What one path of the release host answers.
#[derive(Clone)]
pub(crate) struct Served {
    pub status: u16,
    pub reason: &'static str,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Declared length when it must differ from the body's.
    pub content_length: Option<Option<u64>>,
    /// The whole response written by the test (hostile release hosts).
    pub raw: Option<RawResponder>,
}

impl Served {
    pub(crate) fn ok(body: Vec<u8>) -> Self {
        Served {
            status: 200,
            reason: "OK",
            headers: Vec::new(),
            body,
            content_length: None,
            raw: None,
        }
    }

    /// A response the test writes itself, byte by byte.
    pub(crate) fn raw(
        responder: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static,
    ) -> Self {
        Served {
            raw: Some(Arc::new(responder)),
            ..Served::ok(Vec::new())
        }
    }

    pub(crate) fn redirect(location: &str) -> Self {
        Served {
            status: 302,
            reason: "Found",
            headers: vec![("Location".to_string(), location.to_string())],
            body: Vec::new(),
            content_length: None,
            raw: None,
        }
    }
}

type Files = Arc<Mutex<HashMap<String, Served>>>;

/// The health documents the server answers before and after the installer
/// ran, for each run (keyed by its one-time token).
#[derive(Default)]
struct HealthState {
    before: JsonObject,
    after: JsonObject,
    runs: HashMap<String, PathBuf>,
    /// Requests still answered 503, per run (a server still starting).
    unready: HashMap<String, usize>,
    /// When set, every health request gets this response instead.
    raw: Option<RawResponder>,
}

/// Which implementation runs the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side<'a> {
    /// `update_runner.py` of the Python originals, the oracle.
    Original(&'a Originals),
    /// The `update-runner` binary under test.
    Port,
}

impl Side<'_> {
    /// The side's name in the fixture's paths and credentials.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Side::Original(_) => "original",
            Side::Port => "port",
        }
    }
}

/// What one run left behind, normalised for comparison.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub exit: Option<i32>,
    pub row: JsonObject,
    /// The installer's record lines, `None` when it never ran.
    pub installer: Option<Vec<String>>,
    /// `server-update.log`, timestamps and temporary paths normalised.
    pub log: Option<String>,
    /// Entries left in the run's temporary directory.
    pub leftovers: Vec<String>,
    /// Whether the one-time credential file is gone.
    pub token_consumed: bool,
    pub stderr: String,
    /// The runner's own peak resident memory, in KiB.
    pub peak_rss_kib: u64,
    /// How long the run took.
    pub elapsed: std::time::Duration,
}

/// One update scenario.
pub(crate) struct Fixture {
    pub root: TempDir,
    pub key: TestKey,
    host: TestServer,
    files: Files,
    health: TestServer,
    health_state: Arc<Mutex<HealthState>>,
    /// The admitted row every run starts from.
    pub admitted: JsonObject,
    /// Extra runner options.
    pub options: Vec<String>,
    /// Extra runner arguments after `options`, any bytes (argparse takes
    /// words that are not UTF-8).
    pub raw_options: Vec<std::ffi::OsString>,
    /// Shell code the stand-in installer sources before finishing.
    pub behaviour: Option<String>,
    /// Extra environment of both runners.
    pub environment: Vec<(String, String)>,
    /// Variables removed from both runners' environment (before
    /// `environment` applies).
    pub unset: Vec<String>,
    /// Health requests each run gets 503 for before the server is ready.
    pub unready_requests: usize,
    /// The one-time health credential, instead of `<side>-token`.
    pub token: Option<String>,
    /// The upstream modules the original imports (`AGENTS_UPSTREAM_DIR`), put
    /// on its `sys.path` after the originals; without them the original's imports of
    /// modules outside the originals fail.
    pub upstream: Option<PathBuf>,
}

impl Fixture {
    pub(crate) fn new(name: &str) -> Self {
        Fixture::with_host(name, TestServer::start)
    }

    /// A fixture whose release host speaks HTTPS with `config`'s certificate.
    pub(crate) fn new_tls(name: &str, config: Arc<rustls::ServerConfig>) -> Self {
        Fixture::with_host(name, |handler| TestServer::start_tls(config, handler))
    }

    fn with_host(
        name: &str,
        start_host: impl FnOnce(
            Box<dyn Fn(&release_support::SeenRequest) -> Reply + Send + Sync>,
        ) -> TestServer,
    ) -> Self {
        let root = TempDir::new(&format!("h15-{name}"));
        let key = TestKey::generate(root.path(), "release-public-key.pem");
        let files: Files = Arc::default();
        let served = files.clone();
        let host = start_host(Box::new(move |request| {
            let files = served.lock().unwrap();
            let Some(found) = files.get(&request.path) else {
                return Reply::status(404, "Not Found");
            };
            if let Some(raw) = &found.raw {
                return Reply {
                    raw: Some(raw.clone()),
                    ..Reply::ok(b"")
                };
            }
            let mut reply = Reply::ok(&found.body);
            reply.status = found.status;
            reply.reason = found.reason;
            reply.headers = found.headers.clone();
            if let Some(length) = found.content_length {
                reply.content_length = length;
            }
            reply
        }));
        let health_state: Arc<Mutex<HealthState>> = Arc::default();
        let state = health_state.clone();
        let health = TestServer::start(move |request| {
            let mut state = state.lock().unwrap();
            if let Some(raw) = &state.raw {
                return Reply {
                    raw: Some(raw.clone()),
                    ..Reply::ok(b"")
                };
            }
            let token = request
                .header("Authorization")
                .and_then(|value| value.strip_prefix("Bearer "))
                .unwrap_or("")
                .to_string();
            if let Some(left) = state.unready.get_mut(&token).filter(|left| **left > 0) {
                *left -= 1;
                return Reply::status(503, "Service Unavailable");
            }
            let Some(run) = state.runs.get(&token) else {
                return Reply::status(401, "Unauthorized");
            };
            let document = if run.join("installed").exists() {
                &state.after
            } else {
                &state.before
            };
            Reply::ok(
                &python_compat::json::encode_compact(&Json::Object(document.clone())).unwrap(),
            )
        });
        {
            let mut state = health_state.lock().unwrap();
            state.before = idle_health();
            state.after = updated_health("1.2.3", 28);
        }
        Fixture {
            root,
            key,
            host,
            files,
            health,
            health_state,
            admitted: json_object! {
                "phase" => "starting",
                "update_id" => UPDATE_ID,
                "track" => "stable",
                "current_track" => "stable",
                "target_version" => "1.2.3",
                "latest_version" => "1.2.3",
                "update_available" => true,
                "message" => "Starting the AgentsServer update.",
                "runner_pid" => Json::Null,
                "started_at" => "2024-01-01T00:00:00Z",
                "finished_at" => Json::Null,
                "unknown_server_key" => json_object! {"kept" => true},
            },
            options: Vec::new(),
            raw_options: Vec::new(),
            behaviour: None,
            environment: Vec::new(),
            unset: Vec::new(),
            unready_requests: 0,
            token: None,
            upstream: None,
        }
    }

    /// Name the release host `name` in its URLs (it still listens on
    /// 127.0.0.1); before anything is published.
    pub(crate) fn set_host_name(&mut self, name: &str) {
        self.host.host_name = name.to_string();
    }

    pub(crate) fn release_base(&self) -> String {
        self.host.url("/releases")
    }

    pub(crate) fn api_url(&self) -> String {
        self.host.url("/api/releases?per_page=100")
    }

    pub(crate) fn npm_base(&self) -> String {
        self.host.url("/npm/@agentsdock/server/-/")
    }

    pub(crate) fn health_port(&self) -> u16 {
        self.health.port
    }

    pub(crate) fn serve(&self, path: &str, served: Served) {
        self.files.lock().unwrap().insert(path.to_string(), served);
    }

    pub(crate) fn served(&self, path: &str) -> Option<Served> {
        self.files.lock().unwrap().get(path).cloned()
    }

    /// Replace the health documents before and after the installer ran.
    /// Every health request from now on gets this response (hostile servers).
    pub(crate) fn set_raw_health(
        &self,
        responder: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static,
    ) {
        self.health_state.lock().unwrap().raw = Some(Arc::new(responder));
    }

    pub(crate) fn set_health(&self, before: JsonObject, after: JsonObject) {
        let mut state = self.health_state.lock().unwrap();
        state.before = before;
        state.after = after;
    }

    /// Requests the release host received so far.
    pub(crate) fn host_requests(&self) -> Vec<String> {
        self.host
            .seen()
            .into_iter()
            .map(|request| request.path)
            .collect()
    }

    /// Every request the release host received, with its headers.
    pub(crate) fn host_seen(&self) -> Vec<release_support::SeenRequest> {
        self.host.seen()
    }

    /// The header lines of every request the health endpoint received, one
    /// string per request.
    pub(crate) fn health_requests(&self) -> Vec<String> {
        self.health
            .seen()
            .into_iter()
            .map(|request| {
                request
                    .headers
                    .iter()
                    .map(|(name, value)| format!("{name}: {value}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    }

    /// A gzip tar of `members`.
    pub(crate) fn archive(&self, members: &[Member]) -> Vec<u8> {
        let path = self.root.path().join("archive.tmp");
        release_support::write_tar_gz(&path, members);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    }

    /// The members of a well-formed GitHub release archive of `version`.
    pub(crate) fn legacy_members(version: &str) -> Vec<Member> {
        let top = format!("agents-server-{version}");
        vec![
            Member::dir(&format!("{top}/")),
            Member::file(&format!("{top}/install.sh"), INSTALL_SH.as_bytes()).mode(0o644),
            Member::file(&format!("{top}/VERSION"), format!("{version}\n").as_bytes()),
        ]
    }

    /// The members of a well-formed npm package of `version`.
    pub(crate) fn npm_members(version: &str) -> Vec<Member> {
        let package = format!("{{\"name\": \"@agentsdock/server\", \"version\": \"{version}\"}}");
        vec![
            Member::file("package/package.json", package.as_bytes()),
            Member::file("package/server/install.sh", INSTALL_SH.as_bytes()).mode(0o755),
            Member::file("package/server/VERSION", format!("{version}\n").as_bytes()),
        ]
    }

    /// The schema-1 manifest of `version` for `archive`.
    pub(crate) fn legacy_manifest(&self, version: &str, archive: &[u8]) -> JsonObject {
        agents_tests::legacy_release_manifest(&self.release_base(), version, archive)
    }

    /// The schema-2 (npm) manifest of `version` for `archive`.
    pub(crate) fn npm_manifest(&self, version: &str, archive: &[u8]) -> JsonObject {
        let integrity = format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(Sha512::digest(archive))
        );
        let sha256 = hex(&Sha256::digest(archive));
        agents_tests::schema2_manifest(
            &self.npm_base(),
            version,
            &integrity,
            &sha256,
            archive.len(),
        )
    }

    /// Sign `manifest` and serve it with its signature under tag `v<tag>`.
    pub(crate) fn publish_manifest(&self, tag: &str, manifest: &JsonObject) {
        let bytes = manifest_bytes(&Json::Object(manifest.clone()));
        let signature = self.key.sign(&bytes);
        self.serve(
            &format!("/releases/download/v{tag}/agents-server-manifest.json"),
            Served::ok(bytes),
        );
        self.serve(
            &format!("/releases/download/v{tag}/agents-server-manifest.sig"),
            Served::ok(signature),
        );
    }

    /// Publish a GitHub release of `version` holding `archive`; returns its
    /// manifest.
    pub(crate) fn publish_legacy(&self, version: &str, archive: &[u8]) -> JsonObject {
        let manifest = self.legacy_manifest(version, archive);
        self.publish_manifest(version, &manifest);
        self.serve(
            &format!("/releases/download/v{version}/agents-server-{version}.tar.gz"),
            Served::ok(archive.to_vec()),
        );
        manifest
    }

    /// Serve an npm package and admit its signed descriptor into the row
    /// (`_npm_release`), as the server does for `--npm-descriptor`.
    pub(crate) fn publish_npm(&mut self, manifest: &JsonObject, archive: &[u8]) {
        let version = manifest
            .get("version")
            .and_then(Json::as_str)
            .unwrap()
            .to_string();
        self.serve(
            &format!("/npm/@agentsdock/server/-/server-{version}.tgz"),
            Served::ok(archive.to_vec()),
        );
        let bytes = manifest_bytes(&Json::Object(manifest.clone()));
        let engine = base64::engine::general_purpose::STANDARD;
        self.admitted.insert(
            "_npm_release",
            json_object! {
                "manifest_base64" => engine.encode(&bytes),
                "signature_base64" => engine.encode(self.key.sign(&bytes)),
            },
        );
    }

    /// The directory of one run.
    pub(crate) fn run_dir(&self, side: Side<'_>) -> PathBuf {
        self.root.path().join(side.label())
    }

    /// Run the admitted update with `side` in a fresh copy of the state.
    pub(crate) fn run(&self, side: Side<'_>) -> Outcome {
        let mut command = self.command(side);
        let measured = agents_tests::run_measured(command.stdin(std::process::Stdio::null()));
        Outcome {
            peak_rss_kib: measured.peak_rss_kib,
            elapsed: measured.elapsed,
            ..self.outcome(side, &measured.output)
        }
    }

    /// The admitted update's runner command for `side`, in a fresh copy of
    /// the state (the row admitted, the one-time credential written).
    pub(crate) fn command(&self, side: Side<'_>) -> Command {
        let run = self.run_dir(side);
        let _ = std::fs::remove_dir_all(&run);
        self.admit(side, &self.admitted, UPDATE_ID);
        self.runner(side, UPDATE_ID)
    }

    /// The server's admission of `row` for `side`'s run (whose state is
    /// kept) to the runner of `update_id`: the row written as the server
    /// writes it, the one-time credential file, and the health double told
    /// about the run.
    pub(crate) fn admit(&self, side: Side<'_>, row: &JsonObject, update_id: &str) {
        let run = self.run_dir(side);
        let admin = run.join("state/admin");
        let tmp = run.join("tmp");
        let record = run.join("installer");
        for directory in [&admin, &tmp, &record] {
            std::fs::create_dir_all(directory).unwrap();
        }
        let status = admin.join("server-update.json");
        write_row(&status, row).unwrap();
        let token = self
            .token
            .clone()
            .unwrap_or_else(|| format!("{}-token", side.label()));
        let token_file = admin.join(format!(".server-update-{update_id}.auth.json"));
        write_row(&token_file, &json_object! {"token" => token.as_str()}).unwrap();
        {
            let mut state = self.health_state.lock().unwrap();
            state.runs.insert(token.clone(), record.clone());
            state.unready.insert(token.clone(), self.unready_requests);
        }
        if let Some(behaviour) = &self.behaviour {
            std::fs::write(record.join("behaviour.sh"), behaviour).unwrap();
        }
    }

    /// The runner command of `side` for update `update_id`.
    pub(crate) fn runner(&self, side: Side<'_>, update_id: &str) -> Command {
        let run = self.run_dir(side);
        let admin = run.join("state/admin");
        let tmp = run.join("tmp");
        let record = run.join("installer");
        let status = admin.join("server-update.json");
        let token_file = admin.join(format!(".server-update-{update_id}.auth.json"));
        let mut arguments: Vec<String> = vec![
            "--status-file".into(),
            status.to_string_lossy().into_owned(),
            "--public-key".into(),
            self.key.pem_path.to_string_lossy().into_owned(),
            "--port".into(),
            self.health.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--current-version".into(),
            CURRENT.into(),
            "--update-id".into(),
            update_id.into(),
            "--expected-server-identity".into(),
            IDENTITY.into(),
            "--auth-token-file".into(),
            token_file.to_string_lossy().into_owned(),
        ];
        arguments.extend(self.options.iter().cloned());
        let mut command = match side {
            Side::Original(originals) => {
                let mut command = Command::new("python3");
                command
                    .arg("-B")
                    .arg("-c")
                    .arg(ORIGINAL_LAUNCHER)
                    .args(&arguments)
                    .args(&self.raw_options)
                    .env("ORIGINALS_DIR", originals.dir());
                if let Some(upstream) = &self.upstream {
                    command.env("UPSTREAM_DIR", upstream);
                }
                command
            }
            Side::Port => {
                let mut command = Command::new(agents_tests::binary_path("update-runner"));
                command.args(&arguments).args(&self.raw_options);
                command
            }
        };
        for name in &self.unset {
            command.env_remove(name);
        }
        command
            .current_dir(&run)
            .env("TMPDIR", &tmp)
            .env("H15_FIXTURE", &record)
            .env("AGENTS_SERVER_RELEASE_BASE", self.release_base())
            .env("AGENTS_SERVER_RELEASES_API_URL", self.api_url())
            .env("AGENTS_SERVER_NPM_REGISTRY_BASE", self.npm_base())
            // Scrubbed from the installer's environment.
            .env("AGENTSDOCK_AGENT_TOKEN", "runner-secret")
            .env("VIRTUAL_ENV", "/nonexistent/venv")
            .envs(self.environment.iter().map(|(key, value)| (key, value)));
        command
    }

    /// What the run of `side` that ended with `output` left behind (its
    /// memory and time unmeasured: see [`Fixture::run`]).
    pub(crate) fn outcome(&self, side: Side<'_>, output: &std::process::Output) -> Outcome {
        let run = self.run_dir(side);
        let admin = run.join("state/admin");
        let tmp = run.join("tmp");
        let record = run.join("installer");
        let status = admin.join("server-update.json");
        let token_file = admin.join(format!(".server-update-{UPDATE_ID}.auth.json"));
        let normalise = |text: &str| normalise_paths(text, &tmp, &run);
        // Arguments may hold bytes that are not UTF-8; both sides are read
        // the same lossy way.
        let installer = std::fs::read(record.join("installer.record"))
            .ok()
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map(|text| text.lines().map(normalise).collect());
        let log = std::fs::read_to_string(admin.join("server-update.log"))
            .ok()
            .map(|text| normalise(&normalise_log_header(&text)));
        let mut leftovers: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        leftovers.sort();
        Outcome {
            exit: output.status.code(),
            row: normalise_row(read_status_unlocked(&status).unwrap()),
            installer,
            log,
            leftovers,
            token_consumed: !token_file.exists(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            // Measured by run(); a run driven elsewhere is not.
            peak_rss_kib: 0,
            elapsed: std::time::Duration::ZERO,
        }
    }

    /// Run the original, then the port, and require the same outcome; where a
    /// message deliberately differs, `port_message` is the port's own text.
    pub(crate) fn compare(
        &self,
        originals: &Originals,
        port_message: Option<&str>,
    ) -> (Outcome, Outcome) {
        let original = self.run(Side::Original(originals));
        let port = self.run(Side::Port);
        assert_same(&original, &port, port_message);
        (original, port)
    }
}

/// Require the port's run to have ended as the original's: exit status, row,
/// installer, log, leftovers, credential; where a message deliberately
/// differs, `port_message` is the port's own text.
pub(crate) fn assert_same(original: &Outcome, port: &Outcome, port_message: Option<&str>) {
    let mut expected = original.clone();
    if let Some(message) = port_message {
        expected.row.insert("message", message);
    }
    assert_eq!(
        port.exit, expected.exit,
        "exit status; port stderr: {}",
        port.stderr
    );
    assert_eq!(
        port.row, expected.row,
        "status rows; original stderr: {}",
        original.stderr
    );
    assert_eq!(port.installer, expected.installer, "installer invocation");
    assert_eq!(port.log, expected.log, "installer log");
    assert_eq!(port.leftovers, expected.leftovers, "temporary files");
    assert_eq!(
        port.token_consumed, expected.token_consumed,
        "credential file"
    );
    assert!(
        port.leftovers.is_empty(),
        "the port left {:?}",
        port.leftovers
    );
}

/// Runs the original's `main()` with its release URLs pointed at the test host.
const ORIGINAL_LAUNCHER: &str = r#"
import os, sys
sys.path.insert(0, os.environ["ORIGINALS_DIR"])
if os.environ.get("UPSTREAM_DIR"):
    sys.path.insert(1, os.environ["UPSTREAM_DIR"])
import update_runner
update_runner.RELEASE_BASE = os.environ["AGENTS_SERVER_RELEASE_BASE"]
update_runner.RELEASES_API_URL = os.environ["AGENTS_SERVER_RELEASES_API_URL"]
update_runner.NPM_REGISTRY_BASE = os.environ["AGENTS_SERVER_NPM_REGISTRY_BASE"]
sys.argv = ["update_runner.py"] + sys.argv[1:]
raise SystemExit(update_runner.main())
"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Timestamps and the runner's PID differ between runs by nature.
fn normalise_row(mut row: JsonObject) -> JsonObject {
    for key in ["updated_at", "heartbeat_at", "finished_at"] {
        if let Some(value) = row.get(key) {
            if value
                .as_str()
                .is_some_and(|text| text.ends_with('Z') && text.len() == 20)
            {
                row.insert(key, "<time>");
            }
        }
    }
    if row.get("runner_pid").and_then(Json::as_int).is_some() {
        row.insert("runner_pid", "<pid>");
    }
    row
}

/// The run's own directories, and the random name of the runner's
/// temporary directory (`agents-server-update-<random>`).
fn normalise_paths(text: &str, tmp: &Path, run: &Path) -> String {
    let mut text = text.replace(&tmp.to_string_lossy().into_owned(), "<tmp>");
    text = text.replace(&run.to_string_lossy().into_owned(), "<run>");
    let marker = "<tmp>/agents-server-update-";
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(index) = rest.find(marker) {
        out.push_str(&rest[..index + marker.len()]);
        rest = &rest[index + marker.len()..];
        let end = rest.find('/').unwrap_or(rest.len());
        out.push_str("<random>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `--- AgentsServer update <id> to <v> at <utc> ---`.
fn normalise_log_header(text: &str) -> String {
    text.lines()
        .map(|line| {
            match (
                line.starts_with("--- AgentsServer update "),
                line.rfind(" at "),
            ) {
                (true, Some(index)) if line.ends_with(" ---") => {
                    format!("{} at <time> ---", &line[..index])
                }
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A server that is up, idle and proves an empty service cgroup.
pub(crate) fn idle_health() -> JsonObject {
    json_object! {
        "ok" => true,
        "server_identity" => IDENTITY,
        "server_version" => CURRENT,
        "active_count" => 0,
        "update_blocking_queued_count" => 0,
        "update_service_cgroup" => json_object! {
            "safe" => true,
            "unknown_descendant_count" => 0,
            "inspection" => "verified",
        },
    }
}

/// The updated server on `version` with its secure-peer capability.
pub(crate) fn updated_health(version: &str, api_contract: i128) -> JsonObject {
    json_object! {
        "ok" => true,
        "server_identity" => IDENTITY,
        "server_version" => version,
        "api_contract_version" => api_contract,
        "active_count" => 0,
        "update_blocking_queued_count" => 0,
        "gateway" => json_object! {"version" => version},
        "execution_service" => json_object! {"version" => version, "maintenance_held" => false},
        "capabilities" => json_object! {
            "secure_peer_v1" => json_object! {
                "available" => true,
                "state_available" => true,
                "state_error_code" => Json::Null,
                "required" => false,
                "version" => 1,
                "control_path" => "/api/admin/secure-peers/v1/status",
                "proxy_prefix" => "/api/team-hub-secure",
            },
        },
    }
}

/// Read a whole file, or an empty string.
pub(crate) fn read_text(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// Make `path` executable (a stand-in script outside an archive).
pub(crate) fn make_executable(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

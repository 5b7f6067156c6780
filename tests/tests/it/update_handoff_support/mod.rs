//! Shared support of the `update-handoff` black-box tests: a split
//! installation running under a real `systemd --user` manager, whose worker
//! holds the sealed lease a failed update left behind, the handoff file that
//! names it, the failed update status of a retry, and the built helper run as
//! a child process.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agents_common::ExecutionLayout;
use agents_tests::upstream::{Helper, Side, Upstream};
use agents_tests::{
    binary_path, free_port, poll_until, HttpRequest, Installation, RequestMatch, RequestRecord,
    Role, Sandbox, SplitServices, Stall, Switches, AGENT_TOKEN,
};
use python_compat::{
    json::{encode_compact, encode_indented, Json, JsonObject},
    json_object,
};

/// The worker's private status path.
pub(crate) const STATUS: &str = "/api/admin/execution/status";
/// The worker's private maintenance path.
pub(crate) const MAINTENANCE: &str = "/api/admin/execution/maintenance";
/// The worker's callback health path.
pub(crate) const HEALTH: &str = "/api/health";
/// The failed update whose handoff the tests release (32 hex digits).
pub(crate) const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
/// Its preparation directory.
pub(crate) const PREPARATION_ID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// `str(uuid.UUID(hex=UPDATE_ID))`: the handoff's maintenance operation.
pub(crate) const OPERATION: &str = "01234567-89ab-cdef-0123-456789abcdef";
/// Another operation's canonical UUID.
pub(crate) const FOREIGN_OPERATION: &str = "b5914c0d-4b01-5e86-bcd8-1e9626e330e6";
/// How long a helper may take.
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stalled health reply is held back: long enough for a test to
/// change the world, well inside the helper's 5 s request timeout.
pub(crate) const STALL_SECONDS: f64 = 3.0;

/// A helper outcome ([`agents_tests::Outcome`], whose fields and checks it
/// derefs to) plus the one check only update-handoff needs: its result line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome(agents_tests::Outcome);

impl std::ops::Deref for Outcome {
    type Target = agents_tests::Outcome;

    fn deref(&self) -> &agents_tests::Outcome {
        &self.0
    }
}

impl Outcome {
    fn of(output: Output) -> Outcome {
        Outcome(agents_tests::Outcome::from(output))
    }

    /// Exit 0, nothing on stderr, exactly the original's result line for a
    /// release of `worker_instance_id` (sorted keys, `json.dumps` spacing).
    #[track_caller]
    pub(crate) fn assert_released(&self, already_released: bool, worker_instance_id: &str) {
        self.assert_success(&format!(
            "{{\"already_released\": {already_released}, \"operation_id\": \"{OPERATION}\", \
             \"released\": true, \"worker_instance_id\": \"{worker_instance_id}\"}}\n"
        ));
    }
}

/// One file-system entry as found (not following symlinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A directory and its mode.
    Directory(u32),
    /// A regular file: mode, inode and bytes.
    File(u32, u64, Vec<u8>),
    /// A symlink and its target.
    Link(PathBuf),
    /// Anything else.
    Other,
}

/// Every entry under `root` by relative path (empty when `root` is missing).
pub(crate) fn tree(root: &Path) -> BTreeMap<PathBuf, Entry> {
    fn walk(root: &Path, relative: &Path, entries: &mut BTreeMap<PathBuf, Entry>) {
        let path = root.join(relative);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return;
        };
        let mode = meta.mode() & 0o7777;
        let entry = if meta.file_type().is_symlink() {
            Entry::Link(fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            for item in fs::read_dir(&path).unwrap() {
                walk(root, &relative.join(item.unwrap().file_name()), entries);
            }
            Entry::Directory(mode)
        } else if meta.is_file() {
            Entry::File(mode, meta.ino(), fs::read(&path).unwrap())
        } else {
            Entry::Other
        };
        entries.insert(relative.to_path_buf(), entry);
    }
    let mut entries = BTreeMap::new();
    walk(root, Path::new(""), &mut entries);
    entries
}

/// Writes `data` at `path` with exactly `mode` through a temporary and a
/// rename (a new inode, as the producers of these files do).
pub(crate) fn replace_file(path: &Path, data: &[u8], mode: u32) {
    let temporary = path.with_extension("test-tmp");
    fs::write(&temporary, data).unwrap();
    fs::set_permissions(&temporary, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&temporary, path).unwrap();
}

/// A handoff document with the five keys, as the update runner writes it.
pub(crate) fn handoff_document(
    operation_id: &str,
    worker_instance_id: &str,
    lease_id: &str,
    server_identity: &str,
) -> JsonObject {
    json_object! {
        "schema" => 1,
        "operation_id" => operation_id,
        "worker_instance_id" => worker_instance_id,
        "lease_id" => lease_id,
        "expected_server_identity" => server_identity,
    }
}

/// A split installation with a running worker holding the sealed lease of
/// [`OPERATION`], and the handoff file that names it.
pub(crate) struct Case {
    /// The service manager (dropped last among the fields using it).
    pub sandbox: Sandbox,
    /// Roots, releases and fixtures.
    pub installation: Installation,
    /// The installed layout.
    pub layout: ExecutionLayout,
    /// The services as started.
    pub services: SplitServices,
    /// The worker's `server_identity` (from its callback health).
    pub server_identity: String,
    /// The sealed lease's id.
    pub lease_id: String,
    /// The upstream sources and a runtime folder of the original
    /// `update_handoff.py` beside its modules: the helper runs is that
    /// original (through the comparison's driver); `None`: the binary.
    pub original: Option<(Upstream, PathBuf)>,
}

impl Case {
    /// Starts the services, seals the handoff's lease and writes the handoff;
    /// `None` when no systemd sandbox is available here.
    pub(crate) fn start(test: &str) -> Option<Case> {
        Some(Case::start_in(Sandbox::start_or_skip(test)?, free_port()))
    }

    /// [`Case::start`] under `sandbox`, the public listener on `port`.
    pub(crate) fn start_in(sandbox: Sandbox, port: u16) -> Case {
        let installation = Installation::in_sandbox(&sandbox);
        let release = installation.add_release("1.0.0");
        let layout = installation.layout(&release, &release, port);
        installation.install_split(&layout);
        let services = installation.start_split(&sandbox, &layout);
        let mut case = Case {
            sandbox,
            installation,
            layout,
            services,
            server_identity: String::new(),
            lease_id: String::new(),
            original: None,
        };
        let health = HttpRequest::get(HEALTH)
            .bearer(AGENT_TOKEN)
            .send(case.callback())
            .expect("callback health answers");
        case.server_identity = health
            .json()
            .get("server_identity")
            .and_then(Json::as_str)
            .expect("health names the server")
            .to_string();
        case.lease_id = case.seal(OPERATION);
        agents_tests::make_dir(
            &case.installation.install_root.join(".update-preparations"),
            0o700,
        );
        agents_tests::make_dir(case.handoff_path().parent().unwrap(), 0o700);
        case.write_handoff(&case.handoff());
        case
    }

    /// `install/.update-preparations/<PREPARATION_ID>/handoff-<UPDATE_ID>.json`.
    pub(crate) fn handoff_path(&self) -> PathBuf {
        self.installation
            .install_root
            .join(".update-preparations")
            .join(PREPARATION_ID)
            .join(format!("handoff-{UPDATE_ID}.json"))
    }

    /// The handoff of the running worker's sealed lease.
    pub(crate) fn handoff(&self) -> JsonObject {
        handoff_document(
            OPERATION,
            &self.services.worker_instance_id(),
            &self.lease_id,
            &self.server_identity,
        )
    }

    /// The handoff with one field replaced.
    pub(crate) fn handoff_with(&self, key: &str, value: impl Into<Json>) -> JsonObject {
        let mut handoff = self.handoff();
        handoff.insert(key, value.into());
        handoff
    }

    /// Writes the handoff file (0600) as the update runner does.
    pub(crate) fn write_handoff(&self, handoff: &JsonObject) {
        replace_file(
            &self.handoff_path(),
            &encode_indented(&Json::Object(handoff.clone())),
            0o600,
        );
    }

    /// `state/admin/server-update.json`.
    pub(crate) fn status_path(&self) -> PathBuf {
        self.installation
            .state_root
            .join("admin/server-update.json")
    }

    /// The failed status an update runner saves when its release failed.
    pub(crate) fn failed_status(&self) -> JsonObject {
        json_object! {
            "update_id" => UPDATE_ID,
            "preparation_id" => PREPARATION_ID,
            "phase" => "failed",
            "error_code" => "server_update_handoff_release_failed",
            "error" => "execution handoff release failed",
            "retryable" => true,
            "runner_pid" => Json::Null,
            "target_version" => "1.1.0",
            "_execution_handoff" => self.handoff(),
        }
    }

    /// Writes the status file (0600) as the update runner does.
    pub(crate) fn write_status(&self, status: &JsonObject) {
        replace_file(
            &self.status_path(),
            &encode_indented(&Json::Object(status.clone())),
            0o600,
        );
    }

    /// The worker's private callback listener (from its current receipt).
    pub(crate) fn callback(&self) -> SocketAddr {
        self.installation.worker_callback()
    }

    /// The running worker's receipt instance id.
    pub(crate) fn worker_instance_id(&self) -> String {
        self.installation
            .receipt(Role::Worker)
            .and_then(|receipt| receipt.get("instance_id").cloned())
            .and_then(|id| id.as_str().map(str::to_string))
            .expect("worker.json names its instance")
    }

    /// One maintenance action on the worker, as another client would send
    /// it; returns the reply status and body.
    pub(crate) fn maintenance(
        &self,
        action: &str,
        operation: &str,
        lease_id: Option<&str>,
    ) -> (u16, Json) {
        let mut body = json_object! {
            "action" => action,
            "expected_worker_instance_id" => self.worker_instance_id(),
            "operation_id" => operation,
        };
        if let Some(lease_id) = lease_id {
            body.insert("lease_id", lease_id);
        }
        let response =
            HttpRequest::post_json(MAINTENANCE, encode_compact(&Json::Object(body)).unwrap())
                .bearer(&self.installation.control_token())
                .send(self.callback())
                .expect("the worker answers maintenance");
        (response.status, response.json())
    }

    /// Acquires and seals a lease for `operation`; returns its id.
    pub(crate) fn seal(&self, operation: &str) -> String {
        let lease_id = self.acquire(operation);
        let (status, reply) = self.maintenance("seal", operation, Some(&lease_id));
        assert_eq!(status, 200, "seal: {reply:?}");
        lease_id
    }

    /// Acquires an unsealed, expiring lease for `operation`; returns its id.
    pub(crate) fn acquire(&self, operation: &str) -> String {
        let (status, reply) = self.maintenance("acquire", operation, None);
        assert_eq!(status, 200, "acquire: {reply:?}");
        reply
            .get("lease")
            .and_then(|lease| lease.get("lease_id"))
            .and_then(Json::as_str)
            .expect("a lease id")
            .to_string()
    }

    /// Releases the lease `lease_id` of `operation` as another client would.
    pub(crate) fn release_lease(&self, operation: &str, lease_id: &str) {
        let (status, reply) = self.maintenance("release", operation, Some(lease_id));
        assert_eq!(status, 200, "release: {reply:?}");
    }

    /// The lease the worker reports (`null` when none is held).
    pub(crate) fn worker_lease(&self) -> Json {
        self.installation.worker_lease()
    }

    /// Asserts the worker still holds exactly the case's sealed lease.
    #[track_caller]
    pub(crate) fn assert_lease_held(&self) {
        let lease = self.worker_lease();
        assert_eq!(
            (
                lease.get("operation_id").and_then(Json::as_str),
                lease.get("lease_id").and_then(Json::as_str),
                lease.get("sealed"),
            ),
            (
                Some(OPERATION),
                Some(self.lease_id.as_str()),
                Some(&Json::Bool(true))
            ),
            "lease: {lease:?}"
        );
    }

    /// How many requests the worker has logged so far.
    pub(crate) fn mark(&self) -> usize {
        self.installation.requests(Role::Worker).len()
    }

    /// The worker's requests after `mark`.
    pub(crate) fn requests_since(&self, mark: usize) -> Vec<RequestRecord> {
        self.installation.requests_since(Role::Worker, mark)
    }

    /// The maintenance requests (their actions) the worker logged after `mark`.
    pub(crate) fn maintenance_since(&self, mark: usize) -> Vec<String> {
        self.requests_since(mark)
            .into_iter()
            .filter(|record| record.path == MAINTENANCE)
            .map(|record| record.action.unwrap_or_default())
            .collect()
    }

    /// Replaces the worker's misbehaviour switches.
    pub(crate) fn switch(&self, switches: Switches) {
        self.installation.set_switches(Role::Worker, &switches);
    }

    /// Holds back the worker's callback health reply for [`STALL_SECONDS`].
    pub(crate) fn stall_health(&self) {
        self.switch(Switches {
            stall: Some(Stall {
                on: RequestMatch::path(HEALTH),
                seconds: STALL_SECONDS,
            }),
            ..Switches::default()
        });
    }

    /// Waits until the worker logs a request after `mark` matching `accept`.
    pub(crate) fn wait_for_request(
        &self,
        mark: usize,
        what: &str,
        accept: impl Fn(&RequestRecord) -> bool,
    ) -> RequestRecord {
        poll_until(HELPER_TIMEOUT, what, || {
            self.requests_since(mark)
                .into_iter()
                .find(|record| accept(record))
        })
    }

    /// The helper with the sandbox's environment.
    pub(crate) fn command(&self) -> Command {
        let mut command = match &self.original {
            Some((upstream, runtime)) => upstream.command(
                Side::Original,
                Helper::UpdateHandoff,
                runtime,
                &self.sandbox,
            ),
            None => self.sandbox.command(binary_path("update-handoff")),
        };
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    fn release_command(&self) -> Command {
        let mut command = self.command();
        command
            .arg("release")
            .arg("--root")
            .arg(&self.installation.install_root)
            .arg("--handoff-file")
            .arg(self.handoff_path());
        command
    }

    /// `update-handoff release` of the case's handoff.
    pub(crate) fn release(&self) -> Outcome {
        Outcome::of(self.release_command().output().expect("run update-handoff"))
    }

    /// `update-handoff release`, started in the background.
    pub(crate) fn spawn_release(&self) -> Child {
        self.release_command()
            .spawn()
            .expect("spawn update-handoff")
    }

    fn retry_command(&self, status_file: &Path) -> Command {
        let mut command = self.command();
        command
            .arg("retry-failed")
            .arg("--root")
            .arg(&self.installation.install_root)
            .arg("--status-file")
            .arg(status_file)
            .args(["--expected-status", "-"])
            .stdin(Stdio::piped());
        command
    }

    /// `update-handoff retry-failed` of the status file, with `expected` (the
    /// caller's snapshot) on stdin.
    pub(crate) fn retry(&self, expected: &JsonObject) -> Outcome {
        self.retry_at(&self.status_path(), expected)
    }

    /// [`Case::retry`] naming another status file.
    pub(crate) fn retry_at(&self, status_file: &Path, expected: &JsonObject) -> Outcome {
        finish(self.spawn_retry_at(status_file, expected))
    }

    /// `update-handoff retry-failed`, started in the background.
    pub(crate) fn spawn_retry(&self, expected: &JsonObject) -> Child {
        self.spawn_retry_at(&self.status_path(), expected)
    }

    fn spawn_retry_at(&self, status_file: &Path, expected: &JsonObject) -> Child {
        let expected = encode_compact(&Json::Object(expected.clone())).unwrap();
        self.spawn_retry_with_stdin(status_file, &expected)
    }

    /// `update-handoff retry-failed` of the status file with `stdin` (any
    /// bytes) as the expected status.
    pub(crate) fn retry_with_stdin(&self, stdin: &[u8]) -> Outcome {
        finish(self.spawn_retry_with_stdin(&self.status_path(), stdin))
    }

    fn spawn_retry_with_stdin(&self, status_file: &Path, data: &[u8]) -> Child {
        let mut child = self
            .retry_command(status_file)
            .spawn()
            .expect("spawn update-handoff");
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(data).expect("write the expected status");
        child
    }

    /// Runs `change` while the helper waits for its stalled callback health
    /// reply, then collects the helper's outcome. `helper` must have been
    /// started after [`Case::stall_health`] and `mark`.
    pub(crate) fn during_health(
        &self,
        helper: Child,
        mark: usize,
        change: impl FnOnce(),
    ) -> Outcome {
        self.wait_for_request(mark, "the helper's stalled health request", |record| {
            record.path == HEALTH && record.outcome == "stalled"
        });
        change();
        let outcome = finish(helper);
        self.switch(Switches::default());
        outcome
    }

    /// `worker.json` as parsed JSON.
    pub(crate) fn worker_receipt(&self) -> JsonObject {
        self.installation
            .receipt(Role::Worker)
            .and_then(|receipt| receipt.as_object().cloned())
            .expect("worker.json")
    }

    /// Rewrites `worker.json` (0600) as a different process would have.
    pub(crate) fn write_worker_receipt(&self, receipt: &JsonObject) {
        replace_file(
            &self.installation.runtime_dir().join("worker.json"),
            python_compat::json::encode_line(&Json::Object(receipt.clone()), true).as_bytes(),
            0o600,
        );
    }

    /// The install root's tree (for "nothing changed").
    pub(crate) fn install_tree(&self) -> BTreeMap<PathBuf, Entry> {
        tree(&self.installation.install_root)
    }

    /// No installation lock is left behind.
    #[track_caller]
    pub(crate) fn assert_unlocked(&self) {
        let lock = self.installation.install_root.join(".install-lock");
        assert!(
            fs::symlink_metadata(&lock).is_err(),
            "{} left behind",
            lock.display()
        );
    }
}

/// Waits for a helper started in the background and collects its outcome.
pub(crate) fn finish(child: Child) -> Outcome {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(HELPER_TIMEOUT) {
        Ok(output) => Outcome::of(output.expect("wait for update-handoff")),
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            panic!("update-handoff (pid {pid}) did not finish within {HELPER_TIMEOUT:?}")
        }
    }
}

//! Shared support of the `execution-manage` black-box tests: a real
//! installation under a real `systemd --user` manager, the built helper run
//! as a child process, and readers for everything a test must check
//! afterwards (unit files, `current`, the layout manifest, journals, the
//! services systemd runs, and what the test worker saw).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agents_common::{layout_manifest, render_service, ExecutionLayout};
use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::crash_points::{helper_injection, run_traced, Traced};
use agents_tests::upstream::{Helper, Side, Upstream};
pub(crate) use agents_tests::Outcome;
use agents_tests::{
    binary_path, free_port, poll_until, HttpRequest, Installation, RequestRecord, Role, Sandbox,
    Switches, AGENT_TOKEN, SERVICE_TIMEOUT,
};
use python_compat::{
    json::{encode_indented, parse_json, Json},
    json_object,
};

/// The release installed at the start of every test.
pub(crate) const OLD: &str = "1.0.0";
/// The release tests activate.
pub(crate) const NEW: &str = "1.1.0";
/// Status path of the worker's private control listener.
pub(crate) const STATUS: &str = "/api/admin/execution/status";
/// Maintenance path of the worker's private control listener.
pub(crate) const MAINTENANCE: &str = "/api/admin/execution/maintenance";
/// How long the helper may take for a whole successful command.
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

/// One installation with its own service manager.
pub(crate) struct Site {
    /// The service manager (dropped last among the fields that use it).
    pub sandbox: Sandbox,
    /// Roots, releases and fixtures.
    pub installation: Installation,
    /// The public port of every layout of this site.
    pub port: u16,
    /// The upstream sources and a folder holding the original
    /// `execution_manage.py` beside the modules it imports
    /// (`Upstream::install_runtime`): the helper run is that original;
    /// `None`: the binary.
    pub original: Option<(Upstream, PathBuf)>,
}

/// The files an activation may change, as found on disk.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Disk {
    /// Worker unit bytes and mode.
    pub worker_unit: Option<(Vec<u8>, u32)>,
    /// Gateway unit bytes and mode.
    pub gateway_unit: Option<(Vec<u8>, u32)>,
    /// `execution-layout.json` bytes and mode.
    pub manifest: Option<(Vec<u8>, u32)>,
    /// Where `current` points (raw link text).
    pub current: Option<PathBuf>,
    /// Entries of the install root, sorted, except retired journals.
    pub install_entries: Vec<String>,
    /// Entries of `default.target.wants` (the enablement links).
    pub wants: Vec<String>,
}

impl Disk {
    /// The same state without one install-root entry (e.g. a pending journal
    /// or a lock that is expected to differ).
    pub(crate) fn without_entry(mut self, name: &str) -> Disk {
        self.install_entries.retain(|entry| entry != name);
        self
    }
}

impl std::fmt::Debug for Disk {
    // File contents as text, so a failed comparison is readable.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |file: &Option<(Vec<u8>, u32)>| {
            file.as_ref()
                .map(|(data, mode)| format!("{mode:o} {}", String::from_utf8_lossy(data)))
        };
        f.debug_struct("Disk")
            .field("worker_unit", &text(&self.worker_unit))
            .field("gateway_unit", &text(&self.gateway_unit))
            .field("manifest", &text(&self.manifest))
            .field("current", &self.current)
            .field("install_entries", &self.install_entries)
            .field("wants", &self.wants)
            .finish()
    }
}

/// One service as systemd runs it, proven by its receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Serving {
    /// The worker's MainPID (= `worker.json` pid).
    pub worker_pid: u32,
    /// The worker receipt's instance id.
    pub worker_instance_id: String,
    /// The gateway's MainPID (= `gateway.json` pid).
    pub gateway_pid: u32,
}

fn file_state(path: &Path) -> Option<(Vec<u8>, u32)> {
    let meta = fs::symlink_metadata(path).ok()?;
    Some((fs::read(path).ok()?, meta.mode() & 0o7777))
}

/// The sorted names in `directory`; none when it does not exist.
fn sorted_names(directory: &Path) -> Vec<String> {
    if directory.is_dir() {
        agents_tests::entries(directory)
    } else {
        Vec::new()
    }
}

impl Site {
    /// A sandboxed installation with releases [`OLD`] and [`NEW`] on disk and
    /// nothing installed or running yet.
    pub(crate) fn empty(test: &str) -> Option<Site> {
        Some(Site::empty_in(Sandbox::start_or_skip(test)?, free_port()))
    }

    /// [`Site::empty`] under `sandbox`, its layouts listening on `port`.
    pub(crate) fn empty_in(sandbox: Sandbox, port: u16) -> Site {
        let installation = Installation::in_sandbox(&sandbox);
        installation.add_release(OLD);
        installation.add_release(NEW);
        Site {
            sandbox,
            installation,
            port,
            original: None,
        }
    }

    /// A split installation of [`OLD`] (worker and gateway enabled and
    /// running, proven by their receipts), with [`NEW`] retained beside it.
    pub(crate) fn running(test: &str) -> Option<Site> {
        Some(Site::running_in(Sandbox::start_or_skip(test)?, free_port()))
    }

    /// [`Site::running`] under `sandbox`, its layouts listening on `port`.
    pub(crate) fn running_in(sandbox: Sandbox, port: u16) -> Site {
        let site = Site::empty_in(sandbox, port);
        let layout = site.layout(OLD, OLD);
        site.installation.install_split(&layout);
        site.installation.start_split(&site.sandbox, &layout);
        site
    }

    /// The layout running `worker` and `gateway` releases of this site.
    pub(crate) fn layout(&self, worker: &str, gateway: &str) -> ExecutionLayout {
        self.installation.layout(
            &self.installation.release_dir(worker),
            &self.installation.release_dir(gateway),
            self.port,
        )
    }

    /// Writes `layout` as a private (0600) `apply --layout` file.
    pub(crate) fn layout_file(&self, layout: &ExecutionLayout) -> PathBuf {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!("layout-{}.json", COUNTER.fetch_add(1, Ordering::Relaxed));
        self.layout_file_named(layout, &name)
    }

    /// [`Site::layout_file`] named `name` in the sandbox's directory.
    pub(crate) fn layout_file_named(&self, layout: &ExecutionLayout, name: &str) -> PathBuf {
        let path = self.sandbox.base().join(name);
        fs::write(&path, encode_indented(&layout.to_dict())).expect("write the layout file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod layout");
        path
    }

    /// The helper with this manager's environment and nothing else.
    pub(crate) fn command(&self) -> Command {
        let mut command = match &self.original {
            Some((upstream, runtime)) => upstream.command(
                Side::Original,
                Helper::ExecutionManage,
                runtime,
                &self.sandbox,
            ),
            None => self.sandbox.command(binary_path("execution-manage")),
        };
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    /// Runs the helper with `args` to completion.
    pub(crate) fn manage<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Outcome {
        Outcome::from(
            self.command()
                .args(args)
                .output()
                .expect("execution-manage runs"),
        )
    }

    /// `apply --layout <file of layout> --scope <scope>`.
    pub(crate) fn apply(&self, layout: &ExecutionLayout, scope: &str) -> Outcome {
        let file = self.layout_file(layout);
        self.manage(&[
            "apply".as_ref(),
            "--layout".as_ref(),
            file.as_os_str(),
            "--scope".as_ref(),
            scope.as_ref(),
        ])
    }

    /// Starts `apply` in the background (to be killed or awaited).
    pub(crate) fn spawn_apply(&self, layout: &ExecutionLayout, scope: &str) -> Child {
        let file = self.layout_file(layout);
        self.command()
            .arg("apply")
            .arg("--layout")
            .arg(file)
            .args(["--scope", scope])
            .spawn()
            .expect("execution-manage starts")
    }

    /// `apply` under `crash-tracer`, killed on entry to its `kill_at`-th
    /// durable system call (never for `None`).
    pub(crate) fn apply_traced(
        &self,
        layout: &ExecutionLayout,
        scope: &str,
        kill_at: Option<usize>,
    ) -> Traced {
        let file = self.layout_file(layout);
        let mut command = self.command();
        command
            .arg("apply")
            .arg("--layout")
            .arg(file)
            .args(["--scope", scope]);
        run_traced(&command, &helper_injection(), kill_at)
    }

    /// `recover` under `crash-tracer`, killed on entry to its `kill_at`-th
    /// durable system call (never for `None`).
    pub(crate) fn recover_traced(&self, kill_at: Option<usize>) -> Traced {
        let mut command = self.command();
        command
            .arg("recover")
            .arg("--root")
            .arg(&self.installation.install_root);
        run_traced(&command, &helper_injection(), kill_at)
    }

    /// Names in the pending journal's directory, sorted.
    pub(crate) fn journal_entries(&self) -> Vec<String> {
        sorted_names(
            &self
                .installation
                .install_root
                .join(".execution-transaction"),
        )
    }

    /// `recover --root <install root>`.
    pub(crate) fn recover(&self) -> Outcome {
        self.manage(&[
            "recover".as_ref(),
            "--root".as_ref(),
            self.installation.install_root.as_os_str(),
        ])
    }

    /// `inspect --root <install root>`.
    pub(crate) fn inspect(&self) -> Outcome {
        self.manage(&[
            "inspect".as_ref(),
            "--root".as_ref(),
            self.installation.install_root.as_os_str(),
        ])
    }

    /// The files an activation may change.
    pub(crate) fn disk(&self) -> Disk {
        let root = &self.installation.install_root;
        let units = self.sandbox.unit_dir();
        Disk {
            worker_unit: file_state(&units.join(WORKER_UNIT)),
            gateway_unit: file_state(&units.join(GATEWAY_UNIT)),
            manifest: file_state(&root.join("execution-layout.json")),
            current: fs::read_link(root.join("current")).ok(),
            install_entries: sorted_names(root)
                .into_iter()
                .filter(|name| !name.starts_with(".execution-completed-"))
                .collect(),
            wants: sorted_names(&units.join("default.target.wants")),
        }
    }

    /// The files exactly as a finished activation of `layout` leaves them.
    pub(crate) fn assert_files_of(&self, layout: &ExecutionLayout) {
        let disk = self.disk();
        let unit = |role| Some((render_service(layout, role).expect("render"), 0o600));
        assert!(disk.worker_unit == unit("worker"), "worker unit");
        assert!(disk.gateway_unit == unit("gateway"), "gateway unit");
        let manifest = encode_indented(&layout_manifest(layout).expect("manifest"));
        assert!(disk.manifest == Some((manifest, 0o600)), "layout manifest");
        assert_eq!(
            disk.current.as_deref(),
            Some(layout.gateway_release.as_path())
        );
        assert_eq!(
            disk.wants,
            vec![GATEWAY_UNIT.to_string(), WORKER_UNIT.to_string()],
            "both services stay enabled"
        );
    }

    /// The pending journal (`.execution-transaction/manifest.json`), if any.
    pub(crate) fn pending_journal(&self) -> Option<Json> {
        let path = self
            .installation
            .install_root
            .join(".execution-transaction/manifest.json");
        parse_json(&fs::read(path).ok()?).ok()
    }

    /// The phase of the pending journal, if any.
    pub(crate) fn pending_phase(&self) -> Option<String> {
        Some(self.pending_journal()?.get("phase")?.as_str()?.to_string())
    }

    /// Every retired journal (`.execution-completed-<id>/manifest.json`).
    pub(crate) fn completed_journals(&self) -> Vec<Json> {
        let root = &self.installation.install_root;
        sorted_names(root)
            .into_iter()
            .filter(|name| name.starts_with(".execution-completed-"))
            .map(|name| {
                let data = fs::read(root.join(&name).join("manifest.json"))
                    .expect("a retired journal keeps its manifest");
                let journal = parse_json(&data).expect("a retired journal is JSON");
                assert_eq!(
                    journal.get("id").and_then(Json::as_str),
                    name.strip_prefix(".execution-completed-"),
                    "retired under its own id"
                );
                journal
            })
            .collect()
    }

    /// Exactly one retired journal and no pending one; returns it.
    pub(crate) fn only_retired_journal(&self) -> Json {
        assert!(self.pending_journal().is_none(), "no journal is pending");
        assert!(
            !self
                .installation
                .install_root
                .join(".execution-transaction")
                .exists(),
            "the journal directory is gone"
        );
        let mut journals = self.completed_journals();
        assert_eq!(journals.len(), 1, "exactly one retired journal");
        journals.remove(0)
    }

    /// Waits until systemd runs both services from the releases of `layout`
    /// (each receipt naming its MainPID) and public health reports both
    /// versions; returns who runs.
    pub(crate) fn assert_serving(&self, layout: &ExecutionLayout) -> Serving {
        let installation = &self.installation;
        let (worker, worker_pid) =
            installation.wait_for_service(&self.sandbox, WORKER_UNIT, Role::Worker);
        let (gateway, gateway_pid) =
            installation.wait_for_service(&self.sandbox, GATEWAY_UNIT, Role::Gateway);
        let text = |receipt: &Json, key: &str| {
            receipt
                .get(key)
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            text(&worker, "release_root"),
            layout.worker_release.to_string_lossy(),
            "worker release"
        );
        assert_eq!(
            text(&gateway, "release_root"),
            layout.gateway_release.to_string_lossy(),
            "gateway release (resolved through current)"
        );
        let health = self.public_health();
        let version = |component: &str| {
            health
                .get(component)
                .and_then(|identity| identity.get("version"))
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let release_version = |release: &Path| {
            release
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(version("gateway"), release_version(&layout.gateway_release));
        assert_eq!(
            version("execution_service"),
            release_version(&layout.worker_release)
        );
        Serving {
            worker_pid,
            worker_instance_id: text(&worker, "instance_id"),
            gateway_pid,
        }
    }

    /// Authenticated public health through the gateway.
    pub(crate) fn public_health(&self) -> Json {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        poll_until(SERVICE_TIMEOUT, "public health", || {
            let response = HttpRequest::get("/api/health")
                .bearer(AGENT_TOKEN)
                .send(address)
                .ok()?;
            (response.status == 200).then(|| response.json())
        })
    }

    /// The `server_identity` public health reports.
    pub(crate) fn server_identity(&self) -> String {
        self.public_health()
            .get("server_identity")
            .and_then(Json::as_str)
            .expect("health carries the server identity")
            .to_string()
    }

    /// The running worker's lease (`null` when nothing holds admission).
    pub(crate) fn worker_lease(&self) -> Json {
        self.installation.worker_lease()
    }

    /// Takes the worker's admission for another operation, as a concurrent
    /// maintenance client would; returns the lease.
    pub(crate) fn acquire_foreign_lease(&self, operation: &str) -> Json {
        let receipt = self.installation.receipt(Role::Worker).expect("receipt");
        let body = Json::Object(json_object! {
            "action" => "acquire",
            "expected_worker_instance_id" => receipt.get("instance_id").cloned().unwrap_or(Json::Null),
            "operation_id" => operation,
        });
        let response = HttpRequest::post_json(
            MAINTENANCE,
            python_compat::json::encode_compact(&body).expect("encode"),
        )
        .bearer(&self.installation.control_token())
        .send(self.installation.worker_callback())
        .expect("the worker answers maintenance");
        assert_eq!(response.status, 200, "acquire: {:?}", response.detail());
        response.json().get("lease").cloned().expect("a lease")
    }

    /// How many requests a role has logged so far (a mark for [`Site::requests_since`]).
    pub(crate) fn request_mark(&self, role: Role) -> usize {
        self.installation.requests(role).len()
    }

    /// The requests a role logged after `mark`.
    pub(crate) fn requests_since(&self, role: Role, mark: usize) -> Vec<RequestRecord> {
        self.installation.requests_since(role, mark)
    }

    /// Replaces a role's misbehaviour switches.
    pub(crate) fn switch(&self, role: Role, switches: Switches) {
        self.installation.set_switches(role, &switches);
    }

    /// Waits until the role logged a request matching `accept` after `mark`.
    pub(crate) fn wait_for_request(
        &self,
        role: Role,
        mark: usize,
        what: &str,
        accept: impl Fn(&RequestRecord) -> bool,
    ) -> RequestRecord {
        poll_until(HELPER_TIMEOUT, what, || {
            self.requests_since(role, mark)
                .into_iter()
                .find(|record| accept(record))
        })
    }

    /// Waits until the pending journal reaches one of `phases`.
    pub(crate) fn wait_for_phase(&self, phases: &[&str]) -> String {
        poll_until(HELPER_TIMEOUT, &format!("journal phase {phases:?}"), || {
            self.pending_phase()
                .filter(|phase| phases.contains(&phase.as_str()))
        })
    }

    /// No installation lock is left behind.
    pub(crate) fn assert_unlocked(&self) {
        let lock = self.installation.install_root.join(".install-lock");
        assert!(
            fs::symlink_metadata(&lock).is_err(),
            "{} is left behind",
            lock.display()
        );
    }
}

/// Waits for a helper started in the background and collects its outcome;
/// a helper still running after two [`HELPER_TIMEOUT`]s is killed and fails
/// the test.
pub(crate) fn finish(mut child: Child) -> Outcome {
    let waited = agents_tests::try_poll_until(2 * HELPER_TIMEOUT, "the helper to exit", || {
        child.try_wait().expect("wait for the helper")
    });
    if let Err(message) = waited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{message}");
    }
    Outcome::from(child.wait_with_output().expect("collect the helper output"))
}

/// `recover`'s stdout after a rollback to the release named by `receipt`
/// (a [`receipt_line`]).
pub(crate) fn rolled_back_line(receipt: &str) -> String {
    format!("{{\"ok\": true, \"phase\": \"rolled-back\", \"receipt\": {receipt}}}\n")
}

/// The control requests (status and maintenance) of one worker instance, as
/// `GET status` / `POST <action>` words, in the order the worker saw them.
pub(crate) fn control_requests(records: &[RequestRecord], instance_id: &str) -> Vec<String> {
    records
        .iter()
        .filter(|record| record.instance_id == instance_id && record.path.starts_with("/api/admin"))
        .map(|record| {
            assert_eq!(record.credential, "control", "control token on {record:?}");
            assert_eq!(
                record.listener, "callback",
                "private listener for {record:?}"
            );
            match &record.action {
                Some(action) => format!("POST {action}"),
                None => format!("{} status", record.method),
            }
        })
        .collect()
}

/// The distinct worker instances, in the order they first logged a request.
pub(crate) fn instances(records: &[RequestRecord]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for record in records {
        if !seen.contains(&record.instance_id) {
            seen.push(record.instance_id.clone());
        }
    }
    seen
}

/// `json.dumps(receipt, sort_keys=True)` of an activation receipt, written
/// out by hand from Python's format (`", "` and `": "` separators).
pub(crate) fn receipt_line(
    serving: &Serving,
    layout: &ExecutionLayout,
    server_identity: &str,
    maintenance_held: bool,
) -> String {
    let version = |release: &Path| {
        release
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    format!(
        "{{\"gateway_pid\": {}, \"gateway_version\": \"{}\", \"maintenance_held\": {}, \
         \"protocol_version\": 1, \"server_identity\": \"{}\", \"worker_instance_id\": \"{}\", \
         \"worker_pid\": {}, \"worker_release\": \"{}\", \"worker_version\": \"{}\"}}",
        serving.gateway_pid,
        version(&layout.gateway_release),
        maintenance_held,
        server_identity,
        serving.worker_instance_id,
        serving.worker_pid,
        layout.worker_release.display(),
        version(&layout.worker_release),
    )
}

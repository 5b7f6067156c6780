//! `execution_manage.WorkerControl`: the helpers' authenticated client of the
//! running worker (its private callback listener) and of public health.
//!
//! Every request goes through [`request_json`], pinned to the PID that the
//! native service manager reports, and is preceded by a re-check that the
//! worker's receipt (`worker.json`) and the manager still agree, so a control
//! token is never sent to a process of another epoch. Each reply is then
//! checked against that receipt before the helpers act on it.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::{exists, is_symlink};
use crate::fs::{normalize_path, owned_directory, read_file, read_secret, MAX_CONFIG_BYTES};
use crate::http::url_split;
use crate::http::{request_json, PinnedRequest};
use crate::layout::{ExecutionLayout, PROTOCOL_VERSION};
use crate::platform::PlatformName;
use crate::role::Role;
use crate::services::NativeServices;
use python_compat::shlex;
use python_compat::{
    decode_utf8, is_space,
    json::{parse_json, Json, JsonObject},
    splitlines, strip,
};

const STATUS_PATH: &str = "/api/admin/execution/status";
const MAINTENANCE_PATH: &str = "/api/admin/execution/maintenance";
const HEALTH_PATH: &str = "/api/health";
/// Agent-token variables, in the order the server itself prefers them.
const TOKEN_VARIABLES: [&str; 4] = [
    "AGENTSDOCK_AGENT_TOKEN",
    "ZENITHDOCK_AGENT_TOKEN",
    "ZENITHBOT_AGENT_TOKEN",
    "AGENT_TOKEN",
];

/// The worker's reply after a sealing `seal_for_stop`: whose receipt granted
/// the hold, and the sealed lease it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SealedHold {
    /// The `worker.json` receipt the hold was granted under.
    pub record: JsonObject,
    /// The sealed lease (`lease_id`, `operation_id`, `sealed: true`, ...).
    pub lease: JsonObject,
}

/// Client of the worker's private control endpoints and of authenticated
/// health, as `execution_manage.WorkerControl`.
pub struct WorkerControl<'a> {
    timeout: f64,
    services: Option<&'a dyn ServiceSnapshot>,
}

impl Default for WorkerControl<'_> {
    fn default() -> Self {
        WorkerControl {
            timeout: 5.0,
            services: None,
        }
    }
}

impl<'a> WorkerControl<'a> {
    /// A client with Python's defaults: 5 s per request, and native service
    /// state read through a fresh [`NativeServices`] of the layout each time.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the overall timeout of each request, in seconds.
    pub fn request_timeout(mut self, seconds: f64) -> Self {
        self.timeout = seconds;
        self
    }

    /// Reads native service state through `services` (a [`NativeServices`]
    /// with any command runner, or a test double) instead of a fresh manager
    /// client of the layout.
    pub fn services(mut self, services: &'a dyn ServiceSnapshot) -> Self {
        self.services = Some(services);
        self
    }

    /// The validated `worker.json` receipt of the running worker: a worker
    /// role of protocol 1 with a positive PID, a non-empty instance ID, an
    /// exact `http://127.0.0.1:<port>` callback origin and a release under
    /// this installation's `releases/`.
    pub fn worker_record(&self, layout: &ExecutionLayout) -> Result<JsonObject> {
        let runtime_dir = layout.runtime_dir();
        owned_directory(&runtime_dir, true)?;
        let (data, _mode) = read_file(&runtime_dir.join("worker.json"), true)?;
        let record = match parse_json(&data)? {
            Json::Object(record) => Some(record),
            _ => None,
        };
        let record = record
            .filter(|record| {
                record.get("role").and_then(Json::as_str) == Some("worker")
                    && record.get("protocol") == Some(&Json::from(PROTOCOL_VERSION))
                    && record
                        .get("pid")
                        .and_then(Json::as_int)
                        .is_some_and(|pid| pid > 0)
                    && record
                        .get("instance_id")
                        .and_then(Json::as_str)
                        .is_some_and(|id| !id.is_empty())
            })
            .ok_or_else(|| Error::runtime("worker process receipt is invalid"))?;
        check_callback_origin(record.get("callback_origin"))?;
        let release = normalize_path(Path::new(
            record
                .get("release_root")
                .and_then(Json::as_str)
                .unwrap_or(""),
        ))?;
        if release.parent().unwrap_or(Path::new("/")) != layout.install_root.join("releases") {
            return Err(Error::runtime(
                "worker receipt release is outside this installation",
            ));
        }
        Ok(record)
    }

    /// The worker's receipt and its private status (`idle`, `blockers`,
    /// `lease`), checked to come from the same worker instance.
    pub fn status(&self, layout: &ExecutionLayout) -> Result<(JsonObject, JsonObject)> {
        let record = self.worker_record(layout)?;
        let token = read_secret(&layout.runtime_dir().join("control.token"))?;
        let result = self.callback_request(layout, &record, STATUS_PATH, &token, None)?;
        if result.get("worker_instance_id") != record.get("instance_id")
            || result.get("idle").and_then(Json::as_bool).is_none()
        {
            return Err(Error::runtime(
                "private worker status does not match its process receipt",
            ));
        }
        Ok((record, result))
    }

    /// One maintenance action (`acquire`, `renew`, `seal`, `release`) for
    /// `operation` on the worker of `record`; `lease_id` is sent unless it is
    /// absent or null. Returns the worker's status after the action.
    pub fn maintenance(
        &self,
        layout: &ExecutionLayout,
        record: &JsonObject,
        action: &str,
        operation: &str,
        lease_id: Option<&Json>,
    ) -> Result<JsonObject> {
        let mut payload = JsonObject::new();
        payload.insert("action", action);
        payload.insert(
            "expected_worker_instance_id",
            record.get("instance_id").cloned().unwrap_or(Json::Null),
        );
        payload.insert("operation_id", operation);
        if let Some(lease_id) = lease_id.filter(|id| !id.is_null()) {
            payload.insert("lease_id", lease_id.clone());
        }
        let token = read_secret(&layout.runtime_dir().join("control.token"))?;
        let payload = Json::Object(payload);
        let result =
            self.callback_request(layout, record, MAINTENANCE_PATH, &token, Some(&payload))?;
        if result.get("worker_instance_id") != record.get("instance_id") {
            return Err(Error::runtime(
                "worker changed during maintenance admission",
            ));
        }
        Ok(result)
    }

    /// Before stopping the worker whose native PID is `native_pid`: acquire
    /// (unless `operation` already holds it) and seal an idle admission hold,
    /// so no new work starts in the process about to stop.
    pub fn seal_for_stop(
        &self,
        layout: &ExecutionLayout,
        operation: &str,
        native_pid: i64,
    ) -> Result<SealedHold> {
        let (record, mut status) = self.status(layout)?;
        if record.get("pid") != Some(&Json::from(native_pid)) {
            return Err(Error::runtime(
                "native service does not own the worker that granted admission",
            ));
        }
        if status.get("lease").is_none_or(Json::is_null) {
            status = self.maintenance(layout, &record, "acquire", operation, None)?;
        }
        let lease = status
            .get("lease")
            .and_then(Json::as_object)
            .filter(|lease| {
                lease.get("operation_id").and_then(Json::as_str) == Some(operation)
                    && lease
                        .get("lease_id")
                        .and_then(Json::as_str)
                        .is_some_and(|id| !id.is_empty())
            })
            .ok_or_else(|| Error::runtime("another operation owns worker maintenance admission"))?;
        let lease_id = lease.get("lease_id").cloned().unwrap_or(Json::Null);
        let sealed = self.maintenance(layout, &record, "seal", operation, Some(&lease_id))?;
        let lease = sealed
            .get("lease")
            .and_then(Json::as_object)
            .filter(|lease| {
                sealed.get("idle").and_then(Json::as_bool) == Some(true)
                    && lease.get("lease_id") == Some(&lease_id)
                    && lease.get("operation_id").and_then(Json::as_str) == Some(operation)
                    && lease.get("sealed").and_then(Json::as_bool) == Some(true)
            })
            .ok_or_else(|| Error::runtime("worker did not seal an idle admission hold"))?
            .clone();
        Ok(SealedHold { record, lease })
    }

    /// Requires the candidate worker to be idle and still hold the sealed
    /// startup lease of `operation` (it takes one when it starts during an
    /// activation).
    pub fn require_startup_hold(&self, layout: &ExecutionLayout, operation: &str) -> Result<()> {
        let (_record, status) = self.status(layout)?;
        let held = status.get("idle").and_then(Json::as_bool) == Some(true)
            && status
                .get("lease")
                .and_then(Json::as_object)
                .is_some_and(|lease| {
                    lease.get("operation_id").and_then(Json::as_str) == Some(operation)
                        && lease.get("sealed").and_then(Json::as_bool) == Some(true)
                });
        if !held {
            return Err(Error::runtime(
                "candidate worker did not retain its activation startup hold",
            ));
        }
        Ok(())
    }

    /// Releases `operation`'s admission hold, if the worker still has one.
    pub fn release(&self, layout: &ExecutionLayout, operation: &str) -> Result<()> {
        let (record, status) = self.status(layout)?;
        let Some(lease) = status.get("lease").filter(|lease| !lease.is_null()) else {
            return Ok(());
        };
        let lease = lease
            .as_object()
            .filter(|lease| lease.get("operation_id").and_then(Json::as_str) == Some(operation))
            .ok_or_else(|| Error::runtime("another operation owns the worker admission hold"))?;
        let result =
            self.maintenance(layout, &record, "release", operation, lease.get("lease_id"))?;
        if result.get("lease").is_some_and(|lease| !lease.is_null()) {
            return Err(Error::runtime("worker admission hold was not released"));
        }
        Ok(())
    }

    /// `GET /api/health` on the worker's own callback listener (agent token).
    pub fn callback_health(
        &self,
        layout: &ExecutionLayout,
        record: &JsonObject,
    ) -> Result<JsonObject> {
        let token = agent_token(layout)?;
        self.callback_request(layout, record, HEALTH_PATH, &token, None)
    }

    /// Authenticated public health through the layout's listener, pinned to
    /// the running gateway (or to the worker of a pre-gateway install).
    pub fn health(&self, layout: &ExecutionLayout) -> Result<JsonObject> {
        let host = match layout.bind.as_str() {
            "0.0.0.0" | "localhost" => "127.0.0.1",
            "::" | "[::]" | "::1" | "[::1]" => "::1",
            bind => bind,
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let native = self.native(layout)?;
        let role = if native.state(Role::Gateway) == Some("running") {
            Role::Gateway
        } else {
            Role::Worker
        };
        if role == Role::Worker
            && (native.state(Role::Gateway) != Some("absent")
                || exists(&layout.manifest_path())?
                || is_symlink(&layout.manifest_path())?)
        {
            return Err(Error::runtime(
                "public credentials require the installed native gateway",
            ));
        }
        let pid = native.running_pid(role)?;
        let mut verify_owner = || {
            if self.native(layout)?.running_pid(role)? != pid {
                return Err(Error::runtime(
                    "native health endpoint changed before credentials were sent",
                ));
            }
            Ok(())
        };
        let url = format!("http://{host}:{}{HEALTH_PATH}", port_text(&layout.port));
        let token = agent_token(layout)?;
        self.pinned(&url, &token, None, pid, &layout.platform, &mut verify_owner)
    }

    /// The activation receipt: public health must show the gateway and the
    /// worker of `worker.json` (protocol 1, same instance and PID, the
    /// layout's worker release), and `services` must own exactly those PIDs.
    pub fn receipt(
        &self,
        layout: &ExecutionLayout,
        services: &dyn ServiceSnapshot,
    ) -> Result<JsonObject> {
        let health = self.health(layout)?;
        let record = self.worker_record(layout)?;
        let gateway = health.get("gateway").and_then(Json::as_object);
        let worker = health.get("execution_service").and_then(Json::as_object);
        let protocol = Json::from(PROTOCOL_VERSION);
        let worker_release = python_compat::path::pure_path(&layout.worker_release)
            .to_str()
            .map(str::to_string);
        let (gateway, worker) = match (gateway, worker) {
            (Some(gateway), Some(worker))
                if health.get("ok").and_then(Json::as_bool) == Some(true)
                    && gateway.get("protocol") == Some(&protocol)
                    && worker.get("protocol") == Some(&protocol)
                    && worker.get("instance_id") == record.get("instance_id")
                    && worker.get("pid") == record.get("pid")
                    && record.get("release_root").and_then(Json::as_str)
                        == worker_release.as_deref() =>
            {
                (gateway, worker)
            }
            _ => {
                return Err(Error::runtime(
                    "authenticated gateway/worker health does not match owned runtime receipts",
                ))
            }
        };
        let native = Native::of(services)?;
        if native.pid(Role::Worker) != worker.get("pid").unwrap_or(&Json::Null)
            || native.pid(Role::Gateway) != gateway.get("pid").unwrap_or(&Json::Null)
        {
            return Err(Error::runtime(
                "native services do not own the authenticated component processes",
            ));
        }
        let field = |object: &JsonObject, key: &str| object.get(key).cloned().unwrap_or(Json::Null);
        let mut receipt = JsonObject::new();
        receipt.insert("gateway_version", field(gateway, "version"));
        receipt.insert("worker_version", field(worker, "version"));
        receipt.insert("worker_release", field(&record, "release_root"));
        receipt.insert("protocol_version", PROTOCOL_VERSION);
        receipt.insert("server_identity", field(&health, "server_identity"));
        receipt.insert("gateway_pid", field(gateway, "pid"));
        receipt.insert("worker_pid", field(worker, "pid"));
        receipt.insert("worker_instance_id", field(worker, "instance_id"));
        receipt.insert("maintenance_held", field(worker, "maintenance_held"));
        Ok(receipt)
    }

    /// A request to the callback origin of `record`, pinned to its PID, sent
    /// only while the native worker and the on-disk receipt still match it.
    fn callback_request(
        &self,
        layout: &ExecutionLayout,
        record: &JsonObject,
        path: &str,
        token: &str,
        body: Option<&Json>,
    ) -> Result<JsonObject> {
        let record_pid = record.get("pid").and_then(Json::as_int);
        let mut verify_owner = || {
            let native_pid = self.native(layout)?.running_pid(Role::Worker)?;
            if Some(native_pid) != record_pid || self.worker_record(layout)? != *record {
                return Err(Error::runtime(
                    "native worker or callback receipt changed before credentials were sent",
                ));
            }
            Ok(())
        };
        verify_owner()?;
        let origin = record
            .get("callback_origin")
            .and_then(Json::as_str)
            .unwrap_or("");
        let pid = record_pid.unwrap_or(0);
        self.pinned(
            &format!("{origin}{path}"),
            token,
            body,
            pid,
            &layout.platform,
            &mut verify_owner,
        )
    }

    fn pinned(
        &self,
        url: &str,
        token: &str,
        body: Option<&Json>,
        pid: i128,
        platform: &PlatformName,
        verify_owner: &mut dyn FnMut() -> Result<()>,
    ) -> Result<JsonObject> {
        request_json(
            url,
            token,
            // A PID beyond i64 has no /proc entry either: never proven.
            PinnedRequest::new(
                i64::try_from(pid).unwrap_or(i64::MAX),
                platform,
                verify_owner,
            )
            .body(body)
            .timeout(self.timeout)
            .maximum_body(MAX_CONFIG_BYTES as i64),
        )
    }

    fn native(&self, layout: &ExecutionLayout) -> Result<Native> {
        match self.services {
            Some(services) => Native::of(services),
            None => Native::of(&NativeServices::new(layout)?),
        }
    }
}

/// The native service manager's view that `WorkerControl` acts on:
/// `NativeServices.snapshot()` in its Python dict shape. Implemented by
/// [`NativeServices`]; a test can script the manager with its own.
pub trait ServiceSnapshot {
    /// `{"worker": {...}, "gateway": {...}}`, each with `state` (`absent`,
    /// `stopped` or `running`), `enabled` and, when running, the main `pid`.
    fn snapshot_json(&self) -> Result<JsonObject>;
}

impl ServiceSnapshot for NativeServices {
    fn snapshot_json(&self) -> Result<JsonObject> {
        match self.snapshot()?.to_json() {
            Json::Object(states) => Ok(states),
            _ => unreachable!("ServiceStates::to_json builds an object"),
        }
    }
}

/// One native snapshot, read the way the original reads the dict.
struct Native(JsonObject);

impl Native {
    fn of(services: &dyn ServiceSnapshot) -> Result<Self> {
        services.snapshot_json().map(Native)
    }

    fn role(&self, role: Role) -> Option<&JsonObject> {
        self.0.get(role.as_str()).and_then(Json::as_object)
    }

    fn state(&self, role: Role) -> Option<&str> {
        self.role(role)?.get("state").and_then(Json::as_str)
    }

    /// `native[role].get("pid")`, `null` when absent.
    fn pid(&self, role: Role) -> &Json {
        self.role(role)
            .and_then(|state| state.get("pid"))
            .unwrap_or(&Json::Null)
    }

    /// `_running_pid`: the role must be running with an int PID above 1.
    fn running_pid(&self, role: Role) -> Result<i128> {
        match self.pid(role).as_int() {
            Some(pid) if self.state(role) == Some("running") && pid > 1 => Ok(pid),
            _ => Err(Error::runtime(
                "credential endpoint has no running native owner",
            )),
        }
    }
}

/// `worker.json`'s `callback_origin` must be exactly `http://127.0.0.1:<port>`.
fn check_callback_origin(origin: Option<&Json>) -> Result<()> {
    let not_loopback = || Error::runtime("worker callback receipt is not an exact loopback origin");
    // Python splits "" for a missing or falsy value; any other non-string
    // fails in urlsplit (refused here with the same RuntimeError).
    let origin = match origin {
        None => "",
        Some(Json::Str(text)) => text.as_str(),
        Some(_) => return Err(not_loopback()),
    };
    let parts = url_split(origin)?;
    if parts.scheme != "http" || parts.hostname().as_deref() != Some("127.0.0.1") {
        return Err(not_loopback());
    }
    let exact = parts.port()?.is_some_and(|port| port != 0)
        && parts.path.is_empty()
        && parts.query.is_empty()
        && parts.fragment.is_empty()
        && parts.username().is_none_or(str::is_empty)
        && parts.password().is_none_or(str::is_empty);
    if !exact {
        return Err(not_loopback());
    }
    Ok(())
}

/// The preserved server token for authenticated health: the first non-empty
/// of the token variables, from `config_root/env` (single-word values, read
/// privately) over the layout's environment.
fn agent_token(layout: &ExecutionLayout) -> Result<String> {
    let mut values: Vec<(String, String)> = layout
        .environment_variables()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    match read_file(&layout.config_root.join("env"), true) {
        Err(err) if err.is_not_found() => {}
        Err(err) => return Err(err),
        Ok((data, _mode)) => {
            for line in splitlines(decode_utf8(&data)?) {
                if strip(line).is_empty() || line.trim_start_matches(is_space).starts_with('#') {
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let mut words = shlex::split(value)?;
                if words.len() == 1 {
                    let word = words.remove(0);
                    match values.iter_mut().find(|(existing, _)| existing == key) {
                        Some(entry) => entry.1 = word,
                        None => values.push((key.to_string(), word)),
                    }
                }
            }
        }
    }
    TOKEN_VARIABLES
        .iter()
        .find_map(|name| {
            values
                .iter()
                .find(|(key, value)| key == name && !value.is_empty())
                .map(|(_, value)| value.clone())
        })
        .ok_or_else(|| {
            Error::runtime("authenticated activation health requires the preserved server token")
        })
}

/// `str(port)` of the layout's port (an int once validated).
fn port_text(port: &Json) -> String {
    match port {
        Json::Int(port) => port.to_string(),
        Json::Bool(true) => "True".to_string(),
        Json::Bool(false) => "False".to_string(),
        other => python_compat::json::encode_line(other, false),
    }
}

//! An installed layout on real files, and an in-process worker double that
//! speaks the private control protocol on a real loopback port owned by this
//! test process (so the PID-pinned client proves it owns the connection).

// Fixture plumbing whose names say what each item is; documenting every
// field would repeat them.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::files::{make_dir, write_file};
use crate::install_base::InstallBase;
use crate::loopback_peers::{Request, ScriptedServer};
use agents_common::{ExecutionLayout, ServiceSnapshot};
use python_compat::{
    json::{encode_compact, parse_json, Json, JsonObject},
    json_object,
};

pub const CONTROL_TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const INSTANCE_ID: &str = "4f1c0b7e9a2d4e6f8a0b1c2d3e4f5a6b";
pub const OPERATION: &str = "85efcaaf-5f93-5352-b00d-95a2551e6a7c";

pub fn own_pid() -> i64 {
    i64::from(std::process::id())
}

/// A validated layout over a fresh base, with the runtime directory, the
/// control token and (once a double runs) a worker receipt.
pub struct Installed {
    pub base: InstallBase,
    pub layout: ExecutionLayout,
}

impl Installed {
    pub fn new(tag: &str) -> Self {
        Self::with_layout(tag, |_| {})
    }

    /// Like `new`, editing the serialized layout first (bind, environment...).
    pub fn with_layout(tag: &str, edit: impl FnOnce(&mut JsonObject)) -> Self {
        let base = InstallBase::new(tag);
        base.release("1.0.0");
        let mut dict = base.layout("Linux", "1.0.0", "1.0.0");
        edit(&mut dict);
        let layout = ExecutionLayout::from_dict(&Json::Object(dict)).expect("valid layout");
        let runtime = layout.runtime_dir();
        make_dir(&runtime, 0o700);
        write_file(
            &runtime.join("control.token"),
            CONTROL_TOKEN.as_bytes(),
            0o600,
        );
        Installed { base, layout }
    }

    pub fn runtime(&self) -> PathBuf {
        self.layout.runtime_dir()
    }

    pub fn release_root(&self) -> String {
        self.base
            .join("install/releases/1.0.0")
            .to_str()
            .unwrap()
            .to_string()
    }

    /// The receipt a worker listening on `port` with this process's PID writes.
    pub fn record(&self, port: u16) -> JsonObject {
        let mut record = JsonObject::new();
        record.insert("callback_origin", format!("http://127.0.0.1:{port}"));
        record.insert("instance_id", INSTANCE_ID);
        record.insert("pid", own_pid());
        record.insert("protocol", 1_i64);
        record.insert("public_bind", "127.0.0.1");
        record.insert("public_port", 7850_i64);
        record.insert("release_root", self.release_root());
        record.insert("role", "worker");
        record
    }

    /// Writes `worker.json` (0600) from `record`.
    pub fn write_record(&self, record: &JsonObject) {
        self.write_receipt_bytes(&encode_compact(&Json::Object(record.clone())).unwrap());
    }

    pub fn write_receipt_bytes(&self, data: &[u8]) {
        let path = self.runtime().join("worker.json");
        let _ = std::fs::remove_file(&path);
        write_file(&path, data, 0o600);
    }

    /// Writes `config_root/env` (0600).
    pub fn write_env(&self, data: &[u8], mode: u32) {
        let path = self.layout.config_root.join("env");
        let _ = std::fs::remove_file(&path);
        write_file(&path, data, mode);
    }
}

/// What the worker double answers; tests edit it while the double runs.
pub struct WorkerState {
    pub instance_id: String,
    pub idle: Json,
    /// `null` or the lease object.
    pub lease: Json,
    /// Replaces every status reply when set.
    pub status_reply: Option<Json>,
    /// Replaces the reply to the maintenance action of this name when set.
    pub maintenance_reply: Vec<(String, Json)>,
    /// The body of `/api/health`.
    pub health: Json,
    next_lease: u32,
}

impl Default for WorkerState {
    fn default() -> Self {
        WorkerState {
            instance_id: INSTANCE_ID.to_string(),
            idle: Json::Bool(true),
            lease: Json::Null,
            status_reply: None,
            maintenance_reply: Vec::new(),
            health: Json::Object(JsonObject::new()),
            next_lease: 1,
        }
    }
}

impl WorkerState {
    fn status(&self) -> Json {
        let mut status = JsonObject::new();
        status.insert("worker_instance_id", self.instance_id.as_str());
        status.insert("idle", self.idle.clone());
        status.insert("blockers", JsonObject::new());
        status.insert("lease", self.lease.clone());
        Json::Object(status)
    }

    /// The lease rules of the real worker, enough for the client's paths.
    fn maintenance(&mut self, body: &JsonObject) -> Json {
        let action = body.get("action").and_then(Json::as_str).unwrap_or("");
        if let Some((_, reply)) = self
            .maintenance_reply
            .iter()
            .find(|(name, _)| name == action)
        {
            return reply.clone();
        }
        let operation = body.get("operation_id").cloned().unwrap_or(Json::Null);
        match action {
            "acquire" if self.lease.is_null() => {
                let mut lease = JsonObject::new();
                lease.insert("lease_id", format!("lease-{}", self.next_lease));
                lease.insert("operation_id", operation);
                lease.insert("sealed", false);
                lease.insert("expires_at", 1.0e10);
                self.next_lease += 1;
                self.lease = Json::Object(lease);
            }
            "seal" => {
                if let Json::Object(lease) = &mut self.lease {
                    lease.insert("sealed", true);
                    lease.insert("expires_at", Json::Null);
                }
            }
            "release" => self.lease = Json::Null,
            _ => {}
        }
        self.status()
    }
}

/// The in-process worker: a scripted server on 127.0.0.1 following `state`.
pub struct WorkerDouble {
    pub server: ScriptedServer,
    pub state: Arc<Mutex<WorkerState>>,
}

impl WorkerDouble {
    pub fn start() -> Self {
        Self::start_on("127.0.0.1:0")
    }

    /// A double listening on `bind` (for public-health tests on `[::1]`).
    pub fn start_on(bind: &str) -> Self {
        let state = Arc::new(Mutex::new(WorkerState::default()));
        let shared = state.clone();
        let server = ScriptedServer::start(bind, move |request: &Request| {
            let mut state = shared.lock().unwrap();
            let reply = match request.target.as_str() {
                "/api/admin/execution/status" => {
                    state.status_reply.clone().unwrap_or_else(|| state.status())
                }
                "/api/admin/execution/maintenance" => {
                    let body = parse_json(&request.body).expect("JSON maintenance body");
                    state.maintenance(body.as_object().expect("object body"))
                }
                _ => state.health.clone(),
            };
            let body = encode_compact(&reply).unwrap();
            let mut response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            response.extend_from_slice(&body);
            response
        });
        WorkerDouble { server, state }
    }

    pub fn port(&self) -> u16 {
        self.server.address.port()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }

    pub fn edit(&self, change: impl FnOnce(&mut WorkerState)) {
        change(&mut self.state.lock().unwrap());
    }
}

/// The parsed JSON body of a maintenance request.
pub fn body_of(request: &Request) -> JsonObject {
    parse_json(&request.body)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

/// A lease object as the worker reports it.
pub fn lease(lease_id: &str, operation: &str, sealed: bool) -> Json {
    let mut lease = JsonObject::new();
    lease.insert("lease_id", lease_id);
    lease.insert("operation_id", operation);
    lease.insert("sealed", sealed);
    lease.insert(
        "expires_at",
        if sealed {
            Json::Null
        } else {
            Json::Float(1.0e10)
        },
    );
    Json::Object(lease)
}

/// What a test runs when the service manager is asked the nth time.
type Hook = Box<dyn FnOnce() + Send>;

/// A native service manager stand-in: each `snapshot_json` call returns the
/// next scripted snapshot (the last one repeats) and runs the call's hook,
/// so a test can change the world between the pre-check and the re-check.
pub struct FakeServices {
    snapshots: Mutex<Vec<JsonObject>>,
    hooks: Mutex<Vec<(usize, Hook)>>,
    calls: Mutex<usize>,
}

impl FakeServices {
    pub fn new(snapshots: Vec<JsonObject>) -> Self {
        FakeServices {
            snapshots: Mutex::new(snapshots),
            hooks: Mutex::new(Vec::new()),
            calls: Mutex::new(0),
        }
    }

    /// Worker running with this process's PID, gateway as given.
    pub fn worker_running(gateway: JsonObject) -> Self {
        Self::new(vec![native(running(own_pid()), gateway)])
    }

    /// Runs `hook` when call number `call` (1-based) happens.
    pub fn on_call(self, call: usize, hook: impl FnOnce() + Send + 'static) -> Self {
        self.hooks.lock().unwrap().push((call, Box::new(hook)));
        self
    }

    pub fn calls(&self) -> usize {
        *self.calls.lock().unwrap()
    }
}

impl ServiceSnapshot for FakeServices {
    fn snapshot_json(&self) -> agents_common::Result<JsonObject> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        let mut hooks = self.hooks.lock().unwrap();
        if let Some(index) = hooks.iter().position(|(at, _)| *at == call) {
            (hooks.remove(index).1)();
        }
        let snapshots = self.snapshots.lock().unwrap();
        Ok(snapshots[(call - 1).min(snapshots.len() - 1)].clone())
    }
}

pub fn native(worker: JsonObject, gateway: JsonObject) -> JsonObject {
    json_object! { "worker" => worker, "gateway" => gateway }
}

pub fn running(pid: i64) -> JsonObject {
    json_object! { "state" => "running", "enabled" => true, "pid" => pid }
}

pub fn stopped() -> JsonObject {
    json_object! { "state" => "stopped", "enabled" => true }
}

pub fn absent() -> JsonObject {
    json_object! { "state" => "absent", "enabled" => false }
}

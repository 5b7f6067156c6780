//! The server's calls on the worker's private control channel, written from
//! upstream's control protocol (`execution_control`,
//! `execution_maintenance`): its status, and the server's part of a managed
//! update before it launches the runner (acquire then seal the running
//! worker's admission, and the handoff file). The
//! stand-ins (the demo's server, the install.sh harness) use this rather
//! than the helpers' `WorkerControl`, the client under test, so a mistake in
//! that client cannot make its own precondition.

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use crate::{origin_address, HttpRequest};

/// The worker's sealed admission: what a handoff file names.
#[derive(Debug, Clone)]
pub struct SealedWorker {
    /// The worker's `instance_id` (its receipt's).
    pub instance_id: String,
    /// The sealed lease's `lease_id`.
    pub lease_id: String,
}

/// The worker's private channel: its receipt (which must name
/// `worker_pid`), the callback address and the control token.
struct Channel {
    receipt: Value,
    callback: std::net::SocketAddr,
    token: String,
}

impl Channel {
    fn open(runtime_dir: &Path, worker_pid: u32) -> Result<Channel, String> {
        let receipt: Value = fs::read(runtime_dir.join("worker.json"))
            .map_err(|err| format!("worker.json: {err}"))
            .and_then(|data| {
                serde_json::from_slice(&data).map_err(|err| format!("worker.json: {err}"))
            })?;
        if receipt["pid"].as_u64() != Some(u64::from(worker_pid)) || receipt["role"] != "worker" {
            return Err(format!(
                "worker.json does not name worker {worker_pid}: {receipt}"
            ));
        }
        let callback = receipt["callback_origin"]
            .as_str()
            .and_then(origin_address)
            .ok_or("worker.json has no loopback callback_origin")?;
        let token = fs::read_to_string(runtime_dir.join("control.token"))
            .map_err(|err| format!("control.token: {err}"))?;
        Ok(Channel {
            receipt,
            callback,
            token,
        })
    }

    fn instance_id(&self) -> &str {
        self.receipt["instance_id"].as_str().unwrap_or_default()
    }

    /// One request; the reply's JSON, or the refusal.
    fn send(&self, request: HttpRequest) -> Result<Value, String> {
        let response = request
            .bearer(&self.token)
            .send(self.callback)
            .map_err(|err| format!("worker callback: {err}"))?;
        let reply: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        if response.status != 200 {
            return Err(format!("worker replied {}: {reply}", response.status));
        }
        Ok(reply)
    }
}

/// `GET /api/admin/execution/status` of the worker whose receipt in
/// `runtime_dir` names `worker_pid`: the status object.
pub fn worker_status(runtime_dir: &Path, worker_pid: u32) -> Result<Value, String> {
    let channel = Channel::open(runtime_dir, worker_pid)?;
    channel.send(HttpRequest::get("/api/admin/execution/status"))
}

/// Seals the worker whose receipt in `runtime_dir` names `worker_pid` for
/// `operation`: `acquire`, then `seal` with the granted lease; the reply
/// must show the worker idle under that sealed lease.
pub fn seal_worker(
    runtime_dir: &Path,
    operation: &str,
    worker_pid: u32,
) -> Result<SealedWorker, String> {
    let channel = Channel::open(runtime_dir, worker_pid)?;
    let instance_id = channel.instance_id();
    let maintenance = |body: Value| {
        channel.send(HttpRequest::post_json(
            "/api/admin/execution/maintenance",
            body.to_string(),
        ))
    };
    let acquired = maintenance(json!({
        "action": "acquire",
        "expected_worker_instance_id": instance_id,
        "operation_id": operation,
    }))?;
    let lease_id = acquired["lease"]["lease_id"]
        .as_str()
        .ok_or_else(|| format!("acquire granted no lease: {acquired}"))?
        .to_string();
    let sealed = maintenance(json!({
        "action": "seal",
        "expected_worker_instance_id": instance_id,
        "operation_id": operation,
        "lease_id": lease_id,
    }))?;
    let lease = &sealed["lease"];
    if sealed["idle"] != true
        || sealed["worker_instance_id"] != instance_id
        || lease["lease_id"] != lease_id.as_str()
        || lease["operation_id"] != operation
        || lease["sealed"] != true
    {
        return Err(format!(
            "the worker is not sealed for {operation}: {sealed}"
        ));
    }
    Ok(SealedWorker {
        instance_id: instance_id.to_string(),
        lease_id,
    })
}

impl SealedWorker {
    /// The handoff file the server writes for install.sh and the runner
    /// (`{schema, operation_id, worker_instance_id, lease_id,
    /// expected_server_identity}`), as `json.dumps(sort_keys=True,
    /// indent=2)` and a newline.
    pub fn handoff_bytes(&self, operation: &str, server_identity: &str) -> Vec<u8> {
        let handoff = json!({
            "schema": 1,
            "operation_id": operation,
            "worker_instance_id": self.instance_id,
            "lease_id": self.lease_id,
            "expected_server_identity": server_identity,
        });
        let text = serde_json::to_string_pretty(&handoff).expect("a JSON value serializes");
        (text + "\n").into_bytes()
    }
}

//! The test worker as the helpers will meet it: a worker and a gateway
//! started by a real systemd user manager from the rendered units, reached
//! over real loopback HTTP through the shared crate's PID-pinned client.

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use agents_common::{maintenance_operation_id, ExecutionLayout, Platform};
use agents_common::{
    test_support::{request_json, PinnedRequest},
    GATEWAY_UNIT, WORKER_UNIT,
};
use agents_tests::{
    free_port, poll_until, HttpRequest, Installation, ProcessIdentity, Role, Sandbox,
    SplitServices, AGENT_TOKEN,
};
use execution_manage::ExecutionTransaction;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

struct Split {
    sandbox: Sandbox,
    installation: Installation,
    layout: ExecutionLayout,
    services: SplitServices,
}

fn running_split(test: &str) -> Option<Split> {
    let sandbox = Sandbox::start_or_skip(test)?;
    let installation = Installation::in_sandbox(&sandbox);
    let release = installation.add_release("1.0.0");
    let layout = installation.layout(&release, &release, free_port());
    installation.install_split(&layout);
    let services = installation.start_split(&sandbox, &layout);
    Some(Split {
        sandbox,
        installation,
        layout,
        services,
    })
}

/// One request through the helpers' pinned client: it proves the socket
/// belongs to `pid` before sending anything.
fn pinned(
    url: &str,
    token: &str,
    pid: u32,
    body: Option<&Json>,
) -> agents_common::Result<JsonObject> {
    let mut verify = || Ok(());
    request_json(
        url,
        token,
        PinnedRequest::new(i64::from(pid), Platform::Linux, &mut verify).body(body),
    )
}

fn origin(split: &Split) -> String {
    format!("http://{}", split.services.callback())
}

fn public(split: &Split) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], split.layout.public_port().unwrap()))
}

fn maintenance_body(split: &Split, action: &str, operation: &str, lease: Option<&str>) -> Json {
    let mut body = json_object! {
        "action" => action,
        "expected_worker_instance_id" => split.services.worker_instance_id(),
        "operation_id" => operation,
    };
    if let Some(lease) = lease {
        body.insert("lease_id", lease);
    }
    Json::Object(body)
}

const OPERATION: &str = "85efcaaf-5f93-5352-b00d-95a2551e6a7c";

#[test]
fn systemd_started_services_answer_pinned_health_as_their_main_pids() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let worker = split.sandbox.unit_state(WORKER_UNIT);
    let gateway = split.sandbox.unit_state(GATEWAY_UNIT);
    assert_eq!(
        (worker.main_pid, gateway.main_pid),
        (split.services.worker_pid, split.services.gateway_pid)
    );
    assert_eq!(worker.unit_file_state, "enabled");

    // The worker's callback health, pinned to the MainPID systemd reports.
    let health = pinned(
        &format!("{}/api/health", origin(&split)),
        AGENT_TOKEN,
        worker.main_pid,
        None,
    )
    .unwrap();
    assert_eq!(health.get("ok"), Some(&Json::Bool(true)));
    assert_eq!(health.get("server_version"), Some(&Json::from("1.0.0")));
    assert_eq!(health.get("api_contract_version"), Some(&Json::Int(1)));
    let identity = health.get("execution_service").unwrap();
    assert_eq!(identity.get("pid"), Some(&Json::from(worker.main_pid)));
    assert_eq!(
        identity.get("instance_id"),
        split.services.worker.get("instance_id")
    );
    assert_eq!(identity.get("protocol"), Some(&Json::Int(1)));
    assert_eq!(identity.get("maintenance_held"), Some(&Json::Bool(false)));
    assert!(
        health.get("gateway").is_none(),
        "the callback listener has no gateway identity"
    );
    let server_identity = health.get("server_identity").cloned().unwrap();

    // The same request pinned to the gateway's PID cannot prove ownership.
    let mut verify = || Ok(());
    let foreign = request_json(
        &format!("{}/api/health", origin(&split)),
        AGENT_TOKEN,
        PinnedRequest::new(i64::from(gateway.main_pid), Platform::Linux, &mut verify).timeout(0.5),
    );
    assert_eq!(
        foreign.unwrap_err().message(),
        "pinned HTTP connection ownership could not be proven"
    );

    // Public health through the gateway carries both identities.
    let url = format!("http://{}/api/health", public(&split));
    let health = pinned(&url, AGENT_TOKEN, gateway.main_pid, None).unwrap();
    assert_eq!(
        health.get("gateway").unwrap().get("pid"),
        Some(&Json::from(gateway.main_pid))
    );
    assert_eq!(
        health
            .get("gateway")
            .unwrap()
            .get("restart_preserves_execution"),
        Some(&Json::Bool(true))
    );
    assert_eq!(
        health.get("execution_service").unwrap().get("pid"),
        Some(&Json::from(worker.main_pid))
    );
    assert_eq!(health.get("server_identity"), Some(&server_identity));
    // Without the agent token there is no health.
    let refused = HttpRequest::get("/api/health")
        .send(public(&split))
        .unwrap();
    assert_eq!(refused.status, 401);
}

#[test]
fn receipts_are_python_json_lines_written_after_listening() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let runtime = split.installation.runtime_dir();
    let text = fs::read_to_string(runtime.join("worker.json")).unwrap();
    let started_at = text
        .split("\"started_at\": ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert!(started_at.parse::<f64>().unwrap() > 1.6e9 && started_at.contains('.'));
    let release = split.layout.worker_release.display();
    let expected = format!(
        "{{\"callback_origin\": \"http://{callback}\", \"instance_id\": \"{instance}\", \"pid\": {pid}, \
         \"protocol\": 1, \"public_bind\": \"127.0.0.1\", \"public_port\": {port}, \"release_root\": \"{release}\", \
         \"role\": \"worker\", \"schema\": 1, \"started_at\": {started_at}, \"version\": \"1.0.0\"}}\n",
        callback = split.services.callback(),
        instance = split.services.worker_instance_id(),
        pid = split.services.worker_pid,
        port = split.layout.public_port().unwrap(),
    );
    assert_eq!(text, expected);
    let instance = split.services.worker_instance_id();
    assert!(instance.len() == 32 && instance.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    for name in [
        "worker.json",
        "gateway.json",
        "control.token",
        "worker.lock",
        "gateway.lock",
    ] {
        let mode = fs::metadata(runtime.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
    let gateway = split.installation.receipt(Role::Gateway).unwrap();
    assert_eq!(gateway.get("role"), Some(&Json::from("gateway")));
    assert!(gateway.get("callback_origin").is_none());
    // Started through install/current, the gateway reports the resolved release.
    assert_eq!(
        gateway.get("release_root"),
        Some(&Json::from(release.to_string()))
    );
}

/// The worker's status endpoint on its callback listener.
const STATUS: &str = "/api/admin/execution/status";
/// The worker's maintenance endpoint on its callback listener.
const MAINTENANCE: &str = "/api/admin/execution/maintenance";

/// The worker's control endpoints as the helpers reach them: pinned to its
/// PID, with the control token.
struct Control<'a> {
    split: &'a Split,
    token: String,
    pid: u32,
}

impl Control<'_> {
    fn of(split: &Split) -> Control<'_> {
        Control {
            split,
            token: split.installation.control_token(),
            pid: split.services.worker_pid,
        }
    }

    fn status(&self) -> agents_common::Result<JsonObject> {
        let url = format!("{}{STATUS}", origin(self.split));
        pinned(&url, &self.token, self.pid, None)
    }

    /// Maintenance `action` for `operation`, naming `lease`.
    fn maintain(
        &self,
        action: &str,
        operation: &str,
        lease: Option<&str>,
    ) -> agents_common::Result<JsonObject> {
        let url = format!("{}{MAINTENANCE}", origin(self.split));
        let body = maintenance_body(self.split, action, operation, lease);
        pinned(&url, &self.token, self.pid, Some(&body))
    }

    /// `maintenance_held` in the worker's callback health.
    fn maintenance_held(&self) -> Json {
        let url = format!("{}/api/health", origin(self.split));
        let health = pinned(&url, AGENT_TOKEN, self.pid, None).unwrap();
        let service = health.get("execution_service").unwrap();
        service.get("maintenance_held").cloned().unwrap()
    }
}

/// An idle worker's status: no lease, and every blocker upstream names, in
/// its order.
fn assert_idle_without_a_lease(control: &Control) {
    let status = control.status().unwrap();
    assert_eq!(status.get("idle"), Some(&Json::Bool(true)));
    assert_eq!(status.get("lease"), Some(&Json::Null));
    let blockers: Vec<&String> = status
        .get("blockers")
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(
        blockers,
        [
            "active_runs",
            "queued_turns",
            "provider_background_tasks",
            "in_flight_server_changes",
            "session_deletions",
            "goals_reconfiguration",
            "managed_restart",
            "managed_update"
        ]
    );
}

/// Acquires an unsealed, expiring lease for [`OPERATION`]: the same lease
/// again for the same operation, none for another. Returns its ID.
fn acquire_exclusively(control: &Control) -> String {
    let acquired = control.maintain("acquire", OPERATION, None).unwrap();
    let lease = acquired.get("lease").unwrap();
    let lease_id = lease.get("lease_id").unwrap().as_str().unwrap().to_string();
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(false)));
    assert!(matches!(lease.get("expires_at"), Some(Json::Float(_))));
    // Acquire is idempotent for the same operation: same lease back.
    let again = control.maintain("acquire", OPERATION, None).unwrap();
    assert_eq!(
        again.get("lease").unwrap().get("lease_id"),
        Some(&Json::from(lease_id.as_str()))
    );
    // Another operation is refused (the pinned client collapses non-200s).
    let other = "b5914c0d-4b01-5e86-bcd8-1e9626e330e6";
    assert_eq!(
        control
            .maintain("acquire", other, None)
            .unwrap_err()
            .message(),
        "pinned HTTP response is invalid"
    );
    lease_id
}

#[test]
fn lease_acquire_seal_release_over_real_http() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let control = Control::of(&split);
    assert_idle_without_a_lease(&control);
    let lease_id = acquire_exclusively(&control);

    // Sealed: no expiry, persisted as Python writes it, and health says
    // maintenance holds the worker.
    let sealed = control
        .maintain("seal", OPERATION, Some(&lease_id))
        .unwrap();
    let lease = sealed.get("lease").unwrap();
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)));
    assert_eq!(lease.get("expires_at"), Some(&Json::Null));
    let persisted = fs::read_to_string(
        split
            .installation
            .state_root
            .join("admin/execution-maintenance.json"),
    )
    .unwrap();
    assert_eq!(
        persisted,
        format!(
            "{{\"schema\": 1, \"worker_instance_id\": \"{}\", \"lease\": {{\"lease_id\": \"{lease_id}\", \
             \"operation_id\": \"{OPERATION}\", \"sealed\": true, \"expires_at\": null}}}}\n",
            split.services.worker_instance_id()
        )
    );
    assert_eq!(control.maintenance_held(), Json::Bool(true));

    let released = control
        .maintain("release", OPERATION, Some(&lease_id))
        .unwrap();
    assert_eq!(released.get("lease"), Some(&Json::Null));
    assert_eq!(control.maintenance_held(), Json::Bool(false));
}

/// What the worker answers a refused control request: its status and
/// `detail`.
type Refusal = (HttpRequest, u16, &'static str);

/// Requests refused before their body is read: authentication, private
/// transport, unknown paths and methods, and a status request with a body.
fn transport_refusals(token: &str) -> Vec<Refusal> {
    let authenticate = "Execution control authentication required";
    let forbidden = "Private control transport is forbidden";
    let status = || HttpRequest::get(STATUS);
    vec![
        (status(), 401, authenticate),
        (status().bearer(AGENT_TOKEN), 401, authenticate),
        (status().bearer(token).bearer(token), 401, authenticate),
        (
            HttpRequest::get(&format!("{STATUS}?x=1")).bearer(token),
            403,
            forbidden,
        ),
        (
            status().bearer(token).header("Cookie", "a=b"),
            403,
            forbidden,
        ),
        (
            status().bearer(token).header("X-Forwarded-For", "1.2.3.4"),
            403,
            forbidden,
        ),
        (
            HttpRequest::get("/api/admin/execution/other").bearer(token),
            404,
            "Unknown execution control",
        ),
        (
            HttpRequest::get(MAINTENANCE).bearer(token),
            405,
            "Execution control method is not allowed",
        ),
        (
            status().bearer(token).body("x"),
            400,
            "Status requests do not accept a body",
        ),
    ]
}

/// Maintenance requests refused for their body's type, length, size or
/// JSON.
fn body_refusals(split: &Split, token: &str) -> Vec<Refusal> {
    let post = |body: Vec<u8>| HttpRequest::post_json(MAINTENANCE, body).bearer(token);
    let valid = encoded(maintenance_body(split, "acquire", OPERATION, None));
    vec![
        (
            HttpRequest::new("POST", MAINTENANCE)
                .bearer(token)
                .body(valid.clone()),
            415,
            "Execution control requires JSON",
        ),
        (
            post(valid).header("Content-Length", "01"),
            400,
            "Invalid control content length",
        ),
        (
            post(vec![b' '; 5000]),
            413,
            "Control request exceeds its size limit",
        ),
        (
            post(br#"{"action":"acquire","action":"seal"}"#.to_vec()),
            400,
            "Duplicate JSON field",
        ),
        (
            post(br#"{"action":NaN}"#.to_vec()),
            400,
            "Invalid JSON number",
        ),
        (
            post(b"[]".to_vec()),
            422,
            "Invalid execution control fields",
        ),
    ]
}

/// Maintenance requests refused for their fields: another worker, an
/// unknown action, a malformed operation, lease or lifetime, a lease that
/// is not the worker's.
fn field_refusals(split: &Split, token: &str) -> Vec<Refusal> {
    let post = |value: Json| HttpRequest::post_json(MAINTENANCE, encoded(value)).bearer(token);
    let fields = |action: &str, operation: &str, lease: Option<&str>| {
        post(maintenance_body(split, action, operation, lease))
    };
    let another_worker = Json::Object(json_object! {
        "action" => "acquire",
        "expected_worker_instance_id" => "someone-else",
        "operation_id" => OPERATION,
    });
    let mut short_lifetime = maintenance_body(split, "acquire", OPERATION, None);
    if let Json::Object(object) = &mut short_lifetime {
        object.insert("lifetime_seconds", 10);
    }
    vec![
        (
            post(another_worker),
            409,
            "Execution worker instance changed",
        ),
        (
            fields("steal", OPERATION, None),
            422,
            "Invalid maintenance action",
        ),
        (
            fields("acquire", &OPERATION.to_uppercase(), None),
            422,
            "Operation ID must be a canonical UUID",
        ),
        (
            fields("acquire", OPERATION, Some("x")),
            422,
            "Acquire must not supply a lease ID",
        ),
        (
            fields("seal", OPERATION, Some("bad id")),
            422,
            "Maintenance requires a valid lease ID",
        ),
        (
            post(short_lifetime),
            422,
            "Maintenance lifetime must be 30 to 300 seconds",
        ),
        (
            fields("seal", OPERATION, Some("abc")),
            409,
            "Execution maintenance ownership changed",
        ),
    ]
}

/// A control body as the helpers send it: compact JSON.
fn encoded(value: Json) -> Vec<u8> {
    python_compat::json::encode_compact(&value).unwrap()
}

#[test]
fn control_refusals_follow_the_upstream_table() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let callback = split.services.callback();
    let token = split.installation.control_token();
    let cases = [
        transport_refusals(&token),
        body_refusals(&split, &token),
        field_refusals(&split, &token),
    ];
    for (request, status, detail) in cases.into_iter().flatten() {
        let response = request.send(callback).unwrap();
        assert_eq!(
            (response.status, response.detail().as_deref()),
            (status, Some(detail)),
            "{request:?}"
        );
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.header("cache-control"), Some("no-store"));
        assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    }
    // Nothing above took a lease.
    let status = HttpRequest::get(STATUS)
        .bearer(&token)
        .send(callback)
        .unwrap();
    assert_eq!(status.json().get("lease"), Some(&Json::Null));
    // The control paths do not exist on the public listener.
    let through_gateway = HttpRequest::get(STATUS)
        .bearer(&token)
        .send(public(&split))
        .unwrap();
    assert_eq!(through_gateway.status, 404);
}

#[test]
fn a_pending_worker_activation_holds_the_restarted_worker() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let candidate = split.installation.add_release("2.0.0");
    let mut next = split.layout.clone();
    next.worker_release = candidate;
    let running = Json::Object(json_object! {"state" => "running", "enabled" => true});
    let prior = Json::Object(json_object! {"worker" => running.clone(), "gateway" => running});
    let journal = ExecutionTransaction::stage(&next, "worker", &prior, None).unwrap();
    let operation = maintenance_operation_id(&journal).unwrap();

    // The old worker generation restarts while the journal is pending.
    split.sandbox.systemctl_ok(&["restart", WORKER_UNIT]);
    let old_instance = split.services.worker_instance_id();
    let (receipt, pid) =
        split
            .installation
            .wait_for_service(&split.sandbox, WORKER_UNIT, Role::Worker);
    let receipt = if receipt.get("instance_id") == Some(&Json::from(old_instance.as_str())) {
        split
            .installation
            .wait_for_receipt(Role::Worker, "from the restarted worker", |receipt| {
                receipt.get("instance_id") != Some(&Json::from(old_instance.as_str()))
            })
    } else {
        receipt
    };
    let origin = receipt
        .get("callback_origin")
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    let token = split.installation.control_token();
    let status = pinned(
        &format!("{origin}/api/admin/execution/status"),
        &token,
        pid,
        None,
    )
    .unwrap();
    let lease = status.get("lease").unwrap();
    assert_eq!(
        lease.get("operation_id"),
        Some(&Json::from(operation.as_str()))
    );
    assert_eq!(lease.get("sealed"), Some(&Json::Bool(true)));
    assert_eq!(lease.get("expires_at"), Some(&Json::Null));
    let health = pinned(&format!("{origin}/api/health"), AGENT_TOKEN, pid, None).unwrap();
    assert_eq!(
        health
            .get("execution_service")
            .unwrap()
            .get("maintenance_held"),
        Some(&Json::Bool(true))
    );

    // Only a release by that operation lets work in again.
    let mut release = json_object! {
        "action" => "release",
        "expected_worker_instance_id" => receipt.get("instance_id").unwrap().clone(),
        "operation_id" => operation.as_str(),
        "lease_id" => lease.get("lease_id").unwrap().clone(),
    };
    let url = format!("{origin}/api/admin/execution/maintenance");
    let released = pinned(&url, &token, pid, Some(&Json::Object(release.clone()))).unwrap();
    assert_eq!(released.get("lease"), Some(&Json::Null));
    release.insert("operation_id", OPERATION);
    assert!(pinned(&url, &token, pid, Some(&Json::Object(release))).is_err());
}

#[test]
fn stopping_removes_the_receipt_and_teardown_leaves_no_process() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let runtime = split.installation.runtime_dir();
    let gateway = ProcessIdentity::of(split.services.gateway_pid).unwrap();
    let worker = ProcessIdentity::of(split.services.worker_pid).unwrap();
    split.sandbox.systemctl_ok(&["stop", GATEWAY_UNIT]);
    assert!(
        !runtime.join("gateway.json").exists(),
        "SIGTERM removes the gateway's own receipt"
    );
    assert!(!gateway.is_alive());
    let stopped = split.sandbox.unit_state(GATEWAY_UNIT);
    assert_eq!(
        (stopped.active_state.as_str(), stopped.main_pid),
        ("inactive", 0),
        "exit status 0, not failed"
    );
    assert!(runtime.join("worker.json").exists());

    let Split { sandbox, .. } = split;
    drop(sandbox);
    assert!(!worker.is_alive(), "the manager stopped the worker");
    assert!(
        !runtime.join("worker.json").exists(),
        "a clean stop removes the worker's receipt"
    );
}

#[test]
fn the_worker_holds_the_state_owner_lock_and_refuses_a_second_instance() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let lock =
        fs::File::open(split.installation.state_root.join("admin/state-owner.lock")).unwrap();
    assert_eq!(
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK)
    );
    // The same command line again (as systemd would run it) exits 2.
    let arguments = agents_common::test_support::service_arguments(&split.layout, "worker");
    let output = split
        .sandbox
        .command(&arguments[0])
        .args(&arguments[1..])
        .env("AGENTSDOCK_STATE_DIR", &split.installation.state_root)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("Another worker already owns this execution directory"));
    // The running worker is untouched.
    let (receipt, _) =
        split
            .installation
            .wait_for_service(&split.sandbox, WORKER_UNIT, Role::Worker);
    assert_eq!(receipt, split.services.worker);
}

#[test]
fn a_legacy_monolith_serves_public_health_without_receipts() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let installation = Installation::in_sandbox(&sandbox);
    let release = installation.add_release("0.9.0");
    installation.set_current(&release);
    let port = free_port();
    installation.write_monolith_unit(port);
    sandbox.systemctl_ok(&["daemon-reload"]);
    sandbox.systemctl_ok(&["start", WORKER_UNIT]);
    let state = sandbox.wait_for_unit(WORKER_UNIT, Duration::from_secs(10), "running", |state| {
        state.is_running()
    });
    let url = format!("http://127.0.0.1:{port}/api/health");
    let health = poll_until(Duration::from_secs(10), "monolith health", || {
        pinned(&url, AGENT_TOKEN, state.main_pid, None).ok()
    });
    assert_eq!(health.get("server_version"), Some(&Json::from("0.9.0")));
    assert!(health.get("execution_service").is_none() && health.get("gateway").is_none());
    assert!(!installation.runtime_dir().join("worker.json").exists());
    let lock = fs::File::open(installation.state_root.join("admin/state-owner.lock")).unwrap();
    assert_eq!(
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK)
    );
}

//! The test worker's misbehaviour switches and request log, exercised on
//! services a real systemd user manager runs.

use std::fs;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{
    free_port, poll_until, process_alive, Death, DeathPoint, HttpRequest, HttpResponse,
    Installation, ProcessIdentity, RequestMatch, RequestRecord, Role, Sandbox, SplitServices,
    Stall, Switches, AGENT_TOKEN,
};
use python_compat::{
    json::{encode_compact, Json},
    json_object,
};

const OPERATION: &str = "85efcaaf-5f93-5352-b00d-95a2551e6a7c";
const MAINTENANCE: &str = "/api/admin/execution/maintenance";
const STATUS: &str = "/api/admin/execution/status";

struct Split {
    sandbox: Sandbox,
    installation: Installation,
    services: SplitServices,
    public: SocketAddr,
    token: String,
}

fn running_split(test: &str) -> Option<Split> {
    let sandbox = Sandbox::start_or_skip(test)?;
    let installation = Installation::in_sandbox(&sandbox);
    let release = installation.add_release("1.0.0");
    let port = free_port();
    let layout = installation.layout(&release, &release, port);
    installation.install_split(&layout);
    let services = installation.start_split(&sandbox, &layout);
    let token = installation.control_token();
    Some(Split {
        sandbox,
        installation,
        services,
        public: SocketAddr::from(([127, 0, 0, 1], port)),
        token,
    })
}

impl Split {
    /// Replaces the worker's misbehaviour switches.
    fn switch_worker(&self, switches: Switches) {
        self.installation.set_switches(Role::Worker, &switches);
    }

    /// Sends a maintenance `action` of [`OPERATION`] (with `lease`) to the
    /// worker's callback listener; `Err` when no reply came.
    fn send_maintenance(&self, action: &str, lease: Option<&str>) -> std::io::Result<HttpResponse> {
        let mut body = json_object! {
            "action" => action,
            "expected_worker_instance_id" => self.services.worker_instance_id(),
            "operation_id" => OPERATION,
        };
        if let Some(lease) = lease {
            body.insert("lease_id", lease);
        }
        HttpRequest::post_json(MAINTENANCE, encode_compact(&Json::Object(body)).unwrap())
            .bearer(&self.token)
            .send(self.services.callback())
    }

    fn maintenance(&self, action: &str, lease: Option<&str>) -> HttpResponse {
        self.send_maintenance(action, lease).unwrap()
    }

    fn status(&self) -> Json {
        status_at(self.services.callback(), &self.token)
    }

    fn worker_health(&self) -> HttpResponse {
        HttpRequest::get("/api/health")
            .bearer(AGENT_TOKEN)
            .send(self.services.callback())
            .unwrap()
    }
}

/// The worker's private status from the callback listener at `callback`
/// (asserted 200).
fn status_at(callback: SocketAddr, token: &str) -> Json {
    let response = HttpRequest::get(STATUS)
        .bearer(token)
        .send(callback)
        .unwrap();
    assert_eq!(response.status, 200);
    response.json()
}

/// A response's status and `detail`, for refusals.
fn status_and_detail(response: &HttpResponse) -> (u16, Option<String>) {
    (response.status, response.detail())
}

fn lease_id(reply: &Json) -> String {
    reply
        .get("lease")
        .unwrap()
        .get("lease_id")
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// Busy: the counters are reported and obeyed (admission is refused).
fn assert_a_busy_worker_reports_and_obeys_its_blockers(split: &Split) {
    split.switch_worker(Switches {
        blockers: vec![
            ("active_runs".to_string(), 1),
            ("managed_update".to_string(), 1),
        ],
        ..Switches::default()
    });
    let status = split.status();
    assert_eq!(status.get("idle"), Some(&Json::Bool(false)));
    let blockers = status.get("blockers").unwrap();
    assert_eq!(blockers.get("active_runs"), Some(&Json::Int(1)));
    assert_eq!(blockers.get("queued_turns"), Some(&Json::Int(0)));
    assert_eq!(
        status_and_detail(&split.maintenance("acquire", None)),
        (
            409,
            Some("Execution is busy; running agents were left untouched".to_string())
        )
    );
}

/// Refusing seal: acquire works, seal is refused and changes nothing.
/// Returns the acquired (unsealed) lease.
fn assert_a_refused_seal_changes_nothing(split: &Split) -> String {
    split.switch_worker(Switches {
        refuse: vec!["seal".to_string()],
        ..Switches::default()
    });
    let acquired = split.maintenance("acquire", None);
    assert_eq!(acquired.status, 200);
    let lease = lease_id(&acquired.json());
    assert_eq!(
        status_and_detail(&split.maintenance("seal", Some(&lease))),
        (
            409,
            Some("Execution work appeared before retirement".to_string())
        )
    );
    assert_eq!(
        split.status().get("lease").unwrap().get("sealed"),
        Some(&Json::Bool(false))
    );
    lease
}

/// Lying about the instance: replies carry the fake, requests (the release
/// of `lease`) are still checked against the real one.
fn assert_replies_lie_about_the_instance(split: &Split, lease: &str) {
    split.switch_worker(Switches {
        reply_instance_id: Some("impostor".to_string()),
        ..Switches::default()
    });
    let impostor = Some(Json::from("impostor"));
    assert_eq!(split.status().get("worker_instance_id"), impostor.as_ref());
    let health = split.worker_health().json();
    assert_eq!(
        health.get("execution_service").unwrap().get("instance_id"),
        impostor.as_ref()
    );
    let released = split.maintenance("release", Some(lease));
    assert_eq!(released.status, 200);
    assert_eq!(released.json().get("worker_instance_id"), impostor.as_ref());
}

#[test]
fn busy_lying_and_refusing_workers() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    assert_a_busy_worker_reports_and_obeys_its_blockers(&split);
    let lease = assert_a_refused_seal_changes_nothing(&split);
    assert_replies_lie_about_the_instance(&split, &lease);

    // Back to faithful once the switches are gone.
    split.switch_worker(Switches::default());
    assert_eq!(
        split.status().get("worker_instance_id"),
        Some(&Json::from(split.services.worker_instance_id()))
    );
}

#[test]
fn a_stalled_reply_outlasts_the_client_but_not_other_requests() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    split.installation.set_switches(
        Role::Worker,
        &Switches {
            stall: Some(Stall {
                on: RequestMatch::path(STATUS),
                seconds: 3.0,
            }),
            ..Switches::default()
        },
    );
    let started = Instant::now();
    let stalled = HttpRequest::get(STATUS)
        .bearer(&split.token)
        .send_with_timeout(split.services.callback(), Duration::from_millis(700));
    assert!(stalled.is_err(), "the client timed out: {stalled:?}");
    // Meanwhile other requests are answered at once.
    let health = split.worker_health();
    assert_eq!(health.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "health waited for the stalled reply"
    );
    let records = split.installation.requests(Role::Worker);
    let stalled_record = records.iter().find(|record| record.path == STATUS).unwrap();
    assert_eq!(
        (stalled_record.outcome.as_str(), stalled_record.status),
        ("stalled", 200)
    );
}

/// Switches that end the worker on requests matching `on` at `when`, with
/// `exit_code` (`None`: SIGKILL).
fn dying(on: RequestMatch, when: DeathPoint, exit_code: Option<i32>) -> Switches {
    Switches {
        die: Some(Death {
            on,
            when,
            exit_code,
        }),
        ..Switches::default()
    }
}

/// Waits until the process `identity` names is gone.
fn wait_for_exit(identity: &ProcessIdentity, what: &str) {
    poll_until(Duration::from_secs(5), what, || {
        (!identity.is_alive()).then_some(())
    });
}

/// A worker dying (status 3) after its seal took effect, before replying:
/// no reply, the stale receipt left, the seal persisted first, the request
/// logged as `died`. Returns the stale receipt.
fn assert_a_worker_dying_before_its_seal_reply_leaves_its_receipt(split: &Split) -> Json {
    split.switch_worker(dying(
        RequestMatch::maintenance("seal"),
        DeathPoint::BeforeReply,
        Some(3),
    ));
    let old_worker = ProcessIdentity::of(split.services.worker_pid).unwrap();
    let lease = lease_id(&split.maintenance("acquire", None).json());
    let seal = split.send_maintenance("seal", Some(&lease));
    assert!(seal.is_err(), "no reply from a dead worker: {seal:?}");
    wait_for_exit(&old_worker, "the worker to exit");
    let stale = split.installation.receipt(Role::Worker).unwrap();
    assert_eq!(
        stale.get("pid"),
        Some(&Json::from(split.services.worker_pid))
    );
    let persisted = fs::read_to_string(
        split
            .installation
            .state_root
            .join("admin/execution-maintenance.json"),
    )
    .unwrap();
    assert!(persisted.contains("\"sealed\": true"), "{persisted}");
    let record = split.installation.requests(Role::Worker).pop().unwrap();
    assert_eq!(
        (record.outcome.as_str(), record.action.as_deref()),
        ("died", Some("seal"))
    );
    stale
}

/// Waits until systemd runs a worker other than `old_pid`: its receipt and PID.
fn wait_for_the_restarted_worker(split: &Split, old_pid: u32) -> (Json, u32) {
    poll_until(Duration::from_secs(15), "the restarted worker", || {
        let (receipt, pid) =
            split
                .installation
                .wait_for_service(&split.sandbox, WORKER_UNIT, Role::Worker);
        (pid != old_pid).then_some((receipt, pid))
    })
}

#[test]
fn dying_workers_leave_their_receipt_and_systemd_restarts_them() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let stale = assert_a_worker_dying_before_its_seal_reply_leaves_its_receipt(&split);

    // systemd (Restart=always) starts a new epoch that inherits no lease.
    split.switch_worker(Switches::default());
    let (receipt, pid) = wait_for_the_restarted_worker(&split, split.services.worker_pid);
    assert_ne!(receipt.get("instance_id"), stale.get("instance_id"));
    let origin = receipt.get("callback_origin").unwrap().as_str().unwrap();
    let callback = agents_tests::origin_address(origin).unwrap();
    assert_eq!(
        status_at(callback, &split.token).get("lease"),
        Some(&Json::Null)
    );
    assert!(process_alive(pid));

    // SIGKILL on a health request, before handling: the gateway is untouched.
    split.switch_worker(dying(
        RequestMatch::path("/api/health"),
        DeathPoint::BeforeHandling,
        None,
    ));
    let restarted = ProcessIdentity::of(pid).unwrap();
    assert!(HttpRequest::get("/api/health")
        .bearer(AGENT_TOKEN)
        .send(callback)
        .is_err());
    wait_for_exit(&restarted, "the killed worker to vanish");
    assert!(process_alive(split.services.gateway_pid));
    split.switch_worker(Switches::default());
}

/// The public listener's health, through the gateway.
fn public_health(public: SocketAddr) -> std::io::Result<HttpResponse> {
    HttpRequest::get("/api/health")
        .bearer(AGENT_TOKEN)
        .send(public)
}

/// A split installation whose worker, started alone, writes its receipt
/// 1.5 s late and reports version 9.9.9: no receipt while it is already
/// running, then the receipt of the very process systemd runs. Returns the
/// sandbox, the installation and the public port.
fn a_late_worker_of_another_version(test: &str) -> Option<(Sandbox, Installation, u16)> {
    let sandbox = Sandbox::start_or_skip(test)?;
    let installation = Installation::in_sandbox(&sandbox);
    let release = installation.add_release("1.0.0");
    let port = free_port();
    let layout = installation.layout(&release, &release, port);
    installation.install_split(&layout);
    let delayed = Switches {
        receipt_delay_seconds: 1.5,
        version: Some("9.9.9".to_string()),
        ..Switches::default()
    };
    installation.set_switches(Role::Worker, &delayed);
    sandbox.systemctl_ok(&["daemon-reload"]);
    sandbox.systemctl_ok(&["start", WORKER_UNIT]);
    let running = sandbox.wait_for_unit(WORKER_UNIT, Duration::from_secs(5), "running", |state| {
        state.is_running()
    });
    let since = Instant::now();
    assert!(
        installation.receipt(Role::Worker).is_none(),
        "the receipt waits"
    );
    let (receipt, pid) = installation.wait_for_service(&sandbox, WORKER_UNIT, Role::Worker);
    assert!(
        since.elapsed() >= Duration::from_millis(900),
        "{:?}",
        since.elapsed()
    );
    assert_eq!(pid, running.main_pid);
    assert_eq!(receipt.get("version"), Some(&Json::from("9.9.9")));
    Some((sandbox, installation, port))
}

#[test]
fn delayed_receipts_other_versions_and_health_switches() {
    let Some((sandbox, installation, port)) =
        a_late_worker_of_another_version(agents_tests::test_name!())
    else {
        return;
    };
    sandbox.systemctl_ok(&["start", GATEWAY_UNIT]);
    installation.wait_for_service(&sandbox, GATEWAY_UNIT, Role::Gateway);
    let public = SocketAddr::from(([127, 0, 0, 1], port));
    let health = poll_until(Duration::from_secs(10), "public health", || {
        public_health(public).ok()
    })
    .json();
    assert_eq!(health.get("server_version"), Some(&Json::from("9.9.9")));
    assert_eq!(
        health.get("execution_service").unwrap().get("version"),
        Some(&Json::from("9.9.9"))
    );
    assert_eq!(
        health.get("gateway").unwrap().get("version"),
        Some(&Json::from("1.0.0"))
    );

    // Health failures and extra health fields, per role.
    let capabilities = json_object! {"secure_peer_v1" => true};
    installation.set_switches(
        Role::Worker,
        &Switches {
            health_extra: json_object! {"capabilities" => capabilities},
            ..Switches::default()
        },
    );
    let health = public_health(public).unwrap().json();
    assert_eq!(
        health.get("capabilities").unwrap().get("secure_peer_v1"),
        Some(&Json::Bool(true))
    );
    installation.set_switches(
        Role::Worker,
        &Switches {
            health_status: Some(503),
            ..Switches::default()
        },
    );
    let failing = public_health(public).unwrap();
    assert_eq!(
        failing.status, 503,
        "the gateway passes the worker's failure through"
    );
    assert!(failing.json().get("gateway").is_none());
}

/// A request log record as (listener, path, query present, credential,
/// action, status).
type Seen<'a> = (&'a str, &'a str, bool, &'a str, Option<&'a str>, u16);

fn seen(record: &RequestRecord) -> Seen<'_> {
    (
        record.listener.as_str(),
        record.path.as_str(),
        record.query,
        record.credential.as_str(),
        record.action.as_deref(),
        record.status,
    )
}

/// Both request logs' text, the worker's then the gateway's.
fn request_logs(installation: &Installation) -> String {
    [Role::Worker, Role::Gateway]
        .into_iter()
        .map(|role| {
            fs::read_to_string(agents_tests::request_log_path(
                &installation.state_root,
                role,
            ))
            .unwrap()
        })
        .collect()
}

#[test]
fn the_request_log_records_what_arrived_without_secrets() {
    let Some(split) = running_split(agents_tests::test_name!()) else {
        return;
    };
    let callback = split.services.callback();
    let (worker_before, gateway_before) = (
        split.installation.requests(Role::Worker).len(),
        split.installation.requests(Role::Gateway).len(),
    );
    HttpRequest::get("/api/health?token=x")
        .send(callback)
        .unwrap();
    HttpRequest::get(STATUS)
        .bearer(&split.token)
        .header("X-Extra", "1")
        .send(callback)
        .unwrap();
    split.maintenance("acquire", None);
    public_health(split.public).unwrap();

    let worker = split.installation.requests(Role::Worker)[worker_before..].to_vec();
    assert_eq!(
        worker.iter().map(seen).collect::<Vec<_>>(),
        [
            ("callback", "/api/health", true, "none", None, 401),
            ("callback", STATUS, false, "control", None, 200),
            (
                "callback",
                MAINTENANCE,
                false,
                "control",
                Some("acquire"),
                200
            ),
            // The gateway's forwarded health request.
            ("callback", "/api/health", false, "agent", None, 200),
        ]
    );
    assert_eq!(
        worker[1].headers,
        ["host", "authorization", "x-extra", "connection"]
    );
    assert!(worker
        .iter()
        .all(|record| record.pid == split.services.worker_pid));
    let gateway = split.installation.requests(Role::Gateway)[gateway_before..].to_vec();
    assert_eq!(gateway.len(), 1, "{gateway:?}");
    assert_eq!(
        (gateway[0].listener.as_str(), gateway[0].credential.as_str()),
        ("public", "agent")
    );
    assert_eq!(gateway[0].pid, split.services.gateway_pid);

    let logs = request_logs(&split.installation);
    assert!(
        !logs.contains(&split.token) && !logs.contains(AGENT_TOKEN),
        "no token values in the logs"
    );
}

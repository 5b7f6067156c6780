//! WorkerControl's private control calls against an in-process worker double
//! on a real loopback port: the receipt checks, status, maintenance, sealing
//! for a stop, the startup hold, release, and the owner re-check that must
//! stop a control token from reaching a worker of another epoch.

use agents_common::{ExecutionLayout, SealedHold, WorkerControl};
use agents_tests::assert_case_refused;
use agents_tests::assert_error;
use agents_tests::worker_double::{
    absent, body_of, lease, native, own_pid, running, stopped, FakeServices, Installed,
    WorkerDouble, WorkerState, CONTROL_TOKEN, INSTANCE_ID, OPERATION,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object, ErrorClass,
};

const STATUS: &str = "/api/admin/execution/status";
const MAINTENANCE: &str = "/api/admin/execution/maintenance";

/// An operation other than [`OPERATION`]: its holds are not ours to use.
const OTHER_OPERATION: &str = "00000000-0000-0000-0000-000000000000";

/// The refusal whenever the owner re-check stops the token from being sent.
const OWNER_CHANGED: &str =
    "native worker or callback receipt changed before credentials were sent";

/// An installation whose `worker.json` receipt points at a running worker
/// double, and the service manager the client asks (unless replaced: the
/// worker running with this process's PID, no gateway). Every test starts
/// from this world and changes only what it is about.
struct Scenario {
    installed: Installed,
    double: WorkerDouble,
    /// The receipt as written, for comparing with what the client read.
    record: JsonObject,
    services: FakeServices,
}

impl Scenario {
    fn new(tag: &str) -> Self {
        let installed = Installed::new(tag);
        let double = WorkerDouble::start();
        let record = installed.record(double.port());
        installed.write_record(&record);
        Scenario {
            installed,
            double,
            record,
            services: FakeServices::worker_running(absent()),
        }
    }

    /// The same world with another service manager answering the owner checks.
    fn managed_by(self, services: FakeServices) -> Self {
        Scenario { services, ..self }
    }

    /// The worker double's state changed before the call under test.
    fn with_worker(self, change: impl FnOnce(&mut WorkerState)) -> Self {
        self.double.edit(change);
        self
    }

    /// The worker reports `held` as its admission lease.
    fn holding(self, held: Json) -> Self {
        self.with_worker(|state| state.lease = held)
    }

    /// The worker answers maintenance `action` with `reply` instead of
    /// following its lease rules.
    fn replying(self, action: &str, reply: Json) -> Self {
        self.with_worker(|state| state.maintenance_reply.push((action.into(), reply)))
    }

    fn layout(&self) -> &ExecutionLayout {
        &self.installed.layout
    }

    /// A client asking this scenario's service manager.
    fn control(&self) -> WorkerControl<'_> {
        WorkerControl::new().services(&self.services)
    }

    fn status(&self) -> agents_common::Result<(JsonObject, JsonObject)> {
        self.control().status(self.layout())
    }

    /// `seal_for_stop` for [`OPERATION`], the native worker being `native_pid`.
    fn seal_for_stop(&self, native_pid: i64) -> agents_common::Result<SealedHold> {
        self.control()
            .seal_for_stop(self.layout(), OPERATION, native_pid)
    }

    fn require_startup_hold(&self) -> agents_common::Result<()> {
        self.control()
            .require_startup_hold(self.layout(), OPERATION)
    }

    fn release(&self) -> agents_common::Result<()> {
        self.control().release(self.layout(), OPERATION)
    }

    /// Writes `record` as the receipt and reads it back through the checks
    /// (which need no service manager).
    fn read_receipt(&self, record: &JsonObject) -> agents_common::Result<JsonObject> {
        self.installed.write_record(record);
        WorkerControl::new().worker_record(self.layout())
    }

    /// What reached the worker, one `METHOD target[ action]` per request.
    fn sent(&self) -> Vec<String> {
        self.double
            .requests()
            .iter()
            .map(|request| {
                let action = action_of(request);
                format!("{} {}{}", request.method, request.target, action)
            })
            .collect()
    }
}

/// ` <action>` of a maintenance request (`?` when it names none), nothing
/// for a request without a body.
fn action_of(request: &agents_tests::loopback_peers::Request) -> String {
    if request.body.is_empty() {
        return String::new();
    }
    let body = body_of(request);
    format!(
        " {}",
        body.get("action").and_then(Json::as_str).unwrap_or("?")
    )
}

/// [`Scenario::sent`]'s line for the status request.
fn get_status() -> String {
    format!("GET {STATUS}")
}

/// [`Scenario::sent`]'s line for the maintenance request of `action`.
fn post_maintenance(action: &str) -> String {
    format!("POST {MAINTENANCE} {action}")
}

/// A status reply of this instance with `lease` and `idle`.
fn status_with(lease: Json, idle: bool) -> Json {
    Json::Object(json_object! {
        "worker_instance_id" => INSTANCE_ID,
        "idle" => idle,
        "blockers" => JsonObject::new(),
        "lease" => lease,
    })
}

/// A refusal raised as Python's `RuntimeError(message)`.
fn runtime(message: &str) -> (ErrorClass, &str) {
    (ErrorClass::Runtime, message)
}

/// The status call is refused by the owner re-check and nothing, least of
/// all the control token, reached the worker.
#[track_caller]
fn assert_token_withheld(scenario: &Scenario, case: &str) {
    assert_case_refused(scenario.status(), runtime(OWNER_CHANGED), case);
    assert!(scenario.double.requests().is_empty(), "{case}");
}

#[test]
fn status_sends_the_control_token_to_the_receipt_origin() {
    let scenario = Scenario::new("status");
    let (seen_record, status) = scenario.status().unwrap();
    assert_eq!(seen_record, scenario.record);
    assert_eq!(status.get("idle"), Some(&Json::Bool(true)));
    let requests = scenario.double.requests();
    assert_eq!(requests.len(), 1);
    let port = scenario.double.port();
    let expected = format!(
        "GET {STATUS} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {CONTROL_TOKEN}\r\n\
         Accept: application/json\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        String::from_utf8(requests[0].raw.clone()).unwrap(),
        expected
    );
    // Checked before sending, then re-checked after the ownership proof.
    assert_eq!(scenario.services.calls(), 2);
}

/// A change to what the worker double answers, as a table entry.
type WorkerChange = fn(&mut WorkerState);

#[test]
fn status_from_another_instance_or_without_a_boolean_idle_is_refused() {
    let mismatch = "private worker status does not match its process receipt";
    let cases: [(&str, WorkerChange); 3] = [
        ("another instance ID", |state| {
            state.instance_id = "another".into()
        }),
        ("an integer idle", |state| state.idle = Json::Int(1)),
        ("no idle at all", |state| {
            state.status_reply = Some(Json::Object(
                json_object! { "worker_instance_id" => INSTANCE_ID },
            ))
        }),
    ];
    for (case, change) in cases {
        let scenario = Scenario::new("status-mismatch").with_worker(change);
        assert_case_refused(scenario.status(), runtime(mismatch), case);
    }
}

#[test]
fn worker_record_accepts_python_equal_protocol_values() {
    let scenario = Scenario::new("record-quirks");
    let mut record = scenario.record.clone();
    // protocol == 1 holds for true and 1.0 in Python.
    for protocol in [Json::Bool(true), Json::Float(1.0)] {
        record.insert("protocol", protocol.clone());
        assert_eq!(
            scenario.read_receipt(&record).unwrap(),
            record,
            "protocol {protocol:?}"
        );
    }
    // Empty user name, password, query or fragment are falsy, hence accepted,
    // and so are an upper-case scheme and a zero-padded port.
    for origin in [
        "http://:@127.0.0.1:80",
        "http://127.0.0.1:80?",
        "http://127.0.0.1:80#",
        "HTTP://127.0.0.1:0080",
    ] {
        record.insert("callback_origin", origin);
        if let Err(error) = scenario.read_receipt(&record) {
            panic!("callback_origin {origin:?}: {}", error.python_line());
        }
    }
}

const INVALID_RECEIPT: (ErrorClass, &str) =
    (ErrorClass::Runtime, "worker process receipt is invalid");
const NOT_LOOPBACK: (ErrorClass, &str) = (
    ErrorClass::Runtime,
    "worker callback receipt is not an exact loopback origin",
);

/// One receipt key set to a wrong value: (why it is wrong, key, value, the
/// exact refusal).
type WrongValue = (&'static str, &'static str, Json, (ErrorClass, &'static str));

/// Every wrong value `worker_record` must refuse, and how.
fn wrong_receipt_values(installed: &Installed) -> Vec<WrongValue> {
    let outside = installed.base.join("elsewhere/1.0.0");
    let outside = Json::from(outside.to_str().unwrap());
    let origin = |why, url: &str, refusal| (why, "callback_origin", Json::from(url), refusal);
    vec![
        (
            "not the worker role",
            "role",
            Json::from("gateway"),
            INVALID_RECEIPT,
        ),
        (
            "another protocol",
            "protocol",
            Json::Int(2),
            INVALID_RECEIPT,
        ),
        (
            "a string protocol",
            "protocol",
            Json::from("1"),
            INVALID_RECEIPT,
        ),
        ("PID 0", "pid", Json::Int(0), INVALID_RECEIPT),
        ("a boolean PID", "pid", Json::Bool(true), INVALID_RECEIPT),
        ("a float PID", "pid", Json::Float(4.0), INVALID_RECEIPT),
        (
            "an empty instance ID",
            "instance_id",
            Json::from(""),
            INVALID_RECEIPT,
        ),
        (
            "an integer instance ID",
            "instance_id",
            Json::Int(5),
            INVALID_RECEIPT,
        ),
        origin("https", "https://127.0.0.1:80", NOT_LOOPBACK),
        origin("a host name", "http://localhost:80", NOT_LOOPBACK),
        origin("another loopback", "http://127.0.0.2:80", NOT_LOOPBACK),
        origin("a path", "http://127.0.0.1:80/", NOT_LOOPBACK),
        origin("a fragment", "http://127.0.0.1:80#x", NOT_LOOPBACK),
        origin("a user name", "http://u@127.0.0.1:80", NOT_LOOPBACK),
        origin("no port", "http://127.0.0.1", NOT_LOOPBACK),
        origin("port 0", "http://127.0.0.1:0", NOT_LOOPBACK),
        ("a null origin", "callback_origin", Json::Null, NOT_LOOPBACK),
        origin(
            "an unclosed IPv6 bracket",
            "http://[::1:80",
            (ErrorClass::Value, "Invalid IPv6 URL"),
        ),
        origin(
            "a port that is no number",
            "http://127.0.0.1:8o",
            (
                ErrorClass::Value,
                "Port could not be cast to integer value as '8o'",
            ),
        ),
        (
            "a release of another installation",
            "release_root",
            outside,
            runtime("worker receipt release is outside this installation"),
        ),
        (
            "a relative release",
            "release_root",
            Json::from("releases/1.0.0"),
            (
                ErrorClass::Value,
                "execution paths must be absolute without traversal",
            ),
        ),
    ]
}

#[test]
fn worker_record_refuses_every_invalid_receipt() {
    let scenario = Scenario::new("record");
    for (why, key, value, refusal) in wrong_receipt_values(&scenario.installed) {
        let mut bad = scenario.record.clone();
        bad.insert(key, value.clone());
        let case = format!("{why}: {key} = {value:?} must be refused");
        assert_case_refused(scenario.read_receipt(&bad), refusal, &case);
    }
    // Missing keys are refused like wrong ones.
    for key in ["role", "callback_origin", "release_root"] {
        let mut bad = scenario.record.clone();
        bad.remove(key);
        assert!(scenario.read_receipt(&bad).is_err(), "{key} missing");
    }
}

#[test]
fn worker_record_refuses_a_receipt_that_is_not_a_json_object() {
    let scenario = Scenario::new("record-shape");
    let control = WorkerControl::new();
    scenario.installed.write_receipt_bytes(b"[1]");
    assert_case_refused(
        control.worker_record(scenario.layout()),
        INVALID_RECEIPT,
        "a JSON array",
    );
    scenario.installed.write_receipt_bytes(b"{");
    let err = control.worker_record(scenario.layout()).unwrap_err();
    assert_eq!(err.class(), ErrorClass::JsonDecode);
}

#[test]
fn worker_record_refuses_a_receipt_that_is_not_private() {
    // The receipt must be private, in a private runtime directory.
    let scenario = Scenario::new("record-private");
    let control = WorkerControl::new();
    let receipt = scenario.installed.runtime().join("worker.json");
    agents_tests::set_mode(&receipt, 0o644);
    assert_error(
        control.worker_record(scenario.layout()),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", receipt.display()),
    );
    scenario.installed.write_record(&scenario.record);
    agents_tests::set_mode(&scenario.installed.runtime(), 0o755);
    assert_error(
        control.worker_record(scenario.layout()),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            scenario.installed.runtime().display()
        ),
    );
}

#[test]
fn seal_for_stop_acquires_then_seals_an_idle_hold() {
    let scenario = Scenario::new("seal");
    let hold = scenario.seal_for_stop(own_pid()).unwrap();
    assert_eq!(hold.record, scenario.record);
    assert_eq!(
        hold.lease,
        lease("lease-1", OPERATION, true)
            .as_object()
            .unwrap()
            .clone()
    );
    assert_eq!(
        scenario.sent(),
        [
            get_status(),
            post_maintenance("acquire"),
            post_maintenance("seal"),
        ]
    );
    let requests = scenario.double.requests();
    // The POST bodies: insertion order, lease_id only when not acquiring.
    assert_eq!(
        String::from_utf8(requests[1].body.clone()).unwrap(),
        format!(
            r#"{{"action":"acquire","expected_worker_instance_id":"{INSTANCE_ID}","operation_id":"{OPERATION}"}}"#
        )
    );
    assert_eq!(
        String::from_utf8(requests[2].body.clone()).unwrap(),
        format!(
            r#"{{"action":"seal","expected_worker_instance_id":"{INSTANCE_ID}","operation_id":"{OPERATION}","lease_id":"lease-1"}}"#
        )
    );
    assert_eq!(
        requests[2].header("Authorization"),
        Some(format!("Bearer {CONTROL_TOKEN}").as_str())
    );
    assert_eq!(requests[2].header("Content-Type"), Some("application/json"));
}

#[test]
fn seal_for_stop_reuses_the_operations_own_lease() {
    let scenario = Scenario::new("seal-own").holding(lease("kept", OPERATION, false));
    let hold = scenario.seal_for_stop(own_pid()).unwrap();
    assert_eq!(hold.lease.get("lease_id"), Some(&Json::from("kept")));
    assert_eq!(scenario.sent(), [get_status(), post_maintenance("seal")]);
}

#[test]
fn seal_for_stop_refusals_send_nothing_further() {
    let scenario = Scenario::new("seal-pid");
    assert_case_refused(
        scenario.seal_for_stop(own_pid() + 1),
        runtime("native service does not own the worker that granted admission"),
        "another native PID",
    );
    assert_eq!(scenario.sent(), [get_status()]);

    let other = runtime("another operation owns worker maintenance admission");
    for (case, held) in [
        (
            "another operation's hold",
            lease("theirs", OTHER_OPERATION, false),
        ),
        ("an empty lease ID", lease("", OPERATION, false)),
        ("a lease that is no object", Json::from("lease")),
        (
            "an integer lease ID",
            Json::Object(json_object! { "operation_id" => OPERATION, "lease_id" => 7_i64 }),
        ),
    ] {
        let scenario = Scenario::new("seal-other").holding(held);
        assert_case_refused(scenario.seal_for_stop(own_pid()), other, case);
        assert_eq!(scenario.sent(), [get_status()], "{case}");
    }

    // The acquire reply still shows no lease of ours.
    let scenario = Scenario::new("seal-acquire").replying("acquire", status_with(Json::Null, true));
    assert_case_refused(
        scenario.seal_for_stop(own_pid()),
        other,
        "an acquire reply without a lease",
    );
    assert_eq!(scenario.sent(), [get_status(), post_maintenance("acquire")]);
}

#[test]
fn seal_for_stop_refuses_a_seal_reply_without_an_idle_sealed_hold_of_its_lease() {
    let not_sealed = runtime("worker did not seal an idle admission hold");
    for (case, reply, idle) in [
        (
            "an unsealed lease",
            lease("lease-1", OPERATION, false),
            true,
        ),
        ("a busy worker", lease("lease-1", OPERATION, true), false),
        ("another lease", lease("lease-2", OPERATION, true), true),
        (
            "another operation",
            lease("lease-1", OTHER_OPERATION, true),
            true,
        ),
        ("no lease", Json::Null, true),
    ] {
        let scenario = Scenario::new("seal-reply").replying("seal", status_with(reply, idle));
        assert_case_refused(scenario.seal_for_stop(own_pid()), not_sealed, case);
    }
}

#[test]
fn a_maintenance_reply_from_another_instance_is_refused() {
    let mut reply = status_with(Json::Null, true);
    reply
        .as_object_mut()
        .unwrap()
        .insert("worker_instance_id", "replacement");
    let scenario = Scenario::new("maintenance-instance").replying("renew", reply);
    assert_error(
        scenario.control().maintenance(
            scenario.layout(),
            &scenario.record,
            "renew",
            OPERATION,
            Some(&Json::from("l")),
        ),
        ErrorClass::Runtime,
        "worker changed during maintenance admission",
    );
}

#[test]
fn require_startup_hold_needs_an_idle_sealed_lease_of_the_operation() {
    let scenario = Scenario::new("hold").holding(lease("boot", OPERATION, true));
    scenario.require_startup_hold().unwrap();
    assert_eq!(scenario.sent(), [get_status()]);

    let lost = runtime("candidate worker did not retain its activation startup hold");
    for (case, held, idle) in [
        ("an unsealed lease", lease("boot", OPERATION, false), true),
        ("a busy worker", lease("boot", OPERATION, true), false),
        (
            "another operation",
            lease("boot", OTHER_OPERATION, true),
            true,
        ),
        ("no lease", Json::Null, true),
    ] {
        scenario.double.edit(|state| {
            state.lease = held;
            state.idle = Json::Bool(idle);
        });
        assert_case_refused(scenario.require_startup_hold(), lost, case);
    }
}

#[test]
fn release_clears_only_the_operations_own_hold() {
    // No hold: nothing but the status request.
    let scenario = Scenario::new("release-none");
    scenario.release().unwrap();
    assert_eq!(scenario.sent(), [get_status()]);

    let scenario = Scenario::new("release").holding(lease("boot", OPERATION, true));
    scenario.release().unwrap();
    assert_eq!(scenario.sent(), [get_status(), post_maintenance("release")]);
    assert_eq!(
        body_of(&scenario.double.requests()[1]).get("lease_id"),
        Some(&Json::from("boot"))
    );

    // A null lease_id is simply not sent.
    let scenario = Scenario::new("release-null-id").holding(Json::Object(
        json_object! { "operation_id" => OPERATION, "lease_id" => Json::Null },
    ));
    scenario.release().unwrap();
    let body = body_of(&scenario.double.requests()[1]);
    assert_eq!(
        body.keys().collect::<Vec<_>>(),
        ["action", "expected_worker_instance_id", "operation_id"]
    );

    // A reply without a lease key counts as released (`.get` is None).
    let scenario = Scenario::new("release-no-key")
        .holding(lease("boot", OPERATION, true))
        .replying(
            "release",
            Json::Object(json_object! { "worker_instance_id" => INSTANCE_ID }),
        );
    scenario.release().unwrap();
}

#[test]
fn release_refuses_another_operations_hold_and_one_the_worker_kept() {
    let scenario = Scenario::new("release-other").holding(lease("theirs", OTHER_OPERATION, true));
    assert_error(
        scenario.release(),
        ErrorClass::Runtime,
        "another operation owns the worker admission hold",
    );
    assert_eq!(scenario.sent(), [get_status()]);

    let scenario = Scenario::new("release-kept")
        .holding(lease("boot", OPERATION, true))
        .replying("release", status_with(lease("boot", OPERATION, true), true));
    assert_error(
        scenario.release(),
        ErrorClass::Runtime,
        "worker admission hold was not released",
    );
}

#[test]
fn no_running_native_worker_means_no_request() {
    let no_owner = runtime("credential endpoint has no running native owner");
    for (case, worker) in [
        ("stopped", stopped()),
        ("absent", absent()),
        ("running as PID 1", running(1)),
        (
            "running with a float PID",
            json_object! { "state" => "running", "enabled" => true, "pid" => Json::Float(4.0) },
        ),
        (
            "running without a PID",
            json_object! { "state" => "running", "enabled" => true },
        ),
    ] {
        let services = FakeServices::new(vec![native(worker, absent())]);
        let scenario = Scenario::new("no-owner").managed_by(services);
        assert_case_refused(scenario.status(), no_owner, case);
        assert!(scenario.double.requests().is_empty(), "{case}");
    }
}

#[test]
fn a_changed_worker_or_receipt_stops_the_token_before_it_is_sent() {
    // The native worker is another process than the receipt says.
    let services = FakeServices::new(vec![native(running(own_pid() + 1), absent())]);
    let scenario = Scenario::new("owner-pid").managed_by(services);
    assert_token_withheld(&scenario, "another native PID");

    // The manager changes between the pre-check and the re-check that runs
    // after the connection is proven: nothing reaches the worker.
    let services = FakeServices::new(vec![
        native(running(own_pid()), absent()),
        native(running(own_pid() + 1), absent()),
    ]);
    let scenario = Scenario::new("owner-recheck").managed_by(services);
    assert_token_withheld(&scenario, "the native PID changes before the re-check");
    assert_eq!(scenario.services.calls(), 2);

    // The receipt is rewritten (a new worker epoch) in the same gap.
    let scenario = Scenario::new("receipt-recheck");
    let mut replaced = scenario.record.clone();
    replaced.insert("instance_id", "ffffffffffffffffffffffffffffffff");
    let receipt_path = scenario.installed.runtime().join("worker.json");
    let data = python_compat::json::encode_compact(&Json::Object(replaced)).unwrap();
    let services = FakeServices::worker_running(absent()).on_call(2, move || {
        std::fs::write(&receipt_path, data).unwrap();
    });
    let scenario = scenario.managed_by(services);
    assert_token_withheld(&scenario, "the receipt changes before the re-check");
}

#[test]
fn a_missing_or_malformed_control_token_fails_before_any_connection() {
    let scenario = Scenario::new("token");
    let token = scenario.installed.runtime().join("control.token");
    std::fs::write(&token, "short").unwrap();
    assert_error(
        scenario.status(),
        ErrorClass::Runtime,
        "Invalid execution secret file",
    );
    std::fs::remove_file(&token).unwrap();
    let err = scenario.status().unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(scenario.services.calls(), 0);
    assert!(scenario.double.requests().is_empty());
}

/// `systemctl --user show` as a systemd user manager prints it: the worker
/// runs with this process's PID, the gateway unit does not exist.
struct RecordedSystemctl {
    worker_pid: u32,
}

impl agents_common::CommandRunner for RecordedSystemctl {
    fn run(
        &self,
        args: &[String],
        _timeout: std::time::Duration,
    ) -> agents_common::Result<agents_common::CommandCapture> {
        assert_eq!(&args[..3], ["systemctl", "--user", "show"]);
        let stdout = if args[3] == "agents-server.service" {
            format!(
                "LoadState=loaded\nActiveState=active\nUnitFileState=enabled\nMainPID={}\n",
                self.worker_pid
            )
        } else {
            "LoadState=not-found\nActiveState=inactive\nUnitFileState=\nMainPID=0\n".to_string()
        };
        Ok(agents_common::CommandCapture {
            status: 0,
            stdout: stdout.into_bytes(),
            stderr: Vec::new(),
        })
    }
}

/// The real native service client of `layout`, over a systemd user manager
/// that reports the worker unit's main PID as `worker_pid`.
fn systemd_reporting(layout: &ExecutionLayout, worker_pid: u32) -> agents_common::NativeServices {
    agents_common::NativeServices::with_runner(layout, Box::new(RecordedSystemctl { worker_pid }))
}

#[test]
fn native_services_pin_requests_to_the_managers_main_pid() {
    let scenario = Scenario::new("native-services");
    let units = scenario.layout().home.join(".config/systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::write(units.join("agents-server.service"), "[Unit]\n").unwrap();
    agents_tests::set_mode(&units.join("agents-server.service"), 0o600);

    let services = systemd_reporting(scenario.layout(), std::process::id());
    WorkerControl::new()
        .services(&services)
        .require_startup_hold(scenario.layout(), OPERATION)
        .unwrap_err();
    assert_eq!(scenario.sent(), [get_status()]);

    // The manager reports another main PID: the token is never sent.
    let other = systemd_reporting(scenario.layout(), std::process::id() + 1);
    assert_error(
        WorkerControl::new()
            .services(&other)
            .status(scenario.layout()),
        ErrorClass::Runtime,
        OWNER_CHANGED,
    );
    assert_eq!(scenario.double.requests().len(), 1);
}

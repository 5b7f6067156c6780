//! WorkerControl's private control calls against an in-process worker double
//! on a real loopback port: the receipt checks, status, maintenance, sealing
//! for a stop, the startup hold, release, and the owner re-check that must
//! stop a control token from reaching a worker of another epoch.

use agents_common::WorkerControl;
use agents_tests::assert_error;
use agents_tests::worker_double::{
    absent, body_of, lease, native, own_pid, running, stopped, FakeServices, Installed,
    WorkerDouble, CONTROL_TOKEN, INSTANCE_ID, OPERATION,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object, ErrorClass,
};

const STATUS: &str = "/api/admin/execution/status";
const MAINTENANCE: &str = "/api/admin/execution/maintenance";

/// An installation whose receipt points at a running double.
fn running_worker(tag: &str) -> (Installed, WorkerDouble, JsonObject) {
    let installed = Installed::new(tag);
    let double = WorkerDouble::start();
    let record = installed.record(double.port());
    installed.write_record(&record);
    (installed, double, record)
}

fn targets(double: &WorkerDouble) -> Vec<String> {
    double
        .requests()
        .iter()
        .map(|request| {
            let action = body_of_opt(request);
            format!("{} {}{}", request.method, request.target, action)
        })
        .collect()
}

fn body_of_opt(request: &agents_tests::loopback_peers::Request) -> String {
    if request.body.is_empty() {
        return String::new();
    }
    let body = body_of(request);
    format!(
        " {}",
        body.get("action").and_then(Json::as_str).unwrap_or("?")
    )
}

#[test]
fn status_sends_the_control_token_to_the_receipt_origin() {
    let (installed, double, record) = running_worker("status");
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let (seen_record, status) = control.status(&installed.layout).unwrap();
    assert_eq!(seen_record, record);
    assert_eq!(status.get("idle"), Some(&Json::Bool(true)));
    let requests = double.requests();
    assert_eq!(requests.len(), 1);
    let port = double.port();
    let expected = format!(
        "GET {STATUS} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {CONTROL_TOKEN}\r\n\
         Accept: application/json\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        String::from_utf8(requests[0].raw.clone()).unwrap(),
        expected
    );
    // Checked before sending, then re-checked after the ownership proof.
    assert_eq!(services.calls(), 2);
}

#[test]
fn status_from_another_instance_or_without_a_boolean_idle_is_refused() {
    let (installed, double, _record) = running_worker("status-mismatch");
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let mismatch = "private worker status does not match its process receipt";
    double.edit(|state| state.instance_id = "another".into());
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        mismatch,
    );
    double.edit(|state| {
        state.instance_id = INSTANCE_ID.into();
        state.idle = Json::Int(1);
    });
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        mismatch,
    );
    double.edit(|state| {
        state.status_reply = Some(Json::Object(
            json_object! { "worker_instance_id" => INSTANCE_ID },
        ))
    });
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        mismatch,
    );
}

#[test]
fn worker_record_accepts_python_equal_protocol_values() {
    let (installed, _double, mut record) = running_worker("record-quirks");
    let control = WorkerControl::new();
    // protocol == 1 holds for true and 1.0 in Python.
    for protocol in [Json::Bool(true), Json::Float(1.0)] {
        record.insert("protocol", protocol);
        installed.write_record(&record);
        assert_eq!(control.worker_record(&installed.layout).unwrap(), record);
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
        installed.write_record(&record);
        control.worker_record(&installed.layout).unwrap();
    }
}

#[test]
fn worker_record_refuses_every_invalid_receipt() {
    let (installed, _double, record) = running_worker("record");
    let control = WorkerControl::new();
    let invalid = "worker process receipt is invalid";
    let origin = "worker callback receipt is not an exact loopback origin";
    let outside = "worker receipt release is outside this installation";
    let outside_release = installed
        .base
        .join("elsewhere/1.0.0")
        .to_str()
        .unwrap()
        .to_string();
    let cases: Vec<(&str, Json, ErrorClass, String)> = vec![
        (
            "role",
            Json::from("gateway"),
            ErrorClass::Runtime,
            invalid.into(),
        ),
        (
            "protocol",
            Json::Int(2),
            ErrorClass::Runtime,
            invalid.into(),
        ),
        (
            "protocol",
            Json::from("1"),
            ErrorClass::Runtime,
            invalid.into(),
        ),
        ("pid", Json::Int(0), ErrorClass::Runtime, invalid.into()),
        ("pid", Json::Bool(true), ErrorClass::Runtime, invalid.into()),
        ("pid", Json::Float(4.0), ErrorClass::Runtime, invalid.into()),
        (
            "instance_id",
            Json::from(""),
            ErrorClass::Runtime,
            invalid.into(),
        ),
        (
            "instance_id",
            Json::Int(5),
            ErrorClass::Runtime,
            invalid.into(),
        ),
        (
            "callback_origin",
            Json::from("https://127.0.0.1:80"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://localhost:80"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.2:80"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.1:80/"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.1:80#x"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://u@127.0.0.1:80"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.1"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.1:0"),
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::Null,
            ErrorClass::Runtime,
            origin.into(),
        ),
        (
            "callback_origin",
            Json::from("http://[::1:80"),
            ErrorClass::Value,
            "Invalid IPv6 URL".into(),
        ),
        (
            "callback_origin",
            Json::from("http://127.0.0.1:8o"),
            ErrorClass::Value,
            "Port could not be cast to integer value as '8o'".into(),
        ),
        (
            "release_root",
            Json::from(outside_release),
            ErrorClass::Runtime,
            outside.into(),
        ),
        (
            "release_root",
            Json::from("releases/1.0.0"),
            ErrorClass::Value,
            "execution paths must be absolute without traversal".into(),
        ),
    ];
    for (key, value, class, message) in cases {
        let mut bad = record.clone();
        bad.insert(key, value.clone());
        installed.write_record(&bad);
        let result = control.worker_record(&installed.layout);
        assert!(result.is_err(), "{key} = {value:?} must be refused");
        assert_error(result, class, &message);
    }
    // Missing keys are refused like wrong ones.
    for key in ["role", "callback_origin", "release_root"] {
        let mut bad = record.clone();
        bad.remove(key);
        installed.write_record(&bad);
        assert!(
            control.worker_record(&installed.layout).is_err(),
            "{key} missing"
        );
    }
    installed.write_receipt_bytes(b"[1]");
    assert_error(
        control.worker_record(&installed.layout),
        ErrorClass::Runtime,
        invalid,
    );
    installed.write_receipt_bytes(b"{");
    let err = control.worker_record(&installed.layout).unwrap_err();
    assert_eq!(err.class(), ErrorClass::JsonDecode);
    // The receipt must be private, in a private runtime directory.
    installed.write_record(&record);
    agents_tests::set_mode(&installed.runtime().join("worker.json"), 0o644);
    let path = installed.runtime().join("worker.json");
    assert_error(
        control.worker_record(&installed.layout),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", path.display()),
    );
    installed.write_record(&record);
    agents_tests::set_mode(&installed.runtime(), 0o755);
    assert_error(
        control.worker_record(&installed.layout),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            installed.runtime().display()
        ),
    );
}

#[test]
fn seal_for_stop_acquires_then_seals_an_idle_hold() {
    let (installed, double, record) = running_worker("seal");
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let hold = control
        .seal_for_stop(&installed.layout, OPERATION, own_pid())
        .unwrap();
    assert_eq!(hold.record, record);
    assert_eq!(
        hold.lease,
        lease("lease-1", OPERATION, true)
            .as_object()
            .unwrap()
            .clone()
    );
    assert_eq!(
        targets(&double),
        [
            format!("GET {STATUS}"),
            format!("POST {MAINTENANCE} acquire"),
            format!("POST {MAINTENANCE} seal"),
        ]
    );
    let requests = double.requests();
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
    let (installed, double, _record) = running_worker("seal-own");
    double.edit(|state| state.lease = lease("kept", OPERATION, false));
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let hold = control
        .seal_for_stop(&installed.layout, OPERATION, own_pid())
        .unwrap();
    assert_eq!(hold.lease.get("lease_id"), Some(&Json::from("kept")));
    assert_eq!(
        targets(&double),
        [format!("GET {STATUS}"), format!("POST {MAINTENANCE} seal")]
    );
}

#[test]
fn seal_for_stop_refusals_send_nothing_further() {
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);

    let (installed, double, _record) = running_worker("seal-pid");
    assert_error(
        control.seal_for_stop(&installed.layout, OPERATION, own_pid() + 1),
        ErrorClass::Runtime,
        "native service does not own the worker that granted admission",
    );
    assert_eq!(targets(&double), [format!("GET {STATUS}")]);

    let other = "another operation owns worker maintenance admission";
    for held in [
        lease("theirs", "00000000-0000-0000-0000-000000000000", false),
        lease("", OPERATION, false),
        Json::from("lease"),
        Json::Object(json_object! { "operation_id" => OPERATION, "lease_id" => 7_i64 }),
    ] {
        let (installed, double, _record) = running_worker("seal-other");
        double.edit(|state| state.lease = held.clone());
        assert_error(
            control.seal_for_stop(&installed.layout, OPERATION, own_pid()),
            ErrorClass::Runtime,
            other,
        );
        assert_eq!(targets(&double), [format!("GET {STATUS}")], "{held:?}");
    }

    // The acquire reply still shows no lease of ours.
    let (installed, double, _record) = running_worker("seal-acquire");
    double.edit(|state| {
        state
            .maintenance_reply
            .push(("acquire".into(), status_with(Json::Null, true)));
    });
    assert_error(
        control.seal_for_stop(&installed.layout, OPERATION, own_pid()),
        ErrorClass::Runtime,
        other,
    );
    assert_eq!(
        targets(&double),
        [
            format!("GET {STATUS}"),
            format!("POST {MAINTENANCE} acquire")
        ]
    );

    let not_sealed = "worker did not seal an idle admission hold";
    for (reply, idle) in [
        (lease("lease-1", OPERATION, false), true),
        (lease("lease-1", OPERATION, true), false),
        (lease("lease-2", OPERATION, true), true),
        (
            lease("lease-1", "00000000-0000-0000-0000-000000000000", true),
            true,
        ),
        (Json::Null, true),
    ] {
        let (installed, double, _record) = running_worker("seal-reply");
        double.edit(|state| {
            state
                .maintenance_reply
                .push(("seal".into(), status_with(reply.clone(), idle)))
        });
        assert_error(
            control.seal_for_stop(&installed.layout, OPERATION, own_pid()),
            ErrorClass::Runtime,
            not_sealed,
        );
    }
}

fn status_with(lease: Json, idle: bool) -> Json {
    Json::Object(json_object! {
        "worker_instance_id" => INSTANCE_ID,
        "idle" => idle,
        "blockers" => JsonObject::new(),
        "lease" => lease,
    })
}

#[test]
fn a_maintenance_reply_from_another_instance_is_refused() {
    let (installed, double, record) = running_worker("maintenance-instance");
    let mut reply = status_with(Json::Null, true);
    reply
        .as_object_mut()
        .unwrap()
        .insert("worker_instance_id", "replacement");
    double.edit(|state| state.maintenance_reply.push(("renew".into(), reply)));
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    assert_error(
        control.maintenance(
            &installed.layout,
            &record,
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
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let (installed, double, _record) = running_worker("hold");
    double.edit(|state| state.lease = lease("boot", OPERATION, true));
    control
        .require_startup_hold(&installed.layout, OPERATION)
        .unwrap();
    assert_eq!(targets(&double), [format!("GET {STATUS}")]);

    let lost = "candidate worker did not retain its activation startup hold";
    for (held, idle) in [
        (lease("boot", OPERATION, false), true),
        (lease("boot", OPERATION, true), false),
        (
            lease("boot", "00000000-0000-0000-0000-000000000000", true),
            true,
        ),
        (Json::Null, true),
    ] {
        double.edit(|state| {
            state.lease = held.clone();
            state.idle = Json::Bool(idle);
        });
        assert_error(
            control.require_startup_hold(&installed.layout, OPERATION),
            ErrorClass::Runtime,
            lost,
        );
    }
}

#[test]
fn release_clears_only_the_operations_own_hold() {
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);

    // No hold: nothing but the status request.
    let (installed, double, _record) = running_worker("release-none");
    control.release(&installed.layout, OPERATION).unwrap();
    assert_eq!(targets(&double), [format!("GET {STATUS}")]);

    let (installed, double, _record) = running_worker("release");
    double.edit(|state| state.lease = lease("boot", OPERATION, true));
    control.release(&installed.layout, OPERATION).unwrap();
    assert_eq!(
        targets(&double),
        [
            format!("GET {STATUS}"),
            format!("POST {MAINTENANCE} release")
        ]
    );
    assert_eq!(
        body_of(&double.requests()[1]).get("lease_id"),
        Some(&Json::from("boot"))
    );

    // A null lease_id is simply not sent.
    let (installed, double, _record) = running_worker("release-null-id");
    double.edit(|state| {
        state.lease =
            Json::Object(json_object! { "operation_id" => OPERATION, "lease_id" => Json::Null })
    });
    control.release(&installed.layout, OPERATION).unwrap();
    let body = body_of(&double.requests()[1]);
    assert_eq!(
        body.keys().collect::<Vec<_>>(),
        ["action", "expected_worker_instance_id", "operation_id"]
    );

    let (installed, double, _record) = running_worker("release-other");
    double
        .edit(|state| state.lease = lease("theirs", "00000000-0000-0000-0000-000000000000", true));
    assert_error(
        control.release(&installed.layout, OPERATION),
        ErrorClass::Runtime,
        "another operation owns the worker admission hold",
    );
    assert_eq!(targets(&double), [format!("GET {STATUS}")]);

    let (installed, double, _record) = running_worker("release-kept");
    double.edit(|state| {
        state.lease = lease("boot", OPERATION, true);
        state.maintenance_reply.push((
            "release".into(),
            status_with(lease("boot", OPERATION, true), true),
        ));
    });
    assert_error(
        control.release(&installed.layout, OPERATION),
        ErrorClass::Runtime,
        "worker admission hold was not released",
    );

    // A reply without a lease key counts as released (`.get` is None).
    let (installed, double, _record) = running_worker("release-no-key");
    double.edit(|state| {
        state.lease = lease("boot", OPERATION, true);
        state.maintenance_reply.push((
            "release".into(),
            Json::Object(json_object! { "worker_instance_id" => INSTANCE_ID }),
        ));
    });
    control.release(&installed.layout, OPERATION).unwrap();
}

#[test]
fn no_running_native_worker_means_no_request() {
    let no_owner = "credential endpoint has no running native owner";
    for worker in [
        stopped(),
        absent(),
        running(1),
        json_object! { "state" => "running", "enabled" => true, "pid" => Json::Float(4.0) },
        json_object! { "state" => "running", "enabled" => true },
    ] {
        let (installed, double, _record) = running_worker("no-owner");
        let services = FakeServices::new(vec![native(worker.clone(), absent())]);
        let control = WorkerControl::new().services(&services);
        assert_error(
            control.status(&installed.layout),
            ErrorClass::Runtime,
            no_owner,
        );
        assert!(double.requests().is_empty(), "{worker:?}");
    }
}

#[test]
fn a_changed_worker_or_receipt_stops_the_token_before_it_is_sent() {
    let changed = "native worker or callback receipt changed before credentials were sent";

    // The native worker is another process than the receipt says.
    let (installed, double, _record) = running_worker("owner-pid");
    let services = FakeServices::new(vec![native(running(own_pid() + 1), absent())]);
    let control = WorkerControl::new().services(&services);
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        changed,
    );
    assert!(double.requests().is_empty());

    // The manager changes between the pre-check and the re-check that runs
    // after the connection is proven: nothing reaches the worker.
    let (installed, double, _record) = running_worker("owner-recheck");
    let services = FakeServices::new(vec![
        native(running(own_pid()), absent()),
        native(running(own_pid() + 1), absent()),
    ]);
    let control = WorkerControl::new().services(&services);
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        changed,
    );
    assert_eq!(services.calls(), 2);
    assert!(double.requests().is_empty());

    // The receipt is rewritten (a new worker epoch) in the same gap.
    let (installed, double, record) = running_worker("receipt-recheck");
    let mut replaced = record.clone();
    replaced.insert("instance_id", "ffffffffffffffffffffffffffffffff");
    let receipt_path = installed.runtime().join("worker.json");
    let data = python_compat::json::encode_compact(&Json::Object(replaced)).unwrap();
    let services =
        FakeServices::new(vec![native(running(own_pid()), absent())]).on_call(2, move || {
            std::fs::write(&receipt_path, data).unwrap();
        });
    let control = WorkerControl::new().services(&services);
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        changed,
    );
    assert!(double.requests().is_empty());
}

#[test]
fn a_missing_or_malformed_control_token_fails_before_any_connection() {
    let (installed, double, _record) = running_worker("token");
    let services = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&services);
    let token = installed.runtime().join("control.token");
    std::fs::write(&token, "short").unwrap();
    assert_error(
        control.status(&installed.layout),
        ErrorClass::Runtime,
        "Invalid execution secret file",
    );
    std::fs::remove_file(&token).unwrap();
    let err = control.status(&installed.layout).unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(services.calls(), 0);
    assert!(double.requests().is_empty());
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

#[test]
fn native_services_pin_requests_to_the_managers_main_pid() {
    let (installed, double, _record) = running_worker("native-services");
    let units = installed.layout.home.join(".config/systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::write(units.join("agents-server.service"), "[Unit]\n").unwrap();
    agents_tests::set_mode(&units.join("agents-server.service"), 0o600);

    let services = agents_common::NativeServices::with_runner(
        &installed.layout,
        Box::new(RecordedSystemctl {
            worker_pid: std::process::id(),
        }),
    );
    let control = WorkerControl::new().services(&services);
    control
        .require_startup_hold(&installed.layout, OPERATION)
        .unwrap_err();
    assert_eq!(targets(&double), [format!("GET {STATUS}")]);

    // The manager reports another main PID: the token is never sent.
    let other = agents_common::NativeServices::with_runner(
        &installed.layout,
        Box::new(RecordedSystemctl {
            worker_pid: std::process::id() + 1,
        }),
    );
    assert_error(
        WorkerControl::new()
            .services(&other)
            .status(&installed.layout),
        ErrorClass::Runtime,
        "native worker or callback receipt changed before credentials were sent",
    );
    assert_eq!(double.requests().len(), 1);
}

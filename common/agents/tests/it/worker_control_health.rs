//! WorkerControl's authenticated health: the agent token from `config_root/env`
//! and the layout environment, public health pinned to the native gateway
//! (bind mapping, the pre-gateway worker case), and the activation receipt
//! cross-checked against `worker.json` and the native PIDs.

use agents_common::WorkerControl;
use agents_tests::assert_case_refused;
use agents_tests::assert_error;
use agents_tests::worker_double::{
    absent, native, own_pid, running, stopped, FakeServices, Installed, WorkerDouble, INSTANCE_ID,
};
use python_compat::{
    json::{encode_line, Json, JsonObject},
    json_object, ErrorClass,
};

const NO_TOKEN: &str = "authenticated activation health requires the preserved server token";

fn with_environment<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl FnOnce(&mut JsonObject) + 'a {
    move |dict| {
        let mut environment = JsonObject::new();
        for (key, value) in pairs {
            environment.insert(*key, *value);
        }
        dict.insert("environment", environment);
    }
}

/// The bearer token the worker double received for callback health, after
/// writing `env` (if any) over a layout with `environment`.
fn token_sent(
    tag: &str,
    environment: &[(&str, &str)],
    env: Option<&[u8]>,
) -> agents_common::Result<String> {
    let installed = Installed::with_layout(tag, with_environment(environment));
    if let Some(env) = env {
        installed.write_env(env, 0o600);
    }
    let double = WorkerDouble::start();
    let record = installed.record(double.port());
    installed.write_record(&record);
    let services = FakeServices::worker_running(absent());
    WorkerControl::new()
        .services(&services)
        .callback_health(&installed.layout, &record)?;
    let requests = double.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].target, "/api/health");
    Ok(requests[0]
        .header("Authorization")
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_string())
}

#[test]
fn the_agent_token_comes_from_env_over_the_layout_environment() {
    // Layout environment only.
    assert_eq!(
        token_sent(
            "token-layout",
            &[("AGENTSDOCK_AGENT_TOKEN", "from-layout")],
            None
        )
        .unwrap(),
        "from-layout"
    );
    // The env file wins; quoting is decoded; comments and blanks are skipped.
    let env = b"# comment\n\n   \nAGENTSDOCK_AGENT_TOKEN='from-env'\n";
    assert_eq!(
        token_sent(
            "token-env",
            &[("AGENTSDOCK_AGENT_TOKEN", "from-layout")],
            Some(env)
        )
        .unwrap(),
        "from-env"
    );
    // A value of several words is ignored (the layout value stays); a key
    // with `export ` or leading space is another key.
    let env = b"AGENTSDOCK_AGENT_TOKEN=two words\nexport AGENTSDOCK_AGENT_TOKEN=x\n AGENTSDOCK_AGENT_TOKEN=y\n";
    assert_eq!(
        token_sent(
            "token-words",
            &[("AGENTSDOCK_AGENT_TOKEN", "kept")],
            Some(env)
        )
        .unwrap(),
        "kept"
    );
    // An empty single word overrides the layout value and falls through to
    // the next variable, in the server's preference order.
    let env =
        b"AGENTSDOCK_AGENT_TOKEN=''\r\nAGENT_TOKEN=last\x0bZENITHBOT_AGENT_TOKEN=\"z\\\"bot\"\n";
    assert_eq!(
        token_sent(
            "token-order",
            &[
                ("AGENTSDOCK_AGENT_TOKEN", "layout"),
                ("ZENITHDOCK_AGENT_TOKEN", "")
            ],
            Some(env)
        )
        .unwrap(),
        "z\"bot"
    );
    let env = b"AGENT_TOKEN=last\n";
    assert_eq!(token_sent("token-last", &[], Some(env)).unwrap(), "last");
    // `#` starts a comment only at the start of a line.
    let env = b"  # AGENT_TOKEN=commented\nAGENT_TOKEN=a#b\n";
    assert_eq!(token_sent("token-hash", &[], Some(env)).unwrap(), "a#b");
}

#[test]
fn agent_token_refusals() {
    assert_error(
        token_sent("token-none", &[], None),
        ErrorClass::Runtime,
        NO_TOKEN,
    );
    assert_error(
        token_sent("token-empty", &[("AGENT_TOKEN", "")], Some(b"X=1\n")),
        ErrorClass::Runtime,
        NO_TOKEN,
    );
    assert_error(
        token_sent("token-quote", &[], Some(b"AGENT_TOKEN='open\n")),
        ErrorClass::Value,
        "No closing quotation",
    );
    assert_error(
        token_sent("token-utf8", &[], Some(b"AGENT_TOKEN=\xff\n")),
        ErrorClass::UnicodeDecode,
        "'utf-8' codec can't decode byte 0xff in position 12: invalid start byte",
    );
    // The env file must be private.
    let installed = Installed::with_layout("token-mode", with_environment(&[("AGENT_TOKEN", "t")]));
    installed.write_env(b"AGENT_TOKEN=t\n", 0o644);
    let record = installed.record(1);
    let services = FakeServices::worker_running(absent());
    let env = installed.layout.config_root.join("env");
    assert_error(
        WorkerControl::new()
            .services(&services)
            .callback_health(&installed.layout, &record),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", env.display()),
    );
}

fn health_body() -> Json {
    Json::Object(json_object! {
        "ok" => true,
        "server_identity" => "0123456789abcdef01234567",
        "gateway" => json_object! {
            "protocol" => 1_i64,
            "instance_id" => "gateway-instance",
            "pid" => own_pid(),
            "version" => "1.0.0",
            "restart_preserves_execution" => true,
        },
        "execution_service" => json_object! {
            "protocol" => 1_i64,
            "instance_id" => INSTANCE_ID,
            "pid" => own_pid(),
            "version" => "1.0.0",
            "worker_upgrade_policy" => "when_idle",
            "rolling_worker_upgrade" => false,
            "maintenance_held" => false,
        },
    })
}

/// A layout whose public listener is the double (bind as given), with the
/// agent token in its environment and the double's receipt written.
fn public(tag: &str, bind: &str, listen: &str) -> (Installed, WorkerDouble) {
    let double = WorkerDouble::start_on(listen);
    double.edit(|state| state.health = health_body());
    let port = double.port();
    let installed = Installed::with_layout(tag, |dict| {
        dict.insert("bind", bind);
        dict.insert("port", i64::from(port));
        dict.insert(
            "environment",
            json_object! { "AGENTSDOCK_AGENT_TOKEN" => "agent-token" },
        );
    });
    installed.write_record(&installed.record(port));
    (installed, double)
}

#[test]
fn public_health_maps_the_bind_and_pins_the_gateway() {
    for (bind, listen, host) in [
        ("0.0.0.0", "127.0.0.1:0", "127.0.0.1"),
        ("localhost", "127.0.0.1:0", "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1:0", "127.0.0.1"),
        ("::", "[::1]:0", "[::1]"),
        ("[::]", "[::1]:0", "[::1]"),
        ("::1", "[::1]:0", "[::1]"),
    ] {
        let (installed, double) = public("health-bind", bind, listen);
        let services = FakeServices::new(vec![native(running(1_000_000), running(own_pid()))]);
        let health = WorkerControl::new()
            .services(&services)
            .health(&installed.layout)
            .unwrap();
        assert_eq!(Json::Object(health), health_body());
        let requests = double.requests();
        let expected = format!(
            "GET /api/health HTTP/1.1\r\nHost: {host}:{}\r\nAuthorization: Bearer agent-token\r\n\
             Accept: application/json\r\nConnection: close\r\n\r\n",
            double.port()
        );
        assert_eq!(
            String::from_utf8(requests[0].raw.clone()).unwrap(),
            expected,
            "{bind}"
        );
    }
}

#[test]
fn public_health_is_not_sent_to_a_process_the_manager_does_not_run() {
    // The gateway runs with another PID than the listener's owner.
    let (installed, double) = public("health-other", "127.0.0.1", "127.0.0.1:0");
    let services = FakeServices::new(vec![native(running(own_pid()), running(2))]);
    let err = WorkerControl::new()
        .request_timeout(0.3)
        .services(&services)
        .health(&installed.layout)
        .unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: pinned HTTP connection ownership could not be proven"
    );
    assert!(double.requests().is_empty());

    // The gateway changed between the pre-check and the re-check.
    let services = FakeServices::new(vec![
        native(running(own_pid()), running(own_pid())),
        native(running(own_pid()), running(own_pid() + 1)),
    ]);
    assert_error(
        WorkerControl::new()
            .services(&services)
            .health(&installed.layout),
        ErrorClass::Runtime,
        "native health endpoint changed before credentials were sent",
    );
    assert!(double.requests().is_empty());
}

#[test]
fn without_a_gateway_only_a_pre_gateway_install_may_use_the_worker() {
    let needs_gateway = "public credentials require the installed native gateway";
    // Gateway absent, no manifest: the running worker answers public health.
    let (installed, double) = public("health-worker", "127.0.0.1", "127.0.0.1:0");
    let services = FakeServices::new(vec![native(running(own_pid()), absent())]);
    WorkerControl::new()
        .services(&services)
        .health(&installed.layout)
        .unwrap();
    assert_eq!(double.requests().len(), 1);

    // A stopped gateway, or an installed manifest (even a dangling link), refuses.
    let services = FakeServices::new(vec![native(running(own_pid()), stopped())]);
    assert_error(
        WorkerControl::new()
            .services(&services)
            .health(&installed.layout),
        ErrorClass::Runtime,
        needs_gateway,
    );
    let manifest = installed.layout.manifest_path();
    std::os::unix::fs::symlink("/nonexistent/target", &manifest).unwrap();
    let services = FakeServices::new(vec![native(running(own_pid()), absent())]);
    assert_error(
        WorkerControl::new()
            .services(&services)
            .health(&installed.layout),
        ErrorClass::Runtime,
        needs_gateway,
    );
    std::fs::remove_file(&manifest).unwrap();
    std::fs::write(&manifest, "{}").unwrap();
    assert_error(
        WorkerControl::new()
            .services(&services)
            .health(&installed.layout),
        ErrorClass::Runtime,
        needs_gateway,
    );
    assert_eq!(double.requests().len(), 1);

    // Neither running: no owner.
    std::fs::remove_file(&manifest).unwrap();
    let services = FakeServices::new(vec![native(stopped(), absent())]);
    assert_error(
        WorkerControl::new()
            .services(&services)
            .health(&installed.layout),
        ErrorClass::Runtime,
        "credential endpoint has no running native owner",
    );
}

#[test]
fn receipt_reports_both_components_in_python_key_order() {
    let (installed, _double) = public("receipt", "127.0.0.1", "127.0.0.1:0");
    let services = FakeServices::new(vec![native(running(own_pid()), running(own_pid()))]);
    let receipt = WorkerControl::new()
        .services(&services)
        .receipt(&installed.layout, &services)
        .unwrap();
    let pid = own_pid();
    let expected = format!(
        "{{\"gateway_version\": \"1.0.0\", \"worker_version\": \"1.0.0\", \"worker_release\": \"{}\", \
         \"protocol_version\": 1, \"server_identity\": \"0123456789abcdef01234567\", \"gateway_pid\": {pid}, \
         \"worker_pid\": {pid}, \"worker_instance_id\": \"{INSTANCE_ID}\", \"maintenance_held\": false}}",
        installed.release_root()
    );
    assert_eq!(encode_line(&Json::Object(receipt), false), expected);
}

/// The manager of the receipt tests: it runs both the worker and the gateway
/// as this process, as the double's health claims.
fn both_running_here() -> FakeServices {
    FakeServices::new(vec![native(running(own_pid()), running(own_pid()))])
}

/// A public layout served by the worker double (see [`public`]); each
/// receipt test changes one thing of it.
struct ReceiptScenario {
    installed: Installed,
    double: WorkerDouble,
}

impl ReceiptScenario {
    fn new(tag: &str) -> Self {
        let (installed, double) = public(tag, "127.0.0.1", "127.0.0.1:0");
        ReceiptScenario { installed, double }
    }

    /// The double answers health with [`health_body`] changed by `change`.
    fn with_health(self, change: impl FnOnce(&mut JsonObject)) -> Self {
        let mut body = health_body();
        change(body.as_object_mut().unwrap());
        self.double.edit(|state| state.health = body);
        self
    }

    /// `receipt` with [`both_running_here`] answering every owner check.
    fn receipt(&self) -> agents_common::Result<JsonObject> {
        let services = both_running_here();
        WorkerControl::new()
            .services(&services)
            .receipt(&self.installed.layout, &services)
    }

    /// `receipt` with health pinned as usual, but the component PIDs
    /// checked against what `manager` reports.
    fn receipt_checked_by(&self, manager: &FakeServices) -> agents_common::Result<JsonObject> {
        WorkerControl::new()
            .services(&both_running_here())
            .receipt(&self.installed.layout, manager)
    }
}

const RECEIPT_MISMATCH: (ErrorClass, &str) = (
    ErrorClass::Runtime,
    "authenticated gateway/worker health does not match owned runtime receipts",
);

/// A change to the health the double answers, as a table entry.
type HealthChange = fn(&mut JsonObject);

/// Health that differs from the owned receipts, each row in one way.
fn mismatched_health() -> [(&'static str, HealthChange); 8] {
    [
        ("ok false", |health| {
            health.insert("ok", false);
        }),
        ("ok 1, not true", |health| {
            health.insert("ok", 1_i64);
        }),
        ("no gateway", |health| {
            health.remove("gateway");
        }),
        ("a worker that is no object", |health| {
            health.insert("execution_service", "w");
        }),
        ("gateway protocol 2", |health| {
            set_member(health, "gateway", "protocol", Json::Int(2))
        }),
        ("a null worker protocol", |health| {
            set_member(health, "execution_service", "protocol", Json::Null)
        }),
        ("another worker instance", |health| {
            set_member(health, "execution_service", "instance_id", Json::from("x"))
        }),
        ("another worker PID", |health| {
            let pid = Json::Int(own_pid() as i128 + 1);
            set_member(health, "execution_service", "pid", pid)
        }),
    ]
}

/// The receipt vouches for what is running only when the authenticated
/// health, `worker.json` and the manager's PIDs all agree (with Python's
/// numeric equality).
#[test]
fn receipt_refuses_health_that_does_not_match_the_owned_receipts() {
    for (case, change) in mismatched_health() {
        let scenario = ReceiptScenario::new("receipt-bad").with_health(change);
        assert_case_refused(scenario.receipt(), RECEIPT_MISMATCH, case);
    }

    // protocol 1.0 and pid as float compare equal in Python: accepted.
    let scenario = ReceiptScenario::new("receipt-float").with_health(|health| {
        set_member(health, "gateway", "protocol", Json::Float(1.0));
        let pid = Json::Float(own_pid() as f64);
        set_member(health, "execution_service", "pid", pid);
    });
    if let Err(error) = scenario.receipt() {
        panic!("a float protocol and PID: {}", error.python_line());
    }

    // The receipt's release must be the layout's worker release.
    let scenario = ReceiptScenario::new("receipt-release");
    let installed = &scenario.installed;
    installed.base.release("2.0.0");
    let other_release = installed.base.join("install/releases/2.0.0");
    let mut record = installed.record(scenario.double.port());
    record.insert("release_root", other_release.to_str().unwrap());
    installed.write_record(&record);
    assert_case_refused(
        scenario.receipt(),
        RECEIPT_MISMATCH,
        "a receipt of another release",
    );

    // The PIDs the manager reports must be the authenticated components'.
    let scenario = ReceiptScenario::new("receipt-native");
    let manager = FakeServices::new(vec![native(running(own_pid()), running(own_pid() + 1))]);
    assert_case_refused(
        scenario.receipt_checked_by(&manager),
        (
            ErrorClass::Runtime,
            "native services do not own the authenticated component processes",
        ),
        "a manager that runs the gateway as another PID",
    );
}

/// `health[component][key] = value`.
fn set_member(health: &mut JsonObject, component: &str, key: &str, value: Json) {
    let mut object = health.get(component).unwrap().as_object().unwrap().clone();
    object.insert(key, value);
    health.insert(component, object);
}

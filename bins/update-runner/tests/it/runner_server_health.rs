//! The runner's health checks against the original: one real HTTP server on
//! 127.0.0.1 answers `/api/health` with a document chosen by the bearer token
//! of each request, and `update_runner.py`'s `server_work_snapshot`,
//! `assert_server_idle`, `assert_post_update_identity` and
//! `assert_repaired_team_hub_identity` (python3) and the port must accept or
//! refuse every document the same way. Transport failures use real refused,
//! silent and closing peers; the readiness wait and the one-time credential
//! file are compared through the files they leave.

use agents_tests::release_support;
use agents_tests::Originals;

use std::collections::HashMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agents_common::read_status_unlocked;
use python_compat::{
    json::{Json, JsonObject},
    json_object, PythonInt,
};
use release_support::{python_oracle, Reply, TempDir, TestServer};
use update_runner::server_health::{
    consume_auth_token_file, PostUpdateIdentity, ReadinessWait, RepairedHubIdentity, ServerHealth,
    StatusOwner,
};

const IDENTITY: &str = "server-identity-1";
const HUB_ID: &str = "hub_0123456789";
const DIRECT_URL: &str = "http://192.168.1.20:7850/api/team-hub";

fn secure_peer() -> JsonObject {
    json_object! {
        "available" => true,
        "state_available" => true,
        "state_error_code" => Json::Null,
        "required" => false,
        "version" => 1,
        "control_path" => "/api/admin/secure-peers/v1/status",
        "proxy_prefix" => "/api/team-hub-secure",
    }
}

fn team_hub() -> JsonObject {
    json_object! {
        "available" => true,
        "designated_host" => true,
        "version" => 1,
        "base_path" => "/api/team-hub",
        "hub_id" => HUB_ID,
        "host_server_identity" => IDENTITY,
        "transport" => "loopback",
        "hub_url" => Json::Null,
        "routes" => vec![
            Json::Object(json_object! {"transport" => "loopback", "hub_url" => Json::Null}),
            Json::Object(json_object! {"transport" => "direct_ip", "hub_url" => DIRECT_URL}),
        ],
    }
}

/// A healthy, idle, converged server on 1.2.3 hosting a loopback Hub.
fn healthy() -> JsonObject {
    json_object! {
        "ok" => true,
        "server_identity" => IDENTITY,
        "server_version" => "1.2.3",
        "api_contract_version" => 28,
        "active" => Vec::<Json>::new(),
        "active_count" => 0,
        "update_blocking_queued_count" => 0,
        "queued" => JsonObject::new(),
        "update_service_cgroup" => json_object! {
            "safe" => true,
            "unknown_descendant_count" => 0,
            "inspection" => "verified",
        },
        "gateway" => json_object! {"version" => "1.2.3"},
        "execution_service" => json_object! {"version" => "1.2.3", "maintenance_held" => false},
        "capabilities" => json_object! {
            "secure_peer_v1" => secure_peer(),
            "team_hub_v1" => team_hub(),
        },
    }
}

/// `healthy()` with one edit applied at a dotted path (`None` removes).
fn edited(path: &str, value: Option<Json>) -> JsonObject {
    let mut document = Json::Object(healthy());
    let keys: Vec<&str> = path.split('.').collect();
    let mut target = &mut document;
    for key in &keys[..keys.len() - 1] {
        target = target.as_object_mut().unwrap().get_mut(key).unwrap();
    }
    let object = target.as_object_mut().unwrap();
    match value {
        Some(value) => {
            object.insert(keys[keys.len() - 1], value);
        }
        None => {
            object.remove(keys[keys.len() - 1]);
        }
    }
    match document {
        Json::Object(object) => object,
        _ => unreachable!(),
    }
}

fn body(document: &JsonObject) -> Vec<u8> {
    python_compat::json::encode_compact(&Json::Object(document.clone())).unwrap()
}

/// Status code, content type and body of one canned health answer.
type Answer = (u16, &'static str, Vec<u8>);

/// The health server: the bearer token names the answer.
struct HealthServer {
    server: TestServer,
    answers: Arc<Mutex<HashMap<String, Answer>>>,
}

impl HealthServer {
    fn start() -> Self {
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let table = answers.clone();
        let server = TestServer::start(move |request| {
            let token = request
                .header("Authorization")
                .and_then(|value| value.strip_prefix("Bearer "))
                .unwrap_or("")
                .to_string();
            let table = table.lock().unwrap();
            let Some((status, reason, body)) = table.get(&token).cloned() else {
                return Reply::status(401, "Unauthorized");
            };
            let mut reply = Reply::ok(&body);
            reply.status = status;
            reply.reason = reason;
            reply
        });
        HealthServer { server, answers }
    }

    fn answer(&self, token: &str, status: u16, reason: &'static str, body: Vec<u8>) {
        self.answers
            .lock()
            .unwrap()
            .insert(token.to_string(), (status, reason, body));
    }
}

/// A check and its arguments, run by both implementations.
#[derive(Clone)]
enum Check {
    Work {
        cgroup: bool,
        verified: bool,
        identity: Option<&'static str>,
    },
    Idle {
        verified: bool,
        identity: Option<&'static str>,
    },
    Post(PostUpdateIdentity),
    Repaired(RepairedHubIdentity),
}

fn json_or_null(value: &Option<Json>) -> Json {
    value.clone().unwrap_or(Json::Null)
}

impl Check {
    fn to_oracle(&self) -> Json {
        Json::Object(match self {
            Check::Work {
                cgroup,
                verified,
                identity,
            } => json_object! {
                "kind" => "work",
                "kwargs" => json_object! {
                    "require_cgroup_safe" => *cgroup,
                    "require_verified_service_cgroup" => *verified,
                    "expected_server_identity" => *identity,
                },
            },
            Check::Idle { verified, identity } => json_object! {
                "kind" => "idle",
                "kwargs" => json_object! {
                    "require_verified_service_cgroup" => *verified,
                    "expected_server_identity" => *identity,
                    "timeout" => 2.0,
                },
            },
            Check::Post(expected) => {
                let mut kwargs =
                    json_object! {"expected_server_identity" => expected.server_identity.as_str()};
                let optional = [
                    ("expected_team_hub_id", &expected.team_hub_id),
                    ("expected_team_hub_transport", &expected.team_hub_transport),
                    ("expected_team_hub_url", &expected.team_hub_url),
                    (
                        "expected_team_hub_direct_ip_url",
                        &expected.team_hub_direct_ip_url,
                    ),
                ];
                for (name, value) in optional {
                    if value.is_some() {
                        kwargs.insert(name, json_or_null(value));
                    }
                }
                if let Some(version) = &expected.server_version {
                    kwargs.insert("expected_server_version", version.as_str());
                }
                if let Some(contract) = expected.api_contract_version {
                    kwargs.insert("expected_api_contract_version", contract);
                }
                json_object! {"kind" => "post", "kwargs" => kwargs}
            }
            Check::Repaired(expected) => json_object! {
                "kind" => "repaired",
                "kwargs" => json_object! {
                    "expected_server_identity" => expected.server_identity.as_str(),
                    "expected_team_hub_transport" => expected.transport.clone(),
                    "expected_team_hub_url" => expected.url.clone(),
                    "expected_team_hub_direct_ip_url" => expected.direct_ip_url.clone(),
                },
            },
        })
    }

    /// Our outcome as the oracle prints it.
    fn run(&self, port: u16, token: &str) -> Json {
        let health = ServerHealth::new(PythonInt::Small(i128::from(port)), token);
        let outcome: Result<Json, (agents_common::Error, Option<bool>)> = match self {
            Check::Work {
                cgroup,
                verified,
                identity,
            } => health
                .work_snapshot(Duration::from_secs(10), *cgroup, *verified, *identity)
                .map(|(active, queued)| Json::Array(vec![Json::Int(active), Json::Int(queued)]))
                .map_err(|probe| (probe.error, None)),
            Check::Idle { verified, identity } => health
                .assert_idle(*verified, *identity, Duration::from_secs(2))
                .map(|()| Json::Null)
                .map_err(|probe| (probe.error, Some(probe.transient))),
            Check::Post(expected) => health
                .assert_post_update_identity(expected)
                .map(|()| Json::Null)
                .map_err(|error| (error, None)),
            Check::Repaired(expected) => health
                .assert_repaired_team_hub_identity(expected)
                .map(Json::from)
                .map_err(|error| (error, None)),
        };
        match outcome {
            Ok(value) => Json::Object(json_object! {"ok" => value}),
            Err((error, transient)) => {
                let mut result = json_object! {"message" => error.message()};
                if let Some(transient) = transient {
                    result.insert("transient", transient);
                }
                Json::Object(result)
            }
        }
    }
}

const ORACLE: &str = r#"
data = json.load(sys.stdin)
out = []
for case in data["cases"]:
    port, token, check = case["port"], case["token"], case["check"]
    kwargs = check["kwargs"]
    try:
        if check["kind"] == "work":
            value = list(update_runner.server_work_snapshot(port, token=token, **kwargs))
        elif check["kind"] == "idle":
            value = update_runner.assert_server_idle(port, token=token, **kwargs)
        elif check["kind"] == "post":
            value = update_runner.assert_post_update_identity(port, token=token, **kwargs)
        else:
            value = update_runner.assert_repaired_team_hub_identity(port, token=token, **kwargs)
        out.append({"ok": value})
    except Exception as exc:
        result = {"message": str(exc)}
        if check["kind"] == "idle":
            result["transient"] = update_runner.transient_server_readiness_error(exc.__cause__)
        out.append(result)
print(json.dumps(out))
"#;

/// Serve each document under its own token, run every check against it in
/// the original and in the port, and require identical outcomes.
fn compare(originals: &Originals, server: &HealthServer, cases: &[(&str, u16, Vec<u8>, Check)]) {
    let port = server.server.port;
    let mut oracle_cases = Vec::new();
    for (index, (_, status, body, check)) in cases.iter().enumerate() {
        let token = format!("case-{index}");
        server.answer(
            &token,
            *status,
            if *status == 200 { "OK" } else { "Nope" },
            body.clone(),
        );
        oracle_cases.push(Json::Object(json_object! {
            "port" => u32::from(port),
            "token" => token,
            "check" => check.to_oracle(),
        }));
    }
    let input = Json::Object(json_object! {"cases" => oracle_cases});
    let original = python_oracle(
        originals,
        ORACLE,
        &python_compat::json::encode_compact(&input).unwrap(),
    );
    for (index, ((label, _, _, check), expected)) in
        cases.iter().zip(original.as_array().unwrap()).enumerate()
    {
        let ours = check.run(port, &format!("case-{index}"));
        assert_eq!(&ours, expected, "{label}");
    }
}

fn work(cgroup: bool, verified: bool, identity: Option<&'static str>) -> Check {
    Check::Work {
        cgroup,
        verified,
        identity,
    }
}

#[test]
fn idle_proofs_match_the_original() {
    let originals = agents_tests::require_originals!();
    let server = HealthServer::start();
    let idle = |verified| Check::Idle {
        verified,
        identity: Some(IDENTITY),
    };
    let mut cases: Vec<(&str, u16, Vec<u8>, Check)> = vec![
        (
            "healthy work",
            200,
            body(&healthy()),
            work(false, false, None),
        ),
        ("healthy idle", 200, body(&healthy()), idle(true)),
        (
            "identity changed",
            200,
            body(&edited("server_identity", Some("other".into()))),
            idle(false),
        ),
        (
            "identity missing",
            200,
            body(&edited("server_identity", None)),
            work(false, false, Some(IDENTITY)),
        ),
        (
            "not ok",
            200,
            body(&edited("ok", Some(1.into()))),
            idle(false),
        ),
        ("not an object", 200, b"[1]".to_vec(), idle(false)),
        ("invalid json", 200, b"{".to_vec(), idle(false)),
        (
            "active list",
            200,
            body(&edited("active_count", None)),
            work(false, false, None),
        ),
        (
            "active list busy",
            200,
            body(&edited(
                "active",
                Some(vec![Json::from("a"), Json::from("b")].into()),
            )),
            work(false, false, None),
        ),
        (
            "active count bool",
            200,
            body(&edited("active_count", Some(true.into()))),
            idle(false),
        ),
        (
            "active count negative",
            200,
            body(&edited("active_count", Some((-3).into()))),
            work(true, false, None),
        ),
        (
            "active count float",
            200,
            body(&edited("active_count", Some(1.0.into()))),
            work(false, false, None),
        ),
        (
            "active missing",
            200,
            body(
                &edited("active", None)
                    .into_iter()
                    .filter(|(k, _)| k != "active_count")
                    .collect(),
            ),
            idle(false),
        ),
        (
            "one active run",
            200,
            body(&edited("active_count", Some(1.into()))),
            idle(false),
        ),
        (
            "busy both",
            200,
            body(&{
                let mut document = edited("active_count", Some(2.into()));
                document.insert("update_blocking_queued_count", 1);
                document
            }),
            idle(false),
        ),
        (
            "queued only",
            200,
            body(&edited("update_blocking_queued_count", Some(3.into()))),
            idle(false),
        ),
        (
            "queued invalid",
            200,
            body(&edited("update_blocking_queued_count", Some((-1).into()))),
            idle(false),
        ),
        (
            "queued bool",
            200,
            body(&edited("update_blocking_queued_count", Some(false.into()))),
            idle(false),
        ),
        (
            "queued null falls back",
            200,
            body(&edited("update_blocking_queued_count", Some(Json::Null))),
            work(false, false, None),
        ),
        (
            "legacy queued",
            200,
            body(&{
                let mut document = edited("update_blocking_queued_count", None);
                document.insert("queued", json_object! {"a" => 2, "b" => 0});
                document
            }),
            work(false, false, None),
        ),
        (
            "legacy queued invalid",
            200,
            body(&{
                let mut document = edited("update_blocking_queued_count", None);
                document.insert("queued", json_object! {"a" => true});
                document
            }),
            idle(false),
        ),
        (
            "legacy queued missing",
            200,
            body(&{
                let mut document = edited("update_blocking_queued_count", None);
                document.remove("queued");
                document
            }),
            idle(false),
        ),
        (
            "cgroup missing",
            200,
            body(&edited("update_service_cgroup", None)),
            idle(false),
        ),
        (
            "cgroup unsafe",
            200,
            body(&edited("update_service_cgroup.safe", Some(1.into()))),
            idle(false),
        ),
        (
            "cgroup descendants",
            200,
            body(&edited(
                "update_service_cgroup.unknown_descendant_count",
                Some(2.into()),
            )),
            idle(false),
        ),
        (
            "cgroup count bool",
            200,
            body(&edited(
                "update_service_cgroup.unknown_descendant_count",
                Some(false.into()),
            )),
            idle(false),
        ),
        (
            "cgroup unverified allowed",
            200,
            body(&edited(
                "update_service_cgroup.inspection",
                Some("inferred".into()),
            )),
            idle(false),
        ),
        (
            "cgroup unverified refused",
            200,
            body(&edited("update_service_cgroup.inspection", None)),
            idle(true),
        ),
        (
            "cgroup ignored when busy",
            200,
            body(&{
                let mut document = edited("update_service_cgroup", None);
                document.insert("active_count", 1);
                document
            }),
            work(true, true, None),
        ),
        ("service unavailable", 503, b"".to_vec(), idle(false)),
        ("unauthorized", 401, b"{}".to_vec(), idle(false)),
        (
            "server error",
            500,
            b"{}".to_vec(),
            work(false, false, None),
        ),
        (
            "oversized",
            200,
            {
                let mut big = b"{\"ok\": true, \"pad\": \"".to_vec();
                big.extend(std::iter::repeat_n(b'x', 1_000_000));
                big.extend_from_slice(b"\"}");
                big
            },
            idle(false),
        ),
        (
            "exactly at the limit",
            200,
            {
                let mut exact = b"{\"ok\": true, \"active_count\": 0, \"update_blocking_queued_count\": 0, \"pad\": \"".to_vec();
                exact.extend(std::iter::repeat_n(b'x', 1_000_000 - exact.len() - 2));
                exact.extend_from_slice(b"\"}");
                assert_eq!(exact.len(), 1_000_000);
                exact
            },
            work(false, false, None),
        ),
    ];
    cases.push(("not utf-8", 200, b"{\"ok\": \xff}".to_vec(), idle(false)));
    compare(&originals, &server, &cases);
}

fn post(edit: impl FnOnce(&mut PostUpdateIdentity)) -> Check {
    let mut expected = PostUpdateIdentity {
        server_identity: IDENTITY.to_string(),
        ..PostUpdateIdentity::default()
    };
    edit(&mut expected);
    Check::Post(expected)
}

fn hub(expected: &mut PostUpdateIdentity) {
    expected.team_hub_id = Some(HUB_ID.into());
    expected.team_hub_transport = Some("loopback".into());
    expected.team_hub_url = Some(Json::Null);
    expected.team_hub_direct_ip_url = Some(DIRECT_URL.into());
}

#[test]
fn post_update_identities_match_the_original() {
    let originals = agents_tests::require_originals!();
    let server = HealthServer::start();
    let signed = |expected: &mut PostUpdateIdentity| {
        expected.server_version = Some("1.2.3".into());
        expected.api_contract_version = Some(28);
    };
    let without_components = {
        let mut document = healthy();
        document.remove("gateway");
        document.remove("execution_service");
        document
    };
    let cases: Vec<(&str, u16, Vec<u8>, Check)> = vec![
        ("identity only", 200, body(&healthy()), post(|_| {})),
        (
            "identity changed",
            200,
            body(&edited("server_identity", Some("x".into()))),
            post(|_| {}),
        ),
        (
            "identity numeric",
            200,
            body(&edited("server_identity", Some(5.into()))),
            post(|e| e.server_identity = "5".into()),
        ),
        ("signed release", 200, body(&healthy()), post(signed)),
        (
            "version differs",
            200,
            body(&edited("server_version", Some("1.2.2".into()))),
            post(signed),
        ),
        (
            "no components",
            200,
            body(&without_components),
            post(signed),
        ),
        (
            "gateway behind",
            200,
            body(&edited("gateway.version", Some("1.2.2".into()))),
            post(signed),
        ),
        (
            "worker missing",
            200,
            body(&edited("execution_service", None)),
            post(signed),
        ),
        (
            "worker not an object",
            200,
            body(&edited("execution_service", Some("1.2.3".into()))),
            post(signed),
        ),
        (
            "admission held",
            200,
            body(&edited(
                "execution_service.maintenance_held",
                Some(true.into()),
            )),
            post(signed),
        ),
        (
            "admission unknown",
            200,
            body(&edited("execution_service.maintenance_held", None)),
            post(signed),
        ),
        (
            "admission zero",
            200,
            body(&edited(
                "execution_service.maintenance_held",
                Some(0.into()),
            )),
            post(signed),
        ),
        (
            "contract differs",
            200,
            body(&edited("api_contract_version", Some(27.into()))),
            post(signed),
        ),
        (
            "contract float",
            200,
            body(&edited("api_contract_version", Some(28.0.into()))),
            post(signed),
        ),
        (
            "contract only",
            200,
            body(&edited("api_contract_version", Some("28".into()))),
            post(|e| e.api_contract_version = Some(28)),
        ),
        (
            "secure peer missing",
            200,
            body(&edited("capabilities.secure_peer_v1", None)),
            post(|_| {}),
        ),
        (
            "secure peer required",
            200,
            body(&edited(
                "capabilities.secure_peer_v1.required",
                Some(true.into()),
            )),
            post(|_| {}),
        ),
        (
            "secure peer version float",
            200,
            body(&edited(
                "capabilities.secure_peer_v1.version",
                Some(1.0.into()),
            )),
            post(|_| {}),
        ),
        (
            "secure peer error",
            200,
            body(&edited(
                "capabilities.secure_peer_v1.state_error_code",
                Some("x".into()),
            )),
            post(|_| {}),
        ),
        (
            "no capabilities",
            200,
            body(&edited("capabilities", Some(Json::Array(vec![])))),
            post(|_| {}),
        ),
        (
            "transport without hub",
            200,
            body(&healthy()),
            post(|e| e.team_hub_url = Some(Json::Null)),
        ),
        ("hub routes", 200, body(&healthy()), post(hub)),
        (
            "hub id changed",
            200,
            body(&edited(
                "capabilities.team_hub_v1.hub_id",
                Some("hub_other0000".into()),
            )),
            post(hub),
        ),
        (
            "hub unavailable",
            200,
            body(&edited(
                "capabilities.team_hub_v1.available",
                Some(false.into()),
            )),
            post(hub),
        ),
        (
            "hub host changed",
            200,
            body(&edited(
                "capabilities.team_hub_v1.host_server_identity",
                Some("x".into()),
            )),
            post(hub),
        ),
        (
            "hub missing",
            200,
            body(&edited("capabilities.team_hub_v1", None)),
            post(hub),
        ),
        (
            "transport changed",
            200,
            body(&edited(
                "capabilities.team_hub_v1.transport",
                Some("direct_ip".into()),
            )),
            post(hub),
        ),
        (
            "routes changed",
            200,
            body(&edited(
                "capabilities.team_hub_v1.routes",
                Some(Json::Array(vec![])),
            )),
            post(hub),
        ),
        (
            "routes without direct",
            200,
            body(&edited(
                "capabilities.team_hub_v1.routes",
                Some(
                    vec![Json::Object(
                        json_object! {"transport" => "loopback", "hub_url" => Json::Null},
                    )]
                    .into(),
                ),
            )),
            post(|e| {
                hub(e);
                e.team_hub_direct_ip_url = Some("".into());
            }),
        ),
        (
            "legacy hub",
            200,
            body(&healthy()),
            post(|e| e.team_hub_id = Some(HUB_ID.into())),
        ),
        (
            "legacy hub transport unset",
            200,
            body(&edited(
                "capabilities.team_hub_v1.transport",
                Some(Json::Null),
            )),
            post(|e| e.team_hub_id = Some(HUB_ID.into())),
        ),
        (
            "legacy hub remote",
            200,
            body(&edited(
                "capabilities.team_hub_v1.transport",
                Some("tailscale_serve".into()),
            )),
            post(|e| e.team_hub_id = Some(HUB_ID.into())),
        ),
        (
            "legacy hub url",
            200,
            body(&edited(
                "capabilities.team_hub_v1.hub_url",
                Some("https://x".into()),
            )),
            post(|e| e.team_hub_id = Some(HUB_ID.into())),
        ),
        (
            "legacy hub transport list",
            200,
            body(&edited(
                "capabilities.team_hub_v1.transport",
                Some(Json::Array(vec![])),
            )),
            post(|e| e.team_hub_id = Some(HUB_ID.into())),
        ),
        (
            "not healthy",
            200,
            body(&edited("ok", Some(false.into()))),
            post(|_| {}),
        ),
    ];
    compare(&originals, &server, &cases);
}

#[test]
fn repaired_hosts_match_the_original() {
    let originals = agents_tests::require_originals!();
    let server = HealthServer::start();
    let repaired = |transport: &str, url: Json, direct: &str| {
        Check::Repaired(RepairedHubIdentity {
            server_identity: IDENTITY.to_string(),
            transport: transport.into(),
            url,
            direct_ip_url: direct.into(),
        })
    };
    let direct_primary = {
        let mut document = healthy();
        let hub = json_object! {
            "available" => true,
            "designated_host" => true,
            "version" => 1,
            "base_path" => "/api/team-hub",
            "hub_id" => "hub:a.b-c_d",
            "host_server_identity" => IDENTITY,
            "transport" => "direct_ip",
            "hub_url" => DIRECT_URL,
            "routes" => vec![Json::Object(json_object! {"transport" => "direct_ip", "hub_url" => DIRECT_URL})],
        };
        document.insert(
            "capabilities",
            json_object! {"secure_peer_v1" => secure_peer(), "team_hub_v1" => hub},
        );
        document
    };
    let cases: Vec<(&str, u16, Vec<u8>, Check)> = vec![
        (
            "repaired loopback",
            200,
            body(&healthy()),
            repaired("loopback", Json::Null, DIRECT_URL),
        ),
        (
            "repaired direct primary",
            200,
            body(&direct_primary),
            repaired("direct_ip", DIRECT_URL.into(), DIRECT_URL),
        ),
        (
            "transport differs",
            200,
            body(&healthy()),
            repaired("", Json::Null, DIRECT_URL),
        ),
        (
            "url differs",
            200,
            body(&healthy()),
            repaired("loopback", "".into(), DIRECT_URL),
        ),
        (
            "routes differ",
            200,
            body(&healthy()),
            repaired("loopback", Json::Null, ""),
        ),
        (
            "hub id short",
            200,
            body(&edited(
                "capabilities.team_hub_v1.hub_id",
                Some("hub".into()),
            )),
            repaired("loopback", Json::Null, DIRECT_URL),
        ),
        (
            "hub id not text",
            200,
            body(&edited(
                "capabilities.team_hub_v1.hub_id",
                Some(12345678.into()),
            )),
            repaired("loopback", Json::Null, DIRECT_URL),
        ),
        (
            "hub id bad character",
            200,
            body(&edited(
                "capabilities.team_hub_v1.hub_id",
                Some("hub/0123456789".into()),
            )),
            repaired("loopback", Json::Null, DIRECT_URL),
        ),
        (
            "not repaired",
            200,
            body(&edited(
                "capabilities.team_hub_v1.designated_host",
                Some(false.into()),
            )),
            repaired("loopback", Json::Null, DIRECT_URL),
        ),
    ];
    compare(&originals, &server, &cases);
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A peer that accepts, reads the request, then closes (`close`) or stays
/// silent for `silence`.
fn odd_peer(close: bool, silence: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buffer = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = stream.read(&mut buffer);
            if !close {
                std::thread::sleep(silence);
            }
            drop(stream);
        }
    });
    port
}

#[test]
fn transport_failures_are_transient_like_the_original() {
    let originals = agents_tests::require_originals!();
    let refused = closed_port();
    let closing = odd_peer(true, Duration::ZERO);
    let silent = odd_peer(false, Duration::from_secs(5));
    let cases = [
        ("refused", refused),
        ("closing", closing),
        ("silent", silent),
    ];
    let input: Vec<Json> = cases
        .iter()
        .map(|(_, port)| {
            Json::Object(json_object! {
                "port" => u32::from(*port),
                "token" => "t",
                "check" => Check::Idle {verified: false, identity: Some(IDENTITY)}.to_oracle(),
            })
        })
        .collect();
    let original = python_oracle(
        &originals,
        ORACLE,
        &python_compat::json::encode_compact(&Json::Object(json_object! {"cases" => input}))
            .unwrap(),
    );
    for ((label, port), expected) in cases.iter().zip(original.as_array().unwrap()) {
        let ours = Check::Idle {
            verified: false,
            identity: Some(IDENTITY),
        }
        .run(*port, "t");
        assert_eq!(&ours, expected, "{label}");
        assert_eq!(ours.get("transient"), Some(&Json::Bool(true)), "{label}");
    }
}

/// An admitted row owned by `update_id`.
fn admitted(directory: &Path, update_id: &str) -> std::path::PathBuf {
    let status = directory.join("server-update.json");
    agents_tests::server_status::write_row(
        &status,
        &json_object! {"phase" => "starting", "update_id" => update_id, "keep" => "me"},
    )
    .unwrap();
    status
}

/// Counts requests and answers 503 for the first `unready` of them.
fn warming_server(unready: usize, ready: JsonObject) -> (TestServer, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let ready = body(&ready);
    let server = TestServer::start(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) < unready {
            Reply::status(503, "Service Unavailable")
        } else {
            Reply::ok(&ready)
        }
    });
    (server, count)
}

const WAIT_ORACLE: &str = r#"
from pathlib import Path
data = json.load(sys.stdin)
update_runner.SERVER_STARTUP_READINESS_POLL_SECONDS = 0.05
try:
    update_runner.wait_for_server_idle(
        data["port"], status_path=Path(data["status"]), expected_update_id=data["update_id"],
        expected_server_identity=data["identity"], token="t",
        require_verified_service_cgroup=True, timeout_seconds=data["timeout"])
    print(json.dumps({"ok": None}))
except Exception as exc:
    print(json.dumps({"message": str(exc)}))
"#;

/// The readiness wait of both implementations on the same server and an
/// identical fresh row: the outcome and the row (without timestamps).
fn compare_wait(
    originals: &Originals,
    port: u16,
    count: &AtomicUsize,
    update_id: &str,
    timeout: f64,
) -> (Json, JsonObject) {
    let directory = TempDir::new("runner-wait");
    let original_status = admitted(&directory.path().join("original"), "u-1");
    let our_status = admitted(&directory.path().join("ours"), "u-1");
    count.store(0, Ordering::SeqCst);
    let original = python_oracle(
        originals,
        WAIT_ORACLE,
        &python_compat::json::encode_compact(&Json::Object(json_object! {
            "port" => u32::from(port),
            "status" => original_status.to_string_lossy().into_owned(),
            "update_id" => update_id,
            "identity" => IDENTITY,
            "timeout" => timeout,
        }))
        .unwrap(),
    );
    let original_requests = count.swap(0, Ordering::SeqCst);
    let mut wait = ReadinessWait::new(IDENTITY, true);
    wait.timeout = Duration::from_secs_f64(timeout);
    wait.poll = Duration::from_millis(50);
    let ours = ServerHealth::new(PythonInt::Small(i128::from(port)), "t").wait_for_idle(
        StatusOwner {
            status_path: &our_status,
            update_id,
        },
        &wait,
    );
    let our_requests = count.load(Ordering::SeqCst);
    let ours = match ours {
        Ok(()) => Json::Object(json_object! {"ok" => Json::Null}),
        Err(error) => Json::Object(json_object! {"message" => error.message()}),
    };
    assert_eq!(ours, original);
    let strip = |path: &Path| {
        let mut row = read_status_unlocked(path).unwrap();
        for stamp in ["updated_at", "heartbeat_at"] {
            if let Some(value) = row.get(stamp) {
                assert!(
                    value.as_str().is_some_and(|text| text.ends_with('Z')),
                    "{stamp}"
                );
                row.insert(stamp, "<time>");
            }
        }
        row
    };
    let row = strip(&our_status);
    assert_eq!(row, strip(&original_status));
    // Both loops poll until the same deadline, so how many polls fit depends
    // on scheduling (a loaded machine slows the Python loop). What must hold
    // regardless: both retried or neither did (a lost status row stops both
    // before any request), and ours never polled faster than its cadence.
    assert_eq!(
        original_requests > 1,
        our_requests > 1,
        "{original_requests} vs {our_requests}"
    );
    let most = (timeout / wait.poll.as_secs_f64()).ceil() as usize + 1;
    assert!(
        our_requests <= most,
        "{our_requests} requests, at most {most} at one per {:?}",
        wait.poll
    );
    (ours, row)
}

#[test]
fn readiness_waits_match_the_original() {
    let originals = agents_tests::require_originals!();
    let (server, count) = warming_server(3, healthy());
    let (outcome, row) = compare_wait(&originals, server.port, &count, "u-1", 10.0);
    assert_eq!(outcome.get("ok"), Some(&Json::Null));
    assert_eq!(
        row.get("message"),
        Some(&Json::from(
            "AgentsServer startup, identity, and idle checks passed."
        ))
    );
    assert_eq!(row.get("keep"), Some(&Json::from("me")));

    let (busy, count) = warming_server(1, edited("active_count", Some(1.into())));
    let (outcome, row) = compare_wait(&originals, busy.port, &count, "u-1", 10.0);
    assert_eq!(
        outcome.get("message"),
        Some(&Json::from(
            "server became busy before restart: 1 active agent run; retry the update after work finishes"
        ))
    );
    assert_eq!(
        row.get("message"),
        Some(&Json::from(
            "Waiting for AgentsServer startup before checking installation safety."
        ))
    );

    let (outcome, _) = compare_wait(&originals, server.port, &count, "someone-else", 10.0);
    assert_eq!(
        outcome.get("message"),
        Some(&Json::from(
            "detached updater no longer owns the server update status"
        ))
    );

    let started = Instant::now();
    let (never, count) = warming_server(usize::MAX, healthy());
    let (outcome, _) = compare_wait(&originals, never.port, &count, "u-1", 1.0);
    assert_eq!(
        outcome.get("message"),
        Some(&Json::from(
            "AgentsServer startup readiness timed out after 1 seconds"
        ))
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

const TOKEN_ORACLE: &str = r#"
data = json.load(sys.stdin)
try:
    print(json.dumps({"ok": update_runner.consume_auth_token_file(data["path"])}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"#;

#[test]
fn credential_files_are_consumed_like_the_original() {
    let originals = agents_tests::require_originals!();
    let directory = TempDir::new("runner-token");
    let cases: [(&str, Option<&[u8]>); 11] = [
        ("token", Some(b"{\"token\": \"secret-1\"}")),
        // `read_text()` then `json.loads(str)`: a byte order mark is refused
        // (the generative campaign, generated-1-2159), CRLF is white space.
        (
            "byte order mark",
            Some(b"\xef\xbb\xbf{\"token\": \"secret-1\"}"),
        ),
        ("crlf", Some(b"{\"token\":\r\n \"secret-1\"}\r\n")),
        ("not utf-8", Some(b"{\"token\": \"\xff\"}")),
        ("numeric token", Some(b"{\"token\": 5}")),
        ("empty token", Some(b"{\"token\": \"\"}")),
        ("no token key", Some(b"{}")),
        ("not an object", Some(b"[\"secret\"]")),
        ("invalid json", Some(b"{\"token\":")),
        ("missing file", None),
        ("blank path", None),
    ];
    for (label, content) in cases {
        let mut paths = Vec::new();
        for side in ["original", "ours"] {
            let path = directory
                .path()
                .join(format!("{side}-{}.auth.json", label.replace(' ', "-")));
            if let Some(content) = content {
                std::fs::write(&path, content).unwrap();
            }
            paths.push(path);
        }
        let blank = label == "blank path";
        let original_argument = if blank {
            "  ".to_string()
        } else {
            paths[0].to_string_lossy().into_owned()
        };
        let original = python_oracle(
            &originals,
            TOKEN_ORACLE,
            &python_compat::json::encode_compact(&Json::Object(
                json_object! {"path" => original_argument},
            ))
            .unwrap(),
        );
        let our_argument = if blank {
            std::path::PathBuf::from("  ")
        } else {
            paths[1].clone()
        };
        let ours = match consume_auth_token_file(Some(&our_argument)) {
            Ok(token) => Json::Object(json_object! {"ok" => token}),
            Err(error) => {
                let path_text = paths[1].to_string_lossy().into_owned();
                let original_text = paths[0].to_string_lossy().into_owned();
                Json::Object(json_object! {
                    // `type(exc).__name__`, without the module a traceback adds.
                    "error" => error.class().python_name().rsplit('.').next().unwrap(),
                    "message" => error.message().replace(&path_text, &original_text),
                })
            }
        };
        assert_eq!(ours, original, "{label}");
        // Never left behind, whatever the outcome.
        assert!(!paths[0].exists() && !paths[1].exists(), "{label}");
    }
    assert_eq!(consume_auth_token_file(None).unwrap(), "");
}

/// The credential path is used with its bytes as given: one that is not
/// UTF-8 names that file, not a lossy respelling of it (the generative
/// campaign, generated-1-8204).
#[test]
fn a_credential_path_that_is_not_utf8_is_read_and_removed_as_given() {
    use std::os::unix::ffi::OsStrExt as _;
    let directory = TempDir::new("runner-token-bytes");
    let mut raw = directory.path().as_os_str().as_bytes().to_vec();
    raw.extend_from_slice(b"/token-\xff.json");
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&raw));
    std::fs::write(&path, b"{\"token\": \"secret-1\"}").unwrap();
    let token = consume_auth_token_file(Some(&path)).expect("the credential is read");
    assert_eq!(token, "secret-1");
    assert!(!path.exists(), "the credential is removed");
}

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

/// One entry of the Hub's `routes` list.
fn route(transport: &str, hub_url: impl Into<Json>) -> Json {
    Json::Object(json_object! {"transport" => transport, "hub_url" => hub_url.into()})
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
        "routes" => vec![route("loopback", Json::Null), route("direct_ip", DIRECT_URL)],
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

/// `document` with `value` put at a dotted path (`None` removes the key).
/// A replaced key keeps its place, so only the edit differs on the wire.
fn at_path(document: JsonObject, path: &str, value: Option<Json>) -> JsonObject {
    let mut document = Json::Object(document);
    let (parents, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut target = &mut document;
    for parent in parents.split('.').filter(|parent| !parent.is_empty()) {
        target = target.as_object_mut().unwrap().get_mut(parent).unwrap();
    }
    let object = target.as_object_mut().unwrap();
    match value {
        Some(value) => {
            object.insert(key, value);
        }
        None => {
            object.remove(key);
        }
    }
    match document {
        Json::Object(object) => object,
        _ => unreachable!(),
    }
}

fn set(document: JsonObject, path: &str, value: impl Into<Json>) -> JsonObject {
    at_path(document, path, Some(value.into()))
}

fn without(document: JsonObject, path: &str) -> JsonObject {
    at_path(document, path, None)
}

/// `set` inside the secure-peer capability.
fn set_secure_peer(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    set(
        document,
        &format!("capabilities.secure_peer_v1.{key}"),
        value,
    )
}

/// `set` inside the Team Hub capability.
fn set_hub(document: JsonObject, key: &str, value: impl Into<Json>) -> JsonObject {
    set(document, &format!("capabilities.team_hub_v1.{key}"), value)
}

/// An older server without the update-blocking count: its queued turns are
/// the sum of the legacy `queued` map.
fn legacy_queued(document: JsonObject, queued: JsonObject) -> JsonObject {
    set(
        without(document, "update_blocking_queued_count"),
        "queued",
        queued,
    )
}

/// A Hub whose primary route is the direct-IP one, with an id using every
/// punctuation mark a repaired id may hold.
fn direct_primary_hub(document: JsonObject) -> JsonObject {
    let document = set_hub(document, "hub_id", "hub:a.b-c_d");
    let document = set_hub(document, "transport", "direct_ip");
    let document = set_hub(document, "hub_url", DIRECT_URL);
    set_hub(document, "routes", vec![route("direct_ip", DIRECT_URL)])
}

fn body(document: &JsonObject) -> Vec<u8> {
    python_compat::json::encode_compact(&Json::Object(document.clone())).unwrap()
}

/// A body past the one-megabyte limit on health answers.
fn oversized_body() -> Vec<u8> {
    let mut big = b"{\"ok\": true, \"pad\": \"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 1_000_000));
    big.extend_from_slice(b"\"}");
    big
}

/// An idle health document padded to exactly the one-megabyte limit.
fn body_at_the_limit() -> Vec<u8> {
    let mut exact =
        b"{\"ok\": true, \"active_count\": 0, \"update_blocking_queued_count\": 0, \"pad\": \""
            .to_vec();
    exact.extend(std::iter::repeat_n(b'x', 1_000_000 - exact.len() - 2));
    exact.extend_from_slice(b"\"}");
    assert_eq!(exact.len(), 1_000_000);
    exact
}

/// A change made to `healthy()` before it is served.
type Change = fn(JsonObject) -> JsonObject;

/// What the health server answers in one case.
#[derive(Clone, Copy)]
enum Answer {
    /// 200 OK with `healthy()` after a change.
    Document(Change),
    /// A status and a body served as they are, for answers that are not a
    /// health document at all.
    Raw(u16, &'static [u8]),
    /// 200 OK with a body built when served (too large to write out).
    Built(fn() -> Vec<u8>),
}
use Answer::{Built, Document, Raw};

/// `healthy()` as it is.
const HEALTHY: Answer = Document(|document| document);

impl Answer {
    fn status_and_body(self) -> (u16, Vec<u8>) {
        match self {
            Document(change) => (200, body(&change(healthy()))),
            Raw(status, bytes) => (status, bytes.to_vec()),
            Built(build) => (200, build()),
        }
    }
}

/// One case: (description, the answer served, what the check is told).
type HealthRow<E> = (&'static str, Answer, E);

/// Status code, reason phrase and body of one canned health answer.
type CannedReply = (u16, &'static str, Vec<u8>);

/// The health server: the bearer token names the answer.
struct HealthServer {
    server: TestServer,
    answers: Arc<Mutex<HashMap<String, CannedReply>>>,
}

impl HealthServer {
    fn start() -> Self {
        let answers: Arc<Mutex<HashMap<String, CannedReply>>> = Arc::default();
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

/// Serve each case's answer under its own token, run every check against it
/// in the original and in the port, and require identical outcomes.
fn compare_with_original(originals: &Originals, server: &HealthServer, cases: &[HealthRow<Check>]) {
    let port = server.server.port;
    let token = |index: usize| format!("case-{index}");
    let mut oracle_cases = Vec::new();
    for (index, (_, answer, check)) in cases.iter().enumerate() {
        let (status, body) = answer.status_and_body();
        let reason = if status == 200 { "OK" } else { "Nope" };
        server.answer(&token(index), status, reason, body);
        oracle_cases.push(Json::Object(json_object! {
            "port" => u32::from(port),
            "token" => token(index),
            "check" => check.to_oracle(),
        }));
    }
    let input = Json::Object(json_object! {"cases" => oracle_cases});
    let original = python_oracle(
        originals,
        ORACLE,
        &python_compat::json::encode_compact(&input).unwrap(),
    );
    for (index, ((label, _, check), expected)) in
        cases.iter().zip(original.as_array().unwrap()).enumerate()
    {
        let ours = check.run(port, &token(index));
        assert_eq!(&ours, expected, "{label}");
    }
}

/// `server_work_snapshot` with its cgroup-safety, verified-cgroup and
/// identity requirements.
const fn work(cgroup: bool, verified: bool, identity: Option<&'static str>) -> Check {
    Check::Work {
        cgroup,
        verified,
        identity,
    }
}

/// `assert_server_idle` for our identity.
const fn idle(verified: bool) -> Check {
    Check::Idle {
        verified,
        identity: Some(IDENTITY),
    }
}

/// `server_work_snapshot` requiring nothing: just the counts.
const SNAPSHOT: Check = work(false, false, None);
/// The idle proof without a verified service-cgroup proof required.
const IDLE: Check = idle(false);
/// The idle proof requiring a verified service-cgroup proof.
const IDLE_VERIFIED: Check = idle(true);

/// Answers for the work snapshot and the idle proof: identity, health,
/// active and queued counts (current and legacy), the service-cgroup proof,
/// HTTP statuses and the size limit.
#[rustfmt::skip]
const IDLE_ROWS: &[HealthRow<Check>] = &[
    ("healthy work", HEALTHY, SNAPSHOT),
    ("healthy idle", HEALTHY, IDLE_VERIFIED),
    ("identity changed", Document(|d| set(d, "server_identity", "other")), IDLE),
    ("identity missing", Document(|d| without(d, "server_identity")), work(false, false, Some(IDENTITY))),
    ("not ok", Document(|d| set(d, "ok", 1)), IDLE),
    ("not an object", Raw(200, b"[1]"), IDLE),
    ("invalid json", Raw(200, b"{"), IDLE),
    ("active list", Document(|d| without(d, "active_count")), SNAPSHOT),
    ("active list busy", Document(|d| set(d, "active", vec!["a", "b"])), SNAPSHOT),
    ("active count bool", Document(|d| set(d, "active_count", true)), IDLE),
    ("active count negative", Document(|d| set(d, "active_count", -3)), work(true, false, None)),
    ("active count float", Document(|d| set(d, "active_count", 1.0)), SNAPSHOT),
    ("active missing", Document(|d| without(without(d, "active"), "active_count")), IDLE),
    ("one active run", Document(|d| set(d, "active_count", 1)), IDLE),
    ("busy both", Document(|d| set(set(d, "active_count", 2), "update_blocking_queued_count", 1)), IDLE),
    ("queued only", Document(|d| set(d, "update_blocking_queued_count", 3)), IDLE),
    ("queued invalid", Document(|d| set(d, "update_blocking_queued_count", -1)), IDLE),
    ("queued bool", Document(|d| set(d, "update_blocking_queued_count", false)), IDLE),
    ("queued null falls back", Document(|d| set(d, "update_blocking_queued_count", Json::Null)), SNAPSHOT),
    ("legacy queued", Document(|d| legacy_queued(d, json_object! {"a" => 2, "b" => 0})), SNAPSHOT),
    ("legacy queued invalid", Document(|d| legacy_queued(d, json_object! {"a" => true})), IDLE),
    ("legacy queued missing", Document(|d| without(without(d, "update_blocking_queued_count"), "queued")), IDLE),
    ("cgroup missing", Document(|d| without(d, "update_service_cgroup")), IDLE),
    ("cgroup unsafe", Document(|d| set(d, "update_service_cgroup.safe", 1)), IDLE),
    ("cgroup descendants", Document(|d| set(d, "update_service_cgroup.unknown_descendant_count", 2)), IDLE),
    ("cgroup count bool", Document(|d| set(d, "update_service_cgroup.unknown_descendant_count", false)), IDLE),
    ("cgroup unverified allowed", Document(|d| set(d, "update_service_cgroup.inspection", "inferred")), IDLE),
    ("cgroup unverified refused", Document(|d| without(d, "update_service_cgroup.inspection")), IDLE_VERIFIED),
    ("cgroup ignored when busy", Document(|d| set(without(d, "update_service_cgroup"), "active_count", 1)), work(true, true, None)),
    ("service unavailable", Raw(503, b""), IDLE),
    ("unauthorized", Raw(401, b"{}"), IDLE),
    ("server error", Raw(500, b"{}"), SNAPSHOT),
    ("oversized", Built(oversized_body), IDLE),
    ("exactly at the limit", Built(body_at_the_limit), SNAPSHOT),
    ("not utf-8", Raw(200, b"{\"ok\": \xff}"), IDLE),
];

#[test]
fn idle_proofs_match_the_original() {
    let originals = agents_tests::require_originals!();
    compare_with_original(&originals, &HealthServer::start(), IDLE_ROWS);
}

/// What the post-update check is told to expect besides our identity.
type Expectation = fn(&mut PostUpdateIdentity);

/// The post-update identity check: our identity and what `expect` adds.
fn post(expect: Expectation) -> Check {
    let mut expected = PostUpdateIdentity {
        server_identity: IDENTITY.to_string(),
        ..PostUpdateIdentity::default()
    };
    expect(&mut expected);
    Check::Post(expected)
}

/// Nothing besides the identity (no signed release, no hosted Hub).
fn identity_only(_: &mut PostUpdateIdentity) {}

/// The signed release's version and API contract.
fn signed_release(expected: &mut PostUpdateIdentity) {
    expected.server_version = Some("1.2.3".into());
    expected.api_contract_version = Some(28);
}

/// The hosted loopback Hub with its direct-IP route.
fn hub_routes(expected: &mut PostUpdateIdentity) {
    expected.team_hub_id = Some(HUB_ID.into());
    expected.team_hub_transport = Some("loopback".into());
    expected.team_hub_url = Some(Json::Null);
    expected.team_hub_direct_ip_url = Some(DIRECT_URL.into());
}

/// The hosted loopback Hub, recorded with no direct-IP route (`""`).
fn hub_without_direct_route(expected: &mut PostUpdateIdentity) {
    hub_routes(expected);
    expected.team_hub_direct_ip_url = Some("".into());
}

/// A Hub admitted before transports were recorded: only its id.
fn legacy_hub(expected: &mut PostUpdateIdentity) {
    expected.team_hub_id = Some(HUB_ID.into());
}

/// Answers for the post-update identity fence: identity, signed version
/// and contract, component convergence and admission, the secure-peer
/// capability, and the hosted Hub (current and legacy).
#[rustfmt::skip]
const POST_UPDATE_ROWS: &[HealthRow<Expectation>] = &[
    ("identity only", HEALTHY, identity_only),
    ("identity changed", Document(|d| set(d, "server_identity", "x")), identity_only),
    ("identity numeric", Document(|d| set(d, "server_identity", 5)), |e| e.server_identity = "5".into()),
    ("signed release", HEALTHY, signed_release),
    ("version differs", Document(|d| set(d, "server_version", "1.2.2")), signed_release),
    ("no components", Document(|d| without(without(d, "gateway"), "execution_service")), signed_release),
    ("gateway behind", Document(|d| set(d, "gateway.version", "1.2.2")), signed_release),
    ("worker missing", Document(|d| without(d, "execution_service")), signed_release),
    ("worker not an object", Document(|d| set(d, "execution_service", "1.2.3")), signed_release),
    ("admission held", Document(|d| set(d, "execution_service.maintenance_held", true)), signed_release),
    ("admission unknown", Document(|d| without(d, "execution_service.maintenance_held")), signed_release),
    ("admission zero", Document(|d| set(d, "execution_service.maintenance_held", 0)), signed_release),
    ("contract differs", Document(|d| set(d, "api_contract_version", 27)), signed_release),
    ("contract float", Document(|d| set(d, "api_contract_version", 28.0)), signed_release),
    ("contract only", Document(|d| set(d, "api_contract_version", "28")), |e| e.api_contract_version = Some(28)),
    ("secure peer missing", Document(|d| without(d, "capabilities.secure_peer_v1")), identity_only),
    ("secure peer required", Document(|d| set_secure_peer(d, "required", true)), identity_only),
    ("secure peer version float", Document(|d| set_secure_peer(d, "version", 1.0)), identity_only),
    ("secure peer error", Document(|d| set_secure_peer(d, "state_error_code", "x")), identity_only),
    ("no capabilities", Document(|d| set(d, "capabilities", Json::Array(vec![]))), identity_only),
    // Python cannot tell a None argument from an absent one.
    ("null hub url without a hub", HEALTHY, |e| e.team_hub_url = Some(Json::Null)),
    ("transport without a hub", HEALTHY, |e| e.team_hub_transport = Some("loopback".into())),
    ("hub routes", HEALTHY, hub_routes),
    ("hub id changed", Document(|d| set_hub(d, "hub_id", "hub_other0000")), hub_routes),
    ("hub unavailable", Document(|d| set_hub(d, "available", false)), hub_routes),
    ("hub host changed", Document(|d| set_hub(d, "host_server_identity", "x")), hub_routes),
    ("hub missing", Document(|d| without(d, "capabilities.team_hub_v1")), hub_routes),
    ("transport changed", Document(|d| set_hub(d, "transport", "direct_ip")), hub_routes),
    ("routes changed", Document(|d| set_hub(d, "routes", Json::Array(vec![]))), hub_routes),
    ("routes without direct", Document(|d| set_hub(d, "routes", vec![route("loopback", Json::Null)])), hub_without_direct_route),
    ("legacy hub", HEALTHY, legacy_hub),
    ("legacy hub transport unset", Document(|d| set_hub(d, "transport", Json::Null)), legacy_hub),
    ("legacy hub remote", Document(|d| set_hub(d, "transport", "tailscale_serve")), legacy_hub),
    ("legacy hub url", Document(|d| set_hub(d, "hub_url", "https://x")), legacy_hub),
    ("legacy hub transport list", Document(|d| set_hub(d, "transport", Json::Array(vec![]))), legacy_hub),
    ("not healthy", Document(|d| set(d, "ok", false)), identity_only),
];

/// `rows` with each row's expectation turned into the check carrying it.
fn checked<E: Copy>(rows: &[HealthRow<E>], check: fn(E) -> Check) -> Vec<HealthRow<Check>> {
    rows.iter()
        .map(|&(label, answer, expected)| (label, answer, check(expected)))
        .collect()
}

#[test]
fn post_update_identities_match_the_original() {
    let originals = agents_tests::require_originals!();
    let cases = checked(POST_UPDATE_ROWS, post);
    compare_with_original(&originals, &HealthServer::start(), &cases);
}

/// The repaired Hub a check is told to expect: (transport, Hub URL, `None`
/// for null; direct-IP route URL).
type RepairedHub = (&'static str, Option<&'static str>, &'static str);

fn repaired((transport, url, direct_ip_url): RepairedHub) -> Check {
    Check::Repaired(RepairedHubIdentity {
        server_identity: IDENTITY.to_string(),
        transport: transport.into(),
        url: url.map_or(Json::Null, Json::from),
        direct_ip_url: direct_ip_url.into(),
    })
}

/// The loopback Hub of `healthy()` with its direct-IP route.
const LOOPBACK_HUB: RepairedHub = ("loopback", None, DIRECT_URL);

/// Answers for the repaired-host check: transports, URLs and routes as
/// admitted, the repaired Hub id's form, and a host that was not repaired.
#[rustfmt::skip]
const REPAIRED_ROWS: &[HealthRow<RepairedHub>] = &[
    ("repaired loopback", HEALTHY, LOOPBACK_HUB),
    ("repaired direct primary", Document(direct_primary_hub), ("direct_ip", Some(DIRECT_URL), DIRECT_URL)),
    ("transport differs", HEALTHY, ("", None, DIRECT_URL)),
    ("url differs", HEALTHY, ("loopback", Some(""), DIRECT_URL)),
    ("routes differ", HEALTHY, ("loopback", None, "")),
    ("hub id short", Document(|d| set_hub(d, "hub_id", "hub")), LOOPBACK_HUB),
    ("hub id not text", Document(|d| set_hub(d, "hub_id", 12345678)), LOOPBACK_HUB),
    ("hub id bad character", Document(|d| set_hub(d, "hub_id", "hub/0123456789")), LOOPBACK_HUB),
    ("not repaired", Document(|d| set_hub(d, "designated_host", false)), LOOPBACK_HUB),
];

#[test]
fn repaired_hosts_match_the_original() {
    let originals = agents_tests::require_originals!();
    let cases = checked(REPAIRED_ROWS, repaired);
    compare_with_original(&originals, &HealthServer::start(), &cases);
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
                "check" => IDLE.to_oracle(),
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
        let ours = IDLE.run(*port, "t");
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

    let (busy, count) = warming_server(1, set(healthy(), "active_count", 1));
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

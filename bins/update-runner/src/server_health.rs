//! The update runner's checks of the running AgentsServer through its
//! authenticated `GET http://127.0.0.1:<port>/api/health` (`update_runner.py`'s
//! `server_health_snapshot` family), and the one-time credential that
//! authenticates them (`consume_auth_token_file`).
//!
//! Before the installer runs, the runner proves the server is the expected
//! one and idle, with an empty service cgroup ([`ServerHealth::wait_for_idle`]
//! keeps the owning update alive while a forced-update startup opens its
//! listener, retrying only transport-level failures). After the installer,
//! it proves the replacement kept the server and Team Hub identities and
//! converged on the signed release ([`ServerHealth::assert_post_update_identity`],
//! [`ServerHealth::assert_repaired_team_hub_identity`]).
//!
//! Health values are compared with Python's `==` (`1 == 1.0 == True`), which
//! [`Json`]'s equality follows.

mod http_get;

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::release::MAX_METADATA_BYTES;
use agents_common::{read_regular_file, update_status, utc_now, BoundedRead, Error, Leaf, Result};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object, str_or_empty, strip, truthy, ErrorClass, PythonInt,
};

/// Per-request timeout of a health probe (`SERVER_IDLE_CHECK_TIMEOUT_SECONDS`).
pub const SERVER_IDLE_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a restarting server may take to answer before the update fails
/// (`SERVER_STARTUP_READINESS_TIMEOUT_SECONDS`).
pub const SERVER_STARTUP_READINESS_TIMEOUT: Duration = Duration::from_secs(45);
/// Pause between readiness probes (`SERVER_STARTUP_READINESS_POLL_SECONDS`).
pub const SERVER_STARTUP_READINESS_POLL: Duration = Duration::from_secs(1);

/// The status message while waiting for the server's listener.
const WAITING_MESSAGE: &str =
    "Waiting for AgentsServer startup before checking installation safety.";
/// The status message once the server proved identity and idleness.
const PASSED_MESSAGE: &str = "AgentsServer startup, identity, and idle checks passed.";

/// A failed health probe: the error Python reports, and whether
/// `transient_server_readiness_error` would retry it (HTTP 503, refused,
/// reset or aborted connections, timeouts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthProbeError {
    /// What failed, with the original's message.
    pub error: Error,
    /// True when the failure is only the server's transport not being ready.
    pub transient: bool,
}

impl HealthProbeError {
    fn refused(message: impl Into<String>) -> Self {
        HealthProbeError {
            error: Error::runtime(message),
            transient: false,
        }
    }
}

impl From<HealthProbeError> for Error {
    fn from(probe: HealthProbeError) -> Self {
        probe.error
    }
}

impl From<Error> for HealthProbeError {
    fn from(error: Error) -> Self {
        HealthProbeError {
            error,
            transient: false,
        }
    }
}

/// What a managed update expects the updated server to report
/// (`assert_post_update_identity`'s keyword arguments). `None`, and a Team Hub
/// value of `null`, is the original's "not given" (`None`); Team Hub values are
/// JSON because recovery takes them from the status row as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostUpdateIdentity {
    /// The stable server identity, which an update never changes.
    pub server_identity: String,
    /// The hosted Team Hub's id; `None` when this server hosts no Hub.
    pub team_hub_id: Option<Json>,
    /// The Hub's transport (`loopback`, `tailscale_serve`, `direct_ip`).
    pub team_hub_transport: Option<Json>,
    /// The Hub's public URL (`null` for loopback).
    pub team_hub_url: Option<Json>,
    /// The Hub's additional direct-IP route (`""` for none).
    pub team_hub_direct_ip_url: Option<Json>,
    /// The signed release version every component must now run.
    pub server_version: Option<String>,
    /// The signed release's API contract.
    pub api_contract_version: Option<i128>,
}

/// The continuity a failed Team Hub host repair must restore
/// (`assert_repaired_team_hub_identity`'s arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct RepairedHubIdentity {
    /// The stable server identity.
    pub server_identity: String,
    /// The admitted transport (`""` when none was recorded).
    pub transport: Json,
    /// The admitted Hub URL (`null` for loopback).
    pub url: Json,
    /// The admitted direct-IP route (`""` for none).
    pub direct_ip_url: Json,
}

/// The owning update whose status row a long wait keeps alive.
#[derive(Debug, Clone, Copy)]
pub struct StatusOwner<'a> {
    /// `server-update.json`.
    pub status_path: &'a Path,
    /// The update that must still own the row (CAS on every write).
    pub update_id: &'a str,
}

/// The pre-install readiness wait's expectations and timing
/// (`wait_for_server_idle`'s arguments).
#[derive(Debug, Clone)]
pub struct ReadinessWait {
    /// The server identity the health document must report.
    pub server_identity: String,
    /// Demand `update_service_cgroup.inspection == "verified"` (the server
    /// was admitted with an expected systemd service cgroup).
    pub require_verified_service_cgroup: bool,
    /// Overall deadline ([`SERVER_STARTUP_READINESS_TIMEOUT`]).
    pub timeout: Duration,
    /// Pause after a transient failure ([`SERVER_STARTUP_READINESS_POLL`]).
    pub poll: Duration,
    /// Largest single probe timeout ([`SERVER_IDLE_CHECK_TIMEOUT`]).
    pub probe_timeout: Duration,
}

impl ReadinessWait {
    /// The original's timing for a server expected to report `server_identity`.
    pub fn new(server_identity: &str, require_verified_service_cgroup: bool) -> Self {
        ReadinessWait {
            server_identity: server_identity.to_string(),
            require_verified_service_cgroup,
            timeout: SERVER_STARTUP_READINESS_TIMEOUT,
            poll: SERVER_STARTUP_READINESS_POLL,
            probe_timeout: SERVER_IDLE_CHECK_TIMEOUT,
        }
    }
}

/// The running server's authenticated health endpoint on 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHealth {
    port: PythonInt,
    token: String,
}

impl ServerHealth {
    /// The endpoint on `port`, authenticated with `token` when it is not
    /// blank (the original sends no `Authorization` for an empty token).
    pub fn new(port: PythonInt, token: &str) -> Self {
        ServerHealth {
            port,
            token: strip(token).to_string(),
        }
    }

    /// `server_health_snapshot`: one bounded health document, which must be
    /// a JSON object with `ok: true`.
    pub fn snapshot(&self, timeout: Duration) -> std::result::Result<JsonObject, HealthProbeError> {
        let authorization = format!("Bearer {}", self.token);
        let headers: Vec<(&str, &str)> = if self.token.is_empty() {
            Vec::new()
        } else {
            vec![("Authorization", authorization.as_str())]
        };
        let limit = MAX_METADATA_BYTES as usize;
        let content = http_get::get(&self.port, "/api/health", &headers, timeout, limit).map_err(
            |failure| HealthProbeError {
                error: failure.error,
                transient: failure.transient,
            },
        )?;
        if content.len() > limit {
            return Err(HealthProbeError::refused(
                "server health response exceeds its safety limit",
            ));
        }
        let health = parse_json(&content).map_err(|error| {
            // UnicodeDecodeError is not a JSONDecodeError: Python lets it through.
            if error.class() == ErrorClass::UnicodeDecode {
                HealthProbeError::from(Error::from(error))
            } else {
                HealthProbeError::refused("server health response is invalid JSON")
            }
        })?;
        match health {
            Json::Object(health) if health.get("ok").and_then(Json::as_bool) == Some(true) => {
                Ok(health)
            }
            _ => Err(HealthProbeError::refused(
                "server health response is not healthy",
            )),
        }
    }

    /// `server_work_snapshot`: the live `(active runs, queued turns)`, after
    /// checking the server identity (when given) and, for an idle server
    /// with `require_cgroup_safe`, the service-cgroup admission proof.
    pub fn work_snapshot(
        &self,
        timeout: Duration,
        require_cgroup_safe: bool,
        require_verified_service_cgroup: bool,
        expected_server_identity: Option<&str>,
    ) -> std::result::Result<(i128, i128), HealthProbeError> {
        let health = self.snapshot(timeout)?;
        if let Some(expected) = expected_server_identity {
            if health.get("server_identity") != Some(&Json::from(expected)) {
                return Err(HealthProbeError::refused(
                    "AgentsServer stable identity changed before restart",
                ));
            }
        }
        let active_count = match health.get("active_count") {
            Some(Json::Bool(_)) => {
                return Err(HealthProbeError::refused(
                    "server health response has an invalid active count",
                ))
            }
            Some(Json::Int(count)) => (*count).max(0),
            _ => match health.get("active") {
                Some(Json::Array(active)) => active.len() as i128,
                _ => {
                    return Err(HealthProbeError::refused(
                        "server health response is missing its active count",
                    ))
                }
            },
        };
        let queued_count = match health.get("update_blocking_queued_count") {
            Some(value) if !value.is_null() => match value {
                Json::Int(count) if *count >= 0 => *count,
                _ => {
                    return Err(HealthProbeError::refused(
                        "server health response has an invalid update-blocking queued count",
                    ))
                }
            },
            // Older servers: every queued turn blocks, as before.
            _ => {
                let Some(queued) = health.get("queued").and_then(Json::as_object) else {
                    return Err(HealthProbeError::refused(
                        "server health response is missing its queued turns",
                    ));
                };
                let mut total: i128 = 0;
                for value in queued.values() {
                    match value {
                        Json::Int(count) if *count >= 0 => total = total.saturating_add(*count),
                        _ => {
                            return Err(HealthProbeError::refused(
                                "server health response has an invalid queued count",
                            ))
                        }
                    }
                }
                total
            }
        };
        if require_cgroup_safe && active_count == 0 && queued_count == 0 {
            check_service_cgroup(&health, require_verified_service_cgroup)?;
        }
        Ok((active_count, queued_count))
    }

    /// `assert_server_idle`: fail closed unless the server is the expected
    /// one, idle, and its service cgroup is proven empty. Every probe failure
    /// is reworded "could not verify that AgentsServer is idle before
    /// restart: ..." and keeps its transient flag.
    pub fn assert_idle(
        &self,
        require_verified_service_cgroup: bool,
        expected_server_identity: Option<&str>,
        timeout: Duration,
    ) -> std::result::Result<(), HealthProbeError> {
        let (active, queued) = self
            .work_snapshot(
                timeout,
                true,
                require_verified_service_cgroup,
                expected_server_identity,
            )
            .map_err(|probe| HealthProbeError {
                error: Error::runtime(format!(
                    "could not verify that AgentsServer is idle before restart: {}",
                    probe.error.message()
                )),
                transient: probe.transient,
            })?;
        if active == 0 && queued == 0 {
            return Ok(());
        }
        let mut parts = Vec::new();
        if active != 0 {
            parts.push(format!("{active} active agent run{}", plural(active)));
        }
        if queued != 0 {
            parts.push(format!("{queued} queued turn{}", plural(queued)));
        }
        Err(HealthProbeError::refused(format!(
            "server became busy before restart: {}; retry the update after work finishes",
            parts.join(" and ")
        )))
    }

    /// `wait_for_server_idle`: heartbeat the owning update (which also stops
    /// a superseded runner), then prove idleness, retrying only transient
    /// transport failures until `wait.timeout` passes; a busy server or a
    /// failed proof ends the wait at once.
    pub fn wait_for_idle(&self, owner: StatusOwner<'_>, wait: &ReadinessWait) -> Result<()> {
        let deadline = Instant::now() + wait.timeout;
        loop {
            update_status(
                owner.status_path,
                Some(owner.update_id),
                json_object! {
                    "heartbeat_at" => utc_now(),
                    "message" => WAITING_MESSAGE,
                },
            )?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::runtime(format!(
                    "AgentsServer startup readiness timed out after {} seconds",
                    python_compat::format_g(wait.timeout.as_secs_f64())
                )));
            }
            match self.assert_idle(
                wait.require_verified_service_cgroup,
                Some(&wait.server_identity),
                wait.probe_timeout.min(remaining),
            ) {
                Ok(()) => {
                    // Ownership can change while the request is in flight.
                    update_status(
                        owner.status_path,
                        Some(owner.update_id),
                        json_object! {
                            "heartbeat_at" => utc_now(),
                            "message" => PASSED_MESSAGE,
                        },
                    )?;
                    return Ok(());
                }
                Err(probe) if probe.transient => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    if !remaining.is_zero() {
                        std::thread::sleep(wait.poll.min(remaining));
                    }
                }
                Err(probe) => return Err(probe.error),
            }
        }
    }

    /// `assert_post_update_identity`: after the installer, the server must
    /// keep its stable identity, run the signed version in every component
    /// with admission released, serve the signed API contract and the
    /// secure-peer capability, and keep its Team Hub identity, transport and
    /// routes.
    pub fn assert_post_update_identity(&self, expected: &PostUpdateIdentity) -> Result<()> {
        let health = self.snapshot(SERVER_IDLE_CHECK_TIMEOUT)?;
        let field = |name: &str| health.get(name).unwrap_or(&Json::Null);
        if str_or_empty(field("server_identity")) != expected.server_identity {
            return Err(Error::runtime(
                "updated AgentsServer stable identity does not match",
            ));
        }
        if let Some(version) = &expected.server_version {
            check_converged_version(&health, version)?;
        }
        if let Some(contract) = expected.api_contract_version {
            if field("api_contract_version").as_int() != Some(contract) {
                return Err(Error::runtime(
                    "updated AgentsServer API contract does not match the signed release",
                ));
            }
        }
        let capabilities = health.get("capabilities").and_then(Json::as_object);
        let capability = |name: &str| capabilities.and_then(|all| all.get(name)?.as_object());
        if !capability("secure_peer_v1")
            .is_some_and(|secure| matches_all(secure, &secure_peer_requirements()))
        {
            return Err(Error::runtime(
                "updated AgentsServer secure-peer state is unavailable",
            ));
        }
        check_post_update_team_hub(expected, capability("team_hub_v1"))
    }

    /// `assert_repaired_team_hub_identity`: a repaired host must serve an
    /// available Team Hub with the admitted transport, URL and routes, and a
    /// well-formed Hub id, which is returned.
    pub fn assert_repaired_team_hub_identity(
        &self,
        expected: &RepairedHubIdentity,
    ) -> Result<String> {
        let health = self.snapshot(SERVER_IDLE_CHECK_TIMEOUT)?;
        let required = json_object! {
            "available" => true,
            "designated_host" => true,
            "version" => 1,
            "base_path" => "/api/team-hub",
            "host_server_identity" => expected.server_identity.as_str(),
            "transport" => expected.transport.clone(),
            "hub_url" => expected.url.clone(),
        };
        let hub = health
            .get("capabilities")
            .and_then(|capabilities| capabilities.get("team_hub_v1"))
            .and_then(Json::as_object)
            .filter(|hub| matches_all(hub, &required));
        let Some(hub) = hub else {
            return Err(Error::runtime(
                "updated AgentsServer did not repair its Team Hub host",
            ));
        };
        let hub_id = hub
            .get("hub_id")
            .and_then(Json::as_str)
            .filter(|id| is_hub_id(id));
        let Some(hub_id) = hub_id else {
            return Err(Error::runtime("repaired Team Hub identity is invalid"));
        };
        let routes = team_hub_routes(
            expected.transport.clone(),
            expected.url.clone(),
            &expected.direct_ip_url,
            Some(&expected.transport),
        );
        if hub.get("routes") != Some(&routes) {
            return Err(Error::runtime("repaired Team Hub routes changed"));
        }
        Ok(hub_id.to_string())
    }
}

/// The service-cgroup admission proof of an idle server: present, `safe`,
/// no unknown descendants, and `inspection: verified` when demanded.
fn check_service_cgroup(
    health: &JsonObject,
    require_verified: bool,
) -> std::result::Result<(), HealthProbeError> {
    let Some(cgroup) = health
        .get("update_service_cgroup")
        .and_then(Json::as_object)
    else {
        return Err(HealthProbeError::refused(
            "server health response is missing its service-cgroup admission proof",
        ));
    };
    let safe = cgroup.get("safe").and_then(Json::as_bool) == Some(true)
        && cgroup
            .get("unknown_descendant_count")
            .and_then(Json::as_int)
            == Some(0);
    if !safe {
        return Err(HealthProbeError::refused(
            "AgentsServer has an unverified or nonempty service cgroup",
        ));
    }
    if require_verified && cgroup.get("inspection") != Some(&Json::from("verified")) {
        return Err(HealthProbeError::refused(
            "AgentsServer did not return a verified systemd service-cgroup proof",
        ));
    }
    Ok(())
}

/// `SECURE_PEER_HEALTH_REQUIREMENTS`: the secure-peer capability every
/// updated server must report.
fn secure_peer_requirements() -> JsonObject {
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

/// `not any(actual.get(name) != value for name, value in required.items())`:
/// a missing member reads as `null`.
fn matches_all(actual: &JsonObject, required: &JsonObject) -> bool {
    required
        .iter()
        .all(|(name, value)| actual.get(name).unwrap_or(&Json::Null) == value)
}

/// The canonical route list: the primary route, then the direct-IP route
/// when one is configured and the primary is not already direct IP.
fn team_hub_routes(
    transport: Json,
    url: Json,
    direct_ip_url: &Json,
    primary_transport: Option<&Json>,
) -> Json {
    let mut routes = vec![Json::from(json_object! {
        "transport" => transport,
        "hub_url" => url,
    })];
    let primary_is_direct = primary_transport == Some(&Json::from("direct_ip"));
    if truthy(direct_ip_url) && !primary_is_direct {
        routes.push(Json::from(json_object! {
            "transport" => "direct_ip",
            "hub_url" => direct_ip_url.clone(),
        }));
    }
    Json::Array(routes)
}

/// `re.fullmatch(r"[A-Za-z0-9_.:-]{8,240}", hub_id)`.
fn is_hub_id(id: &str) -> bool {
    (8..=240).contains(&id.len())
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b':' | b'-'))
}

/// Python's `TypeError` for `value in {None, "loopback"}` with a list or dict.
fn unhashable(kind: &str) -> Error {
    Error::runtime(format!("unhashable type: '{kind}'"))
}

fn plural(count: i128) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// `Path(text).expanduser().resolve()`: `~` from `HOME`, a relative path
/// from the working directory, symlinks resolved as far as the path exists.
pub fn resolve_user_path(path: &Path) -> Result<PathBuf> {
    Ok(python_compat::path::resolve(Path::new(OsStr::from_bytes(
        &expand_user_absolute(path)?,
    )))?)
}

/// `Path(text).expanduser()` made absolute against the working directory;
/// a `~` or `~user` that finds no home is pathlib's RuntimeError.
fn expand_user_absolute(path: &Path) -> Result<Vec<u8>> {
    let expanded = python_compat::path::expanduser(path.as_os_str().as_bytes());
    if expanded.starts_with(b"~") {
        return Err(Error::runtime("Could not determine home directory."));
    }
    if expanded.starts_with(b"/") {
        return Ok(expanded);
    }
    let mut cwd = std::env::current_dir()?.into_os_string().into_vec();
    cwd.push(b'/');
    cwd.extend_from_slice(&expanded);
    Ok(cwd)
}

/// [`resolve_user_path`] for a file the caller will remove: the directories
/// are resolved, the last component is kept as it is, so a symlink there is
/// judged (and removed) itself rather than what it points at.
fn resolve_user_parent(path: &Path) -> Result<PathBuf> {
    let absolute = PathBuf::from(OsStr::from_bytes(&expand_user_absolute(path)?));
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => Ok(python_compat::path::resolve(parent)?.join(name)),
        // `/`, or a path ending in `..`: nothing to keep unresolved.
        _ => Ok(python_compat::path::resolve(&absolute)?),
    }
}

/// Largest health credential file read: a token is a few dozen bytes.
pub const MAX_CREDENTIAL_BYTES: u64 = 64 * 1024;

/// `consume_auth_token_file`: read the server's one-time health credential
/// (`{"token": ...}`) and remove the file whatever happens, so the token
/// never outlives this runner. No path (or a blank one) means no credential.
pub fn consume_auth_token_file(path: Option<&Path>) -> Result<String> {
    // `str(path or "").strip()` of the surrogate-escaped argument: the bytes
    // as given, never a lossy respelling that would name another file.
    let raw = path
        .map(|path| path.as_os_str().as_bytes())
        .unwrap_or_default();
    let clean = python_compat::strip_bytes(raw);
    if clean.is_empty() {
        return Ok(String::new());
    }
    let token_path = resolve_user_parent(Path::new(OsStr::from_bytes(clean)))?;
    // Stricter than the original, which follows a symlink here and then deletes
    // its target, and blocks on a FIFO: only a small regular file is read,
    // and only the entry at the given path is removed.
    let read = match read_regular_file(&token_path, MAX_CREDENTIAL_BYTES, Leaf::Refuse) {
        // `json.loads(path.read_text())`: strict UTF-8 text, so a byte
        // order mark is refused, where `json.loads(bytes)` would skip it.
        Ok(BoundedRead::Contents(data)) => python_compat::text_mode(&data)
            .and_then(|text| python_compat::json::parse_json_str(&text))
            .map_err(Error::from),
        Ok(BoundedRead::NotRegular) => Err(Error::runtime(
            "server update health credential is not a regular file",
        )),
        Ok(BoundedRead::TooLarge) => Err(Error::runtime(format!(
            "server update health credential exceeds {} KiB",
            MAX_CREDENTIAL_BYTES >> 10
        ))),
        Err(err) => Err(err),
    };
    // `finally: unlink()`, ignoring only a file that is already gone; an
    // unlink failure replaces the read's outcome, as in Python.
    if let Err(err) = std::fs::remove_file(&token_path) {
        if err.kind() != std::io::ErrorKind::NotFound {
            return Err(Error::from_io_path(&err, &token_path));
        }
    }
    let token = match read? {
        Json::Object(value) => value.get("token").map(str_or_empty).unwrap_or_default(),
        _ => String::new(),
    };
    if token.is_empty() {
        return Err(Error::runtime("server update health credential is empty"));
    }
    Ok(token)
}

/// The signed version in the server and, for a split installation, in both
/// components, with the activation's admission released.
fn check_converged_version(health: &JsonObject, version: &str) -> Result<()> {
    let field = |name: &str| health.get(name).unwrap_or(&Json::Null);
    if field("server_version") != &Json::from(version) {
        return Err(Error::runtime(
            "updated AgentsServer version does not match the signed release",
        ));
    }
    if health.contains_key("gateway") || health.contains_key("execution_service") {
        for component in ["gateway", "execution_service"] {
            let converged = health
                .get(component)
                .and_then(Json::as_object)
                .is_some_and(|identity| identity.get("version") == Some(&Json::from(version)));
            if !converged {
                return Err(Error::runtime(
                    "updated AgentsServer gateway and execution versions have not converged",
                ));
            }
        }
        let released = health
            .get("execution_service")
            .and_then(|service| service.get("maintenance_held"))
            .and_then(Json::as_bool)
            == Some(false);
        if !released {
            return Err(Error::runtime(
                "updated AgentsServer activation has not released admission",
            ));
        }
    }
    Ok(())
}

/// After the update the server keeps the Team Hub it hosted: identity,
/// transport (or a legacy loopback one) and, when given, its routes.
fn check_post_update_team_hub(
    expected: &PostUpdateIdentity,
    hub_capability: Option<&JsonObject>,
) -> Result<()> {
    // Python cannot tell an argument given as None from one not given.
    let given = |value: &Option<Json>| value.clone().filter(|value| !value.is_null());
    let transport_given = given(&expected.team_hub_transport);
    let url_given = given(&expected.team_hub_url);
    let direct_ip_given = given(&expected.team_hub_direct_ip_url);
    let Some(hub_id) = given(&expected.team_hub_id) else {
        if transport_given.is_some() || url_given.is_some() || direct_ip_given.is_some() {
            return Err(Error::runtime(
                "managed Team Hub transport has no bound Hub identity",
            ));
        }
        return Ok(());
    };
    let identity = json_object! {
        "available" => true,
        "designated_host" => true,
        "version" => 1,
        "base_path" => "/api/team-hub",
        "hub_id" => hub_id.clone(),
        "host_server_identity" => expected.server_identity.as_str(),
    };
    let Some(hub) = hub_capability.filter(|hub| matches_all(hub, &identity)) else {
        return Err(Error::runtime(
            "updated AgentsServer lost or changed its Team Hub identity",
        ));
    };
    let actual_transport = hub.get("transport").unwrap_or(&Json::Null);
    let actual_url = hub.get("hub_url").unwrap_or(&Json::Null);
    match &transport_given {
        None => {
            let legacy = match actual_transport {
                Json::Null => true,
                Json::Array(_) => return Err(unhashable("list")),
                Json::Object(_) => return Err(unhashable("dict")),
                other => other == &Json::from("loopback"),
            };
            if !legacy || !actual_url.is_null() {
                return Err(Error::runtime(
                    "updated AgentsServer changed its legacy Team Hub transport",
                ));
            }
        }
        Some(transport) => {
            let url = url_given.clone().unwrap_or(Json::Null);
            if actual_transport != transport || actual_url != &url {
                return Err(Error::runtime(
                    "updated AgentsServer changed its Team Hub transport",
                ));
            }
        }
    }
    if let Some(direct_ip_url) = &direct_ip_given {
        let transport = expected
            .team_hub_transport
            .clone()
            .filter(truthy)
            .unwrap_or_else(|| Json::from("loopback"));
        let routes = team_hub_routes(
            transport,
            url_given.clone().unwrap_or(Json::Null),
            direct_ip_url,
            transport_given.as_ref(),
        );
        if hub.get("routes") != Some(&routes) {
            return Err(Error::runtime(
                "updated AgentsServer changed its Team Hub routes",
            ));
        }
    }
    Ok(())
}

//! Answering one request: route it, apply the test's switches, log it, reply.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use agents_tests::{origin_address, Death, DeathPoint, HttpRequest, RequestRecord, Role, Switches};
use python_compat::json::{encode_compact, parse_json, Json};
use rustix::process::{getpid, kill_process, Signal};

use crate::control::{self, Command, CONTROL_PREFIX};
use crate::health::{application_health, gateway_identity, worker_identity, ServerFacts};
use crate::http_server::{Reply, Request};
use crate::maintenance::{blocker_counts, Maintenance};

/// How long the gateway waits for the worker's health.
const WORKER_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// The server's secure-peer control status path (upstream `control_path`).
const SECURE_PEER_STATUS_PATH: &str = "/api/admin/secure-peers/v1/status";

/// Which listener a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    /// The worker's private `127.0.0.1:<ephemeral>` listener.
    Callback,
    /// The layout's `bind:port` (gateway or monolith).
    Public,
}

impl Listener {
    fn name(self) -> &'static str {
        match self {
            Listener::Callback => "callback",
            Listener::Public => "public",
        }
    }
}

/// Everything a running test worker answers with.
#[derive(Debug)]
pub(crate) struct Service {
    /// The role played.
    pub role: Role,
    /// Receipt instance id (a fresh id for a monolith, for its logs).
    pub instance_id: String,
    /// The release's stripped `VERSION` (or `development`).
    pub version: String,
    /// Where switches and request logs live.
    pub state_root: PathBuf,
    /// `--runtime-dir` of split services.
    pub runtime_dir: Option<PathBuf>,
    /// The agent token health requires (`None`: every request is accepted).
    pub agent_token: Option<String>,
    /// The control token of the runtime directory (split services).
    pub control_token: Option<String>,
    /// The lease state (worker only).
    pub maintenance: Option<Mutex<Maintenance>>,
    /// Fixed health facts.
    pub facts: ServerFacts,
}

enum Route {
    Control(Result<Command, control::Refusal>),
    Health,
    UpdateStatus,
    SecurePeerStatus,
    NotFound,
}

fn die(death: &Death) -> ! {
    match death.exit_code {
        Some(code) => std::process::exit(code),
        None => {
            let _ = kill_process(getpid(), Signal::KILL);
            unreachable!("SIGKILL cannot be caught")
        }
    }
}

/// Upstream's detail for each action, used when a switch refuses it.
fn refusal_detail(action: &str) -> &'static str {
    match action {
        "acquire" => "Execution is busy; running agents were left untouched",
        "renew" => "Execution maintenance lease expired",
        "seal" => "Execution work appeared before retirement",
        _ => "Execution maintenance ownership changed",
    }
}

impl Service {
    fn credential(&self, request: &Request) -> &'static str {
        let values = request.header_values("authorization");
        let bearer = |token: &Option<String>| {
            token
                .as_ref()
                .is_some_and(|token| values[0] == format!("Bearer {token}").as_bytes())
        };
        match values.len() {
            0 => "none",
            1 if bearer(&self.control_token) => "control",
            1 if bearer(&self.agent_token) => "agent",
            1 => "other",
            _ => "several",
        }
    }

    /// The app's `request_authorized`: a Bearer header, `x-agentsdock-token`
    /// or `?token=`; everything passes when no agent token is configured.
    fn agent_authorized(&self, request: &Request) -> bool {
        let Some(token) = &self.agent_token else {
            return true;
        };
        let bearer = format!("Bearer {token}");
        request
            .header_values("authorization")
            .contains(&bearer.as_bytes())
            || request
                .header_values("x-agentsdock-token")
                .contains(&token.as_bytes())
            || request.query.as_deref().is_some_and(|query| {
                query
                    .split('&')
                    .any(|pair| pair == format!("token={token}"))
            })
    }

    fn version<'a>(&'a self, switches: &'a Switches) -> &'a str {
        switches.version.as_deref().unwrap_or(&self.version)
    }

    fn reported_instance<'a>(&'a self, switches: &'a Switches) -> &'a str {
        switches
            .reply_instance_id
            .as_deref()
            .unwrap_or(&self.instance_id)
    }

    fn control_reply(&self, command: Command, switches: &Switches) -> (u16, Json) {
        let maintenance = self
            .maintenance
            .as_ref()
            .expect("control runs on the worker");
        let mut maintenance = maintenance
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let blockers = blocker_counts(switches);
        if let Command::Maintenance {
            action,
            operation_id,
            lease_id,
            lifetime,
        } = command
        {
            let outcome = if switches.refuse.contains(&action) {
                Err((409, refusal_detail(&action).to_string()))
            } else {
                maintenance.apply(
                    &action,
                    &operation_id,
                    lease_id.as_deref(),
                    lifetime,
                    &blockers,
                )
            };
            if let Err((status, detail)) = outcome {
                return (
                    status,
                    Json::Object(python_compat::json_object! {"detail" => detail}),
                );
            }
        }
        (
            200,
            maintenance.status(&blockers, self.reported_instance(switches)),
        )
    }

    fn health_reply(&self, request: &Request, switches: &Switches) -> Reply {
        if !self.agent_authorized(request) {
            return Reply::detail(401, "Unauthorized");
        }
        if let Some(status) = switches.health_status {
            return Reply::detail(status, "test worker health switch");
        }
        let mut body = application_health(&self.facts, self.version(switches), switches);
        match self.role {
            Role::Worker => {
                let held = self.maintenance.as_ref().is_some_and(|maintenance| {
                    maintenance
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_held()
                });
                body.insert(
                    "execution_service",
                    worker_identity(
                        self.reported_instance(switches),
                        self.version(switches),
                        held,
                    ),
                );
            }
            Role::Gateway => return self.gateway_health(request, switches),
            Role::Monolith => {}
        }
        Reply::json(
            200,
            encode_compact(&Json::Object(body)).expect("health encodes"),
        )
    }

    /// The server's update status read (see [`crate::update_status`]).
    fn update_status_reply(&self, request: &Request, switches: &Switches) -> Reply {
        if !self.agent_authorized(request) {
            return Reply::detail(401, "Unauthorized");
        }
        match crate::update_status::read(&self.state_root, switches.update_grace_seconds) {
            Ok(row) => Reply::json(200, row.into_bytes()),
            Err(err) => Reply::detail(500, &err),
        }
    }

    /// The server's secure-peer status (`/api/admin/secure-peers/v1/status`)
    /// of a server with no Teamspace pairing: install.sh reads it before an
    /// update to bind the current client state.
    fn secure_peer_status_reply(&self, request: &Request, switches: &Switches) -> Reply {
        if !self.agent_authorized(request) {
            return Reply::detail(401, "Unauthorized");
        }
        let identity = switches
            .server_identity
            .as_deref()
            .unwrap_or(&self.facts.server_identity);
        let body = python_compat::json_object! {
            "version" => 1,
            "server_identity" => identity,
            "active_connection_id" => Json::Null,
            "pairings" => Json::Array(Vec::new()),
        };
        Reply::json(
            200,
            encode_compact(&Json::Object(body)).expect("the status encodes"),
        )
    }

    fn worker_origin(&self) -> Option<SocketAddr> {
        let receipt = std::fs::read(self.runtime_dir.as_ref()?.join("worker.json")).ok()?;
        origin_address(
            parse_json(&receipt)
                .ok()?
                .get("callback_origin")?
                .as_str()?,
        )
    }

    /// The worker's health (fetched from its callback origin, forwarding the
    /// client's credentials) plus the gateway identity.
    fn gateway_health(&self, request: &Request, switches: &Switches) -> Reply {
        let Some(origin) = self.worker_origin() else {
            return Reply::detail(503, "Execution worker unavailable");
        };
        let target = match &request.query {
            Some(query) => format!("/api/health?{query}"),
            None => "/api/health".to_string(),
        };
        let mut forwarded = HttpRequest::get(&target);
        for name in ["authorization", "x-agentsdock-token"] {
            for value in request.header_values(name) {
                forwarded = forwarded.header(name, &String::from_utf8_lossy(value));
            }
        }
        let Ok(response) = forwarded.send_with_timeout(origin, WORKER_HEALTH_TIMEOUT) else {
            return Reply::detail(503, "Execution worker unavailable");
        };
        let document = parse_json(&response.body)
            .ok()
            .filter(|_| response.status == 200);
        match document {
            Some(Json::Object(mut body)) => {
                body.insert(
                    "gateway",
                    gateway_identity(&self.instance_id, self.version(switches)),
                );
                Reply::json(
                    200,
                    encode_compact(&Json::Object(body)).expect("health encodes"),
                )
            }
            _ => Reply::json(response.status, response.body),
        }
    }

    /// Handles one request from start to reply.
    pub(crate) fn handle(&self, listener: Listener, mut request: Request) {
        let credential = self.credential(&request);
        let log = |request: &Request, action: Option<&String>, status: u16, outcome: &str| {
            let record = RequestRecord {
                pid: std::process::id(),
                instance_id: self.instance_id.clone(),
                listener: listener.name().to_string(),
                method: request.method.clone(),
                path: request.path.clone(),
                query: request.query.is_some(),
                headers: request
                    .headers
                    .iter()
                    .map(|(name, _)| name.clone())
                    .collect(),
                credential: credential.to_string(),
                action: action.cloned(),
                status,
                outcome: outcome.to_string(),
            };
            if let Err(err) = record.append(&self.state_root, self.role) {
                eprintln!("test-worker: cannot log a request: {err}");
            }
        };
        let switches = match Switches::load(&self.state_root, self.role) {
            Ok(switches) => switches,
            Err(err) => {
                let reply = Reply::detail(500, &format!("test worker switches are invalid: {err}"));
                log(&request, None, reply.status, "replied");
                let _ = request.respond(&reply);
                return;
            }
        };
        let route = match (&self.control_token, &self.maintenance) {
            (Some(token), Some(_))
                if listener == Listener::Callback && request.path.starts_with(CONTROL_PREFIX) =>
            {
                Route::Control(control::check(&mut request, token, &self.instance_id))
            }
            _ if request.path == "/api/health" => Route::Health,
            _ if request.path == "/api/admin/update"
                && request.method == "GET"
                && listener == Listener::Public
                && self.role != Role::Worker =>
            {
                Route::UpdateStatus
            }
            _ if request.path == SECURE_PEER_STATUS_PATH
                && request.method == "GET"
                && listener == Listener::Public
                && self.role != Role::Worker =>
            {
                Route::SecurePeerStatus
            }
            _ => Route::NotFound,
        };
        let action = match &route {
            Route::Control(Ok(Command::Maintenance { action, .. })) => Some(action.clone()),
            _ => None,
        };
        let death = switches
            .die
            .as_ref()
            .filter(|death| death.on.matches(&request.path, action.as_deref()));
        if let Some(death) = death.filter(|death| death.when == DeathPoint::BeforeHandling) {
            log(&request, action.as_ref(), 0, "died");
            die(death);
        }
        let reply = match route {
            Route::Control(checked) => {
                let token = self.control_token.as_deref().unwrap_or_default();
                let (status, value) = match checked {
                    Ok(command) => self.control_reply(command, &switches),
                    Err((status, detail)) => (
                        status,
                        Json::Object(python_compat::json_object! {"detail" => detail}),
                    ),
                };
                control::respond(status, &value, token)
            }
            Route::Health => self.health_reply(&request, &switches),
            Route::UpdateStatus => self.update_status_reply(&request, &switches),
            Route::SecurePeerStatus => self.secure_peer_status_reply(&request, &switches),
            Route::NotFound => Reply::detail(404, "Not Found"),
        };
        if let Some(death) = death.filter(|death| death.when == DeathPoint::BeforeReply) {
            log(&request, action.as_ref(), 0, "died");
            die(death);
        }
        let stall = switches
            .stall
            .as_ref()
            .filter(|stall| stall.on.matches(&request.path, action.as_deref()));
        if let Some(stall) = stall {
            log(&request, action.as_ref(), reply.status, "stalled");
            std::thread::sleep(Duration::from_secs_f64(stall.seconds.max(0.0)));
        } else {
            log(&request, action.as_ref(), reply.status, "replied");
        }
        let _ = request.respond(&reply);
        if let Some(death) = death.filter(|death| death.when == DeathPoint::AfterReply) {
            die(death);
        }
    }
}

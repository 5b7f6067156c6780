//! The files through which a test steers the test worker and reads what it
//! saw: one definition shared by the worker binary and the tests.
//!
//! Both live in `state_root/test-worker/`:
//! - `<role>.json`: [`Switches`], re-read by the worker on every request (the
//!   receipt delay at startup), written atomically by the test;
//! - `<role>.requests.jsonl`: one [`RequestRecord`] line per request, appended
//!   by the worker before it replies. Token values are never logged;
//! - `<role>.errors.log`: why a start failed (systemd's journal is not
//!   available in the sandbox).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use python_compat::{
    json::{encode_line, parse_json, Json, JsonObject},
    json_object,
};

/// The process a test worker plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The split worker: callback listener with the private control endpoints.
    Worker,
    /// The split gateway: public listener adding its identity to the worker's health.
    Gateway,
    /// A legacy single-process server: public health, no receipts.
    Monolith,
}

impl Role {
    /// The role's name as used in file names (`worker`, `gateway`, `monolith`).
    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Gateway => "gateway",
            Role::Monolith => "monolith",
        }
    }
}

/// `state_root/test-worker`, the directory of switches and request logs.
pub fn test_worker_dir(state_root: &Path) -> PathBuf {
    state_root.join("test-worker")
}

/// Where the switches of a role are read from.
pub fn switches_path(state_root: &Path, role: Role) -> PathBuf {
    test_worker_dir(state_root).join(format!("{}.json", role.name()))
}

/// Where a role logs the requests it received.
pub fn request_log_path(state_root: &Path, role: Role) -> PathBuf {
    test_worker_dir(state_root).join(format!("{}.requests.jsonl", role.name()))
}

/// Where a role appends why it failed to start (one line per attempt).
pub fn errors_log_path(state_root: &Path, role: Role) -> PathBuf {
    test_worker_dir(state_root).join(format!("{}.errors.log", role.name()))
}

/// Which requests a switch applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMatch {
    /// The exact request path (without query).
    pub path: String,
    /// For maintenance requests, the body's `action`; `None` matches any.
    pub action: Option<String>,
}

impl RequestMatch {
    /// Matches every request to `path`.
    pub fn path(path: &str) -> RequestMatch {
        RequestMatch {
            path: path.to_string(),
            action: None,
        }
    }

    /// Matches maintenance requests with this `action`.
    pub fn maintenance(action: &str) -> RequestMatch {
        RequestMatch {
            path: "/api/admin/execution/maintenance".to_string(),
            action: Some(action.to_string()),
        }
    }

    /// True for a request with this path and (parsed) action.
    pub fn matches(&self, path: &str, action: Option<&str>) -> bool {
        self.path == path
            && self
                .action
                .as_deref()
                .is_none_or(|wanted| Some(wanted) == action)
    }
}

/// When a [`Death`] strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathPoint {
    /// Before the request changes anything (no reply).
    BeforeHandling,
    /// After the request took effect, before the reply (no reply).
    BeforeReply,
    /// Right after the reply was sent.
    AfterReply,
}

impl DeathPoint {
    fn name(self) -> &'static str {
        match self {
            DeathPoint::BeforeHandling => "before_handling",
            DeathPoint::BeforeReply => "before_reply",
            DeathPoint::AfterReply => "after_reply",
        }
    }
}

/// The process ends on a matching request, without removing its receipt
/// (a crash as the helpers see it). Systemd then restarts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// Which request triggers it.
    pub on: RequestMatch,
    /// At which point of handling.
    pub when: DeathPoint,
    /// `Some(code)` exits with that status; `None` is SIGKILL.
    pub exit_code: Option<i32>,
}

/// The reply to a matching request is held back (after the request took
/// effect), e.g. past the client's 5 s timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// Which request is stalled.
    pub on: RequestMatch,
    /// How long the reply waits.
    pub seconds: f64,
}

/// Misbehaviour a test switches on in a running test worker. The default
/// is a faithful, idle worker.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Switches {
    /// Blocker counters to report (and obey) instead of 0, e.g.
    /// `("active_runs", 1)` makes the worker busy.
    pub blockers: Vec<(String, i64)>,
    /// Reported as the worker instance in health, status and maintenance
    /// replies instead of the real one (requests are still checked against the
    /// real one).
    pub reply_instance_id: Option<String>,
    /// Maintenance actions refused with 409 and their upstream detail, with no effect.
    pub refuse: Vec<String>,
    /// Hold back one kind of reply.
    pub stall: Option<Stall>,
    /// End the process on one kind of request.
    pub die: Option<Death>,
    /// Seconds to wait before writing the receipt at startup.
    pub receipt_delay_seconds: f64,
    /// Report this version instead of the release's `VERSION`.
    pub version: Option<String>,
    /// Report this `server_identity` instead of the state-derived one.
    pub server_identity: Option<String>,
    /// Answer `/api/health` with this status (and a `detail` body) instead of 200.
    pub health_status: Option<u16>,
    /// Extra top-level health fields (e.g. `capabilities`), merged in.
    pub health_extra: JsonObject,
    /// The server's grace (seconds after the row's last update) before its
    /// update status read finalizes an update whose runner is gone; `None`
    /// is the server's 45 s.
    pub update_grace_seconds: Option<f64>,
}

fn request_match_json(on: &RequestMatch) -> JsonObject {
    json_object! {"path" => on.path.as_str(), "action" => on.action.clone()}
}

fn request_match_from(value: &Json) -> Result<RequestMatch, String> {
    let path = value
        .get("path")
        .and_then(Json::as_str)
        .ok_or("a switch needs a path")?;
    let action = match value.get("action") {
        None | Some(Json::Null) => None,
        Some(action) => Some(
            action
                .as_str()
                .ok_or("action must be a string")?
                .to_string(),
        ),
    };
    Ok(RequestMatch {
        path: path.to_string(),
        action,
    })
}

impl Switches {
    /// A faithful worker that holds back its reply to requests matching `on`
    /// for `seconds` (the request itself already took effect).
    pub fn stalling(on: RequestMatch, seconds: f64) -> Switches {
        Switches {
            stall: Some(Stall { on, seconds }),
            ..Switches::default()
        }
    }

    /// The file form written by tests.
    pub fn to_json(&self) -> Json {
        let mut object = JsonObject::new();
        let blockers: JsonObject = self
            .blockers
            .iter()
            .map(|(name, count)| (name.clone(), *count))
            .collect();
        object.insert("blockers", blockers);
        object.insert("reply_instance_id", self.reply_instance_id.clone());
        object.insert("refuse", self.refuse.clone());
        object.insert(
            "stall",
            self.stall.as_ref().map(|stall| {
                let mut value = request_match_json(&stall.on);
                value.insert("seconds", stall.seconds);
                value
            }),
        );
        object.insert(
            "die",
            self.die.as_ref().map(|death| {
                let mut value = request_match_json(&death.on);
                value.insert("when", death.when.name());
                value.insert("exit_code", death.exit_code);
                value
            }),
        );
        object.insert("receipt_delay_seconds", self.receipt_delay_seconds);
        object.insert("version", self.version.clone());
        object.insert("server_identity", self.server_identity.clone());
        object.insert("health_status", self.health_status.map(u32::from));
        object.insert("health_extra", self.health_extra.clone());
        object.insert("update_grace_seconds", self.update_grace_seconds);
        Json::Object(object)
    }

    /// Parses the file form; every key is optional.
    pub fn from_json(value: &Json) -> Result<Switches, String> {
        let object = value.as_object().ok_or("switches must be a JSON object")?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match object.get(key) {
                None | Some(Json::Null) => Ok(None),
                Some(value) => Ok(Some(
                    value
                        .as_str()
                        .ok_or(format!("{key} must be a string"))?
                        .to_string(),
                )),
            }
        };
        let number = |key: &str| -> Result<f64, String> {
            match object.get(key) {
                None | Some(Json::Null) => Ok(0.0),
                Some(Json::Int(value)) => Ok(*value as f64),
                Some(Json::Float(value)) => Ok(*value),
                Some(_) => Err(format!("{key} must be a number")),
            }
        };
        let mut switches = Switches {
            reply_instance_id: text("reply_instance_id")?,
            receipt_delay_seconds: number("receipt_delay_seconds")?,
            version: text("version")?,
            server_identity: text("server_identity")?,
            ..Switches::default()
        };
        if let Some(blockers) = object.get("blockers").and_then(Json::as_object) {
            for (name, count) in blockers {
                let count = count.as_int().ok_or("blocker counts must be integers")?;
                switches.blockers.push((name.clone(), count as i64));
            }
        }
        if let Some(refuse) = object.get("refuse").and_then(Json::as_array) {
            for action in refuse {
                switches
                    .refuse
                    .push(action.as_str().ok_or("refuse lists actions")?.to_string());
            }
        }
        if let Some(stall) = object.get("stall").filter(|value| !value.is_null()) {
            let seconds = match stall.get("seconds") {
                Some(Json::Int(value)) => *value as f64,
                Some(Json::Float(value)) => *value,
                _ => return Err("stall needs seconds".to_string()),
            };
            switches.stall = Some(Stall {
                on: request_match_from(stall)?,
                seconds,
            });
        }
        if let Some(die) = object.get("die").filter(|value| !value.is_null()) {
            let when = match die.get("when").and_then(Json::as_str) {
                Some("before_handling") => DeathPoint::BeforeHandling,
                Some("before_reply") => DeathPoint::BeforeReply,
                Some("after_reply") => DeathPoint::AfterReply,
                _ => {
                    return Err(
                        "die.when must be before_handling, before_reply or after_reply".to_string(),
                    )
                }
            };
            let exit_code = match die.get("exit_code") {
                None | Some(Json::Null) => None,
                Some(code) => Some(code.as_int().ok_or("die.exit_code must be an integer")? as i32),
            };
            switches.die = Some(Death {
                on: request_match_from(die)?,
                when,
                exit_code,
            });
        }
        if let Some(status) = object.get("health_status").filter(|value| !value.is_null()) {
            let status = status.as_int().ok_or("health_status must be an integer")?;
            switches.health_status =
                Some(u16::try_from(status).map_err(|_| "health_status out of range")?);
        }
        if let Some(extra) = object.get("health_extra").and_then(Json::as_object) {
            switches.health_extra = extra.clone();
        }
        if let Some(grace) = object
            .get("update_grace_seconds")
            .filter(|value| !value.is_null())
        {
            switches.update_grace_seconds = Some(match grace {
                Json::Int(value) => *value as f64,
                Json::Float(value) => *value,
                _ => return Err("update_grace_seconds must be a number".to_string()),
            });
        }
        Ok(switches)
    }

    /// Reads a role's switches; a missing file means the defaults.
    pub fn load(state_root: &Path, role: Role) -> Result<Switches, String> {
        let path = switches_path(state_root, role);
        match fs::read(&path) {
            Ok(data) => {
                let value =
                    parse_json(&data).map_err(|err| format!("{}: {err}", path.display()))?;
                Switches::from_json(&value).map_err(|err| format!("{}: {err}", path.display()))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(Switches::default()),
            Err(err) => Err(format!("{}: {err}", path.display())),
        }
    }

    /// Writes a role's switches atomically (temp file, then rename), so the
    /// worker never reads half a file.
    pub fn store(&self, state_root: &Path, role: Role) -> io::Result<()> {
        let directory = test_worker_dir(state_root);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&directory)?;
        let path = switches_path(state_root, role);
        let temporary = directory.join(format!(".{}.json.tmp", role.name()));
        fs::write(&temporary, encode_line(&self.to_json(), true) + "\n")?;
        fs::rename(&temporary, &path)
    }

    /// The count a blocker reports under these switches (0 unless set).
    pub fn blocker(&self, name: &str) -> i64 {
        self.blockers
            .iter()
            .rev()
            .find(|(candidate, _)| candidate == name)
            .map_or(0, |(_, count)| *count)
    }
}

/// One request as the test worker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// PID of the process that answered.
    pub pid: u32,
    /// Its receipt instance id.
    pub instance_id: String,
    /// `callback` (worker's private listener) or `public`.
    pub listener: String,
    /// Request method.
    pub method: String,
    /// Request path without query.
    pub path: String,
    /// Whether a query string was present (its value is not logged).
    pub query: bool,
    /// Header names, lowercased, in order (values are not logged).
    pub headers: Vec<String>,
    /// What the Authorization header carried: `control` (the control
    /// token), `agent` (the agent token), `other`, `none` or `several`.
    pub credential: String,
    /// The maintenance body's `action`, when there was one.
    pub action: Option<String>,
    /// Status of the reply (0 when none was sent).
    pub status: u16,
    /// `replied`, `stalled` (reply held back) or `died`.
    pub outcome: String,
}

impl RequestRecord {
    /// The log line form.
    pub fn to_json(&self) -> Json {
        Json::Object(json_object! {
            "pid" => self.pid,
            "instance_id" => self.instance_id.as_str(),
            "listener" => self.listener.as_str(),
            "method" => self.method.as_str(),
            "path" => self.path.as_str(),
            "query" => self.query,
            "headers" => self.headers.clone(),
            "credential" => self.credential.as_str(),
            "action" => self.action.clone(),
            "status" => u32::from(self.status),
            "outcome" => self.outcome.as_str(),
        })
    }

    /// Parses one log line.
    pub fn from_json(value: &Json) -> Option<RequestRecord> {
        let text = |key: &str| value.get(key).and_then(Json::as_str).map(str::to_string);
        Some(RequestRecord {
            pid: u32::try_from(value.get("pid")?.as_int()?).ok()?,
            instance_id: text("instance_id")?,
            listener: text("listener")?,
            method: text("method")?,
            path: text("path")?,
            query: value.get("query")?.as_bool()?,
            headers: value
                .get("headers")?
                .as_array()?
                .iter()
                .map(|name| name.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
            credential: text("credential")?,
            action: text("action"),
            status: u16::try_from(value.get("status")?.as_int()?).ok()?,
            outcome: text("outcome")?,
        })
    }

    /// Appends this record to a role's log as one line in one write.
    pub fn append(&self, state_root: &Path, role: Role) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(test_worker_dir(state_root))?;
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(request_log_path(state_root, role))?;
        file.write_all((encode_line(&self.to_json(), true) + "\n").as_bytes())
    }

    /// Every record a role has logged so far (none when it logged nothing).
    pub fn read_all(state_root: &Path, role: Role) -> Vec<RequestRecord> {
        let path = request_log_path(state_root, role);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(err) => panic!("cannot read {}: {err}", path.display()),
        };
        text.lines()
            .map(|line| {
                parse_json(line.as_bytes())
                    .ok()
                    .and_then(|value| RequestRecord::from_json(&value))
                    .unwrap_or_else(|| panic!("bad request log line in {}: {line}", path.display()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tempdir::TempDir;

    #[test]
    fn switches_survive_the_file_and_default_when_absent() {
        let state = TempDir::new("switches");
        assert_eq!(
            Switches::load(state.path(), Role::Worker),
            Ok(Switches::default())
        );
        let switches = Switches {
            blockers: vec![("active_runs".to_string(), 2)],
            reply_instance_id: Some("x".to_string()),
            refuse: vec!["seal".to_string()],
            stall: Some(Stall {
                on: RequestMatch::path("/api/health"),
                seconds: 1.5,
            }),
            die: Some(Death {
                on: RequestMatch::maintenance("release"),
                when: DeathPoint::AfterReply,
                exit_code: None,
            }),
            receipt_delay_seconds: 0.25,
            version: Some("9".to_string()),
            server_identity: Some("id".to_string()),
            health_status: Some(503),
            health_extra: json_object! {"capabilities" => Json::Object(JsonObject::new())},
            update_grace_seconds: Some(0.0),
        };
        switches.store(state.path(), Role::Worker).unwrap();
        assert_eq!(
            Switches::load(state.path(), Role::Worker),
            Ok(switches.clone())
        );
        assert_eq!(switches.blocker("active_runs"), 2);
        assert_eq!(switches.blocker("queued_turns"), 0);
        assert_eq!(
            Switches::load(state.path(), Role::Gateway),
            Ok(Switches::default())
        );
        fs::write(
            switches_path(state.path(), Role::Gateway),
            r#"{"die": {"path": "/x"}}"#,
        )
        .unwrap();
        assert!(Switches::load(state.path(), Role::Gateway)
            .unwrap_err()
            .contains("die.when"));
    }

    #[test]
    fn matches_by_path_and_action() {
        let seal = RequestMatch::maintenance("seal");
        assert!(seal.matches("/api/admin/execution/maintenance", Some("seal")));
        assert!(!seal.matches("/api/admin/execution/maintenance", Some("release")));
        assert!(!seal.matches("/api/admin/execution/maintenance", None));
        assert!(RequestMatch::path("/api/health").matches("/api/health", None));
    }
}

//! The worker's retirement lease (`execution_maintenance.ExecutionMaintenance`):
//! idle-only acquire, renew, seal and release, persisted to
//! `state_root/admin/execution-maintenance.json` before it takes effect.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use agents_tests::Switches;
use python_compat::os::current_uid;
use python_compat::{
    json::{encode_line, parse_json, Json, JsonObject},
    json_object,
};
use rustix::fs::OFlags;

use crate::control::{is_canonical_uuid, Refusal};
use crate::private_files::publish_private;
use crate::random::uuid4;

/// The eight admission counters, in the order upstream reports them.
pub(crate) const BLOCKERS: [&str; 8] = [
    "active_runs",
    "queued_turns",
    "provider_background_tasks",
    "in_flight_server_changes",
    "session_deletions",
    "goals_reconfiguration",
    "managed_restart",
    "managed_update",
];

/// The counters as the switches set them (0 by default).
pub(crate) fn blocker_counts(switches: &Switches) -> JsonObject {
    BLOCKERS
        .iter()
        .map(|name| (name.to_string(), switches.blocker(name)))
        .collect()
}

fn busy(blockers: &JsonObject) -> bool {
    blockers.values().any(|count| count.as_int() != Some(0))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}

/// One lease, as persisted and reported.
#[derive(Debug, Clone, PartialEq)]
struct Lease {
    lease_id: String,
    operation_id: String,
    sealed: bool,
    /// `None` exactly when sealed.
    expires_at: Option<f64>,
}

impl Lease {
    fn to_json(&self) -> Json {
        Json::Object(json_object! {
            "lease_id" => self.lease_id.as_str(),
            "operation_id" => self.operation_id.as_str(),
            "sealed" => self.sealed,
            "expires_at" => self.expires_at,
        })
    }

    fn from_json(value: &Json) -> Result<Option<Lease>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let object = value
            .as_object()
            .ok_or("Invalid execution maintenance lease")?;
        let keys = ["lease_id", "operation_id", "sealed", "expires_at"];
        if object.len() != keys.len() || !keys.iter().all(|key| object.contains_key(key)) {
            return Err("Invalid execution maintenance lease".to_string());
        }
        let identity = |key: &str| {
            object
                .get(key)
                .and_then(Json::as_str)
                .filter(|text| is_canonical_uuid(text))
                .map(str::to_string)
                .ok_or("Invalid execution maintenance identity".to_string())
        };
        let (lease_id, operation_id) = (identity("lease_id")?, identity("operation_id")?);
        let sealed = object
            .get("sealed")
            .and_then(Json::as_bool)
            .ok_or("Invalid execution maintenance state")?;
        let expires_at = match (sealed, object.get("expires_at")) {
            (true, Some(Json::Null)) => None,
            (true, _) => return Err("A sealed lease cannot expire".to_string()),
            (false, Some(Json::Int(at))) if *at > 0 => Some(*at as f64),
            (false, Some(Json::Float(at))) if *at > 0.0 && at.is_finite() => Some(*at),
            (false, _) => return Err("Invalid execution maintenance expiry".to_string()),
        };
        Ok(Some(Lease {
            lease_id,
            operation_id,
            sealed,
            expires_at,
        }))
    }
}

/// The lease state of one worker process.
#[derive(Debug)]
pub(crate) struct Maintenance {
    path: PathBuf,
    worker_instance_id: String,
    lease: Option<Lease>,
}

fn conflict<T>(detail: &str) -> Result<T, Refusal> {
    Err((409, detail.to_string()))
}

impl Maintenance {
    /// Opens the receipt file as upstream does at worker start: an existing
    /// file must be a safe 0600 document of the right shape, and its lease is
    /// restored only for the same worker instance (never across restarts).
    pub(crate) fn open(path: PathBuf, worker_instance_id: &str) -> Result<Maintenance, String> {
        let mut maintenance = Maintenance {
            path,
            worker_instance_id: worker_instance_id.to_string(),
            lease: None,
        };
        if fs::symlink_metadata(&maintenance.path).is_err() {
            return Ok(maintenance);
        }
        let invalid = || "Invalid execution maintenance receipt".to_string();
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(&maintenance.path)
            .map_err(|err| format!("{}: {err}", maintenance.path.display()))?;
        let info = file.metadata().map_err(|err| err.to_string())?;
        if !info.is_file()
            || info.uid() != current_uid()
            || info.permissions().mode() & 0o7777 != 0o600
            || info.nlink() != 1
            || info.size() > 16_384
        {
            return Err(invalid());
        }
        let mut data = Vec::new();
        file.read_to_end(&mut data).map_err(|err| err.to_string())?;
        let document = parse_json(&data).map_err(|err| err.to_string())?;
        let keys = ["schema", "worker_instance_id", "lease"];
        let object = document.as_object().ok_or_else(invalid)?;
        if object.len() != keys.len()
            || !keys.iter().all(|key| object.contains_key(key))
            || object.get("schema") != Some(&Json::Int(1))
        {
            return Err(invalid());
        }
        if object.get("worker_instance_id").and_then(Json::as_str) == Some(worker_instance_id) {
            maintenance.lease = Lease::from_json(object.get("lease").unwrap_or(&Json::Null))?;
        }
        Ok(maintenance)
    }

    /// Held: a sealed lease, or an unsealed one not yet expired.
    pub(crate) fn is_held(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| lease.sealed || lease.expires_at.is_some_and(|at| at > now()))
    }

    /// The status object (also every successful maintenance reply);
    /// `reported_instance_id` is the real id unless a switch lies.
    pub(crate) fn status(&self, blockers: &JsonObject, reported_instance_id: &str) -> Json {
        let lease = match &self.lease {
            Some(lease) if self.is_held() => lease.to_json(),
            _ => Json::Null,
        };
        Json::Object(json_object! {
            "worker_instance_id" => reported_instance_id,
            "idle" => !busy(blockers),
            "blockers" => blockers.clone(),
            "lease" => lease,
        })
    }

    /// A sealed lease for the pending operation found at startup.
    pub(crate) fn hold_for_startup(&mut self, operation_id: &str) -> Result<(), String> {
        if !is_canonical_uuid(operation_id) {
            return Err("Invalid startup operation".to_string());
        }
        self.persist(Some(Lease {
            lease_id: uuid4(),
            operation_id: operation_id.to_string(),
            sealed: true,
            expires_at: None,
        }))
    }

    /// One maintenance action with upstream's preconditions; the state changes
    /// only once the new lease is durable.
    pub(crate) fn apply(
        &mut self,
        action: &str,
        operation_id: &str,
        lease_id: Option<&str>,
        lifetime: i64,
        blockers: &JsonObject,
    ) -> Result<(), Refusal> {
        let unavailable = |err: String| {
            eprintln!("test-worker: maintenance not persisted: {err}");
            (500, "Execution control unavailable".to_string())
        };
        if action == "acquire" {
            if self.is_held() {
                let owner = self.lease.as_ref().map(|lease| lease.operation_id.as_str());
                if owner != Some(operation_id) {
                    return conflict("Another execution operation owns admission");
                }
                return Ok(());
            }
            if busy(blockers) {
                return conflict("Execution is busy; running agents were left untouched");
            }
            let lease = Lease {
                lease_id: uuid4(),
                operation_id: operation_id.to_string(),
                sealed: false,
                expires_at: Some(now() + lifetime as f64),
            };
            return self.persist(Some(lease)).map_err(unavailable);
        }
        let owned = self.lease.as_ref().is_some_and(|lease| {
            lease.operation_id == operation_id && Some(lease.lease_id.as_str()) == lease_id
        });
        if !owned {
            return conflict("Execution maintenance ownership changed");
        }
        if action == "release" {
            return self.persist(None).map_err(unavailable);
        }
        if !self.is_held() {
            return conflict("Execution maintenance lease expired");
        }
        let mut lease = self.lease.clone().expect("ownership was proven");
        if action == "seal" {
            if busy(blockers) {
                return conflict("Execution work appeared before retirement");
            }
            lease.sealed = true;
            lease.expires_at = None;
        } else if lease.sealed {
            return Ok(()); // renewing a sealed lease changes nothing
        } else {
            lease.expires_at = Some(now() + lifetime as f64);
        }
        self.persist(Some(lease)).map_err(unavailable)
    }

    /// `_persist`: `{"schema", "worker_instance_id", "lease"}` as Python's
    /// plain `json.dump` line, through an fsynced temp file, a rename and a
    /// directory fsync.
    fn persist(&mut self, lease: Option<Lease>) -> Result<(), String> {
        let directory = self
            .path
            .parent()
            .expect("the receipt has a directory")
            .to_path_buf();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&directory)
            .map_err(|err| err.to_string())?;
        let info = fs::symlink_metadata(&directory).map_err(|err| err.to_string())?;
        if !info.is_dir() || info.uid() != current_uid() || info.permissions().mode() & 0o022 != 0 {
            return Err("Execution maintenance directory is unsafe".to_string());
        }
        let name = self
            .path
            .file_name()
            .expect("the receipt has a name")
            .to_string_lossy();
        let temporary = directory.join(format!(".{name}.{}.tmp", crate::random::uuid4_hex()));
        let document = Json::Object(json_object! {
            "schema" => 1,
            "worker_instance_id" => self.worker_instance_id.as_str(),
            "lease" => lease.as_ref().map_or(Json::Null, Lease::to_json),
        });
        let text = encode_line(&document, false) + "\n";
        publish_private(&temporary, text.as_bytes(), &self.path)
            .and_then(|()| fs::File::open(&directory)?.sync_all())
            .map_err(|err| err.to_string())?;
        self.lease = lease;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agents_tests::TempDir;

    const OPERATION: &str = "85efcaaf-5f93-5352-b00d-95a2551e6a7c";
    const OTHER: &str = "b5914c0d-4b01-5e86-bcd8-1e9626e330e6";

    fn lease_id(maintenance: &Maintenance, blockers: &JsonObject) -> String {
        let status = maintenance.status(blockers, "i");
        status
            .get("lease")
            .unwrap()
            .get("lease_id")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn lease_rules_and_persistence() {
        let temp = TempDir::new("maintenance");
        let path = temp.path().join("admin/execution-maintenance.json");
        let mut maintenance = Maintenance::open(path.clone(), "i").unwrap();
        let idle = blocker_counts(&Switches::default());
        let busy = blocker_counts(&Switches {
            blockers: vec![("queued_turns".to_string(), 2)],
            ..Switches::default()
        });
        assert_eq!(
            maintenance
                .apply("acquire", OPERATION, None, 120, &busy)
                .unwrap_err()
                .1,
            "Execution is busy; running agents were left untouched"
        );
        maintenance
            .apply("acquire", OPERATION, None, 120, &idle)
            .unwrap();
        let lease = lease_id(&maintenance, &idle);
        // Idempotent for the same operation, refused for another.
        maintenance
            .apply("acquire", OPERATION, None, 120, &busy)
            .unwrap();
        assert_eq!(lease_id(&maintenance, &idle), lease);
        assert_eq!(
            maintenance
                .apply("acquire", OTHER, None, 120, &idle)
                .unwrap_err()
                .1,
            "Another execution operation owns admission"
        );
        assert_eq!(
            maintenance
                .apply("seal", OPERATION, Some("wrong"), 120, &idle)
                .unwrap_err(),
            (409, "Execution maintenance ownership changed".to_string())
        );
        assert_eq!(
            maintenance
                .apply("seal", OPERATION, Some(&lease), 120, &busy)
                .unwrap_err()
                .1,
            "Execution work appeared before retirement"
        );
        maintenance
            .apply("seal", OPERATION, Some(&lease), 120, &idle)
            .unwrap();
        let persisted = fs::read_to_string(&path).unwrap();
        assert_eq!(
            persisted,
            format!(
                "{{\"schema\": 1, \"worker_instance_id\": \"i\", \"lease\": {{\"lease_id\": \"{lease}\", \
                 \"operation_id\": \"{OPERATION}\", \"sealed\": true, \"expires_at\": null}}}}\n"
            )
        );
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        maintenance
            .apply("release", OPERATION, Some(&lease), 120, &busy)
            .unwrap();
        assert!(!maintenance.is_held());
        assert!(fs::read_to_string(&path)
            .unwrap()
            .ends_with("\"lease\": null}\n"));
        // A new instance never inherits the lease; a tampered mode stops it.
        maintenance.hold_for_startup(OPERATION).unwrap();
        assert!(!Maintenance::open(path.clone(), "j").unwrap().is_held());
        assert!(Maintenance::open(path.clone(), "i").unwrap().is_held());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            Maintenance::open(path, "j").unwrap_err(),
            "Invalid execution maintenance receipt"
        );
    }

    #[test]
    fn expired_leases_release_but_do_not_renew() {
        let temp = TempDir::new("maintenance");
        let mut maintenance = Maintenance::open(temp.path().join("m.json"), "i").unwrap();
        let idle = blocker_counts(&Switches::default());
        maintenance
            .apply("acquire", OPERATION, None, 30, &idle)
            .unwrap();
        let lease = lease_id(&maintenance, &idle);
        maintenance.lease.as_mut().unwrap().expires_at = Some(now() - 1.0);
        assert!(maintenance
            .status(&idle, "i")
            .get("lease")
            .unwrap()
            .is_null());
        assert_eq!(
            maintenance
                .apply("renew", OPERATION, Some(&lease), 30, &idle)
                .unwrap_err()
                .1,
            "Execution maintenance lease expired"
        );
        // An expired lease is silently replaced by another operation.
        maintenance
            .apply("acquire", OTHER, None, 30, &idle)
            .unwrap();
        assert_ne!(lease_id(&maintenance, &idle), lease);
    }
}

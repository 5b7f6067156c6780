//! The native service manager as the operations use it
//! (`execution_manage.NativeServices`): each role's observed state, and the
//! start/stop/enable/restore verbs.
//!
//! The operations talk to the manager only through [`Native`], so their
//! admission logic is independent of how the shared crate's service module
//! drives `systemctl --user` or `launchctl`.

use agents_common::{
    Error, ErrorKind, ExecutionLayout, NativeServices, Result, Role, ServiceRunState,
    ServiceSnapshot, ServiceState,
};
use python_compat::json::{Json, JsonObject};

/// `NativeServices` as `execution_activation` calls it.
pub(crate) trait Native {
    /// `_observe(role)`: `{state, enabled[, pid]}`, where state is `absent`,
    /// `stopped`, `running` or `transitioning`.
    fn observe(&self, role: Role) -> Result<JsonObject>;
    /// `stop(role)`: stop and wait, never force-killing.
    fn stop(&self, role: Role) -> Result<()>;
    /// `start(role)`: enable and start the role's installed unit.
    fn start(&self, role: Role) -> Result<()>;
    /// `set_enabled(role, enabled)`: whether the role starts at login.
    fn set_enabled(&self, role: Role, enabled: bool) -> Result<()>;
    /// `reload()`: make the manager re-read unit files.
    fn reload(&self) -> Result<()>;
    /// `restore(role, prior)`: bring a role back to a journaled state.
    fn restore(&self, role: Role, prior: &JsonObject) -> Result<()>;

    /// `snapshot()`: both roles, refusing a manager still transitioning.
    fn snapshot(&self) -> Result<JsonObject> {
        let mut states = JsonObject::new();
        for role in Role::ALL {
            states.insert(role.as_str(), self.observe(role)?);
        }
        if states
            .values()
            .any(|state| state.get("state") == Some(&Json::from("transitioning")))
        {
            return Err(
                Error::runtime("native service is transitioning; retry after it settles")
                    .with_kind(ErrorKind::ServiceTransitioning),
            );
        }
        Ok(states)
    }

    /// One role of a fresh [`Native::snapshot`].
    fn role_snapshot(&self, role: Role) -> Result<JsonObject> {
        Ok(self
            .snapshot()?
            .get(role.as_str())
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default())
    }
}

/// Lets `WorkerControl` read native state through the same manager client.
pub(crate) struct Snapshots<'a>(pub &'a dyn Native);

impl ServiceSnapshot for Snapshots<'_> {
    fn snapshot_json(&self) -> Result<JsonObject> {
        self.0.snapshot()
    }
}

/// `NativeServices(layout)`: refuses a layout whose platform is not this
/// host's, as the original's constructor does for every operation after
/// `detect` and `candidate-api-contract`.
pub(crate) fn connect(layout: &ExecutionLayout) -> Result<Box<dyn Native>> {
    Ok(managed(NativeServices::new(layout)?))
}

/// The operations' view of `services`: the host's manager from [`connect`],
/// or (in tests) one whose commands replay recorded launchd output.
pub(crate) fn managed(services: NativeServices) -> Box<dyn Native> {
    Box::new(Manager(services))
}

/// The shared crate's `NativeServices` in the dict shape the operations
/// compare (`{"state", "enabled", "pid"?}`).
struct Manager(NativeServices);

fn object(value: Json) -> JsonObject {
    value.as_object().cloned().unwrap_or_default()
}

impl Native for Manager {
    fn observe(&self, role: Role) -> Result<JsonObject> {
        Ok(object(self.0.observe(role)?.to_json()))
    }
    fn snapshot(&self) -> Result<JsonObject> {
        Ok(object(self.0.snapshot()?.to_json()))
    }
    fn stop(&self, role: Role) -> Result<()> {
        self.0.stop(role)
    }
    fn start(&self, role: Role) -> Result<()> {
        self.0.start(role)
    }
    fn set_enabled(&self, role: Role, enabled: bool) -> Result<()> {
        self.0.set_enabled(role, enabled)
    }
    fn reload(&self) -> Result<()> {
        self.0.reload()
    }
    fn restore(&self, role: Role, prior: &JsonObject) -> Result<()> {
        // The journal validated the prior state; like the original, restore
        // reads only its state and enablement.
        let state = match prior.get("state").and_then(Json::as_str) {
            Some("running") => ServiceRunState::Running,
            Some("stopped") => ServiceRunState::Stopped,
            _ => ServiceRunState::Absent,
        };
        let enabled = prior
            .get("enabled")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        self.0
            .restore(role, &ServiceState::with_state(state, enabled))
    }
}

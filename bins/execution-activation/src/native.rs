//! The native service manager as the operations use it
//! (`execution_manage.NativeServices`): each role's observed state, and the
//! start/stop/enable/restore verbs.
//!
//! The operations talk to the manager only through [`Native`], so their
//! admission logic is independent of how the shared crate's service module
//! drives `systemctl --user` or `launchctl`.

use agents_common::{Error, ExecutionLayout, Json, JsonObject, Result, ServiceSnapshot};

/// The two service roles, in the seed's snapshot order.
pub const ROLES: [&str; 2] = ["worker", "gateway"];

/// `NativeServices` as `execution_activation` calls it.
pub trait Native {
    /// `_observe(role)`: `{state, enabled[, pid]}`, where state is `absent`,
    /// `stopped`, `running` or `transitioning`.
    fn observe(&self, role: &str) -> Result<JsonObject>;
    /// `stop(role)`: stop and wait, never force-killing.
    fn stop(&self, role: &str) -> Result<()>;
    /// `start(role)`: enable and start the role's installed unit.
    fn start(&self, role: &str) -> Result<()>;
    /// `set_enabled(role, enabled)`.
    fn set_enabled(&self, role: &str, enabled: bool) -> Result<()>;
    /// `reload()`: make the manager re-read unit files.
    fn reload(&self) -> Result<()>;
    /// `restore(role, prior)`: bring a role back to a journaled state.
    fn restore(&self, role: &str, prior: &JsonObject) -> Result<()>;

    /// `snapshot()`: both roles, refusing a manager still transitioning.
    fn snapshot(&self) -> Result<JsonObject> {
        let mut states = JsonObject::new();
        for role in ROLES {
            states.insert(role, self.observe(role)?);
        }
        if states
            .values()
            .any(|state| state.get("state") == Some(&Json::from("transitioning")))
        {
            return Err(Error::runtime(
                "native service is transitioning; retry after it settles",
            ));
        }
        Ok(states)
    }

    /// One role of a fresh [`Native::snapshot`].
    fn role_snapshot(&self, role: &str) -> Result<JsonObject> {
        Ok(self
            .snapshot()?
            .get(role)
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default())
    }
}

/// Lets `WorkerControl` read native state through the same manager client.
pub struct Snapshots<'a>(pub &'a dyn Native);

impl ServiceSnapshot for Snapshots<'_> {
    fn snapshot_json(&self) -> Result<JsonObject> {
        self.0.snapshot()
    }
}

/// `NativeServices(layout)`: refuses a layout whose platform is not this
/// host's, as the seed's constructor does for every operation after
/// `detect` and `candidate-api-contract`.
pub fn connect(layout: &ExecutionLayout) -> Result<Box<dyn Native>> {
    let host_is_darwin = cfg!(target_os = "macos");
    if !(cfg!(target_os = "linux") || host_is_darwin)
        || (layout.platform == "Darwin") != host_is_darwin
    {
        return Err(Error::value(
            "native execution platform does not match this host",
        ));
    }
    Ok(Box::new(Pending))
}

/// Stands in until the shared crate's `NativeServices` is wired here.
struct Pending;

impl Pending {
    fn unavailable<T>() -> Result<T> {
        Err(Error::runtime(
            "native service manager client is not available in this build",
        ))
    }
}

impl Native for Pending {
    fn observe(&self, _role: &str) -> Result<JsonObject> {
        Self::unavailable()
    }
    fn stop(&self, _role: &str) -> Result<()> {
        Self::unavailable()
    }
    fn start(&self, _role: &str) -> Result<()> {
        Self::unavailable()
    }
    fn set_enabled(&self, _role: &str, _enabled: bool) -> Result<()> {
        Self::unavailable()
    }
    fn reload(&self) -> Result<()> {
        Self::unavailable()
    }
    fn restore(&self, _role: &str, _prior: &JsonObject) -> Result<()> {
        Self::unavailable()
    }
}

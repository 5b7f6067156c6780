//! What the split uninstall needs from the native service manager
//! (`execution_manage.NativeServices`): the snapshot in its Python dict
//! shape, boot-time enablement, graceful stop and start, and reload.

use agents_common::{Error, ExecutionLayout, Result, ServiceSnapshot};

/// The native service manager of an installed layout.
pub trait Native: ServiceSnapshot {
    /// Enables or disables a role's boot-time start.
    fn set_enabled(&self, role: &str, enabled: bool) -> Result<()>;
    /// Stops a role gracefully, waiting (bounded) until it has stopped.
    fn stop(&self, role: &str) -> Result<()>;
    /// Starts a role again.
    fn start(&self, role: &str) -> Result<()>;
    /// Makes the manager forget removed unit files.
    fn reload(&self) -> Result<()>;
}

/// The host's native service manager for `layout`.
pub fn native_services(_layout: &ExecutionLayout) -> Result<Box<dyn Native>> {
    // The shared NativeServices adapter is not in the workspace yet; refusing
    // here keeps every service and file untouched.
    Err(Error::runtime(
        "native service control is not available in this build",
    ))
}

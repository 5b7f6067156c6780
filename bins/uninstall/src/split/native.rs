//! What the split uninstall needs from the native service manager
//! (`execution_manage.NativeServices`): the snapshot in its Python dict
//! shape, boot-time enablement, graceful stop and start, and reload.

use agents_common::{ExecutionLayout, NativeServices, Result, ServiceSnapshot};

/// The native service manager of an installed layout.
pub(crate) trait Native: ServiceSnapshot {
    /// Enables or disables a role's boot-time start.
    fn set_enabled(&self, role: &str, enabled: bool) -> Result<()>;
    /// Stops a role gracefully, waiting (bounded) until it has stopped.
    fn stop(&self, role: &str) -> Result<()>;
    /// Starts a role again.
    fn start(&self, role: &str) -> Result<()>;
    /// Makes the manager forget removed unit files.
    fn reload(&self) -> Result<()>;
    /// The same manager seen only for its snapshots (trait upcasting needs
    /// Rust 1.86; the workspace builds with 1.85).
    fn snapshots(&self) -> &dyn ServiceSnapshot;
}

impl Native for NativeServices {
    fn set_enabled(&self, role: &str, enabled: bool) -> Result<()> {
        NativeServices::set_enabled(self, role, enabled)
    }

    fn stop(&self, role: &str) -> Result<()> {
        NativeServices::stop(self, role)
    }

    fn start(&self, role: &str) -> Result<()> {
        NativeServices::start(self, role)
    }

    fn reload(&self) -> Result<()> {
        NativeServices::reload(self)
    }

    fn snapshots(&self) -> &dyn ServiceSnapshot {
        self
    }
}

/// The host's native service manager for `layout` (ValueError `native
/// execution platform does not match this host` on another platform).
pub(crate) fn native_services(layout: &ExecutionLayout) -> Result<Box<dyn Native>> {
    Ok(Box::new(NativeServices::new(layout)?))
}

//! The two native jobs of a split installation, named once: the worker
//! (`agents-server.service` / `com.agentsdock.server`) and the gateway
//! (`agents-server-gateway.service` / `com.agentsdock.gateway`).
//!
//! The originals pass roles as strings and maps every name other than `worker`
//! to the gateway; here a role is parsed once, so a misspelt name is a
//! refusal instead of the gateway.

use crate::error::{Error, Result};
use crate::named::Named;

/// launchd label of the worker job.
pub(crate) const WORKER_LABEL: &str = "com.agentsdock.server";
/// launchd label of the gateway job.
pub(crate) const GATEWAY_LABEL: &str = "com.agentsdock.gateway";
/// systemd user unit of the worker.
pub const WORKER_UNIT: &str = "agents-server.service";
/// systemd user unit of the gateway.
pub const GATEWAY_UNIT: &str = "agents-server-gateway.service";

/// One native job of the split execution layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The execution worker (`worker`).
    Worker,
    /// The public gateway (`gateway`).
    Gateway,
}

impl Role {
    /// Both roles in the originals' snapshot order (worker first).
    pub const ALL: [Role; 2] = [Role::Worker, Role::Gateway];

    /// The originals' spelling, also the role's key in journals and snapshots.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Gateway => "gateway",
        }
    }

    /// Reads a role name; anything but `worker` or `gateway` is ValueError
    /// `unknown execution service role`.
    pub fn parse(name: &str) -> Result<Role> {
        match name {
            "worker" => Ok(Role::Worker),
            "gateway" => Ok(Role::Gateway),
            _ => Err(Error::value("unknown execution service role")),
        }
    }

    /// The systemd user unit's name.
    pub fn unit(self) -> &'static str {
        match self {
            Role::Worker => WORKER_UNIT,
            Role::Gateway => GATEWAY_UNIT,
        }
    }

    /// The launchd label.
    pub fn label(self) -> &'static str {
        match self {
            Role::Worker => WORKER_LABEL,
            Role::Gateway => GATEWAY_LABEL,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Named for Role {
    fn parse(name: &str) -> Result<Role> {
        Role::parse(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_misspelt_role_is_refused() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()).unwrap(), role);
        }
        for bad in ["", "Worker", "gatway", "worker ", "server"] {
            assert_eq!(
                Role::parse(bad).unwrap_err().python_line(),
                "ValueError: unknown execution service role"
            );
        }
        assert_eq!(Role::Worker.unit(), "agents-server.service");
        assert_eq!(Role::Gateway.unit(), "agents-server-gateway.service");
        assert_eq!(Role::Gateway.label(), "com.agentsdock.gateway");
    }
}

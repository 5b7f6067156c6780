//! Reading `systemctl --user show <unit> --no-pager
//! --property=LoadState,ActiveState,UnitFileState,MainPID` as the original does.

use std::collections::HashMap;

use super::{ServiceRunState, ServiceState};
use crate::error::{Error, Result};

/// The `show` properties the original asks for, all of which must come back.
pub(super) const PROPERTIES: [&str; 4] = ["LoadState", "ActiveState", "UnitFileState", "MainPID"];

/// The state of a unit from its `show` output and whether its unit file exists.
pub(super) fn unit_state(stdout: &str, exists: bool) -> Result<ServiceState> {
    let mut values: HashMap<&str, &str> = HashMap::new();
    for line in python_compat::splitlines(stdout) {
        let Some((key, value)) = line.split_once('=') else {
            return Err(Error::runtime(
                "systemd returned ambiguous service ownership",
            ));
        };
        if values.insert(key, value).is_some() {
            return Err(Error::runtime(
                "systemd returned ambiguous service ownership",
            ));
        }
    }
    if values.len() != PROPERTIES.len() || !PROPERTIES.iter().all(|key| values.contains_key(key)) {
        return Err(Error::runtime("systemd omitted required service ownership"));
    }
    let load = values["LoadState"];
    if !["loaded", "not-found", "bad-setting", "error"].contains(&load) {
        return Err(Error::runtime("systemd service is not safely manageable"));
    }
    let pid = main_pid(values["MainPID"])?;
    let unit_file = values["UnitFileState"];
    if !["enabled", "enabled-runtime", "disabled", "static", ""].contains(&unit_file) {
        return Err(Error::runtime("systemd service enablement is unsupported"));
    }
    let enabled = unit_file == "enabled" || unit_file == "enabled-runtime";
    let active = values["ActiveState"];
    let settled = active == "inactive" || active == "failed";
    if load == "bad-setting" || load == "error" {
        // A malformed staged job can be restored only after the manager proves
        // no main process is active; recover checks config ownership separately.
        if exists && pid == 0 && settled {
            return Ok(ServiceState::stopped(enabled));
        }
        return Err(Error::runtime(
            "invalid native service still has an active process",
        ));
    }
    if !exists {
        if load != "not-found" || pid != 0 || !settled {
            return Err(Error::runtime(
                "loaded native service has no safely restorable file",
            ));
        }
        return Ok(ServiceState::absent());
    }
    Ok(match (active, pid) {
        ("active", pid) if pid > 0 => ServiceState::running(enabled, pid),
        (_, 0) if settled => ServiceState::stopped(enabled),
        _ => ServiceState::with_state(ServiceRunState::Transitioning, enabled),
    })
}

/// `MainPID` must be decimal digits (`str.isdigit`).
///
/// Deviation: only ASCII digits and values that fit a `u32` are accepted;
/// Python's `isdigit` also admits other Unicode digits and `int` any size,
/// neither of which systemd prints.
fn main_pid(text: &str) -> Result<u32> {
    let invalid = || Error::runtime("systemd returned an invalid service PID");
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse().map_err(|_| invalid())
}

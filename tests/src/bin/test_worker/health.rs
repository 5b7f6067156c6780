//! `/api/health` bodies: the application's fields plus the component
//! identities `ComponentHealth` appends (`execution_service`, `gateway`).

use std::fs;
use std::path::Path;

use agents_tests::Switches;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

/// Who answers: fixed at startup.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    /// `server_identity`: stable for one state directory on one machine.
    pub server_identity: String,
    /// `server_instance_id`: new every process start.
    pub server_instance_id: String,
    /// `api_contract_version` of the release (`API_CONTRACT_VERSION` in its
    /// `agent_server.py`, else 1).
    pub api_contract_version: i64,
}

/// `server_identity` stand-in: upstream takes 24 hex digits of
/// sha256(`<machine-id>|<resolved state dir>`); two FNV-1a passes give the
/// same shape and the same stability without a hash dependency.
pub(crate) fn server_identity(state_root: &Path) -> String {
    let machine = fs::read_to_string("/etc/machine-id")
        .or_else(|_| fs::read_to_string("/proc/sys/kernel/hostname"))
        .unwrap_or_default();
    let state = state_root
        .canonicalize()
        .unwrap_or_else(|_| state_root.to_path_buf());
    let input = format!("{}|{}", machine.trim(), state.display());
    let fnv = |seed: u64| {
        input.bytes().fold(seed, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let (high, low) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4));
    format!("{high:016x}{:08x}", low >> 32)
}

/// The release's API contract, read like `candidate_api_contract` reads it:
/// the literal `API_CONTRACT_VERSION = <int>` line of `agent_server.py`.
pub(crate) fn api_contract_version(release_root: &Path) -> i64 {
    fs::read_to_string(release_root.join("agent_server.py"))
        .ok()
        .and_then(|source| {
            source.lines().find_map(|line| {
                let value = line
                    .strip_prefix("API_CONTRACT_VERSION")?
                    .trim_start()
                    .strip_prefix('=')?;
                value.trim().parse().ok()
            })
        })
        .unwrap_or(1)
}

/// The application's own health document (what a monolith returns and what
/// the worker's app returns before `ComponentHealth` adds its identity).
pub(crate) fn application_health(
    facts: &ServerFacts,
    version: &str,
    switches: &Switches,
) -> JsonObject {
    let mut body = json_object! {
        "ok" => true,
        "server_version" => version,
        "api_contract_version" => facts.api_contract_version,
        "server_identity" => switches.server_identity.as_deref().unwrap_or(&facts.server_identity),
        "server_instance_id" => facts.server_instance_id.as_str(),
        "server_name" => "test-worker",
    };
    for (key, value) in &switches.health_extra {
        body.insert(key.clone(), value.clone());
    }
    body
}

/// The worker's `execution_service` identity, `maintenance_held` computed live.
pub(crate) fn worker_identity(instance_id: &str, version: &str, maintenance_held: bool) -> Json {
    Json::Object(json_object! {
        "protocol" => 1,
        "instance_id" => instance_id,
        "pid" => std::process::id(),
        "version" => version,
        "worker_upgrade_policy" => "when_idle",
        "rolling_worker_upgrade" => false,
        "maintenance_held" => maintenance_held,
    })
}

/// The gateway's `gateway` identity.
pub(crate) fn gateway_identity(instance_id: &str, version: &str) -> Json {
    Json::Object(json_object! {
        "protocol" => 1,
        "instance_id" => instance_id,
        "pid" => std::process::id(),
        "version" => version,
        "restart_preserves_execution" => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agents_tests::TempDir;

    #[test]
    fn identity_is_stable_and_shaped_like_upstream() {
        let first = TempDir::new("identity");
        let second = TempDir::new("identity");
        let identity = server_identity(first.path());
        assert_eq!(identity.len(), 24);
        assert!(identity
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(identity, server_identity(first.path()));
        assert_ne!(identity, server_identity(second.path()));
    }

    #[test]
    fn contract_from_the_release_source() {
        let release = TempDir::new("contract");
        assert_eq!(api_contract_version(release.path()), 1);
        fs::write(
            release.path().join("agent_server.py"),
            "X = 1\nAPI_CONTRACT_VERSION = 7\n",
        )
        .unwrap();
        assert_eq!(api_contract_version(release.path()), 7);
    }
}

//! The hosted Team Hub's part of a managed update: the original's checks of the
//! `--expected-team-hub-*`, `--team-hub-*` and `--repair-failed-team-hub-host`
//! options, the installer arguments they become, and the maintenance fence
//! the runner clears when an update fails before install.sh starts.

use std::net::Ipv4Addr;
use std::path::Path;

use crate::team_hub_fence::TeamHubFence;
use agents_common::{read_status_unlocked, Error, Result, StatusLock, StatusPhase};
use python_compat::{
    json::{Json, JsonObject},
    json_object, strip, PythonInt,
};

use crate::plan::{Plan, TeamHubOptions};

/// `TEAM_HUB_MOUNT_PATH`.
const MOUNT_PATH: &str = "/api/team-hub";
/// `TEAM_HUB_TAILSCALE_SERVE_PORT`.
const TAILSCALE_SERVE_PORT: u16 = 8444;
/// The fence reason of a server update.
const FENCE_REASON: &str = "server-update";

/// The Team Hub options after the original's consistency checks. `None` is an
/// absent option; `Some("")` an option given empty (the original tells them
/// apart). A loopback transport's URL is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TeamHub {
    /// `--expected-team-hub-id`, stripped; `None` when blank.
    pub hub_id: Option<String>,
    /// `--expected-team-hub-transport`, stripped.
    pub transport: Option<String>,
    /// `--expected-team-hub-url`, stripped (`None` for loopback).
    pub url: Option<String>,
    /// `--expected-team-hub-direct-ip-url`, stripped.
    pub direct_ip_url: Option<String>,
    /// `--team-hub-snapshot`, stripped; `None` when blank.
    pub snapshot: Option<String>,
    /// `--team-hub-data-dir`, stripped; `None` when blank.
    pub data_dir: Option<String>,
    /// `--repair-failed-team-hub-host`.
    pub repair: bool,
}

fn stripped(value: &Option<String>) -> Option<String> {
    value.as_deref().map(|text| strip(text).to_string())
}

fn non_blank(value: &Option<String>) -> Option<String> {
    stripped(value).filter(|text| !text.is_empty())
}

impl TeamHub {
    /// `run_update`'s Team Hub checks, in the original's order, each refusal
    /// with its message; `port` is the server's (`--port`), which a direct-IP
    /// URL must name.
    pub(crate) fn validate(options: &TeamHubOptions, port: &PythonInt) -> Result<TeamHub> {
        let hub_id = non_blank(&options.hub_id);
        let transport = stripped(&options.transport);
        let mut url = stripped(&options.url);
        let direct_ip_url = stripped(&options.direct_ip_url);
        let snapshot = non_blank(&options.snapshot);
        let data_dir = non_blank(&options.data_dir);
        let repair = options.repair;
        let rollback = [&hub_id, &snapshot, &data_dir];
        let any_rollback = rollback.iter().any(|value| value.is_some());
        if any_rollback && !rollback.iter().all(|value| value.is_some()) {
            return Err(Error::runtime(
                "managed Team Hub rollback arguments must be complete",
            ));
        }
        if repair && any_rollback {
            return Err(Error::runtime(
                "failed Team Hub repair cannot reuse live-host rollback arguments",
            ));
        }
        let managed = hub_id.is_some() || repair;
        if !managed && (transport.is_some() || url.is_some() || direct_ip_url.is_some()) {
            return Err(Error::runtime(
                "managed Team Hub transport arguments require a Hub identity",
            ));
        }
        if repair
            && (options.transport.is_none()
                || options.url.is_none()
                || options.direct_ip_url.is_none())
        {
            return Err(Error::runtime(
                "failed Team Hub repair requires exact transport continuity arguments",
            ));
        }
        if managed {
            match transport.as_deref() {
                None => {
                    if url.is_some() {
                        return Err(Error::runtime(
                            "legacy loopback Team Hub cannot have a remote URL",
                        ));
                    }
                }
                Some("loopback") => {
                    if url.as_deref() != Some("") {
                        return Err(Error::runtime("loopback Team Hub cannot have a remote URL"));
                    }
                    url = None;
                }
                Some(selected @ ("tailscale_serve" | "direct_ip")) => {
                    let Some(remote) = url.as_deref() else {
                        return Err(Error::runtime(
                            "remote Team Hub transport requires its exact URL",
                        ));
                    };
                    let valid = if selected == "direct_ip" {
                        is_direct_ip_url(remote, port)
                    } else {
                        is_tailscale_serve_url(remote)
                    };
                    if !valid {
                        return Err(Error::runtime("expected Team Hub URL is invalid"));
                    }
                }
                Some(_) => {
                    return Err(Error::runtime("managed Team Hub transport is invalid"));
                }
            }
        }
        if let Some(direct) = direct_ip_url.as_deref() {
            if !managed {
                return Err(Error::runtime(
                    "managed Team Hub direct-IP route requires a Hub identity",
                ));
            }
            if !direct.is_empty() && !is_direct_ip_url(direct, port) {
                return Err(Error::runtime(
                    "expected Team Hub direct-IP route is invalid",
                ));
            }
            if transport.as_deref() == Some("direct_ip") && Some(direct) != url.as_deref() {
                return Err(Error::runtime("primary direct-IP Team Hub route changed"));
            }
        }
        Ok(TeamHub {
            hub_id,
            transport,
            url,
            direct_ip_url,
            snapshot,
            data_dir,
            repair,
        })
    }

    /// The canonical route list of the admitted Hub: the primary route, and
    /// the direct-IP route when one is set and the primary is not direct IP.
    pub(crate) fn routes(&self) -> Json {
        let mut routes = vec![Json::from(json_object! {
            "transport" => Json::from(self.transport.clone()),
            "hub_url" => Json::from(self.url.clone()),
        })];
        if let Some(direct) = self.direct_ip_url.as_deref().filter(|url| !url.is_empty()) {
            if self.transport.as_deref() != Some("direct_ip") {
                routes.push(Json::from(json_object! {
                    "transport" => "direct_ip",
                    "hub_url" => direct,
                }));
            }
        }
        Json::Array(routes)
    }

    /// A failed-host repair runs only for the exact admitted update: the row
    /// must still be `starting` with `failed_start` repair and the same host,
    /// transport, URLs and routes.
    pub(crate) fn check_repair_admission(
        &self,
        status_path: &Path,
        update_id: &str,
        server_identity: &str,
    ) -> Result<()> {
        let admitted = {
            let _lock = StatusLock::acquire(status_path)?;
            read_status_unlocked(status_path)?
        };
        let expected = json_object! {
            "update_id" => update_id,
            "phase" => StatusPhase::Starting,
            "team_hub_repair_mode" => "failed_start",
            "team_hub_host_server_identity" => server_identity,
            "team_hub_transport" => Json::from(self.transport.clone()),
            "team_hub_url" => Json::from(self.url.clone()),
            "team_hub_direct_ip_url" => Json::from(self.direct_ip_url.clone()),
            "team_hub_routes" => self.routes(),
        };
        if !matches_all(&admitted, &expected) {
            return Err(Error::runtime(
                "failed Team Hub repair is not owned by the exact admitted update",
            ));
        }
        Ok(())
    }

    /// The installer options that hand the Hub's rollback or repair to
    /// install.sh.
    pub(crate) fn installer_arguments(&self, update_id: &str) -> Vec<String> {
        let mut arguments = Vec::new();
        if let Some(hub_id) = &self.hub_id {
            arguments.extend([
                "--expected-team-hub-id".to_string(),
                hub_id.clone(),
                "--team-hub-snapshot".to_string(),
                self.snapshot.clone().unwrap_or_default(),
                "--team-hub-data-dir".to_string(),
                self.data_dir.clone().unwrap_or_default(),
                "--team-hub-operation-id".to_string(),
                update_id.to_string(),
            ]);
            if let Some(transport) = &self.transport {
                arguments.extend([
                    "--expected-team-hub-transport".to_string(),
                    transport.clone(),
                    "--expected-team-hub-url".to_string(),
                    self.url.clone().unwrap_or_default(),
                ]);
            }
            if let Some(direct) = &self.direct_ip_url {
                arguments.extend([
                    "--expected-team-hub-direct-ip-url".to_string(),
                    direct.clone(),
                ]);
            }
        } else if self.repair {
            arguments.extend([
                "--repair-failed-team-hub-host".to_string(),
                "--managed-update-id".to_string(),
                update_id.to_string(),
                "--expected-team-hub-transport".to_string(),
                self.transport.clone().unwrap_or_default(),
                "--expected-team-hub-url".to_string(),
                self.url.clone().unwrap_or_default(),
                "--expected-team-hub-direct-ip-url".to_string(),
                self.direct_ip_url.clone().unwrap_or_default(),
            ]);
        }
        arguments
    }
}

/// `not any(row.get(name) != value ...)`: a missing key reads as `null`.
fn matches_all(row: &JsonObject, expected: &JsonObject) -> bool {
    expected
        .iter()
        .all(|(name, value)| row.get(name).unwrap_or(&Json::Null) == value)
}

/// `configured_team_hub_endpoint("host", url, "direct_ip", port)` accepts
/// exactly `http://<ip>:<port>/api/team-hub` with a canonical, public-range
/// IPv4 literal (first octet 1..223, not loopback).
fn is_direct_ip_url(url: &str, port: &PythonInt) -> bool {
    let Some(port) = port.as_i128().filter(|port| (0..=65_535).contains(port)) else {
        return false;
    };
    let Some(host) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix(&format!(":{port}{MOUNT_PATH}")))
    else {
        return false;
    };
    let Some(address) = canonical_ipv4(host) else {
        return false;
    };
    let first = address.octets()[0];
    (1..224).contains(&first) && !address.is_loopback()
}

/// An IPv4 literal as Python's `ipaddress` accepts it (four decimal octets,
/// no leading zeros), which is then also its canonical text.
fn canonical_ipv4(text: &str) -> Option<Ipv4Addr> {
    let octets: Vec<&str> = text.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut bytes = [0u8; 4];
    for (slot, octet) in bytes.iter_mut().zip(&octets) {
        let canonical = !octet.is_empty()
            && octet.len() <= 3
            && octet.bytes().all(|byte| byte.is_ascii_digit())
            && (octet.len() == 1 || !octet.starts_with('0'));
        if !canonical {
            return None;
        }
        *slot = octet.parse().ok()?;
    }
    Some(Ipv4Addr::from(bytes))
}

/// `configured_team_hub_endpoint("host", url, "tailscale_serve", port)`
/// accepts exactly `https://<host>:8444/api/team-hub` with a canonical
/// private tailnet host name (`<machine>.<tailnet>.ts.net`, lowercase).
fn is_tailscale_serve_url(url: &str) -> bool {
    url.strip_prefix("https://")
        .and_then(|rest| rest.strip_suffix(&format!(":{TAILSCALE_SERVE_PORT}{MOUNT_PATH}")))
        .is_some_and(is_tailnet_hostname)
}

fn is_tailnet_hostname(host: &str) -> bool {
    let labels: Vec<&str> = host.split('.').collect();
    labels.len() >= 4
        && labels[labels.len() - 2..] == ["ts", "net"]
        && labels.iter().all(|label| {
            let bytes = label.as_bytes();
            (1..=63).contains(&bytes.len())
                && !label.starts_with("xn--")
                && bytes
                    .iter()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-')
                && bytes[0] != b'-'
                && bytes[bytes.len() - 1] != b'-'
        })
}

/// The exact fence this update's server set on its Hub, from the raw
/// options; `None` when the update carries no Hub rollback arguments.
fn maintenance_fence_arguments(plan: &Plan) -> Result<Option<[String; 5]>> {
    let text = |value: &Option<String>| strip(value.as_deref().unwrap_or("")).to_string();
    let hub_id = text(&plan.team_hub.hub_id);
    let snapshot = text(&plan.team_hub.snapshot);
    let data_dir = text(&plan.team_hub.data_dir);
    let host_identity = strip(&plan.server.identity).to_string();
    let operation_id = plan.update_id.stripped().to_string();
    if hub_id.is_empty() && snapshot.is_empty() && data_dir.is_empty() {
        return Ok(None);
    }
    let all = [hub_id, snapshot, data_dir, host_identity, operation_id];
    if all.iter().any(String::is_empty) {
        return Err(Error::runtime(
            "managed Team Hub maintenance arguments are incomplete",
        ));
    }
    Ok(Some(all))
}

fn with_fence<T>(plan: &Plan, absent: T, act: impl Fn(&TeamHubFence) -> Result<T>) -> Result<T> {
    let Some([hub_id, snapshot, data_dir, host_identity, operation_id]) =
        maintenance_fence_arguments(plan)?
    else {
        return Ok(absent);
    };
    act(&TeamHubFence {
        data_dir: Path::new(&data_dir),
        hub_id: &hub_id,
        host_identity: &host_identity,
        reason: FENCE_REASON,
        operation_id: &operation_id,
        snapshot: Path::new(&snapshot),
    })
}

/// `clear_team_hub_maintenance`: remove this update's exact Hub fence
/// (false when the update has none or it is already gone).
pub(crate) fn clear_team_hub_maintenance(plan: &Plan) -> Result<bool> {
    with_fence(plan, false, |fence| fence.clear_control())
}

/// `team_hub_maintenance_fence_present`: whether this update's exact Hub
/// fence is still on disk.
pub(crate) fn team_hub_maintenance_fence_present(plan: &Plan) -> Result<bool> {
    with_fence(plan, false, |fence| fence.matches_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_ip_urls() {
        let port = |value| PythonInt::Small(value);
        assert!(is_direct_ip_url(
            "http://192.168.1.20:7850/api/team-hub",
            &port(7850)
        ));
        assert!(is_direct_ip_url(
            "http://10.0.0.1:80/api/team-hub",
            &port(80)
        ));
        let huge = PythonInt::parse(&"7".repeat(45)).unwrap();
        assert!(!is_direct_ip_url(
            &format!("http://10.0.0.1:{huge}/api/team-hub"),
            &huge
        ));
        for (url, port_value) in [
            ("http://192.168.1.20:7851/api/team-hub", 7850),
            ("http://127.0.0.1:7850/api/team-hub", 7850),
            ("http://224.0.0.1:7850/api/team-hub", 7850),
            ("http://0.1.2.3:7850/api/team-hub", 7850),
            ("http://010.0.0.1:7850/api/team-hub", 7850),
            ("http://10.0.0.256:7850/api/team-hub", 7850),
            ("https://10.0.0.1:7850/api/team-hub", 7850),
            ("http://10.0.0.1:7850/api/team-hub/", 7850),
            ("http://u@10.0.0.1:7850/api/team-hub", 7850),
            ("http://10.0.0.1:70000/api/team-hub", 70000),
            ("http://[::1]:7850/api/team-hub", 7850),
        ] {
            assert!(!is_direct_ip_url(url, &port(port_value)), "{url}");
        }
    }

    #[test]
    fn tailscale_urls() {
        assert!(is_tailscale_serve_url(
            "https://host.tail1234.ts.net:8444/api/team-hub"
        ));
        assert!(is_tailscale_serve_url(
            "https://a-b.c.d.ts.net:8444/api/team-hub"
        ));
        for url in [
            "https://Host.tail1234.ts.net:8444/api/team-hub",
            "https://tail1234.ts.net:8444/api/team-hub",
            "https://host.tail1234.ts.net:443/api/team-hub",
            "http://host.tail1234.ts.net:8444/api/team-hub",
            "https://xn--h.tail1234.ts.net:8444/api/team-hub",
            "https://-h.tail1234.ts.net:8444/api/team-hub",
            "https://host.tail1234.ts.net.:8444/api/team-hub",
            "https://host.tail1234.ts.net:8444/api/team-hub?x",
        ] {
            assert!(!is_tailscale_serve_url(url), "{url}");
        }
    }
}

//! Updates of a server that hosts a managed Team Hub: the transport options
//! are validated as `run_update` does (with `team_hub_host`'s canonical URL
//! rules), handed to install.sh, and the updated server must keep the Hub's
//! identity, transport and routes; a failed host repair runs only for its
//! exact admitted update and must come back with a valid Hub.
//!
//! The original imports `team_hub_host` and the Hub store for these paths, which
//! are not among the originals, so rows are checked against its texts.

use crate::update_runner_support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use python_compat::{
    json::{encode_compact_sorted, Json, JsonObject},
    json_object,
};
use update_runner_support::{idle_health, updated_health, Fixture, Side, IDENTITY, UPDATE_ID};

const HUB_ID: &str = "hub_0123456789";
const SNAPSHOT: &str = "snapshot_00000001700000000000000000_0123456789abcdef";
const TAILNET_URL: &str = "https://host.tail1234.ts.net:8444/api/team-hub";

fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

fn route(transport: &str, url: Json) -> Json {
    Json::Object(json_object! {"transport" => transport, "hub_url" => url})
}

/// The Hub capability of a designated host.
fn hub(hub_id: &str, transport: &str, url: Json, routes: Vec<Json>) -> JsonObject {
    json_object! {
        "available" => true,
        "designated_host" => true,
        "version" => 1,
        "base_path" => "/api/team-hub",
        "hub_id" => hub_id,
        "host_server_identity" => IDENTITY,
        "transport" => transport,
        "hub_url" => url,
        "routes" => routes,
    }
}

fn with_hub(capability: JsonObject) -> JsonObject {
    let mut health = updated_health("1.2.3", 28);
    health
        .get_mut("capabilities")
        .and_then(Json::as_object_mut)
        .unwrap()
        .insert("team_hub_v1", capability);
    health
}

struct HubUpdate {
    fixture: Fixture,
    data: PathBuf,
}

impl HubUpdate {
    /// A pinned 1.2.3 update of a live Hub host, its fence set by the server.
    fn new(name: &str, transport: &str, url: &str, direct: &str) -> HubUpdate {
        let mut fixture = Fixture::new(name);
        let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
        fixture.publish_legacy("1.2.3", &archive);
        let data = fixture.root.path().join("team-hub");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let marker = json_object! {
            "format" => 1,
            "reason" => "server-update",
            "operation_id" => UPDATE_ID,
            "hub_id" => HUB_ID,
            "host_server_identity" => IDENTITY,
            "snapshot" => SNAPSHOT,
            "created_at" => "2024-01-01T00:00:00Z",
        };
        let fence = data.join("maintenance-fence.json");
        std::fs::write(&fence, encode_compact_sorted(&Json::Object(marker))).unwrap();
        std::fs::set_permissions(&fence, std::fs::Permissions::from_mode(0o600)).unwrap();
        fixture.options = vec![
            "--expected-version".into(),
            "1.2.3".into(),
            "--expected-team-hub-id".into(),
            HUB_ID.into(),
            "--team-hub-snapshot".into(),
            data.join("maintenance-backups")
                .join(SNAPSHOT)
                .to_string_lossy()
                .into_owned(),
            "--team-hub-data-dir".into(),
            data.to_string_lossy().into_owned(),
            "--expected-team-hub-transport".into(),
            transport.into(),
            "--expected-team-hub-url".into(),
            url.into(),
            "--expected-team-hub-direct-ip-url".into(),
            direct.into(),
        ];
        HubUpdate { fixture, data }
    }

    fn fence(&self) -> PathBuf {
        self.data.join("maintenance-fence.json")
    }
}

#[test]
fn a_tailnet_hub_host_is_updated_with_its_transport() {
    let mut update = HubUpdate::new("tailnet", "tailscale_serve", TAILNET_URL, "");
    update.fixture.set_health(
        idle_health(),
        with_hub(hub(
            HUB_ID,
            "tailscale_serve",
            TAILNET_URL.into(),
            vec![route("tailscale_serve", TAILNET_URL.into())],
        )),
    );
    // install.sh clears the fence on success; the runner never does.
    update.fixture.behaviour = Some(format!("rm -f '{}'\n", update.fence().display()));
    let outcome = update.fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(0), "{:?}", outcome.row);
    assert_eq!(field(&outcome.row, "phase"), Json::from("complete"));
    let installer = outcome.installer.unwrap();
    let arguments: Vec<&str> = installer[1..]
        .iter()
        .filter_map(|line| line.strip_prefix("arg="))
        .collect();
    let snapshot = update.data.join("maintenance-backups").join(SNAPSHOT);
    let hub_arguments = [
        "--expected-team-hub-id",
        HUB_ID,
        "--team-hub-snapshot",
        snapshot.to_str().unwrap(),
        "--team-hub-data-dir",
        update.data.to_str().unwrap(),
        "--team-hub-operation-id",
        UPDATE_ID,
        "--expected-team-hub-transport",
        "tailscale_serve",
        "--expected-team-hub-url",
        TAILNET_URL,
        "--expected-team-hub-direct-ip-url",
        "",
    ];
    assert_eq!(
        arguments[arguments.len() - hub_arguments.len()..],
        hub_arguments
    );
}

#[test]
fn a_direct_ip_route_must_be_kept() {
    let direct = |port: u16| format!("http://192.168.1.20:{port}/api/team-hub");
    let mut update = HubUpdate::new("direct", "loopback", "", "");
    // The route names the server's own port, known once its health endpoint runs.
    let port = update.fixture.health_port();
    let at = update.fixture.options.len() - 1;
    update.fixture.options[at] = direct(port);
    update.fixture.set_health(
        idle_health(),
        with_hub(hub(
            HUB_ID,
            "loopback",
            Json::Null,
            vec![route("loopback", Json::Null)],
        )),
    );
    // The updated server dropped the direct-IP route; install.sh's rollback
    // already restored and cleared the fence, so the failure is published.
    update.fixture.behaviour = Some(format!("rm -f '{}'\n", update.fence().display()));
    let outcome = update.fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("updated AgentsServer changed its Team Hub routes")
    );

    update.fixture.set_health(
        idle_health(),
        with_hub(hub(
            HUB_ID,
            "loopback",
            Json::Null,
            vec![
                route("loopback", Json::Null),
                route("direct_ip", direct(port).into()),
            ],
        )),
    );
    let outcome = update.fixture.run(Side::Port);
    assert_eq!(
        field(&outcome.row, "phase"),
        Json::from("complete"),
        "{:?}",
        outcome.row
    );
}

#[test]
fn invalid_transports_are_refused_and_the_fence_cleared() {
    for (name, transport, url, direct, message) in [
        (
            "tailnet-host",
            "tailscale_serve",
            "https://Host.tail1234.ts.net:8444/api/team-hub",
            "",
            "expected Team Hub URL is invalid",
        ),
        (
            "tailnet-missing",
            "tailscale_serve",
            "",
            "",
            "expected Team Hub URL is invalid",
        ),
        (
            "unknown",
            "wireguard",
            "https://x",
            "",
            "managed Team Hub transport is invalid",
        ),
        ("blank", "", "", "", "managed Team Hub transport is invalid"),
        (
            "loopback-url",
            "loopback",
            TAILNET_URL,
            "",
            "loopback Team Hub cannot have a remote URL",
        ),
        (
            "direct-loopback",
            "loopback",
            "",
            "http://127.0.0.1:7850/api/team-hub",
            "expected Team Hub direct-IP route is invalid",
        ),
    ] {
        let update = HubUpdate::new(name, transport, url, direct);
        let outcome = update.fixture.run(Side::Port);
        assert_eq!(outcome.exit, Some(1), "{name}");
        assert_eq!(field(&outcome.row, "phase"), Json::from("failed"), "{name}");
        assert_eq!(
            field(&outcome.row, "message"),
            Json::from(message),
            "{name}"
        );
        assert!(
            !update.fence().exists(),
            "{name}: the update's own fence is cleared"
        );
        assert_eq!(outcome.installer, None, "{name}");
    }
}

#[test]
fn a_primary_direct_ip_route_must_be_the_primary_url() {
    let mut update = HubUpdate::new("direct-primary", "direct_ip", "", "");
    let port = update.fixture.health_port();
    let url = format!("http://10.1.2.3:{port}/api/team-hub");
    let other = format!("http://10.1.2.4:{port}/api/team-hub");
    let count = update.fixture.options.len();
    update.fixture.options[count - 3] = url.clone();
    update.fixture.options[count - 1] = other;
    let outcome = update.fixture.run(Side::Port);
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("primary direct-IP Team Hub route changed")
    );
}

/// A failed-host repair admitted by the server for this update.
fn repair(name: &str) -> Fixture {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    for (key, value) in [
        ("team_hub_repair_mode", Json::from("failed_start")),
        ("team_hub_host_server_identity", Json::from(IDENTITY)),
        ("team_hub_transport", Json::from("loopback")),
        ("team_hub_url", Json::Null),
        ("team_hub_direct_ip_url", Json::from("")),
        (
            "team_hub_routes",
            Json::Array(vec![route("loopback", Json::Null)]),
        ),
    ] {
        fixture.admitted.insert(key, value);
    }
    fixture.options = vec![
        "--expected-version".into(),
        "1.2.3".into(),
        "--repair-failed-team-hub-host".into(),
        "--expected-team-hub-transport".into(),
        "loopback".into(),
        "--expected-team-hub-url".into(),
        "".into(),
        "--expected-team-hub-direct-ip-url".into(),
        "".into(),
    ];
    fixture.set_health(
        idle_health(),
        with_hub(hub(
            "hub_repaired01",
            "loopback",
            Json::Null,
            vec![route("loopback", Json::Null)],
        )),
    );
    fixture
}

#[test]
fn a_failed_hub_host_is_repaired_in_place() {
    let fixture = repair("repair");
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(0), "{:?}", outcome.row);
    assert_eq!(field(&outcome.row, "phase"), Json::from("complete"));
    let installer = outcome.installer.unwrap();
    // The last line is the fixture's own variable.
    let tail: Vec<&str> = installer[installer.len() - 11..installer.len() - 1]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "arg=--repair-failed-team-hub-host",
            "arg=--managed-update-id",
            &format!("arg={UPDATE_ID}"),
            "arg=--expected-team-hub-transport",
            "arg=loopback",
            "arg=--expected-team-hub-url",
            "arg=",
            "arg=--expected-team-hub-direct-ip-url",
            "arg=",
            &format!("env AGENTSDOCK_MANAGED_UPDATE_ID={UPDATE_ID}"),
        ]
    );
}

#[test]
fn a_repair_needs_its_exact_admission_and_a_valid_hub() {
    let mut fixture = repair("repair-unowned");
    fixture.admitted.insert("team_hub_repair_mode", Json::Null);
    let outcome = fixture.run(Side::Port);
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("failed Team Hub repair is not owned by the exact admitted update")
    );
    assert_eq!(outcome.installer, None);

    let fixture = repair("repair-invalid-hub");
    fixture.set_health(
        idle_health(),
        with_hub(hub(
            "hub",
            "loopback",
            Json::Null,
            vec![route("loopback", Json::Null)],
        )),
    );
    let outcome = fixture.run(Side::Port);
    assert_eq!(
        field(&outcome.row, "message"),
        Json::from("repaired Team Hub identity is invalid")
    );

    // Live-host rollback arguments are refused ("must be complete"), and as
    // they name no complete fence either, the row stays as admitted.
    let mut fixture = repair("repair-reused");
    fixture
        .options
        .extend(["--team-hub-data-dir".into(), "/tmp/hub".into()]);
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(outcome.row, fixture.admitted);
}

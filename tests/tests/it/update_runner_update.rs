//! Successful managed updates, run side by side by the original and the
//! `update-runner` binary: a schema-1 GitHub release and a schema-2 npm
//! package both end in the exact `complete` row, with the same installer
//! invocation and log, and nothing left in the temporary directory.

use crate::update_runner_support;

use python_compat::json::{Json, JsonObject};
use update_runner_support::{updated_health, Fixture, Side, IDENTITY, UPDATE_ID};

fn expect_complete(row: &JsonObject, version: &str) {
    let field = |key: &str| row.get(key).cloned().unwrap_or(Json::Null);
    assert_eq!(field("phase"), Json::from("complete"));
    assert_eq!(field("update_id"), Json::from(UPDATE_ID));
    assert_eq!(field("installed_version"), Json::from(version));
    assert_eq!(field("target_version"), Json::from(version));
    assert_eq!(field("update_available"), Json::Bool(false));
    assert_eq!(
        field("message"),
        Json::from(format!("AgentsServer {version} is installed and healthy."))
    );
    for cleared in [
        "heartbeat_at",
        "elapsed_seconds",
        "runner_pid",
        "error_code",
        "error_action",
        "retryable",
    ] {
        assert_eq!(field(cleared), Json::Null, "{cleared}");
    }
    assert_eq!(field("finished_at"), Json::from("<time>"));
    // The server's own keys survive every runner write.
    assert_eq!(
        row.get("unknown_server_key")
            .and_then(|kept| kept.get("kept")),
        Some(&Json::Bool(true))
    );
}

#[test]
fn a_github_release_installs_like_the_original() {
    let originals = agents_tests::require_originals!();
    let mut fixture = Fixture::new("schema1");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(port.exit, Some(0));
    expect_complete(&port.row, "1.2.3");
    assert_eq!(port.row.get("track"), Some(&Json::from("stable")));
    assert!(port.token_consumed);
    let installer = port.installer.expect("install.sh ran");
    assert_eq!(
        installer,
        [
            "cwd=<tmp>/agents-server-update-<random>/extracted/agents-server-1.2.3",
            "arg=--non-interactive",
            "arg=--release-version",
            "arg=1.2.3",
            "arg=--port",
            &format!("arg={}", fixture.health_port()),
            "arg=--bind",
            "arg=127.0.0.1",
            "arg=--expected-server-identity",
            &format!("arg={IDENTITY}"),
            "env H15_FIXTURE=<run>/installer",
        ]
    );
    // The runner's credentials never reach the installer.
    assert!(!installer.iter().any(|line| line.contains("runner-secret")));
}

#[test]
fn the_latest_release_is_discovered_and_installed_like_the_original() {
    let originals = agents_tests::require_originals!();
    let fixture = Fixture::new("discover");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.serve(
        "/api/releases?per_page=100",
        update_runner_support::Served::ok(
            br#"[{"tag_name": "v1.2.3", "prerelease": false}, {"tag_name": "v1.3.0-beta.1", "prerelease": true}]"#.to_vec(),
        ),
    );
    let (_, port) = fixture.compare(&originals, None);
    expect_complete(&port.row, "1.2.3");
}

#[test]
fn an_npm_release_installs_like_the_original() {
    let originals = agents_tests::require_originals!();
    let mut fixture = Fixture::new("schema2");
    let archive = fixture.archive(&Fixture::npm_members("1.2.3"));
    let manifest = fixture.npm_manifest("1.2.3", &archive);
    fixture.publish_npm(&manifest, &archive);
    fixture.set_health(
        update_runner_support::idle_health(),
        updated_health("1.2.3", 29),
    );
    fixture.options = vec![
        "--expected-version".into(),
        "1.2.3".into(),
        "--npm-descriptor".into(),
        "--expected-service-cgroup".into(),
        "/user.slice/agents-server.service".into(),
    ];
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(port.exit, Some(0));
    expect_complete(&port.row, "1.2.3");
    let installer = port.installer.expect("install.sh ran");
    assert_eq!(
        installer[0],
        "cwd=<tmp>/agents-server-update-<random>/extracted/package/server"
    );
    // Schema 2 pins the API contract; a service cgroup makes the update managed.
    assert!(installer
        .windows(2)
        .any(|pair| pair == ["arg=--expected-api-contract", "arg=29"]));
    assert!(installer.contains(&format!("env AGENTSDOCK_MANAGED_UPDATE_ID={UPDATE_ID}")));
    assert!(installer.contains(
        &"env AGENTSDOCK_EXPECTED_SERVICE_CGROUP=/user.slice/agents-server.service".to_string()
    ));
    // The archive came from the registry, never from GitHub.
    let requests = fixture.host_requests();
    assert!(
        requests.iter().all(|path| path.starts_with("/npm/")),
        "{requests:?}"
    );
}

#[test]
fn a_server_still_starting_is_awaited_like_the_original() {
    let originals = agents_tests::require_originals!();
    let mut fixture = Fixture::new("starting");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    // Two probes answer 503 (transport not ready): both runners retry.
    fixture.unready_requests = 2;
    let started = std::time::Instant::now();
    let (_, port) = fixture.compare(&originals, None);
    expect_complete(&port.row, "1.2.3");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(4),
        "a 1 s pause after each"
    );
}

#[test]
fn the_complete_row_is_written_once_the_workspace_is_gone() {
    let mut fixture = Fixture::new("workspace");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    // The installer sees its extracted release; afterwards nothing remains.
    fixture.behaviour = Some("ls \"$PWD\" > \"$H15_FIXTURE/listing\"\n".into());
    let outcome = fixture.run(Side::Port);
    assert_eq!(outcome.exit, Some(0));
    let listing =
        update_runner_support::read_text(&fixture.run_dir(Side::Port).join("installer/listing"));
    assert_eq!(listing, "VERSION\ninstall.sh\n");
    assert!(outcome.leftovers.is_empty());
}

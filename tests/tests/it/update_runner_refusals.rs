//! Every refusal of a managed update, run side by side by the original and the
//! `update-runner` binary on identical state: each ends in the exact failed
//! row with the original's message (one deliberate difference: a bad signature
//! is named instead of Python's empty `InvalidSignature` text), the
//! installer never runs unless the refusal comes after it, and nothing
//! extracted is left behind.

use crate::update_runner_support;

use agents_tests::Originals;
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};
use update_runner::release::INVALID_SIGNATURE_MESSAGE;
use update_runner_support::{idle_health, updated_health, Fixture, Member, Served, Side};

fn expect_failed(row: &JsonObject, message: &str) {
    let field = |key: &str| row.get(key).cloned().unwrap_or(Json::Null);
    assert_eq!(field("phase"), Json::from("failed"), "{row:?}");
    assert_eq!(field("message"), Json::from(message));
    assert_eq!(field("heartbeat_at"), Json::Null);
    assert_eq!(field("runner_pid"), Json::Null);
    assert_eq!(field("finished_at"), Json::from("<time>"));
    assert_eq!(field("error_code"), Json::Null);
    assert_eq!(
        row.get("unknown_server_key")
            .and_then(|kept| kept.get("kept")),
        Some(&Json::Bool(true))
    );
}

/// A fixture publishing a well-formed 1.2.3 release, pinned.
fn pinned(name: &str) -> (Fixture, Vec<u8>) {
    pinned_with(name, &Fixture::legacy_members("1.2.3"))
}

/// A fixture publishing a 1.2.3 release of `members`, pinned.
fn pinned_with(name: &str, members: &[Member]) -> (Fixture, Vec<u8>) {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(members);
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    (fixture, archive)
}

/// Compare with the original, expect a failed row with `message` and no
/// installer run; returns the port's outcome.
fn refused_before_install(
    originals: &Originals,
    fixture: &Fixture,
    message: &str,
) -> update_runner_support::Outcome {
    let (_, port) = fixture.compare(originals, None);
    assert_eq!(port.exit, Some(1));
    expect_failed(&port.row, message);
    assert_eq!(port.installer, None, "install.sh must not run");
    port
}

const ARCHIVE_PATH: &str = "/releases/download/v1.2.3/agents-server-1.2.3.tar.gz";
const SIGNATURE_PATH: &str = "/releases/download/v1.2.3/agents-server-manifest.sig";

#[test]
fn a_bad_signature_is_refused() {
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("signature");
    fixture.serve(SIGNATURE_PATH, Served::ok(vec![7u8; 64]));
    // Python's InvalidSignature has no text; the port names the failure.
    let (original, port) = fixture.compare(&originals, Some(INVALID_SIGNATURE_MESSAGE));
    expect_failed(&original.row, "");
    expect_failed(&port.row, INVALID_SIGNATURE_MESSAGE);
    assert_eq!(port.installer, None);
    // The archive was never fetched.
    assert!(!fixture
        .host_requests()
        .iter()
        .any(|path| path == ARCHIVE_PATH));
}

#[test]
fn a_key_of_another_type_is_refused() {
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("keytype");
    let generated = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null \
             | openssl pkey -pubout",
        )
        .output()
        .expect("openssl generates an EC key");
    assert!(generated.status.success());
    std::fs::write(&fixture.key.pem_path, generated.stdout).unwrap();
    refused_before_install(
        &originals,
        &fixture,
        "release public key is not an Ed25519 key",
    );
}

#[test]
fn version_track_and_tag_mismatches_are_refused() {
    let originals = agents_tests::require_originals!();
    // A tag whose signed manifest names another version.
    let (fixture, archive) = pinned("tag");
    let foreign = fixture.legacy_manifest("1.2.4", &archive);
    fixture.publish_manifest("1.2.3", &foreign);
    refused_before_install(
        &originals,
        &fixture,
        "release manifest version does not match its immutable release tag",
    );

    let (mut fixture, _) = pinned("track");
    fixture.options = vec!["--expected-version".into(), "1.3.0-beta.1".into()];
    refused_before_install(
        &originals,
        &fixture,
        "expected release 1.3.0-beta.1 is not on the requested stable track",
    );

    let (mut fixture, _) = pinned("backwards");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.1"));
    fixture.publish_legacy("1.2.1", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.1".into()];
    refused_before_install(
        &originals,
        &fixture,
        "resolved release 1.2.1 is not newer than installed version 1.2.2; managed updates \
         only permit forward updates or an explicit beta-to-stable channel switch",
    );

    let (mut fixture, _) = pinned("unavailable");
    fixture.options = vec!["--expected-version".into(), "1.2.9".into()];
    refused_before_install(
        &originals,
        &fixture,
        "Signed stable AgentsServer release 1.2.9 is unavailable.",
    );

    // A manifest signed for the beta track under a stable pin.
    let (fixture, archive) = pinned("metadata");
    let mut manifest = fixture.legacy_manifest("1.2.3", &archive);
    manifest.insert("track", "beta");
    fixture.publish_manifest("1.2.3", &manifest);
    refused_before_install(
        &originals,
        &fixture,
        "release manifest track metadata is inconsistent",
    );
}

#[test]
fn untrusted_locations_and_checksums_are_refused() {
    let originals = agents_tests::require_originals!();
    let (fixture, archive) = pinned("location");
    let mut manifest = fixture.legacy_manifest("1.2.3", &archive);
    manifest
        .get_mut("archive")
        .and_then(Json::as_object_mut)
        .unwrap()
        .insert(
            "url",
            "http://127.0.0.1:9/elsewhere/agents-server-1.2.3.tar.gz",
        );
    fixture.publish_manifest("1.2.3", &manifest);
    refused_before_install(
        &originals,
        &fixture,
        "release archive location is not trusted",
    );

    let (fixture, _) = pinned("checksum");
    let other = fixture.archive(&Fixture::legacy_members("9.9.9"));
    fixture.serve(ARCHIVE_PATH, Served::ok(other));
    refused_before_install(
        &originals,
        &fixture,
        "release archive checksum does not match the signed manifest",
    );

    // An uppercase checksum passes verify_manifest and then never matches.
    let (fixture, archive) = pinned("uppercase");
    let mut manifest = fixture.legacy_manifest("1.2.3", &archive);
    let archive_field = manifest
        .get_mut("archive")
        .and_then(Json::as_object_mut)
        .unwrap();
    let upper = archive_field
        .get("sha256")
        .and_then(Json::as_str)
        .unwrap()
        .to_uppercase();
    archive_field.insert("sha256", upper);
    fixture.publish_manifest("1.2.3", &manifest);
    refused_before_install(
        &originals,
        &fixture,
        "release archive checksum does not match the signed manifest",
    );

    let (fixture, archive) = pinned("oversize");
    fixture.serve(
        ARCHIVE_PATH,
        Served {
            content_length: Some(Some(300 * 1024 * 1024)),
            ..Served::ok(archive)
        },
    );
    refused_before_install(
        &originals,
        &fixture,
        "download exceeds the 209715200-byte safety limit",
    );

    // GitHub serves assets through redirects, which are followed.
    let (fixture, archive) = pinned("redirected");
    fixture.serve(ARCHIVE_PATH, Served::redirect("/cdn/archive.tar.gz"));
    fixture.serve("/cdn/archive.tar.gz", Served::ok(archive));
    let (_, port) = fixture.compare(&originals, None);
    assert_eq!(port.row.get("phase"), Some(&Json::from("complete")));
}

/// An npm fixture with `members`, its manifest edited by `edit`.
fn npm(name: &str, members: &[Member], edit: impl FnOnce(&mut JsonObject, &[u8])) -> Fixture {
    let mut fixture = Fixture::new(name);
    let archive = fixture.archive(members);
    let mut manifest = fixture.npm_manifest("1.2.3", &archive);
    edit(&mut manifest, &archive);
    fixture.publish_npm(&manifest, &archive);
    fixture.set_health(idle_health(), updated_health("1.2.3", 29));
    fixture.options = vec![
        "--expected-version".into(),
        "1.2.3".into(),
        "--npm-descriptor".into(),
    ];
    fixture
}

const NPM_PATH: &str = "/npm/@agentsdock/server/-/server-1.2.3.tgz";

#[test]
fn npm_archives_must_match_their_descriptor() {
    let originals = agents_tests::require_originals!();
    let members = Fixture::npm_members("1.2.3");
    let fixture = npm("integrity", &members, |manifest, _| {
        let npm = manifest
            .get_mut("npm")
            .and_then(Json::as_object_mut)
            .unwrap();
        npm.insert("integrity", format!("sha512-{}", "A".repeat(86) + "=="));
    });
    refused_before_install(
        &originals,
        &fixture,
        "npm archive does not match the signed release descriptor",
    );

    let fixture = npm("npm-size", &members, |_, _| {});
    let archive = fixture.served(NPM_PATH).unwrap().body;
    fixture.serve(
        NPM_PATH,
        Served {
            content_length: Some(Some(archive.len() as u64 + 1)),
            ..Served::ok(archive)
        },
    );
    refused_before_install(&originals, &fixture, "npm release archive size changed");

    let fixture = npm("npm-redirect", &members, |_, _| {});
    let archive = fixture.served(NPM_PATH).unwrap().body;
    fixture.serve(NPM_PATH, Served::redirect("/mirror/server-1.2.3.tgz"));
    fixture.serve("/mirror/server-1.2.3.tgz", Served::ok(archive));
    refused_before_install(
        &originals,
        &fixture,
        "npm release archive redirects are not allowed",
    );
    assert!(!fixture
        .host_requests()
        .iter()
        .any(|path| path.starts_with("/mirror/")));

    // The descriptor must be the admitted, signed one.
    let mut fixture = npm("npm-envelope", &members, |_, _| {});
    fixture
        .admitted
        .insert("_npm_release", json_object! {"manifest_base64" => "e30="});
    refused_before_install(
        &originals,
        &fixture,
        "signed npm release envelope is invalid",
    );

    // npm updates never change channels.
    let mut fixture = npm("npm-channel", &members, |_, _| {});
    fixture
        .options
        .extend(["--current-version".into(), "1.2.2-beta.1".into()]);
    refused_before_install(
        &originals,
        &fixture,
        "automatic npm updates cannot change release channels",
    );
}

/// An archive the runner must refuse after downloading it, and the
/// original's refusal (the row's message).
struct HostileArchive {
    /// Names the case and its fixture.
    label: &'static str,
    members: Vec<Member>,
    message: &'static str,
}

/// A [`HostileArchive`] table row.
fn hostile(label: &'static str, members: Vec<Member>, message: &'static str) -> HostileArchive {
    HostileArchive {
        label,
        members,
        message,
    }
}

const UNSAFE_PATH: &str = "release archive contains an unsafe path";
const LINKS: &str = "release archive must not contain links";
const INVALID_LAYOUT: &str = "release archive has an invalid layout";
/// Where the absolute member would land if it were extracted.
const ABSOLUTE_MEMBER: &str = "/tmp/h15-absolute";

/// A well-formed release tarball with one hostile member added (or its
/// installer left out), in the original's check order: unsafe paths, links,
/// special files, then the layout.
fn hostile_release_archives() -> Vec<HostileArchive> {
    let top = "agents-server-1.2.3";
    let with = |extra: Member| {
        let mut members = Fixture::legacy_members("1.2.3");
        members.push(extra);
        members
    };
    vec![
        hostile(
            "traversal",
            with(Member::file("agents-server-1.2.3/../../escaped", b"x")),
            UNSAFE_PATH,
        ),
        hostile(
            "absolute",
            with(Member::file(ABSOLUTE_MEMBER, b"x")),
            UNSAFE_PATH,
        ),
        hostile(
            "symlink",
            with(Member::link(&format!("{top}/link"), b'2', "/etc/passwd")),
            LINKS,
        ),
        hostile(
            "hardlink",
            with(Member::link(
                &format!("{top}/hard"),
                b'1',
                &format!("{top}/VERSION"),
            )),
            LINKS,
        ),
        hostile(
            "device",
            with(Member::special(&format!("{top}/null"), b'3')),
            "'agents-server-1.2.3/null' is a special file",
        ),
        hostile("two roots", with(Member::dir("other/")), INVALID_LAYOUT),
        hostile(
            "no installer",
            vec![
                Member::dir(&format!("{top}/")),
                Member::file(&format!("{top}/VERSION"), b"1.2.3\n"),
            ],
            INVALID_LAYOUT,
        ),
    ]
}

/// A well-formed npm package with a hostile member added (or its version
/// changed), in the original's check order.
fn hostile_npm_archives() -> Vec<HostileArchive> {
    let with = |extra: Member| {
        let mut members = Fixture::npm_members("1.2.3");
        members.push(extra);
        members
    };
    let mut another_version = Fixture::npm_members("1.2.3");
    another_version[2] = Member::file("package/server/VERSION", b"1.2.4\n");
    vec![
        hostile(
            "npm device",
            with(Member::special("package/server/fifo", b'6')),
            "npm release archive contains a special file",
        ),
        hostile(
            "npm duplicate",
            with(Member::file("package/server/VERSION", b"1.2.3\n")),
            "npm release archive exceeds its extraction bounds",
        ),
        hostile(
            "npm layout",
            with(Member::file("extra.txt", b"x")),
            "npm release archive has an invalid layout",
        ),
        hostile(
            "npm identity",
            another_version,
            "npm release archive payload identity does not match",
        ),
    ]
}

#[test]
fn hostile_archives_are_refused_and_leave_nothing_behind() {
    let originals = agents_tests::require_originals!();
    for HostileArchive {
        label,
        members,
        message,
    } in hostile_release_archives()
    {
        let name = format!("archive-{}", label.replace(' ', "-"));
        let (fixture, _) = pinned_with(&name, &members);
        let port = refused_before_install(&originals, &fixture, message);
        assert!(port.leftovers.is_empty(), "{label}");
        // Nothing was extracted outside the workspace either.
        assert!(!std::path::Path::new(ABSOLUTE_MEMBER).exists());
        let run = fixture.run_dir(Side::Port);
        assert!(
            !run.join("escaped").exists() && !run.join("tmp/escaped").exists(),
            "{label}"
        );
    }
    for HostileArchive {
        label,
        members,
        message,
    } in hostile_npm_archives()
    {
        let fixture = npm(&label.replace(' ', "-"), &members, |_, _| {});
        let port = refused_before_install(&originals, &fixture, message);
        assert!(port.leftovers.is_empty(), "{label}");
    }
}

#[test]
fn a_busy_or_changed_server_is_not_updated() {
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("busy");
    let mut busy = idle_health();
    busy.insert("active_count", 1);
    busy.insert("update_blocking_queued_count", 2);
    fixture.set_health(busy, updated_health("1.2.3", 28));
    let port = refused_before_install(
        &originals,
        &fixture,
        "server became busy before restart: 1 active agent run and 2 queued turns; retry the \
         update after work finishes",
    );
    assert_eq!(port.leftovers, Vec::<String>::new());

    let (fixture, _) = pinned("replaced");
    let mut other = idle_health();
    other.insert("server_identity", "another-server");
    fixture.set_health(other, updated_health("1.2.3", 28));
    refused_before_install(
        &originals,
        &fixture,
        "could not verify that AgentsServer is idle before restart: AgentsServer stable \
         identity changed before restart",
    );

    let (mut fixture, _) = pinned("unproven");
    let mut unproven = idle_health();
    unproven.insert(
        "update_service_cgroup",
        json_object! {"safe" => true, "unknown_descendant_count" => 0, "inspection" => "inferred"},
    );
    fixture.set_health(unproven, updated_health("1.2.3", 28));
    fixture
        .options
        .extend(["--expected-service-cgroup".into(), "/agents.service".into()]);
    refused_before_install(
        &originals,
        &fixture,
        "could not verify that AgentsServer is idle before restart: AgentsServer did not \
         return a verified systemd service-cgroup proof",
    );
}

#[test]
fn identity_changes_after_the_installer_fail_the_update() {
    let originals = agents_tests::require_originals!();
    let (fixture, _) = pinned("identity");
    let mut changed = updated_health("1.2.3", 28);
    changed.insert("server_identity", "another-server");
    fixture.set_health(idle_health(), changed);
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(
        &port.row,
        "updated AgentsServer stable identity does not match",
    );
    assert!(port.installer.is_some(), "the installer ran first");

    let members = Fixture::npm_members("1.2.3");
    let fixture = npm("npm-version", &members, |_, _| {});
    fixture.set_health(idle_health(), updated_health("1.2.2", 29));
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(
        &port.row,
        "updated AgentsServer version does not match the signed release",
    );

    let fixture = npm("npm-held", &members, |_, _| {});
    let mut held = updated_health("1.2.3", 29);
    held.insert(
        "execution_service",
        json_object! {"version" => "1.2.3", "maintenance_held" => true},
    );
    fixture.set_health(idle_health(), held);
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(
        &port.row,
        "updated AgentsServer activation has not released admission",
    );
}

#[test]
fn installer_failures_carry_a_redacted_tail() {
    let originals = agents_tests::require_originals!();
    let (mut fixture, _) = pinned("installer-failed");
    fixture.behaviour = Some(
        "echo 'preparing release'\n\
         echo 'Authorization: Bearer abc.def'\n\
         echo 'export AGENTSDOCK_AGENT_TOKEN=\"hunter2\"'\n\
         echo 'AGENTSDOCK_SETUP_RESULT={\"token\": \"x\"}'\n\
         echo 'curl -H \"bearer zzz\" done' >&2\n\
         exit 3\n"
            .into(),
    );
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(
        &port.row,
        "installer failed (3): preparing release\nAuthorization: Bearer [REDACTED]\nexport \
         AGENTSDOCK_AGENT_TOKEN=[REDACTED]\ncurl -H \"bearer [REDACTED] done",
    );
    let log = port.log.expect("the installer log exists");
    assert!(log.contains(&format!(
        "--- AgentsServer update {} to 1.2.3 at <time> ---",
        update_runner_support::UPDATE_ID
    )));
    assert!(
        log.contains("hunter2"),
        "the log itself keeps the full output"
    );

    let (mut fixture, _) = pinned("installer-75");
    fixture.behaviour = Some("exit 75\n".into());
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(
        &port.row,
        "installer failed (75): no output; inspect server-update.log",
    );

    let (mut fixture, _) = pinned("installer-signal");
    fixture.behaviour = Some("echo dying\nkill -KILL $$\n".into());
    let (_, port) = fixture.compare(&originals, None);
    expect_failed(&port.row, "installer failed (-9): dying");
}

#[test]
fn losing_ownership_mid_install_stops_the_installer_and_leaves_the_row() {
    let originals = agents_tests::require_originals!();
    let (mut fixture, _) = pinned("ownership");
    // The server finalises the update while install.sh runs; the runner's
    // next heartbeat (after 10 s) finds the row gone and terminates it.
    fixture.behaviour = Some(
        "python3 - \"$H15_FIXTURE/../state/admin/server-update.json\" <<'EOF'\n\
import json, os, sys\n\
path = sys.argv[1]\n\
row = json.load(open(path))\n\
row.update(phase='failed', message='Cancelled by the server.')\n\
open(path + '.new', 'w').write(json.dumps(row))\n\
os.replace(path + '.new', path)\n\
EOF\n\
trap 'echo terminated >> \"$H15_FIXTURE/signals\"; exit 143' TERM\n\
sleep 30 &\n\
wait $!\n"
            .into(),
    );
    let (original, port) = fixture.compare(&originals, None);
    assert_eq!(port.exit, Some(1));
    assert_eq!(port.row.get("phase"), Some(&Json::from("failed")));
    assert_eq!(
        port.row.get("message"),
        Some(&Json::from("Cancelled by the server."))
    );
    for side in [Side::Original(&originals), Side::Port] {
        let signals =
            update_runner_support::read_text(&fixture.run_dir(side).join("installer/signals"));
        assert_eq!(signals, "terminated\n", "{side:?}");
    }
    assert_eq!(original.exit, port.exit);
}

/// A release host that cannot be reached fails the update with urllib's
/// `URLError` text, which operators see in the status row.
#[test]
fn an_unreachable_release_host_fails_with_urllibs_text() {
    let originals = agents_tests::require_originals!();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    for (name, base) in [
        ("refused", format!("http://127.0.0.1:{closed}/releases")),
        (
            "unresolvable",
            "http://agents-release.invalid/releases".to_string(),
        ),
    ] {
        let (mut fixture, _) = pinned(name);
        fixture.environment = vec![("AGENTS_SERVER_RELEASE_BASE".into(), base)];
        let (original, port) = fixture.compare(&originals, None);
        assert_eq!(port.exit, Some(1));
        let message = original.row.get("message").and_then(Json::as_str).unwrap();
        assert!(message.starts_with("<urlopen error [Errno "), "{message}");
        expect_failed(&port.row, message);
        assert_eq!(port.installer, None);
    }
}

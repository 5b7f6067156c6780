//! The split uninstall of a macOS installation, driven on Linux with
//! NativeServices answering through recorded launchd output
//! (tests/fixtures/launchd): an interrupted uninstall whose services are
//! both down resumes to removal, asking only `launchctl print-disabled` and
//! `print`, checking and removing the launchd plists, with no reload step.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use agents_common::{layout_manifest, ExecutionLayout, NativeServices, UNINSTALL_INTENT_NAME};
use agents_tests::recorded_commands::{
    domain, expect, launchd_fixture, launchd_print_disabled, reply, Exchange, Recorded,
};
use agents_tests::{free_port, write_file, write_file_making_parents, Installation};
use python_compat::{
    json::{encode_indented, Json},
    json_object,
};

use super::algorithm::{uninstall, Failure, NativeFactory, Paths};
use super::native::Native;

const WORKER: &str = "com.agentsdock.server";
const GATEWAY: &str = "com.agentsdock.gateway";

/// A completed macOS split installation (plists, manifest, runtime) whose
/// uninstall was interrupted after it sealed the worker (`phase: sealed`).
fn sealed_macos_uninstall() -> (Installation, ExecutionLayout) {
    let installation = Installation::in_temp();
    let worker = installation.add_release("1.0.0");
    let gateway = installation.add_release("1.1.0");
    let mut layout = installation.layout(&worker, &gateway, free_port());
    layout.platform = "Darwin".to_string();
    installation.install_split(&layout);
    for root in [&installation.install_root, &installation.config_root] {
        agents_tests::set_mode(root, 0o700);
    }
    let binding = |path: &Path| {
        let info = fs::symlink_metadata(path).unwrap();
        json_object! {
            "device" => Json::Int(info.dev().into()),
            "inode" => Json::Int(info.ino().into()),
            "volume_uuid" => Json::Null,
        }
    };
    let manifest = encode_indented(&layout_manifest(&layout).unwrap());
    assert_eq!(fs::read(layout.manifest_path()).unwrap(), manifest);
    let intent = json_object! {
        "format" => 1,
        "root" => installation.install_root.to_str().unwrap(),
        "worker_release" => worker.to_str().unwrap(),
        "gateway_release" => gateway.to_str().unwrap(),
        "operation_id" => "0f8fad5b-d9cb-469f-a165-70867728950e",
        "server_identity" => "srv-1",
        "purge_state" => false,
        "phase" => "sealed",
        "layout_sha256" => agents_tests::journal_writer::sha256_hex(&manifest),
        "identities" => json_object! {
            "root" => binding(&installation.install_root),
            "worker" => binding(&worker),
            "gateway" => binding(&gateway),
        },
    };
    write_file(
        &installation.install_root.join(UNINSTALL_INTENT_NAME),
        &encode_indented(&Json::Object(intent)),
        0o600,
    );
    write_file_making_parents(
        &installation.state_root.join("admin/state-owner.lock"),
        b"",
        0o600,
    );
    (installation, layout)
}

/// One `snapshot()`: both agents have their plists but no job.
fn both_unloaded() -> Vec<Exchange> {
    let disabled = launchd_print_disabled(&[(WORKER, "enabled"), (GATEWAY, "disabled")]);
    let mut exchanges = Vec::new();
    for label in [WORKER, GATEWAY] {
        exchanges.push(expect(
            &["/bin/launchctl", "print-disabled", &domain()],
            reply(0, &disabled, ""),
        ));
        let target = format!("{}/{label}", domain());
        exchanges.push(expect(
            &["/bin/launchctl", "print", &target],
            reply(
                113,
                "",
                &launchd_fixture("print-not-found.stderr", label, ""),
            ),
        ));
    }
    exchanges
}

fn paths(installation: &Installation) -> Paths {
    Paths {
        root: installation.install_root.clone(),
        config_root: installation.config_root.clone(),
        state_root: installation.state_root.clone(),
        home: installation.home.clone(),
    }
}

fn run(installation: &Installation, recorded: &Recorded) -> Result<(), Failure> {
    let factory = |layout: &ExecutionLayout| -> agents_common::Result<Box<dyn Native>> {
        Ok(Box::new(NativeServices::with_runner(
            layout,
            recorded.boxed(),
        )))
    };
    let factory: NativeFactory<'_> = &factory;
    uninstall(&paths(installation), false, factory).map(|_removed| ())
}

#[test]
fn a_sealed_macos_uninstall_with_both_agents_down_removes_everything_but_state() {
    let (installation, layout) = sealed_macos_uninstall();
    let plists: Vec<_> = ["worker", "gateway"]
        .iter()
        .map(|role| layout.service_path(role).unwrap())
        .collect();
    assert!(plists.iter().all(|plist| plist.exists()));
    // Admission, the recheck before the stops, and the proof both are down.
    let mut exchanges = both_unloaded();
    exchanges.extend(both_unloaded());
    exchanges.extend(both_unloaded());
    let recorded = Recorded::new(exchanges);
    assert!(run(&installation, &recorded).is_ok());
    assert_eq!(recorded.unused(), 0, "no bootout, no disable, no reload");
    assert!(plists.iter().all(|plist| !plist.exists()));
    assert!(installation.home.join("Library/LaunchAgents").is_dir());
    assert!(!installation.install_root.exists());
    assert!(!installation.config_root.exists());
    assert!(installation
        .state_root
        .join("admin/state-owner.lock")
        .exists());
}

#[test]
fn a_plist_that_is_not_the_layouts_rendering_keeps_everything() {
    let (installation, layout) = sealed_macos_uninstall();
    let plist = layout.service_path("gateway").unwrap();
    let rendered = fs::read_to_string(&plist).unwrap();
    // The gateway's ExitTimeOut, 10 s as rendered.
    let edited = rendered.replace("<integer>10</integer>", "<integer>60</integer>");
    assert_ne!(edited, rendered);
    fs::write(&plist, edited).unwrap();
    let recorded = Recorded::new(vec![]);
    let error = match run(&installation, &recorded) {
        Err(Failure::Error(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        error.message(),
        "native service configuration is not this installed execution layout"
    );
    assert!(recorded.calls().is_empty(), "refused before asking launchd");
    assert!(installation
        .install_root
        .join(UNINSTALL_INTENT_NAME)
        .exists());
    assert!(layout.service_path("worker").unwrap().exists());
}

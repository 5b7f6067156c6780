//! Black-box tests of `execution-activation publish`: the units and
//! `execution-layout.json` it writes equal the golden renderings byte for
//! byte, a crash at each durable step of `replace_config` (for each kind)
//! resumes, and changed staging or rendering is refused.

use crate::publish_support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Output;

use agents_common::{
    config_staging_paths, execution_context, ActivationInvocation, ActivationManifest, Error,
    Platform,
};
use agents_tests::write_file;
use execution_activation::replace_config::{
    replace_config, replace_config_with_checkpoints, ReplaceConfigStep,
};
use publish_support::{case, Case};
use python_compat::json::Json;

#[track_caller]
fn assert_ok_silent(output: &Output) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(0), "", "")
    );
}

#[track_caller]
fn assert_fails(output: &Output, line: &str) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(1), "", format!("{line}\n").as_str())
    );
}

#[test]
fn publish_writes_the_golden_renderings() {
    for name in ["linux-basic", "linux-space-percent"] {
        let case = case(name);
        assert_ok_silent(&case.publish());
        case.assert_published();
        // Publishing again only re-proves the journaled files.
        let inodes: Vec<u64> = case
            .expected
            .iter()
            .map(|entry| fs::metadata(&entry.1).unwrap().ino())
            .collect();
        let journal = fs::read(case.install.manifest_path()).unwrap();
        assert_ok_silent(&case.publish());
        let again: Vec<u64> = case
            .expected
            .iter()
            .map(|entry| fs::metadata(&entry.1).unwrap().ino())
            .collect();
        assert_eq!(
            (again, fs::read(case.install.manifest_path()).unwrap()),
            (inodes, journal),
            "{name}"
        );
        // The next phase requires exactly these publications.
        case.install.record("candidate-starting");
        execution_context(&case.install.root())
            .unwrap()
            .expect("candidate-starting journal valid");
    }
}

#[test]
fn publish_refuses_a_layout_for_another_host_platform() {
    // Every operation after detect constructs NativeServices, which refuses
    // a launchd layout on a Linux host before anything is written.
    let case = case("darwin-basic");
    assert_fails(
        &case.publish(),
        "ValueError: native execution platform does not match this host",
    );
    assert!(!case.install.service_path().exists());
}

#[test]
fn publish_writes_the_golden_plists_of_a_launchd_layout_privately() {
    // On macOS publish renders launchd plists and journals them 0600 (the
    // 0644 mode is systemd's). The binary refuses a launchd layout here, so
    // publish runs in-process, past the host check, as it would on a Mac.
    let case = case("darwin-basic");
    let release = case.install.release_dir(&case.version);
    let layout = agents_common::ExecutionLayout {
        install_root: case.install.root(),
        config_root: case.install.config_root(),
        state_root: case.install.state_root(),
        home: case.install.home(),
        platform: Platform::Darwin.into(),
        worker_release: release.clone(),
        gateway_release: release,
        bind: case.bind.clone(),
        port: Json::from(case.port),
        environment: Json::Object(python_compat::json::JsonObject::new()),
    };
    execution_activation::publish::publish(&layout).unwrap();
    case.assert_published();
    let manifest = case.install.manifest();
    for kind in ["service", "gateway"] {
        let desired = manifest.get(&format!("desired_{kind}")).unwrap();
        assert_eq!(desired.get("mode"), Some(&Json::from(0o600)), "{kind}");
    }
    assert!(case
        .install
        .service_path()
        .starts_with(case.install.home().join("Library/LaunchAgents")));
}

#[test]
fn publish_resumes_after_a_crash_at_each_step_of_each_kind() {
    let steps = [
        ReplaceConfigStep::JournalWritten,
        ReplaceConfigStep::ModeSet,
        ReplaceConfigStep::Linked,
        ReplaceConfigStep::SourceUnlinked,
        ReplaceConfigStep::Published,
    ];
    for kind in ["service", "gateway", "execution_layout"] {
        for step in steps {
            let case = case("linux-basic");
            // Publish's own first writes for this kind, then the crash.
            let source = case.source(kind);
            let (_path, bytes, mode) = case.payload(kind);
            fs::create_dir_all(source.parent().unwrap()).unwrap();
            write_file(&source, &bytes, 0o600);
            let (_directory, manifest) =
                ActivationManifest::read(&case.install.root(), false).unwrap();
            let args = ActivationInvocation::owned(&manifest, &case.install.root());
            let mut crash = |reached| {
                if reached == step {
                    Err(Error::runtime("simulated crash"))
                } else {
                    Ok(())
                }
            };
            replace_config_with_checkpoints(&args, kind, &source, mode, &mut crash).unwrap_err();
            let output = case.publish();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{kind} {step:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            case.assert_published();
        }
    }
}

#[test]
fn publish_refuses_changed_staging_and_changed_rendering() {
    let case = case("linux-basic");
    let source = case.source("service");
    fs::create_dir_all(source.parent().unwrap()).unwrap();
    write_file(&source, b"[Unit]\nDescription=not the rendering\n", 0o600);
    let journal = fs::read(case.install.manifest_path()).unwrap();
    assert_fails(
        &case.publish(),
        "RuntimeError: split candidate configuration staging changed",
    );
    assert_eq!(fs::read(case.install.manifest_path()).unwrap(), journal);
    assert!(!case.install.service_path().exists(), "nothing published");
    // A right-content source that is not private is not trusted either.
    let (_path, bytes, _mode) = case.payload("service");
    write_file(&source, &bytes, 0o644);
    assert_fails(
        &case.publish(),
        "PermissionError: activation transaction file is unsafe",
    );
    fs::remove_file(&source).unwrap();

    assert_ok_silent(&case.publish());
    // install.sh rewrites the runtime env through the journal; the published
    // units no longer match the rendering and publish refuses to pretend.
    let env = case.install.env_path();
    let (_directory, manifest) = ActivationManifest::read(&case.install.root(), false).unwrap();
    let (env_source, _) = config_staging_paths(&env, manifest.transaction_id(), "env");
    write_file(&env_source, b"EXTRA=1\n", 0o600);
    let args = ActivationInvocation::owned(&manifest, &case.install.root());
    replace_config(&args, "env", &env_source, 0o600).unwrap();
    assert_fails(
        &case.publish(),
        "RuntimeError: split candidate configuration changed during publication",
    );
}

#[test]
fn publish_refuses_an_unsupported_runtime_environment() {
    let case = case("linux-basic");
    for (content, line) in [
        (
            "not an assignment\n",
            "ValueError: runtime environment is not a supported assignment file",
        ),
        (
            "X='a' 'b'\n",
            "ValueError: runtime environment quoting is invalid",
        ),
        ("X=\"open\n", "ValueError: No closing quotation"),
    ] {
        // Rewrite through the journal, as install.sh does, so only the
        // content is wrong.
        let (_directory, manifest) = ActivationManifest::read(&case.install.root(), false).unwrap();
        let (env_source, _) =
            config_staging_paths(&case.install.env_path(), manifest.transaction_id(), "env");
        write_file(&env_source, content.as_bytes(), 0o600);
        let args = ActivationInvocation::owned(&manifest, &case.install.root());
        replace_config(&args, "env", &env_source, 0o600).unwrap();
        assert_fails(&case.publish(), line);
        assert!(!case.install.service_path().exists());
    }
}

/// `strace`, which delivers a real SIGKILL to the helper on entry to a
/// chosen system call; `None` (with the reason printed) where it cannot run,
/// which CI does not accept.
fn strace() -> Option<PathBuf> {
    let found = ["/usr/bin/strace", "/bin/strace"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the SIGKILL resume test: strace is missing"
        );
        eprintln!("skipped: strace is not installed, so the helper cannot be killed mid-publish");
    }
    found
}

/// Where strace kills publish, and what the kill left behind there.
struct KillPoint {
    /// The system call on whose entry the helper is killed.
    syscall: &'static str,
    /// Which occurrence of it.
    occurrence: u32,
    /// Checks the state the kill left (before publish runs again).
    left: fn(&Case),
}

/// The kill points in publication order. The runtime's control token is
/// renamed into place first; then each kind makes two renames (journal, then
/// publication), one link, and two unlinks (the journal temporary, already
/// gone, then the staged source).
fn kill_points() -> [KillPoint; 7] {
    [
        KillPoint {
            syscall: "renameat",
            occurrence: 2,
            left: a_journal_temporary_before_the_journal_names_the_unit,
        },
        KillPoint {
            syscall: "fchmod",
            occurrence: 3,
            left: the_unit_journaled_still_private,
        },
        KillPoint {
            syscall: "linkat",
            occurrence: 1,
            left: the_unit_journaled_and_readable_not_linked,
        },
        KillPoint {
            syscall: "unlinkat",
            occurrence: 2,
            left: source_and_publication_linked,
        },
        KillPoint {
            syscall: "renameat",
            occurrence: 3,
            left: only_the_publication_name_left,
        },
        KillPoint {
            syscall: "renameat",
            occurrence: 5,
            left: the_worker_unit_published_not_the_gateway,
        },
        KillPoint {
            syscall: "linkat",
            occurrence: 3,
            left: both_units_published_the_layout_journaled,
        },
    ]
}

/// The journal directory's entries other than `manifest.json` that `keep` takes.
fn journal_entries(case: &Case, keep: impl Fn(&str) -> bool) -> usize {
    fs::read_dir(case.install.journal())
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name != "manifest.json" && keep(name.to_str().unwrap())
        })
        .count()
}

/// Before the journal names the staged unit: a journal temporary.
fn a_journal_temporary_before_the_journal_names_the_unit(case: &Case) {
    let manifest = case.install.manifest();
    assert_eq!(manifest.get("desired_service"), Some(&Json::Null));
    let temporaries = journal_entries(case, |name| name.starts_with(".manifest.json."));
    assert_eq!(temporaries, 1);
}

/// Journaled, still 0600: the kill came before the unit's mode.
fn the_unit_journaled_still_private(case: &Case) {
    let source = case.source("service");
    let info = fs::metadata(&source).unwrap();
    assert_eq!((info.mode() & 0o7777, info.nlink()), (0o600, 1));
    let desired = case.install.manifest().get("desired_service").cloned();
    assert_eq!(
        desired.and_then(|d| d.get("inode").cloned()),
        Some(Json::from(info.ino()))
    );
}

/// Journaled and 0644, not yet linked: the original could only roll back.
fn the_unit_journaled_and_readable_not_linked(case: &Case) {
    let info = fs::metadata(case.source("service")).unwrap();
    assert_eq!((info.mode() & 0o7777, info.nlink()), (0o644, 1));
}

/// Linked twice: source and publication name one inode.
fn source_and_publication_linked(case: &Case) {
    assert_eq!(case.staging_left("service").len(), 2);
    let info = fs::metadata(case.source("service")).unwrap();
    assert_eq!(info.nlink(), 2);
}

/// Only the publication name is left, the unit not yet replaced.
fn only_the_publication_name_left(case: &Case) {
    let left = case.staging_left("service");
    assert_eq!(left.len(), 1);
    assert!(left[0].to_str().unwrap().ends_with(".publication"));
    assert!(!case.install.service_path().exists());
}

/// The worker unit is published; the gateway's publication is not.
fn the_worker_unit_published_not_the_gateway(case: &Case) {
    assert!(case.install.service_path().exists());
    assert!(case.staging_left("service").is_empty());
    assert_eq!(case.staging_left("gateway").len(), 1);
    assert!(!case.install.gateway_path().exists());
}

/// Both units done; execution-layout.json journaled, not linked.
fn both_units_published_the_layout_journaled(case: &Case) {
    assert!(case.install.gateway_path().exists());
    assert_eq!(case.staging_left("execution_layout").len(), 1);
    assert!(!case.install.root().join("execution-layout.json").exists());
}

#[test]
fn publish_converges_after_the_helper_itself_is_killed_mid_publication() {
    let Some(strace) = strace() else {
        return;
    };
    for KillPoint {
        syscall,
        occurrence,
        left,
    } in kill_points()
    {
        let case = case("linux-basic");
        case.publish_killed_at(&strace, syscall, occurrence);
        left(&case);
        // install.sh runs publish again; it converges to the exact renderings.
        assert_ok_silent(&case.publish());
        case.assert_published();
        for kind in ["service", "gateway", "execution_layout"] {
            assert!(
                case.staging_left(kind).is_empty(),
                "{syscall} #{occurrence}: {kind} staging left"
            );
        }
        assert_eq!(
            journal_entries(&case, |_| true),
            0,
            "{syscall} #{occurrence}: journal temporaries"
        );
    }
}

/// Regression (issue 16): publish killed at the `fchmod` that follows the
/// creation of a kind's staged source (`<unit>.activation-<id>-<kind>.source`,
/// created but not yet written, the journal not yet naming the kind) left a
/// source that every later publish refused as `split candidate
/// configuration staging changed`, as the original's does. Publish now redoes
/// its own unfinished staging write.
#[test]
fn publish_again_after_a_kill_at_the_fchmod_of_a_new_staged_source() {
    let injection = agents_tests::crash_points::Injection {
        inherit_environment: true,
        ..agents_tests::crash_points::helper_injection()
    };
    for kind in ["service", "gateway", "execution_layout"] {
        let probe = case("linux-basic");
        let complete =
            agents_tests::crash_points::run_traced(&probe.publish_command(), &injection, None);
        assert_eq!(complete.outcome.code, Some(0), "{:?}", complete.outcome);
        let suffix = format!("-{kind}.source");
        // The first fchmod of this kind's source is write_new_private's.
        let kill_at = complete
            .calls
            .iter()
            .find(|call| call.call == "fchmod" && call.paths.ends_with(&suffix))
            .expect("the source's fchmod")
            .number;
        drop(probe);
        let case = case("linux-basic");

        let killed = agents_tests::crash_points::run_traced(
            &case.publish_command(),
            &injection,
            Some(kill_at),
        );

        let call = killed.killed.expect("publish was killed");
        assert!(
            call.call == "fchmod" && call.paths.ends_with(&suffix),
            "{call}"
        );
        let source = case.source(kind);
        assert_eq!(
            fs::read(&source).unwrap(),
            b"",
            "{kind}: an empty staged source is left"
        );
        assert_ok_silent(&case.publish());
        case.assert_published();
        assert!(case.staging_left(kind).is_empty(), "{kind} staging left");
    }
}

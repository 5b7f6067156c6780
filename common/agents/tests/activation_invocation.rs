//! `_validate_invocation` / `execution_context` against live links and
//! configuration files, phase by phase, as install.sh advances the journal.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use agents_common::{
    execution_context, validate_invocation, ActivationInvocation, ActivationManifest,
};
use agents_tests::journal_writer::Install;
use agents_tests::{assert_error, write_file};
use python_compat::ErrorClass;

/// An update of an installed split 1.0.0 to 1.1.0, with `previous` pointing
/// at an older 0.9.0.
fn update(tag: &str) -> Install {
    let install = Install::new(tag);
    install.release("0.9.0");
    symlink(
        install.release_dir("0.9.0"),
        install.root().join("previous"),
    )
    .unwrap();
    install.begin_update();
    install
}

fn context(install: &Install) -> agents_common::Result<Option<ActivationManifest>> {
    execution_context(&install.root())
}

fn retarget(link: PathBuf, target: PathBuf) {
    fs::remove_file(&link).unwrap();
    symlink(target, link).unwrap();
}

#[test]
fn links_must_match_each_phase_group() {
    let install = update("links");
    context(&install)
        .unwrap()
        .expect("prepared journal is valid");
    let current = install.root().join("current");
    retarget(current.clone(), install.release_dir("0.9.0"));
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "current release changed before link takeover",
    );
    retarget(current.clone(), install.release_dir("1.0.0"));

    install.record("quiescing");
    install.record("quiesced");
    install.record("linking");
    context(&install)
        .unwrap()
        .expect("linking allows the original links");
    install.activate_files();
    context(&install)
        .unwrap()
        .expect("linking allows the candidate links");
    install.record("linked");
    context(&install)
        .unwrap()
        .expect("linked resolves to the candidate");
    retarget(current.clone(), install.release_dir("1.0.0"));
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "current release does not resolve to the candidate",
    );
    retarget(current.clone(), install.release_dir("1.1.0"));
    let previous = install.root().join("previous");
    retarget(previous.clone(), install.release_dir("0.9.0"));
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "previous release does not resolve to the rollback release",
    );
    retarget(previous, install.release_dir("1.0.0"));

    install.record("rolling-back");
    context(&install)
        .unwrap()
        .expect("rolling-back allows mixed links");
    install.restore_files();
    install.record("rolled-back");
    context(&install).unwrap().expect("restored links");
    retarget(current, install.release_dir("1.1.0"));
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "current release was not restored",
    );
}

#[test]
fn previous_link_changes_are_refused_before_takeover() {
    let install = update("previous");
    retarget(
        install.root().join("previous"),
        install.release_dir("1.0.0"),
    );
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "previous release changed before link takeover",
    );
}

#[test]
fn configuration_must_match_each_phase_group() {
    let install = update("configs");
    install.write_env("AGENTS_SERVER_PORT=9999\n");
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "activation configuration does not match its phase",
    );
    install.write_env("AGENTS_SERVER_PORT=7850\n");
    for phase in ["quiescing", "quiesced", "linking"] {
        install.record(phase);
    }
    install.activate_files();
    install.record("linked");
    // Linked accepts any digest the journal observed, not a new one.
    install.write_env("AGENTS_SERVER_PORT=9999\n");
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "activation configuration does not match its phase",
    );
    install.write_env("AGENTS_SERVER_PORT=7850\n");
    context(&install)
        .unwrap()
        .expect("original digest is observed");
    // candidate-starting requires the journaled publication of every kind.
    install.record("candidate-starting");
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "activation configuration does not match its phase",
    );
}

#[test]
fn an_unsafe_configuration_file_raises_instead_of_mismatching() {
    let install = update("unsafe-config");
    let unit = install.service_path();
    let data = fs::read(&unit).unwrap();
    write_file(&unit, &data, 0o666);
    assert_error(
        context(&install),
        ErrorClass::Permission,
        "activation configuration file is unsafe",
    );
}

#[test]
fn retained_releases_must_keep_their_identity() {
    let install = update("releases");
    let old = install.release_dir("1.0.0");
    let moved = install.releases().join("moved");
    fs::rename(&old, &moved).unwrap();
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "activation rollback release identity changed",
    );
    fs::rename(&moved, &old).unwrap();
    write_file(&old.join("VERSION"), b"1.0.1\n", 0o644);
    assert_error(
        context(&install),
        ErrorClass::Runtime,
        "activation rollback release identity changed",
    );
    write_file(&old.join("VERSION"), b"1.0.0\n", 0o644);

    let staging = install.releases().join(".staging-1.1.0-4242");
    let parked = install.releases().join("parked");
    fs::rename(&staging, &parked).unwrap();
    context(&install)
        .unwrap()
        .expect("execution_context allows a missing candidate");
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    let strict = ActivationInvocation::owned(&manifest, &install.root());
    assert_error(
        validate_invocation(&strict, &manifest, false, None),
        ErrorClass::Runtime,
        "activation candidate release identity changed",
    );
    // The retired-candidate name of this transaction is found again.
    let retired = install.releases().join(format!(
        ".activation-candidate-retired-{}",
        manifest.transaction_id()
    ));
    fs::rename(&parked, &retired).unwrap();
    validate_invocation(&strict, &manifest, false, None).expect("retired candidate located");
}

#[test]
fn the_caller_layout_and_pins_must_match() {
    let install = update("pins");
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    let owned = ActivationInvocation::owned(&manifest, &install.root());
    validate_invocation(&owned, &manifest, false, None).unwrap();
    let check = |args: ActivationInvocation, message: &str| {
        assert_error(
            validate_invocation(&args, &manifest, false, None),
            ErrorClass::Runtime,
            message,
        )
    };
    check(
        ActivationInvocation {
            env: install.config_root().join("other"),
            ..owned.clone()
        },
        "pending activation belongs to a different layout",
    );
    check(
        ActivationInvocation {
            current: install.root().join("current2"),
            ..owned.clone()
        },
        "pending activation belongs to a different layout",
    );
    check(
        ActivationInvocation {
            transaction_id: "activation-000000000000000000000000".into(),
            ..owned.clone()
        },
        "activation transaction ownership changed",
    );
    check(
        ActivationInvocation {
            release_version: "1.2.0".into(),
            ..owned.clone()
        },
        "activation transaction release version changed",
    );
    check(
        ActivationInvocation {
            release_dir: install.release_dir("1.2.0").to_str().unwrap().into(),
            ..owned.clone()
        },
        "activation transaction release path changed",
    );
    // Lexically equal spellings are the same layout (`_absolute`).
    let spelled = ActivationInvocation {
        service: PathBuf::from(format!(
            "{}/./x/../agents-server.service",
            install.unit_dir().display()
        )),
        release_dir: format!("{}/", install.release_dir("1.1.0").display()),
        ..owned
    };
    validate_invocation(&spelled, &manifest, false, None).unwrap();
}

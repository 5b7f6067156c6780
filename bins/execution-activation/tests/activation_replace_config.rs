//! `replace_config`: the write-ahead publication of one configuration file,
//! resumed after a crash at each durable step, and every refusal leaving the
//! journal and the files untouched.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agents_common::{
    config_staging_paths, execution_context, ActivationInvocation, ActivationManifest, Error,
};
use agents_tests::journal_writer::{sha256_hex, Install};
use agents_tests::{assert_error, write_file};
use execution_activation::replace_config::{
    replace_config, replace_config_with_checkpoints, ReplaceConfigStep,
};
use python_compat::{json::Json, json_object, ErrorClass};

const UNIT: &str = "[Unit]\nDescription=candidate worker\n";

/// An update journal advanced to `linked`, as install.sh has it when it
/// publishes the candidate's configuration.
fn linked(tag: &str) -> Install {
    let install = Install::new(tag);
    install.begin_update();
    install.advance_to_linked();
    install
}

fn owned(install: &Install) -> (ActivationInvocation, ActivationManifest) {
    let (_directory, manifest) = ActivationManifest::read(&install.root(), false).unwrap();
    (
        ActivationInvocation::owned(&manifest, &install.root()),
        manifest,
    )
}

/// The `.source` and `.publication` names of `kind`.
fn staging(install: &Install, kind: &str) -> (PathBuf, PathBuf) {
    let (_args, manifest) = owned(install);
    let destination = PathBuf::from(manifest.text(&format!("{kind}_path")));
    config_staging_paths(&destination, manifest.transaction_id(), kind)
}

/// Stage the service unit as the helper's `publish` does (0600, one link).
fn stage_unit(install: &Install, payload: &str) -> PathBuf {
    let (source, _publication) = staging(install, "service");
    write_file(&source, payload.as_bytes(), 0o600);
    source
}

/// The published service unit is exactly the journaled inode.
#[track_caller]
fn assert_published(install: &Install, payload: &str) {
    let destination = install.service_path();
    let info = fs::symlink_metadata(&destination).unwrap();
    assert_eq!(fs::read_to_string(&destination).unwrap(), payload);
    assert_eq!((info.mode() & 0o7777, info.nlink()), (0o644, 1));
    let (source, publication) = staging(install, "service");
    assert!(
        !source.exists() && !publication.exists(),
        "staging names are gone"
    );
    let manifest = install.manifest();
    let digest = sha256_hex(payload.as_bytes());
    assert_eq!(
        manifest.get("desired_service"),
        Some(&Json::Object(json_object! {
            "sha256" => digest.as_str(),
            "mode" => 0o644,
            "source" => source.to_str().unwrap(),
            "device" => info.dev(),
            "inode" => info.ino(),
        }))
    );
    let history = manifest
        .get("observed_service_sha256")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(
        history
            .iter()
            .filter(|item| **item == Json::from(digest.as_str()))
            .count(),
        1
    );
    execution_context(&install.root())
        .unwrap()
        .expect("journal still valid in linked");
}

#[test]
fn a_fresh_publication_journals_then_publishes_the_staged_inode() {
    let install = linked("fresh");
    let source = stage_unit(&install, UNIT);
    let staged_inode = fs::metadata(&source).unwrap().ino();
    let (args, _manifest) = owned(&install);
    replace_config(&args, "service", &source, 0o644).unwrap();
    assert_published(&install, UNIT);
    assert_eq!(
        fs::metadata(install.service_path()).unwrap().ino(),
        staged_inode
    );
    // Already published: the same call is a no-op that changes nothing.
    let before = fs::read(install.manifest_path()).unwrap();
    replace_config(&args, "service", &source, 0o644).unwrap();
    assert_eq!(fs::read(install.manifest_path()).unwrap(), before);
    assert_published(&install, UNIT);
}

/// An error from the checkpoint is a crash right after that step.
fn crash_after(
    step: ReplaceConfigStep,
) -> impl FnMut(ReplaceConfigStep) -> agents_common::Result<()> {
    move |reached| {
        if reached == step {
            Err(Error::runtime("simulated crash"))
        } else {
            Ok(())
        }
    }
}

#[test]
fn a_crash_after_each_step_resumes_to_the_same_publication() {
    let steps = [
        ReplaceConfigStep::JournalWritten,
        ReplaceConfigStep::ModeSet,
        ReplaceConfigStep::Linked,
        ReplaceConfigStep::SourceUnlinked,
        ReplaceConfigStep::Published,
    ];
    for step in steps {
        let install = linked("crash");
        let source = stage_unit(&install, UNIT);
        let (source_path, publication) = staging(&install, "service");
        let (args, _manifest) = owned(&install);
        let mut crash = crash_after(step);
        let error = replace_config_with_checkpoints(&args, "service", &source, 0o644, &mut crash)
            .unwrap_err();
        assert_eq!(error.message(), "simulated crash");
        // The on-disk state is the documented one for that step.
        let journaled = !install.manifest().get("desired_service").unwrap().is_null();
        assert!(journaled, "{step:?}: the journal is written first");
        let (has_source, has_publication) = (source_path.exists(), publication.exists());
        let expected = match step {
            ReplaceConfigStep::JournalWritten | ReplaceConfigStep::ModeSet => (true, false),
            ReplaceConfigStep::Linked => (true, true),
            ReplaceConfigStep::SourceUnlinked => (false, true),
            ReplaceConfigStep::Published => (false, false),
        };
        assert_eq!((has_source, has_publication), expected, "{step:?}");
        if step == ReplaceConfigStep::Linked {
            assert_eq!(fs::metadata(&publication).unwrap().nlink(), 2);
        }
        // Between the crash and the resume the journal stays readable.
        execution_context(&install.root())
            .unwrap()
            .expect("valid after crash");
        let (args, _manifest) = owned(&install);
        replace_config(&args, "service", &source, 0o644).unwrap();
        assert_published(&install, UNIT);
    }
}

#[test]
fn a_changed_publication_is_never_published() {
    let install = linked("tampered");
    let source = stage_unit(&install, UNIT);
    let (_source, publication) = staging(&install, "service");
    let (args, _manifest) = owned(&install);
    let mut crash = crash_after(ReplaceConfigStep::SourceUnlinked);
    replace_config_with_checkpoints(&args, "service", &source, 0o644, &mut crash).unwrap_err();
    fs::write(&publication, "[Unit]\nDescription=injected\n").unwrap();
    let original = fs::read(install.service_path()).unwrap();
    assert_error(
        replace_config(&args, "service", &source, 0o644),
        ErrorClass::Runtime,
        "activation staged configuration does not match its journal",
    );
    assert_eq!(fs::read(install.service_path()).unwrap(), original);
}

/// Run `replace_config` and expect a refusal that changes no file.
#[track_caller]
fn refused(
    install: &Install,
    kind: &str,
    source: &Path,
    mode: u32,
    class: ErrorClass,
    message: &str,
) {
    let manifest = fs::read(install.manifest_path()).unwrap();
    let unit = fs::read(install.service_path()).unwrap();
    let (args, _manifest) = owned(install);
    assert_error(replace_config(&args, kind, source, mode), class, message);
    assert_eq!(
        fs::read(install.manifest_path()).unwrap(),
        manifest,
        "journal unchanged"
    );
    assert_eq!(
        fs::read(install.service_path()).unwrap(),
        unit,
        "unit unchanged"
    );
}

#[test]
fn refusals_change_nothing() {
    let install = linked("refusals");
    let (source, publication) = staging(&install, "service");
    let runtime = ErrorClass::Runtime;
    refused(
        &install,
        "service",
        &source,
        0o644,
        runtime,
        "activation configuration staging file is missing",
    );
    write_file(&source, UNIT.as_bytes(), 0o600);
    refused(
        &install,
        "bogus",
        &source,
        0o644,
        runtime,
        "activation configuration kind is not owned by this transaction",
    );
    let elsewhere = install.unit_dir().join("other.source");
    refused(
        &install,
        "service",
        &elsewhere,
        0o644,
        runtime,
        "activation configuration staging path is invalid",
    );
    refused(
        &install,
        "service",
        &source,
        0o640,
        runtime,
        "activation configuration mode is invalid",
    );
    let (env_source, _env_publication) = staging(&install, "env");
    refused(
        &install,
        "env",
        &env_source,
        0o644,
        runtime,
        "activation configuration mode is invalid",
    );
    write_file(&publication, UNIT.as_bytes(), 0o600);
    refused(
        &install,
        "service",
        &source,
        0o644,
        runtime,
        "activation configuration publication path exists",
    );
    fs::remove_file(&publication).unwrap();
    write_file(&source, UNIT.as_bytes(), 0o666);
    refused(
        &install,
        "service",
        &source,
        0o644,
        ErrorClass::Permission,
        "activation configuration staging file is unsafe",
    );
    write_file(&source, UNIT.as_bytes(), 0o600);
    install.record("candidate-starting");
    install.record("candidate-healthy");
    install.record("committing");
    refused(
        &install,
        "service",
        &source,
        0o644,
        runtime,
        "activation configuration does not match its phase",
    );
}

#[test]
fn refusals_by_phase_and_missing_publication() {
    let install = linked("phases");
    let source = stage_unit(&install, UNIT);
    let (args, _manifest) = owned(&install);
    replace_config(&args, "service", &source, 0o644).unwrap();
    // The published unit is replaced behind the journal's back: resuming
    // must not pretend the publication completed. The replacement is created
    // while the published inode still exists, so the file system cannot hand
    // the same inode number back (ext4 reuses a freed one at once).
    let unit = install.service_path();
    let replacement = unit.with_extension("replacement");
    write_file(&replacement, UNIT.as_bytes(), 0o644);
    fs::rename(&replacement, &unit).unwrap();
    assert_error(
        replace_config(&args, "service", &source, 0o644),
        ErrorClass::Runtime,
        "activation configuration publication is incomplete",
    );
    // A journaled publication with another mode is not resumed.
    assert_error(
        replace_config(&args, "service", &source, 0o600),
        ErrorClass::Runtime,
        "activation configuration staging file is missing",
    );
    install.record("rolling-back");
    assert_error(
        replace_config(&args, "service", &source, 0o644),
        ErrorClass::Runtime,
        "activation configuration cannot change in this phase",
    );
}

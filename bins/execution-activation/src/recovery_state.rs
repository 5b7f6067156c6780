//! `recovery-state`: whether an activation provably failed before any native
//! takeover and before any recovery owner existed (`unarmed`), or whether
//! recovery is `required`. Anything short of the strict pre-takeover proof
//! is `required`.

use std::path::Path;

use agents_common::{
    entry_present, normalize_path, owned_directory, recovery_service_path, validate_invocation,
    ActivationInvocation, ActivationManifest, CommandRunner, RecoveryService, Result,
    RECOVERY_DIRECTORY,
};

use crate::cli::Args;

/// `recovery-state`: tells install.sh whether a recovery owner armed for
/// this journal is still registered or running, so it neither starts a second
/// one nor discards a live one. Ports `recovery_state(args, value, native=...)`.
pub(crate) fn recovery_state(
    args: &Args,
    value: &ActivationManifest,
    commands: &dyn CommandRunner,
) -> Result<&'static str> {
    let rollback_from = value
        .get("rollback_from")
        .as_str()
        .filter(|from| !from.is_empty());
    let phase = rollback_from.unwrap_or(value.phase());
    if phase != "prepared" && phase != "guarded" {
        return Ok("required");
    }
    let root = normalize_path(&args.root)?;
    owned_directory(&root, true)?;
    // The rolling-back validator permits mixed links and observed
    // configurations; this exemption needs the original pre-takeover view,
    // even while that rollback is being resumed.
    validate_invocation(
        &ActivationInvocation::owned(value, &root),
        &value.with_phase(phase),
        true,
        None,
    )?;
    let parent = root.join(RECOVERY_DIRECTORY);
    if entry_present(&parent)? {
        normalize_path(&parent)?;
        owned_directory(&parent, true)?;
        if entry_present(&parent.join(value.transaction_id()))? {
            return Ok("required");
        }
    }
    let platform = args.platform.as_deref().unwrap_or_default();
    let home = args.home.as_deref().unwrap_or(Path::new(""));
    let path = normalize_path(&recovery_service_path(
        value.transaction_id(),
        platform,
        home,
    ))?;
    if entry_present(&path)? {
        return Ok("required");
    }
    if platform == "Linux" {
        let wants = path
            .parent()
            .unwrap_or(Path::new("/"))
            .join("default.target.wants");
        if entry_present(&wants)? {
            normalize_path(&wants)?;
            owned_directory(&wants, false)?;
            let name = path.file_name().unwrap_or_default();
            if entry_present(&wants.join(name))? {
                return Ok("required");
            }
        }
    }
    RecoveryService::new(value.transaction_id(), platform, commands).assert_absent(&path)?;
    Ok("unarmed")
}

#[cfg(test)]
mod tests {
    //! `recovery-state` for a journal begun on macOS: the recovery owner's
    //! job is a launchd plist, asked of `/bin/launchctl print` (replayed
    //! from tests/fixtures/launchd); systemd's `default.target.wants` link
    //! is a Linux-only sign of an armed owner.

    use std::time::Duration;

    use agents_common::{recovery_service_path, ActivationManifest, CommandCapture};
    use agents_tests::journal_writer::Install;
    use agents_tests::recorded_commands::{domain, expect, launchd_fixture, reply, Recorded};
    use agents_tests::{assert_error, write_file_making_parents};
    use python_compat::os::current_uid;
    use python_compat::{argparse::try_parse_command_line, ErrorClass};

    use super::*;
    use crate::cli::SPEC;

    /// A split update begun on macOS, journaled in `prepared`.
    fn begun_on_macos(tag: &str) -> (Install, ActivationManifest) {
        let mut install = Install::new(tag);
        install.roots.platform = "Darwin".into();
        install.begin_update();
        let (_journal, value) = ActivationManifest::read(&install.root(), false).unwrap();
        (install, value)
    }

    fn args(install: &Install, platform: &str) -> Args {
        let words: Vec<String> = [
            "recovery-state",
            "--root",
            install.root().to_str().unwrap(),
            "--home",
            install.home().to_str().unwrap(),
            "--platform",
            platform,
        ]
        .iter()
        .map(|word| word.to_string())
        .collect();
        Args::from_parsed(&try_parse_command_line(&SPEC, &words).unwrap())
    }

    /// The owner's launchd label, `com.agentsdock.recovery.<hex>`.
    fn label(value: &ActivationManifest) -> String {
        let suffix = value.transaction_id().trim_start_matches("activation-");
        format!("com.agentsdock.recovery.{suffix}")
    }

    /// `launchctl print gui/<uid>/<label>` answering `reply`.
    fn print(value: &ActivationManifest, reply: agents_common::Result<CommandCapture>) -> Recorded {
        let target = format!("{}/{}", domain(), label(value));
        Recorded::new(vec![expect(&["/bin/launchctl", "print", &target], reply)])
    }

    #[test]
    fn an_unregistered_launchd_owner_is_unarmed_whatever_systemd_holds() {
        let (install, value) = begun_on_macos("recovery-state-darwin");
        // A systemd enablement link of the same transaction means nothing
        // on macOS (it would make a Linux journal `required`).
        let service = recovery_service_path(value.transaction_id(), "Linux", &install.home());
        let wants = service
            .parent()
            .unwrap()
            .join("default.target.wants")
            .join(service.file_name().unwrap());
        write_file_making_parents(&wants, b"", 0o644);
        let not_found = launchd_fixture("print-not-found.stderr", &label(&value), "");
        let absent = print(&value, reply(113, "", &not_found));
        let state = recovery_state(&args(&install, "Darwin"), &value, &absent).unwrap();
        assert_eq!(state, "unarmed");
        assert_eq!(absent.unused(), 0);
        assert_eq!(absent.calls()[0].1, Duration::from_secs(20));
        let nothing = Recorded::new(vec![]);
        let state = recovery_state(&args(&install, "Linux"), &value, &nothing).unwrap();
        assert_eq!(state, "required");
    }

    #[test]
    fn a_registered_or_loaded_launchd_owner_is_never_unarmed() {
        let (install, value) = begun_on_macos("recovery-state-darwin-armed");
        let running = launchd_fixture("print-running.txt", &label(&value), "812");
        let loaded = print(&value, reply(0, &running, ""));
        assert_error(
            recovery_state(&args(&install, "Darwin"), &value, &loaded),
            ErrorClass::Runtime,
            "a native recovery job is loaded without its owned registration",
        );
        let no_domain = format!("Could not find domain for user gui: {}\n", current_uid());
        let unknown = print(&value, reply(113, "", &no_domain));
        assert_error(
            recovery_state(&args(&install, "Darwin"), &value, &unknown),
            ErrorClass::Runtime,
            "a native recovery job is loaded without its owned registration",
        );
        // Its plist registered: required, without asking launchd.
        let plist = recovery_service_path(value.transaction_id(), "Darwin", &install.home());
        assert_eq!(
            plist.parent().unwrap(),
            install.home().join("Library/LaunchAgents")
        );
        write_file_making_parents(&plist, b"<plist version=\"1.0\"/>\n", 0o600);
        let nothing = Recorded::new(vec![]);
        let state = recovery_state(&args(&install, "Darwin"), &value, &nothing).unwrap();
        assert_eq!(state, "required");
    }
}

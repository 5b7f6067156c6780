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
pub fn recovery_state(
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

//! The words that start a helper on this host, so every command doctor
//! prints runs exactly as printed: support staff have the helpers only
//! inside the installation, not on `PATH`.
//!
//! In order: the installed release's own binary when the migration kit
//! staged it (`<release>/<helper>-<platform tag>`, listed in that release's
//! `rust-helpers.json`); the original's `python3 -B <release>/<script>` for
//! a release that was not migrated; the binary beside the running doctor
//! (`<dir>/<helper>` with doctor's own platform suffix); the bare name.

use std::path::{Path, PathBuf};

use python_compat::json::parse_json;

/// The helpers doctor's commands start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Helper {
    /// `execution-manage` / `execution_manage.py`.
    ExecutionManage,
    /// The split uninstall: `uninstall` / `execution_uninstall.py`.
    Uninstall,
    /// `update-handoff` (the original is imported only, never run).
    UpdateHandoff,
}

impl Helper {
    /// The binary's name.
    fn binary(self) -> &'static str {
        match self {
            Helper::ExecutionManage => "execution-manage",
            Helper::Uninstall => "uninstall",
            Helper::UpdateHandoff => "update-handoff",
        }
    }

    /// The original's script, when it can be run.
    fn script(self) -> Option<&'static str> {
        match self {
            Helper::ExecutionManage => Some("execution_manage.py"),
            Helper::Uninstall => Some("execution_uninstall.py"),
            Helper::UpdateHandoff => None,
        }
    }
}

/// The migration kit's manifest in a release.
const MANIFEST: &str = "rust-helpers.json";

/// This host's platform tag (`release_platforms.py`'s `tag`).
fn platform_tag() -> &'static str {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("macos", "aarch64") => "darwin-arm64",
        ("macos", _) => "darwin-x86_64",
        (_, "aarch64") => "linux-aarch64",
        _ => "linux-x86_64",
    }
}

/// The words that start `helper` for an installation whose release is
/// `release` (none when unknown), doctor itself running as `doctor_exe`.
pub(super) fn helper_words(
    helper: Helper,
    release: Option<&Path>,
    doctor_exe: Option<&Path>,
) -> Vec<String> {
    let text = |path: &Path| path.display().to_string();
    if let Some(release) = release {
        if let Some(binary) = migrated_binary(release, helper) {
            return vec![text(&binary)];
        }
        if let Some(script) = helper.script().map(|script| release.join(script)) {
            if is_regular(&script) {
                return vec!["python3".to_string(), "-B".to_string(), text(&script)];
            }
        }
    }
    if let Some(beside) = doctor_exe.and_then(|exe| beside_doctor(exe, helper)) {
        return vec![text(&beside)];
    }
    vec![helper.binary().to_string()]
}

/// `<release>/<binary>-<tag>` when the release's kit manifest lists it
/// (`platforms.<tag>.binaries.<name>`) for this host's platform and it is an executable regular file.
fn migrated_binary(release: &Path, helper: Helper) -> Option<PathBuf> {
    let data = std::fs::read(release.join(MANIFEST)).ok()?;
    let manifest = parse_json(&data).ok()?;
    let tag = platform_tag();
    let name = format!("{}-{tag}", helper.binary());
    manifest
        .get("platforms")
        .and_then(|platforms| platforms.get(tag))
        .and_then(|platform| platform.get("binaries"))
        .and_then(|binaries| binaries.get(&name))?;
    let path = release.join(&name);
    is_executable(&path).then_some(path)
}

/// The sibling of the running doctor with the same suffix
/// (`execution-manage-linux-x86_64` → `update-handoff-linux-x86_64`).
fn beside_doctor(exe: &Path, helper: Helper) -> Option<PathBuf> {
    let name = exe.file_name()?.to_str()?;
    let suffix = name.strip_prefix("execution-manage")?;
    let path = exe.with_file_name(format!("{}{suffix}", helper.binary()));
    is_executable(&path).then_some(path)
}

pub(super) fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|info| info.file_type().is_file())
}

pub(super) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|info| info.is_file() && info.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("doctor-programs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn executable(path: &Path) {
        std::fs::write(path, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_migrated_release_runs_its_own_binary() {
        let release = scratch("migrated");
        let tag = platform_tag();
        let name = format!("execution-manage-{tag}");
        executable(&release.join(&name));
        std::fs::write(release.join("execution_manage.py"), b"").unwrap();
        let manifest =
            format!("{{\"platforms\": {{\"{tag}\": {{\"binaries\": {{\"{name}\": {{}}}}}}}}}}");
        std::fs::write(release.join(MANIFEST), manifest).unwrap();
        assert_eq!(
            helper_words(Helper::ExecutionManage, Some(&release), None),
            [release.join(&name).display().to_string()]
        );
        // Not listed in the manifest: the original's form.
        assert_eq!(
            helper_words(Helper::Uninstall, Some(&release), None).len(),
            1,
            "no script and no binary: the bare name"
        );
        std::fs::remove_dir_all(&release).unwrap();
    }

    #[test]
    fn an_unmigrated_release_runs_the_original() {
        let release = scratch("original");
        std::fs::write(release.join("execution_uninstall.py"), b"").unwrap();
        assert_eq!(
            helper_words(Helper::Uninstall, Some(&release), None),
            [
                "python3".to_string(),
                "-B".to_string(),
                release.join("execution_uninstall.py").display().to_string()
            ]
        );
        std::fs::remove_dir_all(&release).unwrap();
    }

    #[test]
    fn otherwise_the_binary_beside_doctor_then_the_bare_name() {
        let dir = scratch("beside");
        let doctor = dir.join("execution-manage-linux-x86_64");
        executable(&doctor);
        executable(&dir.join("update-handoff-linux-x86_64"));
        assert_eq!(
            helper_words(Helper::UpdateHandoff, Some(&dir), Some(&doctor)),
            [dir.join("update-handoff-linux-x86_64")
                .display()
                .to_string()]
        );
        assert_eq!(
            helper_words(Helper::Uninstall, None, Some(&doctor)),
            ["uninstall".to_string()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

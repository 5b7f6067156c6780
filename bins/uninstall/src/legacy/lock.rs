//! The legacy script's own `.install-lock` protocol (`acquire_operation_lock`
//! and `release_operation_lock`).
//!
//! The legacy path keeps the script's protocol rather than the split
//! helpers' `InstallationLock`, because install.sh of a legacy installation
//! expects exactly this: `mkdir` of the lock directory, a `pid` file naming
//! the owner, and takeover of a lock whose owner no longer runs by renaming it
//! aside and deleting it. Failures inside the script's function do not abort
//! it (bash ignores `set -e` there), so neither do they here.

use std::ffi::OsStr;
use std::fs::{self, DirBuilder};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::shell::{os_message, remove_tree};
use crate::output::warn;
use crate::roots::is_directory;

/// The held lock; [`ScriptLock::release`] is the script's EXIT trap.
#[derive(Debug)]
pub(super) struct ScriptLock {
    root: PathBuf,
    directory: PathBuf,
    held: bool,
    root_created: bool,
}

impl ScriptLock {
    /// `acquire_operation_lock`; `Err` after printing the script's refusal.
    pub(super) fn acquire(root: &Path) -> Result<ScriptLock, ()> {
        let directory = root.join(".install-lock");
        let mut root_created = false;
        if !is_directory(root.as_os_str().as_bytes()) {
            // `mkdir -p`; a failure is reported and the next mkdir decides.
            if let Err(err) = DirBuilder::new().recursive(true).mode(0o777).create(root) {
                warn(&[
                    b"mkdir: cannot create directory '",
                    root.as_os_str().as_bytes(),
                    b"': ",
                    os_message(&err).as_bytes(),
                ]);
            }
            root_created = true;
        }
        if DirBuilder::new().mode(0o777).create(&directory).is_err() {
            let owner = read_owner(&directory);
            if owner_is_running(&owner) {
                warn(&[
                    b"Refusing to uninstall while an AgentsServer install/update is active (PID ",
                    &owner,
                    b").",
                ]);
                return Err(());
            }
            let stale = root.join(format!(".uninstall-stale-lock-{}", std::process::id()));
            if move_aside(&directory, &stale).is_err() {
                warn(&[b"An AgentsServer install/update started while uninstall was checking the operation lock."]);
                return Err(());
            }
            remove_tree(&stale);
            if DirBuilder::new().mode(0o777).create(&directory).is_err() {
                warn(&[b"An AgentsServer install/update is already running."]);
                return Err(());
            }
        }
        write_owner(&directory);
        if let Err(err) = fs::set_permissions(&directory, fs::Permissions::from_mode(0o700)) {
            warn(&[
                b"chmod: changing permissions of '",
                directory.as_os_str().as_bytes(),
                b"': ",
                os_message(&err).as_bytes(),
            ]);
        }
        Ok(ScriptLock {
            root: root.to_path_buf(),
            directory,
            held: true,
            root_created,
        })
    }

    /// `release_operation_lock`: removes the lock only while it still names
    /// this process, and the install root only if it was created for the lock.
    pub(super) fn release(&mut self) {
        if !self.held {
            return;
        }
        if read_owner(&self.directory) == std::process::id().to_string().as_bytes() {
            remove_tree(&self.directory);
        }
        self.held = false;
        if self.root_created {
            let _ = fs::remove_dir(&self.root);
        }
    }

    /// The lock directory, which the removal of the install root skips.
    pub(super) fn directory(&self) -> &Path {
        &self.directory
    }
}

/// `"$(cat "$INSTALL_LOCK_DIR/pid" 2>/dev/null || true)"`: the file's bytes
/// without NULs (bash drops them) and without trailing newlines.
fn read_owner(directory: &Path) -> Vec<u8> {
    let mut owner: Vec<u8> = fs::read(directory.join("pid"))
        .unwrap_or_default()
        .into_iter()
        .filter(|&byte| byte != 0)
        .collect();
    while owner.last() == Some(&b'\n') {
        owner.pop();
    }
    owner
}

/// `[[ "$owner_pid" =~ ^[0-9]+$ ]] && kill -0 "$owner_pid"`: bash reads the
/// digits as a decimal `intmax_t` that must fit `pid_t`; only a successful
/// `kill(pid, 0)` counts as running (so PID 0, the process group, does).
fn owner_is_running(owner: &[u8]) -> bool {
    if owner.is_empty() || !owner.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let Some(value) = std::str::from_utf8(owner)
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
    else {
        return false;
    };
    let Ok(pid) = i32::try_from(value) else {
        return false;
    };
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => rustix::process::test_kill_process(pid).is_ok(),
        None => rustix::process::test_kill_current_process_group().is_ok(),
    }
}

/// `mv "$INSTALL_LOCK_DIR" "$stale_lock"`: into the target when it is an
/// existing directory, as mv does.
fn move_aside(from: &Path, to: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(from).is_err() {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    }
    let target = if is_directory(to.as_os_str().as_bytes()) {
        to.join(from.file_name().unwrap_or(OsStr::new(".install-lock")))
    } else {
        to.to_path_buf()
    };
    fs::rename(from, target)
}

/// `printf '%s\n' "$$" > "$INSTALL_LOCK_DIR/pid"` (follows a symlink, as the
/// redirection does; a failure is reported and the script carries on).
fn write_owner(directory: &Path) {
    let path = directory.join("pid");
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o666)
        .open(&path)
        .and_then(|mut file| file.write_all(format!("{}\n", std::process::id()).as_bytes()));
    if let Err(err) = written {
        warn(&[
            b"uninstall: ",
            path.as_os_str().as_bytes(),
            b": ",
            os_message(&err).as_bytes(),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_follows_bash_rules() {
        assert!(owner_is_running(std::process::id().to_string().as_bytes()));
        assert!(owner_is_running(b"0"));
        assert!(!owner_is_running(b""));
        assert!(!owner_is_running(b"12a"));
        assert!(!owner_is_running(b"-1"));
        assert!(!owner_is_running(b"4294967297"));
        assert!(!owner_is_running(b"99999999999999999999"));
        let padded = format!("000{}", std::process::id());
        assert!(owner_is_running(padded.as_bytes()));
    }
}

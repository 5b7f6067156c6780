//! The legacy (single-service) uninstall of `uninstall.sh`.
//!
//! Order, as in the script: refuse a split layout or its pending transaction;
//! take the script's `.install-lock`; refuse again under the lock; the purge
//! guard (typed state path, never bypassed by `--yes`); the `[y/N]`
//! confirmation; stop the service with a bounded wait; remove the service
//! definition, the install root's contents except the lock, the
//! configuration and, only when purging, the state; release the lock; remove
//! the emptied install root. Any refusal before the service stop changes
//! nothing.

mod lock;
mod service;
mod shell;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(crate) use service::{os_name, Host, RealHost};

use crate::output::{say, warn};
use crate::roots::ManagedRoots;
use crate::signals;
use crate::terminal::{bash_read, stdin_is_terminal, BashReply};
use lock::ScriptLock;
use shell::{rm_f, rm_rf, rmdir};

/// Ends the run with this exit status (the script's `exit N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exit(pub u8);

/// The script's trap: a pending HUP/INT/TERM ends the run with 130.
pub(crate) fn checkpoint() -> Result<(), Exit> {
    if signals::pending() {
        Err(Exit(130))
    } else {
        Ok(())
    }
}

/// A distinct number per call, for unit tests' private directories.
#[cfg(test)]
pub(crate) fn tests_counter() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Options {
    /// `--yes`: skip the `[y/N]` confirmation (never the purge guard).
    pub assume_yes: bool,
    /// `--purge-state`: also delete the state root.
    pub purge_state: bool,
}

/// Runs the legacy uninstall on the host `uname -s` named and returns the
/// exit status.
pub(crate) fn run(roots: &ManagedRoots, options: Options, os: &OsStr, host: &mut dyn Host) -> u8 {
    if refuse_execution_layout(&roots.install).is_err() {
        return 1;
    }
    let Ok(mut lock) = ScriptLock::acquire(&roots.install) else {
        return 1;
    };
    signals::trap_exit_130();
    let outcome = uninstall_under_lock(roots, options, os, host, &mut lock);
    // The EXIT trap: a no-op when the run already released the lock.
    lock.release();
    match outcome {
        Ok(()) => 0,
        Err(Exit(status)) => status,
    }
}

fn uninstall_under_lock(
    roots: &ManagedRoots,
    options: Options,
    os: &OsStr,
    host: &mut dyn Host,
    lock: &mut ScriptLock,
) -> Result<(), Exit> {
    checkpoint()?;
    refuse_execution_layout(&roots.install)?;
    if options.purge_state {
        confirm_state_purge(&roots.state)?;
    }
    say(&[b"This will stop and remove the AgentsServer service, release runtime at"]);
    say(&[
        roots.install.as_os_str().as_bytes(),
        b", and configuration at ",
        roots.config.as_os_str().as_bytes(),
        b" (including the access token).",
    ]);
    if !confirm(b"Proceed?", options.assume_yes)? {
        warn(&[b"Aborted; nothing was changed."]);
        return Err(Exit(1));
    }
    checkpoint()?;
    service::stop_and_remove(host, os, roots.home.as_os_str())?;
    remove_files(roots, options, lock)?;
    // The lock outlives every removal, so no installer can start meanwhile.
    lock.release();
    if std::fs::metadata(&roots.install).is_ok_and(|meta| meta.is_dir())
        && rmdir(&roots.install).is_err()
    {
        warn(&[
            b"Could not remove the now-unlocked install directory at ",
            roots.install.as_os_str().as_bytes(),
            b".",
        ]);
        return Err(Exit(1));
    }
    say(&[b"AgentsServer service, release runtime, and configuration removed."]);
    say(&[b"Note: any persistent chat terminals (tmux sessions named zd_*) keep running"]);
    say(&[b"independently and are not touched by this script. List them with: tmux ls"]);
    checkpoint()
}

/// `refuse_execution_layout`: this path never touches a split installation.
fn refuse_execution_layout(install: &Path) -> Result<(), Exit> {
    for marker in ["execution-layout.json", ".execution-transaction"] {
        if std::fs::symlink_metadata(install.join(marker)).is_ok() {
            warn(&[b"This uninstaller does not support the separate gateway/execution layout or its pending transaction."]);
            warn(&[b"Use the execution-aware managed lifecycle; the pinned worker has not been changed."]);
            return Err(Exit(1));
        }
    }
    Ok(())
}

/// `confirm_state_purge`: an interactive terminal and the exact state path.
fn confirm_state_purge(state: &Path) -> Result<(), Exit> {
    if !stdin_is_terminal() {
        warn(&[b"Refusing to purge state without an interactive terminal; --yes never bypasses the state guard."]);
        return Err(Exit(1));
    }
    say(&[b"Permanent deletion requested for chat history, jobs, files, and tokens."]);
    let prompt = [
        b"Type the exact state path to confirm (",
        state.as_os_str().as_bytes(),
        b"): ",
    ]
    .concat();
    match bash_read(&prompt) {
        BashReply::Line(reply) if reply == state.as_os_str().as_bytes() => Ok(()),
        BashReply::Line(_) => {
            warn(&[b"State path did not match; nothing was changed."]);
            Err(Exit(1))
        }
        BashReply::Failed => Err(Exit(1)),
        BashReply::Interrupted => Err(Exit(130)),
    }
}

/// `confirm "$prompt"`: true to proceed.
fn confirm(prompt: &[u8], assume_yes: bool) -> Result<bool, Exit> {
    if assume_yes {
        return Ok(true);
    }
    if !stdin_is_terminal() {
        warn(&[
            b"Refusing to ",
            prompt,
            b" without --yes on a non-interactive run.",
        ]);
        return Ok(false);
    }
    match bash_read(&[prompt, b" [y/N] "].concat()) {
        BashReply::Line(reply) => Ok(matches!(reply.as_slice(), b"y" | b"Y" | b"yes" | b"YES")),
        BashReply::Failed => Ok(false),
        BashReply::Interrupted => Err(Exit(130)),
    }
}

/// The script's removal steps after the service stopped. A failed `rm` ends
/// the run with status 1 (bash's `set -e`), keeping what was not yet removed.
fn remove_files(roots: &ManagedRoots, options: Options, lock: &ScriptLock) -> Result<(), Exit> {
    let failed = |()| Exit(1);
    if std::fs::metadata(&roots.install).is_ok_and(|meta| meta.is_dir()) {
        say(&[
            b"Removing release runtime at ",
            roots.install.as_os_str().as_bytes(),
        ]);
        for entry in sorted_entries(&roots.install) {
            if entry != lock.directory() {
                rm_rf(&entry).map_err(failed)?;
            }
        }
        checkpoint()?;
    }
    if std::fs::metadata(&roots.config).is_ok_and(|meta| meta.is_dir()) {
        say(&[
            b"Removing configuration at ",
            roots.config.as_os_str().as_bytes(),
        ]);
        rm_rf(&roots.config).map_err(failed)?;
        checkpoint()?;
    }
    let state_exists = std::fs::metadata(&roots.state).is_ok();
    let alias = roots.legacy_state_alias();
    let alias_is_link = crate::roots::is_symlink(&alias);
    if options.purge_state {
        if state_exists || alias_is_link {
            if alias_is_link {
                rm_f(&alias).map_err(failed)?;
            }
            if std::fs::metadata(&roots.state).is_ok() {
                rm_rf(&roots.state).map_err(failed)?;
            }
            say(&[b"Deleted ", roots.state.as_os_str().as_bytes()]);
        }
    } else if state_exists {
        say(&[
            b"Preserved chat history, jobs, files, tokens, and secure-peer credentials at ",
            roots.state.as_os_str().as_bytes(),
            b".",
        ]);
        say(&[b"Re-running ./install.sh will pick ordinary AgentsServer state back up. Pass --purge-state to also delete it."]);
        let team_hub = roots.state.join("team-hub/team-hub.sqlite3");
        if std::fs::symlink_metadata(&team_hub).is_ok() {
            say(&[b"Preserved Team Hub state is not auto-reactivated in this beta; use a signed managed recovery or support-assisted restoration."]);
        }
    }
    checkpoint()
}

/// `"$INSTALL_ROOT"/*` with `dotglob nullglob`: every entry but `.`/`..`, in
/// byte order (the glob order of the C locale).
fn sorted_entries(directory: &Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .collect()
        })
        .unwrap_or_default();
    entries.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    entries
}

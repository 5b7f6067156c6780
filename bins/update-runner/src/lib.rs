//! `update-runner`: downloads, verifies and installs an AgentsServer release
//! for a managed update (the port of `update_runner.py`), or resumes an
//! interrupted activation with `--recover-only`.
//!
//! The server launches it detached and reads only the `server-update.json`
//! row it writes; the exit status (0 done, 1 failed, 2 usage) is
//! informational. Nothing is printed on a failure the row reports.
//!
//! # Map by concern
//!
//! - The run: `cli` (the typed arguments), `update` (`run_update`, one
//!   managed update), [`recovery`] (`--recover-only`), `failure` (what a
//!   failed update or recovery publishes).
//! - What gets installed: [`release`] (versions, tracks, signed manifests,
//!   downloads, archives), `prepared` (a release prepared ahead),
//!   [`installer`] (supervising `install.sh`).
//! - The running server: [`server_health`] (its health endpoint), `team_hub`
//!   and [`team_hub_fence`] (the hosted Team Hub's part of an update).
//! - The network: `urllib` (one GET as `urlopen` performs it, read with
//!   `python_compat::http_client`), [`proxy`] (which way a request goes),
//!   [`trust_store`] (the certificate authorities HTTPS hosts are verified
//!   against).

mod cli;
mod failure;
pub mod installer;
mod prepared;
pub mod proxy;
pub mod recovery;
pub mod release;
pub mod server_health;
mod team_hub;
pub mod team_hub_fence;
pub mod trust_store;
mod update;
mod urllib;

use std::path::{Path, PathBuf};

use crate::server_health::resolve_user_path;
use agents_common::Result;

pub use cli::{Args, SPEC};

/// Runs the update (or, with `--recover-only`, the recovery) the server
/// asked for; a failure is recorded in the status row before this returns
/// false, as `update_runner.main` records it before exiting 1.
pub fn run(args: &Args) -> bool {
    if args.recover_only {
        match recovery::run_recovery(args) {
            Ok(()) => true,
            Err(_) => {
                failure::settle_failed_recovery(args);
                false
            }
        }
    } else {
        match update::run_update(args) {
            Ok(()) => true,
            Err(error) => {
                failure::settle_failed_update(args, &error);
                false
            }
        }
    }
}

/// `Path(os.environ["AGENTS_SERVER_INSTALL_DIR"]).expanduser().resolve()`:
/// the installation the server runs from.
pub(crate) fn install_root() -> Result<PathBuf> {
    let root =
        std::env::var_os("AGENTS_SERVER_INSTALL_DIR").ok_or_else(prepared::missing_install_dir)?;
    resolve_user_path(Path::new(&root))
}

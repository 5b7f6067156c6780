//! The step for a split activation journal that install.sh left with no
//! installer running and no managed update retaining it: install.sh's own
//! `--recover-only`, with the pins its recovery gate checks against the
//! journal (`execution_context(root)`: the release version, the execution
//! API contract, the transaction id), the server identity its recovery
//! owner requires for an existing installation, and the roots install.sh
//! otherwise takes from the caller's environment.
//!
//! This is the command upstream's recovery launchers run (the armed
//! recovery job's and a managed update's): it resumes only the retained
//! journal and never stages or creates anything. It exits 0 when it
//! finished a committed activation and 75 when it restored the prior
//! release; either way the journal is gone and doctor judges what is left.

use std::path::{Path, PathBuf};

use agents_common::{locate_release, read_owned_config, ActivationManifest};
use python_compat::json::Json;

use super::context::Context;
use super::programs::{is_executable, is_regular};

/// install.sh's journal directory and where a rollback parks the candidate.
const CANDIDATE_RETIRED: &str = ".activation-transaction/candidate.retired";

/// The durable server identity install.sh reads from the state root.
const SERVER_IDENTITY: &str = "server-identity";

/// Why no `--recover-only` command can be printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unavailable {
    /// A format 1/2 (single-service) journal: `--recover-only` refuses it
    /// (`execution_context` is `None`); only a rerun of install.sh resumes it.
    NotSplit,
    /// A split journal whose command cannot be completed here: why.
    Missing(String),
}

/// The `install.sh --recover-only` invocation that resumes `manifest` on
/// this host, or why none can be printed.
pub(super) fn recover_only_argv(
    ctx: &Context,
    manifest: &ActivationManifest,
) -> Result<Vec<String>, Unavailable> {
    if !manifest.is_execution() {
        return Err(Unavailable::NotSplit);
    }
    split_argv(ctx, manifest).map_err(Unavailable::Missing)
}

fn split_argv(ctx: &Context, manifest: &ActivationManifest) -> Result<Vec<String>, String> {
    let api_contract = manifest
        .execution_field("api_contract")
        .as_int()
        .filter(|contract| *contract >= 1)
        .ok_or("the journal pins no execution API contract for --expected-api-contract")?;
    let script = installer(ctx, manifest)?;
    let runtime_dir = PathBuf::from(python_compat::str_or_empty(
        manifest.execution_field("runtime_dir"),
    ));
    let state_root = parent(&runtime_dir);
    let config_root = parent(Path::new(manifest.text("env_path")));
    let text = |path: &Path| path.display().to_string();
    let mut argv = vec![
        "env".to_string(),
        format!("AGENTS_SERVER_INSTALL_DIR={}", text(&ctx.root)),
        format!("AGENTS_SERVER_CONFIG_DIR={}", text(&config_root)),
        format!("AGENTSDOCK_STATE_DIR={}", text(&state_root)),
    ];
    if let Some(home) = &ctx.home {
        argv.push(format!("HOME={}", text(home)));
    }
    argv.push(text(&script));
    for word in [
        "--recover-only",
        "--non-interactive",
        "--release-version",
        manifest.text("release_version"),
        "--expected-api-contract",
        &api_contract.to_string(),
        "--expected-activation-id",
        manifest.transaction_id(),
    ] {
        argv.push(word.to_string());
    }
    if let Some(identity) = server_identity(manifest, &state_root)? {
        argv.extend(["--expected-server-identity".to_string(), identity]);
    }
    Ok(argv)
}

/// The install.sh to run: the candidate's own (the code that began this
/// journal), wherever its identity now is (staged, renamed into
/// `releases/<version>`, or parked by a rollback); else the running
/// release's, which a managed update's recovery runs because "the candidate
/// may have already been retired by a partly completed rollback". Either
/// holds install.sh with every release file beside it (install.sh copies
/// them into each release) and pins the journal's version through
/// `--release-version`.
fn installer(ctx: &Context, manifest: &ActivationManifest) -> Result<PathBuf, String> {
    let candidate = locate_release(
        &manifest.release("candidate_release"),
        &[ctx.root.join(CANDIDATE_RETIRED)],
    )
    .ok()
    .flatten();
    let places: Vec<PathBuf> = candidate.into_iter().chain(ctx.release.clone()).collect();
    places
        .iter()
        .map(|release| release.join("install.sh"))
        .find(|script| is_regular(script) && is_executable(script))
        .ok_or_else(|| match places.is_empty() {
            true => "neither the candidate release nor an installed release is left".to_string(),
            false => format!(
                "no executable install.sh in {}",
                places
                    .iter()
                    .map(|place| place.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        })
}

/// `STATE_ROOT/server-identity` as install.sh reads it (an owned regular
/// file, trailing newlines dropped). The recovery owner install.sh arms
/// refuses an existing installation without it; a first installation
/// (nothing installed before the journal) has none to give.
fn server_identity(
    manifest: &ActivationManifest,
    state_root: &Path,
) -> Result<Option<String>, String> {
    let path = state_root.join(SERVER_IDENTITY);
    let read = read_owned_config(&path, 16 * 1024 * 1024).map(|data| {
        String::from_utf8_lossy(&data)
            .trim_end_matches('\n')
            .to_string()
    });
    match read {
        Ok(identity) if valid_identity(&identity) => Ok(Some(identity)),
        _ if first_installation(manifest) => Ok(None),
        Ok(_) => Err(format!(
            "{} is not a server identity its recovery accepts",
            path.display()
        )),
        Err(error) => Err(format!(
            "its recovery of an existing installation needs the server identity, and {} is \
             unreadable ({})",
            path.display(),
            error.python_line()
        )),
    }
}

/// What both install.sh (`[A-Za-z0-9_.:-]{8,240}`) and its recovery owner
/// (`[A-Za-z0-9_-]{1,128}`) accept.
fn valid_identity(identity: &str) -> bool {
    (8..=128).contains(&identity.len())
        && identity
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

/// The recovery owner's `fresh`: no prior release, no `current`, and
/// neither service existed before the journal.
fn first_installation(manifest: &ActivationManifest) -> bool {
    let absent = |value: &Json| value == &Json::from("absent");
    manifest.release("old_release").is_empty()
        && manifest.get("current").get("kind") == Some(&Json::from("missing"))
        && absent(manifest.get("service_state"))
        && absent(manifest.execution_field("gateway_state"))
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::valid_identity;

    #[test]
    fn an_identity_passes_both_install_sh_and_its_recovery_owner() {
        assert!(valid_identity("5e7e5e7e5e7e5e7e5e7e5e7e"));
        assert!(valid_identity("server_identity-01"));
        // install.sh wants at least 8 characters; the recovery owner at most
        // 128 and no '.' or ':' (which install.sh alone would accept).
        assert!(!valid_identity("short"));
        assert!(!valid_identity(&"a".repeat(129)));
        assert!(!valid_identity("server.identity"));
        assert!(!valid_identity("server:identity"));
        assert!(!valid_identity("server identity"));
        assert!(!valid_identity(""));
    }
}

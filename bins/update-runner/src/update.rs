//! `run_update`: one managed update from the admitted `starting` row to the
//! `complete` row, in the seed's order of checks, status writes, download,
//! verification, readiness wait, installer run and post-update proof.
//!
//! Every status write is a compare-and-swap on the owning update, so a runner
//! whose update the server cancelled, finalised or superseded stops at its
//! next write.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::installer::{run_installer, runner_secrets, InstallerRun};
use crate::release::{
    check_release, download_release_archive, normalized_release_track, release_track,
    release_transition_allowed, safe_extract, version_is_prerelease, ReleaseEndpoints,
    ReleaseManifest, ReleaseTrust,
};
use crate::server_health::{
    consume_auth_token_file, resolve_user_path, PostUpdateIdentity, ReadinessWait,
    RepairedHubIdentity, ServerHealth, StatusOwner,
};
use agents_common::{
    read_status_unlocked, update_status, utc_now, Error, Result, StatusLock,
    RUNNER_OWNED_ACTIVE_PHASES,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object, strip, token_hex,
};

use crate::cli::Args;
use crate::prepared::{verify_prepared_update, PreparedRelease};
use crate::team_hub::TeamHub;

/// `run_update`.
pub(crate) fn run_update(args: &Args) -> Result<()> {
    let status_path = resolve_user_path(&args.status_file)?;
    let public_key = resolve_user_path(&args.public_key)?;
    let track = normalized_release_track(Some(&args.track))?;
    let auth_token = consume_auth_token_file(args.auth_token_file.as_deref())?;
    let server_identity = strip(&args.expected_server_identity).to_string();
    if server_identity.is_empty() {
        return Err(Error::runtime(
            "managed update is missing the stable server identity",
        ));
    }
    let update_id = args.update_id.checked()?.to_string();
    let service_cgroup = args
        .expected_service_cgroup
        .as_deref()
        .map(strip)
        .filter(|cgroup| !cgroup.is_empty())
        .map(str::to_string);
    if service_cgroup
        .as_deref()
        .is_some_and(|cgroup| !is_service_cgroup(cgroup))
    {
        return Err(Error::runtime(
            "managed update has an invalid service cgroup",
        ));
    }
    let team_hub = TeamHub::validate(args)?;
    if team_hub.repair {
        team_hub.check_repair_admission(&status_path, &update_id, &server_identity)?;
    }
    let owner = StatusOwner {
        status_path: &status_path,
        update_id: &update_id,
    };
    cas(
        owner,
        json_object! {
            "phase" => "checking",
            "track" => track,
            "runner_pid" => std::process::id(),
            "heartbeat_at" => utc_now(),
            "message" => format!("Checking the signed {track} release manifest."),
        },
    )?;
    let expected_version = args
        .expected_version
        .as_deref()
        .map(strip)
        .filter(|version| !version.is_empty());
    let current_version = strip(args.current_version.as_deref().unwrap_or(""));
    let trust = ReleaseTrust::new(public_key, ReleaseEndpoints::from_env());
    let (manifest, prepared) = resolve_release(
        args,
        owner,
        &trust,
        track,
        expected_version,
        current_version,
    )?;
    let version = manifest.version().to_string();
    if expected_version.is_some_and(|expected| expected != version) {
        return Err(Error::runtime(format!(
            "resolved signed release is {version}, not {}",
            expected_version.unwrap_or_default()
        )));
    }
    if !current_version.is_empty() && !release_transition_allowed(current_version, &version, track)?
    {
        return Err(Error::runtime(format!(
            "resolved release {version} is not newer than installed version {current_version}; \
             managed updates only permit forward updates or an explicit beta-to-stable channel switch"
        )));
    }

    let workspace = TemporaryDirectory::create("agents-server-update-")?;
    let source = match &prepared {
        Some(prepared) => {
            cas(
                owner,
                json_object! {
                    "phase" => "verifying",
                    "target_version" => version.as_str(),
                    "message" => "Prepared runtime and signed release verified.",
                },
            )?;
            prepared.candidate.clone()
        }
        None => {
            cas(
                owner,
                json_object! {
                    "phase" => "downloading",
                    "track" => track,
                    "target_version" => version.as_str(),
                    "message" => format!("Downloading AgentsServer {version}."),
                },
            )?;
            let archive = download_release_archive(&manifest, workspace.path())?;
            cas(
                owner,
                json_object! {
                    "phase" => "verifying",
                    "message" => "Signature and archive checksum verified.",
                },
            )?;
            let npm_version = manifest.is_npm().then(|| manifest.version());
            let source = safe_extract(&archive, &workspace.path().join("extracted"), npm_version)?;
            let install = source.join("install.sh");
            std::fs::set_permissions(&install, std::fs::Permissions::from_mode(0o755))
                .map_err(|err| Error::from_io_path(&err, &install))?;
            source
        }
    };
    let arguments = installer_arguments(
        args,
        &manifest,
        prepared.as_ref(),
        &version,
        &update_id,
        &team_hub,
    );
    let health = ServerHealth::new(args.port.clone(), &auth_token);
    health.wait_for_idle(
        owner,
        &ReadinessWait::new(&server_identity, service_cgroup.is_some()),
    )?;
    cas(
        owner,
        json_object! {
            "phase" => "installing",
            "message" => format!("Installing AgentsServer {version} with rollback protection."),
        },
    )?;
    if let Some(prepared) = &prepared {
        cas(
            owner,
            json_object! {
                "_activation_recovery" => prepared.activation_intent(
                    &version,
                    &manifest,
                    &update_id,
                    &server_identity,
                )?,
            },
        )?;
    }
    let managed_update_id =
        (service_cgroup.is_some() || team_hub.repair).then(|| update_id.clone());
    let mut run = InstallerRun::new(
        source.join("install.sh"),
        arguments,
        &source,
        &status_path,
        &version,
    );
    run.expected_update_id = Some(update_id.clone());
    run.managed_update_id = managed_update_id;
    run.expected_service_cgroup = service_cgroup.clone();
    run.secrets = runner_secrets(&auth_token);
    run_installer(&run)?;

    let repair = team_hub.repair;
    let schema_two = manifest.is_npm();
    health.assert_post_update_identity(&PostUpdateIdentity {
        server_identity: server_identity.clone(),
        team_hub_id: team_hub.hub_id.clone().map(Json::from),
        team_hub_transport: team_hub
            .transport
            .clone()
            .filter(|_| !repair)
            .map(Json::from),
        team_hub_url: team_hub.url.clone().filter(|_| !repair).map(Json::from),
        team_hub_direct_ip_url: team_hub
            .direct_ip_url
            .clone()
            .filter(|_| !repair)
            .map(Json::from),
        server_version: schema_two.then(|| version.clone()),
        api_contract_version: if schema_two {
            manifest.api_contract_version()
        } else {
            None
        },
    })?;
    if repair {
        health.assert_repaired_team_hub_identity(&RepairedHubIdentity {
            server_identity: server_identity.clone(),
            transport: Json::from(team_hub.transport.clone().unwrap_or_default()),
            url: Json::from(team_hub.url.clone()),
            direct_ip_url: Json::from(team_hub.direct_ip_url.clone().unwrap_or_default()),
        })?;
    }
    // install.sh owns the Hub fence from here: it clears it on success and
    // restores the snapshot on failure. The runner clears only earlier failures.
    workspace.remove()?;
    cas(
        owner,
        json_object! {
            "phase" => "complete",
            "update_available" => false,
            "message" => format!("AgentsServer {version} is installed and healthy."),
            "track" => track,
            "installed_version" => version.as_str(),
            "heartbeat_at" => Json::Null,
            "elapsed_seconds" => Json::Null,
            "runner_pid" => Json::Null,
            "error_code" => Json::Null,
            "error_action" => Json::Null,
            "retryable" => Json::Null,
            "finished_at" => utc_now(),
        },
    )?;
    Ok(())
}

/// A status write only while this update still owns the row.
fn cas(owner: StatusOwner<'_>, changes: JsonObject) -> Result<()> {
    update_status(owner.status_path, Some(owner.update_id), changes).map(drop)
}

/// The signed manifest to install, from exactly one source: the prepared
/// receipt, the admitted npm descriptor, or the release host.
fn resolve_release(
    args: &Args,
    owner: StatusOwner<'_>,
    trust: &ReleaseTrust,
    track: &str,
    expected_version: Option<&str>,
    current_version: &str,
) -> Result<(ReleaseManifest, Option<PreparedRelease>)> {
    if let Some(receipt) = args
        .prepared_receipt
        .as_deref()
        .filter(|path| !path.as_os_str().is_empty())
    {
        let admitted = read_admitted(owner.status_path)?;
        if !admitted_by(&admitted, owner.update_id) {
            return Err(Error::runtime(
                "Prepared release is not owned by this update",
            ));
        }
        let digest = admitted
            .get("_prepared_update")
            .and_then(|prepared| prepared.get("receipt_sha256"))
            .unwrap_or(&Json::Null);
        if digest != &Json::from(args.prepared_receipt_sha256.clone()) {
            return Err(Error::runtime("Prepared release receipt digest changed"));
        }
        let verified = verify_prepared_update(&admitted, trust)?;
        let prepared = verified
            .prepared
            .filter(|prepared| prepared.receipt.as_os_str() == receipt.as_os_str());
        let Some(prepared) = prepared else {
            return Err(Error::runtime("Prepared release receipt path changed"));
        };
        match verified.manifest.document().get("track") {
            None => return Err(Error::value("'track'")),
            Some(signed) if signed != &Json::from(track) => {
                return Err(Error::runtime("Prepared release track changed"))
            }
            Some(_) => {}
        }
        return Ok((verified.manifest, Some(prepared)));
    }
    if args.npm_descriptor {
        let admitted = read_admitted(owner.status_path)?;
        if !admitted_by(&admitted, owner.update_id) {
            return Err(Error::runtime(
                "signed npm release is not owned by this update",
            ));
        }
        let manifest =
            trust.verify_npm_release_envelope(admitted.get("_npm_release"), expected_version)?;
        if manifest.document().get("track") != Some(&Json::from(track))
            || release_track(current_version) != track
        {
            return Err(Error::runtime(
                "automatic npm updates cannot change release channels",
            ));
        }
        return Ok((manifest, None));
    }
    let require_latest =
        track == "stable" && !current_version.is_empty() && version_is_prerelease(current_version);
    let manifest = check_release(trust, track, expected_version, require_latest)?;
    Ok((manifest, None))
}

/// The admitted row, read under the status lock.
fn read_admitted(status_path: &Path) -> Result<JsonObject> {
    let _lock = StatusLock::acquire(status_path)?;
    read_status_unlocked(status_path)
}

/// `admitted.get("update_id") == update_id and phase in RUNNER_OWNED_ACTIVE_PHASES`.
fn admitted_by(admitted: &JsonObject, update_id: &str) -> bool {
    admitted.get("update_id") == Some(&Json::from(update_id))
        && admitted
            .get("phase")
            .and_then(Json::as_str)
            .is_some_and(|phase| RUNNER_OWNED_ACTIVE_PHASES.contains(&phase))
}

/// install.sh's command line after the program, in the seed's order.
fn installer_arguments(
    args: &Args,
    manifest: &ReleaseManifest,
    prepared: Option<&PreparedRelease>,
    version: &str,
    update_id: &str,
    team_hub: &TeamHub,
) -> Vec<OsString> {
    // The identity stripped as `str.strip()` strips it, its bytes kept.
    let server_identity = OsStr::from_bytes(python_compat::strip_bytes(
        args.expected_server_identity_argument.as_bytes(),
    ));
    let mut arguments: Vec<OsString> = vec![
        "--non-interactive".into(),
        "--release-version".into(),
        version.into(),
        "--port".into(),
        args.port.to_string().into(),
        "--bind".into(),
        args.bind.clone(),
        "--expected-server-identity".into(),
        server_identity.to_os_string(),
    ];
    if let Some(prepared) = prepared {
        arguments.push("--activate-prepared".into());
        arguments.push(prepared.receipt.clone().into_os_string());
        arguments.push("--prepared-archive-sha256".into());
        arguments.push(manifest.archive_sha256().unwrap_or_default().into());
        arguments.push("--execution-mode".into());
        arguments.push("split".into());
    }
    if let Some(handoff) = args
        .execution_handoff_file
        .as_deref()
        .filter(|path| !path.as_os_str().is_empty())
    {
        arguments.push("--execution-handoff-file".into());
        arguments.push(handoff.as_os_str().to_owned());
    }
    if manifest.is_npm() || prepared.is_some() {
        arguments.push("--expected-api-contract".into());
        arguments.push(python_api_contract(manifest).into());
    }
    arguments.extend(
        team_hub
            .installer_arguments(update_id)
            .into_iter()
            .map(OsString::from),
    );
    arguments
}

/// `str(manifest["api_contract_version"])`.
fn python_api_contract(manifest: &ReleaseManifest) -> String {
    match manifest.document().get("api_contract_version") {
        Some(value) => python_compat::str_or_empty(value),
        None => String::new(),
    }
}

/// `/(?:[A-Za-z0-9_.@:-]+/)*[A-Za-z0-9_.@:-]+`: an absolute cgroup path
/// without empty components or a trailing slash.
fn is_service_cgroup(cgroup: &str) -> bool {
    let Some(rest) = cgroup.strip_prefix('/') else {
        return false;
    };
    rest.split('/').all(|component| {
        !component.is_empty()
            && component.bytes().all(|byte| {
                byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'@' | b':' | b'-')
            })
    })
}

/// `tempfile.TemporaryDirectory(prefix=...)`: a private directory under the
/// temporary root, removed with everything in it when the update ends.
struct TemporaryDirectory {
    path: PathBuf,
}

impl TemporaryDirectory {
    fn create(prefix: &str) -> Result<TemporaryDirectory> {
        let parent = std::env::temp_dir();
        loop {
            let path = parent.join(format!("{prefix}{}", token_hex(4)?));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TemporaryDirectory { path }),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(Error::from_io_path(&err, &path)),
            }
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the directory now, reporting a failure (the success path).
    fn remove(self) -> Result<()> {
        let result = remove_tree(&self.path);
        std::mem::forget(self);
        result
    }
}

impl Drop for TemporaryDirectory {
    fn drop(&mut self) {
        let _ = remove_tree(&self.path);
    }
}

/// Remove a tree, first making directories writable and enterable so that
/// restrictive modes from an archive cannot keep files behind.
fn remove_tree(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_owner_writable(path);
            std::fs::remove_dir_all(path).map_err(|err| Error::from_io_path(&err, path))
        }
    }
}

fn make_owner_writable(path: &Path) {
    let Ok(info) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !info.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode(info.permissions().mode() | 0o700),
    );
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            make_owner_writable(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_cgroups() {
        assert!(is_service_cgroup(
            "/user.slice/user-0.slice/user@0.service/app.slice/agents-server.service"
        ));
        assert!(is_service_cgroup("/a"));
        for bad in ["", "/", "a/b", "/a/", "//a", "/a b", "/a//b"] {
            assert!(!is_service_cgroup(bad), "{bad}");
        }
    }
}

//! `run_update`: one managed update from the admitted `starting` row to the
//! `complete` row, in the original's order of checks, status writes, download,
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
    check_release, download_release_archive, release_track, release_transition_allowed,
    safe_extract, version_is_prerelease, ReleaseEndpoints, ReleaseManifest, ReleaseTrust,
};
use crate::server_health::{
    consume_auth_token_file, resolve_user_path, PostUpdateIdentity, ReadinessWait,
    RepairedHubIdentity, ServerHealth, StatusOwner,
};
use agents_common::{
    read_status_unlocked, update_status, utc_now, Error, Result, StatusLock, StatusPhase,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object, strip, token_hex,
};

use crate::plan::{Plan, ReleaseSource, UpdateRequest};
use crate::prepared::{verify_prepared_update, PreparedRelease};
use crate::team_hub::TeamHub;

/// `run_update`: admit the update, resolve and stage the signed release,
/// run install.sh once the server is idle, prove the result and publish
/// `complete`. Each phase is a function below, in the original's order.
pub(crate) fn run_update(plan: &Plan, request: &UpdateRequest) -> Result<()> {
    let admitted = Admitted::check(plan, request)?;
    let owner = admitted.owner();
    let track = request.track;
    cas(
        owner,
        json_object! {
            "phase" => StatusPhase::Checking,
            "track" => track,
            "runner_pid" => std::process::id(),
            "heartbeat_at" => utc_now(),
            "message" => format!("Checking the signed {track} release manifest."),
        },
    )?;
    let target = resolve_target(request, owner, &admitted.public_key)?;
    let workspace = TemporaryDirectory::create("agents-server-update-")?;
    let source = stage_source(owner, track, &target, &workspace)?;
    let health = ServerHealth::new(plan.server.port.clone(), &admitted.auth_token);
    install(plan, &admitted, &target, &source, &health)?;
    prove_installed(&admitted, &target, &health)?;
    // install.sh owns the Hub fence from here: it clears it on success and
    // restores the snapshot on failure. The runner clears only earlier failures.
    workspace.remove()?;
    let version = target.version.as_str();
    cas(
        owner,
        json_object! {
            "phase" => StatusPhase::Complete,
            "update_available" => false,
            "message" => format!("AgentsServer {version} is installed and healthy."),
            "track" => track,
            "installed_version" => version,
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

/// The update as admitted: the plan's values resolved and checked before
/// the first status write, in the original's order.
struct Admitted {
    status_path: PathBuf,
    public_key: PathBuf,
    auth_token: String,
    server_identity: String,
    update_id: String,
    service_cgroup: Option<String>,
    team_hub: TeamHub,
}

impl Admitted {
    fn check(plan: &Plan, request: &UpdateRequest) -> Result<Admitted> {
        let status_path = resolve_user_path(&plan.status_file)?;
        let public_key = resolve_user_path(&request.public_key)?;
        let auth_token = consume_auth_token_file(plan.auth_token_file.as_deref())?;
        let server_identity = strip(&plan.server.identity).to_string();
        if server_identity.is_empty() {
            return Err(Error::runtime(
                "managed update is missing the stable server identity",
            ));
        }
        let update_id = plan.update_id.checked()?.to_string();
        let service_cgroup = plan
            .server
            .service_cgroup
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
        let team_hub = TeamHub::validate(&plan.team_hub, &plan.server.port)?;
        if team_hub.repair {
            team_hub.check_repair_admission(&status_path, &update_id, &server_identity)?;
        }
        Ok(Admitted {
            status_path,
            public_key,
            auth_token,
            server_identity,
            update_id,
            service_cgroup,
            team_hub,
        })
    }

    fn owner(&self) -> StatusOwner<'_> {
        StatusOwner {
            status_path: &self.status_path,
            update_id: &self.update_id,
        }
    }
}

/// The release to install: its verified manifest, the prepared release it
/// came from (if any) and its version.
struct Target {
    manifest: ReleaseManifest,
    prepared: Option<PreparedRelease>,
    version: String,
}

/// Resolves the signed manifest and refuses a version the update may not
/// install (not the expected one, or not forward on its track).
fn resolve_target(
    request: &UpdateRequest,
    owner: StatusOwner<'_>,
    public_key: &Path,
) -> Result<Target> {
    let track = request.track;
    let expected_version = request
        .expected_version
        .as_deref()
        .map(strip)
        .filter(|version| !version.is_empty());
    let current_version = strip(request.current_version.as_deref().unwrap_or(""));
    let trust = ReleaseTrust::new(public_key, ReleaseEndpoints::from_env());
    let (manifest, prepared) = resolve_release(
        &request.source,
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
    Ok(Target {
        manifest,
        prepared,
        version,
    })
}

/// The release tree install.sh runs from: the prepared candidate, or the
/// downloaded archive verified and extracted into `workspace`.
fn stage_source(
    owner: StatusOwner<'_>,
    track: &str,
    target: &Target,
    workspace: &TemporaryDirectory,
) -> Result<PathBuf> {
    let version = target.version.as_str();
    if let Some(prepared) = &target.prepared {
        cas(
            owner,
            json_object! {
                "phase" => StatusPhase::Verifying,
                "target_version" => version,
                "message" => "Prepared runtime and signed release verified.",
            },
        )?;
        return Ok(prepared.candidate.clone());
    }
    let manifest = &target.manifest;
    cas(
        owner,
        json_object! {
            "phase" => StatusPhase::Downloading,
            "track" => track,
            "target_version" => version,
            "message" => format!("Downloading AgentsServer {version}."),
        },
    )?;
    let archive = download_release_archive(manifest, workspace.path())?;
    cas(
        owner,
        json_object! {
            "phase" => StatusPhase::Verifying,
            "message" => "Signature and archive checksum verified.",
        },
    )?;
    let npm_version = manifest.is_npm().then(|| manifest.version());
    let source = safe_extract(&archive, &workspace.path().join("extracted"), npm_version)?;
    let install = source.join("install.sh");
    std::fs::set_permissions(&install, std::fs::Permissions::from_mode(0o755))
        .map_err(|err| Error::from_io_path(&err, &install))?;
    Ok(source)
}
/// Waits until the server is idle, publishes `installing` (and, for a
/// prepared release, the durable recovery intent first), then runs
/// install.sh under the row.
fn install(
    plan: &Plan,
    admitted: &Admitted,
    target: &Target,
    source: &Path,
    health: &ServerHealth,
) -> Result<()> {
    let owner = admitted.owner();
    let version = target.version.as_str();
    let update_id = admitted.update_id.as_str();
    let arguments = installer_arguments(
        plan,
        &target.manifest,
        target.prepared.as_ref(),
        version,
        update_id,
        &admitted.team_hub,
    );
    health.wait_for_idle(
        owner,
        &ReadinessWait::new(&admitted.server_identity, admitted.service_cgroup.is_some()),
    )?;
    cas(
        owner,
        json_object! {
            "phase" => StatusPhase::Installing,
            "message" => format!("Installing AgentsServer {version} with rollback protection."),
        },
    )?;
    if let Some(prepared) = &target.prepared {
        cas(
            owner,
            json_object! {
                "_activation_recovery" => prepared.activation_intent(
                    version,
                    &target.manifest,
                    update_id,
                    &admitted.server_identity,
                )?,
            },
        )?;
    }
    let managed_update_id = (admitted.service_cgroup.is_some() || admitted.team_hub.repair)
        .then(|| update_id.to_string());
    let mut run = InstallerRun::new(
        source.join("install.sh"),
        arguments,
        source,
        &admitted.status_path,
        version,
    );
    run.expected_update_id = Some(update_id.to_string());
    run.managed_update_id = managed_update_id;
    run.expected_service_cgroup = admitted.service_cgroup.clone();
    run.secrets = runner_secrets(&admitted.auth_token);
    run_installer(&run).map(drop)
}

/// Proves the server that came back is the expected one on the new release
/// (and, for a repaired Team Hub host, that its Hub is the repaired one).
fn prove_installed(admitted: &Admitted, target: &Target, health: &ServerHealth) -> Result<()> {
    let team_hub = &admitted.team_hub;
    let repair = team_hub.repair;
    let schema_two = target.manifest.is_npm();
    let unless_repair = |value: &Option<String>| value.clone().filter(|_| !repair).map(Json::from);
    health.assert_post_update_identity(&PostUpdateIdentity {
        server_identity: admitted.server_identity.clone(),
        team_hub_id: team_hub.hub_id.clone().map(Json::from),
        team_hub_transport: unless_repair(&team_hub.transport),
        team_hub_url: unless_repair(&team_hub.url),
        team_hub_direct_ip_url: unless_repair(&team_hub.direct_ip_url),
        server_version: schema_two.then(|| target.version.clone()),
        api_contract_version: if schema_two {
            target.manifest.api_contract_version()
        } else {
            None
        },
    })?;
    if repair {
        health.assert_repaired_team_hub_identity(&RepairedHubIdentity {
            server_identity: admitted.server_identity.clone(),
            transport: Json::from(team_hub.transport.clone().unwrap_or_default()),
            url: Json::from(team_hub.url.clone()),
            direct_ip_url: Json::from(team_hub.direct_ip_url.clone().unwrap_or_default()),
        })?;
    }
    Ok(())
}

/// A status write only while this update still owns the row.
fn cas(owner: StatusOwner<'_>, changes: JsonObject) -> Result<()> {
    update_status(owner.status_path, Some(owner.update_id), changes).map(drop)
}

/// The signed manifest to install, from exactly one source: the prepared
/// receipt, the admitted npm descriptor, or the release host.
fn resolve_release(
    source: &ReleaseSource,
    owner: StatusOwner<'_>,
    trust: &ReleaseTrust,
    track: &str,
    expected_version: Option<&str>,
    current_version: &str,
) -> Result<(ReleaseManifest, Option<PreparedRelease>)> {
    if let ReleaseSource::Prepared {
        receipt,
        receipt_sha256,
    } = source
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
        if digest != &Json::from(receipt_sha256.clone()) {
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
    if *source == ReleaseSource::NpmDescriptor {
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
        && StatusPhase::runner_owned_value(admitted.get("phase"))
}

/// install.sh's command line after the program, in the original's order.
fn installer_arguments(
    plan: &Plan,
    manifest: &ReleaseManifest,
    prepared: Option<&PreparedRelease>,
    version: &str,
    update_id: &str,
    team_hub: &TeamHub,
) -> Vec<OsString> {
    // The identity stripped as `str.strip()` strips it, its bytes kept.
    let server_identity = OsStr::from_bytes(python_compat::strip_bytes(
        plan.server.identity_argument.as_bytes(),
    ));
    let mut arguments: Vec<OsString> = vec![
        "--non-interactive".into(),
        "--release-version".into(),
        version.into(),
        "--port".into(),
        plan.server.port.to_string().into(),
        "--bind".into(),
        plan.server.bind.clone(),
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
    if let Some(handoff) = plan.handoff_file() {
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

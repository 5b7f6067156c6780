//! Admission before the installer stops the incumbent (`preflight`, `stop`):
//! a running split worker must hold this activation's sealed lease; a running
//! legacy monolith must be proven idle inside the exact admitted managed
//! update, and an abandoned split receipt it left behind must be provably
//! dead. For a legacy update the admitted recovery intent is then recorded
//! in `server-update.json`.

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::legacy_runner::{
    verify_legacy_runner, LegacyRunnerClaim, LegacyRunnerProbe, SystemLegacyProbe,
};
use agents_common::{
    activation_intent, active_worker_release, entry_present, normalize_path, owned_directory,
    read_file, read_private_file, update_status_unlocked, ActivationManifest, Error,
    ExecutionLayout, Platform, PlatformName, Result, Role, StatusLock, StatusPhase, WorkerControl,
    ACTIVATION_CONTROL_LIMIT, PROTOCOL_VERSION,
};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    path::pure_path,
    truthy,
};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags, Stat};

use crate::cli::Args;
use crate::context::parent_of_process;
use crate::native::{Native, Snapshots};
use crate::retired_intent::require_retired_legacy_intent;

/// Limit of the authenticated health and update bodies install.sh stores.
const BODY_LIMIT: u64 = 1024 * 1024;

/// What the stop proof needs from the journal (or, at preflight, from the
/// admitted handoff before any journal exists).
pub(crate) struct StopContext {
    /// The candidate release (`value["release_dir"]`).
    pub release_dir: String,
    /// `value["execution"]["operation_id"]`.
    pub operation_id: Json,
    /// `value["execution"]["handoff"]`.
    pub handoff: Json,
}

impl StopContext {
    /// The stop context of a journal.
    pub(crate) fn of(value: &ActivationManifest) -> StopContext {
        StopContext {
            release_dir: value.text("release_dir").to_string(),
            operation_id: value.execution_field("operation_id").clone(),
            handoff: value.execution_field("handoff").clone(),
        }
    }
}

/// A private (0600, ours, single-link) JSON control file, bounded by
/// `maximum`: `json.loads(_read_private(path, maximum=...))`.
fn private_json(path: &Path, maximum: u64) -> Result<Json> {
    Ok(parse_json(&read_private_file(path, maximum)?)?)
}

/// `verify_stop(args, value, services, control)`: nothing to prove unless the
/// worker role runs.
pub(crate) fn verify_stop(
    args: &Args,
    layout: &ExecutionLayout,
    value: &StopContext,
    services: &dyn Native,
) -> Result<()> {
    let before = services.role_snapshot(Role::Worker)?;
    if before.get("state") != Some(&Json::from("running")) {
        return Ok(());
    }
    legacy_process(args, layout, services, &mut |legacy| {
        prove_stop(args, value, services, layout, &before, legacy)
    })
}

/// Proves that stopping the worker is safe: the sealed handoff or admission
/// still names this operation and no legacy updater is mid-run. Ports
/// `_verify_stop`.
fn prove_stop(
    args: &Args,
    value: &StopContext,
    services: &dyn Native,
    layout: &ExecutionLayout,
    before: &JsonObject,
    legacy: bool,
) -> Result<()> {
    let pid = |object: &JsonObject| object.get("pid").cloned().unwrap_or(Json::Null);
    if !legacy {
        let snapshots = Snapshots(services);
        let control = WorkerControl::new().services(&snapshots);
        let (record, status) = control.status(layout)?;
        let lease = status.get("lease").and_then(Json::as_object);
        let held = lease.is_some_and(|lease| {
            lease.get("operation_id") == Some(&value.operation_id)
                && lease.get("sealed") == Some(&Json::Bool(true))
        });
        if pid(&record) != pid(before) || !held {
            return Err(Error::runtime(
                "running worker has no exact sealed installer handoff",
            ));
        }
        let lease = lease.expect("held implies a lease");
        // The old epoch must match the server-admitted handoff; a candidate
        // epoch holds its own sealed startup lease from this journal.
        if let Some(handoff) = value
            .handoff
            .as_object()
            .filter(|handoff| !handoff.is_empty())
        {
            let candidate_epoch =
                record.get("release_root") == Some(&Json::from(value.release_dir.as_str()));
            if !candidate_epoch
                && (record.get("instance_id") != handoff.get("worker_instance_id")
                    || lease.get("lease_id") != handoff.get("lease_id"))
            {
                return Err(Error::runtime(
                    "retiring worker identity changed after admission",
                ));
            }
        }
    } else {
        prove_legacy_idle(args, layout, before)?;
    }
    if pid(&services.role_snapshot(Role::Worker)?) != pid(before) {
        return Err(Error::runtime(
            "service process changed before installer stop",
        ));
    }
    Ok(())
}

/// The legacy branch of `_verify_stop`: the monolith is idle inside the
/// exact managed update the server admitted.
fn prove_legacy_idle(args: &Args, layout: &ExecutionLayout, before: &JsonObject) -> Result<()> {
    if args.health_file.as_os_str().is_empty() {
        return Err(Error::runtime(
            "running monolith requires authenticated managed idle handoff",
        ));
    }
    let health = private_json(&args.health_file, BODY_LIMIT)?;
    let status = private_json(
        &layout.state_root.join("admin/server-update.json"),
        ACTIVATION_CONTROL_LIMIT,
    )?;
    if args.update_file.as_os_str().is_empty() {
        return Err(Error::runtime(
            "legacy admission requires native authenticated update status",
        ));
    }
    let admitted = private_json(&args.update_file, BODY_LIMIT)?;
    let projected = health.get("server_update");
    let queued = match health.get("update_blocking_queued_count") {
        Some(count) if !count.is_null() => Some(count.clone()),
        _ => queued_total(&health)?,
    };
    let server_instance = health.get("server_instance_id").filter(|id| truthy(id));
    let phase_active = |value: &Json| StatusPhase::runner_owned_value(value.get("phase"));
    let status_update = status.get("update_id").cloned().unwrap_or(Json::Null);
    let refused = !phase_active(&status)
        || admitted.as_object().is_none()
        || !phase_active(&admitted)
        || admitted.get("update_id").cloned().unwrap_or(Json::Null) != status_update
        || admitted.get("server_identity") != health.get("server_identity")
        || server_instance.is_some_and(|id| admitted.get("server_instance_id") != Some(id))
        || projected.is_some_and(|projected| {
            !projected.is_null()
                && (projected.as_object().is_none()
                    || projected.get("update_id").cloned().unwrap_or(Json::Null) != status_update)
        })
        || Json::from(admitted_update_id(args, &status)?) != status_update
        || health.get("active_count").and_then(Json::as_int) != Some(0)
        || queued.as_ref().and_then(Json::as_int) != Some(0)
        || Json::from(args.expected_native_pid) != before.get("pid").cloned().unwrap_or(Json::Null)
        || (!args.expected_server_identity.is_empty()
            && health.get("server_identity")
                != Some(&Json::from(args.expected_server_identity.as_str())));
    if refused {
        return Err(Error::runtime(
            "running monolith is not in the exact admitted idle update",
        ));
    }
    let cgroup = health.get("update_service_cgroup");
    let safe = cgroup.and_then(|cgroup| cgroup.get("safe")) == Some(&Json::Bool(true))
        && cgroup
            .and_then(|cgroup| cgroup.get("unknown_descendant_count"))
            .and_then(Json::as_int)
            == Some(0);
    if !safe {
        return Err(Error::runtime(
            "monolith process ownership is not safe for handoff",
        ));
    }
    Ok(())
}

/// `sum(health.get("queued", {}).values())`: `None` when it is not an int
/// (Python would either raise or produce a float, which fails the check).
fn queued_total(health: &Json) -> Result<Option<Json>> {
    let queued = match health.get("queued") {
        None => return Ok(Some(Json::from(0))),
        Some(Json::Object(queued)) => queued,
        Some(_) => {
            return Err(Error::runtime(
                "running monolith is not in the exact admitted idle update",
            ))
        }
    };
    let mut total: i128 = 0;
    for value in queued.values() {
        match value {
            Json::Int(count) => total += count,
            Json::Bool(flag) => total += i128::from(*flag),
            _ => return Ok(None),
        }
    }
    Ok(Some(Json::from(total)))
}

/// `admitted_update_id(args, status)`: the managed update this installer
/// runs for, proven by the explicit `--managed-update-id` or by descent from
/// the admitted runner process.
pub(crate) fn admitted_update_id(args: &Args, status: &Json) -> Result<String> {
    admitted_update_id_with(args, status, &SystemLegacyProbe)
}

/// [`admitted_update_id`] with the kernel and tmux of an old macOS runner
/// read through `probe`.
fn admitted_update_id_with(
    args: &Args,
    status: &Json,
    probe: &dyn LegacyRunnerProbe,
) -> Result<String> {
    let identifier = status.get("update_id").cloned().unwrap_or(Json::Null);
    if !args.managed_update_id.is_empty() {
        if identifier != Json::from(args.managed_update_id.as_str()) {
            return Err(Error::runtime(
                "installer update identity differs from admitted status",
            ));
        }
        return Ok(args.managed_update_id.clone());
    }
    let hex_id = python_str(&identifier).filter(|text| is_hex32(text));
    if args
        .platform
        .as_ref()
        .is_some_and(|platform| *platform == Platform::Darwin)
        && status.get("runner_pid").is_none()
        && hex_id.is_some()
    {
        // Pre-PID legacy runners require their full native process/session
        // proof; a supplied but invalid runner identity never gets here.
        return verify_legacy_runner(&legacy_claim(args), status, probe);
    }
    let runner = status.get("runner_pid").and_then(Json::as_int);
    let (Some(runner), Some(identifier)) = (runner.filter(|pid| *pid > 1), hex_id) else {
        return Err(Error::runtime(
            "legacy installer has no admitted runner authority",
        ));
    };
    let mut parent =
        i128::from(rustix::process::getppid().map_or(0, |pid| pid.as_raw_nonzero().get()));
    for _ in 0..10 {
        if parent == runner {
            return Ok(identifier);
        }
        if parent <= 1 {
            break;
        }
        parent = parent_of_process(parent)?;
    }
    Err(Error::runtime(
        "legacy installer is not descended from the admitted updater",
    ))
}

/// The arguments `verify_legacy_runner` reads, as `Path(...)` sees them.
fn legacy_claim(args: &Args) -> LegacyRunnerClaim {
    let path = |value: &Path| pure_path(value);
    LegacyRunnerClaim {
        platform: args.platform.as_ref().and_then(PlatformName::supported),
        managed_update_id: args.managed_update_id.clone(),
        root: path(&args.root),
        state_root: path(args.state_root.as_deref().unwrap_or(Path::new(""))),
        health_file: path(&args.health_file),
        update_file: path(&args.update_file),
        release_version: args.release_version.clone(),
        expected_server_identity: args.expected_server_identity.clone(),
        expected_native_pid: args.expected_native_pid,
        bind: args.bind.clone(),
        port: args.port,
    }
}

/// `str(value)` for the values an update id can hold.
fn python_str(value: &Json) -> Option<String> {
    match value {
        Json::Str(text) => Some(text.clone()),
        Json::Int(number) => Some(number.to_string()),
        _ => None,
    }
}

fn is_hex32(text: &str) -> bool {
    text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `legacy_process(...)`: run `body(legacy)` knowing whether the incumbent
/// is a legacy monolith. An abandoned split receipt counts as legacy only
/// when its worker is dead, its lease is unheld (this process holds it for
/// the duration) and authenticated legacy health names no split components;
/// all of that is re-proved after the body. Nothing is removed.
pub(crate) fn legacy_process(
    args: &Args,
    layout: &ExecutionLayout,
    services: &dyn Native,
    body: &mut dyn FnMut(bool) -> Result<()>,
) -> Result<()> {
    if active_worker_release(&layout.install_root)?.is_some() {
        return body(false);
    }
    let runtime_dir = layout.runtime_dir();
    let path = runtime_dir.join("worker.json");
    let before = services.role_snapshot(Role::Worker)?;
    if !entry_present(&path)? {
        body(true)?;
        if entry_present(&path)? || active_worker_release(&layout.install_root)?.is_some() {
            return Err(Error::runtime(
                "execution ownership changed during legacy admission",
            ));
        }
        return Ok(());
    }
    if args.health_file.as_os_str().is_empty() {
        return Err(Error::runtime(
            "stale worker receipt requires authenticated legacy health",
        ));
    }
    let health_bytes = read_private_file(&args.health_file, BODY_LIMIT)?;
    let health = parse_json(&health_bytes)?;
    let associated = health.as_object().is_some_and(|health| {
        ["execution_service", "gateway"]
            .iter()
            .all(|key| health.get(key).is_none_or(Json::is_null))
    }) && Json::from(args.expected_native_pid)
        == before.get("pid").cloned().unwrap_or(Json::Null)
        && !args.expected_server_identity.is_empty()
        && health.get("server_identity")
            == Some(&Json::from(args.expected_server_identity.as_str()));
    if !associated {
        return Err(Error::runtime(
            "worker receipt is not associated with authenticated legacy health",
        ));
    }
    normalize_path(&runtime_dir)?;
    owned_directory(&runtime_dir, true)?;
    let directory = stat_following(&runtime_dir)?;
    let snapshots = Snapshots(services);
    let control = WorkerControl::new().services(&snapshots);
    let record = control.worker_record(layout)?;
    check_abandoned_record(&record, layout)?;
    let (receipt_bytes, _mode) = read_file(&path, true)?;
    let receipt = lstat(&path)?;
    let lock_path = runtime_dir.join("worker.lock");
    let lock_fd = rustix::fs::open(
        &lock_path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, &lock_path))?;
    let lock = rustix::fs::fstat(&lock_fd)?;
    if FileType::from_raw_mode(lock.st_mode) != FileType::RegularFile
        || lock.st_uid != rustix::process::getuid().as_raw()
        || lock.st_nlink != 1
        || lock.st_mode & 0o7777 != 0o600
        || lock.st_size != 0
    {
        return Err(Error::runtime(
            "abandoned worker lock is not an owned private lease",
        ));
    }
    rustix::fs::flock(&lock_fd, FlockOperation::NonBlockingLockExclusive)?;
    let proof = Abandoned {
        args,
        layout,
        services,
        control: &control,
        runtime_dir: &runtime_dir,
        path: &path,
        lock_path: &lock_path,
        directory,
        receipt,
        lock,
        receipt_bytes,
        record,
        health_bytes,
        before,
        _lock_fd: lock_fd,
    };
    proof.recheck()?;
    body(true)?;
    proof.recheck()
}

/// The receipt checks that make an abandoned `worker.json` this install's.
fn check_abandoned_record(record: &JsonObject, layout: &ExecutionLayout) -> Result<()> {
    let int = |key: &str| record.get(key).and_then(Json::as_int);
    let valid = int("schema") == Some(1)
        && int("protocol") == Some(i128::from(PROTOCOL_VERSION))
        && int("pid").is_some_and(|pid| pid > 1)
        && record
            .get("instance_id")
            .and_then(python_str)
            .is_some_and(|id| is_hex32(&id))
        && record
            .get("version")
            .and_then(Json::as_str)
            .is_some_and(|version| !version.is_empty())
        && record.get("public_bind") == Some(&Json::from(layout.bind.as_str()))
        && int("public_port").is_some_and(|port| Json::from(port) == layout.port);
    if !valid {
        return Err(Error::runtime("abandoned worker receipt is invalid"));
    }
    Ok(())
}

/// Everything `legacy_process` pinned about an abandoned receipt.
struct Abandoned<'a> {
    args: &'a Args,
    layout: &'a ExecutionLayout,
    services: &'a dyn Native,
    control: &'a WorkerControl<'a>,
    runtime_dir: &'a Path,
    path: &'a Path,
    lock_path: &'a Path,
    directory: Stat,
    receipt: Stat,
    lock: Stat,
    receipt_bytes: Vec<u8>,
    record: JsonObject,
    health_bytes: Vec<u8>,
    before: JsonObject,
    /// Holds the worker lease (flock) until the proof is dropped.
    _lock_fd: OwnedFd,
}

impl Abandoned<'_> {
    fn recheck(&self) -> Result<()> {
        normalize_path(self.runtime_dir)?;
        owned_directory(self.runtime_dir, true)?;
        for (target, expected) in [
            (self.runtime_dir, &self.directory),
            (self.path, &self.receipt),
            (self.lock_path, &self.lock),
        ] {
            if shape(&lstat(target)?) != shape(expected) {
                return Err(Error::runtime(
                    "abandoned worker ownership changed during admission",
                ));
            }
        }
        let changed = read_file(self.path, true)?.0 != self.receipt_bytes
            || self.control.worker_record(self.layout)? != self.record
            || read_private_file(&self.args.health_file, BODY_LIMIT)? != self.health_bytes
            || active_worker_release(&self.layout.install_root)?.is_some()
            || self.services.role_snapshot(Role::Worker)? != self.before;
        if changed {
            return Err(Error::runtime(
                "legacy worker classification changed during admission",
            ));
        }
        let pid = self.record.get("pid").and_then(Json::as_int).unwrap_or(0);
        let target = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        match target.map(rustix::process::test_kill_process) {
            Some(Err(rustix::io::Errno::SRCH)) => Ok(()),
            Some(Err(errno)) => Err(errno.into()),
            _ => Err(Error::runtime("abandoned worker PID is still alive")),
        }
    }
}

/// `(st_dev, st_ino, st_mode, st_uid, st_nlink, st_size)`; the casts are
/// no-ops on Linux but not on every platform's `stat`.
#[allow(clippy::unnecessary_cast)]
fn shape(info: &Stat) -> (u64, u64, u32, u32, u64, i64) {
    (
        info.st_dev as u64,
        info.st_ino as u64,
        info.st_mode as u32,
        info.st_uid,
        info.st_nlink as u64,
        info.st_size as i64,
    )
}

fn lstat(path: &Path) -> Result<Stat> {
    rustix::fs::lstat(path).map_err(|errno| Error::from_errno(errno, path))
}

fn stat_following(path: &Path) -> Result<Stat> {
    rustix::fs::stat(path).map_err(|errno| Error::from_errno(errno, path))
}

/// `seed_legacy_recovery(args, services)`: after a legacy preflight, record
/// the admitted recovery intent for the managed update.
pub(crate) fn seed_legacy_recovery(
    args: &Args,
    layout: &ExecutionLayout,
    services: &dyn Native,
) -> Result<()> {
    if services.role_snapshot(Role::Worker)?.get("state") != Some(&Json::from("running")) {
        return Ok(());
    }
    legacy_process(args, layout, services, &mut |legacy| {
        if legacy {
            publish_recovery_intent(args, layout)
        } else {
            Ok(())
        }
    })
}

/// Records the admitted recovery intent of a legacy (monolith) preflight in
/// the status row, so an interrupted managed update can be recovered. Ports
/// `_seed_legacy_recovery(args, layout)`.
fn publish_recovery_intent(args: &Args, layout: &ExecutionLayout) -> Result<()> {
    let status_path = layout.state_root.join("admin/server-update.json");
    let _lock = StatusLock::acquire(&status_path)?;
    let status = private_json(&status_path, ACTIVATION_CONTROL_LIMIT)?;
    let update_id = admitted_update_id(args, &status)?;
    let admitted = private_json(&args.update_file, ACTIVATION_CONTROL_LIMIT)?;
    let phase_owned = StatusPhase::runner_owned_value(status.get("phase"));
    if !phase_owned
        || admitted.get("update_id") != Some(&Json::from(update_id.as_str()))
        || status.get("target_version") != Some(&Json::from(args.release_version.as_str()))
    {
        return Err(Error::runtime(
            "legacy admission changed before recovery intent publication",
        ));
    }
    let intent = activation_intent(
        &layout.install_root,
        &args.candidate_source,
        &args.release_version,
        args.api_contract,
        &update_id,
        &args.expected_server_identity,
    )?;
    let Json::Object(status) = status else {
        return Err(Error::runtime(
            "legacy admission changed before recovery intent publication",
        ));
    };
    if let Some(previous) = status
        .get("_activation_recovery")
        .filter(|previous| !previous.is_null())
    {
        if previous != &Json::Object(intent.clone()) {
            require_retired_legacy_intent(layout, previous, &intent)?;
        }
    }
    let mut changes = JsonObject::new();
    changes.insert("_activation_recovery", intent);
    update_status_unlocked(&status_path, &status, changes)?;
    Ok(())
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;

//! `update_handoff`: release only an unchanged, idle split-worker handoff
//! before the installer runs.
//!
//! A managed update seals the worker's maintenance admission (the "handoff")
//! before it prepares the installer. When the update fails before the
//! installer entered, the update runner calls [`release_existing_handoff`],
//! and the server later retries a release whose reply was lost with
//! [`retry_failed_handoff`]. Both prove, under the installation lock, that the
//! native worker, its receipt, its authenticated callback identity and its
//! exact sealed lease are still the ones the handoff names, re-read all of it
//! after the health request, and only then send the single `release`. They
//! never stop processes, change update status or delete evidence.
//!
//! The handoff reader and the installed-layout check are shared with
//! `execution_activation` and the uninstaller: [`read_update_handoff`],
//! [`installed_layout`], [`no_activation`].

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::activation::read_update_handoff;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::{normalize_path, owned_directory, read_file};
use crate::install_lock::InstallationLock;
use crate::layout::ExecutionLayout;
use crate::services::NativeServices;
use crate::uninstall_marker::{
    entry_present, installed_layout, no_activation, UNINSTALL_INTENT_NAME,
};
use crate::worker_control::{ServiceSnapshot, WorkerControl};
use python_compat::{
    is_lower_hex,
    json::{parse_json, Json, JsonObject},
    os::current_uid,
    uuid::python_uuid,
};

/// The only `error_code` of a failed update whose handoff may be retried.
const RELEASE_FAILED_CODE: &str = "server_update_handoff_release_failed";

/// What a successful release reports (the original's result dict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffRelease {
    /// True when the worker no longer held the lease, so no release was sent
    /// (a retry after a lost reply, or an unheld replacement worker).
    pub already_released: bool,
    /// The handoff's maintenance operation.
    pub operation_id: String,
    /// The worker instance that was released (or that holds no lease).
    pub worker_instance_id: String,
}

impl HandoffRelease {
    /// `{"released": true, "already_released", "operation_id",
    /// "worker_instance_id"}`, as callers print or store it.
    pub fn to_json(&self) -> Json {
        let mut object = JsonObject::new();
        object.insert("released", true);
        object.insert("already_released", self.already_released);
        object.insert("operation_id", self.operation_id.as_str());
        object.insert("worker_instance_id", self.worker_instance_id.as_str());
        Json::Object(object)
    }
}

/// Releases the sealed handoff in `handoff_file` once, with the epoch,
/// operation and lease compared before and after the health request; every
/// uncertain result is an error.
///
/// The caller must already have marked only its own update failed and
/// settled provider teardown. `control` and `services` replace the real
/// worker client and service manager (tests); `None` uses the real ones.
pub fn release_existing_handoff(
    root: &Path,
    handoff_file: &Path,
    control: Option<&WorkerControl>,
    services: Option<&dyn ServiceSnapshot>,
) -> Result<HandoffRelease> {
    release_handoff(root, handoff_file, control, services, None)
}

/// Finishes only the exact saved failed handoff cleanup recorded in
/// `status_path`, including a release whose reply was lost.
///
/// `expected_status` is the caller's snapshot of that status (a JSON
/// object); the file must still equal it, before and after the requests, and
/// own this handoff. The caller holds its update operation lock but not the
/// status flock, and compares-and-swaps its status after success. A worker
/// that no longer holds the lease is acknowledged without a request; an
/// unheld replacement worker must also keep exclusive state ownership.
pub fn retry_failed_handoff(
    root: &Path,
    status_path: &Path,
    expected_status: &Json,
    control: Option<&WorkerControl>,
    services: Option<&dyn ServiceSnapshot>,
) -> Result<HandoffRelease> {
    let root = normalize_path(root)?;
    let status_path = normalize_path(status_path)?;
    // Our own copy freezes the caller's snapshot across the requests.
    let Json::Object(expected) = expected_status.clone() else {
        return Err(Error::value("failed handoff status is invalid"));
    };
    fn hex_id(value: &Json) -> Option<&str> {
        value.as_str().filter(|text| is_lower_hex(text, 32))
    }
    let update_id = hex_id(field(&expected, "update_id"));
    let preparation = field(&expected, "preparation_id");
    let preparation_id = if python_compat::truthy(preparation) {
        hex_id(preparation)
    } else {
        update_id
    };
    let (Some(update_id), Some(preparation_id)) = (update_id, preparation_id) else {
        return Err(not_failed_handoff());
    };
    if field(&expected, "phase") != &Json::from("failed")
        || field(&expected, "error_code") != &Json::from(RELEASE_FAILED_CODE)
        || !matches!(field(&expected, "retryable"), Json::Bool(true))
        || !field(&expected, "runner_pid").is_null()
    {
        return Err(not_failed_handoff());
    }
    let handoff_file = root
        .join(".update-preparations")
        .join(preparation_id)
        .join(format!("handoff-{update_id}.json"));
    let operation_id = python_uuid(update_id)?;
    let expected_status = Json::Object(expected.clone());
    let verify_status = |layout: &ExecutionLayout, handoff: &Handoff| -> Result<()> {
        if status_path != layout.state_root.join("admin/server-update.json") {
            return Err(Error::value(
                "handoff status is outside the installed state directory",
            ));
        }
        owned_directory(status_path.parent().unwrap_or(Path::new("/")), true)?;
        let (data, _mode) = read_file(&status_path, true)?;
        if parse_json(&data)? != expected_status {
            return Err(Error::runtime(
                "failed update status changed before handoff recovery",
            ));
        }
        if field(&expected, "_execution_handoff") != &Json::Object(handoff.fields.clone())
            || handoff.operation_id != operation_id
        {
            return Err(Error::runtime(
                "saved failed status does not own this handoff",
            ));
        }
        Ok(())
    };
    release_handoff(
        &root,
        &handoff_file,
        control,
        services,
        Some(&verify_status),
    )
}

fn not_failed_handoff() -> Error {
    Error::value("status does not own a failed preinstaller handoff")
}

/// Checks a retry adds on the saved failed status; also marks the retry mode
/// (a worker that no longer holds the lease is acknowledged).
type VerifyStatus<'a> = &'a dyn Fn(&ExecutionLayout, &Handoff) -> Result<()>;

/// A validated handoff file: the whole object (compared as a dict) and its
/// fields, which `read_update_handoff` proved to be strings.
#[derive(Debug, Clone, PartialEq)]
struct Handoff {
    fields: JsonObject,
    operation_id: String,
    worker_instance_id: String,
    lease_id: String,
    expected_server_identity: String,
}

impl Handoff {
    fn read(root: &Path, path: &Path) -> Result<Handoff> {
        let fields = read_update_handoff(root, path)?;
        let text = |key: &str| field(&fields, key).as_str().unwrap_or_default().to_string();
        Ok(Handoff {
            operation_id: text("operation_id"),
            worker_instance_id: text("worker_instance_id"),
            lease_id: text("lease_id"),
            expected_server_identity: text("expected_server_identity"),
            fields,
        })
    }
}

/// `_release_handoff`: the whole check-then-release under the install lock.
fn release_handoff(
    root: &Path,
    handoff_file: &Path,
    control: Option<&WorkerControl>,
    services: Option<&dyn ServiceSnapshot>,
    verify_status: Option<VerifyStatus>,
) -> Result<HandoffRelease> {
    let root = normalize_path(root)?;
    owned_directory(&root, false)?;
    InstallationLock::hold(&root, || {
        let provenance = Provenance::read(&root, handoff_file, verify_status)?;
        with_clients(
            &provenance.layout,
            control,
            services,
            |control, services| {
                let admitted = provenance.admit(control, services)?;
                provenance.release(&admitted, control, services)
            },
        )
    })
}

/// What [`check_handoff_release`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffCheck {
    /// True while the worker holds a lease of the handoff's operation and
    /// every check `update-handoff release` makes before its request passes
    /// (it would release it); false when the worker's lease, if any, belongs
    /// to another operation (nothing of this handoff is left to release).
    pub held: bool,
    /// The handoff's maintenance operation.
    pub operation_id: String,
    /// The worker instance the handoff names.
    pub worker_instance_id: String,
}

/// Judges the handoff in `handoff_file` exactly as `update-handoff release`
/// would before it sends its one request, without taking the installation
/// lock and without changing anything: recovery ownership, the handoff
/// file, the installed layout, the native worker and its receipt, the
/// worker's status and its authenticated callback health (both reads). A
/// worker holding no lease of this operation reads as released (`held:
/// false`); anything the release would refuse is that refusal. `control`
/// and `services` replace the real clients (tests).
pub fn check_handoff_release(
    root: &Path,
    handoff_file: &Path,
    control: Option<&WorkerControl>,
    services: Option<&dyn ServiceSnapshot>,
) -> Result<HandoffCheck> {
    let root = normalize_path(root)?;
    owned_directory(&root, false)?;
    let provenance = Provenance::read(&root, handoff_file, None)?;
    with_clients(
        &provenance.layout,
        control,
        services,
        |control, services| {
            let (record, status) = control.status(&provenance.layout)?;
            // A worker whose lease (if any) belongs to another operation no
            // longer holds this handoff: there is nothing left to release.
            let lease_operation = field(&status, "lease")
                .get("operation_id")
                .unwrap_or(&Json::Null);
            if lease_operation != &Json::from(provenance.handoff.operation_id.as_str()) {
                return Ok(HandoffCheck {
                    held: false,
                    operation_id: provenance.handoff.operation_id.clone(),
                    worker_instance_id: field(&record, "instance_id")
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                });
            }
            provenance.admit(control, services)?;
            Ok(HandoffCheck {
                held: true,
                operation_id: provenance.handoff.operation_id.clone(),
                worker_instance_id: provenance.handoff.worker_instance_id.clone(),
            })
        },
    )
}

/// Runs `body` with the given clients, or the real worker client and native
/// service manager of `layout`.
fn with_clients<T>(
    layout: &ExecutionLayout,
    control: Option<&WorkerControl>,
    services: Option<&dyn ServiceSnapshot>,
    body: impl FnOnce(&WorkerControl, &dyn ServiceSnapshot) -> Result<T>,
) -> Result<T> {
    let native;
    let services: &dyn ServiceSnapshot = match services {
        Some(services) => services,
        None => {
            native = NativeServices::new(layout)?;
            &native
        }
    };
    let default_control;
    let control = match control {
        Some(control) => control,
        None => {
            default_control = WorkerControl::new();
            &default_control
        }
    };
    body(control, services)
}

/// The local provenance a release starts from: no other owner of recovery,
/// the validated handoff, the installed layout and (for a retry) the saved
/// failed status.
struct Provenance<'a> {
    root: &'a Path,
    handoff_file: &'a Path,
    handoff: Handoff,
    layout: ExecutionLayout,
    verify_status: Option<VerifyStatus<'a>>,
}

/// What the first pass over the live worker established.
struct Admitted {
    record: JsonObject,
    instance_id: Json,
    replacement: bool,
    state_owner: Option<(u64, u64)>,
}

impl<'a> Provenance<'a> {
    fn read(
        root: &'a Path,
        handoff_file: &'a Path,
        verify_status: Option<VerifyStatus<'a>>,
    ) -> Result<Provenance<'a>> {
        no_handoff_recovery_overlap(root)?;
        let handoff = Handoff::read(root, handoff_file)?;
        let layout = installed_layout(root)?;
        let provenance = Provenance {
            root,
            handoff_file,
            handoff,
            layout,
            verify_status,
        };
        provenance.verify(&provenance.layout)?;
        Ok(provenance)
    }

    fn verify(&self, layout: &ExecutionLayout) -> Result<()> {
        match self.verify_status {
            Some(verify) => verify(layout, &self.handoff),
            None => Ok(()),
        }
    }

    /// The first pass: the native worker, its receipt and its status match
    /// the handoff, and its authenticated callback health names the
    /// handoff's server. Only reads.
    fn admit(&self, control: &WorkerControl, services: &dyn ServiceSnapshot) -> Result<Admitted> {
        let (handoff, layout) = (&self.handoff, &self.layout);
        let allow_released = self.verify_status.is_some();
        let (record, status) = control.status(layout)?;
        let native_state = services.snapshot_json()?;
        matching_status(
            handoff,
            layout,
            &record,
            &status,
            &native_state,
            allow_released,
        )?;
        let instance_id = field(&record, "instance_id").clone();
        let replacement =
            allow_released && instance_id != Json::from(handoff.worker_instance_id.as_str());
        let state_owner = match replacement {
            true => Some(held_state_ownership(layout)?),
            false => None,
        };
        // Authenticate the stable worker callback itself; a public gateway can
        // be unavailable without changing ownership of this execution epoch.
        let health = control.callback_health(layout, &record)?;
        let execution = field(&health, "execution_service").as_object();
        let authenticated = matches!(field(&health, "ok"), Json::Bool(true))
            && field(&health, "server_identity")
                == &Json::from(handoff.expected_server_identity.as_str())
            && execution.is_some_and(|execution| {
                field(execution, "instance_id") == &instance_id
                    && field(execution, "pid") == field(&record, "pid")
            });
        if !authenticated {
            return Err(Error::runtime(
                "authenticated worker identity does not match handoff",
            ));
        }
        Ok(Admitted {
            record,
            instance_id,
            replacement,
            state_owner,
        })
    }

    /// The second pass and the one release request.
    fn release(
        &self,
        admitted: &Admitted,
        control: &WorkerControl,
        services: &dyn ServiceSnapshot,
    ) -> Result<HandoffRelease> {
        let (root, handoff, layout) = (self.root, &self.handoff, &self.layout);
        let allow_released = self.verify_status.is_some();
        // Re-read local provenance and live admission after the health
        // request: a takeover or a failed provider close must not slip into
        // that gap.
        no_handoff_recovery_overlap(root)?;
        if Handoff::read(root, self.handoff_file)? != *handoff || installed_layout(root)? != *layout
        {
            return Err(Error::runtime("handoff provenance changed before release"));
        }
        let (latest_record, latest_status) = control.status(layout)?;
        let native_state = services.snapshot_json()?;
        let held = matching_status(
            handoff,
            layout,
            &latest_record,
            &latest_status,
            &native_state,
            allow_released,
        )?;
        if latest_record != admitted.record {
            return Err(Error::runtime(
                "worker process receipt changed before release",
            ));
        }
        if admitted.replacement && Some(held_state_ownership(layout)?) != admitted.state_owner {
            return Err(Error::runtime(
                "worker state ownership changed before acknowledgment",
            ));
        }
        self.verify(layout)?;
        if !held {
            return Ok(HandoffRelease {
                already_released: true,
                operation_id: handoff.operation_id.clone(),
                worker_instance_id: admitted
                    .instance_id
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        let result = control.maintenance(
            layout,
            &latest_record,
            "release",
            &handoff.operation_id,
            Some(&Json::from(handoff.lease_id.as_str())),
        )?;
        if field(&result, "worker_instance_id") != &Json::from(handoff.worker_instance_id.as_str())
            || result.get("lease").is_none_or(|lease| !lease.is_null())
        {
            return Err(Error::runtime(
                "worker did not confirm exact handoff release",
            ));
        }
        Ok(HandoffRelease {
            already_released: false,
            operation_id: handoff.operation_id.clone(),
            worker_instance_id: handoff.worker_instance_id.clone(),
        })
    }
}

/// `_no_handoff_recovery_overlap`: an activation, an execution transaction
/// or an uninstall intent (even a dangling symlink) owns recovery instead.
fn no_handoff_recovery_overlap(root: &Path) -> Result<()> {
    no_activation(root)?;
    if entry_present(&root.join(UNINSTALL_INTENT_NAME))? {
        return Err(Error::runtime("uninstall already owns execution recovery")
            .with_kind(ErrorKind::UninstallOwnsRecovery));
    }
    Ok(())
}

/// `_matching_status`: the native worker of the receipt still runs the
/// layout's worker release, admission has settled, and the worker holds
/// exactly the handoff's sealed, non-expiring lease. Returns false instead
/// when `allow_released` and the worker reports no lease at all (a lost
/// release reply, or a replacement worker).
fn matching_status(
    handoff: &Handoff,
    layout: &ExecutionLayout,
    record: &JsonObject,
    status: &JsonObject,
    native: &JsonObject,
    allow_released: bool,
) -> Result<bool> {
    let lease = field(status, "lease");
    let unheld = allow_released && status.get("lease").is_some() && lease.is_null();
    let instance_id = field(record, "instance_id");
    let worker = field(native, "worker").as_object();
    let native_field = |key: &str| worker.map_or(&Json::Null, |worker| field(worker, key));
    let pid = field(record, "pid");
    let owned = (unheld || instance_id == &Json::from(handoff.worker_instance_id.as_str()))
        && field(status, "worker_instance_id") == instance_id
        && Some(field(record, "release_root"))
            == layout.worker_release.to_str().map(Json::from).as_ref()
        && native_field("state") == &Json::from("running")
        && pid.as_int().is_some_and(|pid| pid > 0)
        && native_field("pid") == pid;
    if !owned {
        return Err(Error::runtime("native worker no longer owns the handoff"));
    }
    let not_settled = || Error::runtime("worker cleanup or admission has not settled");
    let blockers = field(status, "blockers")
        .as_object()
        .filter(|blockers| !blockers.is_empty())
        .filter(|blockers| {
            blockers
                .values()
                .all(|count| count.as_int().is_some_and(|count| count >= 0))
        })
        .ok_or_else(not_settled)?;
    if unheld {
        return Ok(false);
    }
    if !matches!(field(status, "idle"), Json::Bool(true))
        || blockers.values().any(|count| count.as_int() != Some(0))
    {
        return Err(not_settled());
    }
    let exact = lease.as_object().is_some_and(|lease| {
        field(lease, "operation_id") == &Json::from(handoff.operation_id.as_str())
            && field(lease, "lease_id") == &Json::from(handoff.lease_id.as_str())
            && matches!(field(lease, "sealed"), Json::Bool(true))
            && lease.get("expires_at").is_some_and(Json::is_null)
    });
    if !exact {
        return Err(Error::runtime(
            "worker no longer holds the exact sealed handoff",
        ));
    }
    Ok(true)
}

/// `_held_state_ownership`: proves that some process holds the exclusive
/// flock on `state_root/admin/state-owner.lock` (a shared probe must fail),
/// and returns the lock file's `(st_dev, st_ino)`. It cannot tell which
/// process holds it; the native and callback probes bind the worker's PID.
fn held_state_ownership(layout: &ExecutionLayout) -> Result<(u64, u64)> {
    let parent = normalize_path(&layout.state_root.join("admin"))?;
    owned_directory(&parent, true)?;
    let path = parent.join("state-owner.lock");
    let descriptor: OwnedFd = rustix::fs::open(
        &path,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, &path))?;
    let info = rustix::fs::fstat(&descriptor)?;
    if FileType::from_raw_mode(info.st_mode) != FileType::RegularFile
        || info.st_uid != current_uid()
        || info.st_nlink != 1
        || info.st_mode & 0o7777 != 0o600
    {
        return Err(Error::permission("worker state ownership lock is unsafe"));
    }
    match rustix::fs::flock(&descriptor, FlockOperation::NonBlockingLockShared) {
        Err(Errno::WOULDBLOCK) => {}
        Err(errno) => return Err(errno.into()),
        Ok(()) => {
            return Err(Error::runtime(
                "replacement worker does not hold exclusive state ownership",
            ))
        }
    }
    let linked = rustix::fs::lstat(&path).map_err(|errno| Error::from_errno(errno, &path))?;
    #[allow(clippy::unnecessary_cast)] // st_dev is i32 on macOS
    let identity = (info.st_dev as u64, info.st_ino as u64);
    #[allow(clippy::unnecessary_cast)]
    if (linked.st_dev as u64, linked.st_ino as u64) != identity {
        return Err(Error::runtime("worker state ownership lock changed"));
    }
    Ok(identity)
}

/// `dict.get(key)`: a missing key reads as `None`, like an explicit null.
fn field<'a>(object: &'a JsonObject, key: &str) -> &'a Json {
    object.get(key).unwrap_or(&Json::Null)
}

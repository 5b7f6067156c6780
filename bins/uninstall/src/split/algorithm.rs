//! `execution_uninstall.uninstall`: the idle-only removal of a healthy split
//! installation, resumable from its retained intent.
//!
//! Admission happens under the install lock and changes nothing: provenance,
//! exact unit files, no pending update, free preparation locks, removable
//! private trees, the retained intent, the native snapshot and the
//! authenticated runtime receipt. Mutation then persists the intent before
//! asking the worker for a hold, seals it, disables both services, stops the
//! gateway then the worker (never a forced kill), takes the state owner's
//! lease, proves no provider child remains, and only then removes files. A
//! failure before removal gives the worker its admission back (restarting
//! the gateway and restoring enablement if they changed) and withdraws the
//! intent; a failure during removal leaves the partial removal in place, as
//! upstream does.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agents_common::{
    check_binding, entry_present, fsync_directory, installed_layout, no_activation, normalize_path,
    read_file, read_interrupted_removal, read_uninstall_intent, store_uninstall_intent,
    write_uninstall_intent, Error, ExecutionLayout, InstallationLock, Result, Role, SealedHold,
    WorkerControl, LAYOUT_NAME, UNINSTALL_INTENT_NAME,
};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    os::current_uid,
};
use sha2::{Digest, Sha256};

use super::checks::{
    hold_preparation_leases, identity, no_pending_update, no_provider_children, owned_lease,
    removable_tree, remove_child, require_retired_owners, resolve_lenient, service_files,
    OwnedLease,
};
use super::native::Native;
use crate::signals;

/// Why the uninstall ended without removing the installation.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error with Python's class and message.
    Error(Error),
    /// SIGINT arrived (Python's `KeyboardInterrupt`): recovery ran, and the
    /// process must now die of the signal.
    Interrupted,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Error(error)
    }
}

/// The four paths the uninstall acts on, as given.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    /// `--root`.
    pub root: PathBuf,
    /// `--config-root`.
    pub config_root: PathBuf,
    /// `--state-root`.
    pub state_root: PathBuf,
    /// `--home`.
    pub home: PathBuf,
}

/// A completed uninstall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Removed {
    /// True unless the state root was purged.
    pub state_preserved: bool,
    /// The state root, normalised.
    pub state_root: PathBuf,
}

/// Builds the native service manager of the installed layout.
pub(super) type NativeFactory<'a> = &'a dyn Fn(&ExecutionLayout) -> Result<Box<dyn Native>>;

fn checkpoint() -> std::result::Result<(), Failure> {
    if signals::pending() {
        Err(Failure::Interrupted)
    } else {
        Ok(())
    }
}

/// A step that failed while SIGINT was pending failed because of it: in
/// Python the `KeyboardInterrupt` is raised inside that very step.
fn interrupted_or(failure: Failure) -> Failure {
    if signals::pending() {
        Failure::Interrupted
    } else {
        failure
    }
}

/// Runs the uninstall; see the module documentation.
pub(crate) fn uninstall(
    paths: &Paths,
    purge_state: bool,
    make_native: NativeFactory<'_>,
) -> std::result::Result<Removed, Failure> {
    let root = normalize_path(&paths.root)?;
    let config_root = normalize_path(&paths.config_root)?;
    let state_root = normalize_path(&paths.state_root)?;
    let home = normalize_path(&paths.home)?;
    let lock = InstallationLock::acquire(&root)?;
    let outcome = Uninstall {
        root: &root,
        config_root: &config_root,
        state_root: &state_root,
        home: &home,
        purge_state,
    }
    .run(make_native);
    // Leases were released inside `run`; the lock outlives every removal.
    lock.release()?;
    outcome?;
    fs::remove_dir(&root).map_err(|err| Error::from_io_path(&err, &root))?;
    Ok(Removed {
        state_preserved: !purge_state,
        state_root,
    })
}

struct Uninstall<'a> {
    root: &'a Path,
    config_root: &'a Path,
    state_root: &'a Path,
    home: &'a Path,
    purge_state: bool,
}

/// `d.get(key)` with Python's `None` for a missing key.
fn field(object: &JsonObject, key: &str) -> Json {
    object.get(key).cloned().unwrap_or(Json::Null)
}

/// Disables both services' boot-time start, then stops each one that runs
/// (gateway first) after proving it is still the admitted process (the
/// worker still sealed and idle), and proves both stopped. Nothing is
/// force-killed.
fn stop_services(
    admitted: &Admitted<'_>,
    progress: &mut Progress,
) -> std::result::Result<(), Failure> {
    let Admitted {
        layout,
        native,
        control,
        prior,
        stopped_resume,
        ..
    } = admitted;
    // Boot-time activation is disabled before the graceful stops; no
    // forced signal or process-group cleanup is ever used.
    progress.native_changed = true;
    let active_roles: &[Role] = if *stopped_resume {
        &[]
    } else {
        &[Role::Gateway, Role::Worker]
    };
    for &name in active_roles {
        native.set_enabled(name, false)?;
    }
    for &name in active_roles {
        checkpoint()?;
        if is_down(prior, name) {
            continue;
        }
        let observed = role(&native.snapshot_json()?, name);
        if field(&observed, "state").as_str() != Some("running")
            || field(&observed, "pid") != field(&role(prior, name), "pid")
        {
            return Err(Error::runtime("native process changed before its authorized stop").into());
        }
        if name == Role::Worker {
            let sealed = progress.sealed.as_ref().expect("sealed before any stop");
            let (record, status) = control.status(layout)?;
            if record != sealed.record
                || field(&status, "lease") != Json::Object(sealed.lease.clone())
                || field(&status, "idle") != Json::Bool(true)
            {
                return Err(
                    Error::runtime("worker admission changed before its authorized stop").into(),
                );
            }
        }
        native.stop(name)?;
    }
    let stopped = native.snapshot_json()?;
    if Role::ALL.into_iter().any(|name| !is_down(&stopped, name)) {
        return Err(
            Error::runtime("native services did not both stop; all files were retained").into(),
        );
    }
    Ok(())
}

/// `snapshot[role]` (an empty dict stands in for a missing role).
fn role(snapshot: &JsonObject, name: Role) -> JsonObject {
    snapshot
        .get(name.as_str())
        .and_then(Json::as_object)
        .cloned()
        .unwrap_or_default()
}

fn state(snapshot: &JsonObject, name: Role) -> Json {
    field(&role(snapshot, name), "state")
}

fn is_down(snapshot: &JsonObject, name: Role) -> bool {
    matches!(state(snapshot, name).as_str(), Some("stopped" | "absent"))
}

fn is_running(snapshot: &JsonObject, name: Role) -> bool {
    state(snapshot, name).as_str() == Some("running")
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// What admission established, for the mutation and its recovery.
struct Admitted<'a> {
    layout: ExecutionLayout,
    native: &'a dyn Native,
    control: WorkerControl<'a>,
    originals: super::checks::ServiceFiles,
    identities: Vec<(PathBuf, (u64, u64))>,
    prior: JsonObject,
    receipt: JsonObject,
    stopped_resume: bool,
    operation: String,
}

/// The proof an interrupted removal left: its intent and, unless removal
/// had got that far, the admitted installed layout (not validated: its
/// releases may be gone).
struct Interrupted {
    intent: JsonObject,
    layout: Option<ExecutionLayout>,
}

/// Mutable progress of the mutation, read by the recovery.
struct Progress {
    intent: Option<JsonObject>,
    sealed: Option<SealedHold>,
    native_changed: bool,
    deleting: bool,
    leases: Vec<OwnedLease>,
}

impl Uninstall<'_> {
    fn run(&self, make_native: NativeFactory<'_>) -> std::result::Result<(), Failure> {
        let interrupted = self
            .interrupted_removal()
            .map_err(|err| interrupted_or(err.into()))?;
        if let Some(interrupted) = interrupted {
            return self
                .finish_removal(&interrupted, make_native)
                .map_err(interrupted_or);
        }
        let (layout, native) = self.prelude(make_native).map_err(interrupted_or)?;
        self.admit(layout, native.as_ref())
    }

    /// An earlier run of this uninstall that was killed once it had begun
    /// removing files: its intent says `stopped` (the whole admission
    /// passed and both services stopped) and the first thing removal
    /// deletes, a unit file, or the installed manifest is gone. `None` for
    /// anything else, which the normal path handles (or refuses).
    fn interrupted_removal(&self) -> Result<Option<Interrupted>> {
        no_activation(self.root)?;
        // What cannot be proven here is the normal path's to refuse, in the
        // original's order (an unreadable intent after the roots' checks).
        Ok(self.proven_interrupted_removal().unwrap_or(None))
    }

    fn proven_interrupted_removal(&self) -> Result<Option<Interrupted>> {
        let Some(intent) = read_interrupted_removal(self.root)? else {
            return Ok(None);
        };
        let manifest = self.root.join(LAYOUT_NAME);
        let data = match read_file(&manifest, true) {
            Ok((data, _mode)) => data,
            Err(err) if err.is_not_found() => {
                return Ok(Some(Interrupted {
                    intent,
                    layout: None,
                }))
            }
            Err(err) => return Err(err),
        };
        let digest = python_compat::hex(&Sha256::digest(&data));
        if field(&intent, "layout_sha256").as_str() != Some(digest.as_str()) {
            return Err(Error::runtime(
                "installed execution layout changed after uninstall admission",
            ));
        }
        let value = parse_json(&data)?;
        let layout =
            ExecutionLayout::from_dict_unvalidated(value.get("layout").unwrap_or(&Json::Null))?;
        if layout.install_root != self.root
            || field(&intent, "worker_release").as_str()
                != Some(text(&layout.worker_release).as_str())
            || field(&intent, "gateway_release").as_str()
                != Some(text(&layout.gateway_release).as_str())
        {
            return Err(Error::value(
                "uninstall intent does not match this installed runtime",
            ));
        }
        let mut begun = false;
        for role in Role::ALL {
            begun |= !entry_present(&layout.service_path(role)?)?;
        }
        Ok(begun.then_some(Interrupted {
            intent,
            layout: Some(layout),
        }))
    }

    /// Finishes the removal an interrupted run began, removing only what
    /// its intent and the admitted manifest prove to be this installation:
    /// the same roots, both services still down, any unit file left still
    /// exactly the layout's, release directories (where left) the ones
    /// admitted, no pending update, free preparation and state leases and
    /// no provider child. Without the manifest (removed last but for the
    /// intent) everything else must already be gone. The original refuses such
    /// a rerun on the first missing file and keeps the roots, the lock and
    /// the intent forever.
    fn finish_removal(
        &self,
        interrupted: &Interrupted,
        make_native: NativeFactory<'_>,
    ) -> std::result::Result<(), Failure> {
        let intent = &interrupted.intent;
        if intent.get("purge_state") != Some(&Json::Bool(self.purge_state)) {
            return Err(Error::runtime(
                "retry must preserve the existing uninstall data-removal choice",
            )
            .into());
        }
        let Some(layout) = &interrupted.layout else {
            let mut left = Vec::new();
            for entry in
                fs::read_dir(self.root).map_err(|err| Error::from_io_path(&err, self.root))?
            {
                let entry = entry.map_err(|err| Error::from_io_path(&err, self.root))?;
                let name = entry.file_name();
                if name != ".install-lock" && name != UNINSTALL_INTENT_NAME {
                    left.push(name);
                }
            }
            let state_left = self.purge_state && entry_present(self.state_root)?;
            if !left.is_empty() || entry_present(self.config_root)? || state_left {
                return Err(Error::runtime(
                    "interrupted uninstall no longer has its installed layout; the remaining \
                     files were retained",
                )
                .into());
            }
            checkpoint()?;
            self.delete_intent()?;
            return Ok(());
        };
        self.require_layout_roots(layout)?;
        let identities = field(intent, "identities");
        for (name, path) in [
            ("worker", &layout.worker_release),
            ("gateway", &layout.gateway_release),
        ] {
            if entry_present(path)? {
                check_binding(path, identities.get(name).unwrap_or(&Json::Null))?;
            }
        }
        let native = make_native(layout)?;
        let snapshot = native.snapshot_json()?;
        if Role::ALL.into_iter().any(|name| !is_down(&snapshot, name)) {
            return Err(Error::runtime(
                "a service of the interrupted uninstall runs again; the remaining files were \
                 retained",
            )
            .into());
        }
        for role in Role::ALL {
            let path = layout.service_path(role)?;
            if !entry_present(&path)? {
                continue;
            }
            let (data, mode) = read_file(&path, false)?;
            let rendered = agents_common::render_service(layout, role).ok();
            if rendered.as_deref() != Some(data.as_slice()) || !(mode == 0o600 || mode == 0o644) {
                return Err(Error::runtime(
                    "native service configuration is not this installed execution layout",
                )
                .into());
            }
        }
        no_pending_update(layout)?;
        let _preparations = hold_preparation_leases(self.root)?;
        removable_tree(self.root)?;
        if entry_present(self.config_root)? {
            removable_tree(self.config_root)?;
        }
        if self.purge_state && entry_present(self.state_root)? {
            removable_tree(self.state_root)?;
        }
        let lease = self.state_root.join("admin/state-owner.lock");
        let _state = if self.purge_state && !entry_present(&lease)? {
            None
        } else {
            Some(owned_lease(&lease)?)
        };
        no_provider_children(self.state_root)?;
        checkpoint()?;
        self.remove(layout, native.as_ref())
    }

    /// The roots uninstall was given must be the installed layout's.
    fn require_layout_roots(&self, layout: &ExecutionLayout) -> Result<()> {
        if (
            layout.config_root.as_path(),
            layout.state_root.as_path(),
            layout.home.as_path(),
        ) != (self.config_root, self.state_root, self.home)
        {
            return Err(Error::runtime(
                "uninstall roots do not match the installed execution layout",
            ));
        }
        Ok(())
    }

    /// Provenance under the lock and the native manager of the layout.
    fn prelude(
        &self,
        make_native: NativeFactory<'_>,
    ) -> std::result::Result<(ExecutionLayout, Box<dyn Native>), Failure> {
        no_activation(self.root)?;
        require_retired_owners(self.root)?;
        let layout = installed_layout(self.root)?;
        self.require_layout_roots(&layout)?;
        let native = make_native(&layout)?;
        Ok((layout, native))
    }

    /// Admission, then the mutation with its recovery.
    fn admit(
        &self,
        layout: ExecutionLayout,
        native: &dyn Native,
    ) -> std::result::Result<(), Failure> {
        let (admitted, mut progress) = self.admission(layout, native).map_err(interrupted_or)?;
        let outcome = self.mutate(&admitted, &mut progress);
        let result = match outcome {
            Ok(()) => Ok(()),
            Err(original) => self.recover(&admitted, &mut progress, interrupted_or(original)),
        };
        // Python's ExitStack releases the leases before the lock.
        drop(progress.leases);
        result
    }

    /// Everything proven before anything changes.
    fn admission<'n>(
        &self,
        layout: ExecutionLayout,
        native: &'n dyn Native,
    ) -> std::result::Result<(Admitted<'n>, Progress), Failure> {
        let originals = service_files(&layout)?;
        no_pending_update(&layout)?;
        let leases = hold_preparation_leases(self.root)?;
        removable_tree(self.root)?;
        removable_tree(self.config_root)?;
        if self.purge_state {
            removable_tree(self.state_root)?;
        }
        let mut identities = Vec::new();
        for path in [self.root, self.config_root, self.state_root] {
            identities.push((path.to_path_buf(), identity(path)?));
        }
        let intent = read_uninstall_intent(self.root, &layout)?;
        if let Some(intent) = &intent {
            if intent.get("purge_state") != Some(&Json::Bool(self.purge_state)) {
                return Err(Error::runtime(
                    "retry must preserve the existing uninstall data-removal choice",
                )
                .into());
            }
        }
        checkpoint()?;
        let prior = native.snapshot_json()?;
        // An interrupted graceful stop can precede the `stopped` phase; the
        // exact intent, the empty child registry and the state lease below
        // supply the missing proof.
        let stopped_resume =
            intent.is_some() && Role::ALL.into_iter().all(|name| is_down(&prior, name));
        let partial_resume =
            intent.is_some() && is_running(&prior, Role::Worker) && is_down(&prior, Role::Gateway);
        if !stopped_resume
            && !partial_resume
            && Role::ALL.into_iter().any(|name| !is_running(&prior, name))
        {
            return Err(Error::runtime(
                "safe uninstall requires a healthy running worker and gateway; stopped or broken \
                 installations require ownership recovery",
            )
            .into());
        }
        // Python's WorkerControl reads snapshots through a NativeServices of
        // its own; it is the same manager.
        let control = WorkerControl::new().services(native.snapshots());
        let receipt = if partial_resume {
            let intent = intent.as_ref().expect("partial resume has an intent");
            self.interrupted_receipt(&layout, &control, &prior, intent)?
        } else if stopped_resume {
            JsonObject::new()
        } else {
            control.receipt(&layout, native.snapshots())?
        };
        let worker_release = text(&layout.worker_release);
        if !stopped_resume
            && (field(&receipt, "worker_pid") != field(&role(&prior, Role::Worker), "pid")
                || field(&receipt, "gateway_pid") != field(&role(&prior, Role::Gateway), "pid")
                || field(&receipt, "worker_release").as_str() != Some(worker_release.as_str())
                || !python_compat::truthy(&field(&receipt, "server_identity"))
                // The marker stores it as text; Python would store any truthy
                // value and refuse it on the next read.
                || field(&receipt, "server_identity").as_str().is_none())
        {
            return Err(Error::runtime(
                "authenticated runtime is not owned by both installed native jobs",
            )
            .into());
        }
        let operation = match &intent {
            Some(intent) => field(intent, "operation_id")
                .as_str()
                .unwrap_or_default()
                .to_string(),
            None => python_compat::uuid::uuid4().map_err(Error::from)?,
        };
        let admitted = Admitted {
            originals,
            identities,
            prior,
            receipt,
            stopped_resume,
            operation,
            control,
            native,
            layout,
        };
        let progress = Progress {
            intent,
            sealed: None,
            native_changed: false,
            deleting: false,
            leases,
        };
        Ok((admitted, progress))
    }

    /// The receipt of a `partial_resume`: the running worker must still be
    /// held idle and sealed by this intent's operation, and its callback
    /// health must name the intent's server.
    fn interrupted_receipt(
        &self,
        layout: &ExecutionLayout,
        control: &WorkerControl<'_>,
        prior: &JsonObject,
        intent: &JsonObject,
    ) -> Result<JsonObject> {
        let (record, status) = control.status(layout)?;
        let lease = field(&status, "lease");
        let owned = field(&record, "pid") == field(&role(prior, Role::Worker), "pid")
            && field(&record, "release_root").as_str()
                == Some(text(&layout.worker_release).as_str())
            && field(&status, "idle") == Json::Bool(true)
            && lease.as_object().is_some_and(|lease| {
                field(lease, "operation_id") == field(intent, "operation_id")
                    && field(lease, "sealed") == Json::Bool(true)
            });
        if !owned {
            return Err(Error::runtime(
                "interrupted uninstall no longer owns the running worker",
            ));
        }
        let health = control.callback_health(layout, &record)?;
        let worker = field(&health, "execution_service");
        let same = field(&health, "ok") == Json::Bool(true)
            && field(&health, "server_identity") == field(intent, "server_identity")
            && worker.as_object().is_some_and(|worker| {
                field(worker, "pid") == field(&record, "pid")
                    && field(worker, "instance_id") == field(&record, "instance_id")
            });
        if !same {
            return Err(Error::runtime(
                "interrupted uninstall worker health identity changed",
            ));
        }
        let mut receipt = JsonObject::new();
        receipt.insert("worker_pid", field(&record, "pid"));
        receipt.insert("gateway_pid", field(&role(prior, Role::Gateway), "pid"));
        receipt.insert("worker_release", text(&layout.worker_release));
        receipt.insert("worker_instance_id", field(&record, "instance_id"));
        receipt.insert("server_identity", field(&health, "server_identity"));
        Ok(receipt)
    }

    fn mutate(
        &self,
        admitted: &Admitted<'_>,
        progress: &mut Progress,
    ) -> std::result::Result<(), Failure> {
        let Admitted {
            layout,
            native,
            originals,
            identities,
            prior,
            stopped_resume,
            ..
        } = admitted;
        if !stopped_resume {
            self.seal_worker(admitted, progress)?;
        }
        checkpoint()?;
        no_pending_update(layout)?;
        no_activation(self.root)?;
        if service_files(layout)? != *originals || native.snapshot_json()? != *prior {
            return Err(Error::runtime("native service ownership changed before uninstall").into());
        }
        stop_services(admitted, progress)?;
        // A vanished native PID is not enough while another process still
        // owns the state store; the lease is kept through deletion.
        progress.leases.push(owned_lease(
            &self.state_root.join("admin/state-owner.lock"),
        )?);
        no_provider_children(self.state_root)?;
        no_pending_update(layout)?;
        no_activation(self.root)?;
        let mut changed = service_files(layout)? != *originals;
        for (path, saved) in identities {
            changed |= identity(path)? != *saved;
        }
        if changed {
            return Err(Error::runtime("managed files changed during service shutdown").into());
        }
        if read_uninstall_intent(self.root, layout)? != progress.intent {
            return Err(Error::runtime("uninstall intent changed before removal").into());
        }
        self.advance(progress, "stopped")?;
        checkpoint()?;
        progress.deleting = true;
        self.remove(layout, *native)
    }

    /// Before the first uninstall of a running installation: the worker must
    /// be idle with no other operation's lease; the intent is persisted, then
    /// the worker's admission sealed for the stop in the same epoch.
    fn seal_worker(
        &self,
        admitted: &Admitted<'_>,
        progress: &mut Progress,
    ) -> std::result::Result<(), Failure> {
        let Admitted {
            layout,
            control,
            prior,
            receipt,
            operation,
            ..
        } = admitted;
        let prior_worker_pid = field(&role(prior, Role::Worker), "pid");
        if progress.intent.is_none() {
            let (record, status) = control.status(layout)?;
            let idle = field(&record, "instance_id") == field(receipt, "worker_instance_id")
                && field(&record, "pid") == prior_worker_pid
                && field(&status, "idle") == Json::Bool(true)
                && field(&status, "lease").is_null();
            if !idle {
                return Err(Error::runtime(
                    "execution is busy or another operation owns admission",
                )
                .into());
            }
            // Persisted before the hold is requested: a lost reply to the
            // seal must never leave an unidentifiable hold behind.
            let identity = field(receipt, "server_identity");
            progress.intent = Some(write_uninstall_intent(
                self.root,
                layout,
                operation,
                self.purge_state,
                identity.as_str().unwrap_or_default(),
            )?);
        }
        checkpoint()?;
        let pid = prior_worker_pid.as_int().unwrap_or(0);
        let sealed = control.seal_for_stop(layout, operation, i64::try_from(pid).unwrap_or(0))?;
        let epoch_changed =
            field(&sealed.record, "instance_id") != field(receipt, "worker_instance_id");
        progress.sealed = Some(sealed);
        if epoch_changed {
            return Err(Error::runtime("worker epoch changed before uninstall admission").into());
        }
        self.advance(progress, "sealed")?;
        Ok(())
    }

    /// Rewrites the intent in its next phase.
    fn advance(&self, progress: &mut Progress, phase: &str) -> Result<()> {
        let intent = progress.intent.as_mut().expect("an intent exists");
        intent.insert("phase", phase);
        store_uninstall_intent(self.root, intent)
    }

    /// The removal: the unit files (gateway, then worker), a reload, every
    /// child of the root but the lock, the config root, the state root and
    /// its alias when purging, as the original removes them; then the installed
    /// manifest and last the intent, which the original removes in directory
    /// order with the other children. Keeping those two to the end means a
    /// run killed anywhere in here leaves the proof a rerun needs to finish
    /// (see `finish_removal`), which also skips what is already gone.
    fn remove(
        &self,
        layout: &ExecutionLayout,
        native: &dyn Native,
    ) -> std::result::Result<(), Failure> {
        let mut emptied = Vec::new();
        for name in [Role::Gateway, Role::Worker] {
            let path = layout.service_path(name)?;
            if entry_present(&path)? {
                fs::remove_file(&path).map_err(|err| Error::from_io_path(&err, &path))?;
                emptied.push(parent_of(&path));
            }
        }
        native.reload()?;
        let mut children = Vec::new();
        for entry in fs::read_dir(self.root).map_err(|err| Error::from_io_path(&err, self.root))? {
            let entry = entry.map_err(|err| Error::from_io_path(&err, self.root))?;
            let name = entry.file_name();
            if name != ".install-lock" && name != LAYOUT_NAME && name != UNINSTALL_INTENT_NAME {
                children.push(entry.path());
            }
        }
        for child in children {
            remove_child(&child)?;
        }
        if entry_present(self.config_root)? {
            remove_child(self.config_root)?;
            emptied.push(parent_of(self.config_root));
        }
        if self.purge_state {
            if entry_present(self.state_root)? {
                remove_child(self.state_root)?;
                emptied.push(parent_of(self.state_root));
            }
            let alias = self.home.join(".zenithbot-agent");
            let ours = fs::symlink_metadata(&alias)
                .is_ok_and(|meta| meta.file_type().is_symlink() && meta.uid() == current_uid());
            if ours && resolve_lenient(&alias).as_deref() == Some(self.state_root) {
                fs::remove_file(&alias).map_err(|err| Error::from_io_path(&err, &alias))?;
                emptied.push(self.home.to_path_buf());
            }
        }
        // The removals above must reach the disk before the proof below goes:
        // after a power cut, units or a config root back without the
        // manifest and intent would be left for no rerun to finish (issue 24).
        emptied.sort();
        emptied.dedup();
        for directory in &emptied {
            fsync_directory(directory)?;
        }
        for name in [LAYOUT_NAME, UNINSTALL_INTENT_NAME] {
            let path = self.root.join(name);
            if entry_present(&path)? {
                remove_child(&path)?;
            }
        }
        fsync_directory(self.root)?;
        Ok(())
    }

    /// The failure path: adopt or discard an unacknowledged hold, then give
    /// the still-running worker its admission back (restarting the gateway
    /// and restoring enablement if they changed) and delete the intent.
    /// Never restarts the worker and never deletes runtime files.
    fn recover(
        &self,
        admitted: &Admitted<'_>,
        progress: &mut Progress,
        original: Failure,
    ) -> std::result::Result<(), Failure> {
        let Admitted {
            layout,
            control,
            prior,
            receipt,
            stopped_resume,
            operation,
            ..
        } = admitted;
        if progress.sealed.is_none() && progress.intent.is_some() && !stopped_resume {
            // The worker may have accepted the hold although its reply was
            // lost: look once at this exact epoch; never take a new hold.
            let (record, status) = control.status(layout)?;
            if field(&record, "instance_id") == field(receipt, "worker_instance_id")
                && field(&record, "pid") == field(&role(prior, Role::Worker), "pid")
            {
                let lease = field(&status, "lease");
                if lease.is_null() && read_uninstall_intent(self.root, layout)? == progress.intent {
                    self.delete_intent()?;
                    progress.intent = None;
                } else if let Some(lease) = lease.as_object() {
                    if field(lease, "operation_id").as_str() == Some(operation.as_str()) {
                        progress.sealed = Some(SealedHold {
                            record,
                            lease: lease.clone(),
                        });
                    }
                }
            }
        }
        if progress.sealed.is_some() && !progress.deleting {
            if let Err(_recovery) = self.reopen_admission(admitted, progress) {
                return Err(Error::runtime(
                    "uninstall stopped before file removal; service/admission recovery requires \
                     ownership verification",
                )
                .into());
            }
        }
        Err(original)
    }

    /// Gives the worker that granted the hold its admission back.
    fn reopen_admission(&self, admitted: &Admitted<'_>, progress: &Progress) -> Result<()> {
        let Admitted {
            layout,
            native,
            control,
            originals,
            prior,
            operation,
            ..
        } = admitted;
        let sealed = progress.sealed.as_ref().expect("a hold to release");
        let current = native.snapshot_json()?;
        if field(&role(&current, Role::Worker), "pid") != field(&role(prior, Role::Worker), "pid")
            || !is_running(&current, Role::Worker)
        {
            return Err(Error::runtime(
                "worker no longer has its original running identity",
            ));
        }
        if service_files(layout)? != *originals {
            return Err(Error::runtime("service configuration changed"));
        }
        if progress.native_changed {
            if is_running(prior, Role::Gateway) && !is_running(&current, Role::Gateway) {
                native.start(Role::Gateway)?;
            }
            for name in Role::ALL {
                native.set_enabled(
                    name,
                    python_compat::truthy(&field(&role(prior, name), "enabled")),
                )?;
            }
        }
        let (record, status) = control.status(layout)?;
        let lease = field(&status, "lease");
        let ours = lease.as_object().filter(|lease| {
            field(lease, "operation_id").as_str() == Some(operation.as_str())
                && field(lease, "lease_id") == field(&sealed.lease, "lease_id")
        });
        let Some(lease) = ours.filter(|_| record == sealed.record) else {
            return Err(Error::runtime("worker lease changed"));
        };
        let result =
            control.maintenance(layout, &record, "release", operation, lease.get("lease_id"))?;
        if result.get("lease").is_none_or(|lease| !lease.is_null()) {
            return Err(Error::runtime("worker did not release uninstall admission"));
        }
        if progress.intent.is_some() {
            if read_uninstall_intent(self.root, layout)? != progress.intent {
                return Err(Error::runtime("uninstall intent changed during recovery"));
            }
            self.delete_intent()?;
        }
        Ok(())
    }

    fn delete_intent(&self) -> Result<()> {
        let path = self.root.join(UNINSTALL_INTENT_NAME);
        fs::remove_file(&path).map_err(|err| Error::from_io_path(&err, &path))?;
        fsync_directory(self.root)
    }
}

/// The directory holding `path` (`/` for a path with no parent).
fn parent_of(path: &Path) -> PathBuf {
    path.parent().unwrap_or(Path::new("/")).to_path_buf()
}

//! `ActivationController` of `execution_manage`: the orchestration that
//! replaces the gateway, the worker or both (a first split install) through
//! the `.execution-transaction` journal, and that recovers an interrupted
//! activation.
//!
//! The order of every step is the original's and carries its safety argument:
//! - nothing is staged before the preflight proves who runs (the worker's
//!   receipt must name the PID systemd reports, and no other operation may
//!   own worker admission);
//! - the worker is stopped only under a fresh, sealed admission hold of this
//!   operation, taken before ANY service stops (the public gateway included);
//! - health is proven with authenticated requests pinned to the PIDs the
//!   service manager reports, and recorded by `commit`; from then on the
//!   activation can only be finished, never rolled back;
//! - any failure before the commit restores the prior services, unit files,
//!   layout manifest and `current`, and retires the journal; a failure during
//!   that restoration (or a crash anywhere) leaves the journal for `recover`.
//!
//! The caller must own the [`InstallationLock`](agents_common::InstallationLock)
//! for the whole of `apply` and `recover`, including their failure handling.

use std::thread;
use std::time::{Duration, Instant};

use agents_common::{
    layout_manifest, maintenance_operation_id, prepare_runtime, Error, ExecutionLayout,
    NativeServices, Result, Role, ServiceRunState, ServiceState, ServiceStates, WorkerControl,
};
use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

use crate::scope::Scope;
use crate::transaction::ExecutionTransaction;

/// How long a started candidate (or a restored prior generation) may take to
/// reach authenticated health (the original's `health_timeout`).
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two health attempts.
const HEALTH_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Activates one scope of a split layout, or recovers its pending journal.
pub(crate) struct ActivationController {
    layout: ExecutionLayout,
    services: NativeServices,
    control: WorkerControl<'static>,
    health_timeout: Duration,
}

impl ActivationController {
    /// A controller for `layout` on this host's service manager. Refuses a
    /// layout of the other platform (`NativeServices`' own check).
    pub(crate) fn new(layout: ExecutionLayout) -> Result<Self> {
        let services = NativeServices::new(&layout)?;
        Ok(ActivationController {
            layout,
            services,
            control: WorkerControl::new(),
            health_timeout: HEALTH_TIMEOUT,
        })
    }

    /// The activation receipt of `layout` once both components answer
    /// authenticated health as the requested release. Every failure class is
    /// retried (the candidate may still be starting) until the deadline.
    fn wait_receipt(&self, layout: &ExecutionLayout) -> Result<JsonObject> {
        let deadline = Instant::now() + self.health_timeout;
        loop {
            // A failed attempt's cause is dropped: Python's traceback also
            // ends with the RuntimeError below.
            if let Ok(receipt) = self.receipt_of_release(layout) {
                return Ok(receipt);
            }
            if Instant::now() >= deadline {
                return Err(Error::runtime(
                    "execution components did not reach authenticated health",
                ));
            }
            thread::sleep(HEALTH_RETRY_INTERVAL);
        }
    }

    fn receipt_of_release(&self, layout: &ExecutionLayout) -> Result<JsonObject> {
        let receipt = self.control.receipt(layout, &self.services)?;
        let expected = layout_manifest(layout)?;
        if receipt.get("gateway_version") != expected.get("gateway_version")
            || receipt.get("worker_version") != expected.get("worker_version")
        {
            return Err(Error::runtime(
                "authenticated component versions are not the requested release",
            ));
        }
        Ok(receipt)
    }

    /// Stops the worker, sealing its admission first when it runs: the stop
    /// must hit exactly the worker epoch that granted the sealed hold.
    fn stop_worker(&self, transaction: &Json) -> Result<()> {
        let state = self.services.snapshot()?.worker;
        if state.state == ServiceRunState::Running {
            let operation = maintenance_operation_id(transaction)?;
            self.control
                .seal_for_stop(&self.layout, &operation, pid_number(state.pid))?;
            if self.services.snapshot()?.worker.pid != state.pid {
                return Err(Error::runtime(
                    "worker changed after sealing; no stop was attempted",
                ));
            }
        }
        self.services.stop(Role::Worker)
    }

    /// Recovery may only proceed with the server the activation started from.
    fn check_identity(transaction: &Json, receipt: &JsonObject) -> Result<()> {
        let expected = transaction
            .get("expected_server_identity")
            .unwrap_or(&Json::Null);
        if !expected.is_null() && receipt.get("server_identity") != Some(expected) {
            return Err(Error::runtime(
                "authenticated server identity changed during activation recovery",
            ));
        }
        Ok(())
    }

    /// `apply(scope)`: activates this controller's layout for `scope`
    /// (`migration`, `gateway` or `worker`) and returns
    /// `{"ok": true, "scope": ..., "receipt": ...}`.
    pub(crate) fn apply(&self, scope: Scope) -> Result<Json> {
        self.layout.validate()?;
        let mut prior = self.services.snapshot()?;
        let mut expected_identity = None;
        if prior.gateway.state == ServiceRunState::Running {
            let health = self.control.health(&self.layout)?;
            match health.get("server_identity") {
                Some(Json::Str(identity)) if !identity.is_empty() => {
                    expected_identity = Some(identity.clone())
                }
                _ => {
                    return Err(Error::runtime(
                        "current authenticated server identity is unavailable",
                    ))
                }
            }
        }
        if prior.worker.state == ServiceRunState::Running {
            // A legacy monolith has no receipt and no private control: this
            // refuses it before anything is staged (it must use its managed
            // idle-update handoff instead).
            let (record, status) = self.control.status(&self.layout)?;
            if record.get("pid").and_then(Json::as_int) != prior.worker.pid.map(i128::from) {
                return Err(Error::runtime(
                    "native worker ownership does not match its private receipt",
                ));
            }
            if scope != Scope::Gateway && status.get("lease").is_some_and(|lease| !lease.is_null())
            {
                return Err(Error::runtime(
                    "another execution operation already owns worker admission",
                ));
            }
            // A valid receipt's instance id is a non-empty string.
            let instance_id = record.get("instance_id").and_then(Json::as_str);
            prior.worker.instance_id = instance_id.map(str::to_string);
        }
        let root = &self.layout.install_root;
        let transaction = ExecutionTransaction::stage(
            &self.layout,
            scope,
            &prior.to_json(),
            expected_identity.as_deref(),
        )?;
        let operation = maintenance_operation_id(&transaction)?;
        let mut changed_services = false;
        let outcome = self.activate(
            scope,
            &prior,
            &transaction,
            &operation,
            &mut changed_services,
        );
        let Err(failure) = outcome else {
            return outcome;
        };
        // The commit boundary is irreversible: a failed finalization leaves
        // the committed journal (and the hold) for `recover` to finish.
        let (pending, _layout) = ExecutionTransaction::load(root)?;
        if pending.get("phase").and_then(Json::as_str) == Some("committed") {
            return Err(failure);
        }
        if changed_services {
            self.recover()?;
        } else {
            ExecutionTransaction::rollback(root)?;
            if scope != Scope::Gateway && prior.worker.state == ServiceRunState::Running {
                let (_record, status) = self.control.status(&self.layout)?;
                // A private maintenance request can win admission between the
                // preflight and the seal. No service changed: retire only our
                // journal and leave that other operation's hold intact.
                let ours = status
                    .get("lease")
                    .and_then(|lease| lease.get("operation_id"))
                    .and_then(Json::as_str)
                    == Some(operation.as_str());
                if ours {
                    self.control.release(&self.layout, &operation)?;
                }
            }
            ExecutionTransaction::finish(root)?;
        }
        Err(failure)
    }

    /// The steps of `apply` after staging; `changed_services` tells the
    /// failure handling whether a service may already have been stopped.
    fn activate(
        &self,
        scope: Scope,
        prior: &ServiceStates,
        transaction: &Json,
        operation: &str,
        changed_services: &mut bool,
    ) -> Result<Json> {
        let root = &self.layout.install_root;
        let replaces_worker = scope.replaces_worker();
        let replaces_gateway = scope.replaces_gateway();
        prepare_runtime(&self.layout)?;
        if replaces_worker && prior.worker.state == ServiceRunState::Running {
            // Acquire and seal before ANY stop, including the public gateway.
            let pid = pid_number(prior.worker.pid);
            self.control.seal_for_stop(&self.layout, operation, pid)?;
        }
        if replaces_gateway {
            *changed_services = true;
            self.services.stop(Role::Gateway)?;
        }
        if replaces_worker {
            *changed_services = true;
            self.stop_worker(transaction)?;
        }
        ExecutionTransaction::publish(root)?;
        self.services.reload()?;
        if replaces_worker {
            self.services.start(Role::Worker)?;
        }
        if replaces_gateway {
            self.services.start(Role::Gateway)?;
        }
        let receipt = self.wait_receipt(&self.layout)?;
        if scope != Scope::Gateway {
            self.control.require_startup_hold(&self.layout, operation)?;
        }
        let receipt = Json::Object(receipt);
        ExecutionTransaction::commit(root, &receipt)?;
        if scope != Scope::Gateway {
            self.control.release(&self.layout, operation)?;
        }
        ExecutionTransaction::finish(root)?;
        Ok(Json::Object(json_object! {
            "ok" => true,
            "scope" => scope.as_str(),
            "receipt" => receipt,
        }))
    }

    /// `recover()`: finishes a committed activation, or restores the prior
    /// services, files and `current` of any other pending one, and retires
    /// its journal. Returns `{"ok": true, "phase": ..., "receipt": ...}`.
    pub(crate) fn recover(&self) -> Result<Json> {
        let root = &self.layout.install_root;
        let (transaction, layout) = ExecutionTransaction::load(root)?;
        if layout != self.layout {
            return Err(Error::value(
                "controller layout differs from the pending activation",
            ));
        }
        ExecutionTransaction::check_publication(&transaction, &layout)?;
        let operation = maintenance_operation_id(&transaction)?;
        let text = |key: &str| transaction.get(key).and_then(Json::as_str).unwrap_or("");
        // `load` refused a journal whose scope is not one of the three.
        let scope = Scope::parse(text("scope"))?;
        let prior_services = transaction.get("prior_services").unwrap_or(&Json::Null);
        let prior_of = |role: Role| prior_services.get(role.as_str()).unwrap_or(&Json::Null);
        let prior_running =
            |role: Role| prior_of(role).get("state").and_then(Json::as_str) == Some("running");
        if text("phase") == "committed" {
            let receipt = self.wait_receipt(&layout)?;
            Self::check_identity(&transaction, &receipt)?;
            if scope == Scope::Gateway {
                let retained = prior_of(Role::Worker);
                if prior_running(Role::Worker)
                    && (receipt.get("worker_pid") != retained.get("pid")
                        || receipt.get("worker_instance_id") != retained.get("instance_id"))
                {
                    return Err(Error::runtime(
                        "retained worker changed before gateway finalization",
                    ));
                }
            } else {
                self.control.release(&layout, &operation)?;
            }
            ExecutionTransaction::finish(root)?;
            return Ok(Json::Object(json_object! {
                "ok" => true,
                "phase" => "committed",
                "receipt" => receipt,
            }));
        }
        if text("phase") != "rolled-back" {
            if scope.replaces_worker() {
                self.stop_worker(&transaction)?;
            }
            if scope.replaces_gateway() {
                self.services.stop(Role::Gateway)?;
            }
            ExecutionTransaction::rollback(root)?;
        }
        self.services.reload()?;
        for &role in scope.roles() {
            // Recovery may be retried after the old service was already started.
            let current = self.services.snapshot()?;
            let running = current
                .role(role)
                .is_some_and(|state| state.state == ServiceRunState::Running);
            if prior_running(role) && running {
                continue;
            }
            self.services
                .restore(role, &ServiceState::from_json(prior_of(role))?)?;
        }
        let mut receipt = Json::Null;
        let previous = ExecutionTransaction::previous_layout(&transaction)?;
        if let Some(old_layout) = previous {
            if prior_running(Role::Worker) && prior_running(Role::Gateway) {
                let restored = self.wait_receipt(&old_layout)?;
                Self::check_identity(&transaction, &restored)?;
                receipt = Json::Object(restored);
            }
        } else if prior_running(Role::Worker) {
            // A legacy normal-update handoff needs its original health
            // validator; this controller cannot claim it restored that boundary.
            return Err(Error::runtime(
                "legacy migration rollback requires managed updater health verification",
            ));
        }
        if scope != Scope::Gateway && prior_running(Role::Worker) {
            self.control.release(&layout, &operation)?;
        }
        ExecutionTransaction::finish(root)?;
        Ok(Json::Object(json_object! {
            "ok" => true,
            "phase" => "rolled-back",
            "receipt" => receipt,
        }))
    }
}

/// A running service's PID as the worker control takes it (a running
/// service always has one; `0` matches no receipt and is refused there).
fn pid_number(pid: Option<u32>) -> i64 {
    pid.map_or(0, i64::from)
}

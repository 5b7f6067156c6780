//! The native service operations install.sh runs around link takeover and
//! rollback: `snapshot`, `preflight`, `stop`, `suppress`, `start`,
//! `restore` and `release`. Each journal-owned one first passes
//! [`transaction`](crate::context::transaction).

use agents_common::{
    read_update_handoff, ActivationManifest, Error, ExecutionLayout, Result, WorkerControl,
};
use python_compat::json::{Json, JsonObject};

use crate::admission::{seed_legacy_recovery, verify_stop, StopContext};
use crate::cli::Args;
use crate::context::{assert_install_lock, print_line};
use crate::native::{Native, Snapshots};

fn state_of(observed: &JsonObject) -> &str {
    observed
        .get("state")
        .and_then(Json::as_str)
        .unwrap_or_default()
}

/// `snapshot`: the gateway's prior `STATE|ENABLED`, for `begin`.
pub(crate) fn snapshot(services: &dyn Native) -> Result<()> {
    let observed = services.role_snapshot("gateway")?;
    let enabled = observed
        .get("enabled")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    print_line(&format!("{}|{}", state_of(&observed), enabled))
}

/// `preflight`: read-only admission before any journal exists; `stop`
/// repeats the proof from the journal right before touching native jobs.
pub(crate) fn preflight(
    args: &Args,
    layout: &ExecutionLayout,
    services: &dyn Native,
) -> Result<()> {
    assert_install_lock(&layout.install_root)?;
    let mut handoff = Json::Null;
    if !args.handoff_file.as_os_str().is_empty() {
        let admitted = read_update_handoff(&layout.install_root, &args.handoff_file)?;
        if admitted.get("expected_server_identity")
            != Some(&Json::from(args.expected_server_identity.as_str()))
        {
            return Err(Error::runtime("preflight handoff server identity changed"));
        }
        handoff = Json::Object(admitted);
    }
    let operation_id = match &handoff {
        Json::Object(admitted) => admitted.get("operation_id").cloned().unwrap_or(Json::Null),
        _ => Json::from(""),
    };
    let value = StopContext {
        release_dir: python_compat::path::pure_path_text(&layout.worker_release),
        operation_id,
        handoff,
    };
    verify_stop(args, layout, &value, services)?;
    seed_legacy_recovery(args, layout, services)
}

/// `stop`: prove the admission again, then stop the gateway and the worker.
pub(crate) fn stop(
    args: &Args,
    layout: &ExecutionLayout,
    value: &ActivationManifest,
    services: &dyn Native,
) -> Result<()> {
    verify_stop(args, layout, &StopContext::of(value), services)?;
    services.stop("gateway")?;
    services.stop("worker")
}

/// `suppress`: disable autostart of every installed role before rollback.
pub(crate) fn suppress(services: &dyn Native) -> Result<()> {
    for role in ["gateway", "worker"] {
        if state_of(&services.role_snapshot(role)?) != "absent" {
            services.set_enabled(role, false)?;
        }
    }
    Ok(())
}

/// `start`: load the published units and start the worker, then the
/// gateway, unless already running or starting.
pub(crate) fn start(services: &dyn Native) -> Result<()> {
    services.reload()?;
    for role in ["worker", "gateway"] {
        if !["running", "transitioning"].contains(&state_of(&services.observe(role)?)) {
            services.start(role)?;
        }
    }
    Ok(())
}

/// `restore`: bring both roles back to the journaled prior states.
pub(crate) fn restore(value: &ActivationManifest, services: &dyn Native) -> Result<()> {
    services.reload()?;
    let prior = |state: &Json, enabled: &Json| {
        python_compat::json_object! { "state" => state.clone(), "enabled" => enabled.clone() }
    };
    let priors = [
        (
            "worker",
            prior(value.get("service_state"), value.get("service_enabled")),
        ),
        (
            "gateway",
            prior(
                value.execution_field("gateway_state"),
                value.execution_field("gateway_enabled"),
            ),
        ),
    ];
    for (role, prior) in priors {
        if state_of(&services.observe(role)?) != "running" {
            services.restore(role, &prior)?;
        } else if state_of(&prior) != "absent" {
            let enabled = prior
                .get("enabled")
                .and_then(Json::as_bool)
                .unwrap_or(false);
            services.set_enabled(role, enabled)?;
        }
    }
    Ok(())
}

/// `release`: after verified settlement, let the worker admit work again.
pub(crate) fn release(
    value: &ActivationManifest,
    layout: &ExecutionLayout,
    services: &dyn Native,
) -> Result<()> {
    let phase = value.phase();
    if phase != "committed" && phase != "rollback-healthy" {
        return Err(Error::runtime(
            "admission cannot reopen before verified transaction settlement",
        ));
    }
    if phase == "rollback-healthy"
        && value.get("execution_layout").get("existed") != Some(&Json::Bool(true))
    {
        // A legacy monolith has no private execution lease.
        return Ok(());
    }
    if state_of(&services.role_snapshot("worker")?) == "running" {
        let snapshots = Snapshots(services);
        let control = WorkerControl::new().services(&snapshots);
        let operation = value
            .execution_field("operation_id")
            .as_str()
            .unwrap_or_default();
        control.release(layout, operation)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "operations_tests.rs"]
mod tests;

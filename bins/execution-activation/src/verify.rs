//! `verify` / `verify-restored`: the health install.sh fetched over its
//! PID-pinned connection must show exactly the paired gateway and worker the
//! manager runs, and (before commit) the worker must still be held by this
//! activation's sealed lease.

use agents_common::{
    locate_release, read_owned_config, read_private_file, ActivationManifest, Error,
    ExecutionLayout, Result, WorkerControl, ACTIVATION_CONFIG_LIMIT, PROTOCOL_VERSION,
};
use python_compat::{
    json::{parse_json, Json},
    strip, truthy,
};

use crate::cli::{Args, Operation};
use crate::native::{Native, Snapshots};

/// Limit of the stored health body.
const HEALTH_LIMIT: u64 = 1024 * 1024;

/// `verify` and `verify-restored`: proves, from the health document the
/// installer fetched over its pinned connection, that the running worker and
/// gateway are exactly the releases the journal expects before install.sh
/// commits (or after it restored the old ones). Ports `verify_components`.
pub(crate) fn verify_components(
    args: &Args,
    layout: &ExecutionLayout,
    value: &ActivationManifest,
    services: &dyn Native,
) -> Result<()> {
    // The outer installer obtained this response over its native-PID-pinned
    // connection, before transmitting the preserved administrator credential.
    let health = parse_json(&read_private_file(&args.health_file, HEALTH_LIMIT)?)?;
    let mut worker_version = Json::from(value.text("release_version"));
    let mut gateway_version = worker_version.clone();
    let mut worker_root = Json::from(value.text("release_dir"));
    if args.operation == Operation::VerifyRestored {
        if value.get("execution_layout").get("existed") != Some(&Json::Bool(true)) {
            // Authenticated legacy health remains the outer boundary.
            return Ok(());
        }
        let old_worker = value
            .execution_field("old_worker_release")
            .as_object()
            .cloned()
            .unwrap_or_default();
        let old_gateway = value.release("old_release");
        let located =
            |release: &python_compat::json::JsonObject| -> Result<Option<std::path::PathBuf>> {
                if release.is_empty() {
                    return Ok(None);
                }
                locate_release(release, &[])
            };
        let (Some(old_worker), Some(old_gateway)) = (located(&old_worker)?, located(&old_gateway)?)
        else {
            return Err(Error::runtime(
                "restored execution generations are not retained",
            ));
        };
        let version = |release: &std::path::Path| -> Result<Json> {
            let data = read_owned_config(&release.join("VERSION"), ACTIVATION_CONFIG_LIMIT)?;
            let text = std::str::from_utf8(&data)
                .map_err(|_| Error::value("'utf-8' codec can't decode VERSION"))?;
            Ok(Json::from(strip(text)))
        };
        worker_root = Json::from(old_worker.to_string_lossy().into_owned());
        worker_version = version(&old_worker)?;
        gateway_version = version(&old_gateway)?;
    }
    let snapshots = Snapshots(services);
    let control = WorkerControl::new().services(&snapshots);
    let record = control.worker_record(layout)?;
    let native = services.snapshot()?;
    let null = Json::Null;
    let gateway = health.get("gateway").and_then(Json::as_object);
    let worker = health.get("execution_service").and_then(Json::as_object);
    let protocol = Json::from(PROTOCOL_VERSION);
    let native_pid = |role: &str| {
        native
            .get(role)
            .and_then(|state| state.get("pid"))
            .unwrap_or(&null)
    };
    let paired = match (gateway, worker) {
        (Some(gateway), Some(worker)) => {
            let g = |key: &str| gateway.get(key).unwrap_or(&null);
            let w = |key: &str| worker.get(key).unwrap_or(&null);
            g("version") == &gateway_version
                && w("version") == &worker_version
                && g("protocol") == &protocol
                && w("protocol") == &protocol
                && record.get("release_root").unwrap_or(&null) == &worker_root
                && record.get("pid").unwrap_or(&null) == w("pid")
                && record.get("instance_id").unwrap_or(&null) == w("instance_id")
                && native_pid("worker") == w("pid")
                && native_pid("gateway") == g("pid")
        }
        _ => false,
    };
    if !paired {
        return Err(Error::runtime(
            "candidate gateway and worker do not match the paired release",
        ));
    }
    let (_record, status) = control.status(layout)?;
    let held = status
        .get("lease")
        .and_then(Json::as_object)
        .is_some_and(|lease| {
            lease.get("sealed").is_some_and(truthy)
                && lease.get("operation_id") == Some(value.execution_field("operation_id"))
        });
    if value.phase() != "committed" && !held {
        return Err(Error::runtime(
            "candidate worker is not held by this activation",
        ));
    }
    Ok(())
}

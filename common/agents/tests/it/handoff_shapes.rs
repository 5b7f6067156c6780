//! `release_existing_handoff` / `retry_failed_handoff` with replies no real
//! worker sends (empty or non-integer blockers, a lease without
//! `expires_at`, a foreign health identity, a release reply that still shows
//! a lease) and a native manager that disagrees with the receipt: an
//! in-process worker double on a real loopback port, injected through the
//! functions' `control`/`services` parameters as the original's tests inject
//! their fakes. The black-box tests against systemd are in
//! tests/tests/it/update_handoff_*.rs.

use std::path::PathBuf;

use agents_common::{
    atomic_write, layout_manifest, release_existing_handoff, retry_failed_handoff,
    test_support::HandoffRelease, WorkerControl,
};
use agents_tests::worker_double::{
    absent, lease, native, own_pid, running, stopped, FakeServices, Installed, WorkerDouble,
    INSTANCE_ID,
};
use agents_tests::{assert_error, make_dir, write_file};
use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object, ErrorClass,
};

const AGENT_TOKEN: &str = "agent-token-for-the-double";
const SERVER: &str = "server-identity-1";
const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
const OPERATION: &str = "01234567-89ab-cdef-0123-456789abcdef";
const LEASE: &str = "6f0c2c1e-0d7c-4b3e-9d2a-1b2c3d4e5f60";
const MAINTENANCE: &str = "/api/admin/execution/maintenance";

/// An installed layout, a running double holding the sealed handoff lease
/// and answering authenticated health, and the handoff file.
struct World {
    installed: Installed,
    double: WorkerDouble,
    handoff_file: PathBuf,
}

impl World {
    fn new(tag: &str) -> World {
        World::in_preparation(tag, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    }

    fn in_preparation(tag: &str, preparation: &str) -> World {
        let installed = Installed::with_layout(tag, |layout| {
            layout.insert(
                "environment",
                json_object! {"AGENTSDOCK_AGENT_TOKEN" => AGENT_TOKEN},
            );
        });
        let layout = &installed.layout;
        let manifest = layout_manifest(layout).unwrap();
        atomic_write(&layout.manifest_path(), &encode_indented(&manifest), 0o600).unwrap();
        let double = WorkerDouble::start();
        installed.write_record(&installed.record(double.port()));
        double.edit(|state| {
            state.lease = lease(LEASE, OPERATION, true);
            state.status_reply = Some(status(&[("active_runs", 0)], lease(LEASE, OPERATION, true)));
            state.health = Json::Object(json_object! {
                "ok" => true,
                "server_identity" => SERVER,
                "execution_service" => json_object! {"instance_id" => INSTANCE_ID, "pid" => own_pid()},
            });
        });
        let preparations = layout.install_root.join(".update-preparations");
        make_dir(&preparations, 0o700);
        make_dir(&preparations.join(preparation), 0o700);
        let handoff_file = preparations
            .join(preparation)
            .join(format!("handoff-{UPDATE_ID}.json"));
        write_file(&handoff_file, &encode_indented(&handoff().into()), 0o600);
        World {
            installed,
            double,
            handoff_file,
        }
    }

    fn root(&self) -> PathBuf {
        self.installed.layout.install_root.clone()
    }

    /// Sets the status the double reports.
    fn status(&self, reply: Json) {
        self.double.edit(|state| state.status_reply = Some(reply));
    }

    fn release(&self, services: &FakeServices) -> agents_common::Result<HandoffRelease> {
        let control = WorkerControl::new().services(services);
        release_existing_handoff(
            &self.root(),
            &self.handoff_file,
            Some(&control),
            Some(services),
        )
    }

    fn maintenance_requests(&self) -> usize {
        self.double
            .requests()
            .iter()
            .filter(|request| request.target == MAINTENANCE)
            .count()
    }
}

fn handoff() -> JsonObject {
    json_object! {
        "schema" => 1,
        "operation_id" => OPERATION,
        "worker_instance_id" => INSTANCE_ID,
        "lease_id" => LEASE,
        "expected_server_identity" => SERVER,
    }
}

fn status(blockers: &[(&str, i64)], lease: Json) -> Json {
    let blockers: JsonObject = blockers
        .iter()
        .map(|(name, count)| (name.to_string(), *count))
        .collect();
    Json::Object(json_object! {
        "worker_instance_id" => INSTANCE_ID,
        "idle" => blockers.values().all(|count| count.as_int() == Some(0)),
        "blockers" => blockers,
        "lease" => lease,
    })
}

fn edited(value: &Json, key: &str, replacement: Option<Json>) -> Json {
    let mut object = value.as_object().unwrap().clone();
    match replacement {
        Some(replacement) => {
            object.insert(key, replacement);
        }
        None => {
            object.remove(key);
        }
    }
    Json::Object(object)
}

fn services() -> FakeServices {
    FakeServices::worker_running(running(own_pid() + 1))
}

#[test]
fn the_original_release_goes_through_the_injected_double() {
    let world = World::new("handoff-happy");
    world.double.edit(|state| {
        state.maintenance_reply = vec![(
            "release".to_string(),
            status(&[("active_runs", 0)], Json::Null),
        )];
    });
    let released = world.release(&services()).unwrap();
    assert_eq!(
        released.to_json(),
        Json::Object(json_object! {
            "released" => true,
            "already_released" => false,
            "operation_id" => OPERATION,
            "worker_instance_id" => INSTANCE_ID,
        })
    );
    let bodies: Vec<Json> = world
        .double
        .requests()
        .iter()
        .filter(|request| request.target == MAINTENANCE)
        .map(|request| python_compat::json::parse_json(&request.body).unwrap())
        .collect();
    assert_eq!(
        bodies,
        [Json::Object(json_object! {
            "action" => "release",
            "expected_worker_instance_id" => INSTANCE_ID,
            "operation_id" => OPERATION,
            "lease_id" => LEASE,
        })]
    );
}

#[test]
fn unsettled_or_malformed_admission_is_not_settled() {
    let world = World::new("handoff-blockers");
    let held = lease(LEASE, OPERATION, true);
    let base = status(&[("active_runs", 0)], held.clone());
    let not_settled = "worker cleanup or admission has not settled";
    for (what, reply) in [
        (
            "no blockers",
            edited(&base, "blockers", Some(JsonObject::new().into())),
        ),
        ("blockers missing", edited(&base, "blockers", None)),
        (
            "blockers a list",
            edited(&base, "blockers", Some(Json::Array(vec![]))),
        ),
        (
            "a boolean blocker",
            edited(
                &base,
                "blockers",
                Some(json_object! {"active_sessions" => false}.into()),
            ),
        ),
        (
            "a float blocker",
            edited(
                &base,
                "blockers",
                Some(json_object! {"active_sessions" => 0.0}.into()),
            ),
        ),
        (
            "a negative blocker",
            edited(
                &base,
                "blockers",
                Some(json_object! {"active_sessions" => -1}.into()),
            ),
        ),
        (
            "a busy blocker",
            status(&[("active_runs", 0), ("managed_update", 1)], held.clone()),
        ),
        ("not idle", edited(&base, "idle", Some(false.into()))),
    ] {
        world.status(reply);
        assert_error(world.release(&services()), ErrorClass::Runtime, not_settled);
        assert_eq!(world.maintenance_requests(), 0, "{what}");
    }
}

#[test]
fn only_the_exact_sealed_non_expiring_lease_is_the_handoff() {
    let world = World::new("handoff-lease");
    let exact = "worker no longer holds the exact sealed handoff";
    let held = lease(LEASE, OPERATION, true);
    for (what, lease) in [
        ("no lease", Json::Null),
        ("a list", Json::Array(vec![held.clone()])),
        ("no expires_at", edited(&held, "expires_at", None)),
        (
            "an expiry",
            edited(&held, "expires_at", Some(1.0e10.into())),
        ),
        ("sealed 1", edited(&held, "sealed", Some(Json::Int(1)))),
        ("unsealed", edited(&held, "sealed", Some(false.into()))),
        (
            "another operation",
            edited(&held, "operation_id", Some(LEASE.into())),
        ),
        (
            "another lease",
            edited(&held, "lease_id", Some(OPERATION.into())),
        ),
    ] {
        world.status(status(&[("active_runs", 0)], lease));
        assert_error(world.release(&services()), ErrorClass::Runtime, exact);
        assert_eq!(world.maintenance_requests(), 0, "{what}");
    }
}

#[test]
fn the_authenticated_callback_must_be_the_handoff_worker() {
    let world = World::new("handoff-health");
    let health = world.double.state.lock().unwrap().health.clone();
    let identity = "authenticated worker identity does not match handoff";
    let execution = health.get("execution_service").unwrap().clone();
    for (what, reply) in [
        ("ok missing", edited(&health, "ok", None)),
        ("ok 1", edited(&health, "ok", Some(Json::Int(1)))),
        ("ok false", edited(&health, "ok", Some(false.into()))),
        (
            "another server",
            edited(&health, "server_identity", Some("other".into())),
        ),
        (
            "no execution service",
            edited(&health, "execution_service", None),
        ),
        (
            "another instance",
            edited(
                &health,
                "execution_service",
                Some(edited(&execution, "instance_id", Some("other".into()))),
            ),
        ),
        (
            "another pid",
            edited(
                &health,
                "execution_service",
                Some(edited(&execution, "pid", Some((own_pid() + 7).into()))),
            ),
        ),
    ] {
        world.double.edit(|state| state.health = reply);
        assert_error(world.release(&services()), ErrorClass::Runtime, identity);
        assert_eq!(world.maintenance_requests(), 0, "{what}");
    }
}

#[test]
fn the_native_worker_must_run_the_receipt_process() {
    let world = World::new("handoff-native");
    let owner = "native worker no longer owns the handoff";
    // The control's requests see the real receipt PID; the checks' own
    // snapshot sees the manager report another process, or a stopped worker.
    let requests = FakeServices::worker_running(absent());
    let control = WorkerControl::new().services(&requests);
    for (what, checked) in [
        (
            "another pid",
            FakeServices::new(vec![native(running(999), absent())]),
        ),
        (
            "stopped",
            FakeServices::new(vec![native(stopped(), absent())]),
        ),
        (
            "no worker",
            FakeServices::new(vec![json_object! {"gateway" => absent()}]),
        ),
    ] {
        assert_error(
            release_existing_handoff(
                &world.root(),
                &world.handoff_file,
                Some(&control),
                Some(&checked),
            ),
            ErrorClass::Runtime,
            owner,
        );
        assert_eq!(world.maintenance_requests(), 0, "{what}");
    }
}

#[test]
fn a_release_reply_must_confirm_the_lease_is_gone() {
    let world = World::new("handoff-confirm");
    let confirm = "worker did not confirm exact handoff release";
    let still_held = status(&[("active_runs", 0)], lease(LEASE, OPERATION, true));
    for (count, reply) in [
        (1, still_held.clone()),
        (2, edited(&still_held, "lease", None)),
    ] {
        world
            .double
            .edit(|state| state.maintenance_reply = vec![("release".to_string(), reply)]);
        assert_error(world.release(&services()), ErrorClass::Runtime, confirm);
        assert_eq!(world.maintenance_requests(), count);
    }
    // A reply from another instance fails the client's own epoch check first.
    let released = status(&[("active_runs", 0)], Json::Null);
    world.double.edit(|state| {
        state.maintenance_reply = vec![(
            "release".to_string(),
            edited(&released, "worker_instance_id", Some("other".into())),
        )]
    });
    assert_error(
        world.release(&services()),
        ErrorClass::Runtime,
        "worker changed during maintenance admission",
    );
    assert_eq!(world.maintenance_requests(), 3);
}

#[test]
fn a_retry_falls_back_to_the_update_id_for_an_empty_preparation() {
    let world = World::in_preparation("handoff-retry-empty", UPDATE_ID);
    // Unheld: the lost reply of an earlier release.
    world.status(status(&[("active_runs", 1)], Json::Null));
    let status_path = world
        .installed
        .layout
        .state_root
        .join("admin/server-update.json");
    make_dir(status_path.parent().unwrap(), 0o700);
    for preparation in [Json::Null, Json::from(""), Json::from(false), Json::Int(0)] {
        let saved = json_object! {
            "update_id" => UPDATE_ID,
            "preparation_id" => preparation.clone(),
            "phase" => "failed",
            "error_code" => "server_update_handoff_release_failed",
            "retryable" => true,
            "_execution_handoff" => handoff(),
        };
        let saved = Json::Object(saved);
        write_file(&status_path, &encode_indented(&saved), 0o600);
        let services = services();
        let control = WorkerControl::new().services(&services);
        let released = retry_failed_handoff(
            &world.root(),
            &status_path,
            &saved,
            Some(&control),
            Some(&services),
        )
        .unwrap_or_else(|err| panic!("preparation {preparation:?}: {err}"));
        assert!(released.already_released, "{preparation:?}");
        assert_eq!(world.maintenance_requests(), 0);
    }
}

//! The legacy-monolith admission of `preflight`/`stop` and the recovery
//! intent it records, over real files with a scripted native manager (the
//! split-worker path needs the real worker and is tested black-box).

use std::cell::RefCell;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use agents_common::{Result, Role};
use python_compat::{
    argparse::try_parse_command_line,
    json::{encode_indented, parse_json, Json, JsonObject},
    json_object,
};

use super::*;
use crate::cli::SPEC;
use crate::context::command_layout;

/// `verify_stop` with the layout built from `args`, as `run` builds it.
fn stop_with_layout(args: &Args, value: &StopContext, services: &dyn Native) -> Result<()> {
    verify_stop(args, &command_layout(args)?, value, services)
}

/// `seed_legacy_recovery` with the layout built from `args`, as `run` builds it.
fn original_with_layout(args: &Args, services: &dyn Native) -> Result<()> {
    seed_legacy_recovery(args, &command_layout(args)?, services)
}

const UPDATE: &str = "0123456789abcdef0123456789abcdef";
const OTHER_UPDATE: &str = "fedcba9876543210fedcba9876543210";
const SERVER: &str = "srv-1";
const PID: i128 = 4242;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A scripted manager: each snapshot pops the next worker PID (the last
/// one repeats), so a test can change the process between checks.
struct Scripted {
    pids: RefCell<Vec<i128>>,
}

impl Scripted {
    fn running(pids: &[i128]) -> Scripted {
        Scripted {
            pids: RefCell::new(pids.to_vec()),
        }
    }
}

impl Native for Scripted {
    fn observe(&self, role: Role) -> Result<JsonObject> {
        if role == Role::Gateway {
            return Ok(json_object! { "state" => "absent", "enabled" => false });
        }
        let mut pids = self.pids.borrow_mut();
        let pid = if pids.len() > 1 {
            pids.remove(0)
        } else {
            pids[0]
        };
        Ok(json_object! { "state" => "running", "enabled" => true, "pid" => pid })
    }
    fn stop(&self, _role: Role) -> Result<()> {
        unreachable!("admission never stops")
    }
    fn start(&self, _role: Role) -> Result<()> {
        unreachable!("admission never starts")
    }
    fn set_enabled(&self, _role: Role, _enabled: bool) -> Result<()> {
        unreachable!("admission never enables")
    }
    fn reload(&self) -> Result<()> {
        unreachable!("admission never reloads")
    }
    fn restore(&self, _role: Role, _prior: &JsonObject) -> Result<()> {
        unreachable!("admission never restores")
    }
}

/// A legacy install (no split layout) with the managed update's proofs.
struct Legacy {
    base: PathBuf,
}

impl Drop for Legacy {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn write_private(path: &Path, value: &Json) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, encode_indented(value)).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

fn directory(path: &Path, mode: u32) {
    fs::create_dir_all(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

impl Legacy {
    fn new() -> Legacy {
        let base = PathBuf::from(format!(
            "/tmp/agents-admission-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&base);
        for (path, mode) in [
            ("", 0o755),
            ("install", 0o700),
            ("install/releases", 0o755),
            ("install/releases/1.1.0", 0o755),
            ("config", 0o755),
            ("state", 0o755),
            ("state/admin", 0o700),
            ("home", 0o755),
        ] {
            directory(&base.join(path), mode);
        }
        let legacy = Legacy { base };
        legacy.write_health(&Json::Object(health()));
        write_private(&legacy.status_path(), &Json::Object(status()));
        write_private(&legacy.update_path(), &Json::Object(admitted()));
        legacy
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.base.join(relative)
    }

    fn status_path(&self) -> PathBuf {
        self.path("state/admin/server-update.json")
    }

    fn update_path(&self) -> PathBuf {
        self.path("state/admin/.execution-update-proof.AAAAAAAA")
    }

    fn health_path(&self) -> PathBuf {
        self.path("state/admin/.execution-handoff.AAAAAAAA")
    }

    fn write_health(&self, value: &Json) {
        write_private(&self.health_path(), value);
    }

    /// install.sh's stop-services argv with the legacy proof flags.
    fn args(&self, extra: &[(&str, String)]) -> Args {
        let text = |relative: &str| self.path(relative).to_str().unwrap().to_string();
        let mut words: Vec<String> = vec!["stop".into()];
        let mut flags: Vec<(&str, String)> = vec![
            ("--root", text("install")),
            ("--config-root", text("config")),
            ("--state-root", text("state")),
            ("--home", text("home")),
            ("--platform", "Linux".into()),
            ("--release-dir", text("install/releases/1.1.0")),
            ("--bind", "127.0.0.1".into()),
            ("--port", "7850".into()),
            ("--expected-server-identity", SERVER.into()),
            ("--health-file", self.health_path().to_str().unwrap().into()),
            ("--update-file", self.update_path().to_str().unwrap().into()),
            ("--expected-native-pid", PID.to_string()),
            ("--managed-update-id", UPDATE.into()),
            ("--candidate-source", text("install/releases/1.1.0")),
            ("--release-version", "1.1.0".into()),
            ("--api-contract", "7".into()),
        ];
        for (flag, value) in extra {
            match flags.iter_mut().find(|(name, _)| name == flag) {
                Some(entry) => entry.1 = value.clone(),
                None => flags.push((flag, value.clone())),
            }
        }
        for (flag, value) in flags {
            words.push(flag.to_string());
            words.push(value);
        }
        Args::from_parsed(&try_parse_command_line(&SPEC, &words).unwrap())
    }
}

fn health() -> JsonObject {
    json_object! {
        "ok" => true,
        "server_identity" => SERVER,
        "server_instance_id" => "instance-1",
        "active_count" => 0,
        "queued" => json_object! { "chat" => 0, "jobs" => 0 },
        "server_update" => json_object! { "update_id" => UPDATE },
        "update_service_cgroup" => json_object! { "safe" => true, "unknown_descendant_count" => 0 },
    }
}

fn status() -> JsonObject {
    json_object! { "phase" => "installing", "update_id" => UPDATE, "target_version" => "1.1.0" }
}

fn admitted() -> JsonObject {
    json_object! {
        "phase" => "installing",
        "update_id" => UPDATE,
        "server_identity" => SERVER,
        "server_instance_id" => "instance-1",
    }
}

fn context() -> StopContext {
    StopContext {
        release_dir: String::new(),
        operation_id: Json::from(""),
        handoff: Json::Null,
    }
}

#[track_caller]
fn refused(result: Result<()>, message: &str) {
    match result {
        Ok(()) => panic!("expected {message:?}"),
        Err(error) => assert_eq!(error.message(), message),
    }
}

#[test]
fn an_idle_monolith_in_the_admitted_update_may_be_stopped() {
    let legacy = Legacy::new();
    stop_with_layout(&legacy.args(&[]), &context(), &Scripted::running(&[PID])).unwrap();
    // A health that counts its blocking queue directly is accepted too.
    let mut counted = health();
    counted.remove("queued");
    counted.insert("update_blocking_queued_count", 0);
    legacy.write_health(&Json::Object(counted));
    stop_with_layout(&legacy.args(&[]), &context(), &Scripted::running(&[PID])).unwrap();
}

#[test]
fn a_busy_or_foreign_monolith_is_refused() {
    let legacy = Legacy::new();
    let not_idle = "running monolith is not in the exact admitted idle update";
    let services = Scripted::running(&[PID]);
    refused(
        stop_with_layout(
            &legacy.args(&[("--health-file", String::new())]),
            &context(),
            &services,
        ),
        "running monolith requires authenticated managed idle handoff",
    );
    refused(
        stop_with_layout(
            &legacy.args(&[("--update-file", String::new())]),
            &context(),
            &services,
        ),
        "legacy admission requires native authenticated update status",
    );
    refused(
        stop_with_layout(
            &legacy.args(&[("--expected-native-pid", "99".into())]),
            &context(),
            &services,
        ),
        not_idle,
    );
    refused(
        stop_with_layout(
            &legacy.args(&[("--managed-update-id", OTHER_UPDATE.into())]),
            &context(),
            &services,
        ),
        "installer update identity differs from admitted status",
    );
    for (key, value) in [
        ("active_count", Json::from(1)),
        ("queued", Json::Object(json_object! { "chat" => 2 })),
        ("server_identity", Json::from("srv-2")),
        (
            "server_update",
            Json::Object(json_object! { "update_id" => OTHER_UPDATE }),
        ),
    ] {
        let mut changed = health();
        changed.insert(key, value);
        legacy.write_health(&Json::Object(changed));
        refused(
            stop_with_layout(&legacy.args(&[]), &context(), &services),
            not_idle,
        );
    }
    let mut unsafe_cgroup = health();
    unsafe_cgroup.insert(
        "update_service_cgroup",
        json_object! { "safe" => true, "unknown_descendant_count" => 1 },
    );
    legacy.write_health(&Json::Object(unsafe_cgroup));
    refused(
        stop_with_layout(&legacy.args(&[]), &context(), &services),
        "monolith process ownership is not safe for handoff",
    );
    legacy.write_health(&Json::Object(health()));
    let mut finished = status();
    finished.insert("phase", "complete");
    write_private(&legacy.status_path(), &Json::Object(finished));
    refused(
        stop_with_layout(&legacy.args(&[]), &context(), &services),
        not_idle,
    );
}

#[test]
fn the_process_must_not_change_before_the_stop() {
    let legacy = Legacy::new();
    refused(
        stop_with_layout(
            &legacy.args(&[]),
            &context(),
            &Scripted::running(&[PID, PID, 5150]),
        ),
        "service process changed before installer stop",
    );
}

#[test]
fn a_runner_admits_only_its_descendants() {
    let legacy = Legacy::new();
    let parent = rustix::process::getppid().unwrap().as_raw_nonzero().get();
    let mut row = status();
    row.insert("runner_pid", parent);
    let args = legacy.args(&[("--managed-update-id", String::new())]);
    assert_eq!(
        admitted_update_id(&args, &Json::Object(row.clone())).unwrap(),
        UPDATE
    );
    let mut stranger = std::process::Command::new("/bin/sleep")
        .arg("30")
        .spawn()
        .unwrap();
    row.insert("runner_pid", stranger.id());
    assert_eq!(
        admitted_update_id(&args, &Json::Object(row.clone()))
            .unwrap_err()
            .message(),
        "legacy installer is not descended from the admitted updater"
    );
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    for runner in [Json::from(1), Json::from("42"), Json::Null] {
        row.insert("runner_pid", runner);
        assert_eq!(
            admitted_update_id(&args, &Json::Object(row.clone()))
                .unwrap_err()
                .message(),
            "legacy installer has no admitted runner authority"
        );
    }
}

#[test]
fn a_legacy_preflight_records_the_admitted_recovery_intent() {
    let legacy = Legacy::new();
    let args = legacy.args(&[]);
    original_with_layout(&args, &Scripted::running(&[PID])).unwrap();
    let row = parse_json(&fs::read(legacy.status_path()).unwrap()).unwrap();
    let intent = row.get("_activation_recovery").expect("intent recorded");
    assert_eq!(intent.get("update_id"), Some(&Json::from(UPDATE)));
    assert_eq!(intent.get("version"), Some(&Json::from("1.1.0")));
    assert_eq!(intent.get("api_contract"), Some(&Json::from(7)));
    assert_eq!(intent.get("server_identity"), Some(&Json::from(SERVER)));
    assert_eq!(
        intent.get("root"),
        Some(&Json::from(legacy.path("install").to_str().unwrap()))
    );
    assert!(row.get("updated_at").and_then(Json::as_str).is_some());
    // Recording the same intent again is idempotent.
    original_with_layout(&args, &Scripted::running(&[PID])).unwrap();

    // An old updater's different intent is replaced only when no owner was
    // ever armed and no journal holds it.
    let mut row = row.as_object().unwrap().clone();
    let mut previous = intent.as_object().unwrap().clone();
    previous.insert("update_id", OTHER_UPDATE);
    row.insert("_activation_recovery", previous.clone());
    write_private(&legacy.status_path(), &Json::Object(row.clone()));
    original_with_layout(&args, &Scripted::running(&[PID])).unwrap();
    let replaced = parse_json(&fs::read(legacy.status_path()).unwrap()).unwrap();
    assert_eq!(
        replaced
            .get("_activation_recovery")
            .and_then(|intent| intent.get("update_id")),
        Some(&Json::from(UPDATE))
    );
    row.insert("_activation_recovery", previous);
    write_private(&legacy.status_path(), &Json::Object(row));
    directory(&legacy.path("install/.activation-transaction"), 0o700);
    refused(
        original_with_layout(&args, &Scripted::running(&[PID])),
        "a lifecycle journal still owns the previous recovery intent",
    );
}

#[test]
fn a_changed_admission_records_nothing() {
    let legacy = Legacy::new();
    let mut other = admitted();
    other.insert("update_id", OTHER_UPDATE);
    write_private(&legacy.update_path(), &Json::Object(other));
    let before = fs::read(legacy.status_path()).unwrap();
    refused(
        original_with_layout(&legacy.args(&[]), &Scripted::running(&[PID])),
        "legacy admission changed before recovery intent publication",
    );
    assert_eq!(fs::read(legacy.status_path()).unwrap(), before);
}

/// A host whose kernel and tmux know nothing: the proof can only fail, so
/// where it fails shows how far the helper let it run.
struct EmptyKernel {
    darwin: bool,
}

impl LegacyRunnerProbe for EmptyKernel {
    fn host_is_darwin(&self) -> bool {
        self.darwin
    }
    fn bsd_info(&self, _pid: i32) -> Vec<u8> {
        Vec::new()
    }
    fn executable_path(&self, _pid: i32) -> Option<Vec<u8>> {
        None
    }
    fn arguments_size(&self, _pid: i32) -> Option<usize> {
        None
    }
    fn arguments(&self, _pid: i32, _capacity: usize) -> Option<Vec<u8>> {
        None
    }
    fn tmux_socket(&self) -> Result<PathBuf> {
        Ok(PathBuf::from("/nonexistent/tmux-0/default"))
    }
    fn tmux_program(&self) -> Option<PathBuf> {
        None
    }
    fn run(
        &self,
        _argv: &[String],
        _environment: &[(&str, String)],
        _timeout: std::time::Duration,
    ) -> Result<agents_common::CommandCapture> {
        unreachable!("the proof fails before it asks tmux")
    }
}

#[test]
fn a_runner_less_macos_update_is_admitted_only_through_the_legacy_runner_proof() {
    let legacy = Legacy::new();
    let args = legacy.args(&[
        ("--managed-update-id", String::new()),
        ("--platform", "Darwin".into()),
    ]);
    let row = Json::Object(status());
    // Off macOS the original's sys.platform check refuses the fallback.
    assert_eq!(
        admitted_update_id(&args, &row).unwrap_err().message(),
        "legacy ancestry fallback does not apply"
    );
    // On macOS the full proof runs: here it gets past the directory pins
    // and stops at the missing `current` link of this legacy tree.
    let error = admitted_update_id_with(&args, &row, &EmptyKernel { darwin: true }).unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert!(error.message().ends_with("install/current'"), "{error:?}");
    // A non-hex identity never takes the fallback, and a recorded runner
    // PID (even an invalid one) is checked by ancestry instead.
    let mut upper = status();
    upper.insert("update_id", UPDATE.to_uppercase());
    let mut invalid_runner = status();
    invalid_runner.insert("runner_pid", "42");
    for row in [upper, invalid_runner] {
        assert_eq!(
            admitted_update_id_with(&args, &Json::Object(row), &EmptyKernel { darwin: true })
                .unwrap_err()
                .message(),
            "legacy installer has no admitted runner authority"
        );
    }
}

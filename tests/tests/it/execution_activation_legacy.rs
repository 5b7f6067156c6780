//! Black-box tests of `preflight` in front of a running legacy monolith
//! (the single `agents-server.service` of a pre-split install) under a real
//! systemd user manager: the idle-in-admitted-update proof from the health
//! and update files, the recovery intent recorded for the managed update,
//! and the proof that an abandoned split receipt left behind is dead.

use crate::execution_activation_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};

use agents_common::WORKER_UNIT;
use agents_tests::{binary_path, poll_until, Sandbox};
use execution_activation_support::{write_json, Monolith, SERVER, UPDATE};
use python_compat::{
    json::{parse_json, Json},
    json_object,
};

#[track_caller]
fn assert_ok(output: &Output) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(0), "", "")
    );
}

#[track_caller]
fn assert_fails(output: &Output, line: &str) {
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).as_ref(),
            String::from_utf8_lossy(&output.stderr).as_ref()
        ),
        (Some(1), "", format!("{line}\n").as_str())
    );
}

/// A PID that no process has any more.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn an_idle_monolith_admits_and_records_the_recovery_intent() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let monolith = Monolith::start(&sandbox);
    assert_ok(&monolith.preflight(true));
    let row = parse_json(&fs::read(monolith.status_path()).unwrap()).unwrap();
    let intent = row.get("_activation_recovery").expect("intent recorded");
    assert_eq!(intent.get("update_id"), Some(&Json::from(UPDATE)));
    assert_eq!(intent.get("server_identity"), Some(&Json::from(SERVER)));
    assert_eq!(
        fs::metadata(monolith.status_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert!(
        sandbox.unit_state(WORKER_UNIT).is_running(),
        "preflight only reads"
    );

    monolith.write_health(json_object! { "active_count" => 1 });
    assert_fails(
        &monolith.preflight(true),
        "RuntimeError: running monolith is not in the exact admitted idle update",
    );
    assert_fails(
        &monolith.preflight(false),
        "RuntimeError: running monolith requires authenticated managed idle handoff",
    );
}

#[test]
fn an_abandoned_split_receipt_must_be_dead_and_unheld() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let monolith = Monolith::start(&sandbox);
    monolith.abandon_receipt(dead_pid());
    assert_ok(&monolith.preflight(true));
    assert_fails(
        &monolith.preflight(false),
        "RuntimeError: stale worker receipt requires authenticated legacy health",
    );
    monolith.write_health(json_object! { "gateway" => json_object! { "pid" => 1 } });
    assert_fails(
        &monolith.preflight(true),
        "RuntimeError: worker receipt is not associated with authenticated legacy health",
    );
    monolith.write_health(json_object! {});
    // A receipt whose worker still runs is not abandoned.
    let mut alive = std::process::Command::new("/bin/sleep")
        .arg("60")
        .spawn()
        .unwrap();
    monolith.abandon_receipt(alive.id());
    assert_fails(
        &monolith.preflight(true),
        "RuntimeError: abandoned worker PID is still alive",
    );
    alive.kill().unwrap();
    alive.wait().unwrap();
    // A lease someone still holds refuses admission without waiting.
    monolith.abandon_receipt(dead_pid());
    let lock = fs::File::open(monolith.roots.runtime_dir().join("worker.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let output = monolith.preflight(true);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .ends_with("BlockingIOError: [Errno 11] Resource temporarily unavailable\n"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    drop(lock);
    // A receipt of another listener is not this installation's.
    let receipt = monolith.roots.runtime_dir().join("worker.json");
    let mut value = parse_json(&fs::read(&receipt).unwrap())
        .unwrap()
        .as_object()
        .cloned()
        .unwrap();
    value.insert("public_port", 1);
    write_json(&receipt, value);
    assert_fails(
        &monolith.preflight(true),
        "RuntimeError: abandoned worker receipt is invalid",
    );
}

/// SIGHUP (1), SIGINT (2) and SIGTERM (15), the signals install.sh masks,
/// as a `/proc/<pid>/status` signal set (bit n-1 stands for signal n).
const MASKED: u64 = (1 << 0) | (1 << 1) | (1 << 14);

/// A hexadecimal signal set of `/proc/<pid>/status` (`SigIgn`, `SigCgt`).
fn signal_set(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    u64::from_str_radix(line.trim(), 16).unwrap()
}

/// Whether `pid` waits in `flock` for a lock someone else holds
/// (`/proc/locks` lists waiters with `->`).
fn waits_for_flock(pid: u32) -> bool {
    fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"->") && fields.get(5) == Some(&pid.to_string().as_str())
        })
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

#[test]
fn signals_the_installer_ignored_stay_ignored_while_the_helper_waits() {
    let Some(sandbox) = Sandbox::start_or_skip(agents_tests::test_name!()) else {
        return;
    };
    let monolith = Monolith::start(&sandbox);
    // The server holds its status lock: preflight blocks in flock before it
    // records the recovery intent.
    let lock_path = monolith
        .roots
        .state_root()
        .join("admin/.server-update.json.lock");
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .unwrap();
    fs::set_permissions(&lock_path, fs::Permissions::from_mode(0o600)).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let status_before = fs::read(monolith.status_path()).unwrap();
    let wait = std::time::Duration::from_secs(10);

    // Control: started with default dispositions, TERM ends the helper.
    let mut plain = monolith
        .preflight_command(true, false)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    poll_until(wait, "the unmasked helper waiting", || {
        waits_for_flock(plain.id()).then_some(())
    });
    assert_eq!(signal_set(plain.id(), "SigIgn") & MASKED, 0);
    signal(plain.id(), rustix::process::Signal::TERM);
    let status = plain.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15));
    assert_eq!(fs::read(monolith.status_path()).unwrap(), status_before);

    // As install.sh runs it in a masked window.
    let masked = monolith
        .preflight_command(true, true)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = masked.id();
    poll_until(wait, "the masked helper waiting", || {
        waits_for_flock(pid).then_some(())
    });
    // bash exec'd the helper itself, which kept the ignored dispositions
    // and installed no handler of its own.
    assert_eq!(
        fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        binary_path("execution-activation")
    );
    assert_eq!(signal_set(pid, "SigIgn") & MASKED, MASKED);
    assert_eq!(signal_set(pid, "SigCgt") & MASKED, 0);
    for sent in [
        rustix::process::Signal::HUP,
        rustix::process::Signal::INT,
        rustix::process::Signal::TERM,
    ] {
        signal(pid, sent);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(waits_for_flock(pid), "the helper survived and still waits");
    drop(lock);
    let output = masked.wait_with_output().unwrap();
    assert_ok(&output);
    let row = parse_json(&fs::read(monolith.status_path()).unwrap()).unwrap();
    assert_eq!(
        row.get("_activation_recovery")
            .and_then(|intent| intent.get("update_id")),
        Some(&Json::from(UPDATE)),
        "the signalled helper still recorded the intent"
    );
}

//! The single integration-test binary of `agents-common`: every area
//! is a module here, so the tests link once (a test's name is
//! `<module>::<test>`).

mod activation_handoff;
mod activation_invocation;
mod activation_manifest;
mod fs_abandoned_drafts;
mod fs_atomic_write;
mod fs_paths;
mod fs_read_file;
mod fs_read_regular_file;
mod fs_secret;
mod fs_snapshot;
mod fs_umask;
mod handoff_properties;
mod handoff_shapes;
mod http_pinned;
mod http_refusals;
mod install_lock_install_sh;
mod install_lock_processes;
mod install_lock_refusals;
mod layout_golden;
mod layout_runtime;
mod layout_validate;
mod services_command;
mod services_launchd;
mod services_state_json;
mod services_systemd_recorded;
mod update_status_leftovers;
mod update_status_races;
mod worker_control_admission;
mod worker_control_health;

/// Entry point of the lock tests' `Kind::Rust` contender processes (this
/// binary run again with `--exact lock_holder_process`); not a test. It sits
/// at the root so that its name is `install_lock_fixtures::HOLDER_ENTRY`.
#[test]
#[ignore = "runs only inside contender processes started by the other tests"]
fn lock_holder_process() {
    agents_tests::install_lock_fixtures::holder_process();
}

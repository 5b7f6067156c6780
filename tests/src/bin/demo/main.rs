//! `demo`: the project's main job, end to end, on this machine (run it with
//! `bash scripts/demo.sh`, as root).
//!
//! A private `systemd --user` manager (its own mount namespace, cgroup, HOME
//! and runtime directory; nothing on the host changes) runs a split
//! AgentsServer installation whose worker and gateway are the test worker,
//! on loopback only. The built helpers then do the real work, one step per
//! printed line: `execution-manage apply` installs release A and moves worker
//! and gateway to B, `inspect` shows an activation in flight, a broken
//! candidate C is refused and rolled back to B, and `uninstall --yes` removes
//! everything but the preserved state. Each step checks what it claims
//! (services, PIDs, versions, files) and the demo fails (exit 1) as soon as
//! one does not hold. Nothing is left running: the manager stops with the
//! demo, and the last step proves its cgroup is empty.
//!
//! The managed update (`update-runner` downloading a signed release from a
//! local server and driving `execution-activation` through an installer) has
//! its slot in [`Demo::activate`]: until `update-runner` delivers updates,
//! activations go through `execution-manage`.

mod steps;

use std::process::ExitCode;

fn main() -> ExitCode {
    match steps::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("demo: FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

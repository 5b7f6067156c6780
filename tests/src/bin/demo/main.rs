//! `demo`: the project's main job, end to end, on this machine (run it with
//! `bash scripts/demo.sh`, as root).
//!
//! A private `systemd --user` manager (its own mount namespace, cgroup, HOME
//! and runtime directory; nothing on the host changes) runs a split
//! AgentsServer installation whose worker and gateway are the test worker,
//! on loopback only. The built helpers then do the real work, one step per
//! printed line: `execution-manage apply` installs release A; support staff
//! pin the worker to a hotfix with `apply --scope worker`, `execution-manage
//! inspect` shows the pending activation, and new work makes the worker
//! refuse its seal, so the pin rolls back with nothing changed; a signed
//! release host on loopback offers B and C; `update-runner`, started with the
//! server's argv and sealed handoff, checks, downloads and verifies B and runs
//! its stand-in install.sh, which drives `execution-activation` through
//! quiesce, publish, start, verify and commit while the status row is printed
//! phase by phase; C's installer fails after its candidate started and rolls
//! back to B, and the runner records the failure; the same pin is then
//! refused before staging (install.sh's units are not `apply`'s own, as
//! upstream); a pin killed while it holds the install lock leaves a stale
//! lock, which `execution-manage doctor` reports with the exact command that
//! removes it, and after which doctor reports everything healthy;
//! `uninstall --yes` removes everything but the preserved state. Each step checks what it claims
//! (services, PIDs, versions, files, rows) and the demo fails (exit 1) as
//! soon as one does not hold. Nothing is left running: the manager stops with
//! the demo, and the last step proves its cgroup is empty.
//!
//! The same binary is the releases' stand-in installer: their install.sh
//! execs `demo install-sh ...` (see [`installer`]).

mod installer;
mod steps;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("install-sh") {
        return ExitCode::from(installer::run(&args[1..]));
    }
    match steps::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("demo: FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

//! Many sandboxed managers started and stopped at once. Every start must
//! succeed and every teardown must leave no cgroup or process behind, also
//! while a neighbour removes empty cgroups: an exiting `systemd` manager does
//! that to every empty group below its own cgroup, so one running at the
//! hierarchy root can remove a new sandbox's group before its manager joins.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use agents_tests::{ProcessIdentity, Sandbox};

const THREADS: usize = 8;
const ROUNDS: usize = 5;
/// The transient unit each sandbox runs once.
const PROBE: &str = "stress-probe.service";

/// The two tests each start 40 managers; running them together would only
/// overload the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What one sandbox left behind after its drop.
struct Leftovers {
    processes: Vec<ProcessIdentity>,
    cgroups: Vec<PathBuf>,
}

/// Starts one sandbox, checks it answers and runs a transient unit, stops it,
/// and reports what survived the drop.
fn cycle() -> Result<Leftovers, String> {
    let sandbox = Sandbox::start().map_err(|err| err.to_string())?;
    let environment = sandbox.systemctl(&["show-environment"]);
    if !environment.status.success() {
        return Err(format!(
            "show-environment failed ({}): {}",
            environment.status,
            String::from_utf8_lossy(&environment.stderr)
        ));
    }
    // Not `--wait`: that needs the user D-Bus, which may not listen yet. A
    // oneshot's start job ends when `/bin/true` has exited successfully.
    let transient = sandbox
        .command("systemd-run")
        .args([
            "--user",
            "--quiet",
            "--unit",
            PROBE,
            "--property",
            "Type=oneshot",
        ])
        .args(["--property", "RemainAfterExit=yes", "/bin/true"])
        .output()
        .map_err(|err| format!("cannot run systemd-run: {err}"))?;
    let probe = sandbox.unit_state(PROBE);
    if !transient.status.success() || probe.active_state != "active" {
        return Err(format!(
            "transient /bin/true failed ({}, {probe:?}): {}",
            transient.status,
            String::from_utf8_lossy(&transient.stderr)
        ));
    }
    let processes: Vec<ProcessIdentity> = sandbox
        .processes()
        .into_iter()
        .filter_map(ProcessIdentity::of)
        .collect();
    if !processes
        .iter()
        .any(|process| process.pid == sandbox.manager_pid())
    {
        return Err(format!(
            "manager {} is not in its own cgroups {:?}: {processes:?}",
            sandbox.manager_pid(),
            sandbox.cgroups()
        ));
    }
    let cgroups = sandbox.cgroups();
    if cgroups.is_empty() {
        return Err("the sandbox has no cgroup".to_string());
    }
    drop(sandbox);
    Ok(Leftovers {
        processes: processes
            .into_iter()
            .filter(ProcessIdentity::is_alive)
            .collect(),
        cgroups: cgroups
            .into_iter()
            .filter(|directory| directory.exists())
            .collect(),
    })
}

/// Runs [`cycle`] `ROUNDS` times on each of `THREADS` threads and fails the
/// test unless every cycle succeeded and left nothing behind.
fn stress(test: &str) {
    // No barrier between rounds: one thread's start overlaps another's teardown.
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            thread::spawn(move || {
                // Each sandbox is created and dropped on this thread (PR_SET_PDEATHSIG).
                (0..ROUNDS)
                    .map(|round| (thread, round, cycle()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<_> = workers
        .into_iter()
        .flat_map(|worker| worker.join().expect("a stress thread panicked"))
        .collect();

    let mut failures = Vec::new();
    for (thread, round, outcome) in &outcomes {
        match outcome {
            Err(why) => failures.push(format!("thread {thread} round {round}: {why}")),
            Ok(left) if !left.processes.is_empty() || !left.cgroups.is_empty() => {
                failures.push(format!(
                    "thread {thread} round {round}: left processes {:?} and cgroups {:?}",
                    left.processes, left.cgroups
                ))
            }
            Ok(_) => {}
        }
    }
    eprintln!(
        "{test}: {} of {} sandbox cycles succeeded",
        outcomes.len() - failures.len(),
        outcomes.len()
    );
    assert_eq!(outcomes.len(), THREADS * ROUNDS);
    assert!(
        failures.is_empty(),
        "{test}: {} of {} sandbox cycles failed:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
}

/// Starts one manager to learn whether the machine can run sandboxes (and
/// skips, or fails under `CI=true`, when it cannot); returns the directories
/// that hold the sandbox cgroups, one per hierarchy.
fn cgroup_parents(test: &str) -> Option<Vec<PathBuf>> {
    let probe = Sandbox::start_or_skip(test)?;
    let parents = probe
        .cgroups()
        .iter()
        .map(|group| group.parent().expect("a cgroup has a parent").to_path_buf())
        .collect();
    drop(probe);
    Some(parents)
}

/// Runs `test` alone in a child process unless this is that child: the stress
/// starts 40 managers and trims the sandbox cgroups named after its process,
/// which must not touch the sandboxes of the other tests in this binary.
fn ran_in_a_child(test: &str) -> bool {
    agents_tests::ran_alone(module_path!(), test)
}

#[test]
fn many_sandboxes_start_and_stop_concurrently() {
    let test: &str = agents_tests::test_name!();
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|err| err.into_inner());
    if ran_in_a_child(test) {
        return;
    }
    if cgroup_parents(test).is_none() {
        return;
    }
    stress(test);
}

#[test]
fn sandboxes_start_while_a_neighbour_removes_empty_cgroups() {
    let test: &str = agents_tests::test_name!();
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|err| err.into_inner());
    if ran_in_a_child(test) {
        return;
    }
    let Some(parents) = cgroup_parents(test) else {
        return;
    };
    // Does what an exiting manager above the sandboxes does, limited to this
    // process's own sandbox groups (named after its PID) so nothing else on
    // the machine is touched; rmdir fails on a group with members or children.
    let prefix = format!("agents-sandbox-{}-", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicUsize::new(0));
    let neighbour = {
        let (stop, removed) = (Arc::clone(&stop), Arc::clone(&removed));
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for parent in &parents {
                    for entry in fs::read_dir(parent).into_iter().flatten().flatten() {
                        let ours = entry.file_name().to_string_lossy().starts_with(&prefix);
                        if ours && fs::remove_dir(entry.path()).is_ok() {
                            removed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let outcome = std::panic::catch_unwind(|| stress(test));
    stop.store(true, Ordering::Relaxed);
    neighbour.join().expect("the trimming thread panicked");
    let removed = removed.load(Ordering::Relaxed);
    eprintln!("{test}: the neighbour removed {removed} empty sandbox cgroups");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert!(
        removed > 0,
        "the neighbour never removed a group: no race was exercised"
    );
}

//! install.sh comparison (`scripts/installsh-compare.sh`): upstream's
//! unmodified install.sh (and the installed uninstall.sh) run on the release as
//! published and on the same release after the migration kit, each scenario on
//! a fresh identical sandbox at the same paths. Compared after every step: the
//! exit status, stdout and stderr lines, the helper calls and their exit
//! statuses, the `systemctl` calls that change something, every file of the
//! install, config and state roots and the unit directory, and the units'
//! states (see `agents_tests::installsh_facets` for what is normalised).

use agents_tests::installsh::{
    finish, Host, Release, Scratch, RELEASE_A, RELEASE_B, RELEASE_UNHEALTHY,
};
use agents_tests::installsh_facets::{self as facets, ReleaseFiles};
use agents_tests::installsh_state;
use agents_tests::upstream::{
    recorded_path, report, selected, Normalizer, Observed, Side, RECORD_ENV,
};
use agents_tests::{free_port, Sandbox};

/// Where a run of install.sh is interrupted: while the `occurrence`th
/// `systemctl` call with exactly these arguments is held, by this signal.
#[derive(Debug, Clone, Copy)]
struct Interrupt {
    call: &'static str,
    occurrence: u32,
    signal: Kill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// SIGKILL to install.sh's whole process group (a crash).
    Group,
    /// SIGTERM to install.sh alone (its trap runs once the held call returns,
    /// which it does when the held call is ended).
    Term,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// install.sh of a release with extra arguments.
    Install(Release, &'static [&'static str]),
    /// The same, interrupted.
    Interrupted(Release, &'static [&'static str], Interrupt),
    /// A managed update's install.sh: the server seals the running worker and
    /// passes the handoff and its identity.
    Update(Release),
    /// The installed `uninstall.sh --yes`.
    Uninstall,
}

struct Scenario {
    name: &'static str,
    steps: &'static [Step],
}

const NONE: &[&str] = &[];

fn scenarios() -> Vec<Scenario> {
    use Step::*;
    vec![
        Scenario {
            name: "installsh-fresh-install",
            steps: &[Install(RELEASE_A, NONE)],
        },
        Scenario {
            name: "installsh-fresh-install-killed-at-enable-then-rerun",
            steps: &[
                Interrupted(
                    RELEASE_A,
                    NONE,
                    Interrupt {
                        call: "--user enable agents-server.service",
                        occurrence: 1,
                        signal: Kill::Group,
                    },
                ),
                Install(RELEASE_A, NONE),
            ],
        },
        Scenario {
            name: "installsh-fresh-install-terminated-at-start-then-rerun",
            steps: &[
                Interrupted(
                    RELEASE_A,
                    NONE,
                    Interrupt {
                        call: "--user start --no-block agents-server.service",
                        occurrence: 1,
                        signal: Kill::Term,
                    },
                ),
                Install(RELEASE_A, NONE),
            ],
        },
        Scenario {
            name: "installsh-same-version-again",
            steps: &[Install(RELEASE_A, NONE), Install(RELEASE_A, NONE)],
        },
        Scenario {
            name: "installsh-update-unmanaged-refused",
            steps: &[Install(RELEASE_A, NONE), Install(RELEASE_B, NONE)],
        },
        Scenario {
            name: "installsh-same-version-managed",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_A)],
        },
        Scenario {
            name: "installsh-update",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_B)],
        },
        Scenario {
            name: "installsh-update-unhealthy-rolls-back",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_UNHEALTHY)],
        },
        Scenario {
            name: "installsh-fresh-install-then-uninstall",
            steps: &[Install(RELEASE_A, NONE), Uninstall],
        },
        Scenario {
            name: "installsh-uninstall",
            steps: &[Install(RELEASE_A, NONE), Update(RELEASE_B), Uninstall],
        },
    ]
}

#[test]
#[ignore = "needs the upstream release tree; run scripts/installsh-compare.sh"]
fn installsh_comparison() {
    let Some(scratch) = Scratch::locate("installsh_comparison") else {
        return;
    };
    for scenario in scenarios() {
        if !selected(scenario.name) {
            continue;
        }
        let port = free_port();
        let [seed, binaries] = Side::BOTH.map(|side| run(&scratch, side, &scenario, port));
        report(scenario.name, &seed, &binaries);
    }
}

fn run(scratch: &Scratch, side: Side, scenario: &Scenario, port: u16) -> Observed {
    let sandbox = Sandbox::start_named(scenario.name).expect("the systemd sandbox starts");
    let host = Host::new(Some(&scratch.uv_cache()), &sandbox, port);
    let mut releases = Vec::new();
    for step in scenario.steps {
        if let Step::Install(release, _)
        | Step::Interrupted(release, _, _)
        | Step::Update(release) = step
        {
            if !releases.iter().any(|(folder, _)| *folder == release.folder) {
                releases.push((
                    release.folder,
                    scratch.release(side, sandbox.base(), *release),
                ));
            }
        }
    }
    let paths: Vec<&std::path::Path> = releases.iter().map(|(_, path)| path.as_path()).collect();
    let files = ReleaseFiles::of(&paths);
    let mut normalizer = facets::normalizer(&host, &files);
    let mut observed = Observed::default();
    for (index, step) in scenario.steps.iter().enumerate() {
        let label = format!("{} {}", index + 1, step_name(step));
        host.trace.reset();
        let output = match step {
            Step::Install(release, arguments) => {
                let script = sandbox.base().join(release.folder).join("install.sh");
                finish(
                    host.command(&script, &install_arguments(port, arguments))
                        .spawn()
                        .unwrap(),
                )
            }
            Step::Interrupted(release, arguments, interrupt) => {
                let script = sandbox.base().join(release.folder).join("install.sh");
                interrupted(
                    &host,
                    &script,
                    &install_arguments(port, arguments),
                    *interrupt,
                )
            }
            Step::Update(release) => {
                let script = sandbox.base().join(release.folder).join("install.sh");
                let handoff = host.seal_handoff();
                let mut arguments = install_arguments(port, NONE);
                arguments.extend([
                    "--execution-handoff-file".to_string(),
                    handoff.to_string_lossy().into_owned(),
                    "--expected-server-identity".to_string(),
                    agents_tests::installsh::SERVER_IDENTITY.to_string(),
                ]);
                finish(host.command(&script, &arguments).spawn().unwrap())
            }
            Step::Uninstall => {
                if side == Side::Seed && std::env::var_os(RECORD_ENV).is_some() {
                    installsh_state::record(
                        &sandbox,
                        port,
                        &installsh_state::archive_path(scenario.name),
                    );
                }
                let script = host.roots()[0].join("current/uninstall.sh");
                finish(host.command(&script, &["--yes"]).spawn().unwrap())
            }
        };
        host.settle();
        observe(
            &mut observed,
            &label,
            &host,
            &files,
            &mut normalizer,
            &output,
        );
    }
    observed
}

fn observe(
    observed: &mut Observed,
    label: &str,
    host: &Host<'_>,
    files: &ReleaseFiles,
    normalizer: &mut Normalizer,
    output: &std::process::Output,
) {
    facets::run(observed, label, output, normalizer);
    facets::helper_calls(observed, label, &host.exec_log(), normalizer);
    facets::installation(observed, label, host, files, normalizer);
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Install(release, arguments) => format!(
            "install {}{}",
            release.version,
            arguments
                .iter()
                .map(|word| format!(" {word}"))
                .collect::<String>()
        ),
        Step::Interrupted(release, arguments, interrupt) => format!(
            "install {}{} interrupted at {} #{} {:?}",
            release.version,
            arguments
                .iter()
                .map(|word| format!(" {word}"))
                .collect::<String>(),
            interrupt.call,
            interrupt.occurrence,
            interrupt.signal
        ),
        Step::Update(release) => format!("managed install {}", release.version),
        Step::Uninstall => "uninstall".to_string(),
    }
}

fn install_arguments(port: u16, extra: &[&str]) -> Vec<String> {
    let mut arguments = vec![
        "--non-interactive".to_string(),
        "--port".to_string(),
        port.to_string(),
        "--bind".to_string(),
        "127.0.0.1".to_string(),
    ];
    arguments.extend(extra.iter().map(|word| word.to_string()));
    arguments
}

/// Runs install.sh until the interrupt's `systemctl` call is held, then
/// interrupts it; returns its output.
fn interrupted(
    host: &Host<'_>,
    script: &std::path::Path,
    arguments: &[String],
    interrupt: Interrupt,
) -> std::process::Output {
    let words: Vec<&str> = arguments.iter().map(String::as_str).collect();
    host.trace.stall_at(interrupt.call, interrupt.occurrence);
    let mut child = host.command(script, &words).spawn().unwrap();
    let reached =
        agents_tests::upstream::wait_reached(&mut child, "the held call", || host.trace.stalled());
    assert!(reached, "install.sh never made the call {}", interrupt.call);
    match interrupt.signal {
        Kill::Group => crash(child.id()),
        Kill::Term => {
            let installer = installer_pid(child.id()).expect("install.sh runs under strace");
            signal(installer, rustix::process::Signal::TERM);
            if let Some(held) = host.trace.stalled_pid() {
                signal(held, rustix::process::Signal::KILL);
            }
        }
    }
    let output = finish(child);
    host.trace.clear();
    output
}

/// SIGKILL to every process of install.sh's group but its leader, `strace`,
/// which as install.sh's parent then reaps it, as a user's shell would: an
/// install.sh left a zombie would still own its install lock for the
/// recovery job (the suite's runner, a subreaper, reaps orphans only at
/// its end).
fn crash(leader: u32) {
    for _ in 0..20 {
        let members: Vec<u32> = group_members(leader)
            .into_iter()
            .filter(|pid| *pid != leader)
            .collect();
        if members.is_empty() {
            return;
        }
        for pid in members {
            signal(pid, rustix::process::Signal::KILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The live (not zombie) processes whose process group is `leader`'s.
fn group_members(leader: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command's closing parenthesis: state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == leader.to_string()
        })
        .collect()
}

fn installer_pid(strace: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// The binaries still do, on the very installation install.sh left with the
/// originals, what the originals did when that installation was uninstalled
/// (recorded by the comparison above): each scenario ending in an uninstall
/// is replayed from its recorded state (`tests/fixtures/installsh/`, see
/// `agents_tests::installsh_state`) with the binaries and the kit's
/// launchers in its release trees, its services started, and the installed
/// `uninstall.sh --yes` run as the comparison runs it; its exit status,
/// output, helper calls, `systemctl` calls, units and every file left must be
/// the recorded ones. Needs no upstream file.
#[test]
fn installsh_uninstall_as_recorded() {
    for scenario in scenarios() {
        if !matches!(scenario.steps.last(), Some(Step::Uninstall)) {
            continue;
        }
        let test = "installsh_uninstall_as_recorded";
        let Some(sandbox) = Sandbox::start_or_skip(test) else {
            return;
        };
        let port = free_port();
        let host = Host::new(None, &sandbox, port);
        installsh_state::replay(
            &sandbox,
            port,
            &installsh_state::archive_path(scenario.name),
        );
        installsh_state::wait_healthy(&sandbox, port);
        host.trace.reset();
        let script = host.roots()[0].join("current/uninstall.sh");
        let output = finish(host.command(&script, &["--yes"]).spawn().unwrap());
        host.settle();
        let label = format!("{} {}", scenario.steps.len(), step_name(&Step::Uninstall));
        let files = ReleaseFiles::of(&[]);
        let mut normalizer = facets::normalizer(&host, &files);
        let mut replayed = Observed::default();
        observe(
            &mut replayed,
            &label,
            &host,
            &files,
            &mut normalizer,
            &output,
        );
        let path = recorded_path(scenario.name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (scripts/installsh-compare.sh --record writes it)",
                path.display()
            )
        });
        let recorded = facets::renumbered(&Observed::from_text(&text), &label);
        let replayed = facets::renumbered(&replayed, &label);
        let mut differing = Vec::new();
        let names: std::collections::BTreeSet<&String> =
            recorded.keys().chain(replayed.keys()).collect();
        for name in names {
            let (left, right) = (recorded.get(name), replayed.get(name));
            if left != right {
                eprintln!(
                    "--- {}: {name}\n  recorded: {}\n  replayed: {}",
                    scenario.name,
                    left.map_or("(none)".into(), |text| text.replace('\n', "\n            ")),
                    right.map_or("(none)".into(), |text| text.replace('\n', "\n            ")),
                );
                differing.push(name.clone());
            }
        }
        assert!(
            differing.is_empty(),
            "{}: the binaries' uninstall no longer does what the originals' did ({}): {}",
            scenario.name,
            path.display(),
            differing.join(", ")
        );
    }
}

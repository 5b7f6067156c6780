//! Process identities read from `/proc`, so tests can prove what is running
//! and that it stopped, without ever matching processes by name.

use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

/// A PID together with its kernel start time, so a recycled PID is never
/// mistaken for the process that was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The process ID.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    pub start_time: u64,
}

struct Stat {
    state: char,
    parent: u32,
    start_time: u64,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may itself contain ") ".
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

impl ProcessIdentity {
    /// The identity of a live (non-zombie) process, if there is one.
    pub fn of(pid: u32) -> Option<ProcessIdentity> {
        let stat = read_stat(pid)?;
        (stat.state != 'Z').then_some(ProcessIdentity {
            pid,
            start_time: stat.start_time,
        })
    }

    /// True while this exact process still runs (zombies count as gone).
    pub fn is_alive(&self) -> bool {
        ProcessIdentity::of(self.pid).is_some_and(|now| now.start_time == self.start_time)
    }
}

/// True when a live, non-zombie process has this PID.
pub fn process_alive(pid: u32) -> bool {
    ProcessIdentity::of(pid).is_some()
}

/// Every live descendant of `pid` (children, grandchildren, ...), so a test
/// that kills a helper can wait for the commands the helper had started:
/// they outlive it, as they would after a real crash.
pub fn descendants(pid: u32) -> Vec<ProcessIdentity> {
    let stats: Vec<(u32, Stat)> = fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .filter_map(|pid| Some((pid, read_stat(pid)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (child, stat) in &stats {
            if stat.parent == parent && stat.state != 'Z' {
                found.push(ProcessIdentity {
                    pid: *child,
                    start_time: stat.start_time,
                });
                frontier.push(*child);
            }
        }
    }
    found
}

/// A helper process a test starts in a process group of its own, so that
/// stopping it stops everything it started too (`flock -o FILE sleep 600`
/// would otherwise leave `sleep` holding the test's output pipe for ten
/// minutes). Dropping it kills the group, so a failing test leaves nothing.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
}

impl GroupChild {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> std::io::Result<GroupChild> {
        let child = command.process_group(0).spawn()?;
        Ok(GroupChild { child })
    }

    /// The leader's PID (also the group's ID).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the whole group and reaps the leader.
    pub fn kill(&mut self) {
        if let Some(group) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process_group(group, Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a measured child ended, with what it cost.
#[derive(Debug)]
pub struct Measured {
    /// Exit status and everything it printed.
    pub output: Output,
    /// The child's own peak resident set (`ru_maxrss` of `wait4`), in KiB.
    pub peak_rss_kib: u64,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
}

/// Runs `command` to completion like [`Command::output`] (stdin from
/// `/dev/null` unless set), and reports the child's own peak memory and
/// run time, so tests can prove hostile input is handled in bounded memory
/// and time. The kernel carries the starting process's memory high-water
/// mark over exec into the child's `ru_maxrss`, so measure from a small
/// process (a test run alone, [`crate::ran_alone`]), not from a whole suite.
pub fn run_measured(command: &mut Command) -> Measured {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the measured program starts");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 writes into both.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = loop {
        // SAFETY: waits for our own child; the Child is not waited elsewhere.
        let result = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if result == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {
            continue;
        }
        break result;
    };
    assert_eq!(waited, pid, "wait4 reaps the measured child");
    let elapsed = started.elapsed();
    // The Child was reaped by wait4; dropping it does not wait again.
    drop(child);
    Measured {
        output: Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(status),
            stdout: out.join().expect("stdout reader"),
            stderr: err.join().expect("stderr reader"),
        },
        peak_rss_kib: usage.ru_maxrss as u64,
        elapsed,
    }
}

/// Starts `command` with HUP, INT and TERM at their defaults, whatever the
/// test run inherited (a suite started by `nohup` ignores HUP, one started in
/// the background ignores INT), then with `ignored` set to `SIG_IGN`, as a
/// caller such as `nohup` or a masking installer leaves them.
pub fn with_termination_signals(command: &mut Command, ignored: &'static [libc::c_int]) {
    // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(move || {
            let defaults = [libc::SIGHUP, libc::SIGINT, libc::SIGTERM].map(|s| (s, libc::SIG_DFL));
            let ignores = ignored.iter().map(|&signal| (signal, libc::SIG_IGN));
            for (signal, disposition) in defaults.into_iter().chain(ignores) {
                if libc::signal(signal, disposition) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

//! `run-suite -- COMMAND...`: runs the test suite as `scripts/test.sh` does,
//! passes its output through, then prints one summary line (passed, failed,
//! skipped with reasons, ignored) and fails if any process the suite started
//! is still alive. See `agents_tests::suite`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use agents_tests::suite::{children_of, skip_reasons, summary_line, TestTotals};
use agents_tests::{TempDir, SKIP_LOG_ENV};
use rustix::process::{kill_process, kill_process_group, Pid, Signal, WaitOptions};

/// How long processes that are already exiting get before they count as left.
const GRACE: Duration = Duration::from_secs(3);

fn reap_zombies() {
    while let Ok(Some(_)) = rustix::process::wait(WaitOptions::NOHANG) {}
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => &args[..],
    };
    let Some((program, arguments)) = command.split_first() else {
        eprintln!("usage: run-suite -- COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(err) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("run-suite: cannot become a child subreaper: {err}");
        return ExitCode::from(1);
    }
    let scratch = TempDir::new("run-suite");
    let skip_log = scratch.path().join("skipped.log");
    let mut child = match Command::new(program)
        .args(arguments)
        .env(SKIP_LOG_ENV, &skip_log)
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("run-suite: cannot run {program}: {err}");
            return ExitCode::from(1);
        }
    };
    let totals = Arc::new(Mutex::new(TestTotals::default()));
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = {
        let totals = Arc::clone(&totals);
        thread::spawn(move || {
            let mut out = std::io::stdout();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                totals.lock().unwrap().add_line(&line);
                let _ = writeln!(out, "{line}");
            }
        })
    };
    let status = child.wait().expect("the suite's exit status");

    // The suite's own descendants that still run now hang below us.
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let deadline = Instant::now() + GRACE;
    let mut leftovers = loop {
        reap_zombies();
        let left = children_of(me);
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let left_behind = leftovers.len();
    for leftover in &leftovers {
        eprintln!(
            "run-suite: left running by the suite: pid {} (process group {}, session {}): {}",
            leftover.pid, leftover.group, leftover.session, leftover.command
        );
    }
    // Kill each leftover's whole group, then whatever re-parents to us.
    let own_group = rustix::process::getpgrp().as_raw_nonzero().get();
    while !leftovers.is_empty() {
        for leftover in &leftovers {
            if leftover.group != own_group {
                if let Some(group) = Pid::from_raw(leftover.group) {
                    let _ = kill_process_group(group, Signal::KILL);
                }
            }
            if let Some(pid) = Pid::from_raw(leftover.pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        thread::sleep(Duration::from_millis(50));
        reap_zombies();
        leftovers = children_of(me);
    }
    // Only now can the pipe reach end of file: a leftover may have held it.
    let _ = reader.join();

    let log = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let totals = *totals.lock().unwrap();
    println!("{}", summary_line(totals, &skip_reasons(&log)));
    if left_behind > 0 {
        println!("run-suite: {left_behind} process(es) outlived the suite (killed; see above)");
        return ExitCode::from(1);
    }
    println!("run-suite: no process started by the suite is left");
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::from(1),
    }
}

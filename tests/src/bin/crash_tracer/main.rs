//! `crash-tracer`: runs one program under ptrace, counts its durable system
//! calls and, when asked, kills it with SIGKILL on entry to the N-th one,
//! before that call does anything (the crash-point campaign's fault
//! injection; see `agents_tests::crash_points`).
//!
//! ```text
//! crash-tracer --report FILE [--kill-at N] [--follow] [--exclude COMM]...
//!              [--journal NAME]... [--record FILE] -- PROGRAM [ARGS...]
//! ```
//!
//! Durable calls: `rename`/`renameat`/`renameat2`, `fsync`/`fdatasync`,
//! `unlink`/`unlinkat`, `symlink`/`symlinkat`, `link`/`linkat`,
//! `mkdir`/`mkdirat`, `rmdir`, `chmod`/`fchmod`/`fchmodat`/`fchmodat2`, and
//! the first `write` (or `writev`/`pwrite64`) to each file whose name contains
//! one of the `--journal` names (journals, markers, status rows and their
//! temporaries).
//!
//! Without `--follow` only the program's own main thread is traced, as
//! `strace` without `-f` does: the commands it runs (`systemctl`, an
//! installer) are not counted. With `--follow` (for a shell script, whose
//! durable work happens in `rm`, `mkdir`, `mv`...) every process it starts is
//! traced and counted except those whose command name is `--exclude`d, and a
//! kill ends every traced process, as a `kill -9` of the whole job would.
//!
//! The tracer is a child subreaper: after the program ended (or was killed)
//! it waits for the commands the program had started, which outlive a real
//! crash and run to completion, so the caller sees their effect. The report
//! holds one line per durable call (`<n>\t<call>\t<paths>`), then
//! `killed <n>`, `exited <code>` or `signaled <signal>`. The tracer exits
//! with the program's status (128 + signal when it died of one).
//!
//! `--record FILE` also writes every file-system call the program completed
//! before the kill, with the paths' earlier state (see `record`), for the
//! power-cut campaign.

mod record;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// How long the commands a killed program started may take to finish.
const ORPHAN_TIMEOUT: Duration = Duration::from_secs(180);

/// How a call names its paths: which arguments are `(dirfd, path)` pairs,
/// plain paths or descriptors.
#[derive(Clone, Copy)]
// aarch64 has only the *at calls: no plain-path shapes there.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Shape {
    /// `(path)` at this argument.
    Path(usize),
    /// `(path, path)`: rename, link and symlink (the first may be a target text).
    TwoPaths(usize, usize),
    /// `(dirfd, path)` at these arguments.
    At(usize, usize),
    /// `(dirfd, path, dirfd, path)`.
    TwoAt(usize, usize, usize, usize),
    /// `(text, dirfd, path)`: symlinkat.
    TextAt(usize, usize, usize),
    /// A descriptor at this argument.
    Fd(usize),
    /// A write to a descriptor: durable only the first time it reaches a journal.
    Write(usize),
}

fn durable_calls() -> HashMap<i64, (&'static str, Shape)> {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut table: Vec<(i64, &'static str, Shape)> = vec![
        (libc::SYS_renameat, "renameat", Shape::TwoAt(0, 1, 2, 3)),
        (libc::SYS_renameat2, "renameat2", Shape::TwoAt(0, 1, 2, 3)),
        (libc::SYS_fsync, "fsync", Shape::Fd(0)),
        (libc::SYS_fdatasync, "fdatasync", Shape::Fd(0)),
        (libc::SYS_unlinkat, "unlinkat", Shape::At(0, 1)),
        (libc::SYS_symlinkat, "symlinkat", Shape::TextAt(0, 1, 2)),
        (libc::SYS_linkat, "linkat", Shape::TwoAt(0, 1, 2, 3)),
        (libc::SYS_mkdirat, "mkdirat", Shape::At(0, 1)),
        (libc::SYS_fchmod, "fchmod", Shape::Fd(0)),
        (libc::SYS_fchmodat, "fchmodat", Shape::At(0, 1)),
        (452, "fchmodat2", Shape::At(0, 1)),
        (libc::SYS_write, "write", Shape::Write(0)),
        (libc::SYS_writev, "writev", Shape::Write(0)),
        (libc::SYS_pwrite64, "pwrite64", Shape::Write(0)),
    ];
    #[cfg(target_arch = "x86_64")]
    table.extend([
        (libc::SYS_rename, "rename", Shape::TwoPaths(0, 1)),
        (libc::SYS_unlink, "unlink", Shape::Path(0)),
        (libc::SYS_symlink, "symlink", Shape::TwoPaths(0, 1)),
        (libc::SYS_link, "link", Shape::TwoPaths(0, 1)),
        (libc::SYS_mkdir, "mkdir", Shape::Path(0)),
        (libc::SYS_rmdir, "rmdir", Shape::Path(0)),
        (libc::SYS_chmod, "chmod", Shape::Path(0)),
    ]);
    table
        .into_iter()
        .map(|(number, name, shape)| (number, (name, shape)))
        .collect()
}

struct Options {
    report: PathBuf,
    kill_at: Option<usize>,
    follow: bool,
    exclude: Vec<String>,
    journal: Vec<String>,
    record: Option<PathBuf>,
    program: Vec<String>,
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        report: PathBuf::new(),
        kill_at: None,
        follow: false,
        exclude: Vec::new(),
        journal: Vec::new(),
        record: None,
        program: Vec::new(),
    };
    let mut words = args.into_iter();
    while let Some(word) = words.next() {
        let mut value = || words.next().ok_or(format!("{word} needs a value"));
        match word.as_str() {
            "--report" => options.report = PathBuf::from(value()?),
            "--kill-at" => {
                let text = value()?;
                options.kill_at = Some(text.parse().map_err(|_| format!("bad --kill-at {text}"))?)
            }
            "--follow" => options.follow = true,
            "--exclude" => options.exclude.push(value()?),
            "--journal" => options.journal.push(value()?),
            "--record" => options.record = Some(PathBuf::from(value()?)),
            "--" => {
                options.program = words.collect();
                break;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.report.as_os_str().is_empty() || options.program.is_empty() {
        return Err(
            "usage: crash-tracer --report FILE [--kill-at N] [--follow] \
                    [--exclude COMM]... [--journal NAME]... [--record FILE] -- PROGRAM [ARGS...]"
                .into(),
        );
    }
    Ok(options)
}

fn ptrace(request: libc::c_uint, pid: i32, addr: usize, data: usize) -> libc::c_long {
    // SAFETY: plain ptrace requests on a tracee of this process; pointers
    // passed as `data` point at live, correctly sized buffers.
    unsafe {
        libc::ptrace(
            request,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    }
}

/// Where a tracee in a syscall stop is.
enum SyscallStop {
    /// Entering call `nr` with these arguments.
    Entry(i64, [u64; 6]),
    /// Leaving a call with this result (`true` when it failed).
    Exit(i64, bool),
}

/// The syscall stop a tracee is in, if ptrace can tell.
fn syscall_info(pid: i32) -> Option<SyscallStop> {
    // SAFETY: an all-zero ptrace_syscall_info is a valid value.
    let mut info: libc::ptrace_syscall_info = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::ptrace_syscall_info>();
    let got = ptrace(
        libc::PTRACE_GET_SYSCALL_INFO,
        pid,
        size,
        &mut info as *mut _ as usize,
    );
    if got <= 0 {
        return None;
    }
    match info.op {
        libc::PTRACE_SYSCALL_INFO_ENTRY => {
            // SAFETY: op says the entry member is the valid one.
            let entry = unsafe { info.u.entry };
            Some(SyscallStop::Entry(entry.nr as i64, entry.args))
        }
        libc::PTRACE_SYSCALL_INFO_EXIT => {
            // SAFETY: op says the exit member is the valid one.
            let exit = unsafe { info.u.exit };
            Some(SyscallStop::Exit(exit.sval, exit.is_error != 0))
        }
        _ => None,
    }
}

/// A NUL-terminated string from the tracee's memory.
fn read_text(pid: i32, address: u64) -> String {
    let Ok(memory) = fs::File::open(format!("/proc/{pid}/mem")) else {
        return "?".into();
    };
    let mut buffer = vec![0u8; 4096];
    let count = memory.read_at(&mut buffer, address).unwrap_or(0);
    buffer.truncate(count);
    if let Some(end) = buffer.iter().position(|&byte| byte == 0) {
        buffer.truncate(end);
    }
    String::from_utf8_lossy(&buffer).into_owned()
}

fn descriptor_path(pid: i32, fd: i64) -> String {
    let link = if fd == libc::AT_FDCWD as i64 {
        format!("/proc/{pid}/cwd")
    } else {
        format!("/proc/{pid}/fd/{fd}")
    };
    fs::read_link(link)
        .map(|path| path.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("fd {fd}"))
}

fn at_path(pid: i32, dirfd: u64, path: u64) -> String {
    let text = read_text(pid, path);
    if text.starts_with('/') {
        return text;
    }
    let base = descriptor_path(pid, dirfd as i32 as i64);
    if text.is_empty() {
        base
    } else {
        format!("{base}/{text}")
    }
}

fn plain_path(pid: i32, path: u64) -> String {
    at_path(pid, libc::AT_FDCWD as u64, path)
}

fn comm(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|text| text.trim_end().to_string())
        .unwrap_or_default()
}

fn wait(pid: i32) -> Option<(i32, i32)> {
    let mut status = 0;
    // SAFETY: waitpid with a valid status pointer.
    let got = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    (got > 0).then_some((got, status))
}

fn kill(pid: i32) {
    // SAFETY: kill(2) on a tracee of this process.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

struct Tracer {
    options: Options,
    calls: HashMap<i64, (&'static str, Shape)>,
    journal_writes: HashSet<String>,
    count: usize,
    report: String,
    killed: Option<usize>,
    recorder: Option<record::Recorder>,
}

impl Tracer {
    /// The durable call a tracee is entering, if it is one: its name and paths.
    fn durable(&mut self, pid: i32, nr: i64, args: [u64; 6]) -> Option<(&'static str, String)> {
        let (name, shape) = *self.calls.get(&nr)?;
        let paths = match shape {
            Shape::Path(index) => plain_path(pid, args[index]),
            Shape::TwoPaths(first, second) => {
                let source = if name == "symlink" {
                    read_text(pid, args[first])
                } else {
                    plain_path(pid, args[first])
                };
                format!("{source} -> {}", plain_path(pid, args[second]))
            }
            Shape::At(dirfd, path) => at_path(pid, args[dirfd], args[path]),
            Shape::TwoAt(dir1, path1, dir2, path2) => format!(
                "{} -> {}",
                at_path(pid, args[dir1], args[path1]),
                at_path(pid, args[dir2], args[path2])
            ),
            Shape::TextAt(text, dirfd, path) => format!(
                "{} -> {}",
                read_text(pid, args[text]),
                at_path(pid, args[dirfd], args[path])
            ),
            Shape::Fd(fd) => descriptor_path(pid, args[fd] as i32 as i64),
            Shape::Write(fd) => {
                let path = descriptor_path(pid, args[fd] as i32 as i64);
                let name_of = path.rsplit('/').next().unwrap_or_default();
                let journal = path.starts_with('/')
                    && self
                        .options
                        .journal
                        .iter()
                        .any(|j| name_of.contains(j.as_str()));
                if !journal || !self.journal_writes.insert(path.clone()) {
                    return None;
                }
                path
            }
        };
        if self.options.follow && self.options.exclude.contains(&comm(pid)) {
            return None;
        }
        Some((name, paths))
    }

    /// A syscall stop of `pid`: records it, counts it when durable, and
    /// kills every tracee at the chosen call (returns true then).
    fn stop(&mut self, pid: i32, tracees: &HashSet<i32>) -> bool {
        match syscall_info(pid) {
            Some(SyscallStop::Entry(nr, args)) => {
                if let Some(recorder) = &mut self.recorder {
                    recorder.enter(pid, nr, args);
                }
                let Some((name, paths)) = self.durable(pid, nr, args) else {
                    return false;
                };
                self.count += 1;
                let _ = writeln!(self.report, "{}\t{name}\t{paths}", self.count);
                if Some(self.count) != self.options.kill_at {
                    return false;
                }
                self.killed = Some(self.count);
                // Stopped on entry: the call never runs.
                kill(pid);
                for &other in tracees {
                    kill(other);
                }
                true
            }
            Some(SyscallStop::Exit(result, failed)) => {
                if let Some(recorder) = &mut self.recorder {
                    recorder.exit(pid, result, failed);
                }
                false
            }
            None => false,
        }
    }

    /// Traces until the program has ended; returns its wait status.
    fn run(&mut self, root: i32) -> i32 {
        let mut tracees: HashSet<i32> = HashSet::from([root]);
        let mut root_status = None;
        while root_status.is_none() || (self.options.follow && !tracees.is_empty()) {
            let target = if self.options.follow { -1 } else { root };
            let Some((pid, status)) = wait(target) else {
                break;
            };
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                tracees.remove(&pid);
                if pid == root {
                    root_status = Some(status);
                }
                continue;
            }
            if !libc::WIFSTOPPED(status) {
                continue;
            }
            if !tracees.contains(&pid) {
                // A new child of a followed process, stopped at its start.
                tracees.insert(pid);
                if self.killed.is_some() {
                    kill(pid);
                }
                ptrace(libc::PTRACE_SYSCALL, pid, 0, 0);
                continue;
            }
            let signal = libc::WSTOPSIG(status);
            let mut deliver = 0;
            if signal == libc::SIGTRAP | 0x80 {
                if self.killed.is_none() && self.stop(pid, &tracees) {
                    continue;
                }
            } else if signal == libc::SIGTRAP && status >> 16 != 0 {
                // A ptrace event (fork, exec): nothing to deliver.
            } else if signal == libc::SIGSTOP && status >> 16 != 0 {
                // A group stop reported as an event.
            } else {
                deliver = signal as usize;
            }
            ptrace(libc::PTRACE_SYSCALL, pid, 0, deliver);
        }
        root_status.unwrap_or(0)
    }
}

/// Waits for the orphans the program left (reparented to this subreaper).
fn wait_for_orphans() -> bool {
    let deadline = Instant::now() + ORPHAN_TIMEOUT;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let got = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
        if got < 0 {
            return true; // ECHILD: nothing is left
        }
        if got == 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("crash-tracer: {message}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        eprintln!("crash-tracer: cannot become a child subreaper");
        return ExitCode::from(2);
    }
    let mut command = Command::new(&options.program[0]);
    command.args(&options.program[1..]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!("crash-tracer: cannot run {}: {err}", options.program[0]);
            return ExitCode::from(2);
        }
    };
    let root = child.id() as i32;
    // The stop after exec, then the options every tracee inherits.
    if wait(root).is_none() {
        eprintln!("crash-tracer: the program did not stop after exec");
        return ExitCode::from(2);
    }
    let mut flags = libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL;
    flags |= libc::PTRACE_O_TRACEEXEC;
    if options.follow {
        flags |= libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK | libc::PTRACE_O_TRACECLONE;
    }
    ptrace(libc::PTRACE_SETOPTIONS, root, 0, flags as usize);
    ptrace(libc::PTRACE_SYSCALL, root, 0, 0);
    let mut tracer = Tracer {
        calls: durable_calls(),
        journal_writes: HashSet::new(),
        count: 0,
        report: String::new(),
        killed: None,
        recorder: options.record.is_some().then(record::Recorder::new),
        options,
    };
    let status = tracer.run(root);
    let orphans_done = wait_for_orphans();
    let (line, code) = match tracer.killed {
        Some(at) => (format!("killed {at}"), 128 + libc::SIGKILL),
        None if libc::WIFSIGNALED(status) => {
            let signal = libc::WTERMSIG(status);
            (format!("signaled {signal}"), 128 + signal)
        }
        None => {
            let code = libc::WEXITSTATUS(status);
            (format!("exited {code}"), code)
        }
    };
    let _ = writeln!(tracer.report, "{line}");
    if !orphans_done {
        let _ = writeln!(tracer.report, "orphans still running");
    }
    if let (Some(path), Some(recorder)) = (&tracer.options.record, &tracer.recorder) {
        if let Err(err) = fs::write(path, &recorder.text) {
            eprintln!("crash-tracer: cannot write the record: {err}");
            return ExitCode::from(2);
        }
    }
    if let Err(err) = fs::write(&tracer.options.report, &tracer.report) {
        eprintln!("crash-tracer: cannot write the report: {err}");
        return ExitCode::from(2);
    }
    ExitCode::from(code as u8)
}

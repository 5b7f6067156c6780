//! What doctor learns about a process from the kernel, read-only: whether a
//! PID exists (by the install lock reaper's own test), what program it runs
//! (`/proc/<pid>/cmdline`, as the server's liveness check reads it) and which
//! processes hold a `flock` on a file (`/proc/locks`, instead of probing the
//! lock, which would take it).

use std::path::Path;

use rustix::io::Errno;
use rustix::process::{test_kill_process, Pid};

/// One process as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Process {
    /// The PID asked about.
    pub pid: u32,
    /// `kill(pid, 0)` succeeds or fails with EPERM, as the lock reaper
    /// decides whether an owner still runs.
    pub alive: bool,
    /// It has exited but its parent has not reaped it yet (state `Z`).
    pub zombie: bool,
    /// Its arguments joined by spaces, as the server reads them; `None`
    /// when the process is gone or its command line cannot be read.
    pub command_line: Option<String>,
}

impl Process {
    /// Looks `pid` up.
    pub(super) fn of(pid: u32) -> Process {
        let alive = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .is_some_and(|pid| matches!(test_kill_process(pid), Ok(()) | Err(Errno::PERM)));
        let command_line = alive.then(|| command_line(pid)).flatten();
        Process {
            pid,
            alive,
            zombie: alive && state(pid) == Some('Z'),
            command_line,
        }
    }

    /// Whether any argument's file name is one of `programs` (a script run
    /// by its interpreter counts, `python -m module` by the module name).
    pub(super) fn runs_any(&self, programs: &[&str]) -> bool {
        self.command_line.as_deref().is_some_and(|line| {
            line.split(' ').any(|word| {
                let name = word.rsplit('/').next().unwrap_or(word);
                programs.contains(&name)
            })
        })
    }

    /// A short description for reports: `alive`, `exited`, `zombie`.
    pub(super) fn state_word(&self) -> &'static str {
        match (self.alive, self.zombie) {
            (false, _) => "exited",
            (true, true) => "exited, not reaped by its parent yet",
            (true, false) => "alive",
        }
    }
}

/// `/proc/<pid>/cmdline` with its NUL separators as spaces.
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|byte| *byte == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// The state letter of `/proc/<pid>/stat` (after the parenthesised name).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// The PIDs holding (not waiting for) a `flock` on the file at `path`.
pub(super) fn flock_holders(path: &Path) -> Vec<u32> {
    let Ok(info) = rustix::fs::lstat(path) else {
        return Vec::new();
    };
    let device = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(info.st_dev),
        rustix::fs::minor(info.st_dev),
        info.st_ino
    );
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let mut holders: Vec<u32> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // `1: FLOCK ADVISORY WRITE <pid> <maj:min:inode> 0 EOF`; a
            // waiter has `->` after the number.
            match fields.as_slice() {
                [_, "FLOCK", _, _, pid, file, ..] if *file == device => pid.parse().ok(),
                _ => None,
            }
        })
        .collect();
    holders.sort_unstable();
    holders.dedup();
    holders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_runs_its_test_binary() {
        let me = Process::of(std::process::id());
        assert!(me.alive && !me.zombie);
        let line = me.command_line.clone().unwrap();
        let name = line.split(' ').next().unwrap().rsplit('/').next().unwrap();
        assert!(me.runs_any(&[name]));
        assert!(!me.runs_any(&["install.sh"]));
    }

    #[test]
    fn a_pid_beyond_the_kernel_limit_is_gone() {
        let gone = Process::of(i32::MAX as u32);
        assert_eq!(
            (gone.alive, gone.command_line.clone(), gone.state_word()),
            (false, None, "exited")
        );
    }

    #[test]
    fn flock_holders_names_the_holding_process() {
        let path = std::env::temp_dir().join(format!("doctor-flock-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        assert!(flock_holders(&path).is_empty());
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).unwrap();
        assert_eq!(flock_holders(&path), vec![std::process::id()]);
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
}

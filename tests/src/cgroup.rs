//! A private control group per sandboxed manager.
//!
//! A user manager places each unit in `<its own cgroup>/app.slice/<unit>`.
//! Started from the machine's root cgroup, every sandbox would share
//! `/app.slice/agents-server.service`, and one manager stopping its worker
//! would kill another test's worker. Each manager therefore starts inside its
//! own cgroup, in every hierarchy systemd uses: the cgroup2 mount and, on
//! hybrid machines, the `name=systemd` v1 mount. The group also proves that
//! teardown left no process behind.
//!
//! A fresh group is empty until the manager joins it, and an exiting
//! `systemd` manager whose own cgroup lies above it (one started at the
//! hierarchy root, as by the plain `SANDBOX.md` recipe) removes every empty
//! group below its cgroup. So the child recreates a vanished group while
//! joining, and teardown accepts a group that is already gone.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{kill_process, Pid, Signal};

/// How often the child recreates a group that vanished before it joined.
pub(crate) const JOIN_ATTEMPTS: u32 = 5;
/// Where the manager starts inside its group: systemd moves itself there
/// anyway, and starting there leaves no empty group to lose to a trim between
/// systemd's own mkdir and move.
const MANAGER_SCOPE: &str = "init.scope";
/// How often teardown retries removing the groups, 20 ms apart.
const REMOVE_ATTEMPTS: u32 = 100;

/// The sandbox's control group directories, one per hierarchy.
#[derive(Debug)]
pub(crate) struct ControlGroup {
    directories: Vec<PathBuf>,
}

/// Mount points of the hierarchies systemd places units in.
fn systemd_hierarchies() -> Vec<PathBuf> {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, filesystem) = line.split_once(" - ")?;
            let mount_point = mount.split(' ').nth(4)?;
            let mut filesystem = filesystem.split(' ');
            let kind = filesystem.next()?;
            let options = filesystem.nth(1).unwrap_or("");
            let used = kind == "cgroup2"
                || (kind == "cgroup" && options.split(',').any(|option| option == "name=systemd"));
            used.then(|| PathBuf::from(mount_point))
        })
        .collect()
}

impl ControlGroup {
    /// Creates `<hierarchy>/<name>` in every systemd hierarchy.
    pub(crate) fn create(name: &str) -> io::Result<ControlGroup> {
        let mut group = ControlGroup {
            directories: Vec::new(),
        };
        for hierarchy in systemd_hierarchies() {
            let directory = hierarchy.join(name);
            fs::create_dir(&directory).map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!("cannot create cgroup {}: {err}", directory.display()),
                )
            })?;
            group.directories.push(directory);
        }
        Ok(group)
    }

    /// The group's directories, one per hierarchy.
    pub(crate) fn directories(&self) -> &[PathBuf] {
        &self.directories
    }

    /// What a forked child needs to join the group's `init.scope`; built
    /// before the fork, because the child may not allocate.
    pub(crate) fn joiner(&self) -> io::Result<Joiner> {
        let c_path = |path: &Path| {
            CString::new(path.as_os_str().as_bytes())
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))
        };
        let targets = self
            .directories
            .iter()
            .map(|directory| {
                let scope = directory.join(MANAGER_SCOPE);
                Ok(JoinTarget {
                    directories: [c_path(directory)?, c_path(&scope)?],
                    procs: c_path(&scope.join("cgroup.procs"))?,
                })
            })
            .collect::<io::Result<_>>()?;
        Ok(Joiner { targets })
    }

    /// Every PID still in the group or any group below it.
    pub(crate) fn members(&self) -> Vec<u32> {
        let mut members = Vec::new();
        for directory in &self.directories {
            collect_members(directory, &mut members);
        }
        members.sort_unstable();
        members.dedup();
        members
    }

    /// Kills whatever is left and removes the groups (deepest first).
    /// Returns the PIDs that had to be killed.
    pub(crate) fn remove(&mut self) -> Vec<u32> {
        let leftovers = self.members();
        for pid in &leftovers {
            if let Some(pid) = Pid::from_raw(*pid as i32) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        for directory in std::mem::take(&mut self.directories) {
            // Killed processes leave their group asynchronously.
            let mut outcome = remove_tree(&directory);
            for _ in 1..REMOVE_ATTEMPTS {
                if outcome.is_ok() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
                outcome = remove_tree(&directory);
            }
            if let Err(err) = outcome {
                eprintln!(
                    "warning: cannot remove cgroup {}: {err}",
                    directory.display()
                );
            }
        }
        leftovers
    }
}

/// The group and its `init.scope` in one hierarchy, as C strings.
#[derive(Debug)]
struct JoinTarget {
    directories: [CString; 2],
    procs: CString,
}

/// Every hierarchy's [`JoinTarget`].
#[derive(Debug)]
pub(crate) struct Joiner {
    targets: Vec<JoinTarget>,
}

impl Joiner {
    /// Moves the calling process into every group's `init.scope`, creating
    /// it and recreating the group if it vanished; once it has a member,
    /// nothing can remove them. Only async-signal-safe system calls, so it may
    /// run between fork and exec.
    pub(crate) fn join(&self) -> io::Result<()> {
        for target in &self.targets {
            let mut attempt = 1;
            loop {
                match target.enter() {
                    Ok(()) => break,
                    // Trimmed after a mkdir; NODEV: after the open.
                    Err(Errno::NOENT | Errno::NODEV) if attempt < JOIN_ATTEMPTS => attempt += 1,
                    Err(err) => return Err(err.into()),
                }
            }
        }
        Ok(())
    }
}

impl JoinTarget {
    /// Creates what is missing and writes "0" (the writing process itself)
    /// to `cgroup.procs`.
    fn enter(&self) -> rustix::io::Result<()> {
        for directory in &self.directories {
            match rustix::fs::mkdir(directory.as_c_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(err) => return Err(err),
            }
        }
        let procs = rustix::fs::open(
            self.procs.as_c_str(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::io::write(&procs, b"0").map(drop)
    }
}

fn collect_members(directory: &Path, members: &mut Vec<u32>) {
    if let Ok(procs) = fs::read_to_string(directory.join("cgroup.procs")) {
        members.extend(
            procs
                .lines()
                .filter_map(|line| line.trim().parse::<u32>().ok()),
        );
    }
    if let Ok(entries) = fs::read_dir(directory) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                collect_members(&entry.path(), members);
            }
        }
    }
}

fn remove_tree(directory: &Path) -> io::Result<()> {
    match fs::read_dir(directory) {
        Ok(entries) => {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    remove_tree(&entry.path())?;
                }
            }
            // A cgroup directory is removed with rmdir although it lists files.
            match fs::remove_dir(directory) {
                // Trimmed meanwhile by an exiting manager above it.
                Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
                outcome => outcome,
            }
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

impl Drop for ControlGroup {
    fn drop(&mut self) {
        let leftovers = self.remove();
        if !leftovers.is_empty() {
            eprintln!("warning: killed processes left in the sandbox cgroup: {leftovers:?}");
        }
    }
}

//! A private control group per sandboxed manager.
//!
//! A user manager places each unit in `<its own cgroup>/app.slice/<unit>`.
//! Started from the machine's root cgroup, every sandbox would share
//! `/app.slice/agents-server.service`, and one manager stopping its worker
//! would kill another test's worker. Each manager therefore starts inside its
//! own cgroup, in every hierarchy systemd uses: the cgroup2 mount and, on
//! hybrid machines, the `name=systemd` v1 mount. The group also proves that
//! teardown left no process behind.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

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

    /// The `cgroup.procs` files a process writes its PID to in order to join.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.directories
            .iter()
            .map(|directory| directory.join("cgroup.procs"))
            .collect()
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
            for _ in 0..100 {
                if remove_tree(&directory).is_ok() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        leftovers
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
            fs::remove_dir(directory)
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

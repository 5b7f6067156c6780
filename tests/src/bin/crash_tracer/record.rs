//! `--record FILE`: every file-system call the traced program completes
//! before the kill, with the state each path had before the program first
//! touched it (the power-cut campaign's input; see
//! `agents_tests::power_cut`, which parses this format).
//!
//! One line per item, tab-separated, bytes in lowercase hex:
//!
//! ```text
//! pre     PATH absent | file MODE HEX | dir MODE | link TARGET
//! open    PATH FLAGS FD          (only opens that may write or create)
//! write   PATH OFFSET LENGTH     (write, writev, pwrite64)
//! ftruncate PATH LENGTH
//! fsync   PATH HEX | dir         (fsync, fdatasync: the file's bytes then)
//! rename  FROM TO                (rename, renameat, renameat2)
//! link    FROM TO
//! symlink TARGET PATH
//! unlink  PATH
//! rmdir   PATH                   (rmdir, unlinkat with AT_REMOVEDIR)
//! mkdir   PATH
//! close   PATH
//! ```
//!
//! A `pre` line comes before the first call that names its path (a
//! directory with everything in it), so the lines are a snapshot of the
//! part of the tree the program changes, taken before it changed it. Paths
//! are absolute with their directory resolved (no symlink on the way);
//! calls that failed are left out; descriptors are resolved through
//! `/proc/<pid>/fd`, and anything that is not a file (pipes, sockets, a
//! file already deleted) is left out.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::{at_path, descriptor_path, plain_path, read_text};

/// What the program is doing to the file system, in the recorder's terms.
#[derive(Clone, Copy)]
enum Kind {
    /// `(dirfd, path, flags)` indices; `None` dirfd for `open`.
    Open(Option<usize>, usize, usize),
    /// `creat(path)`.
    Creat,
    /// A write to the descriptor at 0; `Some(index)` of an explicit offset.
    Write(Option<usize>),
    Ftruncate,
    Sync,
    /// `(dirfd, path)` pairs or `None` dirfds for plain paths.
    Rename(Option<usize>, usize, Option<usize>, usize),
    Link(Option<usize>, usize, Option<usize>, usize),
    /// `(target text, dirfd, path)`.
    Symlink(usize, Option<usize>, usize),
    /// `(dirfd, path, flags)`: unlinkat may remove a directory.
    Unlink(Option<usize>, usize, Option<usize>),
    Rmdir,
    Mkdir(Option<usize>, usize),
    Close,
}

fn recorded_calls() -> HashMap<i64, Kind> {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut table = vec![
        (libc::SYS_openat, Kind::Open(Some(0), 1, 2)),
        (libc::SYS_write, Kind::Write(None)),
        (libc::SYS_writev, Kind::Write(None)),
        (libc::SYS_pwrite64, Kind::Write(Some(3))),
        (libc::SYS_ftruncate, Kind::Ftruncate),
        (libc::SYS_fsync, Kind::Sync),
        (libc::SYS_fdatasync, Kind::Sync),
        (libc::SYS_renameat, Kind::Rename(Some(0), 1, Some(2), 3)),
        (libc::SYS_renameat2, Kind::Rename(Some(0), 1, Some(2), 3)),
        (libc::SYS_linkat, Kind::Link(Some(0), 1, Some(2), 3)),
        (libc::SYS_symlinkat, Kind::Symlink(0, Some(1), 2)),
        (libc::SYS_unlinkat, Kind::Unlink(Some(0), 1, Some(2))),
        (libc::SYS_mkdirat, Kind::Mkdir(Some(0), 1)),
        (libc::SYS_close, Kind::Close),
    ];
    #[cfg(target_arch = "x86_64")]
    table.extend([
        (libc::SYS_open, Kind::Open(None, 0, 1)),
        (libc::SYS_creat, Kind::Creat),
        (libc::SYS_rename, Kind::Rename(None, 0, None, 1)),
        (libc::SYS_link, Kind::Link(None, 0, None, 1)),
        (libc::SYS_symlink, Kind::Symlink(0, None, 1)),
        (libc::SYS_unlink, Kind::Unlink(None, 0, None)),
        (libc::SYS_rmdir, Kind::Rmdir),
        (libc::SYS_mkdir, Kind::Mkdir(None, 0)),
    ]);
    table.into_iter().collect()
}

/// A call seen on entry, waiting for its result.
struct Pending {
    /// The record line without its result (`open` gets its descriptor).
    line: String,
    /// Only opens need the result in the line.
    open: bool,
    /// Writes record the length the call returned.
    write: bool,
}

/// The recording of one traced run.
pub(crate) struct Recorder {
    calls: HashMap<i64, Kind>,
    captured: HashSet<String>,
    pending: HashMap<i32, Pending>,
    /// The record so far.
    pub(crate) text: String,
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// `path` with its directory resolved, as the kernel resolves it.
fn resolved(path: String) -> String {
    let as_path = Path::new(&path);
    match (as_path.parent(), as_path.file_name()) {
        (Some(parent), Some(name)) => match fs::canonicalize(parent) {
            Ok(parent) => parent.join(name).to_string_lossy().into_owned(),
            Err(_) => path,
        },
        _ => path,
    }
}

/// The path a descriptor names, when it is a file still linked.
fn descriptor_file(pid: i32, fd: u64) -> Option<String> {
    let path = descriptor_path(pid, fd as i32 as i64);
    let linked = path.starts_with('/')
        && !path.ends_with(" (deleted)")
        && !path.starts_with("/dev/")
        && !path.starts_with("/proc/");
    linked.then_some(path)
}

/// The descriptor's file position (and whether it appends) from fdinfo.
fn write_offset(pid: i32, fd: u64) -> u64 {
    let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_string())
            .unwrap_or_default()
    };
    let flags = u64::from_str_radix(&field("flags:"), 8).unwrap_or(0);
    if flags & libc::O_APPEND as u64 != 0 {
        return fs::metadata(format!("/proc/{pid}/fd/{fd}")).map_or(0, |info| info.len());
    }
    field("pos:").parse().unwrap_or(0)
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            calls: recorded_calls(),
            captured: HashSet::new(),
            pending: HashMap::new(),
            text: String::new(),
        }
    }

    /// Records `path` as it is now, unless it was recorded before (a
    /// directory with everything in it).
    fn capture(&mut self, path: &str) {
        if !self.captured.insert(path.to_string()) {
            return;
        }
        let line = match fs::symlink_metadata(path) {
            Err(_) => "absent".to_string(),
            Ok(info) if info.file_type().is_symlink() => {
                let target = fs::read_link(path).unwrap_or_default();
                format!("link\t{}", target.display())
            }
            Ok(info) if info.is_dir() => {
                let mode = info.permissions().mode() & 0o7777;
                let _ = writeln!(self.text, "pre\t{path}\tdir\t{mode:o}");
                let mut names: Vec<String> = fs::read_dir(path)
                    .map(|entries| {
                        entries
                            .filter_map(|entry| entry.ok())
                            .map(|entry| entry.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                for name in names {
                    self.capture(&format!("{path}/{name}"));
                }
                return;
            }
            Ok(info) if info.is_file() => {
                let content = fs::read(path).unwrap_or_default();
                format!("file\t{:o}\t{}", info.mode() & 0o7777, hex(&content))
            }
            // Sockets, fifos, devices: nothing the helpers write.
            Ok(_) => return,
        };
        let _ = writeln!(self.text, "pre\t{path}\t{line}");
    }

    fn path(pid: i32, args: &[u64; 6], dirfd: Option<usize>, path: usize) -> String {
        resolved(match dirfd {
            Some(dirfd) => at_path(pid, args[dirfd], args[path]),
            None => plain_path(pid, args[path]),
        })
    }

    /// On entry to system call `nr`: captures the paths it names, and keeps
    /// the line to record once it succeeds.
    pub(crate) fn enter(&mut self, pid: i32, nr: i64, args: [u64; 6]) {
        let Some(&kind) = self.calls.get(&nr) else {
            return;
        };
        let (line, open, write) = match self.entry_line(pid, kind, &args) {
            Some(entry) => entry,
            None => return,
        };
        self.pending.insert(pid, Pending { line, open, write });
    }

    fn entry_line(
        &mut self,
        pid: i32,
        kind: Kind,
        args: &[u64; 6],
    ) -> Option<(String, bool, bool)> {
        let line = match kind {
            Kind::Open(dirfd, path, flags) => {
                let flags = args[flags];
                let writes = libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC;
                if flags & writes as u64 == 0 {
                    return None;
                }
                let path = Recorder::path(pid, args, dirfd, path);
                if path.starts_with("/dev/") || path.starts_with("/proc/") {
                    return None;
                }
                self.capture(&path);
                return Some((format!("open\t{path}\t{flags:x}"), true, false));
            }
            Kind::Creat => {
                let path = Recorder::path(pid, args, None, 0);
                self.capture(&path);
                let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
                return Some((format!("open\t{path}\t{flags:x}"), true, false));
            }
            Kind::Write(offset) => {
                let path = descriptor_file(pid, args[0])?;
                self.capture(&path);
                let offset = match offset {
                    Some(index) => args[index],
                    None => write_offset(pid, args[0]),
                };
                return Some((format!("write\t{path}\t{offset}"), false, true));
            }
            Kind::Ftruncate => {
                let path = descriptor_file(pid, args[0])?;
                self.capture(&path);
                format!("ftruncate\t{path}\t{}", args[1])
            }
            Kind::Sync => {
                let path = descriptor_file(pid, args[0])?;
                let proc_path = format!("/proc/{pid}/fd/{}", args[0] as i32);
                match fs::metadata(&proc_path) {
                    Ok(info) if info.is_dir() => format!("fsync\t{path}\tdir"),
                    Ok(info) if info.is_file() => {
                        let content = fs::read(&proc_path).unwrap_or_default();
                        format!("fsync\t{path}\t{}", hex(&content))
                    }
                    _ => return None,
                }
            }
            Kind::Rename(dir1, path1, dir2, path2) | Kind::Link(dir1, path1, dir2, path2) => {
                let from = Recorder::path(pid, args, dir1, path1);
                let to = Recorder::path(pid, args, dir2, path2);
                self.capture(&from);
                self.capture(&to);
                let name = if matches!(kind, Kind::Rename(..)) {
                    "rename"
                } else {
                    "link"
                };
                format!("{name}\t{from}\t{to}")
            }
            Kind::Symlink(target, dirfd, path) => {
                let path = Recorder::path(pid, args, dirfd, path);
                self.capture(&path);
                format!("symlink\t{}\t{path}", read_text(pid, args[target]))
            }
            Kind::Unlink(dirfd, path, flags) => {
                let path = Recorder::path(pid, args, dirfd, path);
                self.capture(&path);
                let directory =
                    flags.is_some_and(|index| args[index] & libc::AT_REMOVEDIR as u64 != 0);
                let name = if directory { "rmdir" } else { "unlink" };
                format!("{name}\t{path}")
            }
            Kind::Rmdir => {
                let path = Recorder::path(pid, args, None, 0);
                self.capture(&path);
                format!("rmdir\t{path}")
            }
            Kind::Mkdir(dirfd, path) => {
                let path = Recorder::path(pid, args, dirfd, path);
                self.capture(&path);
                format!("mkdir\t{path}")
            }
            Kind::Close => {
                // Only the files the program changes: not every library it loads.
                let path = descriptor_file(pid, args[0])?;
                if !self.captured.contains(&path) {
                    return None;
                }
                format!("close\t{path}")
            }
        };
        Some((line, false, false))
    }

    /// On exit from the call `pid` entered: records it when it succeeded.
    pub(crate) fn exit(&mut self, pid: i32, result: i64, failed: bool) {
        let Some(pending) = self.pending.remove(&pid) else {
            return;
        };
        if failed || result < 0 {
            return;
        }
        let mut line = pending.line;
        if pending.open || pending.write {
            let _ = write!(line, "\t{result}");
        }
        let _ = writeln!(self.text, "{line}");
    }
}

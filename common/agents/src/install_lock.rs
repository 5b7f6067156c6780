//! The installer's `.install-lock` PID directory (`execution_manage.InstallationLock`).
//!
//! install.sh, `execution_manage`, `update_handoff` and the uninstaller all
//! serialise on one directory, `<install root>/.install-lock`, that holds a `pid`
//! file naming its owner. Acquiring means renaming a complete private draft
//! directory onto that name: `rename(2)` fails on a populated directory and
//! atomically replaces an empty one, so at most one owner can ever be visible.
//! A lock whose owner process is gone is reaped through a descriptor pinned to
//! the dead owner's directory, so a reaper can never delete a newer owner's file.
//! [`inspect_lock`] makes the reaper's checks without acting on them, for
//! reports that must never take or change the lock.
//!
//! Deviations from the original, all on paths where it would misbehave:
//! - the draft directory is also removed when writing its `pid` file fails
//!   (the original leaves that empty draft behind);
//! - the owner file is opened with `O_NONBLOCK`, so a FIFO planted as `pid` is
//!   refused as unsafe instead of hanging the reaper (install.sh does the same);
//! - an owner PID too large for `pid_t` is refused as `installation lock owner is
//!   invalid` (ValueError) where Python raises `OverflowError` from `os.kill`.

use std::fs::DirBuilder;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use rustix::process::{test_kill_process, Pid};

mod interrupt;

use crate::error::{Error, Result};
use crate::fs::{atomic_write, fsync_directory, normalize_path, owned_directory, read_file};
use python_compat::{os::current_uid, token_hex};

/// Name of the lock directory inside the install root (shared with install.sh).
const LOCK_NAME: &str = ".install-lock";
/// Name of the owner file inside the lock directory.
const OWNER_NAME: &str = "pid";
/// How many rename attempts the original makes before giving up (install.sh makes 32).
const ATTEMPTS: usize = 16;
/// The original reads at most this many bytes of the owner file.
const OWNER_READ_LIMIT: usize = 33;

/// Exclusive ownership of an installation, shared with install.sh's lock.
///
/// Hold it across every native service change and journal operation. Release
/// it with [`InstallationLock::release`], which re-checks that the directory
/// and owner are still exactly the ones this process published and reports any
/// failure. If a held lock is dropped instead (an early `?` return or a panic),
/// `Drop` performs the same checked release and, because it cannot return an
/// error, prints the failure as one `Class: message` line on stderr; a lock
/// that could not be released stays on disk naming this process, and the next
/// installer reaps it once this process has exited.
///
/// While held, SIGINT (unless the caller ignored it) releases the lock with
/// the same checks and ends the process by SIGINT, as Python's `with` block
/// does on `KeyboardInterrupt`; nothing else of the interrupted work is undone.
#[derive(Debug)]
pub struct InstallationLock {
    root: PathBuf,
    path: PathBuf,
    /// `(st_dev, st_ino)` of the published lock directory while held.
    identity: Option<(u64, u64)>,
    /// The SIGINT release armed for this lock while held, if any.
    interrupt: Option<interrupt::Armament>,
}

impl InstallationLock {
    /// Takes the installation lock under `root` (the original's `__enter__`).
    ///
    /// Fails with RuntimeError `another installer owns the installation lock`
    /// while a live process (including one this user may not signal) owns it,
    /// and with the original's PermissionError/ValueError/RuntimeError when the
    /// existing lock is unsafe, invalid or contains unknown files.
    pub fn acquire(root: &Path) -> Result<Self> {
        let root = normalize_path(root)?;
        let path = root.join(LOCK_NAME);
        let mut lock = InstallationLock {
            root,
            path,
            identity: None,
            interrupt: None,
        };
        lock.enter()?;
        Ok(lock)
    }

    /// Runs `body` while holding the lock, like the original's `with InstallationLock(root):`.
    ///
    /// The lock is released whether or not `body` fails; a release failure is
    /// returned in preference to the body's own result, as Python's `with`
    /// statement lets an exception from `__exit__` replace the body's.
    pub fn hold<T>(root: &Path, body: impl FnOnce() -> Result<T>) -> Result<T> {
        let lock = Self::acquire(root)?;
        let outcome = body();
        lock.release()?;
        outcome
    }

    /// The lock directory (`<root>/.install-lock`), for messages and checks.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(st_dev, st_ino)` of the published lock directory, the identity release checks.
    pub fn identity(&self) -> Option<(u64, u64)> {
        self.identity
    }

    /// Releases the lock after proving it is still exactly ours (the original's `__exit__`).
    ///
    /// Refuses with RuntimeError `installation lock identity changed`,
    /// `installation lock owner changed` or `installation lock path changed`
    /// when another process replaced or edited the lock; the lock is then left
    /// as found.
    pub fn release(mut self) -> Result<()> {
        self.exit()
    }

    fn enter(&mut self) -> Result<()> {
        owned_directory(&self.root, false)?;
        let pid = std::process::id();
        let draft = self
            .root
            .join(format!("{LOCK_NAME}.{pid}.{}.tmp", token_hex(12)?));
        DirBuilder::new()
            .mode(0o700)
            .create(&draft)
            .map_err(|err| Error::from_io_path(&err, &draft))?;
        let outcome = atomic_write(
            &draft.join(OWNER_NAME),
            format!("{pid}\n").as_bytes(),
            0o600,
        )
        .and_then(|()| self.publish(&draft));
        // Like the original's `finally`, a failing cleanup replaces the original
        // error; a published draft no longer exists under its old name.
        if std::fs::metadata(&draft).is_ok() {
            remove_draft(&draft)?;
        }
        outcome
    }

    /// The rename loop: publish the draft, reaping a dead owner between attempts.
    fn publish(&mut self, draft: &Path) -> Result<()> {
        for _ in 0..ATTEMPTS {
            match std::fs::rename(draft, &self.path) {
                Ok(()) => {
                    let info = rustix::fs::lstat(&self.path)
                        .map_err(|errno| Error::from_errno(errno, &self.path))?;
                    // As in the original, a failure from here on leaves the published
                    // lock in place (no release runs); it names this process
                    // and is reaped once the process has exited.
                    fsync_directory(&self.root)?;
                    self.identity = Some(identity(&info));
                    self.interrupt = interrupt::arm(&self.root, &self.path, identity(&info));
                    // Best effort: a draft that cannot be proven abandoned,
                    // or cannot be removed, is left as it is.
                    let _ = remove_abandoned_drafts(&self.root);
                    return Ok(());
                }
                Err(err) if is_occupied(&err) => self.reap_dead_owner()?,
                Err(err) => return Err(rename_error(&err, draft, &self.path)),
            }
        }
        Err(Error::runtime("installation lock ownership kept changing"))
    }

    /// Removes the owner file of a lock whose owner process is gone, so the next
    /// rename can replace the then-empty directory.
    fn reap_dead_owner(&self) -> Result<()> {
        owned_directory(&self.path, true)?;
        let directory = open_directory(&self.path)?;
        let Some(owner) = open_owner(&directory)? else {
            // The atomic rename may replace this exact empty directory.
            return Ok(());
        };
        let (owner_info, raw) = read_owner(owner)?;
        let owner_pid = parse_owner(&raw)?;
        match test_kill_process(owner_pid) {
            Err(Errno::SRCH) => {}
            // EPERM means the process exists but belongs to someone else.
            Ok(()) | Err(Errno::PERM) => {
                return Err(Error::runtime(
                    "another installer owns the installation lock",
                ));
            }
            Err(errno) => return Err(errno.into()),
        }
        let current = rustix::fs::statat(&directory, OWNER_NAME, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|errno| Error::from_errno(errno, Path::new(OWNER_NAME)))?;
        if identity(&current) != identity(&owner_info) {
            return Ok(());
        }
        // unlinkat is pinned to the dead owner's directory, never a newer lock.
        rustix::fs::unlinkat(&directory, OWNER_NAME, AtFlags::empty())
            .map_err(|errno| Error::from_errno(errno, Path::new(OWNER_NAME)))?;
        rustix::fs::fsync(&directory)?;
        // The original re-reads the path here and stops either way; the next rename
        // attempt decides whether the emptied directory is still the lock.
        rustix::fs::lstat(&self.path).map_err(|errno| Error::from_errno(errno, &self.path))?;
        Ok(())
    }

    fn exit(&mut self) -> Result<()> {
        let Some(expected) = self.identity.take() else {
            return Ok(());
        };
        // From here on Ctrl-C interrupts this release as it would Python's.
        if let Some(armament) = self.interrupt.take() {
            interrupt::disarm(armament);
        }
        owned_directory(&self.path, true)?;
        let directory = open_directory(&self.path)?;
        if identity(&rustix::fs::fstat(&directory)?) != expected {
            return Err(Error::runtime("installation lock identity changed"));
        }
        let (data, _mode) = read_file(&self.path.join(OWNER_NAME), true)?;
        if data != format!("{}\n", std::process::id()).as_bytes()
            || entries(&directory)? != [OWNER_NAME]
        {
            return Err(Error::runtime("installation lock owner changed"));
        }
        rustix::fs::unlinkat(&directory, OWNER_NAME, AtFlags::empty())
            .map_err(|errno| Error::from_errno(errno, Path::new(OWNER_NAME)))?;
        rustix::fs::fsync(&directory)?;
        drop(directory);
        let linked =
            rustix::fs::lstat(&self.path).map_err(|errno| Error::from_errno(errno, &self.path))?;
        if identity(&linked) != expected {
            return Err(Error::runtime("installation lock path changed"));
        }
        std::fs::remove_dir(&self.path).map_err(|err| Error::from_io_path(&err, &self.path))?;
        fsync_directory(&self.root)
    }
}

/// What [`inspect_lock`] found in an existing `.install-lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInspection {
    /// The owner PID the `pid` file names; `None` for an empty lock
    /// directory, which the next acquirer's rename replaces.
    pub owner: Option<u32>,
    /// Whether that PID exists, by the reaper's own test (`kill(pid, 0)`
    /// succeeds or fails with EPERM): a live owner makes every acquirer
    /// refuse, a dead one is reaped by the next acquirer.
    pub alive: bool,
    /// When the owner published the lock (the `pid` file's mtime; the
    /// directory's when it is empty).
    pub since: std::time::SystemTime,
}

/// The installation lock of `root` as the next acquirer would judge it,
/// without taking, reaping or changing it: `None` when there is no lock,
/// otherwise its owner and whether that owner still runs. A lock every
/// acquirer would refuse (unsafe directory or owner file, an invalid owner,
/// unknown files) is returned as that refusal, with the acquirer's class
/// and message.
pub fn inspect_lock(root: &Path) -> Result<Option<LockInspection>> {
    let root = normalize_path(root)?;
    owned_directory(&root, false)?;
    let path = root.join(LOCK_NAME);
    match rustix::fs::lstat(&path) {
        Ok(_) => {}
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(Error::from_errno(errno, &path)),
    }
    owned_directory(&path, true)?;
    let directory = open_directory(&path)?;
    let Some(owner) = open_owner(&directory)? else {
        let info = rustix::fs::fstat(&directory)?;
        return Ok(Some(LockInspection {
            owner: None,
            alive: false,
            since: modified(&info),
        }));
    };
    let (info, raw) = read_owner(owner)?;
    let pid = parse_owner(&raw)?;
    let alive = match test_kill_process(pid) {
        Err(Errno::SRCH) => false,
        Ok(()) | Err(Errno::PERM) => true,
        Err(errno) => return Err(errno.into()),
    };
    Ok(Some(LockInspection {
        owner: Some(pid.as_raw_nonzero().get() as u32),
        alive,
        since: modified(&info),
    }))
}

/// The lock's owner file, opened without following a link or blocking on a
/// FIFO; `None` when the directory holds nothing at all (an owner that died
/// before writing it, or one that has just released), and an error when it
/// holds anything else.
fn open_owner(directory: &OwnedFd) -> Result<Option<OwnedFd>> {
    match rustix::fs::openat(
        directory,
        OWNER_NAME,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(owner) => Ok(Some(owner)),
        Err(Errno::NOENT) if entries(directory)?.is_empty() => Ok(None),
        Err(Errno::NOENT) => Err(Error::runtime("installation lock contains unknown files")),
        Err(errno) => Err(Error::from_errno(errno, Path::new(OWNER_NAME))),
    }
}

fn modified(info: &Stat) -> std::time::SystemTime {
    let seconds = u64::try_from(info.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(info.st_mtime_nsec).unwrap_or(0);
    std::time::UNIX_EPOCH + std::time::Duration::new(seconds, nanos)
}

impl Drop for InstallationLock {
    fn drop(&mut self) {
        if self.identity.is_none() {
            return;
        }
        if let Err(err) = self.exit() {
            eprintln!("{}", err.python_line());
        }
    }
}

/// Opens the lock directory itself (never a symlink) so later calls are pinned to it.
fn open_directory(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, path))
}

/// Checks the owner file like the original and returns its metadata and first bytes.
fn read_owner(owner: OwnedFd) -> Result<(Stat, Vec<u8>)> {
    let info = rustix::fs::fstat(&owner)?;
    let mode = info.st_mode & 0o7777;
    if FileType::from_raw_mode(info.st_mode) != FileType::RegularFile
        || info.st_uid != current_uid()
        || info.st_nlink != 1
        || !(mode == 0o600 || mode == 0o644)
    {
        return Err(Error::permission("installation lock owner is unsafe"));
    }
    let mut raw = vec![0; OWNER_READ_LIMIT];
    let count = rustix::io::read(owner.as_fd(), &mut raw)?;
    raw.truncate(count);
    Ok((info, raw))
}

/// `re.fullmatch(rb"[0-9]{1,20}\n?", raw)` and a value above 1.
fn parse_owner(raw: &[u8]) -> Result<Pid> {
    let invalid = || Error::value("installation lock owner is invalid");
    let digits = raw.strip_suffix(b"\n").unwrap_or(raw);
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    // All-digit text of at most 20 digits always fits in u128.
    let value: u128 = std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(invalid)?;
    if value <= 1 {
        return Err(invalid());
    }
    i32::try_from(value)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(invalid)
}

/// Names in a directory (like `os.listdir(fd)`), sorted, without `.` and `..`.
fn entries(directory: &OwnedFd) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(directory)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    names.sort();
    Ok(names)
}

fn identity(info: &Stat) -> (u64, u64) {
    python_compat::os::file_identity(info)
}

/// True for the two errors `rename(2)` gives when the lock directory is populated.
fn is_occupied(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::EXIST | Errno::NOTEMPTY)
    )
}

/// A rename failure worded like Python's two-path OSError: `...: 'from' -> 'to'`.
fn rename_error(err: &io::Error, from: &Path, to: &Path) -> Error {
    python_compat::Exception::from_io_paths(err, from, to).into()
}

/// Removes the drafts of owners that died before publishing them (a kill
/// between creating `.install-lock.<pid>.<24 hex>.tmp` and renaming it onto
/// the lock), so a crash leaves no temporary behind once the next owner
/// holds the lock; the original leaves them forever. Only a draft whose PID is
/// another process that no longer exists, that is a private directory of
/// this uid, and that holds nothing but its `pid` owner file and that
/// file's unfinished temporaries (private regular files of this uid) is
/// removed: nobody can ever publish it, as only its creator renames it.
/// Install.sh names its drafts the same way.
fn remove_abandoned_drafts(root: &Path) -> Result<()> {
    crate::fs::remove_abandoned_drafts(root, OWNER_NAME.as_bytes(), |name| {
        draft_owner(name).is_some_and(|owner| {
            owner != std::process::id()
                && Pid::from_raw(owner as i32)
                    .is_some_and(|pid| test_kill_process(pid) == Err(Errno::SRCH))
        })
    })
}

/// The owner PID of a lock draft's name, `.install-lock.<pid>.<24 hex>.tmp`.
fn draft_owner(name: &[u8]) -> Option<u32> {
    let rest = name
        .strip_prefix(LOCK_NAME.as_bytes())?
        .strip_prefix(b".")?
        .strip_suffix(b".tmp")?;
    let (digits, token) = rest.split_at(rest.iter().position(|&byte| byte == b'.')?);
    let token = token.strip_prefix(b".")?;
    if !python_compat::is_lower_hex(token, 24)
        || digits.is_empty()
        || digits.len() > 10
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Removes a draft that was never published (its owner file first, as the original does).
fn remove_draft(draft: &Path) -> Result<()> {
    let owner = draft.join(OWNER_NAME);
    match std::fs::remove_file(&owner) {
        Ok(()) => {}
        // Only reachable when writing the owner file itself failed.
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(Error::from_io_path(&err, &owner)),
    }
    std::fs::remove_dir(draft).map_err(|err| Error::from_io_path(&err, draft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_text_follows_the_original_pattern() {
        assert_eq!(parse_owner(b"1234\n").unwrap().as_raw_nonzero().get(), 1234);
        assert_eq!(parse_owner(b"0042").unwrap().as_raw_nonzero().get(), 42);
        for bad in [
            &b""[..],
            b"\n",
            b"1\n",
            b"0",
            b"12\n\n",
            b" 12",
            b"12 ",
            b"-5",
            b"123456789012345678901",
            b"99999999999999999999",
        ] {
            let err = parse_owner(bad).unwrap_err();
            assert_eq!(
                err.python_line(),
                "ValueError: installation lock owner is invalid",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn draft_names_carry_their_owner() {
        let token = "0123456789abcdef01234567";
        assert_eq!(
            draft_owner(format!(".install-lock.4242.{token}.tmp").as_bytes()),
            Some(4242)
        );
        for other in [
            format!(".install-lock..{token}.tmp"),
            format!(".install-lock.42.{token}"),
            format!(".install-lock.4x.{token}.tmp"),
            format!(".install-lock.42.{}.tmp", &token[1..]),
            format!(".install-lock.42.{}.tmp", token.to_uppercase()),
            ".install-lock".to_string(),
        ] {
            assert_eq!(draft_owner(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn rename_errors_name_both_paths_like_python() {
        let err = rename_error(
            &io::Error::from_raw_os_error(20),
            Path::new("/r/.install-lock.1.ab.tmp"),
            Path::new("/r/.install-lock"),
        );
        // Python names the subclass of the errno, as the port does.
        assert_eq!(
            err.python_line(),
            "NotADirectoryError: [Errno 20] Not a directory: '/r/.install-lock.1.ab.tmp' -> '/r/.install-lock'"
        );
    }
}

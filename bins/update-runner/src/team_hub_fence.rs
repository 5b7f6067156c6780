//! The Team Hub maintenance fence of a managed update, checked and cleared
//! through the Hub data directory's control files alone (`HubStore.
//! maintenance_fence_matches_control` / `clear_maintenance_fence_control`).
//!
//! The server writes `maintenance-fence.json` when it snapshots the Hub it
//! hosts before an update; while it exists, the Hub refuses writes. The
//! runner clears only its own exact fence, and only when the update failed
//! before install.sh started; afterwards it merely asks whether the fence is
//! still there, because install.sh's verified rollback owns it then. Neither
//! step opens the Hub database, whose schema a newer release may have changed.
//!
//! Deviation: when an interrupted snapshot restore is pending
//! (`.restore-transaction.json` or a `.restore-<n>-<hex16>` staging entry),
//! Python would finish that restore first, which needs the Hub database. The
//! port refuses instead; the runner then keeps its active status row (fail
//! closed), exactly what Python does when the clear raises.

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags, Stat};
use rustix::io::Errno;

use agents_common::{Error, Result};
use python_compat::{
    json::{parse_json, Json},
    os::current_uid,
    path::{absolute_path, pure_path},
};

/// The fence marker in the Hub data directory.
const FENCE_NAME: &str = "maintenance-fence.json";
/// The lock that serialises every local control operation on the Hub.
const CONTROL_LOCK_NAME: &str = "maintenance-control.lock";
/// The journal of an interrupted snapshot restore.
const RESTORE_JOURNAL_NAME: &str = ".restore-transaction.json";
/// How long the control lock is awaited (`timeout_seconds=5.0`).
const CONTROL_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between lock attempts.
const CONTROL_LOCK_POLL: Duration = Duration::from_millis(25);
/// Largest fence marker.
const MAX_FENCE_BYTES: u64 = 16 * 1024;
/// The exact key set of a fence marker.
const FENCE_KEYS: [&str; 7] = [
    "format",
    "reason",
    "operation_id",
    "hub_id",
    "host_server_identity",
    "snapshot",
    "created_at",
];

/// One exact maintenance generation of the hosted Team Hub: the fence
/// matches only when every field agrees with the marker on disk.
#[derive(Debug, Clone, Copy)]
pub struct TeamHubFence<'a> {
    /// The Hub data directory (`--team-hub-data-dir`).
    pub data_dir: &'a Path,
    /// The Hub's id (`--expected-team-hub-id`).
    pub hub_id: &'a str,
    /// The server that hosts the Hub (`--expected-server-identity`).
    pub host_identity: &'a str,
    /// Why the fence was set; the update runner's is `server-update`.
    pub reason: &'a str,
    /// The maintenance operation (the update id).
    pub operation_id: &'a str,
    /// The snapshot generation taken with the fence (`--team-hub-snapshot`);
    /// only its last component is compared.
    pub snapshot: &'a Path,
}

impl TeamHubFence<'_> {
    /// `maintenance_fence_matches_control`: true when this exact fence is on
    /// disk, false when there is none; a different fence is an error.
    pub fn matches_control(&self) -> Result<bool> {
        let root = absolute_path(self.data_dir);
        let _lock = ControlLock::acquire(&root)?;
        Ok(self.read_matching(&root)?.is_some())
    }

    /// `clear_maintenance_fence_control`: remove this exact fence durably and
    /// return true, or return false when there is none; a different fence is
    /// an error and stays.
    pub fn clear_control(&self) -> Result<bool> {
        let root = absolute_path(self.data_dir);
        let _lock = ControlLock::acquire(&root)?;
        if self.read_matching(&root)?.is_none() {
            return Ok(false);
        }
        let marker = root.join(FENCE_NAME);
        rustix::fs::unlink(&marker).map_err(|errno| Error::from_errno(errno, &marker))?;
        agents_common::fsync_directory_nofollow(&root)?;
        Ok(true)
    }

    /// `_maintenance_fence_control_unlocked`: the marker when present and
    /// exactly this fence.
    fn read_matching(&self, root: &Path) -> Result<Option<Json>> {
        let Some(raw) = read_private_regular_file(&root.join(FENCE_NAME), MAX_FENCE_BYTES)? else {
            return Ok(None);
        };
        let marker = parse_json(&raw)
            .map_err(|_| Error::runtime("Team Hub maintenance fence is invalid"))?;
        let operation_id = maintenance_operation_id(self.operation_id)?;
        let field = |name: &str| marker.get(name).unwrap_or(&Json::Null);
        let matches = marker.as_object().is_some_and(|object| {
            object.len() == FENCE_KEYS.len()
                && FENCE_KEYS.iter().all(|key| object.contains_key(key))
        }) && field("format") == &Json::from(1)
            && field("hub_id") == &Json::from(self.hub_id)
            && field("host_server_identity") == &Json::from(self.host_identity)
            && field("reason") == &Json::from(self.reason)
            && field("operation_id") == &Json::from(operation_id)
            && field("snapshot") == &Json::from(path_name(self.snapshot));
        if !matches {
            return Err(Error::runtime("Team Hub maintenance fence does not match"));
        }
        Ok(Some(marker))
    }
}

/// `_maintenance_operation_id`: the stripped id, 1 to 128 characters of
/// `[A-Za-z0-9][A-Za-z0-9._:-]*`.
fn maintenance_operation_id(value: &str) -> Result<String> {
    let operation_id = python_compat::strip(value);
    if !(1..=128).contains(&operation_id.chars().count()) {
        return Err(Error::value(
            "operation_id must be between 1 and 128 characters",
        ));
    }
    let bytes = operation_id.as_bytes();
    let valid = bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-'));
    if !valid {
        return Err(Error::value("operation_id is invalid"));
    }
    Ok(operation_id.to_string())
}

/// `Path(path).name`: the last component of the normalised path.
fn path_name(path: &Path) -> String {
    let pure = pure_path(path);
    let bytes = pure.as_os_str().as_bytes();
    let name = bytes.rsplit(|byte| *byte == b'/').next().unwrap_or(b"");
    let name = if name == b"." { &b""[..] } else { name };
    String::from_utf8_lossy(name).into_owned()
}

/// `maintenance_control_lock`: the exclusive flock on the Hub's control
/// lock file, awaited for five seconds; released on drop.
struct ControlLock {
    fd: OwnedFd,
}

impl ControlLock {
    fn acquire(root: &Path) -> Result<ControlLock> {
        ensure_private_directory(root)?;
        let path = root.join(CONTROL_LOCK_NAME);
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| Error::from_errno(errno, &path))?;
        let info = rustix::fs::fstat(&fd)?;
        if !is_type(&info, FileType::RegularFile)
            || info.st_nlink != 1
            || info.st_uid != current_uid()
        {
            return Err(Error::permission("Team Hub lock file is unsafe"));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        let deadline = Instant::now() + CONTROL_LOCK_TIMEOUT;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(Errno::WOULDBLOCK) | Err(Errno::INTR) => {
                    if Instant::now() >= deadline {
                        return Err(Error::runtime("Team Hub local control is busy"));
                    }
                    std::thread::sleep(CONTROL_LOCK_POLL);
                }
                Err(errno) => return Err(errno.into()),
            }
        }
        let lock = ControlLock { fd };
        if restore_pending(root)? {
            return Err(Error::runtime(
                "Team Hub snapshot restore recovery is pending; the update runner cannot \
                 finish it without the Hub database",
            ));
        }
        Ok(lock)
    }
}

impl Drop for ControlLock {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.fd, FlockOperation::Unlock);
    }
}

/// Whether an interrupted snapshot restore left its journal or a staging
/// entry (`.restore-<n>-<16 hex>`) in the Hub directory.
fn restore_pending(root: &Path) -> Result<bool> {
    let journal = root.join(RESTORE_JOURNAL_NAME);
    match rustix::fs::lstat(&journal) {
        Ok(_) => return Ok(true),
        Err(Errno::NOENT) => {}
        Err(errno) => return Err(Error::from_errno(errno, &journal)),
    }
    for entry in std::fs::read_dir(root).map_err(|err| Error::from_io_path(&err, root))? {
        let entry = entry.map_err(|err| Error::from_io_path(&err, root))?;
        if is_restore_staging(entry.file_name().as_bytes()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `^\.restore-[1-9][0-9]*-[0-9a-f]{16}$`.
fn is_restore_staging(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".restore-") else {
        return false;
    };
    let Some(dash) = rest.iter().position(|byte| *byte == b'-') else {
        return false;
    };
    let (number, suffix) = (&rest[..dash], &rest[dash + 1..]);
    number
        .first()
        .is_some_and(|digit| (b'1'..=b'9').contains(digit))
        && number.iter().all(u8::is_ascii_digit)
        && python_compat::is_lower_hex(suffix, 16)
}

/// `security.ensure_private_directory`: create the directory (and parents),
/// then require it to be a real directory we own and make it 0700.
fn ensure_private_directory(path: &Path) -> Result<()> {
    create_directories(path)?;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .map_err(|errno| Error::from_errno(errno, path))?;
    let info = rustix::fs::fstat(&fd)?;
    if !is_type(&info, FileType::Directory) || info.st_uid != current_uid() {
        return Err(Error::permission(format!(
            "Team Hub data path must be an owner-controlled directory: {}",
            python_compat::path::shown(path)
        )));
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    let hardened = rustix::fs::fstat(&fd)?;
    if hardened.st_mode & 0o7777 != 0o700 || hardened.st_uid != current_uid() {
        return Err(Error::permission(format!(
            "Team Hub data directory must have mode 0700: {}",
            python_compat::path::shown(path)
        )));
    }
    Ok(())
}

/// `Path.mkdir(mode=0o700, parents=True, exist_ok=True)`: missing parents
/// with the default mode, the directory itself 0700; an existing directory
/// (or a link to one) is accepted, anything else is `FileExistsError`.
fn create_directories(path: &Path) -> Result<()> {
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
        Ok(()) => Ok(()),
        Err(Errno::NOENT) => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            if parent != path {
                create_parent(parent)?;
            }
            match rustix::fs::mkdir(path, Mode::from_raw_mode(0o700)) {
                Ok(()) => Ok(()),
                Err(Errno::EXIST) if path.is_dir() => Ok(()),
                Err(errno) => Err(Error::from_errno(errno, path)),
            }
        }
        Err(Errno::EXIST) if path.is_dir() => Ok(()),
        Err(errno) => Err(Error::from_errno(errno, path)),
    }
}

fn create_parent(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|parent| *parent != path) {
        create_parent(parent)?;
    }
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o777)) {
        Ok(()) => Ok(()),
        Err(Errno::EXIST) if path.is_dir() => Ok(()),
        Err(errno) => Err(Error::from_errno(errno, path)),
    }
}

/// `_read_private_regular_file`: a regular single-link file we own with mode
/// 0600 and 1..=`maximum` bytes, unchanged while read; `None` when missing.
fn read_private_regular_file(path: &Path, maximum: u64) -> Result<Option<Vec<u8>>> {
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(Error::from_errno(errno, path)),
    };
    let invalid = || Error::permission("Team Hub snapshot file is invalid");
    let info = rustix::fs::fstat(&fd)?;
    if !is_type(&info, FileType::RegularFile)
        || info.st_nlink != 1
        || info.st_uid != current_uid()
        || info.st_mode & 0o7777 != 0o600
        || !(1..=maximum as i64).contains(&info.st_size)
    {
        return Err(invalid());
    }
    let mut value = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while (value.len() as u64) <= maximum {
        match rustix::io::read(&fd, &mut chunk) {
            Ok(0) => break,
            Ok(count) => value.extend_from_slice(&chunk[..count]),
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    if value.is_empty() || value.len() as u64 > maximum {
        return Err(invalid());
    }
    let linked = rustix::fs::lstat(path).map_err(|errno| Error::from_errno(errno, path))?;
    let after = rustix::fs::fstat(&fd)?;
    let signature = |stat: &Stat| {
        (
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime,
            stat.st_mtime_nsec,
        )
    };
    if signature(&info) != signature(&after)
        || (info.st_dev, info.st_ino) != (linked.st_dev, linked.st_ino)
    {
        return Err(Error::runtime(
            "Team Hub snapshot file changed while reading",
        ));
    }
    Ok(Some(value))
}

fn is_type(info: &Stat, kind: FileType) -> bool {
    FileType::from_raw_mode(info.st_mode) == kind
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_staging_names() {
        assert!(is_restore_staging(b".restore-1-0123456789abcdef"));
        assert!(is_restore_staging(b".restore-120-0123456789abcdef"));
        for name in [
            &b".restore-0-0123456789abcdef"[..],
            b".restore-1-0123456789ABCDEF",
            b".restore-1-0123456789abcde",
            b".restore--0123456789abcdef",
            b"restore-1-0123456789abcdef",
            b".restore-1-0123456789abcdef0",
        ] {
            assert!(
                !is_restore_staging(name),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn snapshot_names_are_last_components() {
        assert_eq!(
            path_name(Path::new("/hub/maintenance-backups/snapshot_1/")),
            "snapshot_1"
        );
        assert_eq!(path_name(Path::new("snapshot_2")), "snapshot_2");
        assert_eq!(path_name(Path::new("/")), "");
        assert_eq!(path_name(Path::new("a/..")), "..");
    }

    #[test]
    fn operation_ids() {
        assert_eq!(maintenance_operation_id(" abc ").unwrap(), "abc");
        assert!(maintenance_operation_id("").is_err());
        assert!(maintenance_operation_id("-abc").is_err());
        assert!(maintenance_operation_id(&"a".repeat(129)).is_err());
    }
}

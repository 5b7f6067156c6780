//! The `server-update.json` status row shared by the server and the detached
//! update runner (`update_runner.py`'s `server_update_status_lock`,
//! `update_status` and `atomic_json`).
//!
//! The server (Python, staying) and the runner serialise every read-modify-
//! write of the row with a blocking `flock` on `.server-update.json.lock`.
//! The runner writes only while it still owns the row (compare-and-swap on
//! `update_id` and a runner-owned phase), and it keeps every key it does not
//! know, because the row is the server's too.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};

use crate::error::{Error, Result};
use crate::fs::{read_regular_file, BoundedRead, Leaf};
use python_compat::{
    decode_utf8,
    json::{encode_indented, parse_json_str, Json, JsonObject},
    DefinedClass, ErrorClass,
};

/// The `phase` of the `server-update.json` row, as the runner and the
/// server write it (the exact strings are the row's contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusPhase {
    /// `starting`: the server admitted the update and launched the runner.
    Starting,
    /// `checking`: the signed release manifest is being checked.
    Checking,
    /// `downloading`: the release archive is being downloaded.
    Downloading,
    /// `verifying`: signature and archive (or the prepared release) verified.
    Verifying,
    /// `installing`: install.sh runs (or a recovery resumes it).
    Installing,
    /// `restarting`: install.sh restarts the server.
    Restarting,
    /// `complete`: the update is installed and the server healthy.
    Complete,
    /// `failed`: the update ended without installing.
    Failed,
}

impl StatusPhase {
    /// Phases in which the runner owns the row; any other phase (or another
    /// update id) means the server finalised, cancelled or superseded the
    /// update.
    pub const RUNNER_OWNED_ACTIVE: [StatusPhase; 6] = [
        StatusPhase::Starting,
        StatusPhase::Checking,
        StatusPhase::Downloading,
        StatusPhase::Verifying,
        StatusPhase::Installing,
        StatusPhase::Restarting,
    ];

    /// The row's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusPhase::Starting => "starting",
            StatusPhase::Checking => "checking",
            StatusPhase::Downloading => "downloading",
            StatusPhase::Verifying => "verifying",
            StatusPhase::Installing => "installing",
            StatusPhase::Restarting => "restarting",
            StatusPhase::Complete => "complete",
            StatusPhase::Failed => "failed",
        }
    }

    /// The phase a row's text names, if any (the server may write others).
    pub fn parse(text: &str) -> Option<StatusPhase> {
        [StatusPhase::Complete, StatusPhase::Failed]
            .into_iter()
            .chain(StatusPhase::RUNNER_OWNED_ACTIVE)
            .find(|phase| phase.as_str() == text)
    }

    /// Whether the runner owns a row in this phase.
    pub fn is_runner_owned_active(self) -> bool {
        StatusPhase::RUNNER_OWNED_ACTIVE.contains(&self)
    }

    /// `phase in RUNNER_OWNED_ACTIVE_PHASES` for a row's `phase` value: only
    /// a string naming a runner-owned phase counts.
    pub fn runner_owned_value(value: Option<&Json>) -> bool {
        value
            .and_then(Json::as_str)
            .and_then(StatusPhase::parse)
            .is_some_and(StatusPhase::is_runner_owned_active)
    }
}

impl From<StatusPhase> for Json {
    fn from(phase: StatusPhase) -> Json {
        Json::from(phase.as_str())
    }
}

/// The names of [`StatusPhase::RUNNER_OWNED_ACTIVE`], for callers that
/// compare text.
pub const RUNNER_OWNED_ACTIVE_PHASES: [&str; 6] = [
    "starting",
    "checking",
    "downloading",
    "verifying",
    "installing",
    "restarting",
];

/// `UpdateOwnershipLostError`'s message: the runner must stop writing.
pub const OWNERSHIP_LOST_MESSAGE: &str = "detached updater no longer owns the server update status";

/// `update_runner.UpdateOwnershipLostError` (a `RuntimeError`): the status
/// row no longer belongs to this runner, which must stop writing.
const OWNERSHIP_LOST: ErrorClass = ErrorClass::Defined(&DefinedClass {
    name: "update_runner.UpdateOwnershipLostError",
    base: ErrorClass::Runtime,
});

/// True when `error` is `UpdateOwnershipLostError` (the CAS refused a write).
pub fn is_ownership_lost(error: &Error) -> bool {
    error.class() == OWNERSHIP_LOST
}

/// `utc_now()`: `%Y-%m-%dT%H:%M:%SZ` in UTC, whole seconds, the timestamp
/// format of every status field.
pub fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64);
    format_utc(seconds)
}

/// Format Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
pub fn format_utc(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// `atomic_json`: create the parent directories, write the two-space, sorted,
/// ASCII JSON plus a newline to a private `mkstemp`-style temporary
/// (`.<name>.<random>.tmp`), fsync it, rename it over `path` and fsync the
/// directory. The temporary never survives a failure.
pub fn atomic_json(path: &Path, value: &JsonObject) -> Result<()> {
    let parent = parent_of(path);
    std::fs::create_dir_all(&parent).map_err(|err| Error::from_io_path(&err, &parent))?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let data = encode_indented(&Json::Object(value.clone()));
    let (fd, temporary) = create_temporary(&parent, &name)?;
    let published = (|| {
        write_all(&fd, &data)?;
        rustix::fs::fsync(&fd)?;
        drop(fd);
        rustix::fs::rename(&temporary, path)
            .map_err(|errno| Error::from_errno_paths(errno, &temporary, path))?;
        crate::fs::fsync_directory(&parent)
    })();
    // `finally: temporary.unlink(missing_ok=True)`.
    let _ = rustix::fs::unlink(&temporary);
    published
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `tempfile.mkstemp(prefix=".<name>.", suffix=".tmp", dir=parent)`: an
/// exclusive, private (0600) file that follows no symlink.
fn create_temporary(parent: &Path, name: &str) -> Result<(OwnedFd, PathBuf)> {
    loop {
        let temporary = parent.join(format!(".{name}.{}.tmp", python_compat::token_hex(4)?));
        match rustix::fs::open(
            &temporary,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => return Ok((fd, temporary)),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(errno) => return Err(Error::from_errno(errno, &temporary)),
        }
    }
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> Result<()> {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(written) => data = &data[written..],
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// The exclusive `server_update_status_lock`, held until dropped.
///
/// The lock file `.<status name>.lock` beside the row is opened without
/// following symlinks and must be a regular file with one link owned by us;
/// it is then made private (0600) and locked with a blocking `flock`, the
/// lock the server takes around its own reads and writes of the row.
#[derive(Debug)]
pub struct StatusLock {
    fd: OwnedFd,
}

impl StatusLock {
    /// Block until the lock of `status_path` is ours.
    pub fn acquire(status_path: &Path) -> Result<StatusLock> {
        let parent = parent_of(status_path);
        std::fs::create_dir_all(&parent).map_err(|err| Error::from_io_path(&err, &parent))?;
        let name = status_path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let lock_path = status_path.with_file_name(format!(".{name}.lock"));
        let fd = rustix::fs::open(
            &lock_path,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| Error::from_errno(errno, &lock_path))?;
        let info = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(info.st_mode) != FileType::RegularFile
            || info.st_nlink != 1
            || info.st_uid != python_compat::os::current_uid()
        {
            return Err(Error::permission("server update status lock is unsafe"));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(StatusLock { fd }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

impl Drop for StatusLock {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.fd, FlockOperation::Unlock);
    }
}

/// Largest status row [`read_status_unlocked`] reads: far above any real
/// row (a few KiB), far below what would strain memory.
pub(crate) const MAX_STATUS_BYTES: u64 = 16 * 1024 * 1024;

/// `_read_status_unlocked`: the row as an untyped map; a missing, unreadable
/// or unparsable file, or one that is not a JSON object, reads as `{}`.
/// Text that is not UTF-8 raises `UnicodeDecodeError`, as `Path.read_text()`
/// does. Stricter than the original (docs/design/security.md): a FIFO or other
/// non-regular file reads as `{}` instead of blocking, and a file over
/// [`MAX_STATUS_BYTES`] is refused instead of read whole.
pub fn read_status_unlocked(path: &Path) -> Result<JsonObject> {
    let bytes = match read_regular_file(path, MAX_STATUS_BYTES, Leaf::Follow) {
        Ok(BoundedRead::Contents(bytes)) => bytes,
        Ok(BoundedRead::NotRegular) | Err(_) => return Ok(JsonObject::new()),
        Ok(BoundedRead::TooLarge) => {
            return Err(Error::runtime(format!(
                "server update status file exceeds {} MiB",
                MAX_STATUS_BYTES >> 20
            )))
        }
    };
    let text = decode_utf8(&bytes)?;
    // `except (FileNotFoundError, json.JSONDecodeError, OSError)`: a
    // `RecursionError` or an integer past Python's digit limit still raises.
    match parse_json_str(text) {
        Ok(Json::Object(object)) => Ok(object),
        Ok(_) => Ok(JsonObject::new()),
        Err(err) if err.class() == ErrorClass::JsonDecode => Ok(JsonObject::new()),
        Err(err) => Err(err.into()),
    }
}

/// `_update_status_unlocked`: merge `changes` into a copy of `current`
/// (`null` values are written, never deleted), stamp `updated_at`, write the
/// row atomically and return it. The caller holds the [`StatusLock`].
pub fn update_status_unlocked(
    path: &Path,
    current: &JsonObject,
    changes: JsonObject,
) -> Result<JsonObject> {
    let mut row = current.clone();
    for (key, value) in changes {
        row.insert(key, value);
    }
    row.insert("updated_at", utc_now());
    // Best effort: a leftover that cannot be removed is left as it is.
    let _ = remove_abandoned_temporaries(path);
    atomic_json(path, &row)?;
    Ok(row)
}

/// Removes the temporaries of `path` that a writer killed between creating
/// and renaming them left (`.<name>.<8 random>.tmp`, as this port's
/// `atomic_json` and Python's `mkstemp` name them): only private regular
/// files of this uid with one link. Every writer of the row (the server,
/// the runner, the activation helper) writes it only under the
/// [`StatusLock`], which the caller holds, so none of them is a live
/// writer's. The Python original leaves them forever.
fn remove_abandoned_temporaries(path: &Path) -> Result<bool> {
    crate::fs::remove_leftover_temporaries(path, true, is_mkstemp_temporary)
}

/// True when `name` is one `mkstemp(prefix=".<target>.", suffix=".tmp")`
/// gives: eight characters of its alphabet between prefix and suffix.
fn is_mkstemp_temporary(name: &[u8], target: &[u8]) -> bool {
    name.strip_prefix(b".")
        .and_then(|rest| rest.strip_prefix(target))
        .and_then(|rest| rest.strip_prefix(b"."))
        .and_then(|rest| rest.strip_suffix(b".tmp"))
        .is_some_and(|random| {
            random.len() == 8
                && random
                    .iter()
                    .all(|&byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_')
        })
}

/// True when the row still belongs to update `update_id` in a runner-owned phase.
pub fn runner_owns(row: &JsonObject, update_id: &str) -> bool {
    let field = |key: &str| {
        row.get(key)
            .map(python_compat::str_or_empty)
            .unwrap_or_default()
    };
    field("update_id") == update_id
        && StatusPhase::parse(&field("phase")).is_some_and(StatusPhase::is_runner_owned_active)
}

/// `update_status`: under the lock, refuse with `UpdateOwnershipLostError`
/// unless the row still belongs to `expected_update_id` (when given), then
/// merge `changes` and write.
pub fn update_status(
    path: &Path,
    expected_update_id: Option<&str>,
    changes: JsonObject,
) -> Result<JsonObject> {
    let _lock = StatusLock::acquire(path)?;
    let current = read_status_unlocked(path)?;
    if let Some(update_id) = expected_update_id {
        if !runner_owns(&current, update_id) {
            return Err(Error::new(OWNERSHIP_LOST, OWNERSHIP_LOST_MESSAGE));
        }
    }
    update_status_unlocked(path, &current, changes)
}

#[cfg(test)]
mod tests {
    use super::{
        format_utc, ErrorClass, Json, StatusPhase, OWNERSHIP_LOST, RUNNER_OWNED_ACTIVE_PHASES,
    };

    #[test]
    fn phases_are_the_rows_strings() {
        let names = StatusPhase::RUNNER_OWNED_ACTIVE.map(StatusPhase::as_str);
        assert_eq!(names, RUNNER_OWNED_ACTIVE_PHASES);
        for phase in [StatusPhase::Complete, StatusPhase::Failed] {
            assert_eq!(StatusPhase::parse(phase.as_str()), Some(phase));
            assert!(!phase.is_runner_owned_active());
        }
        assert_eq!(StatusPhase::Failed.as_str(), "failed");
        assert_eq!(StatusPhase::Complete.as_str(), "complete");
        assert_eq!(StatusPhase::parse("Installing"), None);
        assert!(StatusPhase::runner_owned_value(Some(&Json::from(
            "verifying"
        ))));
        assert!(!StatusPhase::runner_owned_value(Some(&Json::from(
            "cancelled"
        ))));
        assert!(!StatusPhase::runner_owned_value(Some(&Json::Null)));
        assert!(!StatusPhase::runner_owned_value(None));
    }

    #[test]
    fn ownership_lost_is_a_runtime_error() {
        assert!(OWNERSHIP_LOST.is_a(ErrorClass::Runtime));
        assert!(!OWNERSHIP_LOST.is_a(ErrorClass::Value));
        assert_eq!(
            OWNERSHIP_LOST.python_name(),
            "update_runner.UpdateOwnershipLostError"
        );
    }

    #[test]
    fn timestamps_match_strftime() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_utc(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}

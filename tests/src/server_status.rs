//! The server's side of `admin/server-update.json`, as upstream's
//! `update_runner` helpers the server imports define it (the status flock,
//! `json.loads` of the row, `atomic_json`, `utc_now`), over serde_json: the
//! test worker's status read and the demo's server write and read the row
//! with this, never with the helpers' own status code under test.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rustix::fs::{flock, FlockOperation};
use serde_json::{Map, Value};

/// `SERVER_UPDATE_ACTIVE_PHASES` (also the runner's
/// `RUNNER_OWNED_ACTIVE_PHASES`), in the order a row moves through them.
pub const ACTIVE_PHASES: [&str; 6] = [
    "starting",
    "checking",
    "downloading",
    "verifying",
    "installing",
    "restarting",
];

/// A status row (a JSON object).
pub type Row = Map<String, Value>;

/// The status flock: `<dir>/.server-update.json.lock`, an owned single-link
/// regular file made 0600, locked exclusively (blocking) until dropped.
pub fn status_lock(path: &Path) -> Result<fs::File, String> {
    let directory = path.parent().expect("the row lives in admin/");
    fs::create_dir_all(directory).map_err(|err| err.to_string())?;
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(directory.join(".server-update.json.lock"))
        .map_err(|err| err.to_string())?;
    let info = lock.metadata().map_err(|err| err.to_string())?;
    if !info.is_file() || info.nlink() != 1 || info.uid() != rustix::process::getuid().as_raw() {
        return Err("server update status lock is unsafe".to_string());
    }
    lock.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|err| err.to_string())?;
    flock(&lock, FlockOperation::LockExclusive).map_err(|err| err.to_string())?;
    Ok(lock)
}

/// The row as `json.loads(path.read_text())`: an unreadable file or one
/// that is not a JSON object is an error (the server then reads `{}`).
pub fn read_row(path: &Path) -> Result<Row, String> {
    let data = fs::read(path).map_err(|err| format!("{}: {err}", path.display()))?;
    match serde_json::from_slice(&data) {
        Ok(Value::Object(row)) => Ok(row),
        Ok(_) => Err(format!("{} is not a JSON object", path.display())),
        Err(err) => Err(format!("{}: {err}", path.display())),
    }
}

/// `atomic_json`: sorted keys, two-space indent and a newline, through an
/// fsynced 0600 temporary file renamed into place, then the directory fsynced.
pub fn write_json(path: &Path, row: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(row).expect("a JSON value serializes") + "\n";
    write_bytes(path, text.as_bytes())
}

/// The atomic write itself (see [`write_json`]).
fn write_bytes(path: &Path, data: &[u8]) -> Result<(), String> {
    let directory = path.parent().ok_or("a status file lives in a directory")?;
    fs::create_dir_all(directory).map_err(|err| format!("{}: {err}", directory.display()))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut random = [0u8; 4];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        .map_err(|err| err.to_string())?;
    let suffix: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    let temporary = directory.join(format!(".{name}.{suffix}.tmp"));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        fs::File::open(directory)?.sync_all()
    })();
    let _ = fs::remove_file(&temporary);
    written.map_err(|err| err.to_string())
}

/// [`write_json`] of a row the tests build in the fixtures' JSON type (the
/// server's admitted rows, one-time credentials), for the black-box tests of
/// the helpers that read them. A row holding what only Python holds (lone
/// surrogates, ints beyond 64 bits) is written by CPython's own `json.dumps`,
/// the server's writer, from the row's Python form.
pub fn write_row(path: &Path, row: &python_compat::json::JsonObject) -> Result<(), String> {
    let row = python_compat::json::Json::Object(row.clone());
    match crate::upstream_json::try_from_compat(&row) {
        Some(value) => write_json(path, &value),
        None => write_bytes(
            path,
            &python_dumps(
                &python_compat::json::encode_compact(&row).map_err(|err| err.to_string())?,
            )?,
        ),
    }
}

/// `json.dumps(json.loads(text), sort_keys=True, indent=2)` and a newline,
/// by `python3`.
fn python_dumps(text: &[u8]) -> Result<Vec<u8>, String> {
    use std::process::{Command, Stdio};
    let script = "import json, sys\n\
                  value = json.loads(sys.stdin.buffer.read())\n\
                  sys.stdout.write(json.dumps(value, sort_keys=True, indent=2) + '\\n')\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|err| format!("python3: {err}"))?;
    let mut stdin = child.stdin.take().expect("a piped stdin");
    stdin
        .write_all(text)
        .map_err(|err| format!("python3: {err}"))?;
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|err| format!("python3: {err}"))?;
    if !output.status.success() {
        return Err(format!("python3 json.dumps failed: {}", output.status));
    }
    Ok(output.stdout)
}

/// `utc_now()`: `%Y-%m-%dT%H:%M:%SZ` (the C library's `gmtime_r`).
pub fn utc_now() -> String {
    let seconds: libc::time_t = now_seconds();
    // SAFETY: `tm` is plain data that gmtime_r fills in; both pointers are
    // valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&seconds, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The Unix seconds of a `%Y-%m-%dT%H:%M:%SZ` stamp (`timegm`), if it is one.
pub fn stamp_seconds(stamp: &str) -> Option<i64> {
    if stamp.len() != 20 || !stamp.ends_with('Z') {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i32> { stamp.get(range)?.parse().ok() };
    // SAFETY: plain data; timegm reads and normalizes only `tm`.
    let seconds = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = number(0..4)? - 1900;
        tm.tm_mon = number(5..7)? - 1;
        tm.tm_mday = number(8..10)?;
        tm.tm_hour = number(11..13)?;
        tm.tm_min = number(14..16)?;
        tm.tm_sec = number(17..19)?;
        libc::timegm(&mut tm)
    };
    Some(seconds)
}

/// Seconds since the Unix epoch.
pub fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::{now_seconds, stamp_seconds, utc_now};

    #[test]
    fn stamps_read_back_as_the_seconds_they_were_written_at() {
        assert_eq!(stamp_seconds("1970-01-02T00:00:01Z"), Some(86_401));
        assert_eq!(stamp_seconds("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(stamp_seconds("2024-02-29 23:59:59"), None);
        let before = now_seconds();
        let stamp = stamp_seconds(&utc_now()).unwrap();
        assert!((before..=now_seconds()).contains(&stamp), "{stamp}");
    }
}

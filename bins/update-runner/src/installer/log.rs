//! `server-update.log`: bounded history between installer attempts and the
//! bounded, redacted diagnostic tail that failure messages carry (the original's
//! `trim_installer_log` and `installer_log_tail`).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::redact::{redact_line, redact_values};
use agents_common::{Error, Result};
use python_compat::{splitlines, strip};

/// Size the log is trimmed to after every attempt (and, less the next
/// header, before it).
pub const INSTALLER_LOG_MAX_BYTES: u64 = 1024 * 1024;
/// Most bytes of an attempt read for its diagnostic tail.
const TAIL_BYTES: u64 = 64 * 1024;
/// Most lines a failure message quotes.
const TAIL_LINES: usize = 12;
/// Most characters a failure message quotes.
const ERROR_MAX_CHARS: usize = 4_000;
/// install.sh's machine-readable result line, never shown to the user.
const SETUP_RESULT_MARKER: &str = "AGENTSDOCK_SETUP_RESULT=";

/// `trim_installer_log`: when the log is larger than `limit` bytes, keep its
/// last `limit` bytes minus the partial first line (which could be the end
/// of a secret whose key was cut off), rewriting the file in place. A
/// missing log is fine; call it only while no installer writes.
pub fn trim_installer_log(log_path: &Path, limit: u64) -> Result<()> {
    let mut log = match OpenOptions::new().read(true).write(true).open(log_path) {
        Ok(log) => log,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(Error::from_io_path(&err, log_path)),
    };
    let size = log.seek(SeekFrom::End(0))?;
    if size <= limit {
        return Ok(());
    }
    log.seek(SeekFrom::Start(size - limit))?;
    let mut tail = Vec::new();
    (&mut log).take(limit).read_to_end(&mut tail)?;
    let kept = match tail.iter().position(|byte| *byte == b'\n') {
        Some(newline) => &tail[newline + 1..],
        None => &[][..],
    };
    log.seek(SeekFrom::Start(0))?;
    log.write_all(kept)?;
    log.set_len(kept.len() as u64)?;
    Ok(())
}

/// `installer_log_tail`: the last lines of the output written since
/// `start_offset` (this attempt's), read from at most 64 KiB, with the
/// setup-result line dropped and bearer tokens and known credential
/// assignments replaced by `[REDACTED]`: at most 12 lines and 4,000
/// characters, stripped. An unreadable log gives an empty tail. Every
/// occurrence of a value in `secrets` is redacted first, whatever precedes
/// it (stricter than the original).
pub fn installer_log_tail(log_path: &Path, start_offset: u64, secrets: &[String]) -> String {
    let Ok((content, truncated)) = read_attempt_tail(log_path, start_offset) else {
        return String::new();
    };
    let text = redact_values(&String::from_utf8_lossy(&content), secrets);
    let mut lines = splitlines(&text);
    if truncated && !lines.is_empty() {
        // The read may begin inside a secret whose identifying key was
        // before the cut: never show that unclassifiable partial line.
        lines.remove(0);
    }
    let safe_lines: Vec<String> = lines
        .into_iter()
        .filter(|line| !line.contains(SETUP_RESULT_MARKER))
        .map(redact_line)
        .collect();
    let tail = safe_lines[safe_lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    let skip = tail.chars().count().saturating_sub(ERROR_MAX_CHARS);
    let cut = tail
        .char_indices()
        .nth(skip)
        .map_or(tail.len(), |(at, _)| at);
    strip(&tail[cut..]).to_string()
}

/// The bytes from `max(start_offset, size - 64 KiB)` and whether that start
/// cut into the attempt's output.
fn read_attempt_tail(log_path: &Path, start_offset: u64) -> io::Result<(Vec<u8>, bool)> {
    let mut log = File::open(log_path)?;
    let size = log.seek(SeekFrom::End(0))?;
    let start = start_offset.max(size.saturating_sub(TAIL_BYTES));
    log.seek(SeekFrom::Start(start))?;
    let mut content = Vec::new();
    log.take(TAIL_BYTES).read_to_end(&mut content)?;
    Ok((content, start > start_offset))
}

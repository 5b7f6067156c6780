//! Line output as the script's `echo` produces it: raw bytes (paths may not
//! be UTF-8), one write per line so stdout and stderr interleave as they did.
//!
//! Write errors are ignored: a closed stream must not change what the
//! uninstaller does to the installation (bash's `set -e` would abort on a
//! failed `echo`; this port finishes the operation instead).

use std::io::Write;

/// One line on stdout.
pub(crate) fn say(parts: &[&[u8]]) {
    let mut line = parts.concat();
    line.push(b'\n');
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&line);
    let _ = stdout.flush();
}

/// One line on stderr.
pub(crate) fn warn(parts: &[&[u8]]) {
    let mut line = parts.concat();
    line.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&line);
}

/// Text without a newline on stderr (bash's `read -p` prompt).
pub(crate) fn prompt_stderr(text: &[u8]) {
    let _ = std::io::stderr().lock().write_all(text);
}

/// Text without a newline on stdout, flushed (Python's `input()` prompt when
/// stdin or stdout is not a terminal).
pub(crate) fn prompt_stdout(text: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text);
    let _ = stdout.flush();
}

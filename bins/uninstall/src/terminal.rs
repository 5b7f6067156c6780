//! Interactive confirmation: whether stdin is a terminal, and reading one
//! line from it the way bash's `read -r` and Python's `input()` read it.
//!
//! Input is read one byte at a time straight from descriptor 0, so nothing
//! past the answer's newline is consumed (as bash does).

use crate::signals;

/// `[[ -t 0 ]]` / `sys.stdin.isatty()`.
pub(crate) fn stdin_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdin())
}

/// One raw line from stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawLine {
    /// A line ended by a newline (not included).
    Complete(Vec<u8>),
    /// End of input (or a read error) before a newline; what came before it.
    Ended(Vec<u8>),
    /// A trapped signal arrived while waiting.
    Interrupted,
}

/// Reads up to and including the next newline.
pub(crate) fn read_raw_line() -> RawLine {
    let mut line = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        match rustix::io::read(std::io::stdin(), &mut byte) {
            Ok(1) if byte[0] == b'\n' => return RawLine::Complete(line),
            Ok(1) => line.push(byte[0]),
            Ok(_) => return RawLine::Ended(line),
            Err(rustix::io::Errno::INTR) => {
                if signals::pending() {
                    return RawLine::Interrupted;
                }
            }
            Err(_) => return RawLine::Ended(line),
        }
    }
}

/// The outcome of bash's `read -r reply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BashReply {
    /// `read` succeeded; the reply with surrounding IFS whitespace removed.
    Line(Vec<u8>),
    /// `read` failed (end of input): the script treats this as "no".
    Failed,
    /// A trapped signal: the script exits 130.
    Interrupted,
}

/// `read -r -p "$prompt" reply` on a terminal: the prompt goes to stderr,
/// NUL bytes are dropped and leading/trailing spaces, tabs and newlines are
/// trimmed (the default IFS with a single variable).
pub(crate) fn bash_read(prompt: &[u8]) -> BashReply {
    crate::output::prompt_stderr(prompt);
    match read_raw_line() {
        RawLine::Complete(line) => BashReply::Line(bash_reply_value(&line)),
        RawLine::Ended(_) => BashReply::Failed,
        RawLine::Interrupted => BashReply::Interrupted,
    }
}

fn bash_reply_value(line: &[u8]) -> Vec<u8> {
    let kept: Vec<u8> = line.iter().copied().filter(|&byte| byte != 0).collect();
    let ifs = |byte: &u8| matches!(byte, b' ' | b'\t' | b'\n');
    let start = kept
        .iter()
        .position(|byte| !ifs(byte))
        .unwrap_or(kept.len());
    let end = kept
        .iter()
        .rposition(|byte| !ifs(byte))
        .map_or(start, |at| at + 1);
    kept[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_trims_ifs_whitespace_only_at_the_ends() {
        assert_eq!(bash_reply_value(b"  /a b\t "), b"/a b".to_vec());
        assert_eq!(bash_reply_value(b"y\0es"), b"yes".to_vec());
        assert_eq!(bash_reply_value(b" \t "), b"".to_vec());
        assert_eq!(bash_reply_value(b"\x0by"), b"\x0by".to_vec());
    }
}

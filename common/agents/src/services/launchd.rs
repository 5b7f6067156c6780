//! Reading `launchctl print-disabled gui/<uid>` and `launchctl print
//! gui/<uid>/<label>` with exactly the original's regular expressions:
//! `(?m)^\s*"<label>"\s*=>\s*(\S+)\s*$` and `(?m)^\s*pid\s*=\s*([0-9]+)\s*$`.
//!
//! Both have the shape `^ \s* LITERAL \s* SEPARATOR \s* (TOKEN+) \s* $`, which
//! [`assignments`] evaluates like `re.findall` (Python's `\s` is `str.isspace`,
//! and `\s` may cross line ends, so a value on the next line still counts).

use super::ServiceState;
use crate::error::{Error, Result};
use python_compat::is_space;

/// Whether `label` is enabled according to `print-disabled` output: enabled
/// unless its one entry says `true` or `disabled`.
pub(super) fn enablement(print_disabled: &str, label: &str) -> Result<bool> {
    let entries = assignments(print_disabled, &format!("\"{label}\""), "=>", |c| {
        !is_space(c)
    });
    match entries.as_slice() {
        [] => Ok(true),
        [value] if ["false", "enabled"].contains(value) => Ok(true),
        [value] if ["true", "disabled"].contains(value) => Ok(false),
        _ => Err(Error::runtime("launchd returned ambiguous enablement")),
    }
}

/// The state of a loaded job from its `print` output: running with the one
/// positive `pid = N`, otherwise transitioning.
///
/// Deviation: a PID that does not fit a `u32` counts as no PID (transitioning)
/// where Python would accept any integer; launchd never prints one.
pub(super) fn loaded_state(print: &str, enabled: bool) -> ServiceState {
    let pids = assignments(print, "pid", "=", |c| c.is_ascii_digit());
    match pids.as_slice() {
        [pid] => match pid.parse::<u32>() {
            Ok(pid) if pid > 0 => ServiceState::running(enabled, pid),
            _ => ServiceState::with_state(super::ServiceRunState::Transitioning, enabled),
        },
        _ => ServiceState::with_state(super::ServiceRunState::Transitioning, enabled),
    }
}

/// `re.findall(r"(?m)^\s*LITERAL\s*SEPARATOR\s*(TOKEN+)\s*$", text)` where
/// LITERAL and SEPARATOR start with a non-space character and TOKEN is a
/// class of non-space characters.
///
/// With those conditions the regex cannot backtrack into a different match:
/// each `\s*` before a non-space character takes the whole run, TOKEN+ must be
/// maximal (a shorter run is followed by a TOKEN character where `$` fails),
/// and the final `\s*$` succeeds iff the space after the token reaches the end
/// of the text or contains a line feed (the match then ends at the last one).
fn assignments<'a>(
    text: &'a str,
    literal: &str,
    separator: &str,
    token: fn(char) -> bool,
) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut position = 0;
    while position <= text.len() {
        let line_start = position == 0 || text.as_bytes()[position - 1] == b'\n';
        if line_start {
            if let Some((value, end)) = match_at(text, position, literal, separator, token) {
                found.push(value);
                if end > position {
                    position = end;
                    continue;
                }
            }
        }
        position += text[position..].chars().next().map_or(1, char::len_utf8);
    }
    found
}

fn match_at<'a>(
    text: &'a str,
    start: usize,
    literal: &str,
    separator: &str,
    token: fn(char) -> bool,
) -> Option<(&'a str, usize)> {
    let mut index = skip_space(text, start);
    index += text[index..]
        .starts_with(literal)
        .then_some(literal.len())?;
    index = skip_space(text, index);
    index += text[index..]
        .starts_with(separator)
        .then_some(separator.len())?;
    let value_start = skip_space(text, index);
    let value_end = text[value_start..]
        .find(|c: char| !token(c))
        .map_or(text.len(), |offset| value_start + offset);
    if value_end == value_start {
        return None;
    }
    let space_end = skip_space(text, value_end);
    let end = if space_end == text.len() {
        text.len()
    } else {
        value_end + text[value_end..space_end].rfind('\n')?
    };
    Some((&text[value_start..value_end], end))
}

fn skip_space(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c: char| !is_space(c))
        .map_or(text.len(), |offset| from + offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use python_compat::json::Json;

    fn pids(text: &str) -> Vec<&str> {
        assignments(text, "pid", "=", |c| c.is_ascii_digit())
    }

    fn labels(text: &str) -> Vec<&str> {
        assignments(text, "\"x\"", "=>", |c| !is_space(c))
    }

    // Each expectation was produced with CPython's re.findall on the same text.
    #[test]
    fn findall_semantics_of_the_pid_pattern() {
        assert_eq!(pids("\tpid = 42\n"), ["42"]);
        assert_eq!(pids("pid=7"), ["7"]);
        assert_eq!(pids("  pid = 42 extra\n"), Vec::<&str>::new());
        assert_eq!(pids("pid = 4x2\n"), Vec::<&str>::new());
        assert_eq!(pids("xpid = 1\n"), Vec::<&str>::new());
        assert_eq!(pids("a pid = 1\n"), Vec::<&str>::new());
        // \s crosses line ends on both sides of '='.
        assert_eq!(pids("pid\n=\n 9\n"), ["9"]);
        assert_eq!(pids("pid = 1\npid = 2\n"), ["1", "2"]);
        assert_eq!(pids("pid = 1\n\n\n  pid = 2"), ["1", "2"]);
        // Trailing spaces then more text on the same line: no '$'.
        assert_eq!(pids("pid = 1  x\npid = 3\n"), ["3"]);
        // Python's \s includes \x1c-\x1f and U+00A0.
        assert_eq!(pids("\x1cpid\u{a0}=\x1f5\u{2028}"), ["5"]);
        // '$' matches only before '\n', not before '\r'.
        assert_eq!(pids("pid = 5\rx"), Vec::<&str>::new());
    }

    #[test]
    fn findall_semantics_of_the_label_pattern() {
        assert_eq!(labels("\t\"x\" => true\n"), ["true"]);
        assert_eq!(labels("\"x\" =>\n  disabled\n"), ["disabled"]);
        assert_eq!(labels("\"x\" => true false\n"), Vec::<&str>::new());
        assert_eq!(labels("\"x\" => \n\"y\" => 1\n"), Vec::<&str>::new());
        assert_eq!(labels("\"x\" => a\n\"x\" => b"), ["a", "b"]);
        assert_eq!(labels("\"xy\" => a\n"), Vec::<&str>::new());
    }

    /// 600 generated texts whose matches CPython's `re.findall` computed.
    #[test]
    fn agrees_with_cpython_on_generated_texts() {
        let fixture = include_bytes!("../../tests/services_fixtures/launchd_findall.json");
        let fixture = python_compat::json::parse_json(fixture).unwrap();
        let strings = |value: &Json| -> Vec<String> {
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|item| item.as_str().unwrap().to_string())
                .collect()
        };
        let cases = fixture.get("cases").and_then(Json::as_array).unwrap();
        assert_eq!(cases.len(), 600);
        for case in cases {
            let text = case.get("text").and_then(Json::as_str).unwrap();
            assert_eq!(pids(text), strings(case.get("pids").unwrap()), "{text:?}");
            let labels = assignments(text, "\"com.agentsdock.server\"", "=>", |c| !is_space(c));
            assert_eq!(labels, strings(case.get("labels").unwrap()), "{text:?}");
        }
    }
}

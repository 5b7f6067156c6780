//! The original's three redactions of an installer log line, with Python's
//! `re` semantics for the patterns (case-insensitive Unicode matching, `\s`
//! as `str.isspace`) and its `str.splitlines` / `str.strip`:
//!
//! 1. `(?i)(Authorization\s*:\s*Bearer\s+)\S+` → `\1[REDACTED]`
//! 2. `(?i)(\bBearer\s+)\S+` → `\1[REDACTED]`
//! 3. `(?i)(["']?(?:<credential names>)["']?\s*[=:]\s*).*$` → `\1[REDACTED]`
//!
//! Each pattern is anchored by a literal followed by greedy character runs
//! that never need to give anything back, so a left-to-right scan finds
//! exactly the matches `re.sub` finds.
//!
//! Deviation: for `\b`, a non-ASCII character before `Bearer` counts as a
//! non-word character. Python's `\w` depends on its Unicode database
//! version; treating every such character as a boundary redacts in every
//! case Python does (and in a few more), never fewer.

/// Credential names whose assignments are cut after the separator.
const CREDENTIAL_NAMES: [&str; 6] = [
    "AGENTSDOCK_AGENT_TOKEN",
    "ZENITHDOCK_AGENT_TOKEN",
    "ZENITHBOT_AGENT_TOKEN",
    "AGENTSDOCK_PUBLISH_TOKEN",
    "AGENTSDOCK_PROVIDER_AUTHORITY_FILE",
    "access_token",
];
const REDACTED: &str = "[REDACTED]";

/// `text` with every occurrence of each non-empty secret replaced by
/// `[REDACTED]`, longest first so a secret containing another is not left
/// half visible.
pub(super) fn redact_values(text: &str, secrets: &[String]) -> String {
    let mut ordered: Vec<&String> = secrets.iter().filter(|value| !value.is_empty()).collect();
    ordered.sort_by_key(|value| std::cmp::Reverse(value.len()));
    ordered.into_iter().fold(text.to_string(), |text, value| {
        text.replace(value.as_str(), REDACTED)
    })
}

/// One log line with bearer tokens and credential assignments redacted.
pub(super) fn redact_line(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let chars = redact_tokens(&chars, authorization_prefix);
    let chars = redact_tokens(&chars, bearer_prefix);
    match (0..chars.len()).find_map(|at| assignment_prefix(&chars, at)) {
        Some(end) => chars[..end].iter().collect::<String>() + REDACTED,
        None => chars.iter().collect(),
    }
}

/// `re.sub(prefix + r"\S+", r"\1[REDACTED]", line)` where `prefix` returns
/// the end of the prefix matched at a position (ending in `\s+`).
fn redact_tokens(chars: &[char], prefix: fn(&[char], usize) -> Option<usize>) -> Vec<char> {
    let mut out = Vec::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        if let Some(end) = prefix(chars, at) {
            let token = chars[end..].iter().take_while(|c| !is_space(**c)).count();
            if token > 0 {
                out.extend_from_slice(&chars[at..end]);
                out.extend(REDACTED.chars());
                at = end + token;
                continue;
            }
        }
        out.push(chars[at]);
        at += 1;
    }
    out
}

/// `Authorization\s*:\s*Bearer\s+` at `at`.
fn authorization_prefix(chars: &[char], at: usize) -> Option<usize> {
    let at = literal(chars, at, "authorization")?;
    let at = spaces(chars, at);
    (chars.get(at) == Some(&':')).then_some(())?;
    let at = spaces(chars, at + 1);
    let at = literal(chars, at, "bearer")?;
    let end = spaces(chars, at);
    (end > at).then_some(end)
}

/// `\bBearer\s+` at `at`.
fn bearer_prefix(chars: &[char], at: usize) -> Option<usize> {
    if at > 0 && is_word_before_boundary(chars[at - 1]) {
        return None;
    }
    let at = literal(chars, at, "bearer")?;
    let end = spaces(chars, at);
    (end > at).then_some(end)
}

/// `["']?(?:NAMES)["']?\s*[=:]\s*` at `at`, trying the quoted forms first as
/// the greedy `?` does.
fn assignment_prefix(chars: &[char], at: usize) -> Option<usize> {
    let name_starts = [at + 1, at];
    let opening_quote = chars.get(at).is_some_and(|c| is_quote(*c));
    name_starts
        .into_iter()
        .filter(|start| *start == at || opening_quote)
        .find_map(|start| {
            CREDENTIAL_NAMES.iter().find_map(|name| {
                let after_name = literal(chars, start, name)?;
                let closing_quote = chars.get(after_name).is_some_and(|c| is_quote(*c));
                [after_name + 1, after_name]
                    .into_iter()
                    .filter(|from| *from == after_name || closing_quote)
                    .find_map(|from| separator(chars, from))
            })
        })
}

/// `\s*[=:]\s*` at `at`.
fn separator(chars: &[char], at: usize) -> Option<usize> {
    let at = spaces(chars, at);
    matches!(chars.get(at), Some('=' | ':')).then(|| spaces(chars, at + 1))
}

fn is_quote(c: char) -> bool {
    c == '"' || c == '\''
}

/// The end of `pattern` matched case-insensitively at `at`, if it matches.
fn literal(chars: &[char], at: usize, pattern: &str) -> Option<usize> {
    let candidate = chars.get(at..at + pattern.len())?;
    candidate
        .iter()
        .zip(pattern.bytes())
        .all(|(c, p)| matches_ignoring_case(*c, p))
        .then_some(at + pattern.len())
}

/// Python `re`'s IGNORECASE match of the ASCII pattern character `p`: its
/// two cases, plus the non-ASCII characters Python folds onto ASCII letters
/// (KELVIN SIGN, dotted and dotless I, LONG S).
fn matches_ignoring_case(c: char, p: u8) -> bool {
    if c.is_ascii() {
        return (c as u8).eq_ignore_ascii_case(&p);
    }
    matches!(
        (p.to_ascii_lowercase(), c),
        (b'k', '\u{212a}') | (b'i', '\u{130}' | '\u{131}') | (b's', '\u{17f}')
    )
}

/// The end of the run of whitespace starting at `at`.
fn spaces(chars: &[char], at: usize) -> usize {
    at + chars
        .get(at..)
        .unwrap_or_default()
        .iter()
        .take_while(|c| is_space(**c))
        .count()
}

/// Python's `\s` and `str.isspace()`: Unicode White_Space plus the
/// information separators U+001C..U+001F.
use python_compat::is_space;

/// A `\w` character for the boundary before `Bearer` (see the deviation
/// in the module documentation).
fn is_word_before_boundary(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::redact_line;
    use python_compat::splitlines;

    #[test]
    fn splitlines_matches_python() {
        assert_eq!(splitlines(""), Vec::<&str>::new());
        assert_eq!(splitlines("a\r\nb\rc\n"), ["a", "b", "c"]);
        assert_eq!(splitlines("\n\n"), ["", ""]);
        assert_eq!(splitlines("a\u{2028}b\u{1f}c"), ["a", "b\u{1f}c"]);
    }

    #[test]
    fn redactions_keep_the_prefix() {
        assert_eq!(
            redact_line("curl -H 'Authorization : Bearer abc.def' x"),
            "curl -H 'Authorization : Bearer [REDACTED] x"
        );
        assert_eq!(redact_line("xBearer abc"), "xBearer abc");
        assert_eq!(redact_line("BEARER  a b"), "BEARER  [REDACTED] b");
        assert_eq!(redact_line("Bearer   "), "Bearer   ");
        assert_eq!(
            redact_line("set \"access_token\" = 'v' tail"),
            "set \"access_token\" = [REDACTED]"
        );
        assert_eq!(
            redact_line("AGENTSDOCK_AGENT_TOKEN= x AGENTSDOCK_PUBLISH_TOKEN=y"),
            "AGENTSDOCK_AGENT_TOKEN= [REDACTED]"
        );
        assert_eq!(redact_line("access_token"), "access_token");
        assert_eq!(
            redact_line("acce\u{17f}\u{17f}_token:z"),
            "acce\u{17f}\u{17f}_token:[REDACTED]"
        );
    }
}

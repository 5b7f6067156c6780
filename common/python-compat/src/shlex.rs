//! `shlex.split(text)`: POSIX-mode splitting with `whitespace_split` and no
//! comments, as the originals use it to read quoted `KEY=value` lines of the
//! config `env` file without ever evaluating them.

use crate::exception::{Exception, Result};

/// Characters that separate words (shlex's `whitespace`).
fn is_separator(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// The lexer's state between characters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between words.
    Between,
    /// Inside an unquoted word.
    Word,
    /// Inside quotes opened by this character.
    Quoted(char),
    /// After a backslash; resume in the given state (a word or double quotes).
    Escaped(Option<char>),
}

/// Splits `text` into words like Python's `shlex.split(text)`: single quotes
/// keep everything literally, double quotes honour `\"` and `\\`, a
/// backslash outside quotes escapes any character, `#` is an ordinary
/// character, and quoted empty strings are words. Unbalanced quotes or a
/// trailing backslash are Python's `ValueError`s.
pub fn split(text: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A quoted empty string is still a word (POSIX mode).
    let mut quoted = false;
    let mut state = State::Between;
    for c in text.chars() {
        state = match state {
            State::Between | State::Word if is_separator(c) => {
                if state == State::Word || quoted {
                    words.push(std::mem::take(&mut word));
                    quoted = false;
                }
                State::Between
            }
            State::Between | State::Word => match c {
                '\\' => State::Escaped(None),
                '\'' | '"' => State::Quoted(c),
                _ => {
                    word.push(c);
                    State::Word
                }
            },
            State::Quoted(quote) => {
                quoted = true;
                if c == quote {
                    State::Word
                } else if quote == '"' && c == '\\' {
                    State::Escaped(Some('"'))
                } else {
                    word.push(c);
                    State::Quoted(quote)
                }
            }
            State::Escaped(resume) => {
                // Inside double quotes only the quote and the backslash itself
                // are escapable; otherwise the backslash stays.
                if resume == Some('"') && c != '"' && c != '\\' {
                    word.push('\\');
                }
                word.push(c);
                resume.map_or(State::Word, State::Quoted)
            }
        };
    }
    match state {
        State::Quoted(_) => return Err(Exception::value("No closing quotation")),
        State::Escaped(_) => return Err(Exception::value("No escaped character")),
        State::Word => words.push(word),
        State::Between if quoted => words.push(word),
        State::Between => {}
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_python_shlex() {
        // Each row was printed by Python 3.11.7's shlex.split.
        let cases: &[(&str, &[&str])] = &[
            ("abc", &["abc"]),
            (" abc ", &["abc"]),
            ("\"a b\"", &["a b"]),
            ("'a b'", &["a b"]),
            ("a b", &["a", "b"]),
            ("", &[]),
            ("   ", &[]),
            ("''", &[""]),
            ("\"\"", &[""]),
            ("a\"b c\"d", &["ab cd"]),
            ("a\\ b", &["a b"]),
            ("\"a\\\"b\"", &["a\"b"]),
            ("\"a\\nb\"", &["a\\nb"]),
            ("'a\\'", &["a\\"]),
            ("a#b", &["a#b"]),
            ("# x", &["#", "x"]),
            ("a\tb", &["a", "b"]),
            ("a\x0bb", &["a\x0bb"]),
            ("é ü", &["é", "ü"]),
            ("\"\"\"\"", &[""]),
            ("'\"'", &["\""]),
            ("a\\\\b", &["a\\b"]),
            ("\\\"", &["\""]),
            ("\"a\\\\b\"", &["a\\b"]),
            ("\"\\$x\"", &["\\$x"]),
            ("'' x", &["", "x"]),
        ];
        for (text, expected) in cases {
            assert_eq!(split(text).unwrap(), *expected, "{text:?}");
        }
    }

    #[test]
    fn refuses_like_python_shlex() {
        for (text, message) in [
            ("\"unterminated", "No closing quotation"),
            ("it's", "No closing quotation"),
            ("x\\", "No escaped character"),
            ("\"a\\", "No escaped character"),
        ] {
            let err = split(text).unwrap_err();
            assert_eq!(
                err.python_line(),
                format!("ValueError: {message}"),
                "{text:?}"
            );
        }
    }
}

//! Python's text rules where an original strips, splits, decodes or quotes text:
//! `str.isspace`/`strip`/`split`/`splitlines`, strict ASCII, UTF-8 and
//! latin-1 decoding with `UnicodeDecodeError`'s wording, and `repr`.
//!
//! They decide which inputs are refused and with which message, so they are
//! reproduced exactly instead of approximated with Rust's own rules (which,
//! for example, do not count `\x1c`..`\x1f` as white space).

use crate::exception::{ErrorClass, Exception, Result};

/// Python's `str.isspace`: Unicode white space plus the ASCII separators
/// `\x1c`–`\x1f`, which Rust does not count.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.strip()` with no argument, as the originals clean versions,
/// tokens and ids: it also strips the information separators U+001C..U+001F,
/// which Rust's `trim` keeps.
pub fn strip(text: &str) -> &str {
    text.trim_matches(is_space)
}

/// `str.strip()` of an argument Python decoded with surrogate escapes,
/// on its bytes: white space is stripped from each end up to the first
/// byte that is not valid UTF-8 (an escape is never white space).
pub fn strip_bytes(raw: &[u8]) -> &[u8] {
    let chunks: Vec<_> = raw.utf8_chunks().collect();
    let start = match chunks.first() {
        Some(first) => first.valid().len() - first.valid().trim_start_matches(is_space).len(),
        None => 0,
    };
    let end = match chunks.last() {
        Some(last) if last.invalid().is_empty() => {
            raw.len() - (last.valid().len() - last.valid().trim_end_matches(is_space).len())
        }
        _ => raw.len(),
    };
    &raw[start..end.max(start)]
}

/// `str.split()` without arguments: runs of white space separate, edges vanish.
pub fn split_whitespace(text: &str) -> Vec<&str> {
    text.split(is_space)
        .filter(|part| !part.is_empty())
        .collect()
}

/// `str.split(None, maxsplit)`: at most `maxsplit` splits on runs of white
/// space; the last part keeps its trailing white space, as Python's does.
pub(crate) fn split_max(text: &str, maxsplit: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text.trim_start_matches(is_space);
    while !rest.is_empty() {
        if parts.len() == maxsplit {
            parts.push(rest);
            break;
        }
        match rest.find(is_space) {
            Some(end) => {
                parts.push(&rest[..end]);
                rest = rest[end..].trim_start_matches(is_space);
            }
            None => {
                parts.push(rest);
                break;
            }
        }
    }
    parts
}

/// `str.splitlines()`: every Python line boundary, `\r\n` as one, no empty
/// last line for a trailing boundary.
pub fn splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((index, c)) = chars.next() {
        let boundary = matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !boundary {
            continue;
        }
        lines.push(&text[start..index]);
        start = index + c.len_utf8();
        if c == '\r' && chars.peek().map(|&(_, next)| next) == Some('\n') {
            chars.next();
            start += 1;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// `bytes.decode("ascii", "strict")`, failing with Python's
/// `UnicodeDecodeError`.
pub fn decode_ascii(data: &[u8]) -> Result<&str> {
    match data.iter().position(|b| !b.is_ascii()) {
        None => Ok(std::str::from_utf8(data).expect("ASCII is UTF-8")),
        Some(position) => Err(Exception::new(
            ErrorClass::UnicodeDecode,
            format!(
                "'ascii' codec can't decode byte 0x{:02x} in position {position}: ordinal not in range(128)",
                data[position]
            ),
        )),
    }
}

/// `bytes.decode()` (strict UTF-8), failing with Python's
/// `UnicodeDecodeError`.
pub fn decode_utf8(data: &[u8]) -> Result<&str> {
    std::str::from_utf8(data).map_err(|error| {
        let start = error.valid_up_to();
        // Rust's error length is Python's maximal invalid subpart.
        let (length, reason) = match error.error_len() {
            Some(length) if (0xc2..=0xf4).contains(&data[start]) => {
                (length, "invalid continuation byte")
            }
            Some(length) => (length, "invalid start byte"),
            None => (data.len() - start, "unexpected end of data"),
        };
        let position = if length == 1 {
            format!("byte 0x{:02x} in position {start}", data[start])
        } else {
            format!("bytes in position {start}-{}", start + length - 1)
        };
        Exception::new(
            ErrorClass::UnicodeDecode,
            format!("'utf-8' codec can't decode {position}: {reason}"),
        )
    })
}

/// `bytes.decode("latin-1")`: every byte is the code point of the same value.
pub fn decode_latin1(data: &[u8]) -> String {
    data.iter().map(|&b| char::from(b)).collect()
}

/// Python's `repr(str)`, as `ipaddress`, `urllib`, `subprocess` and the
/// originals' own `%r` messages quote values.
pub fn repr(text: &str) -> String {
    let points: Vec<u32> = text.chars().map(u32::from).collect();
    repr_code_points(&points)
}

/// Python's `repr()` of bytes decoded with `surrogateescape`, as Python holds
/// argv words and paths: an undecodable byte reads as the lone surrogate
/// `U+DC80..U+DCFF`, which `repr` prints as `\udcXX`.
pub fn repr_surrogateescape(bytes: &[u8]) -> String {
    let mut points = Vec::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        points.extend(chunk.valid().chars().map(u32::from));
        points.extend(chunk.invalid().iter().map(|&byte| 0xdc00 + u32::from(byte)));
    }
    repr_code_points(&points)
}

/// How Python's `sys.stderr` writes text decoded from these bytes with
/// `surrogateescape` (an argv word, a path): valid UTF-8 as it is, each
/// undecodable byte as the escape `backslashreplace` gives its lone
/// surrogate, `\udcXX`.
pub(crate) fn display_surrogateescape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for &byte in chunk.invalid() {
            out.push_str(&format!("\\udc{byte:02x}"));
        }
    }
    out
}

/// Python's `repr()` of a string given as code points, lone surrogates
/// included (printed as `\udXXX`, as Python prints them).
pub(crate) fn repr_code_points(points: &[u32]) -> String {
    let contains = |wanted: char| points.contains(&u32::from(wanted));
    let quote = if contains('\'') && !contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(points.len() + 2);
    out.push(quote);
    for &point in points {
        let Some(c) = char::from_u32(point) else {
            out.push_str(&format!("\\u{point:04x}"));
            continue;
        };
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_ascii() || is_printable(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one non-ASCII character: not a control,
/// format, private-use, unassigned or separator character. Rust's debug
/// escaping uses the same categories; it also escapes combining marks at the
/// start of a string, which Python prints, so the character is tested after
/// a letter.
fn is_printable(c: char) -> bool {
    let probe: String = ['a', c].iter().collect();
    probe.escape_debug().to_string() == probe
}

/// `repr(list_of_str)`, as `TimeoutExpired` prints the command.
pub fn repr_list(args: &[String]) -> String {
    let items: Vec<String> = args.iter().map(|arg| repr(arg)).collect();
    format!("[{}]", items.join(", "))
}

/// What `text=True` makes of captured bytes: strict UTF-8 (a `ValueError` with
/// Python's `UnicodeDecodeError` text otherwise) and universal newlines.
pub fn text_mode(data: &[u8]) -> Result<String> {
    Ok(decode_utf8(data)?.replace("\r\n", "\n").replace('\r', "\n"))
}

#[cfg(test)]
mod strip_bytes_tests {
    use super::strip_bytes;

    #[test]
    fn strips_white_space_around_undecodable_bytes_only() {
        // Python: os.fsencode(os.fsdecode(raw).strip()).
        for (raw, stripped) in [
            (&b" \xe9id\t"[..], &b"\xe9id"[..]),
            (b"\xc2\xa0 id \xff", b"id \xff"),
            (b"\xff", b"\xff"),
            (b"  ", b""),
            (b"", b""),
            (b" a \xc2\xa0", b"a"),
        ] {
            assert_eq!(strip_bytes(raw), stripped, "{raw:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_mode_translates_newlines_and_refuses_invalid_utf8() {
        assert_eq!(text_mode(b"a\r\nb\rc\n").unwrap(), "a\nb\nc\n");
        let err = text_mode(b"ok\xff").unwrap_err();
        assert_eq!(
            err.python_line(),
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 2: invalid start byte"
        );
    }

    #[test]
    fn repr_quotes_like_python() {
        // Expected texts were printed by Python 3.11.7.
        assert_eq!(repr("a'b"), "\"a'b\"");
        assert_eq!(repr("a\"b"), "'a\"b'");
        assert_eq!(repr("a'\"b"), "'a\\'\"b'");
        assert_eq!(repr("é"), "'é'");
        assert_eq!(repr("\x7f"), "'\\x7f'");
        assert_eq!(repr("\u{200b}"), "'\\u200b'");
        assert_eq!(repr("\u{301}"), "'\u{301}'");
        assert_eq!(repr("\u{1F600}"), "'\u{1F600}'");
        assert_eq!(repr("\u{e000}"), "'\\ue000'");
        assert_eq!(repr("\u{85}"), "'\\x85'");
        assert_eq!(repr("\u{2028}"), "'\\u2028'");
        assert_eq!(repr("\\\t\x01"), "'\\\\\\t\\x01'");
    }

    #[test]
    fn repr_of_surrogateescaped_bytes_matches_python() {
        // Expected strings are Python 3.11's repr() of the same argv words and
        // paths (os.fsdecode, errors="surrogateescape").
        let cases: &[(&[u8], &str)] = &[
            (b"x", "'x'"),
            (b"", "''"),
            (b"it's", "\"it's\""),
            (b"'\"", "'\\'\"'"),
            (b"a\\b", "'a\\\\b'"),
            (b"\t\n\r\x00\x1b\x7f", "'\\t\\n\\r\\x00\\x1b\\x7f'"),
            ("\u{85}\u{a0}\u{ad}é€".as_bytes(), "'\\x85\\xa0\\xadé€'"),
            (
                "\u{2028}\u{200b}\u{3000}".as_bytes(),
                "'\\u2028\\u200b\\u3000'",
            ),
            (b"\xff7", "'\\udcff7'"),
            (b"/tmp/x", "'/tmp/x'"),
            (b"/tmp/it's", "\"/tmp/it's\""),
            (b"/tmp/'\"", "'/tmp/\\'\"'"),
            (b"/t\tab\x7f\\", "'/t\\tab\\x7f\\\\'"),
            ("/é".as_bytes(), "'/é'"),
            (b"/\xff", "'/\\udcff'"),
        ];
        for (value, expected) in cases {
            assert_eq!(repr_surrogateescape(value), *expected, "{value:?}");
        }
    }

    #[test]
    fn split_with_a_limit_keeps_the_rest_as_python_does() {
        assert_eq!(
            split_max("HTTP/1.1 200 OK\r\n", 2),
            ["HTTP/1.1", "200", "OK\r\n"]
        );
        assert_eq!(split_max("  a  b  c d ", 1), ["a", "b  c d "]);
        assert_eq!(split_max("HTTP/1.1 200\r\n", 2), ["HTTP/1.1", "200"]);
        assert_eq!(split_max("a b  c ", 2), ["a", "b", "c "]);
        assert_eq!(split_max("   ", 2), Vec::<&str>::new());
        assert_eq!(split_max("a\x1cb", 5), ["a", "b"]);
    }

    #[test]
    fn text_helpers_match_python() {
        assert_eq!(
            splitlines("a\r\nb\rc\nd\x0be\x1cf\u{2028}g\n"),
            ["a", "b", "c", "d", "e", "f", "g"]
        );
        assert_eq!(splitlines("\n"), [""]);
        assert!(splitlines("").is_empty());
        assert_eq!(split_whitespace(" a\x1fb\t c "), ["a", "b", "c"]);
        assert_eq!(strip("\x1c\u{a0} x \u{85}"), "x");
        assert_eq!(
            decode_ascii(b"ab\xc3").unwrap_err().message(),
            "'ascii' codec can't decode byte 0xc3 in position 2: ordinal not in range(128)"
        );
        assert_eq!(decode_latin1(b"\xe9A"), "\u{e9}A");
        // Messages printed by Python 3.11.7 for the same bytes.
        let utf8 = |data: &[u8]| decode_utf8(data).unwrap_err().message().to_string();
        assert_eq!(
            utf8(b"ab\xff"),
            "'utf-8' codec can't decode byte 0xff in position 2: invalid start byte"
        );
        assert_eq!(
            utf8(b"\xe2\x82x"),
            "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte"
        );
        assert_eq!(
            utf8(b"\xe2(x"),
            "'utf-8' codec can't decode byte 0xe2 in position 0: invalid continuation byte"
        );
        assert_eq!(
            utf8(b"a\xe2\x82"),
            "'utf-8' codec can't decode bytes in position 1-2: unexpected end of data"
        );
        assert_eq!(
            utf8(b"a\xf0"),
            "'utf-8' codec can't decode byte 0xf0 in position 1: unexpected end of data"
        );
        assert_eq!(
            utf8(b"\xed\xa0\x80"),
            "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte"
        );
        assert_eq!(decode_utf8("é".as_bytes()).unwrap(), "é");
    }
}

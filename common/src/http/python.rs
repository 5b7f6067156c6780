//! The few Python text rules `execution_http` leans on: `ipaddress.ip_address`,
//! `int(text, 16)`, `str.strip`/`split`/`splitlines`, `repr` and strict
//! ASCII decoding. The rest of the crate uses the same rules wherever a seed
//! strips, splits, decodes or quotes text.
//!
//! They decide which inputs are refused and with which message, so they are
//! reproduced exactly instead of approximated with Rust's own parsers (which,
//! for example, accept fewer integer spellings than `int()` and more IPv6
//! spellings than `ipaddress`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{Error, Result};

/// An `ipaddress.IPv4Address` or `IPv6Address`: IPv6 keeps its `%scope`
/// because Python compares it, and a v4 address never equals a v6 one (no
/// IPv4-mapped normalisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PyIp {
    pub(crate) ip: IpAddr,
    pub(crate) scope: Option<String>,
}

impl PyIp {
    /// An address without scope, as `/proc` rows and `getpeername` give.
    pub(crate) fn plain(ip: IpAddr) -> Self {
        PyIp { ip, scope: None }
    }

    /// `ipaddress.ip_address(bytes)`: 4 bytes are IPv4, 16 are IPv6, anything
    /// else is refused.
    pub(crate) fn from_packed(packed: &[u8]) -> Option<Self> {
        let ip = match packed.len() {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(packed).ok()?)),
            16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(packed).ok()?)),
            _ => return None,
        };
        Some(Self::plain(ip))
    }
}

/// `ipaddress.ip_address(text)`, with its exact `ValueError` message.
pub(crate) fn ip_address(text: &str) -> Result<PyIp> {
    if let Some(ip) = ipv4_address(text) {
        return Ok(PyIp::plain(IpAddr::V4(ip)));
    }
    if let Some(address) = ipv6_address(text) {
        return Ok(address);
    }
    Err(Error::value(format!(
        "{} does not appear to be an IPv4 or IPv6 address",
        repr(text)
    )))
}

/// `IPv4Address(text)`: exactly four decimal octets of 1–3 ASCII digits, no
/// leading zero (as strict as glibc's `inet_pton`), each at most 255.
fn ipv4_address(text: &str) -> Option<Ipv4Addr> {
    let octets: Vec<&str> = text.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut bytes = [0u8; 4];
    for (slot, octet) in bytes.iter_mut().zip(&octets) {
        let digits_only = !octet.is_empty() && octet.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || octet.len() > 3 || (octet.len() > 1 && octet.starts_with('0')) {
            return None;
        }
        *slot = octet.parse::<u16>().ok()?.try_into().ok()?;
    }
    Some(Ipv4Addr::from(bytes))
}

/// `IPv6Address(text)`, including an optional `%scope` (any non-empty text
/// without another `%`) and an IPv4-style tail.
fn ipv6_address(text: &str) -> Option<PyIp> {
    if text.contains('/') {
        return None;
    }
    let (address, scope) = match text.split_once('%') {
        None => (text, None),
        Some((_, scope)) if scope.is_empty() || scope.contains('%') => return None,
        Some((address, scope)) => (address, Some(scope.to_string())),
    };
    let ip = ipv6_bits(address)?;
    Some(PyIp {
        ip: IpAddr::V6(Ipv6Addr::from(ip)),
        scope,
    })
}

const HEXTET_COUNT: usize = 8;

fn ipv6_bits(text: &str) -> Option<u128> {
    if text.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = text.split(':').map(str::to_string).collect();
    if parts.len() < 3 {
        return None;
    }
    if parts.last()?.contains('.') {
        let tail = u32::from(ipv4_address(&parts.pop()?)?);
        parts.push(format!("{:x}", tail >> 16));
        parts.push(format!("{:x}", tail & 0xffff));
    }
    if parts.len() > HEXTET_COUNT + 1 {
        return None;
    }
    // One "::" (an empty part that is not an endpoint) stands for skipped zeros.
    let mut skip_index = None;
    for (index, part) in parts.iter().enumerate().take(parts.len() - 1).skip(1) {
        if part.is_empty() {
            if skip_index.is_some() {
                return None;
            }
            skip_index = Some(index);
        }
    }
    let (parts_hi, parts_lo, skipped) = match skip_index {
        Some(index) => {
            let mut hi = index;
            let mut lo = parts.len() - index - 1;
            if parts[0].is_empty() {
                hi -= 1;
                if hi > 0 {
                    return None;
                }
            }
            if parts[parts.len() - 1].is_empty() {
                lo -= 1;
                if lo > 0 {
                    return None;
                }
            }
            let skipped = HEXTET_COUNT.checked_sub(hi + lo).filter(|n| *n >= 1)?;
            (hi, lo, skipped)
        }
        None => {
            if parts.len() != HEXTET_COUNT || parts[0].is_empty() || parts[7].is_empty() {
                return None;
            }
            (parts.len(), 0, 0)
        }
    };
    let mut bits: u128 = 0;
    for part in &parts[..parts_hi] {
        bits = (bits << 16) | u128::from(hextet(part)?);
    }
    bits <<= 16 * skipped;
    for part in &parts[parts.len() - parts_lo..] {
        bits = (bits << 16) | u128::from(hextet(part)?);
    }
    Some(bits)
}

fn hextet(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(text, 16).ok()
}

/// Python's `str.isspace`: Unicode white space plus the ASCII separators
/// `\x1c`–`\x1f`, which Rust does not count.
pub(crate) fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.strip()` with no argument, as the seeds clean versions,
/// tokens and ids: it also strips the information separators U+001C..U+001F,
/// which Rust's `trim` keeps.
pub fn strip(text: &str) -> &str {
    text.trim_matches(is_space)
}

/// `str.split()` without arguments: runs of white space separate, edges vanish.
pub(crate) fn split_whitespace(text: &str) -> Vec<&str> {
    text.split(is_space)
        .filter(|part| !part.is_empty())
        .collect()
}

/// `str.splitlines()`: every Python line boundary, `\r\n` as one, no empty
/// last line for a trailing boundary.
pub(crate) fn splitlines(text: &str) -> Vec<&str> {
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

/// `int(text, 16)`, or `None` where Python raises `ValueError` (the decimal
/// form is the crate's `python_int`). Accepts Python's spellings: white
/// space around, a sign, an optional `0x` prefix and single underscores
/// between digits (or right after the prefix). Magnitudes beyond `i128`
/// saturate, which keeps every comparison that follows exact.
pub(crate) fn int_hex(text: &str) -> Option<i128> {
    let text = text
        .trim_start_matches(c_space_or_unicode_space)
        .trim_end_matches(c_space_or_unicode_space);
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let mut underscore_allowed = false;
    if rest.starts_with("0x") || rest.starts_with("0X") {
        rest = &rest[2..];
        underscore_allowed = true;
    }
    let mut value: i128 = 0;
    let mut digits = 0usize;
    let mut previous_underscore = false;
    for c in rest.chars() {
        if c == '_' {
            if !underscore_allowed || previous_underscore {
                return None;
            }
            previous_underscore = true;
            continue;
        }
        let digit = c.to_digit(16)?;
        digits += 1;
        previous_underscore = false;
        underscore_allowed = true;
        value = value.saturating_mul(16).saturating_add(i128::from(digit));
    }
    if digits == 0 || previous_underscore {
        return None;
    }
    Some(if negative { -value } else { value })
}

fn c_space_or_unicode_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r') || (!c.is_ascii() && is_space(c))
}

/// `bytes.decode("ascii", "strict")`, failing with Python's
/// `UnicodeDecodeError` text (a `ValueError`).
pub(crate) fn decode_ascii(data: &[u8]) -> Result<&str> {
    match data.iter().position(|b| !b.is_ascii()) {
        None => Ok(std::str::from_utf8(data).expect("ASCII is UTF-8")),
        Some(position) => Err(Error::value(format!(
            "'ascii' codec can't decode byte 0x{:02x} in position {position}: ordinal not in range(128)",
            data[position]
        ))),
    }
}

/// `bytes.decode()` (strict UTF-8), failing with Python's
/// `UnicodeDecodeError` text (a `ValueError`).
pub(crate) fn decode_utf8(data: &[u8]) -> Result<&str> {
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
        Error::value(format!("'utf-8' codec can't decode {position}: {reason}"))
    })
}

/// `bytes.decode("latin-1")`: every byte is the code point of the same value.
pub(crate) fn decode_latin1(data: &[u8]) -> String {
    data.iter().map(|&b| char::from(b)).collect()
}

/// Python's `repr(str)`, as `ipaddress`, `urllib`, `subprocess` and the
/// seeds' own `%r` messages quote values.
pub(crate) fn repr(text: &str) -> String {
    repr_surrogateescape(text.as_bytes())
}

/// Python's `repr()` of bytes decoded with `surrogateescape`, as Python holds
/// argv words and paths: an undecodable byte reads as the lone surrogate
/// `U+DC80..U+DCFF`, which `repr` prints as `\udcXX`.
pub(crate) fn repr_surrogateescape(bytes: &[u8]) -> String {
    let valid_contains = |wanted: char| {
        bytes
            .utf8_chunks()
            .any(|chunk| chunk.valid().contains(wanted))
    };
    let quote = if valid_contains('\'') && !valid_contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push(quote);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                c if c == quote => {
                    out.push('\\');
                    out.push(c);
                }
                c if (c as u32) < 0x20 || c == '\x7f' => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if c.is_ascii() || is_printable(c) => out.push(c),
                c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push_str(&format!("\\U{:08x}", c as u32)),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\udc{byte:02x}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_address_follows_python_ipaddress() {
        let v4 = |s: &str| ip_address(s).map(|a| a.ip.to_string());
        assert_eq!(v4("127.0.0.1").unwrap(), "127.0.0.1");
        assert_eq!(v4("0.0.0.0").unwrap(), "0.0.0.0");
        assert_eq!(v4("::1").unwrap(), "::1");
        assert_eq!(v4("::ffff:127.0.0.1").unwrap(), "::ffff:127.0.0.1");
        assert_eq!(v4("1:2:3:4:5:6:7::").unwrap(), "1:2:3:4:5:6:7:0");
        assert_eq!(v4("::2:3:4:5:6:7:8").unwrap(), "0:2:3:4:5:6:7:8");
        assert_eq!(v4("FE80::1").unwrap(), "fe80::1");
        let scoped = ip_address("fe80::1%eth0").unwrap();
        assert_eq!(scoped.scope.as_deref(), Some("eth0"));
        assert_ne!(scoped, ip_address("fe80::1").unwrap());
        for bad in [
            "127.0.0.01",
            "127.1",
            "256.0.0.1",
            "1.2.3.4.",
            "localhost",
            "",
            "1.2.3.+4",
            "1.2.3.٤",
            "::1%",
            "::1%a%b",
            "1:2:3:4:5:6:7:8:9",
            "1::2::3",
            ":1::2",
            "1::2:",
            "1:2:3:4:5:6:7:8::",
            "::1/128",
            "12345::",
            "::ffff:127.0.0.01",
            "1:2:3:4:5:6:7",
        ] {
            let err = ip_address(bad).unwrap_err();
            assert_eq!(err.class(), crate::ErrorClass::Value, "{bad}");
        }
        assert_eq!(
            ip_address("127.0.0.01").unwrap_err().message(),
            "'127.0.0.01' does not appear to be an IPv4 or IPv6 address"
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
    fn int_hex_accepts_exactly_what_python_int_base_16_accepts() {
        // Each row was checked against Python 3.11.7.
        let cases: &[(&str, Option<i128>)] = &[
            ("1F90", Some(0x1f90)),
            ("+5", Some(5)),
            ("-0", Some(0)),
            ("0_0", Some(0)),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            (" 5 ", Some(5)),
            ("\x1c5", None),
            ("\u{a0}5", Some(5)),
            ("0x1f", Some(31)),
            ("0x_1f", Some(31)),
            ("0X1F", Some(31)),
            ("0x", None),
            ("_0x1", None),
            ("0_x1", None),
            ("-0x1F", Some(-31)),
            ("f_f", Some(255)),
            ("1e3", Some(0x1e3)),
            ("", None),
            ("+", None),
            ("- 5", None),
            ("5\0", None),
            ("g", None),
        ];
        for &(text, expected) in cases {
            assert_eq!(int_hex(text), expected, "int({text:?}, 16)");
        }
        assert_eq!(int_hex(&format!("{}5", "0".repeat(4300))), Some(5));
        assert_eq!(int_hex(&"f".repeat(40)), Some(i128::MAX));
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

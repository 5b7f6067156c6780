//! Python's `int(text)` for base 10, which argparse applies for `type=int`,
//! and `int(text, 16)`, which `execution_http` applies to `/proc/net/tcp`.
//!
//! `int()` accepts more than Rust's `str::parse`: surrounding whitespace
//! (ASCII, and Unicode spaces in non-ASCII strings), a `+` sign, single
//! underscores between digits, leading zeros, and decimal digits of any script
//! (`٣` is 3). Install scripts pass ports and PIDs through unchanged, so the
//! helpers must accept exactly what the Python helpers accepted.

use crate::text::is_space;

/// First code point of each run of ten Unicode decimal digits (category Nd,
/// Unicode 14.0 as in Python 3.11); digit `d` of a run is `zero + d`.
const DECIMAL_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66,
    0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90,
    0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];

/// The value of `c` as a decimal digit of any script, like Python's `\d` and `int()`.
pub(crate) fn decimal_digit(c: char) -> Option<u32> {
    let code = u32::from(c);
    let index = DECIMAL_ZEROS.partition_point(|&zero| zero <= code);
    let zero = DECIMAL_ZEROS[index.checked_sub(1)?];
    (code - zero < 10).then_some(code - zero)
}

/// Whitespace `int()` skips around the number. Code points below 127 keep
/// their identity and only C `isspace` counts; above, Python's
/// `Py_UNICODE_ISSPACE` turns Unicode whitespace into a space first. So
/// `\x1c`..`\x1f`, which `str.isspace()` accepts, are refused here.
fn is_int_space(c: char) -> bool {
    match u32::from(c) {
        0..=126 => matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'),
        _ => c.is_whitespace(),
    }
}

/// Parses `text` exactly as Python's `int(text)` does, within the range of
/// `i128` (every integer option of the helpers is range-checked by its
/// consumer long before that; larger values are refused like malformed ones).
pub fn python_int(text: &str) -> Option<i128> {
    PythonInt::parse(text)?.as_i128()
}

/// A Python int of any size, as `int(text)` reads it (update-runner keeps a
/// 45-digit `--port` and passes it on as Python prints it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PythonInt {
    /// Within `i128`.
    Small(i128),
    /// Beyond `i128`: its decimal text as `str(int)` writes it.
    Large(String),
}

impl PythonInt {
    /// `int(text)`: surrounding whitespace, a sign, single underscores
    /// between digits, leading zeros and decimal digits of any script.
    pub fn parse(text: &str) -> Option<PythonInt> {
        let body = text.trim_matches(is_int_space);
        let (negative, digits) = match body.chars().next()? {
            '-' => (true, &body[1..]),
            '+' => (false, &body[1..]),
            _ => (false, body),
        };
        let mut decimal = String::new();
        let mut previous_was_digit = false;
        for c in digits.chars() {
            if c == '_' {
                // One underscore, only between two digits.
                if !previous_was_digit {
                    return None;
                }
                previous_was_digit = false;
                continue;
            }
            let digit = decimal_digit(c)?;
            if !(decimal.is_empty() && digit == 0) {
                decimal.push(char::from(b'0' + digit as u8));
            }
            previous_was_digit = true;
        }
        if !previous_was_digit {
            return None;
        }
        if decimal.is_empty() {
            return Some(PythonInt::Small(0));
        }
        if negative {
            decimal.insert(0, '-');
        }
        Some(match decimal.parse::<i128>() {
            Ok(value) => PythonInt::Small(value),
            Err(_) => PythonInt::Large(decimal),
        })
    }

    /// The value when it fits an `i128`.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            PythonInt::Small(value) => Some(*value),
            PythonInt::Large(_) => None,
        }
    }
}

impl std::fmt::Display for PythonInt {
    /// `str(int)`.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PythonInt::Small(value) => write!(formatter, "{value}"),
            PythonInt::Large(decimal) => formatter.write_str(decimal),
        }
    }
}

/// `int(text, 16)`, or `None` where Python raises `ValueError` (the decimal
/// form is the crate's `python_int`). Accepts Python's spellings: white
/// space around, a sign, an optional `0x` prefix and single underscores
/// between digits (or right after the prefix). Magnitudes beyond `i128`
/// saturate, which keeps every comparison that follows exact.
pub fn int_hex(text: &str) -> Option<i128> {
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

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values were taken from Python 3.11's int() on the same strings.
    #[test]
    fn accepts_what_python_int_accepts() {
        let cases: &[(&str, i128)] = &[
            ("7", 7),
            (" 7 ", 7),
            ("\t+7\n", 7),
            ("\x0b7\x0c", 7),
            ("0_1", 1),
            ("007", 7),
            ("-0", 0),
            ("-0_7", -7),
            ("\u{663}7", 37),
            ("7\u{663}_\u{664}", 734),
            ("\u{a0}7", 7),
            ("\u{2028}7", 7),
            ("\u{85}7", 7),
            ("\u{3000}-\u{663}\u{3000}", -3),
            ("\u{ff11}\u{ff12}", 12),
            ("170141183460469231731687303715884105727", i128::MAX),
            ("-170141183460469231731687303715884105728", i128::MIN),
        ];
        for (text, expected) in cases {
            assert_eq!(python_int(text), Some(*expected), "{text:?}");
        }
    }

    #[test]
    fn refuses_what_python_int_refuses() {
        for text in [
            "",
            " ",
            "+",
            "-",
            "1__0",
            "_1",
            "1_",
            "+_1",
            "- 1",
            "1 _2",
            "1\0",
            "\x1c7",
            "\x1c7\u{a0}",
            "7.0",
            "1e3",
            "0x10",
            "\x7f7",
            "seven",
            "\u{b2}",
            "++1",
        ] {
            assert_eq!(python_int(text), None, "{text:?}");
        }
    }

    #[test]
    fn refuses_values_beyond_i128() {
        assert_eq!(python_int("170141183460469231731687303715884105728"), None);
        assert_eq!(python_int("-170141183460469231731687303715884105729"), None);
    }

    #[test]
    fn keeps_ints_of_any_size_as_python_prints_them() {
        // str(int(text)) in Python 3.11.
        for (text, printed) in [
            (
                " +000_170141183460469231731687303715884105728 ",
                "170141183460469231731687303715884105728",
            ),
            (
                "-170141183460469231731687303715884105729",
                "-170141183460469231731687303715884105729",
            ),
            (
                "\u{663}00000000000000000000000000000000000000000000",
                "300000000000000000000000000000000000000000000",
            ),
            ("-0000", "0"),
            ("0_0", "0"),
            ("42", "42"),
        ] {
            let value = PythonInt::parse(text).unwrap();
            assert_eq!(value.to_string(), printed, "{text:?}");
            assert_eq!(value.as_i128(), printed.parse::<i128>().ok());
        }
        assert_eq!(PythonInt::parse("1_"), None);
        assert_eq!(PythonInt::parse(""), None);
    }

    #[test]
    fn knows_every_script_digit() {
        assert_eq!(decimal_digit('0'), Some(0));
        assert_eq!(decimal_digit('9'), Some(9));
        assert_eq!(decimal_digit('/'), None);
        assert_eq!(decimal_digit(':'), None);
        assert_eq!(decimal_digit('\u{1fbf9}'), Some(9));
        assert_eq!(decimal_digit('\u{1fbfa}'), None);
        assert_eq!(decimal_digit('\u{b2}'), None);
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
}

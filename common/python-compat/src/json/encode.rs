//! `json.dumps` in the four styles the originals and the Python programs they share
//! files with use. Every style keeps `ensure_ascii=True`, so output is ASCII.

use super::value::Json;
use crate::exception::{Exception, Result};
use std::fmt::Write as _;

/// The `json.dumps` arguments that differ between the styles.
struct Style {
    /// `indent=2` or one line.
    indent: Option<usize>,
    item_separator: &'static str,
    key_separator: &'static str,
    sort_keys: bool,
}

/// `json.dumps(value, sort_keys=True, indent=2) + "\n"`: execution-layout.json,
/// journals, evidence files and `server-update.json` (`_json_bytes`,
/// `atomic_json`). `NaN` and the infinities are written as Python writes them.
pub fn encode_indented(value: &Json) -> Vec<u8> {
    let style = Style {
        indent: Some(2),
        item_separator: ",",
        key_separator: ": ",
        sort_keys: true,
    };
    with_newline(encode(value, &style))
}

/// `json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"`: the
/// activation manifest (`_canonical`) and other canonical files.
pub fn encode_compact_sorted(value: &Json) -> Vec<u8> {
    let style = Style {
        indent: None,
        item_separator: ",",
        key_separator: ":",
        sort_keys: true,
    };
    with_newline(encode(value, &style))
}

/// `json.dumps(value, separators=(",", ":"), allow_nan=False)` in insertion
/// order without a newline: the pinned HTTP client's POST body. `NaN` and the
/// infinities are refused with Python's `ValueError`.
pub fn encode_compact(value: &Json) -> Result<Vec<u8>> {
    if has_non_finite_float(value) {
        return Err(Exception::value(
            "Out of range float values are not JSON compliant",
        ));
    }
    let style = Style {
        indent: None,
        item_separator: ",",
        key_separator: ":",
        sort_keys: false,
    };
    Ok(encode(value, &style).into_bytes())
}

/// `json.dumps(value, sort_keys=sort_keys)` with the default `", "`/`": "`
/// separators on one line, without a newline: execution_manage's stdout and
/// the worker's receipts.
pub fn encode_line(value: &Json, sort_keys: bool) -> String {
    let style = Style {
        indent: None,
        item_separator: ", ",
        key_separator: ": ",
        sort_keys,
    };
    encode(value, &style)
}

fn with_newline(text: String) -> Vec<u8> {
    let mut bytes = text.into_bytes();
    bytes.push(b'\n');
    bytes
}

fn has_non_finite_float(value: &Json) -> bool {
    match value {
        Json::Float(number) => !number.is_finite(),
        Json::Array(items) => items.iter().any(has_non_finite_float),
        Json::Object(object) => object.values().any(has_non_finite_float),
        Json::Null
        | Json::Bool(_)
        | Json::Int(_)
        | Json::BigInt(_)
        | Json::Str(_)
        | Json::WideStr(_) => false,
    }
}

fn encode(value: &Json, style: &Style) -> String {
    let mut out = String::new();
    write_value(&mut out, value, style, 0);
    out
}

/// Python's `_make_iterencode`: containers open, put each item on its own
/// indented line when indenting, and close on the parent's indentation; empty
/// containers stay `[]`/`{}`.
fn write_value(out: &mut String, value: &Json, style: &Style, level: usize) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(true) => out.push_str("true"),
        Json::Bool(false) => out.push_str("false"),
        Json::Int(number) => {
            let _ = write!(out, "{number}");
        }
        Json::BigInt(number) => out.push_str(number.as_str()),
        Json::Float(number) => out.push_str(&float_repr(*number)),
        Json::Str(text) => write_string(out, text.chars().map(u32::from)),
        Json::WideStr(text) => write_string(out, text.code_points().iter().copied()),
        Json::Array(items) if items.is_empty() => out.push_str("[]"),
        Json::Array(items) => {
            out.push('[');
            for (position, item) in items.iter().enumerate() {
                write_item_start(out, style, level + 1, position == 0);
                write_value(out, item, style, level + 1);
            }
            write_close(out, style, level, ']');
        }
        Json::Object(object) if object.is_empty() => out.push_str("{}"),
        Json::Object(object) => {
            let mut members: Vec<(Vec<u32>, &Json)> = object
                .exact_members()
                .map(|(key, member)| (key.code_points(), member))
                .collect();
            if style.sort_keys {
                // Python sorts str keys by code point.
                members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (position, (key, member)) in members.into_iter().enumerate() {
                write_item_start(out, style, level + 1, position == 0);
                write_string(out, key.into_iter());
                out.push_str(style.key_separator);
                write_value(out, member, style, level + 1);
            }
            write_close(out, style, level, '}');
        }
    }
}

/// The separator before an item (none before the first) and, when indenting,
/// the newline and indentation of the item's level.
fn write_item_start(out: &mut String, style: &Style, level: usize, first: bool) {
    match style.indent {
        Some(width) => {
            if !first {
                out.push_str(style.item_separator.trim_end());
            }
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * level));
        }
        None => {
            if !first {
                out.push_str(style.item_separator);
            }
        }
    }
}

fn write_close(out: &mut String, style: &Style, level: usize, bracket: char) {
    if let Some(width) = style.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * level));
    }
    out.push(bracket);
}

/// `encode_basestring_ascii`: printable ASCII stays, `"` and `\` and the five
/// common controls get short escapes, everything else (DEL included) becomes
/// lowercase `\uXXXX`, astral characters as a surrogate pair. Works on code
/// points, because a Python string may hold lone surrogates (written as
/// their own `\udXXX` escape).
fn write_string(out: &mut String, code_points: impl Iterator<Item = u32>) {
    out.push('"');
    for point in code_points {
        match point {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(char::from(point as u8)),
            0x10000.. => {
                let offset = point - 0x10000;
                let _ = write!(
                    out,
                    "\\u{:04x}\\u{:04x}",
                    0xd800 + (offset >> 10),
                    0xdc00 + (offset & 0x3ff)
                );
            }
            _ => {
                let _ = write!(out, "\\u{point:04x}");
            }
        }
    }
    out.push('"');
}

/// `float.__repr__` as `json` uses it, plus `json`'s names for the
/// non-finite values: the shortest digits that round-trip, positional for
/// decimal exponents -5 < e < 16 (`0.0001`, `1e+16`, `1.5e-05`), with `.0`
/// added to integral positional values.
fn float_repr(number: f64) -> String {
    if number.is_nan() {
        return "NaN".to_owned();
    }
    if number.is_infinite() {
        let name = if number > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        };
        return name.to_owned();
    }
    let sign = if number.is_sign_negative() { "-" } else { "" };
    let (digits, exponent) = shortest_digits(number.abs());
    // Python's decpt: the value is 0.<digits> * 10^decimal_point.
    let decimal_point = exponent + 1;
    if !(-4 < decimal_point && decimal_point <= 16) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{fraction}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    if decimal_point <= 0 {
        let zeros = "0".repeat(decimal_point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let decimal_point = decimal_point as usize;
    if decimal_point >= digits.len() {
        let zeros = "0".repeat(decimal_point - digits.len());
        return format!("{sign}{digits}{zeros}.0");
    }
    let (whole, fraction) = digits.split_at(decimal_point);
    format!("{sign}{whole}.{fraction}")
}

/// The shortest significant digits that read back as `magnitude` (finite,
/// non-negative) and the decimal exponent of the first one:
/// `magnitude = d.ddd * 10^exponent`.
fn shortest_digits(magnitude: f64) -> (String, i32) {
    // Rust's `{:e}` prints shortest round-trip digits, `d[.ddd]e<exp>`.
    let (digits, exponent) = split_scientific(&format!("{magnitude:e}"));
    let digits = break_tie_to_even(magnitude, digits, exponent);
    (digits, exponent)
}

fn split_scientific(text: &str) -> (String, i32) {
    let (mantissa, exponent) = text
        .split_once('e')
        .expect("LowerExp output always has an exponent");
    let digits = mantissa.chars().filter(|&c| c != '.').collect();
    let exponent = exponent.parse().expect("LowerExp exponent is an integer");
    (digits, exponent)
}

/// When the value lies exactly halfway between two shortest candidates that
/// both read back as it, David Gay's `dtoa` (Python's `repr`) takes the one
/// with an even last digit; Rust's formatter rounds such ties up.
fn break_tie_to_even(magnitude: f64, digits: String, exponent: i32) -> String {
    // A tie needs the value to be exactly the digits and a final 5; rounding
    // to one more digit rules most values out cheaply.
    let (one_more, _) = split_scientific(&format!("{magnitude:.*e}", digits.len()));
    if !one_more.ends_with('5') {
        return digits;
    }
    // The exact decimal expansion: no f64 has more than 767 significant digits.
    let (exact, exact_exponent) = split_scientific(&format!("{magnitude:.800e}"));
    if exact_exponent != exponent {
        return digits;
    }
    let (head, tail) = exact.split_at(digits.len());
    let is_tie = tail
        .strip_prefix('5')
        .is_some_and(|rest| rest.bytes().all(|d| d == b'0'));
    if !is_tie {
        return digits;
    }
    let even = if head.ends_with(['0', '2', '4', '6', '8']) {
        head.to_owned()
    } else {
        // The upper candidate; a carry past the first digit leaves the tie as is.
        let Some(upper) = increment_decimal(head) else {
            return digits;
        };
        upper
    };
    let reads_back = format!("0.{even}e{}", exponent + 1).parse::<f64>() == Ok(magnitude);
    if reads_back {
        even
    } else {
        digits
    }
}

/// `digits + 1` in the last place, `None` if that needs another digit.
fn increment_decimal(digits: &str) -> Option<String> {
    let mut bytes = digits.as_bytes().to_vec();
    for byte in bytes.iter_mut().rev() {
        if *byte == b'9' {
            *byte = b'0';
        } else {
            *byte += 1;
            return String::from_utf8(bytes).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::float_repr;

    #[test]
    fn float_repr_switches_notation_where_python_does() {
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (1e-4, "0.0001"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.1 + 0.2, "0.30000000000000004"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (1e22, "1e+22"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            // Exactly halfway between ...394.2 and ...394.3: Python takes the even digit.
            // (Exactly representable: the spacing of f64 at 2^50 is 0.25.)
            (f64::from_bits(0x4316_78d5_7af5_e7a9), "1581326943484394.2"),
        ];
        for (number, expected) in cases {
            assert_eq!(float_repr(number), expected, "{number:e}");
        }
    }
}

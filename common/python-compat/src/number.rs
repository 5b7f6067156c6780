//! Python's numbers where the originals parse or print them: `float(text)`,
//! `int(text or 0)` of an HTTP header, and `f"{x:g}"`.

use crate::exception::{Exception, Result};

/// Python's `float(text)`: surrounding whitespace, a sign, digits with single
/// underscores between them, a fraction, an exponent, `inf`/`infinity`/`nan`
/// in any case; `None` where Python raises `ValueError`.
pub fn float(text: &str) -> Option<f64> {
    let body = crate::text::strip(text);
    let bytes = body.as_bytes();
    for (index, byte) in bytes.iter().enumerate() {
        if *byte == b'_' {
            let digit_before = index > 0 && bytes[index - 1].is_ascii_digit();
            let digit_after = bytes.get(index + 1).is_some_and(u8::is_ascii_digit);
            if !(digit_before && digit_after) {
                return None;
            }
        }
    }
    let cleaned: String = body.chars().filter(|c| *c != '_').collect();
    if cleaned.is_empty() || !cleaned.is_ascii() {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

/// Python's `int(text or 0)` for a header value: surrounding whitespace, a
/// sign and single underscores between digits are accepted; `None` for an
/// empty value, `ValueError` for anything else.
pub fn header_int(text: &str) -> Result<Option<i128>> {
    if text.is_empty() {
        return Ok(None);
    }
    let invalid = || Exception::value(format!("invalid literal for int() with base 10: '{text}'"));
    let trimmed = crate::text::strip(text);
    let (negative, digits) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let well_formed = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits
            .bytes()
            .all(|byte| byte.is_ascii_digit() || byte == b'_');
    if !well_formed {
        return Err(invalid());
    }
    let value: i128 = digits
        .replace('_', "")
        .parse()
        // Longer than i128: certainly over every limit (or under, if negative).
        .unwrap_or(i128::MAX);
    Ok(Some(if negative { -value } else { value }))
}

/// Python's `format(value, "g")`: six significant digits, trailing zeros
/// dropped, scientific notation below 1e-4 and from 1e6 on (`1800`, `0.08`,
/// `1e+06`).
pub fn format_g(value: f64) -> String {
    if !value.is_finite() {
        return if value.is_nan() {
            "nan".into()
        } else if value > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Round to six significant digits first: the exponent of the rounded
    // value decides the notation, as in C's %g.
    let scientific = format!("{value:.5e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` output has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` exponent is an integer");
    if (-4..6).contains(&exponent) {
        let decimals = usize::try_from(5 - exponent).unwrap_or(0);
        strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{}e{sign}{:02}",
            strip_fraction_zeros(mantissa),
            exponent.abs()
        )
    }
}

fn strip_fraction_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::float;

    #[test]
    fn floats_parse_like_python() {
        assert_eq!(float(" 30 "), Some(30.0));
        assert_eq!(float("1_000.5"), Some(1000.5));
        assert_eq!(float("1e3"), Some(1000.0));
        assert!(float("-inf").unwrap().is_infinite());
        assert!(float("NaN").unwrap().is_nan());
        for bad in ["", "_1", "1_", "1__0", "0x10", "1 0", "٣"] {
            assert_eq!(float(bad), None, "{bad}");
        }
    }
}

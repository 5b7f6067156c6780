//! Small value checks shared by the journal validators: `_safe_text`, the
//! fixed-shape regular expressions, and Python's int and truth rules.

use crate::error::{Error, Result};
use crate::json::Json;

/// `_safe_text(value, name, maximum=...)`: non-empty text of at most
/// `maximum` code points without NUL, LF or CR.
pub(crate) fn safe_text<'a>(value: &'a Json, name: &str, maximum: usize) -> Result<&'a str> {
    match value.as_str() {
        Some(text)
            if !text.is_empty()
                && text.chars().count() <= maximum
                && !text.contains(['\0', '\n', '\r']) =>
        {
            Ok(text)
        }
        _ => Err(Error::runtime(format!(
            "activation transaction {name} is invalid"
        ))),
    }
}

/// Lowercase hex of bytes (`hexdigest()`).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `re.fullmatch(r"[0-9a-f]{n}", text)`.
pub(crate) fn is_lower_hex(text: &str, length: usize) -> bool {
    text.len() == length
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `text` is `prefix` followed by exactly `length` lowercase hex digits.
pub(crate) fn is_prefixed_hex(text: &str, prefix: &str, length: usize) -> bool {
    text.strip_prefix(prefix)
        .is_some_and(|rest| is_lower_hex(rest, length))
}

/// `str(uuid.UUID(text)) == text`: the canonical lowercase 8-4-4-4-12 form.
pub(crate) fn is_canonical_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, length)| is_lower_hex(group, length))
}

/// `isinstance(value, int)`: Python's bool is an int.
pub(crate) fn loose_int(value: Option<&Json>) -> Option<i128> {
    match value {
        Some(Json::Int(number)) => Some(*number),
        Some(Json::Bool(flag)) => Some(i128::from(*flag)),
        _ => None,
    }
}

/// `type(value) is int` (bool excluded).
pub(crate) fn strict_int(value: Option<&Json>) -> Option<i128> {
    value.and_then(Json::as_int)
}

/// Python truthiness of a possibly absent member (`if d.get(key):`).
pub(crate) fn truthy(value: Option<&Json>) -> bool {
    value.is_some_and(crate::python_truthy)
}

/// `value in {"a", "b", ...}` for string members.
pub(crate) fn is_one_of(value: Option<&Json>, members: &[&str]) -> bool {
    value
        .and_then(Json::as_str)
        .is_some_and(|text| members.contains(&text))
}

/// The key set of an object equals `keys` exactly (`set(d) == {...}`).
pub(crate) fn has_exact_keys(value: Option<&Json>, keys: &[&str]) -> bool {
    value.and_then(Json::as_object).is_some_and(|object| {
        object.len() == keys.len() && keys.iter().all(|key| object.contains_key(key))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_form_is_canonical_only() {
        assert!(is_canonical_uuid("6ba7b811-9dad-11d1-80b4-00c04fd430c8"));
        assert!(!is_canonical_uuid("6BA7B811-9dad-11d1-80b4-00c04fd430c8"));
        assert!(!is_canonical_uuid("6ba7b8119dad11d180b400c04fd430c8"));
        assert!(!is_canonical_uuid("{6ba7b811-9dad-11d1-80b4-00c04fd430c8}"));
    }

    #[test]
    fn safe_text_counts_code_points() {
        let text = Json::from("é".repeat(4));
        assert!(safe_text(&text, "x", 4).is_ok());
        assert_eq!(
            safe_text(&text, "x", 3).unwrap_err().message(),
            "activation transaction x is invalid"
        );
        assert!(safe_text(&Json::from("a\rb"), "x", 9).is_err());
        assert!(safe_text(&Json::from(""), "x", 9).is_err());
        assert!(safe_text(&Json::from(1), "x", 9).is_err());
    }

    #[test]
    fn python_int_and_truth_rules() {
        assert_eq!(loose_int(Some(&Json::Bool(true))), Some(1));
        assert_eq!(strict_int(Some(&Json::Bool(true))), None);
        assert!(!truthy(Some(&Json::Object(Default::default()))));
        assert!(truthy(Some(&Json::from("x"))));
    }
}

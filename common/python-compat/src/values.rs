//! Python's view of JSON values the originals read: `bool(value)`, `str(value)`
//! and `str(value or "")`, as the originals coerce fields of status rows, health
//! documents and journals.

use crate::json::Json;
use crate::text::{repr, repr_code_points};

/// Python's `str(value or "")` for JSON values: falsy values become "",
/// strings stay as they are, other values use Python's `str()`.
pub fn str_or_empty(value: &Json) -> String {
    if !truthy(value) {
        return String::new();
    }
    to_str(value)
}

/// Python's `bool(value)` for JSON values.
pub fn truthy(value: &Json) -> bool {
    match value {
        Json::Null => false,
        Json::Bool(flag) => *flag,
        Json::Int(number) => *number != 0,
        // Outside i128, so never zero.
        Json::BigInt(_) => true,
        Json::Float(number) => *number != 0.0,
        Json::Str(text) => !text.is_empty(),
        Json::WideStr(_) => true,
        Json::Array(items) => !items.is_empty(),
        Json::Object(object) => object.iter().next().is_some(),
    }
}

/// Python's `str(value)` for JSON values (`repr` inside containers).
pub fn to_str(value: &Json) -> String {
    match value {
        Json::Str(text) => text.clone(),
        // A Rust string cannot hold the lone surrogates; messages show U+FFFD.
        Json::WideStr(text) => text.to_string_lossy(),
        other => repr_json(other),
    }
}

fn repr_json(value: &Json) -> String {
    match value {
        Json::Null => "None".to_string(),
        Json::Bool(true) => "True".to_string(),
        Json::Bool(false) => "False".to_string(),
        Json::Int(number) => number.to_string(),
        Json::BigInt(number) => number.as_str().to_string(),
        Json::Float(number) if number.is_nan() => "nan".to_string(),
        Json::Float(number) if number.is_infinite() => {
            if *number > 0.0 { "inf" } else { "-inf" }.to_string()
        }
        Json::Float(_) => crate::json::encode_line(value, false),
        Json::Str(text) => repr(text),
        Json::WideStr(text) => repr_code_points(text.code_points()),
        Json::Array(items) => format!(
            "[{}]",
            items.iter().map(repr_json).collect::<Vec<_>>().join(", ")
        ),
        Json::Object(object) => format!(
            "{{{}}}",
            object
                .iter()
                .map(|(key, item)| format!("{}: {}", repr(key), repr_json(item)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `isinstance(value, int)`: Python's bool is an int.
pub fn loose_int(value: Option<&Json>) -> Option<i128> {
    match value {
        Some(Json::Int(number)) => Some(*number),
        Some(Json::Bool(flag)) => Some(i128::from(*flag)),
        _ => None,
    }
}

/// `type(value) is int` (bool excluded).
pub fn strict_int(value: Option<&Json>) -> Option<i128> {
    value.and_then(Json::as_int)
}

/// Python truthiness of a possibly absent member (`if d.get(key):`).
pub fn member_truthy(value: Option<&Json>) -> bool {
    value.is_some_and(truthy)
}

/// Python's `value == True/False`: `1`, `1.0` equal `True`; `0`, `0.0` equal `False`.
pub fn equals_bool(value: &Json, expected: bool) -> bool {
    let expected_number = if expected { 1.0 } else { 0.0 };
    match value {
        Json::Bool(flag) => *flag == expected,
        Json::Int(number) => *number == i128::from(expected),
        Json::Float(number) => *number == expected_number,
        _ => false,
    }
}

/// Python's `value in {"a", "b", ...}` (a set of strings) for a JSON value:
/// a string is a member when it equals one, other hashable values never
/// are, and a list or an object raises `TypeError: unhashable type`, as the
/// set's hashing does before any comparison. `None` (a missing key read
/// with `.get`) is Python's `None`.
pub fn in_str_set(value: Option<&Json>, members: &[&str]) -> crate::Result<bool> {
    match value {
        Some(item @ (Json::Array(_) | Json::Object(_))) => Err(crate::Exception::new(
            crate::ErrorClass::Type,
            format!("unhashable type: '{}'", item.python_type_name()),
        )),
        Some(Json::Str(text)) => Ok(members.contains(&text.as_str())),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_int_and_truth_rules() {
        assert_eq!(loose_int(Some(&Json::Bool(true))), Some(1));
        assert_eq!(strict_int(Some(&Json::Bool(true))), None);
        assert!(!member_truthy(Some(&Json::Object(Default::default()))));
        assert!(member_truthy(Some(&Json::from("x"))));
        assert!(!member_truthy(None));
        assert_eq!(str_or_empty(&Json::Int(0)), "");
        assert_eq!(str_or_empty(&Json::from("x")), "x");
        assert_eq!(to_str(&Json::Bool(true)), "True");
    }
}

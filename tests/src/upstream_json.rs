//! The two byte forms upstream writes its shared files in, over serde_json
//! (independent of the port's `python_compat::json`): `_json_bytes`
//! (`json.dumps(sort_keys=True, indent=2)` and a newline: layouts,
//! execution journals, status rows) and `activation_transaction._canonical`
//! (`json.dumps(sort_keys=True, separators=(",", ":"))` and a newline: the
//! activation journal). serde_json's map is sorted by key; Python's
//! `ensure_ascii` is applied here (non-ASCII and DEL as `\uXXXX`, lowercase,
//! surrogate pairs beyond the BMP). Python's float `repr` is not reproduced:
//! these files hold no floats.

use python_compat::json::{Json, JsonObject};
use serde_json::{Map, Number, Value};

/// `_json_bytes(value)`: indented, sorted, ASCII, with a trailing newline.
pub fn json_bytes(value: &Value) -> Vec<u8> {
    ascii_line(&serde_json::to_string_pretty(value).expect("a JSON value serializes"))
}

/// `_canonical(value)`: compact, sorted, ASCII, with a trailing newline.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    ascii_line(&serde_json::to_string(value).expect("a JSON value serializes"))
}

fn ascii_line(text: &str) -> Vec<u8> {
    let mut ascii = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if c.is_ascii() && c != '\u{7f}' {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                ascii.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    ascii.push('\n');
    ascii.into_bytes()
}

/// A `python_compat` value (the fixtures' plumbing type) as a serde_json
/// value, member by member. Panics on what only Python holds (see
/// [`try_from_compat`]).
pub fn from_compat(value: &Json) -> Value {
    try_from_compat(value).unwrap_or_else(|| panic!("{value:?} is beyond serde_json"))
}

/// [`from_compat`], or None for a value only Python holds: ints beyond 64
/// bits, non-finite floats, strings or keys with lone surrogates.
pub fn try_from_compat(value: &Json) -> Option<Value> {
    Some(match value {
        Json::Null => Value::Null,
        Json::Bool(flag) => Value::Bool(*flag),
        Json::Int(number) => u64::try_from(*number)
            .map(Value::from)
            .or_else(|_| i64::try_from(*number).map(Value::from))
            .ok()?,
        Json::Float(number) => Value::Number(Number::from_f64(*number)?),
        Json::Str(text) => Value::from(text.as_str()),
        Json::Array(items) => {
            Value::Array(items.iter().map(try_from_compat).collect::<Option<_>>()?)
        }
        Json::Object(members) => {
            let mut object = Map::new();
            for (key, item) in members.iter() {
                // A key with a lone surrogate reads back lossy (U+FFFD).
                if key.contains('\u{fffd}') {
                    return None;
                }
                object.insert(key.to_string(), try_from_compat(item)?);
            }
            Value::Object(object)
        }
        _ => return None,
    })
}

/// A serde_json value as the fixtures' `python_compat` plumbing type,
/// member by member (the inverse of [`from_compat`]).
pub fn to_compat(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Bool(flag) => Json::Bool(*flag),
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(small), _) => Json::Int(i128::from(small)),
            (None, Some(large)) => Json::Int(i128::from(large)),
            _ => Json::Float(number.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => Json::Str(text.clone()),
        Value::Array(items) => Json::Array(items.iter().map(to_compat).collect()),
        Value::Object(members) => {
            let mut object = JsonObject::new();
            for (key, item) in members {
                object.insert(key.as_str(), to_compat(item));
            }
            Json::Object(object)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{canonical_bytes, json_bytes};

    /// The bytes CPython 3.11 writes for the same values (recorded facts).
    #[test]
    fn both_forms_escape_as_python_does() {
        let value = json!({"b": ["é\u{2028}\u{7f}/😀", [], {}], "a": null, "c": true, "d": 12});
        assert_eq!(
            String::from_utf8(canonical_bytes(&value)).unwrap(),
            "{\"a\":null,\"b\":[\"\\u00e9\\u2028\\u007f/\\ud83d\\ude00\",[],{}],\"c\":true,\"d\":12}\n"
        );
        assert_eq!(
            String::from_utf8(json_bytes(&json!({"k": [1, {}], "e": "\t"}))).unwrap(),
            "{\n  \"e\": \"\\t\",\n  \"k\": [\n    1,\n    {}\n  ]\n}\n"
        );
    }
}

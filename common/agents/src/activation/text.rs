//! Small value checks shared by the journal validators: `_safe_text` and
//! exact key sets (membership is `python_compat::in_str_set`).

use crate::error::{Error, Result};
use python_compat::json::Json;

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
}

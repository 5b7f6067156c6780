//! Hex text as Python writes and checks it: `bytes.hex()` /
//! `hexdigest()`, and the originals' `re.fullmatch(r"[0-9a-f]{n}", text)` shape
//! checks of ids, tokens and digests (lowercase only: an uppercase digest is
//! a different string to Python).

/// Lowercase hex of bytes (`bytes.hex()`, `hexdigest()`).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// `re.fullmatch(r"[0-9a-f]{length}", text)`, for text or raw bytes (file
/// names and secrets are checked before they are decoded).
pub fn is_lower_hex(text: impl AsRef<[u8]>, length: usize) -> bool {
    let bytes = text.as_ref();
    bytes.len() == length && bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `text` is `prefix` followed by exactly `length` lowercase hex digits.
pub fn is_prefixed_hex(text: &str, prefix: &str, length: usize) -> bool {
    text.strip_prefix(prefix)
        .is_some_and(|rest| is_lower_hex(rest, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_its_shape_checks_follow_python() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&[]), "");
        assert!(is_lower_hex("0123456789abcdef", 16));
        assert!(
            !is_lower_hex("0123456789ABCDEF", 16),
            "uppercase is another string"
        );
        assert!(!is_lower_hex("0123", 5));
        assert!(!is_lower_hex("012g", 4));
        assert!(is_prefixed_hex(
            "execution-0123456789abcdef01234567",
            "execution-",
            24
        ));
        assert!(!is_prefixed_hex("execution-0123", "execution-", 24));
    }
}

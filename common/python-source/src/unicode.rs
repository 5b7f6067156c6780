//! Character classes CPython 3.11 uses for source code (Unicode 14.0.0):
//! identifier characters, printable characters and the NFKC form of
//! identifiers that normalize to ASCII.

use super::tables::{NFKD_ASCII, PRINTABLE, XID_CONTINUE, XID_START};

fn in_ranges(ranges: &[(u32, u32)], code: u32) -> bool {
    ranges
        .binary_search_by(|&(low, high)| {
            if high < code {
                std::cmp::Ordering::Less
            } else if low > code {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// May start an identifier (`_` and ASCII letters included).
pub(super) fn is_xid_start(c: char) -> bool {
    if c.is_ascii() {
        return c == '_' || c.is_ascii_alphabetic();
    }
    in_ranges(XID_START, c as u32)
}

/// May continue an identifier.
pub(super) fn is_xid_continue(c: char) -> bool {
    if c.is_ascii() {
        return c == '_' || c.is_ascii_alphanumeric();
    }
    in_ranges(XID_CONTINUE, c as u32)
}

/// `str.isprintable()` of one character.
pub(super) fn is_printable(c: char) -> bool {
    in_ranges(PRINTABLE, c as u32)
}

/// `_PyUnicode_ScanIdentifier`: the index of the first character that cannot
/// be in an identifier at its position (`text.chars().count()` when none).
pub(super) fn first_invalid_identifier_char(text: &str) -> Option<(usize, char)> {
    for (index, c) in text.chars().enumerate() {
        let valid = if index == 0 {
            is_xid_start(c)
        } else {
            is_xid_continue(c)
        };
        if !valid {
            return Some((index, c));
        }
    }
    None
}

/// The identifier as the parser stores it (NFKC-normalized), when that is
/// pure ASCII; `None` when its normal form keeps a non-ASCII character.
pub(super) fn ascii_nfkc(identifier: &str) -> Option<String> {
    if identifier.is_ascii() {
        return Some(identifier.to_string());
    }
    let mut out = String::with_capacity(identifier.len());
    for c in identifier.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        let index = NFKD_ASCII
            .binary_search_by_key(&(c as u32), |&(code, _)| code)
            .ok()?;
        out.push_str(NFKD_ASCII[index].1);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values: str.isidentifier / isprintable and
    // unicodedata.normalize("NFKC", ...) on CPython 3.11.
    #[test]
    fn classes_follow_python() {
        assert!(is_xid_start('é') && is_xid_start('ℕ') && !is_xid_start('€'));
        assert!(is_xid_continue('\u{301}') && !is_xid_start('\u{301}'));
        assert!(!is_xid_start('1') && is_xid_continue('1'));
        assert!(is_printable('€') && !is_printable('\u{a0}') && !is_printable('\u{7f}'));
        assert_eq!(first_invalid_identifier_char("a€b"), Some((1, '€')));
        assert_eq!(first_invalid_identifier_char("café"), None);
        assert_eq!(
            ascii_nfkc("ＡPI_CONTRACT_VERSION").as_deref(),
            Some("API_CONTRACT_VERSION")
        );
        assert_eq!(ascii_nfkc("ﬁle").as_deref(), Some("file"));
        assert_eq!(ascii_nfkc("café"), None);
    }
}

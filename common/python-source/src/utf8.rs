//! UTF-8 validation with CPython's error positions and reasons, and the text
//! of `str(UnicodeDecodeError)`.

/// The first invalid sequence in `bytes` as CPython's strict UTF-8 decoder
/// reports it: start and end positions and the reason.
pub(super) fn first_error(bytes: &[u8]) -> Option<(usize, usize, &'static str)> {
    const INVALID_START: &str = "invalid start byte";
    const INVALID_CONTINUATION: &str = "invalid continuation byte";
    const END: &str = "unexpected end of data";
    let continuation = |byte: u8| (0x80..0xC0).contains(&byte);
    let length = bytes.len();
    let mut index = 0;
    while index < length {
        let lead = bytes[index];
        let left = length - index;
        if lead < 0x80 {
            index += 1;
            continue;
        }
        if lead < 0xC2 {
            return Some((index, index + 1, INVALID_START));
        }
        if lead < 0xE0 {
            if left < 2 {
                return Some((index, length, END));
            }
            if !continuation(bytes[index + 1]) {
                return Some((index, index + 1, INVALID_CONTINUATION));
            }
            index += 2;
            continue;
        }
        if lead < 0xF0 {
            // E0 needs A0..BF next (no overlong forms), ED needs 80..9F (no
            // surrogates).
            let second_ok = |second: u8| {
                continuation(second)
                    && !(lead == 0xE0 && second < 0xA0)
                    && !(lead == 0xED && second >= 0xA0)
            };
            if left < 3 {
                if left < 2 {
                    return Some((index, length, END));
                }
                if !second_ok(bytes[index + 1]) {
                    return Some((index, index + 1, INVALID_CONTINUATION));
                }
                return Some((index, length, END));
            }
            if !second_ok(bytes[index + 1]) {
                return Some((index, index + 1, INVALID_CONTINUATION));
            }
            if !continuation(bytes[index + 2]) {
                return Some((index, index + 2, INVALID_CONTINUATION));
            }
            index += 3;
            continue;
        }
        if lead < 0xF5 {
            // F0 needs 90..BF next, F4 needs 80..8F (nothing past U+10FFFF).
            let second_ok = |second: u8| {
                continuation(second)
                    && !(lead == 0xF0 && second < 0x90)
                    && !(lead == 0xF4 && second >= 0x90)
            };
            if left < 4 {
                if left < 2 {
                    return Some((index, length, END));
                }
                if !second_ok(bytes[index + 1]) {
                    return Some((index, index + 1, INVALID_CONTINUATION));
                }
                if left < 3 {
                    return Some((index, length, END));
                }
                if !continuation(bytes[index + 2]) {
                    return Some((index, index + 2, INVALID_CONTINUATION));
                }
                return Some((index, length, END));
            }
            if !second_ok(bytes[index + 1]) {
                return Some((index, index + 1, INVALID_CONTINUATION));
            }
            if !continuation(bytes[index + 2]) {
                return Some((index, index + 2, INVALID_CONTINUATION));
            }
            if !continuation(bytes[index + 3]) {
                return Some((index, index + 3, INVALID_CONTINUATION));
            }
            index += 4;
            continue;
        }
        return Some((index, index + 1, INVALID_START));
    }
    None
}

/// `str(UnicodeDecodeError(encoding, bytes, start, end, reason))`.
pub(super) fn decode_error_text(
    encoding: &str,
    bytes: &[u8],
    start: usize,
    end: usize,
    reason: &str,
) -> String {
    if end == start + 1 {
        format!(
            "'{encoding}' codec can't decode byte 0x{:02x} in position {start}: {reason}",
            bytes[start]
        )
    } else {
        format!(
            "'{encoding}' codec can't decode bytes in position {start}-{}: {reason}",
            end - 1
        )
    }
}

/// Decodes strictly, or returns `str(UnicodeDecodeError)` as the `utf-8`
/// codec words it.
pub(super) fn decode(bytes: &[u8]) -> Result<&str, String> {
    match first_error(bytes) {
        None => Ok(std::str::from_utf8(bytes).expect("validated above")),
        Some((start, end, reason)) => Err(decode_error_text("utf-8", bytes, start, end, reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected texts: `bytes.decode("utf-8")` on CPython 3.11.
    #[test]
    fn errors_read_like_cpython() {
        let text = |bytes: &[u8]| decode(bytes).unwrap_err();
        assert_eq!(
            text(b"caf\xe9"),
            "'utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data"
        );
        assert_eq!(
            text(b"ab\xe9\xe9cd"),
            "'utf-8' codec can't decode byte 0xe9 in position 2: invalid continuation byte"
        );
        assert_eq!(
            text(b"\xe2\x82"),
            "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data"
        );
        assert_eq!(
            text(b"\xe2\x82x"),
            "'utf-8' codec can't decode bytes in position 0-1: invalid continuation byte"
        );
        assert_eq!(
            text(b"\xed\xa0\x80"),
            "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte"
        );
        assert_eq!(
            text(b"\xc0\x80"),
            "'utf-8' codec can't decode byte 0xc0 in position 0: invalid start byte"
        );
        assert_eq!(
            text(b"\xf0\x9f\x98"),
            "'utf-8' codec can't decode bytes in position 0-2: unexpected end of data"
        );
        assert_eq!(
            text(b"\xf4\x90\x80\x80"),
            "'utf-8' codec can't decode byte 0xf4 in position 0: invalid continuation byte"
        );
        assert_eq!(decode("é€😀".as_bytes()), Ok("é€😀"));
    }
}

//! Python 3.11's `base64.b64decode(text, validate=True)`.
//!
//! The signed envelopes carry the exact manifest bytes in base64 and the
//! signature is checked over whatever the decoder yields, so acceptance must be
//! Python's, including its leniencies: padding after a complete quantum
//! (`QUJD=`), and non-zero trailing bits (`QR==`). A strict RFC 4648 decoder
//! would refuse envelopes the server accepted.

/// Decode like `base64.b64decode(text, validate=True)`; `None` where Python
/// raises `binascii.Error` or `ValueError` (non-ASCII text).
pub fn b64decode_validate(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !text.is_ascii() {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3 + 3);
    let mut quad_position = 0u8;
    let mut left = 0u32;
    let mut pads = 0u8;
    let mut padding_started = false;
    for (index, &byte) in bytes.iter().enumerate() {
        if byte == b'=' {
            padding_started = true;
            if index == 0 {
                return None; // "Leading padding not allowed"
            }
            if quad_position >= 2 {
                pads += 1;
                if quad_position + pads >= 4 {
                    if index + 1 < bytes.len() {
                        return None; // "Excess data after padding"
                    }
                    return Some(out);
                }
            }
            continue;
        }
        let value = alphabet_value(byte)?; // "Only base64 data is allowed"
        if padding_started {
            return None; // "Discontinuous padding not allowed"
        }
        pads = 0;
        match quad_position {
            0 => {
                left = value;
                quad_position = 1;
            }
            1 => {
                out.push(((left << 2) | (value >> 4)) as u8);
                left = value & 0x0f;
                quad_position = 2;
            }
            2 => {
                out.push(((left << 4) | (value >> 2)) as u8);
                left = value & 0x03;
                quad_position = 3;
            }
            _ => {
                out.push(((left << 6) | value) as u8);
                left = 0;
                quad_position = 0;
            }
        }
    }
    // A dangling data character or a missing pad: "Incorrect padding".
    (quad_position == 0).then_some(out)
}

fn alphabet_value(byte: u8) -> Option<u32> {
    let value = match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(value))
}

#[cfg(test)]
mod tests {
    use super::b64decode_validate;

    #[test]
    fn matches_python_3_11_observations() {
        let cases: &[(&str, Option<&[u8]>)] = &[
            ("QUJD=", Some(b"ABC")),
            ("QUJD===", Some(b"ABC")),
            ("QQ", None),
            ("QQ=", None),
            ("QQ==", Some(b"A")),
            ("QR==", Some(b"A")),
            ("=", None),
            ("", Some(b"")),
            ("QUI=", Some(b"AB")),
            ("QUJ==", None),
            ("QUI=QUI=", None),
            ("QUJDQQ=", None),
            ("QUJDQ===", None),
            ("QUJDQQ==", Some(b"ABCA")),
            ("QU=JD", None),
            ("QUJD\n", None),
            ("QUJ\u{e9}", None),
        ];
        for (text, expected) in cases {
            assert_eq!(b64decode_validate(text).as_deref(), *expected, "{text:?}");
        }
    }
}

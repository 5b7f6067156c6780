//! Random identifiers shaped like Python's `uuid.uuid4()`.

use agents_common::{token_hex, uuid_text};

fn uuid4_bytes() -> [u8; 16] {
    let hex = token_hex(16).expect("the kernel CSPRNG is readable");
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * index..2 * index + 2], 16).expect("token_hex is hex");
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    bytes
}

/// `uuid.uuid4().hex`: 32 lowercase hex digits (receipt instance ids).
pub fn uuid4_hex() -> String {
    uuid4_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `str(uuid.uuid4())`: canonical hyphenated form (lease ids).
pub fn uuid4() -> String {
    uuid_text(&uuid4_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::is_canonical_uuid;

    #[test]
    fn shapes() {
        let hex = uuid4_hex();
        assert_eq!(hex.len(), 32);
        assert_eq!(&hex[12..13], "4");
        let canonical = uuid4();
        assert!(is_canonical_uuid(&canonical));
        assert_ne!(uuid4(), canonical);
    }
}

//! Python's `uuid` module as the originals and the worker use it: `uuid5` with
//! `NAMESPACE_URL` (maintenance operation ids), `uuid4` (uninstall operation
//! and lease ids), the canonical text form and `uuid.UUID(text)`'s parsing.
//!
//! The worker holds its startup lease under the UUID the helpers compute, so
//! the derivation must match Python's bit for bit.

use sha1::{Digest, Sha1};

use crate::exception::{Exception, Result};
use crate::hex::is_lower_hex;

/// RFC 4122 `NAMESPACE_URL` (`6ba7b811-9dad-11d1-80b4-00c04fd430c8`).
const NAMESPACE_URL: [u8; 16] = [
    0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
];

/// The canonical lowercase UUIDv5 of `NAMESPACE_URL` and `name`, as Python's
/// `str(uuid.uuid5(uuid.NAMESPACE_URL, name))`; journals derive their
/// maintenance operation ids this way (the outer activation journal uses the
/// name prefix `agentsdock-activation:`).
pub fn uuid5_url(name: &str) -> String {
    let mut hasher = Sha1::new();
    hasher.update(NAMESPACE_URL);
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x50; // version 5
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    uuid_text(&bytes)
}

/// `str(uuid.uuid4())`: a random canonical UUID, as the originals create
/// uninstall operation ids and the worker creates lease ids.
pub fn uuid4() -> Result<String> {
    let mut bytes = [0u8; 16];
    crate::random::random_bytes(&mut bytes)?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    Ok(uuid_text(&bytes))
}

/// `str(uuid.UUID(bytes=...))`: the canonical lowercase `8-4-4-4-12` text of
/// a UUID, the one form in which the worker, the journals and the helpers
/// exchange operation, lease and volume ids.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex = crate::hex::hex(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `str(uuid.UUID(text))`: Python accepts braces, a `urn:uuid:` prefix and
/// hyphens anywhere around 32 hex digits; anything else is the ValueError
/// `badly formed hexadecimal UUID string`.
pub fn python_uuid(text: &str) -> Result<String> {
    let mut hex = text.replace("urn:", "").replace("uuid:", "");
    hex = hex.trim_matches(|c| c == '{' || c == '}').replace('-', "");
    if hex.len() != 32 || !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(Exception::value("badly formed hexadecimal UUID string"));
    }
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * index..2 * index + 2], 16).expect("checked hex digits");
    }
    Ok(uuid_text(&bytes))
}

/// `str(uuid.UUID(text)) == text`: the canonical lowercase 8-4-4-4-12 form.
pub fn is_canonical_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, length)| is_lower_hex(group, length))
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
    fn uuid_text_follows_python() {
        let canonical = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(python_uuid(canonical).unwrap(), canonical);
        assert_eq!(
            python_uuid("{0F8FAD5B-D9CB-469F-A165-70867728950E}").unwrap(),
            canonical
        );
        assert_eq!(
            python_uuid("urn:uuid:0f8fad5bd9cb469fa16570867728950e").unwrap(),
            canonical
        );
        for bad in ["", "0f8fad5b", "0f8fad5b-d9cb-469f-a165-70867728950g"] {
            assert_eq!(
                python_uuid(bad).unwrap_err().python_line(),
                "ValueError: badly formed hexadecimal UUID string"
            );
        }
    }

    #[test]
    fn uuid_text_is_the_canonical_lowercase_form() {
        assert_eq!(
            uuid_text(&NAMESPACE_URL),
            "6ba7b811-9dad-11d1-80b4-00c04fd430c8"
        );
    }

    #[test]
    fn uuid4_is_a_fresh_canonical_version_4_uuid() {
        let first = uuid4().unwrap();
        assert_eq!(python_uuid(&first).unwrap(), first, "canonical form");
        assert_eq!(&first[14..15], "4", "version nibble");
        assert!("89ab".contains(&first[19..20]), "RFC 4122 variant");
        assert_ne!(uuid4().unwrap(), first);
    }
}

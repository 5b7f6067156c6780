//! Maintenance operation identities derived from journal ids (`uuid.uuid5`).
//!
//! The worker holds its startup lease under the same UUID the helpers compute,
//! so the derivation must match Python's `uuid.uuid5(NAMESPACE_URL, name)` bit
//! for bit.

use sha1::{Digest, Sha1};

use crate::{Error, Json, Result};

/// RFC 4122 `NAMESPACE_URL` (`6ba7b811-9dad-11d1-80b4-00c04fd430c8`).
const NAMESPACE_URL: [u8; 16] = [
    0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
];

/// Hex digits after `execution-` in a journal id.
const JOURNAL_ID_HEX_DIGITS: usize = 24;

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
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The operation id under which the worker holds (and helpers release) the
/// maintenance lease of an `.execution-transaction` journal; also validates the
/// journal's `id` (`execution-` + 24 lowercase hex).
pub fn maintenance_operation_id(transaction: &Json) -> Result<String> {
    let identifier = transaction.get("id").and_then(Json::as_str);
    match identifier {
        Some(id) if is_journal_id(id) => Ok(uuid5_url(&format!("agentsdock-execution:{id}"))),
        _ => Err(Error::value("invalid execution transaction identity")),
    }
}

/// `re.fullmatch(r"execution-[0-9a-f]{24}", id)`.
fn is_journal_id(id: &str) -> bool {
    id.strip_prefix("execution-").is_some_and(|hex| {
        hex.len() == JOURNAL_ID_HEX_DIGITS
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

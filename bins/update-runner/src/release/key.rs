//! The release public key (`release-public-key.pem`): an SPKI PEM Ed25519 key.

use std::path::Path;

use base64::Engine as _;
use ed25519_dalek::pkcs8::spki::der::Decode as _;
use ed25519_dalek::pkcs8::spki::SubjectPublicKeyInfoRef;
use ed25519_dalek::VerifyingKey;

use agents_common::{read_regular_file, BoundedRead, Error, Leaf, Result};

/// cryptography's text for a file without a well-formed PEM block.
const PEM_FRAMING_ERROR: &str = "Unable to load PEM file. See https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file for more details. MalformedFraming";
/// cryptography's text for a PEM block whose base64 body does not decode.
const PEM_DATA_ERROR: &str = "Unable to load PEM file. See https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file for more details. InvalidData";
/// cryptography's text for a PEM block that is not a public key.
const PEM_LABEL_ERROR: &str =
    "Valid PEM but no BEGIN PUBLIC KEY/END PUBLIC KEY delimiters. Are you sure this is a public key?";
/// cryptography's text for DER that is not a SubjectPublicKeyInfo.
const DER_ERROR: &str = "Could not deserialize key data. The data may be in an incorrect format, it may be encrypted with an unsupported algorithm, or it may be an unsupported key type (e.g. EC curves with explicit parameters).";

/// Load the release public key the way `serialization.load_pem_public_key`
/// followed by the original's `isinstance(key, Ed25519PublicKey)` check does:
/// the first PEM block counts, text around it is ignored, and any other key
/// type is refused with the original's message.
/// Largest public key file read.
pub(super) const MAX_PUBLIC_KEY_BYTES: u64 = 64 * 1024;

pub(crate) fn load_release_public_key(path: &Path) -> Result<VerifyingKey> {
    // Stricter than the original's read_bytes(), which blocks on a FIFO and
    // reads /dev/zero for ever: a PEM key is a few hundred bytes.
    let data = match read_regular_file(path, MAX_PUBLIC_KEY_BYTES, Leaf::Follow)? {
        BoundedRead::Contents(data) => data,
        BoundedRead::NotRegular => {
            return Err(Error::runtime("release public key is not a regular file"))
        }
        BoundedRead::TooLarge => {
            return Err(Error::runtime(format!(
                "release public key exceeds {} KiB",
                MAX_PUBLIC_KEY_BYTES >> 10
            )))
        }
    };
    let (label, der) = first_pem_block(&data)?;
    if label == "RSA PUBLIC KEY" {
        return Err(Error::runtime("release public key is not an Ed25519 key"));
    }
    if label != "PUBLIC KEY" {
        return Err(Error::value(PEM_LABEL_ERROR));
    }
    let info = SubjectPublicKeyInfoRef::from_der(&der).map_err(|_| Error::value(DER_ERROR))?;
    if info.algorithm.oid != ed25519_dalek::pkcs8::ALGORITHM_OID {
        return Err(Error::runtime("release public key is not an Ed25519 key"));
    }
    VerifyingKey::try_from(info).map_err(|_| Error::value(DER_ERROR))
}

/// The label and decoded body of the first `-----BEGIN X-----` ...
/// `-----END X-----` block.
fn first_pem_block(data: &[u8]) -> Result<(String, Vec<u8>)> {
    let text = String::from_utf8_lossy(data);
    let framing = || Error::value(PEM_FRAMING_ERROR);
    let start = text.find("-----BEGIN ").ok_or_else(framing)?;
    let after_begin = &text[start + "-----BEGIN ".len()..];
    let label_end = after_begin.find("-----").ok_or_else(framing)?;
    let label = &after_begin[..label_end];
    if label.contains('\n') {
        return Err(framing());
    }
    let body_and_rest = &after_begin[label_end + "-----".len()..];
    let end_marker = format!("-----END {label}-----");
    let body_end = body_and_rest.find(&end_marker).ok_or_else(framing)?;
    let body: String = body_and_rest[..body_end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.as_bytes())
        .map_err(|_| Error::value(PEM_DATA_ERROR))?;
    Ok((label.to_string(), der))
}

//! The journal's records of configuration files (`_snapshot`, `_desired`).
//!
//! Journals compare these records as whole dicts, so the key order, the mode
//! as an integer, the lowercase SHA-256 and the padded standard base64 must
//! match what Python writes.

use std::path::Path;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{hex, read_file};
use crate::error::Result;
use python_compat::json::Json;

/// `_snapshot`: the journal's record of a configuration file, `{"exists": false}`
/// only when it is missing; every other refusal of `read_file` propagates.
pub fn snapshot(path: &Path) -> Result<Json> {
    match read_file(path, false) {
        Ok((data, mode)) => Ok(file_record(&data, mode)),
        Err(error) if error.is_not_found() => {
            Ok(python_compat::json_object! { "exists" => false }.into())
        }
        Err(error) => Err(error),
    }
}

/// `_desired`: the snapshot a published file will have (always mode 0600), so
/// journals can compare whole records.
pub fn desired(data: &[u8]) -> Json {
    file_record(data, 0o600)
}

fn file_record(data: &[u8], mode: u32) -> Json {
    python_compat::json_object! {
        "exists" => true,
        "mode" => mode,
        "sha256" => hex(&Sha256::digest(data)),
        "data" => base64::engine::general_purpose::STANDARD.encode(data),
    }
    .into()
}

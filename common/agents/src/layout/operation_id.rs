//! Maintenance operation identities derived from journal ids (`uuid.uuid5`
//! over `agentsdock-execution:<id>`), as the worker derives the operation its
//! startup lease is held for.

use crate::error::{Error, Result};
use python_compat::{is_prefixed_hex, json::Json, uuid::uuid5_url};

/// Hex digits after `execution-` in a journal id.
const JOURNAL_ID_HEX_DIGITS: usize = 24;

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
    is_prefixed_hex(id, "execution-", JOURNAL_ID_HEX_DIGITS)
}

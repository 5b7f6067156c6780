//! The private control endpoints' request checks (`execution_control`), in
//! upstream order: the first failing check decides the status and `detail`.

use std::time::Duration;

use python_compat::json::{encode_compact, parse_json_unique, Json};

use crate::http_server::{Body, Reply, Request};

/// Prefix of every control path; other paths go to the application.
pub(crate) const CONTROL_PREFIX: &str = "/api/admin/execution";
const STATUS_PATH: &str = "/api/admin/execution/status";
const MAINTENANCE_PATH: &str = "/api/admin/execution/maintenance";
const MAX_BODY_BYTES: usize = 4096;
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
const BODY_TIMEOUT: Duration = Duration::from_secs(5);
const FORBIDDEN_HEADERS: [&str; 7] = [
    "cookie",
    "origin",
    "forwarded",
    "via",
    "x-real-ip",
    "x-agentsdock-token",
    "x-zenithdock-token",
];
const FORBIDDEN_PREFIXES: [&str; 3] = ["sec-fetch-", "x-forwarded-", "tailscale-user-"];
const ACTIONS: [&str; 4] = ["acquire", "renew", "seal", "release"];

/// A refusal: status code and `detail` text.
pub(crate) type Refusal = (u16, String);

fn refuse<T>(status: u16, detail: &str) -> Result<T, Refusal> {
    Err((status, detail.to_string()))
}

/// A request that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// `GET …/status`.
    Status,
    /// `POST …/maintenance`.
    Maintenance {
        /// `acquire`, `renew`, `seal` or `release`.
        action: String,
        /// Canonical UUID of the operation.
        operation_id: String,
        /// Required except for `acquire`.
        lease_id: Option<String>,
        /// 30 to 300 (default 120).
        lifetime: i64,
    },
}

/// True for `str(uuid.UUID(text)) == text`: lowercase, hyphenated, 36 characters.
pub(crate) fn is_canonical_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(index, character)| match index {
            8 | 13 | 18 | 23 => character == '-',
            _ => matches!(character, '0'..='9' | 'a'..='f'),
        })
}

fn content_length(request: &Request) -> Result<Option<usize>, Refusal> {
    if !request.header_values("transfer-encoding").is_empty() {
        return refuse(400, "Control requests do not accept transfer encoding");
    }
    let values = request.header_values("content-length");
    let Some(first) = values.first() else {
        return Ok(None);
    };
    let well_formed = values.len() == 1
        && (*first == b"0"
            || (first.len() <= 10
                && first
                    .first()
                    .is_some_and(|digit| (b'1'..=b'9').contains(digit))
                && first.iter().all(u8::is_ascii_digit)));
    if !well_formed {
        return refuse(400, "Invalid control content length");
    }
    let length: usize = std::str::from_utf8(first)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(usize::MAX);
    if length > MAX_BODY_BYTES {
        return refuse(413, "Control request exceeds its size limit");
    }
    Ok(Some(length))
}

fn has_non_finite(value: &Json) -> bool {
    match value {
        Json::Float(number) => !number.is_finite(),
        Json::Array(items) => items.iter().any(has_non_finite),
        Json::Object(object) => object.values().any(has_non_finite),
        _ => false,
    }
}

fn parse_body(raw: &[u8]) -> Result<Json, Refusal> {
    let invalid = || (400, "Invalid execution control JSON".to_string());
    // Upstream decodes UTF-8 itself first, so other encodings and a BOM fail.
    let text = std::str::from_utf8(raw).map_err(|_| invalid())?;
    if text.starts_with('\u{feff}') {
        return Err(invalid());
    }
    let value = parse_json_unique(raw, "Duplicate JSON field").map_err(|err| {
        if err.message() == "Duplicate JSON field" {
            (400, "Duplicate JSON field".to_string())
        } else {
            invalid()
        }
    })?;
    // Upstream's parse_constant fires on the NaN/Infinity literals only; a
    // non-finite float here can also come from an overflowing literal such as
    // 1e999, which upstream would accept (and then refuse as a field). The
    // stand-in refuses both the same way.
    if has_non_finite(&value) {
        return refuse(400, "Invalid JSON number");
    }
    Ok(value)
}

/// Runs the checks of `ExecutionControl` on a request whose path starts with
/// [`CONTROL_PREFIX`], reading the body when one is due.
pub(crate) fn check(
    request: &mut Request,
    token: &str,
    instance_id: &str,
) -> Result<Command, Refusal> {
    let size: usize = request
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    if request.headers.len() > 128 {
        return refuse(400, "Invalid control headers");
    }
    if size > 16384 {
        return refuse(400, "Control headers exceed their limit");
    }
    let peer = request.peer.ip();
    let loopback = match peer {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
    };
    let forbidden = request.headers.iter().any(|(name, _)| {
        FORBIDDEN_HEADERS.contains(&name.as_str())
            || FORBIDDEN_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
    });
    if !loopback
        || request
            .query
            .as_deref()
            .is_some_and(|query| !query.is_empty())
        || forbidden
    {
        return refuse(403, "Private control transport is forbidden");
    }
    let authorization = request.header_values("authorization");
    let expected = format!("Bearer {token}");
    if authorization.len() != 1 || authorization[0] != expected.as_bytes() {
        return refuse(401, "Execution control authentication required");
    }
    let path = request.path.as_str();
    if path != STATUS_PATH && path != MAINTENANCE_PATH {
        return refuse(404, "Unknown execution control");
    }
    let method = if path == STATUS_PATH { "GET" } else { "POST" };
    if request.method != method {
        return refuse(405, "Execution control method is not allowed");
    }
    let length = content_length(request)?;
    if path == STATUS_PATH {
        if length.is_some_and(|length| length != 0) {
            return refuse(400, "Status requests do not accept a body");
        }
        return Ok(Command::Status);
    }
    let content_types = request.header_values("content-type");
    let json = content_types.len() == 1
        && matches!(
            content_types[0].to_ascii_lowercase().as_slice(),
            b"application/json" | b"application/json; charset=utf-8"
        );
    if !json {
        return refuse(415, "Execution control requires JSON");
    }
    // Without a Content-Length (and no transfer encoding) the body is empty.
    let raw = match request.read_body(length.unwrap_or(0), BODY_TIMEOUT) {
        Body::Complete(raw) => raw,
        Body::TimedOut => return refuse(408, "Control request body timed out"),
        Body::Interrupted => return refuse(400, "Control request body was interrupted"),
    };
    let value = parse_body(&raw)?;
    let fields_invalid = || (422, "Invalid execution control fields".to_string());
    let object = value.as_object().ok_or_else(fields_invalid)?;
    let required = ["action", "expected_worker_instance_id", "operation_id"];
    let allowed =
        |key: &str| required.contains(&key) || key == "lease_id" || key == "lifetime_seconds";
    if !required.iter().all(|key| object.contains_key(key))
        || !object.keys().all(|key| allowed(key))
    {
        return Err(fields_invalid());
    }
    if object
        .get("expected_worker_instance_id")
        .and_then(Json::as_str)
        != Some(instance_id)
    {
        return refuse(409, "Execution worker instance changed");
    }
    let action = match object.get("action").and_then(Json::as_str) {
        Some(action) if ACTIONS.contains(&action) => action.to_string(),
        _ => return refuse(422, "Invalid maintenance action"),
    };
    let operation_id = match object.get("operation_id").and_then(Json::as_str) {
        Some(operation) if is_canonical_uuid(operation) => operation.to_string(),
        _ => return refuse(422, "Operation ID must be a canonical UUID"),
    };
    let lease_id = if action == "acquire" {
        if object.contains_key("lease_id") {
            return refuse(422, "Acquire must not supply a lease ID");
        }
        None
    } else {
        match object.get("lease_id").and_then(Json::as_str) {
            Some(lease)
                if (1..=128).contains(&lease.chars().count())
                    && lease
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                Some(lease.to_string())
            }
            _ => return refuse(422, "Maintenance requires a valid lease ID"),
        }
    };
    let lifetime = match object.get("lifetime_seconds") {
        None => 120,
        Some(Json::Int(seconds)) if (30..=300).contains(seconds) => *seconds as i64,
        Some(_) => return refuse(422, "Maintenance lifetime must be 30 to 300 seconds"),
    };
    Ok(Command::Maintenance {
        action,
        operation_id,
        lease_id,
        lifetime,
    })
}

/// `_respond`: the compact JSON reply with the control headers; a body over
/// 64 KiB or containing the token becomes a 500.
pub(crate) fn respond(status: u16, value: &Json, token: &str) -> Reply {
    let content = encode_compact(value)
        .ok()
        .filter(|content| content.len() <= MAX_RESPONSE_BYTES)
        .filter(|content| {
            !content
                .windows(token.len())
                .any(|window| window == token.as_bytes())
        });
    let (status, content) = match content {
        Some(content) => (status, content),
        None => (
            500,
            br#"{"detail":"Execution control response unavailable"}"#.to_vec(),
        ),
    };
    let mut reply = Reply::json(status, content);
    reply
        .headers
        .push(("cache-control".to_string(), "no-store".to_string()));
    reply
        .headers
        .push(("x-content-type-options".to_string(), "nosniff".to_string()));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_uuids_only() {
        assert!(is_canonical_uuid("85efcaaf-5f93-5352-b00d-95a2551e6a7c"));
        assert!(!is_canonical_uuid("85EFCAAF-5f93-5352-b00d-95a2551e6a7c"));
        assert!(!is_canonical_uuid("85efcaaf5f935352b00d95a2551e6a7c"));
        assert!(!is_canonical_uuid("{85efcaaf-5f93-5352-b00d-95a2551e6a7c}"));
    }

    #[test]
    fn body_json_refusals() {
        assert_eq!(
            parse_body(br#"{"a":1,"a":2}"#).unwrap_err().1,
            "Duplicate JSON field"
        );
        assert_eq!(
            parse_body(br#"{"a":NaN}"#).unwrap_err().1,
            "Invalid JSON number"
        );
        assert_eq!(
            parse_body(br#"{"a":-Infinity}"#).unwrap_err().1,
            "Invalid JSON number"
        );
        assert_eq!(
            parse_body(b"\xef\xbb\xbf{}").unwrap_err().1,
            "Invalid execution control JSON"
        );
        assert_eq!(
            parse_body(b"{").unwrap_err().1,
            "Invalid execution control JSON"
        );
        assert!(parse_body(br#"{"a":[1.5]}"#).is_ok());
    }

    #[test]
    fn replies_never_carry_the_token() {
        let token = "ab".repeat(32);
        let leaked = Json::from(token.as_str());
        let reply = respond(200, &leaked, &token);
        assert_eq!(reply.status, 500);
        assert_eq!(
            reply.body,
            br#"{"detail":"Execution control response unavailable"}"#
        );
    }
}

//! The prepared-release path of a managed update (`update_preparation.
//! verify_prepared_status` and `execution_preparation.validate_prepared`).
//!
//! A preparation run staged and installed the candidate's dependencies while
//! agents kept working, and left a receipt: the verified archive's source
//! inventory plus the complete staged tree. Before activating it, the runner
//! re-verifies the signed envelope the server admitted, the receipt's digest,
//! and every byte of the staged tree against the receipt, read-only.

mod inventory;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::release::{ReleaseManifest, ReleaseTrust};
use agents_common::{
    check_binding, directory_binding, normalize_path, preparation_path, Error, Result,
};
use python_compat::{
    is_lower_hex,
    json::{parse_json_unique, Json, JsonObject},
    str_or_empty, ErrorClass,
};

use crate::install_root;
use inventory::{
    check_file, inventory_tree, read_checked, source_inventory, CheckFailure, FileRefusal,
    FileRules,
};

/// `execution_preparation.MAX_RECEIPT_BYTES`.
pub(crate) const MAX_RECEIPT_BYTES: u64 = 32 * 1024 * 1024;
/// Longest `manifest_base64` of a prepared envelope (`MAX_METADATA_BYTES * 2`).
const MAX_ENVELOPE_MANIFEST_CHARS: usize = 2_000_000;

/// A verified prepared release, ready for install.sh's `--activate-prepared`.
#[derive(Debug, Clone)]
pub(crate) struct PreparedRelease {
    /// The retained candidate release directory (`<root>/releases/<name>`).
    pub candidate: PathBuf,
    /// The receipt (`<root>/.prepared-receipts/<preparation id>.json`).
    pub receipt: PathBuf,
}

/// What `verify_prepared_status` proved: the signed manifest, and the staged
/// release unless the preparation fell back to the legacy installer.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedPreparation {
    /// The manifest of the admitted signed envelope.
    pub manifest: ReleaseManifest,
    /// `None` for a `legacy` preparation (no staged candidate).
    pub prepared: Option<PreparedRelease>,
}

impl PreparedRelease {
    /// `update_recovery.activation_intent` for this candidate under
    /// `AGENTS_SERVER_INSTALL_DIR` (taken as given, not resolved): what lets
    /// a later `--recover-only` run resume this exact activation.
    pub(crate) fn activation_intent(
        &self,
        version: &str,
        manifest: &ReleaseManifest,
        update_id: &str,
        server_identity: &str,
    ) -> Result<JsonObject> {
        let root = std::env::var_os("AGENTS_SERVER_INSTALL_DIR")
            .map(PathBuf::from)
            .ok_or_else(missing_install_dir)?;
        let api_contract = manifest
            .api_contract_version()
            .ok_or_else(|| key_error("api_contract_version"))?;
        agents_common::activation_intent(
            &root,
            &self.candidate,
            version,
            api_contract,
            update_id,
            server_identity,
        )
    }
}

/// `KeyError('AGENTS_SERVER_INSTALL_DIR')` as Python words it.
pub(crate) fn missing_install_dir() -> Error {
    key_error("AGENTS_SERVER_INSTALL_DIR")
}

/// Python's `KeyError(name)`, whose text is the quoted key.
fn key_error(name: &str) -> Error {
    Error::new(ErrorClass::Value, format!("'{name}'"))
}

/// Checks a prepared (pre-downloaded) candidate the status row names against
/// its signed receipt and its files before the runner installs it instead of
/// downloading. Ports `verify_prepared_status(status, root=..., public_key)`.
pub(crate) fn verify_prepared_update(
    status: &JsonObject,
    trust: &ReleaseTrust,
) -> Result<VerifiedPreparation> {
    let root = install_root()?;
    let field = |name: &str| status.get(name).unwrap_or(&Json::Null);
    let prepared = field("_prepared_update").as_object().filter(|prepared| {
        prepared.get("preparation_id").unwrap_or(&Json::Null) == field("preparation_id")
    });
    let Some(prepared) = prepared else {
        return Err(Error::value(
            "Prepared update is not bound to its pending intent",
        ));
    };
    let (manifest_text, signature_text) = prepared_envelope(prepared.get("envelope"))?;
    let manifest_bytes = b64decode(manifest_text)?;
    let signature = b64decode(signature_text)?;
    let target_version = status
        .get("target_version")
        .ok_or_else(|| key_error("target_version"))?;
    let track = status.get("track").ok_or_else(|| key_error("track"))?;
    // A non-string pin can never equal a manifest version, as in Python.
    let expected_version = (!target_version.is_null()).then(|| str_or_empty(target_version));
    let manifest = trust.verify_manifest(
        &manifest_bytes,
        &signature,
        expected_version.as_deref(),
        &str_or_empty(track),
        true,
    )?;
    let preparation_id = status
        .get("preparation_id")
        .ok_or_else(|| key_error("preparation_id"))?;
    let preparation_id = preparation_directory(&root, preparation_id)?;
    match prepared.get("mode").and_then(Json::as_str) {
        Some("legacy") => {
            return Ok(VerifiedPreparation {
                manifest,
                prepared: None,
            })
        }
        Some("prepared") => {}
        _ => return Err(Error::value("Unknown prepared update mode")),
    }
    let receipt = root
        .join(".prepared-receipts")
        .join(format!("{preparation_id}.json"));
    if prepared.get("receipt_sha256") != Some(&Json::from(receipt_digest(&receipt)?)) {
        return Err(Error::value("Prepared candidate receipt changed"));
    }
    let api_contract = match manifest.document().get("api_contract_version") {
        Some(Json::Int(contract)) => *contract,
        Some(Json::Bool(flag)) => i128::from(*flag),
        Some(Json::Str(text)) => python_compat::python_int(text).ok_or_else(|| {
            Error::value(format!("invalid literal for int() with base 10: '{text}'"))
        })?,
        Some(Json::Float(number)) if number.is_finite() => number.trunc() as i128,
        Some(_) => return Err(Error::value("invalid preparation API contract")),
        None => return Err(key_error("api_contract_version")),
    };
    let candidate = validate_prepared(
        &root,
        manifest.version(),
        api_contract,
        manifest.archive_sha256().unwrap_or_default(),
        &receipt,
    )?;
    Ok(VerifiedPreparation {
        manifest,
        prepared: Some(PreparedRelease { candidate, receipt }),
    })
}

/// The admitted envelope: exactly `manifest_base64` (at most 2,000,000
/// characters) and `signature_base64` (88 characters), both text.
fn prepared_envelope(envelope: Option<&Json>) -> Result<(&str, &str)> {
    let invalid = || Error::value("Prepared update signed envelope is invalid");
    let envelope = envelope.and_then(Json::as_object).ok_or_else(invalid)?;
    if envelope.len() != 2 {
        return Err(invalid());
    }
    let manifest = envelope.get("manifest_base64").and_then(Json::as_str);
    let signature = envelope.get("signature_base64").and_then(Json::as_str);
    match (manifest, signature) {
        (Some(manifest), Some(signature))
            if manifest.chars().count() <= MAX_ENVELOPE_MANIFEST_CHARS
                && signature.chars().count() == 88 =>
        {
            Ok((manifest, signature))
        }
        _ => Err(invalid()),
    }
}

/// A receipt field in base64, decoded as `base64.b64decode(text,
/// validate=True)` decodes it (Python's leniencies included).
fn b64decode(text: &str) -> Result<Vec<u8>> {
    python_compat::base64::b64decode_validate(text)
        .ok_or_else(|| Error::value("Invalid base64-encoded string"))
}

/// `update_preparation.preparation_directory(root, id)`: the id must be 32
/// lowercase hex digits, and the root, `.update-preparations` and the
/// preparation directory must be link-free directories we own without
/// group/other write. Returns the id.
fn preparation_directory(root: &Path, preparation_id: &Json) -> Result<String> {
    let id = preparation_id
        .as_str()
        .filter(|id| is_lower_hex(id, 32))
        .ok_or_else(|| Error::value("Invalid preparation identity"))?;
    let parent = root.join(".update-preparations");
    for path in [root.to_path_buf(), parent.clone(), parent.join(id)] {
        preparation_owned_directory(&path)?;
    }
    Ok(id.to_string())
}

/// A preparation directory the runner may trust: absolute, link-free, ours,
/// not writable by others. Ports `update_preparation._owned_directory`.
fn preparation_owned_directory(path: &Path) -> Result<()> {
    if !path.is_absolute() || normalize_path(path).ok().as_deref() != Some(path) {
        return Err(Error::value(
            "Preparation paths must be absolute and contain no links",
        ));
    }
    let info = std::fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    if !info.is_dir()
        || info.uid() != rustix::process::getuid().as_raw()
        || info.mode() & 0o022 != 0
    {
        return Err(Error::value("Preparation directory is not safely owned"));
    }
    Ok(())
}

/// `receipt_digest`: SHA-256 of a private (0600, single-link, ours) receipt
/// of at most 32 MiB that did not change while read.
fn receipt_digest(path: &Path) -> Result<String> {
    let data = check_file(path, &FileRules::receipt()).map_err(|failure| match failure {
        CheckFailure::Refused(FileRefusal::Unsafe) => {
            Error::value("Prepared candidate receipt is unsafe")
        }
        CheckFailure::Refused(FileRefusal::TooLarge) => {
            Error::value("Prepared candidate receipt exceeds its limit")
        }
        CheckFailure::Refused(FileRefusal::Changed) => {
            Error::value("Prepared candidate receipt changed while reading")
        }
        CheckFailure::Failed(error) => error,
    })?;
    Ok(data.sha256)
}

/// `validate_prepared`: every caller pin, the receipt and the complete
/// staged tree, without modifying anything. Returns the candidate.
fn validate_prepared(
    root: &Path,
    version: &str,
    api_contract: i128,
    archive_sha256: &str,
    receipt: &Path,
) -> Result<PathBuf> {
    let root = preparation_path(root)?;
    let receipt = preparation_path(receipt)?;
    check_pins(version, api_contract, archive_sha256)?;
    directory_binding(&root)?;
    let receipt_parent = receipt.parent().unwrap_or(Path::new("/"));
    if receipt_parent != root && receipt_parent != root.join(".prepared-receipts") {
        return Err(Error::value(
            "preparation receipt must be inside its installation",
        ));
    }
    private_owned_directory(receipt_parent)?;
    let value = read_private_json(&receipt)?;
    let field = |name: &str| value.get(name).unwrap_or(&Json::Null);
    const FIELDS: [&str; 9] = [
        "format",
        "root",
        "candidate",
        "version",
        "api_contract",
        "archive_sha256",
        "identities",
        "source_inventory",
        "runtime_inventory",
    ];
    let matches = value.len() == FIELDS.len()
        && FIELDS.iter().all(|name| value.contains_key(name))
        && field("format").as_int() == Some(1)
        && field("root") == &Json::from(root.to_string_lossy().into_owned())
        && field("version") == &Json::from(version)
        && field("api_contract").as_int() == Some(api_contract)
        && field("archive_sha256") == &Json::from(archive_sha256);
    if !matches {
        return Err(Error::value(
            "preparation receipt does not match the signed candidate",
        ));
    }
    let Some(candidate_text) = field("candidate").as_str() else {
        return Err(Error::value("preparation path must be text"));
    };
    let candidate = preparation_path(Path::new(candidate_text))?;
    check_candidate(&root, &candidate)?;
    let identities = field("identities").as_object().filter(|identities| {
        identities.len() == 3
            && ["root", "releases", "candidate"]
                .iter()
                .all(|key| identities.contains_key(key))
    });
    let Some(identities) = identities else {
        return Err(Error::value("invalid preparation directory identities"));
    };
    let bound = [
        ("root", root.clone()),
        ("releases", root.join("releases")),
        ("candidate", candidate.clone()),
    ];
    for (name, path) in &bound {
        check_binding(path, identities.get(name).unwrap_or(&Json::Null))?;
    }
    let source = source_inventory(field("source_inventory"))?;
    if Json::Object(inventory_tree(&candidate, &source)?) != *field("runtime_inventory") {
        return Err(Error::runtime("prepared runtime changed after preparation"));
    }
    check_release(&candidate, version, api_contract)?;
    for (name, path) in &bound {
        check_binding(path, identities.get(name).unwrap_or(&Json::Null))?;
    }
    Ok(candidate)
}

/// `_pins`: a publisher version (`X.Y.Z` or `X.Y.Z-beta.N`), a positive API
/// contract and a lowercase SHA-256.
fn check_pins(version: &str, api_contract: i128, archive_sha256: &str) -> Result<()> {
    if !is_publisher_version(version) {
        return Err(Error::value("invalid preparation version"));
    }
    if api_contract < 1 {
        return Err(Error::value("invalid preparation API contract"));
    }
    if !inventory::is_sha256(archive_sha256) {
        return Err(Error::value("invalid preparation archive digest"));
    }
    Ok(())
}

/// `[0-9]+\.[0-9]+\.[0-9]+(?:-beta\.[0-9]+)?`.
fn is_publisher_version(version: &str) -> bool {
    let (core, beta) = match version.split_once("-beta.") {
        Some((core, number)) => (core, Some(number)),
        None => (version, None),
    };
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|part| digits(part)) && beta.is_none_or(digits)
}

/// `_owned_directory(path, private=True)`: an owned directory of mode 0700.
fn private_owned_directory(path: &Path) -> Result<()> {
    directory_binding(path)?;
    let info = std::fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))?;
    if info.mode() & 0o7777 != 0o700 {
        return Err(Error::permission(
            "preparation directory is not safely owned",
        ));
    }
    Ok(())
}

/// `_candidate(root, candidate)`: the candidate is an owned directory
/// directly under the owned `<root>/releases`.
fn check_candidate(root: &Path, candidate: &Path) -> Result<()> {
    directory_binding(root)?;
    directory_binding(&root.join("releases"))?;
    if candidate.parent() != Some(root.join("releases").as_path()) {
        return Err(Error::value("candidate must be a direct retained release"));
    }
    directory_binding(candidate)?;
    Ok(())
}

/// `_json(path)`: a private receipt holding a JSON object without duplicate keys.
fn read_private_json(path: &Path) -> Result<JsonObject> {
    let file = read_checked(path, &FileRules::receipt().with_contents())?;
    match parse_json_unique(&file.contents, "duplicate preparation JSON field")? {
        Json::Object(object) => Ok(object),
        _ => Err(Error::value("preparation JSON must be an object")),
    }
}

/// `_check_release`: the candidate's `VERSION` and its single
/// `API_CONTRACT_VERSION = N` line in `agent_server.py` equal the pins.
fn check_release(candidate: &Path, version: &str, api_contract: i128) -> Result<()> {
    let rules = FileRules::source().with_contents();
    let version_file = read_checked(&candidate.join("VERSION"), &rules)?;
    let text = String::from_utf8(version_file.contents).map_err(|err| {
        Error::value(format!(
            "'utf-8' codec can't decode byte 0x{:02x} in position {}: invalid start byte",
            err.as_bytes()[err.utf8_error().valid_up_to()],
            err.utf8_error().valid_up_to()
        ))
    })?;
    if python_compat::strip(&text) != version {
        return Err(Error::value(
            "prepared runtime version differs from signed candidate",
        ));
    }
    let server = read_checked(&candidate.join("agent_server.py"), &rules)?;
    let contracts = inventory::api_contract_declarations(&server.contents);
    let declared = match contracts.as_slice() {
        [single] => Some(single.trim_start_matches('0')),
        _ => None,
    };
    let expected = api_contract.to_string();
    if declared.map(|digits| if digits.is_empty() { "0" } else { digits })
        != Some(expected.as_str())
    {
        return Err(Error::value(
            "prepared runtime API differs from signed candidate",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publisher_versions() {
        for good in ["1.0.7", "1.0.7-beta.5", "10.20.30-beta.0"] {
            assert!(is_publisher_version(good), "{good}");
        }
        for bad in [
            "1.0",
            "1.0.7-rc.1",
            "1.0.7-beta.",
            "1.0.7-beta.x",
            "v1.0.7",
            "1.0.7+b",
        ] {
            assert!(!is_publisher_version(bad), "{bad}");
        }
    }
}

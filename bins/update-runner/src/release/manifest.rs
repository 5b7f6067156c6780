//! Signed release manifests (`verify_manifest`) and the npm release envelope
//! (`verify_npm_release_envelope`).
//!
//! The Ed25519 signature covers the exact manifest bytes and is checked before
//! the JSON is parsed; the parsed manifest must then name an archive at the one
//! trusted location for its version, so a valid signature over an old or
//! foreign manifest cannot redirect a download.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::{Signature, Verifier as _};

use super::key::load_release_public_key;
use super::version::{normalized_release_track, release_track, version_is_valid};
use super::{ReleaseEndpoints, MAX_ARCHIVE_BYTES, MAX_NPM_MANIFEST_BYTES, NPM_PACKAGE_NAME};
use agents_common::{Error, Result};
use python_compat::{
    base64::b64decode_validate,
    json::{parse_json, Json, JsonObject},
};

/// Message of a manifest whose signature does not verify. Python raises
/// `InvalidSignature`, whose text is empty; the port names the failure.
pub const INVALID_SIGNATURE_MESSAGE: &str = "release manifest signature is invalid";

/// Length bound of `manifest_base64` in an npm envelope: the base64 length of
/// `MAX_NPM_MANIFEST_BYTES`.
const MAX_NPM_ENVELOPE_MANIFEST_CHARS: usize = MAX_NPM_MANIFEST_BYTES.div_ceil(3) * 4;

/// The trust anchors of every release decision: the public key file and the
/// endpoints that define the trusted archive locations.
#[derive(Debug, Clone)]
pub struct ReleaseTrust {
    /// `release-public-key.pem`, read afresh at each verification as Python does.
    pub public_key: PathBuf,
    /// Where releases live; archive URLs must sit under these prefixes.
    pub endpoints: ReleaseEndpoints,
}

/// A manifest whose signature, version, track and archive location verified.
///
/// Keeps the whole signed document (unknown keys included) because later
/// steps read fields such as `api_contract_version` and `track` from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseManifest {
    document: JsonObject,
    version: String,
    schema: i128,
}

impl ReleaseManifest {
    /// The signed document as parsed.
    pub fn document(&self) -> &JsonObject {
        &self.document
    }

    /// The release version (`version`), already checked against the pattern.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The manifest schema: 1 (GitHub release asset) or 2 (npm package).
    pub fn schema(&self) -> i128 {
        self.schema
    }

    /// True for a schema-2 manifest, whose archive is the npm package tarball.
    pub fn is_npm(&self) -> bool {
        self.schema == 2
    }

    fn archive_field(&self, name: &str) -> Option<&Json> {
        self.document
            .get("archive")
            .and_then(Json::as_object)
            .and_then(|archive| archive.get(name))
    }

    /// `archive.name`: the file name the archive is saved under.
    pub fn archive_name(&self) -> String {
        self.archive_field("name")
            .map(python_compat::str_or_empty)
            .unwrap_or_default()
    }

    /// `archive.url`: the trusted location the archive is downloaded from.
    pub fn archive_url(&self) -> String {
        self.archive_field("url")
            .map(python_compat::str_or_empty)
            .unwrap_or_default()
    }

    /// `archive.sha256` exactly as signed (case preserved; `None` when the
    /// signed value is not a string, which no download can then match).
    pub fn archive_sha256(&self) -> Option<&str> {
        self.archive_field("sha256").and_then(Json::as_str)
    }

    /// `archive.size` when it is an exact integer (always, for schema 2).
    pub fn archive_size(&self) -> Option<i128> {
        self.archive_field("size").and_then(Json::as_int)
    }

    /// `npm.integrity` (`sha512-<base64>`) of a schema-2 manifest.
    pub fn npm_integrity(&self) -> Option<&str> {
        self.document
            .get("npm")
            .and_then(|npm| npm.get("integrity"))
            .and_then(Json::as_str)
    }

    /// `api_contract_version` when it is an exact integer (always, for schema 2).
    pub fn api_contract_version(&self) -> Option<i128> {
        self.document
            .get("api_contract_version")
            .and_then(Json::as_int)
    }
}

impl ReleaseTrust {
    /// Trust anchored in `public_key` with the endpoints from the environment.
    pub fn new(public_key: impl Into<PathBuf>, endpoints: ReleaseEndpoints) -> Self {
        ReleaseTrust {
            public_key: public_key.into(),
            endpoints,
        }
    }

    /// The original's `verify_manifest`: signature over the raw bytes first, then
    /// the version, track and pin, the metadata consistency, the schema, the
    /// npm identity for schema 2, and the trusted archive name, location and
    /// checksum format. Every refusal carries the original's message.
    pub fn verify_manifest(
        &self,
        manifest_bytes: &[u8],
        signature: &[u8],
        expected_version: Option<&str>,
        track: &str,
        allow_npm: bool,
    ) -> Result<ReleaseManifest> {
        let track = normalized_release_track(Some(track))?;
        let key = load_release_public_key(&self.public_key)?;
        let signature = Signature::from_slice(signature)
            .map_err(|_| Error::runtime(INVALID_SIGNATURE_MESSAGE))?;
        // Cofactorless `verify`: the acceptance of OpenSSL's pure Ed25519,
        // which Python's `cryptography` uses.
        key.verify(manifest_bytes, &signature)
            .map_err(|_| Error::runtime(INVALID_SIGNATURE_MESSAGE))?;
        let Json::Object(document) = parse_json(manifest_bytes)? else {
            return Err(Error::runtime("release manifest must be a JSON object"));
        };
        let version = document
            .get("version")
            .map(python_compat::str_or_empty)
            .unwrap_or_default();
        if !version_is_valid(&version) {
            return Err(Error::runtime(
                "release manifest contains an invalid version",
            ));
        }
        let actual_track = release_track(&version);
        if actual_track != track {
            return Err(Error::runtime(format!(
                "release manifest is not on the requested {track} track"
            )));
        }
        if expected_version.is_some_and(|expected| expected != version) {
            return Err(Error::runtime(
                "release manifest version does not match its immutable release tag",
            ));
        }
        let expected_prerelease = actual_track == "beta";
        if !in_none_or(document.get("prerelease"), |value| {
            python_compat::equals_bool(value, expected_prerelease)
        })? {
            return Err(Error::runtime(
                "release manifest prerelease metadata is inconsistent",
            ));
        }
        if !in_none_or(document.get("track"), |value| {
            value.as_str() == Some(actual_track)
        })? {
            return Err(Error::runtime(
                "release manifest track metadata is inconsistent",
            ));
        }
        let Some(archive) = document.get("archive").and_then(Json::as_object) else {
            return Err(Error::runtime(
                "release manifest is missing archive metadata",
            ));
        };
        let schema = match document.get("schema") {
            None => 1,
            Some(value) => value.as_int().unwrap_or(0),
        };
        if !(schema == 1 || (allow_npm && schema == 2)) {
            return Err(Error::runtime("release manifest schema is not supported"));
        }
        let (expected_name, expected_prefix) = if schema == 2 {
            check_npm_identity(&document, archive, &version, actual_track)?;
            let Some(base) = self.endpoints.npm_registry_base.as_deref() else {
                return Err(Error::runtime(format!(
                    "npm release registry location is not configured; set {}",
                    super::NPM_REGISTRY_BASE_ENV
                )));
            };
            (format!("server-{version}.tgz"), base.to_string())
        } else {
            (
                format!("agents-server-{version}.tar.gz"),
                format!("{}/download/v{version}/", self.endpoints.release_base),
            )
        };
        let archive_name = archive
            .get("name")
            .map(python_compat::str_or_empty)
            .unwrap_or_default();
        let archive_url = archive
            .get("url")
            .map(python_compat::str_or_empty)
            .unwrap_or_default();
        let archive_sha = archive
            .get("sha256")
            .map(python_compat::str_or_empty)
            .unwrap_or_default()
            .to_lowercase();
        if archive_name != expected_name
            || archive_url != format!("{expected_prefix}{expected_name}")
        {
            return Err(Error::runtime("release archive location is not trusted"));
        }
        if !python_compat::is_lower_hex(archive_sha, 64) {
            return Err(Error::runtime("release archive checksum is invalid"));
        }
        Ok(ReleaseManifest {
            document,
            version,
            schema,
        })
    }

    /// The original's `verify_npm_release_envelope`: the server hands the runner
    /// the publisher's exact descriptor bytes and signature in base64; only a
    /// verified schema-2 npm descriptor is accepted.
    pub fn verify_npm_release_envelope(
        &self,
        envelope: Option<&Json>,
        expected_version: Option<&str>,
    ) -> Result<ReleaseManifest> {
        let invalid = || Error::runtime("signed npm release envelope is invalid");
        let Some(envelope) = envelope.and_then(Json::as_object) else {
            return Err(invalid());
        };
        if envelope.len() != 2
            || !envelope.contains_key("manifest_base64")
            || !envelope.contains_key("signature_base64")
        {
            return Err(invalid());
        }
        let encoded = envelope.get("manifest_base64").and_then(Json::as_str);
        let signature = envelope.get("signature_base64").and_then(Json::as_str);
        let (Some(encoded), Some(signature)) = (encoded, signature) else {
            return Err(bounds_error());
        };
        let encoded_chars = encoded.chars().count();
        if !(1..=MAX_NPM_ENVELOPE_MANIFEST_CHARS).contains(&encoded_chars)
            || signature.chars().count() != 88
        {
            return Err(bounds_error());
        }
        let payload = b64decode_validate(encoded).ok_or_else(invalid)?;
        let signature = b64decode_validate(signature).ok_or_else(invalid)?;
        let candidate = parse_json(&payload).map_err(|_| invalid())?;
        if payload.len() > MAX_NPM_MANIFEST_BYTES || signature.len() != 64 {
            return Err(invalid());
        }
        let Some(candidate) = candidate.as_object() else {
            return Err(invalid());
        };
        let track = candidate
            .get("track")
            .map(python_compat::str_or_empty)
            .unwrap_or_default();
        let manifest =
            self.verify_manifest(&payload, &signature, expected_version, &track, true)?;
        if manifest.schema != 2
            || manifest.document.get("distribution").and_then(Json::as_str) != Some("npm")
        {
            return Err(Error::runtime(
                "a signed npm release descriptor is required",
            ));
        }
        Ok(manifest)
    }

    /// The public key path, for messages and callers that re-verify.
    pub fn public_key(&self) -> &Path {
        &self.public_key
    }
}

fn bounds_error() -> Error {
    Error::runtime("signed npm release envelope exceeds its bounds")
}

/// Schema-2 rules: npm distribution on the declared track, the exact package
/// name and version, a canonical `sha512-` integrity of 64 bytes, a bounded
/// archive size and a positive API contract.
fn check_npm_identity(
    document: &JsonObject,
    archive: &JsonObject,
    version: &str,
    actual_track: &str,
) -> Result<()> {
    let npm = document.get("npm").and_then(Json::as_object);
    let identity_trusted = document.get("distribution").and_then(Json::as_str) == Some("npm")
        && document.get("track").and_then(Json::as_str) == Some(actual_track)
        && npm.is_some_and(|npm| {
            npm.get("name").and_then(Json::as_str) == Some(NPM_PACKAGE_NAME)
                && npm.get("version").and_then(Json::as_str) == Some(version)
        })
        && !version.contains('+');
    let Some(npm) = npm.filter(|_| identity_trusted) else {
        return Err(Error::runtime(
            "release npm package identity is not trusted",
        ));
    };
    let integrity_valid = npm
        .get("integrity")
        .and_then(Json::as_str)
        .and_then(|integrity| integrity.strip_prefix("sha512-"))
        .is_some_and(|encoded| {
            let engine = base64::engine::general_purpose::STANDARD;
            engine
                .decode(encoded)
                .is_ok_and(|digest| digest.len() == 64 && engine.encode(&digest) == encoded)
        });
    if !integrity_valid {
        return Err(Error::runtime("release npm integrity is invalid"));
    }
    let size_valid = archive
        .get("size")
        .and_then(Json::as_int)
        .is_some_and(|size| (1..=i128::from(MAX_ARCHIVE_BYTES)).contains(&size));
    if !size_valid {
        return Err(Error::runtime("release npm archive size is invalid"));
    }
    if document
        .get("api_contract_version")
        .and_then(Json::as_int)
        .is_none_or(|contract| contract < 1)
    {
        return Err(Error::runtime("release API contract is invalid"));
    }
    Ok(())
}

/// Python's `value in {None, expected}`: absent and `null` pass, a hashable
/// value passes when it equals `expected`, and a list or object raises
/// `TypeError: unhashable type`.
fn in_none_or(value: Option<&Json>, equals: impl Fn(&Json) -> bool) -> Result<bool> {
    match value {
        None | Some(Json::Null) => Ok(true),
        Some(Json::Array(_)) => Err(Error::runtime("unhashable type: 'list'")),
        Some(Json::Object(_)) => Err(Error::runtime("unhashable type: 'dict'")),
        Some(value) => Ok(equals(value)),
    }
}

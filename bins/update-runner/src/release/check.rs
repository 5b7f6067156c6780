//! Which signed release an update installs (`check_release`): the pinned
//! version's immutable manifest, or the newest signed release on a track, and
//! the original's reading of a rejected metadata request as rate limiting
//! (`release_rate_limit_delay`).
//!
//! A `Retry-After` date is read as email.utils reads it
//! ([`python_compat::email_utils`]), in the local zone when it names none.

use std::time::{SystemTime, UNIX_EPOCH};

use super::download::{download_bytes, FetchError, HttpStatusError};
use super::manifest::{ReleaseManifest, ReleaseTrust};
use super::version::{
    normalized_release_track, release_candidates, release_track, version_is_valid,
};
use super::MAX_METADATA_BYTES;
use agents_common::Error;
use python_compat::{json::parse_json, ErrorClass, Exception};

/// `ReleaseRateLimitedError`'s message: the release host asked us to wait.
pub const RELEASE_RATE_LIMITED_MESSAGE: &str =
    "GitHub temporarily limited update requests. Try again shortly.";

/// The delay assumed when a rate-limited response names no usable one.
const DEFAULT_RATE_LIMIT_DELAY_SECONDS: u64 = 60;

/// Why no verified manifest came back, keeping the original's exception classes
/// apart: the server treats "unavailable" and "rate limited" as ordinary
/// states of a check, and every other failure as an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseCheckError {
    /// `ReleaseUnavailableError`: nothing signed is published for the request.
    Unavailable(String),
    /// `ReleaseRateLimitedError`: retry after this many seconds (at least 1).
    RateLimited {
        /// Seconds to wait before the next metadata request.
        retry_after_seconds: u64,
    },
    /// An `HTTPError` that is neither "not found" nor rate limiting.
    Status(HttpStatusError),
    /// Any other failure, with the original's message and class.
    Failed(Error),
}

impl std::fmt::Display for ReleaseCheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReleaseCheckError::Unavailable(message) => f.write_str(message),
            ReleaseCheckError::RateLimited { .. } => f.write_str(RELEASE_RATE_LIMITED_MESSAGE),
            ReleaseCheckError::Status(status) => status.fmt(f),
            ReleaseCheckError::Failed(error) => error.fmt(f),
        }
    }
}

impl From<ReleaseCheckError> for Error {
    /// The exception as the runner reports it: both release errors are
    /// `RuntimeError`s, an `HTTPError` is an `OSError` (`HTTP Error N: reason`).
    fn from(error: ReleaseCheckError) -> Self {
        match error {
            ReleaseCheckError::Unavailable(message) => Error::runtime(message),
            ReleaseCheckError::RateLimited { .. } => Error::runtime(RELEASE_RATE_LIMITED_MESSAGE),
            ReleaseCheckError::Status(status) => Error::new(ErrorClass::Os, status.to_string()),
            ReleaseCheckError::Failed(error) => error,
        }
    }
}

impl From<Error> for ReleaseCheckError {
    fn from(error: Error) -> Self {
        ReleaseCheckError::Failed(error)
    }
}

impl From<FetchError> for ReleaseCheckError {
    fn from(error: FetchError) -> Self {
        match error {
            FetchError::Status(status) => ReleaseCheckError::Status(status),
            FetchError::Failed(error) => ReleaseCheckError::Failed(error),
        }
    }
}

type CheckResult<T> = std::result::Result<T, ReleaseCheckError>;

/// The original's `check_release`: with `expected_version`, that exact signed
/// release (or, with `require_latest`, the newest signed release on `track`,
/// which must be the pin); without it, the newest signed release on `track`.
/// A rejected request that carries rate-limit evidence becomes
/// [`ReleaseCheckError::RateLimited`].
pub fn check_release(
    trust: &ReleaseTrust,
    track: &str,
    expected_version: Option<&str>,
    require_latest: bool,
) -> CheckResult<ReleaseManifest> {
    find_release(trust, track, expected_version, require_latest).map_err(|error| match error {
        ReleaseCheckError::Status(status) => match release_rate_limit_delay(&status, unix_now()) {
            Some(delay) => ReleaseCheckError::RateLimited {
                retry_after_seconds: delay.max(1),
            },
            None => ReleaseCheckError::Status(status),
        },
        other => other,
    })
}

/// The original's `_check_release`, before rate limiting is recognised.
fn find_release(
    trust: &ReleaseTrust,
    track: &str,
    expected_version: Option<&str>,
    require_latest: bool,
) -> CheckResult<ReleaseManifest> {
    let track = normalized_release_track(Some(track))?;
    if let Some(expected) = expected_version {
        let version = python_compat::strip(expected);
        if !version_is_valid(version) {
            return Err(Error::runtime("expected release version is invalid").into());
        }
        if release_track(version) != track {
            return Err(Error::runtime(format!(
                "expected release {version} is not on the requested {track} track"
            ))
            .into());
        }
        if require_latest {
            // Discovery verified the newest manifest at its immutable tag URL;
            // return that document rather than fetching a mutable alias.
            let latest = check_release(trust, track, None, false)?;
            if latest.version() != version {
                return Err(Error::runtime(format!(
                    "requested {track} release {version} is no longer the latest signed \
                     {track} release {}",
                    latest.version()
                ))
                .into());
            }
            return Ok(latest);
        }
        let Some((manifest, signature)) = fetch_signed_manifest(trust, version)? else {
            return Err(ReleaseCheckError::Unavailable(format!(
                "Signed {track} AgentsServer release {version} is unavailable."
            )));
        };
        return Ok(trust.verify_manifest(&manifest, &signature, Some(version), track, false)?);
    }

    let releases = match download_bytes(&trust.endpoints.releases_api_url, MAX_METADATA_BYTES) {
        Ok(releases) => releases,
        Err(FetchError::Status(status)) if status.code == 404 => {
            return Err(ReleaseCheckError::Unavailable(
                "No signed AgentsServer release has been published yet.".to_string(),
            ));
        }
        // Any other rejection is reported, never retried as a burst of requests.
        Err(error) => return Err(error.into()),
    };
    let releases = parse_json(&releases).map_err(|error| {
        if is_unicode_error(&error) {
            error.into()
        } else {
            Error::runtime("GitHub releases response is invalid JSON")
        }
    })?;
    let candidates = release_candidates(&releases, track)?;
    for version in &candidates {
        if let Some((manifest, signature)) = fetch_signed_manifest(trust, version)? {
            // A published manifest that fails verification is an error, not
            // a reason to fall back to an older release.
            return Ok(trust.verify_manifest(
                &manifest,
                &signature,
                Some(version),
                track,
                false,
            )?);
        }
    }
    Err(ReleaseCheckError::Unavailable(format!(
        "No signed {track} AgentsServer release is available."
    )))
}

/// The manifest and detached signature of tag `v<version>`; `None` when
/// either answers 404.
fn fetch_signed_manifest(
    trust: &ReleaseTrust,
    version: &str,
) -> CheckResult<Option<(Vec<u8>, Vec<u8>)>> {
    let fetch = |url: String| match download_bytes(&url, MAX_METADATA_BYTES) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(FetchError::Status(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(ReleaseCheckError::from(error)),
    };
    let Some(manifest) = fetch(trust.endpoints.manifest_url(version))? else {
        return Ok(None);
    };
    let Some(signature) = fetch(trust.endpoints.signature_url(version))? else {
        return Ok(None);
    };
    Ok(Some((manifest, signature)))
}

/// `json.loads` raises `UnicodeDecodeError` (not `JSONDecodeError`) for bytes
/// that are not text; the original lets that one through unchanged.
fn is_unicode_error(error: &Exception) -> bool {
    error.class() == ErrorClass::UnicodeDecode
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

/// The original's `release_rate_limit_delay` at `now_unix_seconds`: `None` unless
/// the response is a 429, or a 403 with `x-ratelimit-remaining: 0` or a
/// `Retry-After`; otherwise the largest positive delay (whole seconds,
/// rounded up) named by `Retry-After` (seconds or an HTTP date) and
/// `x-ratelimit-reset` (Unix time), or 60 when neither names one.
pub fn release_rate_limit_delay(status: &HttpStatusError, now_unix_seconds: f64) -> Option<u64> {
    // `{name.lower(): value for ...}` keeps the last of repeated headers.
    let header = |name: &str| {
        status
            .headers
            .iter()
            .rev()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let limited = status.code == 429
        || (status.code == 403
            && (header("x-ratelimit-remaining") == Some("0") || header("retry-after").is_some()));
    if !limited {
        return None;
    }
    let mut delays = Vec::new();
    let retry_after = header("retry-after").unwrap_or("");
    if let Some(seconds) = python_compat::float(retry_after) {
        delays.push(seconds);
    } else if let Some(date) = python_compat::email_utils::parsedate_to_timestamp(retry_after) {
        delays.push(date - now_unix_seconds);
    }
    if let Some(reset) = python_compat::float(header("x-ratelimit-reset").unwrap_or("")) {
        delays.push(reset - now_unix_seconds);
    }
    let longest = delays
        .into_iter()
        .filter(|delay| delay.is_finite() && *delay > 0.0)
        .map(|delay| delay.ceil())
        .fold(None, |longest: Option<f64>, delay| {
            Some(longest.map_or(delay, |known| known.max(delay)))
        });
    // `as` saturates: a delay beyond u64 is "forever" either way.
    Some(longest.map_or(DEFAULT_RATE_LIMIT_DELAY_SECONDS, |delay| delay as u64))
}

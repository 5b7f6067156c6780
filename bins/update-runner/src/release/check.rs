//! Which signed release an update installs (`check_release`): the pinned
//! version's immutable manifest, or the newest signed release on a track, and
//! the seed's reading of a rejected metadata request as rate limiting
//! (`release_rate_limit_delay`).
//!
//! A `Retry-After` date whose zone is `-0000` or a name email.utils does not
//! know is naive in Python, and `timestamp()` reads it in the local zone
//! (`TZ`, `/etc/localtime`); so does the port, through `mktime(3)`.

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

/// Why no verified manifest came back, keeping the seed's exception classes
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
    /// Any other failure, with the seed's message and class.
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

/// The seed's `check_release`: with `expected_version`, that exact signed
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

/// The seed's `_check_release`, before rate limiting is recognised.
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
/// that are not text; the seed lets that one through unchanged.
fn is_unicode_error(error: &Exception) -> bool {
    error.class() == ErrorClass::UnicodeDecode
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

/// The seed's `release_rate_limit_delay` at `now_unix_seconds`: `None` unless
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
    } else if let Some(date) = http_date_timestamp(retry_after) {
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

/// `parsedate_to_datetime(text).timestamp()` (email.utils' lenient RFC 2822
/// reader): `None` where Python raises `ValueError`.
fn http_date_timestamp(text: &str) -> Option<f64> {
    const MONTHS: [&str; 24] = [
        "jan",
        "feb",
        "mar",
        "apr",
        "may",
        "jun",
        "jul",
        "aug",
        "sep",
        "oct",
        "nov",
        "dec",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let mut data: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    if data.is_empty() {
        return None;
    }
    // A leading day name, with or without its comma, is skipped.
    if data[0].ends_with(',') || DAYS.contains(&data[0].to_lowercase().as_str()) {
        data.remove(0);
    } else if let Some(comma) = data[0].rfind(',') {
        data[0] = data[0][comma + 1..].to_string();
    }
    if data.len() == 3 {
        // RFC 850: `dd-mon-yy hh:mm:ss zone`.
        let stuff: Vec<String> = data[0].split('-').map(str::to_string).collect();
        if stuff.len() == 3 {
            let rest = data.split_off(1);
            data = stuff.into_iter().chain(rest).collect();
        }
    }
    if data.len() == 4 {
        let last = data[3].clone();
        let sign = last.find('+').or_else(|| last.find('-'));
        match sign {
            Some(index) if index > 0 => {
                data[3] = last[..index].to_string();
                data.push(last[index..].to_string());
            }
            _ => data.push(String::new()),
        }
    }
    if data.len() < 5 {
        return None;
    }
    let [mut dd, mut mm, mut yy, mut tm, mut tz] =
        <[String; 5]>::try_from(data[..5].to_vec()).ok()?;
    if dd.is_empty() || mm.is_empty() || yy.is_empty() {
        return None;
    }
    mm = mm.to_lowercase();
    if !MONTHS.contains(&mm.as_str()) {
        (dd, mm) = (mm, dd.to_lowercase());
        if !MONTHS.contains(&mm.as_str()) {
            return None;
        }
    }
    let month = MONTHS.iter().position(|name| *name == mm)? % 12 + 1;
    if dd.ends_with(',') {
        dd.pop();
    }
    if yy.find(':').is_some_and(|index| index > 0) {
        std::mem::swap(&mut yy, &mut tm);
    }
    if yy.ends_with(',') {
        yy.pop();
        if yy.is_empty() {
            return None;
        }
    }
    if !yy.chars().next()?.is_ascii_digit() {
        std::mem::swap(&mut yy, &mut tz);
    }
    if tm.ends_with(',') {
        tm.pop();
    }
    let mut clock: Vec<&str> = tm.split(':').collect();
    if clock.len() == 1 && tm.contains('.') {
        clock = tm.split('.').collect();
        if !(2..=3).contains(&clock.len()) {
            return None;
        }
    }
    let (hour, minute, second) = match clock.as_slice() {
        [hour, minute] => (*hour, *minute, "0"),
        [hour, minute, second] => (*hour, *minute, *second),
        _ => return None,
    };
    let int = |text: &str| python_compat::python_int(text);
    let mut year = int(&yy)?;
    let day = int(&dd)?;
    let (hour, minute, second) = (int(hour)?, int(minute)?, int(second)?);
    if year < 100 {
        year += if year > 68 { 1900 } else { 2000 };
    }
    let zone = zone_offset_seconds(&tz.to_uppercase());
    let month = month as i128;
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = (1..=9999).contains(&year)
        && (1..=month_days[(month - 1) as usize]).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second)
        && zone.is_none_or(|offset| offset.abs() < 86_400);
    if !valid {
        return None;
    }
    let Some(offset_seconds) = zone else {
        return local_timestamp(year, month, day, hour, minute, second);
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    Some(seconds as f64)
}

/// `datetime(...).timestamp()` of a naive date: the wall-clock time in the
/// local zone, daylight saving decided by the zone rules (`tm_isdst = -1`).
fn local_timestamp(
    year: i128,
    month: i128,
    day: i128,
    hour: i128,
    minute: i128,
    second: i128,
) -> Option<f64> {
    let field = |value: i128| libc::c_int::try_from(value).ok();
    // SAFETY: an all-zero `tm` is a valid value (its zone name pointer is
    // null, which mktime never reads); mktime only writes the struct we own.
    let mut broken_down: libc::tm = unsafe { std::mem::zeroed() };
    broken_down.tm_year = field(year - 1900)?;
    broken_down.tm_mon = field(month - 1)?;
    broken_down.tm_mday = field(day)?;
    broken_down.tm_hour = field(hour)?;
    broken_down.tm_min = field(minute)?;
    broken_down.tm_sec = field(second)?;
    broken_down.tm_isdst = -1;
    // SAFETY: `broken_down` is a valid, exclusively borrowed `tm`.
    let seconds = unsafe { libc::mktime(&mut broken_down) };
    // -1 is also a valid instant (one second before the epoch), which no
    // Retry-After date names; Python raises OverflowError where mktime fails.
    (seconds != -1).then_some(seconds as f64)
}

/// The zone of an RFC 2822 date in seconds east of UTC: the named zones
/// email.utils knows and `+hhmm`/`-hhmm`; `None` (a naive date) for `-0000`
/// and for anything else, as `_parsedate_tz` decides.
fn zone_offset_seconds(zone: &str) -> Option<i128> {
    let hhmm: i128 = match zone {
        "UT" | "UTC" | "GMT" | "Z" => 0,
        "AST" => -400,
        "ADT" => -300,
        "EST" => -500,
        "EDT" => -400,
        "CST" => -600,
        "CDT" => -500,
        "MST" => -700,
        "MDT" => -600,
        "PST" => -800,
        "PDT" => -700,
        other => match python_compat::python_int(other) {
            Some(0) if other.starts_with('-') => return None,
            Some(hhmm) => hhmm,
            None => return None,
        },
    };
    let sign = hhmm.signum();
    let magnitude = hhmm.abs();
    Some(sign * ((magnitude / 100) * 3600 + (magnitude % 100) * 60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_parse_like_python() {
        assert_eq!(python_compat::float(" 30 "), Some(30.0));
        assert_eq!(python_compat::float("1_000.5"), Some(1000.5));
        assert_eq!(python_compat::float("1e3"), Some(1000.0));
        assert!(python_compat::float("-inf").unwrap().is_infinite());
        assert!(python_compat::float("NaN").unwrap().is_nan());
        for bad in ["", "_1", "1_", "1__0", "0x10", "1 0", "٣"] {
            assert_eq!(python_compat::float(bad), None, "{bad}");
        }
    }

    #[test]
    fn http_dates_parse_like_email_utils() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let exact = 784_111_777.0;
        for (text, expected) in [
            ("Sun, 06 Nov 1994 08:49:37 GMT", exact),
            ("Sunday, 06-Nov-94 08:49:37 GMT", exact),
            ("06 Nov 1994 08:49:37 +0000", exact),
            ("Sun,06 Nov 1994 08:49:37 GMT", exact),
            ("Nov 06 1994 08:49:37 GMT", exact),
            ("06 Nov 1994 09:49:37 +0100", exact),
            ("06 Nov 1994 03:49:37 EST", exact),
            ("06 November 1994 08:49 GMT", exact - 37.0),
        ] {
            assert_eq!(http_date_timestamp(text), Some(expected), "{text}");
        }
        for bad in [
            "",
            "tomorrow",
            "32 Nov 1994 08:49:37 GMT",
            "06 Nov 1994 24:00:00 GMT",
            "06 Foo 1994 08:49:37",
        ] {
            assert_eq!(http_date_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }
}

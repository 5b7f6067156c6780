//! Release versions, tracks and SemVer precedence (`version_key` and friends).
//!
//! Python compares `version_key` tuples whose numbers are unbounded integers, so
//! numeric parts are kept as digit strings and compared by magnitude: a
//! publisher can never overflow the ordering with a long identifier.

use std::cmp::Ordering;

use agents_common::{Error, Result};
use python_compat::json::Json;

/// The two release tracks a managed update may follow.
pub const RELEASE_TRACKS: [&str; 2] = ["stable", "beta"];

/// True when `version` matches the original's `VERSION_PATTERN`
/// (`^[0-9]+\.[0-9]+\.[0-9]+(?:[-+][A-Za-z0-9.-]+)?$`, whole string).
///
/// Every trust decision starts here: tags, manifest versions and pins that fail
/// it are refused before anything else looks at them.
pub fn version_is_valid(version: &str) -> bool {
    let bytes = version.as_bytes();
    let mut position = 0;
    for part in 0..3 {
        if part > 0 {
            if bytes.get(position) != Some(&b'.') {
                return false;
            }
            position += 1;
        }
        let start = position;
        while bytes.get(position).is_some_and(u8::is_ascii_digit) {
            position += 1;
        }
        if position == start {
            return false;
        }
    }
    match bytes.get(position) {
        None => true,
        Some(b'-' | b'+') => {
            let rest = &bytes[position + 1..];
            !rest.is_empty()
                && rest
                    .iter()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-'))
        }
        Some(_) => false,
    }
}

/// True when the version (without build metadata) has a prerelease part, which
/// is what puts it on the beta track.
pub fn version_is_prerelease(version: &str) -> bool {
    version.split('+').next().unwrap_or("").contains('-')
}

/// The track a version belongs to: `beta` for prereleases, else `stable`.
pub fn release_track(version: &str) -> &'static str {
    if version_is_prerelease(version) {
        "beta"
    } else {
        "stable"
    }
}

/// The original's `normalized_release_track`: absent or empty means `stable`;
/// otherwise the stripped, lowercased value must be a known track.
pub fn normalized_release_track(track: Option<&str>) -> Result<&'static str> {
    let raw = track.unwrap_or("");
    let source = if raw.is_empty() { "stable" } else { raw };
    let value = python_compat::strip(source).to_lowercase();
    RELEASE_TRACKS
        .into_iter()
        .find(|known| *known == value)
        .ok_or_else(|| Error::value(format!("invalid release track: {raw}")))
}

/// One dot-separated prerelease identifier: numeric identifiers sort before
/// alphanumeric ones, exactly like Python's `(0, int)` / `(1, str)` tuples.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Identifier {
    Numeric(Number),
    Text(String),
}

/// An unbounded non-negative integer kept as its digits without leading zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Number(String);

impl Number {
    fn new(digits: &str) -> Self {
        let trimmed = digits.trim_start_matches('0');
        Number(trimmed.to_string())
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// SemVer precedence of a valid release version (the original's `version_key`).
///
/// Build metadata is ignored and leading zeros are accepted, so two different
/// strings can have equal keys, as in Python.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct VersionKey {
    major: Number,
    minor: Number,
    patch: Number,
    /// 0 for a prerelease, 1 for a release: a release outranks its prereleases.
    release: u8,
    identifiers: Vec<Identifier>,
}

/// Parse a version into its precedence key, refusing anything that does not
/// match the release pattern with the original's `ValueError`.
pub fn version_key(version: &str) -> Result<VersionKey> {
    if !version_is_valid(version) {
        return Err(Error::value(format!("invalid release version: {version}")));
    }
    let without_build = version.split('+').next().unwrap_or("");
    let (core, prerelease) = match without_build.split_once('-') {
        Some((core, prerelease)) => (core, Some(prerelease)),
        None => (without_build, None),
    };
    let mut numbers = core.split('.').map(Number::new);
    let (Some(major), Some(minor), Some(patch)) = (numbers.next(), numbers.next(), numbers.next())
    else {
        return Err(Error::value(format!("invalid release version: {version}")));
    };
    let identifiers = prerelease
        .map(|text| {
            text.split('.')
                .map(|part| {
                    if !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit()) {
                        Identifier::Numeric(Number::new(part))
                    } else {
                        Identifier::Text(part.to_string())
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(VersionKey {
        major,
        minor,
        patch,
        release: if prerelease.is_some() { 0 } else { 1 },
        identifiers,
    })
}

/// The original's `release_transition_allowed`: a managed update may move forward
/// on its track, or leave a prerelease for an older stable release on the
/// stable track (the explicit beta-to-stable channel switch).
pub fn release_transition_allowed(current: &str, target: &str, track: &str) -> Result<bool> {
    let track = normalized_release_track(Some(track))?;
    if release_track(target) != track {
        return Ok(false);
    }
    let target_key = version_key(target)?;
    let current_key = version_key(current)?;
    if target_key > current_key {
        return Ok(true);
    }
    Ok(target_key < current_key
        && track == "stable"
        && version_is_prerelease(current)
        && !version_is_prerelease(target))
}

/// Sort versions by descending precedence; ties (build metadata, leading
/// zeros) fall back to the text so the order is deterministic, where Python's
/// order of equal keys follows its randomised set iteration.
fn sort_descending(versions: &mut [String]) -> Result<()> {
    let mut keyed = versions
        .iter()
        .map(|version| Ok((version_key(version)?, version.clone())))
        .collect::<Result<Vec<_>>>()?;
    keyed.sort_by(|left, right| right.cmp(left));
    for (slot, (_, version)) in versions.iter_mut().zip(keyed) {
        *slot = version;
    }
    Ok(())
}

/// The original's `release_candidates`: versions of published, non-draft GitHub
/// releases on `track`, whose declared `prerelease` flag (when present) agrees
/// with the version, de-duplicated and newest first.
pub fn release_candidates(releases: &Json, track: &str) -> Result<Vec<String>> {
    let track = normalized_release_track(Some(track))?;
    let Some(releases) = releases.as_array() else {
        return Err(Error::runtime(
            "GitHub releases response must be a JSON array",
        ));
    };
    let mut candidates: Vec<String> = Vec::new();
    for release in releases {
        let Some(release) = release.as_object() else {
            continue;
        };
        if release.get("draft").and_then(Json::as_bool) == Some(true) {
            continue;
        }
        let tag = release.get("tag_name").map(python_compat::str_or_empty);
        let Some(version) = tag.as_deref().and_then(|tag| tag.strip_prefix('v')) else {
            continue;
        };
        if !version_is_valid(version) || release_track(version) != track {
            continue;
        }
        if let Some(declared) = release.get("prerelease").filter(|value| !value.is_null()) {
            if python_compat::truthy(declared) != version_is_prerelease(version) {
                continue;
            }
        }
        if !candidates.iter().any(|known| known == version) {
            candidates.push(version.to_string());
        }
    }
    sort_descending(&mut candidates)?;
    Ok(candidates)
}

/// Python's `release_versions_from_html`: release versions on `track` linked
/// from a GitHub releases HTML page.
pub fn release_versions_from_html(content: &[u8], track: &str) -> Result<Vec<String>> {
    let track = normalized_release_track(Some(track))?;
    let text = String::from_utf8_lossy(content);
    let prefix = format!("/{}/releases/tag/v", super::RELEASE_REPOSITORY);
    let mut versions: Vec<String> = Vec::new();
    let mut rest: &str = &text;
    while let Some(found) = rest.find(&prefix) {
        let after = &rest[found + prefix.len()..];
        let end = after
            .find(['"', '\'', '<', '>', '/', '?', '#'])
            .unwrap_or(after.len());
        let version = &after[..end];
        if !version.is_empty()
            && version_is_valid(version)
            && release_track(version) == track
            && !versions.iter().any(|known| known == version)
        {
            versions.push(version.to_string());
        }
        // The prefix cannot overlap itself, so searching on after it is exact.
        rest = &after[end..];
    }
    sort_descending(&mut versions)?;
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordered(versions: &[&str]) {
        for pair in versions.windows(2) {
            assert!(
                version_key(pair[0]).unwrap() < version_key(pair[1]).unwrap(),
                "{} < {}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn semver_precedence_matches_the_specification_examples() {
        ordered(&[
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
        ]);
        ordered(&["0.1.26-beta.66", "1.0.0-beta.1", "1.0.0"]);
    }

    #[test]
    fn numeric_identifiers_are_unbounded() {
        ordered(&[
            "1.0.0-beta.99999999999999999999999999999",
            "1.0.0-beta.100000000000000000000000000000",
            "99999999999999999999999999999.0.0",
            "100000000000000000000000000000.0.0",
        ]);
        assert_eq!(
            version_key("01.002.3").unwrap(),
            version_key("1.2.3").unwrap()
        );
        assert_eq!(
            version_key("1.2.3+a").unwrap(),
            version_key("1.2.3+b").unwrap()
        );
    }

    #[test]
    fn the_pattern_is_anchored() {
        for bad in [
            "",
            "1.2",
            "1.2.3.4",
            "v1.2.3",
            "1.2.3-",
            "1.2.3\n",
            "1.2.3-a_b",
            " 1.2.3",
        ] {
            assert!(!version_is_valid(bad), "{bad:?}");
            assert_eq!(
                version_key(bad).unwrap_err().message(),
                format!("invalid release version: {bad}")
            );
        }
        for good in [
            "0.0.0",
            "1.2.3-a.b-c",
            "1.2.3+build.5",
            "1.2.3-..",
            "1.2.3+-",
        ] {
            assert!(version_is_valid(good), "{good:?}");
        }
    }

    #[test]
    fn tracks_normalise_like_python() {
        assert_eq!(normalized_release_track(None).unwrap(), "stable");
        assert_eq!(normalized_release_track(Some("")).unwrap(), "stable");
        assert_eq!(
            normalized_release_track(Some(" BETA\u{1c}")).unwrap(),
            "beta"
        );
        assert_eq!(
            normalized_release_track(Some("nightly"))
                .unwrap_err()
                .python_line(),
            "ValueError: invalid release track: nightly"
        );
        assert_eq!(release_track("1.0.0+x-y"), "stable");
        assert_eq!(release_track("1.0.0-x+y"), "beta");
    }

    #[test]
    fn transitions_move_forward_or_leave_beta_for_stable() {
        assert!(release_transition_allowed("1.0.0", "1.0.1", "stable").unwrap());
        assert!(!release_transition_allowed("1.0.1", "1.0.0", "stable").unwrap());
        assert!(!release_transition_allowed("1.0.0", "1.0.0", "stable").unwrap());
        assert!(release_transition_allowed("1.0.7-beta.5", "1.0.6", "stable").unwrap());
        assert!(release_transition_allowed("1.0.7-beta.5", "1.0.7", "stable").unwrap());
        assert!(!release_transition_allowed("1.0.7-beta.5", "1.0.6", "beta").unwrap());
        assert!(!release_transition_allowed("1.0.0", "1.0.1-beta.1", "stable").unwrap());
        assert!(release_transition_allowed("1.0.0", "1.0.1-beta.1", "beta").unwrap());
        assert_eq!(
            release_transition_allowed("garbage", "1.0.1", "stable")
                .unwrap_err()
                .message(),
            "invalid release version: garbage"
        );
    }
}

//! Release trust for the update runner: versions and tracks, signed manifests,
//! the npm release envelope, bounded downloads and verified archive extraction.
//!
//! Ports the release half of `update_runner.py`. Every refusal keeps the original's
//! message because the server shows the runner's failure text to the user.

mod archive;
mod check;
mod download;
mod key;
mod manifest;
mod version;

pub use archive::{
    download_release_archive, safe_extract, MAX_EXTENDED_HEADER_BYTES, MAX_EXTRACTED_BYTES,
    MAX_MEMBERS, MAX_MESSAGE_CHARS,
};
pub use check::{
    check_release, release_rate_limit_delay, ReleaseCheckError, RELEASE_RATE_LIMITED_MESSAGE,
};
pub use download::{
    download_bytes, FetchError, HttpStatusError, ARCHIVE_DOWNLOAD_DEADLINE_SECONDS,
    METADATA_DOWNLOAD_DEADLINE_SECONDS,
};
pub use manifest::{ReleaseManifest, ReleaseTrust, INVALID_SIGNATURE_MESSAGE};
pub use version::{
    normalized_release_track, release_candidates, release_track, release_transition_allowed,
    release_versions_from_html, version_is_prerelease, version_is_valid, version_key, VersionKey,
    RELEASE_TRACKS,
};

/// The GitHub repository that publishes signed AgentsServer releases.
pub const RELEASE_REPOSITORY: &str = "ZhengyiLuo/AgentsServer";
/// Size limit of every metadata download (release list, manifest, signature).
pub const MAX_METADATA_BYTES: u64 = 1_000_000;
/// Size limit of a release archive download.
pub const MAX_ARCHIVE_BYTES: u64 = 200 * 1024 * 1024;
/// The npm package that carries schema-2 (npm-distributed) releases.
pub const NPM_PACKAGE_NAME: &str = "@agentsdock/server";
/// Size limit of a signed npm release descriptor (schema-2 manifest).
pub const MAX_NPM_MANIFEST_BYTES: usize = 8_192;
/// The `User-Agent` every release request sends.
pub const UPDATER_USER_AGENT: &str = "AgentsServer-Updater/1";

/// Environment variable that replaces the GitHub releases base
/// (`https://github.com/ZhengyiLuo/AgentsServer/releases`), for tests.
pub const RELEASE_BASE_ENV: &str = "AGENTS_SERVER_RELEASE_BASE";
/// Environment variable that replaces the GitHub releases API URL, for tests.
pub const RELEASES_API_URL_ENV: &str = "AGENTS_SERVER_RELEASES_API_URL";
/// Environment variable (read at build time and at run time) holding the npm
/// registry prefix of the package tarballs, ending in `/@agentsdock/server/-/`.
pub const NPM_REGISTRY_BASE_ENV: &str = "AGENTS_SERVER_NPM_REGISTRY_BASE";

/// Where releases are discovered and fetched, and therefore which archive
/// locations a signed manifest may name.
///
/// The trust check compares `archive.url` with these exact prefixes, so tests
/// that serve releases from `http://127.0.0.1:<port>` must move both together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseEndpoints {
    /// `https://github.com/ZhengyiLuo/AgentsServer/releases` in production.
    pub release_base: String,
    /// The GitHub API listing of releases (`...?per_page=100`).
    pub releases_api_url: String,
    /// The npm registry prefix of schema-2 archives; `None` refuses schema 2.
    pub npm_registry_base: Option<String>,
}

impl ReleaseEndpoints {
    /// The production endpoints; the npm prefix comes from the build-time
    /// `AGENTS_SERVER_NPM_REGISTRY_BASE`, if it was set.
    pub fn production() -> Self {
        ReleaseEndpoints {
            release_base: format!("https://github.com/{RELEASE_REPOSITORY}/releases"),
            releases_api_url: format!(
                "https://api.github.com/repos/{RELEASE_REPOSITORY}/releases?per_page=100"
            ),
            npm_registry_base: option_env!("AGENTS_SERVER_NPM_REGISTRY_BASE")
                .filter(|base| !base.is_empty())
                .map(str::to_string),
        }
    }

    /// The production endpoints, each replaced by its environment variable
    /// when that is set and non-empty (how tests point the runner at a local
    /// release server).
    pub fn from_env() -> Self {
        let mut endpoints = Self::production();
        let read = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        if let Some(base) = read(RELEASE_BASE_ENV) {
            endpoints.release_base = base;
        }
        if let Some(url) = read(RELEASES_API_URL_ENV) {
            endpoints.releases_api_url = url;
        }
        if let Some(base) = read(NPM_REGISTRY_BASE_ENV) {
            endpoints.npm_registry_base = Some(base);
        }
        endpoints
    }

    /// The immutable manifest URL of a tagged release.
    pub fn manifest_url(&self, version: &str) -> String {
        format!(
            "{}/download/v{version}/agents-server-manifest.json",
            self.release_base
        )
    }

    /// The detached-signature URL of a tagged release's manifest.
    pub fn signature_url(&self, version: &str) -> String {
        format!(
            "{}/download/v{version}/agents-server-manifest.sig",
            self.release_base
        )
    }
}

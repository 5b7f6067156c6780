//! Bounded HTTP downloads of release metadata and archives (`download_bytes`,
//! `download_npm_archive`), streamed into a caller's sink so an archive is
//! never held in memory.
//!
//! Redirects are followed here rather than by minreq so that the original's rules
//! hold exactly: GitHub asset downloads follow up to ten redirects (301, 302,
//! 303, 307 and 308, as urllib does), while the npm archive refuses any.
//!
//! Responses are read by [`crate::urllib`] with `http.client`'s limits and
//! words, through the proxy the environment names as urllib's `ProxyHandler`
//! would ([`crate::proxy`]; each redirect is routed anew); HTTPS is verified
//! against the system trust store ([`crate::trust_store`]).
//!
//! Deviation: urllib's timeout bounds each socket operation; here one deadline
//! bounds the whole request. Metadata keeps the 30 s budget (its bodies are at
//! most 1 MB); archives get [`ARCHIVE_DOWNLOAD_DEADLINE_SECONDS`], which a full
//! 200 MiB archive meets at 256 KiB/s, instead of 120 s per read.

use std::io::Write;
use std::time::{Duration, Instant};

use super::UPDATER_USER_AGENT;
use crate::urllib;
use agents_common::{Error, Result};
use python_compat::ErrorClass;

/// Deadline of a metadata request (urllib's 30 s socket timeout).
pub const METADATA_DOWNLOAD_DEADLINE_SECONDS: u64 = 30;
/// Deadline of an archive request: 120 s (urllib's socket timeout) plus a full
/// 200 MiB archive at 256 KiB/s.
pub const ARCHIVE_DOWNLOAD_DEADLINE_SECONDS: u64 = 120 + super::MAX_ARCHIVE_BYTES / (256 * 1024);
/// urllib's `HTTPRedirectHandler.max_redirections`.
const MAX_REDIRECTIONS: usize = 10;
/// urllib's `HTTPRedirectHandler.max_repeats` (visits of one URL).
const MAX_REPEATS: usize = 4;

/// A non-2xx HTTP response (Python's `HTTPError`): callers branch on the code
/// (404 means "not published", 403/429 carry rate-limit headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpStatusError {
    /// The status code.
    pub code: i32,
    /// The reason phrase the server sent.
    pub reason: String,
    /// Response headers, names lowercased.
    pub headers: Vec<(String, String)>,
}

impl HttpStatusError {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

impl std::fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP Error {}: {}", self.code, self.reason)
    }
}

/// Why a download failed: an HTTP status the caller may act on, or any other
/// failure (transport, limits, refusals) with the original's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The server answered with a non-2xx status.
    Status(HttpStatusError),
    /// Everything else.
    Failed(Error),
}

impl FetchError {
    /// The HTTP status code, when the failure is an HTTP status.
    pub fn status_code(&self) -> Option<i32> {
        match self {
            FetchError::Status(status) => Some(status.code),
            FetchError::Failed(_) => None,
        }
    }
}

impl From<Error> for FetchError {
    fn from(error: Error) -> Self {
        FetchError::Failed(error)
    }
}

impl From<FetchError> for Error {
    /// `HTTPError` is an `OSError` in Python; its text is `HTTP Error N: reason`.
    fn from(error: FetchError) -> Self {
        match error {
            FetchError::Status(status) => Error::new(ErrorClass::Os, status.to_string()),
            FetchError::Failed(error) => error,
        }
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Status(status) => status.fmt(f),
            FetchError::Failed(error) => error.fmt(f),
        }
    }
}

/// Whether a request may follow redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redirects {
    /// Follow like urllib (GitHub release assets live behind redirects).
    Follow,
    /// Refuse with this message (the npm archive must come from its exact URL).
    Refuse(&'static str),
}

/// An open 2xx response whose body has not been read yet.
pub(crate) struct OpenResponse {
    /// The URL that answered (after any redirects).
    pub(crate) final_url: String,
    response: urllib::Response,
}

impl OpenResponse {
    /// The first value of a header, names compared case-insensitively.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.response.header(name)
    }

    /// `response.read(max_bytes)` into `sink`; returns the count.
    pub(crate) fn copy_body(mut self, max_bytes: u64, sink: &mut dyn Write) -> Result<u64> {
        self.response
            .read(max_bytes, sink)
            .map_err(|failure| urllib::Failure::from(failure).into_error())
    }
}

/// GET `url` with the updater's User-Agent, applying `redirects`, and return
/// the first 2xx response; any other final status is an [`HttpStatusError`].
pub(crate) fn open(
    url: &str,
    deadline_seconds: u64,
    redirects: Redirects,
) -> std::result::Result<OpenResponse, FetchError> {
    let mut current = url.to_string();
    let mut visited: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(deadline_seconds);
    loop {
        let headers = [("User-Agent", UPDATER_USER_AGENT)];
        let response = urllib::get(&current, &headers, deadline, urllib::Routing::Environment)
            .map_err(|failure| FetchError::Failed(failure.into_error()))?;
        let code = i32::from(response.code);
        if (200..300).contains(&code) {
            return Ok(OpenResponse {
                final_url: current,
                response,
            });
        }
        let location = response
            .header("location")
            .or_else(|| response.header("uri"))
            .map(str::to_string);
        let status = HttpStatusError {
            code,
            reason: response.reason.clone(),
            headers: response
                .headers()
                .iter()
                .map(|(key, value)| (key.to_ascii_lowercase(), value.clone()))
                .collect(),
        };
        let Some(location) = location.filter(|_| matches!(code, 301 | 302 | 303 | 307 | 308))
        else {
            return Err(FetchError::Status(status));
        };
        if let Redirects::Refuse(message) = redirects {
            return Err(Error::runtime(message).into());
        }
        let next = join_url(&current, &location);
        if !(next.starts_with("http://") || next.starts_with("https://")) {
            return Err(FetchError::Status(HttpStatusError {
                reason: format!(
                    "{} - Redirection to url '{next}' is not allowed",
                    status.reason
                ),
                ..status
            }));
        }
        visited.push(current);
        let repeats = visited.iter().filter(|seen| **seen == next).count();
        if visited.len() > MAX_REDIRECTIONS || repeats >= MAX_REPEATS {
            return Err(FetchError::Status(HttpStatusError {
                reason: format!(
                    "The HTTP server returned a redirect error that would lead to an infinite loop.\nThe last 30x error message was:\n{}",
                    status.reason
                ),
                ..status
            }));
        }
        current = next;
    }
}

/// The original's `download_bytes` streamed into `sink`: a declared
/// `Content-Length` over `limit` is refused before reading, and a body over
/// `limit` is refused after reading `limit + 1` bytes.
pub(crate) fn download_to(
    url: &str,
    limit: u64,
    deadline_seconds: u64,
    sink: &mut dyn Write,
) -> std::result::Result<u64, FetchError> {
    let response = open(url, deadline_seconds, Redirects::Follow)?;
    let declared = python_compat::header_int(response.header("Content-Length").unwrap_or(""))
        .map_err(Error::from)?;
    let too_large = || Error::runtime(format!("download exceeds the {limit}-byte safety limit"));
    if declared.is_some_and(|declared| declared > i128::from(limit)) {
        return Err(too_large().into());
    }
    let copied = response.copy_body(limit + 1, sink)?;
    if copied > limit {
        return Err(too_large().into());
    }
    Ok(copied)
}

/// The original's `download_bytes`: a bounded metadata document in memory.
pub fn download_bytes(url: &str, limit: u64) -> std::result::Result<Vec<u8>, FetchError> {
    let mut content = Vec::new();
    download_to(url, limit, METADATA_DOWNLOAD_DEADLINE_SECONDS, &mut content)?;
    Ok(content)
}

/// The npm half of `download_npm_archive` before verification: the exact
/// signed URL, no redirects, a declared length equal to the signed size, and
/// at most `size + 1` bytes streamed into `sink`.
pub(crate) fn download_npm_archive_to(
    url: &str,
    size: u64,
    sink: &mut dyn Write,
) -> std::result::Result<u64, FetchError> {
    let response = open(
        url,
        ARCHIVE_DOWNLOAD_DEADLINE_SECONDS,
        Redirects::Refuse("npm release archive redirects are not allowed"),
    )?;
    if response.final_url != url {
        return Err(Error::runtime("npm release archive location changed").into());
    }
    if let Some(declared) = response.header("Content-Length") {
        if python_compat::header_int(declared).map_err(Error::from)? != Some(i128::from(size)) {
            return Err(Error::runtime("npm release archive size changed").into());
        }
    }
    Ok(response.copy_body(size + 1, sink)?)
}

/// Resolve a redirect `Location` against the URL that sent it (urljoin for
/// the forms servers use: absolute, scheme-relative, absolute-path, relative).
fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |index| index + 3);
    let scheme = &base[..scheme_end.saturating_sub(3)];
    if let Some(rest) = location.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |index| scheme_end + index);
    let origin = &base[..path_start];
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = base[path_start..].split(['?', '#']).next().unwrap_or("");
    let directory = path.rfind('/').map_or("/", |index| &path[..=index]);
    format!("{origin}{directory}{location}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_parses_like_python_int() {
        assert_eq!(python_compat::header_int("").unwrap(), None);
        assert_eq!(python_compat::header_int("12").unwrap(), Some(12));
        assert_eq!(python_compat::header_int(" +1_000 ").unwrap(), Some(1000));
        assert_eq!(python_compat::header_int("-5").unwrap(), Some(-5));
        assert_eq!(
            python_compat::header_int("12abc")
                .unwrap_err()
                .python_line(),
            "ValueError: invalid literal for int() with base 10: '12abc'"
        );
        for bad in ["_1", "1_", "1__0", "+", "0x10"] {
            assert!(python_compat::header_int(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redirect_locations_resolve_like_urljoin() {
        let base = "https://github.com/o/r/releases/download/v1/a.tar.gz?x=1";
        assert_eq!(
            join_url(base, "https://cdn.example/x"),
            "https://cdn.example/x"
        );
        assert_eq!(join_url(base, "//cdn.example/x"), "https://cdn.example/x");
        assert_eq!(join_url(base, "/y/z"), "https://github.com/y/z");
        assert_eq!(
            join_url(base, "b.tar.gz"),
            "https://github.com/o/r/releases/download/v1/b.tar.gz"
        );
        assert_eq!(
            join_url("http://127.0.0.1:8/", "next"),
            "http://127.0.0.1:8/next"
        );
    }
}

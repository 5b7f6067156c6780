//! One urllib-style `GET http://127.0.0.1:<port>/api/health`, with the
//! failures worded and classified as `urllib.request.urlopen` raises them,
//! because the readiness wait retries exactly the transport-level ones.
//!
//! Deviations: urllib follows redirects; a health endpoint never redirects,
//! so a 3xx is reported as the `HTTPError` urllib raises when it cannot
//! follow. Stricter than urllib: `timeout` bounds the whole probe, not each
//! socket operation, so a server that trickles its answer cannot hold the
//! runner (see [`crate::urllib`]).

use std::io;
use std::time::{Duration, Instant};

use crate::release::UPDATER_USER_AGENT;
use crate::urllib::{self, Failure};
use agents_common::Error;
use python_compat::{ErrorClass, PythonInt};

/// A failed request: the exception text and class Python reports, and
/// whether `transient_server_readiness_error` would call it transient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GetFailure {
    pub(crate) error: Error,
    pub(crate) transient: bool,
}

impl GetFailure {
    fn status(code: u16, reason: &str) -> Self {
        GetFailure {
            error: Error::new(ErrorClass::Os, format!("HTTP Error {code}: {reason}")),
            transient: code == 503,
        }
    }
}

/// `ConnectionRefusedError`, `ConnectionResetError`, `ConnectionAbortedError`
/// and `TimeoutError`: the server is not (yet) listening or answering.
fn transient_kind(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
    )
}

impl From<Failure> for GetFailure {
    fn from(failure: Failure) -> Self {
        let transient = match &failure {
            Failure::Connect(error) | Failure::Socket(error) => transient_kind(error),
            Failure::Protocol(_) => false,
        };
        GetFailure {
            error: failure.into_error(),
            transient,
        }
    }
}

/// GET `path` on `127.0.0.1:port` with `headers`, the whole exchange bounded
/// by `timeout`, and return at most `limit + 1` bytes of a 2xx body
/// (`response.read(limit + 1)`), so the caller can tell an oversized one.
pub(crate) fn get(
    port: &PythonInt,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
    limit: usize,
) -> Result<Vec<u8>, GetFailure> {
    let deadline = Instant::now() + timeout.max(Duration::from_millis(1));
    let mut all_headers = vec![("User-Agent", UPDATER_USER_AGENT)];
    all_headers.extend_from_slice(headers);
    // Any int the command line held: urllib connects where getaddrinfo(3)
    // takes it (see urllib::Target).
    let url = format!("http://127.0.0.1:{port}{path}");
    // Never through a proxy: the original's urlopen would hand the one-time
    // credential to one (docs/design/deviations.md).
    let mut response = urllib::get(&url, &all_headers, deadline, urllib::Routing::Direct)?;
    if !(200..300).contains(&response.code) {
        return Err(GetFailure::status(response.code, &response.reason));
    }
    let mut body = Vec::new();
    response
        .read(limit as u64 + 1, &mut body)
        .map_err(Failure::from)?;
    Ok(body)
}

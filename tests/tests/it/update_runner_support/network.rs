//! What the HTTPS and proxy scenarios share: a clean network environment
//! for both runners, one published release, and the words the original's
//! Python uses for failed handshakes.

use python_compat::json::{Json, JsonObject};

use super::{Fixture, Outcome};

/// Every variable urllib or OpenSSL would read for these scenarios; each
/// scenario starts with all of them removed and sets its own.
pub(crate) const NETWORK_VARIABLES: [&str; 10] = [
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// The release every scenario installs.
pub(crate) const VERSION: &str = "1.2.3";
/// Its archive's path on the release host.
pub(crate) const ARCHIVE_PATH: &str = "/releases/download/v1.2.3/agents-server-1.2.3.tar.gz";

/// `<urlopen error ...>` of CPython 3.11's failed verification.
pub(crate) fn verify_failed(reason: &str) -> String {
    format!(
        "<urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {reason} (_ssl.c:1006)>"
    )
}

/// Remove the host's network variables from both runners, set `pairs`,
/// and publish [`VERSION`] on the fixture's host for the update to take.
pub(crate) fn prepare(fixture: &mut Fixture, pairs: &[(&str, &str)]) {
    fixture.unset = NETWORK_VARIABLES
        .iter()
        .map(|name| name.to_string())
        .collect();
    fixture.environment = pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    let archive = fixture.archive(&Fixture::legacy_members(VERSION));
    fixture.publish_legacy(VERSION, &archive);
    fixture.options = vec!["--expected-version".into(), VERSION.into()];
}

/// The row's field `key`, or null.
fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

/// The run installed [`VERSION`].
pub(crate) fn assert_installed(outcome: &Outcome) {
    assert_eq!(outcome.exit, Some(0), "stderr: {}", outcome.stderr);
    assert_eq!(field(&outcome.row, "phase"), Json::from("complete"));
    assert_eq!(
        field(&outcome.row, "installed_version"),
        Json::from(VERSION)
    );
}

/// The run failed before installing, with `message` in its row.
pub(crate) fn assert_failed(outcome: &Outcome, message: &str) {
    assert_eq!(outcome.exit, Some(1), "stderr: {}", outcome.stderr);
    assert_eq!(field(&outcome.row, "phase"), Json::from("failed"));
    assert_eq!(field(&outcome.row, "message"), Json::from(message));
    assert!(outcome.installer.is_none(), "install.sh never ran");
}

//! The certificate authorities HTTPS release hosts are verified against:
//! OpenSSL's default verify paths, as the original's Python (a uv-managed
//! python-build-standalone, whose OpenSSL has `/etc/ssl` as its directory,
//! `/private/etc/ssl` on macOS) finds them.
//!
//! - the file: `SSL_CERT_FILE` when set, else the first distribution bundle
//!   that exists ([`DEFAULT_CERT_FILES`]);
//! - the directories: `SSL_CERT_DIR` (a `:`-separated list) when set, else
//!   the first of [`DEFAULT_CERT_DIRS`] that exists; as OpenSSL's hashed
//!   directory lookup, only files named `<8 hex digits>.<n>` are read.
//!
//! Both are used together, as OpenSSL does. When nothing can be read from
//! any of them the request fails closed with a message that names what was
//! tried (the original fails every handshake with "unable to get local issuer
//! certificate" then). The macOS keychain is not read: the original's OpenSSL
//! does not read it either, and reading it needs Security.framework, which
//! a build without the Apple SDK cannot link.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agents_common::{read_regular_file, BoundedRead, Leaf};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// The environment variable naming the CA bundle file (OpenSSL's).
pub const CERT_FILE_ENV: &str = "SSL_CERT_FILE";
/// The environment variable naming the hashed CA directories (OpenSSL's).
pub const CERT_DIR_ENV: &str = "SSL_CERT_DIR";

/// Bundles, in order: python-build-standalone's OpenSSL default (also
/// Alpine's and Arch's), then the bundles Debian/Ubuntu, Fedora/RHEL (and
/// the RHEL fallback python-build-standalone adds) and openSUSE install.
#[cfg(not(target_os = "macos"))]
pub const DEFAULT_CERT_FILES: &[&str] = &[
    "/etc/ssl/cert.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/tls/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];
/// Hashed directories: OpenSSL's default, then RHEL's.
#[cfg(not(target_os = "macos"))]
pub const DEFAULT_CERT_DIRS: &[&str] = &["/etc/ssl/certs", "/etc/pki/tls/certs"];

/// macOS ships the system roots as `/etc/ssl/cert.pem` (`/etc` is
/// `/private/etc`), the file python-build-standalone's OpenSSL reads.
#[cfg(target_os = "macos")]
pub const DEFAULT_CERT_FILES: &[&str] = &["/etc/ssl/cert.pem"];
/// The hashed directory beside it (usually absent).
#[cfg(target_os = "macos")]
pub const DEFAULT_CERT_DIRS: &[&str] = &["/etc/ssl/certs"];

/// Largest bundle or certificate file read (a full bundle is ~250 KB).
const MAX_CERT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One place certificates are read from, and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    path: PathBuf,
    /// The variable that named it, or `None` for a default.
    variable: Option<&'static str>,
}

impl Location {
    fn describe(&self) -> String {
        match self.variable {
            Some(variable) => format!("{variable}={}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

/// The file and directories OpenSSL's default verify paths resolve to,
/// given the environment lookup `variable`.
fn verify_paths(variable: impl Fn(&str) -> Option<OsString>) -> (Option<Location>, Vec<Location>) {
    let file = match variable(CERT_FILE_ENV) {
        Some(path) => Some(Location {
            path: PathBuf::from(path),
            variable: Some(CERT_FILE_ENV),
        }),
        None => first_existing(DEFAULT_CERT_FILES, Path::is_file),
    };
    let directories = match variable(CERT_DIR_ENV) {
        Some(list) => std::env::split_paths(&list)
            .filter(|path| !path.as_os_str().is_empty())
            .map(|path| Location {
                path,
                variable: Some(CERT_DIR_ENV),
            })
            .collect(),
        None => first_existing(DEFAULT_CERT_DIRS, Path::is_dir)
            .into_iter()
            .collect(),
    };
    (file, directories)
}

fn first_existing(candidates: &[&str], exists: fn(&Path) -> bool) -> Option<Location> {
    candidates
        .iter()
        .map(Path::new)
        .find(|path| exists(path))
        .map(|path| Location {
            path: path.to_path_buf(),
            variable: None,
        })
}

/// The trust store of this process's environment, or why none could be
/// read (the message names every place tried).
pub(crate) fn load() -> Result<RootCertStore, String> {
    load_from(|name| std::env::var_os(name))
}

/// `load` with an explicit environment lookup.
pub fn load_from(variable: impl Fn(&str) -> Option<OsString>) -> Result<RootCertStore, String> {
    let (file, directories) = verify_paths(variable);
    let mut roots = RootCertStore::empty();
    let mut tried = Vec::new();
    if let Some(file) = &file {
        add_file(&mut roots, &file.path);
        tried.push(file.describe());
    }
    for directory in &directories {
        add_hashed_directory(&mut roots, &directory.path);
        tried.push(directory.describe());
    }
    if roots.is_empty() {
        let places = if tried.is_empty() {
            format!(
                "no {CERT_FILE_ENV} or {CERT_DIR_ENV} is set and none of {} exists",
                [DEFAULT_CERT_FILES, DEFAULT_CERT_DIRS].concat().join(", ")
            )
        } else {
            format!("none could be read from {}", tried.join(", "))
        };
        return Err(format!("no trusted CA certificates: {places}"));
    }
    Ok(roots)
}

/// Every certificate of a PEM file that parses as a trust anchor; an
/// unreadable file, or one with none, adds nothing (as OpenSSL loads).
fn add_file(roots: &mut RootCertStore, path: &Path) {
    let Ok(BoundedRead::Contents(bytes)) =
        read_regular_file(path, MAX_CERT_FILE_BYTES, Leaf::Follow)
    else {
        return;
    };
    let certificates = CertificateDer::pem_slice_iter(&bytes).filter_map(|parsed| parsed.ok());
    roots.add_parsable_certificates(certificates);
}

/// The certificates OpenSSL's hashed lookup can find in `directory`: the
/// files named `<subject hash>.<n>` (`c_rehash`, `update-ca-certificates`).
fn add_hashed_directory(roots: &mut RootCertStore, directory: &Path) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| is_hash_name(&entry.file_name().to_string_lossy()))
        .map(|entry| entry.path())
        .collect();
    names.sort();
    for path in names {
        add_file(roots, &path);
    }
}

/// `[0-9a-f]{8}\.[0-9]+`: a subject-hash certificate link (CRLs are `.r<n>`).
fn is_hash_name(name: &str) -> bool {
    let Some((hash, number)) = name.split_once('.') else {
        return false;
    };
    hash.len() == 8
        && hash
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        && !number.is_empty()
        && number.bytes().all(|byte| byte.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_names_are_what_openssl_looks_up() {
        for name in ["9d04f354.0", "002c0b4f.12"] {
            assert!(is_hash_name(name), "{name}");
        }
        for name in [
            "9d04f354.r0",
            "9D04F354.0",
            "9d04f35.0",
            "ca.pem",
            "9d04f354.",
        ] {
            assert!(!is_hash_name(name), "{name}");
        }
    }

    #[test]
    fn the_environment_replaces_each_default_on_its_own() {
        let (file, directories) = verify_paths(|name| {
            (name == CERT_FILE_ENV).then(|| OsString::from("/nonexistent/ca.pem"))
        });
        assert_eq!(
            file.unwrap().describe(),
            "SSL_CERT_FILE=/nonexistent/ca.pem"
        );
        // The default directory still applies, as in OpenSSL.
        assert!(directories.iter().all(|found| found.variable.is_none()));
        let (_, directories) =
            verify_paths(|name| (name == CERT_DIR_ENV).then(|| OsString::from("/a::/b")));
        let described: Vec<String> = directories.iter().map(Location::describe).collect();
        assert_eq!(described, ["SSL_CERT_DIR=/a", "SSL_CERT_DIR=/b"]);
    }

    #[test]
    fn nothing_readable_fails_closed_naming_what_was_tried() {
        let error = load_from(|name| match name {
            CERT_FILE_ENV => Some(OsString::from("/nonexistent/ca.pem")),
            CERT_DIR_ENV => Some(OsString::from("/nonexistent/certs")),
            _ => None,
        })
        .unwrap_err();
        assert_eq!(
            error,
            "no trusted CA certificates: none could be read from \
             SSL_CERT_FILE=/nonexistent/ca.pem, SSL_CERT_DIR=/nonexistent/certs"
        );
    }
}

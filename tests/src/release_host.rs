//! A signed release host on 127.0.0.1: a real Ed25519 key, real tar.gz
//! release archives and the signed schema-1 manifests `update-runner`
//! checks, served at the paths of the GitHub release layout under
//! `AGENTS_SERVER_RELEASE_BASE`.
//!
//! The key, the archive writer and the HTTP server come from
//! [`crate::release_support`], the one copy the update-runner tests, the
//! black-box tests and the demo share.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object,
};
use sha2::{Digest, Sha256};

use crate::release_support::{write_tar_gz, Member, Reply, TestKey, TestServer};

/// The schema-1 manifest `update-runner` verifies for a GitHub release of
/// `version` whose archive is `archive`, downloaded from `release_base`
/// (as `AGENTS_SERVER_RELEASE_BASE` names it).
pub fn legacy_release_manifest(release_base: &str, version: &str, archive: &[u8]) -> JsonObject {
    let digest = python_compat::hex(&Sha256::digest(archive));
    schema1_manifest(release_base, version, &digest, archive.len())
}

/// A schema-1 (GitHub release) manifest of `version` whose archive, under
/// `release_base`'s layout, has this digest and size (API contract 28).
pub fn schema1_manifest(
    release_base: &str,
    version: &str,
    sha256: &str,
    size: usize,
) -> JsonObject {
    json_object! {
        "schema" => 1,
        "version" => version,
        "track" => if version.contains('-') { "beta" } else { "stable" },
        "prerelease" => version.contains('-'),
        "api_contract_version" => 28,
        "commit" => "0000000000000000000000000000000000000000",
        "archive" => json_object! {
            "name" => format!("agents-server-{version}.tar.gz"),
            "url" => format!(
                "{release_base}/download/v{version}/agents-server-{version}.tar.gz"
            ),
            "sha256" => sha256,
            "size" => size,
        },
    }
}

/// A schema-2 (npm) manifest of `version` whose tarball, under `npm_base`,
/// has this npm `integrity`, digest and size (API contract 29).
pub fn schema2_manifest(
    npm_base: &str,
    version: &str,
    integrity: &str,
    sha256: &str,
    size: usize,
) -> JsonObject {
    json_object! {
        "schema" => 2,
        "version" => version,
        "track" => if version.contains('-') { "beta" } else { "stable" },
        "prerelease" => version.contains('-'),
        "api_contract_version" => 29,
        "commit" => "1111111111111111111111111111111111111111",
        "minimum_server_api_contract" => 1,
        "distribution" => "npm",
        "npm" => json_object! {
            "name" => "@agentsdock/server",
            "version" => version,
            "integrity" => integrity,
        },
        "archive" => json_object! {
            "name" => format!("server-{version}.tgz"),
            "url" => format!("{npm_base}server-{version}.tgz"),
            "sha256" => sha256,
            "size" => size,
        },
    }
}

/// One file of a release archive, under its top directory
/// `agents-server-<version>/`.
pub struct ReleaseFile<'a> {
    /// Path inside the release (e.g. `install.sh`).
    pub name: &'a str,
    /// Its bytes.
    pub data: &'a [u8],
    /// Its mode in the archive.
    pub mode: u32,
}

/// Signed releases served on loopback; stops when dropped.
pub struct ReleaseHost {
    key: TestKey,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    server: TestServer,
}

impl ReleaseHost {
    /// A new key pair (its public PEM written into `directory`, where
    /// `--public-key` reads it) and a server answering 404 until releases
    /// are published.
    pub fn start(directory: &Path) -> ReleaseHost {
        let key = TestKey::generate(directory, "release-public-key.pem");
        let files: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        let served = files.clone();
        let server =
            TestServer::start(
                move |request| match served.lock().unwrap().get(&request.path) {
                    Some(body) => Reply::ok(body),
                    None => Reply::status(404, "Not Found"),
                },
            );
        ReleaseHost { key, files, server }
    }

    /// The trusted public key file (`update-runner --public-key`).
    pub fn public_key_path(&self) -> &Path {
        &self.key.pem_path
    }

    /// `AGENTS_SERVER_RELEASE_BASE` pointing at this host.
    pub fn release_base(&self) -> String {
        self.server.url("/releases")
    }

    /// `AGENTS_SERVER_RELEASES_API_URL` pointing at this host (it answers
    /// 404: runs name their version with `--expected-version`).
    pub fn releases_api_url(&self) -> String {
        self.server.url("/api/releases?per_page=100")
    }

    /// Serves `body` at `path`.
    pub fn serve(&self, path: &str, body: Vec<u8>) {
        self.files.lock().unwrap().insert(path.to_string(), body);
    }

    /// Publishes release `version`: a gzip tar of `files` under
    /// `agents-server-<version>/`, its schema-1 manifest and the manifest's
    /// Ed25519 signature. Returns the manifest.
    pub fn publish(&self, version: &str, files: &[ReleaseFile]) -> JsonObject {
        let top = format!("agents-server-{version}");
        let mut members = vec![Member::dir(&format!("{top}/"))];
        members.extend(
            files.iter().map(|file| {
                Member::file(&format!("{top}/{}", file.name), file.data).mode(file.mode)
            }),
        );
        let archive = self.archive(&members);
        let manifest = legacy_release_manifest(&self.release_base(), version, &archive);
        let bytes = encode_indented(&Json::Object(manifest.clone()));
        let download = format!("/releases/download/v{version}");
        self.serve(
            &format!("{download}/agents-server-{version}.tar.gz"),
            archive,
        );
        self.serve(
            &format!("{download}/agents-server-manifest.sig"),
            self.key.sign(&bytes),
        );
        self.serve(&format!("{download}/agents-server-manifest.json"), bytes);
        manifest
    }

    /// Paths requested so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.server
            .seen()
            .into_iter()
            .map(|request| request.path)
            .collect()
    }

    fn archive(&self, members: &[Member]) -> Vec<u8> {
        let path = self
            .key
            .pem_path
            .with_file_name(format!(".archive-{}.tmp", std::process::id()));
        write_tar_gz(&path, members);
        let bytes = std::fs::read(&path).expect("read the written archive");
        let _ = std::fs::remove_file(&path);
        bytes
    }
}

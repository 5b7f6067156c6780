//! A prepared release for `update-runner --prepared-receipt`: a staged
//! candidate under an install root, its receipt in
//! `execution_preparation`'s format (every digest computed here) and the
//! admitted row carrying the signed envelope.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agents_common::test_support::encode_compact_sorted;
use agents_common::{json_object, Json, JsonObject};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{manifest_bytes, Fixture, Side, INSTALL_SH};

pub const PREPARATION: &str = "abcdefabcdefabcdefabcdefabcdef01";
pub const VERSION: &str = "1.2.3";

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub fn sha256_file(path: &Path) -> String {
    hex(&Sha256::digest(std::fs::read(path).unwrap()))
}

pub fn write(path: &Path, content: &[u8], mode: u32) {
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn binding(path: &Path) -> Json {
    let info = std::fs::symlink_metadata(path).unwrap();
    Json::Object(json_object! {
        "device" => info.dev(),
        "inode" => info.ino(),
        "volume_uuid" => Json::Null,
    })
}

pub fn file_entry(path: &Path) -> Json {
    let info = std::fs::symlink_metadata(path).unwrap();
    Json::Object(json_object! {
        "kind" => "file",
        "mode" => info.mode() & 0o7777,
        "size" => info.len(),
        "sha256" => sha256_file(path),
    })
}

/// The source files of the candidate (as verified from the archive).
pub const SOURCES: [(&str, &str, u32); 6] = [
    ("VERSION", "1.2.3\n", 0o644),
    (
        "agent_server.py",
        "\"\"\"AgentsServer.\"\"\"\nAPI_CONTRACT_VERSION = 28\n",
        0o644,
    ),
    ("execution_service.py", "# worker\n", 0o644),
    (
        "pyproject.toml",
        "[project]\nname = \"agents-server\"\n",
        0o644,
    ),
    ("uv.lock", "version = 1\n", 0o644),
    ("install.sh", INSTALL_SH, 0o755),
];

/// An install root with a prepared candidate, its receipt and an admitted
/// row carrying the signed envelope.
pub struct Prepared {
    pub fixture: Fixture,
    pub root: PathBuf,
    pub candidate: PathBuf,
    pub receipt: PathBuf,
    /// The signed manifest the server admitted.
    pub manifest: JsonObject,
}

impl Prepared {
    pub fn new(name: &str) -> Prepared {
        let mut fixture = Fixture::new(name);
        let root = fixture.root.path().join("install");
        agents_tests::make_dirs(&root, 0o755);
        agents_tests::make_dirs(&root.join("releases"), 0o755);
        agents_tests::make_dirs(&root.join(".update-preparations").join(PREPARATION), 0o700);
        agents_tests::make_dirs(&root.join(".prepared-receipts"), 0o700);
        let candidate = root.join("releases").join(format!("{VERSION}-prepared"));
        agents_tests::make_dirs(&candidate, 0o755);
        for (name, content, mode) in SOURCES {
            write(&candidate.join(name), content.as_bytes(), mode);
        }
        agents_tests::make_dirs(&candidate.join(".venv/bin"), 0o755);
        std::fs::set_permissions(
            candidate.join(".venv"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", candidate.join(".venv/bin/python")).unwrap();
        let archive = fixture.archive(&Fixture::legacy_members(VERSION));
        let manifest = fixture.legacy_manifest(VERSION, &archive);
        let receipt = root
            .join(".prepared-receipts")
            .join(format!("{PREPARATION}.json"));
        write_receipt(&root, &candidate, &receipt, &manifest, |_| {});
        let digest = sha256_file(&receipt);
        let bytes = manifest_bytes(&Json::Object(manifest.clone()));
        let engine = base64::engine::general_purpose::STANDARD;
        fixture.admitted.insert("preparation_id", PREPARATION);
        fixture.admitted.insert(
            "_prepared_update",
            json_object! {
                "mode" => "prepared",
                "preparation_id" => PREPARATION,
                "envelope" => json_object! {
                    "manifest_base64" => engine.encode(&bytes),
                    "signature_base64" => engine.encode(fixture.key.sign(&bytes)),
                },
                "receipt_sha256" => digest.as_str(),
            },
        );
        fixture.options = vec![
            "--expected-version".into(),
            VERSION.into(),
            "--prepared-receipt".into(),
            receipt.to_string_lossy().into_owned(),
            "--prepared-receipt-sha256".into(),
            digest,
        ];
        fixture.environment = vec![(
            "AGENTS_SERVER_INSTALL_DIR".into(),
            root.to_string_lossy().into_owned(),
        )];
        Prepared {
            fixture,
            root,
            candidate,
            receipt,
            manifest,
        }
    }

    /// Rewrite the receipt for the candidate as it is now (with `edit`) and
    /// admit its new digest.
    pub fn rewrite_receipt(&mut self, manifest: &JsonObject, edit: impl FnOnce(&mut JsonObject)) {
        write_receipt(&self.root, &self.candidate, &self.receipt, manifest, edit);
        self.readmit_digest();
    }

    pub fn run(&self) -> super::Outcome {
        self.fixture.run(Side::Port)
    }

    /// Re-admit the receipt's current digest (after rewriting it).
    pub fn readmit_digest(&mut self) {
        let digest = sha256_file(&self.receipt);
        self.fixture
            .admitted
            .get_mut("_prepared_update")
            .and_then(Json::as_object_mut)
            .unwrap()
            .insert("receipt_sha256", digest.as_str());
        let at = self
            .fixture
            .options
            .iter()
            .position(|o| o == "--prepared-receipt-sha256")
            .unwrap();
        self.fixture.options[at + 1] = digest;
    }
}

/// `execution_preparation.write_prepared`'s receipt for the candidate
/// as it is now, with `edit` applied.
pub fn write_receipt(
    root: &Path,
    candidate: &Path,
    receipt: &Path,
    manifest: &JsonObject,
    edit: impl FnOnce(&mut JsonObject),
) {
    let mut files = JsonObject::new();
    for (name, _, _) in SOURCES {
        let path = candidate.join(name);
        files.insert(
            name,
            json_object! {
                "sha256" => sha256_file(&path),
                "size" => std::fs::metadata(&path).unwrap().len(),
            },
        );
    }
    let mut runtime = JsonObject::new();
    for (name, _, _) in SOURCES {
        runtime.insert(name, file_entry(&candidate.join(name)));
    }
    for directory in [".venv", ".venv/bin"] {
        runtime.insert(
            directory,
            json_object! {"kind" => "directory", "mode" => 0o755},
        );
    }
    let resolved = std::fs::canonicalize("/usr/bin/python3").unwrap();
    runtime.insert(
        ".venv/bin/python",
        json_object! {
            "kind" => "symlink",
            "target" => "/usr/bin/python3",
            "resolved" => resolved.to_string_lossy().into_owned(),
            "content" => file_entry(&resolved),
        },
    );
    let sha = manifest
        .get("archive")
        .and_then(|archive| archive.get("sha256"))
        .cloned()
        .unwrap();
    let mut value = json_object! {
        "format" => 1,
        "root" => root.to_string_lossy().into_owned(),
        "candidate" => candidate.to_string_lossy().into_owned(),
        "version" => VERSION,
        "api_contract" => 28,
        "archive_sha256" => sha,
        "identities" => json_object! {
            "root" => binding(root),
            "releases" => binding(&root.join("releases")),
            "candidate" => binding(candidate),
        },
        "source_inventory" => json_object! {"format" => 1, "files" => files},
        "runtime_inventory" => runtime,
    };
    edit(&mut value);
    let _ = std::fs::remove_file(receipt);
    write(receipt, &encode_compact_sorted(&Json::Object(value)), 0o600);
}

//! A prepared release for `update-runner --prepared-receipt`: a staged
//! candidate under an install root, its receipt in
//! `execution_preparation`'s format (every digest computed here) and the
//! admitted row carrying the signed envelope.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use python_compat::{
    json::{encode_compact_sorted, Json, JsonObject},
    json_object,
};
use sha2::{Digest, Sha256};

use update_runner::release::INVALID_SIGNATURE_MESSAGE;

use super::{manifest_bytes, Fixture, Side, INSTALL_SH};

pub(crate) const PREPARATION: &str = "abcdefabcdefabcdefabcdefabcdef01";
pub(crate) const VERSION: &str = "1.2.3";

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(crate) fn sha256_file(path: &Path) -> String {
    hex(&Sha256::digest(std::fs::read(path).unwrap()))
}

pub(crate) fn write(path: &Path, content: &[u8], mode: u32) {
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub(crate) fn binding(path: &Path) -> Json {
    let info = std::fs::symlink_metadata(path).unwrap();
    Json::Object(json_object! {
        "device" => info.dev(),
        "inode" => info.ino(),
        "volume_uuid" => Json::Null,
    })
}

pub(crate) fn file_entry(path: &Path) -> Json {
    let info = std::fs::symlink_metadata(path).unwrap();
    Json::Object(json_object! {
        "kind" => "file",
        "mode" => info.mode() & 0o7777,
        "size" => info.len(),
        "sha256" => sha256_file(path),
    })
}

/// The source files of the candidate (as verified from the archive).
pub(crate) const SOURCES: [(&str, &str, u32); 6] = [
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
pub(crate) struct Prepared {
    pub fixture: Fixture,
    pub root: PathBuf,
    pub candidate: PathBuf,
    pub receipt: PathBuf,
    /// The signed manifest the server admitted.
    pub manifest: JsonObject,
}

impl Prepared {
    /// A candidate verified from a GitHub release (a schema-1 manifest).
    pub(crate) fn new(name: &str) -> Prepared {
        Prepared::signed(name, |fixture, archive| {
            fixture.legacy_manifest(VERSION, archive)
        })
    }

    /// A candidate verified from an npm package: the admitted envelope
    /// holds a schema-2 manifest (`update_preparation` verifies it with
    /// `allow_npm`), so the runner pins the version and API contract of the
    /// restarted server too.
    pub(crate) fn npm(name: &str) -> Prepared {
        Prepared::signed(name, |fixture, archive| {
            let mut manifest = fixture.npm_manifest(VERSION, archive);
            manifest.insert("api_contract_version", 28);
            manifest
        })
    }

    /// The candidate, its receipt and the envelope of the manifest `sign`
    /// makes for the release archive.
    fn signed(name: &str, sign: impl FnOnce(&Fixture, &[u8]) -> JsonObject) -> Prepared {
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
        let manifest = sign(&fixture, &archive);
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

    /// `install/.update-preparations/<PREPARATION>`.
    pub(crate) fn preparation_dir(&self) -> PathBuf {
        self.root.join(".update-preparations").join(PREPARATION)
    }

    /// Rewrite the receipt for the candidate as it is now (with `edit`) and
    /// admit its new digest.
    pub(crate) fn rewrite_receipt(
        &mut self,
        manifest: &JsonObject,
        edit: impl FnOnce(&mut JsonObject),
    ) {
        write_receipt(&self.root, &self.candidate, &self.receipt, manifest, edit);
        self.readmit_digest();
    }

    pub(crate) fn run(&self) -> super::Outcome {
        self.run_by(Side::Port)
    }

    /// The update run by `side`.
    pub(crate) fn run_by(&self, side: Side<'_>) -> super::Outcome {
        self.fixture.run(side)
    }

    /// Re-admit the receipt's current digest (after rewriting it).
    pub(crate) fn readmit_digest(&mut self) {
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
pub(crate) fn write_receipt(
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

/// A change to an admitted prepared update that the runner must refuse
/// before install.sh runs, and the failed row's message.
pub(crate) struct Refusal {
    pub name: &'static str,
    pub change: fn(&mut Prepared),
    pub message: fn(&Prepared) -> String,
}

fn prepared_update(prepared: &mut Prepared) -> &mut JsonObject {
    prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap()
}

fn option_at(prepared: &Prepared, flag: &str) -> usize {
    1 + prepared
        .fixture
        .options
        .iter()
        .position(|option| option == flag)
        .unwrap()
}

/// Every refused change (`update_preparation.verify_prepared_status`,
/// `execution_preparation.validate_prepared` and `run_update`'s own pins).
pub(crate) fn refusals() -> Vec<Refusal> {
    vec![
        Refusal {
            name: "digest-pin",
            change: |prepared| {
                let at = option_at(prepared, "--prepared-receipt-sha256");
                prepared.fixture.options[at] = "0".repeat(64);
            },
            message: |_| "Prepared release receipt digest changed".into(),
        },
        Refusal {
            name: "unbound",
            change: |prepared| {
                prepared
                    .fixture
                    .admitted
                    .insert("preparation_id", "00000000000000000000000000000000");
            },
            message: |_| "Prepared update is not bound to its pending intent".into(),
        },
        Refusal {
            name: "envelope",
            change: |prepared| {
                prepared_update(prepared)
                    .insert("envelope", json_object! {"manifest_base64" => "e30="});
            },
            message: |_| "Prepared update signed envelope is invalid".into(),
        },
        Refusal {
            name: "signature",
            change: |prepared| {
                let envelope = prepared_update(prepared)
                    .get_mut("envelope")
                    .and_then(Json::as_object_mut)
                    .unwrap();
                envelope.insert(
                    "signature_base64",
                    base64::engine::general_purpose::STANDARD.encode([9u8; 64]),
                );
            },
            message: |_| INVALID_SIGNATURE_MESSAGE.into(),
        },
        Refusal {
            name: "mode",
            change: |prepared| {
                prepared_update(prepared).insert("mode", "staged");
            },
            message: |_| "Unknown prepared update mode".into(),
        },
        // A legacy preparation has no staged candidate to activate.
        Refusal {
            name: "legacy",
            change: |prepared| {
                prepared_update(prepared).insert("mode", "legacy");
            },
            message: |_| "Prepared release receipt path changed".into(),
        },
        Refusal {
            name: "path",
            change: |prepared| {
                let at = option_at(prepared, "--prepared-receipt");
                prepared.fixture.options[at] = format!("{}/", prepared.receipt.display());
            },
            message: |_| "Prepared release receipt path changed".into(),
        },
        Refusal {
            name: "identity",
            change: |prepared| {
                prepared
                    .fixture
                    .admitted
                    .insert("preparation_id", "NOT-HEX");
                prepared_update(prepared).insert("preparation_id", "NOT-HEX");
            },
            message: |_| "Invalid preparation identity".into(),
        },
        Refusal {
            name: "receipt-changed",
            change: |prepared| {
                let mut bytes = std::fs::read(&prepared.receipt).unwrap();
                bytes.push(b' ');
                write(&prepared.receipt, &bytes, 0o600);
            },
            message: |_| "Prepared candidate receipt changed".into(),
        },
        Refusal {
            name: "receipt-mode",
            change: |prepared| {
                std::fs::set_permissions(&prepared.receipt, std::fs::Permissions::from_mode(0o644))
                    .unwrap();
            },
            message: |_| "Prepared candidate receipt is unsafe".into(),
        },
        Refusal {
            name: "preparation-dir",
            change: |prepared| {
                std::fs::set_permissions(
                    prepared.preparation_dir(),
                    std::fs::Permissions::from_mode(0o777),
                )
                .unwrap();
            },
            message: |_| "Preparation directory is not safely owned".into(),
        },
        Refusal {
            name: "preparation-missing",
            change: |prepared| std::fs::remove_dir(prepared.preparation_dir()).unwrap(),
            message: |prepared| {
                format!(
                    "[Errno 2] No such file or directory: '{}'",
                    prepared.preparation_dir().display()
                )
            },
        },
        Refusal {
            name: "receipt-pins",
            change: |prepared| {
                let manifest = prepared.fixture.legacy_manifest(VERSION, b"other archive");
                prepared.rewrite_receipt(&manifest, |_| {});
            },
            message: |_| "preparation receipt does not match the signed candidate".into(),
        },
        Refusal {
            name: "source-changed",
            change: |prepared| {
                write(
                    &prepared.candidate.join("agent_server.py"),
                    b"\"\"\"AgentsServer.\"\"\"\nAPI_CONTRACT_VERSION = 29\n",
                    0o644,
                );
            },
            message: |_| "prepared source differs from verified archive".into(),
        },
        Refusal {
            name: "runtime-changed",
            change: |prepared| {
                write(
                    &prepared.candidate.join(".venv/bin/extra"),
                    b"#!/bin/sh\n",
                    0o755,
                );
            },
            message: |_| "prepared runtime changed after preparation".into(),
        },
        Refusal {
            name: "unexpected",
            change: |prepared| write(&prepared.candidate.join("stray.py"), b"x = 1\n", 0o644),
            message: |_| "unexpected prepared runtime member".into(),
        },
        Refusal {
            name: "source-link",
            change: |prepared| {
                std::fs::remove_file(prepared.candidate.join("uv.lock")).unwrap();
                std::os::unix::fs::symlink("/etc/hostname", prepared.candidate.join("uv.lock"))
                    .unwrap();
            },
            message: |_| "prepared source links are forbidden".into(),
        },
        Refusal {
            name: "writable",
            change: |prepared| {
                std::fs::set_permissions(
                    prepared.candidate.join("VERSION"),
                    std::fs::Permissions::from_mode(0o666),
                )
                .unwrap();
            },
            message: |_| "preparation file is unsafe or too large".into(),
        },
        Refusal {
            name: "interpreter",
            change: |prepared| {
                std::fs::remove_file(prepared.candidate.join(".venv/bin/python")).unwrap();
                std::os::unix::fs::symlink("/bin/sh", prepared.candidate.join(".venv/bin/python"))
                    .unwrap();
            },
            message: |_| "external prepared dependency link is not an interpreter".into(),
        },
        // A staged release that declares another version ...
        Refusal {
            name: "version-file",
            change: |prepared| {
                write(&prepared.candidate.join("VERSION"), b"1.2.4\n", 0o644);
                let manifest = prepared.manifest.clone();
                prepared.rewrite_receipt(&manifest, |_| {});
            },
            message: |_| "prepared runtime version differs from signed candidate".into(),
        },
        // ... or another API contract.
        Refusal {
            name: "contract-file",
            change: |prepared| {
                write(
                    &prepared.candidate.join("agent_server.py"),
                    b"API_CONTRACT_VERSION = 27\n",
                    0o644,
                );
                let manifest = prepared.manifest.clone();
                prepared.rewrite_receipt(&manifest, |_| {});
            },
            message: |_| "prepared runtime API differs from signed candidate".into(),
        },
    ]
}

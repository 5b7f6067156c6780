//! Starting states, built by the stand-ins' fixtures (the journal writer,
//! the upstream layout, `prepare_runtime`), never by the helpers' code:
//! under one base, the roots `install/`, `config/`, `state/` and a `home/`.

use std::path::{Path, PathBuf};

use ed25519_dalek::pkcs8::EncodePublicKey;
use serde_json::{json, Value};

use super::scenario::{Program, Start};
use crate::files::{make_dirs, write_file};
use crate::journal_writer::Roots;
use crate::release_host::legacy_release_manifest;
use crate::release_support::{write_tar_gz, Member};
use crate::upstream_files::prepare_runtime;
use crate::upstream_layout::Layout;

/// The update every generated handoff and status row belongs to.
pub(super) const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
/// The server identity the handoff and the runner expect.
pub(super) const SERVER_IDENTITY: &str = "srv-campaign";
/// The handoff's preparation folder, relative to the base.
pub(super) const HANDOFF_FOLDER: &str =
    "install/.update-preparations/0123456789abcdef0123456789abcdef";
/// The handoff file, relative to the base.
pub(super) const HANDOFF_FILE: &str =
    "install/.update-preparations/0123456789abcdef0123456789abcdef/\
                                handoff-0123456789abcdef0123456789abcdef.json";
/// The update status row, relative to the base.
pub(super) const STATUS_FILE: &str = "state/admin/server-update.json";
/// The runner's health credential file, relative to the base.
pub(super) const TOKEN_FILE: &str =
    "state/admin/.server-update-0123456789abcdef0123456789abcdef.auth.json";
/// The agent token of the runtime env file.
const AGENT_TOKEN: &str = "campaign-agent-token-0001";

/// The words `{name}` of a command stand for, under `base`.
pub(super) fn placeholders(base: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("{root}", base.join("install")),
        ("{config}", base.join("config")),
        ("{state}", base.join("state")),
        ("{home}", base.join("home")),
        ("{release}", base.join("install/releases/1.0.0")),
        ("{status}", base.join(STATUS_FILE)),
        ("{handoff}", base.join(HANDOFF_FILE)),
        ("{token}", base.join(TOKEN_FILE)),
        ("{base}", base.to_path_buf()),
    ]
}

/// The version the runner's scenarios update to.
pub(super) const TARGET_VERSION: &str = "1.0.1";
/// The served release files (relative to the base), which the release host
/// answers from: what a publisher put online, damaged like any other file.
pub(super) const SERVED: &str = "served";

/// Builds `start` for `program` under `base` (which must not exist) and
/// returns the status row the handoff's `retry-failed` is given;
/// `release_base` is where the runner's release host publishes.
pub(super) fn build(base: &Path, program: Program, start: Start, release_base: &str) -> Vec<u8> {
    make_dirs(base, 0o755);
    make_dirs(&base.join("home"), 0o755);
    let roots = Roots::create(base, &base.join("home"));
    match start {
        Start::Split => split(&roots),
        Start::Journal(phase) => journal(&roots, phase),
        Start::Legacy => legacy(&roots),
        Start::Bare => {}
    }
    if start != Start::Bare {
        write_layout_file(base, &roots);
    }
    match program {
        Program::Handoff => update_files(base, failed_status()),
        Program::Runner => {
            public_key(base);
            publish(base, release_base);
            let health = json!({
                "ok": true,
                "server_identity": SERVER_IDENTITY,
                "server_version": "1.0.0",
                "active_count": 0,
                "update_blocking_queued_count": 0,
                "update_service_cgroup": {
                    "safe": true, "unknown_descendant_count": 0, "inspection": "verified",
                },
            });
            write_file(
                &base.join(SERVED).join("health.json"),
                &json_line(&health),
                0o644,
            );
            update_files(base, starting_status())
        }
        _ => Vec::new(),
    }
}

fn split(roots: &Roots) {
    roots.release("1.0.0");
    roots.write_env(&format!("AGENTSDOCK_AGENT_TOKEN={AGENT_TOKEN}\n"));
    roots.install_split("1.0.0");
    prepare_runtime(&roots.state_root()).expect("the runtime folder");
}

fn journal(roots: &Roots, phase: &str) {
    roots.begin_update();
    prepare_runtime(&roots.state_root()).expect("the runtime folder");
    let chain: &[&str] = match phase {
        "prepared" => &[],
        "quiescing" => &["quiescing"],
        "quiesced" => &["quiescing", "quiesced"],
        "linking" => &["quiescing", "quiesced", "linking"],
        _ => {
            roots.advance_to_linked();
            match phase {
                "committed" => &["committed"],
                "rolling-back" => &["rolling-back"],
                "rolled-back" => {
                    roots.record("rolling-back");
                    roots.restore_files();
                    &["rolled-back"]
                }
                _ => &[],
            }
        }
    };
    for phase in chain {
        roots.record(phase);
    }
}

fn legacy(roots: &Roots) {
    roots.release("1.0.0");
    roots.write_env(&format!("AGENTSDOCK_AGENT_TOKEN={AGENT_TOKEN}\n"));
    roots.link_current("1.0.0");
    let current = roots.root().join("current");
    let unit = format!(
        "[Unit]\nDescription=AgentsServer\n\n[Service]\nType=simple\n\
         WorkingDirectory={current}\nExecStart={current}/.venv/bin/python \
         {current}/agent_server.py serve --bind 127.0.0.1 --port 7850\nRestart=always\n\n\
         [Install]\nWantedBy=default.target\n",
        current = current.display()
    );
    roots.write_unit(&roots.service_path(), &unit, 0o644);
}

/// `layout.json`: the layout of 1.0.0 as `execution-manage apply` reads it
/// (what install.sh writes for it), private.
fn write_layout_file(base: &Path, roots: &Roots) {
    let Ok(layout) = Layout::of(&roots.layout("1.0.0")) else {
        return;
    };
    let mut text = serde_json::to_vec_pretty(&layout.to_value()).expect("a layout as JSON");
    text.push(b'\n');
    write_file(&base.join("layout.json"), &text, 0o600);
}

fn handoff() -> Value {
    json!({
        "schema": 1,
        "operation_id": "01234567-89ab-cdef-0123-456789abcdef",
        "worker_instance_id": "worker-campaign",
        "lease_id": "fedcba98-7654-3210-fedc-ba9876543210",
        "expected_server_identity": SERVER_IDENTITY,
    })
}

/// The row a runner whose handoff release failed leaves (the server's
/// `retry-failed` input).
fn failed_status() -> Value {
    json!({
        "phase": "failed",
        "update_id": UPDATE_ID,
        "error_code": "server_update_handoff_release_failed",
        "retryable": true,
        "runner_pid": null,
        "message": "The update failed.",
        "_execution_handoff": handoff(),
    })
}

/// The row the server admits an update with.
fn starting_status() -> Value {
    json!({
        "phase": "starting",
        "update_id": UPDATE_ID,
        "track": "stable",
        "current_track": "stable",
        "target_version": "1.0.1",
        "latest_version": "1.0.1",
        "update_available": true,
        "message": "Starting the AgentsServer update.",
        "runner_pid": null,
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": null,
        "_execution_handoff": handoff(),
    })
}

/// The handoff (private folders, 0600), the status row and the runner's
/// credential; returns the row's bytes.
fn update_files(base: &Path, status: Value) -> Vec<u8> {
    let install = base.join("install");
    if install.is_dir() {
        let folder = base.join(HANDOFF_FOLDER);
        make_dirs(folder.parent().expect("a preparations folder"), 0o700);
        make_dirs(&folder, 0o700);
        write_file(&base.join(HANDOFF_FILE), &json_line(&handoff()), 0o600);
    }
    make_dirs(&base.join("state/admin"), 0o700);
    let row = json_line(&status);
    write_file(&base.join(STATUS_FILE), &row, 0o600);
    write_file(
        &base.join(TOKEN_FILE),
        &json_line(&json!({"token": AGENT_TOKEN})),
        0o600,
    );
    row
}

fn json_line(value: &Value) -> Vec<u8> {
    let mut text = serde_json::to_vec(value).expect("JSON");
    text.push(b'\n');
    text
}

/// The release key, fixed for ever (the files the facts hold must not
/// change between the recording and the replay).
pub(super) fn release_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[7; 32])
}

/// Signs the served manifest's bytes as they are (after a damage: a
/// manifest edited and signed again, which gets past the signature).
pub(super) fn sign_served_manifest(base: &Path) {
    use ed25519_dalek::Signer as _;
    let served = base.join(SERVED);
    let signature_path = served.join("manifest.sig");
    if signature_path.is_dir() {
        // A folder in the signature's place stays what a damage made it.
        return;
    }
    let manifest_path = served.join("manifest.json");
    // Only a regular file is read: a FIFO a damage left would wait for ever.
    if !std::fs::symlink_metadata(&manifest_path).is_ok_and(|info| info.is_file()) {
        return;
    }
    if let Ok(manifest) = std::fs::read(&manifest_path) {
        let signature = release_key().sign(&manifest).to_bytes();
        let _ = std::fs::remove_file(&signature_path);
        if served.is_dir() {
            write_file(&signature_path, &signature, 0o644);
        }
    }
}

/// Release [`TARGET_VERSION`] as its publisher puts it online: a gzip tar
/// whose `install.sh` records its arguments beside the install root and
/// fails, the schema-1 manifest naming it under `release_base`, and the
/// manifest's signature.
fn publish(base: &Path, release_base: &str) {
    let served = base.join(SERVED);
    make_dirs(&served, 0o755);
    let top = format!("agents-server-{TARGET_VERSION}");
    let installer = "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$AGENTS_SERVER_INSTALL_DIR/../install.sh-arguments\"\nexit 3\n";
    let members = [
        Member::dir(&format!("{top}/")),
        Member::file(&format!("{top}/install.sh"), installer.as_bytes()).mode(0o755),
        Member::file(
            &format!("{top}/VERSION"),
            format!("{TARGET_VERSION}\n").as_bytes(),
        ),
        Member::file(
            &format!("{top}/agent_server.py"),
            b"API_CONTRACT_VERSION = 28\n",
        ),
    ];
    let archive_path = served.join("archive.tar.gz");
    write_tar_gz(&archive_path, &members);
    let archive = std::fs::read(&archive_path).expect("the archive");
    let manifest = legacy_release_manifest(release_base, TARGET_VERSION, &archive);
    let bytes = python_compat::json::encode_indented(&python_compat::json::Json::Object(manifest));
    write_file(&served.join("manifest.json"), &bytes, 0o644);
    sign_served_manifest(base);
}

fn public_key(base: &Path) {
    let key = release_key();
    let pem = key
        .verifying_key()
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .expect("a PEM public key");
    write_file(&base.join("release-public-key.pem"), pem.as_bytes(), 0o644);
}

//! The prepared-release path of `update-runner` (`--prepared-receipt`): a
//! staged candidate under the install root, its receipt written here entry
//! by entry in `execution_preparation`'s format (every digest computed by
//! the test itself), and the signed envelope the server admitted. The
//! runner must activate exactly that candidate through install.sh's
//! `--activate-prepared`, record the recovery intent first, and refuse any
//! change to the receipt, the staged tree or the admission.
//!
//! The seed's `update_preparation` is not among the seeds, so rows are
//! checked against the texts of `update_runner.run_update`,
//! `update_preparation.verify_prepared_status` and
//! `execution_preparation.validate_prepared`.

mod update_runner_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use agents_common::{json_object, Json, JsonObject};
use base64::Engine as _;
use update_runner::release::INVALID_SIGNATURE_MESSAGE;
use update_runner_support::prepared::*;
use update_runner_support::{IDENTITY, UPDATE_ID};

fn field(row: &JsonObject, key: &str) -> Json {
    row.get(key).cloned().unwrap_or(Json::Null)
}

fn expect_refused(prepared: &Prepared, message: &str) {
    let outcome = prepared.run();
    assert_eq!(outcome.exit, Some(1));
    assert_eq!(
        field(&outcome.row, "phase"),
        Json::from("failed"),
        "{:?}",
        outcome.row
    );
    assert_eq!(field(&outcome.row, "message"), Json::from(message));
    assert_eq!(outcome.installer, None);
    assert!(outcome.leftovers.is_empty());
}

#[test]
fn a_prepared_candidate_is_activated_in_place() {
    let prepared = Prepared::new("prepared");
    let outcome = prepared.run();
    assert_eq!(
        outcome.exit,
        Some(0),
        "{:?} {}",
        outcome.row,
        outcome.stderr
    );
    let row = &outcome.row;
    assert_eq!(field(row, "phase"), Json::from("complete"));
    assert_eq!(
        field(row, "message"),
        Json::from("AgentsServer 1.2.3 is installed and healthy.")
    );
    let intent = json_object! {
        "format" => 1,
        "root" => prepared.root.to_string_lossy().into_owned(),
        "root_binding" => binding(&prepared.root),
        "candidate_binding" => binding(&prepared.candidate),
        "version" => VERSION,
        "api_contract" => 28,
        "update_id" => UPDATE_ID,
        "server_identity" => IDENTITY,
    };
    assert_eq!(field(row, "_activation_recovery"), Json::Object(intent));
    let installer = outcome.installer.expect("install.sh ran");
    assert_eq!(
        installer[0],
        format!("cwd={}", prepared.candidate.display())
    );
    let arguments: Vec<&str> = installer[1..]
        .iter()
        .map(|line| line.strip_prefix("arg=").unwrap_or(line))
        .collect();
    let receipt = prepared.receipt.to_string_lossy().into_owned();
    let at = arguments
        .iter()
        .position(|word| *word == "--activate-prepared")
        .expect("activate flag");
    assert_eq!(arguments[at + 1], receipt);
    assert_eq!(arguments[at + 2], "--prepared-archive-sha256");
    let signed_sha = prepared
        .manifest
        .get("archive")
        .and_then(|a| a.get("sha256"))
        .cloned();
    assert_eq!(Some(Json::from(arguments[at + 3])), signed_sha);
    assert_eq!(
        arguments[at + 4..at + 8],
        ["--execution-mode", "split", "--expected-api-contract", "28"]
    );
    // Nothing was downloaded: the candidate was staged already.
    assert!(!prepared
        .fixture
        .host_requests()
        .iter()
        .any(|path| path.ends_with(".tar.gz")));
    // The staged tree is activated as it is (install.sh keeps its mode).
    let mode = std::fs::metadata(prepared.candidate.join("install.sh"))
        .unwrap()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
}

#[test]
fn admission_changes_are_refused() {
    let mut prepared = Prepared::new("digest-pin");
    let at = prepared.fixture.options.len() - 1;
    prepared.fixture.options[at] = "0".repeat(64);
    expect_refused(&prepared, "Prepared release receipt digest changed");

    let mut prepared = Prepared::new("unbound");
    prepared
        .fixture
        .admitted
        .insert("preparation_id", "00000000000000000000000000000000");
    expect_refused(
        &prepared,
        "Prepared update is not bound to its pending intent",
    );

    let mut prepared = Prepared::new("envelope");
    let update = prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap();
    update.insert("envelope", json_object! {"manifest_base64" => "e30="});
    expect_refused(&prepared, "Prepared update signed envelope is invalid");

    let mut prepared = Prepared::new("signature");
    let update = prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap();
    let envelope = update
        .get_mut("envelope")
        .and_then(Json::as_object_mut)
        .unwrap();
    envelope.insert(
        "signature_base64",
        base64::engine::general_purpose::STANDARD.encode([9u8; 64]),
    );
    expect_refused(&prepared, INVALID_SIGNATURE_MESSAGE);

    let mut prepared = Prepared::new("mode");
    let update = prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap();
    update.insert("mode", "staged");
    expect_refused(&prepared, "Unknown prepared update mode");

    // A legacy preparation has no staged candidate to activate.
    let mut prepared = Prepared::new("legacy");
    let update = prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap();
    update.insert("mode", "legacy");
    expect_refused(&prepared, "Prepared release receipt path changed");

    let mut prepared = Prepared::new("path");
    let at = prepared
        .fixture
        .options
        .iter()
        .position(|o| o == "--prepared-receipt")
        .unwrap();
    prepared.fixture.options[at + 1] = format!("{}/", prepared.receipt.display());
    expect_refused(&prepared, "Prepared release receipt path changed");

    let mut prepared = Prepared::new("identity");
    prepared
        .fixture
        .admitted
        .insert("preparation_id", "NOT-HEX");
    let update = prepared
        .fixture
        .admitted
        .get_mut("_prepared_update")
        .and_then(Json::as_object_mut)
        .unwrap();
    update.insert("preparation_id", "NOT-HEX");
    expect_refused(&prepared, "Invalid preparation identity");
}

#[test]
fn receipt_and_directory_changes_are_refused() {
    let prepared = Prepared::new("receipt-changed");
    let mut bytes = std::fs::read(&prepared.receipt).unwrap();
    bytes.push(b' ');
    write(&prepared.receipt, &bytes, 0o600);
    expect_refused(&prepared, "Prepared candidate receipt changed");

    let prepared = Prepared::new("receipt-mode");
    std::fs::set_permissions(&prepared.receipt, std::fs::Permissions::from_mode(0o644)).unwrap();
    expect_refused(&prepared, "Prepared candidate receipt is unsafe");

    let prepared = Prepared::new("preparation-dir");
    std::fs::set_permissions(
        prepared.root.join(".update-preparations").join(PREPARATION),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    expect_refused(&prepared, "Preparation directory is not safely owned");

    let prepared = Prepared::new("preparation-missing");
    std::fs::remove_dir(prepared.root.join(".update-preparations").join(PREPARATION)).unwrap();
    expect_refused(
        &prepared,
        &format!(
            "[Errno 2] No such file or directory: '{}'",
            prepared
                .root
                .join(".update-preparations")
                .join(PREPARATION)
                .display()
        ),
    );

    let mut prepared = Prepared::new("receipt-pins");
    let manifest = prepared.fixture.legacy_manifest(VERSION, b"other archive");
    prepared.rewrite_receipt(&manifest, |_| {});
    expect_refused(
        &prepared,
        "preparation receipt does not match the signed candidate",
    );
}

#[test]
fn staged_tree_changes_are_refused() {
    let prepared = Prepared::new("source-changed");
    write(
        &prepared.candidate.join("agent_server.py"),
        b"\"\"\"AgentsServer.\"\"\"\nAPI_CONTRACT_VERSION = 29\n",
        0o644,
    );
    expect_refused(&prepared, "prepared source differs from verified archive");

    let prepared = Prepared::new("runtime-changed");
    write(
        &prepared.candidate.join(".venv/bin/extra"),
        b"#!/bin/sh\n",
        0o755,
    );
    expect_refused(&prepared, "prepared runtime changed after preparation");

    let prepared = Prepared::new("unexpected");
    write(&prepared.candidate.join("stray.py"), b"x = 1\n", 0o644);
    expect_refused(&prepared, "unexpected prepared runtime member");

    let prepared = Prepared::new("source-link");
    std::fs::remove_file(prepared.candidate.join("uv.lock")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", prepared.candidate.join("uv.lock")).unwrap();
    expect_refused(&prepared, "prepared source links are forbidden");

    let prepared = Prepared::new("writable");
    std::fs::set_permissions(
        prepared.candidate.join("VERSION"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    expect_refused(&prepared, "preparation file is unsafe or too large");

    let prepared = Prepared::new("interpreter");
    std::fs::remove_file(prepared.candidate.join(".venv/bin/python")).unwrap();
    std::os::unix::fs::symlink("/bin/sh", prepared.candidate.join(".venv/bin/python")).unwrap();
    expect_refused(
        &prepared,
        "external prepared dependency link is not an interpreter",
    );

    // A staged release that declares another version.
    let mut prepared = Prepared::new("version-file");
    write(&prepared.candidate.join("VERSION"), b"1.2.4\n", 0o644);
    let manifest = prepared.manifest.clone();
    prepared.rewrite_receipt(&manifest, |_| {});
    expect_refused(
        &prepared,
        "prepared runtime version differs from signed candidate",
    );

    // ... or another API contract.
    let mut prepared = Prepared::new("contract-file");
    write(
        &prepared.candidate.join("agent_server.py"),
        b"API_CONTRACT_VERSION = 27\n",
        0o644,
    );
    let manifest = prepared.manifest.clone();
    prepared.rewrite_receipt(&manifest, |_| {});
    expect_refused(
        &prepared,
        "prepared runtime API differs from signed candidate",
    );
}

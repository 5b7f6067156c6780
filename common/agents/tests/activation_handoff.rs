//! `read_update_handoff` (`update_handoff._read_handoff`) over real files:
//! the owned location, privacy, schema and each refusal's exact message.

use std::fs;
use std::path::PathBuf;

use agents_common::read_update_handoff;
use agents_tests::journal_writer::Install;
use agents_tests::{assert_error, make_dir, write_file};
use python_compat::{json::Json, json_object, ErrorClass};

const PREPARATION: &str = "00112233445566778899aabbccddeeff";
const HANDOFF: &str = "handoff-ffeeddccbbaa99887766554433221100.json";

fn handoff() -> python_compat::json::JsonObject {
    json_object! {
        "schema" => 1,
        "operation_id" => "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
        "worker_instance_id" => "worker_1-a",
        "lease_id" => "6ba7b812-9dad-11d1-80b4-00c04fd430c8",
        "expected_server_identity" => "srv-1",
    }
}

/// `.update-preparations/<hex>/handoff-<hex>.json` holding `text`.
fn placed(install: &Install, text: &str) -> PathBuf {
    let preparations = install.root().join(".update-preparations");
    if !preparations.exists() {
        make_dir(&preparations, 0o700);
        make_dir(&preparations.join(PREPARATION), 0o700);
    }
    let path = preparations.join(PREPARATION).join(HANDOFF);
    let _ = fs::remove_file(&path);
    write_file(&path, text.as_bytes(), 0o600);
    path
}

fn encoded(value: &python_compat::json::JsonObject) -> String {
    String::from_utf8(python_compat::json::encode_indented(&Json::Object(
        value.clone(),
    )))
    .unwrap()
}

#[test]
fn an_owned_private_handoff_reads_back() {
    let install = Install::new("handoff");
    let path = placed(&install, &encoded(&handoff()));
    assert_eq!(
        read_update_handoff(&install.root(), &path).unwrap(),
        handoff()
    );
}

#[test]
fn refusals_keep_python_messages() {
    let install = Install::new("handoff-refusals");
    let path = placed(&install, &encoded(&handoff()));
    let elsewhere = install.root().join(HANDOFF);
    write_file(&elsewhere, encoded(&handoff()).as_bytes(), 0o600);
    assert_error(
        read_update_handoff(&install.root(), &elsewhere),
        ErrorClass::Value,
        "handoff is outside its owned preparation directory",
    );
    let check = |text: String, class: ErrorClass, message: &str| {
        let path = placed(&install, &text);
        assert_error(read_update_handoff(&install.root(), &path), class, message);
    };
    check(
        "{\"schema\": 1, \"schema\": 1}".into(),
        ErrorClass::Value,
        "duplicate handoff field",
    );
    let mut extra = handoff();
    extra.insert("extra", 1);
    check(encoded(&extra), ErrorClass::Value, "invalid handoff schema");
    let mut schema = handoff();
    schema.insert("schema", true);
    check(
        encoded(&schema),
        ErrorClass::Value,
        "invalid handoff schema",
    );
    let mut upper = handoff();
    upper.insert("lease_id", "6BA7B812-9DAD-11D1-80B4-00C04FD430C8");
    check(
        encoded(&upper),
        ErrorClass::Value,
        "invalid handoff operation or lease",
    );
    let mut garbage = handoff();
    garbage.insert("operation_id", "not-a-uuid");
    check(
        encoded(&garbage),
        ErrorClass::Value,
        "badly formed hexadecimal UUID string",
    );
    let mut identity = handoff();
    identity.insert("expected_server_identity", "srv 1");
    check(
        encoded(&identity),
        ErrorClass::Value,
        "invalid handoff worker or server identity",
    );
    fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let placed_again = install
        .root()
        .join(".update-preparations")
        .join(PREPARATION)
        .join(HANDOFF);
    write_file(&placed_again, encoded(&handoff()).as_bytes(), 0o644);
    assert_error(
        read_update_handoff(&install.root(), &placed_again),
        ErrorClass::Permission,
        &format!(
            "execution configuration is unsafe: {}",
            placed_again.display()
        ),
    );
}

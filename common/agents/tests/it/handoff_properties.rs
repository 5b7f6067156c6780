//! The sealed handoff file as a property: generated handoff documents
//! (fields removed, added or given UUIDs in every form `uuid.UUID` reads,
//! identities at and past their limits, bools for ints, duplicate keys,
//! trailing garbage) and paths in and out of their preparation directory
//! must be accepted with the same value or refused with the same class and
//! message as the original's own `update_handoff._read_handoff`.
//!
//! The original runs with its two imports replaced by stand-ins that skip the
//! ownership and symlink checks our files already pass (they are real
//! private files under plain directories here), so the oracle is the
//! original's validation itself. `PROPTEST_CASES`
//! sets the batch size.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use agents_common::read_update_handoff;
use agents_tests::{Originals, TempDir};
use python_compat::{
    json::{encode_compact, encode_line, parse_json, Json, JsonObject},
    json_object,
};

const ORACLE: &str = r#"
import json, os, sys, types
from pathlib import Path
files = types.ModuleType("execution_install")
def _path(value):
    path = Path(value)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError("execution paths must be absolute without traversal")
    return path
files._path = _path
files._owned_directory = lambda path, private=False: None
def _read_file(path, private=False):
    with open(path, "rb") as stream:
        return stream.read(), 0o600
files._read_file = _read_file
sys.modules["execution_install"] = files
manage = types.ModuleType("execution_manage")
for name in ("InstallationLock", "NativeServices", "WorkerControl"):
    setattr(manage, name, object)
sys.modules["execution_manage"] = manage
sys.path.insert(0, os.environ["ORIGINALS_DIR"])
import update_handoff
out = []
for root, path in json.load(sys.stdin):
    try:
        out.append({"ok": update_handoff._read_handoff(Path(root), Path(path))})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#;

const OPERATION: &str = "3f1d2c4b-5a69-4788-9abc-def012345678";
const LEASE: &str = "9e8d7c6b-5a49-4382-a1b0-c9d8e7f6a5b4";
const PREPARATION: &str = "0123456789abcdef0123456789abcdef";

fn valid_handoff() -> JsonObject {
    json_object! {
        "schema" => 1,
        "operation_id" => OPERATION,
        "worker_instance_id" => "worker_instance-1",
        "lease_id" => LEASE,
        "expected_server_identity" => "server-identity-1",
    }
}

fn arb_value() -> impl Strategy<Value = Json> {
    let uuids = prop::sample::select(vec![
        OPERATION.to_string(),
        OPERATION.to_uppercase(),
        OPERATION.replace('-', ""),
        format!("{{{OPERATION}}}"),
        format!("urn:uuid:{OPERATION}"),
        format!("{OPERATION} "),
        "3f1d2c4b-5a69-4788-9abc-def01234567".to_string(),
        "not-a-uuid".to_string(),
    ]);
    let identities = prop::sample::select(vec![
        "w".to_string(),
        "w".repeat(128),
        "w".repeat(129),
        String::new(),
        "worker.1".to_string(),
        "worker 1".to_string(),
        "wörker".to_string(),
        "worker\n".to_string(),
    ]);
    prop_oneof![
        3 => uuids.prop_map(Json::from),
        3 => identities.prop_map(Json::from),
        1 => prop::sample::select(vec![0i128, 1, 2, -1]).prop_map(Json::Int),
        1 => any::<bool>().prop_map(Json::Bool),
        1 => Just(Json::Float(1.0)),
        1 => Just(Json::Null),
        1 => Just(Json::Array(vec![])),
    ]
}

/// One change: a field removed, set, or an extra field added.
#[derive(Clone, Debug)]
enum Edit {
    Remove(&'static str),
    Set(&'static str, Json),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    let key = prop::sample::select(vec![
        "schema",
        "operation_id",
        "worker_instance_id",
        "lease_id",
        "expected_server_identity",
        "extra",
    ]);
    prop_oneof![
        key.clone().prop_map(Edit::Remove),
        (key, arb_value()).prop_map(|(key, value)| Edit::Set(key, value)),
    ]
}

/// How the document's text is damaged after encoding.
#[derive(Clone, Copy, Debug)]
enum Damage {
    None,
    DuplicateKey,
    TrailingGarbage,
    NotAnObject,
}

/// Where the handoff file sits relative to its root.
#[derive(Clone, Copy, Debug)]
enum Place {
    Owned,
    UppercaseDirectory,
    ShortName,
    OtherRoot,
}

fn document(edits: &[Edit], damage: Damage) -> Vec<u8> {
    let mut handoff = valid_handoff();
    for edit in edits {
        match edit {
            Edit::Remove(key) => {
                handoff.remove(key);
            }
            Edit::Set(key, value) => {
                handoff.insert(*key, value.clone());
            }
        }
    }
    let text = encode_line(&Json::Object(handoff), false);
    let text = match damage {
        Damage::None => text,
        Damage::DuplicateKey => format!("{{\"schema\": 1, {}", &text[1..]),
        Damage::TrailingGarbage => format!("{text} x"),
        Damage::NotAnObject => format!("[{text}]"),
    };
    text.into_bytes()
}

/// Writes `data` as a private handoff under `root` where `place` says and
/// returns its path.
fn place_handoff(root: &Path, index: usize, place: Place, data: &[u8]) -> PathBuf {
    let hex = format!("{index:032x}");
    let (directory, name) = match place {
        Place::Owned => (hex.clone(), format!("handoff-{PREPARATION}.json")),
        Place::UppercaseDirectory => (
            hex.to_uppercase().replace('0', "A"),
            format!("handoff-{PREPARATION}.json"),
        ),
        Place::ShortName => (hex.clone(), format!("handoff-{}.json", &PREPARATION[1..])),
        Place::OtherRoot => (hex.clone(), format!("handoff-{PREPARATION}.json")),
    };
    let preparations = match place {
        Place::OtherRoot => root.join("elsewhere"),
        _ => root.join(".update-preparations"),
    };
    let directory = preparations.join(directory);
    std::fs::create_dir_all(&directory).unwrap();
    for private in [&preparations, &directory] {
        std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let path = directory.join(name);
    std::fs::write(&path, data).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn original(originals: &Originals, input: &Json) -> Vec<Json> {
    let mut child = Command::new("python3")
        .args(["-B", "-c", ORACLE])
        .env("ORIGINALS_DIR", originals.dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&encode_compact(input).unwrap())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "oracle failed");
    match parse_json(&output.stdout).unwrap() {
        Json::Array(outcomes) => outcomes,
        other => panic!("oracle printed {other:?}"),
    }
}

#[test]
fn generated_handoff_files_match_the_original() {
    let originals = agents_tests::require_originals!();
    let count = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse::<usize>().ok())
        .unwrap_or(200);
    let strategy = (
        prop::collection::vec(arb_edit(), 0..3),
        prop_oneof![
            6 => Just(Damage::None),
            1 => Just(Damage::DuplicateKey),
            1 => Just(Damage::TrailingGarbage),
            1 => Just(Damage::NotAnObject),
        ],
        prop_oneof![
            8 => Just(Place::Owned),
            1 => Just(Place::UppercaseDirectory),
            1 => Just(Place::ShortName),
            1 => Just(Place::OtherRoot),
        ],
    );
    let dir = TempDir::new("handoff-properties");
    let root = dir.path().join("install");
    // One batch through the original; reproducible from the fixed runner original.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let cases: Vec<(String, PathBuf)> = (0..count)
        .map(|index| {
            let (edits, damage, place) = strategy.new_tree(&mut runner).unwrap().current();
            let data = document(&edits, damage);
            let path = place_handoff(&root, index, place, &data);
            (format!("#{index} {edits:?} {damage:?} {place:?}"), path)
        })
        .collect();
    let input = Json::Array(
        cases
            .iter()
            .map(|(_, path)| {
                Json::Array(vec![
                    Json::from(root.to_str().unwrap()),
                    Json::from(path.to_str().unwrap()),
                ])
            })
            .collect(),
    );
    let outcomes = original(&originals, &input);
    assert_eq!(outcomes.len(), cases.len());
    let (mut accepted, mut refused) = (0, 0);
    for ((label, path), expected) in cases.iter().zip(&outcomes) {
        match (read_update_handoff(&root, path), expected.get("ok")) {
            (Ok(ours), Some(value)) => {
                assert_eq!(&Json::Object(ours), value, "{label}");
                accepted += 1;
            }
            (Err(error), None) => {
                assert_eq!(
                    Some(&Json::from(error.message())),
                    expected.get("message"),
                    "{label}"
                );
                let class = expected.get("error").and_then(Json::as_str).unwrap();
                let ours = error.class().python_name();
                assert!(
                    ours == class || (class == "JSONDecodeError" && ours.ends_with(class)),
                    "{label}: {ours} vs {class}"
                );
                refused += 1;
            }
            (ours, _) => panic!("{label}: ours {ours:?}, original {expected:?}"),
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

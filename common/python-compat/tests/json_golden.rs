//! Every vector of the golden `json.json` (tests/fixtures/golden): the bytes CPython's
//! `json.dumps` produced for the activation manifest style (compact, sorted)
//! and the layout/journal/evidence style (indent 2, sorted), compared byte for
//! byte. Needs no Python.

use python_compat::json::{encode_compact_sorted, encode_indented, parse_json, Json};

/// The workspace's golden file (`tests/fixtures/golden/json.json`), shared
/// with the activation manifest tests of agents-common.
const GOLDEN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/golden/json.json"
);

fn vectors() -> Vec<Json> {
    let data = std::fs::read(GOLDEN).unwrap_or_else(|err| panic!("golden file {GOLDEN}: {err}"));
    let golden = parse_json(&data).expect("golden file parses");
    let vectors = golden
        .get("vectors")
        .and_then(Json::as_array)
        .expect("golden file has vectors")
        .clone();
    assert!(vectors.len() >= 10, "golden file lost its vectors");
    vectors
}

fn expected<'a>(vector: &'a Json, style: &str) -> &'a [u8] {
    vector
        .get(style)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("vector lacks {style}"))
        .as_bytes()
}

#[test]
fn compact_sorted_matches_python_byte_for_byte() {
    for vector in vectors() {
        let value = vector.get("value").expect("vector has a value");
        let expected = expected(&vector, "compact_sorted_ascii");
        assert_eq!(
            String::from_utf8_lossy(&encode_compact_sorted(value)),
            String::from_utf8_lossy(expected),
            "value {value:?}"
        );
    }
}

#[test]
fn indented_sorted_matches_python_byte_for_byte() {
    for vector in vectors() {
        let value = vector.get("value").expect("vector has a value");
        let expected = expected(&vector, "indent2_sorted_ascii");
        assert_eq!(
            String::from_utf8_lossy(&encode_indented(value)),
            String::from_utf8_lossy(expected),
            "value {value:?}"
        );
    }
}

/// Python's output parses back to the value it was made from, key order aside.
#[test]
fn python_output_parses_back_to_the_value() {
    for vector in vectors() {
        let value = vector.get("value").expect("vector has a value");
        for style in ["compact_sorted_ascii", "indent2_sorted_ascii"] {
            let parsed = parse_json(expected(&vector, style)).expect("golden output parses");
            assert_eq!(&parsed, value, "{style}");
        }
    }
}

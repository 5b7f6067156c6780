//! Hostile input to `update-runner`, side by side with the seed where the
//! seed is safe, and stricter than it where it is not (README, "Security").
//! Every case checks the final status row: no input may leave an admitted
//! update unrecorded.

mod update_runner_support;

use agents_common::{encode_indented, parse_json, Json, JsonObject};
use update_runner_support::{idle_health, updated_health, Fixture, UPDATE_ID};

/// A value json.loads returns but no Rust string or i128 can hold: a lone
/// surrogate in a value and in a key, an escaped pair split over two encoded
/// surrogates, and ints beyond 128 bits.
fn exotic() -> Json {
    parse_json(
        b"{\"lone\": \"a\\ud800b\", \"\\udc80key\": 1, \"split\": \"\xed\xa0\xbd\xed\xb8\x80\", \
          \"big\": 1267650600228229401496703205376000000000000, \"negative\": -170141183460469231731687303715884105729}",
    )
    .expect("json.loads accepts it")
}

fn with_exotic(mut object: JsonObject) -> JsonObject {
    object.insert("exotic", exotic());
    object
}

#[test]
fn rows_and_health_documents_python_accepts_are_held_and_kept_byte_for_byte() {
    let originals = agents_tests::require_originals!();
    let mut fixture = Fixture::new("hostile-json");
    let archive = fixture.archive(&Fixture::legacy_members("1.2.3"));
    fixture.publish_legacy("1.2.3", &archive);
    fixture.options = vec!["--expected-version".into(), "1.2.3".into()];
    fixture.admitted = with_exotic(fixture.admitted.clone());
    fixture.set_health(
        with_exotic(idle_health()),
        with_exotic(updated_health("1.2.3", 28)),
    );
    let (seed, port) = fixture.compare(&originals, None);
    assert_eq!(seed.exit, Some(0), "the seed completes: {}", seed.stderr);
    assert_eq!(port.row.get("phase"), Some(&Json::from("complete")));
    assert_eq!(port.row.get("update_id"), Some(&Json::from(UPDATE_ID)));
    // The server's exotic values survive every runner write, exactly as
    // json.dumps writes them (and json.loads reads them back: the split pair
    // is written as the escapes of one character, which then reads as one).
    let written_once = parse_json(&encode_indented(&exotic())).unwrap();
    assert_eq!(port.row.get("exotic"), Some(&written_once));
    let written = String::from_utf8(encode_indented(&Json::Object(port.row.clone()))).unwrap();
    for text in [
        "\"a\\ud800b\"",
        "\"\\udc80key\": 1",
        "\"\\ud83d\\ude00\"",
        "1267650600228229401496703205376000000000000",
        "-170141183460469231731687303715884105729",
    ] {
        assert!(written.contains(text), "{text} in {written}");
    }
}

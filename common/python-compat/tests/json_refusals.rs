//! What the parser refuses and how, without Python: each message below is the
//! text CPython 3.11's `json.loads` gives for the same bytes (the differential
//! test in json_python.rs re-checks them against a live interpreter).

use python_compat::{
    json::{
        encode_compact, encode_compact_sorted, encode_indented, encode_line, parse_json,
        parse_json_unique, Json,
    },
    ErrorClass,
};
use sha2::{Digest, Sha256};

/// The message of a `json.JSONDecodeError` for `data`.
fn refusal(data: &[u8]) -> String {
    refusal_as(ErrorClass::JsonDecode, data)
}

/// The message of the refusal of `data`, which must be of `class`.
fn refusal_as(class: ErrorClass, data: &[u8]) -> String {
    let error = parse_json(data).expect_err("document must be refused");
    assert_eq!(error.class(), class, "{error}");
    error.message().to_owned()
}

#[test]
fn syntax_errors_carry_pythons_message_and_position() {
    let cases: &[(&[u8], &str)] = &[
        (b"", "Expecting value: line 1 column 1 (char 0)"),
        (b"[1,]", "Expecting value: line 1 column 4 (char 3)"),
        (
            b"{\"a\":1,}",
            "Expecting property name enclosed in double quotes: line 1 column 8 (char 7)",
        ),
        (
            b"[1 2]",
            "Expecting ',' delimiter: line 1 column 4 (char 3)",
        ),
        (
            b"{\"a\" 1}",
            "Expecting ':' delimiter: line 1 column 6 (char 5)",
        ),
        (
            b"  [1,\n 2,\n x]",
            "Expecting value: line 3 column 2 (char 11)",
        ),
        (
            b"\"abc",
            "Unterminated string starting at: line 1 column 1 (char 0)",
        ),
        (b"\"\\x\"", "Invalid \\escape: line 1 column 2 (char 1)"),
        (
            b"\"\\u12\"",
            "Invalid \\uXXXX escape: line 1 column 3 (char 2)",
        ),
        (
            b"\"\\ud83d\\uzz00\"",
            "Invalid \\uXXXX escape: line 1 column 9 (char 8)",
        ),
        (b"-NaN", "Expecting value: line 1 column 1 (char 0)"),
        // A byte-order mark is skipped once; a second one is a character.
        (
            b"\xef\xbb\xbf\xef\xbb\xbf1",
            "Expecting value: line 1 column 1 (char 0)",
        ),
    ];
    for (data, message) in cases {
        assert_eq!(refusal(data), *message, "{data:?}");
    }
}

#[test]
fn trailing_data_is_refused() {
    assert_eq!(refusal(b"1 x"), "Extra data: line 1 column 3 (char 2)");
    assert_eq!(refusal(b"{} {}"), "Extra data: line 1 column 4 (char 3)");
    // A number stops where its grammar does; the rest is extra data.
    assert_eq!(refusal(b"01"), "Extra data: line 1 column 2 (char 1)");
    assert_eq!(refusal(b"1."), "Extra data: line 1 column 2 (char 1)");
    assert_eq!(refusal(b"1e+"), "Extra data: line 1 column 2 (char 1)");
    // Trailing whitespace is fine.
    assert_eq!(parse_json(b" 1 \r\n\t").unwrap(), Json::Int(1));
}

#[test]
fn control_characters_inside_strings_are_refused() {
    assert_eq!(
        refusal(b"\"a\nb\""),
        "Invalid control character at: line 1 column 3 (char 2)"
    );
    assert_eq!(
        refusal(b"{\"k\": \"\x1f\"}"),
        "Invalid control character at: line 1 column 8 (char 7)"
    );
    // DEL is not a control character to json; escaped controls are fine.
    assert_eq!(
        parse_json(b"\"\x7f\\u0000\\n\"").unwrap(),
        Json::from("\u{7f}\u{0}\n")
    );
}

#[test]
fn undecodable_bytes_get_unicode_decode_error_text() {
    assert_eq!(
        refusal_as(ErrorClass::UnicodeDecode, b"\xff"),
        "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
    );
    assert_eq!(
        refusal_as(ErrorClass::UnicodeDecode, b"\"\xe2\x82A\""),
        "'utf-8' codec can't decode bytes in position 1-2: invalid continuation byte"
    );
    assert_eq!(
        refusal_as(ErrorClass::UnicodeDecode, b"1\xe2\x82"),
        "'utf-8' codec can't decode bytes in position 1-2: unexpected end of data"
    );
    // utf-8-sig counts positions after the mark; UTF-16/32 count from byte 0.
    assert_eq!(
        refusal_as(ErrorClass::UnicodeDecode, b"\xef\xbb\xbf\"\xff\""),
        "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"
    );
    assert_eq!(
        refusal_as(ErrorClass::UnicodeDecode, b"\xff\xfe1\x00 "),
        "'utf-16-le' codec can't decode byte 0x20 in position 4: truncated data"
    );
    assert_eq!(
        refusal_as(
            ErrorClass::UnicodeDecode,
            b"\xff\xfe\x00\x00\x00\x00\x11\x00"
        ),
        "'utf-32-le' codec can't decode bytes in position 4-7: code point not in range(0x110000)"
    );
}

#[test]
fn every_detected_encoding_parses() {
    let text = "{\"k\": [\"\u{e9}\u{1f600}\", 1.5]}";
    let expected = parse_json(text.as_bytes()).unwrap();
    let utf16 = |big: bool| -> Vec<u8> {
        text.encode_utf16()
            .flat_map(|unit| {
                if big {
                    unit.to_be_bytes()
                } else {
                    unit.to_le_bytes()
                }
            })
            .collect()
    };
    let utf32 = |big: bool| -> Vec<u8> {
        text.chars()
            .flat_map(|c| {
                let point = u32::from(c);
                if big {
                    point.to_be_bytes()
                } else {
                    point.to_le_bytes()
                }
            })
            .collect()
    };
    let documents = [
        [b"\xef\xbb\xbf".as_slice(), text.as_bytes()].concat(),
        utf16(false),
        utf16(true),
        [b"\xff\xfe".as_slice(), &utf16(false)].concat(),
        [b"\xfe\xff".as_slice(), &utf16(true)].concat(),
        utf32(false),
        utf32(true),
        [b"\xff\xfe\x00\x00".as_slice(), &utf32(false)].concat(),
        [b"\x00\x00\xfe\xff".as_slice(), &utf32(true)].concat(),
    ];
    for document in documents {
        assert_eq!(parse_json(&document).unwrap(), expected, "{document:?}");
    }
}

#[test]
fn lone_surrogates_are_held_and_written_back_as_python_writes_them() {
    // Python returns a str holding U+D83D; it is kept as code points.
    let value = parse_json(b"[1, \"\\ud83d\"]").unwrap();
    let item = &value.as_array().unwrap()[1];
    assert!(item.as_str().is_none(), "not valid Unicode text");
    match item {
        Json::WideStr(text) => assert_eq!(text.code_points(), [0xd83d]),
        other => panic!("{other:?}"),
    }
    assert_eq!(encode_line(&value, false), "[1, \"\\ud83d\"]");
    // An encoded surrogate (utf-8 surrogatepass), and a pair split over two
    // encoded surrogates, which Python does not join: two code points that
    // json.dumps writes as the escapes of the joined character.
    let encoded = parse_json(b"\"\xed\xa0\x80\"").unwrap();
    assert_eq!(encoded, parse_json(b"\"\\ud800\"").unwrap());
    let split = parse_json(b"\"\xed\xa0\xbd\xed\xb8\x80\"").unwrap();
    assert_ne!(split, Json::from("\u{1f600}"), "two code points, not one");
    assert_eq!(encode_line(&split, false), "\"\\ud83d\\ude00\"");
    // Keys too: kept exactly, sorted by code point, never found by name.
    let object = parse_json(b"{\"b\": 1, \"\\udc00\": 2, \"a\": 3}").unwrap();
    assert_eq!(object.as_object().unwrap().len(), 3);
    assert_eq!(
        String::from_utf8(encode_indented(&object)).unwrap(),
        "{\n  \"a\": 3,\n  \"b\": 1,\n  \"\\udc00\": 2\n}\n"
    );
    // A syntax error later in the document is still reported.
    assert_eq!(
        refusal(b"[\"\\ud83d\", x]"),
        "Expecting value: line 1 column 12 (char 11)"
    );
    // An escaped pair is one character.
    assert_eq!(
        parse_json(b"\"\\ud83d\\ude00\"").unwrap(),
        Json::from("\u{1f600}")
    );
}

#[test]
fn integers_beyond_128_bits_are_held_exactly() {
    let max = parse_json(b"170141183460469231731687303715884105727").unwrap();
    assert_eq!(max.as_int(), Some(i128::MAX));
    let min = parse_json(b"-170141183460469231731687303715884105728").unwrap();
    assert_eq!(min.as_int(), Some(i128::MIN));
    let big = parse_json(b"[170141183460469231731687303715884105728, -1e2]").unwrap();
    let item = &big.as_array().unwrap()[0];
    assert_eq!(item.as_int(), None, "outside the helpers' i128 arithmetic");
    assert_eq!(
        encode_line(&big, false),
        "[170141183460469231731687303715884105728, -100.0]"
    );
    // Python compares ints and floats exactly: 2**127 == 2.0**127, and
    // 10**40 != 1e40 (whose exact value is 10000000000000000303786028427003666890752).
    let power = parse_json(b"170141183460469231731687303715884105728").unwrap();
    assert_eq!(power, Json::Float(2f64.powi(127)));
    let ten = parse_json(b"10000000000000000000000000000000000000000").unwrap();
    assert_ne!(ten, Json::Float(1e40));
    assert_eq!(
        parse_json(b"10000000000000000303786028427003666890752").unwrap(),
        Json::Float(1e40)
    );
    assert_ne!(power, Json::Int(i128::MAX));
    // Python's own limit on integer literals still applies.
    let long = "7".repeat(4301);
    assert_eq!(
        refusal_as(ErrorClass::Value, long.as_bytes()),
        "Exceeds the limit (4300 digits) for integer string conversion: value has 4301 digits; \
         use sys.set_int_max_str_digits() to increase the limit"
    );
}

#[test]
fn floats_and_constants_read_like_python() {
    assert!(parse_json(b"NaN").unwrap().as_float().unwrap().is_nan());
    assert_eq!(
        parse_json(b"-Infinity").unwrap(),
        Json::Float(f64::NEG_INFINITY)
    );
    assert_eq!(parse_json(b"1e400").unwrap(), Json::Float(f64::INFINITY));
    let negative_zero = parse_json(b"-0.0").unwrap().as_float().unwrap();
    assert!(negative_zero == 0.0 && negative_zero.is_sign_negative());
    // "-0" is an int, "1E2" a float.
    assert_eq!(parse_json(b"-0").unwrap().as_int(), Some(0));
    assert_eq!(parse_json(b"1E2").unwrap().as_float(), Some(100.0));
}

fn nested(depth: usize) -> Vec<u8> {
    let mut data = "[".repeat(depth).into_bytes();
    data.extend("]".repeat(depth).bytes());
    data
}

#[test]
fn nesting_stops_at_pythons_recursion_limit_without_overflowing() {
    let deepest = parse_json(&nested(995)).expect("995 levels parse");
    // The deepest value Python reads also encodes in every style.
    assert_eq!(encode_compact(&deepest).unwrap(), nested(995));
    assert_eq!(
        encode_compact_sorted(&deepest),
        [nested(995), b"\n".to_vec()].concat()
    );
    assert_eq!(encode_line(&deepest, true).into_bytes(), nested(995));
    // Python's json.dumps(value, indent=2) + "\n" for it: 1980051 bytes.
    let indented = encode_indented(&deepest);
    assert_eq!(indented.len(), 1_980_051);
    assert_eq!(
        format!("{:x}", Sha256::digest(&indented)),
        "70668f064dbc9d81a3daeaad786fbe2a18037132587ea8f957c6a1f770a943e0"
    );
    let mut value = deepest;
    let mut depth = 0;
    while let Some(items) = value.as_array() {
        depth += 1;
        value = items.first().cloned().unwrap_or(Json::Null);
    }
    assert_eq!(depth, 995);
    assert_eq!(
        refusal_as(ErrorClass::Recursion, &nested(996)),
        "maximum recursion depth exceeded while decoding a JSON array from a unicode string"
    );
    let objects = format!("{}1{}", "{\"a\":".repeat(996), "}".repeat(996));
    assert_eq!(
        refusal_as(ErrorClass::Recursion, objects.as_bytes()),
        "maximum recursion depth exceeded while decoding a JSON object from a unicode string"
    );
    // Far deeper input is refused just the same, not a stack overflow.
    assert!(refusal_as(ErrorClass::Recursion, &nested(1_000_000))
        .starts_with("maximum recursion depth exceeded"));
}

#[test]
fn duplicate_keys_last_wins_in_first_position() {
    let value = parse_json(b"{\"a\": 1, \"b\": 2, \"a\": 3}").unwrap();
    let members: Vec<_> = value.as_object().unwrap().iter().collect();
    assert_eq!(
        members,
        [
            (&"a".to_owned(), &Json::Int(3)),
            (&"b".to_owned(), &Json::Int(2))
        ]
    );
}

#[test]
fn unique_parser_refuses_any_duplicate_with_the_callers_message() {
    let message = "duplicate handoff field";
    for data in [
        b"{\"a\": 1, \"a\": 1}".as_slice(),
        b"[{}, {\"x\": {\"b\": 1, \"b\": 2}}]",
        b"{\"a\": {\"a\": 1}, \"b\": [{\"c\": 0, \"c\": 0}]}",
    ] {
        let error = parse_json_unique(data, message).expect_err("duplicate refused");
        assert_eq!(error.class(), ErrorClass::Value);
        assert_eq!(error.message(), message);
    }
    // The same key in different objects is no duplicate.
    let value = parse_json_unique(b"{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}", message).unwrap();
    assert_eq!(value.get("b").and_then(|b| b.get("a")), Some(&Json::Int(2)));
    // Like the hook, the check runs when an object closes: an earlier syntax
    // error in an unclosed object is reported instead.
    let error = parse_json_unique(b"{\"a\": 1, \"a\": 2 x}", message).unwrap_err();
    assert_eq!(
        error.message(),
        "Expecting ',' delimiter: line 1 column 17 (char 16)"
    );
    // And an inner duplicate is reported before a later syntax error.
    let error = parse_json_unique(b"[{\"a\": 1, \"a\": 2}, x]", message).unwrap_err();
    assert_eq!(error.message(), message);
}

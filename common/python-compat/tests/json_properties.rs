//! Property tests of the JSON model every helper reads outside input with:
//! generated values (lone surrogates in strings and keys, integers of any
//! length, NaN and the infinities, deep nesting) survive every encoding,
//! CPython reads our output as the same value, and damaged documents get
//! CPython's exact outcome. Failing cases shrink to a minimal document.
//!
//! `PROPTEST_CASES` sets the number of cases (256 by default in the suite;
//! `scripts/property-tests.sh` runs many more). `python3` must be installed.

mod json_support;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use json_support::{check_outcome, Agreed, PythonJson};
use python_compat::json::{encode_compact_sorted, encode_indented, encode_line, parse_json, Json};

/// A value python's json module can hold. Strings are code points that may
/// include lone surrogates; integers go far past 128 bits.
fn arb_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i128>().prop_map(Json::Int),
        arb_big_int(),
        arb_float().prop_map(Json::Float),
        arb_text().prop_map(text_json),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::vec((arb_text(), inner), 0..6).prop_map(object_of),
        ]
    })
}

/// Code points, lone surrogates included, as `json.loads` may return them.
fn arb_text() -> impl Strategy<Value = Vec<u32>> {
    let point = prop_oneof![
        4 => 0x20u32..0x7f,
        1 => 0u32..0x20,
        1 => Just(u32::from('"')),
        1 => Just(u32::from('\\')),
        1 => 0x80u32..0xd800,
        2 => 0xd800u32..0xe000,
        1 => 0xe000u32..0x11_0000,
    ];
    prop::collection::vec(point, 0..8)
}

/// The string `json.loads` makes of these code points, read from their
/// `\uXXXX` escapes: valid Unicode is a `Str`, lone surrogates a `WideStr`,
/// and a high surrogate followed by a low one becomes one character, as it
/// does when Python reads back what it wrote.
fn text_json(points: Vec<u32>) -> Json {
    let mut literal = String::from("\"");
    for point in points {
        if point >= 0x1_0000 {
            let offset = point - 0x1_0000;
            let high = 0xd800 + (offset >> 10);
            let low = 0xdc00 + (offset & 0x3ff);
            literal.push_str(&format!("\\u{high:04x}\\u{low:04x}"));
        } else {
            literal.push_str(&format!("\\u{point:04x}"));
        }
    }
    literal.push('"');
    parse_json(literal.as_bytes()).expect("escaped code points parse")
}

fn object_of(members: Vec<(Vec<u32>, Json)>) -> Json {
    // Built as a document and parsed, so lone-surrogate keys take the same
    // path as in a file (JsonObject has no public wide-key insert); a
    // repeated key keeps its last value, as dict() does.
    let members: Vec<String> = members
        .into_iter()
        .map(|(key, value)| {
            format!(
                "{}: {}",
                encode_line(&text_json(key), false),
                encode_line(&value, false)
            )
        })
        .collect();
    parse_json(format!("{{{}}}", members.join(", ")).as_bytes())
        .expect("a document of generated members parses")
}

fn arb_big_int() -> impl Strategy<Value = Json> {
    (any::<bool>(), "[1-9][0-9]{39,80}").prop_map(|(negative, digits)| {
        let literal = if negative {
            format!("-{digits}")
        } else {
            digits
        };
        parse_json(literal.as_bytes()).unwrap()
    })
}

fn arb_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(5e-324),
        (-1e6f64..1e6),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn every_encoding_reads_back_to_the_same_bytes() {
    runner()
        .run(&arb_json(), |value| {
            // Sorted styles reorder keys; each is compared in its own order.
            for (encoded, sorted) in [
                (encode_indented(&value), true),
                (encode_compact_sorted(&value), true),
                (encode_line(&value, false).into_bytes(), false),
                (encode_line(&value, true).into_bytes(), true),
            ] {
                let parsed = parse_json(&encoded)
                    .map_err(|error| TestCaseError::fail(format!("{error}")))?;
                prop_assert_eq!(
                    encode_line(&parsed, sorted),
                    encode_line(&value, sorted),
                    "through {}",
                    String::from_utf8_lossy(&encoded)
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn python_reads_our_output_as_the_same_value() {
    let python = RefCell::new(PythonJson::start());
    let seen = RefCell::new([0usize; 3]);
    runner()
        .run(&arb_json(), |value| {
            let document = encode_line(&value, false).into_bytes();
            let line = python.borrow_mut().outcome(false, &document);
            let agreed = check_outcome(false, &document, &line);
            prop_assert_ne!(agreed, Agreed::Refused, "python refused our output");
            seen.borrow_mut()[agreed as usize] += 1;
            // What python writes back is what we write for the value.
            prop_assert_eq!(
                line.split(' ').nth(2).map(json_support::unhex_text),
                Some(String::from_utf8(encode_indented(&value)).unwrap())
            );
            Ok(())
        })
        .unwrap();
    let seen = seen.into_inner();
    assert!(
        seen[Agreed::ParsedExotic as usize] > 0,
        "exotic values generated: {seen:?}"
    );
}

/// One edit of a document.
#[derive(Clone, Debug)]
enum Edit {
    Truncate(usize),
    Remove(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    let byte =
        prop::sample::select(b"\"\\,:{}[] \n\x00\x1f\x7f\xff\xed\xa0\xe2\x82e-+.0u1Nn".to_vec());
    prop_oneof![
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), byte.clone()).prop_map(|(at, byte)| Edit::Insert(at, byte)),
        (any::<usize>(), byte).prop_map(|(at, byte)| Edit::Replace(at, byte)),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let position = |at: usize, len: usize| if len == 0 { 0 } else { at % len };
        match *edit {
            Edit::Truncate(at) => data.truncate(position(at, data.len() + 1)),
            Edit::Remove(at) if !data.is_empty() => {
                data.remove(position(at, data.len()));
            }
            Edit::Insert(at, byte) => data.insert(position(at, data.len() + 1), byte),
            Edit::Replace(at, byte) if !data.is_empty() => {
                let at = position(at, data.len());
                data[at] = byte;
            }
            _ => {}
        }
    }
    data
}

#[test]
fn damaged_documents_get_pythons_exact_outcome() {
    let python = RefCell::new(PythonJson::start());
    let strategy = (
        arb_json(),
        prop::collection::vec(arb_edit(), 1..4),
        any::<bool>(),
        any::<bool>(),
    );
    runner()
        .run(&strategy, |(value, edits, indented, unique)| {
            let document = if indented {
                encode_indented(&value)
            } else {
                encode_line(&value, false).into_bytes()
            };
            let damaged = apply(document, &edits);
            let line = python.borrow_mut().outcome(unique, &damaged);
            check_outcome(unique, &damaged, &line);
            Ok(())
        })
        .unwrap();
}

#[test]
fn nesting_at_any_depth_gets_pythons_outcome() {
    // Away from Python's exact recursion limit, whose frame count depends
    // on how deep the caller already is.
    let python = RefCell::new(PythonJson::start());
    let depth = prop_oneof![8 => 1usize..200, 2 => 2_000usize..4_000, 1 => Just(100_000usize)];
    // Deep documents are slow to build and check: a quarter of the cases.
    TestRunner::new(Config {
        cases: cases().div_ceil(4),
        failure_persistence: None,
        ..Config::default()
    })
    .run(
        &(depth, any::<bool>(), any::<bool>()),
        |(depth, objects, closed)| {
            let (open, close): (&[u8], &[u8]) = if objects {
                (b"{\"k\": ", b"}")
            } else {
                (b"[", b"]")
            };
            let mut document = open.repeat(depth);
            document.extend_from_slice(b"0");
            if closed {
                document.extend_from_slice(&close.repeat(depth));
            }
            let line = python.borrow_mut().outcome(false, &document);
            check_outcome(false, &document, &line);
            Ok(())
        },
    )
    .unwrap();
}

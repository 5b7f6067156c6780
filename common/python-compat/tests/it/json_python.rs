//! Differential tests against the real CPython `json` module: a few hundred
//! generated values (nested, non-ASCII including astral characters, floats
//! from subnormal to huge and negative zero, integers up to 128 bits) must
//! encode to Python's bytes in all four styles, Python's documents for them
//! (every encoding `json.loads` detects) must parse back to them, and mutated
//! documents must get the same outcome or refusal message from both parsers.
//!
//! Values reach Python as Python expressions built here, never through the
//! encoder under test. `python3` must be installed (it is in CI).

use crate::json_support;

use json_support::{
    check_outcome, hex, outcome_request, run_python, unhex, unhex_text, OUTCOME_SCRIPT,
};
use python_compat::json::{
    encode_compact, encode_compact_sorted, encode_indented, encode_line, parse_json,
    parse_json_unique, Json, JsonObject,
};

/// splitmix64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn char(&mut self) -> char {
        const SPECIAL: &[char] = &[
            '"',
            '\\',
            '/',
            '\u{7f}',
            '\u{0}',
            '\u{1f}',
            '\n',
            '\t',
            '\u{8}',
            '\u{c}',
            '\r',
            '\u{1}',
            'é',
            'ü',
            '\u{2028}',
            '\u{feff}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{d7ff}',
            '\u{e000}',
            '☃',
            '\u{10000}',
            '😀',
            '\u{10ffff}',
            '\u{80}',
            '\u{ff}',
        ];
        let ranges: [(u32, u32); 4] = [
            (0x20, 0x7e),
            (0x80, 0xd7ff),
            (0xe000, 0xffff),
            (0x1_0000, 0x10_ffff),
        ];
        match self.below(10) {
            0..=3 => self.pick(SPECIAL),
            4..=6 => char::from(b'a' + self.below(26) as u8),
            _ => {
                let (low, high) = self.pick(&ranges);
                let point = low + (self.next() % u64::from(high - low + 1)) as u32;
                char::from_u32(point).expect("ranges avoid surrogates")
            }
        }
    }

    fn string(&mut self) -> String {
        (0..self.below(7)).map(|_| self.char()).collect()
    }

    fn float(&mut self) -> f64 {
        const SPECIAL: &[f64] = &[
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            1.0 / 3.0,
            1e16,
            1e15,
            9_999_999_999_999_998.0,
            1e-4,
            1e-5,
            1.5e-5,
            123_456_789_012_345_680.0,
            5e-324,
            2.225_073_858_507_201e-308,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            9_007_199_254_740_993.0,
            1e22,
            1e23,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        match self.below(6) {
            0 => self.pick(SPECIAL),
            // Halfway between two 17-digit candidates: Python breaks the tie to even.
            1 => {
                let whole = (1u64 << 50) + self.next() % (1u64 << 50);
                whole as f64 + self.pick(&[0.25, 0.75])
            }
            2 => self.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, -0.0]),
            3 => f64::from_bits(self.next()),
            4 => {
                let scale = 10f64.powi(self.below(40) as i32 - 20);
                (self.next() % 1_000_000) as f64
                    * scale
                    * if self.below(2) == 0 { 1.0 } else { -1.0 }
            }
            _ => (self.next() as i64) as f64 / 1024.0,
        }
    }

    fn int(&mut self) -> i128 {
        const SPECIAL: &[i128] = &[
            0,
            1,
            -1,
            i64::MAX as i128,
            i64::MIN as i128,
            u64::MAX as i128,
            i128::MAX,
            i128::MIN,
            9_007_199_254_740_993,
        ];
        if self.below(3) == 0 {
            return self.pick(SPECIAL);
        }
        let bits = self.below(127) as u32;
        let magnitude =
            ((u128::from(self.next()) << 64 | u128::from(self.next())) >> (127 - bits)) as i128;
        if self.below(2) == 0 {
            magnitude
        } else {
            -magnitude
        }
    }

    fn value(&mut self, depth: usize) -> Json {
        let leaf = depth >= 4 || self.below(3) == 0;
        match self.below(if leaf { 6 } else { 8 }) {
            0 => Json::Null,
            1 => Json::Bool(self.below(2) == 0),
            2 => Json::Int(self.int()),
            3 => Json::Float(self.float()),
            4 | 5 => Json::Str(self.string()),
            6 => Json::Array((0..self.below(5)).map(|_| self.value(depth + 1)).collect()),
            _ => {
                let mut object = JsonObject::new();
                for _ in 0..self.below(6) {
                    let key = self.string();
                    let value = self.value(depth + 1);
                    object.insert(key, value);
                }
                Json::Object(object)
            }
        }
    }
}

fn generated_values(seed: u64, count: usize) -> Vec<Json> {
    let mut rng = Rng(seed);
    // Top-level containers most of the time, as in the real files.
    (0..count)
        .map(|index| {
            if index % 5 == 0 {
                rng.value(0)
            } else {
                let mut object = JsonObject::new();
                for _ in 0..1 + rng.below(5) {
                    let key = rng.string();
                    let value = rng.value(1);
                    object.insert(key, value);
                }
                Json::Object(object)
            }
        })
        .collect()
}

/// The value as a Python expression over the helpers `F` (float from its
/// IEEE bits), `S` (str from code points) and `D` (dict from ordered pairs).
fn python_expression(value: &Json) -> String {
    match value {
        Json::Null => "None".to_owned(),
        Json::Bool(true) => "True".to_owned(),
        Json::Bool(false) => "False".to_owned(),
        Json::Int(number) => format!("({number})"),
        Json::BigInt(number) => format!("({})", number.as_str()),
        Json::Float(number) => format!("F('{:016x}')", number.to_bits()),
        Json::Str(text) => python_string(text),
        Json::WideStr(text) => {
            let points: Vec<String> = text.code_points().iter().map(u32::to_string).collect();
            format!("S({})", points.join(", "))
        }
        Json::Array(items) => {
            let items: Vec<String> = items.iter().map(python_expression).collect();
            format!("[{}]", items.join(", "))
        }
        Json::Object(object) => {
            let pairs: Vec<String> = object
                .iter()
                .map(|(key, member)| {
                    format!("({}, {})", python_string(key), python_expression(member))
                })
                .collect();
            format!("D({})", pairs.join(", "))
        }
    }
}

fn python_string(text: &str) -> String {
    let points: Vec<String> = text.chars().map(|c| u32::from(c).to_string()).collect();
    format!("S({})", points.join(", "))
}

const PRELUDE: &str = r#"
import json, struct, sys
def F(bits): return struct.unpack('>d', bytes.fromhex(bits))[0]
def S(*points): return ''.join(map(chr, points))
def D(*pairs): return dict(pairs)
def H(text): return text.encode('utf-8').hex()
"#;

/// Strict identity: same types, floats by bits (any NaN), objects in the same
/// key order. Stricter than `==`, which follows Python (`1 == 1.0 == true`).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Null, Json::Null) => true,
        (Json::Bool(x), Json::Bool(y)) => x == y,
        (Json::Int(x), Json::Int(y)) => x == y,
        (Json::Float(x), Json::Float(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (Json::Str(x), Json::Str(y)) => x == y,
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
        }
        _ => false,
    }
}

#[test]
fn all_four_encodings_match_python() {
    let values = generated_values(0x5eed_0001, 400);
    let script = format!(
        "{PRELUDE}{}",
        r#"
for line in sys.stdin:
    value = eval(line)
    out = [json.dumps(value, sort_keys=True, indent=2) + "\n",
           json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"]
    try:
        out.append(json.dumps(value, separators=(",", ":"), allow_nan=False))
    except ValueError as exc:
        out.append("refused: " + str(exc))
    out.append(json.dumps(value))
    out.append(json.dumps(value, sort_keys=True))
    print(" ".join(H(text) for text in out))
"#
    );
    let input: String = values.iter().map(|v| python_expression(v) + "\n").collect();
    let lines = run_python(&script, &input);
    assert_eq!(lines.len(), values.len());
    let mut refused = 0;
    for (value, line) in values.iter().zip(&lines) {
        let expected: Vec<String> = line.split(' ').map(unhex_text).collect();
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("encoders write ASCII");
        assert_eq!(
            text(encode_indented(value)),
            expected[0],
            "indented {value:?}"
        );
        assert_eq!(
            text(encode_compact_sorted(value)),
            expected[1],
            "compact sorted {value:?}"
        );
        let compact = match encode_compact(value) {
            Ok(bytes) => text(bytes),
            Err(error) => {
                refused += 1;
                assert_eq!(error.class(), python_compat::ErrorClass::Value);
                format!("refused: {}", error.message())
            }
        };
        assert_eq!(compact, expected[2], "compact {value:?}");
        assert_eq!(encode_line(value, false), expected[3], "line {value:?}");
        assert_eq!(
            encode_line(value, true),
            expected[4],
            "sorted line {value:?}"
        );
    }
    // The generator must exercise both sides of allow_nan=False.
    assert!(
        refused > 10 && refused < values.len() / 2,
        "refused {refused}"
    );
}

/// Python's own documents for each value, as `json.loads` would meet them:
/// raw UTF-8, every UTF-16/32 form with and without a byte-order mark,
/// UTF-8 with a mark, and ASCII-escaped with odd whitespace.
fn python_documents(values: &[Json]) -> Vec<Vec<Vec<u8>>> {
    let script = format!(
        "{PRELUDE}{}",
        r#"
encodings = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]
for line in sys.stdin:
    value = eval(line)
    raw = json.dumps(value, ensure_ascii=False)
    docs = [raw.encode(name) for name in encodings]
    docs.append((" \r\n\t" + json.dumps(value, indent="\t", separators=(" ,", " : ")) + "\n ").encode())
    print(" ".join(doc.hex() for doc in docs))
"#
    );
    let input: String = values.iter().map(|v| python_expression(v) + "\n").collect();
    let lines = run_python(&script, &input);
    assert_eq!(lines.len(), values.len());
    lines
        .iter()
        .map(|line| line.split(' ').map(unhex).collect())
        .collect()
}

#[test]
fn python_documents_parse_back_to_the_value() {
    let values = generated_values(0x5eed_0002, 300);
    let documents = python_documents(&values);
    for (value, documents) in values.iter().zip(&documents) {
        assert_eq!(documents.len(), 9);
        for document in documents {
            let parsed = parse_json(document)
                .unwrap_or_else(|error| panic!("{value:?} from {}: {error}", hex(document)));
            assert!(
                same(&parsed, value),
                "{parsed:?} != {value:?} from {}",
                hex(document)
            );
            let unique = parse_json_unique(document, "duplicate").expect("no duplicates");
            assert!(same(&unique, value));
        }
    }
}

/// Python's outcome for each (unique?, document), compared with ours.
fn compare_outcomes(documents: &[(bool, Vec<u8>)]) -> [usize; 3] {
    let input: String = documents
        .iter()
        .map(|(unique, data)| outcome_request(*unique, data))
        .collect();
    let lines = run_python(OUTCOME_SCRIPT, &input);
    assert_eq!(lines.len(), documents.len());
    let mut counts = [0; 3];
    for ((unique, data), line) in documents.iter().zip(&lines) {
        counts[check_outcome(*unique, data, line) as usize] += 1;
    }
    counts
}

/// Empty or blank input, and NUL bytes where `json.loads` looks for them to
/// guess UTF-16 or UTF-32.
const EMPTY_AND_NUL: &[&[u8]] = &[
    b"",
    b" ",
    b"\x00",
    b"\x00\x00",
    b"1\x00",
    b"\x001",
    b"\x00\x00\x001",
    b"1\x00\x00\x00",
];

/// The literal names and Python's non-JSON constants: whole, signed and cut
/// short.
const LITERALS: &[&[u8]] = &[
    b"null",
    b"nul",
    b"true",
    b"tru",
    b"false",
    b"NaN",
    b"-NaN",
    b"Infinity",
    b"-Infinity",
    b"Infinit",
    b"-Infinit",
];

/// Number spellings JSON refuses, exponents, and values at and past the
/// limits of floats and of 128-bit integers.
const NUMBERS: &[&[u8]] = &[
    b"-",
    b"--1",
    b"+1",
    b"01",
    b"-01",
    b"1.",
    b"1.e5",
    b".5",
    b"1e",
    b"1e+",
    b"1e-",
    b"1E+2",
    b"1e5x",
    b"-0",
    b"-0.0",
    b"0e0",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"4.9e-324",
    b"2.4703282292062328e-324",
    b"0.1000000000000000055511151231257827",
    b"9007199254740993",
    b"170141183460469231731687303715884105727",
    b"-170141183460469231731687303715884105728",
    b"170141183460469231731687303715884105728",
    b"[1, 99999999999999999999999999999999999999999]",
];

/// Unterminated strings, bad escapes, raw control characters, and `\u`
/// escapes: short, not hex, and every kind of surrogate pairing.
const STRINGS: &[&[u8]] = &[
    b"\"abc",
    b"\"abc\\",
    b"\"\\x\"",
    b"\"\\\n\"",
    b"\"\\\x00\"",
    b"\"a\nb\"",
    b"\"\x7f\"",
    b"\"\\u12\"",
    b"\"\\u0041",
    b"\"\\u0041\"",
    b"\"\\u00e9\\u00E9\"",
    b"\"\\ud83d\\ude00\"",
    b"\"\\ud83d\\ude00",
    b"\"\\ud83d\\uzz00\"",
    b"\"\\ud83d\\u0041\"",
    b"\"\\ud83d\"",
    b"\"\\ude00\"",
    b"\"\\ud83d\\ud83d\\ude00\"",
    b"\"\\ud83dx\"",
    b"\"\\u12G4\"",
];

/// Arrays and objects: empty, unclosed, with a separator missing or extra,
/// or with a key that is no double-quoted string.
const CONTAINERS: &[&[u8]] = &[
    b"[",
    b"[1",
    b"[1,",
    b"[1,]",
    b"[,1]",
    b"[1 2]",
    b"[1,,2]",
    b"]",
    b"[]",
    b"[ ]",
    b"{",
    b"{\"a\"",
    b"{\"a\":",
    b"{\"a\":1",
    b"{\"a\":1,",
    b"{\"a\":1,}",
    b"{,}",
    b"{1:2}",
    b"{'a':1}",
    b"{\"a\" 1}",
    b"{\"a\":1 \"b\":2}",
    b"{}",
    b"{ }",
];

/// Repeated keys at several depths, one before a syntax error: the
/// duplicate-refusing parser must fail where Python's hook does.
const DUPLICATE_KEYS: &[&[u8]] = &[
    b"{\"a\":1,\"a\":2}",
    b"{\"a\":1,\"b\":2,\"a\":3}",
    b"[{\"a\":1,\"a\":2}, x]",
    b"[{\"a\":{\"b\":1,\"b\":2}}]",
    b"{\"a\":[1,2,{\"c\":1,\"c\":1}],\"a\":0}",
];

/// Extra data after a value, and errors after line breaks, where the line and
/// column of the message count.
const ERROR_POSITIONS: &[&[u8]] = &[
    b"1 x",
    b"1 2",
    b"[] []",
    b"\n\n  x",
    b"  [1,\n 2,\n x]",
    b"\r\n\"\x01\"",
];

/// UTF-8 byte-order marks, and invalid UTF-8 (truncated, overlong, encoded
/// surrogates, past U+10FFFF) inside and outside strings.
const UTF8_BYTES: &[&[u8]] = &[
    b"\xef\xbb\xbf1",
    b"\xef\xbb\xbf\xef\xbb\xbf1",
    b"\xef\xbb\xbf",
    b"\xef\xbb",
    b"\xff",
    b"\xfe",
    b"1\xe2\x82",
    b"\"\xe2\x82A\"",
    b"\"\xed\xa0\x80\"",
    b"\"\xed\xa0\"",
    b"\"\xed\xa0\xbd\xed\xb8\x80\"",
    b"\"\xed\xbf\xbf\"",
    b"\"\xed\x9f\xbf\"",
    b"\xef\xbb\xbf\"\xff\"",
    b"\"\xf0\x9f\x98\"",
    b"\"\xf0\x9f\x98",
    b"\xf4\x90\x80\x80",
    b"\xe0\x80\x80",
    b"\xc0\xaf",
    b"\xc2",
    b"\"\xc2\"",
    b"\"\xf0\x80\"",
    b"\"\xf5\"",
    b"\"\xe1\x80\xc0\"",
    b"\"\xf1\x80\x80\"",
    b"\xed\xa0\x80",
    b"[\xed\xa0\x80]",
];

/// Documents `json.loads` decodes as UTF-16 or UTF-32 (guessed from NULs or
/// a byte-order mark): valid, with lone or paired surrogates, or of a length
/// that is no whole number of code units.
const UTF16_AND_UTF32: &[&[u8]] = &[
    b"\xff\xfe\"\x00=\xd8\x00\xde\"\x00",
    b"\"\x00a\x00\x00\xd8\"\x00",
    b"1\x00\x00\x00\x00",
    b"\xff\xfe\x00\x00\"\x00\x00\x00\xe9\x00\x00\x00\"\x00\x00\x00",
    b"\xff\xfe\x00\x00\x00\x00\x11\x00",
    b"1\x00 \x00\x00",
    b"\xff\xfe1\x00 ",
    b"\xfe\xff\x001\x00",
    b"\x00\"\xd8\x00\x00\"",
    b"\"\x00\x00\xd8",
    b"\"\x00\x00\xdc\"\x00",
    b"\"\x00=\xd8",
    b"\"\x00=\xd8\"",
    b"\xff\xfe\x00\x00\x00\xd8\x00\x00",
    b"\x00\x00\xfe\xff\x00\x00\x001",
    b"\x00\x00\x001\x00",
    b"\x00\x00\x00\"\x00\x00\xd8\x00\x00\x00\x00\"",
    b"\x00\x00\x00\"\x00\x00\xd8\x00\x00\x00\x00",
    b"\xff\xfe\x00\x00",
    b"\xff\xfe",
    b"\xfe\xff",
    b"\xff\xfe1\x00\x00",
    b"\xff\xfe\xff\xfe1\x00",
    b"\x00[\x00]",
    b"[\x00]\x00",
    b"\x00[\x00\"\x00\x00\xd8\x00\xdc\x00\"\x00]",
];

/// An escaped surrogate pair, and surrogates in object keys, escaped or as
/// bytes.
const SURROGATE_ESCAPES_AND_KEYS: &[&[u8]] = &[
    b"\"\\ud800\\udc00\"",
    b"{\"\\ud800\":1}",
    b"{\"\xed\xa0\x80\":1, x}",
];

/// Integers of more digits than Python's default limit of 4300 converts, and
/// one of exactly 4300.
fn digit_limit_documents() -> [Vec<u8>; 3] {
    [
        format!("[{}]", "7".repeat(4301)).into_bytes(),
        format!("-{}", "1".repeat(4400)).into_bytes(),
        "9".repeat(4300).into_bytes(),
    ]
}

/// Documents chosen to reach every refusal and edge of the scanner and of the
/// byte decoding, each checked against Python's own outcome with both parsers.
#[test]
fn edge_documents_get_pythons_outcome() {
    let groups = [
        EMPTY_AND_NUL,
        LITERALS,
        NUMBERS,
        STRINGS,
        CONTAINERS,
        DUPLICATE_KEYS,
        ERROR_POSITIONS,
        UTF8_BYTES,
        UTF16_AND_UTF32,
        SURROGATE_ESCAPES_AND_KEYS,
    ];
    let documents = groups
        .concat()
        .into_iter()
        .map(<[u8]>::to_vec)
        .chain(digit_limit_documents());
    let cases: Vec<(bool, Vec<u8>)> = documents
        .flat_map(|document| [(false, document.clone()), (true, document)])
        .collect();
    let [ok, errors, exotic] = compare_outcomes(&cases);
    assert!(
        ok > 40 && errors > 150 && exotic > 10,
        "{ok} {errors} {exotic}"
    );
}

/// Random damage to Python's valid documents: both parsers must agree on the
/// outcome and on the exact refusal message and position.
#[test]
fn mutated_documents_get_pythons_outcome() {
    const INTERESTING: &[u8] = b"\"\\,:{}[] \n\x00\x1f\xff\xed\xa0\xe2\x82e-.0u1";
    let values = generated_values(0x5eed_0003, 150);
    let mut rng = Rng(0x5eed_0004);
    let mut cases = Vec::new();
    for documents in python_documents(&values) {
        for document in documents {
            for _ in 0..3 {
                let mut data = document.clone();
                for _ in 0..1 + rng.below(2) {
                    let at = rng.below(data.len() + 1);
                    match rng.below(5) {
                        0 => data.truncate(at),
                        1 if at < data.len() => {
                            data.remove(at);
                        }
                        2 => data.insert(at, rng.pick(INTERESTING)),
                        3 if at < data.len() => data[at] = rng.pick(INTERESTING),
                        _ => {
                            let end = (at + rng.below(8)).min(data.len());
                            let copy = data[at..end].to_vec();
                            data.splice(at..at, copy);
                        }
                    }
                }
                cases.push((rng.below(2) == 0, data));
            }
        }
    }
    // Duplicate keys at several depths, for the unique parser and the plain one.
    for value in &values {
        if let Some((key, _)) = value.as_object().and_then(|object| object.iter().next()) {
            let body = encode_line(value, false);
            let key = encode_line(&Json::from(key.as_str()), false);
            let duplicated = format!("{{{key}: 0, {}", &body[1..]);
            for document in [
                duplicated.clone(),
                format!("[1, {duplicated}]"),
                format!("{{\"w\": {duplicated}}}"),
            ] {
                cases.push((true, document.clone().into_bytes()));
                cases.push((false, document.into_bytes()));
            }
        }
    }
    let [ok, errors, _] = compare_outcomes(&cases);
    assert!(ok > 500 && errors > 1000, "{ok} {errors}");
}

/// `value["layout"]` on each kind of value `json.loads` gives, as CPython
/// raises it.
#[test]
fn subscripting_a_loaded_value_fails_as_cpython_does() {
    let documents = [
        "{}",
        "[]",
        "\"s\"",
        "1",
        "1.5",
        "true",
        "null",
        "{\"layout\": 7}",
    ];
    let mut command = std::process::Command::new("python3");
    command.args([
        "-B",
        "-c",
        "import json, sys\nfor d in sys.argv[1:]:\n    try:\n        print('ok', json.dumps(json.loads(d)['layout']))\n    except Exception as e:\n        print(f'{type(e).__name__}: {e}')",
    ]);
    command.args(documents);
    let output = command.output().expect("python3 runs");
    let expected: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let ours: Vec<String> = documents
        .iter()
        .map(|document| {
            let value = python_compat::json::parse_json(document.as_bytes()).unwrap();
            match value.subscript("layout") {
                Ok(item) => format!(
                    "ok {}",
                    String::from_utf8(python_compat::json::encode_compact(item).unwrap()).unwrap()
                ),
                Err(error) => error.python_line(),
            }
        })
        .collect();
    assert_eq!(ours, expected);
}

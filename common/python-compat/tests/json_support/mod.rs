//! The differential JSON tests' link to CPython: `python3` runs a script
//! over hex-encoded lines, once for a batch or kept running for property
//! tests that ask one document at a time, and Python's outcome for a
//! document (value or exact refusal) is compared with ours.
// Each test file uses its own subset.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use python_compat::json::{encode_indented, encode_line, parse_json, parse_json_unique};

/// Runs `script` under `python3 -B -I` with `input` on stdin; returns stdout
/// lines.
pub(crate) fn run_python(script: &str, input: &str) -> Vec<String> {
    let mut child = Command::new("python3")
        .args(["-B", "-I", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 is required for the differential JSON tests");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = {
        let input = input.to_owned();
        std::thread::spawn(move || stdin.write_all(input.as_bytes()))
    };
    let output = child.wait_with_output().expect("python3 runs");
    writer.join().unwrap().expect("python3 reads its input");
    assert!(
        output.status.success(),
        "python3 failed: {:?}",
        output.status
    );
    String::from_utf8(output.stdout)
        .expect("python prints ASCII")
        .lines()
        .map(str::to_owned)
        .collect()
}

pub(crate) fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex from python"))
        .collect()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(crate) fn unhex_text(text: &str) -> String {
    String::from_utf8(unhex(text)).expect("utf-8 from python")
}

/// The outcome of `json.loads` for each `U|P <hex document>` line: `ok`
/// with `json.dumps` of the value (default and `indent=2, sort_keys=True`
/// with a newline) and whether it is exotic (lone surrogates, ints beyond
/// 128 bits), or `error` with the class and message; `U` parses with a
/// duplicate-refusing hook.
pub(crate) const OUTCOME_SCRIPT: &str = r#"
import json, sys
def unique(pairs):
    value = {}
    for key, item in pairs:
        if key in value:
            raise ValueError("duplicate field")
        value[key] = item
    return value
def exotic(value):
    if isinstance(value, str):
        return any(0xD800 <= ord(c) < 0xE000 for c in value)
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not -2**127 <= value < 2**127
    if isinstance(value, list):
        return any(exotic(item) for item in value)
    if isinstance(value, dict):
        return any(exotic(k) or exotic(v) for k, v in value.items())
    return False
for line in sys.stdin:
    mode, _, data = line.rstrip("\n").partition(" ")
    data = bytes.fromhex(data)
    try:
        value = json.loads(data, object_pairs_hook=unique) if mode == "U" else json.loads(data)
    except (ValueError, RecursionError) as exc:
        kind = type(exc)
        name = kind.__qualname__ if kind.__module__ == "builtins" else kind.__module__ + "." + kind.__qualname__
        print("error", name.encode().hex(), str(exc).encode().hex(), flush=True)
        continue
    print("ok", json.dumps(value).encode().hex(),
          (json.dumps(value, indent=2, sort_keys=True) + "\n").encode().hex(),
          "exotic" if exotic(value) else "plain", flush=True)
"#;

/// One request line of [`OUTCOME_SCRIPT`].
pub(crate) fn outcome_request(unique: bool, data: &[u8]) -> String {
    format!("{} {}\n", if unique { "U" } else { "P" }, hex(data))
}

/// What Python made of a document, when ours agreed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agreed {
    Parsed = 0,
    Refused = 1,
    ParsedExotic = 2,
}

/// Asserts our parser's outcome for `data` is Python's `line`: the same
/// value written the same way, or the same class and message.
pub(crate) fn check_outcome(unique: bool, data: &[u8], line: &str) -> Agreed {
    let ours = if unique {
        parse_json_unique(data, "duplicate field")
    } else {
        parse_json(data)
    };
    let context = format!("document {} (unique {unique})", hex(data));
    let mut words = line.split(' ');
    match (words.next(), words.next()) {
        (Some("ok"), Some(expected)) => {
            let value = ours.unwrap_or_else(|error| panic!("{context}: {error}"));
            assert_eq!(
                encode_line(&value, false),
                unhex_text(expected),
                "{context}"
            );
            let indented = words.next().expect("the ok line carries the indented text");
            assert_eq!(
                String::from_utf8(encode_indented(&value)).unwrap(),
                unhex_text(indented),
                "{context}"
            );
            // Lone surrogates and ints beyond i128 are held, not refused.
            match words.next() {
                Some("exotic") => Agreed::ParsedExotic,
                _ => Agreed::Parsed,
            }
        }
        (Some("error"), Some(class)) => {
            let error = ours.expect_err(&context);
            // The class exactly as Python's traceback names it.
            assert_eq!(error.class().python_name(), unhex_text(class), "{context}");
            let expected = words.next().expect("the error line carries the message");
            assert_eq!(error.message(), unhex_text(expected), "{context}");
            Agreed::Refused
        }
        _ => panic!("unexpected python line {line}"),
    }
}

/// [`OUTCOME_SCRIPT`] kept running, answering one document at a time.
pub(crate) struct PythonJson {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PythonJson {
    pub(crate) fn start() -> PythonJson {
        let mut child = Command::new("python3")
            .args(["-B", "-I", "-c", OUTCOME_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 is required for the differential JSON tests");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        PythonJson {
            child,
            stdin,
            stdout,
        }
    }

    /// Python's outcome line for one document.
    pub(crate) fn outcome(&mut self, unique: bool, data: &[u8]) -> String {
        self.stdin
            .write_all(outcome_request(unique, data).as_bytes())
            .expect("python3 reads its input");
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("python3 answers");
        assert!(!line.is_empty(), "python3 ended early");
        line.trim_end().to_string()
    }
}

impl Drop for PythonJson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

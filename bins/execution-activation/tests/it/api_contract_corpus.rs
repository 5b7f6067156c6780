//! `execution-activation candidate-api-contract` against CPython 3.11's
//! `ast.parse`, on a corpus nobody here wrote.
//!
//! The corpus is this machine's CPython 3.11 standard library (found with
//! `sysconfig` at run time): every `.py` file with a line
//! `API_CONTRACT_VERSION = 7` appended, plus mutations generated from a
//! deterministic sample of those files: non-UTF-8 bytes in comments, string
//! literals and identifiers, dropped and added brackets, indentation turned
//! into tabs or changed by one column, a BOM, coding cookies (good, unknown
//! and conflicting with a BOM), line continuations, CRLF line ends, random
//! character and line edits. Each case is written as the candidate's
//! `agent_server.py` (a regular 0644 file owned by the caller, as
//! `read_owned_config` requires) and the built binary runs once per case;
//! one `python3` process runs the original's logic (`ast.parse` on the bytes,
//! the module-level collection, the positive-int check, `print`) on all of
//! them.
//!
//! For every case the binary must accept exactly when Python does, print
//! the same contract, print the same `SyntaxWarning` lines, and refuse with
//! a `SyntaxError` (or subclass) when Python does; when Python's refusal is
//! one of the common kinds (tokenizer, decoding and indentation errors:
//! unclosed or mismatched brackets, invalid characters, unterminated
//! strings, invalid UTF-8, tabs and spaces, unindent, unexpected indent,
//! EOF in a continuation, ...) the binary's `Class: message` line must be
//! Python's exactly. The counts of accepted and refused cases are checked so
//! that the comparison cannot pass vacuously.
//!
//! The normal suite takes every 6th standard-library file (about 300, in
//! path order) plus the deliberately broken ones under `tokenizedata`, and
//! mutates every 40th; `AGENTS_FULL_CORPUS=1` takes every file and mutates
//! every 8th (several minutes). The oracle must be CPython 3.11, the
//! version the port follows; with another `python3` the test is skipped
//! (a failure under `CI=true`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agents_tests::{binary_path, skip, test_name, write_file, TempDir};
use python_compat::json::{parse_json, Json};

const FULL_CORPUS_ENV: &str = "AGENTS_FULL_CORPUS";
const CONTRACT_LINE: &[u8] = b"\nAPI_CONTRACT_VERSION = 7\n";

/// The original's `candidate_api_contract` after it has read the bytes, and
/// what its traceback and warnings would print, for `count` numbered files.
const ORACLE: &str = r#"
import ast, json, sys, traceback, warnings

def candidate_api_contract(source):
    values = [node.value.value for node in ast.parse(source).body
              if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name)
                  and target.id == "API_CONTRACT_VERSION" for target in node.targets)
              and isinstance(node.value, ast.Constant)]
    if len(values) != 1 or type(values[0]) is not int or values[0] < 1:
        raise RuntimeError("candidate API contract is not one positive literal integer")
    return str(values[0])

directory, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    with open(f"{directory}/{index}.py", "rb") as handle:
        source = handle.read()
    with warnings.catch_warnings(record=True) as caught:
        try:
            result = {"ok": True, "line": candidate_api_contract(source)}
        except Exception as error:
            line = traceback.format_exception_only(type(error), error)[-1].rstrip("\n")
            result = {"ok": False, "line": line}
    result["warnings"] = [
        f"<unknown>:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught
    ]
    print(json.dumps(result))
"#;

/// One source to compare.
struct Case {
    label: String,
    source: Vec<u8>,
}

/// What a run printed: accepted with the contract, or refused with the
/// last line; plus the warning lines before it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    ok: bool,
    line: String,
    warnings: Vec<String>,
}

/// `python3`'s version check and standard library directory, or why the
/// comparison cannot run here.
fn cpython_311_stdlib() -> Result<PathBuf, String> {
    let output = Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig; print(sys.version_info[:2] == (3, 11)); \
             print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .map_err(|error| format!("python3 cannot run: {error}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some("True"), Some(stdlib)) => Ok(PathBuf::from(stdlib)),
        (Some("False"), _) => {
            Err("python3 is not CPython 3.11, the version the port follows".into())
        }
        _ => Err(format!("python3 gave no standard library path: {text:?}")),
    }
}

/// The standard library's `.py` files in path order (no symlinks, nothing
/// under site-packages).
fn stdlib_files(root: &Path) -> Vec<PathBuf> {
    fn walk(directory: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(directory) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| Some(entry.ok()?.path()))
            .collect();
        paths.sort();
        for path in paths {
            let Ok(metadata) = fs::symlink_metadata(&path) else {
                continue;
            };
            if metadata.is_dir() {
                if path.file_name().is_some_and(|name| name != "site-packages") {
                    walk(&path, out);
                }
            } else if metadata.is_file() && path.extension().is_some_and(|ext| ext == "py") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

fn full_corpus() -> bool {
    std::env::var(FULL_CORPUS_ENV).as_deref() == Ok("1")
}

/// The standard-library cases: the sample (or all) with the contract line.
fn stdlib_cases(root: &Path, files: &[PathBuf]) -> Vec<Case> {
    let stride = if full_corpus() { 1 } else { 6 };
    files
        .iter()
        .enumerate()
        .filter(|(index, path)| {
            index % stride == 0
                || path
                    .components()
                    .any(|part| part.as_os_str() == "tokenizedata")
        })
        .map(|(_, path)| {
            let mut source = fs::read(path).unwrap();
            source.extend_from_slice(CONTRACT_LINE);
            Case {
                label: path
                    .strip_prefix(root)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
                source,
            }
        })
        .collect()
}

/// A small deterministic generator (xorshift64*), seeded per file.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

fn splice(source: &[u8], at: usize, remove: usize, insert: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(source.len() + insert.len());
    out.extend_from_slice(&source[..at]);
    out.extend_from_slice(insert);
    out.extend_from_slice(&source[at + remove..]);
    out
}

fn positions(source: &[u8], matches: impl Fn(&[u8], usize) -> bool) -> Vec<usize> {
    (0..source.len())
        .filter(|&at| matches(source, at))
        .collect()
}

fn is_ident(byte: u8) -> bool {
    byte == b'_' || byte.is_ascii_alphanumeric()
}

/// The mutations of one source (with its contract line appended).
fn mutations(source: &[u8], rng: &mut Rng) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let hashes = positions(source, |s, at| s[at] == b'#');
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&hashes) {
            let byte: &[u8] = rng
                .pick(&[&b"\xe9"[..], b"\xff", b"\xc3", b"\xe2\x82"])
                .unwrap();
            out.push(("comment byte", splice(source, at + 1, 0, byte)));
        }
    }
    // A quote followed by two plain characters of the same line.
    let quotes = positions(source, |s, at| {
        matches!(s[at], b'"' | b'\'')
            && s.get(at + 1..at + 3)
                .is_some_and(|next| next.iter().all(|&b| b != s[at] && b != b'\n' && b != b'\\'))
    });
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&quotes) {
            let insert: &[u8] = rng
                .pick(&[&b"\xe9"[..], b"\xff", b"\xc3(", b"\\x4", b"\\u12", b"\\"])
                .unwrap();
            out.push(("string byte", splice(source, at + 2, 0, insert)));
        }
    }
    let identifiers = positions(source, |s, at| {
        (at == 0 || !is_ident(s[at - 1]))
            && (s[at] == b'_' || s[at].is_ascii_alphabetic())
            && s.get(at..at + 4)
                .is_some_and(|word| word.iter().all(|&b| is_ident(b)))
    });
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&identifiers) {
            let insert: &[u8] = rng
                .pick(&[
                    &b"\xe9"[..],
                    b"\xff",
                    "€".as_bytes(),
                    b"$",
                    b"?",
                    b"\x01",
                    b"\xc2\xa0",
                ])
                .unwrap();
            out.push(("identifier byte", splice(source, at + 2, 0, insert)));
        }
    }
    let closers = positions(source, |s, at| matches!(s[at], b')' | b']' | b'}'));
    for _ in 0..3 {
        if let Some(&at) = rng.pick(&closers) {
            out.push(("dropped closing bracket", splice(source, at, 1, b"")));
        }
    }
    let openers = positions(source, |s, at| matches!(s[at], b'(' | b'[' | b'{'));
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&openers) {
            out.push(("dropped opening bracket", splice(source, at, 1, b"")));
        }
    }
    let newlines = positions(source, |s, at| s[at] == b'\n');
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&newlines) {
            let insert: &[u8] = rng.pick(&[&b" ("[..], b" [", b"{", b" (["]).unwrap();
            out.push(("added bracket", splice(source, at, 0, insert)));
        }
    }
    let indented = positions(source, |s, at| {
        s[at] == b'\n' && s.get(at + 1..at + 5) == Some(b"    ")
    });
    for _ in 0..3 {
        if let Some(&at) = rng.pick(&indented) {
            let width = source[at + 1..].iter().take_while(|&&b| b == b' ').count();
            let replacement = match rng.below(6) {
                0 => b"\t".to_vec(),
                1 => [&b"\t"[..], &vec![b' '; width % 8]].concat(),
                2 => vec![b' '; width - 1],
                3 => vec![b' '; width + 1],
                4 => vec![b'\t'; width / 4],
                _ => vec![b' '; width + 2],
            };
            out.push(("indentation", splice(source, at + 1, width, &replacement)));
        }
    }
    let tabbed = positions(source, |s, at| {
        s[at] == b'\n' && s.get(at + 1) == Some(&b'\t')
    });
    if let Some(&at) = rng.pick(&tabbed) {
        out.push(("tab to spaces", splice(source, at + 1, 1, b"    ")));
    }
    out.push(("BOM", [&b"\xef\xbb\xbf"[..], source].concat()));
    let cookies: [&[u8]; 10] = [
        b"# -*- coding: latin-1 -*-\n",
        b"# coding: cp1252\n",
        b"# coding=koi8-r\n",
        b"# vim: set fileencoding=ascii :\n",
        b"# coding: utf8\n",
        b"# coding: utf-8\n",
        b"# -*- coding: uft-8 -*-\n",
        b"# coding: iso-8859-15\n",
        b"#!/usr/bin/env python\n# coding: mac_roman\n",
        b"# coding: hex\n",
    ];
    for _ in 0..3 {
        let cookie = rng.pick(&cookies).unwrap();
        out.push(("coding cookie", [cookie, source].concat()));
    }
    out.push((
        "BOM and cookie",
        [&b"\xef\xbb\xbf# coding: latin-1\n"[..], source].concat(),
    ));
    for _ in 0..2 {
        if let Some(&at) = rng.pick(&newlines) {
            let insert: &[u8] = rng.pick(&[&b" \\"[..], b" \\ x", b"\\", b" \\\n"]).unwrap();
            out.push(("line continuation", splice(source, at, 0, insert)));
        }
    }
    out.push(("continuation at EOF", [source, &b"x = 1 + \\"[..]].concat()));
    let crlf: Vec<u8> = source
        .iter()
        .flat_map(|&b| {
            if b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![b]
            }
        })
        .collect();
    out.push(("CRLF", crlf));
    for _ in 0..2 {
        if !source.is_empty() {
            let at = rng.below(source.len());
            out.push(("deleted character", splice(source, at, 1, b"")));
            let alphabet = b"()[]{}:,;=.'\"\\#@*+-!$?`\t \n0x1";
            let insert = alphabet[rng.below(alphabet.len())];
            let at = rng.below(source.len());
            out.push(("inserted character", splice(source, at, 0, &[insert])));
        }
    }
    let lines: Vec<&[u8]> = source.split(|&b| b == b'\n').collect();
    for _ in 0..2 {
        let at = rng.below(lines.len());
        let mut edited = lines.clone();
        match rng.below(3) {
            0 => edited.insert(at, lines[at]),
            1 => {
                edited.remove(at);
            }
            _ if at + 1 < lines.len() => edited.swap(at, at + 1),
            _ => {}
        }
        out.push(("line edit", edited.join(&b"\n"[..])));
    }
    out
}

/// The mutation cases: every `stride`-th file under 100 KB, mutated.
fn mutation_cases(root: &Path, files: &[PathBuf]) -> Vec<Case> {
    let stride = if full_corpus() { 8 } else { 60 };
    let mut cases = Vec::new();
    for (index, path) in files
        .iter()
        .enumerate()
        .filter(|(index, _)| index % stride == 3)
    {
        let Ok(mut source) = fs::read(path) else {
            continue;
        };
        if source.len() > 100_000 {
            continue;
        }
        source.extend_from_slice(CONTRACT_LINE);
        let mut rng = Rng::new(index as u64 + 1);
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        for (kind, mutated) in mutations(&source, &mut rng) {
            cases.push(Case {
                label: format!("{name} ({kind})"),
                source: mutated,
            });
        }
    }
    cases
}

/// Python's outcome for every case, from one `python3` process.
fn python_outcomes(cases: &[Case], work: &Path) -> Vec<Outcome> {
    let directory = work.join("cases");
    fs::create_dir(&directory).unwrap();
    for (index, case) in cases.iter().enumerate() {
        fs::write(directory.join(format!("{index}.py")), &case.source).unwrap();
    }
    let output = Command::new("python3")
        .arg("-c")
        .arg(ORACLE)
        .arg(&directory)
        .arg(cases.len().to_string())
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs the oracle");
    assert!(
        output.status.success(),
        "the oracle failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let outcomes: Vec<Outcome> = output
        .stdout
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let value: Json = parse_json(line).expect("the oracle prints JSON lines");
            Outcome {
                ok: value.get("ok").and_then(Json::as_bool).expect("ok"),
                line: value
                    .get("line")
                    .and_then(Json::as_str)
                    .expect("line")
                    .to_string(),
                warnings: value
                    .get("warnings")
                    .and_then(Json::as_array)
                    .expect("warnings")
                    .iter()
                    .map(|warning| warning.as_str().expect("a warning line").to_string())
                    .collect(),
            }
        })
        .collect();
    assert_eq!(outcomes.len(), cases.len(), "one oracle line per case");
    outcomes
}

/// The binary's outcome for `source` as the candidate's agent_server.py.
fn binary_outcome(binary: &Path, candidate: &Path, source: &[u8]) -> Outcome {
    write_file(&candidate.join("agent_server.py"), source, 0o644);
    let output = Command::new(binary)
        .args([
            "candidate-api-contract",
            "--root",
            "/unused",
            "--candidate-source",
        ])
        .arg(candidate)
        .stdin(Stdio::null())
        .output()
        .expect("the helper runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut lines: Vec<String> = stderr.lines().map(String::from).collect();
    if output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        Outcome {
            ok: true,
            line: stdout.strip_suffix('\n').unwrap_or(&stdout).to_string(),
            warnings: lines,
        }
    } else {
        assert_eq!(output.status.code(), Some(1), "a refusal exits 1");
        let line = lines.pop().unwrap_or_default();
        Outcome {
            ok: false,
            line,
            warnings: lines,
        }
    }
}

/// Refusals whose exact line the binary must reproduce: everything the
/// tokenizer, the source decoding and the indentation checks report.
fn common_kind(line: &str) -> bool {
    let Some((class, message)) = line.split_once(": ") else {
        return false;
    };
    match class {
        "TabError" | "IndentationError" | "UnicodeDecodeError" => true,
        "SyntaxError" => {
            message.ends_with("was never closed")
                || message.starts_with("invalid character")
                || message.starts_with("invalid non-printable character")
                || message.starts_with("unterminated string literal")
                || message.starts_with("unterminated triple-quoted string literal")
                || message.starts_with("(unicode error)")
                || message.contains("codec can't decode")
                || message.starts_with("closing parenthesis")
                || message.starts_with("unmatched '")
                || message == "unexpected EOF while parsing"
                || message == "unexpected character after line continuation character"
                || message.starts_with("unknown encoding")
                || message.starts_with("encoding problem")
                || message.ends_with(
                    "is not a text encoding; use codecs.decode() to handle arbitrary codecs",
                )
                || message.starts_with("invalid decimal literal")
                || message.starts_with("invalid hexadecimal literal")
                || message == "too many nested parentheses"
        }
        _ => false,
    }
}

fn is_syntax_error(line: &str) -> bool {
    ["SyntaxError: ", "IndentationError: ", "TabError: "]
        .iter()
        .any(|prefix| line.starts_with(prefix))
}

/// The binary's outcome for every case, from a few worker threads (each
/// with its own candidate directory).
fn binary_outcomes(cases: &[Case], work: &Path) -> Vec<Outcome> {
    let binary = binary_path("execution-activation");
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![None; cases.len()]);
    std::thread::scope(|scope| {
        for worker in 0..workers {
            let candidate = work.join(format!("candidate-{worker}"));
            fs::create_dir(&candidate).unwrap();
            let (binary, next, results) = (&binary, &next, &results);
            scope.spawn(move || loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(index) else { break };
                let outcome = binary_outcome(binary, &candidate, &case.source);
                results.lock().unwrap()[index] = Some(outcome);
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|outcome| outcome.expect("every case ran"))
        .collect()
}

/// Compares every case; returns (accepted, refused, exact refusals).
fn compare(cases: &[Case]) -> (usize, usize, usize) {
    let work = TempDir::new("api-contract-corpus");
    let expected = python_outcomes(cases, work.path());
    let actual = binary_outcomes(cases, work.path());
    let mut failures = Vec::new();
    let mut counts = BTreeMap::<&str, usize>::new();
    for ((case, python), port) in cases.iter().zip(&expected).zip(actual) {
        let agrees = port.ok == python.ok
            && port.warnings == python.warnings
            && if python.ok || common_kind(&python.line) || !is_syntax_error(&python.line) {
                port.line == python.line
            } else {
                is_syntax_error(&port.line)
            };
        *counts
            .entry(if python.ok { "accepted" } else { "refused" })
            .or_default() += 1;
        if !python.ok && port.line == python.line {
            *counts
                .entry("refused with Python's exact line")
                .or_default() += 1;
        }
        if !agrees {
            failures.push(format!(
                "{}:\n  python: {python:?}\n  binary: {port:?}",
                case.label
            ));
        }
    }
    eprintln!("{} cases: {counts:?}", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ast.parse:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    (
        counts.get("accepted").copied().unwrap_or(0),
        counts.get("refused").copied().unwrap_or(0),
        counts
            .get("refused with Python's exact line")
            .copied()
            .unwrap_or(0),
    )
}

#[test]
fn standard_library_parses_as_cpython_does() {
    let root = match cpython_311_stdlib() {
        Ok(root) => root,
        Err(reason) => return skip(test_name!(), &reason),
    };
    let files = stdlib_files(&root);
    assert!(files.len() > 1000, "the standard library has its .py files");
    let cases = stdlib_cases(&root, &files);
    let (accepted, refused, exact) = compare(&cases);
    // The sample holds the deliberately broken test inputs (bad coding
    // cookies, a non-UTF-8 byte, an invalid character) next to valid code.
    assert!(accepted >= cases.len() * 9 / 10, "accepted {accepted}");
    assert!(refused >= 4, "refused {refused}");
    assert_eq!(
        exact, refused,
        "every standard-library refusal reads like Python's"
    );
}

#[test]
fn mutated_sources_are_refused_as_cpython_refuses_them() {
    let root = match cpython_311_stdlib() {
        Ok(root) => root,
        Err(reason) => return skip(test_name!(), &reason),
    };
    let files = stdlib_files(&root);
    let cases = mutation_cases(&root, &files);
    assert!(cases.len() > 500, "{} mutations", cases.len());
    let (accepted, refused, _) = compare(&cases);
    assert!(accepted > cases.len() / 5, "accepted {accepted}");
    assert!(refused > cases.len() / 4, "refused {refused}");
}

#[test]
fn a_parser_panic_ends_with_one_line_and_exit_1_never_sigabrt() {
    // The debug build's injected fault stands for a parser bug a hostile
    // source could reach; the release profile aborts on panic, and so does
    // this test's binary if the hook is missing (the status is then 134).
    let temp = TempDir::new("api-contract-panic");
    let candidate = temp.path().join("candidate");
    fs::create_dir(&candidate).unwrap();
    write_file(
        &candidate.join("agent_server.py"),
        b"API_CONTRACT_VERSION = 7\n",
        0o644,
    );
    let run = |inject: bool| {
        let mut command = Command::new(binary_path("execution-activation"));
        command
            .args([
                "candidate-api-contract",
                "--root",
                "/unused",
                "--candidate-source",
            ])
            .arg(&candidate)
            .stdin(Stdio::null());
        if inject {
            command.env(python_source::INJECTED_PANIC_ENV, "1");
        } else {
            command.env_remove(python_source::INJECTED_PANIC_ENV);
        }
        command.output().expect("the helper runs")
    };
    let healthy = run(false);
    assert!(healthy.status.success(), "{healthy:?}");
    assert_eq!(healthy.stdout, b"7\n");
    let broken = run(true);
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
    assert_eq!(
        String::from_utf8_lossy(&broken.stderr),
        "RuntimeError: candidate API contract could not be read: the port's parser failed on this source\n"
    );
    assert!(broken.stdout.is_empty());
}

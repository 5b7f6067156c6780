//! The Darwin ABI facts the macOS code relies on, checked against Apple's
//! headers: every `darwin_abi.rs` module of the workspace writes each fact as
//! a constant whose doc comment starts with `C:` and names the C expression
//! and its header. This test turns every fact into a `_Static_assert` and
//! compiles it with `zig cc` for arm64 and x86_64 macOS against the Darwin
//! libc headers zig ships (the SDK's `sys/dirent.h`, `sys/attr.h`,
//! `sys/proc_info.h`, `sys/sysctl.h`, `libproc.h`, ...). The Rust side asserts
//! its declarations against the same constants at compile time.

use std::fs;
use std::path::Path;
use std::process::Command;

use agents_tests::{skip, test_name, workspace_root, TempDir};

/// The workspace's fact modules.
const FACT_MODULES: [&str; 2] = [
    "common/agents/src/darwin_abi.rs",
    "bins/execution-activation/src/legacy_runner/darwin_abi.rs",
];
/// zig's names of the two Apple targets.
const APPLE_TARGETS: [&str; 2] = ["aarch64-macos", "x86_64-macos"];

/// One fact: `expression == value`, from `header`, named `name`.
#[derive(Debug, Clone)]
struct Fact {
    name: String,
    expression: String,
    header: String,
    value: String,
}

/// The facts of one module: a `/// C: `expr` in `header`...` line followed
/// (after more doc lines) by `pub const NAME: TYPE = VALUE;` (of any
/// visibility).
fn facts_of(source: &str) -> Vec<Fact> {
    let mut facts = Vec::new();
    let mut pending: Option<(String, String)> = None;
    for line in source.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("/// C: `") {
            let (expression, after) = rest.split_once('`').expect("C: `expr` in `header`");
            let header = after
                .strip_prefix(" in `")
                .and_then(|rest| rest.split_once('`'))
                .map(|(header, _)| header)
                .expect("C: `expr` in `header`");
            pending = Some((expression.to_string(), header.to_string()));
        } else if let Some(rest) = constant_declaration(line) {
            let (expression, header) = pending.take().expect("a fact constant has a C: line");
            let (name, typed) = rest.split_once(':').expect("NAME: TYPE = VALUE;");
            let value = typed
                .split_once('=')
                .expect("NAME: TYPE = VALUE;")
                .1
                .trim()
                .trim_end_matches(';')
                .replace('_', "");
            facts.push(Fact {
                name: name.trim().to_string(),
                expression,
                header,
                value,
            });
        } else if !line.starts_with("///") {
            assert!(pending.is_none(), "a C: line without its constant");
        }
    }
    facts
}

/// `NAME: TYPE = VALUE;` of a `pub`, `pub(crate)` or `pub(super)` constant.
fn constant_declaration(line: &str) -> Option<&str> {
    ["pub const ", "pub(crate) const ", "pub(super) const "]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
}

fn all_facts() -> Vec<Fact> {
    let root = workspace_root();
    let facts: Vec<Fact> = FACT_MODULES
        .iter()
        .flat_map(|module| facts_of(&fs::read_to_string(root.join(module)).unwrap()))
        .collect();
    assert!(facts.len() >= 20, "every fact module was read: {facts:?}");
    facts
}

/// A C translation unit asserting every fact.
fn translation_unit(facts: &[Fact]) -> String {
    let mut headers: Vec<&str> = vec!["stddef.h", "stdint.h", "sys/types.h"];
    for fact in facts {
        if !headers.contains(&fact.header.as_str()) {
            headers.push(&fact.header);
        }
    }
    let mut text: String = headers
        .iter()
        .map(|header| format!("#include <{header}>\n"))
        .collect();
    for fact in facts {
        text.push_str(&format!(
            "_Static_assert(({}) == {}, \"{} ({})\");\n",
            fact.expression, fact.value, fact.name, fact.header
        ));
    }
    text
}

/// Compiles `source` for `target`; the compiler's stderr on failure.
fn compile(zig: &[String], directory: &Path, source: &str, target: &str) -> Result<(), String> {
    let input = directory.join(format!("facts-{target}.c"));
    fs::write(&input, source).unwrap();
    let output = Command::new(&zig[0])
        .args(&zig[1..])
        .args(["cc", "-target", target, "-c"])
        .arg(&input)
        .arg("-o")
        .arg(directory.join(format!("facts-{target}.o")))
        .env("ZIG_GLOBAL_CACHE_DIR", directory.join("zig-cache"))
        .env("ZIG_LOCAL_CACHE_DIR", directory.join("zig-cache"))
        .output()
        .expect("run zig");
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// `zig` itself, or `python3 -m ziglang` (PyPI's package, what setup.sh installs).
fn zig_command() -> Option<Vec<String>> {
    let works = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .arg("version")
            .output()
            .is_ok_and(|output| output.status.success())
    };
    [vec!["zig"], vec!["python3", "-m", "ziglang"]]
        .into_iter()
        .find(|argv| works(argv))
        .map(|argv| argv.into_iter().map(String::from).collect())
}

#[test]
fn every_darwin_abi_fact_matches_the_sdk_headers() {
    let Some(zig) = zig_command() else {
        return skip(
            test_name!(),
            "zig is not installed (scripts/setup.sh installs it)",
        );
    };
    let facts = all_facts();
    let temp = TempDir::new("darwin-abi");
    let source = translation_unit(&facts);
    for target in APPLE_TARGETS {
        if let Err(errors) = compile(&zig, temp.path(), &source, target) {
            panic!("a Darwin ABI fact disagrees with the {target} headers:\n{errors}\n{source}");
        }
    }
}

#[test]
fn a_wrong_fact_fails_the_check() {
    let Some(zig) = zig_command() else {
        return skip(
            test_name!(),
            "zig is not installed (scripts/setup.sh installs it)",
        );
    };
    let temp = TempDir::new("darwin-abi-wrong");
    for wrong in all_facts() {
        if !["PROC_BSDINFO_SIZE", "DIRENT_D_NAME", "ATTR_VOL_INFO_UUID"]
            .contains(&wrong.name.as_str())
        {
            continue;
        }
        let off_by_one = Fact {
            value: format!("({} + 1)", wrong.value),
            ..wrong.clone()
        };
        let errors = compile(
            &zig,
            temp.path(),
            &translation_unit(&[off_by_one]),
            APPLE_TARGETS[0],
        )
        .expect_err("an off-by-one fact must not compile");
        assert!(errors.contains(&wrong.name), "{errors}");
    }
}

#[test]
fn facts_are_read_with_their_headers() {
    let facts = facts_of(
        "/// C: `sizeof(struct a)` in `sys/a.h` (note).\n/// More.\npub const A_SIZE: usize = 1_048;\n",
    );
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].name, "A_SIZE");
    assert_eq!(facts[0].expression, "sizeof(struct a)");
    assert_eq!(facts[0].header, "sys/a.h");
    assert_eq!(facts[0].value, "1048");
}

//! What CPython 3.11's `ast.parse(source_bytes)` accepts, and the
//! module-level `NAME = <constant>` assignments of an accepted module.
//!
//! The original's `candidate_api_contract` passes the raw bytes of
//! `agent_server.py` to `ast.parse`, so the source goes through CPython's
//! bytes path: a coding cookie or BOM decides the encoding and, with no
//! cookie, nothing checks that bytes outside identifiers and string
//! literals (comments) are UTF-8. Then come CPython's tokenizer and
//! parser, including the string checks CPython makes while building
//! constants; a refused source yields the exception class and message
//! CPython's traceback ends with ([`python_compat::Exception`]). Lines
//! CPython warns about on stderr (`SyntaxWarning: invalid decimal literal`)
//! are returned too.
//!
//! It tracks CPython 3.11 rather than the helpers' domain, and is the
//! largest single piece of Python compatibility, so it is a crate of its
//! own; execution-activation's `candidate-api-contract` is its one user.
//! [`module_constants`] is the whole surface.
//!
//! # Map by concern
//!
//! - `source`, `codecs`, `utf8`: the bytes path (BOM, coding cookie, the
//!   single-byte codecs, strict UTF-8 with CPython's error words);
//! - `tokenizer`: CPython's tokenizer, indentation and bracket errors;
//! - `parser` (`expressions`, `statements`, `targets`, `patterns`,
//!   `invalid`): the PEG grammar and its `invalid_*` rules, which pick
//!   CPython's `SyntaxError` messages;
//! - `literals`: strings, bytes, f-strings and numbers as the AST builds them;
//! - `unicode`, `tables`: identifier characters and NFKC, generated from
//!   CPython 3.11 by `scripts/gen-python-source-tables.py`.
//!
//! Known differences from CPython, all documented in docs/design/candidate-api-contract.md: an
//! unknown but well-formed `\N{name}` escape is accepted, a coding cookie
//! naming a multi-byte East Asian codec, UTF-7, UTF-16/32, IDNA, punycode or
//! an escape codec is refused as unsupported, and very deep nesting is
//! refused at a fixed depth with `RecursionError`.

mod codecs;
mod literals;
mod parser;
mod source;
#[rustfmt::skip]
mod tables;
mod tokenizer;
mod unicode;
mod utf8;

use std::cell::RefCell;
use std::rc::Rc;

use python_compat::{ErrorClass, Exception};

use parser::{Const, Node, Parser, Start, Stmt};

/// Warning lines CPython prints on stderr while parsing, in order.
pub(crate) type Warnings = Rc<RefCell<Vec<String>>>;

/// The `SyntaxError` the tokenizer, the decoder and the grammar raise most.
pub(crate) fn syntax_error(message: impl Into<String>) -> Exception {
    Exception::new(ErrorClass::Syntax, message)
}

/// Why a source yields no module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// What `ast.parse` raises.
    Python(Exception),
    /// A coding cookie naming a codec this port does not implement.
    UnsupportedEncoding(String),
}

/// The value of a module-level constant assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constant {
    /// An integer literal, in decimal without leading zeros.
    Int(String),
    /// Any other constant (float, complex, str, bytes, True, None, ...).
    Other,
}

/// The outcome of parsing one module.
#[derive(Debug)]
pub struct Parsed {
    /// `<unknown>:LINE: SyntaxWarning: ...` lines, as CPython prints them.
    pub warnings: Vec<String>,
    /// The constants assigned to `name` at module level, in order.
    pub outcome: Result<Vec<Constant>, Refusal>,
}

/// The stack of the thread the parser runs on. The parser recurses once per
/// grammar rule, and the deepest sources it accepts (see `MAX_DEPTH` in the
/// parser) are chains of `lambda:` or `if`/`else` inside 199 nested brackets
/// such as `f(a=1 if 1 else f(a=...`. Measured on x86_64 (Rust 1.95) with a
/// thread of decreasing stack size until it overflowed: the worst of 40
/// such shapes (every bracket kind, unary and ternary chains, targets,
/// patterns, each at its deepest accepted depth, one past it and with a
/// `SyntaxError` at the bottom, which reruns the grammar with the
/// `invalid_*` rules) needs 4.2 MiB in a debug build and 0.8 MiB in a
/// release build. 16 MiB leaves four times the debug figure; only the
/// pages the parse touches are ever committed.
const PARSER_STACK_BYTES: usize = 16 << 20;

/// Parses `source` as `ast.parse(source)` does and collects the constant
/// values of module-level assignments `name = <constant>` (any target of a
/// multiple assignment counts; the name is compared after NFKC
/// normalization, as the AST stores identifiers). The parse runs on a
/// thread of its own whose stack holds the deepest nesting the parser
/// accepts.
pub fn module_constants(source: &[u8], name: &str) -> Parsed {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("ast-parse".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, || parse_module(source, name))
            .expect("a thread for the parser")
            .join()
            .expect("the parser does not panic")
    })
}

/// Set in a debug build's environment, the parser thread panics: the fault
/// a parser bug would be, for the test that a helper still ends with one
/// line and exit 1 (never SIGABRT). Release builds do not read it.
pub const INJECTED_PANIC_ENV: &str = "PYTHON_SOURCE_TEST_PANIC";

fn parse_module(source: &[u8], name: &str) -> Parsed {
    #[cfg(debug_assertions)]
    if std::env::var_os(INJECTED_PANIC_ENV).is_some() {
        panic!("{INJECTED_PANIC_ENV} is set");
    }
    let warnings: Warnings = Rc::new(RefCell::new(Vec::new()));
    let outcome = parse(source, name, &warnings);
    let warnings = warnings.borrow().clone();
    Parsed { warnings, outcome }
}

fn parse(source: &[u8], name: &str, warnings: &Warnings) -> Result<Vec<Constant>, Refusal> {
    let text = source::decode_source(source)?;
    let mut parser = Parser::new(&text, Start::File, 1, warnings.clone());
    let statements = parser.run().map_err(Refusal::Python)?;
    let mut values = Vec::new();
    for statement in statements {
        let Stmt::Assign { targets, value } = parser.stmts[statement as usize] else {
            continue;
        };
        let (start, len) = targets;
        let named = (start..start + len).any(|index| {
            let target = parser.seqs[index as usize];
            parser.name_token(target).is_some_and(|token| {
                std::str::from_utf8(parser.text(token))
                    .ok()
                    .and_then(unicode::ascii_nfkc)
                    .is_some_and(|identifier| identifier == name)
            })
        });
        if !named {
            continue;
        }
        match parser.nodes[value as usize] {
            Node::Const(Const::Int(token)) => {
                values.push(Constant::Int(int_literal_decimal(parser.text(token))))
            }
            Node::Const(_) => values.push(Constant::Other),
            _ => {}
        }
    }
    Ok(values)
}

/// The decimal digits of an integer literal token (any base, underscores
/// allowed).
fn int_literal_decimal(token: &[u8]) -> String {
    let digits: Vec<u8> = token.iter().copied().filter(|&byte| byte != b'_').collect();
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = match lower.get(..2) {
        Some(b"0x") => (16, &lower[2..]),
        Some(b"0o") => (8, &lower[2..]),
        Some(b"0b") => (2, &lower[2..]),
        _ => (10, &lower[..]),
    };
    // Little-endian limbs of 10^9.
    let mut limbs: Vec<u64> = vec![0];
    for &byte in body {
        let digit = (byte as char)
            .to_digit(radix)
            .expect("the tokenizer checked the digits") as u64;
        let mut carry = digit;
        for limb in limbs.iter_mut() {
            let value = *limb * radix as u64 + carry;
            *limb = value % 1_000_000_000;
            carry = value / 1_000_000_000;
        }
        if carry > 0 {
            limbs.push(carry);
        }
    }
    let mut out = limbs.last().expect("never empty").to_string();
    for limb in limbs.iter().rev().skip(1) {
        out.push_str(&format!("{limb:09}"));
    }
    out
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

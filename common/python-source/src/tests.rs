//! Unit tests of the `ast.parse` reproduction. Every expected line is a
//! fact recorded from CPython 3.11.7: the original's logic (`ast.parse` on the
//! bytes, then the contract check) run on the same source, the last line of
//! its traceback, and the warning lines it printed.

use super::*;

/// What the binary prints: the contract, or the refusal's `Class: message`.
fn outcome(source: &[u8]) -> (String, Vec<String>) {
    let parsed = module_constants(source, "API_CONTRACT_VERSION");
    let line = match parsed.outcome {
        Ok(values) => match values.as_slice() {
            [Constant::Int(digits)] if digits != "0" => digits.clone(),
            _ => "RuntimeError: candidate API contract is not one positive literal integer".into(),
        },
        Err(Refusal::Python(error)) => error.python_line(),
        Err(Refusal::UnsupportedEncoding(name)) => format!("unsupported {name}"),
    };
    (line, parsed.warnings)
}

/// A source without warnings and what CPython printed for it: (what it
/// exercises, the source, the contract or the last traceback line).
type Recorded = (&'static str, &'static [u8], &'static str);

/// Bytes that are not UTF-8: ignored in a comment, refused elsewhere with
/// the message of the step that meets them.
#[rustfmt::skip]
const UNDECODABLE_BYTES: &[Recorded] = &[
    ("comment byte is accepted", b"# caf\xe9\nAPI_CONTRACT_VERSION = 7\n", "7"),
    ("string byte", b"x = 'caf\xe9'\nAPI_CONTRACT_VERSION = 7\n", "SyntaxError: (unicode error) 'utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data"),
    ("raw string bytes", b"x = r'ab\xe9\xe9cd'\n", "SyntaxError: (unicode error) 'utf-8' codec can't decode byte 0xe9 in position 2: invalid continuation byte"),
    ("identifier byte", b"caf\xe9 = 1\n", "SyntaxError: (unicode error) 'utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data"),
];

/// Encoding declarations: honoured, unknown, contradicting a BOM, or
/// decoding the rest strictly.
#[rustfmt::skip]
const ENCODING_COOKIES: &[Recorded] = &[
    ("bad cookie", b"# -*- coding: uft-8 -*-\nx = 1\n", "SyntaxError: unknown encoding: uft-8"),
    ("bom with other cookie", b"\xef\xbb\xbf# coding: latin-1\nx = 1\n", "SyntaxError: encoding problem: iso-8859-1 with BOM"),
    ("latin-1 cookie", b"# -*- coding: latin-1 -*-\nx = '\xe9'\nAPI_CONTRACT_VERSION = 7\n", "7"),
    ("utf8 cookie decodes strictly", b"# coding: utf8\n# \xe9\n", "SyntaxError: 'utf-8' codec can't decode byte 0xe9 in position 17: invalid continuation byte"),
    ("ascii cookie", b"# coding: ascii\nx = '\xe9'\n", "SyntaxError: 'ascii' codec can't decode byte 0xe9 in position 21: ordinal not in range(128)"),
];

/// Characters the tokenizer refuses outside strings and comments, and NUL
/// anywhere.
#[rustfmt::skip]
const BAD_CHARACTERS: &[Recorded] = &[
    ("invalid character", b"x = 1 \xe2\x82\xac 2\n", "SyntaxError: invalid character '€' (U+20AC)"),
    ("invalid non-printable", b"x = 1\xc2\xa0\n", "SyntaxError: invalid non-printable character U+00A0"),
    ("invalid non-printable ascii", b"x = \x01\n", "SyntaxError: invalid non-printable character U+0001"),
    ("null byte", b"x = 1 # \x00\n", "SyntaxError: source code string cannot contain null bytes"),
];

/// Brackets never closed, mismatched or unmatched.
#[rustfmt::skip]
const BRACKETS: &[Recorded] = &[
    ("unclosed bracket", b"API_CONTRACT_VERSION = (\n", "SyntaxError: '(' was never closed"),
    ("unclosed bracket on an earlier line", b"x = [1,\n  2\ny = 3\n", "SyntaxError: '[' was never closed"),
    ("unclosed bracket at EOF in continuation", b"x = (1 + \\\n", "SyntaxError: '(' was never closed"),
    ("mismatched closing bracket", b"x = (1,\n  2]\n", "SyntaxError: closing parenthesis ']' does not match opening parenthesis '(' on line 1"),
    ("mismatched closing bracket same line", b"x = (1, 2]\n", "SyntaxError: closing parenthesis ']' does not match opening parenthesis '('"),
    ("unmatched closing bracket", b"x = 1)\n", "SyntaxError: unmatched ')'"),
];

/// Strings left open, with the line at which CPython detects it.
#[rustfmt::skip]
const UNTERMINATED_STRINGS: &[Recorded] = &[
    ("unterminated string", b"x = 'abc\n", "SyntaxError: unterminated string literal (detected at line 1)"),
    ("unterminated string across continuation", b"x = 'abc\\\ndef\n", "SyntaxError: unterminated string literal (detected at line 2)"),
    ("unterminated triple-quoted", b"x = 1\ny = '''abc\n\n", "SyntaxError: unterminated triple-quoted string literal (detected at line 3)"),
    ("unterminated triple-quoted in crlf file", b"x = '''abc\r\n", "SyntaxError: unterminated triple-quoted string literal (detected at line 2)"),
];

/// Indentation refused as `TabError` or `IndentationError`.
#[rustfmt::skip]
const INDENTATION: &[Recorded] = &[
    ("tab error", b"if x:\n\tpass\n        pass\n", "TabError: inconsistent use of tabs and spaces in indentation"),
    ("unindent mismatch", b"if x:\n    pass\n  pass\n", "IndentationError: unindent does not match any outer indentation level"),
    ("unexpected indent", b"x = 1\n    y = 2\n", "IndentationError: unexpected indent"),
    ("expected indented block", b"if x:\npass\n", "IndentationError: expected an indented block after 'if' statement on line 1"),
];

/// A backslash continuation followed by text, or by the end of the file.
#[rustfmt::skip]
const LINE_CONTINUATIONS: &[Recorded] = &[
    ("continuation followed by text", b"x = 1 \\ 2\n", "SyntaxError: unexpected character after line continuation character"),
    ("continuation at EOF", b"x = 1 + \\", "SyntaxError: unexpected EOF while parsing"),
];

/// Number literals the tokenizer refuses.
#[rustfmt::skip]
const NUMBER_LITERALS: &[Recorded] = &[
    ("leading zeros", b"x = 007\n", "SyntaxError: leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers"),
    ("invalid decimal literal", b"x = 1_000_\n", "SyntaxError: invalid decimal literal"),
    ("invalid hexadecimal literal", b"x = 0x\n", "SyntaxError: invalid hexadecimal literal"),
    ("invalid digit in octal", b"x = 0o8\n", "SyntaxError: invalid digit '8' in octal literal"),
];

/// String and bytes literals refused when their value is built.
#[rustfmt::skip]
const STRING_LITERALS: &[Recorded] = &[
    ("bytes literal non-ascii", b"x = b'caf\xc3\xa9'\n", "SyntaxError: bytes can only contain ASCII literal characters"),
    ("truncated escape", b"x = 'a\\x4g'\n", "SyntaxError: (unicode error) 'unicodeescape' codec can't decode bytes in position 1-3: truncated \\xXX escape"),
    ("bytes escape", b"x = b'a\\x4g'\n", "SyntaxError: (value error) invalid \\x escape at position 1"),
    ("mixed bytes", b"x = 'a' b'b'\n", "SyntaxError: cannot mix bytes and nonbytes literals"),
];

/// f-string replacement fields refused by the f-string parser.
#[rustfmt::skip]
const F_STRINGS: &[Recorded] = &[
    ("fstring field", b"x = f'{a b}'\n", "SyntaxError: f-string: invalid syntax. Perhaps you forgot a comma?"),
    ("fstring backslash", b"x = f'{\\'a\\'}'\n", "SyntaxError: f-string expression part cannot include a backslash"),
    ("fstring single brace", b"x = f'}'\n", "SyntaxError: f-string: single '}' is not allowed"),
    ("fstring empty", b"x = f'{}'\n", "SyntaxError: f-string: empty expression not allowed"),
    ("fstring conversion", b"x = f'{a!x}'\n", "SyntaxError: f-string: invalid conversion character: expected 's', 'r', or 'a'"),
];

/// Syntax errors found by the parser, with the hint CPython adds when it
/// recognises the mistake.
#[rustfmt::skip]
const PARSER_ERRORS: &[Recorded] = &[
    ("missing comma", b"x = [a, b c]\n", "SyntaxError: invalid syntax. Perhaps you forgot a comma?"),
    ("expected colon", b"def f() pass\n", "SyntaxError: expected ':'"),
    ("legacy print", b"print 1\n", "SyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?"),
    ("assign to call", b"f() = 1\n", "SyntaxError: cannot assign to function call here. Maybe you meant '==' instead of '='?"),
    ("generic", b"x = = 1\n", "SyntaxError: invalid syntax"),
    ("soft keyword prefix quirk", b"x = [m x]\n", "SyntaxError: invalid syntax"),
    ("match call before an error", b"match(x)\ny = = 1\n", "SyntaxError: expected ':'"),
];

/// Two errors in one source, and which one CPython reports.
#[rustfmt::skip]
const ERROR_PRECEDENCE: &[Recorded] = &[
    ("parser error then tokenizer error", b"x = = 1\ny = 'abc\n", "SyntaxError: unterminated string literal (detected at line 2)"),
    ("identifier decode error found by the final scan", b"x = = 1\ncaf\xe9 = 2\n", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data"),
];

/// Sources CPython accepts with a warning: (what it exercises, the source,
/// the contract, the warning lines it printed).
#[rustfmt::skip]
const WARNED: &[(&str, &[u8], &str, &[&str])] = &[
    ("keyword after number warns", b"x = 1if 1 else 2\nAPI_CONTRACT_VERSION = 7\n", "7", &["<unknown>:1: SyntaxWarning: invalid decimal literal"]),
];

/// The outcome of `source` is `line`, with `warnings` printed on the way; a
/// failure names `what` and shows the source.
#[track_caller]
fn assert_outcome(what: &str, source: &[u8], line: &str, warnings: &[&str]) {
    let (printed_line, printed_warnings) = outcome(source);
    let shown = String::from_utf8_lossy(source);
    assert_eq!(printed_line, line, "{what}: {shown:?}");
    assert_eq!(printed_warnings, warnings, "{what}: {shown:?}");
}

/// Every kind of refusal prints CPython's exact line, and no warning unless
/// CPython printed one.
#[test]
fn each_error_kind_reads_like_python() {
    let groups = [
        UNDECODABLE_BYTES,
        ENCODING_COOKIES,
        BAD_CHARACTERS,
        BRACKETS,
        UNTERMINATED_STRINGS,
        INDENTATION,
        LINE_CONTINUATIONS,
        NUMBER_LITERALS,
        STRING_LITERALS,
        F_STRINGS,
        PARSER_ERRORS,
        ERROR_PRECEDENCE,
    ];
    for (what, source, line) in groups.concat() {
        assert_outcome(what, source, line, &[]);
    }
    for &(what, source, line, warnings) in WARNED {
        assert_outcome(what, source, line, warnings);
    }
}

#[test]
fn limits_read_like_python() {
    let mut deep = Vec::new();
    for depth in 0..101 {
        deep.extend(std::iter::repeat_n(b' ', depth));
        deep.extend_from_slice(b"if x:\n");
    }
    deep.extend(std::iter::repeat_n(b' ', 101));
    deep.extend_from_slice(b"pass\n");
    assert_eq!(
        outcome(&deep).0,
        "IndentationError: too many levels of indentation"
    );
    let mut nested = b"x = ".to_vec();
    nested.extend(std::iter::repeat_n(b'(', 201));
    assert_eq!(
        outcome(&nested).0,
        "SyntaxError: too many nested parentheses"
    );
    let huge = format!("x = {}\n", "1".repeat(4301));
    assert_eq!(
        outcome(huge.as_bytes()).0,
        "SyntaxError: Exceeds the limit (4300 digits) for integer string conversion: value has 4301 digits; use sys.set_int_max_str_digits() to increase the limit - Consider hexadecimal for huge integer literals to avoid decimal conversion limits."
    );
}

#[test]
fn unsupported_codecs_are_named() {
    assert_eq!(
        outcome(b"# coding: shift_jis\nAPI_CONTRACT_VERSION = 7\n").0,
        "unsupported shift_jis"
    );
}

/// The shapes that need the most stack (see `PARSER_STACK_BYTES`), each at
/// the deepest nesting the parser accepts and with a `SyntaxError` at the
/// bottom: a stack too small for them ends this test process with a stack
/// overflow. The outcomes are the port's own (CPython's parser gives up
/// earlier on such sources, with `MemoryError`).
#[test]
fn the_deepest_accepted_nesting_fits_the_parser_stack() {
    let inside_brackets = |opening: &str, chain: &str, depth: usize, bottom: &str| {
        format!(
            "x = {}{}{bottom}{}\nAPI_CONTRACT_VERSION = 7\n",
            opening.repeat(199),
            chain.repeat(depth),
            ")".repeat(199)
        )
    };
    let comma = "SyntaxError: invalid syntax. Perhaps you forgot a comma?";
    for (source, expected) in [
        (
            inside_brackets("f(a=1 if 1 else ", "1 if 1 else ", 2191, "1"),
            "7",
        ),
        (
            inside_brackets("f(a=1 if 1 else ", "1 if 1 else ", 2191, "1 1"),
            comma,
        ),
        (inside_brackets("f(a=lambda: ", "lambda: ", 2191, "1"), "7"),
        (
            inside_brackets("f(a=lambda: ", "lambda: ", 2191, "1 1"),
            comma,
        ),
        (
            format!(
                "x = {}1\nAPI_CONTRACT_VERSION = 7\n",
                "1 if 1 else ".repeat(2985)
            ),
            "7",
        ),
    ] {
        assert_eq!(outcome(source.as_bytes()).0, expected);
    }
    let past = inside_brackets("f(a=1 if 1 else ", "1 if 1 else ", 2192, "1");
    assert_eq!(
        outcome(past.as_bytes()).0,
        "RecursionError: maximum recursion depth exceeded during ast construction"
    );
}

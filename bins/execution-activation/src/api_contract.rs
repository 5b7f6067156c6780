//! `candidate_api_contract`: the `API_CONTRACT_VERSION` a candidate's
//! `agent_server.py` declares, read without ever running its code.
//!
//! The seed collects, from `ast.parse(source).body`, every module-level
//! `Assign` with a target that is the bare name `API_CONTRACT_VERSION` and a
//! value that is an `ast.Constant`, and requires exactly one, a positive int.
//! Assignments with any other value (`-1`, `f()`, `1 + 1`, an f-string) are
//! not collected at all. This module reproduces what `ast` sees for those
//! statements with a Python tokenizer: strings, comments, brackets, line
//! continuations, `;`-separated statements, and which logical lines are
//! module-level (column 0, not the body of a compound statement header).
//!
//! Deliberate deviation: the port does not check the rest of the grammar, so
//! a file Python rejects with `SyntaxError` elsewhere may still yield its
//! contract here; a tokenizer error (unterminated string, unbalanced
//! bracket, a non-UTF-8 file) is refused with a `ValueError`.

use std::path::Path;

use agents_common::{read_owned_config, Error, Result, ACTIVATION_CONFIG_LIMIT};

const NAME: &str = "API_CONTRACT_VERSION";
const REFUSAL: &str = "candidate API contract is not one positive literal integer";

/// `candidate-api-contract`: the one literal `API_CONTRACT_VERSION` a
/// candidate's `agent_server.py` declares, read without running it, so
/// install.sh can refuse a candidate the running server cannot talk to.
/// Ports `candidate_api_contract(candidate)`.
pub fn candidate_api_contract(candidate: &Path) -> Result<u128> {
    let source = read_owned_config(&candidate.join("agent_server.py"), ACTIVATION_CONFIG_LIMIT)?;
    let values = declared_contracts(&source)?;
    match values.as_slice() {
        [Literal::Int(Some(value))] if *value >= 1 => Ok(*value),
        _ => Err(Error::runtime(REFUSAL)),
    }
}

/// A constant value assigned to the contract name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Literal {
    /// An int literal; `None` when it exceeds `u128` (never a real contract).
    Int(Option<u128>),
    /// Any other constant (float, complex, str, bytes, bool, None, `...`).
    Other,
}

/// Every constant module-level assignment to the contract name, in order.
fn declared_contracts(source: &[u8]) -> Result<Vec<Literal>> {
    let source = source.strip_prefix(b"\xef\xbb\xbf").unwrap_or(source);
    let text = std::str::from_utf8(source).map_err(|_| syntax("source is not UTF-8"))?;
    let mut values = Vec::new();
    for line in logical_lines(text)? {
        if line.indented || is_compound_header(&line.tokens) {
            continue;
        }
        for statement in split_top_level(&line.tokens, |token| token.is_op(";")) {
            let parts = split_top_level(statement, |token| token.is_op("="));
            let Some((value, targets)) = parts.split_last() else {
                continue;
            };
            if targets.is_empty() || !targets.iter().any(|target| is_contract_name(target)) {
                continue;
            }
            if let Some(literal) = constant(value)? {
                values.push(literal);
            }
        }
    }
    Ok(values)
}

/// A Python token, as far as these statements need them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Name(String),
    Number(String),
    /// A string literal; `formatted` for an f-string (an `ast.JoinedStr`).
    Str {
        formatted: bool,
    },
    Op(String),
}

impl Token {
    fn is_op(&self, op: &str) -> bool {
        matches!(self, Token::Op(text) if text == op)
    }
}

/// One logical line: its tokens and whether it started indented.
struct LogicalLine {
    tokens: Vec<Token>,
    indented: bool,
}

/// Operators, longest first so that `**=` wins over `**` and `*`.
const OPERATORS: [&str; 47] = [
    "**=", "//=", ">>=", "<<=", "...", "->", ":=", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=", "^=", "@=", "**", "//", "<<", ">>", "<>", "+", "-", "*", "/", "%", "@", "&",
    "|", "^", "~", "<", ">", "(", ")", "[", "]", "{", "}", ",", ":", ";", "=",
];

fn syntax(reason: &str) -> Error {
    Error::value(format!(
        "candidate agent_server.py is not valid Python source: {reason}"
    ))
}

/// Tokenize into logical lines (Python's NEWLINE-separated token runs).
fn logical_lines(text: &str) -> Result<Vec<LogicalLine>> {
    let chars: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    let mut tokens: Vec<Token> = Vec::new();
    let mut indented = false;
    let mut depth: usize = 0;
    let mut at_line_start = true;
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if at_line_start && depth == 0 && tokens.is_empty() {
            // Indentation of a new logical line (blank and comment-only
            // lines never start one).
            let start = index;
            while index < chars.len() && matches!(chars[index], ' ' | '\t' | '\x0c') {
                index += 1;
            }
            at_line_start = false;
            indented = index > start && chars[start..index].iter().any(|&c| c != '\x0c');
            continue;
        }
        at_line_start = false;
        match c {
            '\n' | '\r' => {
                if c == '\r' && chars.get(index + 1) == Some(&'\n') {
                    index += 1;
                }
                index += 1;
                at_line_start = true;
                if depth == 0 && !tokens.is_empty() {
                    lines.push(LogicalLine {
                        tokens: std::mem::take(&mut tokens),
                        indented,
                    });
                }
            }
            ' ' | '\t' | '\x0c' => index += 1,
            '#' => {
                while index < chars.len() && !matches!(chars[index], '\n' | '\r') {
                    index += 1;
                }
            }
            '\\' => {
                // Explicit line joining: only a newline may follow.
                match chars.get(index + 1) {
                    Some('\n') => index += 2,
                    Some('\r') if chars.get(index + 2) == Some(&'\n') => index += 3,
                    Some('\r') => index += 2,
                    _ => {
                        return Err(syntax(
                            "unexpected character after line continuation character",
                        ))
                    }
                }
            }
            _ if c.is_ascii_digit()
                || (c == '.' && chars.get(index + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let start = index;
                index = number_end(&chars, index);
                tokens.push(Token::Number(chars[start..index].iter().collect()));
            }
            _ if c == '_' || c.is_alphabetic() || (!c.is_ascii() && !c.is_whitespace()) => {
                let start = index;
                while index < chars.len()
                    && (chars[index] == '_'
                        || chars[index].is_alphanumeric()
                        || (!chars[index].is_ascii() && !chars[index].is_whitespace()))
                {
                    index += 1;
                }
                let word: String = chars[start..index].iter().collect();
                if matches!(chars.get(index), Some('\'' | '"')) && is_string_prefix(&word) {
                    index = string_end(&chars, index)?;
                    tokens.push(Token::Str {
                        formatted: word.to_ascii_lowercase().contains('f'),
                    });
                } else {
                    tokens.push(Token::Name(word));
                }
            }
            '\'' | '"' => {
                index = string_end(&chars, index)?;
                tokens.push(Token::Str { formatted: false });
            }
            _ => {
                let rest: String = chars[index..chars.len().min(index + 3)].iter().collect();
                let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) else {
                    return Err(syntax(&format!("invalid character {c:?}")));
                };
                match *op {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" => {
                        depth = depth
                            .checked_sub(1)
                            .ok_or_else(|| syntax("unmatched closing bracket"))?;
                    }
                    _ => {}
                }
                index += op.chars().count();
                tokens.push(Token::Op(op.to_string()));
            }
        }
    }
    if depth != 0 {
        return Err(syntax("unexpected EOF in multi-line statement"));
    }
    if !tokens.is_empty() {
        lines.push(LogicalLine { tokens, indented });
    }
    Ok(lines)
}

/// `r`, `u`, `b`, `f` and their two-letter combinations, any case.
fn is_string_prefix(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    ["r", "u", "b", "f", "br", "rb", "fr", "rf"].contains(&lower.as_str())
}

/// The index after a string literal whose quote is at `start`.
fn string_end(chars: &[char], start: usize) -> Result<usize> {
    let quote = chars[start];
    let triple = chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote);
    let mut index = start + if triple { 3 } else { 1 };
    while index < chars.len() {
        let c = chars[index];
        if c == '\\' {
            // Even in raw strings a backslash keeps the next quote inside.
            index += 2;
            continue;
        }
        if triple {
            if c == quote
                && chars.get(index + 1) == Some(&quote)
                && chars.get(index + 2) == Some(&quote)
            {
                return Ok(index + 3);
            }
        } else if c == quote {
            return Ok(index + 1);
        } else if c == '\n' || c == '\r' {
            return Err(syntax("unterminated string literal"));
        }
        index += 1;
    }
    Err(syntax(if triple {
        "unterminated triple-quoted string literal"
    } else {
        "unterminated string literal"
    }))
}

/// The index after a number token starting at `start` (exponent signs
/// included for decimal literals).
fn number_end(chars: &[char], start: usize) -> usize {
    let hex = chars[start] == '0' && matches!(chars.get(start + 1), Some('x' | 'X'));
    let mut index = start;
    while index < chars.len() {
        let c = chars[index];
        let exponent_sign = !hex
            && matches!(c, '+' | '-')
            && index > start
            && matches!(chars[index - 1], 'e' | 'E')
            && chars.get(index + 1).is_some_and(char::is_ascii_digit);
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' || exponent_sign {
            index += 1;
        } else {
            break;
        }
    }
    index
}

/// Statement keywords that open a compound statement; a same-line body
/// after their `:` is not module-level.
const COMPOUND: [&str; 12] = [
    "if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class",
    "async",
];

fn is_compound_header(tokens: &[Token]) -> bool {
    match tokens.first() {
        Some(Token::Op(op)) if op == "@" => true,
        Some(Token::Name(word)) if COMPOUND.contains(&word.as_str()) => true,
        // Soft keywords: `match x:` / `case y:` headers end with their colon.
        Some(Token::Name(word)) if word == "match" || word == "case" => {
            let first = split_top_level(tokens, |token| token.is_op(";"));
            let statement = first.first().copied().unwrap_or_default();
            statement.len() > 1
                && statement.last().is_some_and(|token| token.is_op(":"))
                && !statement[1].is_op("=")
        }
        _ => false,
    }
}

/// Split at separators that are outside every bracket.
fn split_top_level(tokens: &[Token], separator: impl Fn(&Token) -> bool) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, token) in tokens.iter().enumerate() {
        match token {
            Token::Op(op) if ["(", "[", "{"].contains(&op.as_str()) => depth += 1,
            Token::Op(op) if [")", "]", "}"].contains(&op.as_str()) => {
                depth = depth.saturating_sub(1)
            }
            _ if depth == 0 && separator(token) => {
                parts.push(&tokens[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&tokens[start..]);
    parts.retain(|part| !part.is_empty());
    parts
}

/// Strip parentheses that wrap the whole expression: they create no node,
/// unless they hold a tuple (`()`, `(3,)`).
fn unwrap_parentheses(mut tokens: &[Token]) -> &[Token] {
    while let [first, inner @ .., last] = tokens {
        if !first.is_op("(")
            || !last.is_op(")")
            || inner.is_empty()
            || !closes_at_end(tokens)
            || split_top_level(inner, |token| token.is_op(",")).len() > 1
            || inner.last().is_some_and(|token| token.is_op(","))
        {
            break;
        }
        tokens = inner;
    }
    tokens
}

/// The bracket opened by the first token closes at the last token.
fn closes_at_end(tokens: &[Token]) -> bool {
    let mut depth = 0usize;
    for (index, token) in tokens.iter().enumerate() {
        match token {
            Token::Op(op) if ["(", "[", "{"].contains(&op.as_str()) => depth += 1,
            Token::Op(op) if [")", "]", "}"].contains(&op.as_str()) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return index == tokens.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

/// A target that is the bare name (`ast.Name`), possibly parenthesized.
fn is_contract_name(target: &[Token]) -> bool {
    matches!(unwrap_parentheses(target), [Token::Name(name)] if name == NAME)
}

/// `ast.Constant` values: one number, adjacent plain string literals, or
/// `True`/`False`/`None`/`...`; `None` when the value is any other node.
fn constant(value: &[Token]) -> Result<Option<Literal>> {
    let value = unwrap_parentheses(value);
    Ok(match value {
        [Token::Number(text)] => Some(number(text)?),
        [Token::Name(word)] if ["True", "False", "None"].contains(&word.as_str()) => {
            Some(Literal::Other)
        }
        [Token::Op(op)] if op == "..." => Some(Literal::Other),
        strings
            if !strings.is_empty()
                && strings
                    .iter()
                    .all(|token| matches!(token, Token::Str { .. })) =>
        {
            let formatted = strings
                .iter()
                .any(|token| matches!(token, Token::Str { formatted: true }));
            (!formatted).then_some(Literal::Other)
        }
        _ => None,
    })
}

/// The value of a number token, or [`Literal::Other`] for floats and
/// imaginary numbers; malformed literals are Python's `SyntaxError`.
fn number(text: &str) -> Result<Literal> {
    let invalid = || syntax(&format!("invalid number literal {text:?}"));
    let lower = text.to_ascii_lowercase();
    let (radix, digits) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest)
    } else {
        if lower.ends_with('j') || lower.contains('.') || lower.contains('e') {
            return Ok(Literal::Other);
        }
        (10, lower.as_str())
    };
    let digits = digits
        .strip_prefix('_')
        .filter(|_| radix != 10)
        .unwrap_or(digits);
    let well_formed = !digits.is_empty()
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.chars().all(|c| c == '_' || c.is_digit(radix));
    let leading_zero =
        radix == 10 && digits.starts_with('0') && digits.chars().any(|c| c != '0' && c != '_');
    if !well_formed || leading_zero {
        return Err(invalid());
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    Ok(Literal::Int(u128::from_str_radix(&clean, radix).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contracts(source: &str) -> Vec<Literal> {
        declared_contracts(source.as_bytes()).unwrap()
    }

    // Expected values: what the seed's `ast` comprehension collects for the
    // same source on CPython 3.11.
    #[test]
    fn only_constant_module_level_assignments_count() {
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 3\n"),
            [Literal::Int(Some(3))]
        );
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 0x1_0  # c\n"),
            [Literal::Int(Some(16))]
        );
        assert_eq!(
            contracts("A = API_CONTRACT_VERSION = (4)\n"),
            [Literal::Int(Some(4))]
        );
        assert_eq!(
            contracts("(API_CONTRACT_VERSION) = 5\n"),
            [Literal::Int(Some(5))]
        );
        assert_eq!(
            contracts("x = 1; API_CONTRACT_VERSION = 6\n"),
            [Literal::Int(Some(6))]
        );
        assert_eq!(contracts("API_CONTRACT_VERSION = 3.0\n"), [Literal::Other]);
        assert_eq!(contracts("API_CONTRACT_VERSION = True\n"), [Literal::Other]);
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 'a' \"b\"\n"),
            [Literal::Other]
        );
        assert_eq!(contracts("API_CONTRACT_VERSION = 2j\n"), [Literal::Other]);
        assert_eq!(contracts("API_CONTRACT_VERSION = b'x'\n"), [Literal::Other]);
        assert_eq!(contracts("API_CONTRACT_VERSION = ...\n"), [Literal::Other]);
        assert_eq!(
            contracts("API_CONTRACT_VERSION = ((5))\n"),
            [Literal::Int(Some(5))]
        );
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 1_000\n"),
            [Literal::Int(Some(1000))]
        );
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 0b11\n"),
            [Literal::Int(Some(3))]
        );
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 0\n"),
            [Literal::Int(Some(0))]
        );
        assert_eq!(
            contracts("API_CONTRACT_VERSION = 3\nAPI_CONTRACT_VERSION = 4\n"),
            [Literal::Int(Some(3)), Literal::Int(Some(4))]
        );
        for ignored in [
            "API_CONTRACT_VERSION = -1\n",
            "API_CONTRACT_VERSION = f'{3}'\n",
            "API_CONTRACT_VERSION = int('3')\n",
            "API_CONTRACT_VERSION = 1 + 1\n",
            "API_CONTRACT_VERSION = (3,)\n",
            "API_CONTRACT_VERSION: int = 3\n",
            "API_CONTRACT_VERSION += 3\n",
            "API_CONTRACT_VERSION, B = 3, 4\n",
            "if True:\n    API_CONTRACT_VERSION = 3\n",
            "if True: API_CONTRACT_VERSION = 3\n",
            "def f(): API_CONTRACT_VERSION = 3\n",
            "class C:\n    API_CONTRACT_VERSION = 3\n",
            "x = '''\nAPI_CONTRACT_VERSION = 3\n'''\n",
            "# API_CONTRACT_VERSION = 3\n",
            "x = (1,\nAPI_CONTRACT_VERSION == 3)\n",
            "API_CONTRACT_VERSION == 3\n",
            "[API_CONTRACT_VERSION] = [3]\n",
            "API_CONTRACT_VERSION = ()\n",
        ] {
            assert_eq!(contracts(ignored), [], "{ignored:?}");
        }
    }

    #[test]
    fn continuation_and_soft_keywords() {
        assert_eq!(
            contracts("API_CONTRACT_VERSION = \\\n  7\n"),
            [Literal::Int(Some(7))]
        );
        assert_eq!(
            contracts("match = 1\nAPI_CONTRACT_VERSION = 8\n"),
            [Literal::Int(Some(8))]
        );
        assert_eq!(
            contracts("match x:\n    case 1:\n        API_CONTRACT_VERSION = 9\nAPI_CONTRACT_VERSION = 10\n"),
            [Literal::Int(Some(10))]
        );
        assert_eq!(
            contracts("\u{feff}API_CONTRACT_VERSION = 2\r\n"),
            [Literal::Int(Some(2))]
        );
    }

    #[test]
    fn tokenizer_errors_are_refused() {
        for bad in [
            "x = 'open\n",
            "x = (1,\n",
            "x = '''\n",
            "x = 1 \\ y\n",
            "API_CONTRACT_VERSION = 007\n",
        ] {
            assert!(declared_contracts(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(declared_contracts(b"\xff").is_err());
    }
}

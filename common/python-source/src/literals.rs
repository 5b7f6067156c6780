//! String literals as CPython 3.11's parser checks them when it builds the
//! constant (`_PyPegen_concatenate_strings`): prefixes, UTF-8 text,
//! escape sequences, bytes that must be ASCII, no bytes next to text, and
//! f-strings, whose replacement fields are parsed by a nested parser as
//! CPython 3.11 does (`fstring_find_expr`, `fstring_compile_expr`).
//!
//! Deliberate deviation: `\N{name}` escapes are checked for their form
//! only; a well-formed name that Unicode does not define is accepted here
//! and refused by Python ("unknown Unicode character name").

use super::parser::{Abort, Const, Kind, Node, Parser, Start};
use super::utf8;

/// The longest character name or alias of Unicode 14.0.0 (longer names
/// are certainly unknown).
const LONGEST_UNICODE_NAME: usize = 88;

/// `_PyPegen_concatenate_strings`: the constant adjacent literals make, or
/// the error the first bad literal raises.
pub(super) fn concatenate(p: &mut Parser<'_>, tokens: &[u32]) -> Result<Node, Abort> {
    let mut any_bytes = false;
    let mut any_fstring = false;
    for (index, &token) in tokens.iter().enumerate() {
        let text = p.text(token);
        let literal = split(text);
        if !literal.fstring {
            check_plain(p, text, &literal)?;
        }
        if index != 0 && any_bytes != literal.bytes {
            return Err(p.raise_syntax("cannot mix bytes and nonbytes literals"));
        }
        any_bytes = literal.bytes;
        if literal.fstring {
            any_fstring = true;
            let mut at = literal.body_start;
            concat_fstring(p, token, text, &mut at, literal.body_end, literal.raw, 0)?;
        }
    }
    Ok(if any_fstring {
        Node::Other(Kind::JoinedStr)
    } else if any_bytes {
        Node::Const(Const::Bytes)
    } else {
        Node::Const(Const::Str)
    })
}

struct Literal {
    bytes: bool,
    raw: bool,
    fstring: bool,
    body_start: usize,
    body_end: usize,
}

/// `_PyPegen_parsestr`'s reading of the prefix and quotes.
fn split(text: &[u8]) -> Literal {
    let mut literal = Literal {
        bytes: false,
        raw: false,
        fstring: false,
        body_start: 0,
        body_end: 0,
    };
    let mut at = 0;
    while !literal.bytes || !literal.raw {
        match text[at] {
            b'b' | b'B' => literal.bytes = true,
            b'u' | b'U' => {}
            b'r' | b'R' => literal.raw = true,
            b'f' | b'F' => literal.fstring = true,
            _ => break,
        }
        at += 1;
    }
    let quote = text[at];
    let mut start = at + 1;
    let mut end = text.len() - 1;
    // Only a triple-quoted literal has two more quotes after the first.
    if end - start >= 4 && text[start] == quote && text[start + 1] == quote {
        start += 2;
        end -= 2;
    }
    literal.body_start = start;
    literal.body_end = end;
    literal
}

/// A literal that is not an f-string: bytes must be ASCII, text UTF-8, and
/// escapes well formed.
fn check_plain(p: &mut Parser<'_>, text: &[u8], literal: &Literal) -> Result<(), Abort> {
    let body = &text[literal.body_start..literal.body_end];
    let raw = literal.raw || !text[literal.body_start..].contains(&b'\\');
    if literal.bytes {
        if text[literal.body_start..].iter().any(|&byte| byte >= 0x80) {
            return Err(p.raise_syntax("bytes can only contain ASCII literal characters"));
        }
        if !raw {
            if let Err(message) = bytes_escapes(body) {
                return Err(p.raise_syntax(format!("(value error) {message}")));
            }
        }
        return Ok(());
    }
    let checked = if raw {
        utf8::decode(body).map(|_| ())
    } else {
        unicode_escapes(body)
    };
    checked.map_err(|message| p.raise_syntax(format!("(unicode error) {message}")))
}

/// `_PyBytes_DecodeEscape`: the `\x` escapes need two hex digits.
fn bytes_escapes(body: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at < body.len() {
        if body[at] != b'\\' {
            at += 1;
            continue;
        }
        at += 1;
        if at >= body.len() {
            return Err("Trailing \\ in string".into());
        }
        let c = body[at];
        at += 1;
        match c {
            b'0'..=b'7' => {
                for _ in 0..2 {
                    if at < body.len() && (b'0'..=b'7').contains(&body[at]) {
                        at += 1;
                    }
                }
            }
            b'x' => {
                if at + 1 < body.len()
                    && body[at].is_ascii_hexdigit()
                    && body[at + 1].is_ascii_hexdigit()
                {
                    at += 2;
                } else {
                    return Err(format!("invalid \\x escape at position {}", at - 2));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `decode_unicode_with_escapes`: non-ASCII runs are decoded as UTF-8 on
/// their own and replaced by `\UXXXXXXXX`, then the buffer is decoded with
/// `unicode_escape`; errors carry positions in that buffer.
fn unicode_escapes(body: &[u8]) -> Result<(), String> {
    let mut buffer = Vec::with_capacity(body.len() * 2);
    let mut at = 0;
    while at < body.len() {
        if body[at] == b'\\' {
            buffer.push(b'\\');
            at += 1;
            if at >= body.len() || body[at] & 0x80 != 0 {
                buffer.extend_from_slice(b"u005c");
                if at >= body.len() {
                    break;
                }
            }
        }
        if body[at] & 0x80 != 0 {
            let run_end = body[at..]
                .iter()
                .position(|&byte| byte & 0x80 == 0)
                .map_or(body.len(), |offset| at + offset);
            let text = utf8::decode(&body[at..run_end])?;
            for c in text.chars() {
                buffer.extend_from_slice(format!("\\U{:08x}", c as u32).as_bytes());
            }
            at = run_end;
        } else {
            buffer.push(body[at]);
            at += 1;
        }
    }
    unicode_escape_check(&buffer)
}

/// `_PyUnicode_DecodeUnicodeEscapeInternal`'s errors.
fn unicode_escape_check(buffer: &[u8]) -> Result<(), String> {
    let error = |start: usize, end: usize, reason: &str| {
        Err(utf8::decode_error_text(
            "unicodeescape",
            buffer,
            start,
            end,
            reason,
        ))
    };
    let length = buffer.len();
    let mut at = 0;
    while at < length {
        let c = buffer[at];
        at += 1;
        if c != b'\\' {
            continue;
        }
        let start = at - 1;
        if at >= length {
            return error(start, at, "\\ at end of string");
        }
        let c = buffer[at];
        at += 1;
        match c {
            b'0'..=b'7' => {
                for _ in 0..2 {
                    if at < length && (b'0'..=b'7').contains(&buffer[at]) {
                        at += 1;
                    }
                }
            }
            b'x' | b'u' | b'U' => {
                let (count, message) = match c {
                    b'x' => (2, "truncated \\xXX escape"),
                    b'u' => (4, "truncated \\uXXXX escape"),
                    _ => (8, "truncated \\UXXXXXXXX escape"),
                };
                let mut value: u64 = 0;
                for _ in 0..count {
                    if at >= length {
                        return error(start, at, message);
                    }
                    let Some(digit) = (buffer[at] as char).to_digit(16) else {
                        return error(start, at, message);
                    };
                    value = value * 16 + digit as u64;
                    at += 1;
                }
                if value > 0x10FFFF {
                    return error(start, at, "illegal Unicode character");
                }
            }
            b'N' => {
                const MALFORMED: &str = "malformed \\N character escape";
                if at >= length || buffer[at] != b'{' {
                    return error(start, at, MALFORMED);
                }
                at += 1;
                let name_start = at;
                while at < length && buffer[at] != b'}' {
                    at += 1;
                }
                if at >= length || at == name_start {
                    return error(start, at, MALFORMED);
                }
                let name = &buffer[name_start..at];
                at += 1;
                let plausible = name.len() <= LONGEST_UNICODE_NAME
                    && name
                        .iter()
                        .all(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b' ' | b'-'));
                if !plausible {
                    return error(start, at, "unknown Unicode character name");
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `_PyPegen_FstringParser_ConcatFstring`: literal parts and replacement
/// fields from `*at` to `end` (token text positions); at `recurse_lvl` 1
/// this is a format spec and stops at its `}`.
fn concat_fstring(
    p: &mut Parser<'_>,
    token: u32,
    text: &[u8],
    at: &mut usize,
    end: usize,
    raw: bool,
    recurse_lvl: u32,
) -> Result<(), Abort> {
    loop {
        let doubled = find_literal(p, text, at, end, raw, recurse_lvl)?;
        if doubled {
            continue;
        }
        if *at >= end || text[*at] == b'}' {
            break;
        }
        find_expr(p, token, text, at, end, raw, recurse_lvl)?;
    }
    if recurse_lvl == 0 && *at + 1 < end {
        return Err(p.raise_syntax("f-string: unexpected end of string"));
    }
    if recurse_lvl != 0 && (*at >= end || text[*at] != b'}') {
        return Err(p.raise_syntax("f-string: expecting '}'"));
    }
    Ok(())
}

/// `fstring_find_literal`: the literal text up to a `{` or `}`; true when
/// it ended at a doubled brace (scanning goes on after it).
fn find_literal(
    p: &mut Parser<'_>,
    text: &[u8],
    at: &mut usize,
    end: usize,
    raw: bool,
    recurse_lvl: u32,
) -> Result<bool, Abort> {
    let literal_start = *at;
    let mut s = *at;
    let mut doubled = false;
    let mut stop = None;
    while s < end {
        let mut ch = text[s];
        s += 1;
        if !raw && ch == b'\\' && s < end {
            ch = text[s];
            s += 1;
            if ch == b'N' {
                // "\N{name}": its braces do not start a field.
                if s < end {
                    let brace = text[s] == b'{';
                    s += 1;
                    if brace {
                        while s < end {
                            let c = text[s];
                            s += 1;
                            if c == b'}' {
                                break;
                            }
                        }
                    }
                }
                continue;
            }
        }
        if ch == b'{' || ch == b'}' {
            if recurse_lvl == 0 {
                if s < end && text[s] == ch {
                    stop = Some(s);
                    *at = s + 1;
                    doubled = true;
                    break;
                }
                if ch == b'}' {
                    *at = s - 1;
                    return Err(p.raise_syntax("f-string: single '}' is not allowed"));
                }
            }
            s -= 1;
            break;
        }
    }
    let literal_end = stop.unwrap_or(s);
    if !doubled {
        *at = s;
    }
    if literal_start != literal_end {
        let literal = &text[literal_start..literal_end];
        let checked = if raw {
            utf8::decode(literal).map(|_| ())
        } else {
            unicode_escapes(literal)
        };
        if let Err(message) = checked {
            return Err(p.raise_syntax(format!("(unicode error) {message}")));
        }
    }
    Ok(doubled)
}

/// `fstring_find_expr`: one replacement field from its `{`.
fn find_expr(
    p: &mut Parser<'_>,
    token: u32,
    text: &[u8],
    at: &mut usize,
    end: usize,
    raw: bool,
    recurse_lvl: u32,
) -> Result<(), Abort> {
    const EXPECTING: &str = "f-string: expecting '}'";
    if recurse_lvl >= 2 {
        return Err(p.raise_syntax("f-string: expressions nested too deeply"));
    }
    let brace = *at;
    *at += 1;
    let expr_start = *at;
    let mut quote = 0u8;
    let mut triple = false;
    let mut stack: Vec<u8> = Vec::new();
    while *at < end {
        let ch = text[*at];
        if ch == b'\\' {
            return Err(p.raise_syntax("f-string expression part cannot include a backslash"));
        }
        if quote != 0 {
            if ch == quote {
                if triple {
                    if *at + 2 < end && text[*at + 1] == ch && text[*at + 2] == ch {
                        *at += 3;
                        quote = 0;
                        triple = false;
                        continue;
                    }
                } else {
                    quote = 0;
                }
            }
            *at += 1;
            continue;
        }
        match ch {
            b'\'' | b'"' => {
                if *at + 2 < end && text[*at + 1] == ch && text[*at + 2] == ch {
                    triple = true;
                    *at += 2;
                } else {
                    triple = false;
                }
                quote = ch;
            }
            b'[' | b'{' | b'(' => {
                if stack.len() >= 200 {
                    return Err(p.raise_syntax("f-string: too many nested parenthesis"));
                }
                stack.push(ch);
            }
            b'#' => {
                return Err(p.raise_syntax("f-string expression part cannot include '#'"));
            }
            b'!' | b':' | b'}' | b'=' | b'>' | b'<' if stack.is_empty() => {
                if *at + 1 < end {
                    let next = text[*at + 1];
                    if next == b'=' && matches!(ch, b'!' | b'=' | b'<' | b'>') {
                        *at += 2;
                        continue;
                    }
                }
                if ch == b'>' || ch == b'<' {
                    *at += 1;
                    continue;
                }
                break;
            }
            b']' | b'}' | b')' => {
                let Some(opening) = stack.pop() else {
                    return Err(p.raise_syntax(format!("f-string: unmatched '{}'", ch as char)));
                };
                let matching = matches!((opening, ch), (b'(', b')') | (b'[', b']') | (b'{', b'}'));
                if !matching {
                    return Err(p.raise_syntax(format!(
                        "f-string: closing parenthesis '{}' does not match opening parenthesis '{}'",
                        ch as char, opening as char
                    )));
                }
            }
            _ => {}
        }
        *at += 1;
    }
    let expr_end = *at;
    if quote != 0 {
        return Err(p.raise_syntax("f-string: unterminated string"));
    }
    if let Some(&opening) = stack.last() {
        return Err(p.raise_syntax(format!("f-string: unmatched '{}'", opening as char)));
    }
    if *at >= end {
        return Err(p.raise_syntax(EXPECTING));
    }
    compile_expr(p, token, text, brace, expr_start, expr_end)?;
    if text[*at] == b'=' {
        *at += 1;
        while matches!(
            text.get(*at),
            Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
        ) {
            *at += 1;
        }
        if *at >= end {
            return Err(p.raise_syntax(EXPECTING));
        }
    }
    if text[*at] == b'!' {
        *at += 1;
        if *at >= end {
            return Err(p.raise_syntax(EXPECTING));
        }
        let conversion = text[*at];
        *at += 1;
        if !matches!(conversion, b's' | b'r' | b'a') {
            return Err(p.raise_syntax(
                "f-string: invalid conversion character: expected 's', 'r', or 'a'",
            ));
        }
    }
    if *at < end && text[*at] == b':' {
        *at += 1;
        if *at >= end {
            return Err(p.raise_syntax(EXPECTING));
        }
        concat_fstring(p, token, text, at, end, raw, recurse_lvl + 1)?;
    }
    if *at >= end || text[*at] != b'}' {
        return Err(p.raise_syntax(EXPECTING));
    }
    *at += 1;
    Ok(())
}

/// `fstring_compile_expr`: parses `(expression)` with a parser of its own
/// whose errors are prefixed `f-string: `.
fn compile_expr(
    p: &mut Parser<'_>,
    token: u32,
    text: &[u8],
    brace: usize,
    start: usize,
    end: usize,
) -> Result<(), Abort> {
    let expression = &text[start..end];
    if expression
        .iter()
        .all(|&byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\x0c'))
    {
        if let Some(&next @ (b'!' | b':' | b'=')) = text.get(end) {
            return Err(p.raise_syntax(format!(
                "f-string: expression required before '{}'",
                next as char
            )));
        }
        return Err(p.raise_syntax("f-string: empty expression not allowed"));
    }
    let mut source = Vec::with_capacity(expression.len() + 3);
    source.push(b'(');
    source.extend_from_slice(expression);
    source.extend_from_slice(b")\n");
    let lines_before = text[..brace].iter().filter(|&&byte| byte == b'\n').count() as u32;
    let first_line = p.tokens[token as usize].lineno + lines_before;
    let mut nested = Parser::new(&source, Start::FString, first_line, p.warnings.clone());
    // The field's expression is nested in the literal's AST, whose depth
    // CPython limits.
    nested.depth = p.depth;
    match nested.run() {
        Ok(_) => Ok(()),
        Err(error) => Err(p.raise_exception(error)),
    }
}

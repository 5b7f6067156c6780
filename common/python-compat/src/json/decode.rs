//! `json.loads` on bytes: CPython 3.11's C scanner (`_json.c`), ported step for
//! step so that the same documents are accepted and refusals carry the same
//! message and position.

use super::text::decode_document;
use super::value::{BigInt, Json, JsonObject, WideStr};
use crate::exception::{ErrorClass, Exception, Result};

/// Deepest array/object nesting accepted. CPython 3.11 raises `RecursionError`
/// at 996 levels when `json.loads` is called from a shallow stack; the exact
/// depth depends on the caller's stack there, so this is the value observed
/// from a top-level call.
const MAX_DEPTH: usize = 995;

/// Python 3.11's `sys.get_int_max_str_digits()` default: longer integers raise
/// `ValueError` during parsing.
const MAX_INT_DIGITS: usize = 4300;

/// Parses a JSON document like Python's `json.loads(data)`: UTF-8 (with or
/// without a byte-order mark), UTF-16 or UTF-32 input, `NaN`/`Infinity`
/// accepted, and the last of duplicate keys wins in the first key's position.
///
/// Errors are Python's: `json.JSONDecodeError`, `UnicodeDecodeError`,
/// `RecursionError` for nesting past Python's limit, and `ValueError` for an
/// integer literal longer than Python's digit limit. Everything Python
/// returns is held: strings with lone surrogates ([`Json::WideStr`]) and
/// integers outside `i128` ([`Json::BigInt`]).
pub fn parse_json(data: &[u8]) -> Result<Json> {
    parse(data, None)
}

/// Parses like [`parse_json`], but a duplicate key in any object raises
/// `ValueError(duplicate_message)`, as `json.loads` with an
/// `object_pairs_hook` that refuses repeated keys does (update_handoff's
/// handoff file). The check runs when each object closes, as the hook does.
pub fn parse_json_unique(data: &[u8], duplicate_message: &str) -> Result<Json> {
    parse(data, Some(duplicate_message))
}

/// `json.loads(text)` of text Python already decoded (`Path.read_text()`):
/// no encoding is detected, and a leading U+FEFF is refused as `json`
/// refuses it in a `str` ("Unexpected UTF-8 BOM"), where bytes would skip it.
pub fn parse_json_str(text: &str) -> Result<Json> {
    let points: Vec<u32> = text.chars().map(u32::from).collect();
    if points.first() == Some(&0xfeff) {
        let scanner = Scanner {
            text: &points,
            duplicate_message: None,
        };
        return Err(scanner.error("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0));
    }
    scan_document(&points, None)
}

fn parse(data: &[u8], duplicate_message: Option<&str>) -> Result<Json> {
    let text = decode_document(data)?;
    scan_document(&text, duplicate_message)
}

fn scan_document(text: &[u32], duplicate_message: Option<&str>) -> Result<Json> {
    let mut scanner = Scanner {
        text,
        duplicate_message,
    };
    // JSONDecoder.decode: skip whitespace, one value, skip whitespace, end.
    let start = scanner.skip_whitespace(0);
    let (value, end) = scanner.scan_value(start)?;
    let end = scanner.skip_whitespace(end);
    if end != text.len() {
        return Err(scanner.error("Extra data", end));
    }
    Ok(value)
}

fn is_high_surrogate(point: u32) -> bool {
    (0xd800..0xdc00).contains(&point)
}

fn is_low_surrogate(point: u32) -> bool {
    (0xdc00..0xe000).contains(&point)
}

/// A container whose closing bracket has not been read yet.
// At most one per nesting level is alive, so the object variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
enum Container {
    Array(Vec<Json>),
    Object {
        members: JsonObject,
        /// The name of the member whose value is being read (a `Str`, or a
        /// `WideStr` with a lone surrogate).
        key: Json,
        duplicate: bool,
    },
}

/// Refuses to open another container where Python's recursion limit would
/// stop `json.loads`.
fn check_depth(open: &[Container], kind: &str) -> Result<()> {
    if open.len() < MAX_DEPTH {
        return Ok(());
    }
    Err(Exception::new(
        ErrorClass::Recursion,
        format!(
            "maximum recursion depth exceeded while decoding a JSON {kind} from a unicode string"
        ),
    ))
}

struct Scanner<'a> {
    text: &'a [u32],
    duplicate_message: Option<&'a str>,
}

impl Scanner<'_> {
    /// `JSONDecodeError(message, doc, position)` as `str()` renders it.
    fn error(&self, message: &str, position: usize) -> Exception {
        let newline = u32::from('\n');
        let before = &self.text[..position];
        let line = before.iter().filter(|&&point| point == newline).count() + 1;
        let column = match before.iter().rposition(|&point| point == newline) {
            Some(newline) => position - newline,
            None => position + 1,
        };
        Exception::new(
            ErrorClass::JsonDecode,
            format!("{message}: line {line} column {column} (char {position})"),
        )
    }

    /// The character at `index`, `None` at the end. A lone surrogate reads
    /// as U+FFFD, which no JSON syntax rule matches either.
    fn at(&self, index: usize) -> Option<char> {
        let point = *self.text.get(index)?;
        Some(char::from_u32(point).unwrap_or(char::REPLACEMENT_CHARACTER))
    }

    fn skip_whitespace(&self, mut index: usize) -> usize {
        while matches!(self.at(index), Some(' ' | '\t' | '\n' | '\r')) {
            index += 1;
        }
        index
    }

    fn has_literal(&self, index: usize, literal: &str) -> bool {
        let Some(found) = self.text.get(index..index + literal.len()) else {
            return false;
        };
        found.iter().copied().eq(literal.chars().map(u32::from))
    }

    /// `scan_once`: one value starting at `index`; returns it and the index
    /// just after it.
    ///
    /// Python recurses into `_parse_object_unicode`/`_parse_array_unicode`;
    /// this keeps the open containers on a heap stack instead, so that deep
    /// input cannot overflow a thread's stack, and visits the bytes and
    /// raises the errors in the same order.
    fn scan_value(&mut self, index: usize) -> Result<(Json, usize)> {
        let mut open: Vec<Container> = Vec::new();
        let mut index = index;
        'value: loop {
            // One value at `index`, or the first member of a new container.
            let (mut value, mut end) = match self.at(index) {
                None => return Err(self.error("Expecting value", index)),
                Some('"') => self.scan_string(index + 1)?,
                Some('{') => {
                    check_depth(&open, "object")?;
                    let first = self.skip_whitespace(index + 1);
                    if self.at(first) == Some('}') {
                        (Json::Object(JsonObject::new()), first + 1)
                    } else {
                        let (key, value_start) = self.scan_key(first)?;
                        open.push(Container::Object {
                            members: JsonObject::new(),
                            key,
                            duplicate: false,
                        });
                        index = value_start;
                        continue 'value;
                    }
                }
                Some('[') => {
                    check_depth(&open, "array")?;
                    let first = self.skip_whitespace(index + 1);
                    if self.at(first) == Some(']') {
                        (Json::Array(Vec::new()), first + 1)
                    } else {
                        open.push(Container::Array(Vec::new()));
                        index = first;
                        continue 'value;
                    }
                }
                Some(_) => self.scan_scalar(index)?,
            };
            // Hand the value to its container; close every container that
            // ends right after it.
            loop {
                let Some(container) = open.last_mut() else {
                    return Ok((value, end));
                };
                let after = self.skip_whitespace(end);
                let closing = match container {
                    Container::Array(items) => {
                        items.push(value);
                        ']'
                    }
                    Container::Object {
                        members,
                        key,
                        duplicate,
                    } => {
                        let replaced = match std::mem::replace(key, Json::Null) {
                            Json::WideStr(wide) => members.insert_wide(wide, value),
                            Json::Str(text) => members.insert(text, value),
                            _ => unreachable!("a member name is a string"),
                        };
                        *duplicate |= replaced.is_some();
                        '}'
                    }
                };
                if self.at(after) == Some(closing) {
                    let container = open.pop().expect("a container is open");
                    value = self.close(container)?;
                    end = after + 1;
                    continue;
                }
                if self.at(after) != Some(',') {
                    return Err(self.error("Expecting ',' delimiter", after));
                }
                index = self.skip_whitespace(after + 1);
                if let Some(Container::Object { key, .. }) = open.last_mut() {
                    let (next_key, value_start) = self.scan_key(index)?;
                    *key = next_key;
                    index = value_start;
                }
                continue 'value;
            }
        }
    }

    /// A member name and the `:` after it; returns the name and where its
    /// value starts.
    fn scan_key(&mut self, index: usize) -> Result<(Json, usize)> {
        if self.at(index) != Some('"') {
            return Err(self.error("Expecting property name enclosed in double quotes", index));
        }
        let (key, after_key) = self.scan_string(index + 1)?;
        let colon = self.skip_whitespace(after_key);
        if self.at(colon) != Some(':') {
            return Err(self.error("Expecting ':' delimiter", colon));
        }
        Ok((key, self.skip_whitespace(colon + 1)))
    }

    /// The finished container as a value; this is where the unique parser's
    /// `object_pairs_hook` sees the object and refuses a repeated key.
    fn close(&self, container: Container) -> Result<Json> {
        match container {
            Container::Array(items) => Ok(Json::Array(items)),
            Container::Object {
                members, duplicate, ..
            } => match (duplicate, self.duplicate_message) {
                (true, Some(message)) => Err(Exception::value(message)),
                _ => Ok(Json::Object(members)),
            },
        }
    }

    /// The named constants, else a number.
    fn scan_scalar(&mut self, index: usize) -> Result<(Json, usize)> {
        let constants = [
            ("null", Json::Null),
            ("true", Json::Bool(true)),
            ("false", Json::Bool(false)),
            ("NaN", Json::Float(f64::NAN)),
            ("Infinity", Json::Float(f64::INFINITY)),
            ("-Infinity", Json::Float(f64::NEG_INFINITY)),
        ];
        for (name, value) in constants {
            if self.has_literal(index, name) {
                return Ok((value, index + name.len()));
            }
        }
        self.scan_number(index)
    }

    /// `_match_number_unicode`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`
    /// where a fraction or exponent without digits is left unread.
    fn scan_number(&mut self, start: usize) -> Result<(Json, usize)> {
        let digit_at = |index: usize| self.at(index).is_some_and(|c| c.is_ascii_digit());
        let mut index = start;
        if self.at(index) == Some('-') {
            index += 1;
        }
        match self.at(index) {
            Some('0') => index += 1,
            Some('1'..='9') => {
                while digit_at(index) {
                    index += 1;
                }
            }
            _ => return Err(self.error("Expecting value", start)),
        }
        let mut is_float = false;
        if self.at(index) == Some('.') && digit_at(index + 1) {
            is_float = true;
            index += 2;
            while digit_at(index) {
                index += 1;
            }
        }
        if matches!(self.at(index), Some('e' | 'E')) {
            let mut end = index + 1;
            if matches!(self.at(end), Some('-' | '+')) {
                end += 1;
            }
            if digit_at(end) {
                while digit_at(end) {
                    end += 1;
                }
                is_float = true;
                index = end;
            }
        }
        // Every code point in the range is ASCII by construction.
        let literal: String = (start..index).filter_map(|at| self.at(at)).collect();
        if is_float {
            // Rust's parser rounds correctly and overflows to infinity, as
            // Python's float() does.
            let number = literal
                .parse::<f64>()
                .map_err(|_| self.error("Expecting value", start))?;
            return Ok((Json::Float(number), index));
        }
        if let Ok(number) = literal.parse::<i128>() {
            return Ok((Json::Int(number), index));
        }
        let digits = literal.trim_start_matches('-').len();
        if digits > MAX_INT_DIGITS {
            return Err(Exception::value(format!(
                "Exceeds the limit ({MAX_INT_DIGITS} digits) for integer string conversion: \
                 value has {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
            )));
        }
        let number = BigInt::from_literal(&literal).expect("a JSON integer outside i128");
        Ok((Json::BigInt(number), index))
    }

    /// `scanstring_unicode` with `strict=True`; `start` is just after the
    /// opening quote. Returns the text and the index after the closing quote.
    fn scan_string(&mut self, start: usize) -> Result<(Json, usize)> {
        let begin = start - 1;
        let length = self.text.len();
        let mut text: Vec<u32> = Vec::new();
        let mut end = start;
        loop {
            // The run up to the next quote or backslash.
            let mut next = end;
            while next < length && !matches!(self.at(next), Some('"' | '\\')) {
                if self.text[next] <= 0x1f {
                    return Err(self.error("Invalid control character at", next));
                }
                next += 1;
            }
            if next == length {
                return Err(self.error("Unterminated string starting at", begin));
            }
            text.extend_from_slice(&self.text[end..next]);
            let terminator = self.at(next);
            next += 1;
            if terminator == Some('"') {
                end = next;
                break;
            }
            let Some(escape) = self.at(next) else {
                return Err(self.error("Unterminated string starting at", begin));
            };
            if escape != 'u' {
                end = next + 1;
                let decoded = match escape {
                    '"' | '\\' | '/' => escape,
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    _ => return Err(self.error("Invalid \\escape", end - 2)),
                };
                text.push(u32::from(decoded));
                continue;
            }
            next += 1;
            end = next + 4;
            // Python also demands room for the closing quote here.
            if end >= length {
                return Err(self.error("Invalid \\uXXXX escape", next - 1));
            }
            let mut point = self.hex4(next, end - 5)?;
            if is_high_surrogate(point)
                && end + 6 < length
                && self.at(end) == Some('\\')
                && self.at(end + 1) == Some('u')
            {
                let low = self.hex4(end + 2, end + 1)?;
                if is_low_surrogate(low) {
                    point = 0x10000 + ((point - 0xd800) << 10) + (low - 0xdc00);
                    end += 6;
                }
            }
            text.push(point);
        }
        // A lone surrogate is the only code point a Rust string cannot hold.
        let value = if text
            .iter()
            .any(|&point| is_high_surrogate(point) || is_low_surrogate(point))
        {
            Json::WideStr(WideStr::from_code_points(text).expect("a lone surrogate"))
        } else {
            Json::Str(
                text.iter()
                    .filter_map(|&point| char::from_u32(point))
                    .collect(),
            )
        };
        Ok((value, end))
    }

    /// Four hex digits at `index`; a bad digit is reported at `error_position`
    /// (the escape's `u`), as Python does.
    fn hex4(&self, index: usize, error_position: usize) -> Result<u32> {
        let mut value = 0;
        for at in index..index + 4 {
            let digit = self
                .at(at)
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.error("Invalid \\uXXXX escape", error_position))?;
            value = (value << 4) | digit;
        }
        Ok(value)
    }
}

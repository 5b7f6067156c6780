//! CPython 3.11's tokenizer (`tok_get` in string mode), byte for byte:
//! indentation with tab and space columns checked against each other,
//! INDENT/DEDENT, bracket nesting (ignoring newlines and indentation inside
//! brackets), line continuations, numbers with their error texts and
//! warnings, string extents, identifiers (any byte from 0x80 on is an
//! identifier character, checked as UTF-8 and XID afterwards) and operators.
//!
//! Lines and errors are what CPython reports: a token's line is the line
//! being read when it ends (a string's is the line it starts on), and the
//! errors the tokenizer raises itself ([`TokError::Syntax`],
//! [`TokError::Decode`]) are told apart from those it only signals
//! ([`TokError::Eof`] and the indentation errors), because the parser treats
//! the two kinds differently.

use super::{unicode, utf8, Warnings};

const TABSIZE: u32 = 8;
const MAXINDENT: usize = 100;
const MAXLEVEL: usize = 200;

/// Token types as the parser sees them before keywords are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RawKind {
    Name,
    Number,
    String,
    Newline,
    Indent,
    Dedent,
    EndMarker,
    Op,
}

/// One token: kind, byte range, line and the bracket level after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawToken {
    pub kind: RawKind,
    pub start: usize,
    pub end: usize,
    pub lineno: u32,
    pub level: usize,
}

/// A tokenizer failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TokError {
    /// A `SyntaxError` the tokenizer raises itself (`syntaxerror()`).
    Syntax(String),
    /// An identifier that is not UTF-8: `str(UnicodeDecodeError)`.
    Decode(String),
    /// End of input inside brackets or after a line continuation (E_EOF).
    Eof,
    /// Dedent to a column no enclosing block has (E_DEDENT).
    Dedent,
    /// Tabs and spaces that disagree (E_TABSPACE).
    TabSpace,
    /// More than 100 indentation levels (E_TOODEEP).
    TooDeep,
    /// Something other than a newline after `\` (E_LINECONT).
    LineCont,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    Ok,
    Eof,
    Failed,
}

enum NumberState {
    Fraction,
    Exponent(u8),
    Imaginary,
}

pub(super) struct Tokenizer<'a> {
    buf: &'a [u8],
    cur: usize,
    inp: usize,
    lineno: u32,
    done: Done,
    atbol: bool,
    pendin: i32,
    indstack: Vec<u32>,
    altindstack: Vec<u32>,
    /// Open brackets: the character and the line it is on.
    parens: Vec<(u8, u32)>,
    start: usize,
    /// The line the last string token started on.
    string_line: u32,
    warnings: Warnings,
}

fn is_potential_identifier_start(c: Option<u8>) -> bool {
    matches!(c, Some(b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xFF))
}

fn is_potential_identifier_char(c: Option<u8>) -> bool {
    matches!(
        c,
        Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | 0x80..=0xFF)
    )
}

fn is_digit(c: Option<u8>) -> bool {
    matches!(c, Some(b'0'..=b'9'))
}

fn two_char_op(c1: u8, c2: Option<u8>) -> bool {
    let Some(c2) = c2 else { return false };
    matches!(
        (c1, c2),
        (b'!', b'=')
            | (b'%', b'=')
            | (b'&', b'=')
            | (b'*', b'*' | b'=')
            | (b'+', b'=')
            | (b'-', b'=' | b'>')
            | (b'/', b'/' | b'=')
            | (b':', b'=')
            | (b'<', b'<' | b'=' | b'>')
            | (b'=', b'=')
            | (b'>', b'=' | b'>')
            | (b'@', b'=')
            | (b'^', b'=')
            | (b'|', b'=')
    )
}

fn three_char_op(c1: u8, c2: u8, c3: Option<u8>) -> bool {
    matches!(
        (c1, c2, c3),
        (b'*', b'*', Some(b'='))
            | (b'.', b'.', Some(b'.'))
            | (b'/', b'/', Some(b'='))
            | (b'<', b'<', Some(b'='))
            | (b'>', b'>', Some(b'='))
    )
}

impl<'a> Tokenizer<'a> {
    /// A tokenizer over `buf` (which ends with `\n`); the first line is
    /// numbered `first_line`.
    pub(super) fn new(buf: &'a [u8], first_line: u32, warnings: Warnings) -> Self {
        Tokenizer {
            buf,
            cur: 0,
            inp: 0,
            lineno: first_line - 1,
            done: Done::Ok,
            atbol: true,
            pendin: 0,
            indstack: vec![0],
            altindstack: vec![0],
            parens: Vec::new(),
            start: 0,
            string_line: 0,
            warnings,
        }
    }

    /// `tok->done` is `E_OK`: no error, end of input not reached.
    pub(super) fn is_ok(&self) -> bool {
        self.done == Done::Ok
    }

    /// The innermost open bracket and its line.
    pub(super) fn innermost_paren(&self) -> Option<(u8, u32)> {
        self.parens.last().copied()
    }

    pub(super) fn text(&self, start: usize, end: usize) -> &'a [u8] {
        &self.buf[start..end]
    }

    fn nextc(&mut self) -> Option<u8> {
        loop {
            if self.cur != self.inp {
                let c = self.buf[self.cur];
                self.cur += 1;
                return Some(c);
            }
            if self.done != Done::Ok {
                return None;
            }
            if self.inp == self.buf.len() {
                self.done = Done::Eof;
                return None;
            }
            let rest = &self.buf[self.inp..];
            self.inp += rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |at| at + 1);
            self.lineno += 1;
        }
    }

    fn backup(&mut self, c: Option<u8>) {
        if c.is_some() {
            self.cur -= 1;
        }
    }

    fn fail(&mut self, error: TokError) -> TokError {
        self.done = Done::Failed;
        error
    }

    fn syntax(&mut self, message: String) -> TokError {
        self.fail(TokError::Syntax(message))
    }

    fn warn(&mut self, message: String) {
        self.warnings.borrow_mut().push(format!(
            "<unknown>:{}: SyntaxWarning: {message}",
            self.lineno
        ));
    }

    /// The next token, or the error that ends tokenizing.
    pub(super) fn next_token(&mut self) -> Result<RawToken, TokError> {
        let (kind, start, end) = self.get()?;
        let lineno = match kind {
            RawKind::String => self.string_line,
            _ => self.lineno,
        };
        Ok(RawToken {
            kind,
            start,
            end,
            lineno,
            level: self.parens.len(),
        })
    }

    /// `tok_continuation_line`: a `\` must end its line, and input must
    /// go on after it.
    fn continuation_line(&mut self) -> Result<Option<u8>, TokError> {
        let c = self.nextc();
        if c != Some(b'\n') {
            return Err(self.fail(TokError::LineCont));
        }
        let c = self.nextc();
        if c.is_none() {
            self.done = Done::Failed;
            self.cur = self.inp;
            return Err(TokError::Eof);
        }
        self.backup(c);
        Ok(c)
    }

    fn get(&mut self) -> Result<(RawKind, usize, usize), TokError> {
        'nextline: loop {
            let mut blankline = false;
            if self.atbol {
                self.indentation(&mut blankline)?;
            }
            self.start = self.cur;
            if self.pendin != 0 {
                let kind = if self.pendin < 0 {
                    self.pendin += 1;
                    RawKind::Dedent
                } else {
                    self.pendin -= 1;
                    RawKind::Indent
                };
                return Ok((kind, self.cur, self.cur));
            }
            'again: loop {
                let mut c = self.nextc();
                while matches!(c, Some(b' ' | b'\t' | b'\x0c')) {
                    c = self.nextc();
                }
                let start = if c.is_some() { self.cur - 1 } else { self.cur };
                self.start = start;
                if c == Some(b'#') {
                    while c.is_some() && c != Some(b'\n') {
                        c = self.nextc();
                    }
                }
                let Some(ch) = c else {
                    if !self.parens.is_empty() {
                        return Err(TokError::Eof);
                    }
                    return match self.done {
                        Done::Eof => Ok((RawKind::EndMarker, self.cur, self.cur)),
                        _ => Err(TokError::Eof),
                    };
                };
                if is_potential_identifier_start(c) {
                    return self.identifier(ch, start);
                }
                if ch == b'\n' {
                    self.atbol = true;
                    if blankline || !self.parens.is_empty() {
                        continue 'nextline;
                    }
                    return Ok((RawKind::Newline, start, self.cur - 1));
                }
                if ch == b'.' {
                    let c2 = self.nextc();
                    if is_digit(c2) {
                        self.number_from(NumberState::Fraction, c2)?;
                        return Ok((RawKind::Number, start, self.cur));
                    } else if c2 == Some(b'.') {
                        let c3 = self.nextc();
                        if c3 == Some(b'.') {
                            return Ok((RawKind::Op, start, self.cur));
                        }
                        self.backup(c3);
                        self.backup(Some(b'.'));
                    } else {
                        self.backup(c2);
                    }
                    return Ok((RawKind::Op, start, self.cur));
                }
                if ch.is_ascii_digit() {
                    self.number(ch)?;
                    return Ok((RawKind::Number, start, self.cur));
                }
                if ch == b'\'' || ch == b'"' {
                    self.string(ch)?;
                    return Ok((RawKind::String, start, self.cur));
                }
                if ch == b'\\' {
                    self.continuation_line()?;
                    continue 'again;
                }
                let c2 = self.nextc();
                if two_char_op(ch, c2) {
                    let c3 = self.nextc();
                    if !three_char_op(ch, c2.unwrap_or(0), c3) {
                        self.backup(c3);
                    }
                    return Ok((RawKind::Op, start, self.cur));
                }
                self.backup(c2);
                match ch {
                    b'(' | b'[' | b'{' => {
                        if self.parens.len() >= MAXLEVEL {
                            return Err(self.syntax("too many nested parentheses".into()));
                        }
                        self.parens.push((ch, self.lineno));
                    }
                    b')' | b']' | b'}' => {
                        let Some((opening, line)) = self.parens.pop() else {
                            return Err(self.syntax(format!("unmatched '{}'", ch as char)));
                        };
                        let matching =
                            matches!((opening, ch), (b'(', b')') | (b'[', b']') | (b'{', b'}'));
                        if !matching {
                            let message = if line != self.lineno {
                                format!(
                                    "closing parenthesis '{}' does not match opening parenthesis '{}' on line {line}",
                                    ch as char, opening as char
                                )
                            } else {
                                format!(
                                    "closing parenthesis '{}' does not match opening parenthesis '{}'",
                                    ch as char, opening as char
                                )
                            };
                            return Err(self.syntax(message));
                        }
                    }
                    _ => {}
                }
                if !(0x20..0x7F).contains(&ch) {
                    return Err(
                        self.syntax(format!("invalid non-printable character U+{:04X}", ch))
                    );
                }
                return Ok((RawKind::Op, start, self.cur));
            }
        }
    }

    /// Measures the indentation of a new line and queues INDENT/DEDENT.
    fn indentation(&mut self, blankline: &mut bool) -> Result<(), TokError> {
        let mut col: u32 = 0;
        let mut altcol: u32 = 0;
        let mut cont_line_col: u32 = 0;
        self.atbol = false;
        let mut c;
        loop {
            c = self.nextc();
            match c {
                Some(b' ') => {
                    col += 1;
                    altcol += 1;
                }
                Some(b'\t') => {
                    col = (col / TABSIZE + 1) * TABSIZE;
                    altcol += 1;
                }
                Some(b'\x0c') => {
                    col = 0;
                    altcol = 0;
                }
                Some(b'\\') => {
                    if cont_line_col == 0 {
                        cont_line_col = col;
                    }
                    self.continuation_line()?;
                }
                _ => break,
            }
        }
        self.backup(c);
        if c == Some(b'#') || c == Some(b'\n') {
            *blankline = true;
        }
        if *blankline || !self.parens.is_empty() {
            return Ok(());
        }
        if cont_line_col != 0 {
            col = cont_line_col;
            altcol = cont_line_col;
        }
        let top = *self.indstack.last().expect("never empty");
        let alttop = *self.altindstack.last().expect("never empty");
        match col.cmp(&top) {
            std::cmp::Ordering::Equal => {
                if altcol != alttop {
                    return Err(self.indent_error());
                }
            }
            std::cmp::Ordering::Greater => {
                if self.indstack.len() >= MAXINDENT {
                    self.cur = self.inp;
                    return Err(self.fail(TokError::TooDeep));
                }
                if altcol <= alttop {
                    return Err(self.indent_error());
                }
                self.pendin += 1;
                self.indstack.push(col);
                self.altindstack.push(altcol);
            }
            std::cmp::Ordering::Less => {
                while self.indstack.len() > 1 && col < *self.indstack.last().expect("never empty") {
                    self.pendin -= 1;
                    self.indstack.pop();
                    self.altindstack.pop();
                }
                if col != *self.indstack.last().expect("never empty") {
                    self.cur = self.inp;
                    return Err(self.fail(TokError::Dedent));
                }
                if altcol != *self.altindstack.last().expect("never empty") {
                    return Err(self.indent_error());
                }
            }
        }
        Ok(())
    }

    fn indent_error(&mut self) -> TokError {
        self.cur = self.inp;
        self.fail(TokError::TabSpace)
    }

    fn identifier(&mut self, first: u8, start: usize) -> Result<(RawKind, usize, usize), TokError> {
        let (mut saw_b, mut saw_r, mut saw_u, mut saw_f) = (false, false, false, false);
        let mut c = Some(first);
        loop {
            match c {
                Some(b'b' | b'B') if !(saw_b || saw_u || saw_f) => saw_b = true,
                Some(b'u' | b'U') if !(saw_b || saw_u || saw_r || saw_f) => saw_u = true,
                Some(b'r' | b'R') if !(saw_r || saw_u) => saw_r = true,
                Some(b'f' | b'F') if !(saw_f || saw_b || saw_u) => saw_f = true,
                _ => break,
            }
            c = self.nextc();
            if let Some(quote @ (b'"' | b'\'')) = c {
                self.string(quote)?;
                return Ok((RawKind::String, start, self.cur));
            }
        }
        let mut nonascii = false;
        while is_potential_identifier_char(c) {
            if c.is_some_and(|byte| byte >= 0x80) {
                nonascii = true;
            }
            c = self.nextc();
        }
        self.backup(c);
        if nonascii {
            self.verify_identifier(start)?;
        }
        Ok((RawKind::Name, start, self.cur))
    }

    fn verify_identifier(&mut self, start: usize) -> Result<(), TokError> {
        let bytes = &self.buf[start..self.cur];
        let text = match utf8::decode(bytes) {
            Ok(text) => text,
            Err(message) => return Err(self.fail(TokError::Decode(message))),
        };
        if let Some((_, c)) = unicode::first_invalid_identifier_char(text) {
            let message = if unicode::is_printable(c) {
                format!("invalid character '{c}' (U+{:04X})", c as u32)
            } else {
                format!("invalid non-printable character U+{:04X}", c as u32)
            };
            return Err(self.syntax(message));
        }
        Ok(())
    }

    /// Scans the rest of a string whose opening quote was just read.
    fn string(&mut self, quote: u8) -> Result<(), TokError> {
        let first_lineno = self.lineno;
        self.string_line = first_lineno;
        let mut quote_size = 1;
        let mut end_quote_size = 0;
        let mut c = self.nextc();
        if c == Some(quote) {
            c = self.nextc();
            if c == Some(quote) {
                quote_size = 3;
            } else {
                end_quote_size = 1;
            }
        }
        if c != Some(quote) {
            self.backup(c);
        }
        while end_quote_size != quote_size {
            let c = self.nextc();
            if c.is_none() || (quote_size == 1 && c == Some(b'\n')) {
                let detected = self.lineno;
                self.lineno = first_lineno;
                let message = if quote_size == 3 {
                    format!(
                        "unterminated triple-quoted string literal (detected at line {detected})"
                    )
                } else {
                    format!("unterminated string literal (detected at line {detected})")
                };
                return Err(self.syntax(message));
            }
            if c == Some(quote) {
                end_quote_size += 1;
            } else {
                end_quote_size = 0;
                if c == Some(b'\\') {
                    self.nextc();
                }
            }
        }
        Ok(())
    }

    /// `tok_decimal_tail`: digits with single underscores between them;
    /// returns the character after them.
    fn decimal_tail(&mut self) -> Result<Option<u8>, TokError> {
        loop {
            let mut c = self.nextc();
            while is_digit(c) {
                c = self.nextc();
            }
            if c != Some(b'_') {
                return Ok(c);
            }
            let c = self.nextc();
            if !is_digit(c) {
                self.backup(c);
                return Err(self.syntax("invalid decimal literal".into()));
            }
        }
    }

    /// `lookahead`: the next characters are `test` followed by a character
    /// that cannot continue an identifier; nothing is consumed.
    fn lookahead(&mut self, test: &[u8]) -> bool {
        let mut matched = 0;
        loop {
            let c = self.nextc();
            let result;
            if matched == test.len() {
                result = !is_potential_identifier_char(c);
            } else if c == Some(test[matched]) {
                matched += 1;
                continue;
            } else {
                result = false;
            }
            self.backup(c);
            while matched > 0 {
                matched -= 1;
                self.backup(Some(test[matched]));
            }
            return result;
        }
    }

    /// `verify_end_of_number`: a keyword right after a number is a warning
    /// (`1if x else y`), any other identifier character an error.
    fn verify_end_of_number(&mut self, c: Option<u8>, kind: &str) -> Result<(), TokError> {
        let keyword = match c {
            Some(b'a') => self.lookahead(b"nd"),
            Some(b'e') => self.lookahead(b"lse"),
            Some(b'f') => self.lookahead(b"or"),
            Some(b'i') => {
                let c2 = self.nextc();
                let hit = matches!(c2, Some(b'f' | b'n' | b's'));
                self.backup(c2);
                hit
            }
            Some(b'o') => self.lookahead(b"r"),
            Some(b'n') => self.lookahead(b"ot"),
            _ => false,
        };
        if keyword {
            self.backup(c);
            self.warn(format!("invalid {kind} literal"));
            self.nextc();
        } else if c.is_some_and(|byte| byte < 0x80) && is_potential_identifier_char(c) {
            // A non-ASCII character after a number starts the next token.
            self.backup(c);
            return Err(self.syntax(format!("invalid {kind} literal")));
        }
        Ok(())
    }

    /// A number starting with the digit `first` (already read).
    fn number(&mut self, first: u8) -> Result<(), TokError> {
        if first == b'0' {
            let mut c = self.nextc();
            match c {
                Some(b'x' | b'X') => {
                    c = self.nextc();
                    loop {
                        if c == Some(b'_') {
                            c = self.nextc();
                        }
                        if !c.is_some_and(|b| b.is_ascii_hexdigit()) {
                            self.backup(c);
                            return Err(self.syntax("invalid hexadecimal literal".into()));
                        }
                        loop {
                            c = self.nextc();
                            if !c.is_some_and(|b| b.is_ascii_hexdigit()) {
                                break;
                            }
                        }
                        if c != Some(b'_') {
                            break;
                        }
                    }
                    self.verify_end_of_number(c, "hexadecimal")?;
                }
                Some(b'o' | b'O' | b'b' | b'B') => {
                    let octal = matches!(c, Some(b'o' | b'O'));
                    let (name, top) = if octal {
                        ("octal", b'7')
                    } else {
                        ("binary", b'1')
                    };
                    let in_base = |c: Option<u8>| matches!(c, Some(d) if (b'0'..=top).contains(&d));
                    c = self.nextc();
                    loop {
                        if c == Some(b'_') {
                            c = self.nextc();
                        }
                        if !in_base(c) {
                            if is_digit(c) {
                                let digit = c.unwrap_or(b'0') as char;
                                return Err(self
                                    .syntax(format!("invalid digit '{digit}' in {name} literal")));
                            }
                            self.backup(c);
                            return Err(self.syntax(format!("invalid {name} literal")));
                        }
                        loop {
                            c = self.nextc();
                            if !in_base(c) {
                                break;
                            }
                        }
                        if c != Some(b'_') {
                            break;
                        }
                    }
                    if is_digit(c) {
                        let digit = c.unwrap_or(b'0') as char;
                        return Err(
                            self.syntax(format!("invalid digit '{digit}' in {name} literal"))
                        );
                    }
                    self.verify_end_of_number(c, name)?;
                }
                _ => {
                    let mut nonzero = false;
                    loop {
                        if c == Some(b'_') {
                            c = self.nextc();
                            if !is_digit(c) {
                                self.backup(c);
                                return Err(self.syntax("invalid decimal literal".into()));
                            }
                        }
                        if c != Some(b'0') {
                            break;
                        }
                        c = self.nextc();
                    }
                    if is_digit(c) {
                        nonzero = true;
                        c = self.decimal_tail()?;
                    }
                    match c {
                        Some(b'.') => {
                            let next = self.nextc();
                            return self.number_from(NumberState::Fraction, next);
                        }
                        Some(e @ (b'e' | b'E')) => {
                            return self.number_from(NumberState::Exponent(e), None);
                        }
                        Some(b'j' | b'J') => return self.number_from(NumberState::Imaginary, None),
                        _ => {}
                    }
                    if nonzero {
                        self.backup(c);
                        return Err(self.syntax(
                            "leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers"
                                .into(),
                        ));
                    }
                    self.verify_end_of_number(c, "decimal")?;
                }
            }
            self.backup(c);
            return Ok(());
        }
        let c = self.decimal_tail()?;
        match c {
            Some(b'.') => {
                let next = self.nextc();
                self.number_from(NumberState::Fraction, next)
            }
            Some(e @ (b'e' | b'E')) => self.number_from(NumberState::Exponent(e), None),
            Some(b'j' | b'J') => self.number_from(NumberState::Imaginary, None),
            _ => {
                self.verify_end_of_number(c, "decimal")?;
                self.backup(c);
                Ok(())
            }
        }
    }

    /// The rest of a number from a fraction (`c` is the character after the
    /// point), an exponent letter or an imaginary suffix just read.
    fn number_from(&mut self, state: NumberState, mut c: Option<u8>) -> Result<(), TokError> {
        let mut state = state;
        if let NumberState::Fraction = state {
            if is_digit(c) {
                c = self.decimal_tail()?;
            }
            match c {
                Some(e @ (b'e' | b'E')) => state = NumberState::Exponent(e),
                Some(b'j' | b'J') => state = NumberState::Imaginary,
                _ => {
                    self.verify_end_of_number(c, "decimal")?;
                    self.backup(c);
                    return Ok(());
                }
            }
        }
        if let NumberState::Exponent(e) = state {
            c = self.nextc();
            if matches!(c, Some(b'+' | b'-')) {
                c = self.nextc();
                if !is_digit(c) {
                    self.backup(c);
                    return Err(self.syntax("invalid decimal literal".into()));
                }
            } else if !is_digit(c) {
                self.backup(c);
                self.verify_end_of_number(Some(e), "decimal")?;
                self.backup(Some(e));
                return Ok(());
            }
            c = self.decimal_tail()?;
            if matches!(c, Some(b'j' | b'J')) {
                state = NumberState::Imaginary;
            } else {
                self.verify_end_of_number(c, "decimal")?;
                self.backup(c);
                return Ok(());
            }
        }
        debug_assert!(matches!(state, NumberState::Imaginary));
        c = self.nextc();
        self.verify_end_of_number(c, "imaginary")?;
        self.backup(c);
        Ok(())
    }
}

//! CPython 3.11's PEG parser, as a recognizer that keeps only what
//! `candidate-api-contract` and the error messages need.
//!
//! The rules follow CPython's grammar one for one, in the same order, with
//! the same lookaheads, cuts and forced tokens, so the parser accepts
//! exactly what `ast.parse` accepts and reads the same tokens before it
//! fails. CPython parses twice when the first pass fails: the second pass
//! adds the `invalid_*` rules, which raise the specialized messages (an
//! alternative is skipped in the first pass only when it is a lone
//! `invalid_*` rule; `dict`'s `'{' invalid_double_starred_kvpairs '}'` runs
//! in both); then
//! [`Parser::set_syntax_error`] picks the message the way
//! `_PyPegen_set_syntax_error` does (tokenizer errors found further on win
//! over parser errors, an unclosed bracket opened on an earlier line wins
//! over a generic error).
//!
//! Instead of a full AST each expression is a small [`Node`]: enough to
//! name it in messages (`cannot assign to function call`), to find invalid
//! assignment targets and to read module-level `NAME = <constant>`
//! statements.

mod expressions;
mod invalid;
mod patterns;
mod statements;
mod targets;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use python_compat::ErrorClass;

use super::tokenizer::{RawKind, TokError, Tokenizer};
use super::{syntax_error, Warnings};
use python_compat::Exception;

/// Deepest nesting of statements, expressions, targets and patterns the
/// parser follows; deeper sources are refused with CPython's
/// `RecursionError`. CPython's own limit is on the depth of the AST it
/// converts (3000 minus three per Python frame of the caller: a chain of
/// 2985 unary minus, `not` or `if`/`else` passes when `ast.parse` is called
/// as the original calls it, 2986 fails) or, for constructs that cost its parser
/// more rule calls (lambdas, `**`), a `MemoryError` a few levels earlier;
/// this limit matches the first.
const MAX_DEPTH: u32 = 2989;

/// A rule failed after raising an error (`p->error_indicator`); the error
/// is in [`Parser::error`].
#[derive(Debug)]
pub(super) struct Abort;

/// A rule's result: `Ok(None)` is "no match" (the caller backtracks).
pub(super) type PR<T> = Result<Option<T>, Abort>;

/// Unwraps a match or makes the enclosing closure or rule fail.
macro_rules! t {
    ($e:expr) => {
        match $e? {
            Some(value) => value,
            None => return Ok(None),
        }
    };
}
pub(super) use t;

/// Tries one alternative (backtracking when it does not match) and returns
/// its value from the enclosing rule when it does.
macro_rules! alt {
    ($p:expr, $f:expr) => {
        if let Some(value) = $p.alt($f)? {
            return Ok(Some(value));
        }
    };
}
pub(super) use alt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    LPar,
    RPar,
    LSqb,
    RSqb,
    Colon,
    Comma,
    Semi,
    Plus,
    Minus,
    Star,
    Slash,
    VBar,
    Amper,
    Less,
    Greater,
    Equal,
    Dot,
    Percent,
    LBrace,
    RBrace,
    EqEqual,
    NotEqual,
    /// `<>`: tokenized as NOTEQUAL but never accepted as `!=`.
    LessGreater,
    LessEqual,
    GreaterEqual,
    Tilde,
    Circumflex,
    LeftShift,
    RightShift,
    DoubleStar,
    PlusEqual,
    MinEqual,
    StarEqual,
    SlashEqual,
    PercentEqual,
    AmperEqual,
    VBarEqual,
    CircumflexEqual,
    LeftShiftEqual,
    RightShiftEqual,
    DoubleStarEqual,
    DoubleSlash,
    DoubleSlashEqual,
    At,
    AtEqual,
    RArrow,
    Ellipsis,
    ColonEqual,
    /// Any other character (`!`, `$`, `?`, backquote): a token no rule takes.
    Other,
}

impl Op {
    fn from_bytes(text: &[u8]) -> Op {
        match text {
            b"(" => Op::LPar,
            b")" => Op::RPar,
            b"[" => Op::LSqb,
            b"]" => Op::RSqb,
            b":" => Op::Colon,
            b"," => Op::Comma,
            b";" => Op::Semi,
            b"+" => Op::Plus,
            b"-" => Op::Minus,
            b"*" => Op::Star,
            b"/" => Op::Slash,
            b"|" => Op::VBar,
            b"&" => Op::Amper,
            b"<" => Op::Less,
            b">" => Op::Greater,
            b"=" => Op::Equal,
            b"." => Op::Dot,
            b"%" => Op::Percent,
            b"{" => Op::LBrace,
            b"}" => Op::RBrace,
            b"==" => Op::EqEqual,
            b"!=" => Op::NotEqual,
            b"<>" => Op::LessGreater,
            b"<=" => Op::LessEqual,
            b">=" => Op::GreaterEqual,
            b"~" => Op::Tilde,
            b"^" => Op::Circumflex,
            b"<<" => Op::LeftShift,
            b">>" => Op::RightShift,
            b"**" => Op::DoubleStar,
            b"+=" => Op::PlusEqual,
            b"-=" => Op::MinEqual,
            b"*=" => Op::StarEqual,
            b"/=" => Op::SlashEqual,
            b"%=" => Op::PercentEqual,
            b"&=" => Op::AmperEqual,
            b"|=" => Op::VBarEqual,
            b"^=" => Op::CircumflexEqual,
            b"<<=" => Op::LeftShiftEqual,
            b">>=" => Op::RightShiftEqual,
            b"**=" => Op::DoubleStarEqual,
            b"//" => Op::DoubleSlash,
            b"//=" => Op::DoubleSlashEqual,
            b"@" => Op::At,
            b"@=" => Op::AtEqual,
            b"->" => Op::RArrow,
            b"..." => Op::Ellipsis,
            b":=" => Op::ColonEqual,
            _ => Op::Other,
        }
    }

    fn is_augassign(self) -> bool {
        matches!(
            self,
            Op::PlusEqual
                | Op::MinEqual
                | Op::StarEqual
                | Op::AtEqual
                | Op::SlashEqual
                | Op::PercentEqual
                | Op::AmperEqual
                | Op::VBarEqual
                | Op::CircumflexEqual
                | Op::LeftShiftEqual
                | Op::RightShiftEqual
                | Op::DoubleStarEqual
                | Op::DoubleSlashEqual
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kw {
    False,
    None,
    True,
    And,
    As,
    Assert,
    Async,
    Await,
    Break,
    Class,
    Continue,
    Def,
    Del,
    Elif,
    Else,
    Except,
    Finally,
    For,
    From,
    Global,
    If,
    Import,
    In,
    Is,
    Lambda,
    Nonlocal,
    Not,
    Or,
    Pass,
    Raise,
    Return,
    Try,
    While,
    With,
    Yield,
}

impl Kw {
    fn from_bytes(text: &[u8]) -> Option<Kw> {
        Some(match text {
            b"False" => Kw::False,
            b"None" => Kw::None,
            b"True" => Kw::True,
            b"and" => Kw::And,
            b"as" => Kw::As,
            b"assert" => Kw::Assert,
            b"async" => Kw::Async,
            b"await" => Kw::Await,
            b"break" => Kw::Break,
            b"class" => Kw::Class,
            b"continue" => Kw::Continue,
            b"def" => Kw::Def,
            b"del" => Kw::Del,
            b"elif" => Kw::Elif,
            b"else" => Kw::Else,
            b"except" => Kw::Except,
            b"finally" => Kw::Finally,
            b"for" => Kw::For,
            b"from" => Kw::From,
            b"global" => Kw::Global,
            b"if" => Kw::If,
            b"import" => Kw::Import,
            b"in" => Kw::In,
            b"is" => Kw::Is,
            b"lambda" => Kw::Lambda,
            b"nonlocal" => Kw::Nonlocal,
            b"not" => Kw::Not,
            b"or" => Kw::Or,
            b"pass" => Kw::Pass,
            b"raise" => Kw::Raise,
            b"return" => Kw::Return,
            b"try" => Kw::Try,
            b"while" => Kw::While,
            b"with" => Kw::With,
            b"yield" => Kw::Yield,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tk {
    Name,
    Number,
    String,
    Newline,
    Indent,
    Dedent,
    EndMarker,
    Op(Op),
    Kw(Kw),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Token {
    pub kind: Tk,
    pub start: u32,
    pub end: u32,
    pub lineno: u32,
    pub level: u32,
}

/// A constant expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Const {
    /// An integer literal: its NUMBER token.
    Int(u32),
    Float,
    Complex,
    Str,
    Bytes,
    True,
    False,
    None,
    Ellipsis,
}

/// Expression kinds that need no detail beyond their name in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Attribute,
    Subscript,
    Lambda,
    BoolOp,
    BinOp,
    UnaryOp,
    GeneratorExp,
    Yield,
    Await,
    ListComp,
    SetComp,
    DictComp,
    Dict,
    Set,
    IfExp,
    NamedExpr,
    Slice,
    JoinedStr,
}

/// What the parser keeps of an expression.
#[derive(Debug, Clone, Copy)]
pub(super) enum Node {
    /// A name: its NAME token.
    Name(u32),
    Const(Const),
    /// Elements in [`Parser::seqs`] (start, length).
    Tuple(u32, u32),
    List(u32, u32),
    Starred(u32),
    Compare {
        left: u32,
        first_in: bool,
    },
    Call {
        nargs: u32,
        kw_unpack: bool,
    },
    Other(Kind),
}

/// What the parser keeps of a statement.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stmt {
    /// `targets = value`: targets in [`Parser::seqs`], value a node.
    Assign {
        targets: (u32, u32),
        value: u32,
    },
    Other,
}

/// Memoized rules.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(super) enum Rule {
    SimpleStmt,
    Block,
    Expression,
    StarExpression,
    Disjunction,
    Conjunction,
    Inversion,
    BitwiseOr,
    Factor,
    AwaitPrimary,
    Primary,
    Strings,
    Arguments,
    StarTarget,
    TargetWithStarAtom,
    TPrimary,
    DelTarget,
    ClosedPattern,
    StarPattern,
    Attr,
    DottedName,
    InvalidNamedExpression,
}

#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(byte as u64);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

const NO_NODE: u32 = u32::MAX;

/// Which start rule: a module, or an f-string replacement field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    File,
    FString,
}

pub(super) struct Parser<'a> {
    pub(super) tok: Tokenizer<'a>,
    pub(super) buf: &'a [u8],
    pub(super) tokens: Vec<Token>,
    pub(super) pos: usize,
    pub(super) error: Option<Exception>,
    /// Second pass (`p->call_invalid_rules`): alternatives that are a lone
    /// `invalid_*` rule run.
    pub(super) invalid: bool,
    pub(super) start: Start,
    memo: HashMap<u64, (u32, u32), BuildHasherDefault<FxHasher>>,
    pub(super) nodes: Vec<Node>,
    pub(super) seqs: Vec<u32>,
    pub(super) stmts: Vec<Stmt>,
    pub(super) depth: u32,
    pub(super) warnings: Warnings,
}

impl<'a> Parser<'a> {
    /// A parser over `buf` (decoded source ending with `\n`) whose first
    /// line is `first_line`.
    pub(super) fn new(buf: &'a [u8], start: Start, first_line: u32, warnings: Warnings) -> Self {
        Parser {
            tok: Tokenizer::new(buf, first_line, warnings.clone()),
            buf,
            tokens: Vec::new(),
            pos: 0,
            error: None,
            invalid: false,
            start,
            memo: HashMap::default(),
            nodes: Vec::new(),
            seqs: Vec::new(),
            stmts: Vec::new(),
            depth: 0,
            warnings,
        }
    }

    /// `_PyPegen_run_parser`: the first pass, and on failure the second pass
    /// and the choice of the error. On success, the module's statements.
    pub(super) fn run(&mut self) -> Result<Vec<u32>, Exception> {
        let first = self.start_rule();
        if let Ok(Some(statements)) = first {
            return Ok(statements);
        }
        if let Some(error) = &self.error {
            if !error.class().is_a(ErrorClass::Syntax) {
                return Err(self.error.take().expect("checked"));
            }
        }
        let last_token = self.tokens.len().saturating_sub(1);
        if self.error.is_none() {
            self.memo.clear();
            self.pos = 0;
            self.invalid = true;
            let _ = self.start_rule();
        }
        self.set_syntax_error(last_token);
        Err(self
            .error
            .take()
            .unwrap_or_else(|| syntax_error("invalid syntax")))
    }

    fn start_rule(&mut self) -> PR<Vec<u32>> {
        match self.start {
            Start::File => self.file(),
            Start::FString => Ok(self.star_expressions()?.map(|_| Vec::new())),
        }
    }

    /// `_PyPegen_set_syntax_error`.
    fn set_syntax_error(&mut self, last_token: usize) {
        if let Some(error) = &self.error {
            if self.tok.is_ok() && error.class().is_a(ErrorClass::Syntax) {
                self.scan_rest_for_errors();
            }
            return;
        }
        let Some(last) = self.tokens.get(last_token).copied() else {
            let _ = self.raise(
                ErrorClass::Syntax,
                "error at start before reading any input".into(),
            );
            return;
        };
        match last.kind {
            Tk::Indent => {
                let _ = self.raise(ErrorClass::Indentation, "unexpected indent".into());
            }
            Tk::Dedent => {
                let _ = self.raise(ErrorClass::Indentation, "unexpected unindent".into());
            }
            _ => {
                let _ = self.raise(ErrorClass::Syntax, "invalid syntax".into());
                self.scan_rest_for_errors();
            }
        }
    }

    /// `_PyPegen_tokenize_full_source_to_check_for_errors`: a tokenizer
    /// error further on replaces the parser's error; so does a bracket left
    /// open on a line before the last token read.
    fn scan_rest_for_errors(&mut self) {
        let current_line = self.tokens.last().map_or(0, |token| token.lineno);
        loop {
            match self.tok.next_token() {
                Ok(token) if token.kind == RawKind::EndMarker => return,
                Ok(_) => continue,
                Err(error) => {
                    match error {
                        TokError::Syntax(message) => {
                            self.error = Some(Exception::new(ErrorClass::Syntax, message));
                        }
                        TokError::Decode(message) => {
                            self.error = Some(Exception::new(ErrorClass::UnicodeDecode, message));
                        }
                        _ => {
                            if let Some((paren, line)) = self.tok.innermost_paren() {
                                if current_line > line {
                                    self.error = None;
                                    let _ = self.raise(
                                        ErrorClass::Syntax,
                                        format!("'{}' was never closed", paren as char),
                                    );
                                }
                            }
                        }
                    }
                    return;
                }
            }
        }
    }

    /// Raises `class: message` unless an error is already set (the first
    /// error wins); f-string replacement fields prefix `f-string: `.
    pub(super) fn raise(&mut self, class: ErrorClass, message: String) -> Abort {
        if self.error.is_none() {
            let message = match self.start {
                Start::FString => format!("f-string: {message}"),
                Start::File => message,
            };
            self.error = Some(Exception::new(class, message));
        }
        Abort
    }

    pub(super) fn raise_syntax(&mut self, message: impl Into<String>) -> Abort {
        self.raise(ErrorClass::Syntax, message.into())
    }

    /// Keeps an exception raised elsewhere (a nested parser) as it is.
    pub(super) fn raise_exception(&mut self, error: Exception) -> Abort {
        if self.error.is_none() {
            self.error = Some(error);
        }
        Abort
    }

    // ---- tokens ----------------------------------------------------------

    fn fill(&mut self) -> Result<(), Abort> {
        while self.tokens.len() <= self.pos {
            match self.tok.next_token() {
                Ok(raw) => {
                    let text = self.tok.text(raw.start, raw.end);
                    let kind = match raw.kind {
                        RawKind::Name => Kw::from_bytes(text).map_or(Tk::Name, Tk::Kw),
                        RawKind::Number => Tk::Number,
                        RawKind::String => Tk::String,
                        RawKind::Newline => Tk::Newline,
                        RawKind::Indent => Tk::Indent,
                        RawKind::Dedent => Tk::Dedent,
                        RawKind::EndMarker => Tk::EndMarker,
                        RawKind::Op => Tk::Op(Op::from_bytes(text)),
                    };
                    self.tokens.push(Token {
                        kind,
                        start: raw.start as u32,
                        end: raw.end as u32,
                        lineno: raw.lineno,
                        level: raw.level as u32,
                    });
                }
                Err(error) => return Err(self.tokenizer_error(error)),
            }
        }
        Ok(())
    }

    /// `_Pypegen_tokenizer_error` and `_Pypegen_raise_decode_error`.
    fn tokenizer_error(&mut self, error: TokError) -> Abort {
        match error {
            TokError::Syntax(message) => {
                self.raise_exception(Exception::new(ErrorClass::Syntax, message))
            }
            TokError::Decode(message) => {
                self.raise(ErrorClass::Syntax, format!("(unicode error) {message}"))
            }
            TokError::Eof => match self.tok.innermost_paren() {
                Some((paren, _)) => {
                    self.raise_syntax(format!("'{}' was never closed", paren as char))
                }
                None => self.raise_syntax("unexpected EOF while parsing"),
            },
            TokError::Dedent => self.raise(
                ErrorClass::Indentation,
                "unindent does not match any outer indentation level".into(),
            ),
            TokError::TabSpace => self.raise(
                ErrorClass::Tab,
                "inconsistent use of tabs and spaces in indentation".into(),
            ),
            TokError::TooDeep => self.raise(
                ErrorClass::Indentation,
                "too many levels of indentation".into(),
            ),
            TokError::LineCont => {
                self.raise_syntax("unexpected character after line continuation character")
            }
        }
    }

    /// The token at the current position (read from the tokenizer if
    /// needed).
    pub(super) fn peek(&mut self) -> Result<Token, Abort> {
        self.fill()?;
        Ok(self.tokens[self.pos])
    }

    pub(super) fn text(&self, token: u32) -> &'a [u8] {
        let token = self.tokens[token as usize];
        &self.buf[token.start as usize..token.end as usize]
    }

    pub(super) fn expect(&mut self, kind: Tk) -> PR<u32> {
        if self.peek()?.kind == kind {
            self.pos += 1;
            Ok(Some(self.pos as u32 - 1))
        } else {
            Ok(None)
        }
    }

    pub(super) fn op(&mut self, op: Op) -> PR<u32> {
        self.expect(Tk::Op(op))
    }

    pub(super) fn kw(&mut self, kw: Kw) -> PR<u32> {
        self.expect(Tk::Kw(kw))
    }

    /// A soft keyword: a NAME token spelled `word`.
    pub(super) fn soft(&mut self, word: &[u8]) -> PR<u32> {
        let token = self.peek()?;
        if token.kind == Tk::Name && self.text(self.pos as u32) == word {
            self.pos += 1;
            return Ok(Some(self.pos as u32 - 1));
        }
        Ok(None)
    }

    /// `SOFT_KEYWORD` (`_PyPegen_soft_keyword_token`): a NAME that CPython
    /// 3.11 compares with `_`, `case` and `match` over the NAME's length
    /// only, so any prefix of them (`m`, `ca`) counts too.
    pub(super) fn any_soft_keyword(&mut self) -> PR<u32> {
        let token = self.peek()?;
        let text = self.text(self.pos as u32);
        let prefix = [&b"_"[..], b"case", b"match"]
            .iter()
            .any(|keyword| keyword.starts_with(text));
        if token.kind == Tk::Name && prefix {
            self.pos += 1;
            return Ok(Some(self.pos as u32 - 1));
        }
        Ok(None)
    }

    /// A forced token (`&&':'`): its absence is an error right away.
    pub(super) fn forced(&mut self, op: Op, text: &str) -> PR<u32> {
        if self.peek()?.kind != Tk::Op(op) {
            return Err(self.raise_syntax(format!("expected '{text}'")));
        }
        self.pos += 1;
        Ok(Some(self.pos as u32 - 1))
    }

    /// Whether the current token is `kind` (a one-token lookahead).
    pub(super) fn at(&mut self, kind: Tk) -> Result<bool, Abort> {
        Ok(self.peek()?.kind == kind)
    }

    pub(super) fn at_op(&mut self, op: Op) -> Result<bool, Abort> {
        self.at(Tk::Op(op))
    }

    /// Runs `rule` without consuming input: whether it matched.
    pub(super) fn lookahead<T>(
        &mut self,
        rule: impl FnOnce(&mut Self) -> PR<T>,
    ) -> Result<bool, Abort> {
        let mark = self.pos;
        let matched = rule(self)?.is_some();
        self.pos = mark;
        Ok(matched)
    }

    /// One alternative: on no match the position is restored.
    pub(super) fn alt<T>(&mut self, rule: impl FnOnce(&mut Self) -> PR<T>) -> PR<T> {
        let mark = self.pos;
        let result = rule(self)?;
        if result.is_none() {
            self.pos = mark;
        }
        Ok(result)
    }

    /// `rule*`.
    pub(super) fn repeat<T>(
        &mut self,
        mut rule: impl FnMut(&mut Self) -> PR<T>,
    ) -> Result<Vec<T>, Abort> {
        let mut out = Vec::new();
        loop {
            let mark = self.pos;
            match rule(self)? {
                Some(value) => out.push(value),
                None => {
                    self.pos = mark;
                    return Ok(out);
                }
            }
        }
    }

    /// `rule+`.
    pub(super) fn repeat1<T>(&mut self, rule: impl FnMut(&mut Self) -> PR<T>) -> PR<Vec<T>> {
        let out = self.repeat(rule)?;
        Ok((!out.is_empty()).then_some(out))
    }

    /// `sep.rule+`: one or more, separated by `sep`.
    pub(super) fn gather<T>(
        &mut self,
        sep: Op,
        mut rule: impl FnMut(&mut Self) -> PR<T>,
    ) -> PR<Vec<T>> {
        let mark = self.pos;
        let Some(first) = rule(self)? else {
            self.pos = mark;
            return Ok(None);
        };
        let mut out = vec![first];
        loop {
            let mark = self.pos;
            if self.op(sep)?.is_none() {
                break;
            }
            match rule(self)? {
                Some(value) => out.push(value),
                None => {
                    self.pos = mark;
                    break;
                }
            }
        }
        Ok(Some(out))
    }

    /// `[rule]`: an optional part; never fails.
    pub(super) fn opt<T>(
        &mut self,
        rule: impl FnOnce(&mut Self) -> PR<T>,
    ) -> Result<Option<T>, Abort> {
        self.alt(rule)
    }

    /// Memoizes a rule that yields a node (or other index) at this position.
    pub(super) fn memo(&mut self, rule: Rule, body: impl FnOnce(&mut Self) -> PR<u32>) -> PR<u32> {
        let key = ((self.pos as u64) << 8) | rule as u64;
        if let Some(&(end, value)) = self.memo.get(&key) {
            self.pos = end as usize;
            return Ok((value != NO_NODE).then_some(value));
        }
        let start = self.pos;
        let result = body(self)?;
        if result.is_none() {
            self.pos = start;
        }
        self.memo
            .insert(key, (self.pos as u32, result.unwrap_or(NO_NODE)));
        Ok(result)
    }

    /// Counts nesting for the recursion limit.
    pub(super) fn nested<T>(&mut self, body: impl FnOnce(&mut Self) -> PR<T>) -> PR<T> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(self.raise_exception(Exception::new(
                ErrorClass::Recursion,
                "maximum recursion depth exceeded during ast construction",
            )));
        }
        let result = body(self);
        self.depth -= 1;
        result
    }

    /// Runs `body` with the `invalid_*` rules off
    /// (`expression_without_invalid`).
    pub(super) fn without_invalid<T>(&mut self, body: impl FnOnce(&mut Self) -> PR<T>) -> PR<T> {
        let saved = self.invalid;
        self.invalid = false;
        let result = body(self);
        self.invalid = saved;
        result
    }

    // ---- nodes -----------------------------------------------------------

    pub(super) fn node(&mut self, node: Node) -> u32 {
        self.nodes.push(node);
        self.nodes.len() as u32 - 1
    }

    pub(super) fn other(&mut self, kind: Kind) -> u32 {
        self.node(Node::Other(kind))
    }

    pub(super) fn seq(&mut self, items: &[u32]) -> (u32, u32) {
        let start = self.seqs.len() as u32;
        self.seqs.extend_from_slice(items);
        (start, items.len() as u32)
    }

    pub(super) fn tuple(&mut self, items: &[u32]) -> u32 {
        let (start, len) = self.seq(items);
        self.node(Node::Tuple(start, len))
    }

    pub(super) fn list(&mut self, items: &[u32]) -> u32 {
        let (start, len) = self.seq(items);
        self.node(Node::List(start, len))
    }

    pub(super) fn stmt(&mut self, stmt: Stmt) -> u32 {
        self.stmts.push(stmt);
        self.stmts.len() as u32 - 1
    }

    /// `_PyPegen_get_expr_name`.
    pub(super) fn expr_name(&self, node: u32) -> &'static str {
        match self.nodes[node as usize] {
            Node::Name(_) => "name",
            Node::Const(constant) => match constant {
                Const::None => "None",
                Const::True => "True",
                Const::False => "False",
                Const::Ellipsis => "ellipsis",
                _ => "literal",
            },
            Node::Tuple(..) => "tuple",
            Node::List(..) => "list",
            Node::Starred(_) => "starred",
            Node::Compare { .. } => "comparison",
            Node::Call { .. } => "function call",
            Node::Other(kind) => match kind {
                Kind::Attribute => "attribute",
                Kind::Subscript => "subscript",
                Kind::Lambda => "lambda",
                Kind::BoolOp | Kind::BinOp | Kind::UnaryOp => "expression",
                Kind::GeneratorExp => "generator expression",
                Kind::Yield => "yield expression",
                Kind::Await => "await expression",
                Kind::ListComp => "list comprehension",
                Kind::SetComp => "set comprehension",
                Kind::DictComp => "dict comprehension",
                Kind::Dict => "dict literal",
                Kind::Set => "set display",
                Kind::IfExp => "conditional expression",
                Kind::NamedExpr => "named expression",
                Kind::JoinedStr => "f-string expression",
                Kind::Slice => "slice",
            },
        }
    }

    /// The node of a NAME-like expression, if it is a name.
    pub(super) fn name_token(&self, node: u32) -> Option<u32> {
        match self.nodes[node as usize] {
            Node::Name(token) => Some(token),
            _ => None,
        }
    }
}

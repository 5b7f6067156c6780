//! Command lines that behave like the originals' argparse parsers.
//!
//! Each helper declares its options once as a [`CommandSpec`]; parsing
//! accepts and refuses exactly what Python 3.11's argparse accepts and refuses
//! for the original's parser (`--opt value` and `--opt=value`, unambiguous
//! abbreviations, negative numbers and `--opt ""` as values, the last
//! repetition winning, `int()` conversion), prints argparse's usage and error
//! lines, and exits 2 on a usage error or 0 after `-h/--help`, before the
//! helper does anything. clap does the parsing; `classify` first rewrites
//! each word the way argparse reads it, because clap's rules differ for
//! abbreviations and for values that start with `-`.

mod classify;
mod text;

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::int::PythonInt;
use crate::text::repr_surrogateescape;

/// A helper's command line (or one subcommand of it), in argparse's terms.
#[derive(Debug)]
pub struct CommandSpec {
    /// Program name (top level) or subcommand name; usage lines start with it.
    pub name: &'static str,
    /// One line describing a subcommand in its parent's `--help`.
    pub summary: &'static str,
    /// `--help` text after the usage; paragraphs separated by blank lines.
    pub description: &'static str,
    /// A required positional argument with fixed choices (argparse `choices=`).
    pub positional: Option<PositionalSpec>,
    /// The `--long` options, in the original's `add_argument` order.
    pub options: &'static [OptionSpec],
    /// Subcommands (argparse `add_subparsers(required=True)`); the first
    /// positional word selects one.
    pub subcommands: &'static [CommandSpec],
}

/// A required positional argument restricted to `choices`.
#[derive(Debug)]
pub struct PositionalSpec {
    /// argparse's `dest`, the name error messages use (`argument command: ...`).
    pub dest: &'static str,
    /// The accepted words, in the original's order (messages list them so).
    pub choices: &'static [&'static str],
    /// `--help` text.
    pub help: &'static str,
}

/// One `--long` option.
#[derive(Debug)]
pub struct OptionSpec {
    /// The name without the leading `--`.
    pub long: &'static str,
    /// What the option takes.
    pub kind: ValueKind,
    /// argparse `required=True`.
    pub required: bool,
    /// `--help` text.
    pub help: &'static str,
}

/// What an option takes, mirroring the originals' `add_argument` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// `action="store_true"`: no value.
    Flag,
    /// A `str` value used as text; it must be UTF-8.
    Text,
    /// A `str` value the helper later uses as a file name: kept byte for byte,
    /// so `--opt ""` stays empty and is distinguishable from an absent option.
    RawPath,
    /// `type=Path`: normalised like `pathlib.Path` (`""` becomes `.`).
    Path,
    /// `type=int`: Python's `int()`, within `i128` (larger values are
    /// refused as malformed; every consumer range-checks far below).
    Int,
    /// `type=int` kept at any size ([`PythonInt`]), for a value the helper
    /// only passes on or compares, as Python would.
    AnyInt,
    /// A `str` value restricted to `choices=` (listed in the original's order).
    Choice(&'static [&'static str]),
}

/// How parsing ended without arguments to run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLineExit {
    /// `-h/--help`: this text goes to stdout and the process exits 0.
    Help(String),
    /// A usage error: this text (usage line and `prog: error: ...`) goes to
    /// stderr and the process exits 2.
    Usage(String),
}

impl CommandLineExit {
    /// Prints the text where argparse prints it and exits with argparse's status.
    pub fn exit(self) -> ! {
        // A closed stream cannot change the outcome; the status still tells.
        match self {
            CommandLineExit::Help(text) => {
                let _ = std::io::stdout().write_all(text.as_bytes());
                let _ = std::io::stdout().flush();
                std::process::exit(0)
            }
            CommandLineExit::Usage(text) => {
                let _ = std::io::stderr().write_all(text.as_bytes());
                std::process::exit(2)
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Value {
    Flag(bool),
    Text(String),
    Path(PathBuf),
    Int(PythonInt),
}

/// The parsed command line: the chosen subcommand or positional word and the
/// options given. Absent options read as `None` (argparse's `None`); the
/// helper applies the original's defaults.
#[derive(Debug, Clone)]
pub struct ParsedArgs {
    spec: &'static CommandSpec,
    subcommand: Option<&'static str>,
    positional: Option<String>,
    values: Vec<(&'static str, Option<Value>)>,
}

impl ParsedArgs {
    /// The subcommand chosen, for commands that have subcommands.
    pub fn subcommand(&self) -> Option<&'static str> {
        self.subcommand
    }

    /// The positional word, for commands that take one.
    pub fn positional(&self) -> Option<&str> {
        self.positional.as_deref()
    }

    fn value(&self, long: &str) -> Option<&Value> {
        match self.values.iter().find(|(name, _)| *name == long) {
            Some((_, value)) => value.as_ref(),
            None => panic!("option --{long} is not declared by {}", self.spec.name),
        }
    }

    /// A [`ValueKind::Text`] or [`ValueKind::Choice`] option's value.
    pub fn text(&self, long: &str) -> Option<&str> {
        match self.value(long) {
            Some(Value::Text(text)) => Some(text),
            None => None,
            Some(other) => panic!("option --{long} is not text: {other:?}"),
        }
    }

    /// A [`ValueKind::Path`] or [`ValueKind::RawPath`] option's value.
    pub fn path(&self, long: &str) -> Option<&Path> {
        match self.value(long) {
            Some(Value::Path(path)) => Some(path),
            None => None,
            Some(other) => panic!("option --{long} is not a path: {other:?}"),
        }
    }

    /// A [`ValueKind::Int`] option's value.
    pub fn int(&self, long: &str) -> Option<i128> {
        self.any_int(long).map(|value| {
            value
                .as_i128()
                .unwrap_or_else(|| panic!("option --{long} is not a ValueKind::Int"))
        })
    }

    /// A [`ValueKind::AnyInt`] (or [`ValueKind::Int`]) option's value.
    pub fn any_int(&self, long: &str) -> Option<&PythonInt> {
        match self.value(long) {
            Some(Value::Int(value)) => Some(value),
            None => None,
            Some(other) => panic!("option --{long} is not an int: {other:?}"),
        }
    }

    /// Whether a [`ValueKind::Flag`] option was given.
    pub fn flag(&self, long: &str) -> bool {
        match self.value(long) {
            Some(Value::Flag(set)) => *set,
            other => panic!("option --{long} is not a flag: {other:?}"),
        }
    }
}

/// `pathlib.PurePosixPath(text)`: repeated and trailing slashes and `.`
/// components drop, exactly two leading slashes stay, `""` is `.`.
fn pathlib_path(value: &OsStr) -> PathBuf {
    let bytes = value.as_encoded_bytes();
    let leading = bytes.iter().take_while(|&&byte| byte == b'/').count();
    let root: &[u8] = match leading {
        0 => b"",
        2 => b"//",
        _ => b"/",
    };
    let parts: Vec<&[u8]> = bytes[leading..]
        .split(|&byte| byte == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
        .collect();
    let mut normalized = root.to_vec();
    normalized.extend(parts.join(&b'/'));
    if normalized.is_empty() {
        normalized.push(b'.');
    }
    PathBuf::from(<OsString as std::os::unix::ffi::OsStringExt>::from_vec(
        normalized,
    ))
}

/// Converts one value as argparse's `type=`/`choices=` would, with argparse's
/// message on failure (reported at the value's position, like argparse).
#[derive(Clone)]
struct ArgparseValue {
    kind: ValueKind,
}

fn value_error(command: &Command, argument: &str, message: String) -> clap::Error {
    let mut error = clap::Error::new(ErrorKind::ValueValidation).with_cmd(command);
    error.insert(
        ContextKind::InvalidArg,
        ContextValue::String(argument.to_string()),
    );
    error.insert(
        ContextKind::Custom,
        ContextValue::String(format!("argument {argument}: {message}")),
    );
    error
}

fn invalid_choice(value: &[u8], choices: &[&str]) -> String {
    let listed: Vec<String> = choices
        .iter()
        .map(|choice| repr_surrogateescape(choice.as_bytes()))
        .collect();
    format!(
        "invalid choice: {} (choose from {})",
        repr_surrogateescape(value),
        listed.join(", ")
    )
}

impl TypedValueParser for ArgparseValue {
    type Value = Value;

    fn parse_ref(
        &self,
        command: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> std::result::Result<Value, clap::Error> {
        let argument = match arg {
            Some(arg) => match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => arg.get_id().to_string(),
            },
            None => String::new(),
        };
        let bytes = value.as_encoded_bytes();
        let utf8 = value.to_str();
        match self.kind {
            ValueKind::Flag => unreachable!("flags take no value"),
            ValueKind::RawPath => Ok(Value::Path(PathBuf::from(value))),
            ValueKind::Path => Ok(Value::Path(pathlib_path(value))),
            ValueKind::Text => match utf8 {
                Some(text) => Ok(Value::Text(text.to_string())),
                None => Err(value_error(
                    command,
                    &argument,
                    format!("value is not valid UTF-8: {}", repr_surrogateescape(bytes)),
                )),
            },
            ValueKind::Int | ValueKind::AnyInt => match utf8
                .and_then(PythonInt::parse)
                .filter(|number| self.kind == ValueKind::AnyInt || number.as_i128().is_some())
            {
                Some(number) => Ok(Value::Int(number)),
                None => Err(value_error(
                    command,
                    &argument,
                    format!("invalid int value: {}", repr_surrogateescape(bytes)),
                )),
            },
            ValueKind::Choice(choices) => match utf8.filter(|text| choices.contains(text)) {
                Some(choice) => Ok(Value::Text(choice.to_string())),
                None => Err(value_error(
                    command,
                    &argument,
                    invalid_choice(bytes, choices),
                )),
            },
        }
    }
}

fn clap_command(spec: &'static CommandSpec) -> Command {
    let mut command = Command::new(spec.name)
        .no_binary_name(true)
        .args_override_self(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .arg(Arg::new("help").long("help").action(ArgAction::Help));
    if let Some(positional) = &spec.positional {
        command = command.arg(
            Arg::new(positional.dest)
                .index(1)
                .action(ArgAction::Set)
                .value_parser(ArgparseValue {
                    kind: ValueKind::Choice(positional.choices),
                }),
        );
    }
    for option in spec.options {
        let arg = Arg::new(option.long).long(option.long);
        command = command.arg(match option.kind {
            ValueKind::Flag => arg.action(ArgAction::SetTrue),
            kind => arg
                .action(ArgAction::Set)
                .value_parser(ArgparseValue { kind }),
        });
    }
    for sub in spec.subcommands {
        command = command.subcommand(clap_command(sub));
    }
    command
}

/// Name of the subcommand choice in messages (the originals' `dest="command"`).
pub(crate) const SUBCOMMAND_DEST: &str = "command";

/// The command line being parsed: its spec and the program name argparse
/// shows (`prog`, the base name of `sys.argv[0]`).
#[derive(Clone, Copy)]
struct Program<'a> {
    top: &'static CommandSpec,
    name: &'a str,
}

impl Program<'_> {
    /// `prog` of the parser of `spec`: `name`, or `name sub` for a subcommand.
    fn prog(&self, spec: &CommandSpec) -> String {
        if std::ptr::eq(self.top, spec) {
            self.name.to_string()
        } else {
            format!("{} {}", self.name, spec.name)
        }
    }

    fn usage_error(&self, spec: &CommandSpec, message: &str) -> CommandLineExit {
        CommandLineExit::Usage(text::usage_error(spec, &self.prog(spec), message))
    }
}

/// `os.path.basename(sys.argv[0])`: what follows the last `/` (empty after a
/// trailing one), the spec's own name when the process has no argv[0].
/// `os.path.basename(sys.argv[0])`, as stderr shows its undecodable bytes.
fn program_name(argv0: &OsStr) -> String {
    let bytes = argv0.as_encoded_bytes();
    let start = bytes
        .iter()
        .rposition(|byte| *byte == b'/')
        .map_or(0, |at| at + 1);
    crate::text::display_surrogateescape(&bytes[start..])
}

fn context_text(error: &clap::Error, kind: ContextKind) -> String {
    match error.get(kind) {
        Some(ContextValue::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// argparse's name for an option in messages: `-h/--help`, `--port`.
fn argument_name(flag: &str) -> String {
    if flag == "--help" {
        "-h/--help".to_string()
    } else {
        flag.to_string()
    }
}

/// Renders clap's refusal as argparse words it.
fn refusal(
    program: Program<'_>,
    canonical: &classify::Canonical,
    error: clap::Error,
) -> CommandLineExit {
    let top = program.top;
    // clap names an option `--bind <bind>`; argparse names it `--bind`.
    let flag = context_text(&error, ContextKind::InvalidArg)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    // Errors about an option belong to the (sub)command that declares it;
    // unrecognized words are reported by the top-level parser.
    let owner = match canonical.subcommand {
        Some(sub)
            if sub
                .options
                .iter()
                .any(|option| format!("--{}", option.long) == flag) =>
        {
            sub
        }
        Some(sub) if flag == "--help" => sub,
        _ => top,
    };
    let message = match error.kind() {
        ErrorKind::DisplayHelp => {
            let spec = canonical.help_of.unwrap_or(top);
            return CommandLineExit::Help(text::help(spec, &program.prog(spec)));
        }
        ErrorKind::ValueValidation if error.get(ContextKind::Custom).is_some() => {
            context_text(&error, ContextKind::Custom)
        }
        ErrorKind::TooManyValues => format!(
            "argument {}: ignored explicit argument {}",
            argument_name(&flag),
            repr_surrogateescape(context_text(&error, ContextKind::InvalidValue).as_bytes())
        ),
        ErrorKind::InvalidValue if flag.starts_with("--") => {
            format!("argument {}: expected one argument", argument_name(&flag))
        }
        ErrorKind::InvalidSubcommand => {
            let names: Vec<&str> = top.subcommands.iter().map(|sub| sub.name).collect();
            let word = context_text(&error, ContextKind::InvalidSubcommand);
            format!(
                "argument {SUBCOMMAND_DEST}: {}",
                invalid_choice(word.as_bytes(), &names)
            )
        }
        ErrorKind::UnknownArgument => format!("unrecognized arguments: {flag}"),
        // Not reached through the classifying pass; kept readable anyway.
        kind => kind.as_str().unwrap_or("invalid arguments").to_string(),
    };
    program.usage_error(owner, &message)
}

/// argparse's final check: every required argument of `spec` was given.
fn missing_required(spec: &CommandSpec, matches: &ArgMatches) -> Vec<String> {
    let mut missing = Vec::new();
    if let Some(positional) = &spec.positional {
        if !matches.contains_id(positional.dest) {
            missing.push(positional.dest.to_string());
        }
    }
    for option in spec.options.iter().filter(|option| option.required) {
        if matches.value_source(option.long).is_none() {
            missing.push(format!("--{}", option.long));
        }
    }
    if !spec.subcommands.is_empty() && matches.subcommand().is_none() {
        missing.push(SUBCOMMAND_DEST.to_string());
    }
    missing
}

fn collect(spec: &'static CommandSpec, matches: &ArgMatches) -> Vec<(&'static str, Option<Value>)> {
    spec.options
        .iter()
        .map(|option| {
            let value = match option.kind {
                ValueKind::Flag => Some(Value::Flag(matches.get_flag(option.long))),
                _ => matches.get_one::<Value>(option.long).cloned(),
            };
            (option.long, value)
        })
        .collect()
}

/// Parses `words` (the arguments after the program name) against `top`;
/// tests pass plain `&str` words, a helper its `args_os`.
pub fn try_parse_command_line<S: AsRef<OsStr>>(
    top: &'static CommandSpec,
    words: &[S],
) -> std::result::Result<ParsedArgs, CommandLineExit> {
    parse_words(
        Program {
            top,
            name: top.name,
        },
        words,
    )
}

fn parse_words<S: AsRef<OsStr>>(
    program: Program<'_>,
    words: &[S],
) -> std::result::Result<ParsedArgs, CommandLineExit> {
    let top = program.top;
    let words: Vec<OsString> = words
        .iter()
        .map(|word| word.as_ref().to_os_string())
        .collect();
    let canonical = classify::canonicalize(top, &words)
        .map_err(|ambiguous| program.usage_error(ambiguous.spec, &ambiguous.message))?;
    let matches = clap_command(top)
        .try_get_matches_from(&canonical.words)
        .map_err(|error| refusal(program, &canonical, error))?;
    // A subcommand's parser finishes (and checks) before its parent's.
    let (spec, chosen) = match matches.subcommand() {
        Some((name, sub_matches)) => {
            let sub = top
                .subcommands
                .iter()
                .find(|sub| sub.name == name)
                .expect("clap only matches declared subcommands");
            (sub, sub_matches)
        }
        None => (top, &matches),
    };
    if let Some((owner, message)) = &canonical.stopped {
        return Err(program.usage_error(owner, message));
    }
    for (spec, matches) in [(spec, chosen), (top, &matches)] {
        let missing = missing_required(spec, matches);
        if !missing.is_empty() {
            let message = format!(
                "the following arguments are required: {}",
                missing.join(", ")
            );
            return Err(program.usage_error(spec, &message));
        }
    }
    if !canonical.extras.is_empty() {
        let extras: Vec<String> = canonical
            .extras
            .iter()
            .map(|word| crate::text::display_surrogateescape(word.as_encoded_bytes()))
            .collect();
        let message = format!("unrecognized arguments: {}", extras.join(" "));
        return Err(program.usage_error(top, &message));
    }
    let positional = spec.positional.as_ref().and_then(|positional| {
        match chosen.get_one::<Value>(positional.dest) {
            Some(Value::Text(word)) => Some(word.clone()),
            _ => None,
        }
    });
    Ok(ParsedArgs {
        spec,
        subcommand: matches.subcommand_name().and_then(|name| {
            top.subcommands
                .iter()
                .find(|sub| sub.name == name)
                .map(|sub| sub.name)
        }),
        positional,
        values: collect(spec, chosen),
    })
}

/// Parses this process's arguments against `top` (see [`parse_argv`]).
pub fn parse_command_line(top: &'static CommandSpec) -> ParsedArgs {
    let argv: Vec<OsString> = std::env::args_os().collect();
    parse_argv(top, &argv)
}

/// Parses a whole command line (`argv[0]` first) against `top`; prints help
/// (exit 0) or a usage error (exit 2) instead of returning. Help and usage
/// name the program as argparse does, by the base name of `argv[0]`: a
/// migrated release's launcher keeps `argv[0]` the script's path, so a
/// helper run as `update_runner.py` says `usage: update_runner.py`, as the
/// original does.
pub fn parse_argv(top: &'static CommandSpec, argv: &[OsString]) -> ParsedArgs {
    let (name, words) = match argv.split_first() {
        Some((argv0, words)) => (program_name(argv0), words),
        None => (top.name.to_string(), &[][..]),
    };
    parse_words(Program { top, name: &name }, words).unwrap_or_else(|exit| exit.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pathlib_normalisation_matches_python() {
        // Expected values: str(pathlib.Path(text)) on Python 3.11.
        let cases = [
            ("", "."),
            (".", "."),
            ("/", "/"),
            ("//", "//"),
            ("///", "/"),
            ("//a//b/", "//a/b"),
            ("///a/./b/.", "/a/b"),
            ("a/../b", "a/../b"),
            ("./a", "a"),
            ("/x/", "/x"),
        ];
        for (text, expected) in cases {
            assert_eq!(
                pathlib_path(OsStr::new(text)),
                PathBuf::from(expected),
                "{text:?}"
            );
        }
    }
}

//! argparse's reading of each command-line word, applied before clap sees it.
//!
//! argparse decides for every word whether it is an option (exact, `--x=v`,
//! an unambiguous prefix, or `-h` with attached text), an error (an ambiguous
//! prefix, reported before anything else is parsed), or a value — including
//! words that start with `-` but look like negative numbers or contain a
//! space. clap's own rules differ on exactly those points, so this pass
//! rewrites the command line into an unambiguous canonical form
//! (`--long=value`, `--help`) that clap then parses with argparse's outcome.

use std::ffi::{OsStr, OsString};

use super::{CommandSpec, ValueKind, SUBCOMMAND_DEST};
use crate::int::decimal_digit;
use crate::text::repr_surrogateescape;

/// What argparse's `_parse_optional` makes of one word.
enum Word<'a> {
    /// `--`: every later word is a value.
    Separator,
    /// A value or positional argument.
    Positional,
    /// `-h`/`--help`, possibly with text attached (`-hx`, `--help=x`).
    Help { attached: Option<&'a [u8]> },
    /// One of the command's options, possibly with `=value` attached.
    Option {
        long: &'static str,
        kind: ValueKind,
        attached: Option<&'a [u8]>,
    },
    /// A word argparse would report as an unrecognized argument.
    Unknown,
}

/// The canonical command line and what argparse would report beyond clap.
pub(crate) struct Canonical {
    /// Words for clap, without the program name. They stop early where
    /// argparse fails at a word clap would read differently (see `stopped`).
    pub words: Vec<OsString>,
    /// The subcommand chosen (by name), if the command has subcommands.
    pub subcommand: Option<&'static CommandSpec>,
    /// The command whose help was requested first, if any.
    pub help_of: Option<&'static CommandSpec>,
    /// argparse's error at the word where `words` stop: a missing value or an
    /// invalid positional choice. It applies if clap accepts all of `words`.
    pub stopped: Option<(&'static CommandSpec, String)>,
    /// Words argparse reports as unrecognized after every other check:
    /// unknown options and surplus positional words, in order.
    pub extras: Vec<OsString>,
}

/// An ambiguous abbreviation: argparse reports it before parsing anything.
pub(crate) struct Ambiguous {
    /// The command whose options were matched.
    pub spec: &'static CommandSpec,
    /// argparse's message.
    pub message: String,
}

/// argparse's `_negative_number_matcher`: `^-\d+$|^-\d*\.\d+$`, where `\d` is
/// any Unicode decimal digit and `$` also matches before a final newline.
fn looks_like_negative_number(word: &str) -> bool {
    let Some(rest) = word.strip_prefix('-') else {
        return false;
    };
    let rest = rest.strip_suffix('\n').unwrap_or(rest);
    let digits = |text: &str| text.chars().all(|c| decimal_digit(c).is_some());
    match rest.split_once('.') {
        None => !rest.is_empty() && digits(rest),
        Some((whole, fraction)) => !fraction.is_empty() && digits(whole) && digits(fraction),
    }
}

fn split_attached(word: &[u8]) -> (&[u8], Option<&[u8]>) {
    match word.iter().position(|&byte| byte == b'=') {
        Some(at) => (&word[..at], Some(&word[at + 1..])),
        None => (word, None),
    }
}

/// Every option string of `spec` in argparse's registration order.
fn option_strings(spec: &'static CommandSpec) -> impl Iterator<Item = (String, Option<usize>)> {
    let help = [("-h".to_string(), None), ("--help".to_string(), None)];
    let options = spec
        .options
        .iter()
        .enumerate()
        .map(|(index, option)| (format!("--{}", option.long), Some(index)));
    help.into_iter().chain(options)
}

fn word_for<'a>(
    spec: &'static CommandSpec,
    index: Option<usize>,
    attached: Option<&'a [u8]>,
) -> Word<'a> {
    match index {
        None => Word::Help { attached },
        Some(index) => Word::Option {
            long: spec.options[index].long,
            kind: spec.options[index].kind,
            attached,
        },
    }
}

/// An option string an abbreviation matches: the string, the option's index
/// (`None` for help) and the text attached to the word.
type Abbreviation<'a> = (String, Option<usize>, Option<&'a [u8]>);

/// argparse's `_parse_optional` (Python 3.11, `allow_abbrev=True`).
fn classify<'a>(spec: &'static CommandSpec, word: &'a OsStr) -> Result<Word<'a>, Ambiguous> {
    let bytes = word.as_encoded_bytes();
    if bytes.first() != Some(&b'-') {
        return Ok(Word::Positional);
    }
    if bytes == b"--" {
        return Ok(Word::Separator);
    }
    let exact = |name: &[u8]| option_strings(spec).find(|(string, _)| string.as_bytes() == name);
    if let Some((_, index)) = exact(bytes) {
        return Ok(word_for(spec, index, None));
    }
    if bytes.len() == 1 {
        return Ok(Word::Positional);
    }
    let (name, attached) = split_attached(bytes);
    if attached.is_some() {
        if let Some((_, index)) = exact(name) {
            return Ok(word_for(spec, index, attached));
        }
    }
    // Abbreviations: a `--` word matches every option starting with its name;
    // a single-dash word `-hX` is `-h` with `X` attached.
    let matches: Vec<Abbreviation> = if bytes[1] == b'-' {
        option_strings(spec)
            .filter(|(string, _)| string.as_bytes().starts_with(name))
            .map(|(string, index)| (string, index, attached))
            .collect()
    } else {
        option_strings(spec)
            .filter_map(|(string, index)| {
                if string.as_bytes() == &bytes[..2] {
                    Some((string, index, Some(&bytes[2..])))
                } else if string.as_bytes().starts_with(bytes) {
                    Some((string, index, None))
                } else {
                    None
                }
            })
            .collect()
    };
    match matches.as_slice() {
        [(_, index, attached)] => return Ok(word_for(spec, *index, *attached)),
        [] => {}
        _ => {
            let names: Vec<&str> = matches
                .iter()
                .map(|(string, _, _)| string.as_str())
                .collect();
            return Err(Ambiguous {
                spec,
                message: format!(
                    "ambiguous option: {} could match {}",
                    String::from_utf8_lossy(bytes),
                    names.join(", ")
                ),
            });
        }
    }
    let text = String::from_utf8_lossy(bytes);
    if looks_like_negative_number(&text) || bytes.contains(&b' ') {
        return Ok(Word::Positional);
    }
    Ok(Word::Unknown)
}

fn joined(long: &str, value: &[u8]) -> OsString {
    let mut word = OsString::from(format!("--{long}="));
    word.push(std::os::unix::ffi::OsStrExt::from_bytes(value) as &OsStr);
    word
}

/// The text attached to `-h`/`--help` that argparse refuses ("ignored explicit
/// argument"), or `None` if it is only more `h`s (`-hh` is help twice).
fn help_leftover(attached: Option<&[u8]>, single_dash: bool) -> Option<&[u8]> {
    let attached = attached?;
    if !single_dash || attached.is_empty() {
        return Some(attached);
    }
    let rest = attached.iter().position(|&byte| byte != b'h');
    rest.map(|at| &attached[at..])
}

fn invalid_choice_message(word: &OsStr, choices: &[&str]) -> String {
    let listed: Vec<String> = choices
        .iter()
        .map(|choice| repr_surrogateescape(choice.as_bytes()))
        .collect();
    format!(
        "argument {}: invalid choice: {} (choose from {})",
        SUBCOMMAND_DEST,
        repr_surrogateescape(word.as_encoded_bytes()),
        listed.join(", ")
    )
}

/// Each word's class with the parser that reads it, and the parser of the
/// last word.
type ClassifiedWords<'w> = (Vec<(Word<'w>, &'static CommandSpec)>, &'static CommandSpec);

/// Every word classified before any is consumed, as argparse reads them,
/// so an ambiguous abbreviation wins over earlier errors; a subcommand's
/// words are read by the subcommand's parser, with its options. Returns
/// each word's class and reading parser, and the parser of the last one.
fn classify_all<'w>(
    top: &'static CommandSpec,
    words: &'w [OsString],
) -> Result<ClassifiedWords<'w>, Ambiguous> {
    let mut spec = top;
    let mut classes = Vec::with_capacity(words.len());
    let mut after_separator = false;
    let mut first_positional = true;
    for word in words {
        let class = if after_separator {
            Word::Positional
        } else {
            classify(spec, word)?
        };
        let positional = matches!(class, Word::Positional);
        after_separator |= matches!(class, Word::Separator);
        classes.push((class, spec));
        if positional && std::mem::take(&mut first_positional) {
            if let Some(sub) = spec.subcommands.iter().find(|sub| word == sub.name) {
                spec = sub;
            }
        }
    }
    Ok((classes, spec))
}

/// Rewrites `words` (without the program name) into the canonical form.
pub(crate) fn canonicalize(
    top: &'static CommandSpec,
    words: &[OsString],
) -> Result<Canonical, Ambiguous> {
    let (classes, spec) = classify_all(top, words)?;
    let mut canonical = Canonical {
        words: Vec::with_capacity(words.len()),
        subcommand: (!std::ptr::eq(spec, top)).then_some(spec),
        help_of: None,
        stopped: None,
        extras: Vec::new(),
    };
    // Whether the positional argument (or subcommand name) of the command
    // being read is still to come.
    let mut awaiting_positional = true;
    let mut positional_at = None;
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        let (class, owner) = &classes[index];
        index += 1;
        match class {
            Word::Help { attached } => {
                let single_dash = word.as_encoded_bytes().get(1) != Some(&b'-');
                match help_leftover(*attached, single_dash) {
                    None => {
                        canonical.help_of.get_or_insert(*owner);
                        canonical.words.push("--help".into());
                    }
                    // clap refuses a value on --help, at this position.
                    Some(leftover) => canonical.words.push(joined("help", leftover)),
                }
            }
            Word::Option {
                long,
                kind,
                attached,
            } => match (kind, attached) {
                // argparse drops a `--` value and keeps an empty list, which
                // no helper can use: refused here (a documented deviation).
                (kind, Some([b'-', b'-'])) if !matches!(kind, ValueKind::Flag) => {
                    let message = format!("argument --{long}: expected one argument");
                    canonical.stopped = Some((*owner, message));
                    break;
                }
                (_, Some(value)) => canonical.words.push(joined(long, value)),
                (ValueKind::Flag, None) => canonical.words.push(format!("--{long}").into()),
                (_, None) => {
                    // argparse takes the next word as the value only if it
                    // reads as a value (never the `--` separator).
                    let Some((Word::Positional, _)) = classes.get(index) else {
                        let message = format!("argument --{long}: expected one argument");
                        canonical.stopped = Some((*owner, message));
                        break;
                    };
                    canonical
                        .words
                        .push(joined(long, words[index].as_encoded_bytes()));
                    index += 1;
                }
            },
            // A separator next to the positional word is consumed with it;
            // before a subcommand name it is taken as the (invalid) name, and
            // as the last word it leaves the subcommand missing (argparse's
            // PARSER pattern needs a word after it); anywhere else it is an
            // unrecognized argument.
            Word::Separator
                if awaiting_positional && !owner.subcommands.is_empty() && index == words.len() => {
            }
            Word::Separator if awaiting_positional && !owner.subcommands.is_empty() => {
                let names: Vec<&str> = owner.subcommands.iter().map(|sub| sub.name).collect();
                canonical.stopped = Some((*owner, invalid_choice_message(word, &names)));
                break;
            }
            Word::Separator
                if awaiting_positional
                    && owner.positional.is_some()
                    && matches!(classes.get(index), Some((Word::Positional, _))) =>
            {
                canonical.words.push(word.clone());
            }
            Word::Separator if positional_at.is_some_and(|at| at + 2 == index) => {}
            Word::Separator => canonical.extras.push(word.clone()),
            Word::Positional if awaiting_positional && !owner.subcommands.is_empty() => {
                if !owner.subcommands.iter().any(|sub| word == sub.name) {
                    let names: Vec<&str> = owner.subcommands.iter().map(|sub| sub.name).collect();
                    canonical.stopped = Some((*owner, invalid_choice_message(word, &names)));
                    break;
                }
                // The subcommand's own positional argument is still to come.
                awaiting_positional = true;
                canonical.words.push(word.clone());
                continue;
            }
            Word::Positional if awaiting_positional && owner.positional.is_some() => {
                let positional = owner.positional.as_ref().expect("checked above");
                if !positional.choices.iter().any(|choice| word == *choice) {
                    let message = invalid_choice_message(word, positional.choices).replacen(
                        SUBCOMMAND_DEST,
                        positional.dest,
                        1,
                    );
                    canonical.stopped = Some((*owner, message));
                    break;
                }
                awaiting_positional = false;
                positional_at = Some(index - 1);
                canonical.words.push(word.clone());
            }
            Word::Positional | Word::Unknown => canonical.extras.push(word.clone()),
        }
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_numbers_follow_argparse() {
        for word in ["-1", "-007", "-.5", "-1.5", "-\u{663}", "-5\n"] {
            assert!(looks_like_negative_number(word), "{word:?}");
        }
        for word in ["-", "-.", "-1.", "-1e5", "-x", "-1-", "-5\n\n", "--5"] {
            assert!(!looks_like_negative_number(word), "{word:?}");
        }
    }
}

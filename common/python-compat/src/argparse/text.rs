//! The texts argparse prints: usage lines, `--help` pages, error lines and
//! `repr()` of offending values.
//!
//! Usage and error lines reproduce argparse's format byte for byte at its
//! default width (80 columns, as when stdout is not a terminal), so a usage
//! error reads the same as the Python helper's. Help pages keep argparse's
//! layout with our own descriptions.

use super::{CommandSpec, OptionSpec, ValueKind};

/// argparse formats for `COLUMNS` (default 80) minus 2.
const WIDTH: usize = 78;
/// argparse's `max_help_position`.
const MAX_HELP_POSITION: usize = 24;
const HELP_INVOCATION: &str = "-h, --help";
const HELP_HELP: &str = "show this help message and exit";

/// argparse's metavar for an option: its destination in upper case.
fn metavar(option: &OptionSpec) -> String {
    match option.kind {
        ValueKind::Choice(choices) => format!("{{{}}}", choices.join(",")),
        _ => option.long.replace('-', "_").to_uppercase(),
    }
}

/// The usage fragments of the optionals and the positionals, split the way
/// argparse's wrapping regex splits them: a bracketed optional is one part, a
/// required one is two (its flag and its metavar may land on different lines).
fn usage_parts(spec: &CommandSpec) -> (Vec<String>, Vec<String>) {
    let mut optionals = vec!["[-h]".to_string()];
    for option in spec.options {
        let flag = format!("--{}", option.long);
        match (option.kind, option.required) {
            (ValueKind::Flag, _) => optionals.push(format!("[{flag}]")),
            (_, true) => {
                optionals.push(flag);
                optionals.push(metavar(option));
            }
            (_, false) => optionals.push(format!("[{flag} {}]", metavar(option))),
        }
    }
    let mut positionals = Vec::new();
    if let Some(positional) = &spec.positional {
        positionals.push(format!("{{{}}}", positional.choices.join(",")));
    }
    if !spec.subcommands.is_empty() {
        positionals.push(subcommand_choices(spec));
        positionals.push("...".to_string());
    }
    (optionals, positionals)
}

fn subcommand_choices(spec: &CommandSpec) -> String {
    let names: Vec<&str> = spec.subcommands.iter().map(|sub| sub.name).collect();
    format!("{{{}}}", names.join(","))
}

/// argparse's `get_lines`: greedy filling of `parts` into lines of `WIDTH`.
fn fill_parts(parts: &[String], indent: usize, first_prefix: Option<usize>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line: Vec<&str> = Vec::new();
    let mut length = first_prefix.unwrap_or(indent) as isize - 1;
    for part in parts {
        if length + 1 + part.len() as isize > WIDTH as isize && !line.is_empty() {
            lines.push(format!("{}{}", " ".repeat(indent), line.join(" ")));
            line.clear();
            length = indent as isize - 1;
        }
        line.push(part);
        length += part.len() as isize + 1;
    }
    if !line.is_empty() {
        lines.push(format!("{}{}", " ".repeat(indent), line.join(" ")));
    }
    if first_prefix.is_some() {
        if let Some(first) = lines.first_mut() {
            *first = first[indent..].to_string();
        }
    }
    lines
}

/// `usage: ...` exactly as argparse's `format_usage`, ending with a newline.
pub(crate) fn usage(spec: &CommandSpec, prog: &str) -> String {
    const PREFIX: &str = "usage: ";
    let (optionals, positionals) = usage_parts(spec);
    let all: Vec<&str> = optionals
        .iter()
        .chain(&positionals)
        .map(String::as_str)
        .collect();
    let flat = format!("{prog} {}", all.join(" "));
    if PREFIX.len() + flat.len() <= WIDTH {
        return format!("{PREFIX}{flat}\n");
    }
    let mut lines;
    if (PREFIX.len() + prog.len()) as f64 <= 0.75 * WIDTH as f64 {
        let indent = PREFIX.len() + prog.len() + 1;
        let mut first = vec![prog.to_string()];
        first.extend(optionals);
        lines = fill_parts(&first, indent, Some(PREFIX.len()));
        lines.extend(fill_parts(&positionals, indent, None));
    } else {
        let indent = PREFIX.len();
        let parts: Vec<String> = optionals.iter().chain(&positionals).cloned().collect();
        lines = fill_parts(&parts, indent, None);
        if lines.len() > 1 {
            lines = fill_parts(&optionals, indent, None);
            lines.extend(fill_parts(&positionals, indent, None));
        }
        lines.insert(0, prog.to_string());
    }
    format!("{PREFIX}{}\n", lines.join("\n"))
}

/// What argparse's `error()` prints before exiting with status 2.
pub(crate) fn usage_error(spec: &CommandSpec, prog: &str, message: &str) -> String {
    format!("{}{prog}: error: {message}\n", usage(spec, prog))
}

/// Greedy word wrap, like `textwrap.wrap` on whitespace-collapsed text.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// One entry of a help section: invocation, help text, indentation.
struct HelpEntry {
    invocation: String,
    help: &'static str,
    indent: usize,
}

fn render_entries(out: &mut String, entries: &[HelpEntry], help_position: usize) {
    let help_width = WIDTH.saturating_sub(help_position).max(11);
    for entry in entries {
        let lines = wrap(entry.help, help_width);
        let action_width = help_position - entry.indent - 2;
        out.push_str(&" ".repeat(entry.indent));
        out.push_str(&entry.invocation);
        let mut rest = lines.iter();
        match rest.next() {
            None => out.push('\n'),
            Some(first) if entry.invocation.len() <= action_width => {
                let pad = action_width - entry.invocation.len() + 2;
                out.push_str(&" ".repeat(pad));
                out.push_str(first);
                out.push('\n');
            }
            Some(first) => {
                out.push('\n');
                out.push_str(&" ".repeat(help_position));
                out.push_str(first);
                out.push('\n');
            }
        }
        for line in rest {
            out.push_str(&" ".repeat(help_position));
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// The `--help` page in argparse's layout: usage, description, then the
/// positional arguments and options with help aligned at argparse's column.
pub(crate) fn help(spec: &CommandSpec, prog: &str) -> String {
    let mut positionals = Vec::new();
    if let Some(positional) = &spec.positional {
        positionals.push(HelpEntry {
            invocation: format!("{{{}}}", positional.choices.join(",")),
            help: positional.help,
            indent: 2,
        });
    }
    if !spec.subcommands.is_empty() {
        positionals.push(HelpEntry {
            invocation: subcommand_choices(spec),
            help: "",
            indent: 2,
        });
        for sub in spec.subcommands {
            positionals.push(HelpEntry {
                invocation: sub.name.to_string(),
                help: sub.summary,
                indent: 4,
            });
        }
    }
    let mut options = vec![HelpEntry {
        invocation: HELP_INVOCATION.to_string(),
        help: HELP_HELP,
        indent: 2,
    }];
    for option in spec.options {
        let invocation = match option.kind {
            ValueKind::Flag => format!("--{}", option.long),
            _ => format!("--{} {}", option.long, metavar(option)),
        };
        options.push(HelpEntry {
            invocation,
            help: option.help,
            indent: 2,
        });
    }
    let longest = positionals
        .iter()
        .chain(&options)
        .map(|entry| entry.invocation.len() + entry.indent)
        .max()
        .unwrap_or(0);
    let help_position = (longest + 2).min(MAX_HELP_POSITION);

    let mut out = usage(spec, prog);
    for paragraph in spec.description.split("\n\n") {
        if paragraph.trim().is_empty() {
            continue;
        }
        out.push('\n');
        for line in wrap(paragraph, WIDTH) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    if !positionals.is_empty() {
        out.push_str("\npositional arguments:\n");
        render_entries(&mut out, &positionals, help_position);
    }
    out.push_str("\noptions:\n");
    render_entries(&mut out, &options, help_position);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_usage_stays_on_one_line() {
        let spec = CommandSpec {
            name: "inspect",
            summary: "",
            description: "",
            positional: None,
            options: &[OptionSpec {
                long: "root",
                kind: ValueKind::Path,
                required: true,
                help: "",
            }],
            subcommands: &[],
        };
        assert_eq!(
            usage(&spec, "execution-manage inspect"),
            "usage: execution-manage inspect [-h] --root ROOT\n"
        );
    }
}

//! The two command-line forms of `uninstall`.
//!
//! - The script form, `uninstall [--yes] [--purge-state] [-h|--help]`, takes
//!   its roots from the environment exactly as `uninstall.sh` does and parses
//!   options with the script's loop: `-h/--help` prints the usage (exit 0),
//!   any other word is `Unknown option` plus the usage on stderr (exit 2).
//! - The helper form, `uninstall --root P --config-root P --state-root P
//!   --home P [--yes] [--purge-state]`, is the command line install.sh's
//!   split path hands to `execution_uninstall.py`; it is parsed with
//!   argparse's rules. It is chosen when any argument spells one of the four
//!   path options in full (`--root` or `--root=...`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use python_compat::argparse::{CommandSpec, OptionSpec, ValueKind};

/// The helper form's parser (`execution_uninstall.main`'s argparse parser).
pub static HELPER_SPEC: CommandSpec = CommandSpec {
    name: "uninstall",
    summary: "",
    description: "Idle-only uninstall of a healthy, independently managed execution worker.\n\n\
                  Unjournaled stopped or broken installations require separate ownership \
                  recovery. A retained uninstall intent can resume only after its ownership is \
                  revalidated. Pending updates/activation, live agents, changed native jobs, or \
                  a failed native stop preserve all runtime and data files. State is retained \
                  unless the operator separately confirms its exact path at an interactive \
                  terminal.",
    positional: None,
    options: &[
        path_option("root"),
        path_option("config-root"),
        path_option("state-root"),
        path_option("home"),
        OptionSpec {
            long: "yes",
            kind: ValueKind::Flag,
            required: false,
            help: "",
        },
        OptionSpec {
            long: "purge-state",
            kind: ValueKind::Flag,
            required: false,
            help: "",
        },
    ],
    subcommands: &[],
};

const fn path_option(long: &'static str) -> OptionSpec {
    OptionSpec {
        long,
        kind: ValueKind::Path,
        required: true,
        help: "",
    }
}

/// The four path options that select the helper form.
const HELPER_PATH_OPTIONS: [&str; 4] = ["--root", "--config-root", "--state-root", "--home"];

/// True when the words use the helper form.
pub fn is_helper_form(words: &[OsString]) -> bool {
    words.iter().any(|word| {
        let bytes = word.as_bytes();
        let name = bytes.split(|&byte| byte == b'=').next().unwrap_or(bytes);
        HELPER_PATH_OPTIONS
            .iter()
            .any(|option| option.as_bytes() == name)
    })
}

/// The outcome of the script's option loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScriptOptions {
    /// Run with these flags.
    Run {
        /// `--yes`.
        assume_yes: bool,
        /// `--purge-state`.
        purge_state: bool,
    },
    /// `-h`/`--help`: print the usage on stdout, exit 0.
    Help,
    /// Any other word: `Unknown option: <word>` and the usage on stderr, exit 2.
    Unknown(OsString),
}

/// The script's `while (($#)); do case "$1" in ...` loop.
pub(crate) fn parse_script_options(words: &[OsString]) -> ScriptOptions {
    let mut assume_yes = false;
    let mut purge_state = false;
    for word in words {
        match word.as_bytes() {
            b"--yes" => assume_yes = true,
            b"--purge-state" => purge_state = true,
            b"-h" | b"--help" => return ScriptOptions::Help,
            _ => return ScriptOptions::Unknown(word.clone()),
        }
    }
    ScriptOptions::Run {
        assume_yes,
        purge_state,
    }
}

/// The script's `usage` text, which names the (normalised) state root
/// where `{state}` stands.
const USAGE: [&str; 15] = [
    "Usage: ./uninstall.sh [--yes] [--purge-state]",
    "",
    "Stops and removes the AgentsServer user service, versioned release runtime,",
    "and generated configuration (including the access token). Chat history, jobs,",
    "files, secure-peer credentials, and terminals under {state} are preserved",
    "by default so a later ./install.sh picks ordinary AgentsServer state back up.",
    "Preserved Team Hub state is not auto-reactivated in this beta; it requires",
    "signed managed recovery or support-assisted restoration.",
    "",
    "  --yes           Do not prompt before removing the service, releases, and",
    "                   configuration.",
    "  --purge-state   Also delete {state} (chat history, jobs, files, tokens,",
    "                   and secure-peer credentials). This cannot be undone and",
    "                   always requires typing the exact state path interactively;",
    "                   --yes never bypasses it.",
];

/// The usage text with the state root filled in (bytes: it may not be UTF-8).
pub(crate) fn usage(state_root: &[u8]) -> Vec<u8> {
    let mut text = Vec::new();
    for line in USAGE {
        let mut parts = line.split("{state}");
        text.extend_from_slice(parts.next().unwrap_or_default().as_bytes());
        for rest in parts {
            text.extend_from_slice(state_root);
            text.extend_from_slice(rest.as_bytes());
        }
        text.push(b'\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn script_loop_stops_at_help_or_the_first_unknown_word() {
        assert_eq!(
            parse_script_options(&words(&["--yes", "--purge-state"])),
            ScriptOptions::Run {
                assume_yes: true,
                purge_state: true
            }
        );
        assert_eq!(
            parse_script_options(&words(&["--yes", "-h", "--bogus"])),
            ScriptOptions::Help
        );
        assert_eq!(
            parse_script_options(&words(&["--bogus", "--help"])),
            ScriptOptions::Unknown("--bogus".into())
        );
        assert_eq!(
            parse_script_options(&words(&["--yes=1"])),
            ScriptOptions::Unknown("--yes=1".into())
        );
    }

    #[test]
    fn usage_keeps_the_indentation_and_names_the_state_root() {
        let text = String::from_utf8(usage(b"/s")).unwrap();
        assert!(text.starts_with("Usage: ./uninstall.sh [--yes] [--purge-state]\n\nStops"));
        assert!(text.contains(
            "\n                   configuration.\n  --purge-state   Also delete /s (chat"
        ));
        assert!(text.ends_with("                   --yes never bypasses it.\n"));
        assert_eq!(text.lines().count(), 15);
    }

    #[test]
    fn helper_form_needs_a_fully_spelled_path_option() {
        assert!(is_helper_form(&words(&["--yes", "--root", "/x"])));
        assert!(is_helper_form(&words(&["--home=/h"])));
        assert!(!is_helper_form(&words(&["--ro", "/x"])));
        assert!(!is_helper_form(&words(&["--yes"])));
    }
}

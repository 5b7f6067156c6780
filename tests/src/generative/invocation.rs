//! Commands as the installer, the server or support staff give them, and
//! the argv variations a hand-typed or scripted call may carry.

use std::fmt;

use super::random::Random;
use super::scenario::Program;

/// The layout options `execution_activation.py` takes for its commands.
const LAYOUT_ARGS: [&str; 16] = [
    "--root",
    "{root}",
    "--config-root",
    "{config}",
    "--state-root",
    "{state}",
    "--home",
    "{home}",
    "--platform",
    "Linux",
    "--release-dir",
    "{release}",
    "--bind",
    "127.0.0.1",
    "--port",
    "7850",
];

/// The runner's required options, as the server passes them.
const RUNNER_ARGS: [&str; 12] = [
    "--status-file",
    "{status}",
    "--public-key",
    "{base}/release-public-key.pem",
    "--port",
    "{host-port}",
    "--bind",
    "127.0.0.1",
    "--expected-server-identity",
    "srv-campaign",
    "--update-id",
    "0123456789abcdef0123456789abcdef",
];

/// Each program's commands: words (with `{placeholders}`), then
/// [`LAYOUT_ARGS`] or [`RUNNER_ARGS`] where the template says so.
fn templates(program: Program) -> &'static [(&'static [&'static str], Extra)] {
    match program {
        Program::Activation => &[
            (&["detect", "--root", "{root}"], Extra::None),
            (&["detect", "--root", "{root}"], Extra::None),
            (
                &[
                    "candidate-api-contract",
                    "--root",
                    "{root}",
                    "--candidate-source",
                    "{release}",
                ],
                Extra::None,
            ),
            (&["recovery-state"], Extra::Layout),
            (&["previous-worker"], Extra::Layout),
            (&["release"], Extra::Layout),
            (&["durability"], Extra::Layout),
            (&["snapshot"], Extra::Layout),
            (&["preflight"], Extra::Layout),
        ],
        Program::Manage => &[
            (&["inspect", "--root", "{root}"], Extra::None),
            (&["inspect", "--root", "{root}"], Extra::None),
            (&["recover", "--root", "{root}"], Extra::None),
            (&["recover", "--root", "{root}"], Extra::None),
            (
                &[
                    "apply",
                    "--layout",
                    "{base}/layout.json",
                    "--scope",
                    "worker",
                ],
                Extra::None,
            ),
            (
                &[
                    "apply",
                    "--layout",
                    "{base}/layout.json",
                    "--scope",
                    "gateway",
                ],
                Extra::None,
            ),
        ],
        Program::Handoff => &[
            (
                &["release", "--root", "{root}", "--handoff-file", "{handoff}"],
                Extra::None,
            ),
            (
                &[
                    "retry-failed",
                    "--root",
                    "{root}",
                    "--status-file",
                    "{status}",
                    "--expected-status",
                    "-",
                ],
                Extra::Status,
            ),
        ],
        Program::Uninstall => &[
            (&["--yes"], Extra::None),
            (&["--yes"], Extra::None),
            (&["--yes", "--purge-state"], Extra::None),
            (&[], Extra::None),
            (&["--help"], Extra::None),
        ],
        Program::Runner => &[
            (&[], Extra::Runner),
            (&["--expected-version", "1.0.1"], Extra::Runner),
            (&["--expected-version", "1.0.1"], Extra::Runner),
            (&["--expected-version", "1.0.1"], Extra::Runner),
            (
                &[
                    "--expected-version",
                    "1.0.1",
                    "--auth-token-file",
                    "{token}",
                ],
                Extra::Runner,
            ),
            (
                &[
                    "--expected-version",
                    "1.0.1",
                    "--execution-handoff-file",
                    "{handoff}",
                ],
                Extra::Runner,
            ),
            (&["--recover-only"], Extra::Runner),
            (
                &["--recover-only", "--execution-handoff-file", "{handoff}"],
                Extra::Runner,
            ),
            (
                &["--track", "beta", "--expected-version", "1.0.1"],
                Extra::Runner,
            ),
        ],
    }
}

/// What a template adds to its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    None,
    Layout,
    Runner,
    /// No words; the installed status row on stdin.
    Status,
}

/// A change to a command's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variation {
    /// The chosen option cut to a prefix of this many characters (at least
    /// three: `--x`).
    Abbreviate(u8, u8),
    /// The chosen option and its value as `--option=value`.
    Equals(u8),
    /// The chosen option repeated with another value after the rest.
    Repeat(u8),
    /// The chosen option's value emptied.
    EmptyValue(u8),
    /// A byte that is not UTF-8 appended to the chosen option's value.
    NonUtf8(u8),
    /// The chosen option and its value left out.
    Drop(u8),
    /// An option neither side knows, appended.
    Unknown,
    /// `--` in front of the chosen option.
    DoubleDash(u8),
    /// A `/` in front of the chosen option's value: a path `//…`, which
    /// POSIX (and `pathlib`) keep apart from `/…`.
    DoubleSlash(u8),
}

/// One command of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The program it runs.
    pub program: Program,
    /// The template's index in the program's list.
    pub template: u8,
    /// Applied in order.
    pub variations: Vec<Variation>,
}

/// One command for `program`, with up to two variations where the original
/// parses its argv with argparse (the handoff driver and bash do not).
pub(super) fn generate(random: &mut Random, program: Program) -> Invocation {
    let template = random.below(templates(program).len()) as u8;
    let parses = matches!(
        program,
        Program::Activation | Program::Manage | Program::Runner
    );
    let count = if parses {
        random.pick(&[0, 0, 1, 1, 2])
    } else {
        0
    };
    let mut variations: Vec<Variation> = (0..count).map(|_| variation(random)).collect();
    if program == Program::Uninstall && random.chance(1, 6) {
        variations.push(random.pick(&[Variation::Unknown, Variation::Repeat(0)]));
    }
    Invocation {
        program,
        template,
        variations,
    }
}

fn variation(random: &mut Random) -> Variation {
    let pick = random.below(256) as u8;
    match random.below(9) {
        0 => Variation::Abbreviate(pick, random.between(3, 12) as u8),
        1 => Variation::Equals(pick),
        2 => Variation::Repeat(pick),
        3 => Variation::EmptyValue(pick),
        4 => Variation::NonUtf8(pick),
        5 => Variation::Drop(pick),
        6 => Variation::Unknown,
        7 => Variation::DoubleDash(pick),
        _ => Variation::DoubleSlash(pick),
    }
}

impl Invocation {
    /// The argv words, `{placeholders}` still in.
    pub fn words(&self) -> Vec<Vec<u8>> {
        let (words, extra) = templates(self.program)[usize::from(self.template)];
        let mut argv: Vec<Vec<u8>> = words.iter().map(|word| word.as_bytes().to_vec()).collect();
        let tail: &[&str] = match extra {
            Extra::Layout => &LAYOUT_ARGS,
            Extra::Runner => &RUNNER_ARGS,
            Extra::None | Extra::Status => &[],
        };
        argv.extend(tail.iter().map(|word| word.as_bytes().to_vec()));
        for variation in &self.variations {
            apply(*variation, &mut argv);
        }
        argv
    }

    /// Whether the installed status row goes to stdin.
    pub fn feeds_status(&self) -> bool {
        templates(self.program)[usize::from(self.template)].1 == Extra::Status
    }

    /// The same command with one variation fewer, for each variation.
    pub fn smaller(&self) -> Vec<Invocation> {
        (0..self.variations.len())
            .map(|at| {
                let mut simpler = self.clone();
                simpler.variations.remove(at);
                simpler
            })
            .collect()
    }
}

/// The positions of `--option value` pairs (and lone flags) in `argv`.
fn options(argv: &[Vec<u8>]) -> Vec<usize> {
    (0..argv.len())
        .filter(|&at| argv[at].starts_with(b"--") && argv[at].len() > 2)
        .collect()
}

fn has_value(argv: &[Vec<u8>], at: usize) -> bool {
    argv.get(at + 1)
        .is_some_and(|next| !next.starts_with(b"--"))
}

fn apply(variation: Variation, argv: &mut Vec<Vec<u8>>) {
    if variation == Variation::Unknown {
        argv.push(b"--campaign-unknown".to_vec());
        return;
    }
    let options = options(argv);
    let pick = match variation {
        Variation::Abbreviate(pick, _)
        | Variation::Equals(pick)
        | Variation::Repeat(pick)
        | Variation::EmptyValue(pick)
        | Variation::NonUtf8(pick)
        | Variation::Drop(pick)
        | Variation::DoubleDash(pick)
        | Variation::DoubleSlash(pick) => pick,
        Variation::Unknown => unreachable!(),
    };
    let Some(&at) = options.get(usize::from(pick) % options.len().max(1)) else {
        return;
    };
    let valued = has_value(argv, at);
    match variation {
        Variation::Abbreviate(_, keep) => {
            let keep = usize::from(keep).clamp(3, argv[at].len());
            argv[at].truncate(keep);
        }
        Variation::Equals(_) if valued => {
            let value = argv.remove(at + 1);
            argv[at].push(b'=');
            argv[at].extend(value);
        }
        Variation::Repeat(_) => {
            let mut again = vec![argv[at].clone()];
            if valued {
                again.push(b"{base}/elsewhere".to_vec());
            }
            argv.extend(again);
        }
        Variation::EmptyValue(_) if valued => argv[at + 1].clear(),
        Variation::NonUtf8(_) if valued => argv[at + 1].push(0xff),
        Variation::DoubleSlash(_) if valued => argv[at + 1].insert(0, b'/'),
        Variation::Drop(_) => {
            argv.drain(at..at + if valued { 2 } else { 1 });
        }
        Variation::DoubleDash(_) => argv.insert(at, b"--".to_vec()),
        _ => {}
    }
}

impl fmt::Display for Invocation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<String> = self
            .words()
            .iter()
            .map(|word| match std::str::from_utf8(word) {
                Ok(text) if !text.is_empty() && !text.contains(' ') => text.to_string(),
                _ => format!("{:?}", String::from_utf8_lossy(word)).replace('\u{fffd}', "\\xff"),
            })
            .collect();
        write!(formatter, "{} {}", self.program.name(), words.join(" "))?;
        if self.feeds_status() {
            write!(formatter, " < the installed status row")?;
        }
        Ok(())
    }
}

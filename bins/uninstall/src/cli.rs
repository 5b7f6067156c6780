//! uninstall's command line, as `uninstall.sh` reads it before doing
//! anything: the three managed roots from the environment, each normalised
//! and refused if unsafe (exit 2), then the exact-match option loop (`--yes`,
//! `--purge-state`, `-h/--help`; anything else is a usage error, exit 2).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The program name in messages.
pub const PROGRAM: &str = "uninstall";

/// The roots the script manages, normalised as `normalize_managed_path` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub install: PathBuf,
    pub config: PathBuf,
    pub state: PathBuf,
    /// `$HOME` as given (the legacy `~/.zenithbot-agent` link lives there).
    pub home: PathBuf,
}

/// The checked roots and the options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub roots: Roots,
    pub assume_yes: bool,
    pub purge_state: bool,
}

/// How the script ends before doing anything: what it prints and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlyExit {
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl EarlyExit {
    fn refusal(status: i32, message: impl AsRef<[u8]>) -> EarlyExit {
        let mut stderr = message.as_ref().to_vec();
        stderr.push(b'\n');
        EarlyExit {
            status,
            stdout: Vec::new(),
            stderr,
        }
    }

    /// Prints the texts and exits with the status.
    pub fn exit(self) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().write_all(&self.stdout);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().write_all(&self.stderr);
        std::process::exit(self.status)
    }
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The script's `usage` text for a state root.
fn usage(state_root: &Path) -> Vec<u8> {
    let state = state_root.as_os_str().as_bytes();
    concat(&[
        b"Usage: ./uninstall.sh [--yes] [--purge-state]\n\
          \n\
          Stops and removes the AgentsServer user service, versioned release runtime,\n\
          and generated configuration (including the access token). Chat history, jobs,\n\
          files, secure-peer credentials, and terminals under ",
        state,
        b" are preserved\n\
          by default so a later ./install.sh picks ordinary AgentsServer state back up.\n\
          Preserved Team Hub state is not auto-reactivated in this beta; it requires\n\
          signed managed recovery or support-assisted restoration.\n\
          \n  --yes           Do not prompt before removing the service, releases, and\n\
          \x20                  configuration.\n\
          \x20 --purge-state   Also delete ",
        state,
        b" (chat history, jobs, files, tokens,\n\
          \x20                  and secure-peer credentials). This cannot be undone and\n\
          \x20                  always requires typing the exact state path interactively;\n\
          \x20                  --yes never bypasses it.\n",
    ])
}

/// `dirname`/`basename` of an absolute path without trailing or repeated
/// slashes.
fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    let at = path.iter().rposition(|&byte| byte == b'/').unwrap_or(0);
    let parent: &[u8] = if at == 0 { b"/" } else { &path[..at] };
    (parent, &path[at + 1..])
}

fn os(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

/// `cd -P -- dir && pwd -P`: the physical directory, symlinks resolved.
fn physical_directory(dir: &[u8]) -> Option<Vec<u8>> {
    if dir.is_empty() {
        return None;
    }
    std::fs::canonicalize(os(dir))
        .ok()
        .filter(|path| path.is_dir())
        .map(|path| path.into_os_string().into_vec())
}

/// `normalize_managed_path label candidate`: the managed path with its
/// existing parents resolved physically and its last component kept as is
/// (removing a symlinked root must remove only the link).
fn normalize_managed_path(
    label: &str,
    candidate: &[u8],
    home: &[u8],
) -> Result<PathBuf, EarlyExit> {
    let refuse = |message: Vec<u8>| EarlyExit::refusal(2, message);
    if candidate.first() != Some(&b'/')
        || candidate.iter().any(|&byte| byte == b'\n' || byte == b'\r')
    {
        return Err(refuse(
            format!("{label} must be a non-empty absolute path without control characters.")
                .into_bytes(),
        ));
    }
    let mut candidate = candidate;
    while candidate != b"/" && candidate.ends_with(b"/") {
        candidate = &candidate[..candidate.len() - 1];
    }
    let probe = concat(&[candidate, b"/"]);
    let contains = |needle: &[u8]| probe.windows(needle.len()).any(|window| window == needle);
    if contains(b"/../") || contains(b"/./") || contains(b"//") {
        return Err(refuse(concat(&[
            label.as_bytes(),
            b" must not contain '.', '..', or repeated-slash path components: ",
            candidate,
        ])));
    }
    let (mut parent, leaf) = split_last(candidate);
    let mut leaf = leaf.to_vec();
    while parent != b"/" && !Path::new(os(parent)).is_dir() {
        let (grandparent, name) = split_last(parent);
        leaf = concat(&[name, b"/", &leaf]);
        parent = grandparent;
    }
    let Some(physical_parent) = physical_directory(parent) else {
        return Err(refuse(concat(&[
            b"Could not resolve the parent of ",
            label.as_bytes(),
            b": ",
            candidate,
        ])));
    };
    let normalized = if physical_parent == b"/" {
        concat(&[b"/", &leaf])
    } else {
        concat(&[&physical_parent, b"/", &leaf])
    };
    let Some(home_physical) = physical_directory(home) else {
        return Err(refuse(concat(&[b"Could not resolve HOME safely: ", home])));
    };
    let broad: [&[u8]; 15] = [
        b"/",
        b"/Applications",
        b"/Library",
        b"/System",
        b"/Users",
        b"/Volumes",
        b"/bin",
        b"/etc",
        b"/home",
        b"/opt",
        b"/private",
        b"/sbin",
        b"/tmp",
        b"/usr",
        b"/var",
    ];
    let home_broad = [
        &b""[..],
        b"/.config",
        b"/.local",
        b"/.local/share",
        b"/Library",
        b"/Library/LaunchAgents",
    ];
    if broad.contains(&normalized.as_slice())
        || home_broad
            .iter()
            .any(|suffix| concat(&[&home_physical, suffix]) == normalized)
    {
        return Err(refuse(concat(&[
            b"Refusing unsafe ",
            label.as_bytes(),
            b" target: ",
            &normalized,
        ])));
    }
    Ok(PathBuf::from(OsString::from_vec(normalized)))
}

fn overlap(first: &Path, second: &Path) -> bool {
    let (first, second) = (first.as_os_str().as_bytes(), second.as_os_str().as_bytes());
    let under = |inner: &[u8], outer: &[u8]| inner.starts_with(&concat(&[outer, b"/"]));
    first == second || under(first, second) || under(second, first)
}

/// `${NAME:-}`: unset and empty read the same.
fn non_empty(value: Option<OsString>) -> Option<OsString> {
    value.filter(|value| !value.is_empty())
}

/// Reads the roots from `environment` and the options from `words` (the
/// arguments after the program name) exactly as the script does, in its order.
pub fn parse(
    environment: impl Fn(&str) -> Option<OsString>,
    words: &[OsString],
) -> Result<Args, EarlyExit> {
    // `set -u`: the script expands $HOME unconditionally.
    let Some(home) = environment("HOME") else {
        return Err(EarlyExit::refusal(
            1,
            format!("{PROGRAM}: HOME: unbound variable"),
        ));
    };
    let home_bytes = home.as_bytes();
    let under_home = |suffix: &str| concat(&[home_bytes, suffix.as_bytes()]);
    let install = non_empty(environment("AGENTS_SERVER_INSTALL_DIR")).map_or_else(
        || under_home("/.local/share/agents-server"),
        OsString::into_vec,
    );
    let config = non_empty(environment("AGENTS_SERVER_CONFIG_DIR"))
        .map_or_else(|| under_home("/.config/agents-server"), OsString::into_vec);
    let state = [
        "AGENTSDOCK_STATE_DIR",
        "AGENTS_SERVER_STATE_DIR",
        "ZENITHBOT_AGENT_DIR",
    ]
    .iter()
    .find_map(|name| non_empty(environment(name)))
    .map_or_else(|| under_home("/.agentsdock"), OsString::into_vec);

    let install = normalize_managed_path("AGENTS_SERVER_INSTALL_DIR", &install, home_bytes)?;
    let config = normalize_managed_path("AGENTS_SERVER_CONFIG_DIR", &config, home_bytes)?;
    let state = normalize_managed_path("AGENTSDOCK_STATE_DIR", &state, home_bytes)?;
    for root in [&install, &config, &state] {
        if root
            .symlink_metadata()
            .is_ok_and(|meta| meta.file_type().is_symlink())
        {
            return Err(EarlyExit::refusal(
                2,
                concat(&[
                    b"Refusing symbolic-link managed root: ",
                    root.as_os_str().as_bytes(),
                ]),
            ));
        }
    }
    if overlap(&install, &config) || overlap(&install, &state) || overlap(&config, &state) {
        return Err(EarlyExit::refusal(
            2,
            "Refusing overlapping install, configuration, and state roots; each must be a separate directory.",
        ));
    }

    let mut args = Args {
        roots: Roots {
            install,
            config,
            state,
            home: PathBuf::from(home),
        },
        assume_yes: false,
        purge_state: false,
    };
    for word in words {
        match word.as_bytes() {
            b"--yes" => args.assume_yes = true,
            b"--purge-state" => args.purge_state = true,
            b"-h" | b"--help" => {
                return Err(EarlyExit {
                    status: 0,
                    stdout: usage(&args.roots.state),
                    stderr: Vec::new(),
                })
            }
            unknown => {
                let stderr = concat(&[
                    b"Unknown option: ",
                    unknown,
                    b"\n",
                    &usage(&args.roots.state),
                ]);
                return Err(EarlyExit {
                    status: 2,
                    stdout: Vec::new(),
                    stderr,
                });
            }
        }
    }
    Ok(args)
}

//! The three managed roots of `uninstall.sh` and its refusals of unsafe ones.
//!
//! The script derives the roots from its environment, normalises each with
//! `normalize_managed_path` (physical parents, the final component never
//! followed) and refuses broad system or home directories, symlinked roots and
//! roots that overlap. Every refusal exits 2 before anything else happens,
//! even before `--help` is looked at. Paths are handled as bytes, as bash
//! handles them, so a non-UTF-8 root is treated exactly like the script does.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Where the script puts things, after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManagedRoots {
    /// `INSTALL_ROOT`: releases, the install lock, the split layout manifest.
    pub install: PathBuf,
    /// `CONFIG_ROOT`: the generated configuration and access token.
    pub config: PathBuf,
    /// `STATE_ROOT`: chat history, jobs, files, secure-peer credentials.
    pub state: PathBuf,
    /// `$HOME` exactly as given (the script never normalises it for the
    /// service file, the legacy alias or the split helper's `--home`).
    pub home: PathBuf,
}

impl ManagedRoots {
    /// `$HOME/.zenithbot-agent`, the legacy alias a purge unlinks.
    pub(crate) fn legacy_state_alias(&self) -> PathBuf {
        join_bytes(self.home.as_os_str(), b"/.zenithbot-agent")
    }
}

/// Why the roots were refused: the script's message and exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootRefusal {
    /// One line for stderr (without the newline).
    pub message: Vec<u8>,
    /// 2 for every path refusal; 1 when `HOME` is unset (bash's `set -u`).
    pub status: u8,
}

impl RootRefusal {
    fn unsafe_path(message: Vec<u8>) -> Self {
        RootRefusal { message, status: 2 }
    }
}

/// The environment the roots come from (injected so tests need not mutate
/// the process environment).
pub(crate) trait Environment {
    /// The variable's value, `None` when unset.
    fn var(&self, name: &str) -> Option<OsString>;
}

/// The real process environment.
pub(crate) struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

/// Computes and checks the roots exactly as the top of `uninstall.sh` does.
pub(crate) fn managed_roots(env: &dyn Environment) -> Result<ManagedRoots, RootRefusal> {
    // `${VAR:-default}` and `[[ -n $VAR ]]`: an empty variable counts as unset.
    let set = |name: &str| env.var(name).filter(|value| !value.is_empty());
    // Under `set -u` the script dies on the first expansion of an unset HOME,
    // which always happens (LEGACY_STATE_ROOT uses it unconditionally).
    let Some(home) = env.var("HOME") else {
        return Err(RootRefusal {
            message: b"uninstall: HOME: unbound variable".to_vec(),
            status: 1,
        });
    };
    let install = set("AGENTS_SERVER_INSTALL_DIR")
        .unwrap_or_else(|| join_bytes(&home, b"/.local/share/agents-server").into());
    let config = set("AGENTS_SERVER_CONFIG_DIR")
        .unwrap_or_else(|| join_bytes(&home, b"/.config/agents-server").into());
    let state = set("AGENTSDOCK_STATE_DIR")
        .or_else(|| set("AGENTS_SERVER_STATE_DIR"))
        .or_else(|| set("ZENITHBOT_AGENT_DIR"))
        .unwrap_or_else(|| join_bytes(&home, b"/.agentsdock").into());

    let install = normalize_managed_path("AGENTS_SERVER_INSTALL_DIR", &install, &home)?;
    let config = normalize_managed_path("AGENTS_SERVER_CONFIG_DIR", &config, &home)?;
    let state = normalize_managed_path("AGENTSDOCK_STATE_DIR", &state, &home)?;
    for root in [&install, &config, &state] {
        if is_symlink(root) {
            return Err(RootRefusal::unsafe_path(concat(&[
                b"Refusing symbolic-link managed root: ",
                root.as_os_str().as_bytes(),
            ])));
        }
    }
    if paths_overlap(&install, &config)
        || paths_overlap(&install, &state)
        || paths_overlap(&config, &state)
    {
        return Err(RootRefusal::unsafe_path(
            b"Refusing overlapping install, configuration, and state roots; each must be a \
              separate directory."
                .to_vec(),
        ));
    }
    Ok(ManagedRoots {
        install,
        config,
        state,
        home: PathBuf::from(home),
    })
}

/// Directories no managed root may be, whatever the home directory.
const SYSTEM_DIRECTORIES: [&[u8]; 15] = [
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

/// Suffixes of the physical home directory no managed root may be.
const HOME_DIRECTORIES: [&[u8]; 6] = [
    b"",
    b"/.config",
    b"/.local",
    b"/.local/share",
    b"/Library",
    b"/Library/LaunchAgents",
];

/// `normalize_managed_path`: the candidate with its existing parents resolved
/// physically and its final component (or missing tail) kept as written.
fn normalize_managed_path(
    label: &str,
    candidate: &OsStr,
    home: &OsStr,
) -> Result<PathBuf, RootRefusal> {
    let mut candidate = candidate.as_bytes();
    if candidate.is_empty()
        || candidate[0] != b'/'
        || candidate.contains(&b'\n')
        || candidate.contains(&b'\r')
    {
        return Err(RootRefusal::unsafe_path(
            format!("{label} must be a non-empty absolute path without control characters.")
                .into_bytes(),
        ));
    }
    while candidate != b"/" && candidate.ends_with(b"/") {
        candidate = &candidate[..candidate.len() - 1];
    }
    let mut probe = candidate.to_vec();
    probe.push(b'/');
    if contains(&probe, b"/../") || contains(&probe, b"/./") || contains(&probe, b"//") {
        return Err(RootRefusal::unsafe_path(concat(&[
            label.as_bytes(),
            b" must not contain '.', '..', or repeated-slash path components: ",
            candidate,
        ])));
    }

    // The candidate is now `/c1/.../cn` with clean components: walk up to the
    // nearest existing directory, keeping the missing tail as written.
    let (mut parent, mut leaf) = split_last(candidate);
    while parent != b"/" && !is_directory(&parent) {
        let (grandparent, name) = split_last(&parent);
        leaf = concat(&[&name, b"/", &leaf]);
        parent = grandparent;
    }
    let Some(physical_parent) = physical_directory(OsStr::from_bytes(&parent)) else {
        return Err(RootRefusal::unsafe_path(concat(&[
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
        return Err(RootRefusal::unsafe_path(concat(&[
            b"Could not resolve HOME safely: ",
            home.as_bytes(),
        ])));
    };
    let refused = SYSTEM_DIRECTORIES.contains(&normalized.as_slice())
        || HOME_DIRECTORIES
            .iter()
            .any(|suffix| normalized == concat(&[&home_physical, suffix]));
    if refused {
        return Err(RootRefusal::unsafe_path(concat(&[
            b"Refusing unsafe ",
            label.as_bytes(),
            b" target: ",
            &normalized,
        ])));
    }
    Ok(PathBuf::from(OsString::from_vec(normalized)))
}

/// `paths_overlap`: equal, or one is a textual prefix directory of the other.
pub(crate) fn paths_overlap(first: &Path, second: &Path) -> bool {
    let first = first.as_os_str().as_bytes();
    let second = second.as_os_str().as_bytes();
    let under = |inner: &[u8], outer: &[u8]| {
        inner.len() > outer.len() && inner.starts_with(outer) && inner[outer.len()] == b'/'
    };
    first == second || under(first, second) || under(second, first)
}

/// `$(cd -P -- "$dir" && pwd -P)`: the physical path of a searchable
/// directory, with trailing newlines removed as command substitution does.
fn physical_directory(path: &OsStr) -> Option<Vec<u8>> {
    if path.is_empty() || !is_directory(path.as_bytes()) {
        return None;
    }
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).ok()?;
    let mut physical = std::fs::canonicalize(path)
        .ok()?
        .into_os_string()
        .into_vec();
    while physical.last() == Some(&b'\n') {
        physical.pop();
    }
    Some(physical)
}

/// `dirname`/`basename` of a clean absolute path without a trailing slash.
fn split_last(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let slash = path
        .iter()
        .rposition(|&byte| byte == b'/')
        .expect("absolute paths contain a slash");
    let parent = if slash == 0 { b"/" } else { &path[..slash] };
    (parent.to_vec(), path[slash + 1..].to_vec())
}

/// `[[ -d path ]]`: a directory, following symlinks.
pub(crate) fn is_directory(path: &[u8]) -> bool {
    std::fs::metadata(OsStr::from_bytes(path)).is_ok_and(|meta| meta.is_dir())
}

/// `[[ -L path ]]`.
pub(crate) fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `"$base<suffix>"` as the shell builds it.
pub(crate) fn join_bytes(base: &OsStr, suffix: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(concat(&[base.as_bytes(), suffix])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fixed(HashMap<&'static str, OsString>);

    impl Environment for Fixed {
        fn var(&self, name: &str) -> Option<OsString> {
            self.0.get(name).cloned()
        }
    }

    #[test]
    fn overlap_is_textual_and_component_aligned() {
        let overlap = |a: &str, b: &str| paths_overlap(Path::new(a), Path::new(b));
        assert!(overlap("/a/b", "/a/b"));
        assert!(overlap("/a/b", "/a/b/c"));
        assert!(overlap("/a/b/c", "/a/b"));
        assert!(!overlap("/a/b", "/a/bc"));
        assert!(!overlap("/a/bc", "/a/b"));
    }

    #[test]
    fn unset_home_is_fatal_like_set_u() {
        let refusal = managed_roots(&Fixed(HashMap::new())).unwrap_err();
        assert_eq!(refusal.status, 1);
    }

    #[test]
    fn unresolvable_home_is_refused_after_the_parent() {
        let refusal = managed_roots(&Fixed(HashMap::from([
            ("HOME", OsString::from("/nonexistent-home-for-test")),
            (
                "AGENTS_SERVER_INSTALL_DIR",
                OsString::from("/usr/no/such/dir///"),
            ),
        ])))
        .unwrap_err();
        assert_eq!(
            refusal.message,
            b"Could not resolve HOME safely: /nonexistent-home-for-test".to_vec()
        );
        assert_eq!(refusal.status, 2);
    }
}

//! The installation install.sh left on the originals' side, kept as a fixture
//! so the normal suite can put the binaries in front of exactly that state
//! without install.sh or any other upstream file (`tests/fixtures/installsh/`).
//!
//! The archive holds every entry below `<base>/install`, `config`, `state`
//! and the unit directory, with the base, port, test worker and uv paths as
//! placeholders, except what is upstream's or rebuilt on replay: the release
//! trees keep only the server stand-in (`execution_service.py`,
//! `agent_server.py`, `VERSION`; the helper entry points, `uninstall.sh` and
//! the binaries are put back as the migration kit writes them), `.venv`
//! (replaced by a link to the
//! machine's Python), compiled files, the dependency lock, the retired
//! recovery transactions (their payload is upstream's modules), and the
//! files the running worker writes itself (started again on replay).

use crate::sandbox::Sandbox;
use crate::upstream::SERVICE_FILES;
use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/fixtures/installsh/<scenario>.state`.
pub fn archive_path(scenario: &str) -> PathBuf {
    crate::fixture_path("installsh").join(format!("{scenario}.state"))
}

/// The helper entry points the kit turns into launchers, and their binaries.
const LAUNCHERS: [(&str, &str); 4] = [
    ("execution_activation.py", "execution-activation"),
    ("execution_manage.py", "execution-manage"),
    ("update_runner.py", "update-runner"),
    ("execution_uninstall.py", "uninstall"),
];

/// What a release tree keeps in the archive.
const KEPT_RELEASE_FILES: [&str; 3] = ["VERSION", "execution_service.py", "agent_server.py"];

fn literals(sandbox: &Sandbox, port: u16) -> Vec<(String, &'static str)> {
    vec![
        (sandbox.base().to_string_lossy().into_owned(), "<base>"),
        (
            crate::test_worker_path().to_string_lossy().into_owned(),
            "<test-worker>",
        ),
        (
            crate::installsh::uv_literal()
                .to_string_lossy()
                .into_owned(),
            "<uv>",
        ),
        (python().to_string_lossy().into_owned(), "<python>"),
        (port.to_string(), "<port>"),
    ]
}

/// The machine's Python 3 (what a release's `.venv/bin/python` runs).
fn python() -> PathBuf {
    let output = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .expect("sh runs");
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    path.canonicalize().unwrap_or(path)
}

fn roots(sandbox: &Sandbox) -> [(&'static str, PathBuf); 4] {
    let base = sandbox.base();
    [
        ("install", base.join("install")),
        ("config", base.join("config")),
        ("state", base.join("state")),
        ("units", sandbox.unit_dir()),
    ]
}

/// Whether the archive leaves `relative` (below root `name`) out.
fn left_out(name: &str, relative: &str) -> bool {
    let parts: Vec<&str> = relative.split('/').collect();
    if parts
        .iter()
        .any(|part| *part == "__pycache__" || *part == ".venv")
    {
        return true;
    }
    if name == "state" && SERVICE_FILES.iter().any(|file| relative.starts_with(file)) {
        return true;
    }
    if name == "install" {
        if parts.len() >= 3 && parts[0] == "releases" {
            return !KEPT_RELEASE_FILES.contains(&parts[2]) || parts.len() > 3;
        }
        // A retired recovery transaction: the binaries verify its payload,
        // upstream's modules, which never enter the project; without it
        // the uninstall has no transaction to retire.
        if parts.len() >= 2 && parts[0] == ".activation-recovery" {
            return true;
        }
    }
    false
}

/// Writes the archive of `sandbox`'s installation to `path`.
pub fn record(sandbox: &Sandbox, port: u16, path: &Path) {
    let literals = literals(sandbox, port);
    let placeholders = |text: &str| {
        literals
            .iter()
            .fold(text.to_string(), |text, (literal, name)| {
                replace_whole(&text, literal, name)
            })
    };
    // Upstream's text never enters the project: a file elsewhere that is a
    // copy of a release file (a recovery copy, a backup) is kept as its name.
    let mut copies = std::collections::HashMap::new();
    for relative in walk(&sandbox.base().join("install/releases")) {
        let full = sandbox.base().join("install/releases").join(&relative);
        let shown = format!("releases/{}", relative.to_string_lossy());
        let server_file = left_out("install", &shown)
            && !shown
                .split('/')
                .any(|part| part == ".venv" || part == "__pycache__");
        if server_file && full.is_file() && !full.is_symlink() {
            let name = relative.file_name().unwrap().to_string_lossy().into_owned();
            copies.insert(fs::read(&full).unwrap(), name);
        }
    }
    let identities = identities(sandbox);
    let mut out = Vec::new();
    for (name, root) in roots(sandbox) {
        // The root's own mode matters too (the helpers refuse an open one).
        if let Ok(info) = fs::symlink_metadata(&root) {
            let mode = info.permissions().mode() & 0o7777;
            out.extend(format!("@@ dir {mode:o} {name}/\n").into_bytes());
        }
        for relative in walk(&root) {
            let shown = relative.to_string_lossy().into_owned();
            if left_out(name, &shown) {
                continue;
            }
            let full = root.join(&relative);
            let Ok(info) = fs::symlink_metadata(&full) else {
                continue;
            };
            let mode = info.permissions().mode() & 0o7777;
            let entry = format!("{name}/{shown}");
            if info.file_type().is_symlink() {
                let target = fs::read_link(&full).unwrap();
                out.extend(
                    format!(
                        "@@ link {entry} -> {}\n",
                        placeholders(&target.to_string_lossy())
                    )
                    .into_bytes(),
                );
            } else if info.is_dir() {
                out.extend(format!("@@ dir {mode:o} {entry}\n").into_bytes());
            } else if info.is_file() {
                let bytes = fs::read(&full).unwrap();
                let content = match copies.get(&bytes) {
                    Some(copy) => format!("<copy of {copy}>"),
                    None => bind_identities(
                        &placeholders(&String::from_utf8_lossy(&bytes)),
                        &identities,
                    ),
                };
                out.extend(format!("@@ file {mode:o} {} {entry}\n", content.len()).into_bytes());
                out.extend(content.into_bytes());
                out.push(b'\n');
            }
        }
    }
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, out).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
}

/// Puts the archive at `path` into `sandbox` (fresh) for the binaries: every
/// entry with the placeholders filled in, each release tree completed as the
/// migration kit leaves it, `.venv/bin/python` a link to the machine's
/// `python3`; then starts the services the units name.
pub fn replay(sandbox: &Sandbox, port: u16, path: &Path) {
    let text = fs::read(path).unwrap_or_else(|err| {
        panic!(
            "{}: {err} (scripts/installsh-compare.sh --record writes it)",
            path.display()
        )
    });
    let literals = literals(sandbox, port);
    let fill = |text: &str| {
        literals
            .iter()
            .rev()
            .fold(text.to_string(), |text, (literal, name)| {
                text.replace(name, literal)
            })
    };
    let roots = roots(sandbox);
    let target_of = |entry: &str| {
        let (name, relative) = entry.split_once('/').expect("root/path");
        let (_, root) = roots
            .iter()
            .find(|(root, _)| *root == name)
            .expect("a known root");
        root.join(relative)
    };
    let mut releases = Vec::new();
    let mut directories = Vec::new();
    let mut bound = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let end = text[at..].iter().position(|byte| *byte == b'\n').unwrap() + at;
        let header = String::from_utf8_lossy(&text[at..end]).into_owned();
        at = end + 1;
        let words: Vec<&str> = header.splitn(5, ' ').collect();
        match words[1] {
            "dir" => {
                let target = target_of(words[3]);
                fs::create_dir_all(&target).unwrap();
                let mode = u32::from_str_radix(words[2], 8).unwrap();
                directories.push((target.clone(), mode));
                let relative = words[3];
                if relative.starts_with("install/releases/") && relative.matches('/').count() == 2 {
                    releases.push(target);
                }
            }
            "link" => {
                let (entry, destination) = header[8..].split_once(" -> ").unwrap();
                let target = target_of(entry);
                fs::create_dir_all(target.parent().unwrap()).unwrap();
                symlink(fill(destination), &target).unwrap();
            }
            "file" => {
                let mode = u32::from_str_radix(words[2], 8).unwrap();
                let length: usize = words[3].parse().unwrap();
                let content = String::from_utf8(text[at..at + length].to_vec()).unwrap();
                at += length + 1;
                let target = target_of(words[4]);
                fs::create_dir_all(target.parent().unwrap()).unwrap();
                fs::write(&target, fill(&content)).unwrap();
                fs::set_permissions(&target, fs::Permissions::from_mode(mode)).unwrap();
                if content.contains(INODE_OF) {
                    bound.push(target);
                }
            }
            other => panic!("{}: unknown entry {other}", path.display()),
        }
    }
    for release in &releases {
        complete_release(release);
    }
    // Identities once every entry exists (rewriting keeps a file's inode).
    for file in &bound {
        let text = fs::read_to_string(file).unwrap();
        fs::write(file, fill_identities(&text, &target_of)).unwrap();
    }
    // Modes last: a directory the archive made private is filled first.
    for (directory, mode) in directories.iter().rev() {
        fs::set_permissions(directory, fs::Permissions::from_mode(*mode)).unwrap();
    }
    sandbox.systemctl_ok(&["daemon-reload"]);
    for unit in [WORKER_UNIT, GATEWAY_UNIT] {
        if sandbox.unit_dir().join(unit).exists() {
            sandbox.systemctl_ok(&["enable", "--now", unit]);
        }
    }
}

/// The binaries (this build's, under the kit's name for this host), the
/// kit's launcher in each entry point (recording each binary's size and
/// sha256, as the kit does), and a `.venv` whose Python is the
/// machine's, in `release`. The entry points hold no original code after
/// the launcher (that is upstream's): where the launcher would fall back to
/// it, they fail loudly instead.
fn complete_release(release: &Path) {
    let profile = crate::profile_dir();
    let tag = crate::installsh::host_tag();
    for binary in crate::HELPERS {
        let staged = release.join(format!("{binary}-{tag}"));
        crate::installsh::link_or_copy(&profile.join(binary), &staged);
    }
    let kit = crate::workspace_root().join("scripts");
    let script = format!(
        "import sys; sys.path.insert(0, {kit:?}); import migration_kit as k\n\
         from release_platforms import BY_TARGET\n\
         name, target, release = sys.argv[1], sys.argv[2], sys.argv[3]\n\
         platform = BY_TARGET[target]\n\
         staged = platform.staged_name(k.LAUNCHERS[name])\n\
         data = open(release + '/' + staged, 'rb').read()\n\
         recorded = {{staged: (len(data), k.sha256(data))}}\n\
         shell = name in k.SHELL_ENTRY_POINTS\n\
         head = k.SHEBANG_LINE if shell else k.FUTURE_LINE\n\
         tail = b'echo \"replay: no binary fits this host\" >&2; exit 70\\n' if shell \
         else b'raise SystemExit(\"replay: no binary fits this host\")\\n'\n\
         sys.stdout.buffer.write(head + k.launcher(name, [platform], recorded) + tail)\n",
        kit = kit.to_string_lossy()
    );
    for (name, _) in LAUNCHERS
        .iter()
        .chain([("uninstall.sh", "uninstall")].iter())
    {
        let output = Command::new("python3")
            .args(["-B", "-c", &script, name, crate::installsh::host_target()])
            .arg(release)
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        fs::write(release.join(name), output.stdout).unwrap();
        let mode = if *name == "uninstall.sh" || *name == "update_runner.py" {
            0o755
        } else {
            0o644
        };
        fs::set_permissions(release.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    let venv = release.join(".venv/bin");
    fs::create_dir_all(&venv).unwrap();
    symlink(python(), venv.join("python")).unwrap();
}

/// Every entry below `root`, sorted, not following links, not below `.venv`.
fn walk(root: &Path) -> Vec<PathBuf> {
    fn visit(root: &Path, relative: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(root.join(relative)) else {
            return;
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        for name in names {
            let child = relative.join(&name);
            let directory = fs::symlink_metadata(root.join(&child)).is_ok_and(|info| info.is_dir());
            out.push(child.clone());
            if directory && name != ".venv" {
                visit(root, &child, out);
            }
        }
    }
    let mut out = Vec::new();
    visit(root, Path::new(""), &mut out);
    out
}

/// Waits until the replayed worker answers its health check on `port`.
pub fn wait_healthy(sandbox: &Sandbox, port: u16) {
    let _ = sandbox;
    crate::poll_until(
        std::time::Duration::from_secs(30),
        "the replayed worker's health",
        || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ())
        },
    );
}

/// `text` with each `literal` not inside a longer run of digits (a port
/// within an inode number stays) replaced by `name`.
fn replace_whole(text: &str, literal: &str, name: &str) -> String {
    let numeric = literal.bytes().all(|byte| byte.is_ascii_digit());
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(literal) {
        let end = at + literal.len();
        let digit_before = rest[..at]
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_digit());
        let digit_after = rest[end..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit());
        out.push_str(&rest[..at]);
        if numeric && (digit_before || digit_after) {
            out.push_str(literal);
        } else {
            out.push_str(name);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// What a recorded `"inode": N` of an archived entry becomes: the entry's name.
const INODE_OF: &str = "\"<inode of ";

/// Each archived entry by its (device, inode), named `root/relative`.
fn identities(sandbox: &Sandbox) -> std::collections::HashMap<(u64, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let mut map = std::collections::HashMap::new();
    for (name, root) in roots(sandbox) {
        let entries = std::iter::once(PathBuf::new()).chain(walk(&root));
        for relative in entries {
            let shown = relative.to_string_lossy().into_owned();
            if !shown.is_empty() && left_out(name, &shown) {
                continue;
            }
            if let Ok(info) = fs::symlink_metadata(root.join(&relative)) {
                map.insert((info.dev(), info.ino()), format!("{name}/{shown}"));
            }
        }
    }
    map
}

/// `text` with each `"device": D, "inode": N` pair (a binding the helpers
/// check against the live directory) of an archived entry as
/// `"device": "<device>", "inode": "<inode of ENTRY>"`.
fn bind_identities(
    text: &str,
    identities: &std::collections::HashMap<(u64, u64), String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\"device\": ") {
        let number_at = at + "\"device\": ".len();
        let device: String = rest[number_at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let after_device = &rest[number_at + device.len()..];
        let gap: String = after_device
            .chars()
            .take_while(|c| *c == ',' || c.is_whitespace())
            .collect();
        let after_gap = &after_device[gap.len()..];
        let inode: String = after_gap
            .strip_prefix("\"inode\": ")
            .map(|tail| tail.chars().take_while(char::is_ascii_digit).collect())
            .unwrap_or_default();
        let known = device
            .parse()
            .ok()
            .zip(inode.parse().ok())
            .and_then(|key| identities.get(&key));
        out.push_str(&rest[..at]);
        match known {
            Some(entry) => {
                out.push_str(&format!(
                    "\"device\": \"<device>\"{gap}\"inode\": {INODE_OF}{entry}>\""
                ));
                rest = &after_gap["\"inode\": ".len() + inode.len()..];
            }
            None => {
                out.push_str("\"device\": ");
                rest = &rest[number_at..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The reverse of [`bind_identities`] on the replayed entries.
fn fill_identities(text: &str, target_of: &dyn Fn(&str) -> PathBuf) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(INODE_OF) {
        let end = rest[at..].find(">\"").expect("a closed identity") + at;
        let entry = &rest[at + INODE_OF.len()..end];
        let info = fs::symlink_metadata(target_of(entry))
            .unwrap_or_else(|err| panic!("the replayed {entry}: {err}"));
        out.push_str(&rest[..at].replace("\"<device>\"", &info.dev().to_string()));
        out.push_str(&info.ino().to_string());
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

//! What one side of an install.sh comparison left behind, as facets
//! ([`crate::upstream::Observed`]), normalised as the upstream comparison
//! normalises them, plus what differs by construction between a release as
//! published and the same release after the migration kit:
//!
//! - a file whose bytes are a release file's is shown as `<copy of NAME>`, and
//!   a SHA-256 of a release file as `<sha256 of NAME>` (the kit changes the
//!   helper entry points, so their digests differ by side);
//! - the kit's added files (the five binaries, `rust-helpers.json`, the build's
//!   checksums and provenance) are left out of listings
//!   (`tests/tests/it/migration_kit.rs` checks them);
//! - the contents of `.venv` (uv's output) and of `__pycache__` files (their
//!   bytes carry source times) are left out;
//! - install.sh's PID in staging names, a lock owner's process start time.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;

use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use sha2::{Digest, Sha256};

use crate::installsh::Host;
use crate::upstream::{Normalizer, Observed, SERVICE_FILES};

/// Whether `name` is a file the migration kit adds to a release: a helper
/// binary of some platform (`<helper>-<tag>`), the build's checksums and
/// provenance, or its manifest.
pub fn kit_added(name: &std::ffi::OsStr) -> bool {
    const TAGS: [&str; 4] = [
        "linux-x86_64",
        "linux-aarch64",
        "darwin-x86_64",
        "darwin-arm64",
    ];
    let name = name.to_string_lossy();
    name == "rust-helpers.json"
        || name == "rust-helpers.SHA256SUMS"
        || name == "rust-helpers.provenance.json"
        || crate::HELPERS.iter().any(|helper| {
            TAGS.iter()
                .any(|tag| name == format!("{helper}-{tag}").as_str())
        })
}

/// The release files of one side, by digest.
#[derive(Debug, Default)]
pub struct ReleaseFiles {
    by_digest: BTreeMap<String, String>,
}

impl ReleaseFiles {
    /// Every file of `releases` (their top level and `agentsdock_team_hub`).
    pub fn of(releases: &[&Path]) -> ReleaseFiles {
        let mut files = ReleaseFiles::default();
        for release in releases {
            for directory in [release.to_path_buf(), release.join("agentsdock_team_hub")] {
                let Ok(entries) = fs::read_dir(&directory) else {
                    continue;
                };
                for entry in entries.filter_map(Result::ok) {
                    let path = entry.path();
                    if path.is_file() {
                        let name = entry.file_name().to_string_lossy().into_owned();
                        let digest = hex(&fs::read(&path).unwrap());
                        files.by_digest.entry(digest).or_insert(name);
                    }
                }
            }
        }
        files
    }

    /// The release file `data` is a copy of.
    fn copy_of(&self, data: &[u8]) -> Option<&str> {
        self.by_digest.get(&hex(data)).map(String::as_str)
    }

    /// `(digest, "sha256 of NAME")` literals for a [`Normalizer`].
    pub fn literals(&self) -> Vec<(String, String)> {
        self.by_digest
            .iter()
            .map(|(digest, name)| (digest.clone(), format!("sha256 of {name}")))
            .collect()
    }
}

fn hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A side's normaliser: the base, port, test worker and uv paths, and the
/// release files' digests by name.
pub fn normalizer(host: &Host<'_>, files: &ReleaseFiles) -> Normalizer {
    let mut literals: Vec<(String, String)> = vec![
        (
            host.sandbox.base().to_string_lossy().into_owned(),
            "base".into(),
        ),
        (host.port.to_string(), "port".into()),
        (
            crate::test_worker_path().to_string_lossy().into_owned(),
            "test-worker".into(),
        ),
        (
            crate::installsh::uv_literal()
                .to_string_lossy()
                .into_owned(),
            "uv".into(),
        ),
    ];
    literals.extend(files.literals());
    let borrowed: Vec<(String, &str)> = literals
        .iter()
        .map(|(literal, name)| (literal.clone(), name.as_str()))
        .collect();
    Normalizer::new(&borrowed)
}

/// `text` with install.sh's PID in staging and replacement names, and a lock
/// owner's process start time, masked; then normalised.
pub fn text(normalizer: &mut Normalizer, text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    for (index, segment) in text.split('/').enumerate() {
        if index > 0 {
            masked.push('/');
        }
        masked.push_str(&mask_segment(segment));
    }
    let masked = mask_after(&masked, "\"process_start\": \"", "<start>");
    let masked = transaction_ids(normalizer, &masked);
    let masked = release_sizes(&without_kit_entries(&normalizer.text(&masked)));
    compiled_and_venv_sizes(&masked)
}

/// `text` with the size of each compiled module (`__pycache__/*.pyc` in a
/// receipt's inventory) and of each venv file masked: a compiled module
/// holds its source's path, and a venv's scripts hold theirs, in the
/// staging directory whose name holds install.sh's PID (a PID one digit
/// longer on one side makes every such file one byte longer); the kit's
/// entry points also compile to sizes of their own.
fn compiled_and_venv_sizes(text: &str) -> String {
    // Compiled modules sit in every package's `__pycache__`, not only the
    // release's top level (`agentsdock_team_hub/__pycache__/...`).
    let keys = ["__pycache__/", "\".venv/"];
    let mut out = text.to_string();
    for key in keys {
        let mut from = 0;
        while let Some(found) = out[from..].find(key) {
            let start = from + found;
            let Some(close) = out[start..].find('}') else {
                break;
            };
            let member = &out[start..start + close];
            from = start + close;
            let Some(size_at) = member.find("\"size\":") else {
                continue;
            };
            let digits_at = start + size_at + "\"size\":".len();
            let digits = out[digits_at..].len()
                - out[digits_at..]
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            out.replace_range(digits_at..digits_at + digits, "<size>");
            from = digits_at;
        }
    }
    out
}

/// `text` without the JSON members (`"NAME":{...}` and its comma) that name
/// a file the kit adds: a preparation receipt inventories its runtime.
fn without_kit_entries(text: &str) -> String {
    let mut out = text.to_string();
    let mut from = 0;
    while let Some(found) = out[from..].find("\":{") {
        let key_end = from + found;
        let Some(key_start) = out[..key_end].rfind('"') else {
            break;
        };
        let name = &out[key_start + 1..key_end];
        if !kit_added(std::ffi::OsStr::new(name)) {
            from = key_end + 1;
            continue;
        }
        let Some(close) = out[key_end..].find('}') else {
            break;
        };
        let mut end = key_end + close + 1;
        let mut start = key_start;
        if out[end..].starts_with(',') {
            end += 1;
        } else if out[..start].ends_with(',') {
            start -= 1;
        }
        out.replace_range(start..end, "");
        from = start;
    }
    out
}

/// `text` with the size beside each release file's digest masked: the kit
/// replaces the helpers' entry points, so their sizes are each side's.
fn release_sizes(text: &str) -> String {
    const DIGEST: &str = "\"sha256\":\"<sha256 of ";
    const SIZE: &str = ">\",\"size\":";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(DIGEST) {
        let name_start = at + DIGEST.len();
        let Some(name_len) = rest[name_start..]
            .find(SIZE)
            .filter(|len| !rest[name_start..name_start + len].contains('"'))
        else {
            break;
        };
        let after = name_start + name_len + SIZE.len();
        out.push_str(&rest[..after]);
        rest = &rest[after..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            out.push_str("<size>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Each activation transaction's 24 hex digits as the normaliser's token,
/// also where a suffix (`activation-<id>-env.source`) hides the token's end.
fn transaction_ids(normalizer: &mut Normalizer, text: &str) -> String {
    const PREFIX: &str = "activation-";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let start = at + PREFIX.len();
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let digits = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        if digits == 24 {
            out.push_str(&normalizer.text(&rest[..24]));
            rest = &rest[24..];
        }
    }
    out.push_str(rest);
    out
}

/// A path segment `.staging-V-<pid>`, `.prepared-V-<pid>` or
/// `V-replaced-<time>-<pid>` with its PID (and time) masked.
fn mask_segment(segment: &str) -> String {
    let end = segment
        .find(|c: char| c == '"' || c.is_whitespace())
        .unwrap_or(segment.len());
    let (name, rest) = segment.split_at(end);
    let pid_suffix = |name: &str| -> Option<usize> {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        (digits > 0 && name[..name.len() - digits].ends_with('-')).then_some(name.len() - digits)
    };
    // Every `mktemp` template of install.sh (a killed run leaves them).
    const TEMPORARIES: [&str; 12] = [
        ".install-health.",
        ".install-pre-",
        ".install-client-binding.",
        ".install-host-health.",
        ".install-host-peer-status.",
        ".install-legacy-health.",
        ".install-observed-binding.",
        ".install-peer-status.",
        ".execution-handoff.",
        ".execution-update-proof.",
        ".activation-load.",
        ".prepared-inventory.",
    ];
    let temporary = TEMPORARIES.iter().find(|prefix| name.starts_with(*prefix));
    let masked = if let Some(prefix) = temporary {
        // mktemp's random suffix.
        name.rfind('.')
            .filter(|at| *at + 1 >= prefix.len())
            .map(|at| format!("{}<tmp>", &name[..=at]))
    } else if name.starts_with(".install-lock.") && name.ends_with(".tmp") {
        // The lock's staging name: the installer's PID and a random suffix.
        Some(".install-lock.<pid>.<tmp>.tmp".to_string())
    } else if name.starts_with(".staging-") || name.starts_with(".prepared-") {
        pid_suffix(name).map(|at| format!("{}<pid>", &name[..at]))
    } else {
        name.find("-replaced-")
            .map(|at| format!("{}-replaced-<time>-<pid>", &name[..at]))
    };
    format!("{}{rest}", masked.unwrap_or_else(|| name.to_string()))
}

/// `text` with the JSON string value after each `key` replaced by `name`.
fn mask_after(text: &str, key: &str, name: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        out.push_str(&rest[..at + key.len()]);
        rest = &rest[at + key.len()..];
        let end = rest.find('"').unwrap_or(rest.len());
        out.push_str(name);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// uv's progress lines, which install.sh passes through: their counts and
/// timings vary between runs (a warm cache) and are not the installer's.
fn uv_line(line: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "+ ",
        "- ",
        "Using CPython",
        "Creating virtual environment",
        "Installed ",
        "Prepared ",
        "Resolved ",
        "Audited ",
        "Downloading ",
        "Downloaded ",
    ];
    let line = line.trim_start();
    PREFIXES.iter().any(|prefix| line.starts_with(prefix))
}

/// The lines of `text` without Python's traceback frames: a helper's
/// failure is its last line, `Class: message`, which the binaries print alone.
fn without_tracebacks(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut in_traceback = false;
    for line in text.lines() {
        if line == "Traceback (most recent call last):" {
            in_traceback = true;
            continue;
        }
        if in_traceback && line.starts_with(' ') {
            continue;
        }
        in_traceback = false;
        lines.push(line);
    }
    lines
}

/// Exit status, stdout and stderr (every line but uv's and traceback frames)
/// of a run.
pub fn run(observed: &mut Observed, label: &str, output: &Output, normalizer: &mut Normalizer) {
    use std::os::unix::process::ExitStatusExt;
    let exit = match (output.status.code(), output.status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown".to_string(),
    };
    observed.record(&format!("{label} exit"), exit);
    for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let lines: Vec<String> = without_tracebacks(&String::from_utf8_lossy(bytes))
            .into_iter()
            .filter(|line| !uv_line(line))
            .map(|line| text(normalizer, &job_report(&status_line(line))))
            .collect();
        observed.record(&format!("{label} {name}"), lines.join("\n"));
    }
}

/// bash's report of a job killed under it (`SCRIPT: line N:  PID Killed ...`)
/// with the PID masked: the process of this run.
fn job_report(line: &str) -> String {
    let Some(at) = line.find(": line ") else {
        return line.to_string();
    };
    let after_line = &line[at + ": line ".len()..];
    let Some((number, rest)) = after_line.split_once(':') else {
        return line.to_string();
    };
    let pid = rest.trim_start();
    let digits = pid.len() - pid.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if number.parse::<u32>().is_err() || digits == 0 {
        return line.to_string();
    }
    let spaces = rest.len() - pid.len();
    format!(
        "{}: line {number}:{}<pid>{}",
        &line[..at],
        &rest[..spaces],
        &pid[digits..]
    )
}

/// A line of `systemctl status` (which install.sh prints when a release
/// fails) with the start time, the uptime and the main PID masked: they are
/// the moment and the process of this run, not what the helpers did.
fn status_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    if let Some(rest) = trimmed.strip_prefix("Active: ") {
        if let Some((state, _)) = rest.split_once(" since ") {
            return format!("{indent}Active: {state} since <time>");
        }
    }
    if let Some(rest) = trimmed.strip_prefix("Main PID: ") {
        let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        return format!("{indent}Main PID: <pid>{after}");
    }
    if let Some(rest) = trimmed
        .strip_prefix("└─")
        .or_else(|| trimmed.strip_prefix("├─"))
    {
        let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        if after.len() < rest.len() {
            return format!(
                "{indent}{}<pid>{after}",
                &trimmed[..trimmed.len() - rest.len()]
            );
        }
    }
    line.to_string()
}

/// The installation's roots and the unit directory, the units' states and the
/// `systemctl` calls that change something since the last reset.
pub fn installation(
    observed: &mut Observed,
    label: &str,
    host: &Host<'_>,
    files: &ReleaseFiles,
    normalizer: &mut Normalizer,
) {
    let [install, config, state] = host.roots();
    let units = host.sandbox.unit_dir();
    for (name, root, skip) in [
        ("install", install.as_path(), &[][..]),
        ("config", config.as_path(), &[][..]),
        ("state", state.as_path(), &SERVICE_FILES[..]),
        ("units", units.as_path(), &[][..]),
    ] {
        tree(
            observed,
            &format!("{label} {name}"),
            root,
            skip,
            files,
            normalizer,
        );
    }
    let services: Vec<String> = [WORKER_UNIT, GATEWAY_UNIT]
        .iter()
        .map(|unit| {
            let state = host.sandbox.unit_state(unit);
            format!("{unit}: {} {}", state.active_state, state.unit_file_state)
        })
        .collect();
    observed.record(&format!("{label} services"), services.join("\n"));
    let calls: Vec<String> = host
        .trace
        .changes()
        .lines()
        .filter(|line| !line.starts_with("--user is-enabled") && !line.starts_with("--user show"))
        .map(|line| text(normalizer, line))
        .collect();
    observed.record(&format!("{label} systemctl"), calls.join("\n"));
}

fn tree(
    observed: &mut Observed,
    name: &str,
    root: &Path,
    skip: &[&str],
    files: &ReleaseFiles,
    normalizer: &mut Normalizer,
) {
    let mut listing = Vec::new();
    for relative in walk(root) {
        let shown_path = relative.to_string_lossy().into_owned();
        if skip.iter().any(|prefix| shown_path.starts_with(prefix)) {
            continue;
        }
        let path = root.join(&relative);
        let Ok(info) = fs::symlink_metadata(&path) else {
            continue;
        };
        let shown = text(normalizer, &shown_path);
        let mode = info.mode() & 0o7777;
        let kind = if info.file_type().is_symlink() {
            let target = fs::read_link(&path).unwrap_or_default();
            format!("link -> {}", text(normalizer, &target.to_string_lossy()))
        } else if info.is_dir() {
            format!("dir {mode:o}")
        } else if info.is_file() {
            let content = fs::read(&path).unwrap_or_default();
            let value = if shown_path.contains("__pycache__/") {
                "<compiled>".to_string()
            } else if let Some(copy) = files.copy_of(&content) {
                format!("<copy of {copy}>")
            } else if relative.file_name().is_some_and(|file| file == "pid") {
                normalizer.pid_file(&content)
            } else {
                text(normalizer, &String::from_utf8_lossy(&content))
            };
            observed.record(&format!("{name}/{shown}"), value);
            format!("file {mode:o} nlink {}", info.nlink())
        } else {
            format!("special {mode:o}")
        };
        listing.push(format!("{shown}: {kind}"));
    }
    // Sorted as normalised: random names sort differently on each side.
    listing.sort();
    observed.record(&format!("{name} entries"), listing.join("\n"));
}

/// Every entry below `root`, sorted, not following links, without the
/// contents of `.venv` directories and without the kit's added files.
fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    fn visit(root: &Path, relative: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = fs::read_dir(root.join(relative)) else {
            return;
        };
        let mut names: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        for name in names {
            if kit_added(&name) {
                continue;
            }
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

/// The helper processes a run started, in order, from the exec log: the
/// words from the helper's script on (`execution_activation.py OP ...`,
/// `-m execution_activation detect ...`, `uninstall.sh ...`), each with its
/// exit status. A binary the launcher execs in the same process is the same
/// call.
pub fn helper_calls(observed: &mut Observed, label: &str, log: &Path, normalizer: &mut Normalizer) {
    let text_log = fs::read_to_string(log).unwrap_or_default();
    let mut calls: Vec<(u32, String, Option<String>)> = Vec::new();
    for line in text_log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        // strace pads the PID column.
        let rest = rest.trim_start();
        let Ok(pid) = pid.trim().parse::<u32>() else {
            continue;
        };
        if let Some(status) = rest.strip_prefix("+++ exited with ") {
            let status = status.trim_end_matches(" +++").to_string();
            if let Some(call) = calls.iter_mut().rev().find(|call| call.0 == pid) {
                call.2.get_or_insert(status);
            }
            continue;
        }
        let Some(arguments) = exec_arguments(rest) else {
            continue;
        };
        let Some(words) = helper_words(&arguments) else {
            continue;
        };
        if calls
            .last()
            .is_some_and(|call| call.0 == pid && call.2.is_none())
        {
            continue;
        }
        calls.push((pid, words.join(" "), None));
    }
    let mut lines: Vec<String> = Vec::new();
    let mut previous = String::new();
    for (_, words, status) in &calls {
        let status = status.as_deref().unwrap_or("killed");
        let words = text(normalizer, words);
        // A health wait verifies once per attempt; how many attempts it takes
        // depends on how fast the services answer, so a run of the same
        // verification shows once, with its last status.
        let repeated = words == previous
            && (words.contains(" verify ") || words.contains(" verify-restored "));
        if repeated {
            lines.pop();
        }
        lines.push(format!("{words} => {status}"));
        previous = words;
    }
    observed.record(&format!("{label} helper calls"), lines.join("\n"));
}

/// One helper call of a timed exec log ([`crate::installsh::Host::timed`]):
/// its words, and the seconds from its exec to its exit (`None` for a call
/// still running, or killed, when the log ended).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedCall {
    /// The words from the helper's script on, as [`helper_calls`] shows them.
    pub words: String,
    /// Seconds from the helper's exec to its process's exit.
    pub seconds: Option<f64>,
}

/// The helper calls of a timed exec log, in order (a binary the launcher
/// execs in the same process is the same call, timed from the launcher's
/// start).
pub fn timed_helper_calls(log: &Path) -> Vec<TimedCall> {
    let text_log = fs::read_to_string(log).unwrap_or_default();
    let mut calls: Vec<(u32, String, f64, Option<f64>)> = Vec::new();
    for line in text_log.lines() {
        // strace pads the PID column.
        let Some((pid, rest)) = line.trim_start().split_once(' ') else {
            continue;
        };
        let Some((time, rest)) = rest.trim_start().split_once(' ') else {
            continue;
        };
        let (Ok(pid), Ok(time)) = (pid.parse::<u32>(), time.parse::<f64>()) else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("+++ exited with ") || rest.starts_with("+++ killed by ") {
            if let Some(call) = calls.iter_mut().rev().find(|call| call.0 == pid) {
                call.3.get_or_insert(time);
            }
            continue;
        }
        let Some(words) = exec_arguments(rest).and_then(|arguments| helper_words(&arguments))
        else {
            continue;
        };
        if calls
            .last()
            .is_some_and(|call| call.0 == pid && call.3.is_none())
        {
            continue;
        }
        calls.push((pid, words.join(" "), time, None));
    }
    calls
        .into_iter()
        .map(|(_, words, start, end)| TimedCall {
            words,
            seconds: end.map(|end| end - start),
        })
        .collect()
}

/// The argument vector of a successful `execve(...) = 0` line.
fn exec_arguments(rest: &str) -> Option<Vec<String>> {
    let rest = rest.strip_prefix("execve(")?;
    if !rest.trim_end().ends_with("= 0") {
        return None;
    }
    let start = rest.find(", [")? + 3;
    let mut arguments = Vec::new();
    let mut chars = rest[start..].chars();
    loop {
        match chars.next()? {
            '"' => {
                let mut word = String::new();
                loop {
                    match chars.next()? {
                        '\\' => match chars.next()? {
                            'n' => word.push('\n'),
                            't' => word.push('\t'),
                            other => word.push(other),
                        },
                        '"' => break,
                        other => word.push(other),
                    }
                }
                arguments.push(word);
            }
            ']' => return Some(arguments),
            _ => {}
        }
    }
}

/// The words of a helper call, from its script (or `-m module`) on.
fn helper_words(arguments: &[String]) -> Option<Vec<String>> {
    const SCRIPTS: [&str; 3] = [
        "execution_activation.py",
        "uninstall.sh",
        "execution_uninstall.py",
    ];
    let interpreter = |word: &String| {
        let name = Path::new(word)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        name == "bash" || name.starts_with("python")
    };
    let script_at = arguments.iter().position(|word| {
        SCRIPTS
            .iter()
            .any(|script| word.ends_with(&format!("/{script}")))
    });
    // The script as the program (a launcher's exec keeps argv[0]), as bash's
    // or python's first argument, or after python's -B; not a file argument
    // of install(1), chmod(1) or py_compile.
    let script_at = script_at.filter(|&at| {
        at == 0
            || (at == 1 && interpreter(&arguments[0]))
            || (at == 2 && interpreter(&arguments[0]) && arguments[1] == "-B")
    });
    if let Some(at) = script_at {
        let mut words = arguments[at..].to_vec();
        words[0] = Path::new(&words[0])
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Some(words);
    }
    let at = arguments
        .windows(2)
        .position(|pair| pair[0] == "-m" && pair[1] == "execution_activation")?;
    (at <= 2 && interpreter(&arguments[0])).then(|| arguments[at..].to_vec())
}

/// The facets of `observed` whose names start with `label`, with the
/// placeholders numbered afresh in order of appearance (`<hex1>`, `<n2>`, ...
/// over the facets in name order): a step observed alone then reads the same
/// as that step observed after others.
pub fn renumbered(observed: &Observed, label: &str) -> std::collections::BTreeMap<String, String> {
    let mut numbers: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = std::collections::BTreeMap::new();
    for (name, value) in observed.facets() {
        if !name.starts_with(&format!("{label} ")) {
            continue;
        }
        let name_out = renumber(name, &mut numbers);
        let value_out = renumber(value, &mut numbers);
        out.insert(name_out, value_out);
    }
    out
}

fn renumber(text: &str, numbers: &mut std::collections::HashMap<String, usize>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find('>') else {
            break;
        };
        let inner = &rest[1..end];
        let letters = inner.trim_end_matches(|c: char| c.is_ascii_digit());
        let is_placeholder = !letters.is_empty()
            && letters.len() < inner.len()
            && letters.bytes().all(|b| b.is_ascii_lowercase());
        if is_placeholder {
            let next = numbers.len() + 1;
            let number = *numbers.entry(inner.to_string()).or_insert(next);
            out.push_str(&format!("<{letters}{number}>"));
            rest = &rest[end + 1..];
        } else {
            out.push('<');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::{release_sizes, without_kit_entries};

    #[test]
    fn a_receipt_inventory_keeps_release_files_without_their_sizes() {
        let inventory = concat!(
            r#"{"a.py":{"sha256":"<sha256 of a.py>","size":12},"#,
            r#""rust-helpers.json":{"sha256":"x","size":3},"#,
            r#"".venv/x":{"sha256":"<hex1>","size":5},"#,
            r#""uninstall-linux-x86_64":{"sha256":"y","size":4}}"#
        );
        assert_eq!(
            release_sizes(&without_kit_entries(inventory)),
            concat!(
                r#"{"a.py":{"sha256":"<sha256 of a.py>","size":<size>},"#,
                r#"".venv/x":{"sha256":"<hex1>","size":5}}"#
            )
        );
    }

    #[test]
    fn a_killed_job_report_loses_its_pid_other_lines_stay() {
        assert_eq!(
            super::job_report("<base>/install.sh: line 662:  4864 Killed  ( x )"),
            "<base>/install.sh: line 662:  <pid> Killed  ( x )"
        );
        let other = "Recovered AgentsServer: line 3: nothing";
        assert_eq!(super::job_report(other), other);
    }

    #[test]
    fn compiled_modules_and_venv_files_lose_their_sizes_other_files_keep_them() {
        let inventory = concat!(
            r#"{"__pycache__/update_runner.cpython-311.pyc":{"kind":"file","sha256":"<hex2>","size":49991},"#,
            r#""__pycache__/workspace_git.cpython-311.pyc":{"kind":"file","sha256":"<hex3>","size":7},"#,
            r#"".venv/bin/activate":{"kind":"file","sha256":"<hex4>","size":4348},"#,
            r#""pkg/__pycache__/auth.cpython-311.pyc":{"kind":"file","sha256":"<hex6>","size":305},"#,
            r#""pyproject.toml":{"kind":"file","sha256":"<hex5>","size":812}}"#
        );
        assert_eq!(
            super::compiled_and_venv_sizes(inventory),
            concat!(
                r#"{"__pycache__/update_runner.cpython-311.pyc":{"kind":"file","sha256":"<hex2>","size":<size>},"#,
                r#""__pycache__/workspace_git.cpython-311.pyc":{"kind":"file","sha256":"<hex3>","size":<size>},"#,
                r#"".venv/bin/activate":{"kind":"file","sha256":"<hex4>","size":<size>},"#,
                r#""pkg/__pycache__/auth.cpython-311.pyc":{"kind":"file","sha256":"<hex6>","size":<size>},"#,
                r#""pyproject.toml":{"kind":"file","sha256":"<hex5>","size":812}}"#
            )
        );
    }
}

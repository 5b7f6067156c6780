//! The side-by-side comparison with upstream (`scripts/upstream-compare.sh`):
//! the Python originals run with the real upstream modules they import, and
//! the binaries, one after the other on identical fresh installations at the
//! same paths, each observed the same way.
//!
//! The upstream modules are not part of the project. The script names the
//! folder holding them through [`UPSTREAM_DIR_ENV`]; without it every
//! comparison says so and does nothing, so the comparisons (all `#[ignore]`d)
//! never run in the normal suite.
//!
//! A comparison records what each side left behind as named facets (exit
//! status, stdout, the last stderr line, files, service states, the
//! service-manager calls that change something), normalised so that values
//! that differ between any two runs (PIDs, inodes, random identifiers,
//! times) compare by where they occur, and prints one line per scenario:
//! `upstream-compare <scenario>: same`, `... same but listed deviations:
//! <deviation entries>` (only differences [`LISTED_DEVIATIONS`] explains) or
//! `... differs: <facets>`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::binaries::binary_path;
use crate::originals::{Originals, MISSING_ORIGINALS, ORIGINAL_FILES};
use crate::poll::try_poll_until;
use crate::sandbox::Sandbox;

/// The variable naming the folder that holds the upstream modules.
pub const UPSTREAM_DIR_ENV: &str = "AGENTS_UPSTREAM_DIR";

/// Set (to anything) to print every facet of the original's side too.
pub const VERBOSE_ENV: &str = "AGENTS_UPSTREAM_VERBOSE";

/// Set to a part of scenario names to run only those scenarios (several
/// parts separated by `,`: the scenarios containing any of them; a part
/// `=NAME` selects the scenario NAME alone).
pub const ONLY_ENV: &str = "AGENTS_UPSTREAM_ONLY";

/// Whether `scenario` runs (see [`ONLY_ENV`]).
pub fn selected(scenario: &str) -> bool {
    std::env::var(ONLY_ENV).map_or(true, |only| {
        only.split(',').any(|part| match part.strip_prefix('=') {
            Some(name) => scenario == name,
            None => !part.is_empty() && scenario.contains(part),
        })
    })
}

/// What every comparison line starts with.
pub const REPORT_PREFIX: &str = "upstream-compare";

/// The upstream modules the originals import (directly or through each other)
/// that a complete upstream folder holds. `agentsdock_team_hub` and
/// `team_hub_host` are imported only on Team Hub paths, which no comparison
/// takes.
pub const UPSTREAM_MODULES: [&str; 12] = [
    "activation_transaction.py",
    "execution_durability.py",
    "execution_http.py",
    "execution_install.py",
    "execution_legacy_runner.py",
    "execution_preparation.py",
    "execution_recovery.py",
    "execution_recovery_status.py",
    "execution_transport.py",
    "execution_uninstall.py",
    "update_preparation.py",
    "update_recovery.py",
];

/// The Python originals and the upstream modules they import; neither
/// for [`Upstream::port_only`].
#[derive(Debug, Clone)]
pub struct Upstream {
    sources: Option<(Originals, PathBuf)>,
}

impl Upstream {
    /// The folders named by [`UPSTREAM_DIR_ENV`] and the originals; `None`
    /// (after saying so) when the variable is unset. A folder that lacks a
    /// module, or missing originals, fail the comparison: the script asked
    /// for it.
    pub fn locate(test: &str) -> Option<Upstream> {
        let modules = match std::env::var_os(UPSTREAM_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                eprintln!(
                    "{REPORT_PREFIX} {test}: not run: {UPSTREAM_DIR_ENV} is not set \
                     (scripts/upstream-compare.sh sets it)"
                );
                return None;
            }
        };
        let modules = modules
            .canonicalize()
            .unwrap_or_else(|err| panic!("{UPSTREAM_DIR_ENV}={}: {err}", modules.display()));
        for name in UPSTREAM_MODULES {
            assert!(
                modules.join(name).is_file(),
                "{UPSTREAM_DIR_ENV}={} lacks {name} (see docs/design/upstream-comparison.md)",
                modules.display()
            );
        }
        let originals = Originals::locate().unwrap_or_else(|| panic!("{MISSING_ORIGINALS}"));
        Some(Upstream {
            sources: Some((originals, modules)),
        })
    }

    /// The originals and the upstream modules for a test that produces a
    /// state with the originals (not a comparison): the modules from
    /// [`UPSTREAM_DIR_ENV`] (set by `scripts/upstream-compare.sh`, which
    /// runs such `#[ignore]`d tests), holding at least `needed` (what the
    /// originals the test runs import); `None` after reporting the test as
    /// skipped (a failure under `CI=true`) when any is missing.
    pub fn require(test: &str, needed: &[&str]) -> Option<Upstream> {
        let originals = Originals::require(test)?;
        let modules = std::env::var_os(UPSTREAM_DIR_ENV)
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .filter(|dir| needed.iter().all(|name| dir.join(name).is_file()));
        match modules.map(|dir| dir.canonicalize()) {
            Some(Ok(modules)) => Some(Upstream {
                sources: Some((originals, modules)),
            }),
            _ => {
                crate::skip::skip(
                    test,
                    &format!("upstream modules not found (set {UPSTREAM_DIR_ENV})"),
                );
                None
            }
        }
    }

    /// No sources: only [`Side::Port`] runs (the recorded facts' checks).
    pub fn port_only() -> Upstream {
        Upstream { sources: None }
    }

    /// [`Upstream::port_only`] for scenarios that run in the systemd
    /// sandbox; `None` (the test reported skipped) where it cannot start.
    pub fn port_only_in_sandbox(test: &str) -> Option<Upstream> {
        Sandbox::start_or_skip(test).map(|_| Upstream::port_only())
    }

    fn sources(&self) -> &(Originals, PathBuf) {
        self.sources
            .as_ref()
            .expect("only the binaries run without the upstream sources")
    }

    /// The Python originals.
    pub fn originals(&self) -> &Originals {
        &self.sources().0
    }

    /// The folder holding the upstream modules.
    pub fn modules(&self) -> &Path {
        &self.sources().1
    }

    /// Fills `dir` as a release runtime holds the helpers: the five original
    /// sources and the upstream modules side by side (0644; `uninstall.sh`
    /// 0755), so `Path(__file__).parent` and `sys.path[0]` find what a real
    /// release has beside them. Without sources the folder stays empty; a
    /// module the folder lacks is left out ([`Upstream::locate`] refuses an
    /// incomplete folder, [`Upstream::require`] checks what its test needs).
    pub fn install_runtime(&self, dir: &Path) {
        fs::create_dir_all(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        let Some((originals, modules)) = &self.sources else {
            return;
        };
        let sources = ORIGINAL_FILES
            .iter()
            .map(|name| originals.file(name))
            .chain(UPSTREAM_MODULES.iter().map(|name| modules.join(name)))
            .filter(|source| source.is_file());
        for source in sources {
            let name = source.file_name().expect("a file name");
            let target = dir.join(name);
            fs::copy(&source, &target)
                .unwrap_or_else(|err| panic!("copy {}: {err}", source.display()));
            let mode = if name == "uninstall.sh" { 0o755 } else { 0o644 };
            fs::set_permissions(&target, fs::Permissions::from_mode(mode)).unwrap();
        }
    }

    /// `helper` as `side` runs it, in the sandbox's environment, from the
    /// runtime `runtime` (see [`Upstream::install_runtime`]); stdout and
    /// stderr piped, stdin `/dev/null`, in its own process group (so a kill
    /// takes whatever it started with it).
    pub fn command(
        &self,
        side: Side,
        helper: Helper,
        runtime: &Path,
        sandbox: &Sandbox,
    ) -> Command {
        let mut command = match (side, helper) {
            (Side::Port, _) => sandbox.command(binary_path(helper.binary())),
            (Side::Original, Helper::Uninstall) => {
                let mut command = sandbox.command("bash");
                command.arg(runtime.join("uninstall.sh"));
                command
            }
            (Side::Original, Helper::UpdateHandoff) => {
                let mut command = sandbox.command("python3");
                command
                    .args(["-B", "-c", HANDOFF_DRIVER])
                    .env("ORIGINAL_RUNTIME", runtime);
                command
            }
            (Side::Original, _) => {
                let mut command = sandbox.command("python3");
                command.arg("-B").arg(runtime.join(helper.source()));
                command
            }
        };
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }
}

/// `update_handoff` has no command line (the server imports its functions):
/// this driver gives the original `update-handoff`'s, printing the result as one
/// sorted JSON line, or the last line a traceback would show (`Class:
/// message`, the class qualified by its module unless a builtin) on stderr
/// and exit 1.
const HANDOFF_DRIVER: &str = r#"
import json, os, sys, traceback
sys.path.insert(0, os.environ["ORIGINAL_RUNTIME"])
import update_handoff
arguments = sys.argv[1:]
options = dict(zip(arguments[1::2], arguments[2::2]))
try:
    if arguments[0] == "release":
        result = update_handoff.release_existing_handoff(options["--root"], options["--handoff-file"])
    else:
        source = options["--expected-status"]
        expected = json.loads(sys.stdin.read() if source == "-" else open(source, "rb").read())
        result = update_handoff.retry_failed_handoff(options["--root"], options["--status-file"], expected)
except Exception as error:
    print(traceback.format_exception_only(error)[-1].rstrip("\n"), file=sys.stderr)
    raise SystemExit(1)
print(json.dumps(result, sort_keys=True))
"#;

/// Which implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The Python original with the upstream modules.
    Original,
    /// The binary.
    Port,
}

impl Side {
    /// The original first: a scenario that breaks its fixture fails on the
    /// reference implementation.
    pub const BOTH: [Side; 2] = [Side::Original, Side::Port];

    /// `original` or `port`.
    pub fn label(self) -> &'static str {
        match self {
            Side::Original => "original",
            Side::Port => "port",
        }
    }
}

/// The helpers a comparison runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Helper {
    /// `execution_manage.py` / `execution-manage`.
    ExecutionManage,
    /// `execution_activation.py` / `execution-activation`.
    ExecutionActivation,
    /// `uninstall.sh` / `uninstall`.
    Uninstall,
    /// `update_handoff.py` (through a driver) / `update-handoff`.
    UpdateHandoff,
    /// `update_runner.py` / `update-runner`.
    UpdateRunner,
}

impl Helper {
    fn binary(self) -> &'static str {
        match self {
            Helper::ExecutionManage => "execution-manage",
            Helper::ExecutionActivation => "execution-activation",
            Helper::Uninstall => "uninstall",
            Helper::UpdateHandoff => "update-handoff",
            Helper::UpdateRunner => "update-runner",
        }
    }

    /// The original's file name.
    pub fn source(self) -> &'static str {
        match self {
            Helper::ExecutionManage => "execution_manage.py",
            Helper::ExecutionActivation => "execution_activation.py",
            Helper::Uninstall => "uninstall.sh",
            Helper::UpdateHandoff => "update_handoff.py",
            Helper::UpdateRunner => "update_runner.py",
        }
    }
}

/// Keys whose integer values differ between runs by nature (PIDs, inodes).
const VOLATILE_NUMBERS: [&str; 11] = [
    "device",
    "expires_at",
    "pid",
    "worker_pid",
    "gateway_pid",
    "runner_pid",
    "native_pid",
    "inode",
    "fence_inode",
    "recorded_at",
    "started_at_ns",
];

/// Rewrites one side's observations so that values which differ between
/// any two runs compare by where they occur: each distinct random token
/// (UUIDs, hexadecimal identifiers and digests of 16 or more digits) and
/// each distinct value of a [`VOLATILE_NUMBERS`] key becomes a numbered
/// placeholder in order of first appearance, times become `<time>`, and the
/// given literals (a PID, a port) their names. One normaliser per side, fed
/// the same facets in the same order.
#[derive(Debug, Default)]
pub struct Normalizer {
    literals: Vec<(String, String)>,
    tokens: HashMap<String, String>,
}

impl Normalizer {
    /// A normaliser naming a run's base directory `<base>`, its port
    /// `<port>` and the test worker's path `<test-worker>`, which differ
    /// between machines and runs (but not between the two sides of one
    /// comparison).
    pub fn for_run(base: &Path, port: u16) -> Normalizer {
        Normalizer::new(&[
            (base.to_string_lossy().into_owned(), "base"),
            (port.to_string(), "port"),
            (
                crate::test_worker_path().to_string_lossy().into_owned(),
                "test-worker",
            ),
        ])
    }

    /// A normaliser replacing each `(literal, name)` first (longest first).
    pub fn new(literals: &[(String, &str)]) -> Normalizer {
        let mut literals: Vec<(String, String)> = literals
            .iter()
            .filter(|(literal, _)| !literal.is_empty())
            .map(|(literal, name)| (literal.clone(), format!("<{name}>")))
            .collect();
        literals.sort_by_key(|(literal, _)| std::cmp::Reverse(literal.len()));
        Normalizer {
            literals,
            tokens: HashMap::new(),
        }
    }

    fn placeholder(&mut self, kind: &str, token: &str) -> String {
        let next = self.tokens.len() + 1;
        self.tokens
            .entry(format!("{kind}:{token}"))
            .or_insert_with(|| format!("<{kind}{next}>"))
            .clone()
    }

    /// `text` normalised.
    pub fn text(&mut self, text: &str) -> String {
        let mut text = decode_snapshots(text);
        for (literal, name) in &self.literals {
            text = replace_literal(&text, literal, name);
        }
        let text = self.numbers(&text);
        self.tokens_in(&text)
    }

    /// `data` (lossy UTF-8) normalised.
    pub fn bytes(&mut self, data: &[u8]) -> String {
        self.text(&String::from_utf8_lossy(data))
    }

    /// A lock owner file (`<pid>` and a newline): the PID as a placeholder.
    pub fn pid_file(&mut self, data: &[u8]) -> String {
        let text = String::from_utf8_lossy(data);
        let digits = text.trim_end_matches('\n');
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let placeholder = self.placeholder("n", digits);
            text.replacen(digits, &placeholder, 1)
        } else {
            self.text(&text)
        }
    }

    fn numbers(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('"') {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            let key = VOLATILE_NUMBERS.iter().find_map(|key| {
                let quoted = format!("\"{key}\":");
                rest.starts_with(&quoted).then_some(quoted.len())
            });
            let Some(key_len) = key else {
                out.push('"');
                rest = &rest[1..];
                continue;
            };
            out.push_str(&rest[..key_len]);
            rest = &rest[key_len..];
            let spaces = rest.len() - rest.trim_start_matches(' ').len();
            out.push_str(&rest[..spaces]);
            rest = &rest[spaces..];
            let digits = rest.len()
                - rest
                    .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                    .len();
            if digits > 0 {
                let value = &rest[..digits];
                out.push_str(&self.placeholder("n", value));
                rest = &rest[digits..];
            }
        }
        out.push_str(rest);
        out
    }

    fn tokens_in(&mut self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < bytes.len() {
            if let Some(length) = time_at(&bytes[at..]) {
                out.push_str("<time>");
                at += length;
                continue;
            }
            let is_token_byte = |b: u8| b.is_ascii_hexdigit() || b == b'-';
            let boundary = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
            if boundary && bytes[at].is_ascii_hexdigit() {
                let end = at
                    + bytes[at..]
                        .iter()
                        .take_while(|&&b| is_token_byte(b))
                        .count();
                let word = &text[at..end];
                let after_ok = end == bytes.len() || !bytes[end].is_ascii_alphanumeric();
                if after_ok {
                    if is_uuid(word) {
                        out.push_str(&self.placeholder("uuid", word));
                        at = end;
                        continue;
                    }
                    let hex = word.trim_end_matches('-');
                    if is_long_hex(hex) {
                        out.push_str(&self.placeholder("hex", hex));
                        at += hex.len();
                        continue;
                    }
                }
            }
            let width = text[at..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[at..at + width]);
            at += width;
        }
        out
    }
}

/// `text` with each journal snapshot (`"data": "<base64>"`, a file's
/// bytes) shown decoded, as `"data": "base64 of: <JSON-escaped text>"`, so
/// that the paths, ports and tokens inside it are normalised like any
/// other text. Data that is not base64 of UTF-8 stays as it is.
fn decode_snapshots(text: &str) -> String {
    use base64::Engine as _;
    const KEY: &str = "\"data\": \"";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        out.push_str(&rest[..at + KEY.len()]);
        rest = &rest[at + KEY.len()..];
        let end = rest.find('"').unwrap_or(rest.len());
        let encoded = &rest[..end];
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        match decoded {
            Some(decoded) => {
                let quoted = json_text(&python_compat::json::Json::from(decoded.as_str()));
                out.push_str("base64 of: ");
                out.push_str(&quoted[1..quoted.len() - 1]);
            }
            None => out.push_str(encoded),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `text` with `literal` replaced by `name`; a literal of digits only where
/// no digit touches it (a port inside a longer number is not that port).
fn replace_literal(text: &str, literal: &str, name: &str) -> String {
    if !literal.bytes().all(|b| b.is_ascii_digit()) {
        return text.replace(literal, name);
    }
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    while let Some(found) = text[done..].find(literal) {
        let at = done + found;
        let end = at + literal.len();
        let before = text[..at].bytes().last();
        let after = text[end..].bytes().next();
        let alone = !before.is_some_and(|b| b.is_ascii_digit())
            && !after.is_some_and(|b| b.is_ascii_digit())
            && !inside_token(text, at, end);
        out.push_str(&text[done..at]);
        out.push_str(if alone { name } else { literal });
        done = end;
    }
    out.push_str(&text[done..]);
    out
}

/// Whether `text[at..end]` lies inside a UUID or a long hex token, which
/// [`Normalizer::tokens_in`] names as a whole: a random token (a control
/// token's 64 hex digits) holds a run's PID or port now and then, and
/// naming that run would make two sides' tokens look different.
fn inside_token(text: &str, at: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    let is_token_byte = |b: u8| b.is_ascii_hexdigit() || b == b'-';
    let start = bytes[..at]
        .iter()
        .rposition(|&b| !is_token_byte(b))
        .map_or(0, |position| position + 1);
    let stop = bytes[end..]
        .iter()
        .position(|&b| !is_token_byte(b))
        .map_or(bytes.len(), |position| end + position);
    let word = text[start..stop].trim_matches('-');
    is_uuid(word) || is_long_hex(word)
}

/// A hex token [`Normalizer::tokens_in`] names: 16 or more hex digits, at
/// least one a decimal digit (so a word such as `deadbeefcafefeed` stays).
fn is_long_hex(word: &str) -> bool {
    word.len() >= 16
        && word.bytes().all(|b| b.is_ascii_hexdigit())
        && word.bytes().any(|b| b.is_ascii_digit())
}

fn is_uuid(word: &str) -> bool {
    let groups: Vec<&str> = word.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(group, length)| {
            group.len() == length && group.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// The length of an ISO time (`2024-01-01T00:00:00`, optional fraction and
/// `Z` or `+00:00`) at the start of `bytes`.
fn time_at(bytes: &[u8]) -> Option<usize> {
    let shape = b"0000-00-00T00:00:00";
    if bytes.len() < shape.len() {
        return None;
    }
    let matches = shape.iter().zip(bytes).all(|(&want, &got)| {
        if want == b'0' {
            got.is_ascii_digit()
        } else {
            want == got
        }
    });
    if !matches {
        return None;
    }
    let mut length = shape.len();
    if bytes.get(length) == Some(&b'.') {
        length += 1 + bytes[length + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
    }
    if bytes.get(length) == Some(&b'Z') {
        length += 1;
    } else if bytes[length..].starts_with(b"+00:00") {
        length += 6;
    }
    Some(length)
}

/// A JSON value as one sorted line (`json.dumps(value, sort_keys=True)`),
/// so its volatile numbers are normalised like the files'.
pub fn json_text(value: &python_compat::json::Json) -> String {
    python_compat::json::encode_line(value, true)
}

/// The worker's admission lease as one JSON line, or why there is none to
/// ask for.
/// A worker just (re)started may not have written its receipt yet: the
/// lease is asked for once the receipt names the unit's MainPID (or after
/// 20 s, when the receipt is what it is).
pub fn lease_text(sandbox: &Sandbox, installation: &crate::Installation) -> String {
    let unit = agents_common::WORKER_UNIT;
    if !sandbox.unit_state(unit).is_running() {
        return "worker not running".to_string();
    }
    let current = || {
        let main_pid = sandbox.unit_state(unit).main_pid;
        let receipt = installation.receipt(crate::Role::Worker)?;
        let pid = receipt
            .get("pid")
            .and_then(python_compat::json::Json::as_int)?;
        (pid == i128::from(main_pid)).then_some(())
    };
    if try_poll_until(Duration::from_secs(20), "the worker's receipt", current).is_err()
        && installation.receipt(crate::Role::Worker).is_none()
    {
        return "worker running without a receipt".to_string();
    }
    json_text(&installation.worker_lease())
}

/// What one side left behind, as named, normalised facets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observed {
    facets: BTreeMap<String, String>,
}

impl Observed {
    /// Records `value` as `facet` (replacing an earlier value).
    pub fn record(&mut self, facet: &str, value: impl Into<String>) {
        self.facets.insert(facet.to_string(), value.into());
    }

    /// Every facet by name.
    pub fn facets(&self) -> &BTreeMap<String, String> {
        &self.facets
    }

    /// The facets as text: per facet a `facet <name>` line, then each line
    /// of its value behind `| `.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for (facet, value) in &self.facets {
            text.push_str(&format!("facet {facet}\n"));
            for line in value.split('\n') {
                text.push_str(&format!("| {line}\n"));
            }
        }
        text
    }

    /// The facets [`Observed::to_text`] wrote.
    pub fn from_text(text: &str) -> Observed {
        let mut observed = Observed::default();
        let mut current: Option<(String, Vec<&str>)> = None;
        for line in text.lines() {
            if let Some(facet) = line.strip_prefix("facet ") {
                if let Some((name, lines)) = current.take() {
                    observed.record(&name, lines.join("\n"));
                }
                current = Some((facet.to_string(), Vec::new()));
            } else if let Some((_, lines)) = current.as_mut() {
                let value = line.strip_prefix("| ").or_else(|| line.strip_prefix('|'));
                lines.push(value.unwrap_or_else(|| panic!("not a facet line: {line:?}")));
            }
        }
        if let Some((name, lines)) = current {
            observed.record(&name, lines.join("\n"));
        }
        observed
    }

    /// Adds `other`'s facets, each prefixed with `prefix` and a space.
    pub fn merge(&mut self, prefix: &str, other: Observed) {
        for (facet, value) in other.facets {
            self.facets.insert(format!("{prefix} {facet}"), value);
        }
    }

    /// Exit status, stdout and the last stderr line of a run, as
    /// `<name> exit`, `<name> stdout` and `<name> stderr`.
    pub fn run(&mut self, name: &str, output: &Output, normalizer: &mut Normalizer) {
        let exit = match (output.status.code(), output.status.signal_number()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "unknown".to_string(),
        };
        self.record(&format!("{name} exit"), exit);
        self.record(&format!("{name} stdout"), normalizer.bytes(&output.stdout));
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("");
        self.record(&format!("{name} stderr"), normalizer.text(last));
    }

    /// Every entry under `root` except those whose relative path starts
    /// with one of `skip`: one `<name> entries` facet listing kinds and
    /// modes, and one `<name>/<path>` facet per regular file with its
    /// content (symlinks record their target).
    pub fn tree(&mut self, name: &str, root: &Path, skip: &[&str], normalizer: &mut Normalizer) {
        let mut listing = Vec::new();
        for (relative, info) in walk(root) {
            let text = relative.to_string_lossy().into_owned();
            if skip.iter().any(|prefix| text.starts_with(prefix)) {
                continue;
            }
            let shown = normalizer.text(&text);
            let path = root.join(&relative);
            let mode = info.mode() & 0o7777;
            let kind = if info.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap_or_default();
                format!("link -> {}", normalizer.text(&target.to_string_lossy()))
            } else if info.is_dir() {
                format!("dir {mode:o}")
            } else if info.is_file() {
                let content = fs::read(&path).unwrap_or_default();
                let text = if relative.file_name().is_some_and(|name| name == "pid") {
                    // A lock owner file: `<pid>\n`.
                    normalizer.pid_file(&content)
                } else {
                    normalizer.bytes(&content)
                };
                self.record(&format!("{name}/{shown}"), text);
                format!("file {mode:o} nlink {}", info.nlink())
            } else {
                format!("special {mode:o}")
            };
            listing.push(format!("{shown}: {kind}"));
        }
        self.record(&format!("{name} entries"), listing.join("\n"));
    }
}

trait SignalNumber {
    fn signal_number(&self) -> Option<i32>;
}

impl SignalNumber for std::process::ExitStatus {
    fn signal_number(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(self)
    }
}

/// Every entry below `root` (not following links), sorted by path.
fn walk(root: &Path) -> Vec<(PathBuf, fs::Metadata)> {
    fn visit(root: &Path, relative: &Path, entries: &mut Vec<(PathBuf, fs::Metadata)>) {
        let Ok(items) = fs::read_dir(root.join(relative)) else {
            return;
        };
        let mut names: Vec<OsString> = items
            .filter_map(|item| item.ok().map(|item| item.file_name()))
            .collect();
        names.sort();
        for name in names {
            let child = relative.join(name);
            let Ok(info) = fs::symlink_metadata(root.join(&child)) else {
                continue;
            };
            let directory = info.is_dir();
            entries.push((child.clone(), info));
            if directory {
                visit(root, &child, entries);
            }
        }
    }
    let mut entries = Vec::new();
    visit(root, Path::new(""), &mut entries);
    entries
}

/// A difference docs/design/deviations.md lists:
/// in the scenarios whose names start with `scenario`, the facets whose
/// names start with `facet` may differ only by the port's words `port`
/// standing where the original has `original`, or, where both are empty, entirely
/// (the port finishes what the original refuses): there the recorded facts
/// hold the port's value.
#[derive(Debug, Clone, Copy)]
pub struct ListedDeviation {
    /// The scenarios (a name prefix).
    pub scenario: &'static str,
    /// The facets that differ (a name prefix).
    pub facet: &'static str,
    /// The original's text.
    pub original: &'static str,
    /// The port's text in its place.
    pub port: &'static str,
    /// The deviation's entry in docs/design/deviations.md, as the report names it.
    pub readme: &'static str,
}

impl ListedDeviation {
    fn whole_facet(&self) -> bool {
        self.original.is_empty() && self.port.is_empty()
    }
}

/// The entry in docs/design/deviations.md for a split uninstall rerun after a kill.
const RERUN_FINISHES: &str =
    "uninstall: a rerun finishes a split removal a kill interrupted (Crash safety)";

/// Every deviation a comparison may show (docs/design/deviations.md, Deviations from the
/// originals): each is deliberate, and anything else is a difference.
pub const LISTED_DEVIATIONS: [ListedDeviation; 3] = [
    ListedDeviation {
        scenario: "update-runner-prepared-signature",
        facet: "row",
        original: "\"message\": \"\"",
        port: "\"message\": \"release manifest signature is invalid\"",
        readme: "update-runner: a manifest signature that does not verify is named",
    },
    // Killed at the daemon-reload after the unit files were removed: the
    // original's rerun refuses for want of a unit file; the port's rerun
    // finishes the removal from the intent.
    ListedDeviation {
        scenario: "uninstall-split-killed-at-the-reload-after-removal-started-then-rerun",
        facet: "run 2 ",
        original: "",
        port: "",
        readme: RERUN_FINISHES,
    },
    ListedDeviation {
        scenario: "uninstall-split-killed-at-the-reload-after-removal-started-then-rerun",
        facet: "after run 2 ",
        original: "",
        port: "",
        readme: RERUN_FINISHES,
    },
];

/// The listed deviation that explains `facet` of `scenario` differing from
/// `original` to `port`, if one does; whole-facet deviations only if `whole`.
fn listed_deviation(
    scenario: &str,
    facet: &str,
    (original, port): (Option<&String>, Option<&String>),
    whole: bool,
) -> Option<&'static ListedDeviation> {
    LISTED_DEVIATIONS.iter().find(|listed| {
        if !scenario.starts_with(listed.scenario) || !facet.starts_with(listed.facet) {
            return false;
        }
        if listed.whole_facet() {
            return whole;
        }
        match (original, port) {
            (Some(original), Some(port)) => {
                original.contains(listed.original)
                    && original.replace(listed.original, listed.port) == *port
            }
            _ => false,
        }
    })
}

/// The facts to record of `scenario`: the original's facets, but the port's
/// where a whole-facet deviation is listed.
fn recorded_facts(scenario: &str, original: &Observed, port: &Observed) -> Observed {
    let mut facts = original.clone();
    let facets: std::collections::BTreeSet<&String> =
        original.facets.keys().chain(port.facets.keys()).collect();
    for facet in facets {
        let whole = LISTED_DEVIATIONS.iter().any(|listed| {
            listed.whole_facet()
                && scenario.starts_with(listed.scenario)
                && facet.starts_with(listed.facet)
        });
        if whole {
            match port.facets.get(facet) {
                Some(value) => facts.record(facet, value.clone()),
                None => {
                    facts.facets.remove(facet);
                }
            }
        }
    }
    facts
}

/// How a scenario compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every facet the same.
    Same,
    /// Only listed deviations differ.
    Listed,
    /// Something else differs.
    Differs,
}

/// The facets of `scenario` in which `original` and `port` differ beyond the
/// listed deviations (each printed to stderr), and the deviation entries of
/// the listed deviations found.
fn differences(
    scenario: &str,
    original: &Observed,
    port: &Observed,
    whole: bool,
) -> (Vec<String>, Vec<&'static str>) {
    let mut differing = Vec::new();
    let mut listed = Vec::new();
    let facets: std::collections::BTreeSet<&String> =
        original.facets.keys().chain(port.facets.keys()).collect();
    for facet in facets {
        let (left, right) = (original.facets.get(facet), port.facets.get(facet));
        if left == right {
            continue;
        }
        if let Some(deviation) = listed_deviation(scenario, facet, (left, right), whole) {
            if !listed.contains(&deviation.readme) {
                listed.push(deviation.readme);
            }
            continue;
        }
        eprintln!(
            "--- {scenario}: {facet}\n  original: {}\n  port: {}",
            left.map_or("(none)".to_string(), |text| text
                .replace('\n', "\n        ")),
            right.map_or("(none)".to_string(), |text| text
                .replace('\n', "\n        ")),
        );
        differing.push(facet.clone());
    }
    (differing, listed)
}

/// Compares the two sides of `scenario` and prints its line (`same`,
/// `same but listed deviations: <deviation entries>` or `differs: <facets>`);
/// details of each differing facet go to stderr. With [`RECORD_ENV`] set,
/// the original's facets of a scenario that does not differ become its
/// recorded facts ([`check_recorded`]), the port's for a whole-facet
/// deviation.
pub fn report(scenario: &str, original: &Observed, port: &Observed) -> Verdict {
    if std::env::var_os(VERBOSE_ENV).is_some() {
        for (facet, value) in &original.facets {
            eprintln!("=== {scenario}: {facet}\n  {}", value.replace('\n', "\n  "));
        }
    }
    let (differing, listed) = differences(scenario, original, port, true);
    let verdict = if !differing.is_empty() {
        Verdict::Differs
    } else if !listed.is_empty() {
        Verdict::Listed
    } else {
        Verdict::Same
    };
    if verdict != Verdict::Differs && std::env::var_os(RECORD_ENV).is_some() {
        let path = recorded_path(scenario);
        fs::create_dir_all(path.parent().expect("a fixture folder")).unwrap();
        fs::write(&path, recorded_facts(scenario, original, port).to_text())
            .unwrap_or_else(|err| panic!("record {}: {err}", path.display()));
    }
    // On a line of its own: libtest may have printed `test name ... ` first.
    match verdict {
        Verdict::Differs => println!(
            "\n{REPORT_PREFIX} {scenario}: differs: {}",
            differing.join(", ")
        ),
        Verdict::Listed => println!(
            "\n{REPORT_PREFIX} {scenario}: same but listed deviations: {}",
            listed.join("; ")
        ),
        Verdict::Same => println!("\n{REPORT_PREFIX} {scenario}: same"),
    }
    verdict
}

/// Runs every selected scenario (named, with what `run` needs) on both
/// sides, the original first, and reports each ([`report`]); does nothing,
/// after saying so, without the upstream folder ([`Upstream::locate`]).
/// `run` gets a port free for the scenario's servers.
pub fn compare_scenarios<S>(
    test: &str,
    scenarios: impl IntoIterator<Item = (String, S)>,
    run: impl Fn(&Upstream, Side, &S, u16) -> Observed,
) {
    let Some(upstream) = Upstream::locate(test) else {
        return;
    };
    let port = crate::free_port();
    for (name, scenario) in scenarios {
        if !selected(&name) {
            continue;
        }
        let [original, port] = Side::BOTH.map(|side| run(&upstream, side, &scenario, port));
        report(&name, &original, &port);
    }
}

/// Runs every scenario on the binary alone and requires the facts the
/// comparison recorded ([`check_recorded`]): the normal suite's half of
/// [`compare_scenarios`], which needs no upstream file. `None` (a sandbox
/// that cannot start, already reported) checks nothing.
pub fn check_scenarios_recorded<S>(
    upstream: Option<Upstream>,
    scenarios: impl IntoIterator<Item = (String, S)>,
    run: impl Fn(&Upstream, Side, &S, u16) -> Observed,
) {
    let Some(upstream) = upstream else {
        return;
    };
    let port = crate::free_port();
    for (name, scenario) in scenarios {
        check_recorded(&name, &run(&upstream, Side::Port, &scenario, port));
    }
}

/// Set (to anything) to record the original's facets of each scenario that
/// does not differ as its fixture (`scripts/upstream-compare.sh --record`).
pub const RECORD_ENV: &str = "AGENTS_UPSTREAM_RECORD";

/// `tests/fixtures/upstream/<scenario>.facets`: what the original did with
/// the upstream modules, normalised, as [`Observed::to_text`] writes it.
pub fn recorded_path(scenario: &str) -> PathBuf {
    crate::fixture_path("upstream").join(format!("{scenario}.facets"))
}

/// Requires `port` (a binary's run of `scenario`) to show the recorded
/// facts of the original, up to the listed deviations: the comparison's
/// result, kept by the normal suite without the upstream files.
pub fn check_recorded(scenario: &str, port: &Observed) {
    let path = recorded_path(scenario);
    let text = fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err} (scripts/upstream-compare.sh --record writes it)",
            path.display()
        )
    });
    let recorded = Observed::from_text(&text);
    // The recorded facts hold the port's side of whole-facet deviations.
    let (differing, _) = differences(scenario, &recorded, port, false);
    assert!(
        differing.is_empty(),
        "{scenario}: the binary no longer does what the original did ({}): {}",
        path.display(),
        differing.join(", ")
    );
}

/// A `systemctl` in front of the real one on the helpers' `PATH`: it logs
/// every call, and can stall the call whose arguments are exactly a given
/// line (its Nth occurrence), so a test can kill the helper there.
#[derive(Debug)]
pub struct SystemctlTrace {
    dir: PathBuf,
}

impl SystemctlTrace {
    /// Installs the wrapper in `<dir>/bin`.
    pub fn install(dir: &Path) -> SystemctlTrace {
        let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|directory| directory.join("systemctl"))
            .find(|candidate| candidate.is_file())
            .expect("systemctl is installed");
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        let log = dir.to_string_lossy();
        let script = format!(
            "#!/bin/sh\n\
             log='{log}'\n\
             printf '%s\\n' \"$*\" >> \"$log/calls\"\n\
             if [ -f \"$log/arm-at\" ] && [ \"$*\" = \"$(cat \"$log/arm-at\")\" ]; then\n\
               rm -f \"$log/arm-at\"\n\
               target=$(cat \"$log/arm-target\")\n\
               cp \"$log/arm-content\" \"$target.arming\" && mv \"$target.arming\" \"$target\"\n\
             fi\n\
             if [ -f \"$log/stall-at\" ] && [ \"$*\" = \"$(cat \"$log/stall-at\")\" ]; then\n\
               seen=$(( $(cat \"$log/stall-seen\" 2>/dev/null || echo 0) + 1 ))\n\
               echo $seen > \"$log/stall-seen\"\n\
               if [ \"$seen\" = \"$(cat \"$log/stall-occurrence\")\" ]; then\n\
                 echo $$ > \"$log/stalled\"\n\
                 exec sleep 600\n\
               fi\n\
             fi\n\
             exec '{real}' \"$@\"\n",
            real = real.display()
        );
        let wrapper = bin.join("systemctl");
        fs::write(&wrapper, script).unwrap();
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        SystemctlTrace {
            dir: dir.to_path_buf(),
        }
    }

    /// Puts the wrapper first on `command`'s `PATH`.
    pub fn wrap(&self, command: &mut Command, sandbox: &Sandbox) {
        let path = sandbox
            .env()
            .into_iter()
            .find_map(|(name, value)| (name == "PATH").then_some(value))
            .unwrap_or_default();
        let mut paths = vec![self.dir.join("bin")];
        paths.extend(std::env::split_paths(&path));
        command.env("PATH", std::env::join_paths(paths).unwrap());
    }

    /// Stalls the `occurrence`th call with exactly `arguments` (from now on).
    pub fn stall_at(&self, arguments: &str, occurrence: u32) {
        let _ = fs::remove_file(self.dir.join("stall-seen"));
        let _ = fs::remove_file(self.dir.join("stalled"));
        fs::write(self.dir.join("stall-occurrence"), occurrence.to_string()).unwrap();
        fs::write(self.dir.join("stall-at"), arguments).unwrap();
    }

    /// On the next call with exactly `arguments`, before it runs, puts
    /// `content` at `target` (atomically): a switch that must be in place
    /// when the call's effect starts, with no window for the helper to race
    /// a test that would set it after seeing the call.
    pub fn arm_at(&self, arguments: &str, target: &Path, content: &[u8]) {
        fs::write(self.dir.join("arm-content"), content).unwrap();
        fs::write(
            self.dir.join("arm-target"),
            target.as_os_str().as_encoded_bytes(),
        )
        .unwrap();
        fs::write(self.dir.join("arm-at"), arguments).unwrap();
    }

    /// Stops stalling and arming.
    pub fn clear(&self) {
        let _ = fs::remove_file(self.dir.join("stall-at"));
        let _ = fs::remove_file(self.dir.join("arm-at"));
    }

    /// Whether the stalled call was reached.
    pub fn stalled(&self) -> bool {
        self.dir.join("stalled").exists()
    }

    /// The PID of the held call (it sleeps in place of `systemctl`).
    pub fn stalled_pid(&self) -> Option<u32> {
        fs::read_to_string(self.dir.join("stalled"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The calls that change something (everything but `show`), one a line,
    /// since the last [`SystemctlTrace::reset`].
    pub fn changes(&self) -> String {
        fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.starts_with("--user show "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Forgets the calls logged so far.
    pub fn reset(&self) {
        let _ = fs::remove_file(self.dir.join("calls"));
    }
}

/// Waits up to a minute for `child` and returns its output; kills its
/// process group if it does not end.
pub fn finish(child: Child) -> Output {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(Duration::from_secs(90)) {
        Ok(output) => output.expect("wait for the helper"),
        Err(_) => {
            kill_group(pid);
            panic!("helper {pid} did not finish within 90 s")
        }
    }
}

/// SIGKILLs the process group `leader` leads (a [`Upstream::command`]).
pub fn kill_group(leader: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(leader as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Waits until `reached` holds (the helper arrived where it is to be
/// killed) or the helper ended first; `true` when it was reached.
pub fn wait_reached(child: &mut Child, what: &str, reached: impl Fn() -> bool) -> bool {
    try_poll_until(Duration::from_secs(60), what, || {
        if reached() {
            return Some(true);
        }
        matches!(child.try_wait(), Ok(Some(_))).then_some(false)
    })
    .unwrap_or(false)
}

/// State-root entries the services themselves write (receipts, sockets,
/// locks, logs, the test worker's own files): not the helpers' doing.
pub const SERVICE_FILES: [&str; 7] = [
    "test-worker",
    "execution/worker.json",
    "execution/gateway.json",
    "execution/worker.lock",
    "execution/worker.socket",
    "execution/logs",
    "admin/state-owner.lock",
];

impl Observed {
    /// The installation's roots (`install`, `config`, `state` without
    /// [`SERVICE_FILES`]) and the unit directory (`units`).
    pub fn installation(
        &mut self,
        sandbox: &Sandbox,
        installation: &crate::Installation,
        normalizer: &mut Normalizer,
    ) {
        let roots = [
            installation.install_root.as_path(),
            &installation.config_root,
            &installation.state_root,
        ];
        self.roots(sandbox, roots, normalizer);
    }

    /// [`Observed::installation`] of these install, config and state roots.
    pub fn roots(&mut self, sandbox: &Sandbox, roots: [&Path; 3], normalizer: &mut Normalizer) {
        let [install, config, state] = roots;
        self.tree("install", install, &[], normalizer);
        self.tree("config", config, &[], normalizer);
        self.tree("state", state, &SERVICE_FILES, normalizer);
        self.tree("units", &sandbox.unit_dir(), &[], normalizer);
    }

    /// Each unit's settled state and enablement, and whether its MainPID is
    /// still the one given (`same`), another (`new`) or none, as `services`.
    pub fn services(&mut self, sandbox: &Sandbox, units: &[(&str, u32)]) {
        let mut lines = Vec::new();
        for &(unit, before) in units {
            let settled = ["active", "inactive", "failed"];
            let state = try_poll_until(Duration::from_secs(20), "a settled unit", || {
                let state = sandbox.unit_state(unit);
                settled
                    .contains(&state.active_state.as_str())
                    .then_some(state)
            })
            .unwrap_or_else(|_| sandbox.unit_state(unit));
            let pid = match state.main_pid {
                0 => "none",
                pid if pid == before => "same",
                _ => "new",
            };
            lines.push(format!(
                "{unit}: {} {} pid {pid}",
                state.active_state, state.unit_file_state
            ));
        }
        self.record("services", lines.join("\n"));
    }
}

/// Where a helper is killed (SIGKILL to its process group).
#[derive(Debug, Clone)]
pub enum KillPoint {
    /// Nowhere: the helper runs to its end.
    Never,
    /// While the `occurrence`th `systemctl` call with exactly these
    /// arguments is stalled.
    Systemctl(&'static str, u32),
    /// While a role holds back its reply to a request (its effect already
    /// taken), stalled from the moment the `systemctl` call with these
    /// arguments was made (from the start when `None`).
    Request(crate::Role, crate::RequestMatch, Option<&'static str>),
}

/// How long a role holds back the reply at a [`KillPoint::Request`].
const STALL_SECONDS: f64 = 3.0;

/// Runs `command` (see [`Upstream::command`], its `PATH` through `trace`)
/// and kills it at `point`; returns its output and whether the point was
/// reached before it ended. The roles' switches are reset afterwards and a
/// stalled reply has been sent (to nobody) when this returns.
pub fn run_to(
    mut command: Command,
    point: &KillPoint,
    trace: &SystemctlTrace,
    installation: &crate::Installation,
) -> (Output, bool) {
    use crate::{Role, Switches};
    let marks = [Role::Worker, Role::Gateway].map(|role| installation.requests(role).len());
    let mark = |role: Role| marks[usize::from(role == Role::Gateway)];
    let stall = |role: Role, on: &crate::RequestMatch| {
        installation.set_switches(role, &Switches::stalling(on.clone(), STALL_SECONDS));
    };
    match point {
        KillPoint::Never => {}
        KillPoint::Systemctl(arguments, occurrence) => trace.stall_at(arguments, *occurrence),
        KillPoint::Request(role, on, None) => stall(*role, on),
        KillPoint::Request(role, on, Some(call)) => {
            let switches = Switches::stalling(on.clone(), STALL_SECONDS);
            let content = python_compat::json::encode_line(&switches.to_json(), true) + "\n";
            let target = crate::switches_path(&installation.state_root, *role);
            trace.arm_at(call, &target, content.as_bytes());
        }
    }
    let mut child = command.spawn().expect("the helper starts");
    let reached = match point {
        KillPoint::Never => true,
        KillPoint::Systemctl(..) => {
            wait_reached(&mut child, "the stalled call", || trace.stalled())
        }
        KillPoint::Request(role, on, after) => {
            // The wrapper armed the stall as the call was made.
            let armed = after.is_none_or(|call| {
                let made = || trace.changes().lines().any(|line| line == call);
                wait_reached(&mut child, "the call before the stall", made)
            });
            let stalled = || {
                installation
                    .requests_since(*role, mark(*role))
                    .iter()
                    .any(|record| {
                        record.outcome == "stalled"
                            && on.matches(&record.path, record.action.as_deref())
                    })
            };
            armed && wait_reached(&mut child, "the stalled request", stalled)
        }
    };
    if !matches!(point, KillPoint::Never) && reached {
        kill_group(child.id());
    }
    let output = finish(child);
    trace.clear();
    for role in [Role::Worker, Role::Gateway] {
        installation.set_switches(role, &Switches::default());
    }
    if matches!(point, KillPoint::Request(..)) {
        std::thread::sleep(Duration::from_secs_f64(STALL_SECONDS));
    }
    (output, reached)
}

#[cfg(test)]
mod tests {
    use super::Normalizer;

    fn normalizer() -> Normalizer {
        Normalizer::new(&[("5813".to_string(), "test-pid")])
    }

    #[test]
    fn a_pid_standing_alone_is_named() {
        assert_eq!(
            normalizer().text("lock .install-lock.5813.tmp pid 5813\n"),
            "lock .install-lock.<test-pid>.tmp pid <test-pid>\n"
        );
        assert_eq!(normalizer().text("port 158130"), "port 158130");
    }

    #[test]
    fn a_random_token_holding_the_pid_is_one_token() {
        let plain = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let holding = "0123456789abcdef0123456789abcdefa5813b6789abcdef0123456789abcdef";
        assert_eq!(normalizer().text(plain), "<hex1>");
        assert_eq!(normalizer().text(holding), "<hex1>");
        let uuid = "01234567-89ab-cdef-5813-0123456789ab";
        assert_eq!(normalizer().text(uuid), "<uuid1>");
    }
}

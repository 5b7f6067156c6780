//! The recovery-owner evidence of `execution_recovery` and the admitted
//! update intent of `update_recovery`, as `execution_activation` reads them.
//!
//! install.sh arms a durable native "recovery owner" job per split
//! activation under `<root>/.activation-recovery/<transaction_id>/`. The
//! helper never arms, runs or retires one; it only proves that none exists
//! (`recovery-state`) or that every historical one is retired before an old
//! updater's intent may be replaced (`require_retired_legacy_intent`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::io::{read_guarded, ReadPolicy, ACTIVATION_CONFIG_LIMIT};
use crate::activation::volume::directory_binding;
use crate::error::{Error, Result};
use crate::fs::{normalize_path, owned_directory, read_file};
use crate::platform::PlatformName;
use crate::services::CommandCapture;
use crate::services::CommandRunner;
use python_compat::{
    hex, is_lower_hex, is_prefixed_hex,
    json::{parse_json, Json, JsonObject},
    json_object, ErrorClass,
};

/// `DIRECTORY`: the recovery owners' parent under the install root.
pub const RECOVERY_DIRECTORY: &str = ".activation-recovery";

/// `PAYLOAD`: the bootstrap sources an owner copies, in the original's order.
pub const RECOVERY_PAYLOAD: [&str; 8] = [
    "execution_recovery.py",
    "activation_transaction.py",
    "execution_install.py",
    "execution_manage.py",
    "execution_transport.py",
    "execution_preparation.py",
    "execution_recovery_status.py",
    "execution_http.py",
];

/// `OWNER_KEYS`: the exact key set of `owner.json`.
pub const RECOVERY_OWNER_KEYS: [&str; 22] = [
    "format",
    "root",
    "root_binding",
    "transaction_id",
    "version",
    "api_contract",
    "source_binding",
    "source_inventory",
    "home",
    "platform",
    "config_root",
    "state_root",
    "bind",
    "port",
    "expected_server_identity",
    "managed_update_id",
    "interpreter",
    "interpreter_sha256",
    "payload",
    "fresh",
    "status_binding",
    "expected_service_cgroup",
];

/// `execution_recovery_status.INTENT_KEYS`: the exact key set of an
/// activation recovery intent.
pub const INTENT_KEYS: [&str; 8] = [
    "format",
    "root",
    "root_binding",
    "candidate_binding",
    "version",
    "api_contract",
    "update_id",
    "server_identity",
];

/// `_label(value)`: the native job label of a transaction's owner.
pub(crate) fn recovery_label(transaction_id: &str, platform: &PlatformName) -> String {
    let suffix = transaction_id
        .strip_prefix("activation-")
        .unwrap_or(transaction_id);
    if platform.uses_launchd_paths() {
        format!("com.agentsdock.recovery.{suffix}")
    } else {
        format!("agents-server-recovery-{suffix}")
    }
}

/// `_service_path(value)`: where the owner's unit or plist is registered.
pub fn recovery_service_path(
    transaction_id: &str,
    platform: impl Into<PlatformName>,
    home: &Path,
) -> PathBuf {
    let platform = platform.into();
    let label = recovery_label(transaction_id, &platform);
    if platform.uses_launchd_paths() {
        home.join("Library/LaunchAgents")
            .join(format!("{label}.plist"))
    } else {
        home.join(".config/systemd/user")
            .join(format!("{label}.service"))
    }
}

/// `PATH` of the recovery job: the user's tools first, then Homebrew and
/// the system directories (`<home>` is prepended at render time).
const RECOVERY_PATH_TAIL: &str =
    "/.local/bin:/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// `render_service(directory, value)` of `execution_recovery`: the exact unit
/// (Linux) or plist (Darwin) `arm` registers for the owner in `directory`.
/// Readers compare a registration with this rendering, so a job that is not
/// byte-for-byte the owner's own is refused instead of trusted or removed.
pub fn render_recovery_service(directory: &Path, owner: &JsonObject) -> Result<Vec<u8>> {
    let field = |key: &str| -> Result<String> {
        match owner.get(key) {
            Some(Json::Str(text)) => Ok(text.clone()),
            _ => Err(Error::value(
                "configuration text must be nonempty and contain no control characters",
            )),
        }
    };
    let transaction = field("transaction_id")?;
    let platform = PlatformName::parse(&field("platform")?);
    let directory_text = crate::layout::path_text(directory);
    let command = [
        field("interpreter")?,
        "-B".to_string(),
        crate::layout::path_text(&directory.join("execution_recovery.py")),
        "run".to_string(),
        "--root".to_string(),
        field("root")?,
        "--transaction-id".to_string(),
        transaction.clone(),
    ];
    let search_path = format!("{}{RECOVERY_PATH_TAIL}", field("home")?);
    if platform.uses_launchd_paths() {
        use crate::layout::PlistValue;
        let log = |name: &str| PlistValue::String(format!("{directory_text}/{name}"));
        return Ok(crate::layout::plist_document(
            [
                (
                    "Label",
                    PlistValue::String(recovery_label(&transaction, &platform)),
                ),
                ("ProgramArguments", PlistValue::Array(command.into())),
                (
                    "WorkingDirectory",
                    PlistValue::String(directory_text.clone()),
                ),
                (
                    "EnvironmentVariables",
                    PlistValue::Dict(
                        [("PATH".to_string(), PlistValue::String(search_path))].into(),
                    ),
                ),
                ("RunAtLoad", PlistValue::Bool(true)),
                (
                    // Restarted after a crash, never after finishing its work.
                    "KeepAlive",
                    PlistValue::Dict(
                        [("SuccessfulExit".to_string(), PlistValue::Bool(false))].into(),
                    ),
                ),
                ("ThrottleInterval", PlistValue::Integer(30)),
                ("Umask", PlistValue::Integer(0o077)),
                ("ExitTimeOut", PlistValue::Integer(0)),
                ("StandardOutPath", log("native.stdout.log")),
                ("StandardErrorPath", log("native.stderr.log")),
            ]
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect(),
        ));
    }
    let words = command
        .iter()
        .map(|word| crate::layout::unit_word(word, true))
        .collect::<Result<Vec<_>>>()?;
    Ok(format!(
        "[Unit]\nDescription=AgentsDock admitted activation recovery\nAfter=network-online.target\n\
         [Service]\nType=simple\nUMask=0077\nRestart=on-failure\nRestartSec=30s\n\
         TimeoutStopSec=infinity\nSendSIGKILL=no\nWorkingDirectory={}\nEnvironment={}\n\
         ExecStart={}\n[Install]\nWantedBy=default.target\n",
        crate::layout::unit_directory(directory)?,
        crate::layout::unit_word(&format!("PATH={search_path}"), false)?,
        words.join(" "),
    )
    .into_bytes())
}

/// `_directory(root, transaction)`: the owner directory, which must be a
/// private symlink-free directory under a private root and parent.
pub fn recovery_directory(root: &Path, transaction: &str) -> Result<PathBuf> {
    if !is_prefixed_hex(transaction, "activation-", 24) {
        return Err(Error::value("invalid recovery transaction"));
    }
    let root = normalize_path(root)?;
    owned_directory(&root, true)?;
    let parent = root.join(RECOVERY_DIRECTORY);
    normalize_path(&parent)?;
    owned_directory(&parent, true)?;
    let result = parent.join(transaction);
    normalize_path(&result)?;
    owned_directory(&result, true)?;
    Ok(result)
}

/// `_json(path)`: a private evidence object (0600, at most 1 MiB; duplicate
/// keys allowed, the last wins).
pub fn recovery_evidence(path: &Path) -> Result<JsonObject> {
    let (data, _mode) = read_file(path, true)?;
    match parse_json(&data)? {
        Json::Object(object) => Ok(object),
        _ => Err(Error::value("recovery evidence is not an object")),
    }
}

/// `_digest(path)`: SHA-256 of an owned file that may be 0644.
pub fn evidence_digest(path: &Path) -> Result<String> {
    let data = read_guarded(path, ACTIVATION_CONFIG_LIMIT, ReadPolicy::OWNED_REGULAR)?.data;
    Ok(hex(&Sha256::digest(data)))
}

/// `update_recovery.activation_intent(...)`: the durable record binding an
/// admitted managed update to this root and retained candidate directory,
/// which the server keeps in `server-update.json` as `_activation_recovery`.
pub fn activation_intent(
    root: &Path,
    candidate: &Path,
    version: &str,
    api_contract: i128,
    update_id: &str,
    server_identity: &str,
) -> Result<JsonObject> {
    let root = preparation_path(root)?;
    let candidate = preparation_path(candidate)?;
    directory_binding(&root)?;
    directory_binding(&root.join("releases"))?;
    if candidate.parent() != Some(root.join("releases").as_path()) {
        return Err(Error::value("candidate must be a direct retained release"));
    }
    directory_binding(&candidate)?;
    if !is_lower_hex(update_id, 32) || server_identity.is_empty() {
        return Err(Error::value("activation recovery identity is invalid"));
    }
    Ok(json_object! {
        "format" => 1,
        "root" => root.to_string_lossy().into_owned(),
        "root_binding" => directory_binding(&root)?,
        "candidate_binding" => directory_binding(&candidate)?,
        "version" => version,
        "api_contract" => api_contract,
        "update_id" => update_id,
        "server_identity" => server_identity,
    })
}

/// `execution_preparation._path`: absolute, no `..`, no control characters,
/// no symlink ancestors, as every path of a prepared candidate and of the
/// recovery intent is checked; Python's other refusals keep their own class.
pub fn preparation_path(path: &Path) -> Result<PathBuf> {
    normalize_path(path).map_err(|error| {
        if error.is_a(ErrorClass::Value) {
            Error::value("preparation path must be absolute without symlink ancestors")
        } else {
            error
        }
    })
}

/// `RecoveryService`'s command timeout (the original's `timeout=20`).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// `RecoveryService(registration)`: the native view of one owner's job.
pub struct RecoveryService<'a> {
    transaction_id: String,
    platform: PlatformName,
    commands: &'a dyn CommandRunner,
}

impl<'a> RecoveryService<'a> {
    /// The job of `transaction_id` on `platform`, queried through `commands`.
    pub fn new(
        transaction_id: &str,
        platform: impl Into<PlatformName>,
        commands: &'a dyn CommandRunner,
    ) -> Self {
        RecoveryService {
            transaction_id: transaction_id.to_string(),
            platform: platform.into(),
            commands,
        }
    }

    fn run(&self, argv: &[String]) -> Result<CommandCapture> {
        self.commands.run(argv, COMMAND_TIMEOUT)
    }

    fn launchd_target(&self) -> String {
        format!(
            "gui/{}/{}",
            python_compat::os::current_uid(),
            recovery_label(&self.transaction_id, &self.platform)
        )
    }

    /// `assert_absent(path)`: no job of that name is loaded at all.
    pub fn assert_absent(&self, path: &Path) -> Result<()> {
        let loaded =
            || Error::runtime("a native recovery job is loaded without its owned registration");
        if self.platform.uses_systemctl() {
            let result = self.run(&systemctl_show(path, "LoadState,ActiveState,MainPID"))?;
            let values = show_values(&result.stdout)?;
            let expected = [
                ("LoadState", "not-found"),
                ("ActiveState", "inactive"),
                ("MainPID", "0"),
            ];
            let absent = values.len() == expected.len()
                && expected
                    .iter()
                    .all(|(key, value)| values.iter().any(|(k, v)| k == key && v == value));
            if !absent {
                return Err(loaded());
            }
            return Ok(());
        }
        let result = self.run(&[
            "/bin/launchctl".to_string(),
            "print".to_string(),
            self.launchd_target(),
        ])?;
        if result.status == 0 || !contains(&result.stderr, b"Could not find service") {
            return Err(loaded());
        }
        Ok(())
    }

    /// `running(path)`: whether the owner's native process may still run.
    pub fn running(&self, path: &Path) -> Result<bool> {
        let unknown = || Error::runtime("cannot inspect native recovery process ownership");
        if self.platform.uses_systemctl() {
            let result = self.run(&systemctl_show(path, "ActiveState,MainPID"))?;
            let values = show_values(&result.stdout)?;
            let get = |key: &str| {
                values
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
            };
            let (Some(active), Some(pid)) = (get("ActiveState"), get("MainPID")) else {
                return Err(unknown());
            };
            // `str.isdigit()` accepts any Unicode digit.
            if values.len() != 2 || pid.is_empty() || !pid.chars().all(char::is_numeric) {
                return Err(unknown());
            }
            return Ok(pid != "0" || !["inactive", "failed"].contains(&active));
        }
        let result = self.run(&[
            "/bin/launchctl".to_string(),
            "print".to_string(),
            self.launchd_target(),
        ])?;
        if result.status != 0 {
            if !contains(&result.stderr, b"Could not find service") {
                return Err(unknown());
            }
            return Ok(false);
        }
        Ok(has_pid_line(&result.stdout))
    }
}

fn systemctl_show(path: &Path, properties: &str) -> Vec<String> {
    vec![
        "systemctl".to_string(),
        "--user".to_string(),
        "show".to_string(),
        path.file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        format!("--property={properties}"),
    ]
}

/// `dict(line.split("=", 1) for line in stdout.decode().splitlines() if "=" in line)`,
/// keeping the dict's first-position, last-value rule.
fn show_values(stdout: &[u8]) -> Result<Vec<(String, String)>> {
    let text = python_compat::decode_utf8(stdout)?;
    let mut values: Vec<(String, String)> = Vec::new();
    for line in python_compat::splitlines(text) {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match values.iter_mut().find(|(existing, _)| existing == key) {
            Some(entry) => entry.1 = value.to_string(),
            None => values.push((key.to_string(), value.to_string())),
        }
    }
    Ok(values)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Whether `launchctl print` shows a running process (a `pid = N` line):
/// `re.search(rb"(?m)^\s*pid\s*=\s*[1-9][0-9]*\s*$", stdout)`.
///
/// Evaluated as the regular expression does, without backtracking into a
/// different match: `\s` (bytes: space, \t, \n, \r, \f, \v) may cross line
/// ends, so the whitespace before `pid` must start the text or hold a line
/// feed (`^`), and the whitespace after the digits must end the text or hold
/// one (`$`).
fn has_pid_line(stdout: &[u8]) -> bool {
    let skip = |from: usize| {
        from + stdout[from..]
            .iter()
            .take_while(|&&b| is_bytes_space(b))
            .count()
    };
    (0..stdout.len())
        .filter(|&at| stdout[at..].starts_with(b"pid"))
        .any(|at| {
            let before = stdout[..at]
                .iter()
                .rposition(|&b| !is_bytes_space(b))
                .map_or(0, |last| last + 1);
            let line_start = before == 0 || stdout[before..at].contains(&b'\n');
            let equals = skip(at + 3);
            if stdout.get(equals) != Some(&b'=') {
                return false;
            }
            let digits = skip(equals + 1);
            if !matches!(stdout.get(digits), Some(b'1'..=b'9')) {
                return false;
            }
            let digits_end = digits
                + stdout[digits..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            let space_end = skip(digits_end);
            line_start
                && (space_end == stdout.len() || stdout[digits_end..space_end].contains(&b'\n'))
        })
}

/// Bytes-regex `\s`: space, \t, \n, \r, \f, \v.
fn is_bytes_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Platform;
    use std::cell::RefCell;

    /// Replays one recorded reply and remembers the argv.
    struct Recorded {
        reply: CommandCapture,
        argv: RefCell<Vec<String>>,
    }

    impl CommandRunner for Recorded {
        fn run(&self, argv: &[String], _timeout: Duration) -> Result<CommandCapture> {
            *self.argv.borrow_mut() = argv.to_vec();
            Ok(self.reply.clone())
        }
    }

    fn recorded(status: i32, stdout: &str, stderr: &str) -> Recorded {
        Recorded {
            reply: CommandCapture {
                status,
                stdout: stdout.as_bytes().to_vec(),
                stderr: stderr.as_bytes().to_vec(),
            },
            argv: RefCell::new(Vec::new()),
        }
    }

    const TID: &str = "activation-0123456789abcdef01234567";

    #[test]
    fn labels_and_paths_follow_the_platform() {
        assert_eq!(
            recovery_service_path(TID, Platform::Linux, Path::new("/h")),
            Path::new(
                "/h/.config/systemd/user/agents-server-recovery-0123456789abcdef01234567.service"
            )
        );
        assert_eq!(
            recovery_service_path(TID, Platform::Darwin, Path::new("/h")),
            Path::new(
                "/h/Library/LaunchAgents/com.agentsdock.recovery.0123456789abcdef01234567.plist"
            )
        );
        // Any other text takes the systemd form, as in the original.
        assert_eq!(
            recovery_service_path(TID, PlatformName::parse("darwin"), Path::new("/h")),
            recovery_service_path(TID, Platform::Linux, Path::new("/h"))
        );
    }

    #[test]
    fn systemd_absence_needs_the_exact_not_found_triple() {
        let path = recovery_service_path(TID, Platform::Linux, Path::new("/h"));
        let absent = recorded(
            0,
            "LoadState=not-found\nActiveState=inactive\nMainPID=0\n",
            "",
        );
        RecoveryService::new(TID, Platform::Linux, &absent)
            .assert_absent(&path)
            .unwrap();
        assert_eq!(
            absent.argv.borrow().as_slice(),
            [
                "systemctl",
                "--user",
                "show",
                "agents-server-recovery-0123456789abcdef01234567.service",
                "--property=LoadState,ActiveState,MainPID"
            ]
        );
        for stdout in [
            "LoadState=loaded\nActiveState=inactive\nMainPID=0\n",
            "LoadState=not-found\nActiveState=active\nMainPID=0\n",
            "LoadState=not-found\nActiveState=inactive\nMainPID=0\nExtra=1\n",
            "",
        ] {
            let reply = recorded(1, stdout, "");
            let error = RecoveryService::new(TID, Platform::Linux, &reply)
                .assert_absent(&path)
                .unwrap_err();
            assert_eq!(
                error.message(),
                "a native recovery job is loaded without its owned registration"
            );
        }
    }

    #[test]
    fn launchd_absence_needs_a_failed_print_that_found_nothing() {
        let path = recovery_service_path(TID, Platform::Darwin, Path::new("/h"));
        let missing = recorded(
            113,
            "",
            "Bad request.\nCould not find service \"x\" in domain for user gui: 501\n",
        );
        RecoveryService::new(TID, Platform::Darwin, &missing)
            .assert_absent(&path)
            .unwrap();
        assert!(!RecoveryService::new(TID, Platform::Darwin, &missing)
            .running(&path)
            .unwrap());
        let loaded = recorded(0, "gui/501/x = {\n\tstate = running\n\tpid = 4242\n}\n", "");
        assert!(RecoveryService::new(TID, Platform::Darwin, &loaded)
            .assert_absent(&path)
            .is_err());
        assert!(RecoveryService::new(TID, Platform::Darwin, &loaded)
            .running(&path)
            .unwrap());
        let idle = recorded(
            0,
            "gui/501/x = {\n\tstate = not running\n\tpid = 0\n}\n",
            "",
        );
        assert!(!RecoveryService::new(TID, Platform::Darwin, &idle)
            .running(&path)
            .unwrap());
        let broken = recorded(5, "", "Operation not permitted\n");
        assert_eq!(
            RecoveryService::new(TID, Platform::Darwin, &broken)
                .running(&path)
                .unwrap_err()
                .message(),
            "cannot inspect native recovery process ownership"
        );
    }

    /// 600 generated byte strings whose `re.search` result CPython computed.
    #[test]
    fn the_pid_line_is_found_exactly_where_cpython_finds_it() {
        let fixture = include_bytes!("../../tests/services_fixtures/recovery_pid_search.json");
        let fixture = python_compat::json::parse_json(fixture).unwrap();
        let cases = fixture.get("cases").and_then(Json::as_array).unwrap();
        assert_eq!(cases.len(), 600);
        for case in cases {
            let hex = case.get("text_hex").and_then(Json::as_str).unwrap();
            let text: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
                .collect();
            let expected = case.get("running").and_then(Json::as_bool).unwrap();
            assert_eq!(has_pid_line(&text), expected, "{text:?}");
        }
        // `\s` crosses line ends on both sides of `=`, as in Python.
        assert!(has_pid_line(b"\tpid =\n\t\t812\n"));
        assert!(has_pid_line(b"state = running\n\n  pid\n= 812"));
        assert!(!has_pid_line(b"x pid = 812\n"));
        assert!(!has_pid_line(b"pid = 812 x\n"));
    }

    #[test]
    fn systemd_running_reads_main_pid_and_state() {
        let path = recovery_service_path(TID, Platform::Linux, Path::new("/h"));
        for (stdout, running) in [
            ("ActiveState=inactive\nMainPID=0\n", false),
            ("ActiveState=failed\nMainPID=0\n", false),
            ("ActiveState=activating\nMainPID=0\n", true),
            ("ActiveState=active\nMainPID=77\n", true),
        ] {
            let reply = recorded(0, stdout, "");
            assert_eq!(
                RecoveryService::new(TID, Platform::Linux, &reply)
                    .running(&path)
                    .unwrap(),
                running,
                "{stdout}"
            );
        }
        for stdout in [
            "ActiveState=active\n",
            "ActiveState=active\nMainPID=-1\n",
            "ActiveState=a\nMainPID=1\nX=y\n",
        ] {
            let reply = recorded(0, stdout, "");
            assert!(
                RecoveryService::new(TID, Platform::Linux, &reply)
                    .running(&path)
                    .is_err(),
                "{stdout}"
            );
        }
    }

    /// Bytes `execution_recovery.render_service` produced for an owner whose
    /// paths need every escape: spaces, `%`, `$`, quotes and XML specials.
    #[test]
    fn recovery_registrations_match_the_python_rendering() {
        let directory = Path::new(
            "/home/a b/.agents-server%x/.activation-recovery/activation-0123456789abcdef01234567",
        );
        let owner = |platform: &str| {
            json_object! {
                "interpreter" => "/opt/py 3/bin/python$3",
                "root" => "/home/a b/.agents-server%x",
                "transaction_id" => "activation-0123456789abcdef01234567",
                "home" => "/home/a\"b&<c>",
                "platform" => platform,
            }
        };
        let linux = render_recovery_service(directory, &owner("Linux")).unwrap();
        assert_eq!(
            String::from_utf8(linux).unwrap(),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/fixtures/golden/recovery-owner.service"
            ))
        );
        let darwin = render_recovery_service(directory, &owner("Darwin")).unwrap();
        assert_eq!(
            String::from_utf8(darwin).unwrap(),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/fixtures/golden/recovery-owner.plist"
            ))
        );
        // A field that is not text cannot be rendered (Python's `_text`).
        let mut broken = owner("Linux");
        broken.insert("interpreter", 7);
        assert_eq!(
            render_recovery_service(directory, &broken)
                .unwrap_err()
                .python_line(),
            "ValueError: configuration text must be nonempty and contain no control characters"
        );
    }
}

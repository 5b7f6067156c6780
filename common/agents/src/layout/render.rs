//! systemd user units and launchd plists for the two execution services.
//!
//! Pending journals and installed manifests store the rendered bytes and are
//! re-rendered on every load, so any drift from the Python templates would make
//! files written by the other implementation invalid: the output here is byte
//! for byte what `execution_install.render_service` produces.

use std::collections::BTreeMap;
use std::path::Path;

use super::{path_text, ExecutionLayout, GATEWAY_LABEL, WORKER_LABEL, WORKER_UNIT};
use crate::error::{Error, Result};
use crate::fs::check_text;

/// launchd `Umask` (0o077): the services create private files only.
const SERVICE_UMASK: i64 = 0o077;

/// The command line both service formats start: the release's interpreter,
/// `execution_service.py`, the role and the public listener; the worker also
/// asks for an ephemeral callback port. The worker runs from its pinned
/// release, the gateway through the `current` link.
pub fn service_arguments(layout: &ExecutionLayout, role: &str) -> Vec<String> {
    let runtime = runtime_root(layout, role);
    let mut arguments = vec![
        path_text(&runtime.join(".venv/bin/python")),
        path_text(&runtime.join("execution_service.py")),
        role.to_string(),
        "--runtime-dir".to_string(),
        path_text(&layout.runtime_dir()),
        "--bind".to_string(),
        layout.bind.clone(),
        "--port".to_string(),
        layout.port_text(),
    ];
    if role == "worker" {
        arguments.extend(["--callback-port".to_string(), "0".to_string()]);
    }
    arguments
}

/// The unit (Linux) or plist (Darwin) body for `role`, validating the layout
/// first; this is what the journal stores as the desired service file.
pub fn render_service(layout: &ExecutionLayout, role: &str) -> Result<Vec<u8>> {
    layout.validate()?;
    if role != "worker" && role != "gateway" {
        return Err(Error::value("unknown execution service role"));
    }
    let runtime = runtime_root(layout, role);
    let authoritative = authoritative_environment(layout, role);
    let mut environment: BTreeMap<String, String> = layout
        .environment_variables()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    environment.extend(authoritative.clone());
    if layout.platform == "Darwin" {
        Ok(launchd_plist(layout, role, &runtime, environment))
    } else {
        systemd_unit(layout, role, &runtime, &environment, &authoritative)
    }
}

fn runtime_root(layout: &ExecutionLayout, role: &str) -> std::path::PathBuf {
    if role == "worker" {
        layout.worker_release.clone()
    } else {
        layout.current()
    }
}

/// The eight variables that tie a service to this layout; they override the
/// user's environment file and are re-asserted on the systemd command line.
fn authoritative_environment(layout: &ExecutionLayout, role: &str) -> BTreeMap<String, String> {
    let state_root = path_text(&layout.state_root);
    [
        ("AGENTS_SERVER_INSTALL_DIR", path_text(&layout.install_root)),
        ("AGENTS_SERVER_CONFIG_DIR", path_text(&layout.config_root)),
        ("AGENTSDOCK_STATE_DIR", state_root.clone()),
        ("AGENTS_SERVER_STATE_DIR", state_root),
        ("AGENTSDOCK_AGENT_BIND", layout.bind.clone()),
        ("AGENTSDOCK_AGENT_PORT", layout.port_text()),
        ("AGENTSDOCK_EXECUTION_ROLE", role.to_string()),
        (
            "AGENTSDOCK_EXECUTION_RUNTIME_DIR",
            path_text(&layout.runtime_dir()),
        ),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
}

fn systemd_unit(
    layout: &ExecutionLayout,
    role: &str,
    runtime: &Path,
    environment: &BTreeMap<String, String>,
    authoritative: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut lines = vec![
        "[Unit]".to_string(),
        format!("Description=AgentsDock {role}"),
        "After=network-online.target".to_string(),
    ];
    if role == "gateway" {
        // Wants starts a missing worker without propagating gateway stop/restart.
        lines.push(format!("Wants={WORKER_UNIT}"));
        lines.push(format!("After={WORKER_UNIT}"));
    }
    lines.extend([
        String::new(),
        "[Service]".to_string(),
        "Type=simple".to_string(),
        format!("WorkingDirectory={}", unit_directory(runtime)?),
        format!(
            "EnvironmentFile={}",
            unit_word(&path_text(&layout.config_root.join("env")), false)?
        ),
    ]);
    for (key, value) in environment {
        lines.push(format!(
            "Environment={}",
            unit_word(&format!("{key}={value}"), false)?
        ));
    }
    // EnvironmentFile takes precedence over Environment=, so the command line
    // re-asserts the layout's own variables through env(1), which execs the
    // pinned interpreter directly.
    let mut command = vec!["/usr/bin/env".to_string()];
    command.extend(
        authoritative
            .iter()
            .map(|(key, value)| format!("{key}={value}")),
    );
    command.extend(service_arguments(layout, role));
    let words = command
        .iter()
        .map(|word| unit_word(word, true))
        .collect::<Result<Vec<_>>>()?;
    lines.push(format!("ExecStart={}", words.join(" ")));
    lines.extend(["Restart=always".to_string(), "RestartSec=2".to_string()]);
    if role == "worker" {
        // A draining worker may take minutes; never SIGKILL running agents.
        lines.extend([
            "TimeoutStopSec=180s".to_string(),
            "SendSIGKILL=no".to_string(),
        ]);
    } else {
        lines.push("TimeoutStopSec=10s".to_string());
    }
    lines.extend([
        "UMask=0077".to_string(),
        String::new(),
        "[Install]".to_string(),
        "WantedBy=default.target".to_string(),
        String::new(),
    ]);
    Ok(lines.join("\n").into_bytes())
}

/// One systemd word (`_unit_word`): backslash, quote and `%` escaped, and for
/// command lines `$` doubled so systemd does not expand variables.
pub(crate) fn unit_word(value: &str, command: bool) -> Result<String> {
    check_text(value)?;
    let mut escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    if command {
        escaped = escaped.replace('$', "$$");
    }
    Ok(format!("\"{escaped}\""))
}

/// `WorkingDirectory=` takes one whole path, not shell-style words: quotes
/// would become literal filename bytes, so only `%` is escaped and outer
/// whitespace (which systemd would strip) is refused.
pub(crate) fn unit_directory(path: &Path) -> Result<String> {
    let value = path_text(path);
    check_text(&value)?;
    if python_compat::strip(&value) != value {
        return Err(Error::value(
            "systemd working directory cannot have outer whitespace",
        ));
    }
    Ok(value.replace('%', "%%"))
}

/// A value of a launchd property list (the types the service and recovery
/// plists use).
pub(crate) enum PlistValue {
    String(String),
    Integer(i64),
    Bool(bool),
    Array(Vec<String>),
    Dict(BTreeMap<String, PlistValue>),
}

fn launchd_plist(
    layout: &ExecutionLayout,
    role: &str,
    runtime: &Path,
    environment: BTreeMap<String, String>,
) -> Vec<u8> {
    let label = if role == "worker" {
        WORKER_LABEL
    } else {
        GATEWAY_LABEL
    };
    let logs = layout.runtime_dir().join("logs");
    // launchd reads ExitTimeOut 0 as "no automatic SIGKILL" for the worker.
    let exit_timeout = if role == "worker" { 0 } else { 10 };
    let environment = environment
        .into_iter()
        .map(|(key, value)| (key, PlistValue::String(value)))
        .collect();
    plist_document(BTreeMap::from([
        ("Label".to_string(), PlistValue::String(label.to_string())),
        (
            "ProgramArguments".to_string(),
            PlistValue::Array(service_arguments(layout, role)),
        ),
        (
            "WorkingDirectory".to_string(),
            PlistValue::String(path_text(runtime)),
        ),
        (
            "EnvironmentVariables".to_string(),
            PlistValue::Dict(environment),
        ),
        ("RunAtLoad".to_string(), PlistValue::Bool(true)),
        ("KeepAlive".to_string(), PlistValue::Bool(true)),
        ("ExitTimeOut".to_string(), PlistValue::Integer(exit_timeout)),
        ("Umask".to_string(), PlistValue::Integer(SERVICE_UMASK)),
        (
            "StandardOutPath".to_string(),
            PlistValue::String(path_text(&logs.join(format!("{role}.stdout.log")))),
        ),
        (
            "StandardErrorPath".to_string(),
            PlistValue::String(path_text(&logs.join(format!("{role}.stderr.log")))),
        ),
    ]))
}

/// `plistlib.dumps(entries, sort_keys=True)`: the XML declaration and DTD,
/// then every dictionary in key order (a `BTreeMap` sorts as Python does for
/// these ASCII keys).
pub(crate) fn plist_document(entries: BTreeMap<String, PlistValue>) -> Vec<u8> {
    let mut out = String::from(concat!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
        "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" ",
        "\"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n",
        "<plist version=\"1.0\">\n",
    ));
    write_plist_value(&mut out, 0, &PlistValue::Dict(entries));
    out.push_str("</plist>\n");
    out.into_bytes()
}

/// plistlib's XML writer: one element per line, indented with tabs.
fn write_plist_value(out: &mut String, depth: usize, value: &PlistValue) {
    match value {
        PlistValue::String(text) => plist_string(out, depth, text),
        PlistValue::Integer(number) => {
            plist_line(out, depth, &format!("<integer>{number}</integer>"))
        }
        PlistValue::Bool(true) => plist_line(out, depth, "<true/>"),
        PlistValue::Bool(false) => plist_line(out, depth, "<false/>"),
        PlistValue::Array(items) => {
            plist_line(out, depth, "<array>");
            for item in items {
                plist_string(out, depth + 1, item);
            }
            plist_line(out, depth, "</array>");
        }
        PlistValue::Dict(items) => {
            plist_line(out, depth, "<dict>");
            for (key, item) in items {
                plist_line(out, depth + 1, &format!("<key>{}</key>", xml_text(key)));
                write_plist_value(out, depth + 1, item);
            }
            plist_line(out, depth, "</dict>");
        }
    }
}

fn plist_string(out: &mut String, depth: usize, text: &str) {
    plist_line(out, depth, &format!("<string>{}</string>", xml_text(text)));
}

fn plist_line(out: &mut String, depth: usize, line: &str) {
    out.extend(std::iter::repeat_n('\t', depth));
    out.push_str(line);
    out.push('\n');
}

/// plistlib escapes only `&`, `<` and `>`; quotes and non-ASCII stay literal.
/// (Its control-character refusal and CR normalisation cannot apply: every
/// string here passed `_text` or the environment checks in `validate`.)
fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

//! The execution layout as the stand-ins read and write it, written from
//! upstream's `execution_install.ExecutionLayout` (`from_dict`, `validate`,
//! `_release`), `layout_manifest`, `_desired`, the systemd unit template and
//! `update_handoff._installed_layout`, over serde_json: the test worker's
//! startup hold and the fixtures' installed layouts, never the helpers'
//! layout code. Both service formats render (systemd units and launchd
//! plists), so fixtures of either platform install what upstream would.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::upstream_files::{normal_path, owned_directory, parse, read_guarded, Failure, Outcome};
use crate::upstream_json::from_compat;

/// `LAYOUT_NAME`.
pub const LAYOUT_NAME: &str = "execution-layout.json";
const FIELDS: [&str; 10] = [
    "install_root",
    "config_root",
    "state_root",
    "home",
    "platform",
    "worker_release",
    "gateway_release",
    "bind",
    "port",
    "environment",
];

/// `ExecutionLayout`, validated.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The install root (`releases/`, `current`, the journals).
    pub install_root: PathBuf,
    config_root: PathBuf,
    state_root: PathBuf,
    home: PathBuf,
    platform: String,
    /// The release the worker runs.
    pub worker_release: PathBuf,
    /// The release the gateway runs (through `current`).
    pub gateway_release: PathBuf,
    bind: String,
    port: i64,
    environment: Map<String, Value>,
}

fn text_of(path: &Path) -> Value {
    Value::from(path.to_string_lossy().into_owned())
}

/// `_text`: no control characters.
fn check_text(text: &str) -> Outcome<()> {
    if text.chars().any(|c| c.is_control() && c != '\u{7f}') {
        return Err(Failure::value("execution text contains control characters"));
    }
    Ok(())
}

impl Layout {
    /// A fixture's layout (the helpers' plumbing type, its fields as
    /// `to_dict` lists them), validated by this module.
    pub fn of(layout: &agents_common::ExecutionLayout) -> Outcome<Layout> {
        let text = |path: &Path| Value::from(path.to_string_lossy().into_owned());
        Layout::from_value(&json!({
            "install_root": text(&layout.install_root),
            "config_root": text(&layout.config_root),
            "state_root": text(&layout.state_root),
            "home": text(&layout.home),
            "platform": layout.platform.to_string(),
            "worker_release": text(&layout.worker_release),
            "gateway_release": text(&layout.gateway_release),
            "bind": layout.bind,
            "port": from_compat(&layout.port),
            "environment": from_compat(&layout.environment),
        }))
    }

    /// `ExecutionLayout.from_dict(value)`, then `validate()`.
    pub fn from_value(value: &Value) -> Outcome<Layout> {
        let fields = value.as_object().filter(|object| {
            object.len() == FIELDS.len() && FIELDS.iter().all(|key| object.contains_key(*key))
        });
        let Some(fields) = fields else {
            return Err(Failure::value("execution layout fields are invalid"));
        };
        let path = |key: &str| match fields[key].as_str() {
            Some(text) => normal_path(Path::new(text)),
            None => Err(Failure::value("execution layout fields are invalid")),
        };
        let layout = Layout {
            install_root: path("install_root")?,
            config_root: path("config_root")?,
            state_root: path("state_root")?,
            home: path("home")?,
            worker_release: path("worker_release")?,
            gateway_release: path("gateway_release")?,
            platform: fields["platform"].as_str().unwrap_or_default().to_string(),
            bind: fields["bind"].as_str().unwrap_or_default().to_string(),
            port: fields["port"].as_i64().unwrap_or(0),
            environment: fields["environment"]
                .as_object()
                .cloned()
                .unwrap_or_default(),
        };
        if !fields["bind"].is_string() {
            return Err(Failure::value("execution text must be a string"));
        }
        if !fields["environment"].is_object() {
            return Err(Failure::value("environment must be a string mapping"));
        }
        layout.validate()?;
        Ok(layout)
    }

    /// `validate()`, in upstream's order.
    fn validate(&self) -> Outcome<()> {
        let roots = [&self.install_root, &self.config_root, &self.state_root];
        for root in roots.into_iter().chain([&self.home]) {
            owned_directory(root, false)?;
        }
        for (index, one) in roots.iter().enumerate() {
            for other in &roots[index + 1..] {
                if one.starts_with(other) || other.starts_with(one) {
                    return Err(Failure::value("execution roots must not overlap"));
                }
            }
        }
        if !["Darwin", "Linux"].contains(&self.platform.as_str()) {
            return Err(Failure::value("unsupported execution service platform"));
        }
        if !(1..=65535).contains(&self.port) {
            return Err(Failure::value("public port must be between 1 and 65535"));
        }
        check_text(&self.bind)?;
        for (name, value) in &self.environment {
            let mut chars = name.chars();
            let first = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Failure::value(
                    "invalid execution environment variable name",
                ));
            }
            if value.as_str().is_none_or(|text| check_text(text).is_err()) {
                return Err(Failure::value("invalid execution environment value"));
            }
        }
        release_version(&self.worker_release, &self.install_root)?;
        release_version(&self.gateway_release, &self.install_root)?;
        for role in ["worker", "gateway"] {
            let service = normal_path(&self.service_path(role))?;
            let existing = service.ancestors().skip(1).find(|dir| dir.exists());
            owned_directory(existing.unwrap_or(Path::new("/")), false)?;
        }
        Ok(())
    }

    /// `to_dict()`: the layout's ten fields, as `apply --layout` reads them.
    pub fn to_value(&self) -> Value {
        json!({
            "install_root": text_of(&self.install_root),
            "config_root": text_of(&self.config_root),
            "state_root": text_of(&self.state_root),
            "home": text_of(&self.home),
            "platform": self.platform,
            "worker_release": text_of(&self.worker_release),
            "gateway_release": text_of(&self.gateway_release),
            "bind": self.bind,
            "port": self.port,
            "environment": self.environment,
        })
    }

    fn runtime_dir(&self) -> PathBuf {
        self.state_root.join("execution")
    }

    /// The directory a role runs from: the worker's release, or the
    /// gateway's `current` link (unresolved).
    fn runtime_root(&self, role: &str) -> PathBuf {
        if role == "worker" {
            self.worker_release.clone()
        } else {
            self.install_root.join("current")
        }
    }

    /// `service_path(role)`.
    pub fn service_path(&self, role: &str) -> PathBuf {
        let unit = if role == "worker" {
            "agents-server.service"
        } else {
            "agents-server-gateway.service"
        };
        let plist = if role == "worker" {
            "com.agentsdock.server.plist"
        } else {
            "com.agentsdock.gateway.plist"
        };
        if self.platform == "Darwin" {
            self.home.join("Library/LaunchAgents").join(plist)
        } else {
            self.home.join(".config/systemd/user").join(unit)
        }
    }

    /// `manifest_path`: `install_root/execution-layout.json`.
    pub fn manifest_path(&self) -> PathBuf {
        self.install_root.join(LAYOUT_NAME)
    }

    /// `layout_manifest(layout)`: the `execution-layout.json` document.
    pub fn manifest(&self) -> Outcome<Value> {
        self.validate()?;
        let mut retained = vec![text_of(&self.worker_release)];
        if self.gateway_release != self.worker_release {
            retained.push(text_of(&self.gateway_release));
            retained.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
        let runtime = self.runtime_dir();
        Ok(json!({
            "callback": {"bind": "127.0.0.1", "lifetime": "worker-process", "port": 0},
            "format": 1,
            "gateway_version": release_version(&self.gateway_release, &self.install_root)?,
            "layout": self.to_value(),
            "protocol_version": 1,
            "retained_releases": retained,
            "runtime_dir": text_of(&runtime),
            "socket_path": text_of(&runtime.join("worker.socket")),
            "token_path": text_of(&runtime.join("control.token")),
            "worker_version": release_version(&self.worker_release, &self.install_root)?,
        }))
    }

    /// `render_service(layout, role)`: the systemd unit on Linux, the
    /// launchd plist on Darwin.
    pub fn render_service(&self, role: &str) -> Outcome<String> {
        self.validate()?;
        if self.platform == "Darwin" {
            Ok(self.render_plist(role))
        } else {
            self.render_unit(role)
        }
    }

    /// The plist (`plistlib.dumps(sort_keys=True)`, XML): tab-indented,
    /// `&`, `<` and `>` escaped, everything else literal.
    fn render_plist(&self, role: &str) -> String {
        let escape = |text: &str| {
            text.replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        };
        let string = |text: &str| format!("<string>{}</string>", escape(text));
        let runtime = self.runtime_dir().to_string_lossy().into_owned();
        let authoritative = self.authoritative_environment(role);
        let mut lines = vec![
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>".to_string(),
            "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">".to_string(),
            "<plist version=\"1.0\">".to_string(),
            "<dict>".to_string(),
            "\t<key>EnvironmentVariables</key>".to_string(),
            "\t<dict>".to_string(),
        ];
        for (key, value) in self.merged_environment(&authoritative) {
            lines.push(format!("\t\t<key>{}</key>", escape(&key)));
            lines.push(format!("\t\t{}", string(&value)));
        }
        lines.push("\t</dict>".to_string());
        let (timeout, label) = if role == "worker" {
            (0, "com.agentsdock.server")
        } else {
            (10, "com.agentsdock.gateway")
        };
        lines.extend([
            "\t<key>ExitTimeOut</key>".to_string(),
            format!("\t<integer>{timeout}</integer>"),
            "\t<key>KeepAlive</key>".to_string(),
            "\t<true/>".to_string(),
            "\t<key>Label</key>".to_string(),
            format!("\t{}", string(label)),
            "\t<key>ProgramArguments</key>".to_string(),
            "\t<array>".to_string(),
        ]);
        for word in self.service_arguments(role) {
            lines.push(format!("\t\t{}", string(&word)));
        }
        lines.extend([
            "\t</array>".to_string(),
            "\t<key>RunAtLoad</key>".to_string(),
            "\t<true/>".to_string(),
            "\t<key>StandardErrorPath</key>".to_string(),
            format!("\t{}", string(&format!("{runtime}/logs/{role}.stderr.log"))),
            "\t<key>StandardOutPath</key>".to_string(),
            format!("\t{}", string(&format!("{runtime}/logs/{role}.stdout.log"))),
            "\t<key>Umask</key>".to_string(),
            "\t<integer>63</integer>".to_string(),
            "\t<key>WorkingDirectory</key>".to_string(),
            format!("\t{}", string(&self.runtime_root(role).to_string_lossy())),
            "</dict>".to_string(),
            "</plist>".to_string(),
        ]);
        lines.join("\n") + "\n"
    }

    /// The layout's environment with the eight authoritative keys over it,
    /// sorted by key.
    fn merged_environment(&self, authoritative: &[(String, String)]) -> Vec<(String, String)> {
        let mut environment: Vec<(String, String)> = self
            .environment
            .iter()
            .map(|(key, value)| (key.clone(), value.as_str().unwrap_or_default().to_string()))
            .filter(|(key, _)| !authoritative.iter().any(|(name, _)| name == key))
            .chain(authoritative.iter().cloned())
            .collect();
        environment.sort();
        environment
    }

    /// The systemd unit template.
    fn render_unit(&self, role: &str) -> Outcome<String> {
        let runtime = self.runtime_root(role);
        let working = runtime.to_string_lossy().into_owned();
        check_text(&working)?;
        if working.trim() != working {
            return Err(Failure::value(
                "systemd working directory cannot have outer whitespace",
            ));
        }
        let authoritative = self.authoritative_environment(role);
        let environment = self.merged_environment(&authoritative);
        let mut lines = vec![
            "[Unit]".to_string(),
            format!("Description=AgentsDock {role}"),
            "After=network-online.target".to_string(),
        ];
        if role == "gateway" {
            lines.push("Wants=agents-server.service".to_string());
            lines.push("After=agents-server.service".to_string());
        }
        lines.extend(["".to_string(), "[Service]".into(), "Type=simple".into()]);
        lines.push(format!("WorkingDirectory={}", working.replace('%', "%%")));
        let env_file = self.config_root.join("env");
        lines.push(format!(
            "EnvironmentFile={}",
            unit_word(&env_file.to_string_lossy(), false)?
        ));
        for (key, value) in &environment {
            lines.push(format!(
                "Environment={}",
                unit_word(&format!("{key}={value}"), false)?
            ));
        }
        let mut words = vec!["/usr/bin/env".to_string()];
        words.extend(
            authoritative
                .iter()
                .map(|(key, value)| format!("{key}={value}")),
        );
        words.extend(self.service_arguments(role));
        let quoted: Outcome<Vec<String>> = words.iter().map(|word| unit_word(word, true)).collect();
        lines.push(format!("ExecStart={}", quoted?.join(" ")));
        lines.extend(["Restart=always".to_string(), "RestartSec=2".to_string()]);
        if role == "worker" {
            lines.extend(["TimeoutStopSec=180s".to_string(), "SendSIGKILL=no".into()]);
        } else {
            lines.push("TimeoutStopSec=10s".to_string());
        }
        lines.extend(["UMask=0077", "", "[Install]", "WantedBy=default.target"].map(String::from));
        Ok(lines.join("\n") + "\n")
    }

    /// The eight keys the layout asserts over `config_root/env`, sorted.
    fn authoritative_environment(&self, role: &str) -> Vec<(String, String)> {
        let text = |path: &Path| path.to_string_lossy().into_owned();
        let mut keys = vec![
            ("AGENTS_SERVER_INSTALL_DIR", text(&self.install_root)),
            ("AGENTS_SERVER_CONFIG_DIR", text(&self.config_root)),
            ("AGENTSDOCK_STATE_DIR", text(&self.state_root)),
            ("AGENTS_SERVER_STATE_DIR", text(&self.state_root)),
            ("AGENTSDOCK_AGENT_BIND", self.bind.clone()),
            ("AGENTSDOCK_AGENT_PORT", self.port.to_string()),
            ("AGENTSDOCK_EXECUTION_ROLE", role.to_string()),
            (
                "AGENTSDOCK_EXECUTION_RUNTIME_DIR",
                text(&self.runtime_dir()),
            ),
        ];
        keys.sort();
        keys.into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    }

    /// `service_arguments(layout, role)`: the interpreter, the service
    /// script, the role and its flags, as both service formats run them.
    pub fn service_arguments(&self, role: &str) -> Vec<String> {
        let runtime = self.runtime_root(role);
        let text = |path: PathBuf| path.to_string_lossy().into_owned();
        let mut words = vec![
            text(runtime.join(".venv/bin/python")),
            text(runtime.join("execution_service.py")),
            role.to_string(),
            "--runtime-dir".to_string(),
            text(self.runtime_dir()),
            "--bind".to_string(),
            self.bind.clone(),
            "--port".to_string(),
            self.port.to_string(),
        ];
        if role == "worker" {
            words.extend(["--callback-port".to_string(), "0".to_string()]);
        }
        words
    }
}

/// `_unit_word`: escaped and double-quoted (`$` doubled in ExecStart).
fn unit_word(word: &str, exec: bool) -> Outcome<String> {
    check_text(word)?;
    let mut escaped = word
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    if exec {
        escaped = escaped.replace('$', "$$");
    }
    Ok(format!("\"{escaped}\""))
}

/// Python's `str.strip()`: Unicode whitespace plus the separators U+001C..U+001F.
fn python_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// `_release(path, root)`: a retained versioned release with its VERSION
/// (at most 120 characters), interpreter and service script.
fn release_version(path: &Path, root: &Path) -> Outcome<String> {
    let path = normal_path(path)?;
    let name = path.file_name().map(|name| name.to_string_lossy());
    if path.parent() != Some(root.join("releases").as_path())
        || name.is_none_or(|name| name.starts_with('.'))
    {
        return Err(Failure::value(
            "execution runtime must be a retained versioned release",
        ));
    }
    for directory in [root, &root.join("releases"), &path] {
        owned_directory(directory, false)?;
    }
    let (data, _mode) = read_guarded(&path.join("VERSION"), false)?;
    let text = String::from_utf8(data).map_err(|err| Failure::value(err.to_string()))?;
    let version = python_strip(&text).to_string();
    check_text(&version)?;
    if version.chars().count() > 120 {
        return Err(Failure::value("release version is too long"));
    }
    for name in ["execution_service.py", ".venv/bin/python"] {
        let file = path.join(name);
        let executable = name != ".venv/bin/python"
            || rustix::fs::access(&file, rustix::fs::Access::EXEC_OK).is_ok();
        if !file.is_file() || !executable {
            return Err(Failure::value(format!(
                "execution release is incomplete: {name}"
            )));
        }
    }
    read_guarded(&path.join("execution_service.py"), false)?;
    Ok(version)
}

/// `_desired(data)`: the snapshot a publication writes (always 0600).
pub fn desired(data: &[u8]) -> Value {
    json!({
        "exists": true,
        "mode": 0o600,
        "sha256": hex_digest(data),
        "data": base64::engine::general_purpose::STANDARD.encode(data),
    })
}

/// Lowercase hex SHA-256.
pub fn hex_digest(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `update_handoff._installed_layout(root)`: the installed manifest must be
/// exactly what its layout computes today.
pub fn installed_layout(root: &Path) -> Outcome<Layout> {
    let (data, _mode) = read_guarded(&root.join(LAYOUT_NAME), true)?;
    let value = parse(&data)?;
    if !value.is_object() {
        return Err(Failure::value("installed execution layout is invalid"));
    }
    let layout = Layout::from_value(value.get("layout").unwrap_or(&Value::Null))?;
    if layout.install_root != root || value != layout.manifest()? {
        return Err(Failure::value("installed execution layout changed"));
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    //! The stand-ins' renderer and manifest against the golden bytes the
    //! Python reference produced (`tests/fixtures/golden/layouts.json`),
    //! over a real tree.

    use std::path::Path;

    use crate::InstallBase;
    use serde_json::Value;

    use super::Layout;
    use crate::upstream_json::json_bytes;

    fn substitute(value: &Value, base: &str) -> Value {
        match value {
            Value::String(text) => Value::from(text.replace("{BASE}", base)),
            Value::Object(object) => Value::Object(
                object
                    .iter()
                    .map(|(key, item)| (key.clone(), substitute(item, base)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    #[test]
    fn every_golden_layout_renders_byte_for_byte() {
        let golden: Value = serde_json::from_slice(&crate::golden_bytes("layouts.json")).unwrap();
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() >= 5, "golden file lost its cases");
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let base = if case["fixed_base"] == true {
                InstallBase::at(Path::new(case["base_example"].as_str().unwrap()))
            } else {
                InstallBase::new(&format!("worker-{name}"))
            };
            for release in case["releases"].as_array().unwrap() {
                base.release(release.as_str().unwrap());
            }
            let base_text = base.text();
            let expect = |key: &str| case[key].as_str().unwrap().replace("{BASE}", &base_text);
            let layout = Layout::from_value(&substitute(&case["layout"], &base_text))
                .unwrap_or_else(|err| panic!("{name}: {}", err.python_line()));
            for role in ["worker", "gateway"] {
                assert_eq!(
                    layout.render_service(role).unwrap(),
                    expect(&format!("{role}_service")),
                    "{name}: {role}"
                );
                let path = layout.service_path(role);
                assert_eq!(
                    Some(path.to_str().unwrap()),
                    case["service_paths"][role]
                        .as_str()
                        .map(|text| text.replace("{BASE}", &base_text))
                        .as_deref(),
                    "{name}: {role} path"
                );
            }
            let manifest = json_bytes(&layout.manifest().unwrap());
            assert_eq!(
                String::from_utf8(manifest).unwrap(),
                expect("layout_manifest_file"),
                "{name}: execution-layout.json"
            );
        }
    }

    #[test]
    fn a_layout_with_another_key_or_a_bool_port_is_refused() {
        let base = InstallBase::new("worker-refusals");
        let release = base.release("1.0.0");
        let text = |path: &Path| Value::from(path.to_str().unwrap());
        let mut layout = serde_json::json!({
            "install_root": text(&base.join("install")),
            "config_root": text(&base.join("config")),
            "state_root": text(&base.join("state")),
            "home": text(&base.join("home")),
            "platform": "Linux",
            "worker_release": text(&release),
            "gateway_release": text(&release),
            "bind": "127.0.0.1",
            "port": 7850,
            "environment": {},
        });
        assert!(Layout::from_value(&layout).is_ok());
        layout["port"] = Value::Bool(true);
        let refused = Layout::from_value(&layout).unwrap_err().python_line();
        assert_eq!(
            refused,
            "ValueError: public port must be between 1 and 65535"
        );
        layout["port"] = Value::from(7850);
        layout["extra"] = Value::from(1);
        let refused = Layout::from_value(&layout).unwrap_err().python_line();
        assert_eq!(refused, "ValueError: execution layout fields are invalid");
    }
}

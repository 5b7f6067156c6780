//! The two-service execution layout (`execution_install.ExecutionLayout`), its
//! installed manifest and the runtime directory it needs.
//!
//! A layout names the install, config, state and home roots, the worker and
//! gateway releases and the public listener. `validate` walks the filesystem
//! (ownership, symlinks, release completeness) in exactly Python's order, so
//! the same bad input fails with the same message; rendering and the manifest
//! re-validate because journals and the installed manifest are recomputed and
//! compared on every load.

mod operation_id;
mod render;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Access, FileType};

pub use operation_id::maintenance_operation_id;
// The units' and jobs' names are the roles' (role.rs); the layout renders them.
pub use crate::role::{GATEWAY_UNIT, WORKER_UNIT};
pub use render::render_service;
pub(crate) use render::service_arguments;
pub(crate) use render::{plist_document, unit_directory, unit_word, PlistValue};

use crate::error::{Error, Result};
use crate::fs::{
    check_text, ensure_directory, ensure_execution_secret, fsync_directory, normalize_path,
    owned_directory, read_file,
};
use crate::named::OrName;
use crate::platform::PlatformName;
use crate::role::Role;
use python_compat::{
    decode_utf8,
    json::{encode_line, parse_json, Json},
    json_object, strip,
};

/// `format` of the installed layout manifest and of execution journals.
pub const FORMAT: i64 = 1;
/// Worker/helper protocol version recorded in manifests and health receipts.
pub const PROTOCOL_VERSION: i64 = 1;
/// Directory of the pending execution journal under the install root.
pub const TRANSACTION_NAME: &str = ".execution-transaction";
/// File name of the installed layout manifest under the install root.
pub const LAYOUT_NAME: &str = "execution-layout.json";

/// The ten fields of a serialized layout, in Python's `to_dict` order.
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

/// Longest release version (in code points) a VERSION file may hold.
const MAX_VERSION_CHARS: usize = 120;

/// Where and how the worker and gateway services run; equality is field-wise
/// like the Python dataclass (`recover` compares a journal's layout with the
/// caller's this way).
///
/// Building one performs no checks, as in Python: call
/// [`ExecutionLayout::validate`] (or use [`ExecutionLayout::from_dict`], which
/// does). `port` and `environment` hold the raw values given, so `validate`
/// refuses a wrong type at the same step and with the same message as Python.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionLayout {
    /// Install root (`releases/`, `current`, journals, the manifest).
    pub install_root: PathBuf,
    /// Config root (holds the `env` file the units load).
    pub config_root: PathBuf,
    /// State root (holds the `execution` runtime directory).
    pub state_root: PathBuf,
    /// Home of the service user (unit or plist directory).
    pub home: PathBuf,
    /// `Linux` (systemd user units) or `Darwin` (launchd agents) once
    /// validated; an unsupported text is kept as given until `validate`.
    pub platform: PlatformName,
    /// Release the worker runs, pinned (`install_root/releases/<v>`).
    pub worker_release: PathBuf,
    /// Release the gateway runs through `current`.
    pub gateway_release: PathBuf,
    /// Public listener address.
    pub bind: String,
    /// Public listener port: an int 1–65535 once validated.
    pub port: Json,
    /// Extra service environment: an object of string values once validated.
    pub environment: Json,
}

impl ExecutionLayout {
    /// Parse and fully validate a serialized layout (a manifest's or journal's
    /// `layout`, or an `apply --layout` file), with Python's refusals.
    pub fn from_dict(value: &Json) -> Result<Self> {
        let layout = Self::from_dict_unvalidated(value)?;
        layout.validate()?;
        Ok(layout)
    }

    /// The fields of a serialized layout (exact key set, `_path` on the six
    /// paths) without [`ExecutionLayout::validate`]: for an uninstall that
    /// was killed while removing the installation, whose releases, roots or
    /// unit directory may already be gone. Never use it to run anything.
    pub fn from_dict_unvalidated(value: &Json) -> Result<Self> {
        let fields_invalid = || Error::value("execution layout fields are invalid");
        let object = value.as_object().ok_or_else(fields_invalid)?;
        if object.len() != FIELDS.len() || FIELDS.iter().any(|key| object.get(key).is_none()) {
            return Err(fields_invalid());
        }
        // `_path` on the six paths, in Python's order, before any other check.
        let path = |key: &str| layout_path(object.get(key));
        let install_root = path("install_root")?;
        let config_root = path("config_root")?;
        let state_root = path("state_root")?;
        let home = path("home")?;
        let worker_release = path("worker_release")?;
        let gateway_release = path("gateway_release")?;
        // A non-string platform or bind fails validate's membership or text
        // check exactly like an empty string does, at the same step.
        let text = |key: &str| {
            object
                .get(key)
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let layout = ExecutionLayout {
            install_root,
            config_root,
            state_root,
            home,
            platform: PlatformName::parse(&text("platform")),
            worker_release,
            gateway_release,
            bind: text("bind"),
            port: object.get("port").cloned().unwrap_or(Json::Null),
            environment: object.get("environment").cloned().unwrap_or(Json::Null),
        };
        Ok(layout)
    }

    /// The serialized form stored in manifests and journals (paths as Python
    /// `str`, port and environment as given).
    pub fn to_dict(&self) -> Json {
        Json::Object(json_object! {
            "install_root" => path_text(&self.install_root),
            "config_root" => path_text(&self.config_root),
            "state_root" => path_text(&self.state_root),
            "home" => path_text(&self.home),
            "platform" => self.platform.as_str(),
            "worker_release" => path_text(&self.worker_release),
            "gateway_release" => path_text(&self.gateway_release),
            "bind" => self.bind.as_str(),
            "port" => self.port.clone(),
            "environment" => self.environment.clone(),
        })
    }

    /// `state_root/execution`: private IPC state (token, receipts, socket, logs).
    pub fn runtime_dir(&self) -> PathBuf {
        self.state_root.join("execution")
    }

    /// `install_root/current`: the link the gateway runs through.
    pub fn current(&self) -> PathBuf {
        self.install_root.join("current")
    }

    /// `install_root/execution-layout.json`: the installed manifest.
    pub fn manifest_path(&self) -> PathBuf {
        self.install_root.join(LAYOUT_NAME)
    }

    /// `install_root/.execution-transaction`: the pending journal directory.
    pub fn transaction_dir(&self) -> PathBuf {
        self.install_root.join(TRANSACTION_NAME)
    }

    /// The unit file (Linux) or plist (Darwin) of `role` (`worker` or
    /// `gateway`). Any platform other than `Darwin` gets the systemd path,
    /// because only `validate` checks the platform.
    pub fn service_path(&self, role: impl OrName<Role>) -> Result<PathBuf> {
        let role = role.into_member()?;
        Ok(if self.platform.uses_launchd_paths() {
            self.home
                .join("Library/LaunchAgents")
                .join(format!("{}.plist", role.label()))
        } else {
            self.home.join(".config/systemd/user").join(role.unit())
        })
    }

    /// Check everything the services and journals rely on, in Python's order:
    /// owned symlink-free roots, no overlap, platform, port, bind, environment,
    /// both releases complete, and symlink-free owned service directories.
    pub fn validate(&self) -> Result<()> {
        for root in [
            &self.install_root,
            &self.config_root,
            &self.state_root,
            &self.home,
        ] {
            normalize_path(root)?;
            owned_directory(root, false)?;
        }
        let roots = [&self.install_root, &self.config_root, &self.state_root];
        for (index, first) in roots.iter().enumerate() {
            for second in &roots[index + 1..] {
                if first.starts_with(second) || second.starts_with(first) {
                    return Err(Error::value("execution roots must not overlap"));
                }
            }
        }
        self.platform.require()?;
        if self.public_port().is_none() {
            return Err(Error::value("public port must be between 1 and 65535"));
        }
        check_text(&self.bind)?;
        let environment = self
            .environment
            .as_object()
            .ok_or_else(|| Error::value("environment must be a string mapping"))?;
        for (key, value) in environment.iter() {
            if !is_variable_name(key) {
                return Err(Error::value("invalid execution environment variable name"));
            }
            if !value
                .as_str()
                .is_some_and(|text| text.chars().all(|c| c >= ' '))
            {
                return Err(Error::value("invalid execution environment value"));
            }
        }
        release_version(&self.worker_release, &self.install_root)?;
        release_version(&self.gateway_release, &self.install_root)?;
        for role in Role::ALL {
            let service = self.service_path(role)?;
            normalize_path(&service)?;
            let mut parent = service.parent().unwrap_or(Path::new("/"));
            while python_compat::path::stat_if_present(parent)?.is_none() {
                parent = parent.parent().unwrap_or(Path::new("/"));
            }
            owned_directory(parent, false)?;
        }
        Ok(())
    }

    /// The public port when `port` is an int (not a bool) in 1–65535, which
    /// `validate` guarantees.
    pub fn public_port(&self) -> Option<u16> {
        self.port
            .as_int()
            .and_then(|port| u16::try_from(port).ok())
            .filter(|port| *port != 0)
    }

    /// The string entries of `environment` in insertion order (all of them
    /// once validated); the agent token lookup falls back to these.
    pub fn environment_variables(&self) -> Vec<(&str, &str)> {
        self.environment
            .as_object()
            .map(|object| {
                object
                    .iter()
                    .filter_map(|(key, value)| Some((key.as_str(), value.as_str()?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `str(port)` for the unit, plist and environment.
    fn port_text(&self) -> String {
        match self.port.as_int() {
            Some(port) => port.to_string(),
            // Only reachable for a layout that never passed validate.
            None => encode_line(&self.port, false),
        }
    }
}

/// The installed manifest (`execution-layout.json` content) for a layout:
/// validates, then reads both release versions again.
pub fn layout_manifest(layout: &ExecutionLayout) -> Result<Json> {
    layout.validate()?;
    let runtime_dir = layout.runtime_dir();
    let worker_release = path_text(&layout.worker_release);
    let gateway_release = path_text(&layout.gateway_release);
    let mut retained = vec![worker_release.clone(), gateway_release.clone()];
    retained.sort();
    retained.dedup();
    Ok(Json::Object(json_object! {
        "format" => FORMAT,
        "protocol_version" => PROTOCOL_VERSION,
        "layout" => layout.to_dict(),
        "worker_version" => release_version(&layout.worker_release, &layout.install_root)?,
        "gateway_version" => release_version(&layout.gateway_release, &layout.install_root)?,
        "runtime_dir" => path_text(&runtime_dir),
        "socket_path" => path_text(&runtime_dir.join("worker.socket")),
        "token_path" => path_text(&runtime_dir.join("control.token")),
        "callback" => json_object! {
            "bind" => "127.0.0.1",
            "port" => 0_i64,
            "lifetime" => "worker-process",
        },
        "retained_releases" => retained.into_iter().map(Json::from).collect::<Vec<Json>>(),
    }))
}

/// Create the private runtime directory, its `logs/` and the control token;
/// an existing token is never rotated (running services hold it).
pub fn prepare_runtime(layout: &ExecutionLayout) -> Result<()> {
    layout.validate()?;
    let runtime_dir = layout.runtime_dir();
    ensure_directory(&runtime_dir, true)?;
    ensure_directory(&runtime_dir.join("logs"), true)?;
    ensure_execution_secret(&runtime_dir.join("control.token"))?;
    fsync_directory(&runtime_dir)
}

/// The worker release pinned by the installed manifest under `root`, or `None`
/// when no split layout is installed. The manifest must still equal a fresh
/// `layout_manifest` (a changed VERSION invalidates it); `current` is never
/// followed.
pub fn active_worker_release(root: &Path) -> Result<Option<PathBuf>> {
    let root = normalize_path(root)?;
    owned_directory(&root, false)?;
    let data = match read_file(&root.join(LAYOUT_NAME), true) {
        Ok((data, _mode)) => data,
        Err(error) if error.is_not_found() => return Ok(None),
        Err(error) => return Err(error),
    };
    let value = parse_json(&data)?;
    // Python equality: `true` and `1.0` pass as `1`, exactly as in the original.
    if value.as_object().is_none() || value.get("format") != Some(&Json::from(FORMAT)) {
        return Err(Error::value("installed execution layout is invalid"));
    }
    let layout = ExecutionLayout::from_dict(value.get("layout").unwrap_or(&Json::Null))?;
    if layout.install_root != root || value != layout_manifest(&layout)? {
        return Err(Error::value(
            "installed execution layout no longer matches its runtime",
        ));
    }
    Ok(Some(layout.worker_release))
}

/// `_path` of a serialized path field: `Path()` of a value that is not text
/// raises `TypeError` naming its type, as Python's does.
fn layout_path(value: Option<&Json>) -> Result<PathBuf> {
    match value {
        Some(Json::Str(text)) => normalize_path(Path::new(text)),
        // `Path(value)` of anything but text raises before `_path` checks it.
        Some(
            other @ (Json::Null
            | Json::Bool(_)
            | Json::Int(_)
            | Json::BigInt(_)
            | Json::Float(_)
            | Json::Array(_)
            | Json::Object(_)),
        ) => Err(python_compat::Exception::not_a_path(other.python_type_name()).into()),
        Some(Json::WideStr(_)) | None => Err(Error::value(
            "execution paths must be absolute without traversal",
        )),
    }
}

/// `_release`: the stripped VERSION of a complete, retained release.
fn release_version(path: &Path, root: &Path) -> Result<String> {
    let path = normalize_path(path)?;
    let releases = root.join("releases");
    let hidden = path
        .file_name()
        .is_some_and(|name| name.as_bytes().starts_with(b"."));
    if path.parent() != Some(releases.as_path()) || hidden {
        return Err(Error::value(
            "execution runtime must be a retained versioned release",
        ));
    }
    owned_directory(root, false)?;
    owned_directory(&releases, false)?;
    owned_directory(&path, false)?;
    let (data, _mode) = read_file(&path.join("VERSION"), false)?;
    let version = strip(decode_utf8(&data)?);
    check_text(version)?;
    if version.chars().count() > MAX_VERSION_CHARS {
        return Err(Error::value("release version is too long"));
    }
    for required in ["execution_service.py", ".venv/bin/python"] {
        let item = path.join(required);
        // uv's interpreter may be a symlink into its managed Python cache, so
        // these follow links; execution_service.py itself is then re-read
        // without following.
        let executable_needed = required.ends_with("python");
        let is_file = python_compat::path::stat_if_present(&item)?
            .is_some_and(|info| FileType::from_raw_mode(info.st_mode) == FileType::RegularFile);
        if !is_file || (executable_needed && rustix::fs::access(&item, Access::EXEC_OK).is_err()) {
            return Err(Error::value(format!(
                "execution release is incomplete: {required}"
            )));
        }
    }
    read_file(&path.join("execution_service.py"), false)?;
    Ok(version.to_string())
}

/// `re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)`: an environment name.
pub fn is_variable_name(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Python's `str(Path)`: repeated `/` and `.` segments dropped, a trailing `/`
/// dropped, a leading exactly-two-slash prefix kept. Layout strings in units,
/// manifests and journals use this form.
pub(crate) fn path_text(path: &Path) -> String {
    let raw = path.as_os_str().as_bytes();
    let mut text = String::new();
    if raw.starts_with(b"//") && !raw.starts_with(b"///") {
        text.push('/');
    }
    for component in path.components() {
        match component {
            Component::RootDir => text.push('/'),
            Component::CurDir => {}
            Component::ParentDir => push_segment(&mut text, OsStr::new("..")),
            Component::Normal(name) => push_segment(&mut text, name),
            Component::Prefix(prefix) => push_segment(&mut text, prefix.as_os_str()),
        }
    }
    if text.is_empty() {
        text.push('.');
    }
    text
}

fn push_segment(text: &mut String, segment: &OsStr) {
    if !text.is_empty() && !text.ends_with('/') {
        text.push('/');
    }
    text.push_str(&segment.to_string_lossy());
}

//! A stand-in for install.sh's journal writer (`activation_transaction.py
//! begin/record/activate-files/restore-files/finish`) over real install trees,
//! so tests read journals in the documented on-disk format: a 0700
//! `.activation-transaction/` with a canonical `manifest.json` and 0600 byte
//! backups of each configuration that existed.
//!
//! Shared by the common crate's `activation_*` tests and the black-box
//! `execution_activation_*` tests (included there by path).

// Fixture plumbing whose names say what each item is; documenting every
// field would repeat them.
#![allow(missing_docs)]

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agents_common::{ExecutionLayout, Platform};
use python_compat::{
    decode_utf8, is_space,
    json::{parse_json, Json, JsonObject},
    json_object, shlex, splitlines, strip,
};

use crate::files::{make_dir, unique_base, write_file};
use crate::upstream_activation::{release_matches, uuid5_url};
use crate::upstream_json::{canonical_bytes, from_compat, json_bytes, to_compat};
use crate::upstream_layout::{installed_layout, Layout};

/// The API contract every fixture release declares.
pub const API_CONTRACT: i64 = 7;

/// The four roots of an installation; the journal writer works on these, so
/// it serves this crate's [`Install`] trees and the black-box fixtures alike.
#[derive(Clone)]
pub struct Roots {
    /// `Linux` (systemd units) or `Darwin` (launchd plists).
    pub platform: Platform,
    /// The public listener port the layout uses.
    pub port: u16,
    pub root: PathBuf,
    pub config_root: PathBuf,
    pub state_root: PathBuf,
    pub home: PathBuf,
}

/// A base directory holding `install/` (0700, as install.sh creates it),
/// `config/`, `state/` and `home/` (0755), removed when dropped.
pub struct Install {
    pub base: PathBuf,
    pub roots: Roots,
}

impl std::ops::Deref for Install {
    type Target = Roots;
    fn deref(&self) -> &Roots {
        &self.roots
    }
}

impl Install {
    /// A fresh base under /tmp (unique per process and call).
    pub fn new(tag: &str) -> Install {
        Install::at(&unique_base("activation", tag))
    }

    /// A base at exactly `base` (recreated from scratch), for tests whose
    /// expectations embed the path (golden renderings).
    pub fn at(base: &Path) -> Install {
        let _ = fs::remove_dir_all(base);
        make_dir(base, 0o755);
        make_dir(&base.join("install"), 0o700);
        make_dir(&base.join("install/releases"), 0o755);
        for name in ["config", "state", "home"] {
            make_dir(&base.join(name), 0o755);
        }
        Install {
            base: base.to_path_buf(),
            roots: Roots {
                platform: Platform::Linux,
                port: 7850,
                root: base.join("install"),
                config_root: base.join("config"),
                state_root: base.join("state"),
                home: base.join("home"),
            },
        }
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

impl Roots {
    /// Roots `install/` (0700), `config/` and `state/` (0755) under an
    /// existing `base`, with the given home (a sandbox's, whose manager
    /// loads the units); the caller owns the cleanup of `base`.
    pub fn create(base: &Path, home: &Path) -> Roots {
        make_dir(&base.join("install"), 0o700);
        make_dir(&base.join("install/releases"), 0o755);
        for name in ["config", "state"] {
            make_dir(&base.join(name), 0o755);
        }
        Roots {
            platform: Platform::Linux,
            port: 7850,
            root: base.join("install"),
            config_root: base.join("config"),
            state_root: base.join("state"),
            home: home.to_path_buf(),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.root.clone()
    }
    pub fn releases(&self) -> PathBuf {
        self.root.join("releases")
    }
    pub fn config_root(&self) -> PathBuf {
        self.config_root.clone()
    }
    pub fn state_root(&self) -> PathBuf {
        self.state_root.clone()
    }
    pub fn home(&self) -> PathBuf {
        self.home.clone()
    }
    pub fn runtime_dir(&self) -> PathBuf {
        self.state_root().join("execution")
    }
    pub fn env_path(&self) -> PathBuf {
        self.config_root().join("env")
    }
    pub fn unit_dir(&self) -> PathBuf {
        if self.platform == Platform::Darwin {
            self.home().join("Library/LaunchAgents")
        } else {
            self.home().join(".config/systemd/user")
        }
    }
    pub fn service_path(&self) -> PathBuf {
        if self.platform == Platform::Darwin {
            self.unit_dir().join("com.agentsdock.server.plist")
        } else {
            self.unit_dir().join("agents-server.service")
        }
    }
    pub fn gateway_path(&self) -> PathBuf {
        if self.platform == Platform::Darwin {
            self.unit_dir().join("com.agentsdock.gateway.plist")
        } else {
            self.unit_dir().join("agents-server-gateway.service")
        }
    }
    pub fn journal(&self) -> PathBuf {
        self.root().join(".activation-transaction")
    }
    pub fn manifest_path(&self) -> PathBuf {
        self.journal().join("manifest.json")
    }
    pub fn release_dir(&self, version: &str) -> PathBuf {
        self.releases().join(version)
    }

    /// A complete release directory `releases/<name>` whose VERSION holds
    /// `<version>\n`, with the files layout validation and the API contract
    /// probe read, and an executable `.venv/bin/python`.
    pub fn release_named(&self, name: &str, version: &str) -> PathBuf {
        let release = self.releases().join(name);
        make_dir(&release, 0o755);
        write_file(
            &release.join("VERSION"),
            format!("{version}\n").as_bytes(),
            0o644,
        );
        write_file(
            &release.join("execution_service.py"),
            b"# execution service\n",
            0o644,
        );
        write_file(
            &release.join("agent_server.py"),
            format!("\"\"\"server\"\"\"\nAPI_CONTRACT_VERSION = {API_CONTRACT}\n").as_bytes(),
            0o644,
        );
        make_dir(&release.join(".venv"), 0o755);
        make_dir(&release.join(".venv/bin"), 0o755);
        write_file(
            &release.join(".venv/bin/python"),
            b"#!/bin/sh\nexit 0\n",
            0o755,
        );
        release
    }

    /// `releases/<name>` whose `.venv/bin/python` links to `interpreter`
    /// (the test worker, copied under a Python-like name so the durability
    /// barrier accepts the venv link), as the services run it.
    pub fn release_running(&self, name: &str, version: &str, interpreter: &Path) -> PathBuf {
        let release = self.release_named(name, version);
        let python = release.join(".venv/bin/python");
        fs::remove_file(&python).unwrap();
        symlink(interpreter, &python).unwrap();
        release
    }

    /// `releases/<version>`.
    pub fn release(&self, version: &str) -> PathBuf {
        self.release_named(version, version)
    }

    /// The staging directory install.sh activates (`releases/.staging-<v>-<pid>`).
    pub fn staging(&self, version: &str) -> PathBuf {
        self.release_named(&format!(".staging-{version}-4242"), version)
    }

    /// Point `current` at `releases/<version>` as an installed system has it.
    pub fn link_current(&self, version: &str) {
        symlink(self.release_dir(version), self.root().join("current")).unwrap();
    }

    /// A private runtime env file (install.sh writes it 0600).
    pub fn write_env(&self, content: &str) {
        write_file(&self.env_path(), content.as_bytes(), 0o600);
    }

    /// A unit file at `path` with `mode`, creating the unit directory.
    pub fn write_unit(&self, path: &Path, content: &str, mode: u32) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        write_file(path, content.as_bytes(), mode);
    }

    /// The split layout install.sh would have installed for `version`
    /// (worker and gateway on the same release, the runtime env file's
    /// assignments as environment, as `publish` renders it).
    pub fn layout(&self, version: &str) -> ExecutionLayout {
        let environment = if self.env_path().exists() {
            environment_file(&self.env_path())
        } else {
            JsonObject::new()
        };
        ExecutionLayout {
            install_root: self.root(),
            config_root: self.config_root(),
            state_root: self.state_root(),
            home: self.home(),
            platform: self.platform.into(),
            worker_release: self.release_dir(version),
            gateway_release: self.release_dir(version),
            bind: "127.0.0.1".into(),
            port: Json::from(u32::from(self.port)),
            environment: Json::Object(environment),
        }
    }

    /// Install `version` as a split layout: both units (0644) and
    /// `execution-layout.json` (0600), with `current` pointing at it.
    pub fn install_split(&self, version: &str) {
        let layout = Layout::of(&self.layout(version))
            .unwrap_or_else(|err| panic!("layout: {}", err.python_line()));
        let render = |role: &str| {
            layout
                .render_service(role)
                .unwrap_or_else(|err| panic!("render {role}: {}", err.python_line()))
        };
        self.write_unit(&self.service_path(), &render("worker"), 0o644);
        self.write_unit(&self.gateway_path(), &render("gateway"), 0o644);
        let manifest = layout
            .manifest()
            .unwrap_or_else(|err| panic!("layout manifest: {}", err.python_line()));
        write_file(
            &self.root().join("execution-layout.json"),
            &json_bytes(&manifest),
            0o600,
        );
        if fs::symlink_metadata(self.root().join("current")).is_err() {
            self.link_current(version);
        }
    }

    /// The command-line layout flags install.sh passes for `release_dir`.
    pub fn layout_args(&self, version: &str) -> Vec<String> {
        let text = |p: PathBuf| p.to_str().unwrap().to_string();
        vec![
            "--root".into(),
            text(self.root()),
            "--config-root".into(),
            text(self.config_root()),
            "--state-root".into(),
            text(self.state_root()),
            "--home".into(),
            text(self.home()),
            "--platform".into(),
            self.platform.as_str().into(),
            "--release-dir".into(),
            text(self.release_dir(version)),
            "--bind".into(),
            "127.0.0.1".into(),
            "--port".into(),
            self.port.to_string(),
        ]
    }
}

impl Roots {
    /// `.install-lock` naming `pid` as the installer, as install.sh writes it.
    pub fn hold_lock(&self, pid: u32) {
        let lock = self.root().join(".install-lock");
        if !lock.exists() {
            make_dir(&lock, 0o700);
        }
        write_file(&lock.join("pid"), format!("{pid}\n").as_bytes(), 0o600);
    }

    /// install.sh's argv for `operation` on `version` with this listener.
    pub fn operation_args(
        &self,
        operation: &str,
        version: &str,
        bind: &str,
        port: i128,
    ) -> Vec<String> {
        let mut args = vec![operation.to_string()];
        args.extend(self.layout_args(version));
        let bind_at = args.iter().position(|arg| arg == "--bind").unwrap() + 1;
        args[bind_at] = bind.to_string();
        let port_at = args.iter().position(|arg| arg == "--port").unwrap() + 1;
        args[port_at] = port.to_string();
        args
    }
}

/// What `activation_transaction begin` is told.
#[derive(Clone)]
pub struct Begin {
    pub candidate_source: PathBuf,
    pub version: String,
    /// `(old_source, old_target)`: the rollback release (`current`'s target).
    pub old: Option<(PathBuf, PathBuf)>,
    pub service_state: String,
    pub service_enabled: bool,
    pub gateway_state: String,
    pub gateway_enabled: bool,
    /// `None` writes a format-2 (legacy) journal.
    pub execution: bool,
    pub handoff: Option<Json>,
    pub api_contract: i64,
}

impl Begin {
    /// A split activation of `candidate_source` as `version`.
    pub fn split(candidate_source: &Path, version: &str) -> Begin {
        Begin {
            candidate_source: candidate_source.to_path_buf(),
            version: version.to_string(),
            old: None,
            service_state: "absent".into(),
            service_enabled: false,
            gateway_state: "absent".into(),
            gateway_enabled: false,
            execution: true,
            handoff: None,
            api_contract: API_CONTRACT,
        }
    }
}

impl Roots {
    /// `activation_transaction begin`: snapshot links and configurations into
    /// a staged private directory, write the canonical manifest, and rename it
    /// into place. Returns the transaction id.
    pub fn begin(&self, spec: &Begin) -> String {
        let root = self.root();
        let temporary = root.join(format!(".activation-transaction.{}.tmp", hex24()));
        make_dir(&temporary, 0o700);
        let release_dir = self.release_dir(&spec.version);
        let transaction_id = format!("activation-{}", hex24());
        let current = root.join("current");
        let previous = root.join("previous");
        let old_release = match &spec.old {
            Some((source, target)) => release_identity(source, target).unwrap(),
            None => Json::Object(JsonObject::new()),
        };
        let previous_release = match link_state(&previous, false).unwrap().get("kind") {
            Some(kind) if kind == &Json::from("symlink") => {
                let target = fs::read_link(&previous).unwrap();
                release_identity(&target, &target).unwrap_or(Json::Object(JsonObject::new()))
            }
            _ => Json::Object(JsonObject::new()),
        };
        let env = configuration(&self.env_path(), &temporary, "env");
        let service = configuration(&self.service_path(), &temporary, "service");
        let mut value = json_object! {
            "format" => 2,
            "volume_bindings" => JsonObject::new(),
            "transaction_id" => transaction_id.as_str(),
            "release_version" => spec.version.as_str(),
            "release_dir" => text(&release_dir),
            "candidate_release" => release_identity(&spec.candidate_source, &release_dir).unwrap(),
            "old_target" => spec.old.as_ref().map(|(_, target)| text(target)).unwrap_or_default(),
            "old_release" => old_release.clone(),
            "current" => link_state(&current, true).unwrap(),
            "previous" => link_state(&previous, false).unwrap(),
            "previous_release" => previous_release,
            "env_path" => text(&self.env_path()),
            "env" => env.clone(),
            "service_path" => text(&self.service_path()),
            "service" => service.clone(),
            "service_state" => spec.service_state.as_str(),
            "service_enabled" => spec.service_enabled,
            "legacy_service_state" => "absent",
            "legacy_service_enabled" => false,
            "prior_port" => 7850,
            "prior_bind_address" => "127.0.0.1",
            "intent" => "ordinary",
            "client_binding" => "",
            "desired_env" => Json::Null,
            "desired_service" => Json::Null,
            "phase" => "prepared",
            "rollback_from" => Json::Null,
            "hub" => JsonObject::new(),
            "guard" => JsonObject::new(),
            "authority_pending" => false,
            "observed_env_sha256" => vec![env.get("sha256").cloned().unwrap()],
            "observed_service_sha256" => vec![service.get("sha256").cloned().unwrap()],
        };
        if spec.execution {
            let layout_path = root.join("execution-layout.json");
            let mut old_worker = old_release.clone();
            if layout_path.exists() {
                let worker = installed_layout(&root)
                    .unwrap_or_else(|err| panic!("installed layout: {}", err.python_line()))
                    .worker_release;
                let keep = old_release
                    .as_object()
                    .filter(|old| !old.is_empty())
                    .is_some_and(|_| release_matches(&worker, &from_compat(&old_release)).unwrap());
                if !keep {
                    old_worker = release_identity(&worker, &worker).unwrap();
                }
            }
            let operation = match &spec.handoff {
                Some(handoff) => handoff.get("operation_id").unwrap().clone(),
                None => Json::from(uuid5_url(&format!(
                    "agentsdock-activation:{transaction_id}"
                ))),
            };
            value.insert("format", 3);
            value.insert(
                "execution",
                json_object! {
                    "runtime_dir" => text(&self.runtime_dir()),
                    "operation_id" => operation,
                    "gateway_state" => spec.gateway_state.as_str(),
                    "gateway_enabled" => spec.gateway_enabled,
                    "old_worker_release" => old_worker,
                    "handoff" => spec.handoff.clone().unwrap_or(Json::Null),
                    "api_contract" => spec.api_contract,
                },
            );
            for (kind, path) in [
                ("gateway", self.gateway_path()),
                ("execution_layout", layout_path),
            ] {
                let snapshot = configuration(&path, &temporary, kind);
                value.insert(format!("{kind}_path"), text(&path));
                value.insert(format!("desired_{kind}"), Json::Null);
                value.insert(
                    format!("observed_{kind}_sha256"),
                    vec![snapshot.get("sha256").cloned().unwrap()],
                );
                value.insert(kind, snapshot);
            }
        }
        write_private(
            &temporary.join("manifest.json"),
            &canonical_bytes(&from_compat(&Json::Object(value))),
        );
        fs::rename(&temporary, self.journal()).unwrap();
        transaction_id
    }

    /// The usual update under test: an installed split 1.0.0 (both services
    /// running and enabled, a runtime env file) activating the staged 1.1.0,
    /// journaled in `prepared`. Returns the transaction id.
    pub fn begin_update(&self) -> String {
        self.release("1.0.0");
        self.write_env("AGENTS_SERVER_PORT=7850\n");
        self.install_split("1.0.0");
        let staging = self.staging("1.1.0");
        let old = self.release_dir("1.0.0");
        self.begin(&Begin {
            old: Some((old.clone(), old)),
            service_state: "running".into(),
            service_enabled: true,
            gateway_state: "running".into(),
            gateway_enabled: true,
            ..Begin::split(&staging, "1.1.0")
        })
    }

    /// Advance a `prepared` journal through the quiesce chain and the link
    /// takeover to `linked`, where install.sh publishes configuration.
    pub fn advance_to_linked(&self) {
        for phase in ["quiescing", "quiesced", "linking"] {
            self.record(phase);
        }
        self.activate_files();
        self.record("linked");
    }

    /// The manifest as stored.
    pub fn manifest(&self) -> JsonObject {
        let data = fs::read(self.manifest_path()).unwrap();
        match parse_json(&data).unwrap() {
            Json::Object(object) => object,
            other => panic!("manifest is not an object: {other:?}"),
        }
    }

    /// Rewrite the manifest (canonical bytes, 0600) with `edit` applied, as a
    /// hand-edited or foreign journal would be.
    pub fn edit_manifest(&self, edit: impl FnOnce(&mut JsonObject)) {
        let mut value = self.manifest();
        edit(&mut value);
        self.write_manifest(&canonical_bytes(&from_compat(&Json::Object(value))));
    }

    /// Replace the manifest bytes verbatim (0600, one link).
    pub fn write_manifest(&self, data: &[u8]) {
        let path = self.manifest_path();
        fs::remove_file(&path).unwrap();
        write_file(&path, data, 0o600);
    }

    /// `activation_transaction record --phase`: a rollback phase remembers
    /// where the rollback started.
    pub fn record(&self, phase: &str) {
        self.edit_manifest(|value| {
            let previous = value.get("phase").cloned().unwrap();
            if phase == "rolling-back" && previous != Json::from("rolling-back") {
                value.insert("rollback_from", previous);
            }
            value.insert("phase", phase);
        });
    }

    /// `activation_transaction activate-files`: move the candidate into
    /// `releases/<v>`, then point `previous` at the rollback release and
    /// `current` at the candidate.
    pub fn activate_files(&self) {
        let value = self.manifest();
        let candidate = value.get("candidate_release").unwrap();
        let source = PathBuf::from(candidate.get("source").unwrap().as_str().unwrap());
        let target = PathBuf::from(candidate.get("target").unwrap().as_str().unwrap());
        if source.exists() && !target.exists() {
            fs::rename(&source, &target).unwrap();
        }
        let old_target = value.get("old_target").unwrap().as_str().unwrap();
        if !old_target.is_empty() {
            replace_symlink(&self.root().join("previous"), Path::new(old_target));
        }
        replace_symlink(&self.root().join("current"), &target);
    }

    /// `activation_transaction replace-config --kind KIND --source S
    /// --mode M` as install.sh's write_runtime_env runs it, for a fresh
    /// publication: `payload` staged 0600 at the kind's `.source` name, the
    /// journal's `desired_<kind>` and `observed_<kind>_sha256` written first,
    /// then the source made `mode`, hard-linked to `.publication`, unlinked
    /// and the publication renamed over the destination, each directory
    /// fsynced. Refuses as upstream does in a closing phase, for a kind the
    /// journal does not own, a mode outside the kind's set, and a
    /// publication already in the way.
    pub fn replace_config(&self, kind: &str, payload: &[u8], mode: u32) -> Result<(), String> {
        let value = self.manifest();
        let phase = value
            .get("phase")
            .and_then(Json::as_str)
            .unwrap_or_default();
        let closing = [
            "committing",
            "committed",
            "rolling-back",
            "rolled-back",
            "rollback-healthy",
        ];
        if closing.contains(&phase) {
            return Err("activation configuration cannot change in this phase".to_string());
        }
        if !kinds(&value).contains(&kind) {
            return Err(
                "activation configuration kind is not owned by this transaction".to_string(),
            );
        }
        let modes: &[u32] = match kind {
            "env" | "execution_layout" => &[0o600],
            _ => &[0o600, 0o644],
        };
        if !modes.contains(&mode) {
            return Err("activation configuration mode is invalid".to_string());
        }
        let field = |key: &str| {
            value
                .get(key)
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let destination = PathBuf::from(field(&format!("{kind}_path")));
        let directory = destination
            .parent()
            .ok_or("a configuration lives in a directory")?;
        let prefix = format!(
            ".{}.activation-{}-{kind}",
            destination
                .file_name()
                .unwrap_or_default()
                .to_string_lossy(),
            field("transaction_id")
        );
        let source = directory.join(format!("{prefix}.source"));
        let publication = directory.join(format!("{prefix}.publication"));
        if fs::symlink_metadata(&publication).is_ok() {
            return Err("activation configuration publication path exists".to_string());
        }
        let io = |err: std::io::Error| format!("{kind}: {err}");
        write_file(&source, payload, 0o600);
        let staged = fs::symlink_metadata(&source).map_err(io)?;
        let digest = sha256_hex(payload);
        self.edit_manifest(|value| {
            value.insert(
                format!("desired_{kind}"),
                Json::Object(json_object! {
                    "sha256" => digest.as_str(),
                    "mode" => mode,
                    "source" => text(&source),
                    "device" => staged.dev(),
                    "inode" => staged.ino(),
                }),
            );
            let observed = format!("observed_{kind}_sha256");
            let mut history = value
                .get(&observed)
                .and_then(Json::as_array)
                .cloned()
                .unwrap_or_default();
            if !history.contains(&Json::from(digest.as_str())) {
                history.push(Json::from(digest.as_str()));
            }
            value.insert(observed, Json::Array(history));
        });
        let sync_directory = || fs::File::open(directory).and_then(|file| file.sync_all());
        fs::set_permissions(&source, fs::Permissions::from_mode(mode))
            .and_then(|()| fs::File::open(&source)?.sync_all())
            .and_then(|()| fs::hard_link(&source, &publication))
            .and_then(|()| sync_directory())
            .and_then(|()| fs::remove_file(&source))
            .and_then(|()| sync_directory())
            .and_then(|()| fs::rename(&publication, &destination))
            .and_then(|()| sync_directory())
            .map_err(io)
    }

    /// `activation_transaction restore-files`: restore the links and every
    /// configuration from the backups (removing what did not exist), and
    /// drop any staging names of this transaction.
    pub fn restore_files(&self) {
        let value = self.manifest();
        let root = self.root();
        for (name, key) in [("current", "current"), ("previous", "previous")] {
            let link = root.join(name);
            let state = value.get(key).unwrap();
            let _ = fs::remove_file(&link);
            if state.get("kind") == Some(&Json::from("symlink")) {
                symlink(state.get("target").unwrap().as_str().unwrap(), &link).unwrap();
            }
        }
        let id = value
            .get("transaction_id")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        for kind in kinds(&value) {
            let destination = PathBuf::from(
                value
                    .get(&format!("{kind}_path"))
                    .unwrap()
                    .as_str()
                    .unwrap(),
            );
            for suffix in ["source", "publication"] {
                let name = format!(
                    ".{}.activation-{id}-{kind}.{suffix}",
                    destination.file_name().unwrap().to_str().unwrap()
                );
                let _ = fs::remove_file(destination.parent().unwrap().join(name));
            }
            let snapshot = value.get(kind).unwrap();
            let _ = fs::remove_file(&destination);
            if snapshot.get("existed") == Some(&Json::Bool(true)) {
                let data = fs::read(self.journal().join(format!("{kind}.backup"))).unwrap();
                let mode = snapshot.get("mode").unwrap().as_int().unwrap() as u32;
                write_file(&destination, &data, mode);
            }
        }
    }

    /// `activation_transaction finish`: retire and delete the journal.
    pub fn finish(&self) {
        let id = self
            .manifest()
            .get("transaction_id")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let retired = self.root().join(format!(".activation-transaction-gc-{id}"));
        fs::rename(self.journal(), &retired).unwrap();
        fs::remove_dir_all(&retired).unwrap();
    }
}

/// The configuration kinds a stored manifest owns.
pub fn kinds(value: &JsonObject) -> Vec<&'static str> {
    if value.get("format") == Some(&Json::from(3)) {
        vec!["env", "service", "gateway", "execution_layout"]
    } else {
        vec!["env", "service"]
    }
}

/// `_configuration(path, backup)`: the snapshot record, copying an existing
/// file's bytes into `<kind>.backup`.
fn configuration(path: &Path, directory: &Path, kind: &str) -> Json {
    let backup = format!("{kind}.backup");
    match fs::symlink_metadata(path) {
        Err(_) => Json::Object(json_object! {
            "existed" => false, "backup" => backup.as_str(), "sha256" => Json::Null, "mode" => Json::Null,
        }),
        Ok(info) => {
            let data = fs::read(path).unwrap();
            write_private(&directory.join(&backup), &data);
            Json::Object(json_object! {
                "existed" => true,
                "backup" => backup.as_str(),
                "sha256" => sha256_hex(&data),
                "mode" => info.mode() & 0o7777,
            })
        }
    }
}

/// Lowercase SHA-256 of bytes, computed independently of the crate under test.
pub fn sha256_hex(data: &[u8]) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let output = child.wait_with_output().unwrap();
    String::from_utf8(output.stdout).unwrap()[..64].to_string()
}

/// `_write_new_private`: a new 0600 file (never an existing one), fsynced.
fn write_private(path: &Path, data: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(data))
        .and_then(|()| file.sync_all())
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
}

/// `_release_identity(source, target)` in the fixtures' JSON type.
fn release_identity(source: &Path, target: &Path) -> Result<Json, String> {
    crate::upstream_activation::release_identity(source, target)
        .map(|identity| to_compat(&identity))
        .map_err(|err| err.python_line())
}

/// `_link_state(path, allow_directory)` in the fixtures' JSON type.
fn link_state(path: &Path, allow_directory: bool) -> Result<Json, String> {
    crate::upstream_activation::link_state(path, allow_directory)
        .map(|state| to_compat(&state))
        .map_err(|err| err.python_line())
}

fn hex24() -> String {
    python_compat::token_hex(12).unwrap()
}

fn replace_symlink(link: &Path, target: &Path) {
    let _ = fs::remove_file(link);
    symlink(target, link).unwrap();
}

pub fn text(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

/// `execution_activation.environment_file`: the `KEY=value` assignments of
/// the runtime env file as `publish` reads them into the layout (blank and
/// `#` lines skipped, explicit quoting decoded, a repeated key keeping its
/// first position and last value). Written here from the original rather
/// than borrowed from execution-activation, whose `publish` the journals
/// this writer stages are checked against.
fn environment_file(path: &Path) -> JsonObject {
    let data = fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let text = decode_utf8(&data).expect("the runtime env file is UTF-8");
    let mut result = JsonObject::new();
    for line in splitlines(text) {
        if strip(line).is_empty() || line.trim_start_matches(is_space).starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .filter(|(key, _)| is_assignment_name(key))
            .unwrap_or_else(|| panic!("not a supported assignment: {line:?}"));
        let value = if value.starts_with(['"', '\'']) {
            match shlex::split(value).expect("valid quoting").as_slice() {
                [word] => word.clone(),
                words => panic!("quoting is invalid: {line:?} gives {words:?}"),
            }
        } else {
            value.to_string()
        };
        result.insert(key, value);
    }
    result
}

/// `[A-Za-z_][A-Za-z0-9_]*`, the names `environment_file` accepts.
fn is_assignment_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

//! Real install trees for layout tests: a base directory holding
//! `install/`, `config/`, `state/` and `home/` (each 0755, owned by the
//! caller) and complete releases under `install/releases/<version>/`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use python_compat::{
    json::{Json, JsonObject},
    json_object,
};

use crate::files::{make_dir, unique_base, write_file};

/// A base directory removed when dropped.
pub struct InstallBase {
    /// The base directory.
    pub path: PathBuf,
}

impl InstallBase {
    /// A fresh base under /tmp (unique per process and call).
    pub fn new(tag: &str) -> InstallBase {
        InstallBase::at(&unique_base("layout", tag))
    }

    /// A base at exactly `path` (recreated from scratch).
    pub fn at(path: &Path) -> InstallBase {
        let _ = fs::remove_dir_all(path);
        make_dir(path, 0o755);
        for root in ["install", "config", "state", "home"] {
            make_dir(&path.join(root), 0o755);
        }
        InstallBase {
            path: path.to_path_buf(),
        }
    }

    /// `base/<relative>`.
    pub fn join(&self, relative: &str) -> PathBuf {
        self.path.join(relative)
    }

    /// The base as text, for `{BASE}` substitution.
    pub fn text(&self) -> String {
        self.path.to_str().expect("UTF-8 base").to_string()
    }

    /// A complete release `install/releases/<version>/` whose VERSION holds
    /// `<version>\n`.
    pub fn release(&self, version: &str) -> PathBuf {
        self.release_with_version(version, format!("{version}\n").as_bytes())
    }

    /// A complete release directory `name` whose VERSION holds `content`.
    pub fn release_with_version(&self, name: &str, content: &[u8]) -> PathBuf {
        let releases = self.join("install/releases");
        if !releases.exists() {
            make_dir(&releases, 0o755);
        }
        let release = releases.join(name);
        make_dir(&release, 0o755);
        write_file(&release.join("VERSION"), content, 0o644);
        write_file(
            &release.join("execution_service.py"),
            b"# execution service\n",
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

    /// A serialized layout over this base (Python `to_dict` shape).
    pub fn layout(&self, platform: &str, worker: &str, gateway: &str) -> JsonObject {
        json_object! {
            "install_root" => self.join("install").to_str().unwrap(),
            "config_root" => self.join("config").to_str().unwrap(),
            "state_root" => self.join("state").to_str().unwrap(),
            "home" => self.join("home").to_str().unwrap(),
            "platform" => platform,
            "worker_release" => self.join(&format!("install/releases/{worker}")).to_str().unwrap(),
            "gateway_release" => self.join(&format!("install/releases/{gateway}")).to_str().unwrap(),
            "bind" => "127.0.0.1",
            "port" => 7850_i64,
            "environment" => JsonObject::new(),
        }
    }
}

impl Drop for InstallBase {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// `ln -s target at`.
pub fn link(target: &Path, at: &Path) {
    symlink(target, at).unwrap();
}

/// A copy of `object` with `key` replaced.
pub fn with(object: &JsonObject, key: &str, value: impl Into<Json>) -> Json {
    let mut copy = object.clone();
    copy.insert(key, value.into());
    Json::Object(copy)
}

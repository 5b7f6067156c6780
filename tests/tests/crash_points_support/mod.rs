//! The invariants the crash-point campaign checks after every recovery, and
//! the scene pieces its operations share.

#![allow(dead_code)] // each campaign uses a different part

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use agents_common::{layout_manifest, render_service, ExecutionLayout};
use agents_tests::{process_alive, write_file_making_parents, Installation, Sandbox};
use python_compat::json::{encode_indented, parse_json, Json};

use crate::execution_manage_support::Site;

pub(crate) mod runner_recovery;

/// True when the units, the layout manifest and `current` are exactly what
/// a finished activation of `layout` leaves (units 0600, as
/// `execution-manage` and the fixtures write them).
pub(crate) fn is_installation_of(site: &Site, layout: &ExecutionLayout) -> bool {
    let disk = site.disk();
    let unit = |role| Some((render_service(layout, role).expect("render"), 0o600));
    let manifest = encode_indented(&layout_manifest(layout).expect("manifest"));
    disk.worker_unit == unit("worker")
        && disk.gateway_unit == unit("gateway")
        && disk.manifest == Some((manifest, 0o600))
        && disk.current.as_deref() == Some(layout.gateway_release.as_path())
}

/// Every retired execution journal holds exactly its `manifest.json`, which
/// is a terminal journal under its own id.
pub(crate) fn assert_retired_journals_valid(root: &Path) {
    for entry in fs::read_dir(root).expect("the install root") {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix(".execution-completed-") else {
            continue;
        };
        let names = sorted_names(&entry.path());
        assert_eq!(names, ["manifest.json"], "{name} holds only its journal");
        let journal = parse_json(&fs::read(entry.path().join("manifest.json")).unwrap())
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(journal.get("id").and_then(Json::as_str), Some(id));
        let phase = journal.get("phase").and_then(Json::as_str).unwrap_or("");
        assert!(
            ["committed", "rolled-back"].contains(&phase),
            "{name}: {phase}"
        );
    }
}

/// The install lock is free: absent, an empty directory (a release killed
/// after removing its owner file), or owned by a process that is gone, which
/// the next owner reaps.
pub(crate) fn assert_unlocked_or_reapable(root: &Path) {
    let lock = root.join(".install-lock");
    let Ok(info) = fs::symlink_metadata(&lock) else {
        return;
    };
    assert!(info.is_dir(), "{} is a directory", lock.display());
    let names = sorted_names(&lock);
    if names.is_empty() {
        return;
    }
    assert_eq!(names, ["pid"], "the lock holds only its owner");
    let owner = fs::read_to_string(lock.join("pid")).unwrap();
    let pid: u32 = owner.trim().parse().expect("an owner PID");
    assert!(!process_alive(pid), "the lock's owner {pid} still runs");
}

/// True for a name one of the helpers (or install.sh) gives a temporary.
pub(crate) fn is_temporary(name: &str) -> bool {
    name.starts_with('.')
        && (name.ends_with(".tmp")
            || name.starts_with(".execution-draft-")
            || name.starts_with(".execution-current-")
            || name.starts_with(".uninstall-stale-lock-"))
}

/// No temporary is left in the directories the helpers write: the install
/// root and its journals, the unit directory, the config root and the
/// state's admin and runtime directories (the workers' own receipt
/// temporaries aside).
pub(crate) fn assert_no_temporaries(sandbox: &Sandbox, installation: &Installation) {
    let mut directories = vec![
        installation.install_root.clone(),
        sandbox.unit_dir(),
        installation.config_root.clone(),
        installation.state_root.clone(),
        installation.state_root.join("admin"),
        installation.state_root.join("execution"),
    ];
    for name in sorted_names(&installation.install_root) {
        if name.starts_with(".execution-completed-")
            || name == ".execution-transaction"
            || name == ".activation-transaction"
        {
            directories.push(installation.install_root.join(name));
        }
    }
    let mut left = Vec::new();
    for directory in directories {
        for name in sorted_names(&directory) {
            let receipt = name.starts_with(".worker.") || name.starts_with(".gateway.");
            if is_temporary(&name) && !(receipt && directory.ends_with("execution")) {
                left.push(directory.join(name).display().to_string());
            }
        }
    }
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// Names in a directory, sorted (none when it does not exist).
pub(crate) fn sorted_names(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(directory)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A neighbourhood of the installation that no helper may touch: a tree
/// beside the roots (with a link into the install root) and a file in the
/// home, snapshotted when the scene is set up.
pub(crate) struct Outside {
    roots: Vec<PathBuf>,
    before: BTreeMap<PathBuf, String>,
}

impl Outside {
    /// Creates the neighbourhood of `installation` and records it.
    pub(crate) fn around(sandbox: &Sandbox, installation: &Installation) -> Outside {
        Outside::with_link(
            sandbox.base(),
            &installation.install_root,
            &installation.home,
        )
    }

    /// The neighbourhood of an installation under `home` (the legacy
    /// layout, whose roots are in the home).
    pub(crate) fn beside(sandbox: &Sandbox, home: &Path) -> Outside {
        Outside::with_link(
            sandbox.base(),
            &home.join(".local/share/agents-server"),
            home,
        )
    }

    /// The neighbourhood, in `base`, of an installation that runs no
    /// services (its roots under `base`, its home `home`).
    pub(crate) fn with_link(base: &Path, install_root: &Path, home: &Path) -> Outside {
        let neighbour = base.join("neighbour");
        write_file_making_parents(&neighbour.join("notes.txt"), b"keep me\n", 0o644);
        write_file_making_parents(&neighbour.join("deep/data.bin"), b"\x00\x01", 0o600);
        let _ = symlink(install_root, neighbour.join("install-link"));
        let kept = home.join("keep.txt");
        write_file_making_parents(&kept, b"the user's own file\n", 0o644);
        let roots = vec![neighbour, kept];
        let before = tree(&roots);
        Outside { roots, before }
    }

    /// Nothing in the neighbourhood changed.
    #[track_caller]
    pub(crate) fn assert_unchanged(&self) {
        assert_eq!(tree(&self.roots), self.before, "outside the installation");
    }
}

fn tree(roots: &[PathBuf]) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut pending: Vec<PathBuf> = roots.to_vec();
    while let Some(path) = pending.pop() {
        let Ok(info) = fs::symlink_metadata(&path) else {
            found.insert(path, "missing".into());
            continue;
        };
        let mode = info.mode();
        let entry = if info.file_type().is_symlink() {
            format!("link {}", fs::read_link(&path).unwrap().display())
        } else if info.is_dir() {
            for name in sorted_names(&path) {
                pending.push(path.join(name));
            }
            format!("dir {mode:o}")
        } else {
            format!("file {mode:o} {:?}", fs::read(&path).unwrap())
        };
        found.insert(path, entry);
    }
    found
}

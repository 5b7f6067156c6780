//! A fake AgentsServer release for the migration kit tests: the five originals
//! plus the stand-ins of `tests/fixtures/migration`, the kit run on it, and
//! the runtime its stand-in install.sh stages from it.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agents_tests::{binary_path, profile_dir, Originals, TempDir, HELPERS};

/// The release's version file.
pub(crate) const VERSION: &str = "1.0.7-beta.5";
/// The originals copied into every fake release (the kit's pinned sources).
pub(crate) const ORIGINALS: [&str; 5] = [
    "execution_activation.py",
    "execution_manage.py",
    "update_handoff.py",
    "update_runner.py",
    "uninstall.sh",
];
/// The stand-ins copied from `tests/fixtures/migration`.
pub(crate) const STAND_INS: [&str; 7] = [
    "install.sh",
    "activation_transaction.py",
    "execution_install.py",
    "execution_transport.py",
    "execution_http.py",
    "execution_uninstall.py",
    "VERSION",
];
/// The entry points the kit gives a launcher, and the binary each runs.
pub(crate) const LAUNCHERS: [(&str, &str); 5] = [
    ("execution_activation.py", "execution-activation"),
    ("execution_manage.py", "execution-manage"),
    ("update_runner.py", "update-runner"),
    ("execution_uninstall.py", "uninstall"),
    ("uninstall.sh", "uninstall"),
];
/// The kit's manifest.
pub(crate) const MANIFEST: &str = "rust-helpers.json";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// `tests/fixtures/migration`.
pub(crate) fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/migration")
}

/// `scripts/migration-kit.sh`.
pub(crate) fn kit_script() -> PathBuf {
    repo_root().join("scripts/migration-kit.sh")
}

/// The directory of the built helpers the kit installs (every one must exist).
pub(crate) fn binaries_dir() -> PathBuf {
    for helper in HELPERS {
        binary_path(helper);
    }
    profile_dir()
}

/// The four Rust targets the kit ships, and each one's staged-name tag.
pub(crate) const TARGETS: [(&str, &str); 4] = [
    ("x86_64-unknown-linux-gnu", "linux-x86_64"),
    ("aarch64-unknown-linux-gnu", "linux-aarch64"),
    ("x86_64-apple-darwin", "darwin-x86_64"),
    ("aarch64-apple-darwin", "darwin-arm64"),
];
/// The target of the machine running the tests: its folder holds the built
/// helpers, which the launchers really run here.
pub(crate) const HOST_TARGET: &str = if cfg!(target_arch = "aarch64") {
    "aarch64-unknown-linux-gnu"
} else {
    "x86_64-unknown-linux-gnu"
};

/// The staged-name tag of `target` (`linux-x86_64`, ...).
pub(crate) fn tag(target: &str) -> &'static str {
    TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, tag)| *tag)
        .unwrap_or_else(|| panic!("unknown target {target}"))
}

/// The name the kit stages `helper` under for `target`.
pub(crate) fn staged(helper: &str, target: &str) -> String {
    format!("{helper}-{}", tag(target))
}

/// The first bytes of an executable for `target` that cannot run here: a
/// 64-bit little-endian ELF executable header with the target's e_machine,
/// or a Mach-O MH_EXECUTE header with its cputype, then a note. It stands
/// for another platform's binary, which this machine never executes.
pub(crate) fn foreign_executable(target: &str) -> Vec<u8> {
    let mut bytes = match target {
        "x86_64-unknown-linux-gnu" | "aarch64-unknown-linux-gnu" => {
            let machine: u16 = if target.starts_with("x86_64") {
                62
            } else {
                183
            };
            let mut header = b"\x7fELF\x02\x01\x01\x00".to_vec();
            header.resize(16, 0);
            header.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
            header.extend_from_slice(&machine.to_le_bytes());
            header.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
            header
        }
        _ => {
            let cputype: u32 = if target.starts_with("x86_64") {
                0x0100_0007
            } else {
                0x0100_000c
            };
            let mut header = vec![0xcf, 0xfa, 0xed, 0xfe];
            header.extend_from_slice(&cputype.to_le_bytes());
            header.extend_from_slice(&0u32.to_le_bytes());
            header.extend_from_slice(&2u32.to_le_bytes()); // MH_EXECUTE
            header
        }
    };
    bytes.resize(64, 0);
    bytes.extend_from_slice(format!("test stand-in for a {target} executable\n").as_bytes());
    bytes
}

/// A dist folder as `scripts/build-release.sh` leaves it: `<target>/<helper>`,
/// `SHA256SUMS` and `provenance.json`.
/// The host's folder holds the built helpers (hard links, or copies across
/// filesystems); every other target's holds [`foreign_executable`]s.
pub(crate) fn dist(parent: &Path, targets: &[&str]) -> PathBuf {
    let dist = parent.join("dist");
    for target in targets {
        let folder = dist.join(target);
        fs::create_dir_all(&folder).unwrap();
        for helper in HELPERS {
            let to = folder.join(helper);
            if *target == HOST_TARGET {
                let from = binaries_dir().join(helper);
                if fs::hard_link(&from, &to).is_err() {
                    fs::copy(&from, &to).unwrap();
                }
            } else {
                fs::write(&to, foreign_executable(target)).unwrap();
                fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
    }
    agents_tests::release_dist::record_build(&dist);
    dist
}

/// Every target name, in the kit's order.
pub(crate) fn all_targets() -> Vec<&'static str> {
    TARGETS.iter().map(|(target, _)| *target).collect()
}

/// An unpacked release in a private temp directory.
pub(crate) struct FakeRelease {
    temp: TempDir,
    /// The release directory (the one holding install.sh).
    pub source: PathBuf,
}

impl FakeRelease {
    /// Originals and stand-ins with a release archive's modes (scripts 0755,
    /// everything else 0644).
    pub(crate) fn new(originals: &Originals) -> FakeRelease {
        let temp = TempDir::new("migration-kit");
        let source = temp.path().join(format!("agents-server-{VERSION}"));
        fs::create_dir(&source).unwrap();
        let originals_dir = originals.dir();
        let fixtures = fixtures_dir();
        let copies = ORIGINALS
            .iter()
            .map(|name| (originals_dir.join(name), *name))
            .chain(STAND_INS.iter().map(|name| (fixtures.join(name), *name)));
        for (from, name) in copies {
            let to = source.join(name);
            fs::copy(&from, &to).unwrap_or_else(|err| panic!("copy {}: {err}", from.display()));
            let mode = if name.ends_with(".sh") { 0o755 } else { 0o644 };
            fs::set_permissions(&to, fs::Permissions::from_mode(mode)).unwrap();
        }
        FakeRelease { temp, source }
    }

    /// The private temp directory holding the release (for scratch files).
    pub(crate) fn temp(&self) -> &Path {
        self.temp.path()
    }

    /// A file of the release.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.source.join(name)
    }

    /// The dist the default run stages: the built helpers for this host and
    /// stand-ins for the three other platforms (made once per release).
    pub(crate) fn default_dist(&self) -> PathBuf {
        let dist = self.temp().join("dist");
        if !dist.exists() {
            self::dist(self.temp(), &all_targets());
        }
        dist
    }

    /// Runs the kit on the release with [`FakeRelease::default_dist`].
    pub(crate) fn run_kit(&self) -> Output {
        self.run_kit_with(&self.default_dist())
    }

    /// Runs the kit on the release with the dist folder `dist`.
    pub(crate) fn run_kit_with(&self, dist: &Path) -> Output {
        Command::new("bash")
            .arg(kit_script())
            .arg("--dist")
            .arg(dist)
            .arg(&self.source)
            .stdin(Stdio::null())
            .output()
            .expect("bash runs the kit")
    }

    /// Runs the kit and fails the test unless it succeeds.
    pub(crate) fn migrate(&self) -> String {
        self.migrate_with(&self.default_dist())
    }

    /// Runs the kit with `dist` and fails the test unless it succeeds.
    pub(crate) fn migrate_with(&self, dist: &Path) -> String {
        let output = self.run_kit_with(dist);
        assert!(
            output.status.success(),
            "the kit failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("the kit prints UTF-8")
    }

    /// Runs the release's (stand-in) install.sh, which stages the release into
    /// `<temp>/stage` as install.sh stages a runtime, and returns the stage.
    pub(crate) fn stage(&self) -> PathBuf {
        let stage = self.temp().join("stage");
        let output = Command::new(self.path("install.sh"))
            .arg(&stage)
            .stdin(Stdio::null())
            .output()
            .expect("run the stand-in install.sh");
        assert!(
            output.status.success(),
            "install.sh failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stage
    }
}

/// What a test compares to prove a directory did not change: every entry's
/// type, mode, inode and a hash of its content (or link target).
pub(crate) type Snapshot = BTreeMap<PathBuf, (u32, u64, u64, u64)>;

/// Walks `root` without following links.
pub(crate) fn snapshot(root: &Path) -> Snapshot {
    let mut entries = Snapshot::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let mut hasher = DefaultHasher::new();
            if meta.file_type().is_file() {
                fs::read(&path).unwrap().hash(&mut hasher);
            } else if meta.file_type().is_symlink() {
                fs::read_link(&path).unwrap().hash(&mut hasher);
            } else if meta.is_dir() {
                pending.push(path.clone());
            }
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            entries.insert(
                relative,
                (meta.mode(), meta.ino(), meta.len(), hasher.finish()),
            );
        }
    }
    entries
}

/// The same snapshot without inodes: equal content, modes and names.
pub(crate) fn content(snapshot: &Snapshot) -> BTreeMap<PathBuf, (u32, u64, u64)> {
    snapshot
        .iter()
        .map(|(path, (mode, _ino, len, hash))| (path.clone(), (*mode, *len, *hash)))
        .collect()
}

/// `sha256sum FILE`, an oracle independent of the kit.
pub(crate) fn sha256_file(path: &Path) -> String {
    let output = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(output.status.success(), "sha256sum {}", path.display());
    String::from_utf8(output.stdout).unwrap()[..64].to_string()
}

/// The text the kit inserted into an entry point: the block between its
/// markers, with the blank line put before it in a Python module.
pub(crate) fn launcher_block(text: &str) -> Option<&str> {
    let marker = text.find("# --- rust-helpers launcher")?;
    let start = if text[..marker].ends_with("\n\n") {
        marker - 1
    } else {
        marker
    };
    let end_marker = "# --- end rust-helpers launcher ---\n";
    let end = text.find(end_marker)? + end_marker.len();
    Some(&text[start..end])
}

//! `scripts/migration-kit.sh` on a fake AgentsServer release built from the
//! originals: what it adds and replaces (and nothing else), that a second run
//! changes nothing and an interrupted run is finished by the next one, and
//! that every release it does not recognise is refused untouched.

use crate::migration_kit_support;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use agents_tests::{binary_path, Originals, HELPERS};
use migration_kit_support::{
    all_targets, binaries_dir, content, dist, fixtures_dir, foreign_executable, launcher_block,
    sha256_file, snapshot, staged, tag, FakeRelease, Snapshot, HOST_TARGET, LAUNCHERS, MANIFEST,
    ORIGINALS, TARGETS,
};
use python_compat::json::{parse_json, Json};

fn text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn string<'a>(value: &'a Json, keys: &[&str]) -> &'a str {
    let mut current = value;
    for key in keys {
        current = current
            .get(key)
            .unwrap_or_else(|| panic!("{MANIFEST} lacks {keys:?}"));
    }
    current
        .as_str()
        .unwrap_or_else(|| panic!("{keys:?} is not text"))
}

/// The launcher sits right after the `from __future__` line (the `#!` line of
/// uninstall.sh); removing it gives back the original byte for byte.
fn assert_launcher(entry_point: &Path, original: &str, binary: &str) {
    let migrated = text(entry_point);
    let block =
        launcher_block(&migrated).unwrap_or_else(|| panic!("{entry_point:?} has no launcher"));
    assert_eq!(migrated.matches(block).count(), 1);
    assert_eq!(migrated.replacen(block, "", 1), original, "{entry_point:?}");
    let anchor = if entry_point.ends_with("uninstall.sh") {
        "#!/usr/bin/env bash\n"
    } else {
        "from __future__ import annotations\n"
    };
    let at = migrated.find(block).unwrap();
    assert!(
        migrated[..at].ends_with(anchor) && !migrated[..at - anchor.len()].contains(anchor),
        "{entry_point:?}: launcher placement"
    );
    if anchor.starts_with("#!") {
        assert!(block.contains(&format!("/{binary}-$tag\"")), "{block}");
        assert!(
            block.contains("exec -a \"$0\" \"$binary\" \"$@\""),
            "{block}"
        );
    } else {
        assert!(
            block.contains(&format!("_rust_helper_launch(\"{binary}\", {{")),
            "{block}"
        );
        assert!(block.contains("os.execv(path, sys.argv)"), "{block}");
    }
    for (target, tag) in TARGETS {
        assert!(
            block.contains(tag),
            "{entry_point:?} knows {target}: {block}"
        );
    }
}

/// The build record the kit carries from the dist into the release: each
/// carried name and the dist file it copies.
const CARRIED: [(&str, &str); 2] = [
    ("rust-helpers.SHA256SUMS", "SHA256SUMS"),
    ("rust-helpers.provenance.json", "provenance.json"),
];

/// The files whose digests the manifest records after a run.
const RECORDED_FILES: [&str; 7] = [
    "execution_activation.py",
    "execution_manage.py",
    "update_runner.py",
    "execution_uninstall.py",
    "update_handoff.py",
    "uninstall.sh",
    "install.sh",
];

/// Every staged binary name, platform by platform, helper by helper: the
/// order the kit lists them in install.sh.
fn staged_names() -> Vec<String> {
    TARGETS
        .iter()
        .flat_map(|(target, _tag)| HELPERS.iter().map(|helper| staged(helper, target)))
        .collect()
}

/// The unchanged source of `entry_point`: the original, or for
/// `execution_uninstall.py` (no original of it is pinned) its stand-in.
fn original_source(originals_dir: &Path, entry_point: &str) -> String {
    if entry_point == "execution_uninstall.py" {
        text(&fixtures_dir().join(entry_point))
    } else {
        text(&originals_dir.join(entry_point))
    }
}

/// A fake release right after one kit run with its default dist, with what
/// the checks of that first run compare against.
struct Migrated {
    release: FakeRelease,
    /// The directory of the pinned originals the release was made from.
    originals_dir: PathBuf,
    /// What the kit printed.
    report: String,
    /// The dist it staged from.
    dist: PathBuf,
    /// The release before the run.
    before: Snapshot,
}

impl Migrated {
    fn new(originals: &Originals) -> Migrated {
        let release = FakeRelease::new(originals);
        let before = snapshot(&release.source);
        let report = release.migrate();
        let dist = release.default_dist();
        Migrated {
            release,
            originals_dir: originals.dir().to_path_buf(),
            report,
            dist,
            before,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.release.path(name)
    }

    /// The kit printed `line` (anywhere in its report).
    #[track_caller]
    fn assert_reported(&self, line: &str) {
        assert!(self.report.contains(line), "{}", self.report);
    }

    /// Each platform's five executables, byte-identical to what the dist
    /// holds, and this host's slot the built helper.
    fn assert_binaries_staged(&self) {
        for (target, _tag) in TARGETS {
            for helper in HELPERS {
                let name = staged(helper, target);
                let installed = self.path(&name);
                assert_eq!(mode(&installed), 0o755, "{name}");
                assert_eq!(
                    fs::read(&installed).unwrap(),
                    fs::read(self.dist.join(target).join(helper)).unwrap(),
                    "{name} is the dist's binary"
                );
                self.assert_reported(&format!("binary    {name}  sha256"));
            }
        }
        assert_eq!(
            fs::read(self.path(&staged("execution-manage", HOST_TARGET))).unwrap(),
            fs::read(binary_path("execution-manage")).unwrap(),
            "this host's slot holds the built helper"
        );
        self.assert_reported(
            "  platforms linux-x86_64, linux-aarch64, darwin-x86_64, darwin-arm64 \
             (any other host runs the Python originals)\n",
        );
    }

    /// The build's checksums and provenance, carried verbatim.
    fn assert_build_record_carried(&self) {
        for (name, built) in CARRIED {
            assert_eq!(mode(&self.path(name)), 0o644, "{name}");
            assert_eq!(
                fs::read(self.path(name)).unwrap(),
                fs::read(self.dist.join(built)).unwrap(),
                "{name} is the dist's {built}"
            );
            self.assert_reported(&format!("carried   {name}  sha256"));
        }
    }

    /// Each launcher carries the size and sha256 of every binary it may run.
    fn assert_launchers_record_their_binaries(&self) {
        for (entry_point, binary) in LAUNCHERS {
            let migrated = text(&self.path(entry_point));
            let block = launcher_block(&migrated).unwrap();
            for (target, _tag) in TARGETS {
                let name = staged(binary, target);
                let size = fs::metadata(self.path(&name)).unwrap().len();
                let digest = sha256_file(&self.path(&name));
                let recorded = if entry_point.ends_with(".sh") {
                    format!("sha256={digest} ;;")
                } else {
                    format!(", {size}, '{digest}'),")
                };
                assert!(
                    block.contains(&recorded),
                    "{entry_point} records {name}: {block}"
                );
            }
        }
    }

    /// The entry points keep their code and mode; only the launcher is
    /// inserted. The imported-only module stays as it was.
    fn assert_entry_points_keep_their_code(&self) {
        for (entry_point, binary) in LAUNCHERS {
            let original = original_source(&self.originals_dir, entry_point);
            assert_launcher(&self.path(entry_point), &original, binary);
            let expected_mode = if entry_point.ends_with(".sh") {
                0o755
            } else {
                0o644
            };
            assert_eq!(
                mode(&self.path(entry_point)),
                expected_mode,
                "{entry_point} keeps its mode"
            );
        }
        assert_eq!(
            fs::read(self.path("update_handoff.py")).unwrap(),
            fs::read(self.originals_dir.join("update_handoff.py")).unwrap(),
            "update_handoff.py is imported only and stays as it was"
        );
    }

    /// install.sh: exactly its RELEASE_FILES and chmod 755 lines gained the
    /// names.
    fn assert_install_sh_lists_the_binaries(&self) {
        let original_install = text(&fixtures_dir().join("install.sh"));
        let migrated_install = text(&self.path("install.sh"));
        let original_lines: Vec<&str> = original_install.lines().collect();
        let migrated_lines: Vec<&str> = migrated_install.lines().collect();
        assert_eq!(original_lines.len(), migrated_lines.len());
        let changed: Vec<(&str, &str)> = original_lines
            .iter()
            .zip(&migrated_lines)
            .filter(|(old, new)| old != new)
            .map(|(old, new)| (*old, *new))
            .collect();
        assert_eq!(changed.len(), 2, "{changed:#?}");
        let staged_names = staged_names();
        let carried = CARRIED.map(|(name, _built)| name);
        let (old_release, new_release) = changed[0];
        assert_eq!(
            new_release,
            format!(
                "{} {} {} {MANIFEST})",
                old_release.strip_suffix(')').unwrap(),
                staged_names.join(" "),
                carried.join(" ")
            )
        );
        let (old_chmod, new_chmod) = changed[1];
        let chmod_paths: Vec<String> = staged_names
            .iter()
            .map(|name| format!("\"$STAGE_DIR/{name}\""))
            .collect();
        assert_eq!(new_chmod, format!("{old_chmod} {}", chmod_paths.join(" ")));
        assert!(migrated_install.ends_with('\n') && original_install.ends_with('\n'));
    }

    /// The manifest's format, release, per-platform binaries (digests checked
    /// against sha256sum), requirements and the build's provenance.
    fn assert_manifest_records_the_platforms(&self) {
        let manifest = self.manifest();
        assert_eq!(mode(&self.path(MANIFEST)), 0o644);
        assert_eq!(manifest.get("format").and_then(Json::as_int), Some(3));
        assert_eq!(string(&manifest, &["helpers_release"]), "1.0.7-beta.5");
        for (target, tag) in TARGETS {
            assert_eq!(string(&manifest, &["platforms", tag, "target"]), target);
            for helper in HELPERS {
                let name = staged(helper, target);
                let binary = ["platforms", tag, "binaries", &name];
                assert_eq!(
                    string(&manifest, &[&binary[..], &["sha256"]].concat()),
                    sha256_file(&self.path(&name)),
                    "{name}"
                );
                assert_eq!(
                    string(&manifest, &[&binary[..], &["built_as"]].concat()),
                    format!("{target}/{helper}")
                );
            }
        }
        assert_eq!(
            manifest.get("provenance"),
            Some(&parse_json(&fs::read(self.dist.join("provenance.json")).unwrap()).unwrap()),
            "the manifest records the build's provenance"
        );
        assert_eq!(
            string(&manifest, &["platforms", "darwin-arm64", "requires"]),
            "Darwin arm64, macOS 11.0"
        );
        assert_eq!(
            string(&manifest, &["platforms", "linux-aarch64", "requires"]),
            "Linux aarch64, glibc 2.17"
        );
    }

    /// The manifest's digest of every file as migrated, and of every ported
    /// original and install.sh as they were before.
    fn assert_manifest_records_the_files(&self) {
        let manifest = self.manifest();
        for name in RECORDED_FILES {
            assert_eq!(
                string(&manifest, &["files", name, "sha256"]),
                sha256_file(&self.path(name)),
                "{name}"
            );
        }
        for original in ORIGINALS {
            if original != "update_handoff.py" {
                assert_eq!(
                    string(&manifest, &["files", original, "original_sha256"]),
                    sha256_file(&self.originals_dir.join(original)),
                    "{original}"
                );
            }
        }
        assert_eq!(
            string(&manifest, &["files", "install.sh", "original_sha256"]),
            sha256_file(&fixtures_dir().join("install.sh"))
        );
    }

    fn manifest(&self) -> Json {
        parse_json(&fs::read(self.path(MANIFEST)).unwrap()).unwrap()
    }

    /// Nothing but the binaries, the build record and the manifest was
    /// added, and nothing but the entry points and install.sh touched.
    /// Returns the release as the run left it.
    fn assert_nothing_else_changed(&self) -> Snapshot {
        let after = snapshot(&self.release.source);
        let mut added_names: Vec<&str> = after
            .keys()
            .filter(|path| !self.before.contains_key(*path))
            .map(|path| path.to_str().unwrap())
            .collect();
        added_names.sort();
        let staged_names = staged_names();
        let mut expected: Vec<&str> = staged_names
            .iter()
            .map(String::as_str)
            .chain(CARRIED.map(|(name, _built)| name))
            .chain([MANIFEST])
            .collect();
        expected.sort();
        assert_eq!(added_names, expected);
        for (path, entry) in &self.before {
            let name = path.to_str().unwrap();
            let replaced =
                LAUNCHERS.iter().any(|(module, _)| *module == name) || name == "install.sh";
            if !replaced {
                assert_eq!(after.get(path), Some(entry), "{name} was not touched");
            }
        }
        after
    }
}

#[test]
fn the_kit_adds_the_binaries_and_redirects_only_the_entry_points() {
    let originals = agents_tests::require_originals!();
    let migrated = Migrated::new(&originals);
    migrated.assert_binaries_staged();
    migrated.assert_build_record_carried();
    migrated.assert_launchers_record_their_binaries();
    migrated.assert_entry_points_keep_their_code();
    migrated.assert_install_sh_lists_the_binaries();
    migrated.assert_manifest_records_the_platforms();
    migrated.assert_manifest_records_the_files();
    let after = migrated.assert_nothing_else_changed();

    // A second run with the same binaries writes nothing at all.
    let second = migrated.release.migrate();
    assert_eq!(
        snapshot(&migrated.release.source),
        after,
        "the second run changed files"
    );
    for line in [
        "launcher  execution_activation.py -> execution-activation (already)",
        "launcher  uninstall.sh -> uninstall (already)",
        "staged    install.sh lists the binaries in RELEASE_FILES and chmod 755 (already)",
    ] {
        assert!(second.contains(line), "{second}");
    }
}

#[test]
fn a_kit_run_stages_only_the_platforms_its_dist_holds() {
    let originals = agents_tests::require_originals!();
    let release = FakeRelease::new(&originals);
    let dist = dist(release.temp(), &[HOST_TARGET]);
    let report = release.migrate_with(&dist);
    let host_tag = tag(HOST_TARGET);
    assert!(
        report.contains(&format!(
            "  platforms {host_tag} (any other host runs the Python originals)\n"
        )),
        "{report}"
    );
    let install = text(&release.path("install.sh"));
    for (target, _tag) in TARGETS {
        let name = staged("update-runner", target);
        assert_eq!(
            release.path(&name).exists(),
            target == HOST_TARGET,
            "{name}"
        );
        assert_eq!(
            install.contains(&name),
            target == HOST_TARGET,
            "{name} in install.sh"
        );
    }
    let launcher = text(&release.path("update_runner.py"));
    assert!(
        launcher.contains(host_tag) && !launcher.contains("darwin-arm64"),
        "{launcher}"
    );

    // Staging fewer platforms over a release that carries more is refused:
    // the release would keep binaries no list names.
    let wider = FakeRelease::new(&originals);
    wider.migrate();
    assert_refused(
        &wider,
        Some(&dist),
        "which this run does not stage; migrate the unpacked release again from its archive",
    );
}

#[test]
fn an_interrupted_run_is_finished_by_running_the_kit_again() {
    let originals = agents_tests::require_originals!();
    let reference = FakeRelease::new(&originals);
    reference.migrate();
    let finished = content(&snapshot(&reference.source));

    // As if the kit stopped after the binaries and two of the files.
    let release = FakeRelease::new(&originals);
    release.migrate();
    let originals_dir = originals.dir();
    fs::copy(
        originals_dir.join("execution_manage.py"),
        release.path("execution_manage.py"),
    )
    .unwrap();
    fs::copy(
        fixtures_dir().join("install.sh"),
        release.path("install.sh"),
    )
    .unwrap();
    fs::set_permissions(
        release.path("execution_manage.py"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    fs::remove_file(release.path(MANIFEST)).unwrap();
    fs::copy(
        originals_dir.join("uninstall.sh"),
        release.path("uninstall.sh"),
    )
    .unwrap();
    fs::set_permissions(
        release.path("uninstall.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::write(
        release.path(&staged("update-handoff", HOST_TARGET)),
        b"\x7fELF truncated",
    )
    .unwrap();

    let report = release.migrate();
    assert!(
        report.contains("launcher  execution_manage.py -> execution-manage\n"),
        "{report}"
    );
    assert!(
        report.contains("launcher  update_runner.py -> update-runner (already)"),
        "{report}"
    );
    assert!(
        report.contains("launcher  uninstall.sh -> uninstall\n"),
        "{report}"
    );
    assert_eq!(content(&snapshot(&release.source)), finished);
}

/// Replaces the first `from` in `path` with `to`; `from` must be there.
fn replace_in(path: &Path, from: &str, to: &str) {
    let old = text(path);
    assert!(old.contains(from), "{} lacks {from:?}", path.display());
    fs::write(path, old.replacen(from, to, 1)).unwrap();
}

/// [`replace_in`] on the release's file `name`.
fn replace_in_release(release: &FakeRelease, name: &str, from: &str, to: &str) {
    replace_in(&release.path(name), from, to);
}

/// Doubles the first line of the release's file `name` that starts with
/// `prefix`.
fn duplicate_line(release: &FakeRelease, name: &str, prefix: &str) {
    let path = release.path(name);
    let old = text(&path);
    let line = old
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("{name} has no line starting {prefix:?}"))
        .to_string();
    fs::write(&path, old.replacen(&line, &format!("{line}\n{line}"), 1)).unwrap();
}

/// Runs the kit (with `dist`, else the release's default one) and checks
/// that it refused with `message` and left the release exactly as it was.
fn assert_refused(release: &FakeRelease, dist: Option<&Path>, message: &str) {
    let before = snapshot(&release.source);
    let output = match dist {
        Some(directory) => release.run_kit_with(directory),
        None => release.run_kit(),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{message}: {stderr}");
    assert!(
        stderr.contains(message),
        "expected {message:?} in the refusal: {stderr}"
    );
    assert!(stderr.starts_with("migration-kit: "), "{stderr}");
    assert!(!stderr.contains("Traceback"), "{stderr}");
    assert_eq!(
        snapshot(&release.source),
        before,
        "a refusal ({message}) changed the release"
    );
}

/// A release the kit must not migrate: how it differs from a fresh fake
/// release, and what the refusal says.
struct Unrecognised {
    what: &'static str,
    change: fn(&FakeRelease),
    refusal: &'static str,
}

/// The kit pins its sources byte for byte and install.sh line by line:
/// anything else, and anything partly migrated or already installed, is
/// refused.
const UNRECOGNISED: [Unrecognised; 21] = [
    Unrecognised {
        what: "a changed ported module",
        change: |release| replace_in_release(release, "execution_manage.py", "import", "import "),
        refusal: "execution_manage.py is not the 1.0.7-beta.5 source the Rust helper ports",
    },
    Unrecognised {
        what: "a changed imported-only module",
        change: |release| replace_in_release(release, "update_handoff.py", "\n\n", "\n\n\n"),
        refusal: "update_handoff.py is not the 1.0.7-beta.5 source the Rust helper ports",
    },
    Unrecognised {
        what: "a changed uninstall.sh",
        change: |release| replace_in_release(release, "uninstall.sh", "--yes", "--yes-please"),
        refusal: "uninstall.sh is not the 1.0.7-beta.5 source the Rust helper ports",
    },
    Unrecognised {
        what: "a missing module",
        change: |release| fs::remove_file(release.path("update_runner.py")).unwrap(),
        refusal: "update_runner.py is missing",
    },
    Unrecognised {
        what: "a symlinked module",
        change: |release| {
            let path = release.path("execution_activation.py");
            let moved = release.temp().join("execution_activation.py");
            fs::rename(&path, &moved).unwrap();
            symlink(&moved, &path).unwrap();
        },
        refusal: "execution_activation.py is not a regular file",
    },
    Unrecognised {
        what: "an uninstall helper without its entry point",
        change: |release| {
            replace_in_release(
                release,
                "execution_uninstall.py",
                "\nif __name__ == \"__main__\":\n    raise SystemExit(main())\n",
                "\n",
            )
        },
        refusal: "execution_uninstall.py does not end with its expected `__main__` entry point",
    },
    Unrecognised {
        what: "an uninstall helper without a __future__ line",
        change: |release| {
            replace_in_release(
                release,
                "execution_uninstall.py",
                "from __future__ import annotations\n",
                "",
            )
        },
        refusal: "execution_uninstall.py does not have exactly one \
                  `from __future__ import annotations` line",
    },
    Unrecognised {
        what: "a second npm registry line",
        change: |release| duplicate_line(release, "update_runner.py", "NPM_REGISTRY_BASE = "),
        refusal: "update_runner.py does not declare exactly one NPM_REGISTRY_BASE",
    },
    Unrecognised {
        what: "two RELEASE_FILES lines",
        change: |release| duplicate_line(release, "install.sh", "RELEASE_FILES=("),
        refusal: "install.sh does not have exactly one `RELEASE_FILES=(...)` line (found 2)",
    },
    Unrecognised {
        what: "no chmod 755 line",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                "chmod 755 \"$STAGE_DIR/install.sh\"",
                "chmod 0755 \"$STAGE_DIR/install.sh\"",
            )
        },
        refusal: "install.sh does not have exactly one `chmod 755` line making \
                  \"$STAGE_DIR/update_runner.py\" executable (found 0)",
    },
    Unrecognised {
        what: "no flat copy into the stage",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                "install -m 644 \"$SOURCE_DIR/$name\"",
                "cp -p \"$SOURCE_DIR/$name\"",
            )
        },
        refusal: "install.sh does not copy each RELEASE_FILES entry into the stage with mode 644",
    },
    Unrecognised {
        what: "a chmod 755 list without uninstall.sh",
        change: |release| {
            replace_in_release(release, "install.sh", " \"$STAGE_DIR/uninstall.sh\"", "")
        },
        refusal: "install.sh does not make uninstall.sh executable in the stage",
    },
    Unrecognised {
        what: "two chmod 755 lines for the helper scripts",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                "chmod 755 \"$STAGE_DIR/package_data\"",
                "chmod 755 \"$STAGE_DIR/package_data\" \"$STAGE_DIR/update_runner.py\"",
            )
        },
        refusal: "install.sh does not have exactly one `chmod 755` line making \
                  \"$STAGE_DIR/update_runner.py\" executable (found 2)",
    },
    Unrecognised {
        what: "a RELEASE_FILES list without uninstall.sh",
        change: |release| replace_in_release(release, "install.sh", " uninstall.sh ", " "),
        refusal: "install.sh's RELEASE_FILES does not list uninstall.sh",
    },
    Unrecognised {
        what: "a release that does not make update_runner.py executable",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                " \"$STAGE_DIR/update_runner.py\"",
                "",
            )
        },
        refusal: "install.sh does not have exactly one `chmod 755` line making \
                  \"$STAGE_DIR/update_runner.py\" executable (found 0)",
    },
    Unrecognised {
        what: "a partly migrated install.sh",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                " VERSION)",
                " VERSION uninstall-linux-x86_64 rust-helpers.json)",
            )
        },
        refusal: "install.sh is only partly migrated",
    },
    Unrecognised {
        what: "a helper name listed elsewhere",
        change: |release| {
            replace_in_release(
                release,
                "install.sh",
                "RELEASE_FILES=(",
                "RELEASE_FILES=(update-runner-darwin-arm64 ",
            )
        },
        refusal: "install.sh already lists update-runner-darwin-arm64 in an unexpected place",
    },
    Unrecognised {
        what: "a launcher only in part",
        change: |release| {
            replace_in_release(
                release,
                "execution_manage.py",
                "from __future__ import annotations\n",
                "from __future__ import annotations\n# --- end rust-helpers launcher ---\n",
            )
        },
        refusal: "execution_manage.py carries the launcher more than once, or only in part",
    },
    Unrecognised {
        what: "an installed runtime",
        change: |release| fs::create_dir(release.path(".venv")).unwrap(),
        refusal: "holds a .venv, so it is an installed runtime",
    },
    Unrecognised {
        what: "a foreign rust-helpers.json",
        change: |release| fs::write(release.path(MANIFEST), b"{\"format\": 1}\n").unwrap(),
        refusal: "rust-helpers.json exists but is not a migration kit manifest",
    },
    Unrecognised {
        what: "a directory where a binary goes",
        change: |release| fs::create_dir(release.path("update-handoff-darwin-x86_64")).unwrap(),
        refusal: "update-handoff-darwin-x86_64 exists and is not a regular file",
    },
];

#[test]
fn the_kit_refuses_releases_it_does_not_recognise_and_changes_nothing() {
    let originals = agents_tests::require_originals!();
    for case in &UNRECOGNISED {
        let release = FakeRelease::new(&originals);
        (case.change)(&release);
        eprintln!("case: {}", case.what);
        assert_refused(&release, None, case.refusal);
    }
}

/// A fresh release and a dist of all four platforms for it, which the
/// dist tests below spoil one way at a time.
fn release_with_full_dist(originals: &Originals) -> (FakeRelease, PathBuf) {
    let release = FakeRelease::new(originals);
    let dist = dist(release.temp(), &all_targets());
    (release, dist)
}

/// A target other than this host's.
fn other_target() -> &'static str {
    all_targets()
        .into_iter()
        .find(|target| *target != HOST_TARGET)
        .unwrap()
}

/// Puts a copy of the built `helper` in the dist's host folder, in place of
/// the hard link (or earlier stand-in) there, so it can be changed without
/// touching the built helper.
fn copy_built_helper(host_folder: &Path, helper: &str) {
    let slot = host_folder.join(helper);
    fs::remove_file(&slot).unwrap();
    fs::copy(binaries_dir().join(helper), &slot).unwrap();
}

#[test]
fn the_kit_refuses_host_binaries_it_cannot_vouch_for() {
    let originals = agents_tests::require_originals!();
    let (release, dist) = release_with_full_dist(&originals);
    let host = HOST_TARGET;
    let refused = |message: String| assert_refused(&release, Some(&dist), &message);
    let host_folder = dist.join(host);
    let handoff = host_folder.join("update-handoff");
    fs::remove_file(&handoff).unwrap();
    refused(format!("the update-handoff binary for {host} is missing"));
    fs::write(&handoff, b"#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&handoff, fs::Permissions::from_mode(0o755)).unwrap();
    refused(format!(
        "the update-handoff binary for {host} is not an executable of any supported platform"
    ));
    let other = other_target();
    fs::write(&handoff, foreign_executable(other)).unwrap();
    refused(format!(
        "the update-handoff binary for {host} is built for {other}"
    ));
    // update-handoff whole again, execution-manage not executable.
    copy_built_helper(&host_folder, "update-handoff");
    copy_built_helper(&host_folder, "execution-manage");
    let manage = host_folder.join("execution-manage");
    fs::set_permissions(&manage, fs::Permissions::from_mode(0o644)).unwrap();
    refused(format!(
        "the execution-manage binary for {host} is not executable"
    ));
}

/// A dist whose SHA256SUMS or provenance.json is missing, does not match its
/// binaries or does not bind the other is refused.
#[test]
fn the_kit_refuses_a_build_record_that_does_not_bind_the_binaries() {
    let originals = agents_tests::require_originals!();
    let (release, dist) = release_with_full_dist(&originals);
    let refused = |message: &str| assert_refused(&release, Some(&dist), message);
    let sums = dist.join("SHA256SUMS");
    let provenance = dist.join("provenance.json");
    let (sums_bytes, provenance_bytes) = (fs::read(&sums).unwrap(), fs::read(&provenance).unwrap());
    let restore = || {
        fs::write(&sums, &sums_bytes).unwrap();
        fs::write(&provenance, &provenance_bytes).unwrap();
    };
    fs::remove_file(&sums).unwrap();
    refused("has no SHA256SUMS (scripts/build-release.sh writes it)");
    restore();
    fs::remove_file(&provenance).unwrap();
    refused(
        "has no provenance.json: scripts/build-release.sh writes it only when built from a clean \
         git tree",
    );
    restore();
    // Another binary with the same header, in a folder the sums cover.
    let replaced = dist.join(other_target()).join("update-runner");
    let kept = fs::read(&replaced).unwrap();
    let mut changed = kept.clone();
    changed.extend_from_slice(b"one more line\n");
    fs::write(&replaced, &changed).unwrap();
    refused(&format!(
        "{} is not the binary SHA256SUMS lists",
        replaced.display()
    ));
    fs::write(&replaced, &kept).unwrap();
    fs::write(
        &provenance,
        String::from_utf8(provenance_bytes.clone())
            .unwrap()
            .replace("\"sha256sums_sha256\": \"", "\"sha256sums_sha256\": \"0"),
    )
    .unwrap();
    refused("provenance.json does not belong to this SHA256SUMS");
    restore();
    let one_line_less: String = String::from_utf8(sums_bytes.clone())
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(&sums, one_line_less).unwrap();
    refused("provenance.json does not belong to this SHA256SUMS");
}

#[test]
fn the_kit_refuses_a_dist_without_exactly_supported_platform_folders() {
    let originals = agents_tests::require_originals!();
    let (release, dist) = release_with_full_dist(&originals);
    fs::create_dir(dist.join("riscv64gc-unknown-linux-gnu")).unwrap();
    assert_refused(
        &release,
        Some(&dist),
        "holds riscv64gc-unknown-linux-gnu, which is not a supported target",
    );
    let empty = release.temp().join("empty-dist");
    fs::create_dir(&empty).unwrap();
    assert_refused(&release, Some(&empty), "holds no platform folder");
}

#[test]
fn a_usage_error_is_not_a_refusal() {
    let output = std::process::Command::new("bash")
        .arg(migration_kit_support::kit_script())
        .arg("--dist")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn the_release_npm_registry_host_is_recognised_and_kept() {
    let originals = agents_tests::require_originals!();
    // The originals elide the registry host; a real release carries one.
    let release = FakeRelease::new(&originals);
    replace_in(
        &release.path("update_runner.py"),
        "<npm-registry-host>",
        "packages.invalid",
    );
    let original = text(&release.path("update_runner.py"));
    release.migrate();
    assert_launcher(
        &release.path("update_runner.py"),
        &original,
        "update-runner",
    );
}

/// `target/dist` as `scripts/build-release.sh --all-targets` leaves it.
fn release_dist() -> std::path::PathBuf {
    let target_dir = agents_tests::profile_dir()
        .parent()
        .expect("the profile directory is inside the target directory")
        .to_path_buf();
    target_dir.join("dist")
}

#[test]
fn the_kit_stages_the_release_builds_of_all_four_platforms() {
    let originals = agents_tests::require_originals!();
    let dist = release_dist();
    let missing: Vec<&str> = TARGETS
        .iter()
        .map(|(target, _)| *target)
        .filter(|target| {
            !HELPERS
                .iter()
                .all(|helper| dist.join(target).join(helper).is_file())
        })
        .collect();
    if !missing.is_empty() {
        return agents_tests::skip(
            agents_tests::test_name!(),
            &format!(
                "no release build for {} (run scripts/build-release.sh --all-targets)",
                missing.join(", ")
            ),
        );
    }
    let release = FakeRelease::new(&originals);
    release.migrate_with(&dist);
    let manifest = parse_json(&fs::read(release.path(MANIFEST)).unwrap()).unwrap();
    let mut sizes = Vec::new();
    for (target, tag) in TARGETS {
        let mut total = 0;
        for helper in HELPERS {
            let name = staged(helper, target);
            let size = fs::metadata(release.path(&name)).unwrap().len();
            let recorded = manifest
                .get("platforms")
                .and_then(|platforms| platforms.get(tag))
                .and_then(|platform| platform.get("binaries"))
                .and_then(|binaries| binaries.get(&name))
                .and_then(|binary| binary.get("size"))
                .and_then(Json::as_int);
            assert_eq!(recorded, Some(i128::from(size)), "{name}");
            total += size;
        }
        assert!(total < 12 * 1024 * 1024, "{target}: {total} bytes");
        sizes.push((target, total));
    }
    // The release's own launcher runs this host's release binary.
    let stage = release.stage();
    let help = std::process::Command::new(stage.join(".venv/bin/python"))
        .arg("-B")
        .arg(stage.join("execution_manage.py"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success(), "{help:?}");
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("{apply,recover,inspect"),
        "{help:?}"
    );
    // The aarch64 Linux build runs, under qemu-user where this machine has it.
    let aarch64 = stage.join(staged("execution-manage", "aarch64-unknown-linux-gnu"));
    if let Ok(output) = std::process::Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu", "-0"])
        .arg(stage.join("execution_manage.py"))
        .arg(&aarch64)
        .arg("--help")
        .output()
    {
        assert!(output.status.success(), "{output:?}");
        assert_eq!(output.stdout, help.stdout, "the same help on both CPUs");
    }
    eprintln!("release sizes: {sizes:?}");
}

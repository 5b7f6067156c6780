//! `scripts/migration-kit.sh` on a fake AgentsServer release built from the
//! originals: what it adds and replaces (and nothing else), that a second run
//! changes nothing and an interrupted run is finished by the next one, and
//! that every release it does not recognise is refused untouched.

use crate::migration_kit_support;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use agents_tests::{binary_path, HELPERS};
use migration_kit_support::{
    all_targets, binaries_dir, content, dist, fixtures_dir, foreign_executable, launcher_block,
    sha256_file, snapshot, staged, tag, FakeRelease, HOST_TARGET, LAUNCHERS, MANIFEST, ORIGINALS,
    TARGETS,
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

#[test]
fn the_kit_adds_the_binaries_and_redirects_only_the_entry_points() {
    let originals = agents_tests::require_originals!();
    let release = FakeRelease::new(&originals);
    let before = snapshot(&release.source);
    let report = release.migrate();
    let dist = release.default_dist();

    // Each platform's five executables, byte-identical to what the dist holds.
    let mut staged_names = Vec::new();
    for (target, _tag) in TARGETS {
        for helper in HELPERS {
            let name = staged(helper, target);
            let installed = release.path(&name);
            assert_eq!(mode(&installed), 0o755, "{name}");
            assert_eq!(
                fs::read(&installed).unwrap(),
                fs::read(dist.join(target).join(helper)).unwrap(),
                "{name} is the dist's binary"
            );
            assert!(
                report.contains(&format!("binary    {name}  sha256")),
                "{report}"
            );
            staged_names.push(name);
        }
    }
    assert_eq!(
        fs::read(release.path(&staged("execution-manage", HOST_TARGET))).unwrap(),
        fs::read(binary_path("execution-manage")).unwrap(),
        "this host's slot holds the built helper"
    );
    assert!(
        report.contains(
            "  platforms linux-x86_64, linux-aarch64, darwin-x86_64, darwin-arm64 \
             (any other host runs the Python originals)\n"
        ),
        "{report}"
    );
    // The build's checksums and provenance, carried verbatim.
    let carried = ["rust-helpers.SHA256SUMS", "rust-helpers.provenance.json"];
    for (name, built) in carried.iter().zip(["SHA256SUMS", "provenance.json"]) {
        assert_eq!(mode(&release.path(name)), 0o644, "{name}");
        assert_eq!(
            fs::read(release.path(name)).unwrap(),
            fs::read(dist.join(built)).unwrap(),
            "{name} is the dist's {built}"
        );
        assert!(
            report.contains(&format!("carried   {name}  sha256")),
            "{report}"
        );
    }
    // Each launcher carries the size and sha256 of every binary it may run.
    for (entry_point, binary) in LAUNCHERS {
        let migrated = text(&release.path(entry_point));
        let block = launcher_block(&migrated).unwrap();
        for (target, _tag) in TARGETS {
            let name = staged(binary, target);
            let size = fs::metadata(release.path(&name)).unwrap().len();
            let digest = sha256_file(&release.path(&name));
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
    // The entry points keep their code; only the launcher is inserted.
    let originals_dir = originals.dir();
    for (entry_point, binary) in LAUNCHERS {
        let original = if entry_point == "execution_uninstall.py" {
            text(&fixtures_dir().join(entry_point))
        } else {
            text(&originals_dir.join(entry_point))
        };
        assert_launcher(&release.path(entry_point), &original, binary);
        let expected_mode = if entry_point.ends_with(".sh") {
            0o755
        } else {
            0o644
        };
        assert_eq!(
            mode(&release.path(entry_point)),
            expected_mode,
            "{entry_point} keeps its mode"
        );
    }
    assert_eq!(
        fs::read(release.path("update_handoff.py")).unwrap(),
        fs::read(originals_dir.join("update_handoff.py")).unwrap(),
        "update_handoff.py is imported only and stays as it was"
    );

    // install.sh: exactly its RELEASE_FILES and chmod 755 lines gained the names.
    let original_install = text(&fixtures_dir().join("install.sh"));
    let migrated_install = text(&release.path("install.sh"));
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

    // The manifest records every digest, checked against sha256sum.
    let manifest = parse_json(&fs::read(release.path(MANIFEST)).unwrap()).unwrap();
    assert_eq!(mode(&release.path(MANIFEST)), 0o644);
    assert_eq!(manifest.get("format").and_then(Json::as_int), Some(3));
    assert_eq!(string(&manifest, &["helpers_release"]), "1.0.7-beta.5");
    for (target, tag) in TARGETS {
        assert_eq!(string(&manifest, &["platforms", tag, "target"]), target);
        for helper in HELPERS {
            let name = staged(helper, target);
            assert_eq!(
                string(&manifest, &["platforms", tag, "binaries", &name, "sha256"]),
                sha256_file(&release.path(&name)),
                "{name}"
            );
            assert_eq!(
                string(
                    &manifest,
                    &["platforms", tag, "binaries", &name, "built_as"]
                ),
                format!("{target}/{helper}")
            );
        }
    }
    assert_eq!(
        manifest.get("provenance"),
        Some(&parse_json(&fs::read(dist.join("provenance.json")).unwrap()).unwrap()),
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
    for name in [
        "execution_activation.py",
        "execution_manage.py",
        "update_runner.py",
        "execution_uninstall.py",
        "update_handoff.py",
        "uninstall.sh",
        "install.sh",
    ] {
        assert_eq!(
            string(&manifest, &["files", name, "sha256"]),
            sha256_file(&release.path(name)),
            "{name}"
        );
    }
    for original in ORIGINALS {
        if original != "update_handoff.py" {
            assert_eq!(
                string(&manifest, &["files", original, "original_sha256"]),
                sha256_file(&originals_dir.join(original)),
                "{original}"
            );
        }
    }
    assert_eq!(
        string(&manifest, &["files", "install.sh", "original_sha256"]),
        sha256_file(&fixtures_dir().join("install.sh"))
    );

    // Nothing else was added, removed or touched.
    let after = snapshot(&release.source);
    let mut added_names: Vec<&str> = after
        .keys()
        .filter(|path| !before.contains_key(*path))
        .map(|path| path.to_str().unwrap())
        .collect();
    added_names.sort();
    let mut expected: Vec<&str> = staged_names
        .iter()
        .map(String::as_str)
        .chain(carried)
        .chain([MANIFEST])
        .collect();
    expected.sort();
    assert_eq!(added_names, expected);
    for (path, entry) in &before {
        let name = path.to_str().unwrap();
        let replaced = LAUNCHERS.iter().any(|(module, _)| *module == name) || name == "install.sh";
        if !replaced {
            assert_eq!(after.get(path), Some(entry), "{name} was not touched");
        }
    }

    // A second run with the same binaries writes nothing at all.
    let second = release.migrate();
    assert_eq!(
        snapshot(&release.source),
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

fn replace_in(path: &Path, from: &str, to: &str) {
    let old = text(path);
    assert!(old.contains(from), "{} lacks {from:?}", path.display());
    fs::write(path, old.replacen(from, to, 1)).unwrap();
}

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

#[test]
fn the_kit_refuses_releases_it_does_not_recognise_and_changes_nothing() {
    let originals = agents_tests::require_originals!();
    type Mutation = fn(&FakeRelease);
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "a changed ported module",
            |release| replace_in(&release.path("execution_manage.py"), "import", "import "),
            "execution_manage.py is not the 1.0.7-beta.5 source the Rust helper ports",
        ),
        (
            "a changed imported-only module",
            |release| replace_in(&release.path("update_handoff.py"), "\n\n", "\n\n\n"),
            "update_handoff.py is not the 1.0.7-beta.5 source the Rust helper ports",
        ),
        (
            "a changed uninstall.sh",
            |release| replace_in(&release.path("uninstall.sh"), "--yes", "--yes-please"),
            "uninstall.sh is not the 1.0.7-beta.5 source the Rust helper ports",
        ),
        (
            "a missing module",
            |release| fs::remove_file(release.path("update_runner.py")).unwrap(),
            "update_runner.py is missing",
        ),
        (
            "a symlinked module",
            |release| {
                let path = release.path("execution_activation.py");
                let moved = release.temp().join("execution_activation.py");
                fs::rename(&path, &moved).unwrap();
                symlink(&moved, &path).unwrap();
            },
            "execution_activation.py is not a regular file",
        ),
        (
            "an uninstall helper without its entry point",
            |release| {
                replace_in(
                    &release.path("execution_uninstall.py"),
                    "\nif __name__ == \"__main__\":\n    raise SystemExit(main())\n",
                    "\n",
                )
            },
            "execution_uninstall.py does not end with its expected `__main__` entry point",
        ),
        (
            "an uninstall helper without a __future__ line",
            |release| {
                replace_in(
                    &release.path("execution_uninstall.py"),
                    "from __future__ import annotations\n",
                    "",
                )
            },
            "execution_uninstall.py does not have exactly one `from __future__ import annotations` line",
        ),
        (
            "a second npm registry line",
            |release| {
                let path = release.path("update_runner.py");
                let old = text(&path);
                let line = old
                    .lines()
                    .find(|line| line.starts_with("NPM_REGISTRY_BASE = "))
                    .unwrap()
                    .to_string();
                fs::write(&path, old.replacen(&line, &format!("{line}\n{line}"), 1)).unwrap();
            },
            "update_runner.py does not declare exactly one NPM_REGISTRY_BASE",
        ),
        (
            "two RELEASE_FILES lines",
            |release| {
                let path = release.path("install.sh");
                let old = text(&path);
                let line = old
                    .lines()
                    .find(|line| line.starts_with("RELEASE_FILES=("))
                    .unwrap()
                    .to_string();
                fs::write(&path, old.replacen(&line, &format!("{line}\n{line}"), 1)).unwrap();
            },
            "install.sh does not have exactly one `RELEASE_FILES=(...)` line (found 2)",
        ),
        (
            "no chmod 755 line",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    "chmod 755 \"$STAGE_DIR/install.sh\"",
                    "chmod 0755 \"$STAGE_DIR/install.sh\"",
                )
            },
            "install.sh does not have exactly one `chmod 755` line making \"$STAGE_DIR/update_runner.py\" \
             executable (found 0)",
        ),
        (
            "no flat copy into the stage",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    "install -m 644 \"$SOURCE_DIR/$name\"",
                    "cp -p \"$SOURCE_DIR/$name\"",
                )
            },
            "install.sh does not copy each RELEASE_FILES entry into the stage with mode 644",
        ),
        (
            "a chmod 755 list without uninstall.sh",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    " \"$STAGE_DIR/uninstall.sh\"",
                    "",
                )
            },
            "install.sh does not make uninstall.sh executable in the stage",
        ),
        (
            "two chmod 755 lines for the helper scripts",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    "chmod 755 \"$STAGE_DIR/package_data\"",
                    "chmod 755 \"$STAGE_DIR/package_data\" \"$STAGE_DIR/update_runner.py\"",
                )
            },
            "install.sh does not have exactly one `chmod 755` line making \"$STAGE_DIR/update_runner.py\" \
             executable (found 2)",
        ),
        (
            "a RELEASE_FILES list without uninstall.sh",
            |release| replace_in(&release.path("install.sh"), " uninstall.sh ", " "),
            "install.sh's RELEASE_FILES does not list uninstall.sh",
        ),
        (
            "a release that does not make update_runner.py executable",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    " \"$STAGE_DIR/update_runner.py\"",
                    "",
                )
            },
            "install.sh does not have exactly one `chmod 755` line making \"$STAGE_DIR/update_runner.py\" \
             executable (found 0)",
        ),
        (
            "a partly migrated install.sh",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    " VERSION)",
                    " VERSION uninstall-linux-x86_64 rust-helpers.json)",
                )
            },
            "install.sh is only partly migrated",
        ),
        (
            "a helper name listed elsewhere",
            |release| {
                replace_in(
                    &release.path("install.sh"),
                    "RELEASE_FILES=(",
                    "RELEASE_FILES=(update-runner-darwin-arm64 ",
                )
            },
            "install.sh already lists update-runner-darwin-arm64 in an unexpected place",
        ),
        (
            "a launcher only in part",
            |release| {
                let path = release.path("execution_manage.py");
                let old = text(&path);
                fs::write(
                    &path,
                    old.replacen(
                        "from __future__ import annotations\n",
                        "from __future__ import annotations\n# --- end rust-helpers launcher ---\n",
                        1,
                    ),
                )
                .unwrap();
            },
            "execution_manage.py carries the launcher more than once, or only in part",
        ),
        (
            "an installed runtime",
            |release| fs::create_dir(release.path(".venv")).unwrap(),
            "holds a .venv, so it is an installed runtime",
        ),
        (
            "a foreign rust-helpers.json",
            |release| fs::write(release.path(MANIFEST), b"{\"format\": 1}\n").unwrap(),
            "rust-helpers.json exists but is not a migration kit manifest",
        ),
        (
            "a directory where a binary goes",
            |release| fs::create_dir(release.path("update-handoff-darwin-x86_64")).unwrap(),
            "update-handoff-darwin-x86_64 exists and is not a regular file",
        ),
    ];
    for (what, mutate, message) in cases {
        let release = FakeRelease::new(&originals);
        mutate(&release);
        eprintln!("case: {what}");
        assert_refused(&release, None, message);
    }

    // Dist folders and binaries the kit cannot vouch for.
    let host = HOST_TARGET;
    let release = FakeRelease::new(&originals);
    let dist = dist(release.temp(), &all_targets());
    let host_binary = |helper: &str| dist.join(host).join(helper);
    fs::remove_file(host_binary("update-handoff")).unwrap();
    assert_refused(
        &release,
        Some(&dist),
        &format!("the update-handoff binary for {host} is missing"),
    );
    fs::write(host_binary("update-handoff"), b"#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(
        host_binary("update-handoff"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_refused(
        &release,
        Some(&dist),
        &format!(
            "the update-handoff binary for {host} is not an executable of any supported platform"
        ),
    );
    let other = all_targets()
        .into_iter()
        .find(|target| *target != host)
        .unwrap();
    fs::write(host_binary("update-handoff"), foreign_executable(other)).unwrap();
    assert_refused(
        &release,
        Some(&dist),
        &format!("the update-handoff binary for {host} is built for {other}"),
    );
    fs::remove_file(host_binary("update-handoff")).unwrap();
    fs::copy(
        binaries_dir().join("update-handoff"),
        host_binary("update-handoff"),
    )
    .unwrap();
    fs::remove_file(host_binary("execution-manage")).unwrap();
    fs::copy(
        binaries_dir().join("execution-manage"),
        host_binary("execution-manage"),
    )
    .unwrap();
    fs::set_permissions(
        host_binary("execution-manage"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    assert_refused(
        &release,
        Some(&dist),
        &format!("the execution-manage binary for {host} is not executable"),
    );
    fs::set_permissions(
        host_binary("execution-manage"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_build_record_is_checked(&release, &dist);
    fs::create_dir(dist.join("riscv64gc-unknown-linux-gnu")).unwrap();
    assert_refused(
        &release,
        Some(&dist),
        "holds riscv64gc-unknown-linux-gnu, which is not a supported target",
    );
    let empty = release.temp().join("empty-dist");
    fs::create_dir(&empty).unwrap();
    assert_refused(&release, Some(&empty), "holds no platform folder");

    // A usage error is not a refusal.
    let output = std::process::Command::new("bash")
        .arg(migration_kit_support::kit_script())
        .arg("--dist")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// A dist whose SHA256SUMS or provenance.json is missing, does not match its
/// binaries or does not bind the other is refused; `dist` is whole on return.
fn assert_build_record_is_checked(release: &FakeRelease, dist: &Path) {
    let sums = dist.join("SHA256SUMS");
    let provenance = dist.join("provenance.json");
    let (sums_bytes, provenance_bytes) = (fs::read(&sums).unwrap(), fs::read(&provenance).unwrap());
    let restore = || {
        fs::write(&sums, &sums_bytes).unwrap();
        fs::write(&provenance, &provenance_bytes).unwrap();
    };
    fs::remove_file(&sums).unwrap();
    assert_refused(
        release,
        Some(dist),
        "has no SHA256SUMS (scripts/build-release.sh writes it)",
    );
    restore();
    fs::remove_file(&provenance).unwrap();
    assert_refused(
        release,
        Some(dist),
        "has no provenance.json: scripts/build-release.sh writes it only when built from a clean git tree",
    );
    restore();
    // Another binary with the same header, in a folder the sums cover.
    let other = all_targets()
        .into_iter()
        .find(|target| *target != HOST_TARGET)
        .unwrap();
    let replaced = dist.join(other).join("update-runner");
    let kept = fs::read(&replaced).unwrap();
    let mut changed = kept.clone();
    changed.extend_from_slice(b"one more line\n");
    fs::write(&replaced, &changed).unwrap();
    assert_refused(
        release,
        Some(dist),
        &format!("{} is not the binary SHA256SUMS lists", replaced.display()),
    );
    fs::write(&replaced, &kept).unwrap();
    fs::write(
        &provenance,
        String::from_utf8(provenance_bytes.clone())
            .unwrap()
            .replace("\"sha256sums_sha256\": \"", "\"sha256sums_sha256\": \"0"),
    )
    .unwrap();
    assert_refused(
        release,
        Some(dist),
        "provenance.json does not belong to this SHA256SUMS",
    );
    restore();
    let one_line_less: String = String::from_utf8(sums_bytes.clone())
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(&sums, one_line_less).unwrap();
    assert_refused(
        release,
        Some(dist),
        "provenance.json does not belong to this SHA256SUMS",
    );
    restore();
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

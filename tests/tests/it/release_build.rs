//! The release build as `scripts/build-release.sh` leaves it in `target/dist`:
//! every binary carries the full list of the crates inside it (cargo-auditable's
//! `.dep-v0`, read here with this test's own ELF and Mach-O section readers and
//! compared with `cargo tree`), `SHA256SUMS` lists exactly the binaries, and the
//! script's check catches a broken Mach-O signature and a missing list.
//!
//! These need the release build; without it each reports itself skipped
//! (CI builds it before the tests).

use std::collections::BTreeSet;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use agents_tests::{release_dist::sha256_hex, TempDir, HELPERS};

/// The targets whose binaries these tests read: one of each format.
const ELF_TARGET: &str = "x86_64-unknown-linux-gnu";
const MACHO_TARGET: &str = "aarch64-apple-darwin";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/dist`, when it holds both targets' five binaries.
fn release_dist(test: &str) -> Option<PathBuf> {
    let dist = agents_tests::profile_dir().parent()?.join("dist");
    let complete = [ELF_TARGET, MACHO_TARGET].iter().all(|target| {
        HELPERS
            .iter()
            .all(|helper| dist.join(target).join(helper).is_file())
    });
    if complete {
        return Some(dist);
    }
    agents_tests::skip(
        test,
        "no release build of x86_64 Linux and arm64 macOS in target/dist \
         (run scripts/build-release.sh --all-targets)",
    );
    None
}

fn u16_at(data: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes(data[at..at + 2].try_into().unwrap()))
}

fn u32_at(data: &[u8], at: usize) -> usize {
    u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize
}

fn u64_at(data: &[u8], at: usize) -> usize {
    u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) as usize
}

fn c_string(data: &[u8], at: usize) -> &[u8] {
    let end = data[at..].iter().position(|byte| *byte == 0).unwrap();
    &data[at..at + end]
}

/// The bytes of the ELF64 section `name` (Elf64_Ehdr / Elf64_Shdr layout).
fn elf_section<'a>(data: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let (table, entry, count, names) = (
        u64_at(data, 0x28),
        u16_at(data, 0x3a),
        u16_at(data, 0x3c),
        u16_at(data, 0x3e),
    );
    let header = |index: usize| table + index * entry;
    let names_offset = u64_at(data, header(names) + 0x18);
    (0..count).find_map(|index| {
        let at = header(index);
        let found = c_string(data, names_offset + u32_at(data, at));
        (found == name).then(|| {
            let (offset, size) = (u64_at(data, at + 0x18), u64_at(data, at + 0x20));
            &data[offset..offset + size]
        })
    })
}

/// The bytes of the Mach-O section `name` (LC_SEGMENT_64's section_64 list).
fn macho_section<'a>(data: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut at = 32;
    for _ in 0..u32_at(data, 16) {
        let (command, size) = (u32_at(data, at), u32_at(data, at + 4));
        if command == 0x19 {
            for index in 0..u32_at(data, at + 64) {
                let section = at + 72 + 80 * index;
                if c_string(&data[section..section + 16], 0) == name {
                    let (length, offset) = (u64_at(data, section + 40), u32_at(data, section + 48));
                    return Some(&data[offset..offset + length]);
                }
            }
        }
        at += size;
    }
    None
}

/// The (name, version) of every package in a binary's `.dep-v0` list, and the root's name.
fn embedded_crates(binary: &Path) -> (String, BTreeSet<(String, String)>) {
    let data = fs::read(binary).unwrap();
    let section = if data.starts_with(b"\x7fELF") {
        elf_section(&data, b".dep-v0")
    } else {
        macho_section(&data, b".dep-v0")
    }
    .unwrap_or_else(|| panic!("{} carries no .dep-v0 section", binary.display()));
    let mut json = String::new();
    flate2::read::ZlibDecoder::new(section)
        .read_to_string(&mut json)
        .unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let packages = value["packages"].as_array().unwrap();
    let roots: Vec<&str> = packages
        .iter()
        .filter(|package| package["root"] == serde_json::Value::Bool(true))
        .map(|package| package["name"].as_str().unwrap())
        .collect();
    assert_eq!(roots.len(), 1, "{}: {roots:?}", binary.display());
    // Build-time crates (build scripts' dependencies) are listed as such and
    // are not inside the binary.
    let crates = packages
        .iter()
        .filter(|package| package.get("kind").and_then(|kind| kind.as_str()) != Some("build"))
        .map(|package| {
            let field = |key: &str| package[key].as_str().unwrap().to_string();
            (field("name"), field("version"))
        })
        .collect();
    (roots[0].to_string(), crates)
}

/// What `cargo tree` lists for `packages` on `target` (`-p helper` or
/// `--workspace`) over the dependency `kinds` (`normal`, `all`).
fn cargo_tree(packages: &[&str], kinds: &str, target: &str) -> BTreeSet<(String, String)> {
    let output = Command::new("cargo")
        .current_dir(workspace())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            kinds,
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "--target", target])
        .args(packages)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next().unwrap().to_string();
            let version = words.next().unwrap().trim_start_matches('v').to_string();
            (name, version)
        })
        .collect()
}

/// The (name, version) of every package in `cargo metadata`'s resolve for
/// `target`: the graph cargo-auditable reads.
fn cargo_resolve(target: &str) -> BTreeSet<(String, String)> {
    let output = Command::new("cargo")
        .current_dir(workspace())
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", target])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let resolved: BTreeSet<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["id"].as_str().unwrap())
        .collect();
    packages
        .iter()
        .filter(|package| resolved.contains(package["id"].as_str().unwrap()))
        .map(|package| {
            let field = |key: &str| package[key].as_str().unwrap().to_string();
            (field("name"), field("version"))
        })
        .collect()
}

#[test]
fn every_release_binary_lists_every_crate_inside_it() {
    let Some(dist) = release_dist(agents_tests::test_name!()) else {
        return;
    };
    for target in [ELF_TARGET, MACHO_TARGET] {
        let resolved = cargo_resolve(target);
        for helper in HELPERS {
            let (root, embedded) = embedded_crates(&dist.join(target).join(helper));
            assert_eq!(root, helper);
            let linked = cargo_tree(&["-p", helper], "normal", target);
            let missing: Vec<_> = linked.difference(&embedded).collect();
            assert!(
                missing.is_empty(),
                "{target}/{helper} does not list {missing:?}"
            );
            // The list errs towards listing: cargo-auditable reads the
            // resolve of `cargo metadata`, which unifies optional features
            // across the whole workspace and every dependency kind
            // (ed25519-dalek's serde, flate2's zlib-rs) and cannot evaluate a
            // custom cfg (rustix's errno behind `cfg(rustix_use_libc)`).
            // Every extra is a crate of that resolve, never one from elsewhere.
            let foreign: Vec<_> = embedded
                .difference(&linked)
                .filter(|package| !resolved.contains(*package))
                .collect();
            assert!(
                foreign.is_empty(),
                "{target}/{helper} lists crates outside the workspace's graph: {foreign:?}"
            );
        }
    }
}

#[test]
fn sha256sums_lists_exactly_the_built_binaries() {
    let Some(dist) = release_dist(agents_tests::test_name!()) else {
        return;
    };
    let sums = fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let mut built = Vec::new();
    for target in [
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
    ] {
        for helper in HELPERS {
            let path = dist.join(target).join(helper);
            if path.is_file() {
                built.push(format!(
                    "{}  {target}/{helper}",
                    sha256_hex(&fs::read(path).unwrap())
                ));
            }
        }
    }
    built.sort_by(|a, b| a[66..].cmp(&b[66..]));
    assert_eq!(sums.lines().collect::<Vec<_>>(), built);
    let check = Command::new("sha256sum")
        .current_dir(&dist)
        .args(["--check", "--strict", "--quiet", "SHA256SUMS"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
}

/// `scripts/release_platforms.py check` on a copy of the two targets' folders.
fn release_check(dist: &Path) -> std::process::Output {
    Command::new("python3")
        .arg("-B")
        .arg(workspace().join("scripts/release_platforms.py"))
        .arg("check")
        .arg(dist)
        .args([ELF_TARGET, MACHO_TARGET])
        .output()
        .unwrap()
}

#[test]
fn the_release_check_refuses_a_broken_signature_and_a_binary_without_its_list() {
    let Some(dist) = release_dist(agents_tests::test_name!()) else {
        return;
    };
    let temp = TempDir::new("release-check");
    for target in [ELF_TARGET, MACHO_TARGET] {
        fs::create_dir_all(temp.path().join(target)).unwrap();
        for helper in HELPERS {
            fs::copy(
                dist.join(target).join(helper),
                temp.path().join(target).join(helper),
            )
            .unwrap();
        }
    }
    let whole = release_check(temp.path());
    assert!(whole.status.success(), "{whole:?}");

    // One byte of arm64 code changed: the page's hash no longer matches.
    let signed = temp.path().join(MACHO_TARGET).join("update-handoff");
    let mut bytes = fs::read(&signed).unwrap();
    bytes[20_000] ^= 0x01;
    fs::write(&signed, &bytes).unwrap();
    let broken = release_check(temp.path());
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert_eq!(broken.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("update-handoff has a code signature whose page 4 hash does not match"),
        "{stderr}"
    );
    bytes[20_000] ^= 0x01;
    fs::write(&signed, &bytes).unwrap();

    // The section renamed: the binary no longer carries a dependency list.
    let listed = temp.path().join(ELF_TARGET).join("execution-manage");
    let bytes = fs::read(&listed).unwrap();
    let at = bytes
        .windows(8)
        .position(|window| window == b".dep-v0\0")
        .unwrap();
    let mut renamed = bytes.clone();
    renamed[at..at + 7].copy_from_slice(b".dep-v9");
    fs::write(&listed, &renamed).unwrap();
    let unlisted = release_check(temp.path());
    let stderr = String::from_utf8_lossy(&unlisted.stderr);
    assert_eq!(unlisted.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("execution-manage carries no .dep-v0 dependency list"),
        "{stderr}"
    );
}

#[test]
fn no_release_binary_names_a_path_of_the_machine_that_built_it() {
    let Some(dist) = release_dist(agents_tests::test_name!()) else {
        return;
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{home}/.cargo"));
    let workspace = workspace().canonicalize().unwrap();
    let machine_paths = [
        workspace.to_str().unwrap().to_string(),
        cargo_home,
        "/usr/lib/rustlib/src".to_string(),
    ];
    for target in [ELF_TARGET, MACHO_TARGET] {
        for helper in HELPERS {
            let data = fs::read(dist.join(target).join(helper)).unwrap();
            for path in &machine_paths {
                assert!(
                    !data
                        .windows(path.len())
                        .any(|window| window == path.as_bytes()),
                    "{target}/{helper} names {path}"
                );
            }
            // The registry's sources appear under one fixed folder name,
            // never the folder cargo names after the registry's host.
            let prefix = b"/cargo/registry/src/";
            for at in (0..data.len().saturating_sub(prefix.len()))
                .filter(|&at| data[at..].starts_with(prefix))
            {
                assert!(
                    data[at + prefix.len()..].starts_with(b"registry/"),
                    "{target}/{helper}: {}",
                    String::from_utf8_lossy(&data[at..(at + 80).min(data.len())])
                );
            }
            assert!(
                data.windows(prefix.len()).any(|window| window == prefix),
                "{target}/{helper}: the remapped registry paths are there to check"
            );
        }
    }
}

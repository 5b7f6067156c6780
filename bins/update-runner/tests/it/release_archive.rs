//! `safe_extract` against the original: the same hand-built tar.gz archives
//! (hostile names, links, special files, modes, npm bounds and layouts) are
//! extracted by our port and by `update_runner.safe_extract`, and the
//! outcomes and extracted trees must be identical.

use crate::archive_strategy;

use agents_tests::release_support;

use std::path::{Path, PathBuf};

use python_compat::{json::Json, json_object};
use release_support::{python_oracle, write_tar_gz, Member, TempDir};
use update_runner::release::safe_extract;

const ROOT: &str = "agents-server-1.0.7";

struct Case {
    label: &'static str,
    members: Vec<Member>,
    npm: Option<&'static str>,
}

fn legacy(label: &'static str, members: Vec<Member>) -> Case {
    Case {
        label,
        members,
        npm: None,
    }
}

fn npm(label: &'static str, members: Vec<Member>) -> Case {
    Case {
        label,
        members,
        npm: Some("1.0.8"),
    }
}

fn root(path: &str) -> String {
    format!("{ROOT}/{path}")
}

fn legacy_release() -> Vec<Member> {
    vec![
        Member::dir(ROOT),
        Member::file(&root("install.sh"), b"#!/bin/sh\necho installed\n").mode(0o755),
        Member::file(&root("VERSION"), b"1.0.7\n"),
    ]
}

fn npm_release() -> Vec<Member> {
    vec![
        Member::file(
            "package/package.json",
            br#"{"name": "@agentsdock/server", "version": "1.0.8"}"#,
        ),
        Member::file("package/README.md", b"readme\n"),
        Member::file("package/server/install.sh", b"#!/bin/sh\n").mode(0o755),
        Member::file("package/server/VERSION", b" 1.0.8\n"),
    ]
}

fn plus(mut base: Vec<Member>, extra: Vec<Member>) -> Vec<Member> {
    base.extend(extra);
    base
}

fn cases() -> Vec<Case> {
    let long_name = root(&format!("{}/deep.txt", "d".repeat(120)));
    let mut pax = Member::file("placeholder", b"long name data\n");
    pax.pax_path = Some(long_name.into_bytes());
    let truncated = Member {
        declared_size: Some(5000),
        ..Member::file(&root("truncated.bin"), &[7u8; 100])
    };
    let oversized = Member {
        declared_size: Some(1024 * 1024 * 1024 + 1),
        ..Member::file("package/server/huge.bin", &[1u8; 10])
    };
    let many: Vec<Member> = (0..4097)
        .map(|index| Member::file(&format!("package/server/f{index}"), b""))
        .collect();
    vec![
        legacy("legacy release", legacy_release()),
        legacy(
            "data filter modes and ownership",
            plus(
                legacy_release(),
                vec![
                    Member::file(&root("setuid"), b"x").mode(0o6777),
                    Member::file(&root("private"), b"x").mode(0o600),
                    Member::file(&root("group-exec"), b"x").mode(0o070),
                    Member::file(&root("nothing"), b"x").mode(0o000),
                    Member::file(&root("sticky-exec"), b"x").mode(0o1711),
                    Member::dir(&root("closed")).mode(0o000),
                    Member::dir(&root("open")).mode(0o777),
                    Member::file(&root("implicit/parent/file"), b"nested"),
                    Member::file(&format!("./{}", root("dot-prefixed")), b"dot"),
                    Member::dir(&format!("{}/", root("slash-dir"))),
                    Member::special(&format!("{}/", root("old-style-dir")), b'\0'),
                    Member::special(&root("old-style-file"), b'\0'),
                    Member::special(&root("contiguous"), b'7'),
                    pax,
                ],
            ),
        ),
        legacy(
            "absolute path",
            plus(legacy_release(), vec![Member::file("/etc/evil", b"x")]),
        ),
        legacy(
            "parent escape",
            plus(legacy_release(), vec![Member::file("../evil", b"x")]),
        ),
        legacy(
            "nested escape",
            plus(
                legacy_release(),
                vec![Member::file(&root("../../evil"), b"x")],
            ),
        ),
        legacy(
            "double-slash root",
            plus(legacy_release(), vec![Member::file("//evil", b"x")]),
        ),
        legacy(
            "dot-dot that stays inside",
            plus(
                legacy_release(),
                vec![Member::file(&root("sub/../inside"), b"x")],
            ),
        ),
        legacy(
            "symlink",
            plus(
                legacy_release(),
                vec![Member::link(&root("link"), b'2', "install.sh")],
            ),
        ),
        legacy(
            "hard link",
            plus(
                legacy_release(),
                vec![Member::link(&root("hard"), b'1', &root("install.sh"))],
            ),
        ),
        legacy(
            "fifo",
            plus(legacy_release(), vec![Member::special(&root("fifo"), b'6')]),
        ),
        legacy(
            "character device",
            plus(legacy_release(), vec![Member::special(&root("tty"), b'3')]),
        ),
        legacy(
            "block device",
            plus(legacy_release(), vec![Member::special(&root("disk"), b'4')]),
        ),
        legacy(
            "unknown member type",
            plus(
                legacy_release(),
                vec![Member::special(&root("volume"), b'V')],
            ),
        ),
        legacy(
            "link after a special file: the link check wins",
            plus(
                legacy_release(),
                vec![
                    Member::special(&root("fifo"), b'6'),
                    Member::link(&root("link"), b'2', "x"),
                ],
            ),
        ),
        legacy(
            "escape after a special file: the path check wins",
            plus(
                legacy_release(),
                vec![
                    Member::special(&root("fifo"), b'6'),
                    Member::file("../evil", b"x"),
                ],
            ),
        ),
        legacy(
            "truncated last member",
            plus(legacy_release(), vec![truncated]),
        ),
        legacy(
            "two top-level directories",
            plus(legacy_release(), vec![Member::dir("second")]),
        ),
        legacy(
            "top-level file is ignored",
            plus(legacy_release(), vec![Member::file("NOTICE", b"n")]),
        ),
        legacy(
            "missing install.sh",
            vec![Member::dir(ROOT), Member::file(&root("x"), b"")],
        ),
        legacy(
            "install.sh is a directory",
            vec![Member::dir(ROOT), Member::dir(&root("install.sh"))],
        ),
        legacy("empty archive", vec![]),
        legacy(
            "duplicate names are fine outside npm",
            plus(
                legacy_release(),
                vec![Member::file(&root("VERSION"), b"again\n")],
            ),
        ),
        legacy(
            "file then directory of the same name",
            plus(legacy_release(), vec![Member::dir(&root("VERSION"))]),
        ),
        legacy(
            "directory then file of the same name",
            plus(
                legacy_release(),
                vec![Member::dir(&root("d")), Member::file(&root("d"), b"x")],
            ),
        ),
        npm("npm release", npm_release()),
        npm(
            "npm fifo",
            plus(
                npm_release(),
                vec![Member::special("package/server/fifo", b'6')],
            ),
        ),
        npm(
            "npm symlink",
            plus(
                npm_release(),
                vec![Member::link("package/server/l", b'2', "x")],
            ),
        ),
        npm(
            "npm special before a link",
            plus(
                npm_release(),
                vec![
                    Member::special("package/server/fifo", b'6'),
                    Member::link("package/server/l", b'2', "x"),
                ],
            ),
        ),
        npm(
            "npm duplicate name",
            plus(
                npm_release(),
                vec![Member::file("package/README.md", b"again")],
            ),
        ),
        npm("npm too many members", plus(npm_release(), many)),
        npm("npm over one GiB", plus(npm_release(), vec![oversized])),
        npm(
            "npm extra top-level entry",
            plus(npm_release(), vec![Member::file("LICENSE", b"l")]),
        ),
        npm(
            "npm package version differs",
            vec![
                Member::file(
                    "package/package.json",
                    br#"{"name": "@agentsdock/server", "version": "1.0.9"}"#,
                ),
                Member::file("package/server/install.sh", b""),
                Member::file("package/server/VERSION", b"1.0.8"),
            ],
        ),
        npm(
            "npm package name differs",
            vec![
                Member::file(
                    "package/package.json",
                    br#"{"name": "other", "version": "1.0.8"}"#,
                ),
                Member::file("package/server/install.sh", b""),
                Member::file("package/server/VERSION", b"1.0.8"),
            ],
        ),
        npm(
            "npm VERSION differs",
            vec![
                Member::file(
                    "package/package.json",
                    br#"{"name": "@agentsdock/server", "version": "1.0.8"}"#,
                ),
                Member::file("package/server/install.sh", b""),
                Member::file("package/server/VERSION", b"1.0.7"),
            ],
        ),
        npm(
            "npm without install.sh",
            vec![
                Member::file(
                    "package/package.json",
                    br#"{"name": "@agentsdock/server", "version": "1.0.8"}"#,
                ),
                Member::file("package/server/VERSION", b"1.0.8"),
            ],
        ),
        npm(
            "npm package.json is not JSON",
            vec![
                Member::file("package/package.json", b"{nope"),
                Member::file("package/server/install.sh", b""),
            ],
        ),
        npm(
            "npm package.json is not UTF-8",
            vec![
                Member::file("package/package.json", b"\xff{}"),
                Member::file("package/server/install.sh", b""),
            ],
        ),
        npm(
            "npm without package.json",
            vec![Member::file("package/server/install.sh", b"")],
        ),
        npm(
            "npm without VERSION",
            vec![
                Member::file(
                    "package/package.json",
                    br#"{"name": "@agentsdock/server", "version": "1.0.8"}"#,
                ),
                Member::file("package/server/install.sh", b""),
            ],
        ),
    ]
}

const EXTRACT: &str = r#"
from pathlib import Path
out = []
for case in json.load(sys.stdin):
    dest = Path(case["dest"])
    try:
        source = update_runner.safe_extract(
            Path(case["archive"]), dest,
            npm_manifest=({"version": case["npm"]} if case["npm"] else None))
        out.append({"ok": str(source.relative_to(dest.resolve()))})
    except Exception as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"#;

/// A listing of an extracted tree: path -> [kind, mode, size, sha256, mtime, uid].
const LIST: &str = r#"
import os, stat, hashlib
out = []
for root in json.load(sys.stdin):
    tree = {}
    if os.path.isdir(root):
        for directory, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(directory, name)
                info = os.lstat(path)
                digest = ""
                if stat.S_ISREG(info.st_mode):
                    with open(path, "rb") as stream:
                        digest = hashlib.sha256(stream.read()).hexdigest()
                tree[os.path.relpath(path, root)] = [
                    stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode), info.st_size,
                    # Implicit parents carry the extraction time, not the archive's.
                    digest, min(int(info.st_mtime), 1750000000), info.st_uid]
    out.append(tree)
print(json.dumps(out))
"#;

#[test]
fn extraction_matches_the_original() {
    let originals = agents_tests::require_originals!();
    let accepted = compare_with_original(&originals, "release-archive", &cases());
    assert!(accepted >= 6, "{accepted} archives accepted");
}

#[test]
fn generated_archives_match_the_original() {
    // One batch through the original (a python3 start per archive would be
    // slow); the cases are reproducible from the runner's fixed original.
    let originals = agents_tests::require_originals!();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let cases: Vec<Case> = (0..archive_strategy::differential_cases())
        .map(|_| {
            let (members, npm) = proptest::strategy::ValueTree::current(
                &proptest::strategy::Strategy::new_tree(
                    &archive_strategy::arb_release(),
                    &mut runner,
                )
                .unwrap(),
            );
            Case {
                label: "generated",
                members,
                npm: npm.then_some("1.0.8"),
            }
        })
        .collect();
    let accepted = compare_with_original(&originals, "release-archive-generated", &cases);
    assert!(
        accepted > 0 && accepted < cases.len(),
        "{accepted} of {} accepted",
        cases.len()
    );
}

/// Extract every case with the port and the original; refusals must match and
/// accepted trees be identical. Returns how many were accepted.
fn compare_with_original(originals: &agents_tests::Originals, name: &str, cases: &[Case]) -> usize {
    let dir = TempDir::new(name);
    let mut oracle_input = Vec::new();
    let mut ours = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let case_dir = dir.path().join(format!("case{index}"));
        std::fs::create_dir_all(case_dir.join("rust")).unwrap();
        std::fs::create_dir_all(case_dir.join("python")).unwrap();
        let archive = case_dir.join("release.tar.gz");
        write_tar_gz(&archive, &case.members);
        let rust_dest = case_dir.join("rust/extracted");
        let python_dest = case_dir.join("python/extracted");
        ours.push((safe_extract(&archive, &rust_dest, case.npm), rust_dest));
        oracle_input.push(Json::Object(json_object! {
            "archive" => archive.to_str().unwrap(),
            "dest" => python_dest.to_str().unwrap(),
            "npm" => case.npm.map_or(Json::Null, Json::from),
        }));
    }
    let original = python_oracle(
        originals,
        EXTRACT,
        &python_compat::json::encode_compact(&Json::Array(oracle_input.clone())).unwrap(),
    );
    let original = original.as_array().unwrap();
    let roots: Vec<Json> = oracle_input
        .iter()
        .zip(&ours)
        .flat_map(|(input, (_, rust_dest))| {
            [
                Json::from(rust_dest.to_str().unwrap()),
                input.get("dest").unwrap().clone(),
            ]
        })
        .collect();
    let trees = python_oracle(
        originals,
        LIST,
        &python_compat::json::encode_compact(&Json::Array(roots)).unwrap(),
    );
    let trees = trees.as_array().unwrap();
    let mut accepted = 0;
    for (index, (case, ((result, rust_dest), expected))) in
        cases.iter().zip(ours.iter().zip(original)).enumerate()
    {
        let label = case.label;
        let python_dest = PathBuf::from(oracle_input[index].get("dest").unwrap().as_str().unwrap());
        match (result, expected.get("ok")) {
            (Ok(source), Some(original_source)) => {
                assert_eq!(
                    source.strip_prefix(rust_dest).unwrap().to_str().unwrap(),
                    original_source.as_str().unwrap(),
                    "{label}: source directory"
                );
                assert_eq!(
                    trees[2 * index],
                    trees[2 * index + 1],
                    "{label}: extracted trees differ"
                );
                accepted += 1;
            }
            (Err(error), None) => {
                let original_message = expected.get("message").unwrap().as_str().unwrap();
                assert_eq!(
                    normalise(error.message(), rust_dest),
                    normalise(original_message, &python_dest),
                    "{label} #{index}: refusals differ (original raised {:?}) for {:?}",
                    expected.get("error"),
                    case.members
                );
            }
            (ours, _) => panic!(
                "{label} #{index}: ours {ours:?}, original {expected:?}, members {:?}",
                case.members
            ),
        }
    }
    accepted
}

fn normalise(message: &str, destination: &Path) -> String {
    message.replace(destination.to_str().unwrap(), "<dest>")
}

/// `content` gzip-compressed, as release archives are.
fn gzipped(content: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut encoder, content).unwrap();
    encoder.finish().unwrap()
}

/// A ustar header for `<ROOT>/VERSION`.
fn version_header() -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_path(format!("{ROOT}/VERSION")).unwrap();
    header
}

/// `header` followed by one zero block.
fn header_and_zero_block(header: &tar::Header) -> Vec<u8> {
    let mut blocks = header.as_bytes().to_vec();
    blocks.resize(1024, 0);
    blocks
}

/// A well-formed header whose stored checksum is wrong.
fn wrong_checksum_tar() -> Vec<u8> {
    let mut header = version_header();
    header.set_size(0);
    header.set_cksum();
    let mut blocks = header_and_zero_block(&header);
    blocks[148..155].copy_from_slice(b"0000001");
    blocks
}

/// The right checksum over a size field that is not a number.
fn non_numeric_size_tar() -> Vec<u8> {
    let mut header = version_header();
    header.as_mut_bytes()[124..136].copy_from_slice(b"zzzzzzzzzzz\0");
    header.set_cksum();
    header_and_zero_block(&header)
}

/// A damaged archive: (description, its bytes made from a good archive's).
type Damage = (&'static str, fn(&[u8]) -> Vec<u8>);

#[rustfmt::skip]
const DAMAGED_ARCHIVES: &[Damage] = &[
    ("not gzip", |_| b"this is not gzip at all".to_vec()),
    ("cut in half", |good| good[..good.len() / 2].to_vec()),
    ("empty gzip stream", |_| gzipped(b"")),
    // A first header of text: its checksum field is not octal.
    ("text header", |_| gzipped(&[b'x'; 1024])),
    ("wrong header checksum", |_| gzipped(&wrong_checksum_tar())),
    ("size not a number", |_| gzipped(&non_numeric_size_tar())),
];

/// Every damaged archive: the table's, then the good archive cut at every
/// length Python's gzip tells apart: nothing, one byte of the magic, the
/// header, the deflate data, the trailer.
fn damaged_archives(good: &[u8]) -> Vec<(String, Vec<u8>)> {
    let table = DAMAGED_ARCHIVES
        .iter()
        .map(|(label, damage)| (label.to_string(), damage(good)));
    let cuts = [0, 1, 2, 9, 10, 30, good.len() - 8, good.len() - 1]
        .map(|length| (format!("cut at {length} bytes"), good[..length].to_vec()));
    table.chain(cuts).collect()
}

/// How an extraction ended, as both sides are compared: "accepted" or the
/// refusal's message.
fn extraction_outcome(result: agents_common::Result<PathBuf>) -> String {
    result
        .map(|_| "accepted".to_string())
        .unwrap_or_else(|error| error.message().to_string())
}

#[test]
fn gzip_and_tar_damage_ends_as_in_the_original() {
    let originals = agents_tests::require_originals!();
    let dir = TempDir::new("release-archive-damage");
    let good = dir.path().join("good.tar.gz");
    write_tar_gz(&good, &legacy_release());
    let good = std::fs::read(&good).unwrap();
    let archives: Vec<(String, PathBuf)> = damaged_archives(&good)
        .into_iter()
        .map(|(label, bytes)| {
            let path = dir
                .path()
                .join(format!("{}.tar.gz", label.replace(' ', "-")));
            std::fs::write(&path, bytes).unwrap();
            (label, path)
        })
        .collect();
    let destination = |side: &str, label: &str| dir.path().join(format!("{side}-{label}"));
    let oracle_input = archives
        .iter()
        .map(|(label, archive)| {
            Json::Object(json_object! {
                "archive" => archive.to_str().unwrap(),
                "dest" => destination("py", label).to_str().unwrap(),
                "npm" => Json::Null,
            })
        })
        .collect();
    let original = python_oracle(
        &originals,
        EXTRACT,
        &python_compat::json::encode_compact(&Json::Array(oracle_input)).unwrap(),
    );
    for ((label, archive), expected) in archives.iter().zip(original.as_array().unwrap()) {
        // A stream cut only in its trailer may still extract, in both.
        let ours = extraction_outcome(safe_extract(archive, &destination("rs", label), None));
        let theirs = match expected.get("ok") {
            Some(_) => "accepted",
            None => expected.get("message").and_then(Json::as_str).unwrap(),
        };
        assert_eq!(ours, theirs, "{label}");
    }
}

//! The extraction budget, where the port is stricter than the original: an
//! archive whose headers promise more than any release holds is refused
//! from its headers, before its data is read or anything is written for
//! the offending member, and refusal messages stay short whatever the
//! member names are.

use agents_tests::release_support::{
    gnu_sparse_tar_gz, gzip_bomb_tar_gz, pax_header, write_tar_gz, Member, TempDir,
};
use update_runner::release::{
    safe_extract, MAX_EXTENDED_HEADER_BYTES, MAX_EXTRACTED_BYTES, MAX_MEMBERS, MAX_MESSAGE_CHARS,
};

const ROOT: &str = "agents-server-1.0.7";
const OVER_BUDGET: &str = "release archive exceeds its extraction budget";

/// Extract `members` (legacy layout) and return the refusal message and
/// the regular files written under the destination.
fn refusal(label: &str, members: &[Member]) -> (String, Vec<String>) {
    let dir = TempDir::new(label);
    let archive = dir.path().join("release.tar.gz");
    write_tar_gz(&archive, members);
    let destination = dir.path().join("extracted");
    let error = safe_extract(&archive, &destination, None)
        .expect_err("an archive past its budget must be refused");
    (error.message().to_string(), files_under(&destination))
}

fn files_under(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_member_declaring_more_than_the_byte_budget_is_refused_from_its_header() {
    // Only the header exists: a gzip bomb's promise, refused before any of
    // its data would be inflated or written.
    let bomb = Member {
        declared_size: Some(MAX_EXTRACTED_BYTES + 1),
        ..Member::file(&format!("{ROOT}/install.sh"), b"")
    };
    let (message, files) = refusal("budget-bytes", &[Member::dir(ROOT), bomb]);
    assert_eq!(message, OVER_BUDGET);
    assert!(files.is_empty(), "nothing written: {files:?}");
}

#[test]
fn a_sparse_member_is_refused_instead_of_growing_a_terabyte_file() {
    let dir = TempDir::new("budget-sparse");
    let archive = dir.path().join("release.tar.gz");
    std::fs::write(
        &archive,
        gnu_sparse_tar_gz(&format!("{ROOT}/install.sh"), 1 << 40),
    )
    .unwrap();
    let destination = dir.path().join("extracted");
    let error = safe_extract(&archive, &destination, None).unwrap_err();
    assert_eq!(error.message(), OVER_BUDGET);
    assert!(files_under(&destination).is_empty());
}

#[test]
fn a_gzip_bomb_is_refused_before_it_is_inflated() {
    let dir = TempDir::new("budget-bomb");
    let archive = dir.path().join("release.tar.gz");
    let bomb = gzip_bomb_tar_gz(ROOT, &format!("{ROOT}/install.sh"), 3 << 30);
    assert!(bomb.len() < 8 << 20, "{} bytes", bomb.len());
    std::fs::write(&archive, bomb).unwrap();
    let destination = dir.path().join("extracted");
    let error = safe_extract(&archive, &destination, None).unwrap_err();
    assert_eq!(error.message(), OVER_BUDGET);
    assert!(files_under(&destination).is_empty());
}

#[test]
fn pax_sparse_records_and_size_overrides_are_refused() {
    let install = Member::file(&format!("{ROOT}/install.sh"), b"#!/bin/sh\n").mode(0o755);
    for records in [
        vec![("GNU.sparse.realsize", "1099511627776")],
        vec![("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0")],
        vec![("size", "1099511627776")],
    ] {
        let (message, files) = refusal(
            "budget-pax",
            &[Member::dir(ROOT), pax_header(&records), install.clone()],
        );
        assert_eq!(message, OVER_BUDGET, "{records:?}");
        assert!(files.is_empty(), "{records:?}: {files:?}");
    }
    // A PAX size equal to the header's changes nothing and is accepted as
    // tarfile accepts it.
    let dir = TempDir::new("budget-pax-same");
    let archive = dir.path().join("release.tar.gz");
    write_tar_gz(
        &archive,
        &[
            Member::dir(ROOT),
            pax_header(&[("size", "10")]),
            install,
            Member::file(&format!("{ROOT}/VERSION"), b"1.0.7\n"),
        ],
    );
    let source = safe_extract(&archive, &dir.path().join("extracted"), None).unwrap();
    assert!(source.join("install.sh").is_file());
}

#[test]
fn an_extended_header_past_its_cap_is_refused_before_it_is_read() {
    // A GNU long name of 1 GiB and a PAX header of 1 GiB: only the header
    // block exists; reading the promised data would hold a gigabyte.
    for typeflag in [b'L', b'K', b'x', b'g'] {
        let huge = Member {
            declared_size: Some(1 << 30),
            ..Member::special("././@LongLink", typeflag)
        };
        let (message, files) = refusal("budget-long-name", &[Member::dir(ROOT), huge]);
        assert_eq!(message, OVER_BUDGET, "typeflag {}", typeflag as char);
        assert!(files.is_empty());
    }
    // At the cap itself a long name is read.
    let name = format!(
        "{ROOT}/{}",
        "n".repeat(MAX_EXTENDED_HEADER_BYTES as usize - ROOT.len() - 2)
    );
    let mut data = name.clone().into_bytes();
    data.push(0);
    assert_eq!(data.len() as u64, MAX_EXTENDED_HEADER_BYTES);
    let dir = TempDir::new("budget-long-name-cap");
    let archive = dir.path().join("release.tar.gz");
    write_tar_gz(
        &archive,
        &[
            Member::dir(ROOT),
            Member {
                data,
                ..Member::special("././@LongLink", b'L')
            },
            Member::special("placeholder", b'6'),
        ],
    );
    let error = safe_extract(&archive, &dir.path().join("extracted"), None).unwrap_err();
    assert!(
        error.message().starts_with(&format!("'{ROOT}/nnnn")),
        "the long name was applied: {:.80}",
        error.message()
    );
}

#[test]
fn more_members_than_the_budget_are_refused_even_when_all_are_the_same_directory() {
    let members: Vec<Member> = std::iter::repeat_with(|| Member::dir(ROOT))
        .take(MAX_MEMBERS + 1)
        .collect();
    let (message, files) = refusal("budget-members", &members);
    assert_eq!(message, OVER_BUDGET);
    assert!(files.is_empty());
}

#[test]
fn a_refusal_naming_a_huge_member_is_cut_to_a_readable_length() {
    // A fifo under a 20 000-character PAX path: the original's message repeats
    // the whole name.
    let long = format!("{ROOT}/{}", "a".repeat(20_000));
    let fifo = Member {
        pax_path: Some(long.clone().into_bytes()),
        ..Member::special("fifo", b'6')
    };
    let (message, _) = refusal("budget-message", &[Member::dir(ROOT), fifo]);
    assert!(
        message.starts_with(&format!("'{ROOT}/aaaa")),
        "{message:.80}"
    );
    assert!(message.ends_with("..."), "{message:.80}");
    assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 3);
}

//! Extraction safety as a property: whatever generated archive arrives,
//! `safe_extract` writes nothing outside its destination, leaves no link
//! inside it, stays within the byte budget, and only reports success with a
//! release directory that holds an `install.sh` file. Failing archives
//! shrink to a minimal member list. `PROPTEST_CASES` sets the case count.

use crate::archive_strategy;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use agents_tests::release_support::{write_tar_gz, TempDir};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use update_runner::release::{safe_extract, MAX_EXTRACTED_BYTES};

/// Every path under `root` with its metadata, links not followed.
fn walk(root: &Path) -> Vec<(std::path::PathBuf, std::fs::Metadata)> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let info = std::fs::symlink_metadata(entry.path()).unwrap();
            if info.is_dir() {
                pending.push(entry.path());
            }
            found.push((entry.path(), info));
        }
    }
    found
}

#[test]
fn extraction_never_escapes_links_or_overspends() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(128);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let sandbox = TempDir::new("archive-property");
    runner
        .run(&archive_strategy::arb_release(), |(members, npm)| {
            // A fresh box per case: the archive, the destination and
            // nothing else may ever appear in it.
            let case = sandbox.path().join("case");
            let _ = std::fs::remove_dir_all(&case);
            std::fs::create_dir(&case).unwrap();
            let archive = case.join("release.tar.gz");
            write_tar_gz(&archive, &members);
            let destination = case.join("box/extracted");
            std::fs::create_dir(case.join("box")).unwrap();
            let result = safe_extract(&archive, &destination, npm.then_some("1.0.8"));
            let mut written = 0u64;
            for (path, info) in walk(&case) {
                if path == archive || path == case.join("box") {
                    continue;
                }
                prop_assert!(
                    path.starts_with(&destination),
                    "{} written outside the destination",
                    path.display()
                );
                prop_assert!(!info.file_type().is_symlink(), "link {}", path.display());
                prop_assert!(
                    info.is_dir() || info.is_file(),
                    "special file {}",
                    path.display()
                );
                if info.is_file() {
                    prop_assert_eq!(info.nlink(), 1, "hard link {}", path.display());
                    prop_assert_eq!(info.mode() & 0o7022, 0, "mode of {}", path.display());
                    written += info.len();
                }
            }
            prop_assert!(written <= MAX_EXTRACTED_BYTES);
            if let Ok(source) = result {
                prop_assert!(source.starts_with(&destination));
                prop_assert!(std::fs::symlink_metadata(source.join("install.sh"))
                    .is_ok_and(|info| info.is_file()));
            }
            Ok(())
        })
        .unwrap();
}

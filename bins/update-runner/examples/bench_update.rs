//! The update runner's download-verify-extract path on its own, for
//! `scripts/bench-update.sh`: fetch a tagged release's manifest and
//! signature, verify them, stream the archive to disk while hashing it, and
//! extract it with the original's checks, exactly the calls `update-runner`
//! makes between "downloading" and "installing".
//!
//! Usage: bench_update RELEASE_BASE VERSION PUBLIC_KEY WORK_DIR
//! (RELEASE_BASE replaces `https://github.com/<repo>/releases`). Prints the
//! extracted release source directory.

use std::path::PathBuf;
use std::process::ExitCode;

use agents_common::Result;
use update_runner::release::{
    download_bytes, download_release_archive, safe_extract, ReleaseEndpoints, ReleaseTrust,
    MAX_METADATA_BYTES,
};

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [release_base, version, public_key, work_dir] = arguments.as_slice() else {
        eprintln!("usage: bench_update RELEASE_BASE VERSION PUBLIC_KEY WORK_DIR");
        return ExitCode::from(2);
    };
    match download_verify_extract(release_base, version, public_key, work_dir) {
        Ok(source) => {
            println!("{}", source.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{}", error.python_line());
            ExitCode::FAILURE
        }
    }
}

fn download_verify_extract(
    release_base: &str,
    version: &str,
    public_key: &str,
    work_dir: &str,
) -> Result<PathBuf> {
    let endpoints = ReleaseEndpoints {
        release_base: release_base.to_string(),
        ..ReleaseEndpoints::production()
    };
    let manifest_bytes = download_bytes(&endpoints.manifest_url(version), MAX_METADATA_BYTES)?;
    let signature = download_bytes(&endpoints.signature_url(version), MAX_METADATA_BYTES)?;
    let trust = ReleaseTrust::new(public_key, endpoints);
    let manifest =
        trust.verify_manifest(&manifest_bytes, &signature, Some(version), "stable", false)?;
    let work_dir = PathBuf::from(work_dir);
    let archive = download_release_archive(&manifest, &work_dir)?;
    safe_extract(&archive, &work_dir.join("extracted"), None)
}

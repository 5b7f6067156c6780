//! The release identities, link states and operation ids of upstream's
//! `activation_transaction` (`_release_identity`, `_release_matches`,
//! `_link_state`, the uuid5 operation ids), written for the stand-ins (the journal writer, the test
//! worker's startup hold) over serde_json, never with the helpers' own
//! readers of the activation journal.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde_json::{json, Value};
use sha1::{Digest, Sha1};

use crate::upstream_files::{uid, Failure, Outcome};
use crate::upstream_layout::hex_digest;

/// `_version_sha256(release)`: the digest of the release's VERSION, an
/// owned single-link file of 1 to 4096 bytes without group or other write.
pub fn version_sha256(release: &Path) -> Outcome<String> {
    let path = release.join("VERSION");
    let os = |err: std::io::Error| Failure::os(&err, &path);
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(os)?;
    let info = file.metadata().map_err(os)?;
    if !info.is_file()
        || info.uid() != uid()
        || info.nlink() != 1
        || info.mode() & 0o022 != 0
        || info.len() == 0
        || info.len() > 4096
    {
        return Err(Failure::permission("activation release version is unsafe"));
    }
    let mut data = Vec::new();
    file.take(4097).read_to_end(&mut data).map_err(os)?;
    Ok(hex_digest(&data))
}

/// An owned directory without group or other write, as an `lstat` sees it.
fn owned_safe_directory(path: &Path) -> Outcome<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(info) => {
            Ok((info.is_dir() && info.uid() == uid() && info.mode() & 0o022 == 0).then_some(info))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(Failure::os(&err, path)),
    }
}

/// `_release_identity(source, target)`: `{source, target, device, inode,
/// version_sha256}` of the owned release directory at `source`.
pub fn release_identity(source: &Path, target: &Path) -> Outcome<Value> {
    let Some(info) = owned_safe_directory(source)? else {
        return Err(Failure::permission("activation rollback release is unsafe"));
    };
    Ok(json!({
        "source": source.to_string_lossy(),
        "target": target.to_string_lossy(),
        "device": info.dev(),
        "inode": info.ino(),
        "version_sha256": version_sha256(source)?,
    }))
}

/// `_release_matches(path, release)`: the owned directory at `path` is the
/// identity's (device and inode) and its VERSION still hashes the same. A
/// missing path is false; an unsafe VERSION of a matching directory raises.
pub fn release_matches(path: &Path, release: &Value) -> Outcome<bool> {
    let Some(info) = owned_safe_directory(path)? else {
        return Ok(false);
    };
    if release["device"].as_u64() != Some(info.dev())
        || release["inode"].as_u64() != Some(info.ino())
    {
        return Ok(false);
    }
    Ok(release["version_sha256"] == version_sha256(path)?)
}

/// `_link_state(path, allow_directory)`: `{kind, target}` of a missing
/// path, a symlink (its raw target text) or, where allowed, an owned
/// directory; anything else is refused.
pub fn link_state(path: &Path, allow_directory: bool) -> Outcome<Value> {
    let info = match fs::symlink_metadata(path) {
        Ok(info) => info,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(json!({"kind": "missing", "target": ""}))
        }
        Err(err) => return Err(Failure::os(&err, path)),
    };
    if info.file_type().is_symlink() {
        let target = fs::read_link(path).map_err(|err| Failure::os(&err, path))?;
        return Ok(json!({"kind": "symlink", "target": target.to_string_lossy()}));
    }
    if allow_directory && info.is_dir() && info.uid() == uid() {
        return Ok(json!({"kind": "directory", "target": ""}));
    }
    Err(Failure::runtime(format!(
        "activation path is not supported: {}",
        path.display()
    )))
}

/// `NAMESPACE_URL` of Python's `uuid`.
const NAMESPACE_URL: [u8; 16] = [
    0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
];

/// `str(uuid.uuid5(uuid.NAMESPACE_URL, name))`: the operation ids of both
/// journals (`agentsdock-activation:<id>`, `agentsdock-execution:<id>`).
pub fn uuid5_url(name: &str) -> String {
    let digest = Sha1::new()
        .chain_update(NAMESPACE_URL)
        .chain_update(name)
        .finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("SHA-1 has 20 bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x50;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    hyphenated(&hex)
}

/// `str(uuid.UUID(hex))` of 32 lowercase hex digits: the 8-4-4-4-12 form
/// (a managed update's operation id is its update id so written).
pub fn hyphenated(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::uuid5_url;

    /// The operation ids recorded from CPython (the execution-install notes).
    #[test]
    fn uuid5_matches_python() {
        assert_eq!(
            uuid5_url("agentsdock-execution:execution-000000000000000000000000"),
            "85efcaaf-5f93-5352-b00d-95a2551e6a7c"
        );
        assert_eq!(
            uuid5_url("agentsdock-execution:execution-0123456789abcdef01234567"),
            "b5914c0d-4b01-5e86-bcd8-1e9626e330e6"
        );
    }
}
